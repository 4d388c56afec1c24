//! The engine state is stored as one row per object (issue 15, item 6): a commit writes the
//! rows its records changed and deletes the rows of objects gone, instead of rewriting the
//! whole state, and what the store holds is always the state folded so far.

use std::path::PathBuf;

use lhc_engine::build::{self, records, SiteBuilder};
use lhc_engine::config::DeliveryGroupKind;
use lhc_engine::rows::is_entry_row;
use lhc_engine::Engine;
use lhc_log::LogEntry;
use lhc_node::{Folder, Store, StoreOptions};

fn lines(path: PathBuf) -> Vec<Vec<u8>> {
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| l.as_bytes().to_vec())
        .collect()
}

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Bytes of the whole state as rows: what a commit wrote before rows.
fn whole(engine: &Engine) -> usize {
    let mut bytes = 0;
    engine.for_each_state_row(|k, v| bytes += k.len() + v.len());
    bytes
}

/// The rows of the store's layout the store follows one by one (all but the R-DATA
/// entries): what `RowStats::rows` counts.
fn followed_rows(engine: &Engine) -> usize {
    let mut rows = 0;
    engine.for_each_store_row(|key, _| rows += usize::from(!is_entry_row(key)));
    rows
}

/// The keys of the state's rows in the store's layout, in key order.
fn store_row_keys(engine: &Engine) -> Vec<Box<[u8]>> {
    let mut keys = Vec::new();
    engine.for_each_store_row(|key, _| keys.push(Box::from(key)));
    keys.sort();
    keys
}

/// Folds `records` committing after each one; after every commit the store loads back the
/// folded state. Returns (bytes written, bytes a whole-state commit would have written,
/// rows deleted).
fn fold_one_by_one(records: &[Vec<u8>]) -> (usize, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let mut folder = Folder::open(&store).unwrap();
    let (mut written, mut full, mut deleted) = (0, 0, 0);
    for (offset, bytes) in records.iter().enumerate() {
        folder.apply(&LogEntry {
            offset: offset as u64,
            bytes: bytes.clone(),
        });
        folder.commit().unwrap();
        let stats = store.row_stats();
        let engine = folder.engine();
        let engine = engine.read().unwrap();
        assert_eq!(
            stats.rows,
            followed_rows(&engine),
            "offset {offset}: the store holds every row"
        );
        assert_eq!(
            store.state_row_keys().unwrap(),
            store_row_keys(&engine),
            "offset {offset}: the store holds the state's rows and no other"
        );
        assert!(stats.written <= followed_rows(&engine));
        written += stats.bytes;
        full += whole(&engine);
        deleted += stats.deleted;
        let (loaded, next) = store.load().unwrap();
        assert_eq!(next, offset as u64 + 1);
        assert_eq!(
            loaded.digest(),
            engine.digest(),
            "offset {offset}: the stored rows are the folded state"
        );
    }
    (written, full, deleted)
}

#[test]
fn commits_write_what_changed_and_the_store_always_holds_the_folded_state() {
    let example = lines(repo("docs/examples/site-outage.jsonl"));
    let (written, full, deleted) = fold_one_by_one(&example);
    // The example is small (two connectors, twenty machines) and most of its records are
    // a connector's health check or probe, which rewrites that connector's row: still a
    // fraction of the whole state (the big site below shows the scale where it matters).
    assert!(
        written * 3 < full,
        "rows written {written} bytes, whole states {full} bytes"
    );
    // Objects come and go (sessions end, brokering pools of an episode close): their rows
    // are deleted, and the loads above prove no stale row stays behind.
    let mut deleted_somewhere = deleted;
    for name in ["r-state-10.jsonl", "r-state-8.jsonl", "r-reg-1.jsonl"] {
        let path = repo("engine/tests/scenarios").join(name);
        deleted_somewhere += fold_one_by_one(&lines(path)).2;
    }
    assert!(deleted_somewhere > 0, "some row was deleted along the way");
}

#[test]
fn a_reopened_store_resumes_from_its_rows() {
    let example = lines(repo("docs/examples/site-outage.jsonl"));
    let dir = tempfile::tempdir().unwrap();
    let mut reference = Engine::new();
    for (offset, bytes) in example.iter().enumerate() {
        let mut out = Vec::new();
        reference.apply(
            offset as u64,
            lhc_engine::decode_record_at(bytes, offset as u64),
            &mut out,
        );
        // A process every 50 records.
        if offset % 50 == 0 || offset + 1 == example.len() {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            let mut folder = Folder::open(&store).unwrap();
            for (o, b) in example
                .iter()
                .enumerate()
                .skip(folder.next() as usize)
                .take(offset + 1 - folder.next() as usize)
            {
                folder.apply(&LogEntry {
                    offset: o as u64,
                    bytes: b.clone(),
                });
            }
            folder.commit().unwrap();
        }
    }
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let (loaded, next) = store.load().unwrap();
    assert_eq!(next, example.len() as u64);
    assert_eq!(loaded.digest(), reference.digest());
}

/// Folds `records` as a live node does: every `every` records a commit job (a copy of what
/// changed since the previous job) written as the committer thread writes it, every fifth
/// write a whole commit instead, and half-way a restart (the store and folder opened
/// again). After every write the store holds every row of the folded state; every third
/// write and the last, a second, read-only, store reads the state back (a load by the
/// writing store would replace what it knows it wrote, which the next job relies on) and
/// its digest is the engine's. Returns the rows deleted by jobs.
fn fold_with_jobs(records: &[Vec<u8>], every: usize) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let mut folder = Folder::open(&store).unwrap();
    let (mut deleted, mut writes) = (0, 0);
    for (offset, bytes) in records.iter().enumerate() {
        if offset == records.len() / 2 {
            drop(folder);
            drop(store);
            store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            folder = Folder::open(&store).unwrap();
            assert_eq!(folder.next(), offset as u64 / every as u64 * every as u64);
            // What the restart lost is folded again.
            for (o, b) in records
                .iter()
                .enumerate()
                .take(offset)
                .skip(folder.next() as usize)
            {
                folder.apply(&LogEntry {
                    offset: o as u64,
                    bytes: b.clone(),
                });
            }
        }
        folder.apply(&LogEntry {
            offset: offset as u64,
            bytes: bytes.clone(),
        });
        if (offset + 1) % every != 0 && offset + 1 != records.len() {
            continue;
        }
        writes += 1;
        if writes % 5 == 0 {
            // A commit by the folder itself between jobs (as `connector fold` makes): it
            // takes what changed since the previous job, as a job does.
            folder.commit().unwrap();
        } else if let Some(job) = folder.commit_job() {
            store.write_job(&job).unwrap();
            deleted += store.row_stats().deleted;
        }
        let engine = folder.engine();
        let engine = engine.read().unwrap();
        assert_eq!(
            store.row_stats().rows,
            followed_rows(&engine),
            "offset {offset}: the store holds every row"
        );
        if writes % 3 == 0 || offset + 1 == records.len() {
            let reader = Store::open_read_only(dir.path()).unwrap();
            assert_eq!(
                reader.state_row_keys().unwrap(),
                store_row_keys(&engine),
                "offset {offset}, a job every {every}: the store holds the state's rows and \
                 no other"
            );
            let (loaded, next) = reader.load().unwrap();
            assert_eq!(next, offset as u64 + 1);
            assert_eq!(
                loaded.digest(),
                engine.digest(),
                "offset {offset}, a job every {every}: the stored rows are the folded state"
            );
        }
    }
    deleted
}

/// A live node's commit copies only what changed since its previous commit (issue 20): on
/// every scenario log, with a job after every record and after every few, what the store
/// holds after each write is the state folded so far, objects gone included.
#[test]
fn commit_jobs_copy_what_changed_and_the_store_always_holds_the_folded_state() {
    let mut logs = vec![repo("docs/examples/site-outage.jsonl")];
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(repo("engine/tests/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.ends_with(".jsonl") && !name.ends_with(".expected.jsonl")
        })
        .collect();
    scenarios.sort();
    assert!(scenarios.len() > 50, "{} scenario logs", scenarios.len());
    logs.extend(scenarios);
    let mut deleted = 0;
    for log in &logs {
        let records = lines(log.clone());
        for every in [1, 5] {
            deleted += fold_with_jobs(&records, every);
        }
    }
    assert!(deleted > 0, "some job deleted a row along the way");
}

/// A site of `machines` VDAs in one zone with two connectors, each VDA heartbeating once.
fn site(machines: usize) -> Vec<Vec<u8>> {
    let mut site = SiteBuilder::new()
        .site(Default::default())
        .zone("z")
        .connector("cc1.example", "z")
        .connector("cc2.example", "z")
        .group("g", DeliveryGroupKind::MultiSession);
    let name = |m: usize| format!("vda-{m:05}.example");
    for m in 0..machines {
        site = site.machine(&name(m), "z", "g", None);
    }
    let t0 = lhc_engine::Ts::parse("2026-01-05T09:00:00.000Z").unwrap();
    let at = |ms: i64| lhc_engine::Ts(t0.millis() + ms);
    let mut lines = vec![build::line(&site.change(at(0), 1))];
    for m in 0..machines {
        let heartbeat = records::heartbeat(at(10 + m as i64), &name(m), &[]);
        lines.push(build::line(&heartbeat));
    }
    lines
}

/// At the scale where it matters: once 2,000 VDAs have registered, a commit of ten
/// heartbeats writes about ten machine rows, not the state of all 2,000.
#[test]
fn a_commit_of_a_few_heartbeats_on_a_big_site_writes_a_few_rows() {
    let records = site(2_000);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let mut folder = Folder::open(&store).unwrap();
    let mut late = Vec::new();
    for (offset, bytes) in records.iter().enumerate() {
        folder.apply(&LogEntry {
            offset: offset as u64,
            bytes: bytes.clone(),
        });
        if offset % 10 == 0 {
            folder.commit().unwrap();
            if offset >= 1_800 {
                late.push(store.row_stats());
            }
        }
    }
    let engine = folder.engine();
    let full = whole(&engine.read().unwrap());
    assert!(late.len() >= 19);
    for stats in &late {
        assert!(stats.rows > 2_000, "{stats:?}");
        // Ten machines, the connectors that registered them, the clock.
        assert!(stats.written <= 20, "{stats:?}");
        assert!(
            stats.bytes * 20 < full,
            "{stats:?}, whole state {full} bytes"
        );
    }
    let (loaded, _) = store.load().unwrap();
    assert_eq!(loaded.digest(), engine.read().unwrap().digest());
}

/// R-DATA at the scale where it matters (issue 20): once 2,000 users have launched through
/// a connector, a commit job after ten more launches writes their entries (ten recent
/// users, their client), not the connector's whole maps; and the store loads back the state.
#[test]
fn a_commit_of_a_few_launches_writes_their_r_data_entries_not_the_whole_maps() {
    let users = 2_000;
    let mut site = SiteBuilder::new()
        .site(Default::default())
        .zone("z")
        .connector("cc1.example", "z")
        .group("g", DeliveryGroupKind::MultiSession)
        .application("app", &["g"])
        .user_group("staff")
        .entitlement("e", "app", &["staff"]);
    for m in 0..20 {
        site = site.machine(&format!("vda-{m:02}.example"), "z", "g", Some(500));
    }
    for u in 0..users {
        site = site.user(&format!("user{u:05}"), &["staff"]);
    }
    let t0 = lhc_engine::Ts::parse("2026-01-05T09:00:00.000Z").unwrap();
    let at = |ms: i64| lhc_engine::Ts(t0.millis() + ms);
    let mut lines = vec![build::line(&site.change(at(0), 1))];
    lines.push(build::line(&records::storefront(
        at(1),
        "cc1.example",
        "sf1",
    )));
    for m in 0..20 {
        let heartbeat = records::heartbeat(at(2 + m), &format!("vda-{m:02}.example"), &[]);
        lines.push(build::line(&heartbeat));
    }
    for u in 0..users {
        let launch = records::launch(
            at(100 + u as i64),
            &format!("r{u}"),
            "cc1.example",
            &format!("user{u:05}"),
            "app",
        );
        lines.push(build::line(&launch));
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let mut folder = Folder::open(&store).unwrap();
    let mut late = Vec::new();
    // The last ten launches wait for a restart.
    let (before, after) = lines.split_at(lines.len() - 10);
    for (offset, bytes) in before.iter().enumerate() {
        folder.apply(&LogEntry {
            offset: offset as u64,
            bytes: bytes.clone(),
        });
        if offset % 10 == 0 || offset + 1 == before.len() {
            let job = folder.commit_job().unwrap();
            store.write_job(&job).unwrap();
            if offset >= 1_800 {
                late.push(store.row_stats());
            }
        }
    }
    assert!(late.len() >= 19);
    for stats in &late[..late.len() - 1] {
        // Ten launches: ten recent users and the one client they share.
        assert_eq!(stats.entries_written, 11, "{stats:?}");
    }
    // After a restart, the first commit (the folder's own, as `lhc connector fold` makes)
    // writes what changed since the load, not every entry again.
    drop(folder);
    drop(store);
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let mut folder = Folder::open(&store).unwrap();
    for (offset, bytes) in after.iter().enumerate() {
        folder.apply(&LogEntry {
            offset: (before.len() + offset) as u64,
            bytes: bytes.clone(),
        });
    }
    folder.commit().unwrap();
    assert_eq!(store.row_stats().entries_written, 11);
    let engine = folder.engine();
    let engine = engine.read().unwrap();
    let data = engine.lhc_data("cc1.example").unwrap();
    assert_eq!(data.recent_users.len(), users, "every launch was decided");
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.state_row_keys().unwrap(), store_row_keys(&engine));
    let (loaded, _) = reader.load().unwrap();
    assert_eq!(loaded.digest(), engine.digest());
}

/// A store records its format with every commit; a store of a later format is refused at
/// open, naming both formats.
#[test]
fn a_store_of_a_later_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let records = lines(repo("docs/examples/site-outage.jsonl"));
    {
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        assert_eq!(
            store.format().unwrap(),
            None,
            "an empty store has no format yet"
        );
        let mut folder = Folder::open(&store).unwrap();
        folder.apply(&LogEntry {
            offset: 0,
            bytes: records[0].clone(),
        });
        folder.commit().unwrap();
        assert_eq!(store.format().unwrap(), Some(lhc_node::store::STORE_FORMAT));
    }
    // What a later build would leave: its format in the meta family.
    let later = lhc_node::store::STORE_FORMAT + 1;
    {
        let mut options = rocksdb::Options::default();
        options.create_missing_column_families(true);
        let families = rocksdb::DB::list_cf(&options, dir.path()).unwrap();
        let db = rocksdb::DB::open_cf(&options, dir.path(), &families).unwrap();
        let meta = db.cf_handle("meta").unwrap();
        db.put_cf(&meta, b"store_format", later.to_be_bytes())
            .unwrap();
    }
    let error = match Store::open(dir.path(), &StoreOptions::default()) {
        Ok(_) => panic!("a store of format {later} was opened"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains(&format!("store format {later}"))
            && error.contains(&format!("up to {}", lhc_node::store::STORE_FORMAT)),
        "{error}"
    );
}

/// Each connector's recent activity (its LHC-mode lines, up to a thousand) is a row of its
/// own in the store's layout, and a delta holds it exactly when it changed since the
/// previous delta: after an outage it is not rewritten with every commit.
#[test]
fn a_delta_holds_a_connectors_activity_exactly_when_it_changed() {
    let example = lines(repo("docs/examples/site-outage.jsonl"));
    let activities = |engine: &Engine| {
        let mut all = std::collections::BTreeMap::new();
        engine.for_each_state_row(|key, _| {
            if let Some(name) = lhc_engine::rows::connector_of_row(key) {
                let lines = engine.lhc_data(name).unwrap().activity.clone();
                all.insert(name.to_string(), (*lines).clone());
            }
        });
        all
    };
    let mut engine = Engine::new();
    let (mut held, mut kept_out) = (0, 0);
    for (offset, bytes) in example.iter().enumerate() {
        let before = activities(&engine);
        engine.apply(
            offset as u64,
            lhc_engine::decode_record_at(bytes, offset as u64),
            &mut Vec::new(),
        );
        let after = activities(&engine);
        let delta = engine.take_delta();
        let mut rows = std::collections::BTreeSet::new();
        delta.for_each_row(|key, _| {
            if key[0] == b'a' {
                rows.insert(String::from_utf8(key[1..].to_vec()).unwrap());
            }
        });
        if delta.complete() {
            // Every row (the first delta, a new connector): every connector's activity.
            assert_eq!(rows.len(), after.len(), "offset {offset}");
            continue;
        }
        let changed: std::collections::BTreeSet<String> = after
            .iter()
            .filter(|(name, lines)| before.get(*name) != Some(lines))
            .map(|(name, _)| name.clone())
            .collect();
        assert_eq!(rows, changed, "offset {offset}");
        held += rows.len();
        kept_out += after.len() - rows.len();
    }
    assert!(held > 0, "the outage's launches changed some activity");
    assert!(kept_out > held, "most deltas leave the activity out");
}
