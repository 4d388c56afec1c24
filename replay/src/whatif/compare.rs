//! The comparison of the two sides of a what-if: requests decided differently, totals,
//! each zone before and after, the machines whose recorded sessions no longer match, and
//! the verdict.
//!
//! Invariant: computed from the two sides only (what each engine decided); every list is
//! in a deterministic order (log order, time order, or sorted names).

use std::collections::{BTreeMap, BTreeSet};

use lhc_engine::output::Reason;
use lhc_engine::Ts;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use super::{Decision, Plan, Side, Verified};

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

/// A side's totals, with its launches' `finals`.
fn summary(side: &Side, finals: &FxHashMap<&str, (Ts, &str, u32, bool)>) -> SideSummary {
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

    // Each side's launches, once: the totals and the verdict both read them.
    let (fb, fa) = (finals(before), finals(after));
    let (sb, sa) = (summary(before, &fb), summary(after, &fa));
    // Launches users saw refused, and what became of them.
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
