//! `lhc bench`: end-to-end measurements, each next to a baseline measured in the same run,
//! so the ratios hold on any machine (wall-clock figures alone would not).

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Subcommand;
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
    }
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
    (0..n)
        .map(|i| {
            let ms = i as u64 * 37;
            let ts = lhc_engine::Ts(1_767_603_600_000 + ms as i64);
            let connector = format!("cc{}.zone{}.corp.example", i % 4, i % 3);
            let json = match i % 10 {
                0..=5 => {
                    let sessions: Vec<String> = (0..(i % 4))
                        .map(|s| format!(r#"{{"id":"s-{i}-{s}","user":"user{:05}","state":"active"}}"#, (i * 7 + s) % 100_000))
                        .collect();
                    format!(
                        r#"{{"ts":"{ts}","type":"vda.heartbeat","machine":"vda{:05}.corp.example","sessions":[{}]}}"#,
                        i % 40_000,
                        sessions.join(",")
                    )
                }
                6 => format!(r#"{{"ts":"{ts}","type":"health.check","connector":"{connector}","ok":true}}"#),
                7 => format!(
                    r#"{{"ts":"{ts}","type":"peer.probe","connector":"{connector}","peer":"cc{}.zone0.corp.example","ok":true}}"#,
                    (i + 1) % 4
                ),
                8 => format!(r#"{{"ts":"{ts}","type":"storefront.heartbeat","connector":"{connector}","storefront":"sf1.corp.example"}}"#),
                _ => format!(
                    r#"{{"ts":"{ts}","type":"launch.request","request":"r{i}","connector":"{connector}","user":"user{:05}","resource":"app{}","client":{{"name":"pc{i}","ip":"10.1.{}.{}"}}}}"#,
                    i % 100_000,
                    i % 50,
                    (i / 256) % 256,
                    i % 256
                ),
            };
            json.into_bytes()
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
        let mut buf = Vec::new();
        File::open(&raw_path)?.read_to_end(&mut buf)?;
        std::hint::black_box(&buf);
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
    println!("\n{:<46} {:>12} {:>10}", "measure", "records/s", "MB/s");
    for row in rows {
        println!(
            "{:<46} {:>12.0} {:>10.1}",
            row.name,
            row.records_per_s(),
            row.mb_per_s()
        );
    }
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
