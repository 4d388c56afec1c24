//! Time travel: the engine state and the outputs of a log at any instant.
//!
//! Invariant: the state "at T" is exactly a replay of every record with `ts` <= T followed
//! by the timers due by T (as a `clock.tick` at T would fire them), so it agrees with a
//! replay cut at the same instant.

use std::collections::BTreeMap;

use lhc_engine::{Engine, Output, Ts};

use crate::drive::{After, Before, Flow, Observer};
use crate::source::{Source, SourceError};

/// The state of a log at an instant, with the history of its machines and launches.
pub struct Cut {
    /// The engine at the instant.
    pub engine: Engine,
    /// Every registration, maintenance mark and launch decision up to the instant, with the
    /// offset of the input that produced it (those at the instant carry the offset of the
    /// last record applied): what `query` lists. Events are not kept, so a cut after a
    /// long outage does not hold its thousands of periodic reports.
    pub history: Vec<(u64, Output)>,
    /// Offset of the last record applied.
    pub last_offset: Option<u64>,
    /// Time of the log's first and of the last applied record (decodable ones).
    pub first_ts: Option<Ts>,
    /// Time of the last record applied.
    pub last_ts: Option<Ts>,
    /// A record after the instant exists (the instant is inside the log's span).
    pub more_after: bool,
    /// Who launched what, for each launch decision in `history` (by its index there):
    /// the (user, resource) of the request it answers, the latest request with its id up
    /// to the decision, since decisions name only the request and StoreFront may reuse an
    /// id once its launch is decided (a map by id named the later user for both).
    pub launches: BTreeMap<usize, (String, String)>,
}

/// How far after the log's last record a cut fires the timers due (366 days); an instant
/// later is refused ([`SourceError::TooFarAfter`]).
pub const MAX_AFTER_MS: i64 = 366 * 86_400_000;

/// Replays `source` up to `at` (records with `ts` <= `at`; undecodable records are
/// quarantined as in a replay), then fires the timers due by `at`.
pub fn cut_at(source: &mut Source, at: Ts) -> Result<Cut, SourceError> {
    cut_from(source, Engine::new(), None, at)
}

/// Where a cut resumes from: the engine after the records before the source's first one
/// (a checkpoint) and what those records were.
#[derive(Clone, Debug, Default)]
pub struct Resume {
    /// Offset of the last record applied.
    pub last_offset: Option<u64>,
    /// Time of the log's first decodable record.
    pub first_ts: Option<Ts>,
    /// Time of the last decodable record applied.
    pub last_ts: Option<Ts>,
}

/// [`cut_at`] from `engine`, the state after the records before the source's first one.
/// The caller must know that none of them was after `at` (a checkpoint's `max_ts`); the
/// outputs and launches are those of the records from the source's first one on.
pub fn cut_from(
    source: &mut Source,
    mut engine: Engine,
    resume: Option<Resume>,
    at: Ts,
) -> Result<Cut, SourceError> {
    let resume = resume.unwrap_or_default();
    let mut cutter = Cutter {
        at,
        history: Vec::new(),
        last_offset: resume.last_offset,
        first_ts: resume.first_ts,
        last_ts: resume.last_ts,
        more_after: false,
        next_ts: None,
        requests: BTreeMap::new(),
        launches: BTreeMap::new(),
    };
    crate::drive::drive(source, &mut engine, &mut cutter)?;
    let Cutter {
        mut history,
        last_offset,
        first_ts,
        last_ts,
        more_after,
        next_ts,
        requests,
        mut launches,
        ..
    } = cutter;
    // Timers fire one by one up to the instant: years after the log's end that is billions
    // of them (a query at 9999-12-31 ran for hours). Inside a gap between two records too:
    // a replay need not cross it (the record after it may be quarantined, leaving the
    // clock where it was), so the limit holds there, named as a gap, not as the log's end.
    // Measured from the engine's clock, not the last record read: a quarantined record
    // dated centuries ahead moves no clock, and passed the limit while decades of timers
    // were left to fire (found by hostile testing).
    let clock = engine
        .now()
        .map_or(last_ts, |now| Some(last_ts.map_or(now, |l| l.min(now))));
    if let Some(last) = clock.filter(|last| at.millis() - last.millis() > MAX_AFTER_MS) {
        let days = (MAX_AFTER_MS / 86_400_000) as u64;
        return Err(match next_ts {
            Some(next) => SourceError::TooFarInGap {
                at,
                last,
                next,
                days,
            },
            None => SourceError::TooFarAfter { at, last, days },
        });
    }
    let mut out = Vec::new();
    let at_offset = last_offset.unwrap_or(0);
    while !engine.catch_up(at, lhc_engine::CATCH_UP_STEP, &mut out) {
        keep(&mut history, &mut launches, &requests, at_offset, &mut out);
    }
    engine.advance_to(at, &mut out);
    keep(&mut history, &mut launches, &requests, at_offset, &mut out);
    Ok(Cut {
        engine,
        history,
        last_offset,
        first_ts,
        last_ts,
        more_after,
        launches,
    })
}

/// Keeps the outputs a [`Cut`]'s history holds, draining `outputs`; a launch decision is
/// attributed to the request `requests` (request id → (user, resource), latest first)
/// holds for its id now.
fn keep(
    history: &mut Vec<(u64, Output)>,
    launches: &mut BTreeMap<usize, (String, String)>,
    requests: &BTreeMap<String, (String, String)>,
    offset: u64,
    outputs: &mut Vec<Output>,
) {
    for o in outputs.drain(..) {
        match &o {
            Output::LaunchDecision(d) => {
                if let Some(asked) = requests.get(&d.request) {
                    launches.insert(history.len(), asked.clone());
                }
            }
            Output::Registration(_) | Output::MachineMaintenance(_) => {}
            _ => continue,
        }
        history.push((offset, o));
    }
}

/// Replays up to the first record after `at`, keeping the history.
struct Cutter {
    at: Ts,
    history: Vec<(u64, Output)>,
    last_offset: Option<u64>,
    first_ts: Option<Ts>,
    last_ts: Option<Ts>,
    more_after: bool,
    /// Time of the first record after the instant.
    next_ts: Option<Ts>,
    /// The latest request seen with each id: id → (user, resource).
    requests: BTreeMap<String, (String, String)>,
    launches: BTreeMap<usize, (String, String)>,
}

impl Observer for Cutter {
    type Error = SourceError;

    fn before(&mut self, step: Before<'_>) -> Result<Flow, SourceError> {
        let record = step.record;
        if let Ok(record) = record {
            self.first_ts.get_or_insert(record.ts());
            if record.ts() > self.at {
                self.more_after = true;
                self.next_ts = Some(record.ts());
                return Ok(Flow::Stop);
            }
            self.last_ts = Some(record.ts());
            if let lhc_engine::Record::LaunchRequest(l) = record {
                self.requests
                    .insert(l.request.clone(), (l.user.clone(), l.resource.clone()));
            }
        }
        Ok(Flow::Apply)
    }

    fn during(&mut self, step: After<'_>) -> Result<(), SourceError> {
        keep(
            &mut self.history,
            &mut self.launches,
            &self.requests,
            step.offset,
            step.outputs,
        );
        Ok(())
    }

    fn after(&mut self, step: After<'_>) -> Result<(), SourceError> {
        keep(
            &mut self.history,
            &mut self.launches,
            &self.requests,
            step.offset,
            step.outputs,
        );
        self.last_offset = Some(step.offset);
        Ok(())
    }
}
