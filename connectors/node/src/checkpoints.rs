//! Checkpoints kept in the node's RocksDB: the engine state after every N records it
//! folded, in the `checkpoints` column family keyed by the next offset, holding the bytes a
//! checkpoint file beside an embedded log holds (`lhc_log::checkpoint`). `lhc query --at T
//! --data DIR` starts from the nearest one instead of replaying from the first record.
//!
//! Invariant: a checkpoint is a shortcut, never state. The fold hands a copy of the engine
//! to a thread of its own ([`run`]). A live node never waits for it: while that thread is
//! still busy with the previous checkpoint, the due one is taken after the first record
//! applied once it is free (so it may cover a few more records than a multiple of N), and
//! taking checkpoints never slows a launch. `lhc connector fold` waits instead, so its
//! checkpoints are exactly every N records, byte for byte those `lhc log checkpoint`
//! writes. What a checkpoint names of the records it
//! covers (the hashes of the first, the last and sixteen spread between) is read back from
//! the log the node folds, or in Kafka mode from its journal once the commit covering them
//! is written; a reader uses a checkpoint only when those hashes and the digest of the state
//! rebuilt from it match.

use std::sync::mpsc::Receiver;
use std::time::Duration;

use lhc_engine::Engine;
use lhc_log::checkpoint::{self as format, sha256_hex};

use crate::store::{NodeError, Store};

/// Records between two checkpoints when the user does not say (as `lhc log checkpoint`).
pub const DEFAULT_EVERY: u64 = format::DEFAULT_EVERY;
/// Checkpoints kept when the user does not say: the newest ones, older ones deleted.
pub const DEFAULT_KEEP: u64 = 32;

/// When the node takes checkpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Records between two (0: none).
    pub every: u64,
    /// How many to keep (the newest).
    pub keep: usize,
    /// The build writing them, named in each header (a reader of another build ignores
    /// them: it may fold the records differently).
    pub build: String,
}

impl CheckpointPolicy {
    /// No checkpoints.
    pub fn off() -> CheckpointPolicy {
        CheckpointPolicy {
            every: 0,
            keep: 0,
            build: String::new(),
        }
    }
}

/// What the records folded so far were, beside the state: what a checkpoint's header says
/// of them. Kept in `meta` with every commit, so a restarted node goes on counting.
pub use lhc_log::checkpoint::Coverage;

/// A checkpoint due: the engine after `next` records, with what they were.
pub struct CheckpointJob {
    /// The engine (configuration part included).
    pub engine: Engine,
    /// Records covered.
    pub next: u64,
    /// What they were.
    pub coverage: Coverage,
    /// Says the writer is busy until the job is dropped (a live node's fold asks it
    /// before copying the engine): held for its `Drop`, never read.
    #[allow(dead_code)]
    pub(crate) busy: Option<Busy>,
}

/// Set while a checkpoint is being written; cleared when its job is dropped, written or not.
pub(crate) struct Busy(pub(crate) std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Where the bytes of the records a checkpoint covers are read back from.
pub enum Records<'a> {
    /// The log the node folds (its offsets are the engine's).
    Log(&'a dyn lhc_log::Log),
    /// The node's journal (Kafka mode): readable once the commit covering them is written.
    Journal,
}

impl Records<'_> {
    /// The bytes of the record at `offset`; `None` when it is not there.
    fn read(&self, store: &Store, offset: u64) -> Result<Option<Vec<u8>>, NodeError> {
        match self {
            Records::Log(log) => Ok(format::record_bytes(*log, offset)?),
            Records::Journal => Ok(store
                .journal(offset.checked_sub(1), 1)?
                .into_iter()
                .find(|(at, _)| *at == offset)
                .map(|(_, bytes)| bytes)),
        }
    }
}

/// Writes the checkpoints handed over until the sender is dropped. A checkpoint that cannot
/// be written is a warning in the node's log, never a stop: the node decides without them.
///
/// `no_more_commits` says when waiting for a commit is vain (the node stopped committing).
pub fn run(
    store: &Store,
    policy: &CheckpointPolicy,
    records: &Records<'_>,
    jobs: Receiver<CheckpointJob>,
    no_more_commits: &dyn Fn() -> bool,
) {
    let mut encoder = format::Encoder::default();
    for job in jobs {
        let next = job.next;
        match write(store, policy, records, job, no_more_commits, &mut encoder) {
            Ok(true) => tracing::info!(next_offset = next, "checkpoint written"),
            Ok(false) => {}
            Err(e) => tracing::warn!(next_offset = next, error = %e, "checkpoint not written"),
        }
    }
}

/// Writes one checkpoint; `Ok(false)` when its records could not all be read back (the
/// log no longer holds them, or the commit covering them never came).
fn write(
    store: &Store,
    policy: &CheckpointPolicy,
    records: &Records<'_>,
    job: CheckpointJob,
    no_more_commits: &dyn Fn() -> bool,
    encoder: &mut format::Encoder,
) -> Result<bool, NodeError> {
    if let Records::Journal = records {
        while store.committed_next() < job.next {
            if no_more_commits() {
                tracing::warn!(
                    next_offset = job.next,
                    "checkpoint skipped: the commit covering its records did not come"
                );
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let hash = |offset: u64| -> Result<Option<String>, NodeError> {
        Ok(records.read(store, offset)?.map(|b| sha256_hex(&b)))
    };
    let Some((first_record, last_record, samples)) = format::record_hashes(job.next, hash)? else {
        tracing::warn!(
            next_offset = job.next,
            "checkpoint skipped: the log no longer holds every record it covers"
        );
        return Ok(false);
    };
    let covered = format::Covered {
        build: policy.build.clone(),
        next_offset: job.next,
        coverage: job.coverage,
        first_record,
        last_record,
        samples,
    };
    let bytes = encoder
        .encode(&job.engine, covered)
        .map_err(|e| NodeError::Checkpoint(format!("compressing the state: {e}")))?;
    // The engine is let go on this thread, not the fold's.
    drop(job.engine);
    store.put_checkpoint(job.next, &bytes, policy.keep)?;
    Ok(true)
}
