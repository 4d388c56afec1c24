//! Drives the engine from a recorded log: where records come from (a JSONL file, an
//! embedded log directory, a Kafka partition) and how each becomes a typed record or a
//! located decode error for quarantine (R-LOG-3).
//!
//! Invariant: a source yields every record exactly once, in log order, with its offset;
//! nothing is skipped, so a bad record is quarantined at the offset it holds.

pub mod checkpoint;
pub mod drive;
pub mod fleet;
pub mod forensics;
pub mod lint;
pub mod query;
pub mod report;
pub mod run;
pub mod sim;
pub mod source;
pub mod whatif;

pub use drive::{drive, Flow, Observer};
pub use forensics::SyncForensics;
pub use lint::{lint, Finding, LintReport, Severity};
pub use query::{cut_at, Cut};
pub use report::{Episode, OutageReport};
pub use run::{
    replay, replay_also, replay_into, ChainLink, Divergence, ReplayOptions, ReplaySummary,
};
pub use sim::{BadConfig, Scenario, SimError, SimOptions, Simulator};
pub use source::{PathError, Source, SourceError, SourceSpec};
pub use whatif::{whatif, Plan, WhatIf, WhatIfError};

/// Replays `source` and builds the outage report (episodes, launches, versions).
pub fn outage_report(source: &mut Source) -> Result<OutageReport, SourceError> {
    drive::observe_whole(source, report::Reporter::finish)
}

/// Replays `source` and explains every failed import (505), grouped by root cause.
pub fn sync_forensics(source: &mut Source) -> Result<SyncForensics, SourceError> {
    drive::observe_whole(source, forensics::Found::finish)
}
