//! `lhc replay`: fold a log through the engine and print every output, with state
//! digests and digest-chain verification.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use lhc_engine::engine::snake;
use lhc_engine::output::{EventSource, Output, Reason};
use lhc_engine::Engine;
use lhc_replay::{replay_also, ChainLink, ReplayOptions, ReplaySummary};

use crate::args::{FleetArgs, SourceArgs};

/// How outputs are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON object per line (the output records of SPEC §3).
    Jsonl,
    /// One aligned line per output: time, connector, source/event, summary.
    Table,
}

/// Options of `lhc replay`.
#[derive(clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    source: SourceArgs,
    #[command(flatten)]
    fleet: FleetArgs,
    /// Output format (with --all-sites: one summary per site, then the fleet's).
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    format: Format,
    /// Write outputs to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print no outputs (with --digest, --digest-every or --verify).
    #[arg(long)]
    no_outputs: bool,
    /// Print the final state digest on stderr: `digest HEX after offset N`.
    #[arg(long)]
    digest: bool,
    /// Take a state digest every N records (and after the last) and write the chain to --chain.
    #[arg(long, value_name = "N", requires = "chain", value_parser = clap::value_parser!(u64).range(1..))]
    digest_every: Option<u64>,
    /// Where --digest-every writes the chain (JSONL: offset, digest).
    #[arg(long, value_name = "FILE", requires = "digest_every")]
    chain: Option<PathBuf>,
    /// Replay and compare with a chain written by --digest-every; names the first offset
    /// whose digest differs and exits 1 there.
    #[arg(long, value_name = "CHAIN")]
    verify: Option<PathBuf>,
    /// Also write a checkpoint of the state after every N records into the embedded log's
    /// `checkpoints/` folder as the replay passes them (what `lhc log checkpoint --every N`
    /// writes, in the same pass), so later `lhc query --at` start near their instant.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: Option<u64>,
}

/// Runs `lhc replay`.
pub fn run(args: ReplayArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    if args.fleet.all_sites {
        return fleet(args, quiet);
    }
    // Checkpoints are kept beside an embedded log, of which the replay is from the start.
    let mut taker = match args.checkpoint_every {
        None => None,
        Some(every) => {
            let Some(dir) = args.source.embedded_dir() else {
                bail!(
                    "--checkpoint-every needs an embedded log directory: checkpoints are kept \
                     beside it (a JSONL file can be imported with `lhc log import FILE --log \
                     DIR`; a Kafka topic has no folder of its own)"
                );
            };
            let taker = lhc_replay::checkpoint::Taker::new(&dir, every, &crate::build_id())
                .with_context(|| format!("checkpointing {}", dir.display()))?;
            Some(taker)
        }
    };
    let (source, bar) = args.source.open_with_progress("replaying", quiet)?;
    // Decoding on more threads changes when records are decoded, never which or in what
    // order they are applied.
    let mut source = source.with_decoders(args.fleet.decoders());
    let mut options = ReplayOptions {
        digest_every: args.digest_every,
        digest_at: None,
    };
    if let Some(path) = &args.verify {
        options.digest_at = Some(read_chain(path)?);
    }
    // What the chain covers: its number of links and its last offset, and the spacing of
    // its last two (to tell a chain that stops early from one that simply ends between
    // two links).
    let chain_cover = options.digest_at.as_ref().map(|chain| {
        let mut last = chain.keys().rev();
        let end = *last.next().expect("read_chain refuses an empty chain");
        let spacing = last.next().map_or(end + 1, |before| end - before);
        (chain.len(), end, spacing)
    });
    if let Some(input) = args.source.input_path() {
        for path in [&args.out, &args.chain].into_iter().flatten() {
            crate::args::refuse_overwrite(path, &[&input])?;
        }
    }
    // The chain file is created before the replay, so a path that cannot be written is
    // said at once, not after a long replay.
    let mut chain_file = match (&args.chain, args.digest_every) {
        (Some(path), Some(_)) => Some((
            path,
            File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        _ => None,
    };
    let mut engine = Engine::new();
    let sink: Box<dyn Write> = match (&args.out, args.no_outputs) {
        (_, true) => Box::new(std::io::sink()),
        (Some(path), false) => {
            Box::new(File::create(path).with_context(|| format!("creating {}", path.display()))?)
        }
        (None, false) => Box::new(std::io::stdout()),
    };
    let mut sink = BufWriter::with_capacity(1 << 20, sink);
    // Named in write errors: a full disk says where it was writing.
    let target = args
        .out
        .as_ref()
        .map_or("standard output".to_string(), |p| p.display().to_string());
    let writing = || format!("writing the outputs to {target}");
    let format = args.format;
    let print = !args.no_outputs;
    let mut summary = ReplaySummary::default();
    let replayed = replay_also(
        &mut source,
        &mut engine,
        &options,
        |_, output| -> anyhow::Result<()> {
            if !print {
                return Ok(()); // nothing to format: --no-outputs
            }
            match format {
                Format::Jsonl => {
                    serde_json::to_writer(&mut sink, output).with_context(writing)?;
                    sink.write_all(b"\n").with_context(writing)?;
                }
                Format::Table => writeln!(sink, "{}", table_line(output)).with_context(writing)?,
            }
            Ok(())
        },
        &mut summary,
        &mut taker,
    );
    // A replay stopped by an error still leaves the digests it took, and says so.
    if let Some((path, file)) = chain_file.take() {
        let written = write_chain(path, file, &summary.chain);
        if let Err(error) = replayed {
            let kept = match (&written, summary.chain.last()) {
                (Ok(()), Some(last)) => format!(
                    "{} holds the {} digest(s) taken until then, the last after offset {}",
                    path.display(),
                    summary.chain.len(),
                    last.offset
                ),
                (Ok(()), None) => format!(
                    "no digest was taken until then ({} is empty)",
                    path.display()
                ),
                (Err(e), _) => format!("its chain could not be written either: {e:#}"),
            };
            return Err(error.context(format!(
                "the replay stopped after {} record(s) ({kept})",
                summary.records
            )));
        }
        written?;
    }
    replayed?;
    sink.flush().with_context(writing)?;
    bar.finish_and_clear();
    if args.digest {
        let after = summary
            .last_offset
            .map_or("no record".to_string(), |o| format!("offset {o}"));
        eprintln!("digest {} after {after}", engine.digest());
    }
    // The process exits next: freeing a 40,000-VDA state entry by entry took 5 % of a
    // whole replay, and the OS reclaims it at once.
    std::mem::forget(engine);
    if !quiet {
        eprintln!(
            "replayed {} record(s) from {}: {} output(s)",
            summary.records,
            source.describe(),
            summary.outputs
        );
    }
    if let (Some(taker), Some(every), false) = (&taker, args.checkpoint_every, quiet) {
        let dir = args.source.embedded_dir().unwrap_or_default();
        eprintln!(
            "wrote {} checkpoint(s), one every {every} records, in {}",
            taker.written().len(),
            dir.join(lhc_replay::checkpoint::DIR).display()
        );
    }
    if args.verify.is_some() {
        match &summary.divergence {
            None => {
                let (links, end, spacing) = chain_cover.expect("set with --verify");
                if !quiet {
                    eprintln!(
                        "verified: all {links} digest(s) of the chain match, the last after \
                         offset {end}"
                    );
                }
                let beyond = summary
                    .last_offset
                    .map_or(0, |last| last.saturating_sub(end));
                if beyond >= spacing {
                    eprintln!(
                        "warning: the chain ends at offset {end} but the log goes on to offset \
                         {}: the last {beyond} record(s) were not verified (was the chain \
                         written from a shorter log?)",
                        summary.last_offset.unwrap_or(end)
                    );
                }
            }
            Some(d) => {
                let since = d
                    .last_agreeing
                    .map_or("the start".to_string(), |o| format!("offset {o}"));
                if d.actual.is_empty() {
                    eprintln!(
                        "diverged: the chain has a digest at offset {} but the log ends before it",
                        d.offset
                    );
                } else {
                    eprintln!(
                        "diverged at offset {}: expected digest {}, replay gives {} (last agreement at {since})",
                        d.offset, d.expected, d.actual
                    );
                }
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the links of a digest chain to `file` (created at `path`), one JSON line each.
fn write_chain(path: &std::path::Path, file: File, chain: &[ChainLink]) -> anyhow::Result<()> {
    let mut file = BufWriter::new(file);
    let writing = || format!("writing the chain to {}", path.display());
    for link in chain {
        serde_json::to_writer(&mut file, link).with_context(writing)?;
        file.write_all(b"\n").with_context(writing)?;
    }
    file.flush().with_context(writing)
}

/// Reads a digest chain (JSONL of offset and digest) written by `--digest-every`.
pub fn read_chain(path: &PathBuf) -> anyhow::Result<BTreeMap<u64, String>> {
    let file = File::open(path).with_context(|| format!("cannot open chain {}", path.display()))?;
    let mut chain = BTreeMap::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let link: ChainLink = serde_json::from_str(&line).with_context(|| {
            format!(
                "{} line {}: expected {{\"offset\":N,\"digest\":\"HEX\"}}",
                path.display(),
                i + 1
            )
        })?;
        chain.insert(link.offset, link.digest);
    }
    if chain.is_empty() {
        bail!(
            "{} holds no digest: nothing to verify (write a chain with --digest-every N \
             --chain FILE)",
            path.display()
        );
    }
    Ok(chain)
}

/// One fixed-column line: time, connector, source/event, summary.
pub fn table_line(output: &Output) -> String {
    let (ts, connector, what, summary) = table_fields(output);
    format!("{ts:<24} {connector:<26} {what:<13} {summary}")
}

/// The columns of a table line: time, connector, source/event ("RBP 3003", "registration"...),
/// summary.
pub fn table_fields(output: &Output) -> (String, String, String, String) {
    match output {
        Output::Event(e) => {
            let source = match e.source {
                EventSource::ConfigSyncService => "CSS",
                EventSource::HighAvailabilityService => "HA",
                EventSource::RemoteBrokerProvider => "RBP",
            };
            (
                e.ts.to_string(),
                e.connector.clone(),
                format!("{source} {}", e.event_id),
                e.message.clone(),
            )
        }
        Output::LaunchDecision(d) => {
            let what = match (&d.machine, d.reason) {
                (Some(m), _) => {
                    let session = d
                        .session
                        .map_or(String::new(), |s| format!(" ({})", snake(&s)));
                    let assigned = if d.new_assignment == Some(true) {
                        ", newly assigned"
                    } else {
                        ""
                    };
                    format!("brokered on {m}{session}{assigned}")
                }
                (None, Some(r)) => format!("rejected: {}", snake(&r)),
                (None, None) => "rejected".to_string(),
            };
            let via = match d.via {
                lhc_engine::output::Via::Cloud => "cloud",
                lhc_engine::output::Via::Lhc => "lhc",
            };
            (
                d.ts.to_string(),
                d.connector.clone(),
                format!("launch/{via}"),
                format!("{} {what}", d.request),
            )
        }
        Output::Registration(r) => {
            let verb = match (r.accepted, r.reason) {
                (true, _) => "registered".to_string(),
                (false, Some(Reason::CloudUnreachable)) => {
                    "left the cloud: its zone no longer reaches it (cloud_unreachable)".to_string()
                }
                (false, Some(reason)) => format!("refused or dropped: {}", snake(&reason)),
                (false, None) => {
                    "dropped: LHC mode ended or it moved to another registrar".to_string()
                }
            };
            (
                r.ts.to_string(),
                r.connector.clone(),
                "registration".to_string(),
                format!("{} {verb}", r.machine),
            )
        }
        Output::MachineMaintenance(m) => (
            m.ts.to_string(),
            m.connector.clone(),
            "maintenance".to_string(),
            format!(
                "{} {}: {}",
                m.machine,
                if m.on { "on" } else { "off" },
                snake(&m.reason)
            ),
        ),
        Output::Quarantine(q) => (
            String::new(),
            String::new(),
            "quarantine".to_string(),
            format!("offset {}: {}", q.offset, q.error),
        ),
    }
}

/// `lhc replay --kafka B --all-sites`: every site folded on a thread of its own; one
/// summary per site (records, digest, LHC mode at the end, 505s, failed launches), then the
/// fleet's totals.
fn fleet(args: ReplayArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let per_site = [
        (args.out.is_some(), "--out"),
        (args.verify.is_some(), "--verify"),
        (args.digest_every.is_some(), "--digest-every"),
        (args.checkpoint_every.is_some(), "--checkpoint-every"),
    ];
    if let Some((_, flag)) = per_site.iter().find(|(given, _)| *given) {
        bail!("{flag} is per site: give --site NAME instead of --all-sites");
    }
    let sites = args
        .source
        .replay_sites_with(&args.fleet, quiet, |site, source| {
            lhc_replay::fleet::summarize(site, source, |_| {})
        })?;
    let summaries: Vec<&lhc_replay::fleet::SiteSummary> = sites.iter().map(|(_, s)| s).collect();
    let in_lhc = summaries.iter().filter(|s| !s.in_lhc.is_empty()).count();
    let total = |f: fn(&lhc_replay::fleet::SiteSummary) -> u64| -> u64 {
        summaries.iter().map(|s| f(s)).sum()
    };
    let fleet = serde_json::json!({
        "fleet": {
            "sites": summaries.len(),
            "sites_in_lhc": in_lhc,
            "records": total(|s| s.records),
            "quarantined": total(|s| s.quarantined),
            "failed_imports": total(|s| s.failed_imports),
            "launches": total(|s| s.launches),
            "failed_launches": total(|s| s.failed_launches),
        }
    });
    let mut out = std::io::stdout().lock();
    match args.format {
        Format::Jsonl => {
            for s in &summaries {
                serde_json::to_writer(&mut out, s)?;
                writeln!(out)?;
            }
            serde_json::to_writer(&mut out, &fleet)?;
            writeln!(out)?;
        }
        Format::Table => {
            let width = summaries
                .iter()
                .map(|s| s.site.len())
                .max()
                .unwrap_or(4)
                .max(4);
            writeln!(
                out,
                "{:width$}  {:>10}  {:>6}  {:>8}  {:>10}  {:>7}  {:<16}  in LHC mode",
                "site", "records", "505s", "launches", "failed", "quar.", "digest"
            )?;
            for s in &summaries {
                writeln!(
                    out,
                    "{:width$}  {:>10}  {:>6}  {:>8}  {:>10}  {:>7}  {:<16}  {}",
                    s.site,
                    s.records,
                    s.failed_imports,
                    s.launches,
                    s.failed_launches,
                    s.quarantined,
                    &s.digest[..16],
                    if s.in_lhc.is_empty() {
                        "no".to_string()
                    } else {
                        s.in_lhc.join(", ")
                    }
                )?;
            }
            writeln!(
                out,
                "fleet: {} site(s), {in_lhc} in LHC mode at the end, {} failed import(s), {} \
                 failed launch(es) of {}",
                summaries.len(),
                total(|s| s.failed_imports),
                total(|s| s.failed_launches),
                total(|s| s.launches)
            )?;
        }
    }
    if args.digest {
        for s in &summaries {
            eprintln!("digest {} of site {}", s.digest, s.site);
        }
    }
    Ok(ExitCode::SUCCESS)
}
