//! What if: the recorded log replayed twice — as it happened, and with changes (engine
//! parameters, site or group settings, added records, dropped records, the bad config ops
//! removed) — and the difference in launch decisions, LHC episodes, elections and failed
//! imports.
//!
//! Invariant: observations are replayed as recorded on both sides; only the engine's
//! decisions can differ, so every difference comes from the changes. The "as it happened"
//! side is a plain replay: its digest is the one `lhc replay --digest` prints. Nothing is
//! written to the source.

mod plan;
mod side;
mod stream;
mod tee;

use std::collections::{BTreeMap, BTreeSet};

use lhc_engine::output::Reason;
use rustc_hash::{FxHashMap, FxHashSet};

use lhc_engine::config::ObjectKind;
use lhc_engine::Ts;
use serde::Serialize;

pub use plan::{Filter, PatchRecord, Plan, Setting};
pub use side::{replay_side, Decision, Decisions, Names, Side, SideOptions, Verified, ZoneCounts};
pub use stream::{Modified, Seen};
pub use tee::{Follow, Tee};

use crate::drive::Records;
use crate::source::{Source, SourceError};

/// Why a what-if could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    /// A change is invalid, or does not fit this log; `item` names it.
    #[error("{item}: {why}")]
    Bad {
        /// The change at fault, as given (or the patch line).
        item: String,
        /// What is wrong, and what to do.
        why: String,
    },
    /// The source could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
}

impl WhatIfError {
    pub(crate) fn bad(item: impl Into<String>, why: String) -> Self {
        WhatIfError::Bad {
            item: item.into(),
            why,
        }
    }
}

/// What we do with session events that followed a decision the what-if changed.
pub const SESSION_POLICY: &str = "Observations are replayed as recorded, on both sides: \
session events and VDA heartbeats are kept even where they followed a decision the what-if \
made differently, because they are what the machines reported and lhc cannot invent the \
sessions that did not happen. A launch the what-if brokers anew holds its machine as a \
pending launch until it expires (no session for it was recorded); a session the log records \
after a launch the what-if refused still appears. The machines where this matters are \
flagged.";

/// One side's totals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SideSummary {
    /// State digest after the last record.
    pub digest: String,
    /// Records applied.
    pub records: u64,
    /// Records quarantined.
    pub quarantined: u64,
    /// Launch attempts decided.
    pub attempts: u64,
    /// Launches users made (retries folded into their first attempt).
    pub launches: u64,
    /// Of those, refused (the last attempt rejected).
    pub refused: u64,
    /// Users who saw a launch refused, sorted.
    pub users_affected: Vec<String>,
    /// The digest chain check (`--verify`), on the "as it happened" side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<Verified>,
}

/// A launch decision on one side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// "brokered" or the rejection reason.
    pub outcome: String,
    /// "cloud" or "lhc".
    pub via: String,
    /// The machine chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

/// A request decided differently.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChangedDecision {
    /// The request id.
    pub request: String,
    /// When.
    pub ts: Ts,
    /// Who.
    pub user: String,
    /// What.
    pub resource: String,
    /// The connector asked.
    pub connector: String,
    /// Its zone.
    pub zone: String,
    /// "better" (now brokered), "worse" (now refused), "changed" (another machine,
    /// reason or broker), "moot" (a StoreFront retry the what-if would not have needed: an
    /// earlier attempt of its launch is now brokered), "removed" or "added" (the request
    /// exists on one side only).
    pub change: &'static str,
    /// As it happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Outcome>,
    /// In the what-if.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Outcome>,
}

/// One zone on one side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ZoneSummary {
    /// LHC episodes.
    pub episodes: u64,
    /// Seconds in LHC mode (to the end of the log for an episode still going).
    pub lhc_s: i64,
    /// Seconds of those with a connector brokering.
    pub brokering_s: i64,
    /// Seconds in LHC mode with nobody brokering.
    pub no_broker_s: i64,
    /// Connectors that brokered in LHC mode, sorted.
    pub brokers: Vec<String>,
    /// Election view changes (3504).
    pub elections: u64,
    /// Failed imports (505).
    pub import_failures: u64,
    /// LHC launches decided on a stale snapshot.
    pub decided_on_stale: u64,
    /// Launch attempts brokered through the zone's connectors.
    pub brokered: u64,
    /// Launch attempts rejected.
    pub rejected: u64,
}

/// One zone before and after.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneCompare {
    /// Zone id.
    pub zone: String,
    /// As it happened.
    pub before: ZoneSummary,
    /// In the what-if.
    pub after: ZoneSummary,
}

/// A machine whose recorded sessions and the what-if's decisions disagree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FlaggedMachine {
    /// The VDA.
    pub machine: String,
    /// The requests concerned.
    pub requests: Vec<String>,
    /// Why, in words.
    pub why: String,
}

/// Attempts per outcome on both sides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Total {
    /// "brokered" or a reason code.
    pub outcome: String,
    /// As it happened.
    pub before: u64,
    /// In the what-if.
    pub after: u64,
}

/// The whole what-if report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WhatIf {
    /// What was replayed.
    pub source: String,
    /// The changes, in words.
    pub changes: Vec<String>,
    /// What the changes did to the log (records dropped, versions moved...).
    pub notes: Vec<String>,
    /// What happens to session events after a changed decision.
    pub session_policy: &'static str,
    /// As it happened.
    pub before: SideSummary,
    /// In the what-if.
    pub after: SideSummary,
    /// Requests now brokered that were refused.
    pub better: u64,
    /// Requests now refused that were brokered.
    pub worse: u64,
    /// Requests decided otherwise (machine, reason, broker), moot retries, or requests on
    /// one side only.
    pub other: u64,
    /// Launches users saw refused (last attempt rejected) that the what-if brokers.
    pub rescued: u64,
    /// Launches brokered as it happened that the what-if refuses.
    pub lost: u64,
    /// Every request decided differently, in time order.
    pub changed: Vec<ChangedDecision>,
    /// Attempts per outcome.
    pub totals: Vec<Total>,
    /// Each zone before and after.
    pub zones: Vec<ZoneCompare>,
    /// Machines whose recorded sessions follow a decision the what-if changed.
    pub flagged_machines: Vec<FlaggedMachine>,
    /// The answer in one paragraph.
    pub verdict: String,
}

/// The what-if side: the records with `plan` applied, replayed up to the source offset
/// `limit` (the last one the other side read). Returns the side and what the stream saw
/// (to check the plan against the log).
pub fn replay_modified<R: Records>(
    records: R,
    description: &str,
    plan: &Plan,
    limit: Option<u64>,
    forensics: bool,
) -> Result<(Side, Seen), WhatIfError> {
    let mut modified = Modified::new(records, plan).up_to(limit);
    let options = SideOptions {
        forensics,
        verify: None,
    };
    let side = replay_side(&mut modified, description, &options)?;
    Ok((side, modified.finish()))
}

/// Checks what the stream saw against the plan: every change must have found its target.
/// Returns notes on what the changes did.
pub fn check(
    plan: &Plan,
    seen: &Seen,
    before: &Side,
    after: &Side,
) -> Result<Vec<String>, WhatIfError> {
    if let Some((origin, index)) = seen.refused.first() {
        let why = after
            .quarantined
            .get(*index)
            .map(|(_, e)| e.clone())
            .unwrap_or_default();
        return Err(WhatIfError::bad(
            origin,
            format!("the engine cannot apply it here: {why}"),
        ));
    }
    if let (Some(last), Some(late)) = (
        seen.last_source_ts,
        plan.patch
            .iter()
            .find(|p| Some(p.record.ts()) > seen.last_source_ts),
    ) {
        return Err(WhatIfError::bad(
            &late.origin,
            format!(
                "its ts {} is after the log's last record ({last}): the what-if would \
                 stretch the log past what was recorded",
                late.record.ts()
            ),
        ));
    }
    // Source records the what-if makes unusable: the changes broke the log (a dropped
    // change that a later one builds on, a delete of what was never made...).
    let was: FxHashSet<u64> = before.quarantined.iter().map(|(o, _)| *o).collect();
    let broken: Vec<&(u64, String)> = after
        .quarantined
        .iter()
        .filter(|(o, _)| !was.contains(o))
        .collect();
    if let Some((offset, why)) = broken.first() {
        return Err(WhatIfError::bad(
            plan.described.join("; "),
            format!(
                "these changes make the log invalid: {} record(s) of it could no longer be \
                 applied, the first at offset {offset}: {why}",
                broken.len()
            ),
        ));
    }
    for (i, (group, setting)) in plan.groups.iter().enumerate() {
        if seen.group_upserts[i] == 0 {
            let known: Vec<&str> = seen.groups.iter().map(String::as_str).collect();
            let hint = seen
                .groups
                .iter()
                .find(|g| g.eq_ignore_ascii_case(group))
                .map(|g| format!(" (ids are exact: did you mean {g}?)"))
                .unwrap_or_default();
            return Err(WhatIfError::bad(
                format!("--group {group}:{}", setting.key),
                format!(
                    "no delivery group {group:?} in this log{hint}; its groups: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
    }
    if !plan.site.is_empty() && seen.site_upserts == 0 {
        return Err(WhatIfError::bad(
            "--site",
            "this log holds no config.change: there is no site to change".into(),
        ));
    }
    for (filter, n) in plan.drops.iter().zip(&seen.dropped) {
        if *n == 0 {
            return Err(WhatIfError::bad(
                format!("--drop '{}'", filter.text),
                "matched no record of this log (values are exact; end one with * to match a \
                 prefix)"
                    .into(),
            ));
        }
    }
    let mut notes = Vec::new();
    for (filter, n) in plan.drops.iter().zip(&seen.dropped) {
        notes.push(format!("--drop '{}' removed {n} record(s)", filter.text));
    }
    if seen.ops_dropped > 0 {
        notes.push(format!(
            "{} config op(s) that introduced failed imports removed{}",
            seen.ops_dropped,
            match seen.deletes_dropped {
                0 => String::new(),
                n => format!(", and {n} later delete(s) of the objects they made"),
            }
        ));
    }
    if let Some((first, by)) = seen.versions_shifted {
        notes.push(format!(
            "patched config changes took new versions: each of the log's later versions is \
             one higher per patched change before it (from version {first} on, up to {by} \
             higher)"
        ));
    }
    if !plan.patch.is_empty() {
        notes.push(format!(
            "{} patch record(s) merged by time; each carries the offset of the log record it \
             precedes",
            plan.patch.len()
        ));
    }
    Ok(notes)
}

/// What a what-if does besides applying its plan.
#[derive(Clone, Debug, Default)]
pub struct WhatIfOptions {
    /// Also remove the config ops that introduced every failed import.
    pub without_bad_changes: bool,
    /// Verify the "as it happened" side against this digest chain (offset → digest).
    pub verify: Option<BTreeMap<u64, String>>,
}

/// Rounds of `--without-bad-changes` at most: each removes the ops the previous round's
/// 505s still name (a 505 names only its first failure unless CSS tracing is on).
const BAD_CHANGE_ROUNDS: usize = 8;

/// Removes the bad config ops until no failed import names a config change, or the
/// rounds run out: returns the plan, the what-if side, what its stream saw, and notes.
pub fn without_bad_changes<F>(
    open: F,
    description: &str,
    before: &Side,
    plan: &Plan,
) -> Result<(Plan, Side, Seen, Vec<String>), WhatIfError>
where
    F: Fn() -> Result<Source, SourceError>,
{
    let mut plan = plan.clone();
    let base = plan.described.clone();
    let mut removed = Vec::new();
    let (mut new, mut notes) = bad_causes(before);
    let mut round = 0;
    loop {
        new.retain(|(key, _)| !plan.drop_ops.contains(key));
        for (key, text) in new.drain(..) {
            plan.drop_ops.insert(key);
            removed.push(text);
        }
        plan.described = base.clone();
        if !removed.is_empty() {
            plan.described.push(format!(
                "the {} config op(s) that introduced the failed imports not made",
                removed.len()
            ));
        }
        round += 1;
        let (after, seen) = replay_modified(open()?, description, &plan, before.last_offset, true)?;
        let (more, _) = bad_causes(&after);
        let more: Vec<_> = more
            .into_iter()
            .filter(|(key, _)| !plan.drop_ops.contains(key))
            .collect();
        if more.is_empty() || round == BAD_CHANGE_ROUNDS {
            if !more.is_empty() {
                notes.push(format!(
                    "after {round} rounds, {} more config op(s) still fail imports: see `lhc \
                     forensics sync` on the what-if's log",
                    more.len()
                ));
            }
            notes.extend(removed.iter().map(|r| format!("not made: {r}")));
            return Ok((plan, after, seen, notes));
        }
        new = more;
    }
}

/// A config op by the offset of its change, its object's kind and id.
type BadOp = (u64, ObjectKind, String);

/// The ops a side's failed imports blame — ((offset, kind, id), in words) — and notes (the
/// storage faults, which stay: a disk failing is an observation, not a change).
fn bad_causes(side: &Side) -> (Vec<(BadOp, String)>, Vec<String>) {
    let mut causes = Vec::new();
    let mut notes = Vec::new();
    let Some(forensics) = &side.forensics else {
        return (causes, notes);
    };
    let mut storage = 0;
    for cause in &forensics.root_causes {
        let (Some(version), Some(kind)) = (
            cause.introduced_by.version,
            ObjectKind::from_name(&cause.kind),
        ) else {
            storage += 1;
            continue;
        };
        causes.push((
            (cause.introduced_by.offset, kind, cause.id.clone()),
            format!(
                "{} {} (version {version}, offset {}: {})",
                cause.kind, cause.id, cause.introduced_by.offset, cause.rule
            ),
        ));
    }
    if storage > 0 {
        notes.push(format!(
            "{storage} failure cause(s) from storage faults kept: they are observations, \
             not changes"
        ));
    }
    (causes, notes)
}

/// Runs a what-if on the source `open` gives. Both sides run at once on two threads from
/// one read of the source ([`Tee`]). With `without_bad_changes` the "as it happened" side
/// runs first, alone, to find the bad ops (a 505 can name a change made any time before
/// it), then the what-if reads the source again (up to the same offset), a round per
/// layer of failures, unless there is nothing to remove.
pub fn whatif<F>(open: F, plan: &Plan, options: &WhatIfOptions) -> Result<WhatIf, WhatIfError>
where
    F: Fn() -> Result<Source, SourceError>,
{
    let mut source = open()?;
    let description = source.describe().to_string();
    let side_options = SideOptions {
        forensics: options.without_bad_changes,
        verify: options.verify.clone(),
    };
    if options.without_bad_changes {
        let before = replay_side(&mut source, &description, &side_options)?;
        drop(source);
        verified(&before)?;
        let (causes, _) = bad_causes(&before);
        let mut notes = Vec::new();
        if causes.is_empty() {
            notes
                .push("no config change failed an import: there is no bad change to remove".into());
            if plan.is_empty() {
                // Nothing to remove and nothing else asked: the what-if is the log itself.
                return Ok(compare(plan, notes, &before, &before));
            }
        }
        let (plan, after, seen, more) = without_bad_changes(&open, &description, &before, plan)?;
        if seen.last_source_offset < before.last_offset {
            return Err(WhatIfError::bad(
                "--without-bad-changes",
                format!(
                    "{description} could not be read again up to offset {} (read twice: a \
                     pipe gives its records once); save it to a file first",
                    before.last_offset.unwrap_or_default()
                ),
            ));
        }
        notes.extend(more);
        notes.extend(check(&plan, &seen, &before, &after)?);
        return Ok(compare(&plan, notes, &before, &after));
    }
    let (send, receive) = std::sync::mpsc::sync_channel(8);
    let (before, modified) = std::thread::scope(|scope| {
        let follower =
            scope.spawn(|| replay_modified(Follow::new(receive), &description, plan, None, false));
        let before = replay_side(&mut Tee::new(source, send), &description, &side_options);
        let modified = follower.join().expect("the what-if replay does not panic");
        (before, modified)
    });
    let before = before?;
    verified(&before)?;
    let (after, seen) = modified?;
    let notes = check(plan, &seen, &before, &after)?;
    Ok(compare(plan, notes, &before, &after))
}

/// Refuses a replay that does not reproduce the recorded digest chain.
fn verified(before: &Side) -> Result<(), WhatIfError> {
    let Some(v) = &before.verified else {
        return Ok(());
    };
    if let Some((offset, expected, actual)) = &v.first_difference {
        return Err(WhatIfError::bad(
            "--verify",
            format!(
                "the replay does not reproduce the recorded chain: after offset {offset} the \
                 chain says {expected}, the replay {actual}; a what-if on this log would not \
                 start from what happened (was it recorded by another version of lhc?)"
            ),
        ));
    }
    if v.links == 0 {
        return Err(WhatIfError::bad(
            "--verify",
            "no digest of the chain is at an offset of this log: it is another log's chain".into(),
        ));
    }
    Ok(())
}

/// Each launch (by its first attempt's id): (time and id of the attempt that ended it, user
/// id, whether it was brokered). A launch ends at its first brokered attempt (StoreFront
/// stops there), else at its last attempt.
fn finals(side: &Side) -> FxHashMap<&str, (Ts, &str, u32, bool)> {
    let mut out: FxHashMap<&str, (Ts, &str, u32, bool)> = FxHashMap::default();
    // In log order: an attempt after the brokered one changes nothing.
    for (request, d) in &side.decisions.list {
        let root = d.retry_of.as_deref().unwrap_or(request);
        let this = (d.ts, request.as_str(), d.user, d.brokered());
        let entry = out.entry(root).or_insert(this);
        if !entry.3 {
            *entry = this;
        }
    }
    out
}

/// Attempts made after an attempt of the same launch was brokered: StoreFront would not
/// have sent them (they are in the log because that attempt was refused as it happened).
fn moot(side: &Side) -> FxHashSet<&str> {
    let mut brokered: FxHashSet<&str> = FxHashSet::default();
    let mut moot = FxHashSet::default();
    for (request, d) in &side.decisions.list {
        let root = d.retry_of.as_deref().unwrap_or(request);
        if brokered.contains(root) {
            moot.insert(request.as_str());
        } else if d.brokered() {
            brokered.insert(root);
        }
    }
    moot
}

fn summary(side: &Side) -> SideSummary {
    let finals = finals(side);
    let names = &side.decisions.names;
    let users: BTreeSet<&str> = finals
        .values()
        .filter(|f| !f.3)
        .map(|f| names.name(f.2))
        .collect();
    SideSummary {
        digest: side.digest.clone(),
        records: side.records,
        quarantined: side.quarantined.len() as u64,
        attempts: side.decisions.len() as u64,
        launches: finals.len() as u64,
        refused: finals.values().filter(|f| !f.3).count() as u64,
        users_affected: users.into_iter().map(str::to_string).collect(),
        verified: side.verified.clone(),
    }
}

fn zone_summary(side: &Side, zone: &str) -> ZoneSummary {
    let mut z = ZoneSummary::default();
    let mut brokers = BTreeSet::new();
    for e in side.report.episodes.iter().filter(|e| e.zone == zone) {
        z.episodes += 1;
        z.lhc_s += e.duration_s;
        z.no_broker_s += e
            .no_broker
            .iter()
            .map(|b| b.to.seconds_since(b.from))
            .sum::<i64>();
        let mut spans: Vec<(Ts, Ts)> = Vec::new();
        for (connector, lane) in &e.lanes {
            for s in lane.iter().filter(|s| s.brokering) {
                brokers.insert(connector.clone());
                spans.push((s.from, s.to));
            }
        }
        spans.sort();
        let mut end: Option<Ts> = None;
        for (from, to) in spans {
            let from = end.map_or(from, |e| e.max(from));
            if to > from {
                z.brokering_s += to.seconds_since(from);
            }
            end = Some(end.map_or(to, |e| e.max(to)));
        }
    }
    z.brokers = brokers.into_iter().collect();
    if let Some(counts) = side.zones.get(zone) {
        z.elections = counts.elections;
        z.import_failures = counts.import_failures;
        z.decided_on_stale = counts.decided_on_stale;
    }
    let names = &side.decisions.names;
    for (_, d) in side
        .decisions
        .list
        .iter()
        .filter(|(_, d)| names.name(d.zone) == zone)
    {
        if d.brokered() {
            z.brokered += 1;
        } else {
            z.rejected += 1;
        }
    }
    z
}

fn outcome(side: &Side, d: &Decision) -> Outcome {
    Outcome {
        outcome: d.outcome(),
        via: lhc_engine::engine::snake(&d.via),
        machine: d.machine.map(|m| side.decisions.names.name(m).to_string()),
    }
}

/// Whether two sides decided a request alike (names compared as text: each side has its
/// own ids).
fn alike(before: &Side, b: &Decision, after: &Side, a: &Decision) -> bool {
    fn machine<'a>(s: &'a Side, d: &Decision) -> Option<&'a str> {
        d.machine.map(|m| s.decisions.names.name(m))
    }
    (b.reason, b.rejected, b.via) == (a.reason, a.rejected, a.via)
        && machine(before, b) == machine(after, a)
}

/// The comparison of two sides.
pub fn compare(plan: &Plan, mut notes: Vec<String>, before: &Side, after: &Side) -> WhatIf {
    let mut changed = Vec::new();
    let mut row = |request: &str, b: Option<&Decision>, a: Option<&Decision>, change| {
        let (side, d) = match (a, b) {
            (Some(a), _) => (after, a),
            (None, Some(b)) => (before, b),
            (None, None) => return,
        };
        let name = |id| side.decisions.names.name(id).to_string();
        changed.push(ChangedDecision {
            request: request.to_string(),
            ts: d.ts,
            user: name(d.user),
            resource: name(d.resource),
            connector: name(d.connector),
            zone: name(d.zone),
            change,
            before: b.map(|b| outcome(before, b)),
            after: a.map(|a| outcome(after, a)),
        });
    };
    let moot = moot(after);
    for (request, b) in &before.decisions.list {
        let a = after.decisions.get(request);
        let change = match a {
            Some(a) if alike(before, b, after, a) => continue,
            Some(_) if moot.contains(request.as_str()) => "moot",
            Some(a) if !b.brokered() && a.brokered() => "better",
            Some(a) if b.brokered() && !a.brokered() => "worse",
            Some(_) => "changed",
            None => "removed",
        };
        row(request, Some(b), a, change);
    }
    for (request, a) in &after.decisions.list {
        if before.decisions.get(request).is_none() {
            row(request, None, Some(a), "added");
        }
    }
    // Stable: requests of one instant stay in log order.
    changed.sort_by_key(|c| c.ts);
    let stopped =
        |o: &Option<Outcome>| o.as_ref().is_some_and(|o| o.outcome == "connector_stopped");
    let sent_to_stopped = changed
        .iter()
        .filter(|c| stopped(&c.after) && !stopped(&c.before) && c.before.is_some())
        .count();
    if sent_to_stopped > 0 {
        notes.push(format!(
            "{} request(s) reached a connector the what-if keeps stopped: they are refused \
             connector_stopped (StoreFront would then have tried another controller, which the \
             log cannot tell)",
            thousands(sent_to_stopped as u64)
        ));
    }
    let count = |kind: &str| changed.iter().filter(|c| c.change == kind).count() as u64;
    let (better, worse) = (count("better"), count("worse"));
    let other = changed.len() as u64 - better - worse;

    let mut tally: FxHashMap<(Option<Reason>, bool), (u64, u64)> = FxHashMap::default();
    for (_, d) in &before.decisions.list {
        tally.entry((d.reason, d.rejected)).or_default().0 += 1;
    }
    for (_, d) in &after.decisions.list {
        tally.entry((d.reason, d.rejected)).or_default().1 += 1;
    }
    let mut totals: Vec<Total> = tally
        .into_iter()
        .map(|((reason, rejected), (b, a))| Total {
            outcome: match (reason, rejected) {
                (Some(r), _) => lhc_engine::engine::snake(&r),
                (None, true) => "rejected".into(),
                (None, false) => "brokered".into(),
            },
            before: b,
            after: a,
        })
        .collect();
    // Brokered first, then the reasons in code order.
    totals.sort_by_key(|t| (t.outcome != "brokered", t.outcome.clone()));

    let zone_ids: BTreeSet<&str> = [before, after]
        .iter()
        .flat_map(|s| {
            s.report
                .episodes
                .iter()
                .map(|e| e.zone.as_str())
                .chain(s.zones.keys().map(String::as_str))
                .chain(
                    s.decisions
                        .list
                        .iter()
                        .map(|(_, d)| s.decisions.names.name(d.zone)),
                )
        })
        .filter(|z| !z.is_empty())
        .collect();
    let zones: Vec<ZoneCompare> = zone_ids
        .into_iter()
        .map(|z| ZoneCompare {
            zone: z.to_string(),
            before: zone_summary(before, z),
            after: zone_summary(after, z),
        })
        .collect();

    let mut flagged: BTreeMap<String, (Vec<String>, BTreeSet<&'static str>)> = BTreeMap::new();
    for c in &changed {
        let machine = |o: &Option<Outcome>| o.as_ref().and_then(|o| o.machine.clone());
        let (mb, ma) = (machine(&c.before), machine(&c.after));
        if mb == ma {
            continue;
        }
        if let Some(m) = mb {
            let e = flagged.entry(m).or_default();
            e.0.push(c.request.clone());
            e.1.insert("sessions recorded on it may come from a launch the what-if sent elsewhere or refused");
        }
        if let Some(m) = ma {
            let e = flagged.entry(m).or_default();
            e.0.push(c.request.clone());
            e.1.insert("the what-if sent a launch here that the log holds no session for");
        }
    }
    let flagged_machines = flagged
        .into_iter()
        .map(|(machine, (requests, why))| FlaggedMachine {
            machine,
            requests,
            why: why.into_iter().collect::<Vec<_>>().join("; "),
        })
        .collect();

    let (sb, sa) = (summary(before), summary(after));
    // Launches users saw refused, and what became of them.
    let (fb, fa) = (finals(before), finals(after));
    let rescued = fb
        .iter()
        .filter(|(root, f)| !f.3 && fa.get(*root).is_some_and(|a| a.3))
        .count() as u64;
    let lost = fb
        .iter()
        .filter(|(root, f)| f.3 && fa.get(*root).is_some_and(|a| !a.3))
        .count() as u64;
    let mut verdict = verdict(
        plan,
        &sb,
        (rescued, lost),
        (better, worse, other),
        before.digest == after.digest,
        &zones,
    );
    if sent_to_stopped > 0 {
        verdict.push_str(&format!(
            " Of the requests now refused, {} reached a connector the what-if keeps stopped: \
             StoreFront would have tried another controller, which the log cannot tell, so \
             read them as an upper bound.",
            thousands(sent_to_stopped as u64)
        ));
    }
    WhatIf {
        source: before.report.source.clone(),
        changes: plan.described.clone(),
        notes,
        session_policy: SESSION_POLICY,
        before: sb,
        after: sa,
        better,
        worse,
        other,
        rescued,
        lost,
        changed,
        totals,
        zones,
        flagged_machines,
        verdict,
    }
}

/// A count with thousands separators.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn minutes(s: i64) -> String {
    if s == 0 {
        "0 s".into()
    } else if s % 60 == 0 || s >= 600 {
        format!("{} min", (s + 30) / 60)
    } else {
        format!("{s} s")
    }
}

fn verdict(
    plan: &Plan,
    sb: &SideSummary,
    (rescued, lost): (u64, u64),
    (better, worse, other): (u64, u64, u64),
    same_state: bool,
    zones: &[ZoneCompare],
) -> String {
    let what = if plan.described.is_empty() {
        "With no change".to_string()
    } else {
        format!("With {}", plan.described.join("; "))
    };
    let mut text = format!(
        "{what}, {} of the {} launches users saw refused would have been brokered, and {} \
         launch{} brokered as it happened would have been refused",
        thousands(rescued),
        thousands(sb.refused),
        thousands(lost),
        if lost == 1 { "" } else { "es" },
    );
    text.push_str(&format!(
        " ({} attempt decision{} better, {} worse, {} otherwise different).",
        thousands(better),
        if better == 1 { "" } else { "s" },
        thousands(worse),
        thousands(other)
    ));
    for z in zones {
        let (b, a) = (&z.before, &z.after);
        let mut parts = Vec::new();
        if b.episodes != a.episodes || b.lhc_s != a.lhc_s {
            parts.push(format!(
                "LHC mode {} ({} episode(s)) → {} ({})",
                minutes(b.lhc_s),
                b.episodes,
                minutes(a.lhc_s),
                a.episodes
            ));
        }
        if b.no_broker_s != a.no_broker_s {
            parts.push(format!(
                "time without a broker {} → {}",
                minutes(b.no_broker_s),
                minutes(a.no_broker_s)
            ));
        }
        if b.brokers != a.brokers {
            parts.push(format!(
                "brokers {} → {}",
                list(&b.brokers),
                list(&a.brokers)
            ));
        }
        if b.elections != a.elections {
            parts.push(format!(
                "election changes {} → {}",
                b.elections, a.elections
            ));
        }
        if b.import_failures != a.import_failures {
            parts.push(format!(
                "failed imports (505) {} → {}",
                b.import_failures, a.import_failures
            ));
        }
        if b.decided_on_stale != a.decided_on_stale {
            parts.push(format!(
                "launches decided on a stale snapshot {} → {}",
                b.decided_on_stale, a.decided_on_stale
            ));
        }
        if !parts.is_empty() {
            text.push_str(&format!(" Zone {}: {}.", z.zone, parts.join("; ")));
        }
    }
    if better == 0 && worse == 0 && other == 0 && same_state {
        text.push_str(" The final state is the same on both sides.");
    }
    text
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}
