//! A store is folded on only from the log it was folded from: the hash of the record it
//! applied last is kept in its meta and checked against the log given, so a store with no
//! checkpoint yet is refused another log too, even one sharing its first records (two
//! scenario logs of one site).

use std::path::Path;

use lhc_log::{EmbeddedLog, Log};
use lhc_node::checkpoints::CheckpointPolicy;
use lhc_node::{NodeError, Store, StoreOptions};

mod common;
use common::{log_of, scenario};

fn fold(data: &Path, log: &EmbeddedLog) -> Result<u64, NodeError> {
    let store = Store::open(data, &StoreOptions::default())?;
    let (summary, _) = lhc_node::fold(&store, log, 7, None, &CheckpointPolicy::off())?;
    Ok(summary.next)
}

#[test]
fn a_store_without_checkpoints_refuses_another_log_and_goes_on_with_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (scenario("r-css-4.jsonl"), scenario("r-css-2.jsonl"));
    assert_eq!(a[0], b[0], "the two logs share their first record");
    let half = a.len() / 2;
    let log_a = log_of(&tmp.path().join("a"), &a[..half]);
    let log_b = log_of(&tmp.path().join("b"), &b);
    let data = tmp.path().join("data");
    assert_eq!(fold(&data, &log_a).unwrap(), half as u64);

    // Another log is refused before anything is applied, and the store is as it was.
    let refused = fold(&data, &log_b).unwrap_err();
    assert!(matches!(refused, NodeError::OtherSource(_)), "{refused}");
    assert!(
        refused
            .to_string()
            .contains("was folded from another log than"),
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .contains(&format!("offset {}", half - 1)),
        "{refused}"
    );
    assert_eq!(
        Store::open_read_only(&data).unwrap().load().unwrap().1,
        half as u64
    );

    // Its own log, grown, folds on to the digest of a fold from scratch.
    let rest: Vec<&[u8]> = a[half..].iter().map(Vec::as_slice).collect();
    log_a.append(&rest).unwrap();
    assert_eq!(fold(&data, &log_a).unwrap(), a.len() as u64);
    let whole = tmp.path().join("whole");
    fold(&whole, &log_a).unwrap();
    let digest = |dir: &Path| {
        Store::open_read_only(dir)
            .unwrap()
            .load()
            .unwrap()
            .0
            .digest()
    };
    assert_eq!(digest(&data), digest(&whole));

    // A log shorter than what the store applied is refused as another log (or one that
    // lost records), and the store stays as it was.
    let other = scenario("r-css-3-episode-ended.jsonl");
    let log_c = log_of(&tmp.path().join("c"), &other[..3]);
    let refused = fold(&data, &log_c).unwrap_err();
    assert!(matches!(refused, NodeError::OtherSource(_)), "{refused}");
    assert!(
        refused
            .to_string()
            .contains(&format!("has applied {} records, more than", a.len())),
        "{refused}"
    );
    assert_eq!(digest(&data), digest(&whole));
}
