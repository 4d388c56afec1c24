//! What a checkpoint says of its records besides the state (the quarantine count, the
//! times) is committed with every commit and goes on after a restart; when commits went on
//! without it (an earlier build ran on the store), the node takes no checkpoints rather
//! than write headers that no longer describe their records.

use lhc_engine::decode_record_at;
use lhc_log::LogEntry;
use lhc_node::{Folder, JournalChanges, Store, StoreOptions};

fn records() -> Vec<Vec<u8>> {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/examples/site-outage.jsonl"
    ))
    .unwrap()
    .lines()
    .map(|l| l.as_bytes().to_vec())
    .collect()
}

/// Folds `lines[from..to]` committing each record, with checkpoints every `every`; how many
/// checkpoints were handed over.
fn fold(store: &Store, lines: &[Vec<u8>], to: usize, every: u64) -> usize {
    let (sender, jobs) = std::sync::mpsc::sync_channel(1000);
    let mut folder = Folder::open(store).unwrap();
    folder.take_checkpoints(every, sender);
    while (folder.next() as usize) < to {
        let offset = folder.next();
        folder.apply(&LogEntry {
            offset,
            bytes: lines[offset as usize].clone(),
        });
        while folder.in_progress() {
            folder.commit().unwrap();
            folder.resume();
        }
        folder.commit().unwrap();
    }
    drop(folder);
    jobs.into_iter().count()
}

#[test]
fn coverage_goes_on_across_restarts_and_a_stale_one_stops_checkpoints() {
    let lines = records();
    assert!(lines.len() >= 40, "{}", lines.len());
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    assert_eq!(fold(&store, &lines, 13, 5), 2, "after 5 and 10");
    // (The jobs handed over are never written to the store here, as when a fold is killed
    // before its writer wrote them: the one due at 10 is taken again at the first record.)
    assert_eq!(fold(&store, &lines, 26, 5), 4, "after 14, 15, 20 and 25");
    let (at, coverage) = store.coverage().unwrap().unwrap();
    assert_eq!(at, 26);
    let last: serde_json::Value = serde_json::from_slice(&lines[25]).unwrap();
    assert_eq!(
        serde_json::to_value(coverage.last_ts).unwrap(),
        last["ts"],
        "the last record's time"
    );

    // A commit that does not count (as an earlier build's): the count left behind is stale.
    let (mut engine, next) = store.load().unwrap();
    let mut out = Vec::new();
    engine.apply(
        next,
        decode_record_at(&lines[next as usize], next),
        &mut out,
    );
    store
        .commit(&mut engine, next + 1, &[], &JournalChanges::default(), None)
        .unwrap();
    assert_eq!(
        fold(&store, &lines, 40, 5),
        0,
        "no checkpoint from a stale count"
    );
}
