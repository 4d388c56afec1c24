//! The fold thread: the only writer of the engine and of the cache snapshot.
//!
//! Invariant: records are applied in one total order — the site log's on a direct log; in
//! Kafka mode the order in which they reached this node (from the topic, or locally while
//! Kafka was unreachable), recorded in the journal in the same `WriteBatch` as the state
//! they produced. A record this node wrote locally is applied once: when it comes back
//! from the topic it is recognized by its hash and only cleared from the outbox.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lhc_engine::engine::snake;
use lhc_engine::{decode_record_at, Output, Record};
use lhc_log::LogReader;

use super::{record_hash, Applied, LaunchAnswer, LocalBatch, Shared};
use crate::store::{CommitJob, Folder, NodeError, Store};

/// Most records applied between two looks at the clock and the local queue.
const BURST: usize = 512;

/// How often an idle fold asks whether the embedded log still reaches its position.
const END_CHECK: Duration = Duration::from_secs(1);

/// Where the fold's records come from. One lives per node, so its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Source {
    /// The site log itself.
    Direct(Box<dyn LogReader>),
    /// Kafka, plus records written locally while it was unreachable.
    Kafka {
        /// Made once the site's partition is known (the node may start without Kafka).
        reader: Option<lhc_log::kafka::KafkaTailReader>,
        local: Receiver<LocalBatch>,
        /// Hashes of every local record (never applied twice).
        local_hashes: HashSet<[u8; 16]>,
        /// Local records not yet seen back: hash → engine offset.
        outbox: BTreeMap<[u8; 16], u64>,
    },
}

/// Runs until the node stops: applies, answers waiters, commits at most every
/// `commit_interval`, then tells the publisher.
pub(crate) fn fold_loop(
    shared: &Arc<Shared>,
    mut folder: Folder<Arc<Store>>,
    committed: std::sync::mpsc::Sender<()>,
    local: Option<Receiver<LocalBatch>>,
) -> Result<(), NodeError> {
    let mut source = match (&shared.kafka, local) {
        (Some(link), Some(local)) => {
            let store = folder.store();
            let mut local_hashes = HashSet::new();
            let mut by_offset = BTreeMap::new();
            for (hash, offset) in store.local_hashes()? {
                local_hashes.insert(hash);
                by_offset.insert(offset, hash);
            }
            let mut outbox = BTreeMap::new();
            let mut unseen = link.unseen.lock().expect("unseen");
            let mut after = None;
            loop {
                let chunk = store.outbox(after, 4096)?;
                let Some(&(last, _)) = chunk.last() else {
                    break;
                };
                for (offset, bytes) in chunk {
                    if let Some(hash) = by_offset.get(&offset) {
                        outbox.insert(*hash, offset);
                        unseen.insert(offset, bytes);
                    }
                }
                after = Some(last);
            }
            drop(unseen);
            Source::Kafka {
                reader: None,
                local,
                local_hashes,
                outbox,
            }
        }
        _ => Source::Direct(shared.log.reader(folder.next())?),
    };
    // Serializing and writing the state happens on the committer thread, so answers never
    // wait for a commit; the bound makes the fold wait if the disk falls behind.
    let (jobs, pending_jobs) = std::sync::mpsc::sync_channel::<CommitJob>(2);
    let store = folder.store_handle();
    let committer = std::thread::Builder::new()
        .name("lhc-commit".into())
        .spawn(move || -> Result<(), NodeError> {
            for job in pending_jobs {
                store.write_job(&job)?;
                let _ = committed.send(());
            }
            Ok(())
        })
        .map_err(|e| NodeError::Commit(e.to_string()))?;
    // Checkpoints are written on a thread of their own, from copies of the engine the
    // fold hands over and never waits for (`crate::checkpoints`).
    let policy = shared.config.checkpoints.clone();
    let commits_over = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checkpointer = if policy.every > 0 {
        let (to, checkpoints) = std::sync::mpsc::sync_channel(1);
        folder.take_checkpoints_when_free(policy.every, to);
        let store = folder.store_handle();
        let log = shared.kafka.is_none().then(|| shared.log.clone());
        let over = commits_over.clone();
        let thread = std::thread::Builder::new()
            .name("lhc-checkpoint".into())
            .spawn(move || {
                let records = match &log {
                    Some(log) => crate::checkpoints::Records::Log(&**log),
                    None => crate::checkpoints::Records::Journal,
                };
                crate::checkpoints::run(&store, &policy, &records, checkpoints, &|| {
                    over.load(Ordering::SeqCst)
                });
            })
            .map_err(|e| NodeError::Commit(e.to_string()))?;
        Some(thread)
    } else {
        None
    };
    // The idle fold's look at the log's end (went back, replaced under it) reads files for
    // milliseconds: it runs on a thread of its own, so launches never wait behind it. Not
    // joined: a look blocked on the log's disk must not keep the node from stopping.
    let (looks, watch) = std::sync::mpsc::sync_channel::<EndLook>(1);
    let watched = Arc::clone(shared);
    let watcher = std::thread::Builder::new()
        .name("lhc-end-watch".into())
        .spawn(move || {
            for look in watch {
                let looked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    watch_end(&watched, look)
                }));
                if looked.is_err() {
                    // Never silently: without its looks the node could not tell a log
                    // that went back under it.
                    watched.health.fail(
                        "the node's look at the log's end failed unexpectedly (a bug; see \
                         its log): it can no longer tell whether the records it applied \
                         are still in the log; restart it"
                            .into(),
                    );
                    return;
                }
            }
        });
    let result = match watcher {
        Ok(_) => fold_on(shared, &mut folder, &mut source, &jobs, Some(&looks)),
        // No thread for it: the fold looks itself.
        Err(_) => fold_on(shared, &mut folder, &mut source, &jobs, None),
    };
    // Ends the watcher once its look in hand, if any, returns.
    drop(looks);
    if result.is_err() {
        // What was applied before the error (a damaged record, a lost Kafka reader) is
        // committed before the fold stops: in Kafka mode it holds this node's own records,
        // already answered and in no log yet. (If the committer is what stopped, this job
        // goes nowhere, as the ones before it.)
        if let Some(job) = folder.commit_job() {
            let _ = jobs.send(job);
        }
    }
    drop(jobs);
    let committed = committer
        .join()
        .unwrap_or_else(|_| Err(NodeError::Commit("the committer panicked".into())));
    // The store stays open until the checkpoint in hand is written (or given up: no commit
    // will make its records readable any more).
    commits_over.store(true, Ordering::SeqCst);
    drop(folder);
    if let Some(thread) = checkpointer {
        let _ = thread.join();
    }
    // When both failed, the committer's error is the cause (a full disk, a file too large):
    // the fold only saw that the committer stopped.
    match (result, committed) {
        (_, Err(cause)) => Err(cause),
        (result, Ok(())) => result,
    }
}

/// What the idle fold asks the log's end to be checked against: its next offset and the
/// last record it applied (offset, hash of its bytes).
#[derive(Clone, Copy)]
struct EndLook {
    next: u64,
    last: Option<(u64, u128)>,
}

/// Watches the embedded log's `LOST` file: a writer keeps there every loss it finds
/// before it gives the lost offsets to other records. A loss below where the fold stood
/// at the previous look means records this node applied are gone and others may hold
/// their offsets: cut in place and refilled with as many records between two looks at
/// the log's end, the fold read on at the same byte position, the offsets lined up, and
/// the node stayed UP with records the log no longer holds (found by hostile testing).
/// Looked at after each burst of records and each idle second: one `stat` while `LOST`
/// does not grow.
struct LostWatch {
    /// `LOST`'s identity at the previous look (inode, length, modification time).
    file: Option<(u64, u64, std::time::SystemTime)>,
    /// The losses seen in it so far (removed or cut by someone who dealt with them, the
    /// lines left are not judged again; a new one is, whatever became of the file).
    seen: std::collections::HashSet<(std::path::PathBuf, u64, u64)>,
    /// The fold's next offset at the previous look.
    next: u64,
}

impl LostWatch {
    /// Losses already kept when the node starts are not this run's to judge.
    fn start(log: &dyn lhc_log::Log, next: u64) -> LostWatch {
        let mut watch = LostWatch {
            file: None,
            seen: Default::default(),
            next,
        };
        watch.file = lost_file(log);
        watch.new_losses(log);
        watch
    }

    /// Losses in `LOST` not seen before (and now seen).
    fn new_losses(&mut self, log: &dyn lhc_log::Log) -> Vec<lhc_log::LostRecords> {
        let Some(dir) = log.local_dir() else {
            return Vec::new();
        };
        let Ok(lines) = lhc_log::embedded::lost_records(dir) else {
            // Read again at the next look.
            self.file = None;
            return Vec::new();
        };
        lines
            .into_iter()
            .flatten()
            .filter(|lost| {
                self.seen
                    .insert((lost.segment.clone(), lost.first, lost.last_listed))
            })
            .collect()
    }

    /// Why the node cannot decide, when a loss kept since the previous look reaches
    /// below where the fold stood then.
    fn look(&mut self, log: &dyn lhc_log::Log, next: u64) -> Option<String> {
        let before = std::mem::replace(&mut self.next, next);
        let now = lost_file(log);
        // (Replaced, cut or rewritten in place to the same length: read again.)
        if now.is_none() || now == self.file {
            self.file = now;
            return None;
        }
        self.file = now;
        let gone = self
            .new_losses(log)
            .into_iter()
            .filter(|lost| lost.first < before)
            .min_by_key(|lost| lost.first)?;
        Some(format!(
            "{} lost records {}..={} (a writer found them gone and appended after them: \
             see {} in the log directory), and this node had applied records up to offset \
             {}: records it applied are gone from the log, and their offsets may hold other \
             records now; restore the log from a copy, then fold it again into an empty \
             --data",
            log.describe(),
            gone.first,
            gone.last_listed,
            lhc_log::embedded::LOST_FILE,
            before.saturating_sub(1)
        ))
    }
}

/// `LOST`'s inode, length and modification time, if the log is embedded and the file a
/// regular one.
fn lost_file(log: &dyn lhc_log::Log) -> Option<(u64, u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let dir = log.local_dir()?;
    let meta = std::fs::symlink_metadata(dir.join(lhc_log::embedded::LOST_FILE))
        .ok()
        .filter(|m| m.is_file())?;
    Some((meta.ino(), meta.len(), meta.modified().ok()?))
}

/// Fails the node when the log went back under it (records it applied are gone) or holds
/// other records where it applied some.
fn watch_end(shared: &Shared, look: EndLook) {
    // The last error of a look, said once until it changes (a look runs each second
    // while the fold is idle): a log whose end cannot be read is never judged silently.
    static LAST_ERROR: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let end = match shared.log.written_end() {
        Ok(end) => {
            LAST_ERROR.lock().map(|mut e| e.take()).ok();
            end
        }
        Err(e) => {
            let e = e.to_string();
            let mut last = LAST_ERROR.lock().unwrap_or_else(|p| p.into_inner());
            if last.as_deref() != Some(e.as_str()) {
                tracing::warn!(
                    "cannot read where {} ends ({e}); whether records this node applied are \
                     still in it is not known until it can",
                    shared.log.describe()
                );
                *last = Some(e);
            }
            return;
        }
    };
    if end < look.next {
        shared
            .health
            .fail(super::log_went_back(&*shared.log, end, look.next));
    } else if let Some(offset) = look
        .last
        .and_then(|last| replaced_under(&*shared.log, last, end))
    {
        shared
            .health
            .fail(super::log_replaced(&*shared.log, offset));
    }
}

/// The offset of the last record the fold applied when the log now holds another record
/// there: its tail was cut and records appended again, as many as were cut, between two
/// looks at its end (the end alone does not show it).
fn replaced_under(log: &dyn lhc_log::Log, (offset, hash): (u64, u128), end: u64) -> Option<u64> {
    let start = log.start_offset().ok()?;
    let bytes = lhc_log::checkpoint::record_bytes_in(log, offset, start..end).ok()??;
    (xxhash_rust::xxh3::xxh3_128(&bytes) != hash).then_some(offset)
}

fn fold_on(
    shared: &Shared,
    folder: &mut Folder<Arc<Store>>,
    source: &mut Source,
    jobs: &std::sync::mpsc::SyncSender<CommitJob>,
    end_watch: Option<&std::sync::mpsc::SyncSender<EndLook>>,
) -> Result<(), NodeError> {
    if let Source::Kafka { .. } = source {
        // A record committed part-way (a long gap's timers, in steps) is in the journal at
        // the next offset, and the topic position committed with it is past it: it is
        // finished first, or it would never be applied.
        let after = folder.next().checked_sub(1);
        for (offset, bytes) in folder.store().journal(after, 1)? {
            if offset == folder.next() {
                tracing::info!(offset, "finishing the record a commit left part-way");
                apply_entry(shared, folder, &bytes, Some(record_hash(&bytes)), jobs)?;
                shared.applied.send_replace(folder.next());
            }
        }
    }
    // Only now: the node is caught up (and serves) once this is set and its position in
    // the site log is at the end, and that position is already past a record finished
    // just above.
    shared.fold_ready.store(true, Ordering::SeqCst);
    let mut last_commit = Instant::now();
    let mut last_end_check = Instant::now();
    let mut lost_watch = LostWatch::start(&*shared.log, folder.next());
    let interval = shared.config.commit_interval;
    loop {
        let seen = shared.bell.count();
        let applied = match source {
            Source::Direct(reader) => {
                let mut applied = 0;
                while applied < BURST {
                    let next = match reader.next(Duration::ZERO) {
                        Ok(next) => next,
                        Err(e @ lhc_log::LogError::Corrupt { .. }) => {
                            // A tail cut in place and refilled out of line reads as damage
                            // where the fold stands: said as what it is when a writer kept
                            // the loss, or the log now ends below the fold.
                            let why = lost_watch.look(&*shared.log, folder.next()).or_else(|| {
                                let end = shared.log.written_end().ok()?;
                                (end < folder.next())
                                    .then(|| super::log_went_back(&*shared.log, end, folder.next()))
                            });
                            if let Some(why) = why {
                                shared.health.fail(why);
                            }
                            return Err(e.into());
                        }
                        Err(e) => return Err(e.into()),
                    };
                    let Some(entry) = next else {
                        break;
                    };
                    apply_entry(shared, folder, &entry.bytes, None, jobs)?;
                    applied += 1;
                }
                if applied > 0 || last_end_check.elapsed() >= END_CHECK {
                    if let Some(why) = lost_watch.look(&*shared.log, folder.next()) {
                        shared.health.fail(why);
                    }
                }
                if applied > 0 {
                    shared.site_pos.send_replace(folder.next());
                } else if last_end_check.elapsed() >= END_CHECK {
                    // Idle: a log that went back under the node (its tail cut, an older
                    // copy restored) leaves the reader waiting past its end for good, and
                    // records appended meanwhile take offsets the fold has passed.
                    last_end_check = Instant::now();
                    let look = EndLook {
                        next: folder.next(),
                        last: folder.last_noted(),
                    };
                    match end_watch.map(|watch| watch.try_send(look)) {
                        // Looked at, or a look already waits: this one is skipped.
                        Some(Ok(())) | Some(Err(TrySendError::Full(_))) => {}
                        // No watcher (none started, or it stopped): the fold looks itself.
                        None | Some(Err(TrySendError::Disconnected(_))) => watch_end(shared, look),
                    }
                }
                applied
            }
            Source::Kafka {
                reader,
                local,
                local_hashes,
                outbox,
            } => {
                let link = shared.kafka.as_ref().expect("kafka mode");
                let mut applied = 0;
                while let Ok(batch) = local.try_recv() {
                    for (bytes, reply) in batch.records.into_iter().zip(batch.replies) {
                        let hash = record_hash(&bytes);
                        let offset = folder.next();
                        let journal = folder.journal_mut();
                        journal.local.push((hash, offset));
                        journal.outbox_put.push((offset, bytes.clone()));
                        journal.journal.push((offset, bytes.clone()));
                        local_hashes.insert(hash);
                        outbox.insert(hash, offset);
                        link.unseen
                            .lock()
                            .expect("unseen")
                            .insert(offset, bytes.clone());
                        apply_entry(shared, folder, &bytes, Some(hash), jobs)?;
                        let _ = reply.send(Ok(offset));
                        applied += 1;
                    }
                }
                if reader.is_none() && link.kafka.known_partition().is_some() {
                    *reader = Some(link.kafka.tail_reader(link.next.load(Ordering::SeqCst))?);
                }
                let mut read = 0;
                while let Some(reader) = reader.as_mut().filter(|_| read < BURST) {
                    // The tail reader never blocks on a lost broker.
                    let Some(entry) = reader.next(Duration::ZERO)? else {
                        break;
                    };
                    read += 1;
                    folder.journal_mut().kafka_next = Some(entry.offset + 1);
                    link.next.store(entry.offset + 1, Ordering::SeqCst);
                    let hash = record_hash(&entry.bytes);
                    if local_hashes.contains(&hash) {
                        // Ours, published after an outage: applied when it was written.
                        if let Some(offset) = outbox.remove(&hash) {
                            folder.journal_mut().outbox_delete.push(offset);
                            link.unseen.lock().expect("unseen").remove(&offset);
                        }
                        continue;
                    }
                    let offset = folder.next();
                    folder
                        .journal_mut()
                        .journal
                        .push((offset, entry.bytes.clone()));
                    apply_entry(shared, folder, &entry.bytes, Some(hash), jobs)?;
                    applied += 1;
                }
                // Records of other sites sharing the partition are skipped by the reader:
                // its position moves past them, and so does this site's, or a partition
                // that ends with another site's records would never look caught up.
                if let Some(position) = reader.as_ref().map(|r| r.position()) {
                    if position > link.next.load(Ordering::SeqCst) {
                        link.next.store(position, Ordering::SeqCst);
                        folder.journal_mut().kafka_next = Some(position);
                        read = read.max(1);
                    }
                }
                if read > 0 {
                    shared
                        .site_pos
                        .send_replace(link.next.load(Ordering::SeqCst));
                }
                applied + read
            }
        };
        if applied > 0 {
            shared.applied.send_replace(folder.next());
        }
        let due = last_commit.elapsed() >= interval || folder.uncommitted() >= 4096;
        let stopping = shared.stopping.load(Ordering::SeqCst);
        if folder.dirty() && (due || stopping) {
            let started = Instant::now();
            if let Some(job) = folder.commit_job() {
                if jobs.send(job).is_err() {
                    return Err(NodeError::Commit("the committer stopped".into()));
                }
            }
            let took = started.elapsed();
            if took > Duration::from_millis(5) {
                tracing::debug!(ms = took.as_millis() as u64, "slow commit preparation");
            }
            last_commit = Instant::now();
        }
        // Stopped before the catch-up was done: what is folded is committed; the rest of
        // the log waits for the next start rather than delaying this stop.
        if stopping && !folder.dirty() && !shared.caught_up.load(Ordering::SeqCst) {
            return Ok(());
        }
        if applied == 0 {
            if stopping && !folder.dirty() {
                return Ok(());
            }
            // Other processes' appends are seen by polling; ours ring the bell.
            shared.bell.wait(seen, Duration::from_millis(5));
        }
    }
}

/// Applies one record at the folder's next offset and answers whoever waits for it. A
/// record after a long gap in LHC mode is applied in steps, each handed to the committer
/// (see `Folder::apply_decoded`).
fn apply_entry(
    shared: &Shared,
    folder: &mut Folder<Arc<Store>>,
    bytes: &[u8],
    hash: Option<[u8; 16]>,
    jobs: &std::sync::mpsc::SyncSender<CommitJob>,
) -> Result<(), NodeError> {
    let offset = folder.next();
    folder.note_bytes(offset, bytes);
    let record = decode_record_at(bytes, offset);
    let mut waiting_launch = None;
    // Asked before applying: a refusal for this reason is cured by stamping again.
    let mut lost_ts_race = false;
    if let Ok(r) = &record {
        shared.last_ts.fetch_max(r.ts().millis(), Ordering::SeqCst);
        let mine = match r {
            Record::LaunchRequest(l) => {
                let mine = l.connector.eq_ignore_ascii_case(&shared.config.connector);
                if mine {
                    waiting_launch = Some(l.request.clone());
                }
                mine
            }
            // Someone may wait for it (an input acknowledged only once applied).
            _ => shared.record_waiters.count.load(Ordering::SeqCst) > 0,
        };
        if mine {
            lost_ts_race = shared
                .engine
                .read()
                .expect("engine lock")
                .lost_ts_race(r.ts());
        }
    }
    let request = waiting_launch.as_deref();
    let outputs = folder.apply_decoded(offset, record);
    let (mut quarantine, mut answer) = take_outputs(shared, offset, outputs, request, lost_ts_race);
    if folder.in_progress() {
        shared.in_steps.store(offset + 1, Ordering::SeqCst);
        // The records before this one are applied: the probes say so while it runs (the
        // fold says it only after a burst of records, minutes away now), not the position
        // before the burst (found by hostile testing: `applied_offset: 0` at a start).
        shared.applied.send_replace(offset);
        if shared.kafka.is_none() {
            shared.site_pos.send_replace(offset);
        }
    }
    while folder.in_progress() {
        if let Some(job) = folder.commit_job() {
            if jobs.send(job).is_err() {
                return Err(NodeError::Commit("the committer stopped".into()));
            }
        }
        // Asked to stop part-way (SIGTERM while a record decades later fires its timers):
        // the steps so far are committed just above, and the next start resumes from
        // them, as after a crash between steps (found by hostile testing: the node went on
        // for minutes after SIGTERM).
        if shared.stopping.load(Ordering::SeqCst) {
            shared.in_steps.store(0, Ordering::SeqCst);
            return Err(NodeError::Stopped);
        }
        let outputs = folder.resume();
        let (q, a) = take_outputs(shared, offset, outputs, request, lost_ts_race);
        quarantine = quarantine.or(q);
        answer = answer.or(a);
    }
    shared.in_steps.store(0, Ordering::SeqCst);
    if shared.record_waiters.count.load(Ordering::SeqCst) > 0 {
        let hash = hash.unwrap_or_else(|| record_hash(bytes));
        // Identical records (the same admin command twice in one millisecond) queue their
        // waiters under one hash: each application answers the oldest.
        let waiter = {
            let mut map = shared.record_waiters.map.lock().expect("waiters");
            let waiter = map.get_mut(&hash).and_then(|queue| queue.pop_front());
            if map.get(&hash).is_some_and(|queue| queue.is_empty()) {
                map.remove(&hash);
            }
            waiter
        };
        if let Some(waiter) = waiter {
            shared.record_waiters.count.fetch_sub(1, Ordering::SeqCst);
            let _ = waiter.send(Applied {
                offset,
                lost_ts_race: lost_ts_race && quarantine.is_some(),
                quarantine: quarantine.clone(),
            });
        }
    }
    let Some(request) = waiting_launch else {
        return Ok(());
    };
    let answer = answer.unwrap_or_else(|| LaunchAnswer::Quarantined {
        error: "the engine made no decision for this request".into(),
        lost_ts_race: false,
    });
    if let Some(waiter) = shared.waiters.lock().expect("waiters").remove(&request) {
        let _ = waiter.send(answer);
    }
    Ok(())
}

/// Shows one step's outputs to the dashboard, the stats and the node's log; returns the
/// quarantine, if any, and the answer for the launch `request` waits for, if they hold it.
fn take_outputs(
    shared: &Shared,
    offset: u64,
    outputs: &[Output],
    request: Option<&str>,
    lost_ts_race: bool,
) -> (Option<String>, Option<LaunchAnswer>) {
    let me = &shared.config.connector;
    {
        let engine = shared.engine.read().expect("engine lock");
        let mut history = shared.dashboard.lock().expect("dashboard");
        history.observe(&engine, me, outputs);
    }
    let mut quarantine = None;
    let mut stats = shared.stats.lock().expect("stats");
    for output in outputs {
        match output {
            Output::Quarantine(q) => {
                quarantine = Some(q.error.clone());
                stats.quarantined += 1;
                if shared.caught_up.load(Ordering::Relaxed) {
                    stats.quarantined_live += 1;
                }
                stats.last_quarantine = Some((offset, q.error.clone()));
            }
            // Decisions folded during the catch-up at start are history, not this process's
            // answers: counting them would make the counter's rate jump at every restart.
            Output::LaunchDecision(d)
                if d.connector.eq_ignore_ascii_case(me)
                    && shared.caught_up.load(Ordering::Relaxed) =>
            {
                let reason = d.reason.map(|r| snake(&r)).unwrap_or_default();
                let key = (snake(&d.outcome), snake(&d.via), reason);
                *stats.decisions.entry(key).or_default() += 1;
            }
            Output::Event(e) if e.connector.eq_ignore_ascii_case(me) => {
                let Some(kind) = e.kind() else { continue };
                if live_event(e.ts) && operator_reads(&kind) {
                    log_event(e.event_id, &kind);
                }
                match &kind {
                    lhc_engine::event::EventKind::Imported(imported) => {
                        stats.last_import = Some((imported.version, e.ts));
                    }
                    lhc_engine::event::EventKind::ImportFailed(failed) => {
                        for failure in &failed.failures {
                            *stats
                                .import_failures
                                .entry(snake(&failure.rule))
                                .or_default() += 1;
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    drop(stats);
    let answer = request.and_then(|request| {
        outputs.iter().find_map(|o| match o {
            Output::LaunchDecision(d) if d.request == request => {
                Some(LaunchAnswer::Decided(d.clone()))
            }
            Output::Quarantine(q) => Some(LaunchAnswer::Quarantined {
                error: q.error.clone(),
                lost_ts_race,
            }),
            _ => None,
        })
    });
    (quarantine, answer)
}

/// An event of the last minute by the wall clock: what this node lives through, not the
/// history it folds at start (which would flood the log with old news).
fn live_event(ts: lhc_engine::Ts) -> bool {
    super::wall_ms() - ts.millis() < 60_000
}

/// The events an operator reads in the node's log: state changes, elections, imports,
/// entering and leaving LHC mode, and why it cannot enter (the periodic 3507/3509 reports
/// and import starts stay in the output log).
fn operator_reads(kind: &lhc_engine::event::EventKind) -> bool {
    use lhc_engine::event::EventKind as K;
    !matches!(
        kind,
        K::ImportStarted(_) | K::ElectedReport(_) | K::NonElected(_) | K::HealthCheckFailed
    )
}

/// One line per event, at the event's level.
fn log_event(id: u32, kind: &lhc_engine::event::EventKind) {
    use lhc_engine::output::Level;
    // Names come from the site configuration: control characters are escaped, so a name
    // cannot forge a log line.
    let message: String = kind
        .message()
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    match kind.level() {
        Level::Error => tracing::error!(event_id = id, "{message}"),
        Level::Warning => tracing::warn!(event_id = id, "{message}"),
        Level::Information => tracing::info!(event_id = id, "{message}"),
    }
}
