//! One side of a what-if: a replay that keeps what the comparison needs — every launch
//! decision by request id, each zone's LHC episodes (the outage report's), 505s, election
//! changes and stale-snapshot decisions, and the final digest.
//!
//! Invariant: only the engine's outputs and state are read; the side never looks at which
//! records were changed, so both sides are computed the same way.

use std::collections::BTreeMap;

use compact_str::CompactString;
use lhc_engine::event::EventKind;
use lhc_engine::output::{Outcome, Reason, Via};
use lhc_engine::{Engine, Output, Record, Ts};
use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::drive::{After, Before, Flow, Observer, Records};
use crate::forensics::{Found, SyncForensics};
use crate::report::{OutageReport, Reporter};
use crate::source::SourceError;

/// One launch decision, with the request it answered. Names are ids in the side's
/// [`Names`]: a 12-hour site holds some 400,000 decisions per side, and the same few
/// thousand connectors, users, resources and machines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Request time.
    pub ts: Ts,
    /// Connector asked.
    pub connector: u32,
    /// Zone of that connector.
    pub zone: u32,
    /// Who launched.
    pub user: u32,
    /// What.
    pub resource: u32,
    /// Why it was rejected (`None`: brokered).
    pub reason: Option<Reason>,
    /// Rejected without a reason code (not expected; kept apart from brokered).
    pub rejected: bool,
    /// Cloud or LHC.
    pub via: Via,
    /// The machine chosen.
    pub machine: Option<u32>,
    /// The first attempt's request id, when StoreFront retried.
    pub retry_of: Option<CompactString>,
}

impl Decision {
    /// Whether a machine was chosen.
    pub fn brokered(&self) -> bool {
        self.reason.is_none() && !self.rejected
    }

    /// "brokered", or the reason code.
    pub fn outcome(&self) -> String {
        match (self.reason, self.rejected) {
            (Some(r), _) => lhc_engine::engine::snake(&r),
            (None, true) => "rejected".into(),
            (None, false) => "brokered".into(),
        }
    }
}

/// Names by id, each stored once.
#[derive(Debug, Default)]
pub struct Names {
    ids: FxHashMap<CompactString, u32>,
    names: Vec<CompactString>,
}

impl Names {
    /// The id of `name`, given a new one if unseen.
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    /// The name of `id`.
    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// Every launch decision of a side, in log order, and an index by request id.
#[derive(Debug, Default)]
pub struct Decisions {
    /// (request id, decision), in the order decided.
    pub list: Vec<(CompactString, Decision)>,
    index: FxHashMap<CompactString, usize>,
    /// The names the decisions use.
    pub names: Names,
}

impl Decisions {
    /// The decision of `request`, if there was one.
    pub fn get(&self, request: &str) -> Option<&Decision> {
        self.index.get(request).map(|i| &self.list[*i].1)
    }

    /// Decisions in all.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether none was made.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn insert(&mut self, request: &str, decision: Decision) {
        // A request id the log holds twice: the second is "id#2", and so on, so both
        // sides number the same requests alike and none is lost.
        let mut key = CompactString::from(request);
        let mut n = 1;
        while self.index.contains_key(&key) {
            n += 1;
            key = compact_str::format_compact!("{request}#{n}");
        }
        self.index.insert(key.clone(), self.list.len());
        self.list.push((key, decision));
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

/// What a side computes besides the comparison.
#[derive(Clone, Debug, Default)]
pub struct SideOptions {
    /// Keep the sync forensics (to find the bad changes).
    pub forensics: bool,
    /// Check the state digest at these offsets (a chain written by `lhc replay
    /// --digest-every`): the replay reproduces the recorded one.
    pub verify: Option<BTreeMap<u64, String>>,
}

/// How a digest chain compared with a replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// Links compared.
    pub links: u64,
    /// Links of the chain past the end of the replay.
    pub unreached: u64,
    /// Records of the replay after the chain's last link: not verified (a chain written
    /// from a shorter log, or cut).
    pub unverified: u64,
    /// The first link that differs: (offset, digest in the chain, digest of the replay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<(u64, String, String)>,
}

/// What one replay produced.
#[derive(Debug)]
pub struct Side {
    /// Digest of the engine state after the last record.
    pub digest: String,
    /// Records applied.
    pub records: u64,
    /// Offset of the last record applied.
    pub last_offset: Option<u64>,
    /// The digest chain check, when asked for.
    pub verified: Option<Verified>,
    /// Records quarantined: (offset, error), in order.
    pub quarantined: Vec<(u64, String)>,
    /// Every launch decision, by request id.
    pub decisions: Decisions,
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
    decisions: Decisions,
    zones: BTreeMap<String, ZoneCounts>,
    quarantined: Vec<(u64, String)>,
    last_offset: Option<u64>,
    verify: Option<BTreeMap<u64, String>>,
    verified: Verified,
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

    fn during(&mut self, step: After<'_>) -> Result<(), SourceError> {
        for output in step.outputs.iter() {
            self.observe(step.engine, step.offset, output);
        }
        if let Some(found) = self.found.as_mut() {
            found.during(After {
                engine: step.engine,
                offset: step.offset,
                outputs: step.outputs,
            })?;
        }
        self.reporter.during(step)
    }

    fn after(&mut self, step: After<'_>) -> Result<(), SourceError> {
        let engine = step.engine;
        self.last_offset = Some(step.offset);
        for output in step.outputs.iter() {
            self.observe(engine, step.offset, output);
        }
        if let Some(expected) = self.verify.as_ref().and_then(|v| v.get(&step.offset)) {
            self.verified.links += 1;
            let digest = engine.digest();
            if self.verified.first_difference.is_none() && digest != *expected {
                self.verified.first_difference = Some((step.offset, expected.clone(), digest));
            }
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
                let (reason, rejected) = match d.outcome {
                    Outcome::Brokered => (None, false),
                    Outcome::Rejected => (d.reason, d.reason.is_none()),
                };
                let names = &mut self.decisions.names;
                let decision = Decision {
                    ts: d.ts,
                    connector: names.id(&d.connector),
                    zone: names.id(&zone),
                    user: names.id(&user),
                    resource: names.id(&resource),
                    reason,
                    rejected,
                    via: d.via,
                    machine: d.machine.as_deref().map(|m| names.id(m)),
                    retry_of: retry_of.map(CompactString::from),
                };
                self.decisions.insert(&d.request, decision);
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
    options: &SideOptions,
) -> Result<Side, SourceError> {
    let mut watcher = Watcher {
        reporter: Reporter::default(),
        found: options.forensics.then(Found::default),
        last_offset: None,
        verify: options.verify.clone(),
        verified: Verified {
            links: 0,
            unreached: 0,
            unverified: 0,
            first_difference: None,
        },
        launch: None,
        decisions: Decisions::default(),
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
        last_offset,
        verify,
        mut verified,
        ..
    } = watcher;
    let verified = verify.map(|chain| {
        verified.unreached = chain.range(last_offset.map_or(0, |o| o + 1)..).count() as u64;
        if let (Some(last), Some((&linked, _))) = (last_offset, chain.last_key_value()) {
            verified.unverified = last.saturating_sub(linked);
        }
        verified
    });
    Ok(Side {
        digest,
        records: records_applied,
        last_offset,
        verified,
        quarantined,
        decisions,
        zones,
        report: reporter.finish(description.to_string()),
        forensics: found.map(|f| f.finish(description.to_string())),
    })
}
