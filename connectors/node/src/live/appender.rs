//! The node's single writer to the site log.
//!
//! Invariants: records leave this process in the order they were stamped, and no stamp is
//! older than the newest `ts` the node has seen, so the node's own records never fail
//! R-LOG-4. (Another process may still append a later stamp first; the launch handler
//! retries a request quarantined that way.) Requests queued together go to the log in one
//! append, which is group commit for free.
//!
//! In Kafka mode the appender also owns the route: records go to Kafka while it answers;
//! when an append fails they go to the fold directly (the journal) and join a backlog,
//! which the appender — being the only writer — publishes first when Kafka answers again,
//! so the topic receives this node's records in the order the node applied them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use lhc_engine::{encode_record, Record, Ts};
use lhc_log::Log;
use tokio::sync::oneshot;

use super::{record_hash, Bell, KafkaLink, LocalBatch, RecordWaiters};

/// Builds the record once its time is known.
type Make = Box<dyn FnOnce(Ts) -> Record + Send>;

enum Message {
    Job(Job),
    /// Kafka mode, once the fold has read the topic to its end at start: local records of
    /// earlier runs that the topic does not hold yet.
    Backlog(Vec<Vec<u8>>),
}

struct Job {
    make: Make,
    reply: oneshot::Sender<Result<u64, String>>,
    /// Told when the fold has applied the record.
    applied: Option<oneshot::Sender<Applied>>,
}

/// What the fold made of an appended record.
#[derive(Clone, Debug)]
pub struct Applied {
    /// Engine offset it was applied at.
    pub offset: u64,
    /// The quarantine error, if the engine refused it.
    pub quarantine: Option<String>,
    /// Refused only because another writer's later record reached the log first (R-LOG-4):
    /// stamped again, the same record would be applied.
    pub lost_ts_race: bool,
}

/// Gives each record this node appends to Kafka its unique id (`record_id`), so a record
/// published again after a delivery in doubt is applied once by every reader.
pub(crate) struct IdStamper {
    producer: String,
    epoch: u32,
    next: u64,
}

impl IdStamper {
    /// Ids of run `epoch` of `connector@instance` (see `Store::begin_run`).
    pub(crate) fn new(connector: &str, instance: &str, epoch: u32) -> IdStamper {
        // The id's grammar has no room for ':' or spaces in the producer.
        let clean: String = format!("{connector}@{instance}")
            .chars()
            .map(|c| {
                if c == ':' || c.is_whitespace() {
                    '_'
                } else {
                    c
                }
            })
            .collect();
        IdStamper {
            producer: clean,
            epoch,
            next: 0,
        }
    }

    fn stamp(&mut self, record: &mut Record) {
        record.set_record_id(lhc_engine::record_id::RecordId {
            producer: self.producer.as_str().into(),
            epoch: self.epoch,
            n: self.next,
        });
        self.next += 1;
    }
}

/// Where appended records go.
pub(crate) struct Sink {
    /// Kafka mode: the ids records get.
    pub(crate) ids: Option<IdStamper>,
    log: Arc<dyn Log>,
    kafka: Option<Arc<KafkaLink>>,
    /// Where a failing append is reported (probes say so while it lasts).
    health: Arc<super::Health>,
    /// Local records Kafka does not hold yet, oldest first.
    backlog: VecDeque<Vec<u8>>,
    /// Last time publishing the backlog was tried.
    last_try: Option<Instant>,
    /// One past the last offset this node's appends to the embedded log got: a later
    /// append landing below it means the log lost records under the node.
    written_end: u64,
    /// Embedded log: the fold's next offset (records it applied are in the log below it).
    applied: Option<tokio::sync::watch::Receiver<u64>>,
}

/// Records published per append when draining the backlog.
const CHUNK: usize = 500;
/// Pause between two attempts to reach Kafka while it is down.
const RETRY: Duration = Duration::from_secs(1);

impl Sink {
    pub(crate) fn new(
        log: Arc<dyn Log>,
        kafka: Option<Arc<KafkaLink>>,
        health: Arc<super::Health>,
    ) -> Sink {
        Sink {
            ids: None,
            log,
            kafka,
            health,
            backlog: VecDeque::new(),
            last_try: None,
            written_end: 0,
            applied: None,
        }
    }

    /// Makes every append to the embedded log conditional on the log ending at or past
    /// the fold's next offset too (see [`Sink::floor`]).
    pub(crate) fn watch_applied(&mut self, applied: tokio::sync::watch::Receiver<u64>) {
        self.applied = Some(applied);
    }

    /// Where the embedded log must end at least for this node to append: past every
    /// record it wrote and every record its fold applied. Below, the log went back (its
    /// tail cut, an older copy restored) and new records would take offsets the fold has
    /// passed: brokered by a later fold while this node answered 503 (found by hostile
    /// testing), so the log refuses them under its lock instead.
    fn floor(&self) -> u64 {
        let applied = self.applied.as_ref().map_or(0, |a| *a.borrow());
        self.written_end.max(applied)
    }

    /// Offsets an append to the embedded log got: below what this node's appends got
    /// before, the log went back (its last records cut, or an older copy restored under
    /// the running node), so records this node applied are gone and the new ones take
    /// their offsets, which its fold has passed: it cannot decide from that log any more.
    fn note_offsets(&mut self, offsets: &[u64]) {
        let (Some(&first), Some(&last)) = (offsets.first(), offsets.last()) else {
            return;
        };
        if first < self.written_end {
            self.health
                .fail(super::log_went_back(&*self.log, first, self.written_end));
        }
        self.written_end = self.written_end.max(last + 1);
    }

    /// Writes the records; in Kafka mode, to the journal while Kafka is down or a backlog
    /// waits.
    /// Returns whether the records were written (or handed to the fold).
    fn write(
        &mut self,
        records: Vec<Vec<u8>>,
        replies: Vec<oneshot::Sender<Result<u64, String>>>,
    ) -> bool {
        let Some(link) = self.kafka.clone() else {
            let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            let floor = self.floor();
            let result = match self.log.append_past(floor, &refs) {
                Err(lhc_log::LogError::WentBack { end, .. }) => {
                    let why = super::log_went_back(&*self.log, end, floor);
                    self.health.fail(why.clone());
                    Err(why)
                }
                other => other.map_err(|e| e.to_string()),
            };
            let written = result.is_ok();
            if let Ok(offsets) = &result {
                self.note_offsets(offsets);
            }
            reply_all(result, replies, &*self.log, &self.health);
            return written;
        };
        if self.backlog.is_empty() && link.up.load(Ordering::SeqCst) {
            let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            match link.kafka.append(&refs) {
                Ok(offsets) => {
                    if let Some(last) = offsets.last() {
                        link.end.fetch_max(last + 1, Ordering::SeqCst);
                    }
                    reply_all(Ok(offsets), replies, &*self.log, &self.health);
                    return true;
                }
                Err(e) => {
                    tracing::warn!(
                        "kafka unreachable ({e}); brokering goes on from the local journal, \
                         which is published when the broker returns"
                    );
                    link.up.store(false, Ordering::SeqCst);
                    self.last_try = Some(Instant::now());
                }
            }
        }
        self.backlog.extend(records.iter().cloned());
        link.outbox_len.store(self.backlog.len(), Ordering::SeqCst);
        let sent = link
            .local
            .lock()
            .expect("local queue")
            .send(LocalBatch { records, replies });
        match sent {
            Ok(()) => true,
            Err(lost) => {
                for reply in lost.0.replies {
                    let _ = reply.send(Err("the fold has stopped".into()));
                }
                false
            }
        }
    }

    /// Publishes the backlog when it is time to try; reopens the direct route once empty.
    fn drain(&mut self, force: bool) {
        let Some(link) = self.kafka.clone() else {
            return;
        };
        if self.backlog.is_empty() {
            return;
        }
        // Not reached since the start: the connect thread asks the brokers, so appends
        // never wait on them meanwhile.
        if link.unreachable_since_start.load(Ordering::SeqCst) {
            return;
        }
        if !force && self.last_try.is_some_and(|t| t.elapsed() < RETRY) {
            return;
        }
        self.last_try = Some(Instant::now());
        while !self.backlog.is_empty() {
            let n = self.backlog.len().min(CHUNK);
            let refs: Vec<&[u8]> = self.backlog.iter().take(n).map(Vec::as_slice).collect();
            match link.kafka.append(&refs) {
                Ok(offsets) => {
                    if let Some(last) = offsets.last() {
                        link.end.fetch_max(last + 1, Ordering::SeqCst);
                    }
                    self.backlog.drain(..n);
                    link.outbox_len.store(self.backlog.len(), Ordering::SeqCst);
                    tracing::info!(
                        records = n,
                        left = self.backlog.len(),
                        "published journal records written while kafka was unreachable"
                    );
                }
                Err(e) => {
                    tracing::debug!("kafka still unreachable: {e}");
                    return;
                }
            }
        }
        if !link.up.swap(true, Ordering::SeqCst) {
            tracing::info!("kafka is back and the backlog is published: appends go to kafka");
        }
    }
}

fn reply_all(
    result: Result<Vec<u64>, String>,
    replies: Vec<oneshot::Sender<Result<u64, String>>>,
    log: &dyn Log,
    health: &super::Health,
) {
    match &result {
        Ok(_) => health.append_ok(),
        Err(e) => health.append_failed(format!("append to {} failed: {e}", log.describe())),
    }
    match result {
        Ok(offsets) => {
            for (reply, offset) in replies.into_iter().zip(offsets) {
                let _ = reply.send(Ok(offset));
            }
        }
        Err(e) => {
            // Logged by `append_failed`, once per change of error: a full disk refused
            // every request, and each logged the same line (thousands a second; found by
            // hostile testing).
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// Handle to the appender thread.
pub struct Appender {
    jobs: Option<mpsc::Sender<Message>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Appender {
    fn drop(&mut self) {
        // Closing the queue ends the thread; waiting for it releases the log (and its
        // Kafka clients) before the caller moves on.
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Most records written in one append.
const MAX_BATCH: usize = 256;

impl Appender {
    /// Starts the writer thread; it ends when the last handle is dropped.
    pub(crate) fn start(
        mut sink: Sink,
        last_ts: Arc<AtomicI64>,
        bell: Arc<Bell>,
        waiters: Arc<RecordWaiters>,
    ) -> Appender {
        let (jobs, inbox) = mpsc::channel::<Message>();
        let thread = std::thread::Builder::new()
            .name("lhc-appender".into())
            .spawn(move || loop {
                let first = match inbox.recv_timeout(Duration::from_millis(250)) {
                    Ok(message) => message,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        sink.drain(false);
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                };
                let mut batch = Vec::new();
                let mut next = Some(first);
                while let Some(message) = next.take() {
                    match message {
                        Message::Job(job) => batch.push(job),
                        Message::Backlog(records) => {
                            sink.backlog.extend(records);
                            if let Some(link) = &sink.kafka {
                                link.outbox_len.store(sink.backlog.len(), Ordering::SeqCst);
                            }
                            sink.drain(true);
                        }
                    }
                    if batch.len() < MAX_BATCH {
                        next = inbox.try_recv().ok();
                    }
                }
                if !batch.is_empty() {
                    sink.drain(false);
                    write(&mut sink, &last_ts, &waiters, batch);
                    bell.ring();
                }
            })
            .expect("spawn the appender thread");
        Appender {
            jobs: Some(jobs),
            thread: Some(thread),
        }
    }

    /// Hands the backlog of earlier runs to the appender (Kafka mode, after catch-up).
    pub(crate) fn backlog(&self, records: Vec<Vec<u8>>) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(Message::Backlog(records));
        }
    }

    /// Appends the record `make` builds at the current time; returns its offset in the log
    /// it went to (the site log, or the journal while Kafka is unreachable).
    pub async fn append(
        &self,
        make: impl FnOnce(Ts) -> Record + Send + 'static,
    ) -> Result<u64, String> {
        self.submit(Box::new(make), None).await
    }

    /// Appends like [`Appender::append`], then waits until the node's fold has applied the
    /// record.
    pub async fn append_applied(
        &self,
        make: impl FnOnce(Ts) -> Record + Send + 'static,
    ) -> Result<Applied, String> {
        let (applied, done) = oneshot::channel();
        self.submit(Box::new(make), Some(applied)).await?;
        done.await
            .map_err(|_| "the node stopped before applying the record".to_string())
    }

    /// Queues a job and waits until the record is written.
    async fn submit(
        &self,
        make: Make,
        applied: Option<oneshot::Sender<Applied>>,
    ) -> Result<u64, String> {
        let stopped = || "the appender has stopped".to_string();
        let (reply, answer) = oneshot::channel();
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(Message::Job(Job {
                make,
                reply,
                applied,
            }))
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn write(sink: &mut Sink, last_ts: &AtomicI64, waiters: &RecordWaiters, batch: Vec<Job>) {
    // A node that cannot decide any more writes nothing more: a launch appended in the
    // seconds before it exits was answered 503 yet brokered by whoever folds the log
    // later (found by hostile testing).
    if let Some(reason) = sink.health.fatal() {
        for job in batch {
            let _ = job.reply.send(Err(format!(
                "this node cannot decide any more ({reason}); nothing was appended"
            )));
        }
        return;
    }
    let wall = super::wall_ms();
    // Equal stamps are fine: records with equal ts apply in log order (R-STATE-9).
    let ts = Ts(wall.max(last_ts.load(Ordering::SeqCst)));
    last_ts.fetch_max(ts.millis(), Ordering::SeqCst);
    let mut replies = Vec::with_capacity(batch.len());
    let mut records = Vec::with_capacity(batch.len());
    let mut registered = Vec::new();
    for job in batch {
        let mut record = (job.make)(ts);
        if let Some(ids) = &mut sink.ids {
            ids.stamp(&mut record);
        }
        let bytes = encode_record(&record);
        if let Some(applied) = job.applied {
            // Registered before the write, so the fold cannot apply it unnoticed.
            let hash = record_hash(&bytes);
            waiters
                .map
                .lock()
                .expect("waiters")
                .entry(hash)
                .or_default()
                .push_back(applied);
            waiters.count.fetch_add(1, Ordering::SeqCst);
            registered.push(hash);
        }
        records.push(bytes);
        replies.push(job.reply);
    }
    if !sink.write(records, replies) {
        // Never written: nobody will apply these, so stop waiting for them.
        let mut map = waiters.map.lock().expect("waiters");
        for hash in registered {
            // The newest waiter of that hash is this batch's (registered just above).
            if let Some(queue) = map.get_mut(&hash) {
                if queue.pop_back().is_some() {
                    waiters.count.fetch_sub(1, Ordering::SeqCst);
                }
                if queue.is_empty() {
                    map.remove(&hash);
                }
            }
        }
    }
}
