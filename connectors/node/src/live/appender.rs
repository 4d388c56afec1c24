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

use super::Bell;

/// Builds the record once its time is known.
type Make = Box<dyn FnOnce(Ts) -> Record + Send>;

struct Job {
    make: Make,
    reply: oneshot::Sender<Result<u64, String>>,
}

/// Handle to the appender thread.
pub struct Appender {
    jobs: mpsc::Sender<Job>,
}

/// Most records written in one append.
const MAX_BATCH: usize = 256;

impl Appender {
    /// Starts the writer thread; it ends when the last handle is dropped.
    pub(crate) fn start(log: Arc<dyn Log>, last_ts: Arc<AtomicI64>, bell: Arc<Bell>) -> Appender {
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
                    write(&*log, &last_ts, batch);
                    bell.ring();
                }
            })
            .expect("spawn the appender thread");
        Appender { jobs }
    }

    /// Appends the record `make` builds at the current time; returns its offset.
    pub async fn append(
        &self,
        make: impl FnOnce(Ts) -> Record + Send + 'static,
    ) -> Result<u64, String> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                make: Box::new(make),
                reply,
            })
            .map_err(|_| "the appender has stopped".to_string())?;
        answer
            .await
            .map_err(|_| "the appender has stopped".to_string())?
    }
}

fn write(log: &dyn Log, last_ts: &AtomicI64, batch: Vec<Job>) {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    // Equal stamps are fine: records with equal ts apply in log order (R-STATE-9).
    let ts = Ts(wall.max(last_ts.load(Ordering::SeqCst)));
    last_ts.fetch_max(ts.millis(), Ordering::SeqCst);
    let mut replies = Vec::with_capacity(batch.len());
    let mut records = Vec::with_capacity(batch.len());
    for job in batch {
        records.push(encode_record(&(job.make)(ts)));
        replies.push(job.reply);
    }
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    match log.append(&refs) {
        Ok(offsets) => {
            for (reply, offset) in replies.into_iter().zip(offsets) {
                let _ = reply.send(Ok(offset));
            }
        }
        Err(e) => {
            tracing::error!("append to {} failed: {e}", log.describe());
            for reply in replies {
                let _ = reply.send(Err(e.to_string()));
            }
        }
    }
}
