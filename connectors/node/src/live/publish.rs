//! Publishing the node's outputs to the output log (`lhc.outputs`).
//!
//! Invariant: an output is published only after the commit that stored it, in store order,
//! and the position of the last published output is read back from the output log itself at
//! start, so a crash between publishing and anything else neither repeats nor skips one.

use std::sync::Arc;

use lhc_log::Log;
use serde::{Deserialize, Serialize};

use crate::store::{NodeError, Store};

/// One record of the output log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputRecord {
    /// Offset of the input record that produced the output.
    pub input_offset: u64,
    /// Position among that input's outputs.
    pub index: u32,
    /// The connector node that published it.
    pub node: String,
    /// The output, as `lhc replay` prints it.
    pub output: serde_json::Value,
}

/// Outputs read from the store per round.
const CHUNK: usize = 4096;

pub(crate) struct Publisher {
    log: Arc<dyn Log>,
    node: String,
    cursor: Option<(u64, u32)>,
}

impl Publisher {
    /// Positions itself after the last output the log holds.
    pub(crate) fn open(log: Arc<dyn Log>, node: &str) -> Result<Publisher, lhc_log::LogError> {
        let end = log.end_offset()?;
        let mut cursor = None;
        if end > log.start_offset()? {
            if let Some(last) = log.reader(end - 1)?.next(std::time::Duration::ZERO)? {
                match serde_json::from_slice::<OutputRecord>(&last.bytes) {
                    Ok(r) => cursor = Some((r.input_offset, r.index)),
                    Err(e) => tracing::warn!(
                        "the last record of output log {} is not an lhc output ({e}); \
                         publishing from the first stored output",
                        log.describe()
                    ),
                }
            }
        }
        Ok(Publisher {
            log,
            node: node.to_string(),
            cursor,
        })
    }

    /// Publishes every committed output after the cursor that concerns this node (its own
    /// events and decisions, and quarantines). A log error is reported and retried at the
    /// next call; the store is the source of truth meanwhile.
    pub(crate) fn catch_up(&mut self, store: &Store) -> Result<(), NodeError> {
        loop {
            let stored = store.outputs_after(self.cursor, CHUNK)?;
            let Some(&(last_offset, last_index, _)) = stored.last() else {
                return Ok(());
            };
            let mut records = Vec::new();
            for (offset, index, bytes) in &stored {
                let output: serde_json::Value = match serde_json::from_slice(bytes) {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::error!("stored output at {offset}/{index} unreadable: {e}");
                        continue;
                    }
                };
                let concerns = match output.get("connector").and_then(|c| c.as_str()) {
                    Some(c) => c.eq_ignore_ascii_case(&self.node),
                    None => true,
                };
                if concerns {
                    let record = OutputRecord {
                        input_offset: *offset,
                        index: *index,
                        node: self.node.clone(),
                        output,
                    };
                    records.push(serde_json::to_vec(&record).expect("outputs serialize"));
                }
            }
            let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            if !refs.is_empty() {
                if let Err(e) = self.log.append(&refs) {
                    tracing::warn!(
                        "publishing outputs to {} failed, will retry: {e}",
                        self.log.describe()
                    );
                    return Ok(());
                }
            }
            self.cursor = Some((last_offset, last_index));
            if stored.len() < CHUNK {
                return Ok(());
            }
        }
    }
}
