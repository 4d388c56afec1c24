//! Brokering (SPEC §6.2, R-LAUNCH) and the LHC data content (R-DATA).
//!
//! Every `launch.request` yields exactly one `launch.decision`. Machines are chosen from
//! pools kept in step with registrations, sessions and maintenance, so a decision costs
//! O(log n) whatever the size of the zone: a pool per (registrar, delivery group, zone)
//! orders its available machines by (load, FQDN), and its first entry is the answer.
//!
//! Invariant: a machine contributes to at most one pool, the one of its registrar as a
//! typed [`Holder`] (the cloud, a connector, or nobody for an unregistered machine the cloud
//! may power on: a connector named "cloud" is a connector), and its contribution
//! (`Placement`) is recomputed whenever anything it depends on changes.
//!
//! Rooms: `pools` (placement, pending launches, maintenance), `launch` (decisions), `data`
//! (the LHC data and enumeration); this module holds the types and the catalogs.

mod data;
mod launch;
mod pools;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::detmap::{Tracked, Watched};
use crate::engine::{Engine, Holder, Registrar};
use crate::record::SessionState;
use crate::snapshot::{self, Snapshot};
use crate::ts::Ts;

/// Registrar name of machines registered with the cloud broker.
pub const CLOUD: &str = "cloud";
/// A launch the VDA has not reported yet is forgotten after this long.
pub const PENDING_LAUNCH_S: u64 = 120;
/// Entries of recent LHC-mode activity kept per connector.
pub const ACTIVITY_KEPT: usize = 1000;

/// Machines one registrar offers for one delivery group in one zone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Pool {
    /// Machines with room for a session by load, then FQDN rank: the first is the answer.
    pub(crate) available: BTreeMap<u32, BTreeSet<u32>>,
    /// Machines registered and not in maintenance, with room or not.
    pub(crate) registered: u32,
    /// Of those, machines carrying the group's required tag (all, without a restriction).
    pub(crate) tagged: u32,
}

/// What one machine contributes to the pools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Placement {
    /// Pool key: registrar, group and zone.
    pub(crate) key: String,
    /// The machine's FQDN rank in the catalog it was placed from.
    pub(crate) rank: u32,
    /// Its load, when it is available.
    pub(crate) available: Option<u32>,
    /// Counted as registered (not in maintenance).
    pub(crate) registered: bool,
    /// Counted as carrying the required tag.
    pub(crate) tagged: bool,
}

/// A launch brokered to a machine that has not reported the session yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingLaunch {
    /// The request.
    // Compact strings: 40,000 machines each hold their launches not yet reported, and
    // request ids and user names fit inline (no allocation of their own).
    pub request: CompactString,
    /// The user, lowercased.
    pub user: CompactString,
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
    /// Users who launched through this connector, with their last launch. Tracked, so
    /// that a node's commit writes the entries that changed, not the whole map.
    pub recent_users: Tracked<CompactString, Ts>,
    /// Client machines: name → (IP, last seen). Tracked, as `recent_users`.
    pub clients: Tracked<CompactString, (CompactString, Ts)>,
    /// Recent activity during LHC mode, oldest first, at most `ACTIVITY_KEPT`. Watched,
    /// so that a node's commit writes it only when it changed (it changes only in LHC
    /// mode, and is up to a thousand lines).
    pub activity: Watched<VecDeque<Activity>>,
    /// Launches rejected `cloud_unreachable` (the detection gap before LHC mode).
    pub cloud_unreachable: u64,
}

/// A resource a user may launch, and where it runs (what StoreFront needs to route a
/// launch to the right zone during an outage).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Enumerated {
    /// Resource id.
    pub resource: String,
    /// Zones (lowercased) holding machines of its delivery groups.
    pub zones: Vec<String>,
}

/// Sessions of one user on one machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Tally {
    /// Active sessions.
    pub(crate) active: u32,
    /// Disconnected sessions (reconnect candidates).
    pub(crate) disconnected: u32,
    /// Launches brokered to the machine that it has not reported yet.
    pub(crate) pending: u32,
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

/// Delivery groups (lowercased) holding a Remote PC machine, by configuration version.
/// A cache of what the catalogs say: engines that differ only in it are equal.
#[derive(Clone, Debug, Default)]
pub(crate) struct RemotePcGroups(BTreeMap<u64, Arc<BTreeSet<String>>>);

impl PartialEq for RemotePcGroups {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl RemotePcGroups {
    /// Versions remembered at most (a replay uses one or two at a time: the cloud's and an
    /// older snapshot of a connector in an outage).
    const KEPT: usize = 8;

    /// Whether group `group_id` of `catalog` holds a Remote PC machine.
    pub(crate) fn holds(&mut self, catalog: &Snapshot, group_id: &str) -> bool {
        if !self.0.contains_key(&catalog.version) && self.0.len() >= Self::KEPT {
            self.0.clear();
        }
        self.0
            .entry(catalog.version)
            .or_insert_with(|| {
                Arc::new(
                    catalog
                        .machines
                        .values()
                        .filter(|e| e.remote_pc)
                        .map(|e| e.delivery_group.clone())
                        .collect(),
                )
            })
            .contains(group_id)
    }
}

/// Key of the pool of `holder`, group and zone (see [`Holder::key`]).
fn pool_key(holder: Holder<'_>, group: &str, zone: &str) -> String {
    // `join` sizes one allocation for the pieces: every heartbeat builds its machine's key,
    // and `format!`'s machinery showed in profiles.
    [holder.key().as_ref(), group, zone].join("\u{1f}")
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
    pub(crate) fn catalog_of(&mut self, holder: Holder<'_>) -> Option<Arc<Snapshot>> {
        match holder {
            Holder::Cloud | Holder::Off => Some(self.cloud_catalog()),
            Holder::Connector(name) => self.snapshot_of(name).cloned(),
        }
    }

    /// Whether `holder` (a connector) put `machine` in maintenance (R-LAUNCH-6).
    fn marked(&self, holder: Holder<'_>, machine: &str) -> bool {
        let Holder::Connector(name) = holder else {
            return false;
        };
        self.connectors
            .get(name)
            .is_some_and(|c| c.maintenance.contains(machine))
    }
}
