//! `lhc demo`: the README's first command. At this stage it imports the bundled example
//! outage log into a fresh embedded log and prints it; the engine's replay comes next.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use lhc_engine::decode_record;
use lhc_engine::record::Record;
use lhc_log::{EmbeddedLog, EmbeddedOptions, FsyncPolicy, Log};

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
        "imported {} records into {} (offsets 0..{})\n",
        offsets.len(),
        log_dir.display(),
        offsets.len()
    );
    println!(
        "{:<24} {:>6}  {:<21} {:<26} summary",
        "time", "offset", "type", "who"
    );
    let mut reader = log.reader(0)?;
    while let Some(entry) = reader.next(Duration::ZERO)? {
        let record =
            decode_record(&entry.bytes).with_context(|| format!("offset {}", entry.offset))?;
        let (who, summary) = describe(&record);
        println!(
            "{:<24} {:>6}  {:<21} {:<26} {summary}",
            record.ts(),
            entry.offset,
            record.type_name(),
            who
        );
    }
    println!(
        "\nnext: `lhc log stats --log {}`, `lhc log cat --log {} --from 100`",
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

/// Who a record concerns and a one-line summary.
fn describe(record: &Record) -> (String, String) {
    match record {
        Record::EngineParams(_) => (String::new(), "parameter overrides".into()),
        Record::ConfigChange(r) => (
            String::new(),
            format!("version {}, {} op(s)", r.version, r.ops.len()),
        ),
        Record::HealthCheck(r) => (
            r.connector.clone(),
            if r.ok { "ok".into() } else { "FAILED".into() },
        ),
        Record::PeerProbe(r) => (
            r.connector.clone(),
            format!("-> {} {}", r.peer, if r.ok { "ok" } else { "unreachable" }),
        ),
        Record::StorefrontHeartbeat(r) => (r.connector.clone(), format!("from {}", r.storefront)),
        Record::ServiceStatus(r) => (
            r.connector.clone(),
            format!("{:?} running={}", r.service, r.running),
        ),
        Record::ConnectorLifecycle(r) => (r.connector.clone(), format!("{:?}", r.event)),
        Record::StorageFault(r) => (r.connector.clone(), r.detail.clone()),
        Record::VdaHeartbeat(r) => (
            r.machine.clone(),
            format!("{} session(s)", r.sessions.len()),
        ),
        Record::SessionEvent(r) => (
            r.machine.clone(),
            format!("{:?} {} ({})", r.event, r.session, r.user),
        ),
        Record::LaunchRequest(r) => (
            r.connector.clone(),
            format!("{} launches {} [{}]", r.user, r.resource, r.request),
        ),
        Record::AdminCommand(r) => (r.connector.clone(), format!("{:?}", r.command)),
        Record::ClockTick(_) => (String::new(), "tick".into()),
    }
}
