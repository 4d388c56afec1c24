//! The connector node: the site log folded into a RocksDB cache snapshot ([`store`]), and the
//! live daemon around it ([`live`]) that observes the world, appends what it saw to the log
//! and answers StoreFront, VDAs, load balancers and peers from its own fold.
//!
//! Invariant: every decision the node makes comes out of the engine folding the log; the
//! daemon only appends observations and reads results, so a replay of the log makes the
//! same decisions.

pub mod checkpoints;
pub mod journal;
pub mod live;
pub mod store;

pub use store::{
    fold, fold_until, CommitJob, FoldSummary, Folder, JournalChanges, NodeError, Store,
    StoreOptions, Until,
};
