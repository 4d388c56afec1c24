//! Validation at append time (R-LOG-3): nothing that fails the record contract enters the
//! log through lhc. A batch is all or nothing.

use lhc_engine::decode::DecodeErrorKind;
use lhc_engine::{decode_record, DecodeError, Record, Ts};

use crate::{Log, LogError};

/// One rejected line of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// 1-based line (or record) number within the batch.
    pub line: usize,
    /// Why it was rejected, naming the field.
    pub error: DecodeError,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.error)
    }
}

/// Why a validated append appended nothing.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// Some records break the contract; each is listed.
    #[error("{} invalid record(s), nothing appended; first: {}", .0.len(), .0[0])]
    Invalid(Vec<Rejected>),
    /// The log refused.
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Checks one record against the contract, size included (a record over
/// [`crate::MAX_RECORD_BYTES`] is refused here, before anything of its batch is written).
pub fn validate_one(bytes: &[u8]) -> Result<(), DecodeError> {
    validate_record(bytes).map(|_| ())
}

/// Checks one record against the contract and returns it decoded.
pub fn validate_record(bytes: &[u8]) -> Result<Record, DecodeError> {
    if bytes.len() > crate::MAX_RECORD_BYTES {
        return Err(DecodeError {
            offset: None,
            path: String::new(),
            kind: DecodeErrorKind::BadValue,
            detail: format!(
                "the record is {} bytes; one record may hold at most {} (64 MiB)",
                bytes.len(),
                crate::MAX_RECORD_BYTES
            ),
        });
    }
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(DecodeError {
            offset: None,
            path: String::new(),
            kind: DecodeErrorKind::Syntax,
            detail: format!(
                "the record is not UTF-8 text (invalid byte at position {})",
                e.valid_up_to()
            ),
        });
    }
    decode_record(bytes)
}

/// Time order at append time: a policy stricter than replay. A record older than the record
/// before it (in the same input, or the log's last record) passes the contract, and replay
/// quarantines it when that earlier record was applied (R-LOG-4); the CLI's appends refuse
/// it up front whatever the earlier record was, naming the offset it would have had, so a
/// log lhc writes is in time order and an import never leaves a quarantine to be found
/// later.
#[derive(Clone, Debug, Default)]
pub struct TimeOrder {
    /// The latest time so far and where it comes from (for the message).
    last: Option<(Ts, String)>,
    /// The latest configuration version so far: a `config.change` must be above it
    /// (strictly increasing, else quarantined).
    version: Option<(u64, String)>,
    /// Records of the log read by [`TimeOrder::after_log`] (a Kafka log: the site's own,
    /// whatever other sites share its partition).
    records: u64,
}

impl TimeOrder {
    /// Starts after the last record of `log` (nothing to compare with if it is empty or
    /// its last record does not decode: that record is quarantined on replay anyway).
    pub fn after_log(log: &dyn Log) -> Result<TimeOrder, LogError> {
        let (start, end) = (log.start_offset()?, log.end_offset()?);
        if end <= start {
            return Ok(TimeOrder::default());
        }
        // The whole log is read for its last configuration version: a scan of bytes that
        // decodes only config changes, once per import.
        let mut reader = log.reader(start)?;
        let mut version: Option<(u64, String)> = None;
        // The last record read: the log's, or in a Kafka partition shared by several sites
        // this site's (which need not be the partition's last).
        let mut last_entry = None;
        let mut records = 0;
        while reader.position() < end {
            let Some(entry) = reader.next(std::time::Duration::from_secs(5))? else {
                break;
            };
            records += 1;
            let is_change = entry.bytes.windows(15).any(|w| w == b"\"config.change\"");
            if is_change {
                if let Ok(Record::ConfigChange(c)) = decode_record(&entry.bytes) {
                    if version.as_ref().is_none_or(|(v, _)| c.version > *v) {
                        version = Some((c.version, format!("offset {}", entry.offset)));
                    }
                }
            }
            last_entry = Some(entry);
        }
        let last = last_entry.and_then(|entry| {
            decode_record(&entry.bytes).ok().map(|record| {
                (
                    record.ts(),
                    format!("the log's last record (offset {})", entry.offset),
                )
            })
        });
        Ok(TimeOrder {
            last,
            version,
            records,
        })
    }

    /// Records of the log read by [`TimeOrder::after_log`].
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The latest configuration version so far, if any.
    pub fn last_version(&self) -> Option<u64> {
        self.version.as_ref().map(|(v, _)| *v)
    }

    /// The latest time so far, if any.
    pub fn last(&self) -> Option<Ts> {
        self.last.as_ref().map(|(ts, _)| *ts)
    }

    /// Checks `record`, which would get `offset`, against the records before it; `place`
    /// names it for the message (like "line 12").
    pub fn check(&mut self, record: &Record, offset: u64, place: &str) -> Result<(), DecodeError> {
        let ts = record.ts();
        if let Some((last, from)) = &self.last {
            if ts < *last {
                return Err(DecodeError {
                    offset: None,
                    path: "ts".into(),
                    kind: DecodeErrorKind::BadValue,
                    detail: format!(
                        "{ts} is older than {from} at {last}: lhc appends records in time order \
                         (offset {offset} would be out of order; replay quarantines a record \
                         older than the last one it applied, R-LOG-4); put the records in time \
                         order"
                    ),
                });
            }
        }
        if let Record::ConfigChange(c) = record {
            if let Some((last, from)) = &self.version {
                if c.version <= *last {
                    return Err(DecodeError {
                        offset: None,
                        path: "version".into(),
                        kind: DecodeErrorKind::BadValue,
                        detail: format!(
                            "configuration version {} is not above version {last} (at \
                             {from}): lhc appends configuration versions in increasing order \
                             (offset {offset} would break it; replay quarantines a version \
                             not above the last one applied, R-LOG-4); number it after the \
                             log's",
                            c.version
                        ),
                    });
                }
            }
            self.version = Some((c.version, place.to_string()));
        }
        self.last = Some((ts, format!("the record before it ({place})")));
        Ok(())
    }
}

/// Checks each record against the contract; returns every failure, numbered 1.. in
/// `records` order.
pub fn validate(records: &[&[u8]]) -> Vec<Rejected> {
    records
        .iter()
        .enumerate()
        .filter_map(|(i, bytes)| {
            validate_one(bytes)
                .err()
                .map(|error| Rejected { line: i + 1, error })
        })
        .collect()
}

/// Appends records only if every one is valid.
pub fn append_validated(log: &dyn Log, records: &[&[u8]]) -> Result<Vec<u64>, AppendError> {
    let rejected = validate(records);
    if !rejected.is_empty() {
        return Err(AppendError::Invalid(rejected));
    }
    Ok(log.append(records)?)
}
