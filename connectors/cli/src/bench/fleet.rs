//! `lhc bench fleet`: many sites on one Kafka cluster (librdkafka's mock cluster), each
//! folded on a thread of its own, next to the same sites folded one after another on one
//! thread: the speed-up per core of `--all-sites`.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use lhc_log::{KafkaLog, KafkaOptions, Log};
use lhc_replay::fleet::{discover, each_site, summarize, Fleet, SiteSummary};

/// Runs the benchmark: `sites` sites of `vdas` VDAs for `hours`, one partition each.
pub fn run(sites: usize, vdas: usize, hours: u64) -> anyhow::Result<ExitCode> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cluster = lhc_log::MockKafka::new(1).context("starting the mock cluster")?;
    cluster.create_topic(lhc_log::kafka::DEFAULT_TOPIC, sites as i32)?;
    let records = super::site_log(vdas, hours, true);
    println!(
        "lhc bench fleet: {sites} sites of {vdas} VDAs for {hours} h ({} records each), one \
         partition each, on librdkafka's mock cluster; {cores} core(s)",
        records.len()
    );
    let options = KafkaOptions::new(cluster.bootstrap_servers(), "");
    // Names that Kafka's partitioner spreads one per partition (the mock cluster keeps a
    // few MB per partition, so two sites sharing one would lose records).
    let mut names = Vec::new();
    let mut taken = std::collections::BTreeSet::new();
    for n in 0.. {
        if names.len() == sites {
            break;
        }
        let name = format!("site-{n:03}");
        if taken.insert(lhc_log::kafka::site_partition(&name, sites as i32)) {
            names.push(name);
        }
    }
    let started = Instant::now();
    for name in &names {
        let mut site_options = options.clone();
        site_options.site = name.clone();
        let log = KafkaLog::open(site_options)?;
        for chunk in records.chunks(10_000) {
            let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            log.append(&refs)?;
        }
    }
    println!(
        "appended {} records in {:.1} s",
        records.len() * sites,
        started.elapsed().as_secs_f64()
    );
    let fleet = discover(&options)?;
    if fleet.sites.len() != sites {
        bail!(
            "found {} sites, appended {sites}: {:?}",
            fleet.sites.len(),
            fleet.sites
        );
    }
    let (one, one_s, one_cpu) = timed(&options, &fleet, 1)?;
    let (all, all_s, all_cpu) = timed(&options, &fleet, cores)?;
    if one != all {
        bail!("the digests differ between 1 and {cores} threads: the fold is not deterministic");
    }
    let speedup = one_s / all_s;
    println!(
        "1 thread:     {one_s:6.2} s, {one_cpu:.2} s of CPU ({:.0} % of a core: the rest is \
         waiting on Kafka fetches and client set-up, which threads also overlap)",
        100.0 * one_cpu / one_s
    );
    println!(
        "{cores} thread(s):  {all_s:6.2} s, {all_cpu:.2} s of CPU (same digest for every site)"
    );
    println!(
        "speed-up {speedup:.2} on {cores} core(s): {:.2} per core (1.00 would be linear)",
        speedup / cores as f64
    );
    Ok(ExitCode::SUCCESS)
}

/// CPU seconds this process has used (user and system, every thread, the mock cluster's
/// included).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Folds every site with `threads` threads; the summaries, the seconds it took and the CPU
/// seconds it used.
fn timed(
    options: &KafkaOptions,
    fleet: &Fleet,
    threads: usize,
) -> anyhow::Result<(Vec<SiteSummary>, f64, f64)> {
    let cpu = cpu_seconds();
    let started = Instant::now();
    let results = each_site(
        options,
        fleet,
        threads,
        |site, source| summarize(site, source, |_| {}),
        |_| {},
    );
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    let summaries = results
        .into_iter()
        .map(|(site, r)| r.with_context(|| format!("site {site}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((summaries, seconds, cpu))
}
