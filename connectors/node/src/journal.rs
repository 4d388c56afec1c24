//! A Kafka node's journal read as a log: every record the node applied, in the order it
//! applied them, under the engine offsets its state and checkpoints name. `lhc query --data
//! DIR` of a Kafka node replays this, not the topic (whose offsets and order differ when the
//! node wrote records locally while Kafka was unreachable).
//!
//! Invariant: read-only; records come back byte for byte as the journal holds them.

use std::sync::Arc;
use std::time::Duration;

use lhc_log::{Log, LogEntry, LogError, LogReader};

use crate::store::{NodeError, Store};

/// Records read from the journal at a time.
const CHUNK: usize = 4096;

/// The journal of a node's store, as a [`Log`] that cannot be appended to.
pub struct JournalLog {
    store: Arc<Store>,
    name: String,
}

impl JournalLog {
    /// The journal of `store`, described as `name` in messages.
    pub fn new(store: Arc<Store>, name: impl Into<String>) -> JournalLog {
        JournalLog {
            store,
            name: name.into(),
        }
    }
}

fn log_error(e: NodeError) -> LogError {
    LogError::Elsewhere(e.to_string())
}

impl Log for JournalLog {
    fn append(&self, _records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        Err(LogError::Elsewhere(format!(
            "{} is read here, never written",
            self.name
        )))
    }

    fn start_offset(&self) -> Result<u64, LogError> {
        Ok(self
            .store
            .journal(None, 1)
            .map_err(log_error)?
            .first()
            .map_or(0, |(offset, _)| *offset))
    }

    fn end_offset(&self) -> Result<u64, LogError> {
        self.store.journal_end().map_err(log_error)
    }

    fn reader(&self, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        Ok(Box::new(JournalReader {
            store: self.store.clone(),
            name: self.name.clone(),
            next: from,
            chunk: Vec::new().into_iter(),
        }))
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

/// Reads the journal in order from an offset, a chunk at a time.
struct JournalReader {
    store: Arc<Store>,
    name: String,
    next: u64,
    chunk: std::vec::IntoIter<(u64, Vec<u8>)>,
}

impl LogReader for JournalReader {
    fn next(&mut self, _wait: Duration) -> Result<Option<LogEntry>, LogError> {
        if self.chunk.len() == 0 {
            self.chunk = self
                .store
                .journal(self.next.checked_sub(1), CHUNK)
                .map_err(log_error)?
                .into_iter();
        }
        let Some((offset, bytes)) = self.chunk.next() else {
            return Ok(None);
        };
        // The journal is dense: a hole is damage (or a store changed under this reader),
        // said, never skipped.
        if offset != self.next {
            return Err(LogError::Elsewhere(format!(
                "{}: offset {} is missing (the next record held is at {offset}); the journal \
                 is damaged, or the store changed while it was read: read it again",
                self.name, self.next
            )));
        }
        self.next = offset + 1;
        Ok(Some(LogEntry { offset, bytes }))
    }

    fn position(&self) -> u64 {
        self.next
    }
}
