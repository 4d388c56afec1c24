//! A checkpoint due before a fold's resume point that the store does not hold (handed to
//! the writer when the fold was killed before it was written, or not taken at all) is
//! taken at the first record of the next fold, so a kill never leaves `query --at` more
//! than `every` records to replay from the newest checkpoint.

use std::path::Path;

use lhc_node::checkpoints::CheckpointPolicy;
use lhc_node::{Store, StoreOptions};

mod common;
use common::{log_of, scenario};

fn fold(data: &Path, log: &lhc_log::EmbeddedLog, every: u64) -> Vec<u64> {
    let store = Store::open(data, &StoreOptions::default()).unwrap();
    let policy = CheckpointPolicy {
        every,
        keep: 100,
        build: "test".into(),
    };
    lhc_node::fold(&store, log, 3, None, &policy).unwrap();
    store
        .checkpoints()
        .unwrap()
        .into_iter()
        .map(|(next, _)| next)
        .collect()
}

#[test]
fn a_checkpoint_missed_before_the_resume_point_is_taken_at_the_next_record() {
    let tmp = tempfile::tempdir().unwrap();
    let records = scenario("r-css-4.jsonl");
    let every = 5u64;
    let n = records.len() as u64;
    assert!(n > 3 * every, "{n} records");
    let cut = 2 * every + 3;
    let log = log_of(&tmp.path().join("log"), &records[..cut as usize]);
    let data = tmp.path().join("data");
    // The first fold takes none (as one killed before its writer wrote them).
    assert!(fold(&data, &log, 0).is_empty());
    let rest: Vec<&[u8]> = records[cut as usize..].iter().map(Vec::as_slice).collect();
    lhc_log::Log::append(&log, &rest).unwrap();
    let taken = fold(&data, &log, every);
    let mut expected = vec![cut + 1];
    expected.extend((3..=n / every).map(|k| k * every));
    assert_eq!(taken, expected);
    // It holds the state a fold of exactly those records from scratch has.
    let retaken = Store::open_read_only(&data)
        .unwrap()
        .checkpoint(cut + 1)
        .unwrap()
        .expect("held");
    let (header, _) = lhc_log::checkpoint::split(&retaken).unwrap();
    let prefix = log_of(&tmp.path().join("prefix"), &records[..(cut + 1) as usize]);
    let scratch = tmp.path().join("scratch");
    let store = Store::open(&scratch, &StoreOptions::default()).unwrap();
    let (_, engine) = lhc_node::fold(&store, &prefix, 3, None, &CheckpointPolicy::off()).unwrap();
    assert_eq!(
        (header.next_offset, header.digest),
        (cut + 1, engine.digest())
    );

    // A fold resuming where the newest checkpoint is due and held takes none early.
    let again = tmp.path().join("again");
    let first = log_of(&tmp.path().join("log2"), &records[..(3 * every) as usize]);
    assert_eq!(
        fold(&again, &first, every),
        vec![every, 2 * every, 3 * every]
    );
    let more: Vec<&[u8]> = records[(3 * every) as usize..]
        .iter()
        .map(Vec::as_slice)
        .collect();
    lhc_log::Log::append(&first, &more).unwrap();
    let taken = fold(&again, &first, every);
    assert_eq!(
        taken,
        (1..=n / every).map(|k| k * every).collect::<Vec<_>>()
    );
}
