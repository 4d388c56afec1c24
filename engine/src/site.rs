//! The site configuration as the cloud (or site database) holds it: every object with the
//! log offset and version of the change that last wrote it, so a failed import can name
//! what introduced each offending object (R-CSS-4).
//!
//! Invariant: a `config.change` applies whole or not at all; versions strictly increase.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigObject, ConfigOp, ObjectKind};
use crate::output::IntroducedBy;
use crate::record::ConfigChange;

/// A change that upserts at least this many objects of a kind, and at least half of that
/// kind's map, rebuilds the map afterwards (see [`SiteConfig::apply_checked`]): the rebuild
/// then costs no more than the upserts did, and smaller changes leave a map about as full
/// as it was.
const COMPACT_AFTER_UPSERTS: usize = 1024;

/// An object with its provenance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    /// The object as last upserted.
    #[serde(deserialize_with = "crate::config::kind_first")]
    pub object: ConfigObject,
    /// The change that wrote it.
    pub introduced_by: IntroducedBy,
}

/// The current site configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteConfig {
    /// Version of the last change (0: none yet).
    pub version: u64,
    /// Objects by kind, then exact id.
    pub(crate) objects: BTreeMap<ObjectKind, BTreeMap<String, Stored>>,
    /// Deletions by kind and lowercased id: a reference left dangling by a delete was
    /// introduced by that delete.
    pub(crate) deleted: BTreeMap<ObjectKind, BTreeMap<String, IntroducedBy>>,
    /// Lowercased id → exact id, for connectors and machines named by records.
    pub(crate) connector_ids: BTreeMap<String, String>,
    /// Lowercased id → exact id and zone of machines.
    pub(crate) machine_ids: crate::detmap::DetMap<compact_str::CompactString, MachineRef>,
    /// Lowercased zone ids named by machines, in order of first use (never shrinks).
    pub(crate) zone_names: Vec<String>,
}

/// A machine as records name it: its exact id and its zone (lowercased).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineRef {
    /// Exact id.
    pub id: String,
    /// Zone id, lowercased, as an index into `SiteConfig::zone_names` (a runtime cache can
    /// copy it without touching another allocation).
    pub zone: u32,
}

impl SiteConfig {
    /// Whether a change can apply: versions increase, deletes name existing objects, the
    /// site object is called "site". The error names the field at fault.
    pub fn check(&self, change: &ConfigChange) -> Result<(), String> {
        if change.version <= self.version {
            return Err(format!(
                "field `version`: {} is not above the current version {}",
                change.version, self.version
            ));
        }
        // Dry run: deletes must name objects that exist at that point of the change. Only
        // a change with deletes needs the overlay (a whole site's import has none).
        let deletes = change
            .ops
            .iter()
            .any(|op| matches!(op, ConfigOp::Delete(_)));
        let mut overlay: BTreeMap<(ObjectKind, &str), bool> = BTreeMap::new();
        for (i, op) in change.ops.iter().enumerate() {
            match op {
                ConfigOp::Upsert(object) => {
                    if object.kind() == ObjectKind::Site && object.id() != "site" {
                        return Err(format!(
                            "field `ops[{i}].id`: the site object's id must be \"site\""
                        ));
                    }
                    if deletes {
                        overlay.insert((object.kind(), object.id()), true);
                    }
                }
                ConfigOp::Delete(r) => {
                    let exists = overlay
                        .get(&(r.kind, r.id.as_str()))
                        .copied()
                        .unwrap_or_else(|| self.get(r.kind, &r.id).is_some());
                    if !exists {
                        return Err(format!(
                            "field `ops[{i}]`: delete of unknown {} {:?}",
                            r.kind, r.id
                        ));
                    }
                    overlay.insert((r.kind, r.id.as_str()), false);
                }
            }
        }
        Ok(())
    }

    /// Applies a change at `offset` that [`SiteConfig::check`] accepted (the engine checks
    /// every record before it applies any).
    pub(crate) fn apply_checked(&mut self, change: ConfigChange, offset: u64) {
        let introduced_by = IntroducedBy {
            offset,
            version: Some(change.version),
        };
        // §2.1: the site default "as of the change" is the one the whole change leaves, so
        // the order of ops inside one change does not matter.
        let default_reuse = change
            .ops
            .iter()
            .rev()
            .find_map(|op| match op {
                ConfigOp::Upsert(ConfigObject::Site { data, .. }) => {
                    Some(data.default_reuse_machines_without_shutdown_in_outage)
                }
                _ => None,
            })
            .unwrap_or_else(|| {
                self.site()
                    .default_reuse_machines_without_shutdown_in_outage
            });
        let mut upserts: BTreeMap<ObjectKind, usize> = BTreeMap::new();
        // A kind that holds nothing yet and that the change deletes nothing of (a whole
        // site's first import) is built once from its upserts: a B-tree built in bulk from
        // sorted entries is full and costs a sort of already sorted ids, where 140,000
        // inserts one by one cost a search each and left it half full. The last upsert of
        // an id wins, as it does in place. (Delivery groups are kept out: an upsert
        // reads the group's earlier upsert for its reuse flag.)
        let deletes: std::collections::BTreeSet<ObjectKind> = change
            .ops
            .iter()
            .filter_map(|op| match op {
                ConfigOp::Delete(r) => Some(r.kind),
                ConfigOp::Upsert(_) => None,
            })
            .collect();
        // Upserts of each kind, so a kind built in bulk gets its vector at its full size at
        // once: grown by doubling, 100,000 users' entries were copied again and again
        // (about a tenth of a whole site's import, measured).
        let mut sizes: BTreeMap<ObjectKind, usize> = BTreeMap::new();
        for op in &change.ops {
            if let ConfigOp::Upsert(object) = op {
                *sizes.entry(object.kind()).or_default() += 1;
            }
        }
        let mut bulk: BTreeMap<ObjectKind, Vec<(String, Stored)>> = BTreeMap::new();
        for op in change.ops {
            match op {
                ConfigOp::Upsert(mut object) => {
                    self.resolve_reuse_flag(&mut object, default_reuse);
                    let kind = object.kind();
                    *upserts.entry(kind).or_default() += 1;
                    let id = object.id().to_string();
                    self.index(kind, &id, Some(&object));
                    let stored = Stored {
                        object,
                        introduced_by: introduced_by.clone(),
                    };
                    let in_bulk = bulk.contains_key(&kind)
                        || (kind != ObjectKind::DeliveryGroup
                            && self.objects.get(&kind).is_none_or(BTreeMap::is_empty)
                            && !deletes.contains(&kind));
                    if in_bulk {
                        bulk.entry(kind)
                            .or_insert_with(|| {
                                Vec::with_capacity(sizes.get(&kind).copied().unwrap_or(0))
                            })
                            .push((id, stored));
                    } else {
                        self.objects.entry(kind).or_default().insert(id, stored);
                    }
                }
                ConfigOp::Delete(r) => {
                    if let Some(objects) = self.objects.get_mut(&r.kind) {
                        objects.remove(&r.id);
                    }
                    self.index(r.kind, &r.id, None);
                    self.deleted
                        .entry(r.kind)
                        .or_default()
                        .insert(r.id.to_lowercase(), introduced_by.clone());
                }
            }
        }
        for (kind, entries) in bulk {
            // `collect` sorts stably and keeps the last of equal ids.
            upserts.remove(&kind);
            self.objects.insert(kind, entries.into_iter().collect());
        }
        // A B-tree filled in key order (a whole site's import is sorted) splits its nodes
        // half full; rebuilt from its sorted entries, they are full. For 40,000 VDAs that is
        // ~8 MB less, and the iteration order, hence every digest, is the same.
        for (kind, count) in upserts {
            if let Some(objects) = self.objects.get_mut(&kind) {
                if count >= COMPACT_AFTER_UPSERTS && count * 2 >= objects.len() {
                    *objects = std::mem::take(objects).into_iter().collect();
                }
            }
        }
        self.version = change.version;
    }

    /// §2.1: a group upserted without `reuse_machines_without_shutdown_in_outage` keeps the
    /// value it had (an upsert replaces the whole object, but not this flag), or, when it is
    /// new, takes the site's default as of this change. Resolving it here, once, is what
    /// keeps a later change of the site default from changing existing groups.
    fn resolve_reuse_flag(&self, object: &mut ConfigObject, default_reuse: bool) {
        let ConfigObject::DeliveryGroup { id, data } = object else {
            return;
        };
        if data.reuse_machines_without_shutdown_in_outage.is_some() {
            return;
        }
        let earlier = match self.get(ObjectKind::DeliveryGroup, id).map(|s| &s.object) {
            Some(ConfigObject::DeliveryGroup { data, .. }) => {
                data.reuse_machines_without_shutdown_in_outage
            }
            _ => None,
        };
        data.reuse_machines_without_shutdown_in_outage = Some(earlier.unwrap_or(default_reuse));
    }

    /// Keeps the lookup maps of records' names in step with an upsert (`Some`) or delete.
    fn index(&mut self, kind: ObjectKind, id: &str, object: Option<&ConfigObject>) {
        if !matches!(kind, ObjectKind::Connector | ObjectKind::Machine) {
            return;
        }
        let key = id.to_lowercase();
        match (kind, object) {
            (ObjectKind::Connector, Some(_)) => {
                self.connector_ids.insert(key, id.to_string());
            }
            (ObjectKind::Connector, None)
                if self
                    .connector_ids
                    .get(&key)
                    .is_some_and(|exact| exact == id) =>
            {
                self.connector_ids.remove(&key);
            }
            (ObjectKind::Machine, Some(ConfigObject::Machine { data, .. })) => {
                let zone = data.zone.to_lowercase();
                let zone = match self.zone_names.iter().position(|z| *z == zone) {
                    Some(i) => i as u32,
                    None => {
                        self.zone_names.push(zone);
                        (self.zone_names.len() - 1) as u32
                    }
                };
                let entry = MachineRef {
                    id: id.to_string(),
                    zone,
                };
                self.machine_ids.insert(key.into(), entry);
            }
            (ObjectKind::Machine, _)
                if self
                    .machine_ids
                    .get(key.as_str())
                    .is_some_and(|m| m.id == id) =>
            {
                self.machine_ids.remove(key.as_str());
            }
            _ => {}
        }
    }

    /// The object of `kind` with exactly this id.
    pub fn get(&self, kind: ObjectKind, id: &str) -> Option<&Stored> {
        self.objects.get(&kind)?.get(id)
    }

    /// Objects of one kind, in id order.
    pub fn of_kind(&self, kind: ObjectKind) -> impl Iterator<Item = &Stored> {
        self.objects.get(&kind).into_iter().flat_map(|m| m.values())
    }

    /// Every object, in (kind, id) order.
    pub fn all(&self) -> impl Iterator<Item = &Stored> {
        self.objects.values().flat_map(|m| m.values())
    }

    /// Number of objects.
    pub fn len(&self) -> u64 {
        self.objects.values().map(|m| m.len() as u64).sum()
    }

    /// Whether no object exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The exact id of a connector named by a record (case-insensitive).
    pub fn connector_id(&self, name: &str) -> Option<&str> {
        resolve(&self.connector_ids, name)
    }

    /// The exact id of a machine named by a record (case-insensitive).
    pub fn machine_id(&self, name: &str) -> Option<&str> {
        self.machine(name).map(|m| m.id.as_str())
    }

    /// The index in `zone_names` of a lowercased zone id, if a machine named it.
    pub(crate) fn zone_index(&self, zone: &str) -> Option<u32> {
        self.zone_names
            .iter()
            .position(|z| z == zone)
            .map(|i| i as u32)
    }

    /// The lowercased zone id of an index in `zone_names`.
    pub fn zone_name(&self, index: u32) -> &str {
        &self.zone_names[index as usize]
    }

    /// A machine named by a record (case-insensitive): exact id and zone.
    pub fn machine(&self, name: &str) -> Option<&MachineRef> {
        self.machine_ids
            .get(name)
            .or_else(|| self.machine_ids.get(name.to_lowercase().as_str()))
    }

    /// The zone id of a connector.
    pub fn connector_zone(&self, connector: &str) -> Option<&str> {
        match &self.get(ObjectKind::Connector, connector)?.object {
            ConfigObject::Connector { data, .. } => Some(&data.zone),
            _ => None,
        }
    }

    /// Connectors of a zone (zone ids compare case-insensitively), in id order.
    pub fn zone_connectors<'a>(&'a self, zone: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.of_kind(ObjectKind::Connector)
            .filter_map(move |s| match &s.object {
                ConfigObject::Connector { id, data } if data.zone.eq_ignore_ascii_case(zone) => {
                    Some(id.as_str())
                }
                _ => None,
            })
    }

    /// The zone id of a machine.
    pub fn machine_zone(&self, machine: &str) -> Option<&str> {
        match &self.get(ObjectKind::Machine, machine)?.object {
            ConfigObject::Machine { data, .. } => Some(&data.zone),
            _ => None,
        }
    }

    /// The site settings (defaults when no site object exists).
    pub fn site(&self) -> crate::config::SiteData {
        match self.get(ObjectKind::Site, "site").map(|s| &s.object) {
            Some(ConfigObject::Site { data, .. }) => data.clone(),
            _ => crate::config::SiteData::default(),
        }
    }
}

/// Looks a name up exactly (the common case, no allocation), then lowercased.
pub fn resolve<'a>(map: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    map.get(name)
        .or_else(|| map.get(&name.to_lowercase()))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored object reads as the derived type reads it, whatever its keys' order: the
    /// kind-first path (as serde writes it) and the other orders agree, and both refuse
    /// what the derived type refuses.
    #[test]
    fn stored_objects_read_as_the_derived_type_does() {
        let provenance = r#""introduced_by":{"offset":3,"version":2}"#;
        for object in [
            r#"{"kind":"machine","id":"m1","data":{"zone":"z1","delivery_group":"g"}}"#,
            r#"{"id":"m1","kind":"machine","data":{"zone":"z1","delivery_group":"g"}}"#,
            r#"{"data":{"zone":"z1","delivery_group":"g"},"id":"m1","kind":"machine"}"#,
            r#"{"kind":"user","id":"alice"}"#,
            r#"{"id":"alice","kind":"user"}"#,
            r#"{"kind":"site","data":{"lhc_enabled":false},"id":"site"}"#,
        ] {
            let text = format!(r#"{{"object":{object},{provenance}}}"#);
            let stored: Stored = serde_json::from_str(&text).unwrap();
            let derived: ConfigObject = serde_json::from_str(object).unwrap();
            assert_eq!(stored.object, derived, "{object}");
            let again = serde_json::to_string(&stored).unwrap();
            assert_eq!(serde_json::from_str::<Stored>(&again).unwrap(), stored);
        }
        for bad in [
            r#"{"kind":"machine","id":"m1"}"#,
            r#"{"kind":"machine","data":{"zone":"z1","delivery_group":"g"}}"#,
            r#"{"kind":"user","id":"alice","colour":"red"}"#,
            r#"{"id":"alice","kind":"user","colour":"red"}"#,
            r#"{"kind":"user","id":"alice","id":"bob"}"#,
            r#"{"id":"alice","kind":"user","id":"bob"}"#,
            r#"{"id":"m1","kind":"user","kind":"group"}"#,
            r#"{"data":{},"kind":"site","data":{},"id":"site"}"#,
            r#"{"kind":"user","kind":"group","id":"alice"}"#,
            r#"{"kind":"planet","id":"mars"}"#,
            r#"{"kind":{"user":null},"id":"alice"}"#,
            r#"{"id":"alice"}"#,
            r#"{}"#,
        ] {
            let text = format!(r#"{{"object":{bad},{provenance}}}"#);
            assert!(serde_json::from_str::<Stored>(&text).is_err(), "{bad}");
            assert!(serde_json::from_str::<ConfigObject>(bad).is_err(), "{bad}");
        }
        // Stricter than the derived type in one form lhc never writes: an object as an
        // array of its values (the derived enum reads its tag from the first element).
        let array = r#"["user","alice"]"#;
        assert!(serde_json::from_str::<ConfigObject>(array).is_ok());
        let text = format!(r#"{{"object":{array},{provenance}}}"#);
        assert!(serde_json::from_str::<Stored>(&text).is_err());
    }
}
