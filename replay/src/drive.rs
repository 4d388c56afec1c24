//! The one replay loop: a source's records applied to an engine in log order, each shown
//! to an [`Observer`] before and after it is applied. `replay`, `cut_at`, `outage_report`,
//! `lint` and `sync_forensics` are observers; none has a loop of its own.
//!
//! Invariant: every record the source yields is applied exactly once, in order, unless an
//! observer stops the replay before it; the observer sees the engine only between records.

use lhc_engine::{DecodeError, Engine, Output, Record};

use crate::source::{Source, SourceError};

/// Whether the replay goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Apply the record.
    Apply,
    /// Stop before this record (it is not applied).
    Stop,
}

/// What follows a replay record by record.
pub trait Observer {
    /// What stops a replay (a source error at least).
    type Error: From<SourceError>;

    /// Sees a record before it is applied, with the engine as the previous records left it.
    fn before(
        &mut self,
        _engine: &Engine,
        _offset: u64,
        _record: &Result<Record, DecodeError>,
    ) -> Result<Flow, Self::Error> {
        Ok(Flow::Apply)
    }

    /// Sees what the record made: its outputs (to keep or drain; the driver clears what is
    /// left) and the engine after it.
    fn after(
        &mut self,
        engine: &Engine,
        offset: u64,
        outputs: &mut Vec<Output>,
    ) -> Result<(), Self::Error>;
}

/// Applies every record of `source` to `engine`, showing each to `observer`; returns the
/// records applied.
pub fn drive<O: Observer>(
    source: &mut Source,
    engine: &mut Engine,
    observer: &mut O,
) -> Result<u64, O::Error> {
    let mut outputs = Vec::new();
    let mut applied = 0;
    while let Some((offset, decoded)) = source.next_record()? {
        if observer.before(engine, offset, &decoded)? == Flow::Stop {
            break;
        }
        engine.apply(offset, decoded, &mut outputs);
        applied += 1;
        observer.after(engine, offset, &mut outputs)?;
        outputs.clear();
    }
    Ok(applied)
}
