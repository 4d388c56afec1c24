//! Typed events (issue 19): every event of every scenario's expected outputs reads back as
//! an `EventKind` that rebuilds the very same event (id, source, level, message, data), so
//! the wire form is what it was; and the scenarios between them emit every kind.

use std::collections::BTreeSet;
use std::path::PathBuf;

use lhc_engine::Output;

#[test]
fn every_event_of_the_scenarios_round_trips_through_its_kind() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut ids = BTreeSet::new();
    let mut events = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".expected.jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let Output::Event(event) = serde_json::from_str::<Output>(line).unwrap() else {
                continue;
            };
            let kind = event
                .kind()
                .unwrap_or_else(|| panic!("{}: no kind for {line}", path.display()));
            assert_eq!(kind.id(), event.event_id);
            assert_eq!(kind.into_event(event.ts, &event.connector), event, "{line}");
            ids.insert(event.event_id);
            events += 1;
        }
    }
    assert!(events > 100);
    let all: BTreeSet<u32> = [
        503, 504, 505, 507, 510, 517, 518, 3001, 3002, 3003, 3502, 3503, 3504, 3507, 3508, 3509,
        3510,
    ]
    .into();
    let missing: Vec<_> = all.difference(&ids).collect();
    assert!(missing.is_empty(), "no scenario emits {missing:?}");
}

#[test]
fn an_id_with_data_the_engine_never_pairs_has_no_kind() {
    let line = r#"{"type":"event","ts":"2026-01-05T09:00:00.000Z","connector":"c","source":"ConfigSyncService","event_id":3001,"level":"warning","message":"x","data":{}}"#;
    let Output::Event(event) = serde_json::from_str::<Output>(line).unwrap() else {
        panic!("an event");
    };
    // 3001 is the Remote Broker Provider's, not the Config Synchronizer's.
    assert_eq!(event.kind(), None);
}
