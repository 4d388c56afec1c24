//! A hash map for hot lookups that still serializes canonically.
//!
//! Lookups of machine and user names happen on every VDA heartbeat and launch; a B-tree of
//! 40,000 names costs ~16 string comparisons per lookup (each a likely cache miss on the
//! key's bytes), a hash map one hash and one comparison. The hasher is fixed (FxHash: no
//! random seed in the engine), and serialization sorts by key, so digests and saved states
//! are identical whatever the insertion history. Never iterate one of these to produce
//! output; use [`DetMap::sorted`].

use std::collections::HashMap;
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

impl<K: Eq + Hash + Ord, V> DetMap<K, V> {
    /// Entries in key order.
    pub fn sorted(&self) -> Vec<(&K, &V)> {
        let mut entries: Vec<(&K, &V)> = self.0.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }
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

impl<K: Eq + Hash + Ord + Serialize, V: Serialize> Serialize for DetMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.sorted())
    }
}

impl<'de, K: Eq + Hash + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for DetMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(DetMap(HashMap::deserialize(deserializer)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_ignores_insertion_order() {
        let mut a = DetMap::default();
        let mut b = DetMap::default();
        for i in 0..100 {
            a.insert(format!("k{i}"), i);
            b.insert(format!("k{}", 99 - i), 99 - i);
        }
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        let back: DetMap<String, i32> =
            serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
    }
}
