//! The embedded log: segment files in one directory (see docs/log-format.md).
//!
//! Layout: `{base:020}.log` segments (header + frames, see [`crate::frame`]), a sparse
//! `{base:020}.idx` beside each (pairs of offset and file position, one per
//! `index_interval_bytes` of frames), and a `LOCK` file.
//!
//! Invariants:
//! - Appends happen only under an exclusive lock on the log directory itself and on `LOCK`,
//!   so processes of one machine can share a log directory; before writing, an appender
//!   re-reads the tail another process may have extended. (The directory's lock is the one
//!   that holds when `LOCK` is deleted under a running writer: the next writer would lock a
//!   new `LOCK` file and both would write at the same offsets.)
//! - A torn tail (a crash while appending) is cut back to the last whole record and
//!   reported; damage with valid records after it is an error naming segment and offset,
//!   never skipped.
//! - Indexes are hints: every frame carries its offset and checksum, so a stale or missing
//!   index costs a scan, never a wrong record.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::frame::{
    encode_frame, frame_size, looks_torn, parse_frame, parse_segment_header, segment_header,
    valid_frame_follows, Parsed, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES, SEGMENT_MAGIC_V1,
};
use crate::{Log, LogEntry, LogError, LogReader, MAX_RECORD_BYTES};

/// When appended records are forced to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Before an append returns (group commit: one fsync per batch of concurrent appends).
    Always,
    /// At most this many milliseconds after an append; an append returns before it.
    IntervalMs(u64),
    /// Never explicitly; the OS writes back when it likes.
    Never,
}

impl std::str::FromStr for FsyncPolicy {
    type Err = String;

    /// Parses `always`, `never` or a period like `100ms`.
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            other => other
                .strip_suffix("ms")
                .and_then(|n| n.parse().ok())
                .map(FsyncPolicy::IntervalMs)
                .ok_or_else(|| {
                    format!("fsync policy {other:?}: expected always, never or a period like 100ms")
                }),
        }
    }
}

/// Settings of an embedded log.
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    /// When appends reach the disk.
    pub fsync: FsyncPolicy,
    /// A segment is closed once it would grow past this many bytes.
    pub segment_bytes: u64,
    /// One index entry per this many bytes of frames.
    pub index_interval_bytes: u64,
    /// Create the directory when it does not exist.
    pub create: bool,
    /// How long a batch waits for the log's lock held by another process (a stopped or
    /// stuck writer) before it fails, naming the lock, instead of hanging its caller.
    pub lock_wait: Duration,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            fsync: FsyncPolicy::Always,
            segment_bytes: 64 << 20,
            index_interval_bytes: 4096,
            create: true,
            lock_wait: Duration::from_secs(5),
        }
    }
}

/// What opening the log cut from a torn tail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailRecovery {
    /// Segment that was cut.
    pub segment: PathBuf,
    /// Offset the next record will get: the first offset whose record was incomplete.
    pub offset: u64,
    /// Bytes removed.
    pub bytes_dropped: u64,
    /// What was wrong with the first dropped frame.
    pub detail: String,
    /// Where the bytes removed are kept (beside the segment: [`cut_path`]).
    pub kept: PathBuf,
}

/// Where a writer keeps the bytes it cuts from `segment`'s torn tail at `offset`, before
/// cutting them: `SEGMENT.cut-OFFSET` in the log directory (`.N` added when a cut at the
/// same offset is kept already). A torn tail is what a crash leaves, but damage can look
/// like one (a flipped bit in the last record before bytes never written): nothing is
/// cut without its bytes kept.
pub fn cut_path(segment: &Path, offset: u64) -> PathBuf {
    let name = segment.file_name().map_or_else(
        || "segment".to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    segment.with_file_name(format!("{name}.cut-{offset}"))
}

/// Whether `name` is a file a writer keeps cut bytes in ([`cut_path`]).
pub fn is_cut_file(name: &str) -> bool {
    name.split_once(".log.cut-").is_some_and(|(base, rest)| {
        base.len() == 20
            && base.bytes().all(|b| b.is_ascii_digit())
            && rest
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Writes `bytes` to a new file at [`cut_path`] (or with `.N` added), synced with its
/// directory; the path.
fn keep_cut(segment: &Path, offset: u64, bytes: &[u8]) -> Result<PathBuf, LogError> {
    for path in cut_names(segment, offset) {
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut file) => {
                use std::io::Write;
                if let Err(e) = file.write_all(bytes).and_then(|()| file.sync_all()) {
                    // No half-kept file left to be taken for a cut: nothing was cut.
                    drop(file);
                    let _ = std::fs::remove_file(&path);
                    return Err(LogError::io(&path, e));
                }
                sync_parent(&path)?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(LogError::io(&path, e)),
        }
    }
    unreachable!("some name is free")
}

/// The names a file kept from `segment` at `offset` may take, in order: [`cut_path`],
/// then with `.1`, `.2`, … added (a cut at the same offset kept already).
fn cut_names(segment: &Path, offset: u64) -> impl Iterator<Item = PathBuf> {
    let base = cut_path(segment, offset);
    (0u32..).map(move |n| match n {
        0 => base.clone(),
        n => PathBuf::from(format!("{}.{n}", base.display())),
    })
}

/// Syncs the directory holding `path`, so a file made, renamed or removed there stays so.
fn sync_parent(path: &Path) -> Result<(), LogError> {
    match path.parent() {
        Some(dir) => File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| LogError::io(dir, e)),
        None => Ok(()),
    }
}

/// Gives `path` a file of its own when other names link to it (a `cp -al` or rsnapshot
/// backup): a writer about to change a file in place (the last segment, its index, the
/// commit mark, `LOST`) first copies it to a new file renamed over the path, so the other
/// names keep what they held. Appends, a torn tail's cut and the mark went into a
/// hard-linked backup's files too, and the backup's mark then named records it lacked as
/// lost (found by hostile testing). `true` when a copy was made. Must hold the lock.
fn unshare(path: &Path) -> Result<bool, LogError> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(LogError::io(path, e)),
    };
    if !meta.file_type().is_file() || meta.nlink() <= 1 || links_unreliable() {
        return Ok(false);
    }
    let name = path
        .file_name()
        .map_or_else(|| "file".to_string(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!("{name}.unshare"));
    let _ = std::fs::remove_file(&tmp);
    let copied = std::fs::copy(path, &tmp)
        .and_then(|_| File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&tmp);
        return Err(LogError::io(
            path,
            std::io::Error::new(
                e.kind(),
                format!(
                    "the file has other names (hard links: a `cp -al` backup?), and giving \
                     it a copy of its own before changing it failed ({e}); nothing was \
                     written: free space, or remove the other names"
                ),
            ),
        ));
    }
    sync_parent(path)?;
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.nlink() > 1) {
        // A file system that counts links its own way: copying again would not help
        // (and would copy the segment at every batch).
        LINKS_UNRELIABLE.store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            path = %path.display(),
            "this file system reports other names for a file just made: hard links are \
             not looked at any more by this process"
        );
        return Ok(false);
    }
    tracing::warn!(
        path = %path.display(),
        links = meta.nlink(),
        "the log's file had other names (hard links: a `cp -al` backup?); the writer gave \
         it a copy of its own before changing it, so the other names keep what they held"
    );
    Ok(true)
}

/// Set once a file system reported links for a file just copied (see [`unshare`]).
static LINKS_UNRELIABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether hard links are no longer looked at (see [`unshare`]).
fn links_unreliable() -> bool {
    LINKS_UNRELIABLE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Where a batch started: its segment's base and length, and its index's length.
struct BatchStart {
    start: (u64, u64),
    index_len: u64,
}

/// Moves segment `path` (its first record at `offset`) to a free [`cut_path`] name, never
/// over a file there; the new path.
fn set_aside(path: &Path, offset: u64) -> Result<PathBuf, LogError> {
    for to in cut_names(path, offset) {
        // A link then an unlink: `rename` would replace a file already there.
        match std::fs::hard_link(path, &to) {
            Ok(()) => {
                std::fs::remove_file(path).map_err(|e| LogError::io(path, e))?;
                sync_parent(path)?;
                return Ok(to);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(LogError::io(&to, e)),
        }
    }
    unreachable!("some name is free")
}

/// Takes `file`'s exclusive lock, waiting until `deadline` at most: a writer stopped while
/// it holds the lock (`kill -STOP`, a hung disk) must not hang every other writer, and a
/// node's launches with them, without a word. `refusal` is the error's text when the
/// deadline passes.
fn lock_before(file: &File, deadline: Instant, refusal: &str) -> std::io::Result<()> {
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() >= deadline => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    refusal.to_string(),
                ));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
    }
}

/// Opens the commit mark for a writer: a regular file, created if missing, never through a
/// symbolic link (a link would have the writer overwrite whatever it names) and never
/// waiting on a FIFO. `Ok(None)` when it cannot be opened for a reason that is no fault of
/// the log (a full disk, a read-only file system): the writer goes on without a mark.
fn open_mark(dir: &Path) -> Result<Option<File>, LogError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(COMMIT_FILE);
    let not_a_mark = |what: &str| {
        LogError::io(
            &path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{what}, not the 16-byte file of the log's commit mark: writers refuse \
                     the log until it is removed (the next writer then writes a new one)"
                ),
            ),
        )
    };
    match OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(file) => {
            let meta = file.metadata().map_err(|e| LogError::io(&path, e))?;
            if meta.is_file() {
                Ok(Some(file))
            } else {
                Err(not_a_mark(
                    "not a regular file (a FIFO, a device or a socket)",
                ))
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(not_a_mark("a symbolic link")),
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Err(not_a_mark("a directory")),
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Err(not_a_mark(
            "not a regular file (a FIFO, a device or a socket)",
        )),
        Err(e) => {
            tracing::warn!(
                path = %path.display(),
                "cannot open the log's commit mark ({e}): readers read records as they are \
                 written, and may see a batch that fails and is rolled back"
            );
            Ok(None)
        }
    }
}

/// Records the last segment's index or the commit mark named that the segment no longer held when a writer
/// came to append after them: found, kept in the log directory's `LOST` file (so `lhc log
/// check` names them for good, though the writer rebuilt the index that was the evidence)
/// and reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostRecords {
    /// The segment that ended short.
    pub segment: PathBuf,
    /// The first offset gone: the one the next record gets.
    pub first: u64,
    /// The last offset the index or the commit mark named (records after it may be gone too).
    pub last_listed: u64,
}

/// The file, in the log directory, that keeps every [`LostRecords`] writers found: one
/// line each, `SEGMENT FIRST LAST_LISTED`.
pub const LOST_FILE: &str = "LOST";

/// Whether a line of `dir`'s [`LOST_FILE`] already names records `first..=last` as lost.
pub fn lost_covers(dir: &Path, first: u64, last: u64) -> Result<bool, LogError> {
    Ok(lost_records(dir)?
        .iter()
        .flatten()
        .any(|k| k.first <= first && k.last_listed >= last))
}

/// Appends `lost` to `dir`'s [`LOST_FILE`], synced, unless a line there already names
/// the same loss (a writer that died before rebuilding the index finds it again). `true`
/// when written. For the writer holding the log's lock, before anything reuses the
/// offsets. (Offsets are reused after a loss, so a later loss may fall inside an earlier
/// one's range: only the same line counts as said; found in review.)
pub fn keep_lost(dir: &Path, lost: &LostRecords) -> Result<bool, LogError> {
    if lost_records(dir)?
        .iter()
        .any(|kept| kept.as_ref() == Ok(lost))
    {
        return Ok(false);
    }
    write_lost(dir, lost)
}

/// [`keep_lost`] for evidence that stays after a writer appended (a checkpoint past the
/// end): not said again while a line covers what it shows, which after appends is a
/// later part of the same loss.
pub fn keep_lost_unless_covered(dir: &Path, lost: &LostRecords) -> Result<bool, LogError> {
    if lost_covers(dir, lost.first, lost.last_listed)? {
        return Ok(false);
    }
    write_lost(dir, lost)
}

fn write_lost(dir: &Path, lost: &LostRecords) -> Result<bool, LogError> {
    let path = dir.join(LOST_FILE);
    let name = lost
        .segment
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Never through a symbolic link (the line went into the file it named, found by
    // hostile testing), nor into a FIFO: refused, naming the path, and the writer with it.
    // Nor into a backup's hard link to it.
    unshare(&path)?;
    let mut file = open_regular_nofollow(OpenOptions::new().create(true).append(true), &path)
        .map_err(|e| LogError::io(&path, e))?;
    use std::io::Write as _;
    writeln!(file, "{name} {} {}", lost.first, lost.last_listed)
        .and_then(|()| file.sync_all())
        .map_err(|e| LogError::io(&path, e))?;
    Ok(true)
}

/// The largest `LOST` file read: a line per loss a writer found, so far more than any
/// log's losses.
const MAX_LOST_BYTES: u64 = 16 << 20;

/// The records writers found lost in `dir`, from its [`LOST_FILE`] (none when it is
/// absent); a line that does not parse is named as it is.
pub fn lost_records(dir: &Path) -> Result<Vec<Result<LostRecords, String>>, LogError> {
    let path = dir.join(LOST_FILE);
    // A regular file only, never through a link, and no larger than a file of findings
    // grows (a line per loss): a FIFO there hung `log check` and `replay`, a link to
    // /dev/zero read until memory ran out (found by hostile testing). Refused, naming it.
    let file = match open_regular_nofollow(OpenOptions::new().read(true), &path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LogError::io(&path, e)),
    };
    let len = file.metadata().map_err(|e| LogError::io(&path, e))?.len();
    if len > MAX_LOST_BYTES {
        return Err(LogError::io(
            &path,
            std::io::Error::other(format!(
                "{len} bytes: not a file of records found lost (a line per loss, at most \
                 {MAX_LOST_BYTES} bytes); move it away"
            )),
        ));
    }
    let mut text = String::new();
    {
        use std::io::Read;
        (&file)
            .read_to_string(&mut text)
            .map_err(|e| LogError::io(&path, e))?;
    }
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            match parts.as_slice() {
                [segment, first, last] => match (first.parse(), last.parse()) {
                    // A range that ends before it starts is no finding a writer wrote.
                    (Ok(first), Ok(last_listed)) if first <= last_listed => Ok(LostRecords {
                        segment: dir.join(segment),
                        first,
                        last_listed,
                    }),
                    _ => Err(line.to_string()),
                },
                _ => Err(line.to_string()),
            }
        })
        .collect())
}

/// The file, in the log directory, that holds the commit mark: the offset after the last
/// record of the last batch a writer finished (rewritten after the batch's records are
/// written, and synced under `--fsync always`; the mark itself is not synced).
/// Readers stop there while a writer holds the lock, so a batch that fails and is rolled
/// back (a full disk, an I/O error) was never seen by anyone; records past the mark with
/// no writer left are whole records of a writer that died mid-batch, read as before and
/// adopted by the next writer. A mark past the records' end names records that are gone.
pub const COMMIT_FILE: &str = "COMMITTED";

/// Salt of the mark's check word, so that zeros or stray bytes never read as a mark.
const MARK_SALT: u64 = 0x4c48_435f_4d41_524b; // "LHC_MARK"

fn encode_mark(offset: u64) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&offset.to_le_bytes());
    bytes[8..].copy_from_slice(&(offset.rotate_left(17) ^ MARK_SALT).to_le_bytes());
    bytes
}

/// The commit mark of the log in `dir`, as evidence: `None` when there is none (a log
/// written before marks existed, a copy without it) or it does not check (a write torn by
/// a crash, stray bytes): such a mark proves nothing.
pub fn commit_mark(dir: &Path) -> Option<u64> {
    match read_mark(dir) {
        MarkRead::At(offset) => Some(offset),
        MarkRead::Absent | MarkRead::Unreadable => None,
    }
}

/// What a reader finds in [`COMMIT_FILE`].
enum MarkRead {
    /// No mark: no file, or fewer than 16 bytes (never written: a log written before
    /// marks, a copy without it, a writer that could not write it).
    Absent,
    /// A mark that checks.
    At(u64),
    /// 16 bytes that do not check (a rewrite torn by a crash, stray bytes): where the
    /// finished batches end is unknown until a writer writes the mark again.
    Unreadable,
}

fn read_mark(dir: &Path) -> MarkRead {
    use std::os::unix::fs::OpenOptionsExt;
    // Not through a symbolic link, not waiting on a FIFO: anything but a regular file is
    // no mark.
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(COMMIT_FILE))
    else {
        return MarkRead::Absent;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return MarkRead::Absent;
    }
    // A read racing the writer's 16-byte rewrite may see half of each: read again.
    for _ in 0..3 {
        let mut bytes = [0u8; 16];
        if file.read_exact_at(&mut bytes, 0).is_err() {
            return MarkRead::Absent;
        }
        let offset = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let check = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
        if check == offset.rotate_left(17) ^ MARK_SALT {
            return MarkRead::At(offset);
        }
    }
    MarkRead::Unreadable
}

/// The log's end when no writer is appending: [`probe_end`] read under a shared lock of
/// `LOCK`, so no batch can start or fail meanwhile; `None` while a writer holds the lock.
/// (A log without `LOCK` was never opened by a writer; a file system that cannot lock
/// gives no way to tell, and records are read as they come, as before commit marks.)
fn settled_end(dir: &Path) -> Result<Option<u64>, LogError> {
    let Ok(lock) = File::open(dir.join("LOCK")) else {
        return probe_end(dir).map(Some);
    };
    match lock.try_lock_shared() {
        Ok(()) => {
            let end = probe_end(dir);
            let _ = lock.unlock();
            end.map(Some)
        }
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(_)) => probe_end(dir).map(Some),
    }
}

/// Where the log in `dir` ends for readers: every whole record, less a batch a writer is
/// still appending (records past the [`COMMIT_FILE`] mark while a writer holds the lock).
pub fn visible_end(dir: &Path) -> Result<u64, LogError> {
    let end = probe_end(dir)?;
    match read_mark(dir) {
        MarkRead::Absent => Ok(end),
        MarkRead::At(mark) if mark >= end => Ok(end),
        MarkRead::At(_) | MarkRead::Unreadable => match settled_end(dir)? {
            Some(settled) => Ok(settled),
            // Read the mark again: the writer may have finished its batch meanwhile. (One
            // that does not check while a writer appends: a writer rewrites it before its
            // first batch ends, so this is a moment; the records' end meanwhile.)
            None => Ok(commit_mark(dir).map_or(end, |mark| mark.min(end))),
        },
    }
}

/// An embedded log directory, open for appending and reading.
pub struct EmbeddedLog {
    dir: PathBuf,
    requests: Option<mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    recovery: Option<TailRecovery>,
    lost: Option<LostRecords>,
}

struct Request {
    records: Vec<Vec<u8>>,
    /// What the log's end must be for the records to be written.
    guard: Guard,
    reply: mpsc::Sender<Result<Vec<u64>, LogError>>,
}

/// A request's condition on the log's end, checked under the lock with the write.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// None: appended wherever the log ends ([`Log::append`]).
    None,
    /// Exactly here, written alone ([`Log::append_at`]).
    At(u64),
    /// At or past here, in a shared batch ([`Log::append_past`]).
    Past(u64),
}

impl EmbeddedLog {
    /// Opens (or creates) the log in `dir`, cutting any torn tail back to the last whole record.
    pub fn open(dir: impl AsRef<Path>, options: EmbeddedOptions) -> Result<EmbeddedLog, LogError> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.exists() {
            if !options.create {
                return Err(LogError::io(
                    &dir,
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no such log directory"),
                ));
            }
            std::fs::create_dir_all(&dir).map_err(|e| LogError::io(&dir, e))?;
        }
        let mut writer = Writer::open(&dir, options)?;
        let recovery = writer.recovery.take();
        let lost = writer.lost.take();
        if let Some(r) = &recovery {
            tracing::warn!(
                segment = %r.segment.display(), offset = r.offset, bytes_dropped = r.bytes_dropped,
                kept = %r.kept.display(),
                "cut a torn tail from the log: {}", r.detail
            );
        }
        let (requests, inbox) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("lhc-log-writer".into())
            .spawn(move || writer.run(inbox))
            .map_err(|e| LogError::io(&dir, e))?;
        Ok(EmbeddedLog {
            dir,
            requests: Some(requests),
            writer: Some(handle),
            recovery,
            lost,
        })
    }

    /// Opens an existing log for reading only: no lock, no writer, no recovery. Appends fail.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<EmbeddedLog, LogError> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(LogError::io(
                &dir,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no log directory here"),
            ));
        }
        // A directory without a segment is not a log (even an empty log has its first
        // segment): reading it as "no records" would answer "nothing happened" wrongly.
        if list_segments(&dir)?.is_empty() {
            if let Some(orphans) = orphan_indexes(&dir) {
                return Err(segments_deleted(&dir, orphans));
            }
            return Err(LogError::NotALog {
                path: dir,
                detail: "no segment file (NNNNNNNNNNNNNNNNNNNN.log) in this directory; \
                         give a log directory made by `lhc log import` or a node"
                    .into(),
            });
        }
        Ok(EmbeddedLog {
            dir,
            requests: None,
            writer: None,
            recovery: None,
            lost: None,
        })
    }

    /// What opening cut from a torn tail, if anything.
    pub fn recovery(&self) -> Option<&TailRecovery> {
        self.recovery.as_ref()
    }

    /// Records opening found gone (the last segment ends before a record its index
    /// lists), if any: they are kept in the `LOST` file too.
    pub fn lost(&self) -> Option<&LostRecords> {
        self.lost.as_ref()
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends owned records; see [`Log::append`].
    pub fn append_owned(&self, records: Vec<Vec<u8>>) -> Result<Vec<u64>, LogError> {
        self.request(records, Guard::None)
    }

    /// Sends `records` to the writer thread and waits for its answer.
    fn request(&self, records: Vec<Vec<u8>>, guard: Guard) -> Result<Vec<u64>, LogError> {
        if let Some(big) = records.iter().find(|r| r.len() > MAX_RECORD_BYTES) {
            return Err(LogError::RecordTooLarge {
                size: big.len(),
                max: MAX_RECORD_BYTES,
            });
        }
        let (reply, answer) = mpsc::channel();
        let Some(requests) = self.requests.as_ref() else {
            return Err(LogError::Closed("the log was opened read-only".into()));
        };
        requests
            .send(Request {
                records,
                guard,
                reply,
            })
            .map_err(|_| LogError::Closed("writer thread exited".into()))?;
        answer
            .recv()
            .map_err(|_| LogError::Closed("writer thread exited".into()))?
    }
}

impl Drop for EmbeddedLog {
    fn drop(&mut self) {
        // Closing the channel lets the writer flush and exit.
        self.requests.take();
        if let Some(handle) = self.writer.take() {
            let _ = handle.join();
        }
    }
}

impl Log for EmbeddedLog {
    fn append(&self, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        self.append_owned(records.iter().map(|r| r.to_vec()).collect())
    }

    fn append_at(&self, expected: u64, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        self.request(
            records.iter().map(|r| r.to_vec()).collect(),
            Guard::At(expected),
        )
    }

    fn append_past(&self, floor: u64, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        self.request(
            records.iter().map(|r| r.to_vec()).collect(),
            Guard::Past(floor),
        )
    }

    fn start_offset(&self) -> Result<u64, LogError> {
        Ok(list_segments(&self.dir)?.first().copied().unwrap_or(0))
    }

    fn end_offset(&self) -> Result<u64, LogError> {
        visible_end(&self.dir)
    }

    fn written_end(&self) -> Result<u64, LogError> {
        // Below the readers' end only while a writer that took over from one that died
        // mid-batch has not yet adopted the whole records it left past the mark, which
        // readers may have read: never a loss.
        probe_end(&self.dir)
    }

    fn reader(&self, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        Ok(Box::new(EmbeddedReader::new(&self.dir, from)?))
    }

    fn describe(&self) -> String {
        format!("embedded log {}", self.dir.display())
    }

    fn local_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }
}

/// The file of the segment whose first offset is `base` in log directory `dir`.
pub fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}

/// With no segment left in `dir`: the index files that remain and name records (how many,
/// and the last offset they list). A writer creates a segment before its index and removes
/// the index first, so such files mean the segments were deleted, not a log never written.
fn orphan_indexes(dir: &Path) -> Option<(usize, u64)> {
    let mut found = 0;
    let mut last = None;
    for base in index_bases(dir) {
        // Entries that agree with the name: a junk file named like an index proves
        // nothing (it kept a new log from being made; found in review).
        if let Some(index) = read_index(dir, base, 0, None).filter(|i| index_agrees(i, base)) {
            found += 1;
            last = last.max(Some(index.last.0));
        }
    }
    last.map(|last| (found, last))
}

/// The refusal of a log whose first segment holds no record while its index or the commit
/// mark names some: every record is gone, and appending would start the log again at
/// offset 0 over them, as a directory whose segments were deleted would (found by hostile
/// testing).
fn first_segment_emptied(dir: &Path, listed: u64) -> LogError {
    LogError::NotALog {
        path: dir.to_path_buf(),
        detail: format!(
            "its first segment holds no record, but its index or the log's commit mark names \
             records up to offset {listed} at least: every record is gone (the segment was \
             emptied or cut). Restore it from a copy; nothing is appended here (to start a \
             new log, give another directory)"
        ),
    }
}

/// The refusal of a directory whose segments were deleted while their indexes remain.
fn segments_deleted(dir: &Path, (count, last): (usize, u64)) -> LogError {
    LogError::NotALog {
        path: dir.to_path_buf(),
        detail: format!(
            "no segment file is left, but {count} index file(s) remain, listing records up to \
             offset {last} at least: the log's segments were deleted. Restore them from a copy; nothing \
             is appended here (to start a new log, give another directory)"
        ),
    }
}

fn index_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.idx"))
}

/// Base offsets of the segments in `dir`, ascending.
pub fn list_segments(dir: &Path) -> Result<Vec<u64>, LogError> {
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| LogError::io(dir, e))? {
        let entry = entry.map_err(|e| LogError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(".log") {
            if stem.len() == 20 {
                if let Ok(base) = stem.parse::<u64>() {
                    bases.push(base);
                }
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// The last offset the index of segment `base` lists past the segment's whole records
/// (`end`, the offset the next record gets, at byte `whole_end`): records written and gone.
/// An entry past `end` whose position is inside the segment is a damaged index (a flipped
/// bit), not a loss: the index has no checksum.
fn listed_past(dir: &Path, base: u64, end: u64, whole_end: u64) -> Option<u64> {
    read_index(dir, base, 0, None)
        .filter(|index| index_agrees(index, base))
        .map(|index| index.last)
        .filter(|&(offset, position)| offset >= end && position >= whole_end)
        .map(|(offset, _)| offset)
}

/// The last offset that indexes at or after `end` (where the log's records end) show was
/// written, when the segment at `end` is missing or shorter than its header: records of
/// segments that were deleted or emptied. An index at `end` counts by what it lists; one
/// further on (its segment and those between deleted too) also by its name, the base of a
/// segment that existed, when its entries agree with that name (a file of junk named like
/// an index proves nothing). (Only the index at `end` was looked at: a later one left
/// behind was ignored, and an append then reused the offsets silently; found by hostile
/// testing.)
fn orphan_listing(dir: &Path, end: u64) -> Option<u64> {
    let whole =
        std::fs::metadata(segment_path(dir, end)).is_ok_and(|m| m.len() >= SEGMENT_HEADER_BYTES);
    if whole {
        return None;
    }
    let mut last = None;
    for base in index_bases(dir).into_iter().filter(|&b| b >= end) {
        let Some(index) = read_index(dir, base, 0, None).filter(|i| index_agrees(i, base)) else {
            continue;
        };
        if base == end {
            last = last.max(Some(index.last.0).filter(|&o| o >= end));
        } else if base > end {
            last = last.max(Some(base - 1)).max(Some(index.last.0));
        }
    }
    last
}

/// Whether the entries of the index named for segment `base` agree with that name and a
/// segment's header: evidence of records, where a junk file named like an index is not.
fn index_agrees(index: &IndexRead, base: u64) -> bool {
    let (offset, position) = index.first;
    offset >= base
        && position >= SEGMENT_HEADER_BYTES
        && at_least_frames((base, SEGMENT_HEADER_BYTES), index.first)
}

/// Whether index entry `to` lies far enough past `from` for the frames between them (one
/// per offset, each at least a frame header): what every index a writer made holds, and
/// what junk read as an index (a file's text, a link's target) seldom does; it named
/// records up to offset 6e18 as lost (found by hostile testing).
fn at_least_frames(from: (u64, u64), to: (u64, u64)) -> bool {
    to.0.checked_sub(from.0)
        .and_then(|frames| frames.checked_mul(FRAME_HEADER_BYTES as u64))
        .zip(to.1.checked_sub(from.1))
        .is_some_and(|(least, gap)| gap >= least)
}

/// The bases of the index files in `dir` (named like `{base:020}.idx`).
fn index_bases(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()?
                .strip_suffix(".idx")
                .filter(|stem| stem.len() == 20)?
                .parse::<u64>()
                .ok()
        })
        .collect()
}

/// What an index file holds, read as a stream: its first and last entries, and the last
/// entry at or before the offset asked for. Only from an index whose entries strictly
/// increase; one that does not is damaged and ignored (scanning is correct without it).
#[derive(Clone, Copy, Debug)]
struct IndexRead {
    first: (u64, u64),
    last: (u64, u64),
    /// The last entry whose offset is at or before the one asked for.
    hint: Option<(u64, u64)>,
}

/// Reads the index of segment `base` (see [`IndexRead`]) in chunks, never whole: a sparse
/// file of 2 GB named like an index took every reader's memory and 19 s of `log stats`
/// (found by hostile testing); junk stops the read at its first out-of-order entry. With
/// `segment`, an index larger than that segment could have (one entry per frame at most)
/// is ignored unread: the index is only a hint there. Never through a symbolic link (the
/// log makes none): a link's target read as an index wrote false losses to `LOST`.
fn read_index(
    dir: &Path,
    base: u64,
    at_or_before: u64,
    segment: Option<&File>,
) -> Option<IndexRead> {
    use std::io::Read;
    let mut file =
        open_regular_nofollow(OpenOptions::new().read(true), &index_path(dir, base)).ok()?;
    if let Some(segment) = segment {
        // The index's length first: frames are written before their entries, so a segment
        // that grows meanwhile only loosens the bound.
        let len = file.metadata().ok()?.len();
        let segment_len = segment.metadata().ok()?.len();
        let frames = segment_len.saturating_sub(SEGMENT_HEADER_BYTES) / FRAME_HEADER_BYTES as u64;
        if len > 16 * (frames + 1) {
            return None;
        }
    }
    let mut chunk = vec![0u8; 64 << 10];
    let mut filled = 0;
    let mut read: Option<IndexRead> = None;
    loop {
        let n = match file.read(&mut chunk[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        };
        if n == 0 {
            return read;
        }
        filled += n;
        let whole = filled - filled % 16;
        for c in chunk[..whole].chunks_exact(16) {
            let entry = (
                u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(c[8..].try_into().expect("8 bytes")),
            );
            let at = (entry.0 <= at_or_before).then_some(entry);
            match &mut read {
                None => {
                    read = Some(IndexRead {
                        first: entry,
                        last: entry,
                        hint: at,
                    })
                }
                Some(r) if entry.0 > r.last.0 && at_least_frames(r.last, entry) => {
                    r.last = entry;
                    r.hint = at.or(r.hint);
                }
                Some(_) => return None,
            }
        }
        chunk.copy_within(whole..filled, 0);
        filled -= whole;
    }
}

/// The best place to start scanning segment `base` (open as `segment`) for `offset`:
/// (offset, position) of the last index entry at or before it, or the segment's first frame.
/// Only an entry that lands on the header of the frame it names (its checksum holds and it
/// carries that offset) is used: a flipped bit in an index's last entry sent readers past
/// the segment's end, and they read no further records, silently, or called the log
/// corrupt (found by hostile testing). One read of a frame header.
fn seek_hint(dir: &Path, base: u64, offset: u64, segment: &File) -> (u64, u64) {
    read_index(dir, base, offset, Some(segment))
        .and_then(|index| index.hint)
        .filter(|&(offset, position)| {
            let mut header = [0u8; FRAME_HEADER_BYTES];
            segment.read_exact_at(&mut header, position).is_ok()
                && header[8..16] == offset.to_le_bytes()
                && !matches!(parse_frame(&header, offset), Parsed::Bad(_))
        })
        .unwrap_or((base, SEGMENT_HEADER_BYTES))
}

/// How a scan of a segment ended.
enum ScanEnd {
    /// Exactly at the end of the file.
    Clean,
    /// At a torn or damaged tail starting at `position` (nothing valid follows).
    Torn { position: u64, detail: String },
    /// At damage with valid frames after it.
    Corrupt { detail: String },
}

/// Walks the frames of one segment from `(offset, position)`.
struct Scan {
    next_offset: u64,
    end: ScanEnd,
}

/// Scans a segment file from a known frame boundary to its end, calling `on_frame` for each
/// valid frame with (offset, position, size).
fn scan_segment(
    file: &File,
    path: &Path,
    start_offset: u64,
    start_position: u64,
    mut on_frame: impl FnMut(u64, u64, usize),
) -> Result<Scan, LogError> {
    let len = file.metadata().map_err(|e| LogError::io(path, e))?.len();
    let mut buf = vec![0u8; 1 << 20];
    let mut filled = 0usize;
    let mut buf_position = start_position;
    let mut offset = start_offset;
    let mut position = start_position;
    loop {
        let consumed = (position - buf_position) as usize;
        let parsed = parse_frame(&buf[consumed..filled], offset);
        match parsed {
            Parsed::Frame { size, .. } => {
                on_frame(offset, position, size);
                offset += 1;
                position += size as u64;
            }
            Parsed::Incomplete { needed } => {
                let file_left = len.saturating_sub(buf_position + filled as u64);
                if file_left == 0 {
                    let end = if position == len {
                        ScanEnd::Clean
                    } else {
                        ScanEnd::Torn {
                            position,
                            detail: format!(
                                "incomplete frame of {} bytes at the end",
                                len - position
                            ),
                        }
                    };
                    return Ok(Scan {
                        next_offset: offset,
                        end,
                    });
                }
                // Slide the unread part to the front and refill.
                buf.copy_within(consumed..filled, 0);
                filled -= consumed;
                buf_position = position;
                let want = needed.unwrap_or(0).max(1 << 20);
                if buf.len() < want {
                    buf.resize(want, 0);
                }
                let n = read_at_most(file, path, &mut buf[filled..], buf_position + filled as u64)?;
                filled += n;
            }
            Parsed::Bad(detail) => {
                // Torn only when nothing valid follows and the bytes are what a crash while
                // appending leaves; a flipped bit is corruption, never cut (R-LOG-2).
                let rest = read_range(file, path, position, len)?;
                let end =
                    if !valid_frame_follows(&rest, offset.saturating_sub(1)) && looks_torn(&rest) {
                        ScanEnd::Torn { position, detail }
                    } else {
                        ScanEnd::Corrupt { detail }
                    };
                return Ok(Scan {
                    next_offset: offset,
                    end,
                });
            }
        }
    }
}

fn read_at_most(file: &File, path: &Path, buf: &mut [u8], at: u64) -> Result<usize, LogError> {
    let mut total = 0;
    while total < buf.len() {
        match file.read_at(&mut buf[total..], at + total as u64) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LogError::io(path, e)),
        }
    }
    Ok(total)
}

fn read_range(file: &File, path: &Path, from: u64, to: u64) -> Result<Vec<u8>, LogError> {
    let mut buf = vec![0u8; to.saturating_sub(from) as usize];
    let n = read_at_most(file, path, &mut buf, from)?;
    buf.truncate(n);
    Ok(buf)
}

/// Opens a segment or an index for reading, refusing what is not a regular file: a FIFO
/// put in its place would block the reader forever on `open` (found by hostile testing:
/// a node's probes and its stop hung on one); opened without blocking, then checked.
fn open_regular(path: &Path) -> std::io::Result<File> {
    open_regular_with(OpenOptions::new().read(true), path)
}

/// [`open_regular`] with `options` (a writer's: a FIFO opened for writing blocks until a
/// reader comes, and held a writer, the lock with it, for good).
fn open_regular_with(options: &mut OpenOptions, path: &Path) -> std::io::Result<File> {
    open_regular_flags(options, path, 0)
}

/// [`open_regular_with`] for the files a writer makes its own (an index, a new segment,
/// `LOST`), and their reading as evidence: never through a symbolic link, which had a
/// writer truncate and write the file the link named (found by hostile testing); a link or
/// a directory there is refused like a FIFO.
fn open_regular_nofollow(options: &mut OpenOptions, path: &Path) -> std::io::Result<File> {
    open_regular_flags(options, path, libc::O_NOFOLLOW)
}

fn open_regular_flags(
    options: &mut OpenOptions,
    path: &Path,
    flags: libc::c_int,
) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || {
        std::io::Error::other(
            "not a regular file (a FIFO, a device, a directory or a symbolic link where the \
             log keeps a segment, an index or its lock): move it away",
        )
    };
    let file = match options.custom_flags(libc::O_NONBLOCK | flags).open(path) {
        Ok(file) => file,
        // A FIFO no one reads, opened for writing without blocking; a directory opened for
        // writing; a symbolic link where `O_NOFOLLOW` refuses one.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENXIO | libc::EISDIR | libc::ELOOP)
            ) =>
        {
            return Err(not_regular())
        }
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

fn open_segment(path: &Path, base: u64) -> Result<File, LogError> {
    let file = open_regular(path).map_err(|e| LogError::io(path, e))?;
    check_header(&file, path, base)?;
    Ok(file)
}

/// Checks a segment's header against its file name.
///
/// A bad header in a later segment of a log whose first segment is an lhc segment of
/// this format is damage: `Corrupt` at the segment's base offset, so readers read every
/// record before it and then name the offset, and a writer refuses with it (it said "not
/// an lhc log segment" and named no offset, and a damaged last segment hid every record
/// of the log from readers). Otherwise the directory is not an lhc log of this format
/// (`NotALog`): a bad first segment, a directory of other files named like segments (a
/// Kafka partition's), or an old-format (LHCSEG01) log.
fn check_header(file: &File, path: &Path, base: u64) -> Result<(), LogError> {
    let header = read_range(file, path, 0, SEGMENT_HEADER_BYTES)?;
    let detail = match parse_segment_header(&header) {
        Ok(b) if b == base => return Ok(()),
        Ok(b) => format!("header says base offset {b}, file name says {base}"),
        Err(detail) => detail,
    };
    let damaged_in_a_log = base > 0
        && !header.starts_with(SEGMENT_MAGIC_V1)
        && path.parent().is_some_and(first_segment_is_lhc);
    if !damaged_in_a_log {
        return Err(LogError::NotALog {
            path: path.to_path_buf(),
            detail,
        });
    }
    Err(LogError::Corrupt {
        segment: path.to_path_buf(),
        offset: base,
        detail: format!("the segment's header is damaged ({detail})"),
    })
}

/// Whether `dir`'s first segment (base 0) has a header of this format.
fn first_segment_is_lhc(dir: &Path) -> bool {
    let path = segment_path(dir, 0);
    open_regular(&path)
        .ok()
        .and_then(|file| read_range(&file, &path, 0, SEGMENT_HEADER_BYTES).ok())
        .is_some_and(|header| parse_segment_header(&header) == Ok(0))
}

/// Whether `base` is the last segment of `bases`, shorter than a header, and named where
/// the segment before it ends: a writer creating it (at a roll, or a crash while it did)
/// has not written its header yet, so it holds no record. A writer opening the log
/// recreates it; readers see the end there. (Named anywhere else it is a stray file, and
/// taking it for the end would hide the records after its name.)
fn being_created(dir: &Path, bases: &[u64], base: u64) -> bool {
    // A regular file only: a FIFO (or a device) reads as empty, and `lhc log check` said
    // "framing ok" before the readers refused it.
    let short = bases.last() == Some(&base)
        && std::fs::metadata(segment_path(dir, base))
            .is_ok_and(|m| m.is_file() && m.len() < SEGMENT_HEADER_BYTES);
    short
        && match bases.len() {
            1 => base == 0,
            n => closed_segment_ends_at(dir, bases[n - 2], base).is_ok(),
        }
}

/// The offset the next append will get, read without the lock (a racing append may add more).
pub fn probe_end(dir: &Path) -> Result<u64, LogError> {
    let bases = list_segments(dir)?;
    let Some(&base) = bases.last() else {
        return Ok(0);
    };
    let path = segment_path(dir, base);
    let file = match open_regular(&path) {
        Ok(f) => f,
        Err(e) => return Err(LogError::io(&path, e)),
    };
    let len = file.metadata().map_err(|e| LogError::io(&path, e))?.len();
    if len < SEGMENT_HEADER_BYTES {
        return Ok(base); // a segment being created
    }
    check_header(&file, &path, base)?;
    let (offset, position) = seek_hint(dir, base, u64::MAX, &file);
    let mut scan = scan_segment(&file, &path, offset, position, |_, _, _| {})?;
    if !matches!(scan.end, ScanEnd::Clean) && position != SEGMENT_HEADER_BYTES {
        // The index is only a hint; judge damage from the segment's start.
        scan = scan_segment(&file, &path, base, SEGMENT_HEADER_BYTES, |_, _, _| {})?;
    }
    match scan.end {
        ScanEnd::Corrupt { detail } => Err(LogError::Corrupt {
            segment: path,
            offset: scan.next_offset,
            detail,
        }),
        _ => Ok(scan.next_offset),
    }
}

/// The embedded log starts at offset 0 and never deletes: a first segment based elsewhere
/// means the segments before it are gone.
fn starts_at_zero(dir: &Path, first: u64) -> Result<(), LogError> {
    if first == 0 {
        return Ok(());
    }
    Err(LogError::Corrupt {
        segment: segment_path(dir, first),
        offset: 0,
        detail: format!("the log starts at offset {first}: the segments before it are missing"),
    })
}

/// Checks what a writer relies on before its first append: the log starts at offset 0 and
/// every closed segment ends whole exactly where the next one begins (a truncated,
/// missing or stray segment would make appended records unreachable, or give two records
/// one offset). Each closed segment is scanned from its last index entry (a few KiB), or
/// whole when that does not land; damage in the middle of a closed segment is found by
/// readers and `log check` when they reach it.
fn check_closed_segments(dir: &Path, bases: &[u64]) -> Result<(), LogError> {
    starts_at_zero(dir, bases.first().copied().unwrap_or(0))?;
    for pair in bases.windows(2) {
        closed_segment_ends_at(dir, pair[0], pair[1])?;
    }
    Ok(())
}

/// Where segment `base` ends: the offset after its last whole record (a torn tail is an
/// end too); an error when it cannot be read or is damaged.
fn segment_end(dir: &Path, base: u64) -> Result<u64, LogError> {
    let path = segment_path(dir, base);
    let file = open_segment(&path, base)?;
    let scan = scan_segment(&file, &path, base, SEGMENT_HEADER_BYTES, |_, _, _| {})?;
    match scan.end {
        ScanEnd::Clean | ScanEnd::Torn { .. } => Ok(scan.next_offset),
        ScanEnd::Corrupt { detail } => Err(LogError::Corrupt {
            segment: path,
            offset: scan.next_offset,
            detail,
        }),
    }
}

/// Checks that the closed segment `base` ends whole exactly where the segment `next`
/// begins (see [`check_closed_segments`]).
fn closed_segment_ends_at(dir: &Path, base: u64, next: u64) -> Result<(), LogError> {
    let path = segment_path(dir, base);
    let file = open_segment(&path, base)?;
    let len = file.metadata().map_err(|e| LogError::io(&path, e))?.len();
    let (offset, position) = seek_hint(dir, base, u64::MAX, &file);
    let mut scan = if position <= len {
        scan_segment(&file, &path, offset, position, |_, _, _| {})?
    } else {
        scan_segment(&file, &path, base, SEGMENT_HEADER_BYTES, |_, _, _| {})?
    };
    let fine = |s: &Scan| matches!(s.end, ScanEnd::Clean) && s.next_offset == next;
    if !fine(&scan) && position != SEGMENT_HEADER_BYTES {
        // The index is only a hint: judge from the segment's start.
        scan = scan_segment(&file, &path, base, SEGMENT_HEADER_BYTES, |_, _, _| {})?;
    }
    if fine(&scan) {
        return Ok(());
    }
    let detail = match scan.end {
        ScanEnd::Clean => format!(
            "the segment ends at offset {} but the next one starts at {next}",
            scan.next_offset
        ),
        ScanEnd::Torn { detail, .. } | ScanEnd::Corrupt { detail } => detail,
    };
    Err(LogError::Corrupt {
        segment: path,
        offset: scan.next_offset,
        detail,
    })
}

/// The appending side: owned by one thread, serialized across processes by the lock file.
struct Writer {
    dir: PathBuf,
    options: EmbeddedOptions,
    lock: File,
    /// The log directory, locked with `lock` (a deleted `LOCK` cannot be locked anew) where
    /// its file system locks directories, and compared with the path before each batch.
    dir_lock: File,
    /// Whether `dir_lock` takes a lock: not on file systems that refuse to lock a
    /// directory (NFS turns `flock` into a POSIX lock, which needs a file open for
    /// writing), where `LOCK` alone serializes writers, as before.
    dir_locks: bool,
    /// The log's [`COMMIT_FILE`], rewritten after each batch; `None` once it could not be
    /// created or written (a full disk before its first write, a file system that
    /// allocates on every rewrite): the file is removed and readers read as before marks,
    /// rather than a batch failing over its mark.
    mark: Option<File>,
    /// The last segment, open for writing.
    active: Option<ActiveSegment>,
    recovery: Option<TailRecovery>,
    lost: Option<LostRecords>,
    /// The offsets of a loss found since this writer's last batch: an index that names
    /// part of it, met again when the next batch creates a segment there, is the same
    /// loss, not a line of its own (the commit mark can name a loss further than the
    /// index does).
    unwritten_loss: Option<(u64, u64)>,
    dirty_since: Option<Instant>,
    /// When a batch waited `lock_wait` for the lock in vain: for `lock_wait` after that,
    /// batches wait only [`STUCK_LOCK_WAIT`] (until one gets the lock), so batches queued
    /// meanwhile (a node's launches) fail within moments instead of each waiting its own
    /// `lock_wait`; then a batch waits in full again.
    lock_stuck: Option<Instant>,
    /// The segments the batch being written rolled to: what a roll back removes, and
    /// nothing else (a file planted where the next segment goes, which refused the roll,
    /// was removed with them).
    rolled: Vec<u64>,
    /// Every segment the batch being written wrote to (base, and device and inode of the
    /// file written): each must still be the file its path names when the batch ends (a
    /// segment rolled from and replaced meanwhile lost the batch's records in it).
    written: Vec<(u64, (u64, u64))>,
}

/// How long a batch waits for a lock the previous batch already waited for in vain.
const STUCK_LOCK_WAIT: Duration = Duration::from_millis(20);

struct ActiveSegment {
    base: u64,
    file: File,
    index: File,
    /// Bytes of whole frames (the file length after recovery).
    len: u64,
    next_offset: u64,
    /// Position of the last index entry.
    last_indexed: u64,
}

impl ActiveSegment {
    /// Whether the paths still name the segment and index this writer holds: a segment
    /// replaced under it (a copy renamed over it, a restore) took the writes of a running
    /// node into a file no reader reads any more, while its launches waited for a fold
    /// that never saw them (found by hostile testing); its index likewise. A `stat` of each
    /// path, following links as readers do (a last segment that is a link to a file
    /// elsewhere is that file, not a replacement at every batch).
    fn named_by_paths(&self, dir: &Path) -> bool {
        self.segment_named(dir) && named_file(&index_path(dir, self.base), &self.index)
    }

    /// [`ActiveSegment::named_by_paths`] for the segment alone: where the records go.
    fn segment_named(&self, dir: &Path) -> bool {
        named_file(&segment_path(dir, self.base), &self.file)
    }
}

/// Whether `path` names `file` (following links).
fn named_file(path: &Path, file: &File) -> bool {
    let held = file_id(file);
    held.is_some() && std::fs::metadata(path).ok().map(metadata_id) == held
}

/// The device and inode of an open file.
fn file_id(file: &File) -> Option<(u64, u64)> {
    file.metadata().ok().map(metadata_id)
}

/// The device and inode `metadata` describes.
fn metadata_id(metadata: std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (metadata.dev(), metadata.ino())
}

impl Writer {
    fn open(dir: &Path, options: EmbeddedOptions) -> Result<Writer, LogError> {
        let lock_path = dir.join("LOCK");
        let lock = open_regular_with(
            OpenOptions::new().create(true).truncate(false).write(true),
            &lock_path,
        )
        .map_err(|e| LogError::io(&lock_path, e))?;
        let dir_lock = File::open(dir).map_err(|e| LogError::io(dir, e))?;
        let dir_locks = match dir_lock.try_lock() {
            Ok(()) => {
                dir_lock.unlock().map_err(|e| LogError::io(dir, e))?;
                true
            }
            Err(std::fs::TryLockError::WouldBlock) => true,
            // EBADF, ENOLCK, EOPNOTSUPP (Linux numbers): this file system cannot lock a
            // directory opened for reading.
            Err(std::fs::TryLockError::Error(e))
                if matches!(e.raw_os_error(), Some(9 | 37 | 95)) =>
            {
                tracing::warn!(
                    dir = %dir.display(),
                    "this file system cannot lock the log directory ({e}); writers are \
                     serialized by LOCK alone, so do not delete LOCK while one runs"
                );
                false
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(LogError::io(dir, e)),
        };
        let mark = open_mark(dir)?;
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            options,
            lock,
            dir_lock,
            dir_locks,
            mark,
            active: None,
            recovery: None,
            lost: None,
            unwritten_loss: None,
            dirty_since: None,
            lock_stuck: None,
            rolled: Vec::new(),
            written: Vec::new(),
        };
        writer.with_lock(|w| w.refresh())?;
        Ok(writer)
    }

    fn with_lock<T>(
        &mut self,
        f: impl FnOnce(&mut Writer) -> Result<T, LogError>,
    ) -> Result<T, LogError> {
        let full = self.options.lock_wait;
        let stuck = self.lock_stuck.filter(|since| since.elapsed() < full);
        let (wait, refusal) = match stuck {
            Some(_) => (
                full.min(STUCK_LOCK_WAIT),
                format!(
                    "another process still holds the log's lock, which a batch before this \
                     one waited {} for in vain (a stopped or stuck writer: `lhc log \
                     import`, `log append` or a node); nothing was written",
                    humantime::format_duration(full)
                ),
            ),
            None => (
                full,
                format!(
                    "another process has held the log's lock for more than {} (a stopped \
                     or stuck writer: `lhc log import`, `log append` or a node); nothing \
                     was written",
                    humantime::format_duration(full)
                ),
            ),
        };
        let deadline = Instant::now() + wait;
        if self.dir_locks {
            if let Err(e) = lock_before(&self.dir_lock, deadline, &refusal) {
                if e.kind() == std::io::ErrorKind::WouldBlock && stuck.is_none() {
                    self.lock_stuck = Some(Instant::now());
                }
                return Err(LogError::io(&self.dir, e));
            }
        }
        // A `LOCK` with other names (a `cp -al` backup's) is also taken by writers of
        // the other copy: said, so the holder is found.
        let refusal = match self.lock.metadata() {
            Ok(m) if std::os::unix::fs::MetadataExt::nlink(&m) > 1 => format!(
                "{refusal}. This LOCK has {} names (hard links: a `cp -al` backup?), so a \
                 writer of another copy takes it too: once no writer of that copy runs, \
                 remove that copy's LOCK (a writer there makes one of its own)",
                std::os::unix::fs::MetadataExt::nlink(&m)
            ),
            _ => refusal,
        };
        if let Err(e) = lock_before(&self.lock, deadline, &refusal) {
            // Only a full wait starts the short ones, for `lock_wait`: then a batch waits
            // in full again, so a lock taken and freed by another writer over and over
            // (a long import) is shared, not refused (found by hostile testing).
            if e.kind() == std::io::ErrorKind::WouldBlock && stuck.is_none() {
                self.lock_stuck = Some(Instant::now());
            }
            let _ = self.unlock_dir();
            return Err(LogError::io(self.dir.join("LOCK"), e));
        }
        self.lock_stuck = None;
        // The path must still name the directory locked: a symbolic link swapped under a
        // running writer sent other writers to another directory at the same offsets
        // (found by hostile testing). One `stat` per batch.
        if let Err(e) = self.same_directory() {
            let _ = self.lock.unlock();
            let _ = self.unlock_dir();
            return Err(e);
        }
        let result = f(self);
        let unlocked = self
            .lock
            .unlock()
            .map_err(|e| LogError::io(self.dir.join("LOCK"), e));
        let dir_unlocked = self.unlock_dir();
        let value = result?;
        unlocked?;
        dir_unlocked?;
        Ok(value)
    }

    fn unlock_dir(&self) -> Result<(), LogError> {
        if !self.dir_locks {
            return Ok(());
        }
        self.dir_lock
            .unlock()
            .map_err(|e| LogError::io(&self.dir, e))
    }

    /// Whether the log's path still names the directory this writer opened and locked.
    fn same_directory(&self) -> Result<(), LogError> {
        use std::os::unix::fs::MetadataExt;
        let held = self
            .dir_lock
            .metadata()
            .map_err(|e| LogError::io(&self.dir, e))?;
        let named = std::fs::metadata(&self.dir).map_err(|e| LogError::io(&self.dir, e))?;
        if (held.dev(), held.ino()) == (named.dev(), named.ino()) {
            return Ok(());
        }
        Err(LogError::io(
            &self.dir,
            std::io::Error::other(
                "the log directory was moved or replaced while this writer had it open (the \
                 path now names another directory); nothing was appended: restart the writer \
                 on the log you mean",
            ),
        ))
    }

    /// Brings the view of the tail up to date with what other processes appended, cutting a
    /// torn tail, and the commit mark with it. Must hold the lock.
    fn refresh(&mut self) -> Result<(), LogError> {
        // Fast path: our segment has not grown and no segment starts where it ends, so no
        // other process appended or rolled since our last write.
        if let Some(active) = &self.active {
            let path = segment_path(&self.dir, active.base);
            let held = active.file.metadata().map_err(|e| LogError::io(&path, e))?;
            let linked = |m: &std::fs::Metadata| std::os::unix::fs::MetadataExt::nlink(m) > 1;
            if !links_unreliable()
                && (linked(&held) || active.index.metadata().is_ok_and(|m| linked(&m)))
            {
                // Linked elsewhere since (a backup; the index alone too): read again, each
                // given a file of its own.
                self.active = None;
            } else if !active.named_by_paths(&self.dir) {
                tracing::warn!(
                    segment = %path.display(),
                    "the log's last segment or its index was replaced or removed under this \
                     writer; reading the segment again from disk before appending"
                );
                self.active = None;
            } else if active.len == held.len()
                && !segment_path(&self.dir, active.next_offset).exists()
            {
                return Ok(());
            }
        }
        self.reload_tail()?;
        self.reconcile_mark()
    }

    /// Sets the commit mark to where the records end now that the tail is known: records
    /// past the mark were left whole by a writer that died mid-batch (kept, as before
    /// marks), and a mark past the end names records a writer finished that are gone (the
    /// file cut, or writes lost in a machine crash with `--fsync never` or an interval):
    /// kept in `LOST` before their offsets are reused.
    fn reconcile_mark(&mut self) -> Result<(), LogError> {
        let active = self.active.as_ref().expect("reload_tail sets it");
        let (base, end) = (active.base, active.next_offset);
        let mark = commit_mark(&self.dir);
        if mark == Some(end) {
            return Ok(());
        }
        if let Some(mark) = mark.filter(|&mark| mark > end) {
            if end == 0 {
                return Err(first_segment_emptied(&self.dir, mark - 1));
            }
            if !lost_covers(&self.dir, end, mark - 1)? {
                self.found_lost(LostRecords {
                    segment: segment_path(&self.dir, base),
                    first: end,
                    last_listed: mark - 1,
                })?;
            }
        }
        self.set_mark(end);
        Ok(())
    }

    /// Rewrites the commit mark (16 bytes in place). The records are written by now: a
    /// mark that cannot be written fails nothing, it is removed (a stale one would hold
    /// readers back at each batch) and said once.
    fn set_mark(&mut self, end: u64) {
        use std::os::unix::fs::MetadataExt;
        let Some(held) = &self.mark else {
            return;
        };
        // A mark removed or replaced under the writer (a restore, another writer after
        // a removal): written to the file readers read, not to a deleted one. Two `stat`s
        // per batch.
        let path = self.dir.join(COMMIT_FILE);
        let (same, linked) = match (std::fs::symlink_metadata(&path), held.metadata()) {
            (Ok(now), Ok(held)) => (
                now.dev() == held.dev() && now.ino() == held.ino(),
                now.file_type().is_file() && now.nlink() > 1,
            ),
            _ => (false, false),
        };
        if linked && !links_unreliable() {
            // Other names link to it (a `cp -al` backup): this name is given a mark of its
            // own (a copy renamed over it, so readers never find none), and the backup's
            // keeps the end of its own records (written in place, it named records the
            // backup lacks as lost).
            if let Err(e) = unshare(&path) {
                // This name only: the backup keeps its mark.
                let _ = std::fs::remove_file(&path);
                tracing::warn!(
                    "{e}; removed this name of it, and appends go on without a commit mark"
                );
                self.mark = None;
                return;
            }
        }
        if !same || linked {
            match open_mark(&self.dir) {
                Ok(Some(file)) => self.mark = Some(file),
                Ok(None) => {
                    self.mark = None;
                    return;
                }
                Err(e) => {
                    tracing::warn!("{e}; appends go on without a commit mark");
                    self.mark = None;
                    return;
                }
            }
        }
        let mark = self.mark.as_ref().expect("held or reopened");
        if let Err(e) = mark.write_all_at(&encode_mark(end), 0) {
            let path = self.dir.join(COMMIT_FILE);
            let removed = std::fs::remove_file(&path);
            tracing::warn!(
                path = %path.display(),
                "cannot write the log's commit mark ({e}); {}: readers read records as \
                 they are written, and may see a batch that fails and is rolled back",
                if removed.is_ok() { "removed it" } else { "could not remove it either" }
            );
            self.mark = None;
        }
    }

    /// Re-reads the last segment from disk: what other processes appended or rolled, a
    /// torn tail cut, the index rebuilt after a first open. Must hold the lock.
    fn reload_tail(&mut self) -> Result<(), LogError> {
        let bases = list_segments(&self.dir)?;
        let Some(&base) = bases.last() else {
            // Not a new log if its indexes remain: appending at offset 0 would give the
            // deleted records' offsets to others (found by hostile testing).
            if let Some(orphans) = orphan_indexes(&self.dir) {
                return Err(segments_deleted(&self.dir, orphans));
            }
            self.active = Some(self.create_segment(0)?);
            return Ok(());
        };
        let path = segment_path(&self.dir, base);
        // The files changed in place below, each given one of its own first if a backup
        // links to it.
        unshare(&path)?;
        unshare(&index_path(&self.dir, base))?;
        let file = open_regular_with(OpenOptions::new().read(true).write(true), &path)
            .map_err(|e| LogError::io(&path, e))?;
        let len = file.metadata().map_err(|e| LogError::io(&path, e))?.len();
        if len < SEGMENT_HEADER_BYTES {
            // A crash while creating the segment: it holds no record yet, and it must be
            // named where the closed segments end (a stray short file named below that
            // end was taken for it, and appends landed on offsets already used).
            drop(file);
            check_closed_segments(&self.dir, &bases)?;
            self.active = Some(self.create_segment(base)?);
            return Ok(());
        }
        check_header(&file, &path, base)?;
        // Continue from what we know when it is the same segment; after a first open or a
        // roll by another process, scan the whole segment and rebuild its index.
        let (start_offset, start_position, rebuild) = match &self.active {
            Some(a) if a.base == base && a.len <= len => (a.next_offset, a.len, false),
            _ => (base, SEGMENT_HEADER_BYTES, true),
        };
        let interval = self.options.index_interval_bytes;
        let mut last_indexed = if rebuild {
            0
        } else {
            self.active.as_ref().map_or(0, |a| a.last_indexed)
        };
        let mut entries = Vec::new();
        let scan = scan_segment(
            &file,
            &path,
            start_offset,
            start_position,
            |offset, position, _| {
                if rebuild && (last_indexed == 0 || position >= last_indexed + interval) {
                    entries.extend_from_slice(&offset.to_le_bytes());
                    entries.extend_from_slice(&position.to_le_bytes());
                    last_indexed = position;
                }
            },
        )?;
        if let ScanEnd::Corrupt { detail } = &scan.end {
            // Refuse before touching anything: not even the index is rewritten.
            return Err(LogError::Corrupt {
                segment: path,
                offset: scan.next_offset,
                detail: detail.clone(),
            });
        }
        if rebuild {
            // First open (or another process rolled): the closed segments must lead up to
            // this one, or appends would land where no reader reaches them.
            check_closed_segments(&self.dir, &bases)?;
            // The index is rebuilt below, and it is the evidence of records written and
            // gone since (the file cut at a record's boundary, or writes lost in a machine
            // crash): kept before appends reuse their offsets, never dropped silently.
            let whole_end = match &scan.end {
                ScanEnd::Torn { position, .. } => *position,
                _ => len,
            };
            let listed = listed_past(&self.dir, base, scan.next_offset, whole_end)
                .map(|listed| (path.clone(), listed))
                .or_else(|| {
                    orphan_listing(&self.dir, scan.next_offset)
                        .map(|listed| (segment_path(&self.dir, scan.next_offset), listed))
                });
            // The commit mark names the last record of the last batch finished: the
            // exact extent of a loss the index sees only up to its last entry.
            let listed = match (listed, marked_past(&self.dir, scan.next_offset)) {
                (Some((segment, listed)), Some(marked)) => Some((segment, listed.max(marked))),
                (None, Some(marked)) => Some((path.clone(), marked)),
                (listed, None) => listed,
            };
            if let Some((segment, listed)) = listed {
                if scan.next_offset == 0 {
                    return Err(first_segment_emptied(&self.dir, listed));
                }
                self.found_lost(LostRecords {
                    segment,
                    first: scan.next_offset,
                    last_listed: listed,
                })?;
            }
        }
        // The index opened before anything is cut: one the writer cannot own (a link, a
        // directory) refuses the batch with the tail untouched (a rebuilt index is emptied
        // only below, once the tail is settled).
        let index_file = index_path(&self.dir, base);
        let index = open_regular_nofollow(
            OpenOptions::new().create(true).append(!rebuild).write(true),
            &index_file,
        )
        .map_err(|e| LogError::io(&index_file, e))?;
        // The bytes a torn-tail cut removes, kept before anything is changed (the index is
        // rebuilt just below): if they cannot be kept (a full disk), nothing is cut and the
        // writer does not open.
        let kept = match &scan.end {
            ScanEnd::Torn { position, .. } => {
                let mut dropped = vec![0u8; (len - position) as usize];
                file.read_exact_at(&mut dropped, *position)
                    .map_err(|e| LogError::io(&path, e))?;
                Some(keep_cut(&path, scan.next_offset, &dropped)?)
            }
            _ => None,
        };
        let mut active = ActiveSegment {
            base,
            file,
            index,
            len,
            next_offset: scan.next_offset,
            last_indexed,
        };
        match scan.end {
            ScanEnd::Clean => {}
            ScanEnd::Corrupt { detail } => {
                return Err(LogError::Corrupt {
                    segment: path,
                    offset: scan.next_offset,
                    detail,
                })
            }
            ScanEnd::Torn { position, detail } => {
                let kept = kept.expect("kept above");
                active
                    .file
                    .set_len(position)
                    .map_err(|e| LogError::io(&path, e))?;
                active.file.sync_all().map_err(|e| LogError::io(&path, e))?;
                self.recovery = Some(TailRecovery {
                    segment: path.clone(),
                    offset: scan.next_offset,
                    bytes_dropped: len - position,
                    detail,
                    kept,
                });
                active.len = position;
            }
        }
        if rebuild {
            active
                .index
                .set_len(0)
                .map_err(|e| LogError::io(&index_file, e))?;
        } else {
            // Another process appended and wrote its own index entries.
            active.last_indexed = read_index(&self.dir, base, 0, None).map_or(0, |i| i.last.1);
        }
        active
            .index
            .write_all_at_end(&entries)
            .map_err(|e| LogError::io(&index_file, e))?;
        self.active = Some(active);
        Ok(())
    }

    /// Keeps `lost` (before anything reuses its offsets) and reports it.
    fn found_lost(&mut self, lost: LostRecords) -> Result<(), LogError> {
        self.keep_lost(&lost)?;
        self.unwritten_loss = Some((lost.first, lost.last_listed));
        tracing::warn!(
            segment = %lost.segment.display(), first = lost.first, last_listed = lost.last_listed,
            "records the log's index or commit mark names are gone; kept in {LOST_FILE}"
        );
        self.lost = Some(lost);
        Ok(())
    }

    /// Appends `lost` to the log's `LOST` file, synced, before anything reuses the offsets.
    fn keep_lost(&self, lost: &LostRecords) -> Result<(), LogError> {
        keep_lost(&self.dir, lost).map(|_| ())
    }

    fn create_segment(&mut self, base: u64) -> Result<ActiveSegment, LogError> {
        let path = segment_path(&self.dir, base);
        // An index already there lists records of a segment that was emptied or deleted:
        // kept before the new segment's empty index replaces it.
        // (Entries that agree with the segment's name and header: junk proves nothing.)
        let index = read_index(&self.dir, base, 0, None);
        let said = |listed: u64| {
            self.unwritten_loss
                .is_some_and(|(first, last)| first <= base && last >= listed)
        };
        if let Some((listed, _)) = index.filter(|i| index_agrees(i, base)).map(|i| i.last) {
            // The commit mark may name records past the index's last entry.
            let listed = listed.max(marked_past(&self.dir, base).unwrap_or(0));
            if listed >= base && !said(listed) {
                if base == 0 {
                    return Err(first_segment_emptied(&self.dir, listed));
                }
                self.found_lost(LostRecords {
                    segment: path.clone(),
                    first: base,
                    last_listed: listed,
                })?;
            }
        }
        // The index first: one the writer cannot own (a link, a directory) refuses before a
        // segment is made.
        let index_file = index_path(&self.dir, base);
        let index = open_regular_nofollow(
            OpenOptions::new().create(true).truncate(true).write(true),
            &index_file,
        )
        .map_err(|e| LogError::io(&index_file, e))?;
        let file = open_regular_nofollow(
            OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true),
            &path,
        )
        .map_err(|e| {
            // The empty index just made goes with the segment that could not be.
            let _ = std::fs::remove_file(&index_file);
            LogError::io(&path, e)
        })?;
        let made = file
            .write_all_at(&segment_header(base), 0)
            .map_err(|e| LogError::io(&path, e))
            .and_then(|()| {
                if self.options.fsync == FsyncPolicy::Never {
                    return Ok(());
                }
                file.sync_all().map_err(|e| LogError::io(&path, e))?;
                File::open(&self.dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| LogError::io(&self.dir, e))
            });
        if let Err(e) = made {
            // Made by this call and not usable: removed here, index first (a roll back
            // removes only the segments a batch rolled to).
            let _ = std::fs::remove_file(&index_file);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(ActiveSegment {
            base,
            file,
            index,
            len: SEGMENT_HEADER_BYTES,
            next_offset: base,
            last_indexed: 0,
        })
    }

    fn run(mut self, inbox: mpsc::Receiver<Request>) {
        loop {
            let first = match self.options.fsync {
                FsyncPolicy::IntervalMs(ms) if self.dirty_since.is_some() => {
                    let due = self.dirty_since.expect("checked") + Duration::from_millis(ms);
                    match inbox.recv_timeout(due.saturating_duration_since(Instant::now())) {
                        Ok(r) => r,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            self.sync_quietly();
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                _ => match inbox.recv() {
                    Ok(r) => r,
                    Err(_) => break,
                },
            };
            // Group commit: everything queued behind the first request shares its write and fsync.
            let mut batch = vec![first];
            while let Ok(more) = inbox.try_recv() {
                batch.push(more);
            }
            if batch.iter().any(|r| matches!(r.guard, Guard::At(_))) {
                // A conditional append is checked and written alone, under the lock.
                for request in batch {
                    let records: Vec<&[u8]> = request.records.iter().map(Vec::as_slice).collect();
                    let result = self.with_lock(|w| w.write_at(request.guard, &records));
                    let answer = match result {
                        Ok(offsets) => Ok(offsets),
                        Err(e @ (LogError::Moved { .. } | LogError::WentBack { .. })) => Err(e),
                        Err(e @ LogError::BatchUncertain(_)) => {
                            self.active = None;
                            Err(e)
                        }
                        Err(e) => {
                            self.active = None;
                            Err(LogError::BatchFailed(e.to_string()))
                        }
                    };
                    let _ = request.reply.send(answer);
                }
                continue;
            }
            let guarded = batch.iter().any(|r| matches!(r.guard, Guard::Past(_)));
            // Requests whose floor is past the log's end take no part (nothing of theirs is
            // written, whatever becomes of the others: they are answered `WentBack`); the
            // others share the write.
            let mut went_back: Vec<Option<LogError>> = Vec::new();
            let written = self.with_lock(|w| {
                let end = if guarded {
                    w.refresh()?;
                    w.active.as_ref().expect("refresh sets it").next_offset
                } else {
                    u64::MAX
                };
                let mut records: Vec<&[u8]> = Vec::new();
                for request in &batch {
                    match request.guard {
                        Guard::Past(floor) if floor > end => {
                            went_back.push(Some(LogError::WentBack { floor, end }))
                        }
                        _ => {
                            went_back.push(None);
                            records.extend(request.records.iter().map(Vec::as_slice));
                        }
                    }
                }
                if records.is_empty() {
                    return Ok(Vec::new());
                }
                w.write(&records)
            });
            if written.is_err() {
                // Forget the cached tail: the next append re-reads it from disk.
                self.active = None;
            }
            let failed = written
                .as_ref()
                .err()
                .map(|e| (e.to_string(), matches!(e, LogError::BatchUncertain(_))));
            let offsets = written.unwrap_or_default();
            let mut rest = offsets.as_slice();
            for (i, request) in batch.into_iter().enumerate() {
                // (Empty when the lock was never taken: then every request failed alike.)
                if let Some(Some(refused)) = went_back.get_mut(i).map(Option::take) {
                    let _ = request.reply.send(Err(refused));
                    continue;
                }
                let answer = match &failed {
                    Some((message, true)) => Err(LogError::BatchUncertain(message.clone())),
                    Some((message, false)) => Err(LogError::BatchFailed(message.clone())),
                    None => {
                        let (mine, others) = rest.split_at(request.records.len());
                        rest = others;
                        Ok(mine.to_vec())
                    }
                };
                let _ = request.reply.send(answer);
            }
        }
        self.sync_quietly();
    }

    fn sync_quietly(&mut self) {
        if let Some(active) = &self.active {
            if let Err(e) = timed_sync(&active.file) {
                tracing::error!("fsync of the log failed: {e}");
            }
        }
        self.dirty_since = None;
    }

    /// [`Writer::write`], only if the log's end meets `guard`. Must hold the lock.
    fn write_at(&mut self, guard: Guard, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        if let Guard::At(expected) | Guard::Past(expected) = guard {
            self.refresh()?;
            let end = self.active.as_ref().expect("refresh sets it").next_offset;
            match guard {
                Guard::At(_) if end != expected => {
                    return Err(LogError::Moved { expected, end });
                }
                Guard::Past(floor) if end < floor => {
                    return Err(LogError::WentBack { floor, end });
                }
                _ => {}
            }
        }
        self.write(records)
    }

    /// Writes records at the tail, all or nothing: a batch that fails part way (a full
    /// disk, a file-size limit) is rolled back to where it started, across a segment roll
    /// too, so no prefix of it stays behind (R-LOG-2). Must hold the lock.
    fn write(&mut self, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        let start = self.begin()?;
        let written = self.write_batch(records);
        self.finish(start, written)
    }

    /// Reads the tail before a batch; where it starts (segment, length, index length).
    fn begin(&mut self) -> Result<BatchStart, LogError> {
        self.refresh()?;
        let active = self.active.as_ref().expect("refresh sets it");
        let start = (active.base, active.len);
        let index_file = index_path(&self.dir, active.base);
        let index_len = std::fs::metadata(&index_file).map_or(0, |m| m.len());
        self.rolled.clear();
        self.written.clear();
        if let Some(id) = file_id(&active.file) {
            self.written.push((start.0, id));
        }
        Ok(BatchStart { start, index_len })
    }

    /// Judges a batch once written: appended, uncertain (a segment it wrote replaced), or
    /// failed and rolled back.
    fn finish(
        &mut self,
        BatchStart { start, index_len }: BatchStart,
        written: Result<Vec<u64>, LogError>,
    ) -> Result<Vec<u64>, LogError> {
        match written {
            // A segment replaced while the batch was written (checked before it, and at
            // each roll): the records went to a file no reader reads, unless the copy was
            // taken after them. Not called appended, nor rolled back (the path names
            // another file now); the next batch reads the tail again and keeps in LOST
            // what the commit mark names and the new file lacks (found by hostile testing:
            // an append said "appended 300000 record(s)" of which the log held none). An
            // index replaced alone loses nothing: it is rebuilt at the next batch.
            Ok(offsets) => match self.replaced_segment().filter(|_| !offsets.is_empty()) {
                Some(base) => {
                    self.active = None;
                    let error = self.replaced_during(base, &offsets);
                    Err(self.set_aside_past(base, error))
                }
                None => Ok(offsets),
            },
            Err(e @ LogError::BatchUncertain(_)) => {
                self.active = None;
                Err(match self.replaced_segment() {
                    Some(base) => self.set_aside_past(base, e),
                    None => e,
                })
            }
            Err(e) => {
                if let Err(undo) = self.roll_back(start, index_len) {
                    tracing::error!("rolling back a failed append failed too: {undo}");
                }
                Err(e)
            }
        }
    }

    /// The first segment the batch wrote to whose path names another file now.
    fn replaced_segment(&self) -> Option<u64> {
        self.written
            .iter()
            .find(|(base, id)| {
                std::fs::metadata(segment_path(&self.dir, *base))
                    .ok()
                    .map(metadata_id)
                    != Some(*id)
            })
            .map(|(base, _)| *base)
    }

    /// After a batch found segment `base` replaced once it had rolled past it: when the
    /// file there now ends short of the next segment (an older copy), the segments the
    /// batch rolled to after it are set aside as kept files (as a torn tail's cut bytes
    /// are, [`cut_path`]), so the log ends where the copy does and the commit mark names
    /// the records in between as lost (the next writer keeps them in `LOST`), instead of a
    /// gap that called every later append and `lhc log check` a corrupt log without a
    /// word on the cause (found by hostile testing). `error` gains what was set aside.
    fn set_aside_past(&mut self, base: u64, error: LogError) -> LogError {
        let later: Vec<u64> = self.rolled.iter().copied().filter(|&b| b > base).collect();
        let Some(&next) = later.first() else {
            return error;
        };
        // Only a file that reads whole (or torn) and ends short of the next segment is an
        // older copy; one that cannot be read (gone, damaged, an I/O error) is left as
        // it is, for `lhc log check` to name.
        match segment_end(&self.dir, base) {
            Ok(end) if end < next => {}
            Ok(_) => return error,
            Err(e) => {
                tracing::error!("the segment replaced under a batch cannot be read: {e}");
                return error;
            }
        }
        let mut kept = Vec::new();
        let mut failed = None;
        for later in later.iter().rev() {
            // The index first: one left without its segment would read as records lost
            // (the mark names the loss).
            let _ = std::fs::remove_file(index_path(&self.dir, *later));
            let path = segment_path(&self.dir, *later);
            match set_aside(&path, *later) {
                Ok(to) => kept.push(to.display().to_string()),
                Err(e) => {
                    failed = Some(format!("setting aside {} failed ({e})", path.display()));
                    break;
                }
            }
        }
        self.rolled.clear();
        kept.reverse();
        let aside = if kept.is_empty() {
            String::new()
        } else {
            format!(
                " were set aside as {} (their records kept there)",
                kept.join(", ")
            )
        };
        match failed {
            None => LogError::BatchUncertain(format!(
                "{error}; the segment(s) it rolled to after that one, starting past the \
                 replaced file's end,{aside}, so the log ends where the replaced file does \
                 and the next writer keeps the records in between in {LOST_FILE}"
            )),
            Some(failed) => LogError::BatchUncertain(format!(
                "{error}; the segment(s) it rolled to after that one start past the replaced \
                 file's end: {failed}{}{aside}; the log has a gap until they are moved away",
                if kept.is_empty() {
                    ""
                } else {
                    ", and the later ones"
                }
            )),
        }
    }

    /// The error of a batch written while its segment `base` was replaced (see
    /// [`LogError::BatchUncertain`]); `offsets` are those it was given so far.
    fn replaced_during(&self, base: u64, offsets: &[u64]) -> LogError {
        let range = match (offsets.first(), offsets.last()) {
            (Some(first), Some(last)) => format!("records {first}..={last}"),
            _ => "its records".to_string(),
        };
        let from = offsets.first().copied().unwrap_or(base);
        LogError::BatchUncertain(format!(
            "{}: the log's segment was replaced while this batch was written (a copy renamed \
             over it, a restore): {range} went to the file replaced, and are in the log only \
             if the copy was taken after them; see `lhc log check` and `lhc log cat --from \
             {from}` before sending them again",
            segment_path(&self.dir, base).display()
        ))
    }

    /// Removes what a failed batch wrote: segments it created, and the bytes and index
    /// entries it added to the segment it started in.
    fn roll_back(&mut self, (base, len): (u64, u64), index_len: u64) -> Result<(), LogError> {
        self.active = None; // the next append re-reads the tail from disk
        for later in std::mem::take(&mut self.rolled) {
            // The index first: one left without its segment would read as records lost.
            let _ = std::fs::remove_file(index_path(&self.dir, later));
            let path = segment_path(&self.dir, later);
            std::fs::remove_file(&path).map_err(|e| LogError::io(&path, e))?;
        }
        let path = segment_path(&self.dir, base);
        let file = open_regular_with(OpenOptions::new().write(true), &path)
            .map_err(|e| LogError::io(&path, e))?;
        file.set_len(len).map_err(|e| LogError::io(&path, e))?;
        file.sync_all().map_err(|e| LogError::io(&path, e))?;
        let index = index_path(&self.dir, base);
        if let Ok(f) = open_regular_nofollow(OpenOptions::new().write(true), &index) {
            f.set_len(index_len).map_err(|e| LogError::io(&index, e))?;
        }
        Ok(())
    }

    fn write_batch(&mut self, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        let mut offsets = Vec::with_capacity(records.len());
        let mut pending = Pending::default();
        for record in records {
            let size = frame_size(record.len()) as u64;
            let active = self.active.as_ref().expect("refresh sets it");
            let position = active.len + pending.frames.len() as u64;
            if position + size > self.options.segment_bytes && position > SEGMENT_HEADER_BYTES {
                self.flush(&mut pending)?;
                self.sync_active()?;
                let active = self.active.as_ref().expect("set");
                if !active.segment_named(&self.dir) {
                    // Replaced while written: the batch's records so far went to a file
                    // no reader reads; a roll would put the rest after a gap.
                    return Err(self.replaced_during(active.base, &offsets));
                }
                let next = self.active.as_ref().expect("set").next_offset;
                self.active = Some(self.create_segment(next)?);
                self.rolled.push(next);
                if let Some(id) = self.active.as_ref().and_then(|a| file_id(&a.file)) {
                    self.written.push((next, id));
                }
            }
            let active = self.active.as_mut().expect("set");
            let position = active.len + pending.frames.len() as u64;
            let offset = active.next_offset + pending.count;
            if active.last_indexed == 0
                || position >= active.last_indexed + self.options.index_interval_bytes
            {
                pending.index.extend_from_slice(&offset.to_le_bytes());
                pending.index.extend_from_slice(&position.to_le_bytes());
                active.last_indexed = position;
            }
            encode_frame(&mut pending.frames, offset, record);
            pending.count += 1;
            offsets.push(offset);
        }
        self.flush(&mut pending)?;
        match self.options.fsync {
            FsyncPolicy::Always => self.sync_active()?,
            FsyncPolicy::IntervalMs(_) => {
                self.dirty_since.get_or_insert_with(Instant::now);
            }
            FsyncPolicy::Never => {}
        }
        // A segment it wrote to replaced meanwhile: not committed (readers would read
        // records that may not be in the log; see `finish`).
        if let Some(base) = self.replaced_segment().filter(|_| !offsets.is_empty()) {
            return Err(self.replaced_during(base, &offsets));
        }
        // Only now may readers see the batch: until here it can still be rolled back.
        let end = self.active.as_ref().expect("set").next_offset;
        self.set_mark(end);
        self.unwritten_loss = None;
        Ok(offsets)
    }

    /// Writes buffered frames, then their index entries, to the active segment.
    fn flush(&mut self, pending: &mut Pending) -> Result<(), LogError> {
        let active = self.active.as_mut().expect("set");
        if pending.count == 0 {
            return Ok(());
        }
        let path = segment_path(&self.dir, active.base);
        active
            .file
            .write_all_at(&pending.frames, active.len)
            .map_err(|e| LogError::io(&path, e))?;
        active.len += pending.frames.len() as u64;
        active.next_offset += pending.count;
        active
            .index
            .write_all_at_end(&pending.index)
            .map_err(|e| LogError::io(index_path(&self.dir, active.base), e))?;
        *pending = Pending::default();
        Ok(())
    }

    fn sync_active(&mut self) -> Result<(), LogError> {
        if let Some(active) = &self.active {
            let path = segment_path(&self.dir, active.base);
            timed_sync(&active.file).map_err(|e| LogError::io(&path, e))?;
        }
        self.dirty_since = None;
        Ok(())
    }
}

/// How long the appenders' fsyncs took, over every embedded log of this process: what
/// tells a slow disk from a slow node (`lhc bench node` prints it beside each run's
/// latencies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsyncStats {
    /// fsyncs of appended records.
    pub count: u64,
    /// Those that took 10 ms or more.
    pub over_10ms: u64,
    /// The longest, in microseconds.
    pub max_us: u64,
}

/// Counters behind [`fsync_stats`]: relaxed atomics, diagnostics only.
static FSYNC_COUNT: AtomicU64 = AtomicU64::new(0);
static FSYNC_SLOW: AtomicU64 = AtomicU64::new(0);
static FSYNC_MAX_US: AtomicU64 = AtomicU64::new(0);

/// The fsyncs of appended records so far in this process.
pub fn fsync_stats() -> FsyncStats {
    FsyncStats {
        count: FSYNC_COUNT.load(Ordering::Relaxed),
        over_10ms: FSYNC_SLOW.load(Ordering::Relaxed),
        max_us: FSYNC_MAX_US.load(Ordering::Relaxed),
    }
}

/// Starts [`fsync_stats`] again from zero (between a benchmark's runs).
pub fn reset_fsync_stats() {
    FSYNC_COUNT.store(0, Ordering::Relaxed);
    FSYNC_SLOW.store(0, Ordering::Relaxed);
    FSYNC_MAX_US.store(0, Ordering::Relaxed);
}

/// `sync_data`, counted in [`fsync_stats`].
fn timed_sync(file: &File) -> std::io::Result<()> {
    let started = Instant::now();
    let result = file.sync_data();
    let us = started.elapsed().as_micros() as u64;
    FSYNC_COUNT.fetch_add(1, Ordering::Relaxed);
    if us >= 10_000 {
        FSYNC_SLOW.fetch_add(1, Ordering::Relaxed);
    }
    FSYNC_MAX_US.fetch_max(us, Ordering::Relaxed);
    result
}

/// Frames encoded but not yet written, with their index entries.
#[derive(Default)]
struct Pending {
    frames: Vec<u8>,
    index: Vec<u8>,
    count: u64,
}

trait AppendAtEnd {
    fn write_all_at_end(&self, bytes: &[u8]) -> std::io::Result<()>;
}

impl AppendAtEnd for File {
    fn write_all_at_end(&self, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let len = self.metadata()?.len();
        self.write_all_at(bytes, len)
    }
}

/// Reads an embedded log in offset order, following the tail on request.
pub struct EmbeddedReader {
    dir: PathBuf,
    next: u64,
    cursor: Option<Cursor>,
    /// Records below this offset are known committed and are read without asking; at it,
    /// the commit mark is read again ([`COMMIT_FILE`]).
    readable: u64,
    /// The last frame handed out: a replaced segment must hold it still.
    last_read: Option<FrameId>,
    /// Where that frame is in the file read (segment base and file position).
    last_at: Option<(u64, u64)>,
    /// Waited at the end since the last record handed out.
    waited: bool,
}

struct Cursor {
    base: u64,
    path: PathBuf,
    file: File,
    /// File position of `buf[start]`, the next frame.
    position: u64,
    /// Offset the frame at `position` carries.
    offset: u64,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Started from the segment's first frame, not from an index hint.
    from_start: bool,
    /// The last frame stepped over: its offset, size and payload checksum (what tells a
    /// record from another at the same offset, without hashing every record read).
    last: Option<FrameId>,
    /// Where that frame starts: the segment's base and the file position.
    last_at: Option<(u64, u64)>,
}

/// A frame's offset, size and payload checksum.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FrameId {
    offset: u64,
    size: usize,
    crc: [u8; 4],
}

enum Step {
    Entry(LogEntry),
    /// Nothing more in this segment for now.
    AtEnd,
}

impl Cursor {
    fn open(dir: &Path, base: u64, target: u64) -> Result<Cursor, LogError> {
        let path = segment_path(dir, base);
        let file = open_segment(&path, base)?;
        let (offset, position) = seek_hint(dir, base, target, &file);
        let from_start = position == SEGMENT_HEADER_BYTES;
        Ok(Cursor {
            base,
            path,
            file,
            position,
            offset,
            buf: vec![0; 256 << 10],
            start: 0,
            end: 0,
            from_start,
            last: None,
            last_at: None,
        })
    }

    /// Whether this cursor's file still holds frame `id` at `(base, position)` (a frame
    /// header's 20 bytes read again); `true` when that is not this cursor's segment.
    fn frame_at(&self, (base, position): (u64, u64), id: FrameId) -> Result<bool, LogError> {
        if base != self.base {
            return Ok(true);
        }
        let mut header = [0u8; 20];
        let n = read_at_most(&self.file, &self.path, &mut header, position)?;
        if n < header.len() {
            return Ok(false);
        }
        let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
        let offset = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        Ok(offset == id.offset && frame_size(len) == id.size && header[16..20] == id.crc)
    }

    /// Whether the record at `id.offset` in this cursor's segment is the frame `id`
    /// (`None`: the segment does not hold that offset whole).
    fn holds(&mut self, id: FrameId) -> Result<Option<bool>, LogError> {
        loop {
            match self.step()? {
                Step::Entry(entry) if entry.offset < id.offset => continue,
                Step::Entry(entry) if entry.offset == id.offset => {
                    return Ok(Some(self.last == Some(id)));
                }
                Step::Entry(_) | Step::AtEnd => return Ok(None),
            }
        }
    }

    /// Puts back the frame just read (at file `position`, carrying `offset`) and forgets
    /// the buffer, so the next step reads that frame again from the file.
    fn unstep(&mut self, position: u64, offset: u64) {
        self.position = position;
        self.offset = offset;
        self.start = 0;
        self.end = 0;
    }

    /// Whether the segment's path still names the file this cursor reads (a segment a
    /// failed batch created is removed, and its offsets may be written anew elsewhere).
    fn same_file(&self) -> bool {
        named_file(&self.path, &self.file)
    }

    fn rewind_to_start(&mut self) {
        self.offset = self.base;
        self.position = SEGMENT_HEADER_BYTES;
        self.start = 0;
        self.end = 0;
        self.from_start = true;
    }

    fn step(&mut self) -> Result<Step, LogError> {
        loop {
            match parse_frame(&self.buf[self.start..self.end], self.offset) {
                Parsed::Frame {
                    offset,
                    payload,
                    size,
                } => {
                    let entry = LogEntry {
                        offset,
                        bytes: payload.to_vec(),
                    };
                    let mut crc = [0u8; 4];
                    crc.copy_from_slice(&self.buf[self.start + 16..self.start + 20]);
                    self.last = Some(FrameId { offset, size, crc });
                    self.last_at = Some((self.base, self.position));
                    self.start += size;
                    self.position += size as u64;
                    self.offset += 1;
                    return Ok(Step::Entry(entry));
                }
                Parsed::Incomplete { needed } => {
                    // Re-read from the frame's start rather than keep its partial bytes: at
                    // the tail, a writer may have cut a torn frame and written new records
                    // there since (a follower must never splice stale bytes with new ones).
                    let had = self.end - self.start;
                    self.start = 0;
                    let want = needed.unwrap_or(0).max(256 << 10);
                    if self.buf.len() < want {
                        self.buf.resize(want, 0);
                    }
                    let n = read_at_most(&self.file, &self.path, &mut self.buf, self.position)?;
                    self.end = n;
                    if n <= had {
                        // Nothing new: the frame is still being written (or torn).
                        return Ok(Step::AtEnd);
                    }
                }
                Parsed::Bad(detail) => {
                    let len = self
                        .file
                        .metadata()
                        .map_err(|e| LogError::io(&self.path, e))?
                        .len();
                    let rest = read_range(&self.file, &self.path, self.position, len)?;
                    if valid_frame_follows(&rest, self.offset.saturating_sub(1))
                        || !looks_torn(&rest)
                    {
                        return Err(LogError::Corrupt {
                            segment: self.path.clone(),
                            offset: self.offset,
                            detail,
                        });
                    }
                    // A torn write the next writer will cut, or a frame being written right
                    // now: look again later, from the frame's start.
                    self.end = self.start;
                    return Ok(Step::AtEnd);
                }
            }
        }
    }
}

impl EmbeddedReader {
    /// A reader of the log in `dir`, positioned at `from`.
    pub fn new(dir: &Path, from: u64) -> Result<EmbeddedReader, LogError> {
        let start = list_segments(dir)?.first().copied().unwrap_or(0);
        starts_at_zero(dir, start)?;
        // Records before damage stay readable; the reader reports the damage on reaching it.
        // A position in a batch still being appended is valid (a reader that read records
        // a dead writer left past the mark, restarted there): the reader waits at the mark.
        let end = match probe_end(dir) {
            Ok(end) => end,
            Err(LogError::Corrupt { offset, .. }) => offset,
            Err(e) => return Err(e),
        };
        if from < start || from > end {
            return Err(LogError::OffsetOutOfRange {
                requested: from,
                start,
                end,
            });
        }
        Ok(EmbeddedReader {
            dir: dir.to_path_buf(),
            next: from,
            cursor: None,
            readable: 0,
            last_read: None,
            last_at: None,
            waited: false,
        })
    }

    fn try_next(&mut self) -> Result<Option<LogEntry>, LogError> {
        let mut rechecked = false;
        let mut reopened = false;
        loop {
            if self.cursor.is_none() {
                let bases = list_segments(&self.dir)?;
                let i = bases.partition_point(|&b| b <= self.next);
                if i == 0 || being_created(&self.dir, &bases, bases[i - 1]) {
                    return Ok(None);
                }
                self.cursor = Some(Cursor::open(&self.dir, bases[i - 1], self.next)?);
            }
            let cursor = self.cursor.as_mut().expect("set above");
            let at = (cursor.position, cursor.offset);
            match cursor.step() {
                Ok(Step::Entry(entry)) if entry.offset < self.next => continue,
                Ok(Step::Entry(entry)) if entry.offset >= self.readable => {
                    // Past what was known committed: ask the mark, then read the frame
                    // again from the file, since the bytes read may belong to a batch that
                    // was rolled back and written anew since.
                    self.readable = readable_past(&self.dir, entry.offset)?;
                    cursor.unstep(at.0, at.1);
                    if entry.offset >= self.readable {
                        // A batch being appended: wait for its end (or its roll back, which
                        // removes the segments it created).
                        if cursor.base >= self.readable {
                            self.cursor = None;
                        }
                        return Ok(None);
                    }
                    if !cursor.same_file() {
                        // Replaced (or a failed batch's segment made anew): the new file
                        // must hold the record last read, as at the end below.
                        self.cursor = None;
                        if let Some(last) = self.last_read.filter(|l| l.offset + 1 == self.next) {
                            self.same_record_in_new_file(last)?;
                        }
                    }
                }
                Ok(Step::Entry(entry)) => {
                    if std::mem::take(&mut self.waited) {
                        // New records after a wait at the end: the record handed out
                        // last must still be where it was. A tail cut in place and written
                        // again with frames that line up read on silently, and a node kept
                        // records the log no longer had (found by hostile testing).
                        if let Some((last, at)) = self.last_read.zip(self.last_at) {
                            if !cursor.frame_at(at, last)? {
                                return Err(LogError::Corrupt {
                                    segment: cursor.path.clone(),
                                    offset: last.offset,
                                    detail: format!(
                                        "the record at offset {} this reader read was \
                                         replaced in place (the log's tail cut and written \
                                         again): records it read are not the log's any more",
                                        last.offset
                                    ),
                                });
                            }
                        }
                    }
                    self.next = entry.offset + 1;
                    self.last_read = cursor.last;
                    self.last_at = cursor.last_at;
                    return Ok(Some(entry));
                }
                Ok(Step::AtEnd) => {
                    if self.readable == u64::MAX {
                        // A log without a mark: ask again past here, one may exist now.
                        self.readable = self.next;
                    }
                    // A newer segment starting here means this one is finished.
                    let later = list_segments(&self.dir)?
                        .into_iter()
                        .find(|&b| b > cursor.base);
                    if let Some(later) = later.filter(|&b| b != self.next) {
                        // A closed segment that ends short of the next (truncated, or a
                        // segment missing or stray): never an end of the log. Look once more
                        // first: a writer finishes a segment before it creates the next, so
                        // frames written since our last look are there now.
                        if !rechecked {
                            rechecked = true;
                            continue;
                        }
                        return Err(LogError::Corrupt {
                            segment: cursor.path.clone(),
                            offset: self.next,
                            detail: format!(
                                "the segment ends at offset {} but the next one starts at {later}",
                                self.next
                            ),
                        });
                    }
                    if later == Some(self.next) {
                        let len = cursor
                            .file
                            .metadata()
                            .map_err(|e| LogError::io(&cursor.path, e))?
                            .len();
                        if cursor.position != len {
                            return Err(LogError::Corrupt {
                                segment: cursor.path.clone(),
                                offset: self.next,
                                detail: "bytes after the last record of a closed segment".into(),
                            });
                        }
                        self.cursor = None;
                        continue;
                    }
                    // The path must still name the file read: a last segment replaced under
                    // a follower (a copy renamed over it, a restore) took the writers'
                    // records while it waited on the old file for good (a node's fold
                    // stopped, its launches timing out; found by hostile testing). Read
                    // again from the file the path names; a segment gone is an error there.
                    if !reopened && !cursor.same_file() {
                        reopened = true;
                        self.cursor = None;
                        if let Some(last) = self.last_read.filter(|l| l.offset + 1 == self.next) {
                            self.same_record_in_new_file(last)?;
                        }
                        continue;
                    }
                    if cursor.offset < self.next {
                        // The file (replaced, or cut) ends below what this reader read:
                        // records it handed out are gone, and a writer appends at their
                        // offsets; skipping to its position would pass the new records
                        // over silently (found by hostile testing: a node's fold did).
                        return Err(LogError::Corrupt {
                            segment: cursor.path.clone(),
                            offset: cursor.offset,
                            detail: format!(
                                "the log went back: the segment ends at offset {}, below \
                                 offset {} this reader had read up to (replaced by an older \
                                 copy, or cut); records it read are gone",
                                cursor.offset, self.next
                            ),
                        });
                    }
                    return Ok(None);
                }
                Err(LogError::Corrupt { .. }) if !cursor.from_start => {
                    // The index pointed somewhere wrong: scan the segment from its start.
                    cursor.rewind_to_start();
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl EmbeddedReader {
    /// After the segment read was replaced: the new file must hold, at the offset of the
    /// last record this reader handed out, that same record. A copy refilled past it with
    /// other records read on as if nothing had happened, and a node's state held records
    /// the log no longer had (found by hostile testing). Only the last is compared: one
    /// checksum kept, none computed per record.
    fn same_record_in_new_file(&self, last: FrameId) -> Result<(), LogError> {
        let bases = list_segments(&self.dir)?;
        let i = bases.partition_point(|&b| b <= last.offset);
        if i == 0 {
            return Ok(());
        }
        let mut cursor = Cursor::open(&self.dir, bases[i - 1], last.offset)?;
        if cursor.holds(last)? == Some(false) {
            return Err(LogError::Corrupt {
                segment: cursor.path.clone(),
                offset: last.offset,
                detail: format!(
                    "the log's segment was replaced (a copy renamed over it, a restore) by one \
                     holding another record at offset {} than the one this reader read: \
                     records it read are not the log's any more",
                    last.offset
                ),
            });
        }
        Ok(())
    }
}

impl LogReader for EmbeddedReader {
    fn next(&mut self, wait: Duration) -> Result<Option<LogEntry>, LogError> {
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(entry) = self.try_next()? {
                return Ok(Some(entry));
            }
            self.waited = true;
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    fn position(&self) -> u64 {
        self.next
    }
}

/// How far a reader that reached `offset`, the first record it did not know committed,
/// may read now: to the commit mark; past it only when no writer is appending (the whole
/// records a writer that died left, up to the end read under the lock); without a mark (a
/// log written before marks) as far as records go, asked again at the tail.
fn readable_past(dir: &Path, offset: u64) -> Result<u64, LogError> {
    match read_mark(dir) {
        MarkRead::Absent => Ok(u64::MAX),
        MarkRead::At(mark) if mark > offset => Ok(mark),
        MarkRead::At(mark) => match settled_end(dir)? {
            Some(end) => Ok(end.max(mark)),
            // The writer may have finished its batch since the mark was read.
            None => Ok(commit_mark(dir).unwrap_or(mark)),
        },
        // A mark that does not check while a writer appends: not past here until it does
        // (the writer rewrites it when its batch ends).
        MarkRead::Unreadable => Ok(settled_end(dir)?.unwrap_or(offset)),
    }
}

/// Records the log's own files say were written past `end` (where a reader found the
/// records end) and are gone: the last segment's index listing records past its end, or
/// indexes left by deleted segments. (segment, end, the last offset listed.) What `check`
/// names as a lost tail, asked cheaply at the end of a read (no segment is scanned): a
/// reader answering from what is left says so instead of answering silently.
pub fn lost_past(dir: &Path, end: u64) -> Option<(PathBuf, u64, u64)> {
    let bases = list_segments(dir).ok()?;
    let listed = bases
        .last()
        .filter(|&&b| b <= end)
        .and_then(|&base| {
            let path = segment_path(dir, base);
            let len = std::fs::metadata(&path).ok()?.len();
            listed_past(dir, base, end, len).map(|listed| (path, listed))
        })
        .or_else(|| orphan_listing(dir, end).map(|listed| (segment_path(dir, end), listed)));
    match (listed, marked_past(dir, end)) {
        (Some((path, listed)), marked) => Some((path, end, listed.max(marked.unwrap_or(0)))),
        (None, Some(marked)) => {
            let base = bases
                .iter()
                .rev()
                .find(|&&b| b <= end)
                .copied()
                .unwrap_or(0);
            Some((segment_path(dir, base), end, marked))
        }
        (None, None) => None,
    }
}

/// The last record the commit mark says a writer finished, when it lies at or past `end`
/// (where the records end): evidence of records gone.
fn marked_past(dir: &Path, end: u64) -> Option<u64> {
    commit_mark(dir)
        .filter(|&mark| mark > end)
        .map(|mark| mark - 1)
}

/// Findings of a full verification of a log directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Segments found.
    pub segments: u64,
    /// Whole, valid records.
    pub records: u64,
    /// Bytes of segment files.
    pub bytes: u64,
    /// First offset held.
    pub start_offset: u64,
    /// Offset the next append will get.
    pub end_offset: u64,
    /// A torn tail that the next writer will cut: (segment, offset, bytes).
    pub torn_tail: Option<(PathBuf, u64, u64)>,
    /// Records the last segment's index says were written but that are no longer there:
    /// (segment, the end offset, the offset of the last record its index lists). The file
    /// was cut at a record's boundary, or lost its last writes in a crash with
    /// `--fsync never` or an interval; either way those records are gone.
    pub lost_tail: Option<(PathBuf, u64, u64)>,
    /// The commit mark ([`COMMIT_FILE`]), if the log has one that checks.
    pub commit_mark: Option<u64>,
}

/// Reads every frame of every segment and verifies checksums and offsets, without changing
/// anything. Damage before the tail is an error naming segment and offset.
pub fn check(dir: &Path) -> Result<CheckReport, LogError> {
    let bases = list_segments(dir)?;
    let mut report = CheckReport {
        start_offset: bases.first().copied().unwrap_or(0),
        ..Default::default()
    };
    starts_at_zero(dir, report.start_offset)?;
    // Read before the scan: a batch finished while the segments are read moves the mark
    // past what the scan saw, and is not a loss.
    let mark = commit_mark(dir);
    let mut expected = report.start_offset;
    for (i, &base) in bases.iter().enumerate() {
        let path = segment_path(dir, base);
        let last = i + 1 == bases.len();
        if base == expected && being_created(dir, &bases, base) {
            // No record yet (a roll in progress, or a crash during one): the end.
            report.segments += 1;
            break;
        }
        // The gap first: it is where the damage starts, and where an export may stop (a
        // stray segment's damaged header named its own offset, past the gap).
        if base != expected {
            return Err(LogError::Corrupt {
                segment: path,
                offset: expected,
                detail: format!(
                    "segment starts at offset {base} but the previous one ends at {expected}"
                ),
            });
        }
        let file = open_segment(&path, base)?;
        let len = file.metadata().map_err(|e| LogError::io(&path, e))?.len();
        report.segments += 1;
        report.bytes += len;
        let scan = scan_segment(&file, &path, base, SEGMENT_HEADER_BYTES, |_, _, _| {
            report.records += 1
        })?;
        expected = scan.next_offset;
        if last {
            // The index is a hint for reading, and evidence here: an entry names a record
            // it saw written.
            let whole_end = match &scan.end {
                ScanEnd::Torn { position, .. } => *position,
                _ => len,
            };
            if let Some(listed) = listed_past(dir, base, expected, whole_end) {
                report.lost_tail = Some((path.clone(), expected, listed));
            }
        }
        match scan.end {
            ScanEnd::Clean => {}
            ScanEnd::Torn { position, .. } if last => {
                report.torn_tail = Some((path, scan.next_offset, len - position));
            }
            ScanEnd::Torn { detail, .. } | ScanEnd::Corrupt { detail } => {
                return Err(LogError::Corrupt {
                    segment: path,
                    offset: scan.next_offset,
                    detail,
                })
            }
        }
    }
    report.end_offset = expected;
    if report.lost_tail.is_none() {
        // A last segment deleted, or emptied below its header, with its index left.
        if let Some(listed) = orphan_listing(dir, expected) {
            report.lost_tail = Some((segment_path(dir, expected), expected, listed));
        }
    }
    report.commit_mark = mark;
    // A batch a writer finished, whose records are no longer there (all of them: the
    // index sees a loss only up to its last entry).
    if let Some(marked) = mark.filter(|&m| m > expected).map(|m| m - 1) {
        match &mut report.lost_tail {
            Some((_, _, listed)) => *listed = (*listed).max(marked),
            None => {
                let base = bases.iter().rev().find(|&&b| b <= expected).copied();
                report.lost_tail = Some((segment_path(dir, base.unwrap_or(0)), expected, marked));
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes an index of `entries` strictly increasing (offset, position) pairs for the
    /// segment at base 0 in `dir`.
    fn write_index(dir: &Path, entries: u64) {
        let bytes: Vec<u8> = (0..entries)
            .flat_map(|i| {
                let (offset, position) = (i, SEGMENT_HEADER_BYTES + i * 32);
                offset
                    .to_le_bytes()
                    .into_iter()
                    .chain(position.to_le_bytes())
            })
            .collect();
        std::fs::write(index_path(dir, 0), bytes).unwrap();
    }

    /// A batch that rolled past a segment replaced under it meanwhile by an older copy
    /// (shorter than where the batch rolled) sets the segments it rolled to aside as kept
    /// files: the log ends where the copy does, and the next writer keeps the records in
    /// between in `LOST`. The gap left before made every later append and `lhc log check`
    /// call the log corrupt, without a word on the cause (found by hostile testing).
    #[test]
    fn a_batch_that_rolled_past_a_segment_replaced_by_an_older_copy_sets_aside_what_follows() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let options = EmbeddedOptions {
            fsync: FsyncPolicy::Never,
            segment_bytes: 512,
            index_interval_bytes: 128,
            ..EmbeddedOptions::default()
        };
        let record = |i: usize| format!(r#"{{"type":"clock.tick","n":{i}}}"#).into_bytes();
        let first: Vec<Vec<u8>> = (0..3).map(record).collect();
        let refs: Vec<&[u8]> = first.iter().map(Vec::as_slice).collect();
        EmbeddedLog::open(&dir, options.clone())
            .unwrap()
            .append(&refs)
            .unwrap();
        let older = tmp.path().join("older");
        std::fs::copy(segment_path(&dir, 0), &older).unwrap();
        let mut writer = Writer::open(&dir, options.clone()).unwrap();
        let batch: Vec<Vec<u8>> = (3..20).map(record).collect();
        let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
        let start = writer.begin().unwrap();
        let written = writer.write_batch(&refs);
        assert!(written.is_ok());
        let rolled = writer.rolled.clone();
        assert!(!rolled.is_empty(), "the batch rolls");
        // The older copy renamed over the segment the batch rolled from.
        std::fs::rename(&older, segment_path(&dir, 0)).unwrap();
        let err = writer.finish(start, written).unwrap_err();
        assert!(matches!(err, LogError::BatchUncertain(_)), "{err}");
        assert!(err.to_string().contains("set aside"), "{err}");
        drop(writer);
        assert_eq!(list_segments(&dir).unwrap(), vec![0]);
        for base in &rolled {
            let kept = cut_path(&segment_path(&dir, *base), *base);
            assert!(kept.exists(), "{} kept", kept.display());
            assert!(!index_path(&dir, *base).exists());
        }
        // Readers see a lost tail (the mark past the copy's end), not a corrupt log.
        let report = check(&dir).unwrap();
        assert_eq!(report.end_offset, 3);
        assert!(report.lost_tail.is_some(), "{report:?}");
        // The next writer keeps the loss in LOST and goes on at offset 3.
        let log = EmbeddedLog::open(&dir, options).unwrap();
        assert_eq!(log.append(&[b"{}".as_slice()]).unwrap(), vec![3]);
        let lost = lost_records(&dir).unwrap();
        assert!(
            lost.iter().any(|l| l
                .as_ref()
                .is_ok_and(|l| l.first == 3 && l.last_listed == 19)),
            "{lost:?}"
        );
        // A copy taken after the roll leaves the log whole: nothing is set aside.
        drop(log);
        let whole = tmp.path().join("whole");
        let mut writer = Writer::open(
            &dir,
            EmbeddedOptions {
                fsync: FsyncPolicy::Never,
                segment_bytes: 512,
                index_interval_bytes: 128,
                ..EmbeddedOptions::default()
            },
        )
        .unwrap();
        let start = writer.begin().unwrap();
        let written = writer.write_batch(&refs);
        assert!(!writer.rolled.is_empty(), "the batch rolls");
        let base = writer.written[0].0;
        std::fs::copy(segment_path(&dir, base), &whole).unwrap();
        std::fs::rename(&whole, segment_path(&dir, base)).unwrap();
        let err = writer.finish(start, written).unwrap_err();
        assert!(!err.to_string().contains("set aside"), "{err}");
        assert!(check(&dir).is_ok());
    }

    /// Guarded and plain requests queued together share one batch: each guarded one
    /// whose floor is past the end is answered `WentBack` with nothing of it written, the
    /// others are written in order, one after another.
    #[test]
    fn guarded_and_plain_requests_in_one_batch_are_judged_one_by_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let options = EmbeddedOptions {
            fsync: FsyncPolicy::Never,
            ..EmbeddedOptions::default()
        };
        std::fs::create_dir_all(&dir).unwrap();
        let writer = Writer::open(&dir, options).unwrap();
        let (requests, inbox) = mpsc::channel();
        let mut answers = Vec::new();
        for (i, guard) in [
            Guard::None,
            Guard::Past(5),
            Guard::Past(0),
            Guard::None,
            Guard::Past(1),
        ]
        .into_iter()
        .enumerate()
        {
            let (reply, answer) = mpsc::channel();
            requests
                .send(Request {
                    records: vec![format!(r#"{{"type":"clock.tick","n":{i}}}"#).into_bytes()],
                    guard,
                    reply,
                })
                .unwrap();
            answers.push(answer);
        }
        // All queued before the writer wakes: one batch; the writer ends with the queue.
        drop(requests);
        writer.run(inbox);
        let got: Vec<String> = answers
            .iter()
            .map(|a| match a.recv().unwrap() {
                Ok(offsets) => format!("{offsets:?}"),
                Err(LogError::WentBack { floor, end }) => format!("went back {floor} {end}"),
                Err(e) => format!("{e}"),
            })
            .collect();
        assert_eq!(got, ["[0]", "went back 5 0", "[1]", "[2]", "went back 1 0"]);
        assert_eq!(check(&dir).unwrap().end_offset, 3);
    }

    /// A reader's hint comes from an index no larger than its segment allows (one entry
    /// per frame at most): a larger one is ignored unread, whatever it holds, while the
    /// writer's evidence of lost records still reads it.
    #[test]
    fn an_index_larger_than_its_segment_allows_gives_no_hint() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let segment = File::create(segment_path(dir, 0)).unwrap();
        // Room for 10 frames of a header alone: 11 entries at most.
        segment
            .set_len(SEGMENT_HEADER_BYTES + 10 * FRAME_HEADER_BYTES as u64)
            .unwrap();
        write_index(dir, 11);
        let read = read_index(dir, 0, 5, Some(&segment)).unwrap();
        assert_eq!(read.hint, Some((5, SEGMENT_HEADER_BYTES + 5 * 32)));
        assert_eq!(read.last.0, 10);
        write_index(dir, 12);
        assert!(read_index(dir, 0, 5, Some(&segment)).is_none());
        assert_eq!(read_index(dir, 0, 5, None).unwrap().last.0, 11);
    }

    /// Entries across the reader's chunks, a trailing partial entry, and an out-of-order
    /// entry after many good ones.
    #[test]
    fn an_index_is_read_across_chunks_and_refused_at_its_first_disorder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let many = 3 * (64 << 10) / 16 + 7;
        write_index(dir, many);
        let read = read_index(dir, 0, 5000, None).unwrap();
        assert_eq!((read.first.0, read.last.0), (0, many - 1));
        assert_eq!(read.hint.unwrap().0, 5000);
        let mut bytes = std::fs::read(index_path(dir, 0)).unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(index_path(dir, 0), &bytes).unwrap();
        assert_eq!(read_index(dir, 0, 0, None).unwrap().last.0, many - 1);
        bytes.truncate(bytes.len() - 3);
        bytes.extend_from_slice(&3u64.to_le_bytes());
        bytes.extend_from_slice(&(1u64 << 40).to_le_bytes());
        std::fs::write(index_path(dir, 0), &bytes).unwrap();
        assert!(read_index(dir, 0, 0, None).is_none());
        std::fs::write(index_path(dir, 0), b"").unwrap();
        assert!(read_index(dir, 0, 0, None).is_none());
    }
}
