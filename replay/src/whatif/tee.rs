//! One read of the source for both sides of a what-if: the "as it happened" replay hands a
//! copy of every record it reads to the what-if replay on another thread, so the log is
//! read and decoded once (decoding costs about half of a replay at the seeds' scale).
//!
//! Invariant: the follower receives exactly the records the leader read, in order, and
//! ends when the leader's source ends (or the leader stops: then the follower's replay is
//! cut short, and the leader's error is the one reported).

use std::sync::mpsc::{Receiver, SyncSender};

use crate::drive::Records;
use crate::source::{Decoded, SourceError};

/// Records per batch sent to the follower (amortizes the channel).
const BATCH: usize = 1024;

/// The leading side's records, copied to a follower.
pub struct Tee<R> {
    inner: R,
    batch: Vec<Decoded>,
    send: Option<SyncSender<Vec<Decoded>>>,
}

impl<R> Tee<R> {
    /// Copies what `inner` yields to `send`.
    pub fn new(inner: R, send: SyncSender<Vec<Decoded>>) -> Self {
        Tee {
            inner,
            batch: Vec::with_capacity(BATCH),
            send: Some(send),
        }
    }

    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        if let Some(send) = &self.send {
            if send.send(batch).is_err() {
                // The follower stopped (its error is reported by the caller): read on alone.
                self.send = None;
            }
        }
    }
}

impl<R: Records> Records for Tee<R> {
    fn next_record(&mut self) -> Result<Option<Decoded>, SourceError> {
        let next = self.inner.next_record()?;
        match &next {
            Some(decoded) if self.send.is_some() => {
                self.batch.push(decoded.clone());
                if self.batch.len() == BATCH {
                    self.flush();
                }
            }
            Some(_) => {}
            None => {
                self.flush();
                self.send = None; // the follower's end
            }
        }
        Ok(next)
    }

    fn note_quarantined(&mut self) {
        self.inner.note_quarantined();
    }

    fn upcoming(&self) -> &[Decoded] {
        self.inner.upcoming()
    }
}

/// The records a [`Tee`] copies, on the follower's side.
pub struct Follow {
    batches: Receiver<Vec<Decoded>>,
    batch: std::vec::IntoIter<Decoded>,
}

impl Follow {
    /// Reads what the leader sends on `batches`.
    pub fn new(batches: Receiver<Vec<Decoded>>) -> Self {
        Follow {
            batches,
            batch: Vec::new().into_iter(),
        }
    }
}

impl Records for Follow {
    fn next_record(&mut self) -> Result<Option<Decoded>, SourceError> {
        loop {
            if let Some(decoded) = self.batch.next() {
                return Ok(Some(decoded));
            }
            match self.batches.recv() {
                Ok(batch) => self.batch = batch.into_iter(),
                Err(_) => return Ok(None),
            }
        }
    }

    fn upcoming(&self) -> &[Decoded] {
        self.batch.as_slice()
    }
}
