//! `lhc demo`: the README's first command. At this stage it imports the bundled example
//! outage log into a fresh embedded log and prints it; the engine's replay comes next.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use lhc_log::{EmbeddedLog, EmbeddedOptions, FsyncPolicy};

/// The example: a two-connector site through a 30-minute cloud outage.
const EXAMPLE: &str = include_str!("../../../docs/examples/site-outage.jsonl");

/// Options of `lhc demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Working directory; its `log/` is replaced on each run.
    #[arg(long, default_value = "lhc-demo")]
    dir: PathBuf,
}

/// Runs the demo.
pub fn run(args: DemoArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let log_dir = args.dir.join("log");
    remove_previous_log(&log_dir)?;
    let options = EmbeddedOptions {
        fsync: FsyncPolicy::Never,
        ..EmbeddedOptions::default()
    };
    let log = EmbeddedLog::open(&log_dir, options)
        .with_context(|| format!("creating {}", log_dir.display()))?;
    let lines: Vec<&[u8]> = EXAMPLE.lines().map(str::as_bytes).collect();
    let offsets = lhc_log::validate::append_validated(&log, &lines)?;
    if quiet {
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "imported {} records into {} (offsets 0..{})",
        offsets.len(),
        log_dir.display(),
        offsets.len()
    );
    println!(
        "replaying them through the engine: every state change, election, registration and sync\n"
    );
    let mut source =
        lhc_replay::Source::from_log(Box::new(EmbeddedLog::open_read_only(&log_dir)?))?;
    let mut engine = lhc_engine::Engine::new();
    let mut by_kind: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let summary = lhc_replay::replay(
        &mut source,
        &mut engine,
        &lhc_replay::ReplayOptions::default(),
        |_, output| -> anyhow::Result<()> {
            *by_kind
                .entry(crate::replaycmd::table_fields(output).2)
                .or_default() += 1;
            println!("{}", crate::replaycmd::table_line(output));
            Ok(())
        },
    )?;
    println!(
        "\n{} records -> {} outputs:",
        summary.records, summary.outputs
    );
    for (kind, n) in &by_kind {
        println!("  {kind:<14} {n:>5}");
    }
    println!("state digest {}", engine.digest());
    println!(
        "\nnext: `lhc replay {} --format table`, `lhc log stats --log {}`",
        log_dir.display(),
        log_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Refuses to delete anything that is not an lhc log directory.
fn remove_previous_log(dir: &Path) -> anyhow::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if !(name == "LOCK" || name.ends_with(".log") || name.ends_with(".idx")) {
            bail!(
                "{} holds {name}, which is not part of an lhc log; not replacing it",
                dir.display()
            );
        }
    }
    std::fs::remove_dir_all(dir)
        .with_context(|| format!("removing the previous demo log {}", dir.display()))
}
