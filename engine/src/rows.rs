//! The engine state as rows keyed by object, so that a store writes only the rows a batch
//! of records changed instead of the whole state at every commit (issue 15, item 6: a node
//! rewriting tens of megabytes per commit made its RocksDB directory swing by gigabytes).
//!
//! Each connector, machine, brokering pool and user's session tally is one row, and each
//! other field one row of its own; in a node store's layout ([`Engine::for_each_store_row`])
//! each entry of a connector's R-DATA maps is a row too, and its recent activity one row.
//! The configuration part (site and validations) is not in the rows: stores keep it apart
//! (see [`Engine::take_config`]).
//!
//! Invariant: rebuilding an engine from the rows of `e` (then restoring `e`'s configuration
//! part) gives an engine equal to `e`, with the same digest. Both directions destructure
//! [`Engine`] exhaustively, so a field added to it does not compile until it has a row.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use compact_str::CompactString;
use serde::Serialize;

use crate::broker::{Activity, Pool, Tally};
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
/// A connector's recent user (R-DATA): one row per entry in the store's layout.
const RECENT_USER: u8 = b'r';
/// A connector's client machine (R-DATA): one row per entry in the store's layout.
const CLIENT: u8 = b'l';
/// A connector's recent activity (R-DATA): one row per connector in the store's layout,
/// written only when it changed (up to a thousand lines, which change only in LHC mode,
/// were rewritten with the connector's row at every commit).
const ACTIVITY: u8 = b'a';

/// The key of an entry row: its kind, the connector's name (its length first, so that no
/// name is a prefix of another's rows), then the entry's key.
fn entry_key(key: &mut Vec<u8>, tag: u8, connector: &str, entry: &str) {
    key.clear();
    key.push(tag);
    key.extend_from_slice(&entry_name_len(connector).to_be_bytes());
    key.extend_from_slice(connector.as_bytes());
    key.extend_from_slice(entry.as_bytes());
}

/// A connector name's length in an entry row's key.
fn entry_name_len(connector: &str) -> u32 {
    u32::try_from(connector.len()).expect("a connector name is shorter than 4 GiB")
}

/// Whether `key` is an entry row of a connector's R-DATA maps (the store's layout only:
/// [`Engine::for_each_store_row`]). Such rows are many and small, and a commit writes the
/// ones that changed without comparing them with what the store holds.
pub fn is_entry_row(key: &[u8]) -> bool {
    matches!(key.first(), Some(&RECENT_USER) | Some(&CLIENT))
}

/// The key of `connector`'s activity row (the store's layout): what a store deletes when
/// the connector is gone.
pub fn activity_row(connector: &str) -> Vec<u8> {
    let mut key = vec![ACTIVITY];
    key.extend_from_slice(connector.as_bytes());
    key
}

/// Whether `key` is of a kind every delta holds whole (the field rows and the connectors;
/// see [`StateDelta::holds_every_row_like`]).
pub fn held_whole_by_deltas(key: &[u8]) -> bool {
    matches!(key.first(), Some(&REST) | Some(&CONNECTOR))
}

/// The connector a connector's row (not an entry row) is of.
pub fn connector_of_row(key: &[u8]) -> Option<&str> {
    match key.split_first() {
        Some((&CONNECTOR, name)) => std::str::from_utf8(name).ok(),
        _ => None,
    }
}

/// The key ranges (from, to: `to` excluded) holding the entry rows of `connector`, or of
/// every connector when `None`: what a store deletes when their connector is gone, or
/// before a complete pass writes them all again.
pub fn entry_row_ranges(connector: Option<&str>) -> [(Vec<u8>, Vec<u8>); 2] {
    [RECENT_USER, CLIENT].map(|tag| {
        let mut from = vec![tag];
        if let Some(name) = connector {
            from.extend_from_slice(&entry_name_len(name).to_be_bytes());
            from.extend_from_slice(name.as_bytes());
        }
        let to = successor(&from);
        (from, to)
    })
}

/// The smallest key above every key starting with `prefix` (`prefix` is never all 0xff:
/// it starts with a kind's tag).
fn successor(prefix: &[u8]) -> Vec<u8> {
    let mut to = prefix.to_vec();
    while let Some(last) = to.pop() {
        if last < u8::MAX {
            to.push(last + 1);
            break;
        }
    }
    to
}

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

/// Calls `each` with an entry row's key and JSON value, reusing both buffers.
fn emit_entry<T: Serialize + ?Sized>(
    tag: u8,
    connector: &str,
    entry: &str,
    value: &T,
    key: &mut Vec<u8>,
    bytes: &mut Vec<u8>,
    each: &mut impl FnMut(&[u8], &[u8]),
) {
    entry_key(key, tag, connector, entry);
    bytes.clear();
    serde_json::to_writer(&mut *bytes, value).expect("engine state serializes");
    each(key, bytes);
}

impl Engine {
    /// Calls `each(key, value)` for every row of the state (configuration part excluded),
    /// in key order within each kind. Keys are unique; values are JSON. Each connector is
    /// one row, its R-DATA maps included: the layout of checkpoints.
    pub fn for_each_state_row(&self, each: impl FnMut(&[u8], &[u8])) {
        self.rows(Layout::State, each)
    }

    /// As [`Engine::for_each_state_row`], in the layout of a node's store: each entry of a
    /// connector's R-DATA maps (recent users, clients: tens of thousands at a big site,
    /// a few of them changed per second) is a row of its own, the connector's recent
    /// activity one row, and the connector's row holds those empty. Either layout rebuilds
    /// the same engine ([`StateRows`]).
    pub fn for_each_store_row(&self, each: impl FnMut(&[u8], &[u8])) {
        self.rows(Layout::Store { activity: true }, each)
    }

    /// The rows, in `layout`.
    fn rows(&self, layout: Layout, mut each: impl FnMut(&[u8], &[u8])) {
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
            remote_pc_groups: _,
            one_by_one: _,
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
            let data = &connector.data;
            let Layout::Store { activity } = layout else {
                emit(CONNECTOR, name, connector, &mut key, &mut bytes, &mut each);
                continue;
            };
            if data.recent_users.is_empty() && data.clients.is_empty() && data.activity.is_empty() {
                // A delta's copy (see `bare_copy`), or a connector that has none of them.
                emit(CONNECTOR, name, connector, &mut key, &mut bytes, &mut each);
            } else {
                // Rare (a complete pass): a copy without the maps and the activity, which
                // follow in rows of their own.
                let mut bare = connector.clone();
                bare.data.recent_users = Tracked::default();
                bare.data.clients = Tracked::default();
                bare.data.activity = Default::default();
                emit(CONNECTOR, name, &bare, &mut key, &mut bytes, &mut each);
            }
            if activity {
                let lines: &VecDeque<Activity> = &data.activity;
                emit(ACTIVITY, name, lines, &mut key, &mut bytes, &mut each);
            }
            for (user, ts) in data.recent_users.sorted() {
                emit_entry(RECENT_USER, name, user, ts, &mut key, &mut bytes, &mut each);
            }
            for (client, seen) in data.clients.sorted() {
                emit_entry(CLIENT, name, client, seen, &mut key, &mut bytes, &mut each);
            }
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
/// another thread serializes and writes them: every field row and connector (without its
/// R-DATA entries), and of the machines, pools, users and R-DATA entries only those changed
/// since the last [`Engine::take_delta`] (or [`Engine::track_changes`]).
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
    /// The entries of the connectors' R-DATA maps changed (when not complete: `state`'s
    /// connectors then hold those maps empty), sorted by connector, map and key.
    entries: Vec<EntryRow>,
    /// The connectors whose recent activity changed, with it (when not complete:
    /// `state`'s connectors then hold it empty), in connector order.
    activities: Vec<(String, VecDeque<Activity>)>,
}

/// Which rows [`Engine::rows`] makes.
#[derive(Clone, Copy)]
enum Layout {
    /// Checkpoints: a connector's row holds its R-DATA maps and activity.
    State,
    /// A node's store: R-DATA entries and activity in rows of their own; without the
    /// activity rows when `activity` is false (a delta's connectors, copied without it).
    Store { activity: bool },
}

/// A changed entry of a connector's R-DATA maps.
#[derive(Debug)]
struct EntryRow {
    connector: String,
    key: CompactString,
    value: EntryValue,
}

/// The value of an [`EntryRow`], by map.
#[derive(Debug)]
enum EntryValue {
    RecentUser(Ts),
    Client((CompactString, Ts)),
}

impl StateDelta {
    /// Calls `each(key, value)` for every row copied, in the store's layout
    /// ([`Engine::for_each_store_row`]).
    pub fn for_each_row(&self, mut each: impl FnMut(&[u8], &[u8])) {
        self.state.rows(
            Layout::Store {
                activity: self.complete,
            },
            &mut each,
        );
        let (mut key, mut bytes) = (Vec::new(), Vec::new());
        for (connector, lines) in &self.activities {
            emit(ACTIVITY, connector, lines, &mut key, &mut bytes, &mut each);
        }
        for entry in &self.entries {
            let (connector, name) = (entry.connector.as_str(), entry.key.as_str());
            match &entry.value {
                EntryValue::RecentUser(ts) => emit_entry(
                    RECENT_USER,
                    connector,
                    name,
                    ts,
                    &mut key,
                    &mut bytes,
                    &mut each,
                ),
                EntryValue::Client(seen) => emit_entry(
                    CLIENT, connector, name, seen, &mut key, &mut bytes, &mut each,
                ),
            }
        }
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
    /// name is gone, although no object's removal was recorded. (A connector's entry rows
    /// and activity row go with it: see [`entry_row_ranges`] and [`activity_row`].)
    pub fn holds_every_row_like(&self, key: &[u8]) -> bool {
        self.complete || held_whole_by_deltas(key)
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
            remote_pc_groups: _,
            one_by_one: _,
        } = self;
        let changed = (
            machines.take_changed(),
            pools.take_changed(),
            user_sessions.take_changed(),
        );
        // Each connector's R-DATA maps: what changed in them, if they were recording.
        let mut entry_changes = Vec::with_capacity(connectors.len());
        for connector in connectors.values_mut() {
            let data = &mut connector.data;
            match (
                data.recent_users.take_changed(),
                data.clients.take_changed(),
            ) {
                (Some(users), Some(clients)) => entry_changes.push((users, clients)),
                _ => {
                    entry_changes.clear();
                    break;
                }
            }
        }
        let mut gone = Vec::new();
        let mut entries = Vec::new();
        let mut activities = Vec::new();
        let (machines, pools, user_sessions, connectors, complete) = match changed {
            (Some(m), Some(p), Some(u)) if entry_changes.len() == connectors.len() => {
                let copies = connectors
                    .iter_mut()
                    .zip(entry_changes)
                    .map(|((name, connector), (users, clients))| {
                        changed_entries(name, connector, &users, &clients, &mut entries, &mut gone);
                        if connector.data.activity.take_changed() {
                            activities.push((name.clone(), (*connector.data.activity).clone()));
                        }
                        (name.clone(), bare_copy(connector))
                    })
                    .collect();
                (
                    changed_objects(MACHINE, machines, &m, &mut gone),
                    changed_objects(POOL, pools, &p, &mut gone),
                    changed_objects(USER, user_sessions, &u, &mut gone),
                    copies,
                    false,
                )
            }
            // Something was not recording (the first delta, a new connector, a change of
            // many at once): every row, and every map starts recording afresh.
            _ => {
                for connector in connectors.values_mut() {
                    connector.data.recent_users.take_changed();
                    connector.data.clients.take_changed();
                    connector.data.activity.take_changed();
                }
                (
                    machines.clone(),
                    pools.clone(),
                    user_sessions.clone(),
                    connectors.clone(),
                    true,
                )
            }
        };
        StateDelta {
            state: Engine {
                params: params.clone(),
                now: *now,
                site: Default::default(),
                validations: Default::default(),
                connectors,
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
                remote_pc_groups: Default::default(),
                one_by_one: false,
            },
            gone,
            complete,
            entries,
            activities,
        }
    }
}

impl Engine {
    /// Starts recording what changes from now on, as if a delta had just been taken: for
    /// an engine loaded from a store that holds exactly it (in the store's layout), so that
    /// the store's first commit writes what changed since instead of every row again.
    pub fn track_changes(&mut self) {
        self.machines.take_changed();
        self.pools.take_changed();
        self.user_sessions.take_changed();
        for connector in self.connectors.values_mut() {
            connector.data.recent_users.take_changed();
            connector.data.clients.take_changed();
            connector.data.activity.take_changed();
        }
    }
}

/// A copy of `connector` without the entries of its R-DATA maps and without its activity
/// (they are copied as they change): they are moved out for the copy and back, so they
/// keep recording.
fn bare_copy(connector: &mut Connector) -> Connector {
    let users = std::mem::take(&mut connector.data.recent_users);
    let clients = std::mem::take(&mut connector.data.clients);
    let activity = std::mem::take(&mut connector.data.activity);
    let copy = connector.clone();
    connector.data.recent_users = users;
    connector.data.clients = clients;
    connector.data.activity = activity;
    copy
}

/// Copies the entries of `connector`'s R-DATA maps named in `users` and `clients` into
/// `entries` (sorted, as [`changed_objects`]), and the keys of those gone into `gone`.
fn changed_entries(
    name: &str,
    connector: &Connector,
    users: &std::collections::HashSet<CompactString, rustc_hash::FxBuildHasher>,
    clients: &std::collections::HashSet<CompactString, rustc_hash::FxBuildHasher>,
    entries: &mut Vec<EntryRow>,
    gone: &mut Vec<Vec<u8>>,
) {
    changed_in(
        name,
        RECENT_USER,
        &connector.data.recent_users,
        users,
        |ts| EntryValue::RecentUser(*ts),
        entries,
        gone,
    );
    changed_in(
        name,
        CLIENT,
        &connector.data.clients,
        clients,
        |seen| EntryValue::Client(seen.clone()),
        entries,
        gone,
    );
}

/// [`changed_entries`] for one R-DATA map of connector `name`: each key in `changed`, in
/// key order, as an entry row (`value` of what the map holds) or, gone, a row to delete.
fn changed_in<V>(
    name: &str,
    tag: u8,
    map: &Tracked<CompactString, V>,
    changed: &std::collections::HashSet<CompactString, rustc_hash::FxBuildHasher>,
    value: impl Fn(&V) -> EntryValue,
    entries: &mut Vec<EntryRow>,
    gone: &mut Vec<Vec<u8>>,
) {
    let mut keys: Vec<&CompactString> = changed.iter().collect();
    keys.sort_unstable();
    for key in keys {
        match map.get(key) {
            Some(held) => entries.push(EntryRow {
                connector: name.to_string(),
                key: key.clone(),
                value: value(held),
            }),
            None => {
                let mut row = Vec::new();
                entry_key(&mut row, tag, name, key);
                gone.push(row);
            }
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

/// An entry row's name (its key after the kind): the connector's name and the entry's key,
/// both UTF-8.
fn split_entry_name(name: &[u8]) -> Option<(&str, &str)> {
    let (len, rest) = name.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    if rest.len() < len {
        return None;
    }
    let (connector, entry) = rest.split_at(len);
    Some((
        std::str::from_utf8(connector).ok()?,
        std::str::from_utf8(entry).ok()?,
    ))
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
    /// Entry rows (the store's layout), put in their connectors by `finish`, which
    /// may come after them.
    entries: Vec<(String, CompactString, EntryValue)>,
    /// Activity rows (the store's layout), by connector, put in them by `finish`.
    activities: BTreeMap<String, VecDeque<Activity>>,
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
        if is_entry_row(key) {
            let (connector, entry) = split_entry_name(name).ok_or_else(|| {
                fail("an entry row's key does not hold a connector's name and an entry".into())
            })?;
            let bad = |e: serde_json::Error| fail(e.to_string());
            let value = match tag {
                RECENT_USER => EntryValue::RecentUser(serde_json::from_slice(value).map_err(bad)?),
                _ => EntryValue::Client(serde_json::from_slice(value).map_err(bad)?),
            };
            self.entries.push((connector.into(), entry.into(), value));
            return Ok(());
        }
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
            (ACTIVITY, name) => object(&mut self.activities, name, value).map_err(bad)?,
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
            entries,
            activities,
        } = self;
        if params.is_none()
            && now.is_none()
            && connectors.is_empty()
            && machines.is_empty()
            && entries.is_empty()
            && activities.is_empty()
        {
            return Ok(None);
        }
        let mut connectors = connectors;
        for (connector, lines) in activities {
            let fail = |detail: &str| RowError {
                key: format!("activity of connector {connector:?}"),
                detail: detail.into(),
            };
            let activity = connectors
                .get_mut(&connector)
                .ok_or_else(|| fail("its connector has no row"))?
                .data
                .activity
                .get_mut();
            if !activity.is_empty() {
                // (A store of format 2 kept it in the connector's row.)
                return Err(fail("given twice (in its connector's row too)"));
            }
            *activity = lines;
        }
        for (connector, entry, value) in entries {
            let fail = |detail: &str| RowError {
                key: format!("entry {entry:?} of connector {connector:?}"),
                detail: detail.into(),
            };
            let data = &mut connectors
                .get_mut(&connector)
                .ok_or_else(|| fail("its connector has no row"))?
                .data;
            let fresh = match value {
                EntryValue::RecentUser(ts) => data.recent_users.insert(entry.clone(), ts),
                EntryValue::Client(seen) => data.clients.insert(entry.clone(), seen).map(|_| Ts(0)),
            }
            .is_none();
            if !fresh {
                return Err(fail("given twice"));
            }
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
            remote_pc_groups: Default::default(),
            one_by_one: false,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry row's key names its connector exactly (no name is a prefix of another's
    /// rows), a key that does not hold a whole name is refused, and the ranges a store
    /// deletes hold a connector's entry rows and no other's.
    #[test]
    fn entry_rows_name_their_connector_exactly() {
        let mut key = Vec::new();
        entry_key(&mut key, RECENT_USER, "cc1.example", "alice");
        assert!(is_entry_row(&key));
        assert_eq!(split_entry_name(&key[1..]), Some(("cc1.example", "alice")));
        let mut longer = Vec::new();
        entry_key(&mut longer, RECENT_USER, "cc1.example.org", "x");
        for (from, to) in entry_row_ranges(Some("cc1.example")) {
            let inside = |k: &[u8]| from.as_slice() <= k && k < to.as_slice();
            assert_eq!(inside(&key), from[0] == RECENT_USER);
            assert!(!inside(&longer), "another connector's row");
        }
        for (from, to) in entry_row_ranges(None) {
            let inside = |k: &[u8]| from.as_slice() <= k && k < to.as_slice();
            assert_eq!(inside(&key), from[0] == RECENT_USER);
            assert_eq!(inside(&longer), from[0] == RECENT_USER);
        }
        // Cut short, or with a length past the end: refused, not misread.
        assert_eq!(split_entry_name(&key[1..4]), None);
        let mut lying = key.clone();
        lying[1..5].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(split_entry_name(&lying[1..]), None);
        let mut rows = StateRows::new();
        assert!(rows.add(&lying, b"\"2026-01-05T09:00:00.000Z\"").is_err());
        // An entry of a connector without a row is refused when the engine is made.
        let mut rows = StateRows::new();
        rows.add(&key, b"\"2026-01-05T09:00:00.000Z\"").unwrap();
        assert!(rows.finish().is_err());
        assert_eq!(successor(&[b'r', 0xff]), vec![b's']);
    }
}
