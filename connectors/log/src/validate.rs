//! Validation at append time (R-LOG-3): nothing that fails the record contract enters the
//! log through lhc. A batch is all or nothing.

use lhc_engine::decode::DecodeErrorKind;
use lhc_engine::{decode_record, DecodeError};

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
    decode_record(bytes).map(|_| ())
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
