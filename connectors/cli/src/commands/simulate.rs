//! `lhc simulate`: writes a seeded, realistic site log to a JSONL file, the embedded log or
//! Kafka.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use lhc_replay::{BadConfig, Scenario, SimOptions, Simulator};

use crate::args::LogArgs;

/// Options of `lhc simulate`.
#[derive(clap::Args)]
pub struct SimulateArgs {
    /// Seed: the same seed and options give the same log, byte for byte.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Zones (resource locations).
    #[arg(long, default_value_t = 2)]
    zones: usize,
    /// Cloud Connectors per zone.
    #[arg(long, default_value_t = 3)]
    connectors_per_zone: usize,
    /// VDAs per zone (at most 10,000; 40,000 per site): half multi-session servers, 30 %
    /// pooled desktops, 20 % static desktops.
    #[arg(long, default_value_t = 2_000)]
    vdas_per_zone: usize,
    /// Users (in a staff group and one of ten departments; the first own static desktops).
    #[arg(long, default_value_t = 5_000)]
    users: usize,
    /// Hours of site time.
    #[arg(long, default_value_t = 2.0)]
    hours: f64,
    /// Logons per second across the site (launches through StoreFront).
    #[arg(long, default_value_t = 1.0)]
    logon_rate: f64,
    /// Mean session length, minutes (exponentially distributed).
    #[arg(long, default_value_t = 45.0)]
    session_minutes: f64,
    /// Time of the first record (RFC 3339, UTC).
    #[arg(long, default_value = "2026-01-05T09:00:00Z")]
    start: String,
    /// VDA registration heartbeat period (1m to 1h, the range a configuration may hold);
    /// VDAs heartbeat every half period.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    heartbeat_period: Duration,
    /// Cloud outage: START+DURATION from the start of the log, like 1h+40m (repeatable).
    #[arg(long = "outage", value_name = "START+DURATION")]
    outages: Vec<String>,
    /// Flapping network: START+DURATION/PERIOD, health checks alternate each PERIOD.
    #[arg(long = "flap", value_name = "START+DURATION/PERIOD")]
    flaps: Vec<String>,
    /// Partition of the election channel (peer probes fail): START+DURATION.
    #[arg(long = "partition", value_name = "START+DURATION")]
    partitions: Vec<String>,
    /// A connector stopped then started: CONNECTOR@START+DURATION (CONNECTOR: an FQDN or
    /// z1c2 for zone 1, connector 2).
    #[arg(long = "stop", value_name = "CONNECTOR@START+DURATION")]
    stops: Vec<String>,
    /// Forced outage on a zone's connectors (z1), on one connector (z1c2 or an FQDN), or on
    /// all: TARGET|all@START+DURATION.
    #[arg(long = "forced-outage", value_name = "ZONE@START+DURATION")]
    forced: Vec<String>,
    /// A config change that breaks imports (505): KIND@AT with KIND dangling, orphan or
    /// duplicate.
    #[arg(long = "bad-config", value_name = "KIND@AT")]
    bad_configs: Vec<String>,
    /// A connector's local store fails (its next import fails): CONNECTOR@AT.
    #[arg(long = "storage-fault", value_name = "CONNECTOR@AT")]
    storage_faults: Vec<String>,
    /// Write JSONL to this file instead of a log.
    #[arg(long, value_name = "FILE", conflicts_with = "kafka")]
    out: Option<PathBuf>,
    /// Add to a log that already holds records (refused without it); the simulation must
    /// start at or after the log's last record (--start).
    #[arg(long, conflicts_with = "out")]
    append: bool,
    #[command(flatten)]
    target: LogArgs,
}

fn seconds(text: &str) -> anyhow::Result<u64> {
    let text = text.trim();
    if text == "0" {
        return Ok(0);
    }
    Ok(humantime::parse_duration(text)
        .with_context(|| format!("{text:?} is not a duration like 90s, 40m or 1h30m"))?
        .as_secs())
}

/// `START+DURATION` → (start, duration).
fn window(text: &str) -> anyhow::Result<(u64, u64)> {
    let Some((start, duration)) = text.split_once('+') else {
        bail!("{text:?}: expected START+DURATION, like 1h+40m");
    };
    Ok((seconds(start)?, seconds(duration)?))
}

/// `NAME@REST` → (name, rest).
fn at(text: &str) -> anyhow::Result<(String, String)> {
    match text.split_once('@') {
        Some((name, rest)) if !name.is_empty() => Ok((name.to_string(), rest.to_string())),
        _ => bail!("{text:?}: expected NAME@TIME"),
    }
}

impl SimulateArgs {
    fn options(&self) -> anyhow::Result<SimOptions> {
        let start = lhc_engine::Ts::parse(&self.start).map_err(anyhow::Error::msg)?;
        let mut scenarios = Vec::new();
        for o in &self.outages {
            let (start_s, duration_s) = window(o)?;
            scenarios.push(Scenario::CloudOutage {
                start_s,
                duration_s,
            });
        }
        for f in &self.flaps {
            let Some((w, period)) = f.split_once('/') else {
                bail!("--flap {f:?}: expected START+DURATION/PERIOD, like 1h+20m/2m");
            };
            let (start_s, duration_s) = window(w)?;
            scenarios.push(Scenario::Flapping {
                start_s,
                duration_s,
                period_s: seconds(period)?,
            });
        }
        for p in &self.partitions {
            let (start_s, duration_s) = window(p)?;
            scenarios.push(Scenario::Partition {
                start_s,
                duration_s,
            });
        }
        for s in &self.stops {
            let (connector, w) = at(s)?;
            let (start_s, duration_s) = window(&w)?;
            scenarios.push(Scenario::ConnectorStop {
                connector,
                start_s,
                duration_s,
            });
        }
        for f in &self.forced {
            let (zone, w) = at(f)?;
            let (start_s, duration_s) = window(&w)?;
            scenarios.push(Scenario::ForcedOutage {
                zone: (zone != "all").then_some(zone),
                start_s,
                duration_s,
            });
        }
        for b in &self.bad_configs {
            let (kind, when) = at(b)?;
            let kind = match kind.as_str() {
                "dangling" => BadConfig::DanglingReference,
                "orphan" => BadConfig::OrphanedAccount,
                "duplicate" => BadConfig::DuplicateName,
                other => bail!("--bad-config {other:?}: expected dangling, orphan or duplicate"),
            };
            scenarios.push(Scenario::BadConfig {
                at_s: seconds(&when)?,
                kind,
            });
        }
        for f in &self.storage_faults {
            let (connector, when) = at(f)?;
            scenarios.push(Scenario::StorageFault {
                connector,
                at_s: seconds(&when)?,
            });
        }
        Ok(SimOptions {
            seed: self.seed,
            zones: self.zones,
            connectors_per_zone: self.connectors_per_zone,
            vdas_per_zone: self.vdas_per_zone,
            users: self.users,
            hours: self.hours,
            logon_rate: self.logon_rate,
            session_minutes: self.session_minutes,
            start,
            heartbeat_period_ms: self.heartbeat_period.as_millis() as u64,
            scenarios,
            version_base: 0,
        })
    }
}

/// Runs `lhc simulate`.
pub fn run(args: SimulateArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let mut options = args.options()?;
    if args.out.is_none() {
        // Into a log: refused if it holds records (unless --append), and then the simulation
        // must start after its end and number its configuration after the log's.
        let (_, order) = args.target.prepare_append(args.append)?;
        if let Some(last) = order.last().filter(|last| options.start < *last) {
            bail!(
                "the simulation would start at {}, before the log's last record at {last}: \
                 its records would only be quarantined (R-LOG-4); pass --start {last} or \
                 later",
                options.start
            );
        }
        options.version_base = order.last_version().unwrap_or(0);
    }
    let simulator = Simulator::new(options.clone())?;
    let bar = crate::progress::bar(Some(1000), "simulate", quiet);
    let started = Instant::now();
    let mut progress = |fraction: f64| bar.set_position((fraction * 1000.0) as u64);
    let (records, destination) = match &args.out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            let mut sink = |bytes: &[u8]| -> Result<(), String> {
                out.write_all(bytes)
                    .and_then(|()| out.write_all(b"\n"))
                    .map_err(|e| e.to_string())
            };
            let n = simulator
                .run(&mut sink, &mut progress)
                .map_err(anyhow::Error::msg)?;
            out.flush()?;
            (n, path.display().to_string())
        }
        None => {
            let log = args.target.open_for_append()?;
            let mut pending: Vec<Vec<u8>> = Vec::with_capacity(10_000);
            let flush = |pending: &mut Vec<Vec<u8>>| -> Result<(), String> {
                let refs: Vec<&[u8]> = pending.iter().map(Vec::as_slice).collect();
                log.append(&refs).map_err(|e| e.to_string())?;
                pending.clear();
                Ok(())
            };
            let mut sink = |bytes: &[u8]| -> Result<(), String> {
                pending.push(bytes.to_vec());
                if pending.len() >= 10_000 {
                    flush(&mut pending)?;
                }
                Ok(())
            };
            let n = simulator
                .run(&mut sink, &mut progress)
                .map_err(anyhow::Error::msg)?;
            flush(&mut pending).map_err(anyhow::Error::msg)?;
            (n, log.describe())
        }
    };
    bar.finish_and_clear();
    if !quiet {
        eprintln!(
            "simulated {} h of a site ({} zone(s) x {} connector(s), {} VDAs, {} users, seed {}): \
             {records} records to {destination} in {:.1} s",
            options.hours,
            options.zones,
            options.connectors_per_zone,
            options.zones * options.vdas_per_zone,
            options.users,
            options.seed,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}
