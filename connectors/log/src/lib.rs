//! The site log (R-LOG): an append-only, totally ordered sequence of records with dense
//! u64 offsets, behind one trait with two backends.
//!
//! - [`embedded::EmbeddedLog`]: segment files in a local directory, the default; needs no
//!   server and lets several processes of one machine append under a file lock.
//! - [`kafka::KafkaLog`]: one topic partition per site (message key = site name).
//!
//! Invariant: a backend stores and returns record bytes exactly as appended, in offset
//! order, and never skips or rewrites one. Validation of the JSON against the record
//! contract happens above the trait ([`validate`]), so a raw log written by another tool can
//! still be read and each bad record quarantined at its offset.

use std::path::PathBuf;
use std::time::Duration;

pub mod admin;
pub mod checkpoint;
pub mod embedded;
pub mod frame;
pub mod jsonl;
pub mod kafka;
pub mod mock;
pub mod validate;

pub use embedded::{EmbeddedLog, EmbeddedOptions, FsyncPolicy, LostRecords, TailRecovery};
pub use kafka::{KafkaLog, KafkaOptions};
pub use mock::MockKafka;

/// One record read back from a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// Position in the log, dense from the log's start.
    pub offset: u64,
    /// The record bytes as appended (JSON, no trailing newline).
    pub bytes: Vec<u8>,
}

/// Errors of the log backends; each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file or directory operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A record before the tail failed its checksum or framing: the log is damaged there.
    #[error(
        "log corrupted in segment {segment} at offset {offset}: {detail}; records from this \
         offset on cannot be trusted (restore the segment from a replica or backup, or export \
         the records before it with `lhc log export --to {offset}`)"
    )]
    Corrupt {
        /// Segment file holding the damage.
        segment: PathBuf,
        /// Offset of the first record that cannot be read.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// The directory holds files that are not lhc log segments.
    #[error("{path} is not an lhc log segment: {detail}")]
    NotALog {
        /// The offending file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A read asked for an offset the log does not hold.
    #[error("offset {requested} is outside the log, which holds offsets {start}..{end}")]
    OffsetOutOfRange {
        /// Offset asked for.
        requested: u64,
        /// First offset held.
        start: u64,
        /// Offset the next append will get.
        end: u64,
    },
    /// A record exceeds the maximum record size.
    #[error("record of {size} bytes exceeds the maximum of {max} bytes")]
    RecordTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// Kafka refused or could not be reached.
    #[error("kafka ({brokers}, topic {topic}): {detail}")]
    Kafka {
        /// Bootstrap servers.
        brokers: String,
        /// Topic.
        topic: String,
        /// What went wrong and what to check.
        detail: String,
    },
    /// The log was closed (its writer stopped).
    #[error("the log writer has stopped: {0}")]
    Closed(String),
    /// A batch failed and nothing of it was kept (its error, shared by every append of the
    /// batch); the writer goes on with the next.
    #[error("{0}")]
    BatchFailed(String),
    /// A batch was written to a last segment replaced under the writer meanwhile (a copy
    /// renamed over it, a restore): some, all or none of it is in the log, depending on
    /// when the copy was taken. Not a failure to retry blindly: the caller must look.
    #[error("{0}")]
    BatchUncertain(String),
    /// Records kept by another store, read as a log (a node's journal), could not be read.
    #[error("{0}")]
    Elsewhere(String),
    /// A conditional append ([`Log::append_at`]) found the log's end elsewhere: another
    /// writer appended first. Nothing was written.
    #[error("the log ends at offset {end}, not {expected}: another writer appended; nothing was written")]
    Moved {
        /// Where the caller expected the log to end.
        expected: u64,
        /// Where it ends.
        end: u64,
    },
    /// A guarded append ([`Log::append_past`]) found the log ending below what its caller
    /// already wrote or read there: records are gone from it (its tail cut, an older copy
    /// restored), and the batch would have taken their offsets. Nothing was written.
    #[error(
        "the log ends at offset {end}, below offset {floor} that records were already \
         written or read up to: records are gone from it (its tail cut, or an older copy \
         restored); nothing was written"
    )]
    WentBack {
        /// One past the last offset the caller wrote or read.
        floor: u64,
        /// Where the log ends.
        end: u64,
    },
}

impl LogError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LogError::Io {
            path: path.into(),
            source,
        }
    }
}

/// A site log: append records, read them back from any offset, follow the tail.
pub trait Log: Send + Sync {
    /// Appends records in order and returns the offset given to each. Records become
    /// visible to readers one by one, each whole; a crash during a batch can leave a prefix
    /// of it in the log (as with Kafka without transactions).
    fn append(&self, records: &[&[u8]]) -> Result<Vec<u64>, LogError>;

    /// [`Log::append`] only if the log ends at `expected` (else [`LogError::Moved`], and
    /// nothing written), where the log can check that atomically with the write (the
    /// embedded log, under its lock). Elsewhere (Kafka) it appends: the caller checks the
    /// offsets it got.
    fn append_at(&self, expected: u64, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        let _ = expected;
        self.append(records)
    }

    /// [`Log::append`] only if the log ends at or past `floor` (else [`LogError::WentBack`],
    /// and nothing written), where the log can check that atomically with the write (the
    /// embedded log, under its lock): a writer that knows records up to `floor` never
    /// writes at offsets those records had. Unlike [`Log::append_at`] it shares a batch
    /// with other appends. Elsewhere (Kafka) it appends: the caller checks the offsets.
    fn append_past(&self, floor: u64, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        let _ = floor;
        self.append(records)
    }

    /// First offset the log still holds.
    fn start_offset(&self) -> Result<u64, LogError>;

    /// Offset the next append will get (one past the last record).
    fn end_offset(&self) -> Result<u64, LogError>;

    /// One past the last record written, counting a batch a writer is still appending
    /// (which readers do not see yet): what a loss is judged against, since records a
    /// reader has seen are never fewer than this end. Where every write is visible at
    /// once, [`Log::end_offset`].
    fn written_end(&self) -> Result<u64, LogError> {
        self.end_offset()
    }

    /// A reader positioned at `from`, which must lie in `start_offset()..=end_offset()`.
    fn reader(&self, from: u64) -> Result<Box<dyn LogReader>, LogError>;

    /// Where the log lives, for messages.
    fn describe(&self) -> String;

    /// The directory of an embedded log (where evidence of lost records is kept); `None`
    /// for other backends.
    fn local_dir(&self) -> Option<&std::path::Path> {
        None
    }
}

/// Reads a log in offset order.
pub trait LogReader: Send {
    /// The next record. When none is there yet, waits up to `wait` for one to be appended
    /// (tail -f), then returns `None`. `Duration::ZERO` reads to the current end.
    fn next(&mut self, wait: Duration) -> Result<Option<LogEntry>, LogError>;

    /// Offset of the record the next call returns.
    fn position(&self) -> u64;
}

/// Largest record the embedded log accepts, in bytes. Kafka applies its own broker limit
/// (`message.max.bytes`, 1 MB by default), so large configurations are best split into
/// several `config.change` records.
pub const MAX_RECORD_BYTES: usize = 64 << 20;
