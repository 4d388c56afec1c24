//! `lhc bench`: end-to-end measurements, each next to a baseline measured in the same run,
//! so the ratios hold on any machine (wall-clock figures alone would not).

pub mod fleet;
pub mod import;
pub mod node;
pub mod replay;
pub mod timetravel;

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Subcommand;
use lhc_engine::build::{self, records, SiteBuilder};
use lhc_engine::config::DeliveryGroupKind;
use lhc_engine::record::SessionState;
use lhc_log::{EmbeddedLog, EmbeddedOptions, FsyncPolicy, Log};

/// Benchmarks.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Embedded log: append (group commit) and read+CRC, next to raw file IO and JSON decoding.
    Log {
        /// Records to generate.
        #[arg(long, default_value_t = 200_000)]
        records: usize,
        /// A reduced run (20,000 records) that keeps the benchmark working in CI.
        #[arg(long)]
        quick: bool,
        /// Scratch directory [default: a temporary directory].
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Launch decisions in LHC mode against a large zone, next to the heartbeat fold rate.
    Launch {
        /// VDAs in the zone (multi-session, 20 sessions each).
        #[arg(long, default_value_t = 10_000)]
        vdas: usize,
        /// Launch requests to decide.
        #[arg(long, default_value_t = 100_000)]
        launches: usize,
        /// A reduced run (1,000 VDAs, 10,000 launches) that keeps the benchmark working in CI.
        #[arg(long)]
        quick: bool,
    },
    /// Replay at the seeds' scale: a 12-hour site of 4 zones x 10,000 VDAs, 8 connectors,
    /// 10 logons/s, an outage in the middle; next to decoding alone, with peak memory.
    Replay {
        #[command(flatten)]
        scale: SeedsScale,
    },
    /// Time travel: `lhc query --at T` late in the seeds' 12-hour site, from the nearest
    /// checkpoint (`lhc log checkpoint`), next to a whole replay of the same embedded log
    /// and to the same query from the first record.
    TimeTravel {
        #[command(flatten)]
        scale: SeedsScale,
    },
    /// A full configuration import into the cache snapshot (40,000 VDAs, 100,000 users,
    /// 1,000 delivery groups), next to a raw RocksDB WriteBatch of the same bytes.
    Import {
        /// VDAs.
        #[arg(long, default_value_t = 40_000)]
        vdas: usize,
        /// Users.
        #[arg(long, default_value_t = 100_000)]
        users: usize,
        /// Delivery groups (each with a resource, a user group and an entitlement).
        #[arg(long, default_value_t = 1_000)]
        groups: usize,
        /// A reduced run (2,000 VDAs, 5,000 users, 50 groups) that keeps it working in CI.
        #[arg(long)]
        quick: bool,
    },
    /// The live node: launch latency through the HTTP API at a sustained rate (embedded
    /// log and librdkafka's mock cluster), and restart time with a large site's state.
    Node {
        /// Launch requests per second.
        #[arg(long, default_value_t = 1000)]
        rate: u32,
        /// Seconds of sustained load.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// VDAs of the site whose state the restart loads.
        #[arg(long, default_value_t = 40_000)]
        restart_vdas: usize,
        /// When the embedded log's appends reach the disk (always, never, or a period).
        #[arg(long, value_name = "POLICY", default_value = "always")]
        fsync: FsyncPolicy,
        /// Latency runs of each log, alternating (a line each, then their median): a
        /// tail's run-to-run spread on a shared or virtual disk says more than one run.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
        runs: u32,
        /// A reduced run (200/s for 2 s, 2,000 VDAs) that keeps the benchmark working in CI.
        #[arg(long)]
        quick: bool,
    },
    /// Many sites on one Kafka cluster (mock cluster, a partition each): `--all-sites`
    /// folding each site on a thread of its own, next to one thread; prints the speed-up
    /// per core and checks every site's digest is the same both ways.
    Fleet {
        /// Sites.
        #[arg(long, default_value_t = 16)]
        sites: usize,
        /// VDAs per site (one zone, three connectors). The mock cluster keeps a few MB per
        /// partition: a much larger site loses its first records and the run stops.
        #[arg(long, default_value_t = 800)]
        vdas: usize,
        /// Hours of model time per site (an outage over the middle third).
        #[arg(long, default_value_t = 1)]
        hours: u64,
        /// A reduced run (4 sites of 200 VDAs for 1 hour) that keeps it working in CI.
        #[arg(long)]
        quick: bool,
    },
    /// Engine fold (decode + apply) of a site with VDAs heartbeating, next to decoding alone.
    Fold {
        /// VDAs in the zone.
        #[arg(long, default_value_t = 10_000)]
        vdas: usize,
        /// Hours of model time (VDA heartbeats every 5 minutes, an outage in the middle).
        #[arg(long, default_value_t = 2)]
        hours: u64,
        /// A reduced run (1,000 VDAs, 1 hour) that keeps the benchmark working in CI.
        #[arg(long)]
        quick: bool,
    },
}

/// The size of the seeds' site that `bench replay` and `bench time-travel` simulate.
#[derive(clap::Args)]
pub struct SeedsScale {
    /// Zones (10,000 VDAs each).
    #[arg(long, default_value_t = 4)]
    zones: usize,
    /// Hours of site time.
    #[arg(long, default_value_t = 12.0)]
    hours: f64,
    /// A reduced run (1 zone of 1,000 VDAs, 1 hour, 1 logon/s) that keeps the benchmark
    /// working in CI.
    #[arg(long)]
    quick: bool,
}

impl SeedsScale {
    /// The workload: the full site at 10 logons/s, or the reduced one.
    fn bench(&self) -> crate::bench::replay::ReplayBench {
        if self.quick {
            crate::bench::replay::ReplayBench {
                zones: 1,
                vdas_per_zone: 1_000,
                hours: 1.0,
                logon_rate: 1.0,
            }
        } else {
            crate::bench::replay::ReplayBench {
                zones: self.zones,
                vdas_per_zone: 10_000,
                hours: self.hours,
                logon_rate: 10.0,
            }
        }
    }
}

/// Runs a benchmark.
pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Log {
            records,
            quick,
            dir,
        } => {
            let n = if quick { 20_000 } else { records };
            let scratch = tempfile_dir(dir)?;
            log_bench(n, scratch.path())
        }
        BenchCommand::Launch {
            vdas,
            launches,
            quick,
        } => {
            let (vdas, launches) = if quick {
                (1_000, 10_000)
            } else {
                (vdas, launches)
            };
            launch_bench(vdas, launches)
        }
        BenchCommand::Import {
            vdas,
            users,
            groups,
            quick,
        } => crate::bench::import::run(if quick {
            crate::bench::import::ImportBench {
                vdas: 2_000,
                users: 5_000,
                groups: 50,
            }
        } else {
            crate::bench::import::ImportBench {
                vdas,
                users,
                groups,
            }
        }),
        BenchCommand::Replay { scale } => crate::bench::replay::run(scale.bench()),
        BenchCommand::TimeTravel { scale } => timetravel::run(scale.bench()),
        BenchCommand::Node {
            rate,
            seconds,
            restart_vdas,
            fsync,
            runs,
            quick,
        } => {
            let (rate, seconds, restart_vdas) = if quick {
                (200, 2, 2_000)
            } else {
                (rate, seconds, restart_vdas)
            };
            crate::bench::node::run(crate::bench::node::NodeBench {
                rate,
                seconds,
                restart_vdas,
                fsync,
                runs: runs as usize,
            })
        }
        BenchCommand::Fleet {
            sites,
            vdas,
            hours,
            quick,
        } => {
            if quick {
                fleet::run(4, 200, 1)
            } else {
                fleet::run(sites.max(1), vdas.max(1), hours.max(1))
            }
        }
        BenchCommand::Fold { vdas, hours, quick } => {
            let (vdas, hours) = if quick { (1_000, 1) } else { (vdas, hours) };
            fold_bench(vdas, hours, false)?;
            println!();
            fold_bench(vdas, hours, true)
        }
    }
}

/// A site of one zone with three connectors and `vdas` VDAs heartbeating every 5 minutes
/// for `hours`, with StoreFront traffic, probes and health checks every minute, and a cloud
/// outage over the middle third (so registrations move to the elected broker and back).
pub fn site_log(vdas: usize, hours: u64, outage: bool) -> Vec<Vec<u8>> {
    let t0 = lhc_engine::Ts(1_767_603_600_000);
    let connectors = [
        "cc1.zone1.corp.example",
        "cc2.zone1.corp.example",
        "cc3.zone1.corp.example",
    ];
    let site_data = lhc_engine::config::SiteData {
        heartbeat_period_ms: 600_000,
        ..Default::default()
    };
    let mut site = SiteBuilder::new()
        .site(site_data)
        .zone("zone1")
        .group("dg1", DeliveryGroupKind::MultiSession);
    for c in connectors {
        site = site.connector(c, "zone1");
    }
    for v in 0..vdas {
        site = site.machine(
            &format!("vda{v:05}.zone1.corp.example"),
            "zone1",
            "dg1",
            None,
        );
    }
    let mut lines = vec![build::line(&site.change(t0, 1))];
    let total_s = hours * 3600;
    let (outage_from, outage_to) = if outage {
        (total_s / 3, 2 * total_s / 3)
    } else {
        (0, 0)
    };
    // Every second: the VDAs due now (each once per 300 s, spread evenly), and once a minute
    // the connectors' own records.
    for second in 1..total_s {
        let ts = t0.plus_s(second);
        if second % 60 == 1 {
            let ok = !(outage_from..outage_to).contains(&second);
            lines.extend(connector_minute(ts, &connectors, ok));
        }
        for v in (0..vdas).filter(|v| (*v as u64 * 300 / vdas.max(1) as u64) == second % 300) {
            let (s, t, user, other) = (
                format!("s{v}"),
                format!("t{v}"),
                format!("user{v}"),
                format!("u{v}"),
            );
            let sessions: &[(&str, &str, SessionState)] = match v % 3 {
                0 => &[],
                1 => &[(&s, &user, SessionState::Active)],
                _ => &[
                    (&s, &user, SessionState::Active),
                    (&t, &other, SessionState::Disconnected),
                ],
            };
            let machine = format!("vda{v:05}.zone1.corp.example");
            lines.push(build::line(&records::heartbeat(ts, &machine, sessions)));
        }
    }
    lines
}

/// What each connector reports once a minute: its health check, a StoreFront heartbeat,
/// and a successful probe of each peer.
fn connector_minute(ts: lhc_engine::Ts, connectors: &[&str], ok: bool) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    for c in connectors {
        lines.push(build::line(&records::health_check(ts, c, ok)));
        lines.push(build::line(&records::storefront(ts, c, "sf1")));
        for p in connectors.iter().filter(|p| *p != c) {
            lines.push(build::line(&records::peer_probe(ts, c, p, true)));
        }
    }
    lines
}

fn fold_bench(vdas: usize, hours: u64, outage: bool) -> anyhow::Result<ExitCode> {
    let records = site_log(vdas, hours, outage);
    let bytes: u64 = records.iter().map(|r| r.len() as u64).sum();
    let n = records.len();
    let what = if outage {
        "with a cloud outage over the middle third (every registration moves twice)"
    } else {
        "heartbeating, no outage"
    };
    println!(
        "lhc bench fold: {vdas} VDAs, {hours} h, {what}: {n} records, {:.1} MB of JSON",
        bytes as f64 / 1e6
    );
    // Best of three interleaved runs of each: this machine's timing noise is larger than
    // the effect measured, and the fastest run is the one least disturbed.
    let mut decode: Option<Row> = None;
    let mut fold: Option<Row> = None;
    let mut outputs_total = 0usize;
    let mut engine = lhc_engine::Engine::new();
    for _ in 0..3 {
        let d = time("decode only (serde_json into records)", n, bytes, || {
            for r in &records {
                std::hint::black_box(
                    lhc_engine::decode_record(r).map_err(|e| anyhow::anyhow!("{e}"))?,
                );
            }
            Ok(())
        })?;
        let mut fresh = lhc_engine::Engine::new();
        let mut outputs = 0usize;
        let f = time("fold (decode + apply)", n, bytes, || {
            let mut out = Vec::new();
            for (offset, r) in records.iter().enumerate() {
                let decoded = lhc_engine::decode_record_at(r, offset as u64);
                fresh.apply(offset as u64, decoded, &mut out);
                outputs += out.len();
                out.clear();
            }
            Ok(())
        })?;
        outputs_total = outputs;
        std::mem::swap(&mut engine, &mut fresh);
        drop(fresh); // outside the timed part
        if decode.as_ref().is_none_or(|best| d.elapsed < best.elapsed) {
            decode = Some(d);
        }
        if fold.as_ref().is_none_or(|best| f.elapsed < best.elapsed) {
            fold = Some(f);
        }
    }
    let (decode, fold) = (decode.expect("ran"), fold.expect("ran"));
    print_rows(&[&decode, &fold]);
    println!(
        "\noutputs: {outputs_total}; final digest {}",
        engine.digest()
    );
    println!(
        "ratio fold / decode: {:.2}  (target >= 0.5: applying costs at most as much as decoding)",
        fold.records_per_s() / decode.records_per_s()
    );
    Ok(ExitCode::SUCCESS)
}

struct Scratch {
    path: std::path::PathBuf,
    remove: bool,
}

impl Scratch {
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn tempfile_dir(dir: Option<std::path::PathBuf>) -> anyhow::Result<Scratch> {
    let (path, remove) = match dir {
        Some(d) => (d, false),
        None => (
            std::env::temp_dir().join(format!("lhc-bench-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    Ok(Scratch { path, remove })
}

/// Deterministic records in the proportions of a busy site: mostly VDA heartbeats with
/// their sessions, then health checks, probes, StoreFront heartbeats and launches.
pub fn sample_records(n: usize) -> Vec<Vec<u8>> {
    use lhc_engine::build::{line, records};
    use lhc_engine::record::SessionState;
    (0..n)
        .map(|i| {
            let ms = i as u64 * 37;
            let ts = lhc_engine::Ts(1_767_603_600_000 + ms as i64);
            let connector = format!("cc{}.zone{}.corp.example", i % 4, i % 3);
            let record = match i % 10 {
                0..=5 => {
                    let sessions: Vec<(String, String)> = (0..(i % 4))
                        .map(|s| {
                            (
                                format!("s-{i}-{s}"),
                                format!("user{:05}", (i * 7 + s) % 100_000),
                            )
                        })
                        .collect();
                    let reports: Vec<(&str, &str, SessionState)> = sessions
                        .iter()
                        .map(|(id, user)| (id.as_str(), user.as_str(), SessionState::Active))
                        .collect();
                    records::heartbeat(ts, &format!("vda{:05}.corp.example", i % 40_000), &reports)
                }
                6 => records::health_check(ts, &connector, true),
                7 => records::peer_probe(
                    ts,
                    &connector,
                    &format!("cc{}.zone0.corp.example", (i + 1) % 4),
                    true,
                ),
                8 => records::storefront(ts, &connector, "sf1.corp.example"),
                _ => records::launch(
                    ts,
                    &format!("r{i}"),
                    &connector,
                    &format!("user{:05}", i % 100_000),
                    &format!("app{}", i % 50),
                ),
            };
            line(&record)
        })
        .collect()
}

struct Row {
    name: &'static str,
    records: usize,
    bytes: u64,
    elapsed: Duration,
}

impl Row {
    fn records_per_s(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64()
    }
}

/// Prints measurements as an aligned table.
fn print_rows(rows: &[&Row]) {
    println!("\n{:<46} {:>12} {:>10}", "measure", "records/s", "MB/s");
    for row in rows {
        println!(
            "{:<46} {:>12.0} {:>10.1}",
            row.name,
            row.records_per_s(),
            row.mb_per_s()
        );
    }
}

fn time(
    name: &'static str,
    records: usize,
    bytes: u64,
    f: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<Row> {
    let started = Instant::now();
    f()?;
    Ok(Row {
        name,
        records,
        bytes,
        elapsed: started.elapsed(),
    })
}

fn log_bench(n: usize, dir: &Path) -> anyhow::Result<ExitCode> {
    let records = sample_records(n);
    let bytes: u64 = records.iter().map(|r| r.len() as u64).sum();
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    println!(
        "lhc bench log: {n} records, {:.1} MB of JSON, scratch {}",
        bytes as f64 / 1e6,
        dir.display()
    );

    let decode = time("decode (serde_json into records)", n, bytes, || {
        for r in &records {
            std::hint::black_box(lhc_engine::decode_record(r).map_err(|e| anyhow::anyhow!("{e}"))?);
        }
        Ok(())
    })?;

    let raw_path = dir.join("raw.jsonl");
    let raw_write = time("raw file write + fsync", n, bytes, || {
        let mut f = File::create(&raw_path)?;
        for chunk in refs.chunks(1000) {
            let mut buf = Vec::new();
            for r in chunk {
                buf.extend_from_slice(r);
                buf.push(b'\n');
            }
            f.write_all(&buf)?;
            f.sync_data()?;
        }
        Ok(())
    })?;

    let open = |name: &str, fsync| {
        EmbeddedLog::open(
            dir.join(name),
            EmbeddedOptions {
                fsync,
                ..EmbeddedOptions::default()
            },
        )
    };
    let batched = time("append, batches of 1000, fsync always", n, bytes, || {
        let log = open("batched", FsyncPolicy::Always)?;
        for chunk in refs.chunks(1000) {
            log.append(chunk)?;
        }
        Ok(())
    })?;

    // Group commit: many writers appending one record each; concurrent appends share an fsync.
    let writers = 16;
    let single = (n / 10).max(writers);
    let group = time(
        "append 1 by 1 from 16 threads, fsync always",
        single,
        bytes * single as u64 / n as u64,
        || {
            let log = Arc::new(open("group", FsyncPolicy::Always)?);
            let threads: Vec<_> = (0..writers)
                .map(|w| {
                    let log = Arc::clone(&log);
                    let mine: Vec<Vec<u8>> = records
                        .iter()
                        .skip(w)
                        .step_by(writers)
                        .take(single / writers)
                        .cloned()
                        .collect();
                    std::thread::spawn(move || -> Result<(), lhc_log::LogError> {
                        for r in &mine {
                            log.append(&[r])?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for t in threads {
                t.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
            }
            Ok(())
        },
    )?;
    let lone = (n / 100).max(100);
    let one_by_one = time(
        "append 1 by 1 from 1 thread, fsync always",
        lone,
        bytes * lone as u64 / n as u64,
        || {
            let log = open("lone", FsyncPolicy::Always)?;
            for r in refs.iter().take(lone) {
                log.append(&[r])?;
            }
            Ok(())
        },
    )?;

    let raw_read = time("raw file read", n, bytes, || {
        // Sequential reads into one reused buffer, as the log reader does: reading the
        // whole file into a fresh allocation would time page faults, not reading.
        let mut buf = vec![0u8; 1 << 20];
        let mut file = File::open(&raw_path)?;
        while file.read(&mut buf)? > 0 {
            std::hint::black_box(&buf);
        }
        Ok(())
    })?;
    let read = time("read + CRC from the embedded log", n, bytes, || {
        let log = EmbeddedLog::open_read_only(dir.join("batched"))?;
        let mut reader = log.reader(0)?;
        let mut count = 0;
        while let Some(entry) = reader.next(Duration::ZERO)? {
            std::hint::black_box(&entry);
            count += 1;
        }
        anyhow::ensure!(count == n, "read {count} of {n} records");
        Ok(())
    })?;

    let rows = [
        &decode,
        &raw_write,
        &batched,
        &group,
        &one_by_one,
        &raw_read,
        &read,
    ];
    print_rows(&rows);
    let read_vs_decode = read.records_per_s() / decode.records_per_s();
    println!("\nratios (same run):");
    println!("  read+CRC / decode                     {read_vs_decode:>6.1}x  (target >= 3x: the log never bottlenecks replay)");
    println!(
        "  read+CRC / raw file read              {:>6.2}x",
        read.mb_per_s() / raw_read.mb_per_s()
    );
    println!(
        "  batched append / raw write+fsync      {:>6.2}x",
        batched.mb_per_s() / raw_write.mb_per_s()
    );
    println!(
        "  group commit / 1-by-1 single thread   {:>6.1}x  (concurrent appends sharing fsyncs)",
        group.records_per_s() / one_by_one.records_per_s()
    );
    Ok(ExitCode::SUCCESS)
}

/// Brings a zone of `vdas` multi-session VDAs into LHC mode with every VDA registered with
/// the elected broker, then decides `launches` requests there. Heartbeats of the same VDAs
/// in the same state are the baseline: launch decisions should cost about as much.
fn launch_bench(vdas: usize, launches: usize) -> anyhow::Result<ExitCode> {
    let t0 = lhc_engine::Ts(1_767_603_600_000);
    let connectors = [
        "cc1.zone1.corp.example",
        "cc2.zone1.corp.example",
        "cc3.zone1.corp.example",
    ];
    let mut site = SiteBuilder::new()
        .site(Default::default())
        .zone("zone1")
        .group("dg1", DeliveryGroupKind::MultiSession)
        .application("app", &["dg1"])
        .user_group("staff")
        .entitlement("e", "app", &["staff"]);
    for c in connectors {
        site = site.connector(c, "zone1");
    }
    for v in 0..vdas {
        site = site.machine(
            &format!("vda{v:05}.zone1.corp.example"),
            "zone1",
            "dg1",
            Some(20),
        );
    }
    let users = launches.max(1);
    for u in 0..users {
        site = site.user(&format!("user{u:06}"), &["staff"]);
    }
    let mut setup = vec![build::line(&site.change(t0, 1))];
    // Healthy, then the cloud fails at 60 s: LHC mode at 120 s (cc1 elected).
    for second in [1u64, 61, 121] {
        setup.extend(connector_minute(
            t0.plus_s(second),
            &connectors,
            second < 60,
        ));
    }
    let heartbeats: Vec<Vec<u8>> = (0..vdas)
        .map(|v| {
            let machine = format!("vda{v:05}.zone1.corp.example");
            build::line(&records::heartbeat(t0.plus_s(130), &machine, &[]))
        })
        .collect();
    let requests: Vec<Vec<u8>> = (0..launches)
        .map(|i| {
            let (request, user) = (format!("r{i}"), format!("user{:06}", i % users));
            let launch = records::launch(
                t0.plus_s(140),
                &request,
                "cc1.zone1.corp.example",
                &user,
                "app",
            );
            build::line(&launch)
        })
        .collect();
    let mut engine = lhc_engine::Engine::new();
    let mut out = Vec::new();
    let mut offset = 0u64;
    let mut feed =
        |engine: &mut lhc_engine::Engine, lines: &[Vec<u8>], out: &mut Vec<lhc_engine::Output>| {
            for line in lines {
                engine.apply(offset, lhc_engine::decode_record_at(line, offset), out);
                offset += 1;
            }
        };
    feed(&mut engine, &setup, &mut out);
    // The first round registers every VDA with the elected broker (not timed).
    feed(&mut engine, &heartbeats, &mut out);
    out.clear();
    let hb_bytes: u64 = heartbeats.iter().map(|h| h.len() as u64).sum();
    let heartbeat = time(
        "heartbeats (decode + apply), registered",
        vdas,
        hb_bytes,
        || {
            feed(&mut engine, &heartbeats, &mut out);
            Ok(())
        },
    )?;
    out.clear();
    let bytes: u64 = requests.iter().map(|r| r.len() as u64).sum();
    let launch = time(
        "launch decisions (decode + apply), LHC mode",
        launches,
        bytes,
        || {
            feed(&mut engine, &requests, &mut out);
            Ok(())
        },
    )?;
    let brokered = out
        .iter()
        .filter(|o| matches!(o, lhc_engine::Output::LaunchDecision(d) if d.outcome == lhc_engine::output::Outcome::Brokered))
        .count();
    let decided = out
        .iter()
        .filter(|o| matches!(o, lhc_engine::Output::LaunchDecision(_)))
        .count();
    anyhow::ensure!(
        decided == launches,
        "{decided} decisions for {launches} launches"
    );
    println!("lhc bench launch: {vdas} VDAs in one zone, {launches} launches at the elected broker in LHC mode");
    print_rows(&[&heartbeat, &launch]);
    println!(
        "\n{brokered} brokered, {} rejected (capacity: {} sessions)",
        launches - brokered,
        vdas * 20
    );
    println!(
        "ratio launch decisions / heartbeats: {:.2}  (O(log n) per decision: no scan of the zone)",
        launch.records_per_s() / heartbeat.records_per_s()
    );
    Ok(ExitCode::SUCCESS)
}

/// How a benchmark's line says whether its figure meets the target.
pub(crate) fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}
