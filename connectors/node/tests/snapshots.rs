//! The cache snapshot's configuration part (R-CSS-3/4 in storage): each validated config
//! version lives in its own column family, switched by the commit that starts using it and
//! dropped once nothing uses it; a family left by an interrupted import is dropped at open
//! and the last good snapshot stays in use. Reopening the store at any record gives the
//! state of an uninterrupted fold.

use lhc_engine::{decode_record_at, Engine};
use lhc_log::LogEntry;
use lhc_node::{Folder, Store, StoreOptions};

mod common;
use common::scenario;

fn families_of(engine: &Engine) -> Vec<String> {
    engine
        .validations()
        .keys()
        .map(|v| format!("snapshot-v{v}"))
        .collect()
}

/// R-CSS-4: version 2 fails to import (505); the connector keeps version 1.
#[test]
fn snapshot_families_follow_imports_and_a_reopened_store_equals_the_fold() {
    let records = scenario("r-css-4.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let mut reference = Engine::new();
    let mut seen_versions = std::collections::BTreeSet::new();
    let mut failed_imports = 0;
    for (offset, bytes) in records.iter().enumerate() {
        let offset = offset as u64;
        let mut out = Vec::new();
        reference.apply(offset, decode_record_at(bytes, offset), &mut out);
        // A process per record: open, apply one, commit, close.
        {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            let mut folder = Folder::open(&store).unwrap();
            assert_eq!(folder.next(), offset);
            folder.apply(&LogEntry {
                offset,
                bytes: bytes.clone(),
            });
            folder.commit().unwrap();
        }
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let (loaded, next) = store.load().unwrap();
        assert_eq!(next, offset + 1);
        assert_eq!(loaded.digest(), reference.digest(), "after offset {offset}");
        let mut families = store.snapshot_families();
        families.sort();
        assert_eq!(families, families_of(&reference), "after offset {offset}");
        seen_versions.extend(reference.validations().keys().copied());
        // After a failed import (505) the connector keeps its last good snapshot, whose
        // family is still there.
        for o in &out {
            if let lhc_engine::Output::Event(e) = o {
                if e.event_id == 505 {
                    let c = &reference.connectors()[&e.connector];
                    let kept = c.snapshot().expect("a fallback snapshot");
                    assert!(store
                        .snapshot_families()
                        .contains(&format!("snapshot-v{kept}")));
                    failed_imports += 1;
                }
            }
        }
    }
    assert!(failed_imports > 0, "the scenario has a 505");
    assert!(seen_versions.contains(&2));

    // An import interrupted after writing its family, before the switch: dropped at open;
    // so is a family made for a commit whose batch (the value with its switch) never
    // landed, which is empty.
    {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(false);
        let names = rocksdb::DB::list_cf(&options, dir.path()).unwrap();
        let mut db = rocksdb::DB::open_cf(&options, dir.path(), &names).unwrap();
        db.create_cf("snapshot-v99", &options).unwrap();
        let cf = db.cf_handle("snapshot-v99").unwrap();
        db.put_cf(cf, b"validation", b"half-written").unwrap();
        db.create_cf("snapshot-v98", &options).unwrap();
    }
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let mut families = store.snapshot_families();
    families.sort();
    assert_eq!(families, families_of(&reference));
    assert_eq!(store.load().unwrap().0.digest(), reference.digest());
}

/// A new version that imports replaces the old one: its family is written, switched to and
/// the old one dropped.
#[test]
fn a_successful_import_switches_to_a_fresh_family_and_drops_the_old() {
    let records = scenario("r-css-1.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let mut folder = Folder::open(&store).unwrap();
    let mut used = Vec::new();
    for (offset, bytes) in records.iter().enumerate() {
        folder.apply(&LogEntry {
            offset: offset as u64,
            bytes: bytes.clone(),
        });
        folder.commit().unwrap();
        let engine = folder.engine();
        let engine = engine.read().unwrap();
        let mut families = store.snapshot_families();
        families.sort();
        assert_eq!(families, families_of(&engine));
        let versions: Vec<u64> = engine
            .connectors()
            .values()
            .filter_map(|c| c.snapshot())
            .collect();
        if used.last() != Some(&versions) {
            used.push(versions);
        }
    }
    // The connector moved from one version to a later one, and only what is in use remains.
    assert!(used.len() >= 2, "the scenario imports twice: {used:?}");
    let engine = folder.engine();
    let last = engine.read().unwrap();
    let first_version = used.iter().flatten().min().copied().unwrap();
    if !last.validations().contains_key(&first_version) {
        assert!(!store
            .snapshot_families()
            .contains(&format!("snapshot-v{first_version}")));
    }
}
