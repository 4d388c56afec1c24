//! A record long after the previous one while a zone is in LHC mode makes tens of thousands
//! of 3507/3509 reports before it (R-STATE-9). The fold applies it in steps and commits
//! each, so neither memory nor a WriteBatch holds them all; a crash after any of those
//! commits loses and duplicates nothing: the store ends with the outputs of a replay, each
//! at its (offset, index), and the replay's state.

use lhc_engine::{decode_record_at, Engine, CATCH_UP_STEP};
use lhc_log::LogEntry;
use lhc_node::{Folder, Store, StoreOptions};

/// The split-brain scenario (its zone in LHC mode to the end), then a tick 40 days later.
fn log_with_gap() -> Vec<Vec<u8>> {
    let scenario = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../engine/tests/scenarios/r-elect-4-split-brain-launches.jsonl"
    ))
    .unwrap();
    let mut lines: Vec<Vec<u8>> = scenario.lines().map(|l| l.as_bytes().to_vec()).collect();
    lines.push(br#"{"ts":"2026-02-14T09:00:00.000Z","type":"clock.tick"}"#.to_vec());
    lines
}

#[test]
fn a_long_gap_is_committed_in_steps_and_survives_a_crash_after_each() {
    crash_after_each_step(|i| i);
}

/// Offsets need not be dense: a Kafka partition shared by sites gives one site's records
/// offsets with holes, and a commit taken part-way names the record's own offset.
#[test]
fn steps_keep_the_record_offset_when_offsets_have_holes() {
    crash_after_each_step(|i| 5 + 3 * i);
}

fn crash_after_each_step(offset_of: fn(u64) -> u64) {
    let lines = log_with_gap();
    // The reference: every output with its (offset, index), and the final digest.
    let mut engine = Engine::new();
    let mut expected = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let offset = offset_of(i as u64);
        let mut out = Vec::new();
        engine.apply(offset, decode_record_at(line, offset), &mut out);
        for (index, o) in out.iter().enumerate() {
            expected.push((offset, index as u32, serde_json::to_value(o).unwrap()));
        }
    }
    assert!(expected.len() > 4 * CATCH_UP_STEP, "{}", expected.len());

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let mut folder = Folder::open(&store).unwrap();
    let mut crashes = 0;
    let mut i = 0;
    while i < lines.len() {
        let offset = offset_of(i as u64);
        folder.apply(&LogEntry {
            offset,
            bytes: lines[i].clone(),
        });
        if folder.in_progress() {
            // One step committed, then a crash: what is not committed is gone, and the
            // node starts again from the store, at the same record.
            folder.commit().unwrap();
            drop(folder);
            folder = Folder::open(&store).unwrap();
            assert_eq!(folder.next(), offset, "the record is not applied yet");
            crashes += 1;
            continue;
        }
        assert_eq!(folder.next(), offset + 1);
        i += 1;
    }
    folder.commit().unwrap();
    assert!(crashes >= 4, "{crashes} steps");

    let stored: Vec<(u64, u32, serde_json::Value)> = store
        .outputs_after(None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(o, i, bytes)| (o, i, serde_json::from_slice(&bytes).unwrap()))
        .collect();
    assert_eq!(stored.len(), expected.len());
    assert!(
        stored == expected,
        "the replay's outputs, each at its place"
    );
    let (loaded, next) = store.load().unwrap();
    assert_eq!(next, offset_of(lines.len() as u64 - 1) + 1);
    assert_eq!(loaded.digest(), engine.digest());
}

#[test]
fn a_fold_resumed_after_steps_matches_one_without() {
    let lines = log_with_gap();
    let fold = |commit_each_step: bool| {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut folder = Folder::open(&store).unwrap();
        for (offset, bytes) in lines.iter().enumerate() {
            folder.apply(&LogEntry {
                offset: offset as u64,
                bytes: bytes.clone(),
            });
            while folder.in_progress() {
                if commit_each_step {
                    folder.commit().unwrap();
                }
                folder.resume();
            }
        }
        folder.commit().unwrap();
        let outputs = store.outputs_after(None, usize::MAX).unwrap();
        (outputs, store.load().unwrap().0.digest())
    };
    assert!(fold(true) == fold(false));
}
