//! The brokering pools: each machine's contribution (`Placement`) to the pool of its
//! registrar, delivery group and zone, recomputed whenever registration, sessions, pending
//! launches or maintenance change; pending launches and their expiry; R-LAUNCH-6's
//! maintenance after a pooled logoff.

use compact_str::CompactString;

use crate::config::DeliveryGroupKind;
use crate::detmap::{Tracked, VecMap};
use crate::output::*;
use crate::record::{SessionReport, SessionState};
use crate::ts::Ts;

use super::{pool_key, Engine, Holder, Placement, Registrar, Tally, PENDING_LAUNCH_S};

impl Engine {
    /// Recomputes one machine's contribution to the pools.
    ///
    /// Compares what the machine would contribute with what it does before building
    /// anything: most calls (a heartbeat whose sessions moved, a launch) leave the pool
    /// key as it was, and building the key allocates.
    pub(crate) fn place(&mut self, machine: &str) {
        let Some(runtime) = self.machines.get(machine) else {
            // No runtime: nothing to place.
            return;
        };
        // (Connector names fit a compact string inline: no allocation per placement.)
        let name = match &runtime.registrar {
            Registrar::Connector(name) => compact_str::CompactString::from(name.as_str()),
            Registrar::None | Registrar::Cloud => compact_str::CompactString::default(),
        };
        let holder = match &runtime.registrar {
            Registrar::None => Holder::Off,
            Registrar::Cloud => Holder::Cloud,
            Registrar::Connector(_) => Holder::Connector(&name),
        };
        let load = (runtime.sessions.len() + runtime.pending.len()) as u32;
        let placed_in = runtime.placed_in.0;
        let catalog = self.catalog_of(holder);
        // The machine's rank in the catalog: remembered from its last placement while the
        // catalog's version is the same (a version's catalog, the cloud's or a
        // connector's, indexes the same objects; a configuration change forgets it, see
        // `replace_all`), else looked up.
        let rank = catalog.as_ref().map(|catalog| match placed_in {
            Some((version, rank)) if version == catalog.version => rank,
            _ => self.catalog_rank(catalog, machine),
        });
        // `None`: no catalog knows it (or, powered off, it needs no pool entry).
        let desired = catalog
            .as_ref()
            .zip(rank.flatten())
            .and_then(|(catalog, rank)| {
                let table = catalog.fits();
                let fit = table.rows[rank as usize];
                let maintenance = fit.maintenance || self.marked(holder, machine);
                let tagged = fit.tagged;
                let room = load < fit.max_sessions;
                // R-LAUNCH-5: a Remote PC machine is only ever its assigned user's, never in a
                // pool (neither offered nor counted: a pool's reasons are its own machines').
                let offered = !fit.remote_pc;
                let available = if holder == Holder::Off {
                    // Powered off: the cloud powers on only idle pooled, power-managed machines;
                    // other kinds need no pool entry (a static machine is found by assignment).
                    if !fit.power_on {
                        return None;
                    }
                    (offered && !maintenance && tagged && load == 0).then_some(0)
                } else {
                    (offered && !maintenance && tagged && room).then_some(load)
                };
                Some(Wanted {
                    group: table.names[fit.group as usize].as_str(),
                    zone: table.names[fit.zone as usize].as_str(),
                    rank,
                    available,
                    registered: offered && !maintenance && holder != Holder::Off,
                    tagged: offered && !maintenance && holder != Holder::Off && tagged,
                })
            });
        let runtime = self.machines.get_mut(machine).expect("found above");
        if let (Some(catalog), Some(rank)) = (&catalog, rank) {
            runtime.placed_in.0 = Some((catalog.version, rank));
        }
        let unchanged = match (runtime.placement.as_deref(), &desired) {
            (None, None) => true,
            (Some(now), Some(wanted)) => wanted.is(now, holder),
            _ => false,
        };
        if unchanged {
            return;
        }
        let desired = desired.map(|w| w.placement(holder));
        let old =
            std::mem::replace(&mut runtime.placement, desired.clone().map(Box::new)).map(|b| *b);
        if let Some(old) = old {
            self.withdraw(old);
        }
        if let Some(new) = desired.filter(contributes) {
            let pool = self.pools.or_default(new.key);
            if let Some(load) = new.available {
                pool.available.entry(load).or_default().insert(new.rank);
            }
            pool.registered += u32::from(new.registered);
            pool.tagged += u32::from(new.tagged);
        }
    }

    /// Takes a machine's contribution out of its pool (a pool exists only while something
    /// contributes to it, so kept and rebuilt pools agree).
    fn withdraw(&mut self, old: Placement) {
        if !contributes(&old) {
            return;
        }
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

    /// Places `machines` again after the catalog they are placed from changed: every one
    /// leaves its pool before any is placed anew.
    ///
    /// Why: a pool orders machines by their rank in the catalog, and a new catalog moves
    /// ranks (a machine added first in FQDN order moves all the others). Placed one by one,
    /// a machine that left rank 1 for rank 2 would take out, as its old rank 1, the entry of
    /// the machine that had just moved to rank 1.
    ///
    /// Their remembered ranks are forgotten too: which runtime a catalog entry stands for
    /// depends on the current configuration as well (`catalog_rank`).
    pub(crate) fn replace_all(&mut self, machines: &[impl AsRef<str>]) {
        for machine in machines {
            if let Some(runtime) = self.machines.get_mut(machine.as_ref()) {
                runtime.placed_in = Default::default();
                if let Some(old) = runtime.placement.take() {
                    self.withdraw(*old);
                }
            }
        }
        for machine in machines {
            self.place(machine.as_ref());
        }
    }

    /// The id of the runtime a catalog entry of id `entry_id` stands for: the current
    /// configuration's id of that name or, for a name the configuration no longer holds,
    /// the entry's own.
    ///
    /// Why: runtimes are keyed by exact id and catalogs by lowercased id. A runtime left by
    /// a heartbeat that named `P-B.Z1.example` before `p-b.z1.example` was configured is
    /// another (unknown) object and must not take p-b's rank into a pool; but a machine
    /// renamed by case in the cloud (its runtime now under the new id) still brokers from a
    /// connector's older snapshot, which names it the old way. One runtime stands for an
    /// entry, so no two share a rank in a pool, and placement, launches and reconnects all
    /// ask this.
    pub(crate) fn runtime_id<'a>(&'a self, entry_id: &'a str) -> &'a str {
        self.site
            .machine(entry_id)
            .map_or(entry_id, |m| m.id.as_str())
    }

    /// The rank of `machine` in `catalog`, if this runtime is the one its catalog entry
    /// stands for ([`Engine::runtime_id`]).
    pub(crate) fn catalog_rank(
        &self,
        catalog: &crate::snapshot::Snapshot,
        machine: &str,
    ) -> Option<u32> {
        let entry = catalog
            .machines
            .get(crate::snapshot::lower(machine).as_ref())?;
        (self.runtime_id(&entry.id) == machine).then_some(entry.rank)
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
        self.replace_all(&names);
    }

    /// After a machine's sessions changed: the user index, pending launches matched or
    /// expired, and the machine's placement.
    pub(crate) fn sessions_changed(&mut self, machine: &str, old: &[SessionReport], ts: Ts) {
        self.sessions_changed_as(machine, old, None, ts);
    }

    /// [`Engine::sessions_changed`], told by a caller that already knows it (a heartbeat)
    /// whether the sessions are the same as `old` (`same`), so that on the hot path the
    /// lists are compared once; `None`: compare them here.
    pub(crate) fn sessions_changed_as(
        &mut self,
        machine: &str,
        old: &[SessionReport],
        same: Option<bool>,
        ts: Ts,
    ) {
        let Some(runtime) = self.machines.get_mut(machine) else {
            return;
        };
        let same = same.unwrap_or_else(|| runtime.sessions.as_slice() == old);
        debug_assert_eq!(same, runtime.sessions.as_slice() == old);
        // The user index counts sessions by user and state, so a session reported alike
        // before and after (same user, same state) leaves it as it is: only the difference
        // moves. (A multi-session server's heartbeat typically changes one of its sessions.)
        let mut kept = vec![false; runtime.sessions.len()];
        let mut gone = Vec::new();
        if !same {
            for s in old {
                let found = runtime
                    .sessions
                    .iter()
                    .enumerate()
                    .position(|(i, n)| !kept[i] && n.state == s.state && n.user == s.user);
                match found {
                    Some(i) => kept[i] = true,
                    None => gone.push(s),
                }
            }
        } else {
            kept.fill(true);
        }
        for s in gone {
            let user = crate::snapshot::lower(&s.user);
            if let Some(machines) = self.user_sessions.get_mut(user.as_ref()) {
                if let Some(t) = machines.get_mut(machine) {
                    t.uncount(s.state);
                    if *t == Tally::default() {
                        machines.remove(machine);
                    }
                }
                if machines.is_empty() {
                    self.user_sessions.remove(user.as_ref());
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
                .or_default(crate::snapshot::lower(&s.user).as_ref().into())
                .get_or_default(machine)
                .count(s.state);
        }
        let sessions = &runtime.sessions;
        let user_sessions = &mut self.user_sessions;
        runtime.pending.retain(|p| {
            let reported = sessions
                .iter()
                .any(|s| s.user.eq_ignore_ascii_case(&p.user));
            let keep =
                !reported && ts.millis() - p.ts.millis() < crate::ts::seconds_ms(PENDING_LAUNCH_S);
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
        let horizon = crate::ts::seconds_ms(PENDING_LAUNCH_S);
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

    /// Marks the user's disconnected session on `machine` active again.
    pub(super) fn reconnect(&mut self, machine: &str, user: &str) {
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
        let Some(entry) = catalog.machines.get(machine.to_lowercase().as_str()) else {
            return;
        };
        if entry.remote_pc {
            // Its user's own PC (R-LAUNCH-5), not a pooled desktop shut down after use.
            return;
        }
        let Some(group) = catalog.groups.get(&entry.delivery_group) else {
            return;
        };
        let reuse = catalog
            .site
            .reuse_machines_without_shutdown_in_outage_allowed
            && group.reuse_in_outage;
        let pooled = group.kind == DeliveryGroupKind::SingleSessionPooled;
        let c = self.connector_mut(&name);
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

/// What a machine would contribute to the pools, borrowed from the catalog it is placed
/// from: compared with its [`Placement`] before a key is built.
struct Wanted<'a> {
    group: &'a str,
    zone: &'a str,
    rank: u32,
    available: Option<u32>,
    registered: bool,
    tagged: bool,
}

impl Wanted<'_> {
    /// Whether `placement` of a machine held by `holder` is this one (its key the one
    /// `pool_key` would build, compared piece by piece).
    fn is(&self, placement: &Placement, holder: Holder<'_>) -> bool {
        placement.rank == self.rank
            && placement.available == self.available
            && placement.registered == self.registered
            && placement.tagged == self.tagged
            && key_is(
                &placement.key,
                &[holder.key().as_ref(), self.group, self.zone],
            )
    }

    /// The placement itself, with its pool key.
    fn placement(&self, holder: Holder<'_>) -> Placement {
        Placement {
            key: pool_key(holder, self.group, self.zone),
            rank: self.rank,
            available: self.available,
            registered: self.registered,
            tagged: self.tagged,
        }
    }
}

/// Whether a placement counts in its pool (a pool exists only while something contributes
/// to it).
fn contributes(p: &Placement) -> bool {
    p.available.is_some() || p.registered
}

/// Whether `key` is `pieces` joined with U+001F, as [`pool_key`] joins them.
fn key_is(key: &str, pieces: &[&str]) -> bool {
    let mut rest = key;
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            let Some(after) = rest.strip_prefix('\u{1f}') else {
                return false;
            };
            rest = after;
        }
        let Some(after) = rest.strip_prefix(piece) else {
            return false;
        };
        rest = after;
    }
    rest.is_empty()
}

/// Removes one pending launch of `user` on `machine` from the user index.
pub(super) fn forget_pending(
    index: &mut Tracked<CompactString, VecMap<CompactString, Tally>>,
    user: &str,
    machine: &str,
) {
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
