//! A fold that meets a damaged record stops there, naming it, with every good record
//! before it committed: the records read since the last commit are not dropped, so a fold
//! with big batches keeps what a fold with batches of one keeps.

use std::path::Path;

use lhc_log::EmbeddedLog;
use lhc_node::checkpoints::CheckpointPolicy;
use lhc_node::{Store, StoreOptions};

mod common;
use common::{log_of, scenario};

fn next_of(data: &Path) -> u64 {
    Store::open_read_only(data).unwrap().load().unwrap().1
}

#[test]
fn a_fold_stops_at_a_damaged_record_with_every_record_before_it_committed() {
    let tmp = tempfile::tempdir().unwrap();
    let records = scenario("r-css-4.jsonl");
    let dir = tmp.path().join("log");
    drop(log_of(&dir, &records));
    // One byte of the last record flipped (its frame's checksum no longer matches).
    let segment = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.len() - 5;
    bytes[at] ^= 0x55;
    std::fs::write(&segment, bytes).unwrap();

    let log = EmbeddedLog::open_read_only(&dir).unwrap();
    let last = records.len() as u64 - 1;
    for batch in [1, 1000] {
        let data = tmp.path().join(format!("data-{batch}"));
        let store = Store::open(&data, &StoreOptions::default()).unwrap();
        let stopped = lhc_node::fold(&store, &log, batch, None, &CheckpointPolicy::off());
        let error = stopped.expect_err("the damaged record stops the fold");
        drop(store);
        assert!(error.to_string().contains(&last.to_string()), "{error}");
        assert_eq!(next_of(&data), last, "batch {batch}: {error}");
    }
}
