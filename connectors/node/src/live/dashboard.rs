//! The node's live dashboard (`GET /`): this connector's zone over the last hours of log
//! time — each connector's state as a lane, who it sees elected, registrations, launch
//! decisions per minute by reason, the configuration version and the last sync result —
//! updated by server-sent events (`GET /dashboard/events`) as the fold applies records.
//!
//! Invariant: the history is what the fold's outputs said (events and decisions), bounded
//! to [`WINDOW_MS`] of log time; nothing here decides, and the page makes no request to
//! any other host.

use std::collections::BTreeMap;

use lhc_engine::engine::snake;
use lhc_engine::event::EventKind;
use lhc_engine::output::{ConnectorState, LaunchDecision, Outcome};
use lhc_engine::{Engine, Output, Ts};
use schemars::JsonSchema;
use serde::Serialize;

/// How much log time the dashboard keeps: six hours.
pub const WINDOW_MS: i64 = 6 * 3600 * 1000;
const MINUTE_MS: i64 = 60_000;

/// The page: HTML, CSS and script in one file, no external requests.
pub const PAGE: &str = include_str!("dashboard.html");

/// One stretch of a connector's lane.
#[derive(Clone, Debug, Serialize, JsonSchema)]
struct Segment {
    /// When it began.
    from: Ts,
    /// Its state.
    state: ConnectorState,
    /// Brokering (in LHC mode and elected in its own view) during it.
    brokering: bool,
}

/// Launch decisions of one minute: brokered and each rejection reason.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
struct Minute {
    /// Start of the minute.
    minute: i64,
    /// Count by "brokered" or reason.
    counts: BTreeMap<String, u64>,
}

/// The last configuration sync result of this connector.
#[derive(Clone, Debug, Serialize, JsonSchema)]
struct Sync {
    /// When (`None`: read from the state the node started from, not seen happen).
    ts: Option<Ts>,
    /// "imported" or "failed".
    result: &'static str,
    /// The version imported or refused.
    version: u64,
    /// The version kept after a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    kept: Option<u64>,
    /// The 505's failures in words: object, rule and detail.
    failures: Vec<String>,
}

/// A 505's failure in words: object, detail, rule, and the offset that introduced it.
fn failure_text(x: &lhc_engine::output::ImportFailure) -> String {
    format!(
        "{} {}: {} ({}, introduced at offset {})",
        snake(&x.kind),
        x.id,
        x.detail,
        snake(&x.rule),
        x.introduced_by.offset
    )
}

/// The sync result the state implies: the current version in use, or refused (its
/// validation failed) with the snapshot kept.
fn state_sync(engine: &Engine, c: &lhc_engine::engine::Connector) -> Option<Sync> {
    let current = engine.site().version;
    if current == 0 {
        return None;
    }
    if c.snapshot() == Some(current) {
        return Some(Sync {
            ts: None,
            result: "imported",
            version: current,
            kept: None,
            failures: Vec::new(),
        });
    }
    match engine.validations().get(&current) {
        Some(lhc_engine::engine::Validation::Invalid(failures)) => Some(Sync {
            ts: None,
            result: "failed",
            version: current,
            kept: c.snapshot(),
            failures: failures.iter().map(failure_text).collect(),
        }),
        _ => None,
    }
}

/// The zone's recent history, as the fold saw it.
#[derive(Debug, Default)]
pub struct History {
    /// Each zone connector's lane, oldest first.
    lanes: BTreeMap<String, Vec<Segment>>,
    /// Election changes this connector saw: (time, elected).
    elections: Vec<(Ts, Option<String>)>,
    /// Registrations per zone connector, sampled once per minute of log time.
    registrations: Vec<(i64, BTreeMap<String, usize>)>,
    /// Launch decisions of the zone's connectors per minute.
    minutes: Vec<Minute>,
    /// Latest sync result.
    sync: Option<Sync>,
    /// Log time of the latest record folded.
    now: Option<Ts>,
    /// Updates applied, so a page can tell it is live.
    pub updates: u64,
}

impl History {
    /// Folds the outputs of one record into the history; `me` is this connector's id.
    pub fn observe(&mut self, engine: &Engine, me: &str, outputs: &[Output]) {
        let Some(now) = engine.now() else { return };
        let minute = now.millis() - now.millis().rem_euclid(MINUTE_MS);
        let sample_due = self.registrations.last().is_none_or(|(m, _)| *m < minute);
        if outputs.is_empty() && !sample_due && !self.lanes.is_empty() {
            // Most records (heartbeats, checks) change nothing shown: the cheap path, as
            // this runs for every record of the catch-up at start.
            self.now = Some(now);
            self.updates += 1;
            return;
        }
        let Some(me) = engine.site().connector_id(me) else {
            return;
        };
        let Some(zone) = engine.site().connector_zone(me).map(str::to_string) else {
            return;
        };
        self.now = Some(now);
        let in_zone = |c: &str| {
            engine
                .connectors()
                .get(c)
                .is_some_and(|c| c.zone().eq_ignore_ascii_case(&zone))
        };
        for output in outputs {
            match output {
                Output::Event(e) if in_zone(&e.connector) => match e.kind() {
                    Some(EventKind::StateChanged(_)) | Some(EventKind::ElectionView(_)) => {
                        self.lane_change(engine, &e.connector, e.ts);
                        if let (Some(EventKind::ElectionView(v)), true) =
                            (e.kind(), e.connector == me)
                        {
                            self.elections.push((e.ts, v.elected));
                        }
                    }
                    Some(EventKind::Imported(i)) if e.connector == me => {
                        self.sync = Some(Sync {
                            ts: Some(e.ts),
                            result: "imported",
                            version: i.version,
                            kept: None,
                            failures: Vec::new(),
                        });
                    }
                    Some(EventKind::ImportFailed(f)) if e.connector == me => {
                        self.sync = Some(Sync {
                            ts: Some(e.ts),
                            result: "failed",
                            version: f.version,
                            kept: f.fallback_version,
                            failures: f.failures.iter().map(failure_text).collect(),
                        });
                    }
                    _ => {}
                },
                Output::LaunchDecision(d) if in_zone(&d.connector) => self.count(d),
                _ => {}
            }
        }
        if sample_due {
            self.trim(now);
            let counts = engine
                .connectors()
                .iter()
                .filter(|(name, _)| in_zone(name))
                .map(|(name, c)| (name.clone(), c.registrations().len()))
                .collect();
            self.registrations.push((minute, counts));
        }
        for (name, c) in engine.connectors() {
            if in_zone(name) && !self.lanes.contains_key(name) {
                self.lanes.insert(
                    name.clone(),
                    vec![Segment {
                        from: c.state_since(),
                        state: c.state(),
                        brokering: c.brokering(),
                    }],
                );
            }
        }
        self.updates += 1;
    }

    /// A connector's state or brokering changed: a new segment of its lane.
    fn lane_change(&mut self, engine: &Engine, connector: &str, ts: Ts) {
        let Some(c) = engine.connectors().get(connector) else {
            return;
        };
        let lane = self.lanes.entry(connector.to_string()).or_default();
        let (state, brokering) = (c.state(), c.brokering());
        if lane
            .last()
            .is_some_and(|s| s.state == state && s.brokering == brokering)
        {
            return;
        }
        if lane.last().is_some_and(|s| s.from == ts) {
            lane.pop();
        }
        lane.push(Segment {
            from: ts,
            state,
            brokering,
        });
    }

    fn count(&mut self, d: &LaunchDecision) {
        let minute = d.ts.millis() - d.ts.millis().rem_euclid(MINUTE_MS);
        if self.minutes.last().is_none_or(|m| m.minute < minute) {
            self.minutes.push(Minute {
                minute,
                counts: BTreeMap::new(),
            });
        }
        let key = match (d.outcome, d.reason) {
            (Outcome::Brokered, _) => "brokered".to_string(),
            (_, Some(reason)) => snake(&reason),
            (_, None) => snake(&d.outcome),
        };
        let last = self.minutes.last_mut().expect("pushed");
        *last.counts.entry(key).or_default() += 1;
    }

    /// Drops what is older than the window (a lane keeps the segment in force at its
    /// start).
    fn trim(&mut self, now: Ts) {
        let start = now.millis() - WINDOW_MS;
        for lane in self.lanes.values_mut() {
            let keep_from = lane
                .iter()
                .rposition(|s| s.from.millis() <= start)
                .unwrap_or(0);
            lane.drain(..keep_from);
        }
        let old = self
            .elections
            .iter()
            .take_while(|(t, _)| t.millis() < start);
        let n = old.count().saturating_sub(1);
        self.elections.drain(..n);
        self.registrations.retain(|(m, _)| *m >= start);
        self.minutes.retain(|m| m.minute >= start);
    }

    /// The dashboard's data: the history plus the zone's connectors as they are now.
    pub fn state<'a>(&'a self, engine: &'a Engine, me: &'a str) -> DashboardState<'a> {
        let me = engine.site().connector_id(me).unwrap_or(me);
        let zone = engine.site().connector_zone(me).unwrap_or_default();
        let connectors: Vec<_> = engine
            .connector_summaries()
            .into_iter()
            .filter(|c| c.zone.eq_ignore_ascii_case(zone))
            .collect();
        let mine = engine.connectors().get(me);
        // Nothing seen happen since the start (a restart from the snapshot): what the state
        // says about the current version.
        let last_sync = self.sync.clone().or_else(|| state_sync(engine, mine?));
        DashboardState {
            connector: me,
            zone,
            configured: mine.is_some(),
            now: self.now,
            window_ms: WINDOW_MS,
            updates: self.updates,
            site_version: engine.site().version,
            snapshot_version: mine.and_then(|c| c.snapshot()),
            connectors,
            lanes: &self.lanes,
            elections: &self.elections,
            registrations: &self.registrations,
            launches_per_minute: &self.minutes,
            last_sync,
        }
    }
}

/// What the dashboard shows (`GET /dashboard/state`, and each server-sent event).
#[derive(Serialize, JsonSchema)]
pub struct DashboardState<'a> {
    /// This connector.
    connector: &'a str,
    /// Its zone (lowercase id; empty while no configuration names it).
    zone: &'a str,
    /// A configuration names this connector.
    configured: bool,
    /// Log time of the latest record folded.
    now: Option<Ts>,
    /// How much log time the history keeps, ms.
    window_ms: i64,
    /// Records folded into the history.
    updates: u64,
    /// The site configuration's version.
    site_version: u64,
    /// This connector's snapshot version.
    snapshot_version: Option<u64>,
    /// The zone's connectors as they are now.
    connectors: Vec<lhc_engine::view::ConnectorSummary<'a>>,
    /// Each zone connector's lane, oldest segment first.
    lanes: &'a BTreeMap<String, Vec<Segment>>,
    /// Election changes this connector saw: (time, elected).
    elections: &'a Vec<(Ts, Option<String>)>,
    /// Registrations per zone connector, once per minute: (minute, counts).
    registrations: &'a Vec<(i64, BTreeMap<String, usize>)>,
    /// Launch decisions of the zone's connectors per minute.
    launches_per_minute: &'a Vec<Minute>,
    /// The latest sync result of this connector.
    last_sync: Option<Sync>,
}
