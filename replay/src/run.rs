//! Folding a source through the engine, with digest chains (principle 3: a canonical
//! digest after any record; a chain of them names the first divergence).

use std::collections::BTreeMap;

use lhc_engine::{Engine, Output};
use serde::{Deserialize, Serialize};

use crate::drive::{After, Both, Observer};
use crate::source::{Source, SourceError};

/// One link of a digest chain: the engine's digest after the record at `offset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainLink {
    /// Offset of the record after which the digest was taken.
    pub offset: u64,
    /// Hex SHA-256 of the canonical state.
    pub digest: String,
}

/// Where a replay disagrees with a recorded chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// First offset whose digest differs (or that the replay never reached).
    pub offset: u64,
    /// The last offset that still agreed, if any: the cause lies after it.
    pub last_agreeing: Option<u64>,
    /// Digest in the chain.
    pub expected: String,
    /// Digest of this replay (empty if the log ended first).
    pub actual: String,
}

/// What to do besides folding.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Take a digest every this many records (and after the last one).
    pub digest_every: Option<u64>,
    /// Also take digests at exactly these offsets (to verify a chain).
    pub digest_at: Option<BTreeMap<u64, String>>,
}

/// Totals of a replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Records read.
    pub records: u64,
    /// Outputs produced.
    pub outputs: u64,
    /// Offset of the last record.
    pub last_offset: Option<u64>,
    /// Digests taken.
    pub chain: Vec<ChainLink>,
    /// First disagreement with `digest_at`, if any.
    pub divergence: Option<Divergence>,
}

/// Folds every record of `source` into `engine`, handing each output to `sink` with the
/// offset of the record that produced it. A sink error stops the replay.
pub fn replay<E: From<SourceError>>(
    source: &mut Source,
    engine: &mut Engine,
    options: &ReplayOptions,
    sink: impl FnMut(u64, &Output) -> Result<(), E>,
) -> Result<ReplaySummary, E> {
    let mut summary = ReplaySummary::default();
    replay_into(source, engine, options, sink, &mut summary)?;
    Ok(summary)
}

/// [`replay`], keeping its totals in `summary` as it goes: when the replay stops on an
/// error, `summary` still says how far it got and holds the digests taken until then.
pub fn replay_into<E: From<SourceError>>(
    source: &mut Source,
    engine: &mut Engine,
    options: &ReplayOptions,
    sink: impl FnMut(u64, &Output) -> Result<(), E>,
    summary: &mut ReplaySummary,
) -> Result<(), E> {
    replay_also(
        source,
        engine,
        options,
        sink,
        |_| Ok(()),
        summary,
        &mut NoOne,
    )
}

/// [`replay_into`] with another observer following the same replay (which sees each
/// record's outputs before the sink takes them): one pass, not two. Each digest of the
/// chain is also handed to `link` as it is taken (so a chain can be written as it grows).
pub fn replay_also<E: From<SourceError>, O: Observer>(
    source: &mut Source,
    engine: &mut Engine,
    options: &ReplayOptions,
    sink: impl FnMut(u64, &Output) -> Result<(), E>,
    mut link: impl FnMut(&ChainLink) -> Result<(), E>,
    summary: &mut ReplaySummary,
    also: &mut O,
) -> Result<(), E>
where
    O::Error: Into<E>,
{
    let mut replayer = Replayer {
        options,
        sink,
        link: &mut link,
        summary,
        last_agreeing: None,
        error: std::marker::PhantomData,
    };
    crate::drive::drive(source, engine, &mut Both(also, &mut replayer))?;
    let Replayer {
        summary,
        last_agreeing,
        link,
        ..
    } = replayer;
    if let (Some(_), Some(last)) = (options.digest_every, summary.last_offset) {
        if summary.chain.last().map(|l| l.offset) != Some(last) {
            let last = ChainLink {
                offset: last,
                digest: engine.digest(),
            };
            link(&last)?;
            summary.chain.push(last);
        }
    }
    if summary.divergence.is_none() {
        // A chain longer than the log: the first link never reached diverges.
        if let Some((&offset, expected)) = options
            .digest_at
            .as_ref()
            .and_then(|m| m.range(summary.last_offset.map_or(0, |l| l + 1)..).next())
        {
            summary.divergence = Some(Divergence {
                offset,
                last_agreeing,
                expected: expected.clone(),
                actual: String::new(),
            });
        }
    }
    Ok(())
}

/// An observer that follows nothing (a replay with no other observer).
struct NoOne;

impl Observer for NoOne {
    type Error = SourceError;

    fn after(&mut self, _step: After<'_>) -> Result<(), SourceError> {
        Ok(())
    }

    fn during(&mut self, _step: After<'_>) -> Result<(), SourceError> {
        Ok(())
    }
}

/// The replay as an observer: outputs to the sink, digests as asked.
struct Replayer<'a, S, E> {
    options: &'a ReplayOptions,
    sink: S,
    /// Told each digest of the chain as it is taken.
    link: &'a mut dyn FnMut(&ChainLink) -> Result<(), E>,
    summary: &'a mut ReplaySummary,
    /// The last offset whose digest agreed with `digest_at`.
    last_agreeing: Option<u64>,
    error: std::marker::PhantomData<E>,
}

impl<S, E> Replayer<'_, S, E>
where
    S: FnMut(u64, &Output) -> Result<(), E>,
{
    /// Hands the outputs to the sink, in order.
    fn emit(&mut self, offset: u64, outputs: &mut Vec<Output>) -> Result<(), E> {
        for output in outputs.drain(..) {
            self.summary.outputs += 1;
            (self.sink)(offset, &output)?;
        }
        Ok(())
    }
}

impl<S, E> Observer for Replayer<'_, S, E>
where
    S: FnMut(u64, &Output) -> Result<(), E>,
    E: From<SourceError>,
{
    type Error = E;

    fn during(&mut self, step: After<'_>) -> Result<(), E> {
        self.emit(step.offset, step.outputs)
    }

    fn after(&mut self, step: After<'_>) -> Result<(), E> {
        let (engine, offset) = (step.engine, step.offset);
        self.emit(offset, step.outputs)?;
        let summary = &mut *self.summary;
        summary.records += 1;
        summary.last_offset = Some(offset);
        let every = self
            .options
            .digest_every
            .is_some_and(|n| summary.records.is_multiple_of(n.max(1)));
        let expected = self.options.digest_at.as_ref().and_then(|m| m.get(&offset));
        if every || expected.is_some() {
            let digest = engine.digest();
            if let Some(expected) = expected {
                if *expected == digest {
                    self.last_agreeing = Some(offset);
                } else if summary.divergence.is_none() {
                    summary.divergence = Some(Divergence {
                        offset,
                        last_agreeing: self.last_agreeing,
                        expected: expected.clone(),
                        actual: digest.clone(),
                    });
                }
            }
            if every {
                let taken = ChainLink { offset, digest };
                (self.link)(&taken)?;
                summary.chain.push(taken);
            }
        }
        Ok(())
    }
}
