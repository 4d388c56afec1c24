//! `lhc bench time-travel`: `lhc query --at T` late in the seeds' 12-hour site, from the
//! nearest checkpoint, next to a whole replay of the same embedded log and to the same
//! query replaying from the first record.

use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use lhc_engine::Ts;
use lhc_log::{EmbeddedLog, EmbeddedOptions, FsyncPolicy, Log};
use lhc_replay::Simulator;

use super::replay::{best_of_two_args, ReplayBench};

/// Fractions of the site's span at which the queries ask (late in the day, one of them
/// just before a checkpoint would be ideal and one just after).
const LATE: [f64; 3] = [0.75, 0.9, 0.99];

/// Runs the benchmark and prints the figures.
pub fn run(bench: ReplayBench) -> anyhow::Result<ExitCode> {
    let scratch = tempfile::tempdir()?;
    let dir = scratch.path().join("log");
    println!(
        "lhc bench time-travel: {}, an outage in the middle, in an embedded log",
        bench.describe()
    );
    let started = Instant::now();
    let records = {
        let log = EmbeddedLog::open(
            &dir,
            EmbeddedOptions {
                fsync: FsyncPolicy::Never,
                ..EmbeddedOptions::default()
            },
        )?;
        let mut batch: Vec<Vec<u8>> = Vec::with_capacity(4096);
        let flush = |batch: &mut Vec<Vec<u8>>| -> Result<(), String> {
            let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
            log.append(&refs).map_err(|e| e.to_string())?;
            batch.clear();
            Ok(())
        };
        let records = Simulator::new(super::replay::options(&bench))?
            .run(
                &mut |bytes| {
                    batch.push(bytes.to_vec());
                    if batch.len() == 4096 {
                        flush(&mut batch)?;
                    }
                    Ok(())
                },
                &mut |_| {},
            )
            .map_err(anyhow::Error::msg)?;
        flush(&mut batch).map_err(anyhow::Error::msg)?;
        records
    };
    settle();
    let log_bytes = dir_bytes(&dir)?;
    println!(
        "simulated {records} records ({:.0} MB of log) in {:.1} s\n",
        log_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let (first, last) = span(&dir)?;

    let exe = std::env::current_exe().context("finding the lhc binary")?;
    let dir_arg = dir.as_os_str();
    let started = Instant::now();
    // The default interval, or less on a log too short for eight of them (--quick).
    let every = lhc_replay::checkpoint::DEFAULT_EVERY.min((records / 8).max(1));
    let every_text = every.to_string();
    run_lhc(
        &exe,
        &["log", "checkpoint", "-q", "--every", &every_text],
        dir_arg,
    )?;
    let checkpoint_s = started.elapsed().as_secs_f64();
    settle();
    let checkpoints = lhc_replay::checkpoint::list(&dir)?;
    let checkpoint_bytes = dir_bytes(&dir.join(lhc_replay::checkpoint::DIR))?;

    let replay_s = best_of_two_args(&exe, &["replay", "--no-outputs", "-q"], &[dir_arg])?;
    println!("{:<58} {:>10}", "measure", "seconds");
    println!(
        "{:<58} {:>10.2}",
        "lhc replay --no-outputs (the whole log)", replay_s
    );
    println!(
        "{:<58} {:>10.2}",
        format!("lhc log checkpoint (one every {every} records)"),
        checkpoint_s
    );
    let mut worst: f64 = 0.0;
    let mut from_start_s = 0.0;
    for (i, fraction) in LATE.iter().enumerate() {
        let at = Ts(first.0 + ((last.0 - first.0) as f64 * fraction) as i64);
        let at_text = at.to_string();
        let dir_text = dir.to_str().context("a UTF-8 scratch path")?;
        let args = [
            "query", dir_text, "-q", "--format", "json", "--at", &at_text, "digest",
        ];
        let seconds = best_of_two_args(&exe, &args, &[])?;
        worst = worst.max(seconds);
        println!(
            "{:<58} {:>10.2}",
            format!(
                "lhc query --at {at_text} digest ({:.0} % of the day)",
                fraction * 100.0
            ),
            seconds
        );
        if i == LATE.len() - 1 {
            // The same question replaying from the first record: the answer must be the
            // same, and this is what time travel cost before checkpoints.
            let with = output(&exe, &args)?;
            let mut plain = args.to_vec();
            plain.push("--from-start");
            let started = Instant::now();
            let without = output(&exe, &plain)?;
            from_start_s = started.elapsed().as_secs_f64();
            if with != without {
                bail!("the digest from a checkpoint differs from the one from the start:\n{with}\n{without}");
            }
            println!(
                "{:<58} {:>10.2}",
                "the last query with --from-start (same digest)", from_start_s
            );
        }
    }
    println!(
        "\nratio query --at (worst of the three) / whole replay: {:.3}  (target <= 0.1: {}; from the start {:.2})\ncheckpoints: {} of {:.1} MB in all, {:.2} of the log's size; writing them took {:.2} of a replay",
        worst / replay_s,
        super::verdict(worst / replay_s <= 0.1),
        from_start_s / replay_s,
        checkpoints.len(),
        checkpoint_bytes as f64 / 1e6,
        checkpoint_bytes as f64 / log_bytes as f64,
        checkpoint_s / replay_s,
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes every dirty page back, so the kernel's write-back of the log just written does
/// not land in the measurements that follow.
fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Times of the log's first and last records.
fn span(dir: &std::path::Path) -> anyhow::Result<(Ts, Ts)> {
    let log = EmbeddedLog::open_read_only(dir)?;
    let ts_at = |offset| -> anyhow::Result<Ts> {
        let entry = log
            .reader(offset)?
            .next(std::time::Duration::ZERO)?
            .context("the log is empty")?;
        Ok(lhc_engine::decode_record(&entry.bytes)?.ts())
    };
    let end = log.end_offset()?;
    anyhow::ensure!(end > 0, "the simulation wrote no records");
    Ok((ts_at(0)?, ts_at(end - 1)?))
}

fn run_lhc(exe: &std::path::Path, args: &[&str], dir: &std::ffi::OsStr) -> anyhow::Result<()> {
    let status = Command::new(exe)
        .args(args)
        .arg(dir)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running lhc {}", args.join(" ")))?;
    if !status.success() {
        bail!("lhc {} failed: {status}", args.join(" "));
    }
    Ok(())
}

fn output(exe: &std::path::Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(exe)
        .args(args)
        .output()
        .with_context(|| format!("running lhc {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "lhc {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Bytes of the files in a folder (not below it).
fn dir_bytes(dir: &std::path::Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}
