//! R-REG: where each VDA registers at its heartbeat (the cloud, the elected LHC broker, or
//! nobody), with every change of registrar and every refusal as an output; session events
//! and the brokers' session counts.

use compact_str::CompactString;
use std::collections::BTreeMap;

use crate::output::*;
use crate::record::*;
use crate::ts::Ts;

use super::sync::snapshot_in;
use super::{Connector, Engine, Holder, MachineRuntime, Registrar, Validation};

impl Engine {
    pub(super) fn drop_registrations(
        &mut self,
        name: &str,
        ts: Ts,
        reason: Option<Reason>,
        out: &mut Vec<Output>,
    ) {
        let c = self.connector_mut(name);
        c.session_count = 0;
        let epoch = c.epoch;
        for machine in std::mem::take(&mut c.registrations) {
            if let Some(m) = self.machines.get_mut(machine.as_str()) {
                m.registrar = Registrar::None;
                if let Some(reason) = reason {
                    // The drop is the refusal: the next heartbeat does not repeat it while
                    // the connector's state and elected broker stay as they are (R-REG-2).
                    let key = Holder::Connector(name).key().as_ref().into();
                    m.refusals.insert(key, (reason, epoch));
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

    /// A machine renamed by case in the configuration (its old id deleted and the new one
    /// upserted, in one change or two) is the same VDA (§2.1: ids resolve
    /// case-insensitively): its runtime — registration, sessions, pending launches, refusals,
    /// maintenance marks, the episode's count of it — moves to the new id, so it is never
    /// registered twice nor counted twice in 3507/3508. Nothing is emitted: its registrar
    /// does not change. Left as it is when the new id already has a runtime of its own that
    /// holds a registration, sessions or launches (two VDAs reported under the two
    /// spellings: nothing to merge safely).
    pub(super) fn rename_runtime(&mut self, old: &str, new: &str) {
        // What a runtime under the new id may hold and still be replaced: refusals (a
        // heartbeat in the new spelling before the change named it: `unknown_machine`)
        // and caches, nothing brokering counts on.
        let blank = |r: &MachineRuntime| {
            r.registrar == Registrar::None
                && r.sessions.is_empty()
                && r.pending.is_empty()
                && r.placement.is_none()
                && r.deleted_from.is_none()
        };
        if old == new || self.machines.get(new).is_some_and(|r| !blank(r)) {
            return;
        }
        let Some(mut runtime) = self.machines.remove(old) else {
            return;
        };
        runtime.deleted_from = None;
        runtime.resolved = None;
        runtime.placed_in = Default::default();
        let users: std::collections::BTreeSet<CompactString> = runtime
            .sessions
            .iter()
            .map(|s| crate::snapshot::lower(&s.user).as_ref().into())
            .chain(
                runtime
                    .pending
                    .iter()
                    .map(|p| crate::snapshot::lower(&p.user).as_ref().into()),
            )
            .collect();
        for user in users {
            if let Some(machines) = self.user_sessions.get_mut(user.as_str()) {
                if let Some(tally) = machines.remove(old) {
                    machines.insert(new.into(), tally);
                }
            }
        }
        if !runtime.pending.is_empty() {
            self.pending_expiry = std::mem::take(&mut self.pending_expiry)
                .into_iter()
                .map(|(ts, m)| (ts, if m == old { new.into() } else { m }))
                .collect();
        }
        for c in self.connectors.values_mut() {
            for set in [&mut c.registrations, &mut c.maintenance] {
                if set.remove(old) {
                    set.insert(new.to_string());
                }
            }
            if let Some(e) = c.episode_mut() {
                if e.registered.remove(old) {
                    e.registered.insert(new.to_string());
                }
            }
        }
        self.machines.insert(new.into(), runtime);
    }

    /// Registration at a heartbeat (R-REG). Returns the machine and its previous sessions
    /// when anything brokering depends on changed, for `sessions_changed_as`.
    ///
    /// Longer than the other reducers on purpose: it is the hot path (one call per VDA
    /// heartbeat), which keeps one machine lookup and one set of split borrows for the whole
    /// heartbeat; each step that is not a lookup is a function below.
    pub(super) fn vda_heartbeat(
        &mut self,
        hb: VdaHeartbeat,
        ts: Ts,
        out: &mut Vec<Output>,
    ) -> Option<SessionsChange> {
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
        // (each lookup of a 40,000-entry map costs a cache miss on the key's bytes). Not
        // recorded as changed: most heartbeats change nothing saved, and a node's commit
        // copies only what changed; what does change is recorded below.
        let mut found = machines.get_mut_unrecorded(hb.machine.as_str());
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
                found = machines.get_mut_unrecorded(id);
            }
        }
        // Where the VDA is: its zone in the site configuration, or (not in it, rare) the
        // zone it had when deleted, or its connectors' snapshots give it.
        let unconfigured_zone: CompactString;
        let unconfigured_id: CompactString;
        let (machine, zone, zone_index, cloud) = match resolved {
            Some((machine, zone_index)) => {
                let zone: &str = site.zone_name(zone_index);
                // R-REG-1: the zone offers the cloud path through a connector in
                // working_normally that has had a check since its start, or, in the
                // detection gap while no connector of the zone is in LHC mode, through one
                // in pending_ha. So a restarted or pending connector never pulls VDAs off
                // the LHC broker. (Any order will do for this question: no lookup of each
                // connector by name.)
                let cloud = zone_index_offers_cloud(connectors, zone_index, zone);
                (machine, zone, Some(zone_index), cloud)
            }
            None => {
                // Deleted from the site configuration (during LHC mode, or since the last
                // import of a connector), a machine is still in the snapshots its zone's
                // connectors broker from in LHC mode: while the zone has no cloud path, the
                // VDA deals with them, not with the cloud, and R-REG-4 refuses only a
                // machine the LHC broker's snapshot lacks. Otherwise the cloud broker
                // refuses it.
                let Unconfigured {
                    known,
                    holder,
                    deleted_from,
                } = unconfigured(machines, &hb.machine);
                let entry = snapshot_entry(
                    connectors,
                    connector_order,
                    validations,
                    &hb.machine,
                    holder.as_deref(),
                    deleted_from.as_deref(),
                );
                let zone = entry
                    .map(|entry| CompactString::from(entry.zone.as_str()))
                    .or(deleted_from)
                    .filter(|zone| !zone_offers_cloud(connectors, zone));
                let Some(zone) = zone else {
                    let key = entry.map_or(known, |entry| entry.id.as_str().into());
                    let runtime = match machines.get_mut_unrecorded(key.as_str()) {
                        Some(r) => r,
                        None => machines.or_default(key.clone()),
                    };
                    let change = unknown_machine(runtime, connectors, site.version, &key, ts, out);
                    // (Rare: recorded whether it changed anything or not.)
                    machines.record(key.as_str());
                    return change;
                };
                // The runtime is keyed by the snapshot's id (as `Engine::runtime_id`
                // answers for an entry the site lacks), else as it was found.
                unconfigured_id = entry.map_or(known, |entry| entry.id.as_str().into());
                unconfigured_zone = zone;
                found = machines.get_mut_unrecorded(unconfigured_id.as_str());
                (
                    unconfigured_id.as_str(),
                    unconfigured_zone.as_str(),
                    None,
                    false,
                )
            }
        };
        let current = found.as_deref().map(|r| &r.registrar);
        let (target, refusals) = if cloud {
            (None, Vec::new())
        } else {
            lhc_broker(
                connectors,
                connector_order,
                validations,
                zone,
                machine,
                current,
            )
        };
        let runtime = match found {
            Some(r) => r,
            None => machines.or_default(machine.into()),
        };
        let (old_sessions, new_sessions) = (runtime.sessions.len(), hb.sessions.len());
        let old = std::mem::replace(&mut runtime.sessions, hb.sessions);
        let same = old == runtime.sessions;
        let dirty = !same || !runtime.pending.is_empty();
        if runtime
            .resolved
            .as_ref()
            .is_none_or(|(version, zone)| *version != site.version || *zone != zone_index)
        {
            runtime.resolved = Some((site.version, zone_index));
        }
        // What a row of the machine holds changed: its sessions, a refusal (perhaps: one
        // already reported changes nothing, but is rare enough to count), its registrar.
        let changed = !same || !refusals.is_empty();
        for (name, reason, epoch) in refusals {
            refuse(
                runtime,
                ts,
                machine,
                Holder::Connector(name),
                reason,
                epoch,
                out,
            );
        }
        let unchanged = match (&runtime.registrar, target) {
            (Registrar::Cloud, _) => cloud,
            (Registrar::Connector(current), Some(name)) => !cloud && current == name,
            (Registrar::None, None) => !cloud,
            _ => false,
        };
        if unchanged {
            follow_sessions(connectors, &runtime.registrar, old_sessions, new_sessions);
            if changed {
                machines.record(machine);
            }
            return dirty.then(|| SessionsChange {
                machine: machine.to_string(),
                old,
                same,
            });
        }
        let new = match (cloud, target) {
            (true, _) => Registrar::Cloud,
            (false, Some(name)) => Registrar::Connector(name.to_string()),
            (false, None) => Registrar::None,
        };
        let sessions = (old_sessions as u64, new_sessions as u64);
        move_registration(connectors, runtime, machine, new, sessions, ts, out);
        machines.record(machine);
        Some(SessionsChange {
            machine: machine.to_string(),
            old,
            same,
        })
    }

    pub(super) fn session_event(&mut self, ev: &SessionEvent, ts: Ts, out: &mut Vec<Output>) {
        // One site lookup; the name is inline (no allocation) for ids of up to 24 bytes.
        let configured = self.site.machine_id(&ev.machine);
        let machine = match configured {
            Some(id) => CompactString::from(id),
            // Not in the site configuration (rare): the runtime its heartbeats keep.
            None => {
                let Unconfigured {
                    known,
                    deleted_from,
                    ..
                } = unconfigured(&self.machines, &ev.machine);
                let entry = snapshot_entry(
                    &self.connectors,
                    &self.connector_order,
                    &self.validations,
                    &ev.machine,
                    None,
                    deleted_from.as_deref(),
                );
                entry.map_or(known, |entry| entry.id.as_str().into())
            }
        };
        if configured.is_none()
            && !self
                .machines
                .get(machine.as_str())
                .is_some_and(|r| r.registrar != Registrar::None)
        {
            // A machine the site does not know and nobody holds: nothing to keep.
            return;
        }
        let runtime = self.machines.or_default(machine.clone());
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
}

/// What a heartbeat changed that brokering depends on, for `sessions_changed_as`.
pub(super) struct SessionsChange {
    /// The machine (its configured id).
    pub(super) machine: String,
    /// Its sessions before the heartbeat.
    pub(super) old: Vec<SessionReport>,
    /// Whether the heartbeat reported the same sessions (only pending launches or the
    /// registration moved): the comparison is made once, here, not again downstream.
    pub(super) same: bool,
}

/// A heartbeat of a machine the site configuration does not name, and no LHC broker of its
/// zone deals with: the cloud refuses it (once, until it registers somewhere again). A
/// registration it held ends: with the cloud, the refusal is that change (R-REG-3), so the
/// cloud brokers nothing onto it even once the machine is added again, until a heartbeat
/// registers it anew; with a connector (its zone has the cloud path again), it leaves that
/// connector visibly, as any VDA does. Held by nobody, its sessions are not kept: what a VDA
/// unknown to the site can cost is bounded (its refusal), whatever it reports.
fn unknown_machine(
    runtime: &mut MachineRuntime,
    connectors: &mut BTreeMap<String, Connector>,
    site_version: u64,
    machine: &str,
    ts: Ts,
    out: &mut Vec<Output>,
) -> Option<SessionsChange> {
    let registered = runtime.registrar != Registrar::None;
    match runtime.registrar {
        Registrar::None => {}
        Registrar::Cloud => runtime.registrar = Registrar::None,
        Registrar::Connector(_) => {
            let sessions = (runtime.sessions.len() as u64, 0);
            move_registration(
                connectors,
                runtime,
                machine,
                Registrar::None,
                sessions,
                ts,
                out,
            );
        }
    }
    let old = std::mem::take(&mut runtime.sessions);
    runtime.resolved = Some((site_version, None));
    refuse(
        runtime,
        ts,
        machine,
        Holder::Cloud,
        Reason::UnknownMachine,
        0,
        out,
    );
    let same = old.is_empty();
    // Leaving a registrar takes the machine out of that broker's pools.
    (!same || registered).then(|| SessionsChange {
        machine: machine.into(),
        old,
        same,
    })
}

/// What the engine already keeps of a machine the site configuration does not name.
struct Unconfigured {
    /// Its runtime key before its snapshot entry is known: the runtime kept under the name
    /// or (ids are FQDNs, mostly lowercase) under the name lowercased, else the name. So a
    /// VDA that spells its name in another case than its former id meets its own runtime.
    known: CompactString,
    /// The connector holding its registration, if one does.
    holder: Option<String>,
    /// The zone a configuration change deleted it from.
    deleted_from: Option<CompactString>,
}

/// [`Unconfigured`] of the machine a record calls `name`.
fn unconfigured(
    machines: &crate::detmap::Tracked<CompactString, MachineRuntime>,
    name: &str,
) -> Unconfigured {
    let known: CompactString = if machines.contains_key(name) {
        name.into()
    } else {
        let lower = name.to_lowercase();
        if machines.contains_key(lower.as_str()) {
            lower.into()
        } else {
            name.into()
        }
    };
    let runtime = machines.get(known.as_str());
    Unconfigured {
        holder: runtime.and_then(|r| match &r.registrar {
            Registrar::Connector(name) => Some(name.clone()),
            _ => None,
        }),
        deleted_from: runtime.and_then(|r| r.deleted_from.clone()),
        known,
    }
}

/// The snapshot entry of `machine` that tells the brokers where a VDA the site
/// configuration no longer names is: the snapshot of the connector holding it (`holder`),
/// else of the first connector in LHC mode, else of the first connector (FQDN order), whose
/// snapshot holds it in the connector's own zone, among the connectors of `zone` when the
/// zone the machine had when deleted is known. Connectors may disagree (a machine moved to
/// another zone, one of them still on an older snapshot): those that broker it, and the
/// configuration it was deleted from, decide, not the order of their names.
fn snapshot_entry<'v>(
    connectors: &BTreeMap<String, Connector>,
    connector_order: &[String],
    validations: &'v BTreeMap<u64, Validation>,
    machine: &str,
    holder: Option<&str>,
    zone: Option<&str>,
) -> Option<&'v crate::snapshot::MachineEntry> {
    let entry = |c: &Connector| {
        snapshot_in(validations, c)
            .and_then(|s| s.machine(machine))
            .filter(|entry| entry.zone == c.zone)
    };
    let ordered = || {
        connector_order
            .iter()
            .map(|name| &connectors[name])
            .filter(|c| zone.is_none_or(|zone| c.zone == zone))
    };
    holder
        .and_then(|name| connectors.get(name))
        .and_then(entry)
        .or_else(|| ordered().filter(|c| c.in_lhc()).find_map(entry))
        .or_else(|| ordered().find_map(entry))
}

/// Without the cloud path: the first connector of `zone` (FQDN order) in LHC mode that
/// brokers and knows `machine`, and the refusals of the others in LHC mode with their
/// epoch (R-REG-2).
#[allow(clippy::type_complexity)]
fn lhc_broker<'a>(
    connectors: &'a BTreeMap<String, Connector>,
    connector_order: &'a [String],
    validations: &BTreeMap<u64, Validation>,
    zone: &str,
    machine: &str,
    current: Option<&Registrar>,
) -> (Option<&'a str>, Vec<(&'a str, Reason, u64)>) {
    let held_by = |name: &str| matches!(current, Some(Registrar::Connector(n)) if n == name);
    let mut refusals = Vec::new();
    let mut target = None;
    let in_lhc = connector_order
        .iter()
        .map(|name| (name.as_str(), &connectors[name]))
        .filter(|(_, c)| c.zone == zone && c.in_lhc());
    for (name, c) in in_lhc {
        let reason = if !c.brokering {
            Some(Reason::NotElected)
        } else if !held_by(name)
            && snapshot_in(validations, c)
                .and_then(|s| s.machine(machine))
                .is_none()
        {
            // (A machine it already holds was in its snapshot when it registered, and a
            // snapshot does not change during LHC mode.)
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
    (target, refusals)
}

/// Moves `machine` to registrar `new` (R-REG-3): every change is visible, the registrar
/// left first (leaving the cloud carries `cloud_unreachable`), and the brokers' counts
/// follow its `(old, new)` session counts.
fn move_registration(
    connectors: &mut BTreeMap<String, Connector>,
    runtime: &mut MachineRuntime,
    machine: &str,
    new: Registrar,
    (old_sessions, new_sessions): (u64, u64),
    ts: Ts,
    out: &mut Vec<Output>,
) {
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
    match &runtime.registrar {
        Registrar::Cloud => {}
        Registrar::Connector(name) => {
            let c = connectors
                .get_mut(name)
                .expect("a broker in LHC mode exists");
            c.registrations.insert(machine.to_string());
            c.session_count += new_sessions;
            if let Some(e) = c.episode_mut() {
                e.registered.insert(machine.to_string());
            }
        }
        Registrar::None => return,
    }
    let holder = runtime.registrar.holder();
    runtime.refusals.remove(holder.key().as_ref());
    // Registered somewhere, a machine the cloud refused (unknown to the site) is refused
    // again, visibly, should it come back to the cloud still unknown.
    runtime.refusals.remove(Holder::Cloud.key().as_ref());
    out.push(Output::Registration(Registration {
        ts,
        machine: machine.to_string(),
        connector: holder.name().to_string(),
        accepted: true,
        reason: None,
    }));
}

/// Keeps a broker's session count in step when a machine it holds reports `after`
/// sessions instead of `before` (3507 reads the count; summing at each report would scan).
pub(super) fn follow_sessions(
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
    offers_cloud(connectors.values().filter(|c| c.zone == zone))
}

/// R-REG-1's answer for the connectors of one zone.
fn offers_cloud<'a>(zone: impl Iterator<Item = &'a Connector>) -> bool {
    let (mut working, mut pending, mut lhc) = (false, false, false);
    for c in zone {
        match c.state() {
            ConnectorState::WorkingNormally => working |= !c.first_check_after_start,
            ConnectorState::PendingHa => pending = true,
            ConnectorState::Stopped => {}
            _ => lhc = true,
        }
    }
    working || (pending && !lhc)
}

/// [`zone_offers_cloud`] for the zone at `index` in the site's zone names (`zone` its
/// name): a connector whose zone index is known compares integers (one call per VDA
/// heartbeat), the others their zone's name.
fn zone_index_offers_cloud(
    connectors: &BTreeMap<String, Connector>,
    index: u32,
    zone: &str,
) -> bool {
    offers_cloud(connectors.values().filter(|c| match c.zone_index {
        Some(i) => i == index,
        None => c.zone == zone,
    }))
}

/// A refusal of `machine` by `holder`, as an output once per (reason, epoch) (R-REG-2).
pub(super) fn refuse(
    runtime: &mut MachineRuntime,
    ts: Ts,
    machine: &str,
    holder: Holder<'_>,
    reason: Reason,
    epoch: u64,
    out: &mut Vec<Output>,
) {
    let key = holder.key();
    if runtime.refusals.get(key.as_ref()) == Some(&(reason, epoch)) {
        return;
    }
    runtime
        .refusals
        .insert(key.as_ref().into(), (reason, epoch));
    out.push(Output::Registration(Registration {
        ts,
        machine: machine.to_string(),
        connector: holder.name().to_string(),
        accepted: false,
        reason: Some(reason),
    }));
}
