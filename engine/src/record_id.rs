//! Record ids: how a record appended twice is applied once (exactly once across nodes).
//!
//! A Kafka append whose delivery report timed out may still have reached the broker; the
//! node then keeps the record in its journal and publishes it again when Kafka answers, so
//! the topic can hold it twice. Every record a node appends to Kafka therefore carries a
//! `record_id`, `PRODUCER:RUN.N`: the producer (the node's connector name and the
//! instance of its data directory), the run (one more at every start) and a counter. The
//! engine applies the first record with an id and quarantines later ones as duplicates.
//!
//! Invariant: for each producer the engine remembers which ids it has seen as disjoint runs
//! of consecutive counters (a node's ids reach the log in order, except the few whose
//! delivery was in doubt, so a handful of runs cover millions of records); at most
//! [`MAX_RUNS`] per producer, the oldest dropped first and remembered as a floor below which
//! an id can no longer be told from a duplicate (refused, never applied twice).

use std::collections::BTreeMap;
use std::fmt;

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::string_form;

/// Runs of ids remembered per producer.
pub const MAX_RUNS: usize = 64;

/// The pattern of a record id, for the JSON Schema.
pub const RECORD_ID_PATTERN: &str = r"^[^\s:]+:[0-9]+\.[0-9]+$";

/// A record's unique id: `PRODUCER:RUN.N`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId {
    /// Who appended it (a node: `connector@instance`).
    pub producer: CompactString,
    /// The producer's run: one more at every start.
    pub epoch: u32,
    /// Counter within the run, from 0.
    pub n: u64,
}

impl RecordId {
    /// Parses `PRODUCER:RUN.N`.
    pub fn parse(text: &str) -> Result<RecordId, String> {
        let bad = |why: &str| {
            format!("{text:?} is not a record id ({why}); expected PRODUCER:RUN.N, like cc-a.corp@3f9a1c2e:4.17")
        };
        let (producer, seq) = text.rsplit_once(':').ok_or_else(|| bad("no ':'"))?;
        if producer.is_empty() || producer.chars().any(|c| c.is_whitespace() || c == ':') {
            return Err(bad("the producer is empty or holds a space or a ':'"));
        }
        let (epoch, n) = seq.split_once('.').ok_or_else(|| bad("no '.'"))?;
        let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !number(epoch) || !number(n) {
            return Err(bad("RUN and N are decimal numbers"));
        }
        Ok(RecordId {
            producer: producer.into(),
            epoch: epoch.parse().map_err(|_| bad("RUN is too large"))?,
            n: n.parse().map_err(|_| bad("N is too large"))?,
        })
    }
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}.{}", self.producer, self.epoch, self.n)
    }
}

string_form::impl_string_form!(RecordId, parse: RecordId::parse,
expecting: "a record id string PRODUCER:RUN.N", name: "RecordId", schema: {
    "type": "string",
    "pattern": RECORD_ID_PATTERN,
    "description": "Unique id of a record, PRODUCER:RUN.N; a later record with the \
                    same id is a duplicate and is not applied."
});

/// The ids seen from one producer (see the module invariant).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenIds {
    /// Disjoint runs `(epoch, first n, last n)`, in order.
    runs: Vec<(u32, u64, u64)>,
    /// Every id at or below this one is forgotten: refused as a possible duplicate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    floor: Option<(u32, u64)>,
}

/// Why a record id was not claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The id was seen before.
    Duplicate,
    /// The id is older than every run still remembered.
    Forgotten,
}

impl SeenIds {
    /// Whether `(epoch, n)` would be claimed; on success, the position of the first run
    /// that starts after it.
    pub fn check(&self, epoch: u32, n: u64) -> Result<usize, Refusal> {
        if self.floor.is_some_and(|f| (epoch, n) <= f) {
            return Err(Refusal::Forgotten);
        }
        // First run that starts after the id.
        let after = self.runs.partition_point(|&(e, a, _)| (e, a) <= (epoch, n));
        if after > 0 {
            let (e, _, b) = self.runs[after - 1];
            if e == epoch && n <= b {
                return Err(Refusal::Duplicate);
            }
        }
        Ok(after)
    }

    /// Records `(epoch, n)` as seen; refuses an id seen before or too old to tell.
    pub fn claim(&mut self, epoch: u32, n: u64) -> Result<(), Refusal> {
        let after = self.check(epoch, n)?;
        let joins_before = after > 0 && {
            let (e, _, b) = self.runs[after - 1];
            e == epoch && b.checked_add(1) == Some(n)
        };
        let joins_after = after < self.runs.len() && {
            let (e, a, _) = self.runs[after];
            e == epoch && n.checked_add(1) == Some(a)
        };
        match (joins_before, joins_after) {
            (true, true) => {
                let (_, _, b) = self.runs.remove(after);
                self.runs[after - 1].2 = b;
            }
            (true, false) => self.runs[after - 1].2 = n,
            (false, true) => self.runs[after].1 = n,
            (false, false) => {
                self.runs.insert(after, (epoch, n, n));
                if self.runs.len() > MAX_RUNS {
                    let (e, _, b) = self.runs.remove(0);
                    self.floor = Some((e, b));
                }
            }
        }
        Ok(())
    }
}

/// Seen ids by producer.
pub type SeenByProducer = BTreeMap<CompactString, SeenIds>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let id = RecordId::parse("cc-a.corp@3f9a:4.17").unwrap();
        assert_eq!(
            (id.producer.as_str(), id.epoch, id.n),
            ("cc-a.corp@3f9a", 4, 17)
        );
        assert_eq!(id.to_string(), "cc-a.corp@3f9a:4.17");
        for bad in [
            "", "x", "x:1", ":1.2", "x:1.", "x:.2", "x:a.2", "x y:1.2", "x:1.2.3", "a:b:1.2",
        ] {
            assert!(RecordId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn claims_each_id_once_and_merges_runs() {
        let mut seen = SeenIds::default();
        for n in [0, 1, 2, 4, 5] {
            seen.claim(1, n).unwrap();
        }
        assert_eq!(seen.runs, vec![(1, 0, 2), (1, 4, 5)]);
        // The gap left by a delivery in doubt, filled when the record comes again.
        seen.claim(1, 3).unwrap();
        assert_eq!(seen.runs, vec![(1, 0, 5)]);
        for n in 0..=5 {
            assert_eq!(seen.claim(1, n), Err(Refusal::Duplicate));
        }
        // A new run (restart) is its own run; the old one is still remembered.
        seen.claim(2, 0).unwrap();
        assert_eq!(seen.claim(1, 2), Err(Refusal::Duplicate));
        seen.claim(1, 6).unwrap();
        assert_eq!(seen.runs, vec![(1, 0, 6), (2, 0, 0)]);
    }

    #[test]
    fn forgets_the_oldest_runs_and_refuses_below_them() {
        let mut seen = SeenIds::default();
        for epoch in 0..=MAX_RUNS as u32 {
            seen.claim(epoch, 10).unwrap();
        }
        assert_eq!(seen.runs.len(), MAX_RUNS);
        assert_eq!(seen.floor, Some((0, 10)));
        assert_eq!(seen.claim(0, 3), Err(Refusal::Forgotten));
        assert_eq!(seen.claim(0, 10), Err(Refusal::Forgotten));
        seen.claim(0, 11).unwrap();
    }
}
