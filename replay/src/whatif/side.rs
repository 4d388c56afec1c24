//! One side of a what-if: a replay that keeps what the comparison needs — every launch
//! decision by request id, each zone's LHC episodes (the outage report's), 505s, election
//! changes and stale-snapshot decisions, and the final digest.
//!
//! Invariant: only the engine's outputs and state are read; the side never looks at which
//! records were changed, so both sides are computed the same way.

use std::collections::BTreeMap;

use lhc_engine::event::EventKind;
use lhc_engine::output::{Outcome, Via};
use lhc_engine::{Engine, Output, Record, Ts};
use serde::Serialize;

use crate::drive::{After, Before, Flow, Observer, Records};
use crate::forensics::{Found, SyncForensics};
use crate::report::{OutageReport, Reporter};
use crate::source::SourceError;

/// One launch decision, with the request it answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Request time.
    pub ts: Ts,
    /// Connector asked.
    pub connector: String,
    /// Zone of that connector.
    pub zone: String,
    /// Who launched.
    pub user: String,
    /// What.
    pub resource: String,
    /// "brokered", or the rejection reason.
    pub outcome: String,
    /// "cloud" or "lhc".
    pub via: String,
    /// The machine chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The first attempt's request id, when StoreFront retried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
}

impl Decision {
    /// Whether a machine was chosen.
    pub fn brokered(&self) -> bool {
        self.outcome == "brokered"
    }
}

/// Counts per zone that the outage report does not keep.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ZoneCounts {
    /// Failed imports (505) by the zone's connectors.
    pub import_failures: u64,
    /// Election view changes (3504) of the zone's connectors, the whole log.
    pub elections: u64,
    /// LHC-mode launches decided on a snapshot older than the site's configuration.
    pub decided_on_stale: u64,
}

/// What one replay produced.
#[derive(Debug)]
pub struct Side {
    /// Digest of the engine state after the last record.
    pub digest: String,
    /// Records applied.
    pub records: u64,
    /// Records quarantined: (offset, error), in order.
    pub quarantined: Vec<(u64, String)>,
    /// Every launch decision, by request id.
    pub decisions: BTreeMap<String, Decision>,
    /// Per zone counts.
    pub zones: BTreeMap<String, ZoneCounts>,
    /// The outage report of this replay.
    pub report: OutageReport,
    /// The sync forensics, when asked for.
    pub forensics: Option<SyncForensics>,
}

/// The side as a replay observer.
struct Watcher {
    reporter: Reporter,
    found: Option<Found>,
    /// The launch request being applied: (request, user, resource, retry_of).
    launch: Option<(String, String, String, Option<String>)>,
    decisions: BTreeMap<String, Decision>,
    zones: BTreeMap<String, ZoneCounts>,
    quarantined: Vec<(u64, String)>,
}

impl Observer for Watcher {
    type Error = SourceError;

    fn before(&mut self, step: Before<'_>) -> Result<Flow, SourceError> {
        self.launch = match step.record {
            Ok(Record::LaunchRequest(l)) => Some((
                l.request.clone(),
                l.user.clone(),
                l.resource.clone(),
                l.retry_of.clone(),
            )),
            _ => None,
        };
        let offset = step.offset;
        if let Some(found) = self.found.as_mut() {
            found.before(Before {
                engine: step.engine,
                offset,
                record: step.record,
            })?;
        }
        self.reporter.before(step)
    }

    fn after(&mut self, step: After<'_>) -> Result<(), SourceError> {
        let engine = step.engine;
        for output in step.outputs.iter() {
            self.observe(engine, step.offset, output);
        }
        if let Some(found) = self.found.as_mut() {
            found.after(After {
                engine,
                offset: step.offset,
                outputs: step.outputs,
            })?;
        }
        self.reporter.after(step)
    }
}

impl Watcher {
    fn observe(&mut self, engine: &Engine, offset: u64, output: &Output) {
        let zone_of = |connector: &str| {
            engine
                .connectors()
                .get(connector)
                .map(|c| c.zone().to_string())
                .unwrap_or_default()
        };
        match output {
            Output::LaunchDecision(d) => {
                let zone = zone_of(&d.connector);
                let (user, resource, retry_of) = match self.launch.take() {
                    Some((request, user, resource, retry_of)) if request == d.request => {
                        (user, resource, retry_of)
                    }
                    other => {
                        self.launch = other;
                        (String::new(), String::new(), None)
                    }
                };
                if d.via == Via::Lhc {
                    let stale = engine
                        .connectors()
                        .get(&d.connector)
                        .and_then(|c| c.snapshot())
                        .is_some_and(|v| v < engine.site().version);
                    if stale {
                        self.zones.entry(zone.clone()).or_default().decided_on_stale += 1;
                    }
                }
                let outcome = match (d.outcome, d.reason) {
                    (Outcome::Brokered, _) => "brokered".to_string(),
                    (Outcome::Rejected, Some(reason)) => lhc_engine::engine::snake(&reason),
                    (Outcome::Rejected, None) => "rejected".to_string(),
                };
                self.decisions.insert(
                    d.request.clone(),
                    Decision {
                        ts: d.ts,
                        connector: d.connector.clone(),
                        zone,
                        user,
                        resource,
                        outcome,
                        via: lhc_engine::engine::snake(&d.via),
                        machine: d.machine.clone(),
                        retry_of,
                    },
                );
            }
            Output::Event(e) if e.event_id == 505 || e.event_id == 3504 => {
                let zone = zone_of(&e.connector);
                match e.kind() {
                    Some(EventKind::ImportFailed(_)) => {
                        self.zones.entry(zone).or_default().import_failures += 1;
                    }
                    Some(EventKind::ElectionView(_)) => {
                        self.zones.entry(zone).or_default().elections += 1;
                    }
                    _ => {}
                }
            }
            Output::Quarantine(q) => self.quarantined.push((offset, q.error.clone())),
            _ => {}
        }
    }
}

/// Replays `records` from an empty engine and keeps what a what-if compares.
pub fn replay_side<R: Records + ?Sized>(
    records: &mut R,
    description: &str,
    forensics: bool,
) -> Result<Side, SourceError> {
    let mut watcher = Watcher {
        reporter: Reporter::default(),
        found: forensics.then(Found::default),
        launch: None,
        decisions: BTreeMap::new(),
        zones: BTreeMap::new(),
        quarantined: Vec::new(),
    };
    let mut engine = Engine::new();
    let records_applied = crate::drive::drive(records, &mut engine, &mut watcher)?;
    let digest = engine.digest();
    let Watcher {
        reporter,
        found,
        decisions,
        zones,
        quarantined,
        ..
    } = watcher;
    Ok(Side {
        digest,
        records: records_applied,
        quarantined,
        decisions,
        zones,
        report: reporter.finish(description.to_string()),
        forensics: found.map(|f| f.finish(description.to_string())),
    })
}
