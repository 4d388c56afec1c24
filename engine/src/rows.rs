//! The engine state as rows keyed by object, so that a store writes only the rows a batch
//! of records changed instead of the whole state at every commit (issue 15, item 6: a node
//! rewriting tens of megabytes per commit made its RocksDB directory swing by gigabytes).
//!
//! Each connector, machine, brokering pool and user's session tally is one row, and each
//! other field one row of its own. The configuration part (site and validations) is not in the
//! rows: stores keep it apart (see [`Engine::take_config`]).
//!
//! Invariant: rebuilding an engine from the rows of `e` (then restoring `e`'s configuration
//! part) gives an engine equal to `e`, with the same digest. Both directions destructure
//! [`Engine`] exhaustively, so a field added to it does not compile until it has a row.

use std::collections::{BTreeMap, BTreeSet};

use compact_str::CompactString;
use serde::Serialize;

use crate::broker::{Pool, Tally};
use crate::detmap::Tracked;
use crate::engine::{Connector, Engine};
use crate::params::Params;
use crate::Ts;

/// First byte of a row key: what the rest of the key names.
const REST: u8 = b'=';
const CONNECTOR: u8 = b'c';
const MACHINE: u8 = b'm';
const POOL: u8 = b'p';
const USER: u8 = b'u';

/// Calls `each` with a key and its JSON value, reusing both buffers.
fn emit<T: Serialize + ?Sized>(
    tag: u8,
    name: &str,
    value: &T,
    key: &mut Vec<u8>,
    bytes: &mut Vec<u8>,
    each: &mut impl FnMut(&[u8], &[u8]),
) {
    key.clear();
    key.push(tag);
    key.extend_from_slice(name.as_bytes());
    bytes.clear();
    serde_json::to_writer(&mut *bytes, value).expect("engine state serializes");
    each(key, bytes);
}

impl Engine {
    /// Calls `each(key, value)` for every row of the state (configuration part excluded),
    /// in key order within each kind. Keys are unique; values are JSON.
    pub fn for_each_state_row(&self, mut each: impl FnMut(&[u8], &[u8])) {
        let Engine {
            params,
            now,
            site: _,
            validations: _,
            connectors,
            connector_order,
            machines,
            pools,
            user_sessions,
            cloud_assignments,
            cloud_assigned,
            pending_expiry,
            record_ids,
            cloud: _,
            quiet_until: _,
        } = self;
        let (mut key, mut bytes) = (Vec::new(), Vec::new());
        // One row per field: the clock changes with every record, the parameters hardly
        // ever.
        emit(REST, "params", params, &mut key, &mut bytes, &mut each);
        emit(REST, "now", now, &mut key, &mut bytes, &mut each);
        emit(
            REST,
            "connector_order",
            connector_order,
            &mut key,
            &mut bytes,
            &mut each,
        );
        emit(
            REST,
            "cloud_assignments",
            cloud_assignments,
            &mut key,
            &mut bytes,
            &mut each,
        );
        emit(
            REST,
            "cloud_assigned",
            cloud_assigned,
            &mut key,
            &mut bytes,
            &mut each,
        );
        emit(
            REST,
            "pending_expiry",
            pending_expiry,
            &mut key,
            &mut bytes,
            &mut each,
        );
        if !record_ids.is_empty() {
            emit(
                REST,
                "record_ids",
                record_ids,
                &mut key,
                &mut bytes,
                &mut each,
            );
        }
        for (name, connector) in connectors {
            emit(CONNECTOR, name, connector, &mut key, &mut bytes, &mut each);
        }
        for (name, machine) in machines.sorted() {
            emit(MACHINE, name, machine, &mut key, &mut bytes, &mut each);
        }
        for (name, pool) in pools.sorted() {
            emit(POOL, name, pool, &mut key, &mut bytes, &mut each);
        }
        for (name, tallies) in user_sessions.sorted() {
            emit(USER, name, tallies, &mut key, &mut bytes, &mut each);
        }
    }
}

/// The rows a commit may have to write, copied from the engine on the fold thread so that
/// another thread serializes and writes them: every field row and connector, and of the
/// machines, pools and users only those changed since the last [`Engine::take_delta`].
/// The first delta of an engine (and any after a change the engine did not follow key by
/// key) is complete: it holds every row, and rows a store holds that it lacks are gone.
#[derive(Debug)]
pub struct StateDelta {
    /// The copied rows, as an engine whose configuration part is empty and whose maps of
    /// objects hold only the objects copied.
    state: Engine,
    /// Keys of the rows of changed objects that no longer exist.
    gone: Vec<Vec<u8>>,
    /// Whether `state` holds every row of the state.
    complete: bool,
}

impl StateDelta {
    /// Calls `each(key, value)` for every row copied, as [`Engine::for_each_state_row`].
    pub fn for_each_row(&self, each: impl FnMut(&[u8], &[u8])) {
        self.state.for_each_state_row(each)
    }

    /// Keys of the rows whose objects were removed (empty for a complete delta).
    pub fn gone(&self) -> &[Vec<u8>] {
        &self.gone
    }

    /// Whether every row of the state is in it: then a row a store holds that it does not
    /// name is gone.
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// Whether it holds every row of the kind of `key` (every kind when complete; the
    /// field rows and the connectors always): a stored row of such a kind that it does not
    /// name is gone, although no object's removal was recorded.
    pub fn holds_every_row_like(&self, key: &[u8]) -> bool {
        self.complete || matches!(key.first(), Some(&REST) | Some(&CONNECTOR))
    }
}

/// Copies the objects of `map` named in `changed` into a map of their own, and adds the
/// row key of each that is gone to `gone`. Sorted, so that a delta is the same whatever
/// order the changes came in.
fn changed_objects<K, V>(
    tag: u8,
    map: &Tracked<K, V>,
    changed: &std::collections::HashSet<K, rustc_hash::FxBuildHasher>,
    gone: &mut Vec<Vec<u8>>,
) -> Tracked<K, V>
where
    K: Eq + std::hash::Hash + Ord + Clone + AsRef<str>,
    V: Clone,
{
    let mut keys: Vec<&K> = changed.iter().collect();
    keys.sort_unstable();
    let mut copy = Tracked::default();
    for key in keys {
        match map.get(key) {
            Some(value) => {
                copy.insert(key.clone(), value.clone());
            }
            None => {
                let mut row = vec![tag];
                row.extend_from_slice(key.as_ref().as_bytes());
                gone.push(row);
            }
        }
    }
    copy
}

impl Engine {
    /// The rows changed since the last call (every row the first time), for a commit on
    /// another thread; from now on the engine records which objects change.
    pub fn take_delta(&mut self) -> StateDelta {
        let Engine {
            params,
            now,
            site: _,
            validations: _,
            connectors,
            connector_order,
            machines,
            pools,
            user_sessions,
            cloud_assignments,
            cloud_assigned,
            pending_expiry,
            record_ids,
            cloud: _,
            quiet_until: _,
        } = self;
        let changed = (
            machines.take_changed(),
            pools.take_changed(),
            user_sessions.take_changed(),
        );
        let mut gone = Vec::new();
        let (machines, pools, user_sessions, complete) = match changed {
            (Some(m), Some(p), Some(u)) => (
                changed_objects(MACHINE, machines, &m, &mut gone),
                changed_objects(POOL, pools, &p, &mut gone),
                changed_objects(USER, user_sessions, &u, &mut gone),
                false,
            ),
            _ => (machines.clone(), pools.clone(), user_sessions.clone(), true),
        };
        StateDelta {
            state: Engine {
                params: params.clone(),
                now: *now,
                site: Default::default(),
                validations: Default::default(),
                connectors: connectors.clone(),
                connector_order: connector_order.clone(),
                machines,
                pools,
                user_sessions,
                cloud_assignments: cloud_assignments.clone(),
                cloud_assigned: cloud_assigned.clone(),
                pending_expiry: pending_expiry.clone(),
                record_ids: record_ids.clone(),
                cloud: None,
                quiet_until: None,
            },
            gone,
            complete,
        }
    }
}

/// A map of objects kept one row each.
trait ObjectMap {
    /// The objects' type.
    type Value: serde::de::DeserializeOwned;
    /// Inserts; whether `name` was not there before.
    fn put(&mut self, name: &str, value: Self::Value) -> bool;
}

impl<V: serde::de::DeserializeOwned> ObjectMap for BTreeMap<String, V> {
    type Value = V;
    fn put(&mut self, name: &str, value: V) -> bool {
        self.insert(name.into(), value).is_none()
    }
}

impl<K, V> ObjectMap for Tracked<K, V>
where
    K: for<'a> From<&'a str> + Eq + std::hash::Hash + Clone,
    V: serde::de::DeserializeOwned,
{
    type Value = V;
    fn put(&mut self, name: &str, value: V) -> bool {
        self.insert(name.into(), value).is_none()
    }
}

/// Adds an object row to its map; whether it was not there before.
fn object(map: &mut impl ObjectMap, name: &str, value: &[u8]) -> Result<bool, serde_json::Error> {
    Ok(map.put(name, serde_json::from_slice(value)?))
}

/// Builds an engine from its rows, in any order (see [`Engine::for_each_state_row`]).
#[derive(Default)]
pub struct StateRows {
    params: Option<Params>,
    now: Option<Option<Ts>>,
    connector_order: Option<Vec<String>>,
    cloud_assignments: Option<BTreeMap<String, BTreeMap<String, String>>>,
    cloud_assigned: Option<BTreeSet<String>>,
    pending_expiry: Option<BTreeSet<(Ts, CompactString)>>,
    /// Absent while no record carried an id.
    record_ids: Option<crate::record_id::SeenByProducer>,
    connectors: BTreeMap<String, Connector>,
    machines: Tracked<CompactString, crate::engine::MachineRuntime>,
    pools: Tracked<String, Pool>,
    user_sessions: Tracked<CompactString, crate::detmap::VecMap<CompactString, Tally>>,
}

/// A row that does not belong to an engine state: what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("state row {key:?}: {detail}")]
pub struct RowError {
    /// The row's key, lossily as text.
    pub key: String,
    /// What is wrong.
    pub detail: String,
}

impl StateRows {
    /// No rows yet.
    pub fn new() -> StateRows {
        StateRows::default()
    }

    /// Adds one row.
    pub fn add(&mut self, key: &[u8], value: &[u8]) -> Result<(), RowError> {
        let fail = |detail: String| RowError {
            key: String::from_utf8_lossy(key).into_owned(),
            detail,
        };
        let (&tag, name) = key.split_first().ok_or_else(|| fail("empty key".into()))?;
        let name = std::str::from_utf8(name).map_err(|_| fail("name is not UTF-8".into()))?;
        let bad = |e: serde_json::Error| fail(e.to_string());
        /// Sets a field row; whether it was not set before.
        fn field<T: serde::de::DeserializeOwned>(
            slot: &mut Option<T>,
            value: &[u8],
        ) -> Result<bool, serde_json::Error> {
            Ok(slot.replace(serde_json::from_slice(value)?).is_none())
        }
        let fresh = match (tag, name) {
            (REST, "params") => field(&mut self.params, value).map_err(bad)?,
            (REST, "now") => field(&mut self.now, value).map_err(bad)?,
            (REST, "connector_order") => field(&mut self.connector_order, value).map_err(bad)?,
            (REST, "cloud_assignments") => {
                field(&mut self.cloud_assignments, value).map_err(bad)?
            }
            (REST, "cloud_assigned") => field(&mut self.cloud_assigned, value).map_err(bad)?,
            (REST, "pending_expiry") => field(&mut self.pending_expiry, value).map_err(bad)?,
            (REST, "record_ids") => field(&mut self.record_ids, value).map_err(bad)?,
            (CONNECTOR, name) => object(&mut self.connectors, name, value).map_err(bad)?,
            (MACHINE, name) => object(&mut self.machines, name, value).map_err(bad)?,
            (POOL, name) => object(&mut self.pools, name, value).map_err(bad)?,
            (USER, name) => object(&mut self.user_sessions, name, value).map_err(bad)?,
            _ => return Err(fail("unknown kind of row".into())),
        };
        if fresh {
            Ok(())
        } else {
            Err(fail("given twice".into()))
        }
    }

    /// The engine the rows make (configuration part empty): `Ok(None)` when there were no
    /// rows at all, an error naming the first missing field row when some are missing.
    pub fn finish(self) -> Result<Option<Engine>, RowError> {
        let StateRows {
            params,
            now,
            connector_order,
            cloud_assignments,
            cloud_assigned,
            pending_expiry,
            record_ids,
            connectors,
            machines,
            pools,
            user_sessions,
        } = self;
        if params.is_none() && now.is_none() && connectors.is_empty() && machines.is_empty() {
            return Ok(None);
        }
        let missing = |name: &str| RowError {
            key: format!("={name}"),
            detail: "missing".into(),
        };
        Ok(Some(Engine {
            params: params.ok_or_else(|| missing("params"))?,
            now: now.ok_or_else(|| missing("now"))?,
            connector_order: connector_order.ok_or_else(|| missing("connector_order"))?,
            cloud_assignments: cloud_assignments.ok_or_else(|| missing("cloud_assignments"))?,
            cloud_assigned: cloud_assigned.ok_or_else(|| missing("cloud_assigned"))?,
            pending_expiry: pending_expiry.ok_or_else(|| missing("pending_expiry"))?,
            record_ids: record_ids.unwrap_or_default(),
            site: Default::default(),
            validations: Default::default(),
            connectors,
            machines,
            pools,
            user_sessions,
            cloud: None,
            quiet_until: None,
        }))
    }
}
