//! A hash map for hot lookups that still serializes canonically.
//!
//! Lookups of machine and user names happen on every VDA heartbeat and launch; a B-tree of
//! 40,000 names costs ~16 string comparisons per lookup (each a likely cache miss on the
//! key's bytes), a hash map one hash and one comparison. The hasher is fixed (FxHash: no
//! random seed in the engine), and serialization sorts by key, so digests and saved states
//! are identical whatever the insertion history. Never iterate one of these to produce
//! output; use [`DetMap::sorted`].
//!
//! [`VecMap`] is the other end: a map of a few entries (a machine's refusals, a user's
//! machines) as one sorted vector. A `BTreeMap` allocates a node of eleven slots for its
//! first entry (~450 bytes for a refusal), and 40,000 machines each holding one made a
//! tenth of a large site's memory. `VecMap` keeps its entries in key order, as a `BTreeMap`
//! does, so the two iterate and serialize the same way.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::ops::{Deref, DerefMut};

use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A `HashMap` with a fixed hasher and key-sorted serialization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetMap<K: Eq + Hash, V>(HashMap<K, V, FxBuildHasher>);

impl<K: Eq + Hash, V> Default for DetMap<K, V> {
    fn default() -> Self {
        DetMap(HashMap::default())
    }
}

impl<K: Eq + Hash + Ord + AsRef<str>, V> DetMap<K, V> {
    /// Entries in key order (the keys' byte order).
    pub fn sorted(&self) -> Vec<(&K, &V)> {
        // Each entry carries its key's first 16 bytes as a number: most comparisons end
        // there, without reading the keys again (at 40,000 entries each read is a likely
        // cache miss; sorting was a tenth of a large state's digest). Zero padding orders
        // a shorter key first, as byte order does; equal prefixes compare the whole keys.
        let mut entries: Vec<(u128, &K, &V)> = self
            .0
            .iter()
            .map(|(k, v)| (prefix(k.as_ref().as_bytes()), k, v))
            .collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        entries.into_iter().map(|(_, k, v)| (k, v)).collect()
    }
}

/// The first 16 bytes of `key` as a big-endian number, zero-padded.
fn prefix(key: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    let n = key.len().min(16);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}

impl<K: Eq + Hash, V> Deref for DetMap<K, V> {
    type Target = HashMap<K, V, FxBuildHasher>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<K: Eq + Hash, V> DerefMut for DetMap<K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<K: Eq + Hash + Ord + AsRef<str> + Serialize, V: Serialize> Serialize for DetMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let sorted = self.sorted();
        let mut map = serializer.serialize_map(Some(sorted.len()))?;
        for batch in sorted.chunks(TOUCHED) {
            // In key order the entries are scattered over the table, so writing each began
            // with a cache miss on its key (most of a 25,000-entry map's time in a digest).
            // Reading a batch's keys first puts their misses in flight together.
            let touched = batch.iter().fold(0u8, |all, (k, _)| {
                let k = k.as_ref();
                all ^ k.as_bytes().first().copied().unwrap_or(0)
            });
            std::hint::black_box(touched);
            for (k, v) in batch {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// Entries whose keys are read together before a map writes them (see `DetMap`'s
/// `Serialize`): about as many cache misses as a core keeps in flight.
const TOUCHED: usize = 16;

impl<'de, K: Eq + Hash + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for DetMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(DetMap(HashMap::deserialize(deserializer)?))
    }
}

/// A [`DetMap`] that can say which keys changed (were handed out to change, inserted or
/// removed) since it was last asked, so that a node copies and writes only those at a
/// commit instead of the whole state (issue 20: copying 40,000 machines on the fold thread
/// every second held launches back by milliseconds).
///
/// Invariant: every key whose value differs from the last [`Tracked::take_changed`] is in
/// the set it returns next, or the set is `None` (anything may have changed). Changing the
/// map is only possible through the methods below, which record the key (but
/// [`Tracked::get_mut_unrecorded`], whose caller records what it changes); reading goes
/// through `Deref`. Until the first `take_changed` (and after a change of many entries at
/// once, [`Tracked::all_mut`]) nothing is recorded, so an engine nobody asks (a replay)
/// pays one branch per change.
#[derive(Debug)]
pub struct Tracked<K: Eq + Hash, V> {
    map: DetMap<K, V>,
    /// Keys changed since the last take; `None` while not recording.
    changed: Option<std::collections::HashSet<K, FxBuildHasher>>,
}

impl<K: Eq + Hash, V> Default for Tracked<K, V> {
    fn default() -> Self {
        Tracked {
            map: DetMap::default(),
            changed: None,
        }
    }
}

/// A copy does not follow what its original changed: it starts as "anything changed".
impl<K: Eq + Hash + Clone, V: Clone> Clone for Tracked<K, V> {
    fn clone(&self) -> Self {
        Tracked {
            map: self.map.clone(),
            changed: None,
        }
    }
}

/// Two maps are equal when their entries are: what changed is not part of the state.
impl<K: Eq + Hash, V: PartialEq> PartialEq for Tracked<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K: Eq + Hash, V: Eq> Eq for Tracked<K, V> {}

impl<K: Eq + Hash, V> Deref for Tracked<K, V> {
    type Target = DetMap<K, V>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<K: Eq + Hash + Clone, V> Tracked<K, V> {
    /// Records `key` as changed, if recording.
    fn mark<Q: Hash + Eq + ?Sized>(&mut self, key: &Q)
    where
        K: Borrow<Q> + for<'a> From<&'a Q>,
    {
        if let Some(changed) = &mut self.changed {
            if !changed.contains(key) {
                changed.insert(K::from(key));
            }
        }
    }

    /// The value of `key`, to change (recorded as changed if present).
    pub fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q> + for<'a> From<&'a Q>,
    {
        let value = self.map.get_mut(key)?;
        if let Some(changed) = &mut self.changed {
            if !changed.contains(key) {
                changed.insert(K::from(key));
            }
        }
        Some(value)
    }

    /// The value of `key`, to change or not, NOT recorded as changed: a caller that changes
    /// it must say so with [`Tracked::record`] (the VDA heartbeat, which most often
    /// changes nothing that is saved: recorded, every machine that heartbeated was copied,
    /// serialized and hashed at the next commit for nothing).
    pub fn get_mut_unrecorded<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.map.get_mut(key)
    }

    /// Records `key` as changed (see [`Tracked::get_mut_unrecorded`]).
    pub fn record<Q: Hash + Eq + ?Sized>(&mut self, key: &Q)
    where
        K: Borrow<Q> + for<'a> From<&'a Q>,
    {
        self.mark(key);
    }

    /// The value of `key`, inserted as `V::default()` if absent; recorded as changed.
    pub fn or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        if let Some(changed) = &mut self.changed {
            if !changed.contains(&key) {
                changed.insert(key.clone());
            }
        }
        self.map.entry(key).or_default()
    }

    /// Sets `key` to `value`; returns the value it replaced. Recorded as changed.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if let Some(changed) = &mut self.changed {
            if !changed.contains(&key) {
                changed.insert(key.clone());
            }
        }
        self.map.insert(key, value)
    }

    /// Removes `key`; returns its value. Recorded as changed (gone) if it was there.
    pub fn remove<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q> + for<'a> From<&'a Q>,
    {
        let value = self.map.remove(key)?;
        self.mark(key);
        Some(value)
    }

    /// The whole map, to change many entries at once: stops recording (anything may have
    /// changed) until the next [`Tracked::take_changed`].
    pub fn all_mut(&mut self) -> &mut DetMap<K, V> {
        self.changed = None;
        &mut self.map
    }

    /// The keys changed since the last call (`None`: anything may have changed, as before
    /// the first call), and records from now on.
    pub fn take_changed(&mut self) -> Option<std::collections::HashSet<K, FxBuildHasher>> {
        self.changed.replace(Default::default())
    }
}

impl<K: Eq + Hash + Ord + AsRef<str> + Serialize, V: Serialize> Serialize for Tracked<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(serializer)
    }
}

impl<'de, K: Eq + Hash + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for Tracked<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Tracked {
            map: DetMap::deserialize(deserializer)?,
            changed: None,
        })
    }
}

/// A small map as a vector sorted by key: the API of a `BTreeMap` that the engine uses,
/// its iteration order and its serialization, in one allocation the size of its entries.
/// Lookups are binary searches, so a large one would be slow to change: keep it for maps
/// of a few entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap(Vec::new())
    }
}

impl<K: Ord, V> VecMap<K, V> {
    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// The value of `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// The value of `key`, to change.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &mut self.0[i].1)
    }

    /// The value of `key`, inserted as `V::default()` (under `key` made owned) if absent.
    pub fn get_or_default<Q: Ord + ?Sized>(&mut self, key: &Q) -> &mut V
    where
        K: Borrow<Q> + for<'a> From<&'a Q>,
        V: Default,
    {
        let i = match self.find(key) {
            Ok(i) => i,
            Err(i) => {
                self.grow_by_one();
                self.0.insert(i, (K::from(key), V::default()));
                i
            }
        };
        &mut self.0[i].1
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.grow_by_one();
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    /// Makes room for one more entry: exactly one while the map is small (a vector's
    /// growth by doubling would give the typical map of one entry room for four), by
    /// doubling beyond, so that a large one (a user on thousands of machines) still costs
    /// amortized constant time per insert.
    fn grow_by_one(&mut self) {
        if self.0.len() == self.0.capacity() {
            if self.0.len() < 8 {
                self.0.reserve_exact(1);
            } else {
                self.0.reserve(1);
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.0.remove(i).1)
    }
}

impl<K, V> VecMap<K, V> {
    /// Entries in key order.
    pub fn iter(&self) -> VecMapIter<'_, K, V> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Iterator over a [`VecMap`]'s entries in key order.
pub type VecMapIter<'a, K, V> =
    std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

impl<'a, K, V> IntoIterator for &'a VecMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = VecMapIter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Serialize, V: Serialize> Serialize for VecMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for VecMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Through a B-tree: sorted, and a repeated key keeps its last value, as before.
        let map = BTreeMap::<K, V>::deserialize(deserializer)?;
        Ok(VecMap(map.into_iter().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that `map` is written as `other` is, and that its JSON reads back as itself.
    fn assert_same_json_and_back<M>(map: &M, other: &impl Serialize)
    where
        M: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
    {
        let json = serde_json::to_string(map).unwrap();
        assert_eq!(json, serde_json::to_string(other).unwrap());
        let back: M = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, map);
    }

    #[test]
    fn serialization_ignores_insertion_order() {
        let mut a = DetMap::default();
        let mut b = DetMap::default();
        for i in 0..100 {
            a.insert(format!("k{i}"), i);
            b.insert(format!("k{}", 99 - i), 99 - i);
        }
        assert_same_json_and_back(&a, &b);
    }

    /// Sorted by the keys' first bytes first, then whole: still byte order, with keys
    /// sharing 16 bytes and more, keys that are prefixes of others, NUL bytes and
    /// characters beyond ASCII.
    #[test]
    fn sorted_is_byte_order() {
        let mut map = DetMap::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let pieces = [
            "",
            "\0",
            "a",
            "\u{7f}",
            "é",
            "vdi0742",
            ".z3.sim.example",
            "zz",
        ];
        for i in 0..5000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key: String = (0..(x % 6))
                .map(|j| pieces[((x >> (8 * j)) % pieces.len() as u64) as usize])
                .collect();
            map.insert(key, i);
        }
        let sorted: Vec<&String> = map.sorted().into_iter().map(|(k, _)| k).collect();
        let by_btree: BTreeMap<&String, ()> = map.keys().map(|k| (k, ())).collect();
        assert!(sorted.len() > 1000);
        assert_eq!(sorted, by_btree.into_keys().collect::<Vec<_>>());
        // Written in batches of `TOUCHED` (the last one shorter): every entry, in order.
        assert_ne!(map.len() % TOUCHED, 0);
        let as_btree: BTreeMap<&String, &u32> = map.iter().collect();
        assert_same_json_and_back(&map, &as_btree);
    }

    #[test]
    fn a_tracked_map_records_each_change_once_asked() {
        let mut map: Tracked<String, u32> = Tracked::default();
        map.insert("a".into(), 1);
        // Not recording until asked: anything may have changed.
        assert_eq!(map.take_changed(), None);
        assert_eq!(map.take_changed(), Some(Default::default()));
        *map.or_default("b".into()) += 2;
        *map.get_mut("a").unwrap() += 1;
        assert!(map.get_mut("absent").is_none());
        map.insert("c".into(), 3);
        assert_eq!(map.remove("c"), Some(3));
        assert_eq!(map.remove("never"), None);
        let mut changed: Vec<String> = map.take_changed().unwrap().into_iter().collect();
        changed.sort();
        assert_eq!(changed, ["a", "b", "c"]);
        // Read access records nothing; a change of the whole map stops recording.
        assert_eq!(map.get("a"), Some(&2));
        assert_eq!(map.take_changed(), Some(Default::default()));
        map.all_mut().clear();
        assert_eq!(map.take_changed(), None);
        // A copy and a map read back start unrecorded, and equality ignores what changed.
        map.insert("d".into(), 4);
        let copy = map.clone();
        assert_eq!(copy, map);
        let mut copy = copy;
        assert_eq!(copy.take_changed(), None);
        let json = serde_json::to_string(&map).unwrap();
        let mut back: Tracked<String, u32> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, map);
        assert_eq!(back.take_changed(), None);
    }

    #[test]
    fn vec_map_behaves_as_a_btree_map() {
        // The same operations on both, in a scrambled order, leave the same entries, the
        // same iteration and the same JSON.
        let mut small: VecMap<String, u32> = VecMap::default();
        let mut tree: BTreeMap<String, u32> = BTreeMap::new();
        for i in 0..200u32 {
            let key = format!("k{}", (i * 37) % 23);
            match i % 4 {
                0 | 1 => assert_eq!(small.insert(key.clone(), i), tree.insert(key, i)),
                2 => assert_eq!(small.remove(key.as_str()), tree.remove(key.as_str())),
                _ => {
                    *small.get_or_default(key.as_str()) += 1;
                    *tree.entry(key).or_default() += 1;
                }
            }
            assert_eq!(small.len(), tree.len());
            assert!(small.iter().eq(tree.iter()));
        }
        assert_eq!(small.get("k5"), tree.get("k5"));
        assert_same_json_and_back(&small, &tree);
    }
}

/// A value that can say whether it changed since it was last asked, as [`Tracked`] does
/// for the keys of a map: a connector's recent activity (R-DATA, up to a thousand lines)
/// is written by a node's commit only when it changed, not with every commit.
///
/// Invariant: changing the value is only possible through [`Watched::get_mut`], which
/// records the change; until the first [`Watched::take_changed`] (and in a copy) it counts
/// as changed. Equality, serialization and the digest see the value alone.
#[derive(Debug, Default)]
pub struct Watched<T> {
    value: T,
    /// Whether it changed since the last take; `None` while not recording.
    changed: Option<bool>,
}

impl<T> Watched<T> {
    /// The value, to change (recorded as changed).
    pub fn get_mut(&mut self) -> &mut T {
        if let Some(changed) = &mut self.changed {
            *changed = true;
        }
        &mut self.value
    }

    /// Whether it changed since the last call (`true` before the first, and in a copy),
    /// and records from now on.
    pub fn take_changed(&mut self) -> bool {
        self.changed.replace(false).unwrap_or(true)
    }
}

/// A copy does not follow what its original changed: it starts as "changed".
impl<T: Clone> Clone for Watched<T> {
    fn clone(&self) -> Self {
        Watched {
            value: self.value.clone(),
            changed: None,
        }
    }
}

/// Two values are equal when they are: whether they changed is not part of the state.
impl<T: PartialEq> PartialEq for Watched<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<T: Eq> Eq for Watched<T> {}

impl<T> Deref for Watched<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Serialize> Serialize for Watched<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Watched<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Watched {
            value: T::deserialize(deserializer)?,
            changed: None,
        })
    }
}
