//! Publishing the outbox: records this node wrote to its journal while Kafka was
//! unreachable go to the topic, in journal order, once the broker is back.
//!
//! Invariant: a record is published only when the fold has read the topic to its end, so a
//! record published before a crash (and therefore already seen back, and cleared from the
//! outbox) is never published again; within a run, `published_upto` prevents repeats.
//! Until the outbox is empty new appends keep going to the journal, so the topic receives
//! this node's records in the order the node applied them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use lhc_log::Log;
use tokio::task::JoinHandle;

use super::KafkaLink;
use crate::store::Store;

/// Records published per append.
const CHUNK: usize = 500;

/// Starts the republisher; abort the handle to stop it.
pub(crate) fn spawn_republisher(link: Arc<KafkaLink>, store: Arc<Store>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut published_upto: Option<u64> = None;
        let mut every = tokio::time::interval(Duration::from_millis(500));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let (link, store) = (link.clone(), store.clone());
            let step = tokio::task::spawn_blocking(move || {
                let round = republish(&link, &store, published_upto);
                (round, link)
            })
            .await;
            let Ok((round, link)) = step else { continue };
            match round {
                Ok(upto) => published_upto = upto,
                Err(e) => tracing::debug!("outbox not published yet: {e}"),
            }
            if link.outbox_len.load(Ordering::SeqCst) == 0 && !link.up.load(Ordering::SeqCst) {
                tracing::info!("kafka is back and the outbox is published: appends go to kafka");
                link.up.store(true, Ordering::SeqCst);
            }
        }
    })
}

/// One round: returns the new `published_upto`.
fn republish(
    link: &KafkaLink,
    store: &Store,
    mut published_upto: Option<u64>,
) -> Result<Option<u64>, String> {
    // Asking for the end is also how we learn the broker answers again.
    let end = link.kafka.end_offset().map_err(|e| e.to_string())?;
    link.end.store(end, Ordering::SeqCst);
    if link.outbox_len.load(Ordering::SeqCst) == 0 {
        return Ok(None);
    }
    if published_upto.is_none() && link.next.load(Ordering::SeqCst) < end {
        return Ok(None); // read the topic to its end first: some may be published already
    }
    loop {
        let chunk = store
            .outbox(published_upto, CHUNK)
            .map_err(|e| e.to_string())?;
        let Some(&(last, _)) = chunk.last() else {
            return Ok(published_upto);
        };
        let refs: Vec<&[u8]> = chunk.iter().map(|(_, b)| b.as_slice()).collect();
        link.kafka.append(&refs).map_err(|e| e.to_string())?;
        tracing::info!(
            records = chunk.len(),
            "published journal records written while kafka was unreachable"
        );
        published_upto = Some(last);
        if chunk.len() < CHUNK {
            return Ok(published_upto);
        }
    }
}
