//! The brokering pools: each machine's contribution (`Placement`) to the pool of its
//! registrar, delivery group and zone, recomputed whenever registration, sessions, pending
//! launches or maintenance change; pending launches and their expiry; R-LAUNCH-6's
//! maintenance after a pooled logoff.

use compact_str::CompactString;

use crate::config::DeliveryGroupKind;
use crate::detmap::{DetMap, VecMap};
use crate::output::*;
use crate::record::{SessionReport, SessionState};
use crate::ts::Ts;

use super::{pool_key, Engine, Holder, Placement, Registrar, Tally, PENDING_LAUNCH_S};

impl Engine {
    /// Where a machine contributes now: its registrar's pool of its group and zone, with its
    /// load when it can take a session; `Some(None)` when no catalog knows it, `None` when
    /// the engine has no runtime for it.
    fn placement(&mut self, machine: &str) -> Option<Option<Placement>> {
        let runtime = self.machines.get(machine)?;
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
        let catalog = self.catalog_of(holder);
        let lower = crate::snapshot::lower(machine);
        Some(catalog.as_ref().and_then(|catalog| {
            let entry = catalog.machines.get(lower.as_ref())?;
            let group = catalog.groups.get(&entry.delivery_group);
            let maintenance = entry.maintenance || self.marked(holder, machine);
            let tagged = group
                .and_then(|g| g.restrict_to_tag.as_ref())
                .is_none_or(|tag| entry.tags.iter().any(|t| t.eq_ignore_ascii_case(tag)));
            let room = load < entry.max_sessions;
            let available = if holder == Holder::Off {
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
                key: pool_key(holder, &entry.delivery_group, &entry.zone),
                rank: entry.rank,
                available,
                registered: !maintenance && holder != Holder::Off,
                tagged: !maintenance && holder != Holder::Off && tagged,
            })
        }))
    }

    /// Recomputes one machine's contribution to the pools.
    pub(crate) fn place(&mut self, machine: &str) {
        let Some(desired) = self.placement(machine) else {
            return;
        };
        let runtime = self.machines.get_mut(machine).expect("placement found it");
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
                .entry(crate::snapshot::lower(&s.user).as_ref().into())
                .or_default()
                .get_or_default(machine)
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

/// Removes one pending launch of `user` on `machine` from the user index.
pub(super) fn forget_pending(
    index: &mut DetMap<CompactString, VecMap<CompactString, Tally>>,
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
