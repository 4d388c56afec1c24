//! `lhc connector fold --follow` applies and commits records as they are appended, whatever
//! their pace: the reading thread hands over what it read as soon as nothing more is ready,
//! not only a full batch of them (which held a slowly written log's records back until the
//! appends paused).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lhc_log::Log;
use lhc_node::checkpoints::CheckpointPolicy;
use lhc_node::{Store, StoreOptions};

mod common;
use common::{log_of, scenario};

#[test]
fn a_following_fold_commits_records_appended_a_few_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let records = scenario("outage-3-connectors.jsonl");
    let (first, rest) = records.split_at(100);
    let log = log_of(&tmp.path().join("log"), first);
    let store = Store::open(tmp.path().join("data"), &StoreOptions::default()).unwrap();
    let stop = AtomicBool::new(false);
    let appended = 60;
    std::thread::scope(|scope| {
        let folding = scope.spawn(|| {
            let stopped = || stop.load(Ordering::SeqCst);
            lhc_node::fold(&store, &log, 5, Some(&stopped), &CheckpointPolicy::off())
        });
        // A record every 20 ms: the log never stays quiet for the fold's 200 ms wait.
        let mut committed_while_appending = 0;
        for record in &rest[..appended] {
            log.append(&[record.as_slice()]).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            committed_while_appending = store.committed_next();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while store.committed_next() < (100 + appended) as u64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::SeqCst);
        let (summary, _) = folding.join().unwrap().unwrap();
        assert_eq!(summary.next, (100 + appended) as u64);
        assert!(
            committed_while_appending >= 100 + appended as u64 / 2,
            "committed {committed_while_appending} of {} while records kept coming",
            100 + appended
        );
    });
}
