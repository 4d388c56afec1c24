//! The connector node's cache snapshot (the LHC database) in RocksDB, folded from the site
//! log exactly once.
//!
//! Invariant (principle 4): the engine state, the offset of the next record to apply and
//! the outputs of the records applied since the previous commit are written in one
//! `WriteBatch`. A process killed at any instant restarts from the last commit: no record
//! is applied twice, no output is lost or stored twice.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use lhc_engine::rows::StateDelta;
use lhc_engine::site::SiteConfig;
use lhc_engine::{decode_record_at, Admitted, ConfigPart, Engine, Output, Validation};
use lhc_log::{Log, LogEntry, LogError};
use rocksdb::{ColumnFamilyDescriptor, IteratorMode, Options, WriteBatch, WriteOptions};
use xxhash_rust::xxh3::xxh3_128;

use crate::checkpoints::{CheckpointJob, Coverage};

/// Most bytes of write-ahead log kept (see `Store::open`).
const WAL_LIMIT_BYTES: u64 = 64 << 20;

/// Multi-threaded mode: snapshot column families are created and dropped while others
/// read.
type DB = rocksdb::DBWithThreadMode<rocksdb::MultiThreaded>;

/// Column family of the applied offset, the site configuration and the snapshot list.
const META: &str = "meta";
/// Column family of the engine state, one row per object (`lhc_engine::rows`): a commit
/// writes the rows its records changed, not the whole state.
const STATE: &str = "state";
/// Column family of outputs, keyed by (input offset, index) big-endian.
const OUTPUTS: &str = "outputs";
/// Column family of the journal (Kafka mode): every record the node applied, by engine
/// offset. Replaying it reproduces the node's decisions.
const JOURNAL: &str = "journal";
/// Column family of the records this node wrote while Kafka was unreachable, by content
/// hash: how the node recognizes them when they come back from the topic.
const LOCAL: &str = "local";
/// Column family of local records not yet seen back in the topic, by engine offset.
const OUTBOX: &str = "outbox";
/// Key of the next Kafka offset to read (Kafka mode).
const KAFKA_NEXT_KEY: &[u8] = b"kafka_next";
/// Meta key: the offset (u64 big-endian) and xxh3-128 (big-endian) of the last record a
/// commit applied whole, written with the commits of a fold or node that was handed the
/// record's bytes: a log that holds another record there is not the one the store was
/// folded from, checkpoints or not.
const LAST_RECORD_KEY: &[u8] = b"last_record";
/// Meta key: this data directory's instance id (hex), part of its records' ids.
const INSTANCE_KEY: &[u8] = b"producer_instance";
/// Meta key: the Kafka topic and site this directory folds (`topic/site`), written at the
/// first start in Kafka mode.
const KAFKA_SOURCE_KEY: &[u8] = b"kafka_source";
/// Meta key: the run counter (u32 big-endian), one more at every start.
const EPOCH_KEY: &[u8] = b"producer_epoch";
/// Column family of checkpoints (`crate::checkpoints`): the bytes of a checkpoint file, by
/// next offset big-endian.
const CHECKPOINTS: &str = "checkpoints";
/// Meta key: what the records folded so far were (`Coverage`, JSON), written with every
/// commit. Stores without it were folded by a build that did not count: they take no
/// checkpoints until folded again from an empty directory.
const COVERAGE_KEY: &[u8] = b"coverage";
/// Every column family, in creation order.
const FAMILIES: [&str; 7] = [META, OUTPUTS, JOURNAL, LOCAL, OUTBOX, STATE, CHECKPOINTS];

/// Prefix of the column family holding one validated configuration version.
const SNAPSHOT_PREFIX: &str = "snapshot-v";
/// Key of the validation in a snapshot family.
const VALIDATION_KEY: &[u8] = b"validation";
/// Key of the list of snapshot versions in use (the switch).
const SNAPSHOTS_KEY: &[u8] = b"snapshots";
/// Key of the site configuration (as the cloud holds it).
const SITE_KEY: &[u8] = b"site";
/// Key of the version of the stored site configuration.
const SITE_VERSION_KEY: &[u8] = b"site_version";

/// Column family name of a snapshot version.
fn snapshot_family(version: u64) -> String {
    format!("{SNAPSHOT_PREFIX}{version}")
}

/// Key of the whole serialized engine in `meta`, as stores before the `state` family kept
/// it: read once, then replaced by rows at the next commit.
const LEGACY_STATE_KEY: &[u8] = b"engine";
/// Key of the next offset to apply.
const NEXT_KEY: &[u8] = b"next_offset";
/// Meta key: the layout of this store (u32 big-endian), written with every commit. Stores
/// without it were written before it existed, in layouts this build reads.
const FORMAT_KEY: &[u8] = b"store_format";
/// The layout this build writes: state rows, outputs by (offset, index) with a record's
/// catch-up steps continuing its indices (format 1); since format 2 each entry of a
/// connector's R-DATA maps is a state row of its own ([`Engine::for_each_store_row`]; a
/// store of format 1 is read as it is and rewritten at its first commit); since format 3 a
/// connector's recent activity is a row of its own, written only when it changed (a store
/// of format 2 is read as it is and rewritten at its first commit). A store of a later
/// format is refused at open, so a downgraded build never folds on in a layout it does not
/// know (a build of format 2 would take the activity rows for corruption, one of format 1
/// the entry rows; an older one would write a part-way record's outputs from index 0
/// again, losing the steps').
pub const STORE_FORMAT: u32 = 3;

/// Errors of the node store; each names what to check.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The store's directory cannot be created (a file is in the way, no permission).
    #[error(
        "cache snapshot {path}: {source}: --data must name a directory this user can create \
         and write"
    )]
    Dir {
        /// The store directory.
        path: PathBuf,
        /// Why it could not be created.
        source: std::io::Error,
    },
    /// RocksDB refused.
    #[error("cache snapshot {path}: {source}")]
    Store {
        /// The store directory.
        path: PathBuf,
        /// RocksDB's error.
        source: rocksdb::Error,
    },
    /// Another process holds the store open for writing.
    #[error(
        "cache snapshot {path} is in use by another process (a running node, or another \
         fold on the same --data): stop it first, or give this one its own --data"
    )]
    InUse {
        /// The store directory.
        path: PathBuf,
    },
    /// The stored state does not decode (written by another version?).
    #[error("cache snapshot {path}: stored state unreadable: {detail}; delete the directory to refold from the log")]
    Corrupt {
        /// The store directory.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
    /// The log failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The committer thread stopped on an error.
    #[error("commit failed: {0}")]
    Commit(String),
    /// Asked to stop while a record was applied in steps: the steps so far are
    /// committed, and the next start resumes from them.
    #[error("stopped part-way through a record applied in steps")]
    Stopped,
    /// Opened to read, the store lacks a family every store has from its first open: it
    /// was never completely made (a process killed while creating it), nothing is in it.
    #[error(
        "cache snapshot {path} was never completely made (no column family {family}): \
         nothing has been folded into it; fold again, or remove the directory"
    )]
    Unfinished {
        /// The store directory.
        path: PathBuf,
        /// The family missing.
        family: String,
    },
    /// A checkpoint could not be made (the node folds on without it).
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// A later build wrote the store in a layout this one does not know.
    #[error(
        "cache snapshot {path}: written by a newer lhc (store format {found}; this build \
         reads formats up to {STORE_FORMAT}): run that build again, or start from an empty \
         data directory, which folds the log again"
    )]
    NewerFormat {
        /// The store directory.
        path: PathBuf,
        /// The format it holds.
        found: u32,
    },
    /// The directory's state was folded from another kind of source: a Kafka node numbers
    /// its records in its own journal and keeps its position in the topic apart, while a
    /// fold of a log numbers them as the log does; continued by the other, records would
    /// be read again or skipped.
    #[error("{0}")]
    OtherSource(String),
}

/// Memory settings of the store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Shared block cache, bytes.
    pub block_cache_bytes: usize,
    /// Write buffer (memtable) size, bytes.
    pub write_buffer_bytes: usize,
    /// fsync the write-ahead log at each commit (survives power loss, not only kill -9).
    pub sync: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            block_cache_bytes: 32 << 20,
            write_buffer_bytes: 16 << 20,
            sync: false,
        }
    }
}

/// The RocksDB cache snapshot of one connector node.
pub struct Store {
    db: DB,
    path: PathBuf,
    sync: bool,
    options: Options,
    /// What the config part and the state rows in the store hold.
    written: Mutex<Written>,
    /// What the last commit wrote of the state.
    row_stats: Mutex<RowStats>,
    /// The next offset the last commit (or the load) named: records below it are in the
    /// store, journal included.
    committed: AtomicU64,
}

/// [`Coverage`] as `meta` keeps it: with the next offset of the commit that wrote it, so
/// that one left behind by commits that did not write it (an earlier build's, run on this
/// store meanwhile) is told from the current one.
#[derive(serde::Serialize, serde::Deserialize)]
struct CoverageAt {
    next: u64,
    coverage: Coverage,
}

/// The configuration part and the state rows as last written.
#[derive(Default)]
struct Written {
    site_version: Option<u64>,
    snapshots: BTreeSet<u64>,
    /// Hash of every state row the store holds but the R-DATA entry rows, by key: a row
    /// whose hash is unchanged is not written again. 128 bits, so that a collision (a
    /// change not written) is not a risk worth naming.
    rows: RowMarks,
    /// Commits prepared so far (see [`RowMark::pass`]).
    pass: u64,
    /// `rows` was read from the store (by a load or the first commit).
    rows_known: bool,
    /// A commit was started and did not finish: a delta (which holds only what changed
    /// since the failed one) would leave that commit's changes out, so only a complete
    /// pass may follow.
    unfinished: bool,
    /// The store still holds the whole engine under [`LEGACY_STATE_KEY`]; rows, once
    /// written, take precedence and the next commit deletes it.
    legacy_state: bool,
    /// The last load read the state from rows in this build's layout (format
    /// [`STORE_FORMAT`]): the engine it made is exactly what the store holds, so commits
    /// of what changed since may follow without a complete pass first.
    loaded_current: bool,
}

/// The state rows of a commit, staged in one buffer while the site and the new snapshots
/// serialize on other threads, then copied into a batch made large enough for the whole
/// commit at once.
#[derive(Default)]
struct StagedRows {
    /// Keys and values, one after the other.
    bytes: Vec<u8>,
    /// Each operation with where its key starts, the key's length and the value's (for a
    /// range, the end key's).
    ops: Vec<(StagedOp, usize, usize, usize)>,
}

/// An operation on the state family.
#[derive(Clone, Copy)]
enum StagedOp {
    Put,
    Delete,
    DeleteRange,
}

impl StagedRows {
    fn push(&mut self, op: StagedOp, key: &[u8], value: &[u8]) {
        self.ops
            .push((op, self.bytes.len(), key.len(), value.len()));
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
    }

    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.push(StagedOp::Put, key, value);
    }

    fn delete(&mut self, key: &[u8]) {
        self.push(StagedOp::Delete, key, &[]);
    }

    fn delete_range(&mut self, from: &[u8], to: &[u8]) {
        self.push(StagedOp::DeleteRange, from, to);
    }

    /// About what the operations take in a batch (each has a tag, a family id and two
    /// lengths besides its bytes).
    fn batch_bytes(&self) -> usize {
        self.bytes.len() + 16 * self.ops.len()
    }

    /// Puts the operations into `batch`, in the order they were staged.
    fn write_into(&self, batch: &mut WriteBatch, cf: &impl rocksdb::AsColumnFamilyRef) {
        for &(op, at, key, value) in &self.ops {
            let k = &self.bytes[at..at + key];
            let v = &self.bytes[at + key..at + key + value];
            match op {
                StagedOp::Put => batch.put_cf(cf, k, v),
                StagedOp::Delete => batch.delete_cf(cf, k),
                StagedOp::DeleteRange => batch.delete_range_cf(cf, k, v),
            }
        }
    }
}

/// A state row as written.
#[derive(Clone, Copy)]
struct RowMark {
    /// xxh3-128 of its value.
    hash: u128,
    /// The last commit preparation that found it in the state: rows not found by the
    /// current one are objects gone, to delete.
    pass: u64,
}

/// The marks of the state rows a store holds (all but the R-DATA entry rows), with the
/// keys of the kinds a delta holds whole apart: a delta's commit looks for those of them
/// gone among a score of keys, not among every row (hundreds of thousands at a big site,
/// scanned at every commit).
#[derive(Default)]
struct RowMarks {
    marks: HashMap<Box<[u8]>, RowMark>,
    /// Keys of the rows a delta always holds ([`lhc_engine::rows::held_whole_by_deltas`]).
    whole: BTreeSet<Box<[u8]>>,
}

impl RowMarks {
    fn get_mut(&mut self, key: &[u8]) -> Option<&mut RowMark> {
        self.marks.get_mut(key)
    }

    fn contains_key(&self, key: &[u8]) -> bool {
        self.marks.contains_key(key)
    }

    fn len(&self) -> usize {
        self.marks.len()
    }

    fn insert(&mut self, key: Box<[u8]>, mark: RowMark) {
        if lhc_engine::rows::held_whole_by_deltas(&key) {
            self.whole.insert(key.clone());
        }
        self.marks.insert(key, mark);
    }

    fn remove(&mut self, key: &[u8]) {
        self.whole.remove(key);
        self.marks.remove(key);
    }

    /// Every row, in no order.
    fn iter(&self) -> impl Iterator<Item = (&Box<[u8]>, &RowMark)> {
        self.marks.iter()
    }

    /// The rows of the kinds a delta holds whole, in key order.
    fn whole(&self) -> impl Iterator<Item = (&Box<[u8]>, &RowMark)> {
        self.whole
            .iter()
            .map(|key| (key, self.marks.get(key).expect("kept with the marks")))
    }
}

/// The state rows a commit puts and deletes.
#[derive(Default)]
struct ChangedRows {
    puts: Vec<(Box<[u8]>, u128)>,
    deletes: Vec<Box<[u8]>>,
    bytes: usize,
    /// R-DATA entry rows put (not followed in [`Written::rows`]).
    entries: usize,
}

/// What the last commit wrote of the state (for tests and benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowStats {
    /// Rows the state has, besides the R-DATA entry rows (not counted one by one).
    pub rows: usize,
    /// Rows written (new or changed), besides the R-DATA entry rows.
    pub written: usize,
    /// R-DATA entry rows written (changed, or all of them in a complete pass).
    pub entries_written: usize,
    /// Rows deleted (objects gone), besides the R-DATA entry rows.
    pub deleted: usize,
    /// Bytes of the rows written.
    pub bytes: usize,
}

impl Store {
    /// Opens (or creates) the store in `path`.
    pub fn open(path: impl AsRef<Path>, options: &StoreOptions) -> Result<Store, NodeError> {
        Store::open_as(path.as_ref(), options, false)
    }

    /// Opens an existing store to read it, beside a node that may be running on it (RocksDB
    /// read-only: no lock taken, nothing written, the state as of this open). Refused when
    /// there is no store.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store, NodeError> {
        Store::open_as(path.as_ref(), &StoreOptions::default(), true)
    }

    fn open_as(path: &Path, options: &StoreOptions, read_only: bool) -> Result<Store, NodeError> {
        let path = path.to_path_buf();
        if !read_only {
            // Asked here: RocksDB's own error for it is a Rust debug dump of the OS error.
            std::fs::create_dir_all(&path).map_err(|source| NodeError::Dir {
                path: path.clone(),
                source,
            })?;
        }
        let mut db_options = Options::default();
        db_options.create_if_missing(!read_only);
        db_options.create_missing_column_families(!read_only);
        db_options.set_write_buffer_size(options.write_buffer_bytes);
        db_options.set_max_write_buffer_number(2);
        // A family written little (meta, checkpoints) would otherwise pin every write-ahead
        // log since its last flush: gigabytes on disk, all replayed at each open. Past this
        // size the families holding the oldest log are flushed and it is deleted.
        db_options.set_max_total_wal_size(WAL_LIMIT_BYTES);
        let cache = rocksdb::Cache::new_lru_cache(options.block_cache_bytes);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&cache);
        db_options.set_block_based_table_factory(&table);
        // Every family the directory holds must be opened, snapshot ones included.
        let existing = DB::list_cf(&db_options, &path);
        let error = |source| NodeError::Store {
            path: path.clone(),
            source,
        };
        if read_only {
            // What is read must be there: a family this build names but the store lacks
            // (an earlier build's) is created empty only by a writer.
            let found = existing.clone().map_err(error)?;
            if let Some(missing) = FAMILIES
                .iter()
                .find(|n| **n != CHECKPOINTS && !found.iter().any(|f| f == *n))
            {
                return Err(NodeError::Unfinished {
                    path,
                    family: missing.to_string(),
                });
            }
        }
        let existing = existing.unwrap_or_default();
        let names: BTreeSet<String> = FAMILIES
            .iter()
            .map(|n| n.to_string())
            .filter(|n| !read_only || existing.contains(n))
            .chain(existing.iter().filter(|n| *n != "default").cloned())
            .collect();
        let families = names
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(name, db_options.clone()));
        let db = if read_only {
            DB::open_cf_descriptors_read_only(&db_options, &path, families, false)
        } else {
            DB::open_cf_descriptors(&db_options, &path, families)
        }
        .map_err(|source| {
            // RocksDB's own words ("While lock file: .../LOCK: Resource temporarily
            // unavailable") do not say what to do.
            if source.to_string().contains("lock file") {
                NodeError::InUse { path: path.clone() }
            } else {
                error(source)
            }
        })?;
        let store = Store {
            db,
            path,
            sync: options.sync,
            options: db_options,
            written: Mutex::new(Written::default()),
            row_stats: Mutex::new(RowStats::default()),
            committed: AtomicU64::new(0),
        };
        // Before the state is loaded or a family dropped: a later layout is not this
        // build's to interpret. (Opening may already have created, empty, a family this
        // build names that a later layout lacks.)
        if let Some(found) = store.format()? {
            if found > STORE_FORMAT {
                return Err(NodeError::NewerFormat {
                    path: store.path.clone(),
                    found,
                });
            }
        }
        let listed = store.listed_snapshots()?;
        // A snapshot family the meta does not list is an import interrupted before its
        // switch (R-CSS-3/4): the listed ones stay in use, the leftover goes (a reader
        // leaves it to the writer).
        for name in names
            .iter()
            .filter(|n| n.starts_with(SNAPSHOT_PREFIX) && !read_only)
        {
            let version = name[SNAPSHOT_PREFIX.len()..].parse::<u64>().ok();
            if !version.is_some_and(|v| listed.contains(&v)) {
                tracing::info!(family = %name, "dropping a snapshot left by an interrupted import");
                store.db.drop_cf(name).map_err(|e| store.error(e))?;
            }
        }
        *store.written.lock().expect("written") = Written {
            site_version: store.site_version()?,
            snapshots: listed,
            legacy_state: store
                .db
                .get_cf(&store.cf(META), LEGACY_STATE_KEY)
                .map_err(|e| store.error(e))?
                .is_some(),
            ..Written::default()
        };
        Ok(store)
    }

    /// The store format it was written in (None: before formats were recorded).
    pub fn format(&self) -> Result<Option<u32>, NodeError> {
        let Some(bytes) = self
            .db
            .get_cf(&self.cf(META), FORMAT_KEY)
            .map_err(|e| self.error(e))?
        else {
            return Ok(None);
        };
        let bytes: [u8; 4] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| NodeError::Corrupt {
                path: self.path.clone(),
                detail: format!("store format of {} bytes", bytes.len()),
            })?;
        Ok(Some(u32::from_be_bytes(bytes)))
    }

    /// Snapshot versions the meta lists (the ones in use).
    fn listed_snapshots(&self) -> Result<BTreeSet<u64>, NodeError> {
        match self
            .db
            .get_cf(&self.cf(META), SNAPSHOTS_KEY)
            .map_err(|e| self.error(e))?
        {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| NodeError::Corrupt {
                path: self.path.clone(),
                detail: format!("snapshot list: {e}"),
            }),
            None => Ok(BTreeSet::new()),
        }
    }

    fn site_version(&self) -> Result<Option<u64>, NodeError> {
        let bytes = self
            .db
            .get_cf(&self.cf(META), SITE_VERSION_KEY)
            .map_err(|e| self.error(e))?;
        Ok(bytes.and_then(|b| b.as_slice().try_into().ok().map(u64::from_be_bytes)))
    }

    /// Names of the snapshot column families present, for inspection and tests.
    pub fn snapshot_families(&self) -> Vec<String> {
        DB::list_cf(&self.options, &self.path)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.starts_with(SNAPSHOT_PREFIX))
            .collect()
    }

    fn error(&self, source: rocksdb::Error) -> NodeError {
        NodeError::Store {
            path: self.path.clone(),
            source,
        }
    }

    fn cf(&self, name: &str) -> Arc<rocksdb::BoundColumnFamily<'_>> {
        self.db
            .cf_handle(name)
            .expect("column families are created at open")
    }

    /// The stored engine and the next offset to apply; a fresh engine at 0 when empty.
    pub fn load(&self) -> Result<(Engine, u64), NodeError> {
        let corrupt = |detail: String| NodeError::Corrupt {
            path: self.path.clone(),
            detail,
        };
        let meta = self.cf(META);
        let next = match self.db.get_cf(&meta, NEXT_KEY).map_err(|e| self.error(e))? {
            Some(bytes) => u64::from_be_bytes(
                bytes
                    .as_slice()
                    .try_into()
                    .map_err(|_| corrupt("next offset is not 8 bytes".into()))?,
            ),
            None => return Ok((Engine::new(), 0)),
        };
        self.committed.store(next, Ordering::SeqCst);
        let (rows, hashes) = self.read_rows()?;
        let current = rows.is_some() && self.format()? == Some(STORE_FORMAT);
        let mut written = self.written.lock().expect("written");
        written.rows = hashes;
        written.rows_known = true;
        written.loaded_current = current;
        let mut engine = match rows {
            Some(engine) => engine,
            None => {
                let state = self
                    .db
                    .get_cf(&meta, LEGACY_STATE_KEY)
                    .map_err(|e| self.error(e))?
                    .ok_or_else(|| corrupt("an offset without a state".into()))?;
                serde_json::from_slice(&state).map_err(|e| corrupt(format!("state: {e}")))?
            }
        };
        drop(written);
        let mut part = ConfigPart::default();
        if let Some(site) = self.db.get_cf(&meta, SITE_KEY).map_err(|e| self.error(e))? {
            part.site = serde_json::from_slice(&site).map_err(|e| corrupt(format!("site: {e}")))?;
        }
        for version in self.listed_snapshots()? {
            let name = snapshot_family(version);
            let cf = self
                .db
                .cf_handle(&name)
                .ok_or_else(|| corrupt(format!("listed snapshot {name} is missing")))?;
            let bytes = self
                .db
                .get_cf(&cf, VALIDATION_KEY)
                .map_err(|e| self.error(e))?
                .ok_or_else(|| corrupt(format!("snapshot {name} is empty")))?;
            let validation: Validation = serde_json::from_slice(&bytes)
                .map_err(|e| corrupt(format!("snapshot {name}: {e}")))?;
            part.validations.insert(version, validation);
        }
        engine.restore_config(part);
        // The types keep "an episode exists exactly in LHC mode" only through the reducer;
        // a stored row could break it, so it is checked here rather than trusted.
        engine
            .check_restored()
            .map_err(|e| corrupt(format!("the stored state breaks an engine invariant: {e}")))?;
        Ok((engine, next))
    }

    /// The keys of the state rows the store holds, in key order (for checks and tools).
    pub fn state_row_keys(&self) -> Result<Vec<Box<[u8]>>, NodeError> {
        self.db
            .iterator_cf(&self.cf(STATE), IteratorMode::Start)
            .map(|item| item.map(|(key, _)| key).map_err(|e| self.error(e)))
            .collect()
    }

    /// The state rows: the engine they make (`None` when there are none) and their hashes.
    #[allow(clippy::type_complexity)]
    fn read_rows(&self) -> Result<(Option<Engine>, RowMarks), NodeError> {
        let mut builder = lhc_engine::rows::StateRows::new();
        let mut hashes = RowMarks::default();
        for item in self.db.iterator_cf(&self.cf(STATE), IteratorMode::Start) {
            let (key, value) = item.map_err(|e| self.error(e))?;
            builder.add(&key, &value).map_err(|e| NodeError::Corrupt {
                path: self.path.clone(),
                detail: e.to_string(),
            })?;
            if !lhc_engine::rows::is_entry_row(&key) {
                let hash = xxh3_128(&value);
                hashes.insert(key, RowMark { hash, pass: 0 });
            }
        }
        let engine = builder.finish().map_err(|e| NodeError::Corrupt {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        Ok((engine, hashes))
    }

    /// What the records folded so far were, with the next offset of the commit that wrote
    /// it (`None`: folded by a build that did not count).
    pub fn coverage(&self) -> Result<Option<(u64, Coverage)>, NodeError> {
        let Some(bytes) = self
            .db
            .get_cf(&self.cf(META), COVERAGE_KEY)
            .map_err(|e| self.error(e))?
        else {
            return Ok(None);
        };
        // It only feeds checkpoints: unreadable, it turns them off, never the node.
        match serde_json::from_slice::<CoverageAt>(&bytes) {
            Ok(at) => Ok(Some((at.next, at.coverage))),
            Err(e) => {
                tracing::warn!(
                    store = %self.path.display(),
                    error = %e,
                    "the count of quarantined records and times kept for checkpoints is \
                     unreadable: no checkpoints are taken"
                );
                Ok(None)
            }
        }
    }

    /// The next offset the last commit named (records below it are in the store).
    pub fn committed_next(&self) -> u64 {
        self.committed.load(Ordering::SeqCst)
    }

    /// Stores a checkpoint's bytes under its next offset, and deletes the oldest beyond
    /// the newest `keep`, in one write.
    pub fn put_checkpoint(&self, next: u64, bytes: &[u8], keep: usize) -> Result<(), NodeError> {
        let cf = self.cf(CHECKPOINTS);
        let mut batch = WriteBatch::default();
        batch.put_cf(&cf, next.to_be_bytes(), bytes);
        let mut older: Vec<u64> = self
            .checkpoints()?
            .into_iter()
            .map(|(offset, _)| offset)
            .filter(|&offset| offset != next)
            .collect();
        older.push(next);
        older.sort_unstable();
        let excess = older.len().saturating_sub(keep.max(1));
        for offset in &older[..excess] {
            batch.delete_cf(&cf, offset.to_be_bytes());
        }
        let mut write = WriteOptions::default();
        write.set_sync(self.sync);
        drop(cf);
        self.db.write_opt(batch, &write).map_err(|e| self.error(e))
    }

    /// The next offset of the newest checkpoint held, if any (reads one entry).
    pub fn newest_checkpoint(&self) -> Result<Option<u64>, NodeError> {
        let Some(cf) = self.db.cf_handle(CHECKPOINTS) else {
            return Ok(None);
        };
        let mut read = rocksdb::ReadOptions::default();
        read.fill_cache(false);
        let Some(item) = self.db.iterator_cf_opt(&cf, read, IteratorMode::End).next() else {
            return Ok(None);
        };
        let (key, _) = item.map_err(|e| self.error(e))?;
        self.checkpoint_offset(&key).map(Some)
    }

    /// The next offset a checkpoint's key names (8 bytes, big-endian).
    fn checkpoint_offset(&self, key: &[u8]) -> Result<u64, NodeError> {
        <[u8; 8]>::try_from(key)
            .map(u64::from_be_bytes)
            .map_err(|_| NodeError::Corrupt {
                path: self.path.clone(),
                detail: format!("a checkpoint key of {} bytes", key.len()),
            })
    }

    /// The checkpoints held: (next offset, bytes), ascending.
    pub fn checkpoints(&self) -> Result<Vec<(u64, usize)>, NodeError> {
        let mut found = Vec::new();
        // A store an earlier build wrote, opened to read, has none.
        let Some(cf) = self.db.cf_handle(CHECKPOINTS) else {
            return Ok(found);
        };
        // Listing reads the values too: kept out of the block cache the state shares.
        let mut read = rocksdb::ReadOptions::default();
        read.fill_cache(false);
        for item in self.db.iterator_cf_opt(&cf, read, IteratorMode::Start) {
            let (key, value) = item.map_err(|e| self.error(e))?;
            found.push((self.checkpoint_offset(&key)?, value.len()));
        }
        Ok(found)
    }

    /// Refuses to go on folding `log` when the newest checkpoint held names other records
    /// than `log` holds at those offsets (the first, the last it covers, 16 between): the
    /// store was folded from another log, and folding on would mix the two.
    ///
    /// Before that, the log's record at the offset of the last record the store applied
    /// whole must be that record (its hash is kept in meta with the commits of this
    /// build), and the log must hold that offset: a store with no checkpoint yet (the
    /// first comes after 150,000 records by default) is refused another log too, even one
    /// that shares its first records.
    pub fn refuse_other_log(&self, log: &dyn Log) -> Result<(), NodeError> {
        // Asked once for every record checked below (on Kafka each ask is a round trip).
        let (start, end) = (log.start_offset(), log.written_end());
        self.refuse_other_last_record(
            log,
            start.as_ref().ok().copied(),
            end.as_ref().ok().copied(),
        )?;
        let holds = start.and_then(|start| Ok(start..end?));
        let Some(offset) = self.newest_checkpoint()? else {
            return Ok(());
        };
        let Some(bytes) = self.checkpoint(offset)? else {
            return Ok(());
        };
        // A damaged checkpoint tells nothing about the log: the reader names it.
        let Ok((header, _)) = lhc_log::checkpoint::split(&bytes) else {
            return Ok(());
        };
        let holds = holds?;
        let hash = |at: u64| -> Result<Option<String>, NodeError> {
            Ok(
                lhc_log::checkpoint::record_bytes_in(log, at, holds.clone())?
                    .map(|b| lhc_log::checkpoint::sha256_hex(&b)),
            )
        };
        let held = lhc_log::checkpoint::record_hashes(header.next_offset, hash)?;
        match held {
            Some((first, last, samples))
                if first == header.first_record
                    && last == header.last_record
                    && samples == header.samples =>
            {
                Ok(())
            }
            // The log no longer holds them all (shorter): the fold's own checks say so.
            None => Ok(()),
            Some(_) => Err(NodeError::OtherSource(format!(
                "{} was folded from another log than {}: the records its checkpoint after \
                 {} records names are not that log's; give each log its own --data",
                self.path.display(),
                log.describe(),
                header.next_offset
            ))),
        }
    }

    /// The first half of [`Store::refuse_other_log`]: the log's record at the offset of the
    /// last record the store applied whole against that record's hash. `start`, `end`: the
    /// offsets the log holds, `None` where it could not say.
    fn refuse_other_last_record(
        &self,
        log: &dyn Log,
        start: Option<u64>,
        end: Option<u64>,
    ) -> Result<(), NodeError> {
        let Some(value) = self
            .db
            .get_cf(&self.cf(META), LAST_RECORD_KEY)
            .map_err(|e| self.error(e))?
        else {
            // A store of an earlier build, or with nothing applied yet.
            return Ok(());
        };
        let (offset, held) = <[u8; 24]>::try_from(value.as_slice())
            .map(|v| {
                let (offset, hash) = v.split_at(8);
                (
                    u64::from_be_bytes(offset.try_into().expect("8 bytes")),
                    u128::from_be_bytes(hash.try_into().expect("16 bytes")),
                )
            })
            .map_err(|_| NodeError::Corrupt {
                path: self.path.clone(),
                detail: format!("the last record's hash is {} bytes, not 24", value.len()),
            })?;
        if let Some(end) = end.filter(|end| *end <= offset) {
            return Err(NodeError::OtherSource(format!(
                "{} has applied {} records, more than {} holds ({}): it was folded from \
                 another log (give each log its own --data), or from this one before it \
                 lost its last records (restore them, or fold it again into an empty \
                 --data)",
                self.path.display(),
                offset + 1,
                log.describe(),
                end,
            )));
        }
        let (Some(start), Some(end)) = (start, end) else {
            // A log that cannot say what it holds (brokers down): the fold's own reading
            // says so.
            return Ok(());
        };
        // A log that cannot be read there (a damaged segment): the fold's own reading says
        // so, after folding what it can.
        let Ok(Some(bytes)) = lhc_log::checkpoint::record_bytes_in(log, offset, start..end) else {
            return Ok(());
        };
        if xxh3_128(&bytes) == held {
            return Ok(());
        }
        Err(NodeError::OtherSource(format!(
            "{} was folded from another log than {}: the record it applied at offset \
             {offset} is not that log's; give each log its own --data",
            self.path.display(),
            log.describe(),
        )))
    }

    /// The bytes of the checkpoint covering `next` records, if held.
    pub fn checkpoint(&self, next: u64) -> Result<Option<Vec<u8>>, NodeError> {
        let Some(cf) = self.db.cf_handle(CHECKPOINTS) else {
            return Ok(None);
        };
        self.db
            .get_cf(&cf, next.to_be_bytes())
            .map_err(|e| self.error(e))
    }

    /// What the last commit wrote of the state.
    pub fn row_stats(&self) -> RowStats {
        *self.row_stats.lock().expect("row stats")
    }

    /// Writes the state, the next offset, the pending outputs and the journal changes in one
    /// batch.
    ///
    /// The configuration part is written apart: the site configuration when its version
    /// changed, and each validated version into a column family of its own, made before
    /// the batch; the batch carries the version's value and lists the versions in use,
    /// which is the atomic switch (R-CSS-3/4), and families no longer listed are dropped
    /// after it.
    pub fn commit(
        &self,
        engine: &mut Engine,
        next: u64,
        outputs: &[Outputs],
        journal: &JournalChanges,
        coverage: Option<&Coverage>,
    ) -> Result<(), NodeError> {
        let part = engine.take_config();
        let result = self.write(
            Rows::Whole(&*engine),
            part.site.version,
            Some(&part.site),
            &part.validations,
            next,
            outputs,
            journal,
            coverage,
        );
        engine.restore_config(part);
        result
    }

    /// Writes a commit prepared by [`Folder::commit_job`] (on another thread).
    pub fn write_job(&self, job: &CommitJob) -> Result<(), NodeError> {
        self.write(
            Rows::Delta(&job.state),
            job.site_version,
            job.site.as_deref(),
            &job.validations,
            job.next,
            &job.outputs,
            &job.journal,
            job.coverage.as_ref(),
        )
    }

    /// The commit proper: `state` is the engine without its configuration part, which comes
    /// as the site (needed only when its version changed since the last write) and the
    /// validations.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        state: Rows<'_>,
        site_version: u64,
        site: Option<&SiteConfig>,
        validations: &BTreeMap<u64, Validation>,
        next: u64,
        outputs: &[Outputs],
        journal: &JournalChanges,
        coverage: Option<&Coverage>,
    ) -> Result<(), NodeError> {
        let mut written = self.written.lock().expect("written");
        if let Rows::Delta(delta) = state {
            if written.unfinished && !delta.complete() {
                return Err(NodeError::Commit(
                    "an earlier commit failed and this one holds only what changed since it: \
                     written, the store would miss that commit's changes; restart the node, \
                     which folds again from its last commit"
                        .into(),
                ));
            }
        }
        written.unfinished = true;
        let site = if written.site_version == Some(site_version) {
            None
        } else {
            Some(site.ok_or_else(|| NodeError::Corrupt {
                path: self.path.clone(),
                detail: format!("site version {site_version} changed but was not given"),
            })?)
        };
        // After a configuration change the site, the new snapshot and the state are tens of
        // megabytes of JSON for a big site: the site and the new snapshots serialize on
        // threads of their own meanwhile, while this one writes the state rows.
        if !written.rows_known {
            // A commit without a load first: learn what the store holds, so that rows of
            // objects gone are deleted.
            written.rows = self.read_rows()?.1;
            written.rows_known = true;
        }
        let snapshots: BTreeSet<u64> = validations.keys().copied().collect();
        let new: Vec<(u64, &Validation)> = validations
            .iter()
            .filter(|(version, _)| !written.snapshots.contains(version))
            .map(|(version, validation)| (*version, validation))
            .collect();
        let mut rows = StagedRows::default();
        let (site, new, changed) = std::thread::scope(|scope| {
            let site = site.map(|site| {
                scope.spawn(move || serde_json::to_vec(site).expect("the site serializes"))
            });
            let serialized = (!new.is_empty()).then(|| {
                let new = &new;
                scope.spawn(move || {
                    new.iter()
                        .map(|(version, validation)| {
                            let bytes =
                                serde_json::to_vec(validation).expect("a validation serializes");
                            (*version, bytes)
                        })
                        .collect::<Vec<_>>()
                })
            });
            let created = self.create_snapshot_families(new.iter().map(|(version, _)| *version));
            let changed = self.put_changed_rows(state, &mut written, &mut rows);
            let site = site.map(|job| (site_version, job.join().expect("serializing the site")));
            let new = serialized
                .map(|job| job.join().expect("serializing a snapshot"))
                .unwrap_or_default();
            (site, created.map(|()| new), changed)
        });
        let new = new?;
        // One allocation for the batch: grown by doubling, a batch of tens of megabytes
        // (a big site's import) cost more in copies and fresh pages than its write.
        let capacity = rows.batch_bytes()
            + site.as_ref().map_or(0, |(_, bytes)| bytes.len() + 64)
            + new.iter().map(|(_, bytes)| bytes.len() + 64).sum::<usize>()
            + (64 << 10);
        let mut batch = WriteBatch::with_capacity_bytes(capacity);
        rows.write_into(&mut batch, &self.cf(STATE));
        drop(rows);
        // A new snapshot's value goes in the same batch as the switch that lists it: a
        // family left by a failed commit is unlisted (dropped at the next open, or given
        // its value by the next commit).
        for (version, bytes) in new {
            let name = snapshot_family(version);
            let cf = self.db.cf_handle(&name).expect("created above");
            batch.put_cf(&cf, VALIDATION_KEY, bytes);
        }
        let retired: Vec<u64> = written.snapshots.difference(&snapshots).copied().collect();
        let meta = self.cf(META);
        if let Some((version, bytes)) = &site {
            batch.put_cf(&meta, SITE_KEY, bytes);
            batch.put_cf(&meta, SITE_VERSION_KEY, version.to_be_bytes());
        }
        if snapshots != written.snapshots {
            let list = serde_json::to_vec(&snapshots).expect("a list of versions serializes");
            batch.put_cf(&meta, SNAPSHOTS_KEY, list);
        }
        for (offset, bytes) in &journal.journal {
            batch.put_cf(&self.cf(JOURNAL), offset.to_be_bytes(), bytes);
        }
        for (hash, offset) in &journal.local {
            batch.put_cf(&self.cf(LOCAL), hash, offset.to_be_bytes());
        }
        for (offset, bytes) in &journal.outbox_put {
            batch.put_cf(&self.cf(OUTBOX), offset.to_be_bytes(), bytes);
        }
        for offset in &journal.outbox_delete {
            batch.delete_cf(&self.cf(OUTBOX), offset.to_be_bytes());
        }
        if let Some((offset, hash)) = journal.last_record {
            let mut value = offset.to_be_bytes().to_vec();
            value.extend_from_slice(&hash.to_be_bytes());
            batch.put_cf(&meta, LAST_RECORD_KEY, value);
        }
        if let Some(k) = journal.kafka_next {
            batch.put_cf(&self.cf(META), KAFKA_NEXT_KEY, k.to_be_bytes());
        }
        if written.legacy_state {
            batch.delete_cf(&meta, LEGACY_STATE_KEY);
        }
        batch.put_cf(&meta, NEXT_KEY, next.to_be_bytes());
        batch.put_cf(&meta, FORMAT_KEY, STORE_FORMAT.to_be_bytes());
        if let Some(coverage) = coverage {
            let at = CoverageAt {
                next,
                coverage: coverage.clone(),
            };
            let bytes = serde_json::to_vec(&at).expect("coverage serializes");
            batch.put_cf(&meta, COVERAGE_KEY, bytes);
        }
        let cf = self.cf(OUTPUTS);
        for (offset, first, list) in outputs {
            for (index, output) in (*first..).zip(list) {
                let key = output_key(*offset, index);
                batch.put_cf(
                    &cf,
                    key,
                    serde_json::to_vec(output).expect("outputs serialize"),
                );
            }
        }
        let mut write = WriteOptions::default();
        write.set_sync(self.sync);
        drop((meta, cf));
        self.db
            .write_opt(batch, &write)
            .map_err(|e| self.error(e))?;
        self.committed.store(next, Ordering::SeqCst);
        if let Some((version, _)) = site {
            written.site_version = Some(version);
        }
        written.legacy_state = false;
        written.unfinished = false;
        let mut stats = RowStats {
            written: changed.puts.len(),
            entries_written: changed.entries,
            deleted: changed.deletes.len(),
            bytes: changed.bytes,
            ..RowStats::default()
        };
        for key in changed.deletes {
            written.rows.remove(&key);
        }
        let pass = written.pass;
        for (key, hash) in changed.puts {
            written.rows.insert(key, RowMark { hash, pass });
        }
        stats.rows = written.rows.len();
        *self.row_stats.lock().expect("row stats") = stats;
        written.snapshots = snapshots;
        if !retired.is_empty() && !self.sync {
            // Dropping a family is made durable at once (RocksDB syncs its manifest), an
            // unsynced batch is not: after a power loss the store could come back with
            // the drop but without the switch that stopped listing the family, and not
            // open. The switch is synced first (only when a version retires: rare).
            self.db.flush_wal(true).map_err(|e| self.error(e))?;
        }
        // The commit is made: a family that fails to drop is unlisted, so the next open
        // drops it. Said loudly, not returned: as an error it stopped a fold whose commit
        // had landed.
        for version in retired {
            let name = snapshot_family(version);
            if let Err(e) = self.db.drop_cf(&name) {
                tracing::warn!(
                    store = %self.path.display(),
                    family = %name,
                    error = %e,
                    "a snapshot no longer in use could not be dropped; the next open drops it"
                );
            }
        }
        Ok(())
    }

    /// Puts the state rows that differ from the written ones into `batch` (R-DATA entry
    /// rows, which come only when changed or in a complete pass, without comparing), and
    /// deletes the rows of objects gone; says what it put and deleted, for `written` to
    /// follow once the batch is written (a failed write leaves `written` as the store is).
    fn put_changed_rows(
        &self,
        state: Rows<'_>,
        written: &mut Written,
        batch: &mut StagedRows,
    ) -> ChangedRows {
        let mut changed = ChangedRows::default();
        written.pass += 1;
        let pass = written.pass;
        let mut seen = 0usize;
        let complete = match state {
            Rows::Whole(_) => true,
            Rows::Delta(delta) => delta.complete(),
        };
        if complete {
            // The R-DATA entry rows are not followed one by one (hundreds of thousands at a
            // big site): a complete pass writes them all again after deleting them all.
            for (from, to) in lhc_engine::rows::entry_row_ranges(None) {
                batch.delete_range(&from, &to);
            }
        }
        let mut put = |key: &[u8], value: &[u8]| {
            if lhc_engine::rows::is_entry_row(key) {
                // Only changed entries come in a delta: written without comparing.
                batch.put(key, value);
                changed.bytes += key.len() + value.len();
                changed.entries += 1;
                return;
            }
            let hash = xxh3_128(value);
            if let Some(mark) = written.rows.get_mut(key) {
                // Marked whether written or not: marks only tell this pass's rows apart.
                mark.pass = pass;
                seen += 1;
                if mark.hash == hash {
                    return;
                }
            }
            batch.put(key, value);
            changed.bytes += key.len() + value.len();
            changed.puts.push((key.into(), hash));
        };
        match state {
            Rows::Whole(engine) => engine.for_each_store_row(&mut put),
            Rows::Delta(delta) => delta.for_each_row(&mut put),
        }
        match state {
            // Only a pass over every row knows which rows no object holds any more.
            _ if complete => {
                if seen < written.rows.len() {
                    for (key, mark) in written.rows.iter() {
                        if mark.pass != pass {
                            batch.delete(key);
                            changed.deletes.push(key.clone());
                        }
                    }
                }
            }
            Rows::Delta(delta) => {
                // Objects whose removal the engine recorded, then rows of the kinds the
                // delta holds whole (fields, connectors) that it no longer has.
                for key in delta.gone() {
                    if lhc_engine::rows::is_entry_row(key) {
                        batch.delete(key);
                    } else if written.rows.contains_key(key.as_slice()) {
                        batch.delete(key);
                        changed.deletes.push(key.as_slice().into());
                    }
                }
                for (key, mark) in written.rows.whole() {
                    if mark.pass != pass {
                        debug_assert!(delta.holds_every_row_like(key));
                        batch.delete(key);
                        changed.deletes.push(key.clone());
                        // A connector gone: its entry rows and activity row go with it.
                        if let Some(name) = lhc_engine::rows::connector_of_row(key) {
                            for (from, to) in lhc_engine::rows::entry_row_ranges(Some(name)) {
                                batch.delete_range(&from, &to);
                            }
                            let activity = lhc_engine::rows::activity_row(name);
                            if written.rows.contains_key(activity.as_slice()) {
                                batch.delete(&activity);
                                changed.deletes.push(activity.into());
                            }
                        }
                    }
                }
            }
            Rows::Whole(_) => unreachable!("a whole engine is a complete pass"),
        }
        changed
    }

    /// Creates an empty column family for each new snapshot version (its value comes in
    /// the commit's batch, with the switch that lists it).
    fn create_snapshot_families(
        &self,
        versions: impl Iterator<Item = u64>,
    ) -> Result<(), NodeError> {
        for version in versions {
            let name = snapshot_family(version);
            if self.db.cf_handle(&name).is_some() {
                // Left by a commit whose batch failed: the batch's value replaces whatever
                // it holds. (Dropped and made again, it could be the family a batch
                // reported failed but written after all lists, and the store would open
                // with a listed family empty.)
                continue;
            }
            self.db
                .create_cf(&name, &self.options)
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    /// Starts a run of record ids: this directory's instance id (made at the first run) and
    /// a run number above every earlier run's, written to disk (synced) before any id of
    /// the run is given, so no two runs share an id even after a crash. The run number is
    /// also at least the Unix time in seconds, so a directory restored from a backup or a
    /// VM snapshot (whose counter went back) still starts above the runs it already used.
    pub fn begin_run(&self) -> Result<(String, u32), NodeError> {
        let meta = self.cf(META);
        let get = |key| self.db.get_cf(&meta, key).map_err(|e| self.error(e));
        let instance = match get(INSTANCE_KEY)? {
            Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            None => new_instance_id(&self.path),
        };
        let epoch = match get(EPOCH_KEY)? {
            Some(bytes) => {
                let last: [u8; 4] =
                    bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| NodeError::Corrupt {
                            path: self.path.clone(),
                            detail: "producer_epoch is not 4 bytes".into(),
                        })?;
                u32::from_be_bytes(last)
                    .checked_add(1)
                    .ok_or_else(|| NodeError::Corrupt {
                        path: self.path.clone(),
                        detail: "producer_epoch is at its maximum".into(),
                    })?
            }
            None => 1,
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
        let epoch = epoch.max(now);
        let mut batch = WriteBatch::default();
        batch.put_cf(&meta, INSTANCE_KEY, instance.as_bytes());
        batch.put_cf(&meta, EPOCH_KEY, epoch.to_be_bytes());
        let mut write = rocksdb::WriteOptions::default();
        write.set_sync(true);
        self.db
            .write_opt(batch, &write)
            .map_err(|e| self.error(e))?;
        Ok((instance, epoch))
    }

    /// The Kafka topic and site this directory folds (`topic/site`), if recorded.
    pub fn kafka_source(&self) -> Result<Option<String>, NodeError> {
        let bytes = self
            .db
            .get_cf(&self.cf(META), KAFKA_SOURCE_KEY)
            .map_err(|e| self.error(e))?;
        Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Records the Kafka topic and site this directory folds (synced).
    pub fn set_kafka_source(&self, source: &str) -> Result<(), NodeError> {
        let mut write = rocksdb::WriteOptions::default();
        write.set_sync(true);
        self.db
            .put_cf_opt(&self.cf(META), KAFKA_SOURCE_KEY, source.as_bytes(), &write)
            .map_err(|e| self.error(e))
    }

    /// Refuses a directory a Kafka node (`connector run --kafka`) made, one that recorded
    /// its topic and site or its position in the topic: its state is not at a log's
    /// offsets, so `what` (a fold of a log, a node on an embedded log) would read records
    /// again or skip them.
    pub fn refuse_kafka_node(&self, what: &str) -> Result<(), NodeError> {
        let recorded = self.kafka_source()?;
        if recorded.is_none() && self.kafka_next()?.is_none() {
            return Ok(());
        }
        let source = recorded.unwrap_or_else(|| "a Kafka topic".to_string());
        Err(NodeError::OtherSource(format!(
            "{} holds the state of a Kafka node ({source}): it numbers records in its own \
             journal and keeps its position in the topic, so {what} cannot continue it; run \
             the node with --kafka again, or give this one another --data",
            self.path.display()
        )))
    }

    /// The next Kafka offset to read (Kafka mode), if one was stored.
    pub fn kafka_next(&self) -> Result<Option<u64>, NodeError> {
        let bytes = self
            .db
            .get_cf(&self.cf(META), KAFKA_NEXT_KEY)
            .map_err(|e| self.error(e))?;
        Ok(bytes.and_then(|b| b.as_slice().try_into().ok().map(u64::from_be_bytes)))
    }

    /// Hashes of the records this node wrote locally, with their engine offsets.
    pub fn local_hashes(&self) -> Result<Vec<([u8; 16], u64)>, NodeError> {
        let mut all = Vec::new();
        for item in self.db.iterator_cf(&self.cf(LOCAL), IteratorMode::Start) {
            let (key, value) = item.map_err(|e| self.error(e))?;
            if let (Ok(hash), Ok(offset)) = (
                <[u8; 16]>::try_from(&key[..]),
                <[u8; 8]>::try_from(&value[..]),
            ) {
                all.push((hash, u64::from_be_bytes(offset)));
            }
        }
        Ok(all)
    }

    /// Local records not yet seen back in the topic, in engine-offset order (at most
    /// `limit`, after `after`).
    pub fn outbox(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, NodeError> {
        self.range(OUTBOX, after, limit)
    }

    /// Journal records in engine-offset order (at most `limit`, after `after`).
    pub fn journal(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, NodeError> {
        self.range(JOURNAL, after, limit)
    }

    /// The offset after the journal's last record (0 when it is empty).
    pub fn journal_end(&self) -> Result<u64, NodeError> {
        let mut last = self.db.iterator_cf(&self.cf(JOURNAL), IteratorMode::End);
        match last.next() {
            Some(item) => {
                let (key, _) = item.map_err(|e| self.error(e))?;
                Ok(u64::from_be_bytes(key[..8].try_into().expect("8-byte key")) + 1)
            }
            None => Ok(0),
        }
    }

    fn range(
        &self,
        cf: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, NodeError> {
        let start = after.map(|a| (a + 1).to_be_bytes());
        let mode = match &start {
            Some(key) => IteratorMode::From(key, rocksdb::Direction::Forward),
            None => IteratorMode::Start,
        };
        let mut all = Vec::new();
        for item in self.db.iterator_cf(&self.cf(cf), mode) {
            let (key, value) = item.map_err(|e| self.error(e))?;
            let offset = u64::from_be_bytes(key[..8].try_into().expect("8-byte key"));
            all.push((offset, value.to_vec()));
            if all.len() >= limit {
                break;
            }
        }
        Ok(all)
    }

    /// Stored outputs after position (`offset`, `index`) in order, or from the start with
    /// `None`: (input offset, index, output JSON).
    pub fn outputs_after(
        &self,
        after: Option<(u64, u32)>,
        limit: usize,
    ) -> Result<Vec<(u64, u32, Vec<u8>)>, NodeError> {
        let start = after.map(|(o, i)| output_key(o, i));
        let mode = match &start {
            Some(key) => IteratorMode::From(key, rocksdb::Direction::Forward),
            None => IteratorMode::Start,
        };
        let mut all = Vec::new();
        for item in self.db.iterator_cf(&self.cf(OUTPUTS), mode) {
            let (key, value) = item.map_err(|e| self.error(e))?;
            if start.as_deref() == Some(&key[..]) {
                continue;
            }
            let (offset, index) = parse_output_key(&key);
            all.push((offset, index, value.to_vec()));
            if all.len() >= limit {
                break;
            }
        }
        Ok(all)
    }
}

impl Store {
    /// How many outputs the store holds for input `offset`: the index its next one takes.
    pub fn outputs_of(&self, offset: u64) -> Result<u32, NodeError> {
        let Some(after) = offset.checked_add(1) else {
            return Ok(0);
        };
        let key = output_key(after, 0);
        let mut last = self.db.iterator_cf(
            &self.cf(OUTPUTS),
            IteratorMode::From(&key, rocksdb::Direction::Reverse),
        );
        match last.next() {
            Some(item) => {
                let (key, _) = item.map_err(|e| self.error(e))?;
                let (found, index) = parse_output_key(&key);
                Ok(if found == offset { index + 1 } else { 0 })
            }
            None => Ok(0),
        }
    }
}

/// Journal changes written with a commit (Kafka mode; empty otherwise).
#[derive(Clone, Debug, Default)]
pub struct JournalChanges {
    /// Records applied, by engine offset.
    pub journal: Vec<(u64, Vec<u8>)>,
    /// Hashes of local records, with their engine offsets.
    pub local: Vec<([u8; 16], u64)>,
    /// Local records to publish.
    pub outbox_put: Vec<(u64, Vec<u8>)>,
    /// Local records seen back in the topic.
    pub outbox_delete: Vec<u64>,
    /// Next Kafka offset to read.
    pub kafka_next: Option<u64>,
    /// The offset and xxh3-128 of the last record applied whole, when known (see
    /// [`Folder::note_bytes`]).
    pub last_record: Option<(u64, u128)>,
}

impl JournalChanges {
    fn is_empty(&self) -> bool {
        self.journal.is_empty()
            && self.local.is_empty()
            && self.outbox_put.is_empty()
            && self.outbox_delete.is_empty()
            && self.kafka_next.is_none()
    }
}

/// A commit prepared on the fold thread (a copy of what changed in the state since the
/// last job, without the configuration part, which is shared or rarely changes) to be
/// written by another thread.
pub struct CommitJob {
    state: StateDelta,
    site_version: u64,
    site: Option<Arc<SiteConfig>>,
    validations: BTreeMap<u64, Validation>,
    next: u64,
    outputs: Vec<Outputs>,
    journal: JournalChanges,
    coverage: Option<Coverage>,
}

/// The state rows a commit writes: the whole engine's, or a delta's.
#[derive(Clone, Copy)]
enum Rows<'a> {
    /// Every row of this engine (its configuration part taken out).
    Whole(&'a Engine),
    /// What a [`Folder::commit_job`] copied.
    Delta(&'a StateDelta),
}

/// Outputs of one input offset, from the index of the first (0 unless the record's
/// outputs were committed in steps, see [`Folder::in_progress`]).
pub type Outputs = (u64, u32, Vec<Output>);

/// Key of an output: input offset and index, big-endian so keys sort in log order.
fn output_key(offset: u64, index: u32) -> Vec<u8> {
    let mut key = offset.to_be_bytes().to_vec();
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// The input offset and index an output key names (see [`output_key`]).
fn parse_output_key(key: &[u8]) -> (u64, u32) {
    let offset = u64::from_be_bytes(key[..8].try_into().expect("8-byte prefix"));
    let index = u32::from_be_bytes(key[8..12].try_into().expect("4-byte index"));
    (offset, index)
}

/// Applies log entries to an engine and commits them to a store in batches: the one path
/// from the log into the cache snapshot, used by `fold` and by the live node.
pub struct Folder<S: Deref<Target = Store>> {
    store: S,
    engine: Arc<RwLock<Engine>>,
    next: u64,
    pending: Vec<Outputs>,
    /// A record applied in steps (a long gap's timers first): the index its next output
    /// takes; committed states may hold the steps before.
    in_progress: Option<(Admitted, u32)>,
    /// Outputs the store already holds for the next offset (a restart after a commit in
    /// the middle of a record): that offset and the index its next output takes.
    resume: (u64, u32),
    journal: JournalChanges,
    uncommitted: usize,
    commits: u64,
    /// Site version the last commit job carried (or the store holds).
    sent_site_version: Option<u64>,
    /// What the records applied so far were, for checkpoints (`None`: a store folded by
    /// a build that did not count takes none).
    coverage: Option<Coverage>,
    /// When checkpoints are due and where they go.
    checkpoints: Option<Feed>,
    /// The offset and xxh3-128 of the last record handed with its bytes: it goes with the
    /// commit that holds the record whole (see [`Store::refuse_other_log`]).
    last_hash: Option<(u64, u128)>,
}

/// Where a folder hands its checkpoints.
struct Feed {
    every: u64,
    to: SyncSender<CheckpointJob>,
    /// Set while the writer is busy (a live node): a due checkpoint then waits for the
    /// first record after it is free, instead of the fold waiting. `None`: the fold waits.
    busy: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// A checkpoint is due and not yet handed over.
    due: bool,
}

impl<S: Deref<Target = Store>> Folder<S> {
    /// Resumes from what the store holds.
    pub fn open(store: S) -> Result<Folder<S>, NodeError> {
        let (mut engine, next) = store.load()?;
        let (sent_site_version, current) = {
            let mut written = store.written.lock().expect("written");
            // This folder's engine is what the store holds: what it changes from here is
            // all a commit must write, whatever a commit of an earlier folder on this
            // store left unfinished (a library caller folding again after a failed fold).
            written.unfinished = false;
            (written.site_version, written.loaded_current)
        };
        if current {
            // The store holds exactly this engine: its first commit writes what changes
            // from here (an older layout, or a legacy state, is rewritten whole first).
            engine.track_changes();
        }
        let resume = (next, store.outputs_of(next)?);
        let coverage = match store.coverage()? {
            Some((at, coverage)) if at == next => Some(coverage),
            // Commits went on without counting (an earlier build ran on this store): what
            // it says no longer describes the records, and a checkpoint must not lie.
            Some(_) => None,
            None if next == 0 => Some(Coverage::default()),
            None => None,
        };
        Ok(Folder {
            store,
            engine: Arc::new(RwLock::new(engine)),
            next,
            pending: Vec::new(),
            in_progress: None,
            resume,
            journal: JournalChanges::default(),
            sent_site_version,
            uncommitted: 0,
            commits: 0,
            coverage,
            checkpoints: None,
            last_hash: None,
        })
    }

    /// Hands a checkpoint to `to` after every `every` records (0: none), waiting while the
    /// writer is busy with the previous one (`lhc connector fold`).
    pub fn take_checkpoints(&mut self, every: u64, to: SyncSender<CheckpointJob>) {
        self.feed(every, to, None);
    }

    /// Hands a checkpoint to `to` after every `every` records (0: none), never waiting:
    /// one due while the writer is busy is handed over after the first record applied once
    /// it is free (the live node: a launch never waits for a checkpoint).
    pub fn take_checkpoints_when_free(&mut self, every: u64, to: SyncSender<CheckpointJob>) {
        let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.feed(every, to, Some(busy));
    }

    fn feed(
        &mut self,
        every: u64,
        to: SyncSender<CheckpointJob>,
        busy: Option<Arc<std::sync::atomic::AtomicBool>>,
    ) {
        if every == 0 {
            return;
        }
        if self.coverage.is_none() {
            tracing::warn!(
                "no checkpoints: commits to this data directory were made by an earlier build, \
                 which did not count what checkpoints say of their records (quarantines, \
                 times); they stay off for it. A node on an embedded log has them again when \
                 folded into a new directory; a Kafka node's directory must be kept (its \
                 journal is the only record of the order it applied records in)"
            );
            return;
        }
        // A checkpoint due before the resume point that the store does not hold (handed to
        // the writer when the last fold was killed, or none taken then) is taken at the
        // first record applied (a checkpoint at any offset serves `query --at`). The
        // ones handed over and lost in a kill still leave a gap (up to ~3 x `every` seen
        // in hostile testing) until the commit waits for them: see docs/node.md.
        let last_due = self.next / every * every;
        let newest = self.store.newest_checkpoint().ok().flatten().unwrap_or(0);
        self.checkpoints = Some(Feed {
            every,
            to,
            busy,
            due: last_due > 0 && newest < last_due,
        });
    }

    /// The engine as folded so far (committed or not), shared with readers that take the
    /// read lock between records.
    pub fn engine(&self) -> Arc<RwLock<Engine>> {
        self.engine.clone()
    }

    /// The store it commits to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A handle on the store (for a committer thread).
    pub fn store_handle(&self) -> S
    where
        S: Clone,
    {
        self.store.clone()
    }

    /// Offset of the next record to apply.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Records applied since the last commit.
    pub fn uncommitted(&self) -> usize {
        self.uncommitted
    }

    /// Whether anything waits for a commit (records applied or journal changes).
    pub fn dirty(&self) -> bool {
        self.uncommitted > 0 || !self.journal.is_empty()
    }

    /// Commits written by this folder.
    pub fn commits(&self) -> u64 {
        self.commits
    }

    /// Applies one entry (decoding it first) and returns its outputs.
    pub fn apply(&mut self, entry: &LogEntry) -> &[Output] {
        self.note_bytes(entry.offset, &entry.bytes);
        let record = decode_record_at(&entry.bytes, entry.offset);
        self.apply_decoded(entry.offset, record)
    }

    /// Notes the bytes of the record about to be applied at `offset` (what
    /// [`Folder::apply`] does itself): the commit that holds it whole records its hash, so
    /// the store is never folded on from a log that holds another record there.
    ///
    /// A hash per record (xxh3, tens of nanoseconds for a record of a few hundred bytes)
    /// rather than a copy of its bytes, so a big `config.change` is not kept.
    pub fn note_bytes(&mut self, offset: u64, bytes: &[u8]) {
        self.note_hash(offset, xxh3_128(bytes));
    }

    /// [`Folder::note_bytes`] with the bytes' xxh3-128 taken already (by a thread that
    /// read and decoded the record ahead of the fold).
    pub fn note_hash(&mut self, offset: u64, hash: u128) {
        self.last_hash = Some((offset, hash));
    }

    /// The offset and xxh3-128 of the last record noted for applying (by
    /// [`Folder::note_bytes`] or [`Folder::note_hash`]).
    pub fn last_noted(&self) -> Option<(u64, u128)> {
        self.last_hash
    }

    /// The hash of the last record applied whole, if its bytes were noted.
    fn last_record(&self) -> Option<(u64, u128)> {
        let (offset, hash) = self.last_hash?;
        (offset + 1 == self.next && self.in_progress.is_none()).then_some((offset, hash))
    }

    /// Applies an entry already decoded (the live node looks at the record first).
    ///
    /// A record after a long gap in LHC mode makes one 3507/3509 report per connector
    /// every report interval: once the timers due before it have made
    /// [`lhc_engine::CATCH_UP_STEP`] outputs, it stops part-way and [`Folder::in_progress`]
    /// says so. The caller commits and calls [`Folder::resume`] until it is done, so memory
    /// and a commit's size stay bounded; a commit taken part-way holds the state after the
    /// timers fired so far, with the record not yet applied (`next` is its offset).
    pub fn apply_decoded(
        &mut self,
        offset: u64,
        record: Result<lhc_engine::Record, lhc_engine::DecodeError>,
    ) -> &[Output] {
        assert!(
            self.in_progress.is_none(),
            "a record is applied only once the one in progress is done"
        );
        // Every decodable record's time counts, a quarantined one's too (as a replay's
        // checkpoints count them).
        if let (Some(coverage), Ok(record)) = (&mut self.coverage, &record) {
            coverage.saw(record.ts());
        }
        let admitted = self
            .engine
            .write()
            .expect("engine lock")
            .admit(offset, record);
        // Offsets need not be dense (a Kafka partition shared by sites): a commit taken
        // part-way must name this record's own offset as the next to apply.
        self.next = offset;
        let first = match std::mem::take(&mut self.resume) {
            (at, index) if at == offset => index,
            _ => 0,
        };
        match admitted {
            Ok(admitted) => {
                self.in_progress = Some((admitted, first));
                self.resume()
            }
            Err(quarantined) => self.finish(offset, first, vec![quarantined]),
        }
    }

    /// Whether a record is applied only part-way (see [`Folder::apply_decoded`]).
    pub fn in_progress(&self) -> bool {
        self.in_progress.is_some()
    }

    /// Goes on with the record in progress, after a commit; returns the outputs of this
    /// step (none if no record is in progress).
    pub fn resume(&mut self) -> &[Output] {
        let Some((admitted, first)) = self.in_progress.take() else {
            return &[];
        };
        let offset = admitted.offset();
        let mut outputs = Vec::new();
        let mut engine = self.engine.write().expect("engine lock");
        if engine.catch_up(admitted.ts(), lhc_engine::CATCH_UP_STEP, &mut outputs) {
            engine.apply_admitted(admitted, &mut outputs);
            drop(engine);
            return self.finish(offset, first, outputs);
        }
        drop(engine);
        let count = outputs.len() as u32;
        self.in_progress = Some((admitted, first + count));
        // A step to commit, though the record is not applied yet.
        self.uncommitted += 1;
        self.keep(offset, first, outputs)
    }

    /// The record at `offset` is applied: its last outputs, from index `first`.
    fn finish(&mut self, offset: u64, first: u32, outputs: Vec<Output>) -> &[Output] {
        self.next = offset + 1;
        self.uncommitted += 1;
        if let Some(coverage) = &mut self.coverage {
            if outputs.iter().any(|o| matches!(o, Output::Quarantine(_))) {
                coverage.quarantined += 1;
            }
            if let Some(feed) = &mut self.checkpoints {
                feed.due |= self.next.is_multiple_of(feed.every);
                let free = feed
                    .busy
                    .as_ref()
                    .is_none_or(|busy| !busy.load(Ordering::SeqCst));
                if feed.due && free {
                    let busy = feed.busy.as_ref().map(|busy| {
                        busy.store(true, Ordering::SeqCst);
                        crate::checkpoints::Busy(busy.clone())
                    });
                    let job = CheckpointJob {
                        engine: self.engine.read().expect("engine lock").clone(),
                        next: self.next,
                        coverage: coverage.clone(),
                        busy,
                    };
                    feed.due = false;
                    let gone = match &feed.busy {
                        Some(_) => match feed.to.try_send(job) {
                            Ok(()) => false,
                            Err(std::sync::mpsc::TrySendError::Full(_)) => {
                                feed.due = true;
                                false
                            }
                            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => true,
                        },
                        None => feed.to.send(job).is_err(),
                    };
                    if gone {
                        // The writer is gone (it never stops on its own): none from now on.
                        tracing::warn!("checkpoints stopped: their writer is gone");
                        self.checkpoints = None;
                    }
                }
            }
        }
        self.keep(offset, first, outputs)
    }

    /// Keeps outputs for the next commit and returns them.
    fn keep(&mut self, offset: u64, first: u32, outputs: Vec<Output>) -> &[Output] {
        if outputs.is_empty() {
            return &[];
        }
        self.pending.push((offset, first, outputs));
        &self.pending.last().expect("just pushed").2
    }

    /// Journal changes to write with the next commit.
    pub fn journal_mut(&mut self) -> &mut JournalChanges {
        &mut self.journal
    }

    /// Writes everything applied since the last commit in one batch and returns the outputs
    /// it made durable, in order.
    pub fn commit(&mut self) -> Result<Vec<Outputs>, NodeError> {
        if self.uncommitted == 0 && self.journal.is_empty() {
            return Ok(Vec::new());
        }
        self.journal.last_record = self.last_record();
        let mut engine = self.engine.write().expect("engine lock");
        if self.store.written.lock().expect("written").unfinished {
            // An earlier commit failed: only a pass over every row heals the store.
            self.store.commit(
                &mut engine,
                self.next,
                &self.pending,
                &self.journal,
                self.coverage.as_ref(),
            )?;
        } else {
            // What changed since the previous commit (everything, the first time), as a
            // live node's committer writes it: `lhc connector fold` commits every
            // `--batch` records, and a whole pass each time rewrote every R-DATA entry.
            let delta = engine.take_delta();
            self.store.write(
                Rows::Delta(&delta),
                engine.site().version,
                Some(engine.site()),
                engine.validations(),
                self.next,
                &self.pending,
                &self.journal,
                self.coverage.as_ref(),
            )?;
        }
        self.sent_site_version = Some(engine.site().version);
        drop(engine);
        self.journal = JournalChanges::default();
        self.commits += 1;
        self.uncommitted = 0;
        Ok(std::mem::take(&mut self.pending))
    }

    /// Takes what was applied since the last commit as a job for a committer thread: the
    /// fold pays for a copy of what changed (without the configuration part) instead of its
    /// serialization and write. Jobs must be written in order, and a job that fails to be
    /// written ends this folder (the next job would lack its changes).
    pub fn commit_job(&mut self) -> Option<CommitJob> {
        if !self.dirty() {
            return None;
        }
        self.journal.last_record = self.last_record();
        let mut engine = self.engine.write().expect("engine lock");
        // Only what changed is copied: a copy of the whole state (40,000 machines) held the
        // fold, and the launches waiting on it, for milliseconds at every commit.
        let state = engine.take_delta();
        let site_version = engine.site().version;
        let site = (self.sent_site_version != Some(site_version)).then(|| engine.shared_site());
        let validations = engine.validations().clone();
        drop(engine);
        self.sent_site_version = Some(site_version);
        self.commits += 1;
        self.uncommitted = 0;
        Some(CommitJob {
            state,
            site_version,
            site,
            validations,
            next: self.next,
            outputs: std::mem::take(&mut self.pending),
            journal: std::mem::take(&mut self.journal),
            coverage: self.coverage.clone(),
        })
    }

    /// The engine, giving up anything not committed.
    pub fn into_engine(self) -> Engine {
        match Arc::try_unwrap(self.engine) {
            Ok(lock) => lock.into_inner().expect("engine lock"),
            Err(shared) => shared.read().expect("engine lock").clone(),
        }
    }
}

/// The baseline of `lhc bench import`: writes `payload` in 64 KiB values through one raw
/// `WriteBatch` into a fresh RocksDB in `dir` and flushes it; returns how long the write and
/// flush took (opening excluded).
pub fn raw_batch_write(dir: &Path, payload: &[u8]) -> Result<Duration, NodeError> {
    let error = |source| NodeError::Store {
        path: dir.to_path_buf(),
        source,
    };
    let mut options = Options::default();
    options.create_if_missing(true);
    let db = rocksdb::DB::open(&options, dir).map_err(error)?;
    let started = std::time::Instant::now();
    let mut batch = WriteBatch::default();
    for (i, chunk) in payload.chunks(64 << 10).enumerate() {
        batch.put((i as u64).to_be_bytes(), chunk);
    }
    db.write(batch).map_err(error)?;
    db.flush().map_err(error)?;
    Ok(started.elapsed())
}

/// What a fold did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoldSummary {
    /// Offset it resumed from.
    pub resumed_at: u64,
    /// Records applied now.
    pub applied: u64,
    /// Next offset to apply.
    pub next: u64,
    /// Commits written.
    pub commits: u64,
    /// Stopped by `stop` before the end of the log (what was applied is committed).
    pub interrupted: bool,
}

/// Folds `log` into the store from where it stopped, committing every `batch` records.
/// With `follow`, waits for new records until `stop` returns true.
///
/// With a `checkpoints` policy taking some, a checkpoint is handed every `every` records to
/// a thread of its own, which reads back the records it names from `log` (give one only
/// for a log whose offsets are dense from 0, as an embedded log's are).
pub fn fold(
    store: &Store,
    log: &dyn Log,
    batch: usize,
    follow: Option<&dyn Fn() -> bool>,
    checkpoints: &crate::checkpoints::CheckpointPolicy,
) -> Result<(FoldSummary, Engine), NodeError> {
    let until = match follow {
        Some(stop) => Until::Stopped(stop),
        None => Until::End(&|| false),
    };
    fold_until(store, log, batch, until, checkpoints)
}

/// When a fold ends. The function is asked after each whole record (and, following, at
/// each end of the log met); when it returns true the fold commits what it applied and
/// returns.
#[derive(Clone, Copy)]
pub enum Until<'a> {
    /// At the end of the log, or earlier when this returns true (Ctrl-C): the summary then
    /// says it was interrupted, if records remained.
    End(&'a dyn Fn() -> bool),
    /// When this returns true (following the log as it grows until then).
    Stopped(&'a dyn Fn() -> bool),
}

impl Until<'_> {
    /// Whether the fold should stop now.
    fn stop(&self) -> bool {
        match self {
            Until::End(stop) | Until::Stopped(stop) => stop(),
        }
    }

    /// Whether the fold waits for new records at the end of the log.
    fn follows(&self) -> bool {
        matches!(self, Until::Stopped(_))
    }
}

/// [`fold`], told when to end: with [`Until::End`] a stop request (asked after each
/// record) commits what was applied and returns, the summary saying it was interrupted.
pub fn fold_until(
    store: &Store,
    log: &dyn Log,
    batch: usize,
    until: Until<'_>,
    checkpoints: &crate::checkpoints::CheckpointPolicy,
) -> Result<(FoldSummary, Engine), NodeError> {
    store.refuse_kafka_node("a fold of a log")?;
    store.refuse_other_log(log)?;
    if checkpoints.every == 0 {
        return fold_with(store, log, batch, until, None);
    }
    let (to, jobs) = std::sync::mpsc::sync_channel(1);
    std::thread::scope(|scope| {
        let writer = std::thread::Builder::new()
            .name("lhc-checkpoint".into())
            .spawn_scoped(scope, || {
                let records = crate::checkpoints::Records::Log(log);
                crate::checkpoints::run(store, checkpoints, &records, jobs, &|| true);
            })
            .map_err(|e| NodeError::Commit(e.to_string()))?;
        let folded = fold_with(store, log, batch, until, Some((checkpoints.every, to)));
        // The last checkpoint handed over is written before the fold returns.
        writer
            .join()
            .map_err(|_| NodeError::Checkpoint("the checkpoint writer panicked".into()))?;
        folded
    })
}

/// What the reading thread of a fold hands over, in log order.
enum Ahead {
    /// A record, with the xxh3-128 of its bytes and its decoding.
    Record {
        offset: u64,
        hash: u128,
        record: Result<lhc_engine::Record, lhc_engine::DecodeError>,
    },
    /// The reader reached the end of the log (for now, when following).
    End,
    /// The log cannot be read on: the records before it were handed over.
    Failed(LogError),
}

/// Records a fold's reading thread hands over at once (a channel send per record cost
/// more than decoding a heartbeat).
const AHEAD_BATCH: usize = 1024;

/// The reading thread of a fold: reads, hashes and decodes records ahead of the fold (on
/// the other core, so the fold thread applies and commits), in log order, in batches;
/// every end of the log it meets is handed over in its place, so the fold commits where it
/// did when it read for itself. Stops at the end (unless `follow`), at a read error, or
/// when the fold stops listening.
fn read_ahead(
    mut reader: Box<dyn lhc_log::LogReader>,
    wait: Duration,
    follow: bool,
    to: SyncSender<Vec<Ahead>>,
) {
    let mut batch = Vec::with_capacity(AHEAD_BATCH);
    loop {
        // What was read goes over as soon as nothing more is ready, not only once a batch
        // is full: a fold that follows a log written a few records a second applies and
        // commits them as they come.
        let next = match reader.next(Duration::ZERO) {
            Ok(None) if !batch.is_empty() => {
                let ready = std::mem::replace(&mut batch, Vec::with_capacity(AHEAD_BATCH));
                if to.send(ready).is_err() {
                    return;
                }
                reader.next(wait)
            }
            Ok(None) => reader.next(wait),
            other => other,
        };
        let last = match next {
            Ok(Some(entry)) => {
                batch.push(Ahead::Record {
                    offset: entry.offset,
                    hash: xxh3_128(&entry.bytes),
                    record: decode_record_at(&entry.bytes, entry.offset),
                });
                if batch.len() < AHEAD_BATCH {
                    continue;
                }
                false
            }
            Ok(None) => {
                batch.push(Ahead::End);
                !follow
            }
            Err(e) => {
                batch.push(Ahead::Failed(e));
                true
            }
        };
        let full = std::mem::replace(&mut batch, Vec::with_capacity(AHEAD_BATCH));
        if to.send(full).is_err() || last {
            return;
        }
    }
}

/// [`fold`] proper, handing checkpoints to `checkpoints` when given. Three threads share
/// the work: one reads and decodes records ahead ([`read_ahead`]), this one applies them
/// one by one in log order and copies what each commit must write (`commit_job`), and a
/// committer serializes and writes the commits, in order. The first commit that fails
/// stops the fold with its error (a later job, holding only what changed since, would
/// miss its changes); every commit written is whole, so a rerun resumes from the last.
fn fold_with(
    store: &Store,
    log: &dyn Log,
    batch: usize,
    until: Until<'_>,
    checkpoints: Option<(u64, SyncSender<CheckpointJob>)>,
) -> Result<(FoldSummary, Engine), NodeError> {
    let mut folder = Folder::open(store)?;
    if let Some((every, to)) = checkpoints {
        folder.take_checkpoints(every, to);
    }
    let resumed_at = folder.next();
    let reader = log.reader(resumed_at.max(log.start_offset()?))?;
    let mut applied = 0u64;
    let mut interrupted = false;
    let wait = if until.follows() {
        Duration::from_millis(200)
    } else {
        Duration::ZERO
    };
    std::thread::scope(|scope| -> Result<(), NodeError> {
        // A few batches ahead: enough to keep the threads busy, bounded memory.
        let (to, batches) = std::sync::mpsc::sync_channel(4);
        let following = until.follows();
        std::thread::Builder::new()
            .name("lhc-read".into())
            .spawn_scoped(scope, move || read_ahead(reader, wait, following, to))
            .map_err(|e| NodeError::Commit(format!("starting the reading thread: {e}")))?;
        // One commit prepared while the one before is written.
        let (jobs, pending) = std::sync::mpsc::sync_channel::<CommitJob>(1);
        let committer = std::thread::Builder::new()
            .name("lhc-commit".into())
            .spawn_scoped(scope, move || -> Result<(), NodeError> {
                for job in pending {
                    store.write_job(&job)?;
                }
                Ok(())
            })
            .map_err(|e| NodeError::Commit(format!("starting the committer: {e}")))?;
        let folded = fold_ahead(&mut folder, batches, &jobs, batch, until, &mut applied)
            .map(|stopped| interrupted = stopped);
        // Every job handed over is written (or the first failure stops the committer)
        // before the fold says how it went.
        drop(jobs);
        let committed = committer
            .join()
            .unwrap_or_else(|_| Err(NodeError::Commit("the committer panicked".into())));
        match (folded, committed) {
            // The committer's failure is the cause: the fold only saw that it stopped.
            (_, Err(cause)) => Err(cause),
            (folded, Ok(())) => folded,
        }
    })?;
    let summary = FoldSummary {
        resumed_at,
        applied,
        next: folder.next(),
        commits: folder.commits(),
        interrupted,
    };
    Ok((summary, folder.into_engine()))
}

/// The fold thread of [`fold_with`]: applies what the reading thread hands over and hands
/// commits to the committer (`jobs`). True when a stop request ended it before the end of
/// the log (`Until::End`; following, a stop is how it ends).
fn fold_ahead(
    folder: &mut Folder<&Store>,
    batches: std::sync::mpsc::Receiver<Vec<Ahead>>,
    jobs: &SyncSender<CommitJob>,
    batch: usize,
    until: Until<'_>,
    applied: &mut u64,
) -> Result<bool, NodeError> {
    let commit = |folder: &mut Folder<&Store>| -> Result<(), NodeError> {
        match folder.commit_job() {
            Some(job) => jobs
                .send(job)
                .map_err(|_| NodeError::Commit("the committer stopped (its error follows)".into())),
            None => Ok(()),
        }
    };
    let mut items = batches.iter().flatten();
    while let Some(ahead) = items.next() {
        match ahead {
            Ahead::Record {
                offset,
                hash,
                record,
            } => {
                folder.note_hash(offset, hash);
                folder.apply_decoded(offset, record);
                while folder.in_progress() {
                    commit(folder)?;
                    folder.resume();
                }
                *applied += 1;
                if folder.uncommitted() >= batch.max(1) {
                    commit(folder)?;
                }
                // Asked between whole records only (a record applied in steps is finished
                // first), following or not: a fold still catching up stops too.
                if until.stop() {
                    commit(folder)?;
                    // Interrupted only if records remain: the next thing read says.
                    return match items.next() {
                        Some(Ahead::Failed(e)) => Err(e.into()),
                        Some(Ahead::Record { .. }) => Ok(!until.follows()),
                        Some(Ahead::End) | None => Ok(false),
                    };
                }
            }
            Ahead::End => {
                commit(folder)?;
                if until.follows() && !until.stop() {
                    continue;
                }
                return Ok(false);
            }
            Ahead::Failed(e) => {
                // A damaged record stops the fold, after the good records read before it
                // are committed (they waited for the batch to fill: up to --batch of them
                // were lost at every run, so a rerun never got past them). Said first, so a
                // commit that fails too does not hide it.
                tracing::error!(error = %e, "the log cannot be read on; committing what was folded before");
                commit(folder)?;
                return Err(e.into());
            }
        }
    }
    // The reading thread always ends its last batch with an end or a failure.
    Err(NodeError::Commit(
        "the reading thread stopped before the end of the log".into(),
    ))
}

/// A new instance id for a data directory: 8 hex digits from the directory, the process and
/// the time, so two directories (two nodes given one connector name by mistake) never share
/// their records' ids.
fn new_instance_id(path: &Path) -> String {
    use sha2::Digest;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut hasher = sha2::Sha256::new();
    hasher.update(path.as_os_str().as_encoded_bytes());
    hasher.update(std::process::id().to_le_bytes());
    hasher.update(nanos.to_le_bytes());
    hasher.finalize()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outage example's records, one per line.
    fn outage_example() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/examples/site-outage.jsonl"
        ))
        .unwrap()
    }

    /// A store written before the `state` family holds the whole engine in `meta`: it
    /// loads, and its first commit replaces it by rows.
    #[test]
    fn a_store_with_the_whole_engine_in_meta_loads_and_moves_to_rows() {
        let example = outage_example();
        let lines: Vec<&str> = example.lines().collect();
        let mut engine = Engine::new();
        for (i, line) in lines[..200].iter().enumerate() {
            engine.apply(
                i as u64,
                decode_record_at(line.as_bytes(), i as u64),
                &mut Vec::new(),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            let meta = store.cf(META);
            let mut old = engine.clone();
            let part = old.take_config();
            store
                .db
                .put_cf(&meta, LEGACY_STATE_KEY, serde_json::to_vec(&old).unwrap())
                .unwrap();
            store
                .db
                .put_cf(&meta, NEXT_KEY, 200u64.to_be_bytes())
                .unwrap();
            store
                .db
                .put_cf(&meta, SITE_KEY, serde_json::to_vec(&part.site).unwrap())
                .unwrap();
        }
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let (loaded, next) = store.load().unwrap();
        assert_eq!(next, 200);
        let mut expected = engine.clone();
        expected.take_config();
        let mut got = loaded.clone();
        got.take_config();
        assert_eq!(got.digest(), expected.digest());
        let mut folder = Folder::open(&store).unwrap();
        folder.apply(&LogEntry {
            offset: 200,
            bytes: lines[200].as_bytes().to_vec(),
        });
        folder.commit().unwrap();
        let meta = store.cf(META);
        assert!(store.db.get_cf(&meta, LEGACY_STATE_KEY).unwrap().is_none());
        drop(meta);
        assert!(store.row_stats().written > 5, "{:?}", store.row_stats());
        let (reloaded, next) = store.load().unwrap();
        assert_eq!(next, 201);
        let folded = folder.engine();
        let mut folded = folded.read().unwrap().clone();
        folded.take_config();
        let mut reloaded = reloaded;
        reloaded.take_config();
        assert_eq!(reloaded.digest(), folded.digest());
    }

    /// A store's state row keys, in key order.
    type RowKeys = Vec<Box<[u8]>>;

    /// Folds the first half of the outage example into a store, then rewrites its state
    /// rows as `old_layout` makes them from the folded engine (an earlier build's layout)
    /// and marks the store of `format`. Reopened, the store reads that format; its first
    /// commit (after three more records) rewrites it in this build's layout, and the state
    /// survives. Returns the state row keys before and after that commit.
    fn rewritten_by_first_commit(
        format: u32,
        old_layout: impl Fn(&Engine) -> BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> (RowKeys, RowKeys) {
        let example = outage_example();
        let lines: Vec<&str> = example.lines().collect();
        let entry = |offset: usize| LogEntry {
            offset: offset as u64,
            bytes: lines[offset].as_bytes().to_vec(),
        };
        let half = lines.len() / 2;
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            let mut folder = Folder::open(&store).unwrap();
            for offset in 0..half {
                folder.apply(&entry(offset));
            }
            folder.commit().unwrap();
            let engine = folder.engine().read().unwrap().clone();
            let cf = store.cf(STATE);
            let mut batch = WriteBatch::default();
            for key in store.state_row_keys().unwrap() {
                batch.delete_cf(&cf, key);
            }
            for (key, value) in old_layout(&engine) {
                batch.put_cf(&cf, key, value);
            }
            batch.put_cf(&store.cf(META), FORMAT_KEY, format.to_be_bytes());
            store.db.write(batch).unwrap();
        }
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        assert_eq!(store.format().unwrap(), Some(format));
        let before = store.state_row_keys().unwrap();
        let mut folder = Folder::open(&store).unwrap();
        for offset in half..half + 3 {
            folder.apply(&entry(offset));
        }
        folder.commit().unwrap();
        assert_eq!(store.format().unwrap(), Some(STORE_FORMAT));
        let engine = folder.engine().read().unwrap().clone();
        let mut keys = Vec::new();
        engine.for_each_store_row(|key, _| keys.push(Box::<[u8]>::from(key)));
        keys.sort();
        assert_eq!(store.state_row_keys().unwrap(), keys);
        let reader = Store::open_read_only(dir.path()).unwrap();
        let (loaded, next) = reader.load().unwrap();
        assert_eq!(next, half as u64 + 3);
        assert_eq!(loaded.digest(), engine.digest());
        (before, keys)
    }

    /// A store of format 1 (each connector's row holding its whole R-DATA maps, no entry
    /// rows) is read as it is; the first commit rewrites it in this build's layout, every
    /// entry included (were changes tracked from the load, as for a store of this format,
    /// the entries would be lost), and the state survives.
    #[test]
    fn a_store_of_format_1_is_rewritten_whole_by_its_first_commit() {
        rewritten_by_first_commit(1, |engine| {
            let with_entries = engine
                .lhc_data("ddc1.corp.example")
                .is_some_and(|d| !d.recent_users.is_empty());
            assert!(with_entries, "the example's first half has launches");
            // Format 1: connectors whole, no entry rows.
            let mut rows = BTreeMap::new();
            engine.for_each_state_row(|key, value| {
                rows.insert(key.to_vec(), value.to_vec());
            });
            rows
        });
    }

    /// A store of format 2 (each connector's recent activity in the connector's row, no
    /// activity rows) is read as it is; the first commit rewrites it with the activity in
    /// rows of their own, and the state survives.
    #[test]
    fn a_store_of_format_2_is_rewritten_with_activity_rows_by_its_first_commit() {
        let activity_rows = |keys: &RowKeys| keys.iter().filter(|k| k[0] == b'a').count();
        let (before, after) = rewritten_by_first_commit(2, |engine| {
            let with_activity = engine
                .lhc_data("ddc1.corp.example")
                .is_some_and(|d| !d.activity.is_empty());
            assert!(
                with_activity,
                "the example's first half has LHC-mode activity"
            );
            // Format 2: this build's rows, each activity row back in its connector's.
            let mut rows = BTreeMap::new();
            engine.for_each_store_row(|key, value| {
                rows.insert(key.to_vec(), value.to_vec());
            });
            let activities: Vec<(Vec<u8>, Vec<u8>)> = rows
                .iter()
                .filter(|(key, _)| key[0] == b'a')
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert!(!activities.is_empty());
            for (key, lines) in activities {
                rows.remove(&key);
                let mut connector_key = key.clone();
                connector_key[0] = b'c';
                let row = rows.get_mut(&connector_key).expect("its connector's row");
                let mut value: serde_json::Value = serde_json::from_slice(row).unwrap();
                value["data"]["activity"] = serde_json::from_slice(&lines).unwrap();
                *row = serde_json::to_vec(&value).unwrap();
            }
            rows
        });
        assert_eq!(activity_rows(&before), 0);
        assert!(activity_rows(&after) > 0);
    }

    /// A commit job holds only what changed since the previous job, so once a commit has
    /// failed part-way the next incomplete job is refused (written, the store would miss
    /// the failed commit's changes); a whole commit heals the store, and jobs go on.
    #[test]
    fn after_a_failed_commit_a_job_of_what_changed_is_refused_until_a_whole_commit() {
        let example = outage_example();
        let lines: Vec<&str> = example.lines().collect();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut folder = Folder::open(&store).unwrap();
        let mut offset = 0u64;
        let mut apply = |folder: &mut Folder<&Store>, n: usize| {
            for _ in 0..n {
                folder.apply(&LogEntry {
                    offset,
                    bytes: lines[offset as usize].as_bytes().to_vec(),
                });
                offset += 1;
            }
        };
        apply(&mut folder, 50);
        let first = folder.commit_job().unwrap();
        assert!(first.state.complete(), "the first job copies every row");
        store.write_job(&first).unwrap();
        // A commit that fails part-way: its site is missing although the store thinks it
        // holds another version.
        apply(&mut folder, 20);
        let mut failing = folder.commit_job().unwrap();
        assert!(!failing.state.complete());
        failing.site = None;
        store.written.lock().unwrap().site_version = Some(u64::MAX);
        assert!(store.write_job(&failing).is_err());
        store.written.lock().unwrap().site_version = Some(failing.site_version);
        apply(&mut folder, 20);
        let next = folder.commit_job().unwrap();
        let refused = store.write_job(&next).unwrap_err();
        assert!(
            matches!(&refused, NodeError::Commit(m) if m.contains("an earlier commit failed")),
            "{refused}"
        );
        // A whole commit writes every row again; jobs are accepted after it.
        apply(&mut folder, 20);
        folder.commit().unwrap();
        apply(&mut folder, 20);
        let after = folder.commit_job().unwrap();
        assert!(!after.state.complete());
        store.write_job(&after).unwrap();
        let (loaded, next) = store.load().unwrap();
        assert_eq!(next, offset);
        let mut loaded = loaded;
        loaded.take_config();
        let mut folded = folder.engine().read().unwrap().clone();
        folded.take_config();
        assert_eq!(loaded.digest(), folded.digest());
    }

    /// A fold on a store whose last commit failed (in this process: a library caller
    /// folding again) starts from what the store holds and writes what changes from there,
    /// instead of being refused as if it continued the failed commit's engine.
    #[test]
    fn a_fold_after_a_failed_commit_on_the_same_store_goes_on() {
        let example = outage_example();
        let lines: Vec<&str> = example.lines().collect();
        let dir = tempfile::tempdir().unwrap();
        let log =
            lhc_log::EmbeddedLog::open(dir.path().join("log"), lhc_log::EmbeddedOptions::default())
                .unwrap();
        let records: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        log.append(&records).unwrap();
        let store = Store::open(dir.path().join("data"), &StoreOptions::default()).unwrap();
        {
            let mut folder = Folder::open(&store).unwrap();
            for offset in 0..60 {
                folder.apply(&LogEntry {
                    offset,
                    bytes: lines[offset as usize].as_bytes().to_vec(),
                });
            }
            store.write_job(&folder.commit_job().unwrap()).unwrap();
            for offset in 60..80 {
                folder.apply(&LogEntry {
                    offset,
                    bytes: lines[offset as usize].as_bytes().to_vec(),
                });
            }
            // A commit that fails part-way (as in the test above).
            let mut failing = folder.commit_job().unwrap();
            failing.site = None;
            store.written.lock().unwrap().site_version = Some(u64::MAX);
            assert!(store.write_job(&failing).is_err());
            store.written.lock().unwrap().site_version = Some(failing.site_version);
        }
        let policy = crate::checkpoints::CheckpointPolicy::off();
        let (summary, engine) = fold(&store, &log, 7, None, &policy).unwrap();
        assert_eq!(summary.resumed_at, 60);
        assert_eq!(summary.next, lines.len() as u64);
        let reader = Store::open_read_only(dir.path().join("data")).unwrap();
        let (mut loaded, next) = reader.load().unwrap();
        assert_eq!(next, lines.len() as u64);
        let mut folded = engine;
        folded.take_config();
        loaded.take_config();
        assert_eq!(loaded.digest(), folded.digest());
    }

    /// A stored state in which a connector is in LHC mode without its episode (which the
    /// reducer never writes) is refused as corrupt at load, not folded on.
    #[test]
    fn a_stored_state_that_breaks_an_engine_invariant_is_refused() {
        let example = outage_example();
        let mut engine = Engine::new();
        for (i, line) in example.lines().take(300).enumerate() {
            engine.apply(
                i as u64,
                decode_record_at(line.as_bytes(), i as u64),
                &mut Vec::new(),
            );
        }
        assert!(
            engine.connectors().values().any(|c| c.in_lhc()),
            "mid-outage"
        );
        let part = engine.take_config();
        let mut state = serde_json::to_value(&engine).unwrap();
        for c in state["connectors"].as_object_mut().unwrap().values_mut() {
            c["episode"] = serde_json::Value::Null;
        }
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            let meta = store.cf(META);
            let db = &store.db;
            db.put_cf(&meta, LEGACY_STATE_KEY, serde_json::to_vec(&state).unwrap())
                .unwrap();
            db.put_cf(&meta, NEXT_KEY, 300u64.to_be_bytes()).unwrap();
            db.put_cf(&meta, SITE_KEY, serde_json::to_vec(&part.site).unwrap())
                .unwrap();
        }
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let error = store.load().unwrap_err().to_string();
        assert!(
            error.contains("an episode exists exactly in LHC mode"),
            "{error}"
        );
    }
}
