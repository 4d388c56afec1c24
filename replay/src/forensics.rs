//! Config-sync forensics: every failed import (505) explained after the fact — the objects
//! at fault and the rule each breaks, the `config.change` that introduced each, what changed
//! between the last good version and the failing one, how stale the fallback was, and the
//! LHC-mode launches decided on a stale snapshot that the current configuration would have
//! decided differently.
//!
//! Invariant: computed from one replay through the engine; the failures are the engine's
//! own (505 data), never re-validated here.

use std::collections::BTreeMap;

use lhc_engine::config::ConfigOp;
use lhc_engine::engine::snake;
use lhc_engine::event::EventKind;
use lhc_engine::output::{ImportFailure, LaunchDecision, Outcome, Via};
use lhc_engine::{snapshot, Engine, Output, Record, Ts};
use serde::Serialize;

use crate::drive::{After, Before, Flow, Observer};
use crate::source::SourceError;

/// A `config.change` as the forensics see it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    /// Log offset.
    pub offset: u64,
    /// Version it made.
    pub version: u64,
    /// When.
    pub ts: Ts,
    /// Its operations: ("upsert" | "delete", kind, id).
    pub ops: Vec<(String, String, String)>,
}

/// A failing object with where it came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Culprit {
    /// The engine's failure (kind, id, rule, introduced_by).
    pub failure: ImportFailure,
    /// Time of the change that introduced it (none for a storage fault).
    pub introduced_at: Option<Ts>,
}

/// A launch decided on a stale snapshot that the current configuration would change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StaleDecision {
    /// The decision as made.
    pub decision: LaunchDecision,
    /// Snapshot version it was decided on.
    pub decided_on: u64,
    /// Site version at the time.
    pub current: u64,
    /// What the current configuration says differently.
    pub difference: String,
}

/// One failed import.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailedImport {
    /// When the 505 was reported.
    pub ts: Ts,
    /// Connector.
    pub connector: String,
    /// Version that failed.
    pub version: u64,
    /// The snapshot kept.
    pub fallback_version: Option<u64>,
    /// The objects at fault.
    pub culprits: Vec<Culprit>,
    /// The changes between the fallback and the failing version, in order.
    pub diff: Vec<Change>,
    /// The last repeat of this 505 (the same connector, version and objects at fault).
    pub last_ts: Ts,
    /// 505s folded into this one, itself included.
    pub count: u64,
    /// When the first version newer than the fallback appeared.
    pub first_newer: Option<Ts>,
    /// Versions the fallback is behind.
    pub versions_behind: u64,
    /// How stale the fallback had grown by the last repeat: seconds since the first newer
    /// version appeared.
    pub stale_for_s: Option<i64>,
}

/// One root cause of failed imports: an object breaking a rule, however many connectors
/// and versions it failed, with the fix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RootCause {
    /// The object's kind.
    pub kind: String,
    /// The object's id.
    pub id: String,
    /// The rule it breaks.
    pub rule: String,
    /// What is wrong, in the engine's words.
    pub detail: String,
    /// The record that introduced it.
    pub introduced_by: lhc_engine::output::IntroducedBy,
    /// Its time.
    pub introduced_at: Option<Ts>,
    /// Connectors whose imports it failed, sorted.
    pub connectors: Vec<String>,
    /// Versions it failed, ascending.
    pub versions: Vec<u64>,
    /// 505s it caused (repeats included).
    pub failed_imports: u64,
    /// First and last of those 505s.
    pub between: (Ts, Ts),
    /// What to do, in an admin's words (the object to restore, or the cmdlet to run).
    pub fix: String,
}

/// The forensics report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SyncForensics {
    /// What was replayed.
    pub source: String,
    /// The failures grouped by root cause (one object and rule), most imports failed
    /// first.
    pub root_causes: Vec<RootCause>,
    /// Every 505, in log order, consecutive repeats of the same (connector, version)
    /// folded into the first.
    pub failures: Vec<FailedImport>,
    /// Repeats folded: (connector, version) → 505 count.
    pub repeats: BTreeMap<String, u64>,
    /// LHC-mode launches decided on a stale snapshot that the current configuration
    /// would decide differently.
    pub stale_decisions: Vec<StaleDecision>,
    /// LHC-mode launches decided on a stale snapshot in all.
    pub decided_on_stale: u64,
}

/// What the forensics collect along the replay.
#[derive(Default)]
pub(crate) struct Found {
    /// Config changes by version.
    changes: BTreeMap<u64, Change>,
    /// Offset → time of the records a failure can name (config changes, storage faults).
    offsets_ts: BTreeMap<u64, Ts>,
    failures: Vec<FailedImport>,
    repeats: BTreeMap<String, u64>,
    stale: Vec<StaleDecision>,
    decided_on_stale: u64,
    /// The current configuration's catalog, built once per version.
    current_catalog: Option<(u64, snapshot::Snapshot)>,
    /// Request id → (user, resource), until its decision.
    requests: BTreeMap<String, (String, String)>,
    /// Root causes by (kind, id, rule, offset), counted at every 505.
    causes: BTreeMap<(String, String, String, u64), RootCause>,
}

impl Found {
    /// Counts one 505's objects at fault in their root causes.
    fn count_causes(&mut self, connector: &str, ts: Ts, version: u64, failures: &[ImportFailure]) {
        for failure in failures {
            let kind = snake(&failure.kind);
            let rule = snake(&failure.rule);
            let key = (
                kind.clone(),
                failure.id.clone(),
                rule.clone(),
                failure.introduced_by.offset,
            );
            let introduced_at = self.offsets_ts.get(&failure.introduced_by.offset).copied();
            let cause = self.causes.entry(key).or_insert_with(|| RootCause {
                fix: fix(&kind, &failure.id, failure.rule, &failure.detail),
                kind,
                id: failure.id.clone(),
                rule,
                detail: failure.detail.clone(),
                introduced_by: failure.introduced_by.clone(),
                introduced_at,
                connectors: Vec::new(),
                versions: Vec::new(),
                failed_imports: 0,
                between: (ts, ts),
            });
            if let Err(at) = cause
                .connectors
                .binary_search_by(|c| c.as_str().cmp(connector))
            {
                cause.connectors.insert(at, connector.to_string());
            }
            if let Err(at) = cause.versions.binary_search(&version) {
                cause.versions.insert(at, version);
            }
            cause.failed_imports += 1;
            cause.between.1 = ts;
        }
    }
}

impl Observer for Found {
    type Error = SourceError;

    fn before(&mut self, step: Before<'_>) -> Result<Flow, SourceError> {
        let offset = step.offset;
        let record = step.record;
        if let Ok(Record::ConfigChange(c)) = record {
            self.offsets_ts.insert(offset, c.ts);
            self.changes.insert(
                c.version,
                Change {
                    offset,
                    version: c.version,
                    ts: c.ts,
                    ops: c
                        .ops
                        .iter()
                        .map(|op| match op {
                            ConfigOp::Upsert(o) => {
                                ("upsert".into(), snake(&o.kind()), o.id().to_string())
                            }
                            ConfigOp::Delete(r) => ("delete".into(), snake(&r.kind), r.id.clone()),
                        })
                        .collect(),
                },
            );
        }
        if let Ok(Record::LaunchRequest(l)) = record {
            self.requests
                .insert(l.request.clone(), (l.user.clone(), l.resource.clone()));
        }
        if let Ok(Record::StorageFault(f)) = record {
            self.offsets_ts.insert(offset, f.ts);
        }
        Ok(Flow::Apply)
    }

    fn after(&mut self, step: After<'_>) -> Result<(), SourceError> {
        self.take(step.engine, step.outputs);
        Ok(())
    }

    fn during(&mut self, step: After<'_>) -> Result<(), SourceError> {
        self.take(step.engine, step.outputs);
        Ok(())
    }
}

impl Found {
    /// Follows 505s and the launches decided on a stale snapshot.
    fn take(&mut self, engine: &Engine, outputs: &[Output]) {
        for o in outputs.iter() {
            match &o {
                Output::Event(e) => {
                    let Some(EventKind::ImportFailed(data)) = e.kind() else {
                        continue;
                    };
                    let key = format!("{} v{}", e.connector, data.version);
                    *self.repeats.entry(key).or_default() += 1;
                    self.count_causes(&e.connector, e.ts, data.version, &data.failures);
                    // A repeat with the same objects at fault: the fallback has only grown
                    // staler. Other objects (a storage fault on a later try) are a 505 of
                    // their own.
                    let same = |f: &&mut FailedImport| {
                        f.connector == e.connector
                            && f.version == data.version
                            && f.culprits
                                .iter()
                                .map(|c| &c.failure)
                                .eq(data.failures.iter())
                    };
                    if let Some(f) = self.failures.iter_mut().rev().find(same) {
                        f.last_ts = e.ts;
                        f.count += 1;
                        f.stale_for_s = f.first_newer.map(|t| e.ts.seconds_since(t));
                        continue;
                    }
                    let fallback = data.fallback_version.unwrap_or(0);
                    let diff: Vec<Change> = self
                        .changes
                        .range(fallback + 1..=data.version)
                        .map(|(_, c)| c.clone())
                        .collect();
                    let first_newer = diff.first().map(|c| c.ts);
                    self.failures.push(FailedImport {
                        ts: e.ts,
                        last_ts: e.ts,
                        count: 1,
                        first_newer,
                        connector: e.connector.clone(),
                        version: data.version,
                        fallback_version: data.fallback_version,
                        culprits: data
                            .failures
                            .iter()
                            .map(|f| Culprit {
                                failure: f.clone(),
                                introduced_at: self
                                    .offsets_ts
                                    .get(&f.introduced_by.offset)
                                    .copied(),
                            })
                            .collect(),
                        diff,
                        versions_behind: data.version.saturating_sub(fallback),
                        stale_for_s: first_newer.map(|t| e.ts.seconds_since(t)),
                    });
                }
                Output::LaunchDecision(d) if d.via == Via::Lhc => {
                    let Some(asked) = self.requests.remove(&d.request) else {
                        continue;
                    };
                    let Some(c) = engine.connectors().get(&d.connector) else {
                        continue;
                    };
                    let (Some(decided_on), current) = (c.snapshot(), engine.site().version) else {
                        continue;
                    };
                    if decided_on >= current {
                        continue;
                    }
                    self.decided_on_stale += 1;
                    if self
                        .current_catalog
                        .as_ref()
                        .is_none_or(|(v, _)| *v != current)
                    {
                        self.current_catalog = Some((current, snapshot::index(engine.site())));
                    }
                    let (_, now) = self.current_catalog.as_ref().expect("just set");
                    if let Some(difference) = difference(engine, d, &asked, now) {
                        self.stale.push(StaleDecision {
                            decision: d.clone(),
                            decided_on,
                            current,
                            difference,
                        });
                    }
                }
                Output::LaunchDecision(d) => {
                    self.requests.remove(&d.request);
                }
                _ => {}
            }
        }
    }
}

impl Found {
    /// The forensics of what was observed.
    pub(crate) fn finish(self, source: String) -> SyncForensics {
        let Found {
            failures,
            mut repeats,
            stale,
            decided_on_stale,
            causes,
            ..
        } = self;
        let root_causes = root_causes(causes);
        repeats.retain(|_, n| *n > 1);
        SyncForensics {
            source,
            root_causes,
            failures,
            repeats,
            stale_decisions: stale,
            decided_on_stale,
        }
    }
}

/// The root causes, most harmful first; ties in the order they were introduced.
fn root_causes(causes: BTreeMap<(String, String, String, u64), RootCause>) -> Vec<RootCause> {
    let mut list: Vec<RootCause> = causes.into_values().collect();
    list.sort_by(|a, b| {
        (b.failed_imports, a.introduced_by.offset, &a.kind, &a.id).cmp(&(
            a.failed_imports,
            b.introduced_by.offset,
            &b.kind,
            &b.id,
        ))
    });
    list
}

/// What an admin does about one root cause: the object to restore or change, and the
/// Citrix PowerShell that does it where one cmdlet does.
fn fix(kind: &str, id: &str, rule: lhc_engine::output::Rule, detail: &str) -> String {
    use lhc_engine::output::Rule;
    match (rule, kind) {
        (Rule::DanglingReference, "machine") if detail.starts_with("delivery_group") => format!(
            "restore the delivery group it names ({detail}), or move machine {id} to an \
             existing one (Add-BrokerMachine -MachineName '{id}' -DesktopGroup <group>) or \
             remove it (Remove-BrokerMachine -MachineName '{id}')"
        ),
        (Rule::DanglingReference, "machine") => format!(
            "restore what it names ({detail}), or correct machine {id}, or remove it \
             (Remove-BrokerMachine -MachineName '{id}')"
        ),
        (Rule::DanglingReference, "entitlement") => format!(
            "restore what it names ({detail}), or remove the entitlement \
             (Remove-BrokerEntitlementPolicyRule -Name '{id}')"
        ),
        (Rule::DanglingReference, "assignment") => format!(
            "restore what it names ({detail}), or remove assignment {id} \
             (Remove-BrokerUser -Name <user> -PrivateDesktop <machine>)"
        ),
        (Rule::DanglingReference, _) => format!(
            "restore what it names ({detail}), or change {kind} {id} to name an object that \
             exists"
        ),
        (Rule::DuplicateId, _) => {
            format!("rename or remove {kind} {id}: it differs from another {kind} only by case")
        }
        (Rule::AssignmentNotStatic, _) => format!(
            "remove assignment {id}, or move its machine to a static delivery group \
             (Remove-BrokerUser -Name <user> -PrivateDesktop <machine>)"
        ),
        (Rule::MaxSessionsZero, _) => {
            format!("give machine {id} at least one session (max_sessions >= 1)")
        }
        (Rule::HeartbeatPeriodOutOfRange, _) => {
            "set the site's heartbeat period between 1 minute and 1 hour".to_string()
        }
        (Rule::StorageFault, _) => format!(
            "repair or replace the local disk of connector {id}; no configuration change is \
             needed: the next import retries"
        ),
    }
}

/// What the current configuration says differently about a decision made on a stale
/// snapshot, if anything.
fn difference(
    engine: &Engine,
    d: &LaunchDecision,
    (user, resource): &(String, String),
    now: &snapshot::Snapshot,
) -> Option<String> {
    let entitled = |list: Vec<lhc_engine::broker::Enumerated>| {
        list.iter()
            .any(|e| e.resource.eq_ignore_ascii_case(resource))
    };
    let then = entitled(engine.enumerate(user, Some(&d.connector)));
    let current = entitled(engine.enumerate(user, None));
    match (then, current) {
        (true, false) => {
            return Some(format!(
                "{user} may no longer launch {resource} in the current configuration"
            ))
        }
        (false, true) => {
            return Some(format!(
            "{user} may launch {resource} in the current configuration (rejected on the stale one)"
        ))
        }
        _ => {}
    }
    if d.outcome == Outcome::Brokered {
        let machine = d.machine.as_deref()?;
        let stale = engine.snapshot_of(&d.connector)?.machine(machine)?;
        return match now.machine(machine) {
            None => Some(format!(
                "machine {machine} is no longer in the current configuration"
            )),
            Some(m) if m.delivery_group != stale.delivery_group => Some(format!(
                "machine {machine} moved from delivery group {} to {}",
                stale.delivery_group, m.delivery_group
            )),
            Some(_) => None,
        };
    }
    None
}
