//! `lhc`: the command line of the lhc engine.
//!
//! This binary is the outermost IO edge: it parses arguments, opens logs, prints results.
//! Errors become `anyhow` messages here and nowhere deeper.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

// The commands print their results with these instead of std's: a standard output that
// cannot be written (a full disk, `> /dev/full`) ends the command with an error that says
// so, where std's macros panic. (A reader that went away ends it quietly: see SIGPIPE in
// `main`.) Defined before the modules, so they shadow std's in all of them.
macro_rules! println {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!($($arg)*))
    };
}

// Diagnostics on stderr: one that cannot be written (`2> /dev/full`) is dropped, since
// there is nowhere left to say so; std's macros panic (status 101) instead.
macro_rules! eprintln {
    ($($arg:tt)*) => {
        $crate::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes to standard error, ignoring a failure (see `eprintln!` above).
fn write_stderr(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Writes to standard output; on failure, says why on stderr and exits with status 2.
fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(error) = std::io::stdout().lock().write_fmt(args) {
        eprintln!("error: writing the results to standard output: {error}");
        std::process::exit(2);
    }
}

mod args;
mod bench;
mod commands;
mod progress;
mod render;
mod time;

use commands::{
    connector, demo, forensics, kafka, lint, log, query, replay, report, simulate, whatif,
};

/// Citrix Local Host Cache, re-implemented as an event-sourced, log-driven engine.
///
/// Every input (config changes, health checks, heartbeats, launches...) is a record in an
/// append-only site log; connectors fold the log into their LHC database, so any outage can
/// be replayed exactly. Logs live in an embedded directory (default `./lhc-data/log`) or in
/// Kafka (`--kafka BROKERS --site S`).
#[derive(Parser)]
#[command(
    name = "lhc",
    version,
    long_version = long_version(),
    propagate_version = true,
    max_term_width = 100,
    after_help = "Exit status: 0 ok; 1 findings (lint errors, log check damage, schema --check \
                  out of date, replay --verify mismatch, kafka init topic settings that delete \
                  records); 2 error (whatif --verify refuses a mismatch as an error)."
)]
struct Cli {
    /// Print no progress bars or summaries (for scripts); errors still go to stderr.
    #[arg(long, short, global = true)]
    quiet: bool,
    /// More diagnostics on stderr (-v info, -vv debug). RUST_LOG overrides.
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Diagnostics as text lines, or as JSON objects for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How diagnostics are written on stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    /// One text line each.
    Text,
    /// One JSON object each.
    Json,
}

#[derive(Subcommand)]
// Parsed once per process; boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Simulate a site through an outage into ./lhc-demo/log, replay it, print what
    /// happened and write the HTML reports (--example: the small bundled example).
    Demo(demo::DemoArgs),
    /// The connector node: run it (HTTP API, observers, Kafka or embedded log), or fold the
    /// log into its RocksDB cache snapshot, exactly once.
    #[command(subcommand)]
    Connector(connector::ConnectorCommand),
    /// Work with a site log: import, export, cat, append, stats, check.
    #[command(subcommand)]
    Log(log::LogCommand),
    /// Set up a Kafka cluster for lhc: topics with the settings the design needs.
    #[command(subcommand)]
    Kafka(kafka::KafkaCommand),
    /// Fold a log through the engine and print every output (events, decisions,
    /// registrations, quarantine), optionally with state digests.
    Replay(replay::ReplayArgs),
    /// Time travel: the site as it was at an instant (connectors, registrations, sessions,
    /// a machine's history, launches, LHC data), from a replay up to it.
    Query(query::QueryArgs),
    /// Reports computed by replaying a log (outage episodes; JSON, summary, HTML).
    #[command(subcommand)]
    Report(report::ReportCommand),
    /// What if: replay the log as it happened and with changes (a parameter, a site or
    /// group setting, added or dropped records, the bad config changes removed), and show
    /// the decisions, episodes, elections and failed imports that would have differed.
    Whatif(whatif::WhatIfArgs),
    /// Forensics computed by replaying a log (config sync failures: 505).
    #[command(subcommand)]
    Forensics(forensics::ForensicsCommand),
    /// Check a log's configuration and behaviour against the seeds' LHC advice (StoreFront
    /// traffic, forced outage on whole zones, pooled groups, zone sizes, flapping, probes,
    /// tag restrictions); exit 1 on errors.
    Lint(lint::LintArgs),
    /// Generate a realistic site log from a seed (zones, connectors, VDAs, users, logons,
    /// and scenarios: outages, flapping, partitions, stops, forced outage, bad config).
    Simulate(simulate::SimulateArgs),
    /// Measure throughput next to baselines from the same run (ratios, not wall-clock claims).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Print a shell completion script: `lhc completions bash > /etc/bash_completion.d/lhc`
    /// (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `lhc man > lhc.1 && man ./lhc.1`.
    Man,
    /// Write the JSON Schemas of input records, output records and config objects.
    Schema {
        /// Directory to write into (created if missing).
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
        /// Only check that the directory is up to date; exit 1 if not.
        #[arg(long)]
        check: bool,
    },
}

// mimalloc: replay decodes records on one thread and frees them on another, which
// glibc's per-thread arenas handle slowly; and the engine allocates many small strings.
// Built without transparent huge pages (feature `no_thp`, where the kernel leaves them to
// `madvise`): a 2 MB page partly used counts whole. That saves the 12-hour replay 15 MB of
// peak RSS and costs it about 10 % of its speed (TLB misses); docs/benchmarks.md has the
// figures and why the memory bar won.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    /// mimalloc's option setter (linked in by the `mimalloc` crate; its `extended`
    /// bindings would add a dependency for this one call).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (v2 and v3 alike).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// Has mimalloc give freed memory back to the system after 1 ms instead of 10, unless
/// `MIMALLOC_PURGE_DELAY` says otherwise. A replay frees on its applying thread what its
/// decoding thread allocated; held 10 ms, those pages raised the 12-hour replay's peak RSS
/// by 6 to 11 MB (149-155 MB against 144-146 MB, issue 20's bar being 150) for no
/// measurable speed (docs/benchmarks.md). A query from a checkpoint is the exception: a
/// second's burst of rebuilding and replaying, whose freed pages were given back and
/// faulted in again (0.59-0.62 s against 0.56 s with them kept for a second).
///
/// Called twice: with `None` first thing, before the arguments are parsed (set once the
/// main thread's heap existed, 1 ms left the replay's peak RSS at 144.7-152 MB instead of
/// 143.5-144), then with the command, for the query's exception.
fn tune_allocator(command: Option<&Command>) {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        let delay_ms = match command {
            Some(Command::Query(_)) => 1000,
            Some(_) => return,
            None => 1,
        };
        // SAFETY: sets an integer option of the allocator this binary links; mimalloc
        // documents options as settable at any time.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, delay_ms) };
    }
}

fn main() -> ExitCode {
    tune_allocator(None);
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_or_help(e),
    };
    tune_allocator(Some(&cli.command));
    // A running node logs what an operator reads (state changes, elections, imports) at
    // info; the one-shot commands keep to warnings.
    let node = matches!(
        cli.command,
        Command::Connector(connector::ConnectorCommand::Run { .. })
    );
    init_tracing(cli.verbose, cli.quiet, node, cli.log_format);
    let quiet = cli.quiet;
    // Printing commands end quietly when their reader goes away (`lhc log cat | head`).
    restore_default_sigpipe();
    ignore_file_size_signal();
    let result = match cli.command {
        Command::Demo(args) => demo::run(args, quiet),
        Command::Log(command) => log::run(command, quiet),
        Command::Kafka(command) => kafka::run(command, quiet),
        Command::Connector(command) => connector::run(command, quiet),
        Command::Schema { out, check } => schema(out, check, quiet),
        Command::Bench(command) => bench::run(command),
        Command::Simulate(args) => simulate::run(args, quiet),
        Command::Query(args) => query::run(args, quiet),
        Command::Report(command) => report::run(command, quiet),
        Command::Whatif(args) => whatif::run(args, quiet),
        Command::Forensics(command) => forensics::run(command, quiet),
        Command::Lint(args) => lint::run(args, quiet),
        Command::Replay(args) => replay::run(args, quiet),
        Command::Completions { shell } => {
            // Into a buffer first: clap_complete panics when its writer fails.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "lhc", &mut script);
            std::io::Write::write_all(&mut std::io::stdout().lock(), &script)
                .map(|()| ExitCode::SUCCESS)
                .context("writing the completion script")
        }
        Command::Man => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map(|()| ExitCode::SUCCESS)
            .context("writing the man page"),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", error_line(&error));
            // 1 is for findings (lint, check); an error is 2, as clap's usage errors are.
            ExitCode::from(2)
        }
    }
}

/// What clap has to say instead of a command: help, the version, or a usage error. clap's
/// own `exit` ignores a failed write, so `lhc --help > /dev/full` said nothing and exited
/// 0; here a failed write is an error (exit 2). A reader gone away (`lhc --help | head -1`)
/// is not: the exit status stays clap's, as before.
fn usage_or_help(e: clap::Error) -> ExitCode {
    let code = ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
    match e.print() {
        Ok(()) => code,
        Err(io) if io.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(io) => {
            let what = match e.kind() {
                clap::error::ErrorKind::DisplayVersion => "the version to standard output",
                clap::error::ErrorKind::DisplayHelp => "the help to standard output",
                _ => "the usage error to standard error",
            };
            eprintln!("error: writing {what}: {io}");
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, each said once: many errors already end with
/// their cause's words (a path's OS error, a log's reason), which `{:#}` would repeat.
fn error_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// This build, as checkpoints name the engine that wrote them: the version and the commit.
pub fn build_id() -> String {
    format!(
        "{} (commit {})",
        env!("CARGO_PKG_VERSION"),
        env!("LHC_COMMIT")
    )
}

/// `lhc --version`: the version, the commit built, and the C libraries inside (what a bug
/// report needs).
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{} (commit {})\nlibrdkafka {} ({})\nRocksDB {}",
            env!("CARGO_PKG_VERSION"),
            env!("LHC_COMMIT"),
            lhc_log::kafka::library_version(),
            lhc_log::kafka::library_features(),
            env!("LHC_ROCKSDB_VERSION"),
        )
    })
}

/// Rust ignores SIGPIPE, which turns `| head` into a panic on the next print; the default
/// action ends the process silently, as every Unix filter does.
fn restore_default_sigpipe() {
    // SAFETY: setting a signal's disposition to its default has no preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// A file-size limit (`ulimit -f`) kills a process with SIGXFSZ by default, silently and
/// mid-write; ignored, the write fails with EFBIG instead, which lhc reports like a full
/// disk (an error naming the file, a node that says DOWN), never a record half kept.
fn ignore_file_size_signal() {
    // SAFETY: ignoring a signal has no preconditions.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Diagnostics on stderr: warnings by default (librdkafka's retries, one line each),
/// errors only with -q, more with -v; colour only on a terminal and never with NO_COLOR.
fn init_tracing(verbose: u8, quiet: bool, node: bool, format: LogFormat) {
    use std::io::IsTerminal;
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) if node => "info",
        (false, 0) => "warn",
        (false, 1) => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    match format {
        LogFormat::Text => builder.with_ansi(colour).init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn schema(out: PathBuf, check: bool, quiet: bool) -> anyhow::Result<ExitCode> {
    let mut stale = Vec::new();
    for file in lhc_engine::schema::generate() {
        let path = out.join(&file.path);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(file.text.as_str()) {
                stale.push(path);
            }
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &file.text).with_context(|| format!("writing {}", path.display()))?;
        if !quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    if stale.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for path in &stale {
        eprintln!("out of date: {}", path.display());
    }
    eprintln!("regenerate with `lhc schema --out {}`", out.display());
    Ok(ExitCode::FAILURE)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap checks a command line's definition only in debug builds; the tests run in
    /// release, so ask for the check.
    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
