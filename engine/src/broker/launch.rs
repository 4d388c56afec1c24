//! Launch decisions (SPEC §6.2, R-LAUNCH): every `launch.request` yields exactly one
//! `launch.decision`, from the cloud broker or the LHC broker of the user's zone, taken
//! from the pools' first entries.

use std::sync::Arc;

use crate::config::DeliveryGroupKind;
use crate::output::*;
use crate::record::LaunchRequest;
use crate::snapshot::{self, Snapshot};
use crate::ts::Ts;

use super::{pool_key, Engine, Holder, PendingLaunch, Pool, Registrar};

/// What one delivery group offers a launch.
pub(super) enum Found {
    /// A static group decided (and, for the cloud, may have assigned a machine).
    Chosen(Choice),
    /// The group's best machine: (not in the preferred zone, load, FQDN rank).
    Candidate((bool, u32, u32)),
}

/// What a brokering attempt found.
pub(super) struct Choice {
    machine: String,
    session: SessionKind,
    new_assignment: bool,
}

impl Engine {
    /// Decides one launch request (exactly one `launch.decision`).
    pub(crate) fn launch(&mut self, request: &LaunchRequest, ts: Ts, out: &mut Vec<Output>) {
        let name = self
            .site
            .connector_id(&request.connector)
            .expect("checked by admissible")
            .to_string();
        let user = request.user.to_lowercase();
        let (outcome, via) = self.launch_outcome(&name, &user, &request.resource, ts);
        let result = decision(request, &name, ts, outcome, via);
        self.note_launch(&name, &user, request, &result, ts);
        out.push(Output::LaunchDecision(result));
    }

    /// Who decides a launch sent to connector `name`, and what: a stopped connector
    /// refuses, one in LHC mode brokers if elected, one whose check failed (the detection
    /// gap) refuses with why it cannot take over, and otherwise the cloud brokers.
    fn launch_outcome(
        &mut self,
        name: &str,
        user: &str,
        resource: &str,
        ts: Ts,
    ) -> (Result<Choice, Reason>, Via) {
        let c = &self.connectors[name];
        if !c.started() {
            return (Err(Reason::ConnectorStopped), Via::Cloud);
        }
        if c.in_lhc() {
            let outcome = if !c.brokering {
                Err(Reason::NotElected)
            } else if !c.snapshot_usable {
                // Forced in at its start, then found to have been powered off in normal
                // operations (R-STATE-10): it holds the zone but cannot decide from that
                // snapshot.
                Err(Reason::NoLhcDatabase)
            } else {
                self.choose(Holder::Connector(name), user, resource, ts)
            };
            return (outcome, Via::Lhc);
        }
        if matches!(c.last_check, Some((_, false))) {
            let reason = match self.ineligible(name, ts) {
                Some(IneligibleReason::LhcDisabled) => Reason::LhcDisabled,
                Some(IneligibleReason::NoLhcDatabase) => Reason::NoLhcDatabase,
                Some(IneligibleReason::HaServiceNotRunning) => Reason::HaServiceNotRunning,
                Some(IneligibleReason::NoStorefrontTraffic) => Reason::NoStorefrontTraffic,
                // (Never an R-STATE-4 answer: forced-outage waiting is not eligibility.)
                Some(IneligibleReason::ForcedOnSubset) | None => Reason::CloudUnreachable,
            };
            return (Err(reason), Via::Cloud);
        }
        (self.choose(Holder::Cloud, user, resource, ts), Via::Cloud)
    }

    /// Bookkeeping of a decision: R-DATA (recent users, clients), the episode's counters
    /// and activity, the detection gap's count, and the request a new session waits for.
    fn note_launch(
        &mut self,
        name: &str,
        user: &str,
        request: &LaunchRequest,
        result: &LaunchDecision,
        ts: Ts,
    ) {
        let c = self.connector_mut(name);
        if c.started() {
            c.data.recent_users.insert(user.into(), ts);
            c.data.clients.insert(
                request.client.name.as_str().into(),
                (request.client.ip.as_str().into(), ts),
            );
            if result.reason == Some(Reason::CloudUnreachable) {
                c.data.cloud_unreachable += 1;
            }
            if result.via == Via::Lhc {
                if let Some(e) = c.episode_mut() {
                    match result.outcome {
                        Outcome::Brokered => e.successful_launches += 1,
                        Outcome::Rejected => e.failed_launches += 1,
                    }
                }
                let detail = format!(
                    "{} launched {}: {}",
                    request.user,
                    request.resource,
                    match (&result.machine, result.reason) {
                        (Some(m), _) => format!("brokered on {m}"),
                        (None, Some(r)) => format!("rejected ({})", crate::engine::snake(&r)),
                        (None, None) => "rejected".to_string(),
                    }
                );
                c.record_activity(ts, "launch", detail);
            }
        }
        // The pending session broker_new recorded: name its request, for forensics.
        if let (Some(machine), Some(SessionKind::New)) = (&result.machine, result.session) {
            if let Some(p) = self
                .machines
                .get_mut(machine.as_str())
                .and_then(|r| r.pending.last_mut())
            {
                p.request = result.request.as_str().into();
            }
        }
    }

    /// Chooses a machine for `user` and `resource` among what `holder` offers.
    pub(super) fn choose(
        &mut self,
        holder: Holder<'_>,
        user: &str,
        resource: &str,
        ts: Ts,
    ) -> Result<Choice, Reason> {
        let catalog = self.catalog_of(holder).ok_or(Reason::NoLhcDatabase)?;
        let resource = catalog
            .resources
            .get(resource)
            .or_else(|| catalog.resources.get(&resource.to_lowercase()))
            .ok_or(Reason::UnknownResource)?;
        if !entitled(&catalog, resource, user) {
            return Err(Reason::NotEntitled);
        }
        // R-LAUNCH-2: in LHC mode only the connector's own zone.
        let zone = match holder {
            Holder::Connector(name) => Some(self.connectors[name].zone.clone()),
            Holder::Cloud | Holder::Off => None,
        };
        if let Some(zone) = &zone {
            let here = resource.delivery_groups.iter().any(|g| {
                catalog
                    .group_zone_machines
                    .get(g)
                    .is_some_and(|zones| zones.contains_key(zone))
            });
            // "Only in other zones": a resource whose groups hold no machine anywhere is not
            // in another zone; it has no registered machine.
            let elsewhere = || {
                resource.delivery_groups.iter().any(|g| {
                    catalog
                        .group_zone_machines
                        .get(g)
                        .is_some_and(|zones| zones.values().any(|m| !m.is_empty()))
                })
            };
            if !here && elsewhere() {
                return Err(Reason::CrossZone);
            }
        }
        // R-LAUNCH-3: reconnect first.
        let reconnect_to = self.disconnected_session(&catalog, holder, resource, user);
        if let Some(machine) = reconnect_to {
            self.reconnect(&machine, user);
            return Ok(Choice {
                machine,
                session: SessionKind::Reconnect,
                new_assignment: false,
            });
        }
        // The machine with the fewest sessions across the resource's groups (the cloud: in
        // its preferred zone first, site-wide), ties in FQDN order; a static group decides
        // at once, in the configured order.
        let ask = Ask {
            catalog: &catalog,
            holder,
            user,
            preference: resource.zone_preference.as_deref(),
            zone: zone.as_deref(),
            ts,
        };
        let mut first_reason = None;
        let mut best: Option<(bool, u32, u32)> = None;
        for group in &resource.delivery_groups {
            match self.try_group(&ask, group) {
                Ok(Found::Chosen(choice)) => return Ok(choice),
                Ok(Found::Candidate(key)) => {
                    if best.is_none_or(|b| key < b) {
                        best = Some(key);
                    }
                }
                Err(reason) => {
                    first_reason.get_or_insert(reason);
                }
            }
        }
        if let Some((_, _, rank)) = best {
            let machine = catalog.by_rank[rank as usize].to_string();
            return Ok(self.broker_new(&catalog, machine, user, ts, false));
        }
        Err(first_reason.unwrap_or(Reason::NoRegisteredMachine))
    }

    /// R-LAUNCH-3: a machine holding a disconnected session of `user`, that `holder`
    /// holds (the cloud only while the machine's zone offers the cloud path), of one of the
    /// resource's groups and not in maintenance.
    fn disconnected_session(
        &self,
        catalog: &Snapshot,
        holder: Holder<'_>,
        resource: &snapshot::ResourceEntry,
        user: &str,
    ) -> Option<String> {
        let lhc = matches!(holder, Holder::Connector(_));
        let machines = self.user_sessions.get(user)?;
        machines.iter().find_map(|(machine, tally)| {
            // Most of a user's machines hold no disconnected session: asked first, the
            // answer spares two lookups (and a cache miss each) per machine.
            if tally.disconnected == 0 {
                return None;
            }
            let runtime = self.machines.get(machine.as_str())?;
            let entry = catalog
                .machines
                .get(crate::snapshot::lower(machine).as_ref())?;
            // Only the runtime the entry stands for (a machine's stale old-case record
            // after a rename by case is not it).
            if self.runtime_id(&entry.id) != machine.as_str() {
                return None;
            }
            // The cloud reaches a machine only while its zone offers the cloud path.
            let held = runtime.registrar.holder() == holder
                && (lhc || crate::engine::zone_offers_cloud(&self.connectors, &entry.zone));
            // R-LAUNCH-2 holds for reconnects too: a machine its broker put in
            // maintenance (R-LAUNCH-6) gets no session, resumed or new.
            let fits = !entry.maintenance
                && !self.marked(holder, machine)
                && resource.delivery_groups.contains(&entry.delivery_group);
            (held && fits).then(|| machine.to_string())
        })
    }

    /// One delivery group of the resource: a static group's machine at once, or the best
    /// candidate of its pools.
    pub(super) fn try_group(&mut self, ask: &Ask<'_>, group_id: &str) -> Result<Found, Reason> {
        let Ask {
            catalog,
            holder,
            user,
            preference,
            zone,
            ..
        } = *ask;
        let lhc = zone.is_some();
        let group = catalog
            .groups
            .get(group_id)
            .ok_or(Reason::NoRegisteredMachine)?;
        // R-LAUNCH-7: limits count the sessions this broker knows (the cloud: the site's).
        if let Some(limit) = group.session_limit_per_user {
            if self.known_sessions(catalog, holder, group_id, user, lhc) >= limit {
                return Err(Reason::SessionLimit);
            }
        }
        let group_zones: Vec<&str> = catalog
            .group_zone_machines
            .get(group_id)
            .into_iter()
            .flat_map(|zones| zones.keys().map(String::as_str))
            .collect();
        if group.kind == DeliveryGroupKind::SingleSessionStatic {
            return self.static_machine(ask, group_id).map(Found::Chosen);
        }
        // R-LAUNCH-5: Remote PC machines follow the static rule whatever their group's
        // kind: the one assigned to the user is theirs (usable in an outage: enrolled
        // during normal operations), and the pools never offer one (`place`).
        if self.assigned_remote_pc(catalog, group_id, user, lhc) {
            return self.static_machine(ask, group_id).map(Found::Chosen);
        }
        let pooled = group.kind == DeliveryGroupKind::SingleSessionPooled;
        if pooled && group.power_managed && lhc && !reuse_in_outage(catalog, group) {
            return Err(Reason::PooledUnavailableInOutage);
        }
        // The cloud may also power on an idle pooled machine that is not registered.
        let power_on = !lhc && pooled && group.power_managed;
        let first = |pool: Option<&Pool>| {
            let (load, ranks) = pool?.available.iter().next()?;
            Some((*load, *ranks.first()?))
        };
        // The machine with the fewest sessions, ties in FQDN order (ranks are FQDN order
        // across the whole catalog), among the pools of the given zones.
        let reachable = |z: &str| lhc || crate::engine::zone_offers_cloud(&self.connectors, z);
        let pick = |zones: &[&str]| -> Option<(u32, u32)> {
            zones
                .iter()
                .filter(|z| reachable(z))
                .flat_map(|z| {
                    let registered = first(self.pools.get(&pool_key(holder, group_id, z)));
                    let off = if power_on {
                        first(self.pools.get(&pool_key(Holder::Off, group_id, z)))
                    } else {
                        None
                    };
                    [registered, off]
                })
                .flatten()
                .min()
        };
        // In LHC mode the connector's own zone only (zone preference ignored); the cloud
        // looks site-wide, in the resource's preferred zone first.
        // A tag restriction overrides the zone preference (R-LAUNCH-8).
        let preference = preference.filter(|_| group.restrict_to_tag.is_none());
        let chosen = match (zone, preference) {
            (Some(z), _) => pick(&[z]).map(|c| (false, c)),
            (None, Some(p)) => pick(&[p])
                .map(|c| (true, c))
                .or_else(|| pick(&group_zones).map(|c| (false, c))),
            (None, None) => pick(&group_zones).map(|c| (false, c)),
        };
        if let Some((preferred, (load, rank))) = chosen {
            // Sorts first: in the preferred zone, then fewest sessions, then FQDN order.
            return Ok(Found::Candidate((!preferred, load, rank)));
        }
        let looked: Vec<&str> = zone.map_or(group_zones, |z| vec![z]);
        let reason = self.no_machine_reason(holder, group_id, group, &looked, lhc);
        // No machine registered in the pools (Remote PC machines are in none): a user
        // without a Remote PC machine of the group gets the static rule's answer (no new
        // assignment in LHC mode; the cloud assigns the first free one). Full or untagged
        // pooled machines keep their own reason.
        if reason == Reason::NoRegisteredMachine && self.remote_pc_groups.holds(catalog, group_id) {
            if lhc {
                return Err(Reason::AssignmentRequired);
            }
            return self.static_machine(ask, group_id).map(Found::Chosen);
        }
        Err(reason)
    }

    /// Whether `user` is assigned a Remote PC machine of group `group_id` (in the catalog,
    /// or for the cloud by an assignment it made).
    fn assigned_remote_pc(
        &self,
        catalog: &Snapshot,
        group_id: &str,
        user: &str,
        lhc: bool,
    ) -> bool {
        self.assignment(catalog, group_id, user, lhc)
            .and_then(|m| catalog.machines.get(m.as_str()))
            .is_some_and(|e| e.remote_pc)
    }

    /// The machine assigned to `user` in group `group_id`: the catalog's assignment, else
    /// (for the cloud only) one the cloud made that no `config.change` records yet.
    fn assignment<'a>(
        &'a self,
        catalog: &'a Snapshot,
        group_id: &str,
        user: &str,
        lhc: bool,
    ) -> Option<&'a String> {
        let configured = catalog.assignments.get(group_id).and_then(|u| u.get(user));
        configured.or_else(|| {
            (!lhc)
                .then(|| {
                    self.cloud_assignments
                        .get(group_id)
                        .and_then(|u| u.get(user))
                })
                .flatten()
        })
    }

    /// Sessions of `user` in group `group_id` that `holder` knows: in LHC mode on the
    /// machines it holds, for the cloud site-wide (R-LAUNCH-7).
    fn known_sessions(
        &self,
        catalog: &Snapshot,
        holder: Holder<'_>,
        group_id: &str,
        user: &str,
        lhc: bool,
    ) -> u32 {
        self.user_sessions
            .get(user)
            .into_iter()
            .flatten()
            .filter(|(machine, _)| {
                let in_group = catalog
                    .machines
                    .get(machine.as_str().to_lowercase().as_str())
                    .is_some_and(|m| m.delivery_group == group_id);
                let held = !lhc
                    || self
                        .machines
                        .get(machine.as_str())
                        .is_some_and(|r| r.registrar.holder() == holder);
                in_group && held
            })
            .map(|(_, t)| t.active + t.disconnected + t.pending)
            .sum()
    }

    /// Why a group offered no machine in `zones`: none registered, none with the tag, or
    /// all full. Only what the broker reaches counts: a zone that lost the cloud path holds
    /// no machine the cloud can use, whatever its last registrations say.
    fn no_machine_reason(
        &self,
        holder: Holder<'_>,
        group_id: &str,
        group: &snapshot::GroupEntry,
        zones: &[&str],
        lhc: bool,
    ) -> Reason {
        let reachable = |z: &str| lhc || crate::engine::zone_offers_cloud(&self.connectors, z);
        let (mut registered, mut tagged) = (0, 0);
        for z in zones.iter().filter(|z| reachable(z)) {
            if let Some(pool) = self.pools.get(&pool_key(holder, group_id, z)) {
                registered += pool.registered;
                tagged += pool.tagged;
            }
        }
        match (registered, tagged) {
            (0, _) => Reason::NoRegisteredMachine,
            (_, 0) if group.restrict_to_tag.is_some() => Reason::TagRestriction,
            _ => Reason::MachineCapacity,
        }
    }

    /// R-LAUNCH-5: a static (or Remote PC) machine: the assigned one, or for the cloud a
    /// first free machine assigned now.
    pub(super) fn static_machine(
        &mut self,
        ask: &Ask<'_>,
        group_id: &str,
    ) -> Result<Choice, Reason> {
        let Ask {
            catalog,
            holder,
            user,
            ts,
            ..
        } = *ask;
        let lhc = matches!(holder, Holder::Connector(_));
        let assigned = self.assignment(catalog, group_id, user, lhc).cloned();
        let (machine, new_assignment) = match assigned {
            Some(m) => (m, false),
            None if lhc => return Err(Reason::AssignmentRequired),
            // Recorded below, only if the launch is brokered: a rejected launch makes no
            // assignment (none would ever be reported).
            None => (self.first_free_machine(catalog, group_id)?, true),
        };
        let entry = catalog
            .machines
            .get(machine.as_str())
            .ok_or(Reason::NoRegisteredMachine)?;
        // The runtime the entry stands for: under the current configuration's id when the
        // machine was renamed by case since this snapshot.
        let exact = self.runtime_id(&entry.id).to_string();
        let runtime = self.machines.get(exact.as_str());
        let reachable = lhc || crate::engine::zone_offers_cloud(&self.connectors, &entry.zone);
        let held = reachable && runtime.is_some_and(|r| r.registrar.holder() == holder);
        // The cloud may power on a machine nobody holds; never one registered with an LHC
        // broker (one registrar at a time, R-REG-2).
        let powered_on = !lhc
            && reachable
            && runtime.is_none_or(|r| r.registrar == Registrar::None)
            && catalog
                .groups
                .get(group_id)
                .is_some_and(|g| g.power_managed);
        if entry.maintenance || self.marked(holder, &exact) || !(held || powered_on) {
            return Err(Reason::NoRegisteredMachine);
        }
        // R-LAUNCH-8 holds in LHC mode for the assigned machine too: registered, but
        // without the group's tag, it is not one the launch may use.
        let restricted = catalog
            .groups
            .get(group_id)
            .and_then(|g| g.restrict_to_tag.as_ref());
        if let (true, Some(tag)) = (lhc, restricted) {
            if !entry.tags.iter().any(|t| t.eq_ignore_ascii_case(tag)) {
                return Err(Reason::TagRestriction);
            }
        }
        let load = runtime.map_or(0, |r| r.sessions.len() + r.pending.len()) as u32;
        if load >= entry.max_sessions {
            return Err(Reason::MachineCapacity);
        }
        if new_assignment {
            self.cloud_assignments
                .entry(group_id.to_string())
                .or_default()
                .insert(user.to_string(), machine.clone());
            self.cloud_assigned.insert(machine.clone());
        }
        Ok(self.broker_new(catalog, machine, user, ts, new_assignment))
    }

    /// R-LAUNCH-5 for the cloud: the first free machine of a static group in FQDN order
    /// across its zones (ids are lowercase: byte order is FQDN order), among the zones the
    /// cloud reaches; zone preference plays no part.
    fn first_free_machine(&self, catalog: &Snapshot, group_id: &str) -> Result<String, Reason> {
        // Outside a static group only Remote PC machines are assigned.
        let static_group = catalog
            .groups
            .get(group_id)
            .is_some_and(|g| g.kind == DeliveryGroupKind::SingleSessionStatic);
        let taken = |m: &String| {
            catalog.assigned.contains(m)
                || self.cloud_assigned.contains(m)
                || catalog
                    .machines
                    .get(m.as_str())
                    .is_none_or(|e| e.maintenance || !(static_group || e.remote_pc))
        };
        let zones = || {
            catalog
                .group_zone_machines
                .get(group_id)
                .into_iter()
                .flat_map(|zones| zones.iter())
        };
        let free = zones()
            .filter(|(z, _)| crate::engine::zone_offers_cloud(&self.connectors, z))
            .filter_map(|(_, machines)| machines.iter().find(|m| !taken(m)))
            .min()
            .cloned();
        free.ok_or_else(|| {
            // Free machines only in zones the cloud does not reach: none registered.
            let unreachable_free = zones().any(|(_, machines)| machines.iter().any(|m| !taken(m)));
            if unreachable_free {
                Reason::NoRegisteredMachine
            } else {
                Reason::MachineCapacity
            }
        })
    }

    /// Records a new session brokered to `machine` (lowercased id) until its VDA reports it.
    pub(super) fn broker_new(
        &mut self,
        catalog: &Arc<Snapshot>,
        machine: String,
        user: &str,
        ts: Ts,
        new_assignment: bool,
    ) -> Choice {
        let exact = catalog
            .machines
            .get(machine.as_str())
            .map_or(machine.clone(), |m| m.id.clone());
        // The launch counts on the runtime the catalog entry stands for: under the current
        // configuration's id when a connector's older snapshot names a machine renamed by
        // case since, so that its load is the one its pool sees.
        let own = self.runtime_id(&exact).to_string();
        self.machines.or_default(own.as_str().into());
        let tally = self.user_sessions.or_default(user.into());
        tally.get_or_default(own.as_str()).pending += 1;
        let runtime = self.machines.get_mut(own.as_str()).expect("just inserted");
        runtime.pending.push(PendingLaunch {
            request: compact_str::CompactString::default(),
            user: user.into(),
            ts,
        });
        self.pending_expiry.insert((ts, own.as_str().into()));
        self.place(&own);
        Choice {
            machine: exact,
            session: SessionKind::New,
            new_assignment,
        }
    }
}

/// R-LAUNCH-6: whether a pooled, power-managed group may be used in an outage. Reuse needs
/// both the site's and the group's consent; on-premises only groups that shut machines
/// down after use are concerned (FR/JA seeds), in DaaS every such group (EN seed).
fn reuse_in_outage(catalog: &Snapshot, group: &snapshot::GroupEntry) -> bool {
    let concerned = match catalog.site.profile {
        crate::config::Profile::Daas => true,
        crate::config::Profile::Onprem => group.shutdown_after_use,
    };
    let reuse = catalog
        .site
        .reuse_machines_without_shutdown_in_outage_allowed
        && group.reuse_in_outage;
    !concerned || reuse
}

/// The `launch.decision` of `request` at connector `name`.
fn decision(
    request: &LaunchRequest,
    name: &str,
    ts: Ts,
    outcome: Result<Choice, Reason>,
    via: Via,
) -> LaunchDecision {
    let (outcome, machine, session, new_assignment, reason) = match outcome {
        Ok(choice) => (
            Outcome::Brokered,
            Some(choice.machine),
            Some(choice.session),
            (via == Via::Cloud && choice.session == SessionKind::New)
                .then_some(choice.new_assignment),
            None,
        ),
        Err(reason) => (Outcome::Rejected, None, None, None, Some(reason)),
    };
    LaunchDecision {
        ts,
        request: request.request.clone(),
        connector: name.to_string(),
        outcome,
        via,
        machine,
        session,
        new_assignment,
        reason,
    }
}

/// Whether `user` (lowercased) or one of its groups is entitled to `resource`.
pub(super) fn entitled(catalog: &Snapshot, resource: &snapshot::ResourceEntry, user: &str) -> bool {
    resource.principals.contains(user)
        || catalog
            .user_groups
            .get(user)
            .is_some_and(|groups| groups.iter().any(|g| resource.principals.contains(g)))
}

/// What one launch asks of each of its resource's delivery groups.
#[derive(Clone, Copy)]
pub(super) struct Ask<'a> {
    /// The broker's catalog.
    pub(super) catalog: &'a Arc<Snapshot>,
    /// Who brokers.
    pub(super) holder: Holder<'a>,
    /// The user launching.
    pub(super) user: &'a str,
    /// The resource's zone preference.
    pub(super) preference: Option<&'a str>,
    /// The broker's zone in LHC mode (R-LAUNCH-2); `None` for the cloud.
    pub(super) zone: Option<&'a str>,
    /// The launch's time.
    pub(super) ts: Ts,
}
