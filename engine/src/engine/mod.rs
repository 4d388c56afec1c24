//! The reducer: `(state, record) -> (state, outputs)` for LHC states (R-STATE), election
//! (R-ELECT), registration (R-REG), config sync (R-CSS) and the periodic reports.
//!
//! Invariants:
//! - Time is the records' `ts` and the deadlines derived from them; nothing else.
//! - Every collection that drives output is ordered (`BTreeMap`, `BTreeSet`, sorted `Vec`).
//! - A record that cannot be applied changes nothing and yields one `quarantine` output.
//! - Before a record at `ts`, every timer with a deadline at or before `ts` fires, in
//!   (deadline, connector, timer kind) order, with the deadline as its time (R-STATE-9).

//!
//! One module per spec area, each a block of `impl Engine`: `state` (R-STATE), `election`
//! (R-ELECT), `registration` (R-REG), `sync` (R-CSS), `timers` (R-STATE-9 and the periodic
//! reports), `events` (event text and levels), `invariants` (checks and the digest);
//! brokering is `crate::broker`. This module holds the state and `apply`, the dispatch.

mod connector;
mod digest;
mod election;
mod events;
mod invariants;
mod registration;
mod state;
mod sync;
mod timers;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::decode::DecodeError;
use crate::output::*;
use crate::params::Params;
use crate::record::*;
use crate::site::SiteConfig;
use crate::snapshot::Snapshot;
use crate::ts::Ts;

pub use connector::{
    Connector, Episode, Holder, MachineRuntime, MachineSummary, PendingImport, Registrar,
    Validation,
};
pub use digest::ConfigJson;
use events::quarantine;
pub use events::snake;
pub(crate) use registration::zone_offers_cloud;
use sync::snapshot_in;

/// Outputs a driver lets pile up before it takes them, in [`Engine::apply_in_steps`]: a
/// few megabytes, far more than any record makes but a gap of years.
pub const CATCH_UP_STEP: usize = 8192;

/// Records a driver hands [`Engine::warm`] at once: enough for the processor to wait for
/// many lookups together, few enough that what they bring stays in the cache until used
/// (runs of 32 and 64 were alike on the 12-hour site, 512 slower).
pub const WARM_RUN: usize = 32;

/// The whole engine state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Engine {
    pub(crate) params: Params,
    pub(crate) now: Option<Ts>,
    /// Shared, so a commit job or a checkpoint takes the site of tens of thousands of
    /// objects without copying it; a `config.change` copies it only while one holds it.
    pub(crate) site: Arc<SiteConfig>,
    pub(crate) validations: BTreeMap<u64, Validation>,
    pub(crate) connectors: BTreeMap<String, Connector>,
    /// Connector ids in FQDN order (lowercase, byte order): the order of equal deadlines.
    pub(crate) connector_order: Vec<String>,
    pub(crate) machines: crate::detmap::Tracked<compact_str::CompactString, MachineRuntime>,
    /// Brokering pools by registrar, group and zone (see `broker`). Only looked up, never
    /// iterated (but in key order, to save them).
    pub(crate) pools: crate::detmap::Tracked<String, crate::broker::Pool>,
    /// Sessions per user (lowercased) per machine: reconnects and session limits.
    pub(crate) user_sessions: crate::detmap::Tracked<
        compact_str::CompactString,
        crate::detmap::VecMap<compact_str::CompactString, crate::broker::Tally>,
    >,
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
    /// Record ids seen, by producer: a record appended twice is applied once (see
    /// `record_id`). Absent from the digest of a log without ids.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) record_ids: crate::record_id::SeenByProducer,
    /// The cloud broker's catalog of the current configuration. Derived, so not saved.
    #[serde(skip)]
    pub(crate) cloud: Option<Arc<Snapshot>>,
    /// No timer fires before this instant: set when timers are computed, cleared by any
    /// record that can create or move a timer. VDA heartbeats, session events, ticks and
    /// launch requests cannot, which spares the hot path a scan. Derived, so not saved.
    #[serde(skip)]
    pub(crate) quiet_until: Option<Ts>,
    /// Delivery groups holding a Remote PC machine, by configuration version (the catalog
    /// of a version, the cloud's or a connector's, indexes the same objects): what a
    /// launch asks when a group's pools offer nothing (R-LAUNCH-5), which walking the
    /// group's machines each time made 2.5 times slower. Derived, so not saved.
    #[serde(skip)]
    pub(crate) remote_pc_groups: crate::broker::RemotePcGroups,
    /// Fire every timer one by one, never a run of sync checks that find nothing in one
    /// step (`fire_idle_syncs`): the reference tests compare that shortcut with. Not
    /// state, so not saved.
    #[serde(skip)]
    pub(crate) one_by_one: bool,
}

/// The configuration part of the engine state: the site configuration as the cloud holds
/// it and the validated snapshots by version. It changes only with `config.change` records
/// and imports, so a store can keep it apart from the state that changes with every record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigPart {
    /// The site configuration.
    pub site: Arc<SiteConfig>,
    /// Validated configuration versions: shared snapshots, or the failures of a version.
    pub validations: BTreeMap<u64, Validation>,
}

/// Sort key of connector FQDNs: lowercase, byte order (R-ELECT-2).
fn fqdn_key(name: &str) -> String {
    name.to_lowercase()
}

impl Engine {
    /// Reads, and changes nothing, the state the given records (the next ones to be
    /// applied) will look up first, so that their lookups find it in the cache.
    ///
    /// Why: on a large site applying is bound by cache misses, one lookup of a 40,000-entry
    /// map after another, each waiting for memory. Here the lookups of a run of records
    /// are independent of one another, so the processor waits for many at once. It has
    /// no effect on any state or output (it takes `&self`); a driver may call it or not.
    pub fn warm<'a>(&self, records: impl IntoIterator<Item = &'a Record>) {
        for record in records {
            let machine = match record {
                Record::VdaHeartbeat(hb) => hb.machine.as_str(),
                Record::SessionEvent(event) => {
                    // A session event asks the configuration for the machine's id first.
                    std::hint::black_box(self.site.machine_id(&event.machine));
                    event.machine.as_str()
                }
                Record::LaunchRequest(launch) => {
                    // Users are looked up lowercased; a name that is not already so would
                    // cost an allocation here, so it is left cold.
                    let user = launch.user.as_str();
                    if !user.bytes().any(|b| b.is_ascii_uppercase()) && user.is_ascii() {
                        std::hint::black_box(self.user_sessions.get(user).map(|m| m.len()));
                        if let Some(cloud) = &self.cloud {
                            std::hint::black_box(cloud.user_groups.get(user).map(|g| g.len()));
                        }
                        // The connector's recent users and clients take the launch in.
                        if let Some(c) = self.connectors.get(launch.connector.as_str()) {
                            std::hint::black_box(c.data.recent_users.get(user));
                            let client = launch.client.name.as_str();
                            std::hint::black_box(c.data.clients.get(client).map(|c| c.1));
                        }
                    }
                    continue;
                }
                _ => continue,
            };
            if let Some(runtime) = self.machines.get(machine) {
                // The first session's bytes: a heartbeat compares its sessions with them.
                std::hint::black_box(runtime.sessions.first().map(|s| s.state));
                std::hint::black_box(runtime.resolved);
            }
        }
    }

    /// An engine with default parameters and no configuration.
    pub fn new() -> Engine {
        Engine::default()
    }

    /// Fires every timer one by one from now on, as before the shortcut for sync checks
    /// that find nothing: slower over long gaps, the same outputs and state. For tests that
    /// compare the two.
    #[doc(hidden)]
    pub fn fire_timers_one_by_one(&mut self) {
        self.one_by_one = true;
    }

    /// A configured connector's state, to change. Records reach the reducers only after
    /// `admissible` checked that the site names their connector, so it exists.
    pub(crate) fn connector_mut(&mut self, name: &str) -> &mut Connector {
        self.connectors
            .get_mut(name)
            .expect("admissible records name configured connectors")
    }

    /// Current parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The site configuration as the cloud holds it.
    pub fn site(&self) -> &SiteConfig {
        &self.site
    }

    /// The site configuration, shared: a handle that stays as it is while the engine
    /// applies further changes (for a commit or a checkpoint taken on another thread).
    pub fn shared_site(&self) -> Arc<SiteConfig> {
        Arc::clone(&self.site)
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
        // Zone indexes are of this configuration's zone names (and `None` in a state
        // read back, which does not save them).
        for c in self.connectors.values_mut() {
            c.zone_index = self.site.zone_index(&c.zone);
        }
        // The current version's snapshot, when it validated, is the cloud's catalog (both
        // index the same objects; the reducer builds one and shares it): share it again
        // rather than hold a second index of a large site after a restore.
        if let Some(Validation::Valid(snapshot)) = self.validations.get(&self.site.version) {
            self.cloud = Some(Arc::clone(snapshot));
        }
    }

    /// Validated configuration versions held (snapshots in use, the current version).
    pub fn validations(&self) -> &BTreeMap<u64, Validation> {
        &self.validations
    }

    /// Applies one log entry: a decoded record, or the error that made it undecodable.
    ///
    /// All of its outputs land in `out`, the timers due before it included: after a long
    /// gap in LHC mode that is one 3507/3509 report per connector every report interval.
    /// A driver that must not hold them all at once uses [`Engine::admit`],
    /// [`Engine::catch_up`] and [`Engine::apply_admitted`] instead, with the same result.
    pub fn apply(
        &mut self,
        offset: u64,
        input: Result<Record, DecodeError>,
        out: &mut Vec<Output>,
    ) {
        match self.admit(offset, input) {
            Ok(admitted) => self.apply_admitted(admitted, out),
            Err(quarantined) => out.push(quarantined),
        }
    }

    /// Checks one log entry: the record, ready for [`Engine::apply_admitted`], or the
    /// `quarantine` output that says why it cannot be applied (R-LOG-4). An admitted record
    /// changes nothing yet; between the two, only [`Engine::catch_up`] may change the
    /// engine. A refused record changes nothing either, but for the claim of its id when
    /// the id was new: the first record with an id is the one that counts, applied or
    /// quarantined for its own fault, and every later copy is a duplicate.
    pub fn admit(
        &mut self,
        offset: u64,
        input: Result<Record, DecodeError>,
    ) -> Result<Admitted, Output> {
        let record = input.map_err(|e| quarantine(offset, e.without_offset()))?;
        // First: a duplicate is named as one, whatever else is wrong with it (its `ts` is
        // older than the records appended since the first copy).
        self.check_id(&record)
            .map_err(|error| quarantine(offset, error))?;
        if let Err(error) = self.admissible(&record) {
            self.claim_id(&record).expect("checked just before");
            return Err(quarantine(offset, error));
        }
        Ok(Admitted { offset, record })
    }

    /// Fires the timers due by `until` (R-STATE-9) until `out` holds `max` outputs or more;
    /// true once none is left due. A driver calls it with an admitted record's `ts`, hands
    /// `out` on and clears it between calls, so a gap of years is a stream of bounded steps
    /// rather than one allocation. The outputs are those `apply` would make, in its order.
    pub fn catch_up(&mut self, until: Ts, max: usize, out: &mut Vec<Output>) -> bool {
        if self.now.is_some_and(|now| until < now) {
            return true;
        }
        self.expire_pending(until);
        self.fire_due(until, max, out)
    }

    /// [`Engine::apply`] in bounded steps: whenever the timers due before the record have
    /// added `step` outputs to `out`, `flush` is handed the engine (part-way, at the last
    /// timer's time) and `out`, which it drains. An error from `flush` stops before the
    /// record is applied.
    pub fn apply_in_steps<E>(
        &mut self,
        offset: u64,
        input: Result<Record, DecodeError>,
        out: &mut Vec<Output>,
        step: usize,
        mut flush: impl FnMut(&Engine, &mut Vec<Output>) -> Result<(), E>,
    ) -> Result<(), E> {
        let admitted = match self.admit(offset, input) {
            Ok(admitted) => admitted,
            Err(quarantined) => {
                out.push(quarantined);
                return Ok(());
            }
        };
        // Relative to what `out` holds, so a `flush` that keeps its outputs still advances.
        while !self.catch_up(admitted.ts(), out.len().saturating_add(step.max(1)), out) {
            flush(self, out)?;
        }
        self.apply_admitted(admitted, out);
        Ok(())
    }

    /// Applies a record [`Engine::admit`] accepted (firing whatever timers are still due
    /// before it).
    pub fn apply_admitted(&mut self, admitted: Admitted, out: &mut Vec<Output>) {
        let Admitted { offset, record } = admitted;
        // Checked by `admit`; claimed only now, so that a state committed between catch-up
        // steps has not yet seen the record, which comes again after a restart.
        if let Err(error) = self.claim_id(&record) {
            out.push(quarantine(offset, error));
            return;
        }
        let ts = record.ts();
        self.expire_pending(ts);
        self.fire_timers(ts, out);
        self.now = Some(ts);
        let mut first_contact = None;
        if let Some(name) = record
            .connector()
            .and_then(|n| self.site.connector_id(n))
            .map(str::to_string)
        {
            if !self.connectors[&name].named {
                self.connector_mut(&name).named = true;
                self.quiet_until = None; // the first check schedules the next one
                self.sync_check(&name, ts, out);
                first_contact = Some(name);
            }
        }
        let moves_deadlines = matches!(record, Record::EngineParams(_) | Record::AdminCommand(_));
        self.apply_record(offset, record, out);
        if let Some(name) = first_contact {
            // The view an import at first contact changed is recomputed after the record,
            // with what it brought (a probe of a peer): R-ELECT-2, one 3504 at most (a
            // record naming the connector has usually recomputed it already; this is then
            // a no-op).
            self.update_view(&name, ts, out);
        }
        if moves_deadlines {
            // A lowered period or a forced outage lifted can leave a deadline at or before
            // now: it fires at once, stamped with this record's time, never earlier
            // (R-STATE-8, R-STATE-9).
            self.fire_timers(ts, out);
        }
    }

    /// Claims the record's id, if it has one: the first record with an id is applied (or
    /// quarantined for its own fault), every later one is a duplicate.
    fn claim_id(&mut self, record: &Record) -> Result<(), String> {
        let Some(id) = record.record_id() else {
            return Ok(());
        };
        let seen = self.record_ids.entry(id.producer.clone()).or_default();
        seen.claim(id.epoch, id.n)
            .map_err(|refusal| id_refused(id, refusal))
    }

    /// Whether [`Engine::claim_id`] would claim the record's id.
    fn check_id(&self, record: &Record) -> Result<(), String> {
        let Some(id) = record.record_id() else {
            return Ok(());
        };
        match self.record_ids.get(id.producer.as_str()) {
            Some(seen) => seen
                .check(id.epoch, id.n)
                .map(drop)
                .map_err(|refusal| id_refused(id, refusal)),
            None => Ok(()),
        }
    }

    /// Whether the record can be applied; the error names the field at fault.
    fn admissible(&self, record: &Record) -> Result<(), String> {
        if let Some(now) = self.now {
            if record.ts() < now {
                // The first check, so `Engine::lost_ts_race` (asked before applying) names
                // exactly the records refused for this; the node stamps them again.
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
                let timeout_before = self.params.peer_timeout_s;
                self.params.apply(p).expect("checked by admissible");
                self.quiet_until = None;
                if self.params.peer_timeout_s > timeout_before {
                    self.peer_timeout_raised(ts, out);
                }
            }
            Record::ConfigChange(_) => {
                let Record::ConfigChange(change) = record else {
                    unreachable!("matched above")
                };
                // Machines the change deletes remember their zone (see
                // `MachineRuntime::deleted_from`); those it names again forget it.
                let deleted: Vec<(String, String)> = change
                    .ops
                    .iter()
                    .filter_map(|op| match op {
                        crate::config::ConfigOp::Delete(r)
                            if r.kind == crate::config::ObjectKind::Machine =>
                        {
                            let m = self.site.machine(&r.id)?;
                            Some((m.id.clone(), self.site.zone_name(m.zone).to_string()))
                        }
                        _ => None,
                    })
                    .collect();
                let named: Vec<String> = change
                    .ops
                    .iter()
                    .filter_map(|op| match op {
                        crate::config::ConfigOp::Upsert(object)
                            if object.kind() == crate::config::ObjectKind::Machine =>
                        {
                            Some(object.id().to_string())
                        }
                        _ => None,
                    })
                    .collect();
                Arc::make_mut(&mut self.site).apply_checked(change, offset);
                for (id, zone) in deleted {
                    match self.site.machine(&id).map(|m| m.id.clone()) {
                        None => {
                            if let Some(runtime) = self.machines.get_mut(id.as_str()) {
                                runtime.deleted_from = Some(zone.into());
                            }
                        }
                        // Deleted and named again in another case by the same change.
                        Some(new) => self.rename_runtime(&id, &new),
                    }
                }
                // Named again in another case by a later change than the one that deleted
                // it: the same VDA (the runtimes of deleted machines are few).
                // (Of several spellings deleted, the first in byte order: the map's own
                // order depends on its history, which a checkpoint does not restore.)
                let mut orphans: BTreeMap<String, compact_str::CompactString> = BTreeMap::new();
                if !named.is_empty() {
                    for (key, _) in self
                        .machines
                        .iter()
                        .filter(|(_, r)| r.deleted_from.is_some())
                    {
                        let first = orphans
                            .entry(key.as_str().to_lowercase())
                            .or_insert(key.clone());
                        if key < first {
                            *first = key.clone();
                        }
                    }
                }
                for id in named {
                    let id = self.site.machine_id(&id).unwrap_or(&id).to_string();
                    // (Asked only when a deleted runtime waits: a change naming 40,000
                    // machines lowercases none of them.)
                    let orphan = (!orphans.is_empty())
                        .then(|| orphans.get(&id.to_lowercase()))
                        .flatten();
                    if let Some(old) = orphan {
                        self.rename_runtime(old, &id);
                    }
                    if self
                        .machines
                        .get(id.as_str())
                        .is_some_and(|r| r.deleted_from.is_some())
                    {
                        if let Some(runtime) = self.machines.get_mut(id.as_str()) {
                            runtime.deleted_from = None;
                        }
                    }
                }
                for id in self.site.connector_ids.values() {
                    let zone = self
                        .site
                        .connector_zone(id)
                        .unwrap_or_default()
                        .to_lowercase();
                    let c = self
                        .connectors
                        .entry(id.clone())
                        .or_insert_with(|| Connector::new(ts));
                    c.zone_index = self.site.zone_index(&zone);
                    c.zone = zone;
                }
                // (A connector the configuration no longer names keeps its zone's name and
                // index: zone names never shrink, so the index still names that zone.)
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
                if let Some(change) = self.vda_heartbeat(hb, ts, out) {
                    self.sessions_changed_as(&change.machine, &change.old, Some(change.same), ts);
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
                self.connector_mut(name)
                    .probes
                    .insert(peer, (ts, p.ok, false));
            }
            Record::StorefrontHeartbeat(s) => {
                let c = self.connector_mut(name);
                c.storefront_last = Some(ts);
                c.storefronts.insert(s.storefront.clone(), ts);
            }
            Record::ServiceStatus(s) => {
                let c = self.connector_mut(name);
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
                // Several before one import: the first is what broke it (the change that
                // introduced the failure); the import consumes them all.
                self.connector_mut(name)
                    .storage_fault
                    .get_or_insert_with(|| (offset, f.detail.clone()));
            }
            Record::AdminCommand(a) => self.admin(name, ts, a, out),
            _ => {}
        }
        false
    }
}

/// Why a record's id is refused, in words an admin can act on.
fn id_refused(id: &crate::record_id::RecordId, refusal: crate::record_id::Refusal) -> String {
    use crate::record_id::Refusal;
    match refusal {
        Refusal::Duplicate => format!(
            "field `record_id`: {id} was already applied; this copy is a duplicate (an \
             append retried after its delivery was in doubt) and is not applied again"
        ),
        Refusal::Forgotten => format!(
            "field `record_id`: {id} is older than every id of {} the engine still \
             remembers ({} runs), so it cannot be told from a duplicate and is not \
             applied",
            id.producer,
            crate::record_id::MAX_RUNS
        ),
    }
}

/// A record [`Engine::admit`] accepted, waiting for [`Engine::apply_admitted`].
#[derive(Debug)]
pub struct Admitted {
    offset: u64,
    record: Record,
}

impl Admitted {
    /// The record's time: timers due by it fire before it ([`Engine::catch_up`]).
    pub fn ts(&self) -> Ts {
        self.record.ts()
    }

    /// The record's offset in the log.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}
