//! `lhc demo`: the README's first command. Simulates a site through an outage into the
//! embedded log under `./lhc-demo/`, replays it, prints what happened and writes the HTML
//! reports. `--example` imports the small bundled example instead and prints every output.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use lhc_log::{EmbeddedLog, EmbeddedOptions, FsyncPolicy, Log};

/// The example: a two-connector site through a 30-minute cloud outage.
const EXAMPLE: &str = include_str!("../../../../docs/examples/site-outage.jsonl");

/// Options of `lhc demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Working directory; its `log/` is replaced on each run (only a log the demo wrote:
    /// it leaves a `.lhc-demo` file in it; any other log is refused, never replaced).
    #[arg(long, default_value = "lhc-demo")]
    dir: PathBuf,
    /// Import the small bundled example (two connectors, one outage) and print every
    /// output, instead of simulating a site.
    #[arg(long)]
    example: bool,
}

/// Runs the demo.
pub fn run(args: DemoArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    if !args.example {
        return simulated(&args.dir, quiet);
    }
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
                .entry(crate::commands::replay::table_fields(output).2)
                .or_default() += 1;
            println!("{}", crate::commands::replay::table_line(output));
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

/// The simulated demo: 2 zones x 2,000 VDAs, 3 connectors per zone, 2 hours with a
/// 40-minute cloud outage, the elected broker of zone 1 stopped and restarted during it,
/// zone 2's first connector powered off before it and on during it, and a configuration
/// change with a dangling reference before it: both restart cases of R-STATE-10.
fn simulated(dir: &Path, quiet: bool) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let log_dir = dir.join("log");
    remove_previous_log(&log_dir)?;
    let options = lhc_replay::SimOptions {
        seed: 2026,
        zones: 2,
        connectors_per_zone: 3,
        vdas_per_zone: 2_000,
        users: 4_000,
        hours: 2.0,
        logon_rate: 1.0,
        scenarios: vec![
            lhc_replay::Scenario::BadConfig {
                at_s: 20 * 60,
                kind: lhc_replay::BadConfig::DanglingReference,
            },
            lhc_replay::Scenario::CloudOutage {
                start_s: 30 * 60,
                duration_s: 40 * 60,
            },
            // Restarted during the outage: it comes back as the broker (failback).
            lhc_replay::Scenario::ConnectorStop {
                connector: "cc1.z1.sim.example".into(),
                start_s: 45 * 60,
                duration_s: 10 * 60,
            },
            // Powered off in normal operations, on during the outage: the blackout.
            lhc_replay::Scenario::ConnectorStop {
                connector: "cc1.z2.sim.example".into(),
                start_s: 10 * 60,
                duration_s: 40 * 60,
            },
        ],
        ..lhc_replay::SimOptions::default()
    };
    let log = EmbeddedLog::open(
        &log_dir,
        EmbeddedOptions {
            fsync: FsyncPolicy::Never,
            ..EmbeddedOptions::default()
        },
    )
    .with_context(|| format!("creating {}", log_dir.display()))?;
    let bar = crate::progress::bar(Some(1000), "simulate", quiet);
    let mut pending: Vec<Vec<u8>> = Vec::new();
    let mut sink = |bytes: &[u8]| -> Result<(), String> {
        pending.push(bytes.to_vec());
        if pending.len() >= 10_000 {
            let refs: Vec<&[u8]> = pending.iter().map(Vec::as_slice).collect();
            log.append(&refs).map_err(|e| e.to_string())?;
            pending.clear();
        }
        Ok(())
    };
    let records = lhc_replay::Simulator::new(options)?
        .run(&mut sink, &mut |f| bar.set_position((f * 1000.0) as u64))
        .map_err(anyhow::Error::msg)?;
    let refs: Vec<&[u8]> = pending.iter().map(Vec::as_slice).collect();
    log.append(&refs)?;
    drop(log);
    bar.finish_and_clear();

    let open = || -> anyhow::Result<lhc_replay::Source> {
        Ok(lhc_replay::Source::from_log(Box::new(
            EmbeddedLog::open_read_only(&log_dir)?,
        ))?)
    };
    let outage = lhc_replay::outage_report(&mut open()?)?;
    let sync = lhc_replay::sync_forensics(&mut open()?)?;
    let helped = most_helpful_whatif(&log_dir)?;
    let outage_html = dir.join("outage-report.html");
    let sync_html = dir.join("sync-forensics.html");
    std::fs::write(&outage_html, crate::render::outage::page(&outage, None))?;
    std::fs::write(&sync_html, crate::commands::forensics::html(&sync))?;
    if quiet {
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "Simulated 2 hours of a site — 2 zones x 3 Cloud Connectors, 4,000 VDAs, 4,000 users, \
         a logon a second — into {} ({records} records).",
        log_dir.display()
    );
    println!(
        "Scenario: at 09:20 a config change adds a machine whose delivery group does not exist \
         (imports fail: 505); at 09:10 cc1.z2, the first connector of zone 2, is powered off; at \
         09:30 the cloud becomes unreachable for 40 minutes; at 09:45 the elected broker of \
         zone 1 (cc1.z1) stops, and at 09:55 it is started again while the outage goes on; at \
         09:50 cc1.z2 is powered on, also during the outage.\n"
    );
    println!("== Why imports failed (lhc forensics sync, root causes) ==");
    print!("{}", crate::commands::forensics::root_causes(&sync));
    println!("\n== What the outage looked like (lhc report outage) ==");
    print!("{}", crate::commands::report::summary(&outage, None));
    println!(
        "\nReading it: the two restarts end differently (R-STATE-10). Zone 1 failed over to \
         cc2.z1 when cc1.z1 stopped; cc1.z1 had been stopped in LHC mode, so when it came back \
         during the outage its snapshot was still usable: its peers elected it again, it \
         re-entered LHC mode and brokered again, and the VDAs re-registered with it (failback, \
         with its registration churn). Zone 2 entered LHC mode with cc2.z2 as broker; cc1.z2 \
         had been powered off in normal operations, so when it was powered on during the \
         outage its first check failed and its snapshot could not be trusted: its peers \
         elected it anyway (it answers their probes) and it could not broker, so zone 2 \
         brokered nothing until the cloud returned — the seeds' advice not to power on a \
         connector that was off before the outage."
    );
    println!(
        "\nHTML reports: {} and {}\nNext: `lhc query {} --at 2026-01-05T09:50:00Z`, \
         `lhc replay {} --format table | less`.",
        outage_html.display(),
        sync_html.display(),
        log_dir.display(),
        log_dir.display()
    );
    // A timing, so stderr: stdout is the same every run (found by hostile testing).
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    // Last: the what-if that would have helped most, to run next.
    let (command, whatif, tried) = helped;
    println!("\n== What would have helped most (lhc whatif) ==");
    for (other, rescued, lost) in tried {
        println!(
            "tried: {other}\n       rescues {rescued} refused launch(es), refuses {lost} that were brokered"
        );
    }
    println!("\nbest: {command}\n\n{}", whatif.verdict);
    Ok(ExitCode::SUCCESS)
}

/// A what-if the demo tried: its command line, launches it rescues, launches it refuses.
type Tried = (String, u64, u64);

/// The candidate what-ifs of the demo's scenario, each a fix an admin could have made, and
/// the one that would have rescued most refused launches (fewest made worse on a tie):
/// its command line, its comparison, and the others' command lines with their rescues.
fn most_helpful_whatif(log_dir: &Path) -> anyhow::Result<(String, lhc_replay::WhatIf, Vec<Tried>)> {
    use lhc_replay::whatif::{
        check, compare, replay_modified, replay_side, without_bad_changes, SideOptions,
    };
    // One opener for every replay here (the library's `without_bad_changes` takes it).
    let open = || -> Result<lhc_replay::Source, lhc_replay::SourceError> {
        lhc_replay::Source::from_log(Box::new(EmbeddedLog::open_read_only(log_dir)?))
    };
    let mut source = open()?;
    let description = source.describe().to_string();
    let options = SideOptions {
        forensics: true,
        verify: None,
    };
    let before = replay_side(&mut source, &description, &options)?;
    let log = log_dir.display();
    let reuse = "reuse_machines_without_shutdown_in_outage";
    let mut results = Vec::new();
    let (plan, after, seen, notes) =
        without_bad_changes(open, &description, &before, &lhc_replay::Plan::default())?;
    let mut notes_all = notes;
    notes_all.extend(check(&plan, &seen, &before, &after)?);
    results.push((
        format!("lhc whatif {log} --without-bad-changes"),
        compare(&plan, notes_all, &before, &after),
    ));
    // (Keeping cc1.z2 off is not a candidate: the requests StoreFront sent it would be
    // refused connector_stopped, and where it would have sent them instead is not in the
    // log — docs/whatif.md.)
    let mut candidates: Vec<(String, lhc_replay::Plan)> = Vec::new();
    let mut plan = lhc_replay::Plan::default();
    plan.set_site(&format!("{reuse}_allowed=true"))?;
    plan.set_group(&format!("pool-z1:{reuse}=true"))?;
    plan.set_group(&format!("pool-z2:{reuse}=true"))?;
    candidates.push((
        format!(
            "lhc whatif {log} --site {reuse}_allowed=true --group pool-z1:{reuse}=true \\\n      \
             --group pool-z2:{reuse}=true"
        ),
        plan,
    ));
    for (command, plan) in candidates {
        let (after, seen) =
            replay_modified(open()?, &description, &plan, before.last_offset, false)?;
        let notes = check(&plan, &seen, &before, &after)?;
        results.push((command, compare(&plan, notes, &before, &after)));
    }
    let best = results
        .iter()
        .enumerate()
        .max_by_key(|(i, (_, w))| (w.rescued, std::cmp::Reverse(w.lost), std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
        .expect("two candidates");
    let (command, whatif) = results.remove(best);
    let tried = results
        .into_iter()
        .map(|(c, w)| (c, w.rescued, w.lost))
        .collect();
    Ok((command, whatif, tried))
}

/// The file inside `log/` that says `lhc demo` wrote that log, so the next run may
/// replace it. Inside, not beside: a marker beside `log/` outlived the demo's log and let
/// the next run delete a real log imported there later (found by hostile testing).
const MARKER: &str = ".lhc-demo";

/// Removes the log a previous `lhc demo` wrote at `dir` (it holds the marker), then makes
/// `dir` anew with the marker for the next run. Refuses to delete anything else: a log the
/// demo did not write (an admin's real log given as `--dir`), or a folder holding other
/// files.
fn remove_previous_log(dir: &Path) -> anyhow::Result<()> {
    let work = dir.parent().unwrap_or(Path::new("."));
    if lhc_log::embedded::segment_path(work, 0).exists() {
        bail!(
            "{} is an lhc log directory; the demo writes a log of its own into DIR/log: give \
             it a directory of its own (--dir)",
            work.display()
        );
    }
    let marker = dir.join(MARKER);
    // An empty folder holds nothing to protect (made by hand, or a run that stopped before
    // its marker).
    let empty = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none());
    if dir.exists() && !empty {
        if !marker.is_file() {
            bail!(
                "{} holds a log that `lhc demo` did not write (no {MARKER} in it); not \
                 replacing it: give the demo a directory of its own (--dir), or remove {} \
                 yourself if an earlier lhc's demo wrote it",
                dir.display(),
                dir.display()
            );
        }
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            let of_a_log = name == "LOCK"
                || name == MARKER
                || name == lhc_log::embedded::LOST_FILE
                || name == lhc_log::embedded::COMMIT_FILE
                || lhc_log::embedded::is_cut_file(&name)
                || name == lhc_replay::checkpoint::DIR
                || name.ends_with(".log")
                || name.ends_with(".idx");
            if !of_a_log {
                bail!(
                    "{} holds {name}, which an lhc log does not hold; not replacing it",
                    dir.display()
                );
            }
        }
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("removing the previous demo log {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(
        &marker,
        "lhc demo wrote this log and replaces it on its next run\n",
    )
    .with_context(|| format!("writing {}", marker.display()))
}
