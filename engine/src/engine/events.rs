//! Outputs the reducer builds: events (their id, level and text are `EventKind`'s) and
//! quarantines.

use serde::Serialize;

use crate::event::EventKind;
use crate::output::*;
use crate::ts::Ts;

use super::Engine;

impl Engine {
    /// The output of event `kind` of `connector` at `ts`.
    pub(super) fn event(&self, ts: Ts, connector: &str, kind: EventKind) -> Output {
        Output::Event(kind.into_event(ts, connector))
    }
}

pub(super) fn quarantine(offset: u64, error: String) -> Output {
    Output::Quarantine(Quarantine { offset, error })
}

/// The snake_case name serde gives an enum value (`not_elected`), for messages.
pub fn snake<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
