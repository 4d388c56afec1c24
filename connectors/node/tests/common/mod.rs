//! Helpers the node's tests share: the engine's scenario logs, as records and as embedded
//! logs.
// Each test file uses a part of them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use lhc_log::{EmbeddedLog, EmbeddedOptions, Log};

/// The records of the engine's scenario log `name`, one per line.
pub fn scenario(name: &str) -> Vec<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../engine/tests/scenarios")
        .join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| l.as_bytes().to_vec())
        .collect()
}

/// An embedded log in `dir` holding `records`.
pub fn log_of(dir: &Path, records: &[Vec<u8>]) -> EmbeddedLog {
    let log = EmbeddedLog::open(dir, EmbeddedOptions::default()).unwrap();
    let records: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    log.append(&records).unwrap();
    log
}
