//! The pure, deterministic core of lhc.
//!
//! This crate owns the record contract (input records, config objects, outputs, their JSON
//! Schemas) and the reducers that fold records into state. Invariant: no IO, no clock, no
//! randomness, no thread timing, no hash-map iteration in anything that produces output.
//! Time comes only from record `ts`.

mod advice;
pub mod broker;
pub mod build;
pub mod config;
pub mod decode;
pub mod detmap;
pub mod engine;
pub mod event;
pub mod output;
pub mod params;
pub mod record;
pub mod record_id;
pub mod rows;
pub mod schema;
pub mod site;
pub mod snapshot;
pub mod strict;
mod string_form;
pub mod ts;
pub mod view;

pub use decode::{decode_record, decode_record_at, encode_record, DecodeError, DecodeErrorKind};
pub use engine::{Admitted, ConfigPart, Engine, Validation, CATCH_UP_STEP, WARM_RUN};
pub use output::Output;
pub use record::Record;
pub use ts::Ts;
