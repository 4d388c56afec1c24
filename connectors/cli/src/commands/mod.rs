//! One module per `lhc` subcommand: its arguments (clap) and its `run`. Commands decide
//! nothing about LHC: they open logs and stores, ask the engine or the replay drivers, and
//! render what they answer.

pub mod connector;
pub mod demo;
pub mod forensics;
pub mod kafka;
pub mod lint;
pub mod log;
pub mod query;
pub mod replay;
pub mod report;
pub mod simulate;
pub mod whatif;
