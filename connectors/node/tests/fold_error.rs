//! A live node whose fold stops on a read error hands what it applied to the committer
//! before it stops: in Kafka mode those records are its own, already answered and in no
//! log yet, so dropping them would lose them. Here the log's reader fails part-way (a
//! fault injected under the embedded log), with commits far apart, so only that last
//! commit can have written the records before the failure.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lhc_log::{EmbeddedLog, EmbeddedOptions, Log, LogEntry, LogError, LogReader};
use lhc_node::live::{self, NodeConfig, SiteLog};
use lhc_node::Store;

mod common;
use common::{log_of, scenario};

/// A log whose readers fail when they reach `fail_at`, as a damaged segment or a lost
/// connection would make them.
struct FailingLog {
    inner: EmbeddedLog,
    fail_at: u64,
}

struct FailingReader {
    inner: Box<dyn LogReader>,
    fail_at: u64,
}

impl Log for FailingLog {
    fn append(&self, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        self.inner.append(records)
    }
    fn start_offset(&self) -> Result<u64, LogError> {
        self.inner.start_offset()
    }
    fn end_offset(&self) -> Result<u64, LogError> {
        self.inner.end_offset()
    }
    fn reader(&self, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        Ok(Box::new(FailingReader {
            inner: self.inner.reader(from)?,
            fail_at: self.fail_at,
        }))
    }
    fn describe(&self) -> String {
        format!(
            "{} (failing at offset {})",
            self.inner.describe(),
            self.fail_at
        )
    }
}

impl LogReader for FailingReader {
    fn next(&mut self, wait: Duration) -> Result<Option<LogEntry>, LogError> {
        if self.inner.position() == self.fail_at {
            return Err(LogError::Corrupt {
                segment: PathBuf::from("injected"),
                offset: self.fail_at,
                detail: "a read error injected by the test".into(),
            });
        }
        self.inner.next(wait)
    }
    fn position(&self) -> u64 {
        self.inner.position()
    }
}

#[test]
fn a_node_whose_fold_fails_commits_what_it_applied_before_stopping() {
    let tmp = tempfile::tempdir().unwrap();
    let records = scenario("outage-3-connectors.jsonl");
    let fail_at = records.len() as u64 / 2;
    let site = FailingLog {
        inner: log_of(&tmp.path().join("log"), &records),
        fail_at,
    };
    let outputs =
        EmbeddedLog::open(tmp.path().join("outputs"), EmbeddedOptions::default()).unwrap();
    let data = tmp.path().join("data");
    let mut config = NodeConfig::new("cc-a.z1.example", &data);
    config.listen = "127.0.0.1:0".parse().unwrap();
    // No periodic commit during the test: the records are written by the fold's last job
    // or not at all.
    config.commit_interval = Duration::from_secs(3600);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ran = runtime.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            live::run(
                config,
                SiteLog::Direct(Arc::new(site)),
                Arc::new(outputs),
                std::future::pending(),
            ),
        )
        .await
    });
    let error = ran
        .expect("a node whose fold failed stops by itself")
        .expect_err("the read error stops the node");
    assert!(
        error.to_string().contains("injected"),
        "the node names the read error: {error}"
    );
    let (_, next) = Store::open_read_only(data.join("snapshot"))
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(
        next, fail_at,
        "every record before the failure is committed, none after"
    );
}
