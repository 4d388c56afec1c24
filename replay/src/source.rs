//! Record sources for replay and reports.

use std::collections::VecDeque;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lhc_engine::{decode_record_at, DecodeError, Record, Ts};
use lhc_log::{EmbeddedLog, KafkaLog, KafkaOptions, Log, LogEntry, LogError, LogReader};

/// One record from a source: its offset and the decoded record, or why it is invalid.
pub type Decoded = (u64, Result<Record, DecodeError>);

/// Where to read records from.
#[derive(Clone, Debug)]
pub enum SourceSpec {
    /// A JSONL file or an embedded log directory (told apart by what the path is).
    Path(PathBuf),
    /// A site's partition in Kafka.
    Kafka(KafkaOptions),
}

/// Why records could not be read (not why one record is invalid: that is a [`DecodeError`]).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The path does not exist or cannot be read.
    #[error(transparent)]
    Io(#[from] PathError),
    /// The log backend failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// An instant asked for too long after the log's last record.
    #[error(
        "{at} is more than {days} days after the log's last record applied ({last}; records \
         quarantined do not count): the timers due by then are not fired that far; give an \
         instant within {days} days of it"
    )]
    TooFarAfter {
        /// The instant asked for.
        at: Ts,
        /// The last record's time.
        last: Ts,
        /// The limit, in days.
        days: u64,
    },
    /// An instant asked for too long after the record before it, inside a gap of the log.
    #[error(
        "{at} is inside a gap of the log: more than {days} days after the record before it \
         ({last}; the next is at {next}): the timers due by then are not fired that far; \
         give an instant within {days} days of a record"
    )]
    TooFarInGap {
        /// The instant asked for.
        at: Ts,
        /// The time of the record before it.
        last: Ts,
        /// The time of the record after it.
        next: Ts,
        /// The limit, in days.
        days: u64,
    },
}

/// An OS error on a named file or folder (shared by the errors of this crate that read
/// files, so each names the path the same way).
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct PathError {
    /// The file or folder.
    pub path: PathBuf,
    /// The OS error.
    pub source: std::io::Error,
}

impl PathError {
    /// A closure for `map_err` that names `path` on an OS error.
    pub fn on(path: &Path) -> impl FnOnce(std::io::Error) -> PathError + '_ {
        move |source| PathError {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Reads records in log order, each with its offset.
///
/// Reading and decoding run on a thread of their own, a few batches ahead of the caller:
/// a replay then costs about the larger of decoding and applying instead of their sum.
/// Records still arrive one by one and in log order, so what the caller computes does not
/// depend on the thread.
pub struct Source {
    state: State,
    description: String,
    /// Records handed out so far.
    records: u64,
    /// Of those, the ones the engine quarantined (counted by the replay driver).
    quarantined: u64,
}

enum State {
    /// Not read from yet: the reader is still here, so options can be set.
    Idle(Reader),
    /// Read and decoded ahead on a thread.
    Ahead(Ahead),
    /// The end, or an error was returned.
    Done,
}

/// Told each loss of records an embedded log's files show ([`Source::with_loss_warnings`]).
type LossWarning = Box<dyn FnMut(&str) + Send>;

/// The reading side, on the caller's thread until the first record is asked for.
struct Reader {
    inner: Inner,
    /// Called with the number of records read so far, every `PROGRESS_EVERY` records.
    progress: Option<Box<dyn FnMut(u64) + Send>>,
    /// Called with each loss of records the log's files show, when the reading reaches
    /// the end of an embedded log.
    on_loss: Option<LossWarning>,
    read: u64,
    /// Threads decoding batches (1: the reading thread decodes them itself).
    decoders: usize,
    /// Batches it may be ahead by.
    ahead: usize,
    /// The reading stops after the batch holding the first record later than this.
    until: Option<Ts>,
}

/// Whether `batch` holds a record later than `until` (after it, a cut at `until` needs no
/// more).
fn passes(batch: &[Decoded], until: Option<Ts>) -> bool {
    until.is_some_and(|until| {
        batch
            .iter()
            .any(|(_, record)| record.as_ref().is_ok_and(|r| r.ts() > until))
    })
}

/// Batches of decoded records coming from the reading thread.
struct Ahead {
    batches: Receiver<Result<Vec<Decoded>, SourceError>>,
    batch: std::vec::IntoIter<Decoded>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // Closing the channel first makes the reading thread's next send fail, so it stops.
        let (_, closed) = sync_channel(0);
        drop(std::mem::replace(&mut self.batches, closed));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Records between two progress callbacks.
const PROGRESS_EVERY: u64 = 16_384;
/// Records decoded per batch handed to the caller (amortizes the channel).
const BATCH: usize = 1024;
/// Batches the reading thread may be ahead by (bounds memory).
const BATCHES_AHEAD: usize = 4;
/// Batches a source started ahead to an instant ([`Source::start_until`]) may be ahead by:
/// a little more than the records between two checkpoints by default (150,000), so a query
/// from one decodes all it needs while the checkpoint is rebuilt, and bounded (about
/// 50 MB of decoded records at the seeds' scale) when the checkpoint is far older than the
/// instant.
pub const UNTIL_AHEAD: usize = 160;
/// Most decoding threads a source starts: beyond a machine's cores more only wait, and
/// each holds a batch in flight (memory).
pub const MAX_DECODERS: usize = 64;

enum Inner {
    /// Offset = 0-based index among the file's non-blank lines, as `lhc log import` into an
    /// empty log would assign.
    Jsonl {
        lines: lhc_log::jsonl::JsonlLines<BufReader<File>>,
        path: PathBuf,
        next: u64,
    },
    Log {
        log: Box<dyn Log>,
        reader: Box<dyn LogReader>,
    },
}

impl Source {
    /// Opens a source at its first record.
    pub fn open(spec: &SourceSpec) -> Result<Source, SourceError> {
        match spec {
            SourceSpec::Path(path) if path.is_dir() => {
                let log = EmbeddedLog::open_read_only(path)?;
                Self::from_log(Box::new(log))
            }
            SourceSpec::Path(path) => Self::jsonl(path),
            SourceSpec::Kafka(options) => {
                Self::from_log(Box::new(KafkaLog::open(options.clone())?))
            }
        }
    }

    fn jsonl(path: &Path) -> Result<Source, SourceError> {
        let file = File::open(path).map_err(PathError::on(path))?;
        Ok(Source::idle(
            Inner::Jsonl {
                lines: lhc_log::jsonl::JsonlLines::new(BufReader::with_capacity(1 << 20, file)),
                path: path.to_path_buf(),
                next: 0,
            },
            format!("JSONL file {}", path.display()),
        ))
    }

    /// A source over an open log, from its first offset.
    pub fn from_log(log: Box<dyn Log>) -> Result<Source, SourceError> {
        let start = log.start_offset()?;
        Self::from_log_at(log, start)
    }

    /// A source over an open log from offset `from` (a checkpoint's next offset): the
    /// records before it count as read, so the totals are those of a whole replay.
    pub fn from_log_at(log: Box<dyn Log>, from: u64) -> Result<Source, SourceError> {
        let start = log.start_offset()?;
        let reader = log.reader(from)?;
        let description = log.describe();
        let mut source = Source::idle(Inner::Log { log, reader }, description);
        source.records = from.saturating_sub(start);
        Ok(source)
    }

    /// Counts `n` records quarantined before this source's first one (by the replay a
    /// checkpoint stands for).
    pub fn count_earlier_quarantines(&mut self, n: u64) {
        self.quarantined += n;
    }

    fn idle(inner: Inner, description: String) -> Source {
        Source {
            state: State::Idle(Reader {
                inner,
                progress: None,
                on_loss: None,
                read: 0,
                decoders: 1,
                ahead: BATCHES_AHEAD,
                until: None,
            }),
            description,
            records: 0,
            quarantined: 0,
        }
    }

    /// Where the records come from, for messages.
    pub fn describe(&self) -> &str {
        &self.description
    }

    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Records the replay quarantined so far.
    pub fn quarantined(&self) -> u64 {
        self.quarantined
    }

    /// Counts a quarantined record (the replay driver calls it).
    pub(crate) fn note_quarantined(&mut self) {
        self.quarantined += 1;
    }

    /// Calls `progress` with the number of records read, now and then (for progress bars).
    /// Set it before the first record is read; later, it is ignored.
    pub fn with_progress(mut self, progress: impl FnMut(u64) + Send + 'static) -> Source {
        if let State::Idle(reader) = &mut self.state {
            reader.progress = Some(Box::new(progress));
        }
        self
    }

    /// Calls `warn` with each loss of records the log's own files show when the reading
    /// reaches the end of an embedded log (records its index or a checkpoint says were
    /// written past that end, or losses a writer kept in its `LOST` file), in words an
    /// admin can act on: what is computed from the records left is then incomplete, and
    /// must not be taken silently for the whole story. Set it before the first record is
    /// read; later, it is ignored.
    pub fn with_loss_warnings(mut self, warn: impl FnMut(&str) + Send + 'static) -> Source {
        if let State::Idle(reader) = &mut self.state {
            reader.on_loss = Some(Box::new(warn));
        }
        self
    }

    /// Decodes on `n` threads instead of one (`n` of 0 counts as 1, more than
    /// [`MAX_DECODERS`] as that many). Records still arrive
    /// one by one in log order, each decoded exactly as on one thread, so what the caller
    /// computes does not depend on `n`; only how much decoding runs at once does. Set it
    /// before the first record is read; later, it is ignored.
    pub fn with_decoders(mut self, n: usize) -> Source {
        if let State::Idle(reader) = &mut self.state {
            reader.decoders = n.clamp(1, MAX_DECODERS);
        }
        self
    }

    /// Starts reading and decoding now, on its thread, up to the batch holding the first
    /// record later than `until`, up to [`UNTIL_AHEAD`] batches ahead of the caller: a
    /// query from a checkpoint decodes the records after it while the checkpoint is
    /// rebuilt.
    /// The caller must stop at that record (a cut at `until` does): none after it
    /// follows. Set the other options first.
    pub fn start_until(mut self, until: Ts) -> Source {
        if let State::Idle(mut reader) = std::mem::replace(&mut self.state, State::Done) {
            reader.until = Some(until);
            reader.ahead = UNTIL_AHEAD;
            self.state = State::Ahead(reader.spawn());
        }
        self
    }

    /// The records already decoded that [`Source::next_record`] hands out next (the rest
    /// of the batch in hand; possibly none though more follow).
    pub fn upcoming(&self) -> &[Decoded] {
        match &self.state {
            State::Ahead(ahead) => ahead.batch.as_slice(),
            _ => &[],
        }
    }

    /// The next record decoded, or the decode error located at its offset; `None` at the
    /// end. An error reading the source ends it.
    pub fn next_record(&mut self) -> Result<Option<Decoded>, SourceError> {
        loop {
            match &mut self.state {
                State::Idle(_) => {
                    let State::Idle(reader) = std::mem::replace(&mut self.state, State::Done)
                    else {
                        unreachable!("matched above")
                    };
                    self.state = State::Ahead(reader.spawn());
                }
                State::Ahead(ahead) => {
                    if let Some(decoded) = ahead.batch.next() {
                        self.records += 1;
                        return Ok(Some(decoded));
                    }
                    match ahead.batches.recv() {
                        Ok(Ok(batch)) => ahead.batch = batch.into_iter(),
                        Ok(Err(error)) => {
                            self.state = State::Done;
                            return Err(error);
                        }
                        // The thread ends after sending the last batch.
                        Err(_) => self.state = State::Done,
                    }
                }
                State::Done => return Ok(None),
            }
        }
    }
}

/// A batch read but not decoded yet, and where its decoded records go.
type Job = (Vec<LogEntry>, SyncSender<Vec<Decoded>>);

/// Decodes one batch of entries, in order.
fn decode_batch(entries: Vec<LogEntry>) -> Vec<Decoded> {
    entries
        .into_iter()
        .map(|entry| (entry.offset, decode_record_at(&entry.bytes, entry.offset)))
        .collect()
}

impl Reader {
    /// Moves reading and decoding to a thread that sends batches in order: one decoder
    /// decodes on that thread, more decode on threads of their own.
    ///
    /// With several, each batch read gets a channel of its own for its decoded records,
    /// and the reading thread forwards those channels' contents in the order it read the
    /// batches, so no batch overtakes another whichever decoder finishes first.
    fn spawn(mut self) -> Ahead {
        let (send, batches) = sync_channel(self.ahead);
        let (decoders, until) = (self.decoders, self.until);
        let thread = std::thread::Builder::new()
            .name("lhc-source".into())
            .spawn(move || {
                let (jobs, queue) = sync_channel::<Job>(decoders);
                let queue = Arc::new(Mutex::new(queue));
                // One decoder is the reading thread itself: no hand-over.
                let threads = if decoders > 1 { decoders } else { 0 };
                let workers: Vec<_> = (0..threads)
                    .map(|i| {
                        let queue = Arc::clone(&queue);
                        std::thread::Builder::new()
                            .name(format!("lhc-decode-{i}"))
                            .spawn(move || loop {
                                // The lock is held only to take a job, not to decode it.
                                let job = queue.lock().map(|q| q.recv());
                                let Ok(Ok((entries, done))) = job else {
                                    return; // no more batches
                                };
                                if done.send(decode_batch(entries)).is_err() {
                                    return; // the reader stopped
                                }
                            })
                    })
                    // A thread the system refuses is one decoder fewer, not a failure.
                    .map_while(Result::ok)
                    .collect();
                let decoders = workers.len();
                // Batches handed to the decoders, oldest first.
                let mut pending: VecDeque<Receiver<Vec<Decoded>>> = VecDeque::new();
                // Sends a batch; false when no more is to be sent (the caller stopped
                // reading, or the batch passed `until`).
                let hand = |batch: Vec<Decoded>| -> bool {
                    let last = passes(&batch, until);
                    send.send(Ok(batch)).is_ok() && !last
                };
                let forward = |pending: &mut VecDeque<Receiver<Vec<Decoded>>>| -> bool {
                    let Some(next) = pending.pop_front() else {
                        return true;
                    };
                    match next.recv() {
                        Ok(batch) => hand(batch),
                        Err(_) => false, // a decoder died: stop rather than skip a batch
                    }
                };
                loop {
                    let (batch, end) = self.read_batch();
                    if matches!(end, Some(Ok(()))) {
                        // Said before the last records are handed over, so it is out
                        // before the caller's answer.
                        self.report_losses();
                    }
                    if !batch.is_empty() && decoders == 0 {
                        // One decoder, or no decoding thread could start: decode here.
                        if !hand(decode_batch(batch)) {
                            return; // the caller stopped reading, or `until` was passed
                        }
                    } else if !batch.is_empty() {
                        let (done, decoded) = sync_channel(1);
                        if jobs.send((batch, done)).is_err() {
                            return;
                        }
                        pending.push_back(decoded);
                    }
                    // Keep every decoder busy, and no more batches in flight than that.
                    while pending.len() > decoders || (end.is_some() && !pending.is_empty()) {
                        if !forward(&mut pending) {
                            return; // the caller stopped reading
                        }
                    }
                    if let Some(end) = end {
                        drop(jobs);
                        for worker in workers {
                            let _ = worker.join();
                        }
                        if let Err(error) = end {
                            let _ = send.send(Err(error));
                        }
                        return;
                    }
                }
            })
            .expect("spawning the source's reading thread");
        Ahead {
            batches,
            batch: Vec::new().into_iter(),
            thread: Some(thread),
        }
    }

    /// At the end of an embedded log: tells `on_loss` of each loss its files show.
    fn report_losses(&mut self) {
        let (Some(warn), Inner::Log { log, reader }) = (self.on_loss.as_mut(), &self.inner) else {
            return;
        };
        let Some(dir) = log.local_dir() else {
            return;
        };
        for loss in losses(dir, log.as_ref(), reader.position()) {
            warn(&loss);
        }
    }

    /// Reads up to [`BATCH`] entries; with them, `Some` when the source ended after them
    /// (`Err`: with the error that ended it), `None` when more may follow.
    fn read_batch(&mut self) -> (Vec<LogEntry>, Option<Result<(), SourceError>>) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            match self.next_entry() {
                Ok(Some(entry)) => {
                    batch.push(entry);
                    if batch.len() == BATCH {
                        return (batch, None);
                    }
                }
                Ok(None) => return (batch, Some(Ok(()))),
                Err(error) => return (batch, Some(Err(error))),
            }
        }
    }

    /// The next record's bytes and offset; `None` at the end.
    fn next_entry(&mut self) -> Result<Option<LogEntry>, SourceError> {
        let entry = self.read_entry()?;
        if entry.is_some() {
            self.read += 1;
            if self.read.is_multiple_of(PROGRESS_EVERY) {
                if let Some(progress) = self.progress.as_mut() {
                    progress(self.read);
                }
            }
        }
        Ok(entry)
    }

    fn read_entry(&mut self) -> Result<Option<LogEntry>, SourceError> {
        match &mut self.inner {
            Inner::Jsonl { lines, path, next } => match lines.next() {
                None => Ok(None),
                Some(Err(source)) => Err(PathError::on(path)(source).into()),
                Some(Ok((_, line))) => {
                    // Offsets count non-blank lines (as an import into an empty log would);
                    // invalid UTF-8 is left to the decoder: a quarantine there.
                    let offset = *next;
                    *next += 1;
                    Ok(Some(LogEntry {
                        offset,
                        bytes: line,
                    }))
                }
            },
            Inner::Log { reader, .. } => Ok(reader.next(Duration::ZERO)?),
        }
    }
}

/// The losses of records the files of the embedded log in `dir` show, its records ending
/// at offset `end`, in words (none for a healthy log): what `lhc log check` names.
pub fn losses(dir: &Path, log: &dyn Log, end: u64) -> Vec<String> {
    let mut found = Vec::new();
    // A writer appending meanwhile (the log grew past `end`) makes an index entry or a
    // checkpoint past `end` look like evidence of a loss: only a log that still ends there
    // is judged on them.
    let grew = || log.end_offset().is_ok_and(|now| now > end);
    if let Some((segment, end, listed)) = lhc_log::embedded::lost_past(dir, end).filter(|_| !grew())
    {
        found.push(format!(
            "records lost: {} ends at offset {end}, but the log's index or commit mark \
             names a record at offset {listed}: records {end}..={listed} (at least) were written and are gone \
             (the file was cut, an older copy put in its place, or a crash lost writes not yet \
             on disk); this answer comes \
             from the records before offset {end} only. Restore the log from a copy; `lhc \
             log check` names the loss",
            segment.display()
        ));
    }
    let lost_file = dir.join(lhc_log::embedded::LOST_FILE);
    match lhc_log::embedded::lost_records(dir) {
        Ok(kept) => {
            for lost in kept {
                found.push(match lost {
                    Ok(lost) => format!(
                        "records lost: records {}..={} (at least) of {} were gone when a \
                         writer came to append after them, and their offsets go to the \
                         records appended since (kept in {}): this answer does not see them. \
                         Remove that file once the loss is dealt with",
                        lost.first,
                        lost.last_listed,
                        lost.segment.display(),
                        lost_file.display()
                    ),
                    Err(line) => format!(
                        "records lost: {} holds a line that does not parse: {line:?}",
                        lost_file.display()
                    ),
                });
            }
        }
        Err(error) => found.push(format!("records lost: {error}")),
    }
    let covered = |covers: u64| {
        lhc_log::embedded::lost_covers(dir, end, covers.saturating_sub(1)).unwrap_or(false)
    };
    match crate::checkpoint::beyond(dir, log, end) {
        Ok(Some((covers, path))) if !covered(covers) && !grew() => found.push(format!(
            "records lost: checkpoint {} covers {covers} records, but the log holds records up \
             to offset {end}: records {end}..{covers} are gone; this answer comes from the \
             records before offset {end} only. Restore the log from a copy",
            path.display()
        )),
        Ok(_) => {}
        Err(error) => found.push(format!("the checkpoints could not be read: {error}")),
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: &str = r#"{"ts":"2026-01-05T09:00:00.000Z","type":"clock.tick"}"#;

    fn collect(spec: &SourceSpec) -> Vec<Decoded> {
        let mut source = Source::open(spec).unwrap();
        let mut out = Vec::new();
        while let Some(item) = source.next_record().unwrap() {
            out.push(item);
        }
        out
    }

    #[test]
    fn jsonl_offsets_count_records_and_bad_lines_keep_theirs() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.jsonl");
        std::fs::write(
            &path,
            format!("{TICK}\n\n{{\"type\":\"clock.tick\"}}\n{TICK}\n"),
        )
        .unwrap();
        let items = collect(&SourceSpec::Path(path));
        assert_eq!(items.len(), 3);
        assert!(items[0].1.is_ok());
        let error = items[1].1.as_ref().unwrap_err();
        assert_eq!(
            (items[1].0, error.offset, error.path.as_str()),
            (1, Some(1), "ts")
        );
        assert_eq!(items[2].0, 2);
    }

    #[test]
    fn records_read_ahead_arrive_in_order_across_batches_and_stop_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.jsonl");
        let n = BATCH * BATCHES_AHEAD * 3 + 7;
        std::fs::write(&path, format!("{TICK}\n").repeat(n)).unwrap();
        let spec = SourceSpec::Path(path);
        let offsets: Vec<u64> = collect(&spec).into_iter().map(|(o, _)| o).collect();
        assert_eq!(offsets, (0..n as u64).collect::<Vec<_>>());
        // A caller that stops early (a cut, a sink error) drops the source: the reading
        // thread, blocked on a full channel, ends and is joined.
        let mut source = Source::open(&spec).unwrap();
        assert_eq!(source.next_record().unwrap().unwrap().0, 0);
        drop(source);
    }

    /// Started ahead to an instant, with one decoder or several: the records up to and
    /// including the batch holding the first later one, in order, as a plain source hands
    /// them out (a decode error, whose time is unknown, does not stop it); then the end.
    #[test]
    fn a_source_started_until_an_instant_reads_to_the_first_later_record() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.jsonl");
        let t0 = Ts::parse("2026-01-05T09:00:00Z").unwrap();
        let ts = |i: usize| Ts(t0.millis() + i as i64);
        let n = BATCH * 20 + 3;
        let later = BATCH * 11 + 17; // the first record after the instant
        let lines: Vec<String> = (0..n)
            .map(|i| match i {
                _ if i == later - 1 => "{}".to_string(),
                _ => format!(r#"{{"ts":"{}","type":"clock.tick"}}"#, ts(i.min(later))),
            })
            .collect();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let until = ts(later - 1);
        let plain = collect(&SourceSpec::Path(path.clone()));
        for decoders in [1, 3] {
            let mut source = Source::open(&SourceSpec::Path(path.clone()))
                .unwrap()
                .with_decoders(decoders)
                .start_until(until);
            let mut got = Vec::new();
            while let Some(item) = source.next_record().unwrap() {
                got.push(item);
            }
            let end = (later / BATCH + 1) * BATCH;
            assert_eq!(got.len(), end, "{decoders} decoder(s)");
            assert!(got.len() > later && got.len() < n);
            assert_eq!(format!("{got:?}"), format!("{:?}", &plain[..got.len()]));
        }
    }

    #[test]
    fn upcoming_shows_the_records_handed_out_next() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.jsonl");
        let n = BATCH * 2 + 5;
        std::fs::write(&path, format!("{TICK}\n").repeat(n)).unwrap();
        let mut source = Source::open(&SourceSpec::Path(path)).unwrap();
        assert!(source.upcoming().is_empty(), "nothing read yet");
        let mut shown = 0;
        let mut expected: Vec<u64> = Vec::new();
        while let Some((offset, _)) = source.next_record().unwrap() {
            if let Some(next) = expected.first() {
                assert_eq!(offset, *next, "upcoming said {next} came next");
                expected.remove(0);
            }
            if expected.is_empty() {
                expected = source.upcoming().iter().map(|(o, _)| *o).collect();
                shown += expected.len();
            }
        }
        assert!(expected.is_empty());
        // Each batch's records but its first are shown before they are handed out.
        assert_eq!(shown, n - n.div_ceil(BATCH));
    }

    #[test]
    fn several_decoders_hand_out_what_one_does_in_the_same_order_and_stop_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.jsonl");
        let n = BATCH * 9 + 13;
        let text: String = (0..n)
            .map(|i| {
                if i % 1000 == 7 {
                    "{}\n".to_string()
                } else {
                    format!("{TICK}\n")
                }
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        let spec = SourceSpec::Path(path);
        let read = |decoders: usize| {
            let mut source = Source::open(&spec).unwrap().with_decoders(decoders);
            let mut out = Vec::new();
            while let Some((offset, record)) = source.next_record().unwrap() {
                out.push((offset, record.map_err(|e| (e.offset, e.path))));
            }
            (out, source.records())
        };
        let (one, count) = read(1);
        assert_eq!(count, n as u64);
        assert_eq!(one.len(), n);
        assert_eq!(
            one.iter().filter(|(_, r)| r.is_err()).count(),
            n.div_ceil(1000)
        );
        for decoders in [2, 3, 8] {
            let (many, count) = read(decoders);
            assert_eq!(count, n as u64);
            assert!(many == one, "{decoders} decoders");
        }
        // A caller that stops early drops the source: the reading thread and the
        // decoders end.
        let mut source = Source::open(&spec).unwrap().with_decoders(4);
        assert_eq!(source.next_record().unwrap().unwrap().0, 0);
        drop(source);
    }

    #[test]
    fn a_directory_is_read_as_an_embedded_log() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        {
            let log = EmbeddedLog::open(&dir, Default::default()).unwrap();
            log.append(&[TICK.as_bytes(), b"{}", TICK.as_bytes()])
                .unwrap();
        }
        let items = collect(&SourceSpec::Path(dir));
        let offsets: Vec<u64> = items.iter().map(|i| i.0).collect();
        assert_eq!(offsets, vec![0, 1, 2]);
        assert_eq!(items[1].1.as_ref().unwrap_err().path, "type");
    }

    /// Reads `dir` to its end, returning the loss warnings the source gave.
    fn warnings_reading(dir: &Path) -> Vec<String> {
        let said = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&said);
        let mut source = Source::open(&SourceSpec::Path(dir.to_path_buf()))
            .unwrap()
            .with_loss_warnings(move |w| sink.lock().unwrap().push(w.to_string()));
        while source.next_record().unwrap().is_some() {}
        drop(source);
        let said = said.lock().unwrap().clone();
        said
    }

    #[test]
    fn a_log_whose_tail_was_cut_is_read_with_a_warning_naming_the_loss() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        {
            let log = EmbeddedLog::open(&dir, Default::default()).unwrap();
            let records: Vec<&[u8]> = vec![TICK.as_bytes(); 400];
            log.append(&records).unwrap();
        }
        assert_eq!(warnings_reading(&dir), Vec::<String>::new(), "healthy");
        // Cut the segment at a record the index lists (its entries: offset, position).
        let index = std::fs::read(dir.join("00000000000000000000.idx")).unwrap();
        let entry = |i: usize| {
            let at = |k: usize| u64::from_le_bytes(index[k..k + 8].try_into().unwrap());
            (at(16 * i), at(16 * i + 8))
        };
        let (cut_at, position) = entry(1);
        // The commit mark names the last record written (the index only its last entry).
        let last_listed = 399;
        let segment = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("00000000000000000000.log"))
            .unwrap();
        segment.set_len(position).unwrap();
        let warnings = warnings_reading(&dir);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(&format!(
                "ends at offset {cut_at}, but the log's index or commit mark names a record \
                 at offset {last_listed}"
            )),
            "{warnings:?}"
        );
        // A writer going on keeps the loss in LOST: readers still name it.
        {
            let log = EmbeddedLog::open(&dir, Default::default()).unwrap();
            log.append(&[TICK.as_bytes()]).unwrap();
        }
        let warnings = warnings_reading(&dir);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(&format!("records {cut_at}..={last_listed}"))
                && warnings[0].contains("LOST"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_missing_path_is_an_error_naming_it() {
        let error = Source::open(&SourceSpec::Path("/nonexistent/x.jsonl".into()))
            .err()
            .unwrap();
        assert!(
            error.to_string().contains("/nonexistent/x.jsonl"),
            "{error}"
        );
    }
}
