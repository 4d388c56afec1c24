//! The reducer: `(state, record) -> (state, outputs)` for LHC states (R-STATE), election
//! (R-ELECT), registration (R-REG), config sync (R-CSS) and the periodic reports.
//!
//! Invariants:
//! - Time is the records' `ts` and the deadlines derived from them; nothing else.
//! - Every collection that drives output is ordered (`BTreeMap`, `BTreeSet`, sorted `Vec`).
//! - A record that cannot be applied changes nothing and yields one `quarantine` output.
//! - Before a record at `ts`, every timer with a deadline at or before `ts` fires, in
//!   (deadline, connector, timer kind) order, with the deadline as its time (R-STATE-9).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::decode::DecodeError;
use crate::output::*;
use crate::params::Params;
use crate::record::*;
use crate::site::SiteConfig;
use crate::snapshot::{self, Snapshot};
use crate::ts::Ts;

/// The result of validating one configuration version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Validation {
    /// It imports: the shared snapshot.
    Valid(Arc<Snapshot>),
    /// It fails: every failure, in (kind, id) order.
    Invalid(Vec<ImportFailure>),
}

/// Who a VDA is registered with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Registrar {
    /// Nobody.
    #[default]
    None,
    /// The cloud broker, through its zone's connectors (R-REG-1).
    Cloud,
    /// A connector brokering in LHC mode.
    Connector(String),
}

impl Registrar {
    /// Who holds the registration, as outputs name it: "cloud", a connector id, or nobody.
    pub fn name(&self) -> Option<&str> {
        match self {
            Registrar::None => None,
            Registrar::Cloud => Some("cloud"),
            Registrar::Connector(c) => Some(c),
        }
    }
}

/// What the engine knows of a VDA at run time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineRuntime {
    /// Current registration.
    pub registrar: Registrar,
    /// Sessions of its last heartbeat (updated by session events).
    pub sessions: Vec<SessionReport>,
    /// Last refusal per connector ("cloud" included) with the connector's epoch, so a
    /// refusal is reported once per change, not at every heartbeat.
    pub refusals: BTreeMap<String, (Reason, u64)>,
    /// The machine's zone as of a site version (None: not configured), so a heartbeat
    /// costs one lookup. Derived from the configuration, so not saved.
    #[serde(skip)]
    pub resolved: Option<(u64, Option<u32>)>,
    /// Launches brokered to it that it has not reported yet (they count as load).
    pub pending: Vec<crate::broker::PendingLaunch>,
    /// Its contribution to the brokering pools.
    pub placement: Option<Box<crate::broker::Placement>>,
}

/// A machine as listings show it (the node's SDK, `lhc query`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MachineSummary<'a> {
    /// Its exact id.
    pub machine: &'a str,
    /// Who holds its registration ("cloud", a connector id, or nobody).
    pub registered_with: Option<&'a str>,
    /// Sessions of its last report.
    pub sessions: usize,
}

impl MachineRuntime {
    /// This machine, named `machine`, as listings show it.
    pub fn summary<'a>(&'a self, machine: &'a str) -> MachineSummary<'a> {
        MachineSummary {
            machine,
            registered_with: self.registrar.name(),
            sessions: self.sessions.len(),
        }
    }
}

/// One outage episode of a connector: from entry into initial_ha to its end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Episode {
    /// Entry into initial_ha.
    pub started: Ts,
    /// When the next 3507/3509 is due.
    pub next_report: Ts,
    /// Distinct machines that registered with this connector during the episode.
    pub registered: BTreeSet<String>,
    /// `via: "lhc"` launches brokered.
    pub successful_launches: u64,
    /// `via: "lhc"` launches rejected.
    pub failed_launches: u64,
}

/// An import in progress (`import_duration_s` > 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingImport {
    /// Version being imported.
    pub version: u64,
    /// When it completes.
    pub done_at: Ts,
    /// LHC mode started while it ran: it is abandoned with 507 even if LHC mode has ended
    /// by the time it completes (R-CSS-3).
    #[serde(default)]
    pub lhc_started: bool,
}

/// One connector's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connector {
    /// Zone id (lowercased), per the site configuration.
    pub zone: String,
    /// State of the Remote Broker Provider state machine.
    pub state: ConnectorState,
    /// When the current state was entered.
    pub state_since: Ts,
    /// High Availability Service running.
    pub ha_running: bool,
    /// Remote Broker Provider running.
    pub rbp_running: bool,
    /// Config Synchronizer running.
    pub css_running: bool,
    /// Latest health check: (time, ok).
    pub last_check: Option<(Ts, bool)>,
    /// First failed check of the current failure streak.
    pub first_failure: Option<Ts>,
    /// Started (`connector.lifecycle` start) and no health check since: its first check
    /// decides what the restart did to its snapshot (R-STATE-10), runs its first config
    /// sync check (R-CSS-1), and until then it offers no cloud path (R-REG-1).
    pub first_check_after_start: bool,
    /// It was stopped while in LHC mode (restarted during an outage): its snapshot stays
    /// usable and its first failed check after the start re-enters LHC mode at once
    /// (R-STATE-10). Consumed by that check.
    #[serde(default)]
    pub stopped_in_lhc: bool,
    /// Start of the running pending_recovery period: entering pending_recovery, or
    /// disabling forced outage in it (a full new period, R-STATE-8).
    #[serde(default)]
    pub recovery_since: Option<Ts>,
    /// Latest StoreFront heartbeat.
    pub storefront_last: Option<Ts>,
    /// StoreFront servers seen, with their last contact (R-DATA).
    pub storefronts: BTreeMap<String, Ts>,
    /// Latest probe of each peer: (time, ok, expiry already handled).
    pub probes: BTreeMap<String, (Ts, bool, bool)>,
    /// Version of the imported snapshot.
    pub snapshot: Option<u64>,
    /// Whether the snapshot may be used (R-STATE-10 makes it unusable).
    pub snapshot_usable: bool,
    /// A record has named this connector (its first sync check happened).
    pub named: bool,
    /// Next config sync check.
    pub next_sync: Option<Ts>,
    /// `set_config_sync_interval` override.
    pub sync_override_s: Option<u64>,
    /// Import in progress.
    pub import: Option<PendingImport>,
    /// A `storage.fault` waiting to fail the next import: its offset and detail.
    pub storage_fault: Option<(u64, String)>,
    /// CSS trace mode.
    pub css_trace: bool,
    /// HA SDK (read-only query API) enabled.
    pub ha_sdk: bool,
    /// Forced outage set.
    pub forced: bool,
    /// Last 3002 reason reported, so each reason is reported once.
    pub reported_ineligible: Option<IneligibleReason>,
    /// Elected broker in this connector's view.
    pub elected: Option<String>,
    /// Candidates in this connector's view, sorted.
    pub candidates: Vec<String>,
    /// In LHC mode and elected in its own view.
    pub brokering: bool,
    /// Bumped at every change that may turn a refusal into something else.
    pub epoch: u64,
    /// Machines registered with this connector.
    pub registrations: BTreeSet<String>,
    /// Sessions on the machines registered with this connector (kept in step, for 3507).
    pub session_count: u64,
    /// The current outage episode.
    pub episode: Option<Episode>,
    /// Machines this connector put in maintenance.
    pub maintenance: BTreeSet<String>,
    /// The LHC database content besides the configuration (R-DATA).
    pub data: crate::broker::LhcData,
}

impl Connector {
    fn new(ts: Ts) -> Connector {
        Connector {
            zone: String::new(),
            state: ConnectorState::WorkingNormally,
            state_since: ts,
            ha_running: true,
            rbp_running: true,
            css_running: true,
            last_check: None,
            first_failure: None,
            first_check_after_start: false,
            stopped_in_lhc: false,
            recovery_since: None,
            storefront_last: None,
            storefronts: BTreeMap::new(),
            probes: BTreeMap::new(),
            snapshot: None,
            snapshot_usable: false,
            named: false,
            next_sync: None,
            sync_override_s: None,
            import: None,
            storage_fault: None,
            css_trace: false,
            ha_sdk: false,
            forced: false,
            reported_ineligible: None,
            elected: None,
            candidates: Vec::new(),
            brokering: false,
            epoch: 0,
            registrations: BTreeSet::new(),
            session_count: 0,
            episode: None,
            maintenance: BTreeSet::new(),
            data: Default::default(),
        }
    }

    /// In LHC mode: initial_ha, extended_ha or pending_recovery.
    pub fn in_lhc(&self) -> bool {
        matches!(
            self.state,
            ConnectorState::InitialHa
                | ConnectorState::ExtendedHa
                | ConnectorState::PendingRecovery
        )
    }

    /// Not stopped (R-STATE-10).
    pub fn started(&self) -> bool {
        self.state != ConnectorState::Stopped
    }
}

/// Timers, in the order they fire when due at the same instant on one connector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    ProbeExpiry,
    ImportDone,
    RecoveryElapsed,
    Report,
    Sync,
}

/// The whole engine state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Engine {
    pub(crate) params: Params,
    pub(crate) now: Option<Ts>,
    pub(crate) site: SiteConfig,
    pub(crate) validations: BTreeMap<u64, Validation>,
    pub(crate) connectors: BTreeMap<String, Connector>,
    /// Connector ids in FQDN order (lowercase, byte order): the order of equal deadlines.
    pub(crate) connector_order: Vec<String>,
    pub(crate) machines: crate::detmap::DetMap<compact_str::CompactString, MachineRuntime>,
    /// Brokering pools by registrar, group and zone (see `broker`).
    pub(crate) pools: BTreeMap<String, crate::broker::Pool>,
    /// Sessions per user (lowercased) per machine: reconnects and session limits.
    pub(crate) user_sessions: crate::detmap::DetMap<String, BTreeMap<String, crate::broker::Tally>>,
    /// Static assignments the cloud broker made that no config.change records yet:
    /// group → user → machine (lowercased).
    pub(crate) cloud_assignments: BTreeMap<String, BTreeMap<String, String>>,
    /// Machines (lowercased) the cloud broker assigned.
    pub(crate) cloud_assigned: BTreeSet<String>,
    /// Launches brokered and not yet reported, by (brokered at, machine): each expires
    /// `PENDING_LAUNCH_S` later, at that instant and not at the machine's next heartbeat.
    /// An entry whose launch was reported meanwhile expires as a no-op.
    #[serde(default)]
    pub(crate) pending_expiry: BTreeSet<(Ts, compact_str::CompactString)>,
    /// The cloud broker's catalog of the current configuration. Derived, so not saved.
    #[serde(skip)]
    pub(crate) cloud: Option<Arc<Snapshot>>,
    /// No timer fires before this instant: set when timers are computed, cleared by any
    /// record that can create or move a timer. VDA heartbeats, session events, ticks and
    /// launch requests cannot, which spares the hot path a scan. Derived, so not saved.
    #[serde(skip)]
    pub(crate) quiet_until: Option<Ts>,
}

/// The configuration part of the engine state: the site configuration as the cloud holds
/// it and the validated snapshots by version. It changes only with `config.change` records
/// and imports, so a store can keep it apart from the state that changes with every record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigPart {
    /// The site configuration.
    pub site: SiteConfig,
    /// Validated configuration versions: shared snapshots, or the failures of a version.
    pub validations: BTreeMap<u64, Validation>,
}

/// Sort key of connector FQDNs: lowercase, byte order (R-ELECT-2).
fn fqdn_key(name: &str) -> String {
    name.to_lowercase()
}

impl Engine {
    /// An engine with default parameters and no configuration.
    pub fn new() -> Engine {
        Engine::default()
    }

    /// Current parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The site configuration as the cloud holds it.
    pub fn site(&self) -> &SiteConfig {
        &self.site
    }

    /// Connectors by exact id.
    pub fn connectors(&self) -> &BTreeMap<String, Connector> {
        &self.connectors
    }

    /// VDAs seen, by exact id.
    pub fn machines(&self) -> &crate::detmap::DetMap<compact_str::CompactString, MachineRuntime> {
        &self.machines
    }

    /// Time of the last applied record or fired timer.
    pub fn now(&self) -> Option<Ts> {
        self.now
    }

    /// The snapshot a connector uses, if any.
    pub fn snapshot_of(&self, connector: &str) -> Option<&Arc<Snapshot>> {
        snapshot_in(&self.validations, self.connectors.get(connector)?)
    }

    /// Moves the configuration part out (leaving it empty), so the rest serializes alone;
    /// give it back with [`Engine::restore_config`] before applying anything.
    pub fn take_config(&mut self) -> ConfigPart {
        ConfigPart {
            site: std::mem::take(&mut self.site),
            validations: std::mem::take(&mut self.validations),
        }
    }

    /// Puts back a configuration part taken with [`Engine::take_config`] (or stored apart).
    pub fn restore_config(&mut self, part: ConfigPart) {
        self.site = part.site;
        self.validations = part.validations;
    }

    /// Validated configuration versions held (snapshots in use, the current version).
    pub fn validations(&self) -> &BTreeMap<u64, Validation> {
        &self.validations
    }

    /// Checks the invariants the reducer keeps; the error says which one broke. It rebuilds
    /// the brokering pools from scratch, so it costs O(state): for tests, after every record.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut order: Vec<&String> = self.connectors.keys().collect();
        order.sort_by_key(|a| fqdn_key(a));
        if order != self.connector_order.iter().collect::<Vec<_>>() {
            return Err("connector_order is not the connectors in FQDN order".into());
        }
        for (name, c) in &self.connectors {
            if !c.brokering && !c.registrations.is_empty() {
                return Err(format!("{name} holds registrations without brokering"));
            }
            if c.brokering && !(c.in_lhc() && c.elected.as_deref() == Some(name.as_str())) {
                return Err(format!(
                    "{name} brokers outside LHC mode or without being elected"
                ));
            }
            if c.in_lhc() != c.episode.is_some() {
                return Err(format!("{name}: an episode exists exactly in LHC mode"));
            }
            let mut sessions = 0;
            for machine in &c.registrations {
                let runtime = self
                    .machines
                    .get(machine.as_str())
                    .ok_or(format!("{machine} has no runtime"))?;
                if runtime.registrar != Registrar::Connector(name.clone()) {
                    return Err(format!(
                        "{machine} is in {name}'s registrations but registered elsewhere"
                    ));
                }
                sessions += runtime.sessions.len() as u64;
            }
            if sessions != c.session_count {
                return Err(format!(
                    "{name}: session_count {} but {sessions} sessions",
                    c.session_count
                ));
            }
        }
        // The user index counts exactly the sessions and pending launches the machines hold.
        let mut counted: BTreeMap<String, BTreeMap<String, crate::broker::Tally>> = BTreeMap::new();
        for (machine, runtime) in self.machines.sorted() {
            for s in &runtime.sessions {
                let user = s.user.as_str().to_lowercase();
                let machines = counted.entry(user).or_default();
                machines
                    .entry(machine.to_string())
                    .or_default()
                    .count(s.state);
            }
            for p in &runtime.pending {
                let machines = counted.entry(p.user.clone()).or_default();
                machines.entry(machine.to_string()).or_default().pending += 1;
            }
        }
        let kept: BTreeMap<String, BTreeMap<String, crate::broker::Tally>> = self
            .user_sessions
            .sorted()
            .into_iter()
            .map(|(user, machines)| (user.clone(), machines.clone()))
            .collect();
        if kept != counted {
            return Err(format!(
                "the user index differs from the machines' sessions: kept {kept:?}, counted {counted:?}"
            ));
        }
        // The pools, kept in step incrementally, equal pools rebuilt from scratch.
        let mut rebuilt = self.clone();
        rebuilt.pools.clear();
        for runtime in rebuilt.machines.values_mut() {
            runtime.placement = None;
        }
        rebuilt.place_all();
        if rebuilt.pools != self.pools {
            let differ: Vec<_> = self
                .pools
                .iter()
                .filter(|(k, v)| rebuilt.pools.get(*k) != Some(*v))
                .map(|(k, v)| format!("{k:?}: kept {v:?}, rebuilt {:?}", rebuilt.pools.get(k)))
                .chain(
                    rebuilt
                        .pools
                        .keys()
                        .filter(|k| !self.pools.contains_key(*k))
                        .map(|k| format!("{k:?} missing")),
                )
                .collect();
            return Err(format!(
                "brokering pools differ from pools rebuilt from scratch: {differ:?}"
            ));
        }
        for (machine, runtime) in self.machines.iter() {
            // Every pending launch expires by the timer queue, not at a later heartbeat.
            if let Some(p) = runtime
                .pending
                .iter()
                .find(|p| !self.pending_expiry.contains(&(p.ts, machine.clone())))
            {
                return Err(format!(
                    "{machine}: pending launch {} of {} has no expiry",
                    p.request, p.ts
                ));
            }
            if let Registrar::Connector(name) = &runtime.registrar {
                if !self
                    .connectors
                    .get(name)
                    .is_some_and(|c| c.registrations.contains(machine.as_str()))
                {
                    return Err(format!(
                        "{machine} says it is registered with {name}, which does not list it"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Canonical digest of the whole state: SHA-256 of its canonical JSON, hex.
    pub fn digest(&self) -> String {
        use sha2::Digest;
        let bytes = serde_json::to_vec(self).expect("state serializes");
        let hash = sha2::Sha256::digest(&bytes);
        hash.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Applies one log entry: a decoded record, or the error that made it undecodable.
    pub fn apply(
        &mut self,
        offset: u64,
        input: Result<Record, DecodeError>,
        out: &mut Vec<Output>,
    ) {
        let record = match input {
            Ok(r) => r,
            Err(e) => {
                out.push(quarantine(offset, e.without_offset()));
                return;
            }
        };
        if let Err(error) = self.admissible(&record) {
            out.push(quarantine(offset, error));
            return;
        }
        let ts = record.ts();
        self.expire_pending(ts);
        self.fire_timers(ts, out);
        self.now = Some(ts);
        if let Some(name) = record
            .connector()
            .and_then(|n| self.site.connector_id(n))
            .map(str::to_string)
        {
            if !self.connectors[&name].named {
                self.connectors.get_mut(&name).expect("exists").named = true;
                self.quiet_until = None; // the first check schedules the next one
                self.sync_check(&name, ts, out);
            }
        }
        let moves_deadlines = matches!(record, Record::EngineParams(_) | Record::AdminCommand(_));
        self.apply_record(offset, record, out);
        if moves_deadlines {
            // A lowered period or a forced outage lifted can leave a deadline at or before
            // now: it fires at once, stamped with this record's time, never earlier
            // (R-STATE-8, R-STATE-9).
            self.fire_timers(ts, out);
        }
    }

    /// Advances time to `ts` without a record (end of a replay window).
    pub fn advance_to(&mut self, ts: Ts, out: &mut Vec<Output>) {
        if self.now.is_some_and(|now| ts < now) {
            return;
        }
        self.expire_pending(ts);
        self.fire_timers(ts, out);
        self.now = Some(ts);
    }

    /// Whether the record can be applied; the error names the field at fault.
    fn admissible(&self, record: &Record) -> Result<(), String> {
        if let Some(now) = self.now {
            if record.ts() < now {
                return Err(format!(
                    "field `ts`: {} is older than the previous record's {now} (R-LOG-4)",
                    record.ts()
                ));
            }
        }
        if let Some(name) = record.connector() {
            if self.site.connector_id(name).is_none() {
                return Err(format!(
                    "field `connector`: unknown connector {name:?}: no configuration names it yet"
                ));
            }
        }
        match record {
            Record::EngineParams(p) => self.params.clone().apply(p),
            Record::ConfigChange(change) => self.site.check(change),
            Record::PeerProbe(p) if self.site.connector_id(&p.peer).is_none() => Err(format!(
                "field `peer`: unknown connector {:?}: no configuration names it yet",
                p.peer
            )),
            Record::AdminCommand(a) => match (a.command, a.seconds) {
                (AdminCommandName::SetConfigSyncInterval, Some(s)) if (60..=3600).contains(&s) => {
                    Ok(())
                }
                (AdminCommandName::SetConfigSyncInterval, Some(s)) => Err(format!(
                    "field `seconds`: {s} is outside the allowed 60..=3600"
                )),
                (AdminCommandName::SetConfigSyncInterval, None) => Err(
                    "field `seconds`: set_config_sync_interval needs seconds (60..=3600)".into(),
                ),
                (_, Some(_)) => {
                    Err("field `seconds`: only set_config_sync_interval takes seconds".to_string())
                }
                (_, None) => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn apply_record(&mut self, offset: u64, record: Record, out: &mut Vec<Output>) {
        let ts = record.ts();
        match &record {
            Record::EngineParams(p) => {
                self.params.apply(p).expect("checked by admissible");
                self.quiet_until = None;
            }
            Record::ConfigChange(_) => {
                let Record::ConfigChange(change) = record else {
                    unreachable!("matched above")
                };
                self.site.apply_checked(change, offset);
                for id in self.site.connector_ids.values() {
                    let zone = self
                        .site
                        .connector_zone(id)
                        .unwrap_or_default()
                        .to_lowercase();
                    self.connectors
                        .entry(id.clone())
                        .or_insert_with(|| Connector::new(ts))
                        .zone = zone;
                }
                let mut order: Vec<String> = self.connectors.keys().cloned().collect();
                order.sort_by_key(|a| fqdn_key(a));
                self.connector_order = order;
                self.collect_validations();
                self.quiet_until = None;
                self.place_all();
            }
            Record::ClockTick(_) => {}
            Record::LaunchRequest(request) => {
                self.launch(request, ts, out);
                let name = self.connector_name(&record);
                self.retry_forced(&name, ts, false, out);
            }
            Record::VdaHeartbeat(_) => {
                let Record::VdaHeartbeat(hb) = record else {
                    unreachable!("matched above")
                };
                if let Some((machine, old)) = self.vda_heartbeat(hb, ts, out) {
                    self.sessions_changed(&machine, &old, ts);
                }
            }
            Record::SessionEvent(ev) => self.session_event(ev, ts, out),
            _ => {
                self.quiet_until = None;
                let name = self.connector_name(&record);
                let just_forced = matches!(
                    &record,
                    Record::AdminCommand(a) if a.command == AdminCommandName::EnableForcedOutage
                );
                let mut first_check_after_start = false;
                if self.connectors[&name].started() {
                    first_check_after_start = self.connector_record(&name, offset, &record, out);
                } else if let Record::ConnectorLifecycle(l) = record {
                    if l.event == LifecycleEvent::Start {
                        self.start(&name, ts, out);
                    }
                }
                self.retry_forced(&name, ts, just_forced, out);
                if first_check_after_start {
                    // R-CSS-1: after a start, the first sync check runs at the first health
                    // check, which it sees: restarted during an outage, it reports 510.
                    self.sync_check(&name, ts, out);
                }
                self.update_view(&name, ts, out);
            }
        }
    }

    fn connector_name(&self, record: &Record) -> String {
        let name = record.connector().expect("connector records");
        self.site
            .connector_id(name)
            .expect("checked by admissible")
            .to_string()
    }

    /// Records about a started connector. Returns whether the record was its first health
    /// check since a start.
    fn connector_record(
        &mut self,
        name: &str,
        offset: u64,
        record: &Record,
        out: &mut Vec<Output>,
    ) -> bool {
        let ts = record.ts();
        match record {
            Record::HealthCheck(h) => return self.health_check(name, ts, h.ok, out),
            Record::PeerProbe(p) => {
                let peer = self
                    .site
                    .connector_id(&p.peer)
                    .expect("checked")
                    .to_string();
                self.connectors
                    .get_mut(name)
                    .expect("exists")
                    .probes
                    .insert(peer, (ts, p.ok, false));
            }
            Record::StorefrontHeartbeat(s) => {
                let c = self.connectors.get_mut(name).expect("exists");
                c.storefront_last = Some(ts);
                c.storefronts.insert(s.storefront.clone(), ts);
            }
            Record::ServiceStatus(s) => {
                let c = self.connectors.get_mut(name).expect("exists");
                match s.service {
                    Service::HighAvailability => c.ha_running = s.running,
                    Service::RemoteBrokerProvider => c.rbp_running = s.running,
                    Service::ConfigSync => c.css_running = s.running,
                }
            }
            Record::ConnectorLifecycle(l) if l.event == LifecycleEvent::Stop => {
                self.stop(name, ts, out)
            }
            Record::StorageFault(f) => {
                self.connectors.get_mut(name).expect("exists").storage_fault =
                    Some((offset, f.detail.clone()));
            }
            Record::AdminCommand(a) => self.admin(name, ts, a, out),
            _ => {}
        }
        false
    }

    fn admin(&mut self, name: &str, ts: Ts, a: &AdminCommand, out: &mut Vec<Output>) {
        let c = self.connectors.get_mut(name).expect("exists");
        match a.command {
            AdminCommandName::EnableForcedOutage => {
                // In LHC mode it is held there from now on (a running pending_recovery
                // period stops: its timer needs `forced` false); outside, its entry is
                // tried after the record (`retry_forced`). Peers of the zone already forced
                // and waiting for the whole zone are retried then too, in FQDN order: forcing
                // the last connector brings the zone in at this record (R-STATE-8).
                c.forced = true;
                self.quiet_until = None;
            }
            AdminCommandName::DisableForcedOutage => {
                let was_forced = std::mem::replace(&mut c.forced, false);
                self.quiet_until = None;
                match c.state {
                    ConnectorState::InitialHa | ConnectorState::ExtendedHa => self.transition(
                        name,
                        ts,
                        ConnectorState::PendingRecovery,
                        TransitionCause::ForcedOutageDisabled,
                        out,
                    ),
                    // Held in pending_recovery: a full new period starts now.
                    ConnectorState::PendingRecovery if was_forced => c.recovery_since = Some(ts),
                    _ => {}
                }
            }
            AdminCommandName::SetConfigSyncInterval => c.sync_override_s = a.seconds,
            AdminCommandName::ClearConfigSyncInterval => c.sync_override_s = None,
            AdminCommandName::EnableHaSdk => c.ha_sdk = true,
            AdminCommandName::DisableHaSdk => c.ha_sdk = false,
            AdminCommandName::EnableCssTrace => c.css_trace = true,
            AdminCommandName::DisableCssTrace => c.css_trace = false,
        }
    }

    /// R-STATE-8: a forced connector outside LHC mode tries to enter at each record naming
    /// it; enabling forced outage on it also retries the zone's other waiting connectors.
    fn retry_forced(&mut self, name: &str, ts: Ts, just_forced: bool, out: &mut Vec<Output>) {
        let c = &self.connectors[name];
        if !c.forced || !c.started() {
            return;
        }
        self.quiet_until = None;
        if !just_forced {
            if !c.in_lhc() {
                self.try_enter_forced(name, ts, out);
            }
            return;
        }
        // It now counts as down for the peers waiting for the rest of the zone.
        let zone = self.connectors[name].zone.clone();
        let waiting: Vec<String> = self
            .connector_order
            .iter()
            .filter(|p| {
                let c = &self.connectors[p.as_str()];
                c.zone == zone && c.forced && c.started() && !c.in_lhc()
            })
            .cloned()
            .collect();
        // Every forced connector of the zone waiting outside LHC mode, this one included,
        // in FQDN order: forcing the last one brings the zone in at this record.
        for peer in waiting {
            self.try_enter_forced(&peer, ts, out);
        }
    }

    /// A forced connector's entry: the zone rule with forced peers counting as down, then
    /// eligibility (R-STATE-8, R-STATE-4); 3002 once per reason when it cannot enter.
    fn try_enter_forced(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        if self.unforced_healthy_peer(name, ts) {
            self.report_ineligible(name, ts, IneligibleReason::ForcedOnSubset, out);
        } else {
            self.try_enter_lhc(name, ts, TransitionCause::ForcedOutageEnabled, out);
        }
    }

    // ----- R-STATE ---------------------------------------------------------------------

    /// A health check. Returns whether it was the connector's first since a start.
    fn health_check(&mut self, name: &str, ts: Ts, ok: bool, out: &mut Vec<Output>) -> bool {
        let initial_ha_s = self.params.initial_ha_s;
        let threshold = match self.site_settings(name).profile {
            crate::config::Profile::Daas => self.params.second_check_s,
            crate::config::Profile::Onprem => self.params.onprem_outage_s,
        };
        let c = self.connectors.get_mut(name).expect("exists");
        let first_after_start = std::mem::take(&mut c.first_check_after_start);
        // R-STATE-10: what the restart did to the snapshot shows at the first check.
        let restarted_in_outage = std::mem::take(&mut c.stopped_in_lhc) && first_after_start;
        // (Also for a forced connector that entered LHC mode at its start record: R-STATE-10
        // judges the snapshot by when the connector stopped, not by how it entered.)
        if first_after_start && !ok && !restarted_in_outage && c.snapshot.is_some() {
            // Powered off in normal operations, on during an outage: not usable.
            c.snapshot_usable = false;
        }
        c.last_check = Some((ts, ok));
        let initial_over = ts >= c.state_since.plus_s(initial_ha_s);
        if c.forced && c.in_lhc() {
            // Held in LHC mode; only the end of initial_ha moves it: the outage goes on.
            if c.state == ConnectorState::InitialHa && initial_over {
                self.transition(
                    name,
                    ts,
                    ConnectorState::ExtendedHa,
                    TransitionCause::InitialHaElapsed,
                    out,
                );
            }
            return first_after_start;
        }
        match (c.state, ok) {
            (ConnectorState::WorkingNormally, false) => {
                c.first_failure = Some(ts);
                out.push(self.event(
                    ts,
                    name,
                    EventSource::RemoteBrokerProvider,
                    3001,
                    EventData::Empty(EmptyData {}),
                ));
                self.transition(
                    name,
                    ts,
                    ConnectorState::PendingHa,
                    TransitionCause::HealthCheckFailed,
                    out,
                );
                // Restarted during an outage: back into LHC mode at once, without the
                // second_check_s wait (the zone rule and eligibility still apply).
                if restarted_in_outage && self.zone_rule_holds(name, ts) {
                    self.try_enter_lhc(name, ts, TransitionCause::OutageConfirmed, out);
                }
            }
            (ConnectorState::PendingHa, true) => {
                c.first_failure = None;
                self.transition(
                    name,
                    ts,
                    ConnectorState::WorkingNormally,
                    TransitionCause::HealthCheckOk,
                    out,
                );
            }
            (ConnectorState::PendingHa, false) => {
                let first = *c.first_failure.get_or_insert(ts);
                if ts.millis() - first.millis() >= threshold as i64 * 1000
                    && self.zone_rule_holds(name, ts)
                {
                    self.try_enter_lhc(name, ts, TransitionCause::OutageConfirmed, out);
                }
            }
            (ConnectorState::InitialHa, _) if initial_over => {
                let to = if ok {
                    ConnectorState::PendingRecovery
                } else {
                    ConnectorState::ExtendedHa
                };
                self.transition(name, ts, to, TransitionCause::InitialHaElapsed, out);
            }
            (ConnectorState::ExtendedHa, true) => self.transition(
                name,
                ts,
                ConnectorState::PendingRecovery,
                TransitionCause::HealthCheckOk,
                out,
            ),
            (ConnectorState::PendingRecovery, false) => self.transition(
                name,
                ts,
                ConnectorState::ExtendedHa,
                TransitionCause::HealthCheckFailed,
                out,
            ),
            _ => {}
        }
        first_after_start
    }

    /// The zone rule's question: does a started peer of `name`'s zone, among those `counts`
    /// keeps, have an ok check as its latest, within `peer_health_window_s`?
    fn healthy_peer(&self, name: &str, ts: Ts, counts: impl Fn(&Connector) -> bool) -> bool {
        let Some(zone) = self.site.connector_zone(name) else {
            return false;
        };
        let window_ms = self.params.peer_health_window_s as i64 * 1000;
        self.site.zone_connectors(zone).filter(|p| *p != name).any(|peer| {
            self.connectors.get(peer).is_some_and(|p| {
                p.started()
                    && counts(p)
                    && matches!(p.last_check, Some((t, true)) if ts.millis() - t.millis() < window_ms)
            })
        })
    }

    /// R-STATE-8's zone rule: a healthy peer that is not forced keeps a forced connector out
    /// (a forced peer counts as down).
    fn unforced_healthy_peer(&self, name: &str, ts: Ts) -> bool {
        self.healthy_peer(name, ts, |p| !p.forced)
    }

    /// R-STATE-3: no other started connector of the zone has an ok check within the window,
    /// forced or not.
    fn zone_rule_holds(&self, name: &str, ts: Ts) -> bool {
        !self.healthy_peer(name, ts, |_| true)
    }

    /// The site settings a connector goes by: its snapshot's, else the cloud's.
    fn site_settings(&self, name: &str) -> crate::config::SiteData {
        match self.snapshot_of(name) {
            Some(s) => s.site.clone(),
            None => self.site.site(),
        }
    }

    /// R-STATE-4: the first reason the connector cannot enter LHC mode, if any.
    pub(crate) fn ineligible(&self, name: &str, ts: Ts) -> Option<IneligibleReason> {
        let c = &self.connectors[name];
        let site = self.site_settings(name);
        if !site.lhc_enabled {
            return Some(IneligibleReason::LhcDisabled);
        }
        if c.snapshot.is_none() || !c.snapshot_usable {
            return Some(IneligibleReason::NoLhcDatabase);
        }
        if !c.ha_running {
            return Some(IneligibleReason::HaServiceNotRunning);
        }
        // The StoreFront condition is the DaaS profile's, and Service Continuity lifts it
        // (EN seed); the on-prem seeds set none.
        let needs_storefront =
            site.profile == crate::config::Profile::Daas && !site.service_continuity_enabled;
        let window_ms = self.params.storefront_window_s as i64 * 1000;
        if needs_storefront
            && c.storefront_last
                .is_none_or(|t| ts.millis() - t.millis() >= window_ms)
        {
            return Some(IneligibleReason::NoStorefrontTraffic);
        }
        None
    }

    fn try_enter_lhc(&mut self, name: &str, ts: Ts, cause: TransitionCause, out: &mut Vec<Output>) {
        match self.ineligible(name, ts) {
            Some(reason) => self.report_ineligible(name, ts, reason, out),
            None => self.transition(name, ts, ConnectorState::InitialHa, cause, out),
        }
    }

    /// 3002, once per reason change (R-STATE-4).
    fn report_ineligible(
        &mut self,
        name: &str,
        ts: Ts,
        reason: IneligibleReason,
        out: &mut Vec<Output>,
    ) {
        let c = self.connectors.get_mut(name).expect("exists");
        if c.reported_ineligible != Some(reason) {
            c.reported_ineligible = Some(reason);
            let data = EventData::Ineligible(IneligibleData { reason });
            out.push(self.event(ts, name, EventSource::RemoteBrokerProvider, 3002, data));
        }
    }

    /// Changes state, with 3003 and the episode bookkeeping of entering or leaving LHC mode.
    fn transition(
        &mut self,
        name: &str,
        ts: Ts,
        to: ConnectorState,
        cause: TransitionCause,
        out: &mut Vec<Output>,
    ) {
        let report_interval_s = self.params.report_interval_s;
        let c = self.connectors.get_mut(name).expect("exists");
        let from = c.state;
        let was_lhc = c.in_lhc();
        let data = TransitionData {
            from,
            to,
            previous_state_duration_s: ts.seconds_since(c.state_since).max(0) as u64,
            cause,
        };
        c.state = to;
        c.state_since = ts;
        c.epoch += 1;
        c.recovery_since = (to == ConnectorState::PendingRecovery).then_some(ts);
        out.push(self.event(
            ts,
            name,
            EventSource::RemoteBrokerProvider,
            3003,
            EventData::Transition(data),
        ));
        let c = self.connectors.get_mut(name).expect("exists");
        let now_lhc = c.in_lhc();
        if !was_lhc && now_lhc {
            c.reported_ineligible = None;
            c.registrations.clear();
            c.session_count = 0;
            c.episode = Some(Episode {
                started: ts,
                next_report: ts.plus_s(report_interval_s),
                registered: BTreeSet::new(),
                successful_launches: 0,
                failed_launches: 0,
            });
            if let Some(import) = &mut c.import {
                // R-CSS-3: abandoned at its end, even if LHC mode is over by then.
                import.lhc_started = true;
            }
            self.update_view(name, ts, out);
        } else if was_lhc && !now_lhc {
            self.end_episode(name, ts, to == ConnectorState::Stopped, out);
        }
        if to == ConnectorState::WorkingNormally {
            self.connectors
                .get_mut(name)
                .expect("exists")
                .reported_ineligible = None;
        }
    }

    /// LHC mode ended (to working_normally, or stopped): summary events, registrations
    /// dropped, maintenance lifted.
    fn end_episode(&mut self, name: &str, ts: Ts, stopped: bool, out: &mut Vec<Output>) {
        let c = self.connectors.get_mut(name).expect("exists");
        let Some(episode) = c.episode.take() else {
            return;
        };
        let was_brokering = std::mem::take(&mut c.brokering);
        let elected = c.elected.clone();
        let duration = ts.seconds_since(episode.started).max(0) as u64;
        let ended_by = if stopped {
            EndedBy::ConnectorStopped
        } else {
            EndedBy::NormalOperations
        };
        if was_brokering {
            if !stopped {
                let data = EventData::OutageEnded(OutageEndedData {
                    outage_duration_s: duration,
                });
                out.push(self.event(ts, name, EventSource::HighAvailabilityService, 3503, data));
            }
            let data = EventData::ElectedSummary(ElectedSummaryData {
                outage_duration_s: duration,
                registered_machines: episode.registered.len() as u64,
                successful_launches: episode.successful_launches,
                failed_launches: episode.failed_launches,
                ended_by,
            });
            out.push(self.event(ts, name, EventSource::HighAvailabilityService, 3508, data));
        } else {
            let data = EventData::NonElectedSummary(NonElectedSummaryData {
                outage_duration_s: duration,
                elected,
                successful_launches: episode.successful_launches,
                failed_launches: episode.failed_launches,
                ended_by,
            });
            out.push(self.event(ts, name, EventSource::HighAvailabilityService, 3510, data));
        }
        let reason = stopped.then_some(Reason::ConnectorStopped);
        self.drop_registrations(name, ts, reason, out);
        let c = self.connectors.get_mut(name).expect("exists");
        let lifted = std::mem::take(&mut c.maintenance);
        let reason = if stopped {
            MaintenanceReason::ConnectorStopped
        } else {
            MaintenanceReason::OutageEnded
        };
        for machine in lifted {
            self.place(&machine);
            out.push(Output::MachineMaintenance(MachineMaintenance {
                ts,
                machine,
                connector: name.to_string(),
                on: false,
                reason,
            }));
        }
    }

    fn stop(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        let in_lhc = self.connectors[name].in_lhc();
        self.transition(
            name,
            ts,
            ConnectorState::Stopped,
            TransitionCause::ConnectorStopped,
            out,
        );
        // A reboot forgets health, probe and StoreFront history and any sync in progress;
        // the snapshot and the registry settings (forced outage, sync interval, CSS trace,
        // HA SDK) survive it (R-STATE-10, R-STATE-8).
        let c = self.connectors.get_mut(name).expect("exists");
        c.stopped_in_lhc = in_lhc;
        c.last_check = None;
        c.first_failure = None;
        c.storefront_last = None;
        c.probes.clear();
        c.import = None;
        c.next_sync = None;
        c.first_check_after_start = false;
    }

    fn start(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        self.transition(
            name,
            ts,
            ConnectorState::WorkingNormally,
            TransitionCause::ConnectorStarted,
            out,
        );
        // Its first sync check waits for its first health check (R-CSS-1); a forced
        // outage is retried after this record (`retry_forced`).
        self.connectors
            .get_mut(name)
            .expect("exists")
            .first_check_after_start = true;
    }

    // ----- R-ELECT ---------------------------------------------------------------------

    /// Recomputes a connector's view of the election, with 3504 on change, 3502 when it
    /// starts brokering and registration drops when it stops (R-ELECT-1..5, R-REG-3).
    fn update_view(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        let c = &self.connectors[name];
        if !c.started() {
            return;
        }
        let timeout_ms = self.params.peer_timeout_s as i64 * 1000;
        let mut candidates: Vec<String> = Vec::new();
        if c.ha_running && c.snapshot.is_some() {
            candidates.push(name.to_string());
        }
        if let Some(snapshot) = self.snapshot_of(name) {
            for peer in snapshot.zone_peers(name) {
                let peer = self.site.connector_id(peer).unwrap_or(peer);
                if matches!(c.probes.get(peer), Some((t, true, _)) if ts.millis() - t.millis() < timeout_ms)
                {
                    candidates.push(peer.to_string());
                }
            }
        }
        candidates.sort_by_key(|a| fqdn_key(a));
        candidates.dedup();
        let elected = candidates.first().cloned();
        let c = self.connectors.get_mut(name).expect("exists");
        let changed = c.elected != elected;
        c.candidates = candidates;
        if changed {
            c.elected = elected.clone();
            c.epoch += 1;
            let data = EventData::ElectionView(ElectionViewData {
                elected,
                candidates: c.candidates.clone(),
            });
            out.push(self.event(ts, name, EventSource::HighAvailabilityService, 3504, data));
        }
        let c = self.connectors.get_mut(name).expect("exists");
        let brokering = c.in_lhc() && c.elected.as_deref() == Some(name);
        if brokering != c.brokering {
            c.brokering = brokering;
            c.epoch += 1;
            if brokering {
                let data = EventData::Brokering(BrokeringData {
                    elected: name.to_string(),
                });
                out.push(self.event(ts, name, EventSource::HighAvailabilityService, 3502, data));
            } else {
                self.drop_registrations(name, ts, Some(Reason::NotElected), out);
            }
        }
    }

    // ----- R-REG -----------------------------------------------------------------------

    fn drop_registrations(
        &mut self,
        name: &str,
        ts: Ts,
        reason: Option<Reason>,
        out: &mut Vec<Output>,
    ) {
        let c = self.connectors.get_mut(name).expect("exists");
        c.session_count = 0;
        let epoch = c.epoch;
        for machine in std::mem::take(&mut c.registrations) {
            if let Some(m) = self.machines.get_mut(machine.as_str()) {
                m.registrar = Registrar::None;
                if let Some(reason) = reason {
                    // The drop is the refusal: the next heartbeat does not repeat it while
                    // the connector's state and elected broker stay as they are (R-REG-2).
                    m.refusals.insert(name.to_string(), (reason, epoch));
                }
            }
            self.place(&machine);
            out.push(Output::Registration(Registration {
                ts,
                machine,
                connector: name.to_string(),
                accepted: false,
                reason,
            }));
        }
    }

    /// Registration at a heartbeat (R-REG). Returns the machine and its previous sessions
    /// when anything brokering depends on changed, for `sessions_changed`.
    fn vda_heartbeat(
        &mut self,
        hb: VdaHeartbeat,
        ts: Ts,
        out: &mut Vec<Output>,
    ) -> Option<(String, Vec<SessionReport>)> {
        // Split borrows: the configuration is read while runtime state changes, and the
        // hot path (one call per VDA heartbeat) allocates nothing when nothing changes.
        let Engine {
            site,
            connectors,
            connector_order,
            machines,
            validations,
            ..
        } = self;
        // One map lookup on the hot path: the runtime found here serves the whole heartbeat
        // (each lookup of a 40,000-entry map costs a cache miss on the key's bytes).
        let mut found = machines.get_mut(hb.machine.as_str());
        let cached = found
            .as_ref()
            .and_then(|rt| rt.resolved)
            .filter(|(version, _)| *version == site.version);
        let resolved: Option<(&str, u32)> = match cached {
            Some((_, zone)) => zone.map(|z| (hb.machine.as_str(), z)),
            None => site.machine(&hb.machine).map(|e| (e.id.as_str(), e.zone)),
        };
        if let Some((id, _)) = resolved {
            if id != hb.machine {
                // Named in another case than the configuration's id: the runtime is keyed
                // by the id.
                found = machines.get_mut(id);
            }
        }
        let Some((machine, zone)) = resolved else {
            // Not in the site configuration: the cloud broker refuses it.
            let runtime = match found {
                Some(r) => r,
                None => machines.entry(hb.machine.as_str().into()).or_default(),
            };
            // Deleted from the configuration while registered with a broker: the broker
            // still holds it, so its session count follows. Held by nobody, its sessions are
            // not kept: what a VDA unknown to the site can cost is bounded (its refusal),
            // whatever it reports.
            let reported = if runtime.registrar == Registrar::None {
                Vec::new()
            } else {
                hb.sessions
            };
            let (before, after) = (runtime.sessions.len(), reported.len());
            follow_sessions(connectors, &runtime.registrar, before, after);
            let old = std::mem::replace(&mut runtime.sessions, reported);
            runtime.resolved = Some((site.version, None));
            refuse(
                runtime,
                ts,
                &hb.machine,
                "cloud",
                Reason::UnknownMachine,
                0,
                out,
            );
            let changed = old != runtime.sessions;
            return changed.then_some((hb.machine.into(), old));
        };
        let zone_index = zone;
        let zone: &str = site.zone_name(zone_index);
        let in_zone = || {
            connector_order
                .iter()
                .map(|name| (name.as_str(), &connectors[name]))
                .filter(|(_, c)| c.zone == zone)
        };
        // R-REG-1: the zone offers the cloud path through a connector in working_normally
        // that has had a check since its start, or, in the detection gap while no connector
        // of the zone is in LHC mode, through one in pending_ha. So a restarted or pending
        // connector never pulls VDAs off the LHC broker. (Any order will do for this
        // question: no lookup of each connector by name.)
        let cloud = zone_offers_cloud(connectors, zone);
        let current = found.as_deref().map(|r| &r.registrar);
        let held_by = |name: &str| matches!(current, Some(Registrar::Connector(n)) if n == name);
        let mut refusals = Vec::new();
        let mut target: Option<&str> = None; // None: the cloud (when `cloud`) or nobody
        if !cloud {
            for (name, c) in in_zone().filter(|(_, c)| c.in_lhc()) {
                let reason = if !c.brokering {
                    Some(Reason::NotElected)
                } else if !held_by(name)
                    && snapshot_in(validations, c)
                        .and_then(|s| s.machine(machine))
                        .is_none()
                {
                    // (A machine it already holds was in its snapshot when it registered,
                    // and a snapshot does not change during LHC mode.)
                    Some(Reason::UnknownMachine)
                } else {
                    None
                };
                match reason {
                    Some(reason) => refusals.push((name, reason, c.epoch)),
                    None => {
                        target.get_or_insert(name);
                    }
                }
            }
        }
        let runtime = match found {
            Some(r) => r,
            None => machines.entry(machine.into()).or_default(),
        };
        let (old_sessions, new_sessions) =
            (runtime.sessions.len() as u64, hb.sessions.len() as u64);
        let old = std::mem::replace(&mut runtime.sessions, hb.sessions);
        let dirty = old != runtime.sessions || !runtime.pending.is_empty();
        if runtime
            .resolved
            .as_ref()
            .is_none_or(|(version, _)| *version != site.version)
        {
            runtime.resolved = Some((site.version, Some(zone_index)));
        }
        for (name, reason, epoch) in refusals {
            refuse(runtime, ts, machine, name, reason, epoch, out);
        }
        let unchanged = match (&runtime.registrar, target) {
            (Registrar::Cloud, _) => cloud,
            (Registrar::Connector(current), Some(name)) => !cloud && current == name,
            (Registrar::None, None) => !cloud,
            _ => false,
        };
        if unchanged {
            follow_sessions(
                connectors,
                &runtime.registrar,
                old_sessions as usize,
                new_sessions as usize,
            );
            return dirty.then(|| (machine.to_string(), old));
        }
        let new = match (cloud, target) {
            (true, _) => Registrar::Cloud,
            (false, Some(name)) => Registrar::Connector(name.to_string()),
            (false, None) => Registrar::None,
        };
        // R-REG-3: every change of registrar is visible, the one left first.
        match std::mem::replace(&mut runtime.registrar, new) {
            Registrar::Connector(old) => {
                if let Some(c) = connectors.get_mut(&old) {
                    if c.registrations.remove(machine) {
                        c.session_count -= old_sessions;
                    }
                }
                out.push(Output::Registration(Registration {
                    ts,
                    machine: machine.to_string(),
                    connector: old,
                    accepted: false,
                    reason: None,
                }));
            }
            Registrar::Cloud => out.push(Output::Registration(Registration {
                ts,
                machine: machine.to_string(),
                connector: crate::broker::CLOUD.to_string(),
                accepted: false,
                reason: Some(Reason::CloudUnreachable),
            })),
            Registrar::None => {}
        }
        let connector = match (cloud, target) {
            (true, _) => "cloud",
            (false, Some(name)) => {
                let c = connectors.get_mut(name).expect("exists");
                c.registrations.insert(machine.to_string());
                c.session_count += new_sessions;
                if let Some(e) = &mut c.episode {
                    e.registered.insert(machine.to_string());
                }
                name
            }
            (false, None) => return Some((machine.to_string(), old)),
        };
        runtime.refusals.remove(connector);
        out.push(Output::Registration(Registration {
            ts,
            machine: machine.to_string(),
            connector: connector.to_string(),
            accepted: true,
            reason: None,
        }));
        Some((machine.to_string(), old))
    }

    fn session_event(&mut self, ev: &SessionEvent, ts: Ts, out: &mut Vec<Output>) {
        let configured = self.site.machine_id(&ev.machine).is_some();
        let machine = self
            .site
            .machine_id(&ev.machine)
            .unwrap_or(&ev.machine)
            .to_string();
        let held = self
            .machines
            .get(machine.as_str())
            .is_some_and(|r| r.registrar != Registrar::None);
        if !configured && !held {
            // A machine the site does not know and nobody holds: nothing to keep.
            return;
        }
        let runtime = self.machines.entry(machine.as_str().into()).or_default();
        let old = runtime.sessions.clone();
        let existing = runtime.sessions.iter().position(|s| s.id == ev.session);
        match (ev.event, existing) {
            (SessionEventKind::Logoff, Some(i)) => {
                runtime.sessions.remove(i);
            }
            (SessionEventKind::Logoff, None) => {}
            (kind, i) => {
                let state = if kind == SessionEventKind::Disconnect {
                    SessionState::Disconnected
                } else {
                    SessionState::Active
                };
                match i {
                    Some(i) => runtime.sessions[i].state = state,
                    None => runtime.sessions.push(SessionReport {
                        id: ev.session.as_str().into(),
                        user: ev.user.as_str().into(),
                        state,
                    }),
                }
            }
        }
        follow_sessions(
            &mut self.connectors,
            &runtime.registrar,
            old.len(),
            runtime.sessions.len(),
        );
        self.sessions_changed(&machine, &old, ts);
        if ev.event == SessionEventKind::Logoff {
            self.pooled_logoff(&machine, ts, out);
        }
    }

    // ----- R-CSS -----------------------------------------------------------------------

    /// One config sync check (R-CSS-2), then the next is scheduled.
    fn sync_check(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        let interval = self.connectors[name]
            .sync_override_s
            .unwrap_or(self.params.sync_interval_s);
        let latest = self.site.version;
        let c = self.connectors.get_mut(name).expect("exists");
        c.next_sync = Some(ts.plus_s(interval));
        if !c.css_running || !c.started() || c.import.is_some() {
            return;
        }
        let newer = latest > 0 && c.snapshot.is_none_or(|v| v < latest);
        let needs_import = latest > 0 && (newer || !c.snapshot_usable);
        let (id, data) = if !c.ha_running {
            (518, EventData::Empty(EmptyData {}))
        } else if !c.rbp_running {
            (517, EventData::Empty(EmptyData {}))
        } else if matches!(c.last_check, Some((_, false))) {
            (510, EventData::Empty(EmptyData {}))
        } else if c.in_lhc() && newer {
            (507, EventData::Version(VersionData { version: latest }))
        } else if needs_import {
            (503, EventData::Version(VersionData { version: latest }))
        } else {
            return;
        };
        out.push(self.event(ts, name, EventSource::ConfigSyncService, id, data));
        if id != 503 {
            return;
        }
        // The import copies the configuration as it is now: validated now, so a change
        // that lands while the import runs is the next import's (before, a failure it
        // introduced was reported against this version).
        self.validation(latest);
        let duration = self.params.import_duration_s;
        let c = self.connectors.get_mut(name).expect("exists");
        c.import = Some(PendingImport {
            version: latest,
            done_at: ts.plus_s(duration),
            lhc_started: false,
        });
        if duration == 0 {
            self.finish_import(name, ts, out);
        }
    }

    /// Validates (once per version) and caches; drops validations nobody needs any more.
    fn validation(&mut self, version: u64) -> &Validation {
        // Only the current version is ever built: an import pins its version's validation
        // when it starts, and `collect_validations` keeps it while the import runs.
        debug_assert!(
            self.validations.contains_key(&version) || version == self.site.version,
            "version {version} is neither validated nor current"
        );
        if !self.validations.contains_key(&version) {
            let validation = match snapshot::validate(&self.site) {
                Ok(()) => Validation::Valid(self.cloud_catalog()),
                Err(failures) => Validation::Invalid(failures),
            };
            self.validations.insert(version, validation);
        }
        &self.validations[&version]
    }

    fn collect_validations(&mut self) {
        let keep: BTreeSet<u64> = self
            .connectors
            .values()
            .flat_map(|c| {
                c.snapshot
                    .into_iter()
                    .chain(c.import.as_ref().map(|i| i.version))
            })
            .chain(std::iter::once(self.site.version))
            .collect();
        self.validations.retain(|v, _| keep.contains(v));
    }

    fn finish_import(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        let c = self.connectors.get_mut(name).expect("exists");
        let Some(import) = c.import.take() else {
            return;
        };
        if import.lhc_started {
            // LHC mode started during the import (even if it has ended since): abandoned,
            // the previous snapshot stays (R-CSS-3). An import that began in LHC mode (an
            // unusable snapshot re-imported while the control plane answers) completes.
            let data = EventData::Version(VersionData {
                version: import.version,
            });
            out.push(self.event(ts, name, EventSource::ConfigSyncService, 507, data));
            return;
        }
        let storage_fault = c.storage_fault.take();
        let trace = c.css_trace;
        let fallback = c.snapshot;
        let mut failures = match self.validation(import.version) {
            Validation::Valid(_) => Vec::new(),
            Validation::Invalid(f) => f.clone(),
        };
        if let Some((offset, detail)) = storage_fault {
            failures.push(ImportFailure {
                kind: crate::config::ObjectKind::Connector,
                id: name.to_string(),
                rule: Rule::StorageFault,
                detail: format!(
                    "the connector's local store failed ({detail}): repair or replace its \
                     disk; the next import retries"
                ),
                introduced_by: IntroducedBy {
                    offset,
                    version: None,
                },
            });
            failures.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
        }
        if failures.is_empty() {
            let objects = match self.validation(import.version) {
                Validation::Valid(s) => s.objects,
                Validation::Invalid(_) => 0,
            };
            let c = self.connectors.get_mut(name).expect("exists");
            c.snapshot = Some(import.version);
            c.snapshot_usable = true;
            let data = EventData::Imported(Imported {
                version: import.version,
                objects,
            });
            out.push(self.event(ts, name, EventSource::ConfigSyncService, 504, data));
            self.collect_validations();
            // Machines it holds are now brokered from the new snapshot.
            let held: Vec<String> = self.connectors[name]
                .registrations
                .iter()
                .cloned()
                .collect();
            for machine in held {
                self.place(&machine);
            }
            self.update_view(name, ts, out);
        } else {
            if !trace {
                failures.truncate(1);
            }
            let data = EventData::ImportFailed(ImportFailed {
                version: import.version,
                failures,
                fallback_version: fallback,
            });
            out.push(self.event(ts, name, EventSource::ConfigSyncService, 505, data));
        }
    }

    // ----- timers (R-STATE-9) ----------------------------------------------------------

    fn next_timer<'a>(&'a self) -> Option<(Ts, String, Timer, String)> {
        // Connectors are visited in FQDN order, so (deadline, position, timer) orders ties
        // without comparing names.
        let mut best: Option<(Ts, usize, Timer, &str, &str)> = None;
        for (position, name) in self.connector_order.iter().enumerate() {
            let c = &self.connectors[name];
            let now = self.now;
            let mut consider = |deadline: Ts, timer: Timer, detail: &'a str| {
                // A deadline a lowered period moved into the past is due now, and orders
                // with the others due now by connector, then timer kind.
                let deadline = now.map_or(deadline, |now| deadline.max(now));
                if best.is_none_or(|b| (deadline, position, timer) < (b.0, b.1, b.2)) {
                    best = Some((deadline, position, timer, name.as_str(), detail));
                }
            };
            if !c.started() {
                continue;
            }
            for (peer, (t, ok, handled)) in &c.probes {
                if *ok && !handled {
                    consider(
                        t.plus_s(self.params.peer_timeout_s),
                        Timer::ProbeExpiry,
                        peer,
                    );
                }
            }
            if let Some(import) = &c.import {
                consider(import.done_at, Timer::ImportDone, "");
            }
            if c.state == ConnectorState::PendingRecovery && !c.forced {
                consider(
                    c.recovery_since
                        .unwrap_or(c.state_since)
                        .plus_s(self.params.pending_recovery_s),
                    Timer::RecoveryElapsed,
                    "",
                );
            }
            if let Some(e) = &c.episode {
                consider(e.next_report, Timer::Report, "");
            }
            if let Some(t) = c.next_sync {
                consider(t, Timer::Sync, "");
            }
        }
        best.map(|(deadline, _, timer, name, detail)| {
            (deadline, name.to_string(), timer, detail.to_string())
        })
    }

    fn fire_timers(&mut self, until: Ts, out: &mut Vec<Output>) {
        if self.quiet_until.is_some_and(|quiet| until < quiet) {
            return;
        }
        while let Some((deadline, name, timer, detail)) = self.next_timer() {
            if deadline > until {
                self.quiet_until = Some(deadline);
                return;
            }
            // A deadline that a lowered period moved before the last record fires now, never
            // in the past (R-STATE-8); every other fires at its deadline.
            let deadline = deadline.max(self.now.unwrap_or(deadline));
            self.now = Some(deadline);
            match timer {
                Timer::ProbeExpiry => {
                    if let Some(p) = self
                        .connectors
                        .get_mut(&name)
                        .expect("exists")
                        .probes
                        .get_mut(&detail)
                    {
                        p.2 = true;
                    }
                }
                Timer::ImportDone => self.finish_import(&name, deadline, out),
                Timer::RecoveryElapsed => self.transition(
                    &name,
                    deadline,
                    ConnectorState::WorkingNormally,
                    TransitionCause::RecoveryPeriodElapsed,
                    out,
                ),
                Timer::Report => self.report(&name, deadline, out),
                Timer::Sync => self.sync_check(&name, deadline, out),
            }
            self.update_view(&name, deadline, out);
        }
        self.quiet_until = Some(Ts(i64::MAX));
    }

    fn report(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        let interval = self.params.report_interval_s;
        let c = self.connectors.get_mut(name).expect("exists");
        let Some(episode) = &mut c.episode else {
            return;
        };
        episode.next_report = ts.plus_s(interval);
        let duration = ts.seconds_since(episode.started).max(0) as u64;
        let (id, data) = if c.brokering {
            let sessions = c.session_count;
            (
                3507,
                EventData::ElectedReport(ElectedReportData {
                    outage_duration_s: duration,
                    registered_machines: c.registrations.len() as u64,
                    sessions,
                }),
            )
        } else {
            (
                3509,
                EventData::NonElected(NonElectedData {
                    outage_duration_s: duration,
                    elected: c.elected.clone(),
                }),
            )
        };
        out.push(self.event(ts, name, EventSource::HighAvailabilityService, id, data));
    }

    // ----- outputs ---------------------------------------------------------------------

    fn event(
        &self,
        ts: Ts,
        connector: &str,
        source: EventSource,
        event_id: u32,
        data: EventData,
    ) -> Output {
        let level = match (source, event_id) {
            (EventSource::ConfigSyncService, 505 | 517 | 518) => Level::Error,
            (EventSource::ConfigSyncService, 507 | 510) => Level::Warning,
            (EventSource::RemoteBrokerProvider, 3001 | 3002) => Level::Warning,
            (EventSource::HighAvailabilityService, 3502) => Level::Warning,
            _ => Level::Information,
        };
        let message = message(event_id, &data);
        Output::Event(Event {
            ts,
            connector: connector.to_string(),
            source,
            event_id,
            level,
            message,
            data,
        })
    }
}

/// Keeps a broker's session count in step when a machine it holds reports `after`
/// sessions instead of `before` (3507 reads the count; summing at each report would scan).
fn follow_sessions(
    connectors: &mut BTreeMap<String, Connector>,
    registrar: &Registrar,
    before: usize,
    after: usize,
) {
    if let Registrar::Connector(name) = registrar {
        if let Some(c) = connectors.get_mut(name) {
            c.session_count = c.session_count + after as u64 - before as u64;
        }
    }
}

/// R-REG-1: whether zone `zone` (lowercased) offers the cloud path: one of its connectors
/// is in working_normally and has had a health check since its last start, or, while none
/// of them is in LHC mode, one is in pending_ha (the detection gap). Registration and the
/// cloud broker both ask this, so the cloud never brokers onto a VDA whose zone has lost
/// the path, even before the VDA's next heartbeat moves it.
pub(crate) fn zone_offers_cloud(connectors: &BTreeMap<String, Connector>, zone: &str) -> bool {
    let (mut working, mut pending, mut lhc) = (false, false, false);
    for c in connectors.values().filter(|c| c.zone == zone) {
        match c.state {
            ConnectorState::WorkingNormally => working |= !c.first_check_after_start,
            ConnectorState::PendingHa => pending = true,
            ConnectorState::Stopped => {}
            _ => lhc = true,
        }
    }
    working || (pending && !lhc)
}

/// The snapshot a connector uses, looked up in the validations store.
fn snapshot_in<'a>(
    validations: &'a BTreeMap<u64, Validation>,
    c: &Connector,
) -> Option<&'a Arc<Snapshot>> {
    match validations.get(&c.snapshot?)? {
        Validation::Valid(s) => Some(s),
        Validation::Invalid(_) => None,
    }
}

fn refuse(
    runtime: &mut MachineRuntime,
    ts: Ts,
    machine: &str,
    connector: &str,
    reason: Reason,
    epoch: u64,
    out: &mut Vec<Output>,
) {
    if runtime.refusals.get(connector) == Some(&(reason, epoch)) {
        return;
    }
    runtime
        .refusals
        .insert(connector.to_string(), (reason, epoch));
    out.push(Output::Registration(Registration {
        ts,
        machine: machine.to_string(),
        connector: connector.to_string(),
        accepted: false,
        reason: Some(reason),
    }));
}

fn quarantine(offset: u64, error: String) -> Output {
    Output::Quarantine(Quarantine { offset, error })
}

/// The snake_case name serde gives an enum value (`not_elected`), for messages.
pub fn snake<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The human-readable text of an event.
fn message(event_id: u32, data: &EventData) -> String {
    match (event_id, data) {
        (503, EventData::Version(v)) => format!("Importing configuration version {}", v.version),
        (504, EventData::Imported(i)) => {
            format!(
                "Imported configuration version {} ({} objects); the local host cache now uses it",
                i.version, i.objects
            )
        }
        (505, EventData::ImportFailed(f)) => {
            let first = f.failures.first().map_or(String::new(), |x| {
                format!(
                    ": {} {:?} breaks {}: {} (introduced at offset {})",
                    x.kind,
                    x.id,
                    snake(&x.rule),
                    x.detail,
                    x.introduced_by.offset
                )
            });
            let fallback = f
                .fallback_version
                .map_or("no configuration".to_string(), |v| format!("version {v}"));
            format!(
                "Import of configuration version {} failed{first}; keeping {fallback}",
                f.version
            )
        }
        (507, EventData::Version(v)) => {
            format!(
                "Configuration version {} is available but LHC mode is active or started during the import: import abandoned",
                v.version
            )
        }
        (510, _) => "No configuration data received: the control plane is unreachable".into(),
        (517, _) => "Remote Broker Provider is not running: config sync skipped".into(),
        (518, _) => "High Availability Service is not running: config sync aborted".into(),
        (3001, _) => "Health check of the control plane failed".into(),
        (3002, EventData::Ineligible(i)) => format!("Cannot enter LHC mode: {}", snake(&i.reason)),
        (3003, EventData::Transition(t)) => {
            format!(
                "State changed from {} to {} ({})",
                snake(&t.from),
                snake(&t.to),
                snake(&t.cause)
            )
        }
        (3502, _) => "Brokering in LHC mode as the elected broker".into(),
        (3503, EventData::OutageEnded(o)) => {
            format!(
                "LHC mode ended after {} s; normal operations resumed",
                o.outage_duration_s
            )
        }
        (3504, EventData::ElectionView(v)) => format!(
            "Elected broker is now {} (candidates: {})",
            v.elected.as_deref().unwrap_or("none"),
            v.candidates.join(", ")
        ),
        (3507, EventData::ElectedReport(r)) => format!(
            "LHC mode active for {} s: {} registered machines, {} sessions",
            r.outage_duration_s, r.registered_machines, r.sessions
        ),
        (3508, EventData::ElectedSummary(s)) => format!(
            "LHC mode ended after {} s ({}): {} machines registered, {} launches brokered, {} \
             failed",
            s.outage_duration_s,
            snake(&s.ended_by),
            s.registered_machines,
            s.successful_launches,
            s.failed_launches
        ),
        (3509, EventData::NonElected(n)) => format!(
            "LHC mode active for {} s on a non-elected broker; elected: {}",
            n.outage_duration_s,
            n.elected.as_deref().unwrap_or("none")
        ),
        (3510, EventData::NonElectedSummary(n)) => format!(
            "LHC mode ended after {} s on a non-elected broker (elected: {}; {}): {} launches \
             brokered, {} failed",
            n.outage_duration_s,
            n.elected.as_deref().unwrap_or("none"),
            snake(&n.ended_by),
            n.successful_launches,
            n.failed_launches
        ),
        (id, _) => format!("event {id}"),
    }
}
