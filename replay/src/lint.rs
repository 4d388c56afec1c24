//! `lhc lint`: the seeds' configuration advice as checks on a log (its final configuration
//! and what the replay showed).
//!
//! Invariant: every finding cites the requirement it comes from, the Citrix documentation
//! page that gives the advice, and the fix (the cmdlet or action); findings come out in a
//! defined order (check, then subject).

use std::collections::{BTreeMap, BTreeSet};

use lhc_engine::config::{ConfigObject, DeliveryGroupKind, ObjectKind};
use lhc_engine::event::EventKind;
use lhc_engine::record::LifecycleEvent;
use lhc_engine::{Engine, Output, Record};
use serde::Serialize;

use crate::drive::{After, Before, Flow, Observer};
use crate::source::{Source, SourceError};

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// LHC will not work as intended.
    Error,
    /// A risk during an outage.
    Warning,
    /// Worth knowing.
    Info,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    /// Check id (kebab case).
    pub check: &'static str,
    /// Severity.
    pub severity: Severity,
    /// What it is about (a connector, zone, group...).
    pub subject: String,
    /// What was found.
    pub detail: String,
    /// What to do: the PowerShell or the action.
    pub fix: String,
    /// The requirement it comes from.
    pub cites: &'static str,
    /// The Citrix documentation page with the advice.
    pub docs: &'static str,
}

/// Citrix's Local Host Cache page (DaaS): LHC's conditions, election, limits, advice.
const LHC_DOCS: &str =
    "https://docs.citrix.com/en-us/citrix-daas/manage-deployment/local-host-cache.html";
/// Citrix's zones page: connectors per zone, VDA registration within a zone.
const ZONES_DOCS: &str = "https://docs.citrix.com/en-us/citrix-daas/manage-deployment/zones.html";
/// Citrix's tags page: tag restrictions on delivery groups.
const TAGS_DOCS: &str = "https://docs.citrix.com/en-us/citrix-daas/manage-deployment/tags.html";
/// The record contract (R-LOG), in this repository.
const LOG_DOCS: &str = "docs/engine.md#processing-one-record";

/// How long a zone may stay forced on part of its connectors (the time to run the command
/// on each) before it is a finding.
const FORCED_GRACE_S: i64 = 300;

/// A record dated this long after the previous one is a finding: a live site's log has
/// health checks every minute, so a week without a record is a clock set wrong, or pieces
/// of logs joined out of order.
const JUMP_S: i64 = 7 * 24 * 3600;

/// Health-check failures (3001) per connector per hour above which the network flaps.
const FLAP_PER_HOUR: usize = 3;

/// The lint report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LintReport {
    /// What was checked.
    pub source: String,
    /// Findings, ordered by check then subject.
    pub findings: Vec<Finding>,
}

/// What the checks collect along the replay.
#[derive(Default)]
struct Seen {
    /// Connectors (lowercased) some StoreFront contacted.
    storefront: BTreeSet<String>,
    /// (connector, hour) → health-check failures (3001).
    failures_by_hour: BTreeMap<(String, i64), usize>,
    /// Zone → since when only part of its started connectors is forced.
    subset_since: BTreeMap<String, lhc_engine::Ts>,
    /// Zones forced on a subset for longer than the grace, with the connectors forced.
    forced_subset: BTreeMap<String, Vec<String>>,
    /// (connector, peer) → (ok probes, failed probes while both were started).
    probes: BTreeMap<(String, String), (u64, u64)>,
    /// The record being applied: its time, and whether it can change forced outage.
    current: Option<(lhc_engine::Ts, bool)>,
    /// Quarantined records: the field at fault → (count, first offsets, first error).
    quarantined: BTreeMap<String, (u64, Vec<u64>, String)>,
    /// Connector → its running streak of failed imports: (first 505, last 505, count).
    failing: BTreeMap<String, (lhc_engine::Ts, lhc_engine::Ts, u64)>,
    /// Streaks of failed imports that lasted past a sync interval: (connector, first,
    /// last, count, ended by a good import).
    long_failures: Vec<(String, lhc_engine::Ts, lhc_engine::Ts, u64, bool)>,
    /// Connectors started while their zone was in LHC mode: (connector, zone, when).
    started_in_outage: Vec<(String, String, lhc_engine::Ts)>,
    /// Time of the last record.
    end: Option<lhc_engine::Ts>,
    /// The record being applied, if it is dated `JUMP_S` or more after the engine's time:
    /// its jump, while its outputs are counted.
    jumping: Option<Jump>,
    /// Records that moved time `JUMP_S` or more ahead.
    jumps: Vec<Jump>,
}

/// A record dated far after the previous one.
#[derive(Debug)]
struct Jump {
    offset: u64,
    /// The record's `type`.
    kind: &'static str,
    from: lhc_engine::Ts,
    to: lhc_engine::Ts,
    /// Outputs of the timers of the gap and of the record.
    outputs: u64,
    /// Later records quarantined for being older than the record before them.
    older_after: u64,
}

/// A connector's config sync interval, its override included, in seconds.
fn sync_interval(engine: &Engine, connector: &str) -> i64 {
    engine
        .connectors()
        .get(connector)
        .and_then(|c| c.sync_override_s())
        .unwrap_or(engine.params().sync_interval_s) as i64
}

impl Observer for Seen {
    type Error = SourceError;

    fn before(&mut self, step: Before<'_>) -> Result<Flow, SourceError> {
        let engine = step.engine;
        let record = step.record;
        match record {
            Ok(Record::StorefrontHeartbeat(s)) => {
                self.storefront.insert(s.connector.to_lowercase());
            }
            Ok(Record::ConnectorLifecycle(l)) if l.event == LifecycleEvent::Start => {
                let zone = engine
                    .site()
                    .connector_id(&l.connector)
                    .and_then(|id| engine.connectors().get(id))
                    .map(|c| c.zone().to_string());
                if let Some(zone) = zone {
                    let outage = engine
                        .connectors()
                        .values()
                        .any(|c| c.zone() == zone && c.in_lhc());
                    if outage {
                        self.started_in_outage
                            .push((l.connector.clone(), zone, l.ts));
                    }
                }
            }
            Ok(Record::PeerProbe(p)) => {
                let both_started = [&p.connector, &p.peer].iter().all(|c| {
                    engine
                        .site()
                        .connector_id(c)
                        .and_then(|id| engine.connectors().get(id))
                        .is_some_and(|c| c.started())
                });
                let e = self
                    .probes
                    .entry((p.connector.to_lowercase(), p.peer.to_lowercase()))
                    .or_default();
                if p.ok {
                    e.0 += 1;
                } else if both_started {
                    e.1 += 1;
                }
            }
            _ => {}
        }
        let admin = matches!(
            record,
            Ok(Record::AdminCommand(_)) | Ok(Record::ConnectorLifecycle(_))
        );
        self.current = record.as_ref().ok().map(|r| (r.ts(), admin));
        self.jumping = match (record, engine.now()) {
            (Ok(r), Some(now)) if r.ts().seconds_since(now) >= JUMP_S => Some(Jump {
                offset: step.offset,
                kind: r.type_name(),
                from: now,
                to: r.ts(),
                outputs: 0,
                older_after: 0,
            }),
            _ => None,
        };
        Ok(Flow::Apply)
    }

    fn during(&mut self, step: After<'_>) -> Result<(), SourceError> {
        if let Some(jump) = self.jumping.as_mut() {
            jump.outputs += step.outputs.len() as u64;
        }
        self.take(step.engine, step.outputs);
        Ok(())
    }

    fn after(&mut self, step: After<'_>) -> Result<(), SourceError> {
        let engine = step.engine;
        if let Some(mut jump) = self.jumping.take() {
            // Only a record applied moves time (a quarantined one changes nothing).
            if engine.now() == Some(jump.to) {
                jump.outputs += step.outputs.len() as u64;
                self.jumps.push(jump);
            }
        }
        self.take(engine, step.outputs);
        let Some((ts, admin)) = self.current else {
            return Ok(());
        };
        self.end = Some(self.end.map_or(ts, |end| end.max(ts)));
        if admin {
            self.follow_forced(engine, ts);
        }
        // Running the command on each connector takes a few minutes; past that, the zone
        // is forced on a subset.
        for (zone, since) in &self.subset_since {
            if ts.seconds_since(*since) >= FORCED_GRACE_S && !self.forced_subset.contains_key(zone)
            {
                let forced: Vec<String> = engine
                    .connectors()
                    .iter()
                    .filter(|(_, c)| c.zone() == zone.as_str() && c.forced())
                    .map(|(n, _)| n.clone())
                    .collect();
                self.forced_subset.insert(zone.clone(), forced);
            }
        }
        Ok(())
    }
}

impl Seen {
    /// After a command or lifecycle record: which zones are forced on part of their
    /// started connectors, since when.
    fn follow_forced(&mut self, engine: &Engine, ts: lhc_engine::Ts) {
        let mut zones: BTreeMap<&str, (Vec<String>, usize)> = BTreeMap::new();
        for (name, c) in engine.connectors().iter().filter(|(_, c)| c.started()) {
            let z = zones.entry(c.zone()).or_default();
            z.1 += 1;
            if c.forced() {
                z.0.push(name.clone());
            }
        }
        for (zone, (forced, started)) in zones {
            if !forced.is_empty() && forced.len() < started {
                self.subset_since.entry(zone.to_string()).or_insert(ts);
            } else {
                self.subset_since.remove(zone);
            }
        }
    }
}

/// Replays `source` and runs every check.
pub fn lint(source: &mut Source) -> Result<LintReport, SourceError> {
    let mut engine = Engine::new();
    let mut seen = Seen::default();
    crate::drive::drive(source, &mut engine, &mut seen)?;
    // Nothing applied at all: not a site log (random bytes, another program's JSONL), an
    // error rather than a warning about some records.
    let nothing_applied = source.records() > 0 && source.quarantined() == source.records();
    let Seen {
        storefront,
        failures_by_hour,
        forced_subset,
        probes,
        quarantined,
        failing,
        mut long_failures,
        started_in_outage,
        end: seen_end,
        jumps,
        ..
    } = seen;
    // Imports still failing at the end of the log, for longer than a sync interval (to
    // the end of the log: a 505 followed by an hour of 507s is the worst case).
    let end = seen_end.unwrap_or_default();
    for (connector, (first, last, count)) in failing {
        if end.seconds_since(first) > sync_interval(&engine, &connector) {
            long_failures.push((connector, first, last, count, false));
        }
    }
    let mut findings = Vec::new();
    let site = engine.site();

    // Connectors without StoreFront traffic cannot enter LHC mode.
    for id in engine.connectors().keys() {
        if !storefront.contains(&id.to_lowercase()) {
            findings.push(Finding {
                check: "no-storefront-traffic",
                severity: Severity::Error,
                subject: id.clone(),
                detail: "no StoreFront server contacted this connector in the log: it cannot enter LHC mode (3002 no_storefront_traffic)".into(),
                fix: format!("list it among the store's Delivery Controllers in StoreFront (Set-STFStoreFarm -FarmName <farm> -Servers <connectors including {id}>)"),
                cites: "R-STATE-4",
                docs: LHC_DOCS,
            });
        }
    }
    // Forced outage on part of a zone.
    for (zone, forced) in &forced_subset {
        findings.push(Finding {
            check: "forced-outage-on-part-of-zone",
            severity: Severity::Error,
            subject: zone.clone(),
            detail: format!(
                "forced outage on {} only, for more than {} minutes: the zone stays out of LHC mode until every connector is forced",
                forced.join(", "),
                FORCED_GRACE_S / 60
            ),
            fix: "run Enable-LhcForcedOutageMode on every Cloud Connector of the zone (or Disable-LhcForcedOutageMode on those forced)".into(),
            cites: "R-STATE-8",
            docs: LHC_DOCS,
        });
    }
    // Pooled groups that fail during an outage.
    let site_reuse = site
        .site()
        .reuse_machines_without_shutdown_in_outage_allowed;
    for stored in site.of_kind(ObjectKind::DeliveryGroup) {
        if let ConfigObject::DeliveryGroup { id, data } = &stored.object {
            let group_reuse = data.reuse_machines_without_shutdown_in_outage.unwrap_or(
                site.site()
                    .default_reuse_machines_without_shutdown_in_outage,
            );
            if data.kind == DeliveryGroupKind::SingleSessionPooled
                && data.power_managed
                && !(site_reuse && group_reuse)
            {
                findings.push(Finding {
                    check: "pooled-fails-in-outage",
                    severity: Severity::Warning,
                    subject: id.clone(),
                    detail: "pooled, power-managed group: every launch fails during an outage (pooled_unavailable_in_outage)".into(),
                    fix: format!("Set-BrokerSite -ReuseMachinesWithoutShutdownInOutageAllowed $true; Set-BrokerDesktopGroup -Name '{id}' -ReuseMachinesWithoutShutdownInOutage $true"),
                    cites: "R-LAUNCH-6",
                    docs: LHC_DOCS,
                });
            }
        }
    }
    // Zones: connectors and VDAs.
    let mut zone_connectors: BTreeMap<String, usize> = BTreeMap::new();
    for c in engine.connectors().values() {
        *zone_connectors.entry(c.zone().to_string()).or_default() += 1;
    }
    let mut zone_vdas: BTreeMap<String, usize> = BTreeMap::new();
    let mut group_zones: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for stored in site.of_kind(ObjectKind::Machine) {
        if let ConfigObject::Machine { data, .. } = &stored.object {
            *zone_vdas.entry(data.zone.to_lowercase()).or_default() += 1;
            group_zones
                .entry(data.delivery_group.to_lowercase())
                .or_default()
                .insert(data.zone.to_lowercase());
        }
    }
    for (zone, n) in &zone_connectors {
        if *n == 1 {
            findings.push(Finding {
                check: "single-connector-zone",
                severity: Severity::Warning,
                subject: zone.clone(),
                detail: "one connector in this zone: if it stops during an outage nothing brokers"
                    .into(),
                fix: "install a second Cloud Connector in the zone's resource location".into(),
                cites: "R-ELECT-5",
                docs: ZONES_DOCS,
            });
        }
    }
    let total: usize = zone_vdas.values().sum();
    for (zone, n) in &zone_vdas {
        if *n > 10_000 {
            findings.push(Finding {
                check: "zone-above-10000-vdas",
                severity: Severity::Warning,
                subject: zone.clone(),
                detail: format!("{n} VDAs: more than the 10,000 an LHC broker handles in a zone"),
                fix: "split the zone (a resource location with its own connectors per 10,000 VDAs)"
                    .into(),
                cites: "§10",
                docs: LHC_DOCS,
            });
        }
    }
    if total > 40_000 {
        findings.push(Finding {
            check: "site-above-40000-vdas",
            severity: Severity::Warning,
            subject: "site".into(),
            detail: format!("{total} VDAs: more than the 40,000 LHC handles in a site"),
            fix: "split the site, or accept that LHC will not carry all of it during an outage"
                .into(),
            cites: "§10",
            docs: LHC_DOCS,
        });
    }
    // Flapping: many first-failures an hour.
    let mut flapping: BTreeMap<String, usize> = BTreeMap::new();
    for ((connector, _), n) in &failures_by_hour {
        if *n > FLAP_PER_HOUR {
            let worst = flapping.entry(connector.clone()).or_default();
            *worst = (*worst).max(*n);
        }
    }
    for (connector, n) in flapping {
        findings.push(Finding {
            check: "network-flapping",
            severity: Severity::Warning,
            subject: connector,
            detail: format!("{n} health-check failures (3001) in one hour: the network flaps, and each flap re-registers the zone's VDAs"),
            fix: "fix the connection to Citrix Cloud; until then run Enable-LhcForcedOutageMode on every connector of the zone".into(),
            cites: "R-STATE-1",
            docs: LHC_DOCS,
        });
    }
    // Peers that cannot probe each other.
    for ((connector, peer), (ok, failed)) in &probes {
        if *failed > 0 {
            findings.push(Finding {
                check: "peers-cannot-probe",
                // Never reachable is an error; sometimes is a split brain waiting to happen.
                severity: if failed >= ok {
                    Severity::Error
                } else {
                    Severity::Warning
                },
                subject: format!("{connector} -> {peer}"),
                detail: format!("{failed} failed probes of a started peer ({ok} ok): split-brain risk in LHC mode"),
                fix: format!("open TCP 80 between the connectors (Test-NetConnection {} -Port 80 from {})", peer, connector),
                cites: "R-ELECT-4",
                docs: LHC_DOCS,
            });
        }
    }
    // Tag restrictions on groups spanning zones.
    for stored in site.of_kind(ObjectKind::DeliveryGroup) {
        if let ConfigObject::DeliveryGroup { id, data } = &stored.object {
            let zones = group_zones.get(&id.to_lowercase());
            if let (Some(tag), Some(zones)) = (&data.restrict_to_tag, zones) {
                if zones.len() > 1 {
                    findings.push(Finding {
                        check: "tag-restriction-across-zones",
                        severity: Severity::Warning,
                        subject: id.clone(),
                        detail: format!("restricted to tag {tag:?} with machines in {} zones: launches fail in a zone without tagged VDAs", zones.len()),
                        fix: format!("tag machines in every zone of the group (Add-BrokerTag -Name '{tag}' -Machine <machine>), or drop the restriction"),
                        cites: "R-LAUNCH-8",
                        docs: TAGS_DOCS,
                    });
                }
            }
        }
    }
    // Records quarantined: they changed nothing, and whoever produced them is wrong.
    for (field, (count, offsets, first)) in quarantined {
        let at: Vec<String> = offsets.iter().map(u64::to_string).collect();
        findings.push(Finding {
            check: "quarantined-records",
            severity: if nothing_applied {
                Severity::Error
            } else {
                Severity::Warning
            },
            subject: format!("offset {}", at.join(", ")),
            detail: format!(
                "{count} record(s) quarantined ({field}), changing nothing; the first: {first}"
            ),
            fix: format!(
                "fix the producer of these records; the first is at offset {} (`lhc log cat \
                 --from {}` in a log; non-blank line {} of a JSONL file)",
                offsets[0],
                offsets[0],
                offsets[0] + 1
            ),
            cites: "R-LOG-4",
            docs: LOG_DOCS,
        });
    }
    // Imports failing (505) for longer than a sync interval: the LHC database went stale.
    for (connector, first, last, count, ended) in long_failures {
        findings.push(Finding {
            check: "imports-failing",
            severity: Severity::Error,
            subject: connector,
            detail: format!(
                "{count} failed import(s) (505) from {first} to {last}, failing for longer than a sync interval{}: an outage then would broker from an old configuration",
                if ended { ", then a good import" } else { ", still failing at the end of the log" }
            ),
            fix: "`lhc forensics sync` names the object at fault and the cmdlet that fixes it".into(),
            cites: "R-CSS-4",
            docs: LHC_DOCS,
        });
    }
    // Records dated far after the previous one.
    for jump in jumps {
        let days = jump.to.seconds_since(jump.from) / 86_400;
        findings.push(Finding {
            check: "clock-jump",
            severity: Severity::Warning,
            subject: format!("offset {}", jump.offset),
            detail: format!(
                "dated {}, {days} day(s) after the record before it ({}): every timer of the \
                 gap fired first ({} output(s): a 3507/3509 report every report interval \
                 for each connector in LHC mode); {} later record(s) were quarantined for \
                 being older than it",
                jump.to, jump.from, jump.outputs, jump.older_after
            ),
            fix: format!(
                "if its clock was wrong, fix the clock of whatever produced it; `lhc log cat --from {}` \
                 shows the record (in a JSONL file: non-blank line {}), and `lhc whatif --drop \
                 '{} ts={}'` what the log says without it",
                jump.offset, jump.offset + 1, jump.kind, jump.to
            ),
            cites: "R-STATE-9",
            docs: LOG_DOCS,
        });
    }
    // Connectors started during an outage.
    for (connector, zone, ts) in started_in_outage {
        findings.push(Finding {
            check: "connector-started-during-outage",
            severity: Severity::Warning,
            subject: connector,
            detail: format!("started at {ts} while zone {zone} was in LHC mode: it rejoins the election and its VDAs re-register"),
            fix: "avoid restarting Cloud Connectors during an outage; restart them once the cloud is back (pending_recovery has ended)".into(),
            cites: "R-STATE-10",
            docs: LHC_DOCS,
        });
    }
    findings.sort();
    Ok(LintReport {
        source: source.describe().to_string(),
        findings,
    })
}

impl Seen {
    /// Counts what the outputs show: failed checks, 505 streaks, quarantines.
    fn take(&mut self, engine: &Engine, outputs: &[Output]) {
        for o in outputs.iter() {
            match o {
                Output::Event(e) => match e.kind() {
                    Some(EventKind::HealthCheckFailed) => {
                        *self
                            .failures_by_hour
                            .entry((e.connector.clone(), e.ts.millis() / 3_600_000))
                            .or_default() += 1;
                    }
                    Some(EventKind::ImportFailed(_)) => {
                        let streak = self
                            .failing
                            .entry(e.connector.clone())
                            .or_insert((e.ts, e.ts, 0));
                        streak.1 = e.ts;
                        streak.2 += 1;
                    }
                    Some(EventKind::Imported(_)) => {
                        if let Some((first, last, count)) = self.failing.remove(&e.connector) {
                            if e.ts.seconds_since(first) > sync_interval(engine, &e.connector) {
                                self.long_failures.push((
                                    e.connector.clone(),
                                    first,
                                    last,
                                    count,
                                    true,
                                ));
                            }
                        }
                    }
                    _ => {}
                },
                Output::Quarantine(q) => {
                    if q.error.starts_with("field `ts`") {
                        if let Some(jump) = self.jumps.last_mut() {
                            jump.older_after += 1;
                        }
                    }
                    // Grouped by the field at fault ("field `ts`: ...").
                    let field = q.error.split(':').next().unwrap_or("").to_string();
                    let entry =
                        self.quarantined
                            .entry(field)
                            .or_insert((0, Vec::new(), q.error.clone()));
                    entry.0 += 1;
                    if entry.1.len() < 5 {
                        entry.1.push(q.offset);
                    }
                }
                _ => {}
            }
        }
    }
}
