//! The outage report: every LHC episode of every zone, computed by replaying the log
//! through the engine.
//!
//! Invariant: everything in the report comes from the engine's outputs and state during
//! one replay; nothing is inferred from raw records, so the report says what the brokers
//! decided, not what a second implementation thinks they should have.

use std::collections::BTreeMap;

use lhc_engine::engine::snake;
use lhc_engine::event::EventKind;
use lhc_engine::output::{
    ConnectorState, ElectionViewData, Event, LaunchDecision, Outcome, TransitionData,
};
use lhc_engine::{Engine, Output, Ts};
use serde::Serialize;

use crate::drive::{After, Before, Flow, Observer};
use crate::source::SourceError;

/// A span of one connector's state.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Segment {
    /// Start.
    pub from: Ts,
    /// End (the episode's end for the last one).
    pub to: Ts,
    /// State (snake case) during the span.
    pub state: String,
    /// Whether it brokered (in LHC mode and elected in its own view).
    pub brokering: bool,
}

/// An election view change (3504) during an episode.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ElectionChange {
    /// When.
    pub ts: Ts,
    /// Whose view.
    pub connector: String,
    /// Elected in that view.
    pub elected: Option<String>,
}

/// An interval during which several connectors of a zone brokered at once (R-ELECT-4).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SplitBrain {
    /// Start.
    pub from: Ts,
    /// End.
    pub to: Ts,
    /// The connectors brokering.
    pub brokers: Vec<String>,
}

/// Registrations of one connector at one instant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RegistrationSample {
    /// When.
    pub ts: Ts,
    /// Machines registered with each connector of the zone (a connector may be named
    /// "cloud": the cloud broker has its own field).
    pub by_registrar: BTreeMap<String, u64>,
    /// Machines of the zone registered with the cloud broker.
    pub cloud: u64,
    /// Machines the configuration places in the zone that nobody holds.
    pub unregistered: u64,
}

/// A launch rejected during an episode or its detection gap, in an admin's words.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailedLaunch {
    /// When.
    pub ts: Ts,
    /// The request id.
    pub request: String,
    /// Who launched.
    pub user: String,
    /// What.
    pub resource: String,
    /// The resource's delivery groups (as configured then).
    pub delivery_groups: Vec<String>,
    /// The connector that answered.
    pub connector: String,
    /// The first attempt's request id, when this was StoreFront's retry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// A later attempt of the same launch followed (StoreFront tried the next
    /// controller): the user did not see this rejection.
    pub retried: bool,
    /// The reason code.
    pub reason: String,
    /// What it means.
    pub cause: &'static str,
    /// What to do about it.
    pub fix: &'static str,
}

/// An interval of an episode.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Band {
    /// Start.
    pub from: Ts,
    /// End.
    pub to: Ts,
}

/// A moment worth marking on the time axis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Annotation {
    /// When.
    pub ts: Ts,
    /// What kind: detected, lhc_start, election, stopped, started, cloud_back, lhc_end.
    pub kind: &'static str,
    /// What happened, in words.
    pub text: String,
}

/// The imports of one configuration version on one connector.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VersionLine {
    /// The version.
    pub version: u64,
    /// When it was imported (504), if ever.
    pub imported: Option<Ts>,
    /// Failed imports (505).
    pub failed: u64,
    /// First and last failure.
    pub failed_between: Option<(Ts, Ts)>,
    /// The version kept after its failures (the fallback), if any.
    pub kept: Option<u64>,
}

/// One LHC episode of one zone.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Episode {
    /// The zone (lowercase id).
    pub zone: String,
    /// First failed health check (3001) that led to it: the detection gap starts here.
    pub detected_from: Ts,
    /// First entry of a connector of the zone into LHC mode.
    pub start: Ts,
    /// Last connector of the zone back out of LHC mode (`None`: still going at the end).
    pub end: Option<Ts>,
    /// Duration, seconds (to the end of the log when still going).
    pub duration_s: i64,
    /// Each connector's state lane from `detected_from` to the end.
    pub lanes: BTreeMap<String, Vec<Segment>>,
    /// Election view changes.
    pub elections: Vec<ElectionChange>,
    /// Split-brain intervals.
    pub split_brain: Vec<SplitBrain>,
    /// Registrations sampled every minute.
    pub registrations: Vec<RegistrationSample>,
    /// Launch decisions through the zone's connectors: "brokered" and each rejection
    /// reason, with counts, from `detected_from` to the end.
    pub launches: BTreeMap<String, u64>,
    /// Launches lost in the detection gap (`cloud_unreachable`).
    pub lost_in_detection_gap: u64,
    /// Launch decisions per minute: (minute start, brokered, rejected).
    pub launches_per_minute: Vec<(Ts, u64, u64)>,
    /// Rejected launches, one row each.
    pub failed_launches: Vec<FailedLaunch>,
    /// Users who saw a launch fail (its last attempt rejected), sorted.
    pub users_affected: Vec<String>,
    /// What users saw: each launch counted once, by its last attempt ("brokered" or the
    /// reason), where `launches` counts every attempt.
    pub user_outcomes: BTreeMap<String, u64>,
    /// Rejections per minute by reason: (minute start, reason → count).
    pub failures_per_minute: Vec<(Ts, BTreeMap<String, u64>)>,
    /// The detection gap: from the first failed check to the first entry into LHC mode.
    pub detection_gap: Band,
    /// Intervals with a connector of the zone in LHC mode and none brokering.
    pub no_broker: Vec<Band>,
    /// Moments to mark on the time axis, in time order.
    pub annotations: Vec<Annotation>,
    /// The HA service's summaries (3507, 3508, 3509, 3510) as output: every 3508/3510, and
    /// the periodic 3507/3509 while the list is shorter than [`PERIODIC_LISTED`].
    pub summaries: Vec<Output>,
    /// Periodic reports (3507/3509) that came once the list was full: counted, not
    /// listed. Only an outage of weeks (or a record dated years ahead) has any.
    #[serde(skip_serializing_if = "is_zero")]
    pub periodic_not_listed: u64,
}

/// Periodic reports (3507/3509) an episode lists: two weeks of one connector's, every
/// two minutes. Past that they are counted, so a report stays readable and its size
/// bounded whatever the log's gaps.
pub const PERIODIC_LISTED: usize = 10_000;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Rejections of one reason in an episode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReasonTally {
    /// Attempts rejected for it.
    pub attempts: u64,
    /// Those the user saw: not followed by a retry.
    pub seen: u64,
    /// What it means.
    pub cause: &'static str,
    /// What to do about it.
    pub fix: &'static str,
}

impl Episode {
    /// Rejections per reason code, in code order.
    pub fn by_reason(&self) -> BTreeMap<&str, ReasonTally> {
        let mut by_reason: BTreeMap<&str, ReasonTally> = BTreeMap::new();
        for row in &self.failed_launches {
            let tally = by_reason.entry(row.reason.as_str()).or_insert(ReasonTally {
                attempts: 0,
                seen: 0,
                cause: row.cause,
                fix: row.fix,
            });
            tally.attempts += 1;
            tally.seen += u64::from(!row.retried);
        }
        by_reason
    }

    /// Launches users saw fail (each counted once, by its last attempt).
    pub fn seen_failed(&self) -> u64 {
        self.user_outcomes
            .iter()
            .filter(|(k, _)| *k != "brokered")
            .map(|(_, v)| v)
            .sum()
    }

    /// Launches users made (each counted once, by its last attempt).
    pub fn seen_launches(&self) -> u64 {
        self.user_outcomes.values().sum()
    }

    /// Rejected attempts StoreFront retried on the next controller.
    pub fn retried(&self) -> usize {
        self.failed_launches.iter().filter(|r| r.retried).count()
    }

    /// Attempts brokered.
    pub fn brokered(&self) -> u64 {
        self.launches.get("brokered").copied().unwrap_or(0)
    }
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutageReport {
    /// What was replayed.
    pub source: String,
    /// Records replayed.
    pub records: u64,
    /// First and last record time.
    pub span: Option<(Ts, Ts)>,
    /// Episodes in start order.
    pub episodes: Vec<Episode>,
    /// Each connector's config versions: imported, or failed and which version it kept.
    pub config_versions: BTreeMap<String, Vec<VersionLine>>,
}

struct Open {
    episode: Episode,
    /// Current state and brokering flag of each connector of the zone.
    current: BTreeMap<String, (ConnectorState, bool, Ts)>,
    brokering_since: Option<(Ts, Vec<String>)>,
    /// Since when the zone is in LHC mode with nobody brokering.
    no_broker_since: Option<Ts>,
    /// Each connector's elected broker, as last seen (for "who → whom").
    elected: BTreeMap<String, Option<String>>,
    /// Each launch (by its first attempt's id): the outcome of its last attempt and user.
    finals: BTreeMap<String, (String, String)>,
    /// Each launch's rows in `failed_launches`.
    rows_of: BTreeMap<String, Vec<usize>>,
}

impl Reporter {
    /// The report of what was observed, the open episodes closed at the last record.
    pub(crate) fn finish(self, source: String) -> OutageReport {
        let Reporter {
            records,
            first_ts,
            last_ts,
            mut open,
            mut done,
            versions,
            ..
        } = self;
        let end = last_ts.unwrap_or_default();
        for (_, mut o) in std::mem::take(&mut open) {
            close_lanes(&mut o, end);
            o.episode.duration_s = end.seconds_since(o.episode.start);
            done.push(o.episode);
        }
        done.sort_by(|a, b| (a.start, &a.zone).cmp(&(b.start, &b.zone)));
        for episode in &mut done {
            episode.annotations.sort_by_key(|a| a.ts);
        }
        OutageReport {
            source,
            records,
            span: first_ts.zip(last_ts),
            episodes: done,
            config_versions: versions,
        }
    }
}

/// The report as a replay observer.
#[derive(Default)]
pub(crate) struct Reporter {
    records: u64,
    first_ts: Option<Ts>,
    last_ts: Option<Ts>,
    /// The time of the record being applied (none for an undecodable one).
    ts: Option<Ts>,
    /// Zone → pending detection (first 3001 since the zone was last all normal).
    detection: BTreeMap<String, Ts>,
    /// Zone → launches rejected `cloud_unreachable` in the detection gap, before the
    /// episode.
    gap: BTreeMap<String, u64>,
    open: BTreeMap<String, Open>,
    done: Vec<Episode>,
    next_sample: Option<i64>,
    /// The launch request being applied: (request, user, resource, retry_of).
    launch: Option<(String, String, String, Option<String>)>,
    /// Zone → rejected launches in the detection gap, before the episode opened.
    gap_rows: BTreeMap<String, Vec<FailedLaunch>>,
    /// Connector → its config versions.
    versions: BTreeMap<String, Vec<VersionLine>>,
    /// Retries → the first attempt of their launch.
    roots: BTreeMap<String, String>,
}

impl Observer for Reporter {
    type Error = SourceError;

    fn before(&mut self, step: Before<'_>) -> Result<Flow, SourceError> {
        let record = step.record;
        self.ts = record.as_ref().ok().map(|r| r.ts());
        self.launch = match record {
            Ok(lhc_engine::Record::LaunchRequest(l)) => Some((
                l.request.clone(),
                l.user.clone(),
                l.resource.clone(),
                l.retry_of.clone(),
            )),
            _ => None,
        };
        Ok(Flow::Apply)
    }

    fn during(&mut self, step: After<'_>) -> Result<(), SourceError> {
        for o in step.outputs.iter() {
            self.observe(step.engine, o);
        }
        Ok(())
    }

    fn after(&mut self, step: After<'_>) -> Result<(), SourceError> {
        let engine = step.engine;
        let outputs = step.outputs;
        self.records += 1;
        if let Some(ts) = self.ts {
            self.first_ts.get_or_insert(ts);
            self.last_ts = Some(ts);
        }
        for o in outputs.iter() {
            self.observe(engine, o);
        }
        // Registration samples, once a minute of log time, for open episodes.
        if let Some(ts) = self.ts {
            let due = self.next_sample.is_none_or(|n| ts.millis() >= n);
            if due {
                self.next_sample = Some((ts.millis() / 60_000 + 1) * 60_000);
                for (zone, o) in self.open.iter_mut() {
                    o.episode.registrations.push(sample(engine, zone, ts));
                }
            }
        }
        Ok(())
    }
}

fn sample(engine: &Engine, zone: &str, ts: Ts) -> RegistrationSample {
    let mut by_registrar = BTreeMap::new();
    for (name, c) in engine.connectors() {
        if c.zone() == zone {
            by_registrar.insert(name.clone(), c.registrations().len() as u64);
        }
    }
    // A count: the order does not matter, so no sort (sorting 40,000 names every minute
    // of every open episode cost a fifth of a report at the seeds' scale).
    let cloud = engine
        .machines()
        .iter()
        .filter(|(m, r)| {
            *r.registrar() == lhc_engine::engine::Registrar::Cloud
                && engine
                    .site()
                    .machine_zone(m)
                    .is_some_and(|z| z.eq_ignore_ascii_case(zone))
        })
        .count() as u64;
    let configured = engine
        .site()
        .of_kind(lhc_engine::config::ObjectKind::Machine)
        .filter(|s| match &s.object {
            lhc_engine::config::ConfigObject::Machine { data, .. } => {
                data.zone.eq_ignore_ascii_case(zone)
            }
            _ => false,
        })
        .count() as u64;
    // Registered with the cloud while the zone has lost its path to it is as good as
    // unregistered: nobody can broker the machine (R-REG-1).
    let cloud_held = if engine.zone_offers_cloud(zone) {
        cloud
    } else {
        0
    };
    let held = cloud_held + by_registrar.values().sum::<u64>();
    RegistrationSample {
        ts,
        by_registrar,
        cloud,
        unregistered: configured.saturating_sub(held),
    }
}

fn in_lhc(state: ConnectorState) -> bool {
    state.in_lhc()
}

impl Reporter {
    /// One output of the replay, dispatched by kind.
    fn observe(&mut self, engine: &Engine, output: &Output) {
        match output {
            Output::Event(e) => {
                let zone = engine
                    .connectors()
                    .get(&e.connector)
                    .map(|c| c.zone().to_string())
                    .unwrap_or_default();
                let Reporter {
                    detection,
                    open,
                    done,
                    versions,
                    ..
                } = self;
                match e.kind() {
                    Some(EventKind::HealthCheckFailed) => {
                        detection.entry(zone).or_insert(e.ts);
                    }
                    Some(EventKind::StateChanged(t)) => {
                        self.on_state_changed(engine, e, &t, zone);
                    }
                    Some(EventKind::ElectionView(v)) => {
                        self.on_election(engine, e, &v, zone);
                    }
                    Some(
                        kind @ (EventKind::ElectedReport(_)
                        | EventKind::ElectedSummary(_)
                        | EventKind::NonElected(_)
                        | EventKind::NonElectedSummary(_)),
                    ) => {
                        let episode = match open.get_mut(&zone) {
                            Some(o) => Some(&mut o.episode),
                            // 3508/3510 come with the transition that closed the episode.
                            None => done.iter_mut().rev().find(|d| d.zone == zone),
                        };
                        if let Some(episode) = episode {
                            let periodic = matches!(
                                kind,
                                EventKind::ElectedReport(_) | EventKind::NonElected(_)
                            );
                            if periodic && episode.summaries.len() >= PERIODIC_LISTED {
                                episode.periodic_not_listed += 1;
                            } else {
                                episode.summaries.push(output.clone());
                            }
                        }
                    }
                    Some(EventKind::Imported(i)) => {
                        version_line(versions, &e.connector, i.version).imported = Some(e.ts);
                    }
                    Some(EventKind::ImportFailed(f)) => {
                        let line = version_line(versions, &e.connector, f.version);
                        line.failed += 1;
                        line.failed_between = Some(match line.failed_between {
                            Some((first, _)) => (first, e.ts),
                            None => (e.ts, e.ts),
                        });
                        line.kept = f.fallback_version;
                    }
                    _ => {}
                }
            }
            Output::LaunchDecision(d) => {
                self.on_launch(engine, d);
            }
            _ => {}
        }
    }

    /// A 3003: opens the zone's episode on its first entry into LHC mode, follows each
    /// connector's lane, and closes the episode when the last connector leaves LHC mode.
    fn on_state_changed(&mut self, engine: &Engine, e: &Event, t: &TransitionData, zone: String) {
        if in_lhc(t.to) && !self.open.contains_key(&zone) {
            self.open_episode(engine, e, t, &zone);
        }
        let Reporter {
            detection,
            open,
            done,
            gap,
            gap_rows,
            ..
        } = self;
        if let Some(o) = open.get_mut(&zone) {
            let brokering = in_lhc(t.to)
                && engine
                    .connectors()
                    .get(&e.connector)
                    .is_some_and(|c| c.elected() == Some(e.connector.as_str()));
            set_state(
                o,
                &e.connector,
                t.to,
                brokering,
                e.ts,
                engine.zone_offers_cloud(&zone),
            );
            let note = match (t.from, t.to) {
                (_, ConnectorState::Stopped) => {
                    Some(("stopped", format!("{} stopped", e.connector)))
                }
                (ConnectorState::Stopped, _) => {
                    Some(("started", format!("{} started", e.connector)))
                }
                (_, ConnectorState::PendingRecovery)
                    if !o.episode.annotations.iter().any(|a| a.kind == "cloud_back") =>
                {
                    Some((
                        "cloud_back",
                        format!("cloud back: {} in pending recovery", e.connector),
                    ))
                }
                _ => None,
            };
            if let Some((kind, text)) = note {
                o.episode.annotations.push(Annotation {
                    ts: e.ts,
                    kind,
                    text,
                });
            }
            let all_out = o.current.values().all(|(s, _, _)| !in_lhc(*s));
            if all_out {
                let mut o = open.remove(&zone).expect("open");
                close_lanes(&mut o, e.ts);
                o.episode.annotations.push(Annotation {
                    ts: e.ts,
                    kind: "lhc_end",
                    text: "LHC mode ended: normal operations".into(),
                });
                o.episode.end = Some(e.ts);
                o.episode.duration_s = e.ts.seconds_since(o.episode.start);
                o.episode.registrations.push(sample(engine, &zone, e.ts));
                done.push(o.episode);
                detection.remove(&zone);
            }
        } else if t.to == ConnectorState::WorkingNormally {
            // A false alarm (pending_ha and back): the detection restarts, and what was
            // counted in its gap belonged to no episode. Stopped connectors do not keep it.
            let zone_normal = engine
                .connectors()
                .values()
                .filter(|c| c.zone() == zone && c.state() != ConnectorState::Stopped)
                .all(|c| c.state() == ConnectorState::WorkingNormally);
            if zone_normal {
                detection.remove(&zone);
                gap.remove(&zone);
                gap_rows.remove(&zone);
            }
        }
    }

    /// A 3504: the election change, as a lane change and an annotation (who → whom).
    fn on_election(&mut self, engine: &Engine, e: &Event, v: &ElectionViewData, zone: String) {
        let open = &mut self.open;
        if let Some(o) = open.get_mut(&zone) {
            o.episode.elections.push(ElectionChange {
                ts: e.ts,
                connector: e.connector.clone(),
                elected: v.elected.clone(),
            });
            let before = o
                .elected
                .insert(e.connector.clone(), v.elected.clone())
                .flatten();
            o.episode.annotations.push(Annotation {
                ts: e.ts,
                kind: "election",
                text: format!(
                    "{}: elected {} → {}",
                    e.connector,
                    before.as_deref().unwrap_or("none"),
                    v.elected.as_deref().unwrap_or("none")
                ),
            });
            let state = o
                .current
                .get(&e.connector)
                .map(|(s, _, _)| *s)
                .or_else(|| engine.connectors().get(&e.connector).map(|c| c.state()))
                .unwrap_or(ConnectorState::WorkingNormally);
            let brokering = in_lhc(state) && v.elected.as_deref() == Some(&e.connector);
            set_state(
                o,
                &e.connector,
                state,
                brokering,
                e.ts,
                engine.zone_offers_cloud(&zone),
            );
        }
    }

    /// A launch decision: counted by outcome and minute, a rejection as a row with its
    /// cause and fix, and each launch's last attempt as what its user saw.
    fn on_launch(&mut self, engine: &Engine, d: &LaunchDecision) {
        let Reporter {
            detection,
            gap,
            open,
            launch,
            gap_rows,
            roots,
            ..
        } = self;
        let zone = engine
            .connectors()
            .get(&d.connector)
            .map(|c| c.zone().to_string())
            .unwrap_or_default();
        let key = match d.outcome {
            Outcome::Brokered => "brokered".to_string(),
            Outcome::Rejected => d.reason.map(|r| snake(&r)).unwrap_or_default(),
        };
        let row = d.reason.map(|reason| {
            let (request, user, resource, retry_of) = launch
                .as_ref()
                .filter(|(request, ..)| *request == d.request)
                .cloned()
                .unwrap_or_else(|| (d.request.clone(), String::new(), String::new(), None));
            let (cause, fix) = reason.advice();
            FailedLaunch {
                ts: d.ts,
                request,
                delivery_groups: resource_groups(engine, &resource),
                user,
                resource,
                connector: d.connector.clone(),
                retry_of,
                retried: false,
                reason: key.clone(),
                cause,
                fix,
            }
        });
        let (user, root) = match launch.as_ref().filter(|l| l.0 == d.request) {
            Some((request, user, _, Some(retry_of))) => {
                // A retry names the first attempt, or an earlier retry: its root either way.
                // One naming another user's launch is not a retry of it (that would hide a
                // failure someone saw): it counts as a launch of its own.
                let root = roots.get(retry_of).cloned().unwrap_or(retry_of.clone());
                let foreign = open
                    .get(&zone)
                    .and_then(|o| o.finals.get(&root))
                    .is_some_and(|(_, first_user)| first_user != user);
                let root = if foreign { request.clone() } else { root };
                roots.insert(request.clone(), root.clone());
                (user.clone(), root)
            }
            Some((request, user, _, None)) => (user.clone(), request.clone()),
            None => (String::new(), d.request.clone()),
        };
        match open.get_mut(&zone) {
            Some(o) => {
                // A new attempt of a launch hides its earlier rejections from the
                // user: StoreFront retried them.
                for i in o.rows_of.get(&root).into_iter().flatten() {
                    o.episode.failed_launches[*i].retried = true;
                }
                o.finals.insert(root.clone(), (key.clone(), user));
                let ep = &mut o.episode;
                if let Some(row) = row {
                    count_failure(ep, row.ts, &row.reason);
                    o.rows_of
                        .entry(root)
                        .or_default()
                        .push(ep.failed_launches.len());
                    ep.failed_launches.push(row);
                }
                *ep.launches.entry(key.clone()).or_default() += 1;
                let minute = Ts(d.ts.millis() / 60_000 * 60_000);
                match ep.launches_per_minute.last_mut() {
                    Some((m, b, r)) if *m == minute => {
                        if d.outcome == Outcome::Brokered {
                            *b += 1
                        } else {
                            *r += 1
                        }
                    }
                    _ => ep.launches_per_minute.push((
                        minute,
                        u64::from(d.outcome == Outcome::Brokered),
                        u64::from(d.outcome != Outcome::Brokered),
                    )),
                }
                if key == "cloud_unreachable" {
                    ep.lost_in_detection_gap += 1;
                }
            }
            None if key == "cloud_unreachable" && detection.contains_key(&zone) => {
                // In the detection gap: counted when the episode opens.
                *gap.entry(zone.clone()).or_default() += 1;
                gap_rows.entry(zone).or_default().extend(row);
            }
            None => {}
        }
    }
}

/// Opens the zone's episode at its first entry into LHC mode: its lanes from the
/// detection, the launches already lost in the gap, the first annotations.
impl Reporter {
    fn open_episode(&mut self, engine: &Engine, e: &Event, t: &TransitionData, zone: &str) {
        let Reporter {
            detection,
            gap,
            open,
            gap_rows,
            ..
        } = self;
        let zone = zone.to_string();
        let detected_from = detection.get(&zone).copied().unwrap_or(e.ts);
        let current = engine
            .connectors()
            .iter()
            .filter(|(_, c)| c.zone() == zone)
            .map(|(n, c)| {
                let state = if n == &e.connector { t.from } else { c.state() };
                (n.clone(), (state, false, detected_from))
            })
            .collect();
        let lanes = engine
            .connectors()
            .iter()
            .filter(|(_, c)| c.zone() == zone)
            .map(|(n, _)| (n.clone(), Vec::new()))
            .collect();
        open.insert(
            zone.clone(),
            Open {
                episode: Episode {
                    zone: zone.clone(),
                    detected_from,
                    start: e.ts,
                    end: None,
                    duration_s: 0,
                    lanes,
                    elections: Vec::new(),
                    split_brain: Vec::new(),
                    registrations: vec![sample(engine, &zone, e.ts)],
                    launches: BTreeMap::new(),
                    lost_in_detection_gap: 0,
                    launches_per_minute: Vec::new(),
                    failed_launches: gap_rows.remove(&zone).unwrap_or_default(),
                    users_affected: Vec::new(),
                    user_outcomes: BTreeMap::new(),
                    failures_per_minute: Vec::new(),
                    detection_gap: Band {
                        from: detected_from,
                        to: e.ts,
                    },
                    no_broker: Vec::new(),
                    annotations: vec![
                        Annotation {
                            ts: detected_from,
                            kind: "detected",
                            text: "first failed health check".into(),
                        },
                        Annotation {
                            ts: e.ts,
                            kind: "lhc_start",
                            text: format!("LHC mode: {}", e.connector),
                        },
                    ],
                    summaries: Vec::new(),
                    periodic_not_listed: 0,
                },
                current,
                brokering_since: None,
                no_broker_since: None,
                elected: engine
                    .connectors()
                    .iter()
                    .filter(|(_, c)| c.zone() == zone)
                    .map(|(n, c)| (n.clone(), c.elected().map(str::to_string)))
                    .collect(),
                finals: BTreeMap::new(),
                rows_of: BTreeMap::new(),
            },
        );
        // Rejections already seen in the gap count per minute too, and as
        // launches their users saw fail.
        let o = open.get_mut(&zone).expect("just opened");
        for (i, row) in o.episode.failed_launches.iter().enumerate() {
            let root = row.retry_of.clone().unwrap_or(row.request.clone());
            o.finals
                .insert(root.clone(), (row.reason.clone(), row.user.clone()));
            o.rows_of.entry(root).or_default().push(i);
        }
        let ep = &mut o.episode;
        let gap_rows: Vec<(Ts, String)> = ep
            .failed_launches
            .iter()
            .map(|f| (f.ts, f.reason.clone()))
            .collect();
        for (ts, reason) in gap_rows {
            count_failure(ep, ts, &reason);
        }
        // Launches lost before the episode opened belong to it.
        let lost = gap.remove(&zone).unwrap_or(0);
        if lost > 0 {
            let ep = &mut open.get_mut(&zone).expect("just opened").episode;
            ep.lost_in_detection_gap += lost;
            *ep.launches.entry("cloud_unreachable".into()).or_default() += lost;
        }
    }
}

/// Records a connector's new state in its lane and updates the split-brain tracking.
fn set_state(
    o: &mut Open,
    connector: &str,
    state: ConnectorState,
    brokering: bool,
    ts: Ts,
    cloud_path: bool,
) {
    // A connector added to the zone during the episode gets its lane from now on.
    if !o.current.contains_key(connector) {
        o.current.insert(
            connector.to_string(),
            (ConnectorState::WorkingNormally, false, ts),
        );
        o.episode.lanes.entry(connector.to_string()).or_default();
    }
    let Some(entry) = o.current.get_mut(connector) else {
        return;
    };
    let (old_state, old_brokering, since) = *entry;
    if old_state == state && old_brokering == brokering {
        return;
    }
    let from = since.max(o.episode.detected_from);
    if ts > from {
        o.episode
            .lanes
            .get_mut(connector)
            .expect("lane")
            .push(Segment {
                from,
                to: ts,
                state: snake(&old_state),
                brokering: old_brokering,
            });
    }
    *entry = (state, brokering, ts);
    // Nobody brokering while the zone is in LHC mode, and no connector of it back on the
    // cloud path: a launch in the zone cannot succeed.
    let zone_lhc = o.current.values().any(|(s, _, _)| in_lhc(*s));
    let anyone = cloud_path || o.current.values().any(|(_, b, _)| *b);
    match (o.no_broker_since, zone_lhc && !anyone) {
        (None, true) => o.no_broker_since = Some(ts),
        (Some(from), false) => {
            if ts > from {
                o.episode.no_broker.push(Band { from, to: ts });
            }
            o.no_broker_since = None;
        }
        _ => {}
    }
    let brokers: Vec<String> = o
        .current
        .iter()
        .filter(|(_, (_, b, _))| *b)
        .map(|(n, _)| n.clone())
        .collect();
    match (&o.brokering_since, brokers.len() >= 2) {
        (None, true) => o.brokering_since = Some((ts, brokers)),
        (Some((from, who)), false) => {
            o.episode.split_brain.push(SplitBrain {
                from: *from,
                to: ts,
                brokers: who.clone(),
            });
            o.brokering_since = None;
        }
        (Some((from, who)), true) if *who != brokers => {
            o.episode.split_brain.push(SplitBrain {
                from: *from,
                to: ts,
                brokers: who.clone(),
            });
            o.brokering_since = Some((ts, brokers));
        }
        _ => {}
    }
}

fn close_lanes(o: &mut Open, end: Ts) {
    // What users saw: each launch once, by its last attempt.
    let mut users = std::collections::BTreeSet::new();
    for (key, user) in o.finals.values() {
        *o.episode.user_outcomes.entry(key.clone()).or_default() += 1;
        if key != "brokered" && !user.is_empty() {
            users.insert(user.clone());
        }
    }
    o.episode.users_affected = users.into_iter().collect();
    let names: Vec<String> = o.current.keys().cloned().collect();
    for n in names {
        let (state, brokering, since) = o.current[&n];
        let from = since.max(o.episode.detected_from);
        if end > from {
            o.episode.lanes.get_mut(&n).expect("lane").push(Segment {
                from,
                to: end,
                state: snake(&state),
                brokering,
            });
        }
    }
    if let Some(from) = o.no_broker_since.take() {
        if end > from {
            o.episode.no_broker.push(Band { from, to: end });
        }
    }
    if let Some((from, who)) = o.brokering_since.take() {
        o.episode.split_brain.push(SplitBrain {
            from,
            to: end,
            brokers: who,
        });
    }
}

/// Counts a rejection in its minute, by reason.
fn count_failure(ep: &mut Episode, ts: Ts, reason: &str) {
    let minute = Ts(ts.millis() / 60_000 * 60_000);
    if ep
        .failures_per_minute
        .last()
        .is_none_or(|(m, _)| *m != minute)
    {
        ep.failures_per_minute.push((minute, BTreeMap::new()));
    }
    let (_, counts) = ep.failures_per_minute.last_mut().expect("pushed");
    *counts.entry(reason.to_string()).or_default() += 1;
}

/// The delivery groups of `resource` in the current configuration.
fn resource_groups(engine: &Engine, resource: &str) -> Vec<String> {
    match engine
        .site()
        .get(lhc_engine::config::ObjectKind::Resource, resource)
        .map(|s| &s.object)
    {
        Some(lhc_engine::config::ConfigObject::Resource { data, .. }) => {
            data.delivery_groups.clone()
        }
        _ => Vec::new(),
    }
}

/// The line of `version` in `connector`'s config timeline, added if new.
fn version_line<'a>(
    versions: &'a mut BTreeMap<String, Vec<VersionLine>>,
    connector: &str,
    version: u64,
) -> &'a mut VersionLine {
    let lines = versions.entry(connector.to_string()).or_default();
    if let Some(i) = lines.iter().position(|l| l.version == version) {
        return &mut lines[i];
    }
    lines.push(VersionLine {
        version,
        imported: None,
        failed: 0,
        failed_between: None,
        kept: None,
    });
    lines.last_mut().expect("pushed")
}
