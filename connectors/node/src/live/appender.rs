//! The node's single writer to the site log.
//!
//! Invariant: records leave this process in the order they were stamped, and no stamp is
//! older than the newest `ts` the node has seen, so the node's own records never fail
//! R-LOG-4. (Another process may still append a later stamp first; the launch handler
//! retries a request quarantined that way.) Requests queued together go to the log in one
//! append, which is group commit for free.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{SystemTime, UNIX_EPOCH};

use lhc_engine::{encode_record, Record, Ts};
use lhc_log::Log;
use tokio::sync::oneshot;

use super::{record_hash, Bell, KafkaLink, LocalBatch, RecordWaiters};

/// Builds the record once its time is known.
type Make = Box<dyn FnOnce(Ts) -> Record + Send>;

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
}

/// Where appended records go.
pub(crate) struct Sink {
    log: Arc<dyn Log>,
    kafka: Option<Arc<KafkaLink>>,
}

impl Sink {
    pub(crate) fn new(log: Arc<dyn Log>, kafka: Option<Arc<KafkaLink>>) -> Sink {
        Sink { log, kafka }
    }

    /// Writes the records; in Kafka mode, falls back to the journal when Kafka fails or
    /// while an outbox waits to be published (so the topic keeps this node's order).
    fn write(&self, records: Vec<Vec<u8>>, replies: Vec<oneshot::Sender<Result<u64, String>>>) {
        let Some(link) = &self.kafka else {
            let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            reply_all(
                self.log.append(&refs).map_err(|e| e.to_string()),
                replies,
                &*self.log,
            );
            return;
        };
        if link.up.load(Ordering::SeqCst) && link.outbox_len.load(Ordering::SeqCst) == 0 {
            let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            match link.kafka.append(&refs) {
                Ok(offsets) => {
                    reply_all(Ok(offsets), replies, &*self.log);
                    return;
                }
                Err(e) => {
                    tracing::warn!(
                        "kafka unreachable ({e}); brokering goes on from the local journal, \
                         which is published when the broker returns"
                    );
                    link.up.store(false, Ordering::SeqCst);
                }
            }
        }
        let sent = link
            .local
            .lock()
            .expect("local queue")
            .send(LocalBatch { records, replies });
        if let Err(lost) = sent {
            for reply in lost.0.replies {
                let _ = reply.send(Err("the fold has stopped".into()));
            }
        }
    }
}

fn reply_all(
    result: Result<Vec<u64>, String>,
    replies: Vec<oneshot::Sender<Result<u64, String>>>,
    log: &dyn Log,
) {
    match result {
        Ok(offsets) => {
            for (reply, offset) in replies.into_iter().zip(offsets) {
                let _ = reply.send(Ok(offset));
            }
        }
        Err(e) => {
            tracing::error!("append to {} failed: {e}", log.describe());
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// Handle to the appender thread.
pub struct Appender {
    jobs: mpsc::Sender<Job>,
}

/// Most records written in one append.
const MAX_BATCH: usize = 256;

impl Appender {
    /// Starts the writer thread; it ends when the last handle is dropped.
    pub(crate) fn start(
        sink: Sink,
        last_ts: Arc<AtomicI64>,
        bell: Arc<Bell>,
        waiters: Arc<RecordWaiters>,
    ) -> Appender {
        let (jobs, inbox) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("lhc-appender".into())
            .spawn(move || {
                while let Ok(first) = inbox.recv() {
                    let mut batch = vec![first];
                    while batch.len() < MAX_BATCH {
                        match inbox.try_recv() {
                            Ok(job) => batch.push(job),
                            Err(_) => break,
                        }
                    }
                    write(&sink, &last_ts, &waiters, batch);
                    bell.ring();
                }
            })
            .expect("spawn the appender thread");
        Appender { jobs }
    }

    /// Appends the record `make` builds at the current time; returns its offset in the log
    /// it went to (the site log, or the journal while Kafka is unreachable).
    pub async fn append(
        &self,
        make: impl FnOnce(Ts) -> Record + Send + 'static,
    ) -> Result<u64, String> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                make: Box::new(make),
                reply,
                applied: None,
            })
            .map_err(|_| "the appender has stopped".to_string())?;
        answer
            .await
            .map_err(|_| "the appender has stopped".to_string())?
    }

    /// Appends like [`Appender::append`], then waits until the node's fold has applied the
    /// record.
    pub async fn append_applied(
        &self,
        make: impl FnOnce(Ts) -> Record + Send + 'static,
    ) -> Result<Applied, String> {
        let (reply, answer) = oneshot::channel();
        let (applied, done) = oneshot::channel();
        self.jobs
            .send(Job {
                make: Box::new(make),
                reply,
                applied: Some(applied),
            })
            .map_err(|_| "the appender has stopped".to_string())?;
        answer
            .await
            .map_err(|_| "the appender has stopped".to_string())??;
        done.await
            .map_err(|_| "the node stopped before applying the record".to_string())
    }
}

fn write(sink: &Sink, last_ts: &AtomicI64, waiters: &RecordWaiters, batch: Vec<Job>) {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    // Equal stamps are fine: records with equal ts apply in log order (R-STATE-9).
    let ts = Ts(wall.max(last_ts.load(Ordering::SeqCst)));
    last_ts.fetch_max(ts.millis(), Ordering::SeqCst);
    let mut replies = Vec::with_capacity(batch.len());
    let mut records = Vec::with_capacity(batch.len());
    for job in batch {
        let bytes = encode_record(&(job.make)(ts));
        if let Some(applied) = job.applied {
            // Registered before the write, so the fold cannot apply it unnoticed.
            waiters
                .map
                .lock()
                .expect("waiters")
                .insert(record_hash(&bytes), applied);
            waiters.count.fetch_add(1, Ordering::SeqCst);
        }
        records.push(bytes);
        replies.push(job.reply);
    }
    sink.write(records, replies);
}
