//! The connector node's cache snapshot (the LHC database) in RocksDB, folded from the site
//! log exactly once.
//!
//! Invariant (principle 4): the engine state, the offset of the next record to apply and
//! the outputs of the records applied since the previous commit are written in one
//! `WriteBatch`. A process killed at any instant restarts from the last commit: no record
//! is applied twice, no output is lost or stored twice.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lhc_engine::{decode_record_at, Engine, Output};
use lhc_log::{Log, LogError};
use rocksdb::{ColumnFamilyDescriptor, IteratorMode, Options, WriteBatch, WriteOptions, DB};

/// Column family of the engine state and the applied offset.
const META: &str = "meta";
/// Column family of outputs, keyed by (input offset, index) big-endian.
const OUTPUTS: &str = "outputs";
/// Key of the serialized engine.
const STATE_KEY: &[u8] = b"engine";
/// Key of the next offset to apply.
const NEXT_KEY: &[u8] = b"next_offset";

/// Errors of the node store; each names what to check.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// RocksDB refused.
    #[error("cache snapshot {path}: {source}")]
    Store {
        /// The store directory.
        path: PathBuf,
        /// RocksDB's error.
        source: rocksdb::Error,
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
}

impl Store {
    /// Opens (or creates) the store in `path`.
    pub fn open(path: impl AsRef<Path>, options: &StoreOptions) -> Result<Store, NodeError> {
        let path = path.as_ref().to_path_buf();
        let mut db_options = Options::default();
        db_options.create_if_missing(true);
        db_options.create_missing_column_families(true);
        db_options.set_write_buffer_size(options.write_buffer_bytes);
        db_options.set_max_write_buffer_number(2);
        let cache = rocksdb::Cache::new_lru_cache(options.block_cache_bytes);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&cache);
        db_options.set_block_based_table_factory(&table);
        let families =
            [META, OUTPUTS].map(|name| ColumnFamilyDescriptor::new(name, db_options.clone()));
        let db = DB::open_cf_descriptors(&db_options, &path, families).map_err(|source| {
            NodeError::Store {
                path: path.clone(),
                source,
            }
        })?;
        Ok(Store {
            db,
            path,
            sync: options.sync,
        })
    }

    fn error(&self, source: rocksdb::Error) -> NodeError {
        NodeError::Store {
            path: self.path.clone(),
            source,
        }
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("column families are created at open")
    }

    /// The stored engine and the next offset to apply; a fresh engine at 0 when empty.
    pub fn load(&self) -> Result<(Engine, u64), NodeError> {
        let meta = self.cf(META);
        let next =
            match self.db.get_cf(meta, NEXT_KEY).map_err(|e| self.error(e))? {
                Some(bytes) => u64::from_be_bytes(bytes.as_slice().try_into().map_err(|_| {
                    NodeError::Corrupt {
                        path: self.path.clone(),
                        detail: "next offset is not 8 bytes".into(),
                    }
                })?),
                None => return Ok((Engine::new(), 0)),
            };
        let state = self
            .db
            .get_cf(meta, STATE_KEY)
            .map_err(|e| self.error(e))?
            .ok_or_else(|| NodeError::Corrupt {
                path: self.path.clone(),
                detail: "an offset without a state".into(),
            })?;
        let engine = serde_json::from_slice(&state).map_err(|e| NodeError::Corrupt {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        Ok((engine, next))
    }

    /// Writes the state, the next offset and the pending outputs in one batch.
    pub fn commit(
        &self,
        engine: &Engine,
        next: u64,
        outputs: &[(u64, Vec<Output>)],
    ) -> Result<(), NodeError> {
        let mut batch = WriteBatch::default();
        let meta = self.cf(META);
        let state = serde_json::to_vec(engine).expect("state serializes");
        batch.put_cf(meta, STATE_KEY, state);
        batch.put_cf(meta, NEXT_KEY, next.to_be_bytes());
        let cf = self.cf(OUTPUTS);
        for (offset, list) in outputs {
            for (index, output) in list.iter().enumerate() {
                let mut key = offset.to_be_bytes().to_vec();
                key.extend_from_slice(&(index as u32).to_be_bytes());
                batch.put_cf(
                    cf,
                    key,
                    serde_json::to_vec(output).expect("outputs serialize"),
                );
            }
        }
        let mut write = WriteOptions::default();
        write.set_sync(self.sync);
        self.db.write_opt(batch, &write).map_err(|e| self.error(e))
    }

    /// Every stored output in order: (input offset, output JSON).
    pub fn outputs(&self) -> Result<Vec<(u64, Vec<u8>)>, NodeError> {
        let mut all = Vec::new();
        for item in self.db.iterator_cf(self.cf(OUTPUTS), IteratorMode::Start) {
            let (key, value) = item.map_err(|e| self.error(e))?;
            let offset = u64::from_be_bytes(key[..8].try_into().expect("8-byte prefix"));
            all.push((offset, value.to_vec()));
        }
        Ok(all)
    }
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
}

/// Folds `log` into the store from where it stopped, committing every `batch` records.
/// With `follow`, waits for new records until `stop` returns true.
pub fn fold(
    store: &Store,
    log: &dyn Log,
    batch: usize,
    follow: Option<&dyn Fn() -> bool>,
) -> Result<(FoldSummary, Engine), NodeError> {
    let (mut engine, next) = store.load()?;
    let mut summary = FoldSummary {
        resumed_at: next,
        next,
        ..Default::default()
    };
    let mut reader = log.reader(next.max(log.start_offset()?))?;
    let mut pending: Vec<(u64, Vec<Output>)> = Vec::new();
    let mut in_batch = 0usize;
    loop {
        let wait = if follow.is_some() {
            Duration::from_millis(200)
        } else {
            Duration::ZERO
        };
        let entry = reader.next(wait)?;
        let Some(entry) = entry else {
            commit(store, &engine, &mut summary, &mut pending, &mut in_batch)?;
            match follow {
                Some(stop) if !stop() => continue,
                _ => break,
            }
        };
        let mut outputs = Vec::new();
        engine.apply(
            entry.offset,
            decode_record_at(&entry.bytes, entry.offset),
            &mut outputs,
        );
        if !outputs.is_empty() {
            pending.push((entry.offset, outputs));
        }
        summary.next = entry.offset + 1;
        summary.applied += 1;
        in_batch += 1;
        if in_batch >= batch.max(1) {
            commit(store, &engine, &mut summary, &mut pending, &mut in_batch)?;
        }
    }
    Ok((summary, engine))
}

/// Commits the records applied since the last commit, if any, with their outputs.
fn commit(
    store: &Store,
    engine: &Engine,
    summary: &mut FoldSummary,
    pending: &mut Vec<(u64, Vec<Output>)>,
    in_batch: &mut usize,
) -> Result<(), NodeError> {
    if *in_batch == 0 {
        return Ok(());
    }
    store.commit(engine, summary.next, pending)?;
    summary.commits += 1;
    pending.clear();
    *in_batch = 0;
    Ok(())
}
