//! The one replay loop: a source's records applied to an engine in log order, each shown
//! to an [`Observer`] before and after it is applied. `replay`, `cut_at`, `outage_report`,
//! `lint` and `sync_forensics` are observers; none has a loop of its own.
//!
//! Invariant: every record the source yields is applied exactly once, in order, unless an
//! observer stops the replay before it; the observer sees the engine between records, and
//! part-way through a record only to take the outputs of a long gap's timers
//! ([`Observer::during`]), so no replay holds more than a bounded number of outputs.

use lhc_engine::{DecodeError, Engine, Output, Record, CATCH_UP_STEP, WARM_RUN};

use crate::source::{Decoded, Source, SourceError};

/// Where a replay takes its records from: a [`Source`], or a source with changes applied
/// (`whatif`).
pub trait Records {
    /// The next record with its offset; `None` at the end.
    fn next_record(&mut self) -> Result<Option<Decoded>, SourceError>;

    /// Told that the record last handed out was quarantined by the engine.
    fn note_quarantined(&mut self) {}

    /// Records already decoded that come next, if the source holds any (for
    /// [`Engine::warm`]); none by default.
    fn upcoming(&self) -> &[Decoded] {
        &[]
    }
}

impl Records for Source {
    fn next_record(&mut self) -> Result<Option<Decoded>, SourceError> {
        Source::next_record(self)
    }

    fn note_quarantined(&mut self) {
        Source::note_quarantined(self);
    }

    fn upcoming(&self) -> &[Decoded] {
        Source::upcoming(self)
    }
}

/// Whether the replay goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Apply the record.
    Apply,
    /// Stop before this record (it is not applied).
    Stop,
}

/// A record about to be applied.
pub struct Before<'a> {
    /// The engine as the previous records left it.
    pub engine: &'a Engine,
    /// The record's offset.
    pub offset: u64,
    /// The record, or why it cannot be decoded (it will be quarantined).
    pub record: &'a Result<Record, DecodeError>,
}

/// A record just applied, or (in [`Observer::during`]) being applied.
pub struct After<'a> {
    /// The engine after it (during it: at the last timer fired).
    pub engine: &'a Engine,
    /// The record's offset.
    pub offset: u64,
    /// Its outputs, to keep or drain (the driver clears what is left).
    pub outputs: &'a mut Vec<Output>,
}

/// What follows a replay record by record.
pub trait Observer {
    /// What stops a replay (a source error at least).
    type Error: From<SourceError>;

    /// Sees a record before it is applied; `Flow::Stop` ends the replay before it.
    fn before(&mut self, _step: Before<'_>) -> Result<Flow, Self::Error> {
        Ok(Flow::Apply)
    }

    /// Sees what the record made.
    fn after(&mut self, step: After<'_>) -> Result<(), Self::Error>;

    /// Takes the outputs of the timers due before a record, while it is being applied,
    /// whenever they reach [`CATCH_UP_STEP`] (a gap of days in LHC mode); `after` follows
    /// with the rest. No default: an observer that ignored these would lose outputs.
    fn during(&mut self, step: After<'_>) -> Result<(), Self::Error>;
}

/// Applies every record of `source` to `engine`, showing each to `observer`; returns the
/// records applied.
pub fn drive<R: Records + ?Sized, O: Observer>(
    source: &mut R,
    engine: &mut Engine,
    observer: &mut O,
) -> Result<u64, O::Error> {
    let mut outputs = Vec::new();
    let mut applied = 0;
    let mut warmed = 0usize;
    while let Some((offset, decoded)) = source.next_record()? {
        // `warmed`: how many of the records from this one on were warmed.
        warmed = warmed.saturating_sub(1);
        if warmed == 0 {
            let next = source.upcoming();
            let run = next.len().min(WARM_RUN);
            engine.warm(next[..run].iter().filter_map(|(_, r)| r.as_ref().ok()));
            warmed = run;
        }
        let before = Before {
            engine,
            offset,
            record: &decoded,
        };
        if observer.before(before)? == Flow::Stop {
            break;
        }
        engine.apply_in_steps(
            offset,
            decoded,
            &mut outputs,
            CATCH_UP_STEP,
            |engine, outputs| {
                observer.during(After {
                    engine,
                    offset,
                    outputs: &mut *outputs,
                })?;
                outputs.clear();
                Ok::<(), O::Error>(())
            },
        )?;
        applied += 1;
        if outputs
            .iter()
            .any(|o| matches!(o, lhc_engine::Output::Quarantine(_)))
        {
            source.note_quarantined();
        }
        let after = After {
            engine,
            offset,
            outputs: &mut outputs,
        };
        observer.after(after)?;
        outputs.clear();
    }
    Ok(applied)
}

/// Two observers followed at once: `first` sees each step before `second` (so it reads a
/// record's outputs before `second` may drain them), and either can stop the replay. When
/// `second` stops before a record, `first` has already seen it in `before`: an observer
/// that keeps something from `before` (the checkpoint writer keeps times) goes first only
/// beside one that never stops.
pub struct Both<'a, A, B>(pub &'a mut A, pub &'a mut B);

impl<A, B> Observer for Both<'_, A, B>
where
    A: Observer,
    B: Observer,
    A::Error: Into<B::Error>,
{
    type Error = B::Error;

    fn before(&mut self, step: Before<'_>) -> Result<Flow, B::Error> {
        let Before {
            engine,
            offset,
            record,
        } = step;
        let first = self.0.before(Before {
            engine,
            offset,
            record,
        });
        if first.map_err(Into::into)? == Flow::Stop {
            return Ok(Flow::Stop);
        }
        self.1.before(Before {
            engine,
            offset,
            record,
        })
    }

    fn after(&mut self, step: After<'_>) -> Result<(), B::Error> {
        both(self, step, A::after, B::after)
    }

    fn during(&mut self, step: After<'_>) -> Result<(), B::Error> {
        both(self, step, A::during, B::during)
    }
}

/// One step after (or during) a record, shown to `first` then `second`: `first` reads the
/// outputs before `second` may drain them.
fn both<A, B>(
    pair: &mut Both<'_, A, B>,
    step: After<'_>,
    first: fn(&mut A, After<'_>) -> Result<(), A::Error>,
    second: fn(&mut B, After<'_>) -> Result<(), B::Error>,
) -> Result<(), B::Error>
where
    A: Observer,
    B: Observer,
    A::Error: Into<B::Error>,
{
    let After {
        engine,
        offset,
        outputs,
    } = step;
    first(
        pair.0,
        After {
            engine,
            offset,
            outputs: &mut *outputs,
        },
    )
    .map_err(Into::into)?;
    second(
        pair.1,
        After {
            engine,
            offset,
            outputs,
        },
    )
}

/// An observer that may be absent: `None` follows nothing and never stops the replay.
impl<O: Observer> Observer for Option<O> {
    type Error = O::Error;

    fn before(&mut self, step: Before<'_>) -> Result<Flow, O::Error> {
        self.as_mut().map_or(Ok(Flow::Apply), |o| o.before(step))
    }

    fn after(&mut self, step: After<'_>) -> Result<(), O::Error> {
        self.as_mut().map_or(Ok(()), |o| o.after(step))
    }

    fn during(&mut self, step: After<'_>) -> Result<(), O::Error> {
        self.as_mut().map_or(Ok(()), |o| o.during(step))
    }
}

/// Replays the whole of `source` into a fresh engine with a fresh `O`, then hands the
/// observer and the source's description to `finish`: for the reports that conclude from
/// what they observed alone (outage report, sync forensics; lint also reads the engine).
pub(crate) fn observe_whole<O, T>(
    source: &mut Source,
    finish: impl FnOnce(O, String) -> T,
) -> Result<T, O::Error>
where
    O: Observer + Default,
{
    let mut observer = O::default();
    drive(source, &mut Engine::new(), &mut observer)?;
    Ok(finish(observer, source.describe().to_string()))
}
