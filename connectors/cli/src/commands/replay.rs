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
    /// whose digest differs and exits 1 (after replaying the rest).
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
    let (source, bar) = args.source.open_with_progress("replaying", quiet)?;
    // Decoding on more threads changes when records are decoded, never which or in what
    // order they are applied.
    let mut source = source.with_decoders(args.fleet.decoders());
    let mut options = ReplayOptions {
        digest_every: args.digest_every,
        digest_at: None,
    };
    // Nothing is written over what this replay reads or writes elsewhere: the chain
    // --verify reads, the chain being written (under its three names), the outputs.
    let chain_names: Vec<PathBuf> = args
        .chain
        .iter()
        .flat_map(|c| {
            let target = chain_target(c);
            [
                c.clone(),
                suffixed(&target, ".tmp"),
                suffixed(&target, ".partial"),
                target,
            ]
        })
        .collect();
    if let (Some(verify), Some(chain)) = (&args.verify, &args.chain) {
        if chain_names
            .iter()
            .any(|name| same_file_or_name(name, verify))
        {
            bail!(
                "--chain {} would be written over the chain --verify reads ({}): name another \
                 file, so the chain verified against is kept",
                chain.display(),
                verify.display()
            );
        }
    }
    if let Some(out) = &args.out {
        if chain_names
            .iter()
            .chain(&args.verify)
            .any(|name| same_file_or_name(out, name))
        {
            bail!(
                "--out {} is where a chain is read or written: name another file",
                out.display()
            );
        }
    }
    if let Some(path) = &args.verify {
        options.digest_at = Some(read_chain(path)?);
    }
    // What the chain covers: its number of links and its last offset (a chain `--digest-every`
    // writes ends at its log's last record, so records after it are records it never saw).
    let chain_cover = options.digest_at.as_ref().map(|chain| {
        (
            chain.len(),
            *chain
                .keys()
                .next_back()
                .expect("read_chain refuses an empty chain"),
        )
    });
    if let Some(input) = args.source.input_path() {
        for path in [&args.out, &args.chain].into_iter().flatten() {
            crate::args::refuse_overwrite(path, &[&input])?;
        }
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
    let mut engine = Engine::new();
    let sink: Box<dyn Write> = match (&args.out, args.no_outputs) {
        (_, true) => Box::new(std::io::sink()),
        (Some(path), false) => {
            Box::new(File::create(path).with_context(|| format!("creating {}", path.display()))?)
        }
        (None, false) => Box::new(std::io::stdout()),
    };
    // The chain goes to a file beside its name, created before the replay (a path that
    // cannot be written is said at once, not after a long replay), written as it grows and
    // renamed over its name only when the replay succeeds: an existing chain is never
    // emptied or cut by a failed one (see `ChainFile`).
    let mut chain_file = match (&args.chain, args.digest_every) {
        (Some(path), Some(_)) => Some(ChainFile::create(path)?),
        _ => None,
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
        |link| chain_file.as_mut().map_or(Ok(()), |file| file.push(link)),
        &mut summary,
        &mut taker,
    );
    // A replay stopped by an error still leaves what it made: the digests it took, in a
    // file of their own, and the checkpoints it wrote; the error says where they are.
    let chain = chain_file.take().map(|file| file.finish(replayed.is_ok()));
    if let Err(error) = replayed {
        let mut kept = Vec::new();
        match (chain, summary.chain.last()) {
            (Some(Ok(path)), Some(last)) => kept.push(format!(
                "{} holds the {} digest(s) taken until then, the last after offset {}",
                path.display(),
                summary.chain.len(),
                last.offset
            )),
            (Some(Ok(path)), None) => kept.push(format!("{} holds no digest", path.display())),
            (Some(Err(e)), _) => kept.push(format!("its chain could not be written: {e:#}")),
            (None, _) => {}
        }
        if let Some(d) = &summary.divergence {
            kept.push(format!(
                "before it, the replay had already diverged from the chain --verify reads at \
                 offset {}",
                d.offset
            ));
        }
        if let Some(taker) = &taker {
            kept.push(format!(
                "{} checkpoint(s) written until then",
                taker.written().len()
            ));
        }
        let kept = if kept.is_empty() {
            String::new()
        } else {
            format!(" ({})", kept.join("; "))
        };
        return Err(error.context(format!(
            "the replay stopped after {} record(s){kept}",
            summary.records
        )));
    }
    if let Some(chain) = chain {
        chain?;
    }
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
            "wrote {} checkpoint(s) and kept {} already there, one every {every} records, in {}",
            taker.written().len(),
            taker.kept(),
            dir.join(lhc_replay::checkpoint::DIR).display()
        );
    }
    if args.verify.is_some() {
        match &summary.divergence {
            None => {
                let (links, end) = chain_cover.expect("set with --verify");
                if !quiet {
                    eprintln!(
                        "verified: all {links} digest(s) of the chain match, the last after \
                         offset {end}"
                    );
                }
                let beyond = summary
                    .last_offset
                    .map_or(0, |last| last.saturating_sub(end));
                if beyond > 0 {
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

/// Where `--chain` goes while the replay runs: `FILE.tmp`, written link by link as the
/// digests are taken (a killed replay leaves them there), synced and renamed to `FILE` when
/// the replay succeeds (a `FILE.partial` of an earlier run is then removed) and to
/// `FILE.partial` when it stops on an error. A symbolic link to a regular file is followed
/// (the files go beside its target); a path that exists and is not a regular file (a
/// device, a pipe, a dangling link) is written in place: renaming over it would replace it.
struct ChainFile {
    /// The chain's name (a symbolic link's target).
    path: PathBuf,
    /// The temporary name, `None` when writing in place.
    temporary: Option<PathBuf>,
    file: File,
    /// Bytes of whole links written: a failed write is cut back to it, so the file never
    /// ends in half a line.
    whole: u64,
}

impl ChainFile {
    /// Creates the file (refusing a directory as the chain's path).
    fn create(path: &std::path::Path) -> anyhow::Result<ChainFile> {
        if path.is_dir() {
            bail!("--chain {} is a directory: name a file", path.display());
        }
        let path = chain_target(path);
        let in_place = path
            .symlink_metadata()
            .is_ok_and(|meta| !meta.file_type().is_file());
        let temporary = (!in_place).then(|| suffixed(&path, ".tmp"));
        let file = match &temporary {
            Some(temporary) => {
                // A leftover of a killed run goes first, and the file is made afresh: a
                // link left under that name is never followed.
                match std::fs::remove_file(temporary) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("removing {}", temporary.display()))
                    }
                    _ => {}
                }
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(temporary)
                    .with_context(|| format!("creating {}", temporary.display()))?
            }
            None => File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        };
        Ok(ChainFile {
            path,
            temporary,
            file,
            whole: 0,
        })
    }

    /// Where the links are being written.
    fn writing(&self) -> &std::path::Path {
        self.temporary.as_deref().unwrap_or(&self.path)
    }

    /// Writes one link (a JSON line) through to the file.
    fn push(&mut self, link: &ChainLink) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(link).expect("a chain link serializes");
        line.push(b'\n');
        if let Err(e) = self.file.write_all(&line) {
            // Best effort (a device cannot be cut): what was written whole stays whole.
            let _ = self.file.set_len(self.whole);
            return Err(e)
                .with_context(|| format!("writing the chain to {}", self.writing().display()));
        }
        self.whole += line.len() as u64;
        Ok(())
    }

    /// Moves the file to its name (`whole`: the replay succeeded) or beside it; returns
    /// where it is.
    fn finish(self, whole: bool) -> anyhow::Result<PathBuf> {
        let Some(temporary) = self.temporary else {
            return Ok(self.path);
        };
        self.file
            .sync_all()
            .with_context(|| format!("syncing {}", temporary.display()))?;
        let partial = suffixed(&self.path, ".partial");
        let to = if whole {
            self.path.clone()
        } else {
            partial.clone()
        };
        std::fs::rename(&temporary, &to).with_context(|| {
            format!(
                "renaming {} to {} (the chain's links are in {})",
                temporary.display(),
                to.display(),
                temporary.display()
            )
        })?;
        if whole && partial.is_file() {
            // An earlier run's partial chain: this whole one supersedes it.
            std::fs::remove_file(&partial)
                .with_context(|| format!("removing {}", partial.display()))?;
        }
        Ok(to)
    }
}

/// The file a chain named `path` is written as: a symbolic link to a regular file is
/// followed (so its target is replaced, not the link), anything else is `path` itself.
fn chain_target(path: &std::path::Path) -> PathBuf {
    match path.symlink_metadata() {
        Ok(meta) if meta.file_type().is_symlink() => path
            .canonicalize()
            .ok()
            .filter(|target| target.is_file())
            .unwrap_or_else(|| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

/// Whether `a` and `b` name the same file: the same path once resolved (either may not
/// exist yet), or the same existing file under two names (a hard or symbolic link).
fn same_file_or_name(a: &std::path::Path, b: &std::path::Path) -> bool {
    let resolved = crate::args::resolve;
    resolved(a).is_some_and(|a| Some(a) == resolved(b)) || crate::args::same_inode(a, b)
}

/// `path` with `suffix` added to its file name.
fn suffixed(path: &std::path::Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
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
        if link.digest.len() != 64
            || !link
                .digest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            bail!(
                "{} line {}: digest {:?} is not 64 lowercase hex digits (a SHA-256 as \
                 --digest-every writes it)",
                path.display(),
                i + 1,
                link.digest
            );
        }
        if let Some(last) = chain.keys().next_back() {
            if link.offset <= *last {
                bail!(
                    "{} line {}: offset {} does not follow offset {} of the line before: a \
                     chain lists each offset once, in log order (was it edited or joined?)",
                    path.display(),
                    i + 1,
                    link.offset,
                    last
                );
            }
        }
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
    ];
    if args.checkpoint_every.is_some() {
        bail!(
            "--checkpoint-every needs an embedded log directory (checkpoints are kept beside \
             it): a Kafka topic, one site or all, has no folder of its own"
        );
    }
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
