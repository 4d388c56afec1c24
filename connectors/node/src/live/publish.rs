//! Publishing the node's outputs to the output log (`lhc.outputs`).
//!
//! Invariant: an output is published only after the commit that stored it, in store order,
//! and the position of the last published output is read back from the output log itself at
//! start, so a crash between publishing and anything else neither repeats nor skips one.

use std::sync::Arc;

use lhc_log::Log;

use crate::store::{NodeError, Store};

/// One record of the output log (schema: `schemas/published-output.schema.json`).
pub use lhc_engine::output::PublishedOutput as OutputRecord;

/// Runs the publisher on its own thread: after each commit the fold sends a message; the
/// thread publishes everything committed since the cursor. A failing output log is retried
/// (every few seconds, and after each commit) without holding up the fold. When the fold
/// ends (the channel closes) it publishes what is left and returns.
pub(crate) fn spawn(
    mut publisher: Publisher,
    store: Arc<Store>,
    commits: std::sync::mpsc::Receiver<()>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("lhc-publish".into())
        .spawn(move || loop {
            let closed = match commits.recv_timeout(std::time::Duration::from_secs(3)) {
                Ok(()) => {
                    while commits.try_recv().is_ok() {}
                    false
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => false,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => true,
            };
            if let Err(e) = publisher.catch_up(&store) {
                tracing::error!("publishing outputs: {e}");
            }
            if closed {
                return;
            }
        })
}

/// Outputs read from the store per round.
const CHUNK: usize = 4096;

pub(crate) struct Publisher {
    log: Arc<dyn Log>,
    node: String,
    /// The site, named in each record (Kafka mode).
    site: Option<String>,
    cursor: Option<(u64, u32)>,
    /// Whether the cursor was read from the output log (nothing is published before: the
    /// output log may be unreachable at start).
    located: bool,
    /// The last failure to locate, so a lasting one is logged once.
    locate_error: Option<String>,
}

impl Publisher {
    /// A publisher for `node` of `site`; it finds its place in the output log at its first
    /// round.
    pub(crate) fn new(log: Arc<dyn Log>, node: &str, site: Option<String>) -> Publisher {
        Publisher {
            log,
            site,
            node: node.to_string(),
            cursor: None,
            located: false,
            locate_error: None,
        }
    }

    /// Positions itself after the last output of this node the log holds. The log may be
    /// shared (a Kafka topic where every node publishes): it looks back from the end in
    /// growing windows until it finds one of this node's records.
    fn locate(&mut self) -> Result<(), lhc_log::LogError> {
        let (log, node) = (&self.log, self.node.as_str());
        let (start, end) = (log.start_offset()?, log.end_offset()?);
        let mut cursor = None;
        let mut window = 1u64;
        let mut scanned_from = end;
        while cursor.is_none() && scanned_from > start {
            let from = end.saturating_sub(window).max(start);
            let mut reader = log.reader(from)?;
            while let Some(entry) = reader.next(std::time::Duration::ZERO)? {
                if entry.offset >= scanned_from {
                    break;
                }
                match serde_json::from_slice::<OutputRecord>(&entry.bytes) {
                    Ok(r) if r.node.eq_ignore_ascii_case(node) => {
                        cursor = Some((r.input_offset, r.index))
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(
                        "record {} of output log {} is not an lhc output ({e}); skipped",
                        entry.offset,
                        log.describe()
                    ),
                }
            }
            scanned_from = from;
            window = window.saturating_mul(16);
        }
        self.cursor = cursor;
        self.located = true;
        Ok(())
    }

    /// Publishes every committed output after the cursor that concerns this node (its own
    /// events and decisions, and quarantines). A log error is reported and retried at the
    /// next call; the store is the source of truth meanwhile.
    pub(crate) fn catch_up(&mut self, store: &Store) -> Result<(), NodeError> {
        if !self.located {
            if let Err(e) = self.locate() {
                let e = e.to_string();
                if self.locate_error.as_ref() != Some(&e) {
                    tracing::warn!(
                        "output log {} unreachable; outputs are kept in the store and \
                         published when it answers: {e}",
                        self.log.describe()
                    );
                    self.locate_error = Some(e);
                }
                return Ok(());
            }
            if self.locate_error.take().is_some() {
                tracing::info!("output log {} answers: publishing", self.log.describe());
            }
        }
        loop {
            let stored = store.outputs_after(self.cursor, CHUNK)?;
            let Some(&(last_offset, last_index, _)) = stored.last() else {
                return Ok(());
            };
            let mut records = Vec::new();
            for (offset, index, bytes) in &stored {
                let output: lhc_engine::Output = match serde_json::from_slice(bytes) {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::error!("stored output at {offset}/{index} unreadable: {e}");
                        continue;
                    }
                };
                let concerns = match output.connector() {
                    Some(c) => c.eq_ignore_ascii_case(&self.node),
                    None => true,
                };
                if concerns {
                    let record = OutputRecord {
                        input_offset: *offset,
                        index: *index,
                        node: self.node.clone(),
                        site: self.site.clone(),
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
