//! Brokering (SPEC §6.2, R-LAUNCH) and the LHC data content (R-DATA).
//!
//! Every `launch.request` yields exactly one `launch.decision`. Machines are chosen from
//! pools kept in step with registrations, sessions and maintenance, so a decision costs
//! O(log n) whatever the size of the zone: a pool per (registrar, delivery group, zone)
//! orders its available machines by (load, FQDN), and its first entry is the answer.
//!
//! Invariant: a machine contributes to at most one pool, the one of its registrar ("cloud",
//! a connector, or "" for an unregistered machine the cloud may power on), and its
//! contribution (`Placement`) is recomputed whenever anything it depends on changes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::config::DeliveryGroupKind;
use crate::detmap::DetMap;
use crate::engine::{Engine, Registrar};
use crate::output::{
    IneligibleReason, LaunchDecision, MachineMaintenance, MaintenanceReason, Outcome, Output,
    Reason, SessionKind, Via,
};
use crate::record::{LaunchRequest, SessionReport, SessionState};
use crate::snapshot::{self, Snapshot};
use crate::ts::Ts;

/// Registrar name of machines registered with the cloud broker.
pub const CLOUD: &str = "cloud";
/// Registrar name of unregistered machines (powered off: the cloud may power them on).
pub const OFF: &str = "";
/// A launch the VDA has not reported yet is forgotten after this long.
pub const PENDING_LAUNCH_S: u64 = 120;
/// Entries of recent LHC-mode activity kept per connector.
pub const ACTIVITY_KEPT: usize = 1000;

/// Machines one registrar offers for one delivery group in one zone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    /// Machines with room for a session by load, then FQDN rank: the first is the answer.
    pub available: BTreeMap<u32, BTreeSet<u32>>,
    /// Machines registered and not in maintenance, with room or not.
    pub registered: u32,
    /// Of those, machines carrying the group's required tag (all, without a restriction).
    pub tagged: u32,
}

/// What one machine contributes to the pools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Pool key: registrar, group and zone.
    pub key: String,
    /// The machine's FQDN rank in the catalog it was placed from.
    pub rank: u32,
    /// Its load, when it is available.
    pub available: Option<u32>,
    /// Counted as registered (not in maintenance).
    pub registered: bool,
    /// Counted as carrying the required tag.
    pub tagged: bool,
}

/// A launch brokered to a machine that has not reported the session yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingLaunch {
    /// The request.
    pub request: String,
    /// The user, lowercased.
    pub user: String,
    /// When it was brokered.
    pub ts: Ts,
}

/// One line of recent activity during LHC mode (R-DATA).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// When.
    pub ts: Ts,
    /// What: "launch", "registration", "logoff".
    pub kind: String,
    /// Details: user, resource, machine, outcome.
    pub detail: String,
}

/// The LHC database content besides the configuration (R-DATA), per connector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LhcData {
    /// Users who launched through this connector, with their last launch.
    pub recent_users: DetMap<CompactString, Ts>,
    /// Client machines: name → (IP, last seen).
    pub clients: DetMap<CompactString, (String, Ts)>,
    /// Recent activity during LHC mode, oldest first, at most `ACTIVITY_KEPT`.
    pub activity: VecDeque<Activity>,
    /// Launches rejected `cloud_unreachable` (the detection gap before LHC mode).
    pub cloud_unreachable: u64,
}

/// A resource a user may launch, and where it runs (what StoreFront needs to route a
/// launch to the right zone during an outage).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enumerated {
    /// Resource id.
    pub resource: String,
    /// Zones (lowercased) holding machines of its delivery groups.
    pub zones: Vec<String>,
}

/// Sessions of one user on one machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Active sessions.
    pub active: u32,
    /// Disconnected sessions (reconnect candidates).
    pub disconnected: u32,
    /// Launches brokered to the machine that it has not reported yet.
    pub pending: u32,
}

impl Tally {
    /// Counts one more session in `state`.
    pub(crate) fn count(&mut self, state: SessionState) {
        match state {
            SessionState::Active => self.active += 1,
            SessionState::Disconnected => self.disconnected += 1,
        }
    }

    /// Counts one session in `state` fewer.
    pub(crate) fn uncount(&mut self, state: SessionState) {
        match state {
            SessionState::Active => self.active = self.active.saturating_sub(1),
            SessionState::Disconnected => self.disconnected = self.disconnected.saturating_sub(1),
        }
    }
}

fn pool_key(registrar: &str, group: &str, zone: &str) -> String {
    format!("{registrar}\u{1f}{group}\u{1f}{zone}")
}

fn registrar_name(registrar: &Registrar) -> &str {
    match registrar {
        Registrar::None => OFF,
        Registrar::Cloud => CLOUD,
        Registrar::Connector(name) => name,
    }
}

/// What one delivery group offers a launch.
enum Found {
    /// A static group decided (and, for the cloud, may have assigned a machine).
    Chosen(Choice),
    /// The group's best machine: (not in the preferred zone, load, FQDN rank).
    Candidate((bool, u32, u32)),
}

/// What a brokering attempt found.
struct Choice {
    machine: String,
    session: SessionKind,
    new_assignment: bool,
}

impl Engine {
    /// The cloud broker's view of the configuration: the site's current objects, indexed
    /// but not validated. Derived; rebuilt after a change or a restore.
    pub(crate) fn cloud_catalog(&mut self) -> Arc<Snapshot> {
        if self
            .cloud
            .as_ref()
            .is_none_or(|c| c.version != self.site.version)
        {
            self.cloud = Some(Arc::new(snapshot::index(&self.site)));
        }
        self.cloud.clone().expect("just built")
    }

    /// The catalog a registrar brokers from: the cloud's, or a connector's snapshot.
    fn catalog_of(&mut self, registrar: &str) -> Option<Arc<Snapshot>> {
        if registrar == CLOUD || registrar == OFF {
            Some(self.cloud_catalog())
        } else {
            self.snapshot_of(registrar).cloned()
        }
    }

    /// Whether `registrar` put `machine` in maintenance (R-LAUNCH-6).
    fn marked(&self, registrar: &str, machine: &str) -> bool {
        self.connectors
            .get(registrar)
            .is_some_and(|c| c.maintenance.contains(machine))
    }

    /// Recomputes one machine's contribution to the pools.
    pub(crate) fn place(&mut self, machine: &str) {
        let Some(runtime) = self.machines.get(machine) else {
            return;
        };
        // (Connector names fit a compact string inline: no allocation per placement.)
        let registrar = compact_str::CompactString::from(registrar_name(&runtime.registrar));
        let load = (runtime.sessions.len() + runtime.pending.len()) as u32;
        let catalog = self.catalog_of(&registrar);
        let lower = crate::snapshot::lower(machine);
        let desired = catalog.as_ref().and_then(|catalog| {
            let entry = catalog.machines.get(lower.as_ref())?;
            let group = catalog.groups.get(&entry.delivery_group);
            let maintenance = entry.maintenance || self.marked(&registrar, machine);
            let tagged = group
                .and_then(|g| g.restrict_to_tag.as_ref())
                .is_none_or(|tag| entry.tags.iter().any(|t| t.eq_ignore_ascii_case(tag)));
            let room = load < entry.max_sessions;
            let available = if registrar == OFF {
                // Powered off: the cloud powers on only idle pooled, power-managed machines;
                // other kinds need no pool entry (a static machine is found by assignment).
                let power_on = group.is_some_and(|g| {
                    g.kind == DeliveryGroupKind::SingleSessionPooled && g.power_managed
                });
                if !power_on {
                    return None;
                }
                (!maintenance && tagged && load == 0).then_some(0)
            } else {
                (!maintenance && tagged && room).then_some(load)
            };
            Some(Placement {
                key: pool_key(&registrar, &entry.delivery_group, &entry.zone),
                rank: entry.rank,
                available,
                registered: !maintenance && registrar != OFF,
                tagged: !maintenance && registrar != OFF && tagged,
            })
        });
        let runtime = self.machines.get_mut(machine).expect("checked");
        if runtime.placement.as_deref() == desired.as_ref() {
            return;
        }
        let old =
            std::mem::replace(&mut runtime.placement, desired.clone().map(Box::new)).map(|b| *b);
        // A pool exists only while something contributes to it, so kept and rebuilt pools agree.
        let contributes = |p: &Placement| p.available.is_some() || p.registered;
        if let Some(old) = old.filter(contributes) {
            let pool = self
                .pools
                .get_mut(&old.key)
                .expect("contributing machines have a pool");
            if let Some(load) = old.available {
                if let Some(at_load) = pool.available.get_mut(&load) {
                    at_load.remove(&old.rank);
                    if at_load.is_empty() {
                        pool.available.remove(&load);
                    }
                }
            }
            pool.registered -= u32::from(old.registered);
            pool.tagged -= u32::from(old.tagged);
            if pool.available.is_empty() && pool.registered == 0 {
                self.pools.remove(&old.key);
            }
        }
        if let Some(new) = desired.filter(contributes) {
            let pool = self.pools.entry(new.key).or_default();
            if let Some(load) = new.available {
                pool.available.entry(load).or_default().insert(new.rank);
            }
            pool.registered += u32::from(new.registered);
            pool.tagged += u32::from(new.tagged);
        }
    }

    /// Re-places every machine (after a configuration change or an import), creating the
    /// runtime of configured machines never heard of, which the cloud may power on.
    pub(crate) fn place_all(&mut self) {
        let catalog = self.cloud_catalog();
        // Insertion order does not matter here: the machines are placed in name order below.
        for entry in catalog.machines.values() {
            if !self.machines.contains_key(entry.id.as_str()) {
                self.machines
                    .insert(entry.id.as_str().into(), Default::default());
            }
        }
        let mut names: Vec<compact_str::CompactString> = self.machines.keys().cloned().collect();
        names.sort_unstable();
        for name in names {
            self.place(&name);
        }
    }

    /// After a machine's sessions changed: the user index, pending launches matched or
    /// expired, and the machine's placement.
    pub(crate) fn sessions_changed(&mut self, machine: &str, old: &[SessionReport], ts: Ts) {
        let Some(runtime) = self.machines.get_mut(machine) else {
            return;
        };
        // The user index counts sessions by user and state, so a session reported alike
        // before and after (same user, same state) leaves it as it is: only the difference
        // moves. (A multi-session server's heartbeat typically changes one of its sessions.)
        let mut kept = vec![false; runtime.sessions.len()];
        let mut gone = Vec::new();
        if runtime.sessions.as_slice() != old {
            for s in old {
                let same = runtime
                    .sessions
                    .iter()
                    .enumerate()
                    .position(|(i, n)| !kept[i] && n.state == s.state && n.user == s.user);
                match same {
                    Some(i) => kept[i] = true,
                    None => gone.push(s),
                }
            }
        } else {
            kept.fill(true);
        }
        for s in gone {
            let user = s.user.as_str().to_lowercase();
            if let Some(machines) = self.user_sessions.get_mut(&user) {
                if let Some(t) = machines.get_mut(machine) {
                    t.uncount(s.state);
                    if *t == Tally::default() {
                        machines.remove(machine);
                    }
                }
                if machines.is_empty() {
                    self.user_sessions.remove(&user);
                }
            }
        }
        for (s, _) in runtime
            .sessions
            .iter()
            .zip(&kept)
            .filter(|(_, kept)| !**kept)
        {
            self.user_sessions
                .entry(s.user.as_str().to_lowercase())
                .or_default()
                .entry(machine.to_string())
                .or_default()
                .count(s.state);
        }
        let sessions = &runtime.sessions;
        let user_sessions = &mut self.user_sessions;
        runtime.pending.retain(|p| {
            let reported = sessions
                .iter()
                .any(|s| s.user.eq_ignore_ascii_case(&p.user));
            let keep = !reported && ts.millis() - p.ts.millis() < PENDING_LAUNCH_S as i64 * 1000;
            if !keep {
                forget_pending(user_sessions, &p.user, machine);
            }
            keep
        });
        self.place(machine);
    }

    /// Forgets the launches brokered `PENDING_LAUNCH_S` or more before `ts` that their
    /// machines have not reported: from that instant they no longer count as load or toward
    /// session limits.
    pub(crate) fn expire_pending(&mut self, ts: Ts) {
        let horizon = PENDING_LAUNCH_S as i64 * 1000;
        while let Some((brokered, _)) = self.pending_expiry.first() {
            if ts.millis() - brokered.millis() < horizon {
                return;
            }
            let (_, machine) = self.pending_expiry.pop_first().expect("just seen");
            let Some(runtime) = self.machines.get_mut(machine.as_str()) else {
                continue;
            };
            let user_sessions = &mut self.user_sessions;
            let before = runtime.pending.len();
            runtime.pending.retain(|p| {
                let keep = ts.millis() - p.ts.millis() < horizon;
                if !keep {
                    forget_pending(user_sessions, &p.user, machine.as_str());
                }
                keep
            });
            if runtime.pending.len() != before {
                self.place(machine.as_str());
            }
        }
    }

    /// The LHC data content of a connector (R-DATA).
    pub fn lhc_data(&self, connector: &str) -> Option<&LhcData> {
        self.connectors.get(connector).map(|c| &c.data)
    }

    /// The pools, for inspection and invariant checks.
    pub fn pools(&self) -> &BTreeMap<String, Pool> {
        &self.pools
    }

    /// Resources `user` may launch, with the zones where each runs; from a connector's
    /// snapshot, or from the site configuration when `connector` is None.
    pub fn enumerate(&self, user: &str, connector: Option<&str>) -> Vec<Enumerated> {
        let fresh;
        let catalog: &Snapshot = match connector {
            Some(c) => match self.snapshot_of(c) {
                Some(s) => s,
                None => return Vec::new(),
            },
            None => match &self.cloud {
                Some(c) if c.version == self.site.version => c,
                _ => {
                    fresh = snapshot::index(&self.site);
                    &fresh
                }
            },
        };
        catalog
            .resources
            .values()
            .filter(|r| entitled(catalog, r, &user.to_lowercase()))
            .map(|r| {
                let zones: BTreeSet<String> = r
                    .delivery_groups
                    .iter()
                    .filter_map(|g| catalog.group_zone_machines.get(g))
                    .flat_map(|zones| zones.keys().cloned())
                    .collect();
                Enumerated {
                    resource: r.id.clone(),
                    zones: zones.into_iter().collect(),
                }
            })
            .collect()
    }

    /// Decides one launch request (exactly one `launch.decision`).
    pub(crate) fn launch(&mut self, request: &LaunchRequest, ts: Ts, out: &mut Vec<Output>) {
        let name = self
            .site
            .connector_id(&request.connector)
            .expect("checked by admissible")
            .to_string();
        let user = request.user.to_lowercase();
        let c = &self.connectors[&name];
        let (started, in_lhc, brokering) = (c.started(), c.in_lhc(), c.brokering);
        let check_failed = matches!(c.last_check, Some((_, false)));
        let decision = |outcome: Result<Choice, Reason>, via: Via| {
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
                connector: name.clone(),
                outcome,
                via,
                machine,
                session,
                new_assignment,
                reason,
            }
        };
        let result = if !started {
            decision(Err(Reason::ConnectorStopped), Via::Cloud)
        } else if in_lhc {
            let outcome = if !brokering {
                Err(Reason::NotElected)
            } else if !self.connectors[&name].snapshot_usable {
                // Forced in at its start, then found to have been powered off in normal
                // operations (R-STATE-10): it holds the zone but cannot decide from that
                // snapshot.
                Err(Reason::NoLhcDatabase)
            } else {
                self.choose(&name, &user, &request.resource, ts)
            };
            decision(outcome, Via::Lhc)
        } else if check_failed {
            let reason = match self.ineligible(&name, ts) {
                Some(IneligibleReason::LhcDisabled) => Reason::LhcDisabled,
                Some(IneligibleReason::NoLhcDatabase) => Reason::NoLhcDatabase,
                Some(IneligibleReason::HaServiceNotRunning) => Reason::HaServiceNotRunning,
                Some(IneligibleReason::NoStorefrontTraffic) => Reason::NoStorefrontTraffic,
                // (Never an R-STATE-4 answer: forced-outage waiting is not eligibility.)
                Some(IneligibleReason::ForcedOnSubset) | None => Reason::CloudUnreachable,
            };
            decision(Err(reason), Via::Cloud)
        } else {
            decision(self.choose(CLOUD, &user, &request.resource, ts), Via::Cloud)
        };
        // Bookkeeping: R-DATA, episode counters, the detection gap.
        let c = self.connector_mut(&name);
        if c.started() {
            c.data.recent_users.insert(user.as_str().into(), ts);
            c.data.clients.insert(
                request.client.name.as_str().into(),
                (request.client.ip.clone(), ts),
            );
            if result.reason == Some(Reason::CloudUnreachable) {
                c.data.cloud_unreachable += 1;
            }
            if result.via == Via::Lhc {
                if let Some(e) = &mut c.episode {
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
                p.request.clone_from(&result.request);
            }
        }
        out.push(Output::LaunchDecision(result));
    }

    /// Chooses a machine for `user` and `resource` among what `registrar` offers.
    fn choose(
        &mut self,
        registrar: &str,
        user: &str,
        resource: &str,
        ts: Ts,
    ) -> Result<Choice, Reason> {
        let catalog = self.catalog_of(registrar).ok_or(Reason::NoLhcDatabase)?;
        let lhc = registrar != CLOUD;
        let resource = catalog
            .resources
            .get(resource)
            .or_else(|| catalog.resources.get(&resource.to_lowercase()))
            .ok_or(Reason::UnknownResource)?;
        if !entitled(&catalog, resource, user) {
            return Err(Reason::NotEntitled);
        }
        // R-LAUNCH-2: in LHC mode only the connector's own zone.
        let zone = lhc.then(|| self.connectors[registrar].zone.clone());
        if let Some(zone) = &zone {
            let here = resource.delivery_groups.iter().any(|g| {
                catalog
                    .group_zone_machines
                    .get(g)
                    .is_some_and(|zones| zones.contains_key(zone))
            });
            if !here {
                return Err(Reason::CrossZone);
            }
        }
        // R-LAUNCH-3: reconnect first, to a disconnected session on a machine this
        // registrar holds, of one of the resource's groups.
        let reconnect_to = self.user_sessions.get(user).and_then(|machines| {
            machines.iter().find_map(|(machine, tally)| {
                let runtime = self.machines.get(machine.as_str())?;
                let entry = catalog.machines.get(&machine.to_lowercase())?;
                // The cloud reaches a machine only while its zone offers the cloud path.
                let held = registrar_name(&runtime.registrar) == registrar
                    && (lhc || crate::engine::zone_offers_cloud(&self.connectors, &entry.zone));
                // R-LAUNCH-2 holds for reconnects too: a machine its broker put in
                // maintenance (R-LAUNCH-6) gets no session, resumed or new.
                let fits = !entry.maintenance
                    && !self.marked(registrar, machine)
                    && resource.delivery_groups.contains(&entry.delivery_group);
                (tally.disconnected > 0 && held && fits).then(|| machine.clone())
            })
        });
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
        let mut first_reason = None;
        let mut best: Option<(bool, u32, u32)> = None;
        for group in &resource.delivery_groups {
            match self.try_group(
                &catalog,
                registrar,
                group,
                user,
                resource.zone_preference.as_deref(),
                zone.as_deref(),
                ts,
            ) {
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
            let machine = catalog.by_rank[rank as usize].clone();
            return Ok(self.broker_new(&catalog, machine, user, ts, false));
        }
        Err(first_reason.unwrap_or(Reason::NoRegisteredMachine))
    }

    #[allow(clippy::too_many_arguments)]
    fn try_group(
        &mut self,
        catalog: &Arc<Snapshot>,
        registrar: &str,
        group_id: &str,
        user: &str,
        preference: Option<&str>,
        zone: Option<&str>,
        ts: Ts,
    ) -> Result<Found, Reason> {
        let lhc = zone.is_some();
        let group = catalog
            .groups
            .get(group_id)
            .ok_or(Reason::NoRegisteredMachine)?;
        // R-LAUNCH-7: limits count the sessions this broker knows (the cloud: the site's).
        if let Some(limit) = group.session_limit_per_user {
            let known: u32 = self
                .user_sessions
                .get(user)
                .into_iter()
                .flatten()
                .filter(|(machine, _)| {
                    let in_group = catalog
                        .machines
                        .get(&machine.to_lowercase())
                        .is_some_and(|m| m.delivery_group == group_id);
                    let held = !lhc
                        || self
                            .machines
                            .get(machine.as_str())
                            .is_some_and(|r| registrar_name(&r.registrar) == registrar);
                    in_group && held
                })
                .map(|(_, t)| t.active + t.disconnected + t.pending)
                .sum();
            if known >= limit {
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
            return self
                .static_machine(catalog, registrar, group_id, user, ts)
                .map(Found::Chosen);
        }
        let pooled = group.kind == DeliveryGroupKind::SingleSessionPooled;
        if pooled && group.power_managed && lhc {
            // R-LAUNCH-6: reuse in an outage needs both the site's and the group's consent.
            // On-premises only groups that shut machines down after use are concerned (FR/JA
            // seeds); in DaaS every pooled, power-managed group (EN seed).
            let concerned = match catalog.site.profile {
                crate::config::Profile::Daas => true,
                crate::config::Profile::Onprem => group.shutdown_after_use,
            };
            let reuse = catalog
                .site
                .reuse_machines_without_shutdown_in_outage_allowed
                && group.reuse_in_outage;
            if concerned && !reuse {
                return Err(Reason::PooledUnavailableInOutage);
            }
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
                    let registered = first(self.pools.get(&pool_key(registrar, group_id, z)));
                    let off = if power_on {
                        first(self.pools.get(&pool_key(OFF, group_id, z)))
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
        // Only what the broker reaches counts: a zone that lost the cloud path holds no
        // machine the cloud can use, whatever its last registrations say.
        let looked: Vec<&str> = zone.map_or(group_zones, |z| vec![z]);
        let (mut registered, mut tagged) = (0, 0);
        for z in looked.into_iter().filter(|z| reachable(z)) {
            if let Some(pool) = self.pools.get(&pool_key(registrar, group_id, z)) {
                registered += pool.registered;
                tagged += pool.tagged;
            }
        }
        Err(if registered == 0 {
            Reason::NoRegisteredMachine
        } else if group.restrict_to_tag.is_some() && tagged == 0 {
            Reason::TagRestriction
        } else {
            Reason::MachineCapacity
        })
    }

    /// R-LAUNCH-5: a static (or Remote PC) machine: the assigned one, or for the cloud a
    /// first free machine assigned now.
    fn static_machine(
        &mut self,
        catalog: &Arc<Snapshot>,
        registrar: &str,
        group_id: &str,
        user: &str,
        ts: Ts,
    ) -> Result<Choice, Reason> {
        let lhc = registrar != CLOUD;
        let configured = catalog
            .assignments
            .get(group_id)
            .and_then(|u| u.get(user))
            .cloned();
        let cloud_made = (!lhc)
            .then(|| {
                self.cloud_assignments
                    .get(group_id)
                    .and_then(|u| u.get(user))
                    .cloned()
            })
            .flatten();
        let (machine, new_assignment) = match configured.or(cloud_made) {
            Some(m) => (m, false),
            None if lhc => return Err(Reason::AssignmentRequired),
            None => {
                // The first free machine of the group in FQDN order across its zones (ids
                // are lowercase: byte order is FQDN order); zone preference plays no part.
                let taken = |m: &String| {
                    catalog.assigned.contains(m)
                        || self.cloud_assigned.contains(m)
                        || catalog.machines.get(m).is_none_or(|e| e.maintenance)
                };
                // (Among the zones the cloud reaches: one that lost the cloud path has no
                // machine it can start a session on.)
                let free = catalog
                    .group_zone_machines
                    .get(group_id)
                    .into_iter()
                    .flat_map(|zones| zones.iter())
                    .filter(|(z, _)| crate::engine::zone_offers_cloud(&self.connectors, z))
                    .filter_map(|(_, machines)| machines.iter().find(|m| !taken(m)))
                    .min()
                    .cloned();
                let Some(m) = free else {
                    // Free machines only in zones the cloud does not reach: none registered.
                    let unreachable_free = catalog
                        .group_zone_machines
                        .get(group_id)
                        .into_iter()
                        .flat_map(|zones| zones.values())
                        .any(|machines| machines.iter().any(|m| !taken(m)));
                    return Err(if unreachable_free {
                        Reason::NoRegisteredMachine
                    } else {
                        Reason::MachineCapacity
                    });
                };
                // Recorded below, only if the launch is brokered: a rejected launch makes no
                // assignment (none would ever be reported).
                (m, true)
            }
        };
        let entry = catalog
            .machines
            .get(&machine)
            .ok_or(Reason::NoRegisteredMachine)?;
        let exact = entry.id.clone();
        let runtime = self.machines.get(exact.as_str());
        let reachable = lhc || crate::engine::zone_offers_cloud(&self.connectors, &entry.zone);
        let held = reachable && runtime.is_some_and(|r| registrar_name(&r.registrar) == registrar);
        // The cloud may power on a machine nobody holds; never one registered with an LHC
        // broker (one registrar at a time, R-REG-2).
        let powered_on = !lhc
            && reachable
            && runtime.is_none_or(|r| r.registrar == Registrar::None)
            && catalog
                .groups
                .get(group_id)
                .is_some_and(|g| g.power_managed);
        if entry.maintenance || self.marked(registrar, &exact) || !(held || powered_on) {
            return Err(Reason::NoRegisteredMachine);
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

    /// Records a new session brokered to `machine` (lowercased id) until its VDA reports it.
    fn broker_new(
        &mut self,
        catalog: &Arc<Snapshot>,
        machine: String,
        user: &str,
        ts: Ts,
        new_assignment: bool,
    ) -> Choice {
        let exact = catalog
            .machines
            .get(&machine)
            .map_or(machine.clone(), |m| m.id.clone());
        self.machines.entry(exact.as_str().into()).or_default();
        let tally = self.user_sessions.entry(user.to_string()).or_default();
        tally.entry(exact.clone()).or_default().pending += 1;
        let runtime = self
            .machines
            .get_mut(exact.as_str())
            .expect("just inserted");
        runtime.pending.push(PendingLaunch {
            request: String::new(),
            user: user.to_string(),
            ts,
        });
        self.pending_expiry.insert((ts, exact.as_str().into()));
        self.place(&exact);
        Choice {
            machine: exact,
            session: SessionKind::New,
            new_assignment,
        }
    }

    /// Marks the user's disconnected session on `machine` active again.
    fn reconnect(&mut self, machine: &str, user: &str) {
        let Some(runtime) = self.machines.get_mut(machine) else {
            return;
        };
        let old = runtime.sessions.clone();
        if let Some(s) = runtime
            .sessions
            .iter_mut()
            .find(|s| s.state == SessionState::Disconnected && s.user.eq_ignore_ascii_case(user))
        {
            s.state = SessionState::Active;
        }
        let now = self.now.unwrap_or_default();
        self.sessions_changed(machine, &old, now);
    }

    /// R-LAUNCH-6: a logoff from a pooled machine that shuts down after use, during LHC
    /// mode, without both reuse flags, puts it in maintenance on its broker.
    pub(crate) fn pooled_logoff(&mut self, machine: &str, ts: Ts, out: &mut Vec<Output>) {
        let Some(Registrar::Connector(name)) =
            self.machines.get(machine).map(|r| r.registrar.clone())
        else {
            return;
        };
        let Some(catalog) = self.snapshot_of(&name).cloned() else {
            return;
        };
        let Some(entry) = catalog.machines.get(&machine.to_lowercase()) else {
            return;
        };
        let Some(group) = catalog.groups.get(&entry.delivery_group) else {
            return;
        };
        let reuse = catalog
            .site
            .reuse_machines_without_shutdown_in_outage_allowed
            && group.reuse_in_outage;
        let pooled = group.kind == DeliveryGroupKind::SingleSessionPooled;
        let c = self.connectors.get_mut(&name).expect("registrars exist");
        if !(c.in_lhc() && pooled && group.shutdown_after_use && !reuse) {
            return;
        }
        if c.maintenance.insert(machine.to_string()) {
            c.record_activity(
                ts,
                "maintenance",
                format!("{machine} in maintenance after a pooled logoff"),
            );
            out.push(Output::MachineMaintenance(MachineMaintenance {
                ts,
                machine: machine.to_string(),
                connector: name.clone(),
                on: true,
                reason: MaintenanceReason::PooledLogoffInOutage,
            }));
            self.place(machine);
        }
    }
}

/// Removes one pending launch of `user` on `machine` from the user index.
fn forget_pending(index: &mut DetMap<String, BTreeMap<String, Tally>>, user: &str, machine: &str) {
    if let Some(machines) = index.get_mut(user) {
        if let Some(t) = machines.get_mut(machine) {
            t.pending = t.pending.saturating_sub(1);
            if *t == Tally::default() {
                machines.remove(machine);
            }
        }
        if machines.is_empty() {
            index.remove(user);
        }
    }
}

/// Whether `user` (lowercased) or one of its groups is entitled to `resource`.
fn entitled(catalog: &Snapshot, resource: &snapshot::ResourceEntry, user: &str) -> bool {
    resource.principals.contains(user)
        || catalog
            .user_groups
            .get(user)
            .is_some_and(|groups| groups.iter().any(|g| resource.principals.contains(g)))
}

impl crate::engine::Connector {
    /// Appends to the recent LHC-mode activity, keeping the last `ACTIVITY_KEPT` entries.
    pub(crate) fn record_activity(&mut self, ts: Ts, kind: &str, detail: String) {
        if !self.in_lhc() {
            return;
        }
        if self.data.activity.len() == ACTIVITY_KEPT {
            self.data.activity.pop_front();
        }
        self.data.activity.push_back(Activity {
            ts,
            kind: kind.to_string(),
            detail,
        });
    }
}
