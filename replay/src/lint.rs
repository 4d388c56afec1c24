//! `lhc lint`: the seeds' configuration advice as checks on a log (its final configuration
//! and what the replay showed).
//!
//! Invariant: every finding cites the requirement or the seed passage it comes from, and
//! findings come out in a defined order (check, then subject).

use std::collections::{BTreeMap, BTreeSet};

use lhc_engine::config::{ConfigObject, DeliveryGroupKind, ObjectKind};
use lhc_engine::event::EventKind;
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
    /// What was found and what to do.
    pub detail: String,
    /// The requirement or seed advice it comes from.
    pub cites: &'static str,
}

const SEED_STOREFRONT: &str = "R-STATE-4; seed 000 (Local Host Cache): \"LHC only engages if Cloud Connectors receive traffic from StoreFront\"";
const SEED_FORCED: &str = "R-STATE-8; seed 000: Enable-LhcForcedOutageMode \"must be run on all Cloud Connectors within the zone\"";
const SEED_POOLED: &str = "R-LAUNCH-6; seed 000: pooled power-managed desktops \"not available by default\" during an outage";
const SEED_ONE: &str = "R-ELECT-5; seed 000: during LHC mode VDAs re-register with the elected broker of the zone — with one connector there is no other";
const SEED_SCALE: &str =
    "§10; seed 002: up to 10,000 VDAs per zone and 40,000 per site during an outage";
const SEED_FLAP: &str = "R-STATE-1; seed 000: with the network \"going up and down repeatedly\", forcing LHC prevents continuous transitions and VDA registration storms";
const SEED_PROBE: &str = "R-ELECT-4; seed 000: connectors of a zone \"must be able to reach each other\" at the election endpoint, else multiple brokers and launch failures";
const SEED_TAG: &str = "R-LAUNCH-8; seed 000: \"tag restrictions can cause launch failures if tagged VDAs are not present in all zones\"";

/// How long a zone may stay forced on part of its connectors (the time to run the command
/// on each) before it is a finding.
const FORCED_GRACE_S: i64 = 300;

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
        Ok(Flow::Apply)
    }

    fn after(&mut self, step: After<'_>) -> Result<(), SourceError> {
        let engine = step.engine;
        let outputs = step.outputs;
        for o in outputs.iter() {
            if let Output::Event(e) = o {
                if e.kind() == Some(EventKind::HealthCheckFailed) {
                    *self
                        .failures_by_hour
                        .entry((e.connector.clone(), e.ts.millis() / 3_600_000))
                        .or_default() += 1;
                }
            }
        }
        let Some((ts, admin)) = self.current else {
            return Ok(());
        };
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
    let Seen {
        storefront,
        failures_by_hour,
        forced_subset,
        probes,
        ..
    } = seen;
    let mut findings = Vec::new();
    let site = engine.site();

    // Connectors without StoreFront traffic cannot enter LHC mode.
    for id in engine.connectors().keys() {
        if !storefront.contains(&id.to_lowercase()) {
            findings.push(Finding {
                check: "no-storefront-traffic",
                severity: Severity::Error,
                subject: id.clone(),
                detail: "no StoreFront server contacted this connector in the log: it cannot enter LHC mode (3002 no_storefront_traffic); add it to StoreFront's list of connectors".into(),
                cites: SEED_STOREFRONT,
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
                "forced outage on {} only, for more than {} minutes: run Enable-LhcForcedOutageMode (admin forced outage) on every connector of the zone",
                forced.join(", "),
                FORCED_GRACE_S / 60
            ),
            cites: SEED_FORCED,
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
                    detail: "pooled, power-managed group: every launch fails during an outage (pooled_unavailable_in_outage) unless the site allows and the group sets reuse_machines_without_shutdown_in_outage".into(),
                    cites: SEED_POOLED,
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
                detail: "one connector in this zone: if it stops during an outage nothing brokers; run at least two".into(),
                cites: SEED_ONE,
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
                detail: format!("{n} VDAs: more than the 10,000 an LHC broker handles in a zone; split the zone"),
                cites: SEED_SCALE,
            });
        }
    }
    if total > 40_000 {
        findings.push(Finding {
            check: "site-above-40000-vdas",
            severity: Severity::Warning,
            subject: "site".into(),
            detail: format!("{total} VDAs: more than the 40,000 LHC handles in a site"),
            cites: SEED_SCALE,
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
            detail: format!("{n} health-check failures (3001) in one hour: the network flaps; consider forcing the outage on the whole zone until it is fixed"),
            cites: SEED_FLAP,
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
                detail: format!("{failed} failed probes of a started peer ({ok} ok): split-brain risk in LHC mode; open the election endpoint between them"),
                cites: SEED_PROBE,
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
                        cites: SEED_TAG,
                    });
                }
            }
        }
    }
    findings.sort();
    Ok(LintReport {
        source: source.describe().to_string(),
        findings,
    })
}
