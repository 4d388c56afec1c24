//! Checkpoints: the engine state after the first N records of an embedded log, kept in the
//! log's `checkpoints/` folder, so time travel starts near the instant asked for instead of
//! replaying from the first record.
//!
//! A checkpoint file (`{next_offset:020}.ckpt`) is one JSON header line, then two zstd
//! frames: the configuration part (JSON) and the state rows (`Engine::for_each_state_row`),
//! parsed on two threads at once. It is written to a temporary name, synced and renamed,
//! so a crash leaves none or a whole one.
//!
//! Invariant: a checkpoint is only ever a shortcut, never a source of truth. It is used
//! only when its header is whole (its seal), names this build and this log (the hashes of
//! the log's first record, of records sampled over those it covers and of the last one) and
//! a prefix the log still holds, and when the digest of the state rebuilt from it equals
//! the digest written beside it; otherwise it is ignored with a warning that says why, and
//! the caller replays from an earlier one or from the start. Replaying from a checkpoint
//! therefore gives what a replay from the start gives.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use std::sync::mpsc::Receiver;
use std::sync::Arc;

use lhc_engine::engine::ConfigJson;
use lhc_engine::{Engine, Output};
use lhc_log::{EmbeddedLog, Log, LogError};

use crate::drive::{After, Before, Observer};
use crate::source::{PathError, Source, SourceError};

/// Checkpoints that may turn out damaged (read and rebuilt, or their digest checked, for
/// nothing) before a query gives up on the rest and replays from the first record: each
/// costs about what replaying a sixth of a large site does.
const MAX_DAMAGED: usize = 3;

/// Folder of an embedded log that holds its checkpoints.
pub const DIR: &str = "checkpoints";
pub use lhc_log::checkpoint::DEFAULT_EVERY;

use lhc_log::checkpoint::{
    self as format, sha256_hex as hex, verify, verify_reusing, FORMAT, MAX_HEADER_BYTES,
};
pub use lhc_log::checkpoint::{sample_offsets, Header, Part, SAMPLES};

/// A checkpoint read and verified: its header and the engine it rebuilds.
#[derive(Debug)]
pub struct Checkpoint {
    /// Its header.
    pub header: Header,
    /// The engine after `header.next_offset` records.
    pub engine: Engine,
    /// The configuration part's JSON the check of its digest writes (from [`resume`]).
    pub config_json: LaterConfigJson,
    /// A copy of the engine and a buffer for the digest check ([`format::Rebuilt`]).
    for_check: (Option<Engine>, Vec<u8>),
}

impl Checkpoint {
    fn new(header: Header, rebuilt: format::Rebuilt) -> Checkpoint {
        Checkpoint {
            header,
            engine: rebuilt.engine,
            config_json: LaterConfigJson::none(),
            for_check: (rebuilt.copy, rebuilt.spare),
        }
    }
}

/// The configuration part's JSON ([`lhc_engine::engine::ConfigJson`]) of a checkpoint's
/// state, written on the thread that checks its digest: a digest of a later state that
/// still holds the same configuration ([`Engine::digest_reusing`]) skips writing tens of MB
/// again.
#[derive(Debug)]
pub struct LaterConfigJson(
    Option<Receiver<Arc<ConfigJson>>>,
    std::cell::OnceCell<Option<Arc<ConfigJson>>>,
);

impl LaterConfigJson {
    /// None to wait for.
    fn none() -> LaterConfigJson {
        LaterConfigJson(None, Default::default())
    }

    /// Waits for it (it is written first, before the rest of the check), the first time;
    /// `None` when there is none.
    pub fn wait(&self) -> Option<Arc<ConfigJson>> {
        self.1.get_or_init(|| self.0.as_ref()?.recv().ok()).clone()
    }

    /// `engine`'s digest, reusing the configuration JSON when there is one.
    pub fn digest(&self, engine: &Engine) -> String {
        match self.wait() {
            Some(config) => engine.digest_reusing(&config),
            None => engine.digest(),
        }
    }
}

/// Why checkpoints could not be written (a checkpoint that cannot be *used* is a warning,
/// never an error: see [`resume`]).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The log or a file could not be read or written, or the replay failed: the errors
    /// a replay names, with the same words.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A record the replay just read is no longer in the log.
    #[error(
        "{log}: offset {offset} vanished while checkpoints were written (was the log replaced?)"
    )]
    Vanished {
        /// The log.
        log: String,
        /// The record.
        offset: u64,
    },
    /// A checkpoint covers more records than the log holds: records are gone, and the
    /// checkpoint is the evidence (`lhc log check` names it), so nothing is removed.
    #[error(
        "{log} holds records up to offset {end}, but checkpoint {checkpoint} covers {covers} \
         records: records {end}..{covers} are gone. Nothing was changed: restore the log from \
         a copy; or, once the loss is dealt with, remove that checkpoint and those after it, \
         which are its evidence (`lhc log check` names them), and run this again"
    )]
    Lost {
        /// The log.
        log: String,
        /// The log's end offset.
        end: u64,
        /// Records the checkpoint covers.
        covers: u64,
        /// The checkpoint's file.
        checkpoint: String,
    },
    /// `--every 0`.
    #[error("checkpoints need a positive interval (--every N records)")]
    ZeroInterval,
    /// The log no longer holds its first records: there is nothing to start from.
    #[error(
        "{log} starts at offset {start}, not 0: its first records are gone, so no state can \
         be rebuilt from it"
    )]
    NotFromStart {
        /// The log.
        log: String,
        /// Its first offset.
        start: u64,
    },
}

impl From<PathError> for CheckpointError {
    fn from(e: PathError) -> Self {
        CheckpointError::Source(e.into())
    }
}

impl From<LogError> for CheckpointError {
    fn from(e: LogError) -> Self {
        CheckpointError::Source(e.into())
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| PathError::on(path)(source).into()
}

/// The checkpoint files of a log directory: (next offset, path), ascending. A missing
/// folder is no checkpoints.
pub fn list(log_dir: &Path) -> Result<Vec<(u64, PathBuf)>, CheckpointError> {
    let dir = log_dir.join(DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&dir)(e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(&dir))?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".ckpt")) else {
            continue;
        };
        if let (20, Ok(offset)) = (stem.len(), stem.parse::<u64>()) {
            found.push((offset, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// SHA-256 of the record at `offset`, hex; `None` when the log does not hold it.
fn record_hash(
    log: &dyn Log,
    offset: u64,
    holds: std::ops::Range<u64>,
) -> Result<Option<String>, LogError> {
    Ok(format::record_bytes_in(log, offset, holds)?.map(|bytes| hex(&bytes)))
}

/// The checkpoint proving that records past `end` were written to `log` (the embedded
/// log in `log_dir`): the latest covering more than `end` whose header is whole and sealed,
/// names as many records as its file name, and whose first record is this log's (when the
/// log holds one). A file of junk named like a checkpoint, or one copied from another
/// log, proves nothing: it is an unusable checkpoint, which `lhc log checkpoint` removes
/// (counting a junk file as evidence recorded a loss that never happened, for good; found
/// by hostile testing). (covers, path).
pub fn beyond(
    log_dir: &Path,
    log: &dyn Log,
    end: u64,
) -> Result<Option<(u64, PathBuf)>, CheckpointError> {
    let past: Vec<_> = list(log_dir)?
        .into_iter()
        .filter(|(n, _)| *n > end)
        .collect();
    if past.is_empty() {
        return Ok(None);
    }
    let first = record_hash(log, 0, log.start_offset()?..end)?;
    for (covers, path) in past.into_iter().rev() {
        let Ok((header, _)) = read_header(&path) else {
            continue;
        };
        if first.as_deref().is_none_or(|f| f == header.first_record) {
            return Ok(Some((covers, path)));
        }
    }
    Ok(None)
}

/// Reads a checkpoint's header alone.
fn read_header(path: &Path) -> Result<(Header, BufReader<File>), String> {
    // Asked before opening: opening a FIFO waits for a writer, and a device never ends.
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let file = File::open(path).map_err(|e| e.to_string())?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    (&mut reader)
        .take(MAX_HEADER_BYTES)
        .read_until(b'\n', &mut line)
        .map_err(|e| e.to_string())?;
    if line.last() != Some(&b'\n') {
        return Err("no header line (damaged)".into());
    }
    let header = format::parse_header(&line)?;
    let named = path
        .file_stem()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse::<u64>().ok());
    if named != Some(header.next_offset) {
        return Err(format!(
            "its name says it covers {} records, its header {} (renamed or damaged)",
            named.map_or("?".to_string(), |n| n.to_string()),
            header.next_offset
        ));
    }
    Ok((header, reader))
}

/// Why a checkpoint's header does not fit this build and log; `None` when it does.
fn unfit(header: &Header, build: &str, log: &dyn Log) -> Result<Option<String>, LogError> {
    if header.format != FORMAT {
        return Ok(Some(format!("format {:?} is not {FORMAT}", header.format)));
    }
    if header.build != build {
        return Ok(Some(format!(
            "written by lhc {} (this is {build}): another build may fold the records differently",
            header.build
        )));
    }
    if header.next_offset == 0 {
        return Ok(Some("covers no record".into()));
    }
    let end = log.end_offset()?;
    if header.next_offset > end {
        return Ok(Some(format!(
            "covers {} records but the log holds {end}: it belongs to a longer log",
            header.next_offset
        )));
    }
    // The log's span asked once, not once per record read.
    let holds = log.start_offset()?..end;
    let hash = |offset| record_hash(log, offset, holds.clone());
    let offsets = sample_offsets(header.next_offset);
    let mut samples = Vec::with_capacity(offsets.len());
    for offset in offsets {
        samples.push(hash(offset)?.unwrap_or_default());
    }
    let last = format::record_bytes_in(log, header.next_offset - 1, holds.clone())?;
    if hash(0)?.as_deref() != Some(header.first_record.as_str())
        || last.as_deref().map(hex).as_deref() != Some(header.last_record.as_str())
        || samples != header.samples
    {
        return Ok(Some(
            "the log's records differ from those it was written from (another or a rewritten log)"
                .into(),
        ));
    }
    // The header's times decide which instants it may answer: those of the last record it
    // covers must agree (a header rewritten with its seal recomputed is caught here when
    // its times are not that record's).
    if let Some(ts) = last
        .and_then(|bytes| lhc_engine::decode_record(&bytes).ok())
        .map(|r| r.ts())
    {
        if header.max_ts.is_none_or(|max| max < ts) || header.last_ts != Some(ts) {
            return Ok(Some(format!(
                "its header's times (latest {}, last {}) do not fit its last record's ({ts})",
                header.max_ts.map(|t| t.to_string()).unwrap_or_default(),
                header.last_ts.map(|t| t.to_string()).unwrap_or_default()
            )));
        }
    }
    Ok(None)
}

/// Reads the checkpoint at `path` and rebuilds its engine, everything but the digest check
/// (see [`verify`]): `Err` says why it cannot be used.
fn open(path: &Path, build: &str, log: &dyn Log) -> Result<Checkpoint, String> {
    let (header, reader) = read_header(path)?;
    rebuild(header, reader, build, log)
}

/// [`open`] after its header was read: checks it fits, then rebuilds the engine.
fn rebuild(
    header: Header,
    reader: BufReader<File>,
    build: &str,
    log: &dyn Log,
) -> Result<Checkpoint, String> {
    if let Some(why) = unfit(&header, build, log).map_err(|e| e.to_string())? {
        return Err(why);
    }
    let rebuilt = format::rebuild_parts(&header, &read_body(&header, reader)?, false)?;
    Ok(Checkpoint::new(header, rebuilt))
}

/// [`open`] and [`verify`].
fn load(path: &Path, build: &str, log: &dyn Log) -> Result<Checkpoint, String> {
    let checkpoint = open(path, build, log)?;
    verify(&checkpoint.engine, &checkpoint.header.digest)?;
    Ok(checkpoint)
}

fn describe(path: &Path) -> String {
    path.display().to_string()
}

/// Where checkpoints are kept: the files beside an embedded log ([`resume`]), or a node's
/// RocksDB (the CLI's, which knows the node's store). Every answer that is not `Ok` says why
/// the checkpoint cannot be used.
pub trait Shelf {
    /// Where they are (a log directory, a node's cache snapshot), for warnings.
    fn describe(&self) -> String;
    /// The checkpoints held: (next offset, a name for warnings), ascending.
    fn list(&self) -> Result<Vec<(u64, String)>, String>;
    /// The header of the one covering `offset` records.
    fn header(&self, offset: u64) -> Result<Header, String>;
    /// The bytes after its header (as long as they are: [`format::rebuild`] checks).
    fn body(&self, offset: u64, header: &Header) -> Result<Vec<u8>, String>;
    /// How to write them anew, for the warning about another build's.
    fn rewrite_hint(&self) -> String;
}

/// The checkpoint files beside an embedded log.
struct Files(PathBuf);

/// The checkpoint files beside the embedded log in `log_dir`, as a shelf.
pub fn files(log_dir: &Path) -> impl Shelf {
    Files(log_dir.to_path_buf())
}

impl Shelf for Files {
    fn describe(&self) -> String {
        self.0.display().to_string()
    }

    fn list(&self) -> Result<Vec<(u64, String)>, String> {
        Ok(list(&self.0)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(offset, path)| (offset, describe(&path)))
            .collect())
    }

    fn header(&self, offset: u64) -> Result<Header, String> {
        read_header(&self.path(offset)).map(|(header, _)| header)
    }

    fn body(&self, offset: u64, header: &Header) -> Result<Vec<u8>, String> {
        let (_, reader) = read_header(&self.path(offset))?;
        read_body(header, reader)
    }

    fn rewrite_hint(&self) -> String {
        format!("`lhc log checkpoint {}` writes them anew", self.0.display())
    }
}

impl Files {
    fn path(&self, offset: u64) -> PathBuf {
        self.0.join(DIR).join(format!("{offset:020}.ckpt"))
    }
}

/// The bytes after a header, one more than it says at most (a longer file is told from a
/// whole one).
fn read_body(header: &Header, reader: BufReader<File>) -> Result<Vec<u8>, String> {
    let expected = header.body_len()?;
    let mut body = Vec::new();
    reader
        .take(expected + 1)
        .read_to_end(&mut body)
        .map_err(|e| e.to_string())?;
    Ok(body)
}

/// What trying checkpoints left to say: a warning for each one not used, and how many of
/// them cost a rebuild or a replay for nothing (see [`MAX_DAMAGED`]).
#[derive(Default)]
struct Notes {
    warnings: Vec<String>,
    damaged: usize,
}

/// The latest checkpoint below `bound` (any when `None`) whose header passes `wanted` and that opens, with a
/// warning for each later one that passed `wanted` but could not be opened.
fn latest_below(
    shelf: &dyn Shelf,
    log: &dyn Fn() -> Result<Box<dyn Log>, String>,
    build: &str,
    bound: Option<u64>,
    wanted: &impl Fn(&Header) -> bool,
    ready: &mut impl FnMut(&Header),
    notes: &mut Notes,
) -> Result<Option<(u64, String, Checkpoint)>, String> {
    let Notes { warnings, damaged } = notes;
    let found = shelf.list()?;
    if found.is_empty() {
        return Ok(None);
    }
    let log = log()?;
    // After an upgrade every checkpoint is another build's: one warning says so, not one
    // per checkpoint.
    let mut other_builds: BTreeMap<String, usize> = BTreeMap::new();
    let mut found_one = None;
    // Whether to compare a checkpoint's records with the log's while rebuilding it.
    let mut overlap = true;
    let candidates: Vec<_> = found
        .iter()
        .rev()
        .filter(|(offset, _)| bound.is_none_or(|bound| *offset < bound))
        .collect();
    for (tried, (offset, name)) in candidates.iter().enumerate() {
        if *damaged >= MAX_DAMAGED {
            // Each damaged one cost a rebuild, or a replay thrown away: past a few, replaying
            // from the first record is cheaper than trying the rest.
            warnings.push(format!(
                "{} checkpoints of {} could not be used: replaying from the first record \
                 instead of trying the {} earlier one(s); {}",
                *damaged,
                shelf.describe(),
                candidates.len() - tried,
                shelf.rewrite_hint()
            ));
            break;
        }
        let header = match shelf.header(*offset) {
            Ok(header) if !wanted(&header) => continue,
            Ok(header) if header.format == FORMAT && header.build != build => {
                *other_builds.entry(header.build).or_default() += 1;
                continue;
            }
            Ok(header) => header,
            Err(why) => {
                warnings.push(format!("ignoring checkpoint {name}: {why}"));
                continue;
            }
        };
        let check = || unfit(&header, build, &*log).map_err(|e| e.to_string());
        let rebuild = || {
            shelf
                .body(*offset, &header)
                .and_then(|body| format::rebuild_parts(&header, &body, true))
        };
        let rebuilt = if header.format == FORMAT && overlap {
            ready(&header);
            // The log's records are compared with the header's while the checkpoint is read
            // and rebuilt (reading the 18 records spread over the log left the other core
            // idle for ~20 ms a query); the engine is only used when they fit.
            std::thread::scope(|scope| {
                let fits = std::thread::Builder::new()
                    .name("lhc-checkpoint-records".into())
                    .spawn_scoped(scope, check);
                let rebuilt = rebuild();
                // Without a thread to spare (the system refused one), compared here after.
                let verdict = match fits {
                    Ok(fits) => fits.join().expect("comparing records does not panic"),
                    Err(_) => check(),
                };
                match verdict {
                    Ok(None) => rebuilt.map_err(|why| (why, true)),
                    Ok(Some(why)) | Err(why) => {
                        // The log differs from the one this checkpoint was written from, so
                        // likely from the earlier ones' too: compare before rebuilding them
                        // (a rebuild costs ten times the comparison).
                        overlap = false;
                        Err((why, false))
                    }
                }
            })
        } else {
            match check() {
                Ok(None) => {
                    ready(&header);
                    rebuild().map_err(|why| (why, true))
                }
                Ok(Some(why)) | Err(why) => Err((why, false)),
            }
        };
        match rebuilt {
            Ok(engine) => {
                found_one = Some((*offset, name.clone(), Checkpoint::new(header, engine)));
                break;
            }
            Err((why, was_rebuilt)) => {
                *damaged += usize::from(was_rebuilt);
                warnings.push(format!("ignoring checkpoint {name}: {why}"));
            }
        }
    }
    for (other, count) in other_builds {
        warnings.push(format!(
            "ignoring {count} checkpoint(s) of {} written by lhc {other} (this is {build}): \
             another build may fold the records differently; {}",
            shelf.describe(),
            shelf.rewrite_hint()
        ));
    }
    Ok(found_one)
}

/// Runs `work` from the latest usable checkpoint of the log in `log_dir` whose header
/// passes `wanted` (asked before anything else is read), or from nothing (`None`: replay
/// from the first record) when there is none. Returns its result with a warning for every
/// checkpoint that could not be used.
///
/// The checkpoint's digest is checked on another thread while `work` runs (at the seeds'
/// scale it costs about as much as replaying 100,000 records); if the check fails, what
/// `work` computed is dropped and it runs again from an earlier checkpoint.
pub fn resume<T, E: From<CheckpointError>>(
    log_dir: &Path,
    build: &str,
    wanted: impl Fn(&Header) -> bool,
    work: impl FnMut(Option<Checkpoint>) -> Result<T, E>,
) -> Result<(T, Vec<String>), E> {
    let log = || -> Result<Box<dyn Log>, String> {
        Ok(Box::new(
            EmbeddedLog::open_read_only(log_dir).map_err(|e| e.to_string())?,
        ))
    };
    resume_on(
        &Files(log_dir.to_path_buf()),
        &log,
        build,
        None,
        wanted,
        |_| {},
        work,
    )
}

/// [`resume`] from the checkpoints on `shelf`, checked against the records of the log `log`
/// opens (opened only when there are some). `ready` is told of a checkpoint of this build
/// and format before it is read and rebuilt (the first one tried, before its records are
/// compared with the log's too, which happens meanwhile), so the caller can start reading
/// the records after it; `work` may then get that checkpoint, or, when it cannot be used,
/// an earlier one or none: the caller drops what it started for a checkpoint it does not
/// get. When `work` will digest a state at `answer_at` (the clock after a cut there), the
/// check also hashes that state's JSON ahead up to the end of its configuration
/// ([`lhc_engine::engine::ConfigJson::anticipate`]).
pub fn resume_on<T, E: From<CheckpointError>>(
    shelf: &dyn Shelf,
    log: &dyn Fn() -> Result<Box<dyn Log>, String>,
    build: &str,
    answer_at: Option<lhc_engine::Ts>,
    wanted: impl Fn(&Header) -> bool,
    mut ready: impl FnMut(&Header),
    mut work: impl FnMut(Option<Checkpoint>) -> Result<T, E>,
) -> Result<(T, Vec<String>), E> {
    let mut notes = Notes::default();
    // `None` at first: a checkpoint named u64::MAX is tried (and refused with a warning),
    // not skipped without a word.
    let mut bound = None;
    loop {
        // Checkpoints that cannot be read cost the shortcut, not the answer.
        let found = latest_below(shelf, log, build, bound, &wanted, &mut ready, &mut notes)
            .unwrap_or_else(|e| {
                notes.warnings.push(format!(
                    "ignoring the checkpoints of {}: {e}",
                    shelf.describe()
                ));
                None
            });
        let Some((offset, name, checkpoint)) = found else {
            return Ok((work(None)?, notes.warnings));
        };
        bound = Some(offset);
        let mut checkpoint = checkpoint;
        let (copy, spare) = std::mem::take(&mut checkpoint.for_check);
        let copy = copy.unwrap_or_else(|| checkpoint.engine.clone());
        let written = checkpoint.header.digest.clone();
        let (send, receive) = std::sync::mpsc::sync_channel(1);
        let check = std::thread::Builder::new()
            .name("lhc-checkpoint-check".into())
            .spawn(move || {
                // The configuration part first: `work` may wait for it.
                let mut config = copy.config_json_in(spare);
                if let Some(at) = answer_at {
                    config.anticipate(&copy, at);
                }
                let config = Arc::new(config);
                let _ = send.send(Arc::clone(&config));
                verify_reusing(&copy, &config, &written)
            })
            .map_err(|e| CheckpointError::from(PathError::on(Path::new(&name))(e)))?;
        checkpoint.config_json = LaterConfigJson(Some(receive), Default::default());
        let result = work(Some(checkpoint));
        match check.join().expect("the digest check does not panic") {
            Ok(()) => return Ok((result?, notes.warnings)),
            Err(why) => {
                notes.damaged += 1;
                notes
                    .warnings
                    .push(format!("ignoring checkpoint {name}: {why}"));
            }
        }
    }
}

/// Removes temporary files a crash left while writing a checkpoint.
fn remove_leftovers(log_dir: &Path) -> Result<(), CheckpointError> {
    let dir = log_dir.join(DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry.map_err(io(&dir))?.path();
        if path.extension().is_some_and(|e| e == "tmp") {
            std::fs::remove_file(&path).map_err(io(&path))?;
        }
    }
    Ok(())
}

/// What [`refresh`] did.
#[derive(Debug, Default)]
pub struct Refreshed {
    /// Records of the log.
    pub records: u64,
    /// The checkpoint the replay resumed from (its next offset), if any.
    pub resumed_from: Option<u64>,
    /// Offsets of the checkpoints written.
    pub written: Vec<u64>,
    /// Checkpoints kept as they were.
    pub kept: usize,
    /// Checkpoints removed, each with why it could not be used.
    pub removed: Vec<(PathBuf, String)>,
}

/// The embedded log in `log_dir`, read-only, refused when `every` is 0 or the log no longer
/// starts at offset 0 (checkpoints are taken by replaying from its first record).
fn open_from_start(log_dir: &Path, every: u64) -> Result<EmbeddedLog, CheckpointError> {
    if every == 0 {
        return Err(CheckpointError::ZeroInterval);
    }
    let log = EmbeddedLog::open_read_only(log_dir)?;
    let start = log.start_offset()?;
    if start != 0 {
        return Err(CheckpointError::NotFromStart {
            log: log.describe(),
            start,
        });
    }
    Ok(log)
}

/// Writes a checkpoint every `every` records of the embedded log in `log_dir` (after
/// records `every`, `2 * every`, …), resuming from the latest usable one. Checkpoints of
/// another build or log, with a damaged header, or damaged and met while looking for where
/// to resume, are removed and written anew; with `verify_all`, every checkpoint's state is
/// rebuilt and checked against its digest first (slower: a full load of each).
pub fn refresh(
    log_dir: &Path,
    every: u64,
    build: &str,
    verify_all: bool,
    progress: impl FnMut(u64) + Send + 'static,
) -> Result<Refreshed, CheckpointError> {
    let log = open_from_start(log_dir, every)?;
    let mut done = Refreshed {
        records: log.end_offset()?,
        ..Refreshed::default()
    };
    // Unfit checkpoints go first (cheap: headers and two records each); the latest fit one
    // is then loaded in full, and if it is damaged the one before it is tried.
    let mut fit = Vec::new();
    let found = list(log_dir)?;
    // Refreshing would remove it as unfit for this log; it proves records are gone, unless
    // the log's LOST file already says so for good (a writer kept it before appending).
    let kept = |covers: u64| {
        lhc_log::embedded::lost_covers(log_dir, done.records, covers.saturating_sub(1))
            .unwrap_or(false)
    };
    if let Some((covers, path)) = beyond(log_dir, &log, done.records)?.filter(|(n, _)| !kept(*n)) {
        return Err(CheckpointError::Lost {
            log: log_dir.display().to_string(),
            end: done.records,
            covers,
            checkpoint: path.display().to_string(),
        });
    }
    remove_leftovers(log_dir)?;
    for (offset, path) in found {
        let why = match read_header(&path) {
            Ok((header, _)) => match unfit(&header, build, &log)? {
                None if verify_all => load(&path, build, &log).err(),
                why => why,
            },
            Err(why) => Some(why),
        };
        match why {
            Some(why) => {
                std::fs::remove_file(&path).map_err(io(&path))?;
                done.removed.push((path, why));
            }
            None => fit.push((offset, path)),
        }
    }
    // Resume before the first missing checkpoint (one removed above, or an interval
    // changed), so that afterwards there is one at every multiple of `every`.
    let first_gap = (1..=done.records / every)
        .map(|k| k * every)
        .find(|m| fit.binary_search_by_key(m, |(offset, _)| *offset).is_err())
        .unwrap_or(u64::MAX);
    let mut candidates: Vec<_> = fit
        .iter()
        .filter(|(o, _)| *o < first_gap)
        .cloned()
        .collect();
    let mut resume = None;
    while let Some((_, path)) = candidates.pop() {
        match load(&path, build, &log) {
            Ok(checkpoint) => {
                resume = Some(checkpoint);
                break;
            }
            Err(why) => {
                std::fs::remove_file(&path).map_err(io(&path))?;
                done.removed.push((path, why));
            }
        }
    }
    let resumed_at = resume
        .as_ref()
        .map_or(0, |c: &Checkpoint| c.header.next_offset);
    // Those after the resume point are written again (the same bytes, unless damaged).
    done.kept = fit
        .iter()
        .filter(|(o, p)| *o <= resumed_at && !done.removed.iter().any(|(r, _)| r == p))
        .count();
    let (mut engine, mut writer) = match resume {
        Some(Checkpoint { header, engine, .. }) => {
            done.resumed_from = Some(header.next_offset);
            let writer = Writer::resuming(&header);
            (engine, writer)
        }
        None => (Engine::new(), Writer::default()),
    };
    writer.every = every;
    writer.build = build.to_string();
    writer.dir = log_dir.to_path_buf();
    let from = writer.next_offset;
    let mut source = Source::from_log_at(Box::new(log), from)?.with_progress(progress);
    writer.hashes = Some(EmbeddedLog::open_read_only(log_dir)?);
    crate::drive::drive(&mut source, &mut engine, &mut writer)?;
    done.written = writer.written;
    Ok(done)
}

/// Whether a checkpoint file is as long as its header says (its header line and both
/// parts): a file cut short or grown is not kept (a flipped bit inside a part is found only
/// when it is loaded, as `lhc log checkpoint --verify` does).
fn sized_as_said(path: &Path, header: &Header, reader: &mut BufReader<File>) -> bool {
    use std::io::Seek;
    let (Ok(at), Ok(meta)) = (reader.stream_position(), std::fs::metadata(path)) else {
        return false;
    };
    let [config, rows] = header.parts;
    at.checked_add(config.compressed)
        .and_then(|n| n.checked_add(rows.compressed))
        .is_some_and(|n| n == meta.len())
}

/// Writes checkpoints while a replay of an embedded log from its first record goes on (`lhc
/// replay LOG --checkpoint-every N`): the checkpoint after records `every`, `2 * every`, …
/// as the replay passes them. Those already there that fit this build and log, and are as
/// long as their header says, are kept; the others at those offsets are written anew.
/// Follow it with the replay's own observer ([`crate::run::replay_also`]).
pub struct Taker(Writer);

impl Taker {
    /// A taker for the embedded log in `log_dir`, refused when `every` is 0 or the log no
    /// longer starts at offset 0 (the replay is from its first record).
    pub fn new(log_dir: &Path, every: u64, build: &str) -> Result<Taker, CheckpointError> {
        let log = open_from_start(log_dir, every)?;
        // The folder is made, and shown writable, before the replay: a path that cannot
        // hold checkpoints is said at once, not at the first checkpoint.
        let dir = log_dir.join(DIR);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let probe = dir.join(".writable.tmp");
        File::create(&probe)
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(io(&probe))?;
        remove_leftovers(log_dir)?;
        // Those already there for this build and log are kept (as `refresh` keeps them): a
        // second replay rewrites only what is missing or unfit.
        let mut keep = std::collections::BTreeSet::new();
        for (offset, path) in list(log_dir)? {
            if offset.is_multiple_of(every)
                && read_header(&path).is_ok_and(|(header, mut reader)| {
                    sized_as_said(&path, &header, &mut reader)
                        && unfit(&header, build, &log).is_ok_and(|why| why.is_none())
                })
            {
                keep.insert(offset);
            }
        }
        Ok(Taker(Writer {
            every,
            build: build.to_string(),
            dir: log_dir.to_path_buf(),
            hashes: Some(log),
            keep,
            ..Writer::default()
        }))
    }

    /// The checkpoints written so far (their next offsets).
    pub fn written(&self) -> &[u64] {
        &self.0.written
    }

    /// The checkpoints found usable and kept as they were (their next offsets).
    pub fn kept(&self) -> usize {
        self.0.keep.len()
    }
}

impl Observer for Taker {
    type Error = CheckpointError;

    fn before(&mut self, step: Before<'_>) -> Result<crate::drive::Flow, CheckpointError> {
        self.0.before(step)
    }

    fn after(&mut self, step: After<'_>) -> Result<(), CheckpointError> {
        self.0.after(step)
    }

    fn during(&mut self, step: After<'_>) -> Result<(), CheckpointError> {
        self.0.during(step)
    }
}

/// The observer that writes checkpoints as the replay passes multiples of `every`.
#[derive(Default)]
struct Writer {
    every: u64,
    build: String,
    dir: PathBuf,
    /// A second reader of the log, for the hashes of the records a checkpoint ends with.
    hashes: Option<EmbeddedLog>,
    next_offset: u64,
    coverage: format::Coverage,
    written: Vec<u64>,
    /// Checkpoints already there and usable, not written again.
    keep: std::collections::BTreeSet<u64>,
    /// Keeps the last configuration part compressed (it rarely changes).
    encoder: format::Encoder,
}

impl Writer {
    fn resuming(header: &Header) -> Writer {
        Writer {
            next_offset: header.next_offset,
            coverage: format::Coverage::of(header),
            ..Writer::default()
        }
    }

    fn write(&mut self, engine: &Engine) -> Result<(), CheckpointError> {
        let log = self.hashes.as_ref().expect("set before the replay");
        // The log's span asked once, not once per record read.
        let holds = log.start_offset()?..log.end_offset()?;
        let hash = |offset| -> Result<String, CheckpointError> {
            record_hash(log, offset, holds.clone())?.ok_or_else(|| CheckpointError::Vanished {
                log: log.describe(),
                offset,
            })
        };
        let (first_record, last_record, samples) =
            format::record_hashes(self.next_offset, |offset| hash(offset).map(Some))?
                .expect("a missing record is an error above");
        let covered = format::Covered {
            build: self.build.clone(),
            next_offset: self.next_offset,
            coverage: self.coverage.clone(),
            first_record,
            last_record,
            samples,
        };
        let bytes = self
            .encoder
            .encode(engine, covered)
            .map_err(io(&self.dir))?;
        let dir = self.dir.join(DIR);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = dir.join(format!("{:020}.ckpt", self.next_offset));
        let temporary = dir.join(format!("{:020}.ckpt.tmp", self.next_offset));
        let mut file = File::create(&temporary).map_err(io(&temporary))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(io(&temporary))?;
        std::fs::rename(&temporary, &path).map_err(io(&path))?;
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&dir))?;
        self.written.push(self.next_offset);
        Ok(())
    }
}

impl Observer for Writer {
    type Error = CheckpointError;

    fn before(&mut self, step: Before<'_>) -> Result<crate::drive::Flow, CheckpointError> {
        if let Ok(record) = step.record {
            self.coverage.saw(record.ts());
        }
        Ok(crate::drive::Flow::Apply)
    }

    fn during(&mut self, _step: After<'_>) -> Result<(), CheckpointError> {
        // Timers' outputs: never a quarantine, and a checkpoint is taken between records.
        Ok(())
    }

    fn after(&mut self, step: After<'_>) -> Result<(), CheckpointError> {
        if step
            .outputs
            .iter()
            .any(|o| matches!(o, Output::Quarantine(_)))
        {
            self.coverage.quarantined += 1;
        }
        self.next_offset = step.offset + 1;
        if self.next_offset.is_multiple_of(self.every) && !self.keep.contains(&self.next_offset) {
            self.write(step.engine)?;
        }
        Ok(())
    }
}
