//! The invariants the reducer keeps, checked from scratch (`check_invariants`, for tests
//! after every record).

use std::collections::BTreeMap;

use super::{fqdn_key, Engine, Registrar};

impl Engine {
    /// Checks the invariants the reducer keeps; the error says which one broke. It rebuilds
    /// the brokering pools from scratch, so it costs O(state): for tests, after every record.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_connectors()?;
        self.check_user_index()?;
        self.check_pools()?;
        self.check_machines()
    }

    /// The invariants a state read back from a store must keep (an episode exists
    /// exactly in LHC mode, brokering and registrations agree): the cheap part of
    /// [`Engine::check_invariants`], O(connectors + registrations), so a node can run it at
    /// every start and refuse a stored state that breaks them instead of folding on it.
    pub fn check_restored(&self) -> Result<(), String> {
        self.check_connectors()
    }

    /// Connector order, brokering, episodes and registrations agree.
    fn check_connectors(&self) -> Result<(), String> {
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
            if c.in_lhc() != c.episode().is_some() {
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
        Ok(())
    }

    /// The user index counts exactly the sessions and pending launches the machines hold.
    fn check_user_index(&self) -> Result<(), String> {
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
                let machines = counted.entry(p.user.to_string()).or_default();
                machines.entry(machine.to_string()).or_default().pending += 1;
            }
        }
        let kept: BTreeMap<String, BTreeMap<String, crate::broker::Tally>> = self
            .user_sessions
            .sorted()
            .into_iter()
            .map(|(user, machines)| {
                let machines = machines.iter().map(|(m, t)| (m.to_string(), *t));
                (user.to_string(), machines.collect())
            })
            .collect();
        if kept != counted {
            return Err(format!(
                "the user index differs from the machines' sessions: kept {kept:?}, counted {counted:?}"
            ));
        }
        Ok(())
    }

    /// The pools, kept in step incrementally, equal pools rebuilt from scratch.
    fn check_pools(&self) -> Result<(), String> {
        let mut rebuilt = self.clone();
        rebuilt.pools.all_mut().clear();
        for runtime in rebuilt.machines.all_mut().values_mut() {
            runtime.placement = None;
            // Rebuilt by name, so that a stale remembered rank shows as a difference.
            runtime.placed_in = Default::default();
        }
        rebuilt.place_all();
        // A pool names its machines by rank: each rank must be the machine that holds the
        // placement (the one runtime its catalog entry stands for), or the pool offers
        // another machine in its stead.
        // (In name order: `sorted`, so the first machine named is the same from run to run.)
        let placed: Vec<(String, Registrar, u32)> = rebuilt
            .machines
            .sorted()
            .into_iter()
            .filter_map(|(name, r)| {
                let p = r.placement.as_deref()?;
                Some((name.to_string(), r.registrar.clone(), p.rank))
            })
            .collect();
        for (name, registrar, rank) in placed {
            let catalog = rebuilt.catalog_of(registrar.holder());
            let own = catalog
                .as_ref()
                .and_then(|c| rebuilt.catalog_rank(c, &name));
            if own != Some(rank) {
                let at_rank = catalog.as_ref().and_then(|c| c.by_rank.get(rank as usize));
                return Err(format!(
                    "machine {name:?} is placed at rank {rank} ({at_rank:?} in its catalog), \
                     its own rank there is {own:?}"
                ));
            }
        }
        if rebuilt.pools != self.pools {
            // In key order, so that the message is the same from run to run.
            let differ: Vec<_> = self
                .pools
                .sorted()
                .into_iter()
                .filter(|(k, v)| rebuilt.pools.get(*k) != Some(*v))
                .map(|(k, v)| format!("{k:?}: kept {v:?}, rebuilt {:?}", rebuilt.pools.get(k)))
                .chain(
                    rebuilt
                        .pools
                        .sorted()
                        .into_iter()
                        .filter(|(k, _)| !self.pools.contains_key(*k))
                        .map(|(k, _)| format!("{k:?} missing")),
                )
                .collect();
            return Err(format!(
                "brokering pools differ from pools rebuilt from scratch: {differ:?}"
            ));
        }
        Ok(())
    }

    /// Pending launches have an expiry; machines and their registrar agree.
    fn check_machines(&self) -> Result<(), String> {
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
}
