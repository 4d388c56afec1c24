//! Many sites on one Kafka cluster: every site of a topic folded on a thread of its own
//! (`lhc replay|report|lint|forensics --kafka B --all-sites`).
//!
//! A site is its message key and lives in one partition (R-LOG-1). The sites are found by
//! reading the topic's keys once ([`lhc_log::kafka::topic_sites`]); then each site is
//! replayed from its own reader, exactly as `--site NAME` replays it, so a site's digest
//! and answers are the same whether it is replayed alone or with the fleet.
//!
//! Invariant: results come back in site-name order whatever the number of threads and
//! however the threads interleave; a site's work sees only that site's records.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use lhc_engine::output::{EventSource, Outcome};
use lhc_engine::{Engine, Output};
use lhc_log::kafka::{topic_sites, TopicSite};
use lhc_log::KafkaOptions;
use serde::Serialize;

use crate::run::{replay, ReplayOptions};
use crate::source::{Source, SourceError, SourceSpec};

/// The sites of a topic, in name order, with what to say about the topic.
#[derive(Clone, Debug, Default)]
pub struct Fleet {
    /// Each site and its partition.
    pub sites: Vec<TopicSite>,
    /// Records without a key, or with one that is not UTF-8 text: no site's.
    pub unkeyed: u64,
    /// Sites found only in a partition other than the one Kafka's partitioner gives them
    /// (written by a producer with another partitioner): `(site, found, expected)`. Their
    /// records are not read.
    pub misplaced: Vec<(String, i32, i32)>,
    /// Sites whose records sit in more than one partition (partitions were added after
    /// the site started): only the partition Kafka's partitioner gives them is read.
    pub split: Vec<String>,
}

/// Finds the sites of the topic `options` names (its `site` is ignored).
pub fn discover(options: &KafkaOptions) -> Result<Fleet, SourceError> {
    let (found, unkeyed, partitions) = topic_sites(options)?;
    let mut sites: Vec<TopicSite> = Vec::new();
    let mut split = Vec::new();
    let mut misplaced = Vec::new();
    for site in &found {
        let expected = lhc_log::kafka::site_partition(&site.site, partitions);
        if !found
            .iter()
            .any(|s| s.site == site.site && s.partition == expected)
            && !misplaced.iter().any(|(s, _, _)| s == &site.site)
        {
            misplaced.push((site.site.clone(), site.partition, expected));
        }
    }
    for site in found {
        match sites.last_mut() {
            Some(last) if last.site == site.site => {
                if !split.contains(&site.site) {
                    split.push(site.site.clone());
                }
                last.records += site.records;
            }
            _ => sites.push(site),
        }
    }
    Ok(Fleet {
        sites,
        unkeyed,
        split,
        misplaced,
    })
}

/// Runs `work` on every site of `fleet`, at most `threads` sites at once, each from its own
/// source; returns each site's result in site-name order. `done` is called as each site
/// finishes (for progress).
pub fn each_site<T: Send>(
    options: &KafkaOptions,
    fleet: &Fleet,
    threads: usize,
    work: impl Fn(&str, &mut Source) -> Result<T, SourceError> + Sync,
    done: impl Fn(&str) + Sync,
) -> Vec<(String, Result<T, SourceError>)> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<T, SourceError>>>> =
        Mutex::new((0..fleet.sites.len()).map(|_| None).collect());
    // Closing a Kafka reader waits for librdkafka's threads (about 0.1 s per client): done
    // on threads of their own, so a worker moves on to its next site at once.
    let closing = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, fleet.sites.len().max(1)) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(site) = fleet.sites.get(index) else {
                    return;
                };
                let mut options = options.clone();
                options.site = site.site.clone();
                let result = Source::open(&SourceSpec::Kafka(options)).and_then(|mut source| {
                    let result = work(&site.site, &mut source);
                    let closer = std::thread::Builder::new()
                        .name("lhc-close".into())
                        .spawn(move || drop(source));
                    if let Ok(handle) = closer {
                        closing.lock().expect("closing").push(handle);
                    }
                    result
                });
                results.lock().expect("results")[index] = Some(result);
                done(&site.site);
            });
        }
    });
    for handle in closing.into_inner().expect("closing") {
        let _ = handle.join();
    }
    fleet
        .sites
        .iter()
        .zip(results.into_inner().expect("results"))
        .map(|(site, result)| (site.site.clone(), result.expect("every site ran")))
        .collect()
}

/// One site of the fleet summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SiteSummary {
    /// The site.
    pub site: String,
    /// Records replayed.
    pub records: u64,
    /// Of those, quarantined.
    pub quarantined: u64,
    /// State digest after the last record (as `lhc replay --digest` prints it).
    pub digest: String,
    /// Connectors in LHC mode after the last record, in id order.
    pub in_lhc: Vec<String>,
    /// Failed config imports (events 505).
    pub failed_imports: u64,
    /// Launch decisions.
    pub launches: u64,
    /// Of those, rejected.
    pub failed_launches: u64,
}

/// Replays one site and sums it up; each output also goes to `each` (to be written out).
pub fn summarize(
    site: &str,
    source: &mut Source,
    mut each: impl FnMut(&Output),
) -> Result<SiteSummary, SourceError> {
    let mut engine = Engine::new();
    let mut summary = SiteSummary {
        site: site.to_string(),
        ..SiteSummary::default()
    };
    let totals = replay(
        source,
        &mut engine,
        &ReplayOptions::default(),
        |_, output| -> Result<(), SourceError> {
            match output {
                Output::Event(e)
                    if e.source == EventSource::ConfigSyncService && e.event_id == 505 =>
                {
                    summary.failed_imports += 1
                }
                Output::LaunchDecision(d) => {
                    summary.launches += 1;
                    if d.outcome == Outcome::Rejected {
                        summary.failed_launches += 1;
                    }
                }
                _ => {}
            }
            each(output);
            Ok(())
        },
    )?;
    summary.records = totals.records;
    summary.quarantined = source.quarantined();
    summary.digest = engine.digest();
    summary.in_lhc = engine
        .connector_summaries()
        .into_iter()
        .filter(|c| c.state.in_lhc())
        .map(|c| c.connector.to_string())
        .collect();
    Ok(summary)
}
