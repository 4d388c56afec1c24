//! The Kafka backend: one topic (default `lhc.events`); message key = site name, value = the
//! record's JSON, so a site's records live in one partition, in order (R-LOG-1).
//!
//! The producer is idempotent with `acks=all` and places a site with Kafka's own
//! (murmur2) partitioner, so Java clients, Kafka Connect and lhc agree on where a site
//! lives. Readers assign that partition and seek to an explicit offset (replay), skipping
//! records of other sites that share the partition. Every wait is bounded: an unreachable
//! broker yields warnings while librdkafka retries, then an error that names the brokers.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::{Log, LogEntry, LogError, LogReader};

/// Topic used when none is given.
pub const DEFAULT_TOPIC: &str = "lhc.events";

/// Where and how to reach Kafka.
#[derive(Clone, Debug)]
pub struct KafkaOptions {
    /// Bootstrap servers, `host:port[,host:port...]`.
    pub brokers: String,
    /// Topic holding the site logs.
    pub topic: String,
    /// Site name: the message key.
    pub site: String,
    /// Longest wait for any one broker operation before it is reported as an error.
    pub timeout: Duration,
    /// Extra librdkafka settings (`security.protocol`, `sasl.*`...).
    pub extra: Vec<(String, String)>,
}

impl KafkaOptions {
    /// Options with the default topic and a 30 s timeout.
    pub fn new(brokers: impl Into<String>, site: impl Into<String>) -> KafkaOptions {
        KafkaOptions {
            brokers: brokers.into(),
            topic: DEFAULT_TOPIC.to_string(),
            site: site.into(),
            timeout: Duration::from_secs(30),
            extra: Vec::new(),
        }
    }

    fn error(&self, detail: impl Into<String>) -> LogError {
        LogError::Kafka {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            detail: detail.into(),
        }
    }

    /// Checks the extra librdkafka settings before any connection: a key lhc sets itself
    /// is refused with the reason, and librdkafka judges the rest (unknown keys, bad values,
    /// a CA file it cannot read), so a typo fails at start with librdkafka's own words.
    pub fn check(&self) -> Result<(), LogError> {
        if self.extra.is_empty() {
            return Ok(()); // nothing of the user's to judge: no throwaway client at start
        }
        for (key, value) in &self.extra {
            if value.len() > MAX_SETTING_BYTES {
                return Err(self.error(format!(
                    "setting {key}: its value is {} bytes, more than the {MAX_SETTING_BYTES} \
                     lhc accepts (librdkafka fails on very long values)",
                    value.len()
                )));
            }
            // librdkafka takes topic settings on the global configuration with a `topic.`
            // prefix, and old names for some keys: they are the same settings.
            let key = key.strip_prefix("topic.").unwrap_or(key);
            let key = match key {
                "metadata.broker.list" => "bootstrap.servers",
                "request.required.acks" => "acks",
                "delivery.timeout.ms" => "message.timeout.ms",
                other => other,
            };
            if key == "bootstrap.servers" {
                if value != &self.brokers {
                    return Err(self.error(format!(
                        "setting bootstrap.servers={value} differs from --kafka {}: give the \
                         brokers once",
                        self.brokers
                    )));
                }
                continue;
            }
            if let Some((_, why)) = RESERVED.iter().find(|(k, _)| *k == key) {
                return Err(self.error(format!(
                    "setting {key}: lhc sets {key} itself ({why}); remove it"
                )));
            }
        }
        let mut config = ClientConfig::new();
        for (key, value) in &self.extra {
            config.set(key, value);
        }
        let described = |e: KafkaError| match e {
            // The value is not repeated: a misspelled secret key is still a secret.
            KafkaError::ClientConfig(_, detail, key, _) if !key.is_empty() => {
                format!("setting {key}: librdkafka says: {detail}")
            }
            KafkaError::ClientConfig(_, detail, _, _) | KafkaError::ClientCreation(detail) => {
                format!("librdkafka refuses the settings: {detail}")
            }
            other => format!("librdkafka refuses the settings: {other}"),
        };
        config
            .create_native_config()
            .map_err(|e| self.error(described(e)))?;
        // Some settings are judged only when a client is made (a CA file that cannot be
        // read, a SASL mechanism this build lacks). Without bootstrap servers it connects
        // to nothing.
        config
            .create::<BaseConsumer>()
            .map(drop)
            .map_err(|e| self.error(described(e)))
    }

    fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set(
                "socket.timeout.ms",
                millis(self.timeout.min(Duration::from_secs(60))),
            )
            .set("reconnect.backoff.max.ms", "2000");
        config
    }
}

/// Longest value of a librdkafka setting (a PEM certificate bundle fits; librdkafka crashes
/// on a client.id of a megabyte).
pub const MAX_SETTING_BYTES: usize = 256 << 10;

/// librdkafka settings lhc sets itself on some client, and why: a value given with
/// `--kafka-config` would be overridden (or would break a guarantee), so it is refused.
pub const RESERVED: [(&str, &str); 9] = [
    (
        "enable.idempotence",
        "appends are idempotent so a retry never doubles a record",
    ),
    ("acks", "appends wait for every in-sync replica"),
    (
        "partitioner",
        "a site's partition is Kafka's murmur2 of the site name",
    ),
    ("message.timeout.ms", "it follows --kafka-timeout"),
    ("group.id", "readers use their own groups"),
    (
        "enable.auto.commit",
        "readers keep their position themselves",
    ),
    (
        "enable.auto.offset.store",
        "readers keep their position themselves",
    ),
    (
        "auto.offset.reset",
        "a reader never skips records it cannot find",
    ),
    ("transactional.id", "lhc does not use Kafka transactions"),
];

/// Applies the user's librdkafka settings last, so they tune what lhc only defaults
/// (`linger.ms`, `fetch.wait.max.ms`...); [`KafkaOptions::check`] refuses the ones lhc
/// relies on.
trait WithExtras {
    fn extras(&mut self, options: &KafkaOptions) -> &mut Self;
}

impl WithExtras for ClientConfig {
    fn extras(&mut self, options: &KafkaOptions) -> &mut ClientConfig {
        for (key, value) in &options.extra {
            self.set(key, value);
        }
        self
    }
}

fn millis(d: Duration) -> String {
    d.as_millis().max(10).to_string()
}

/// Forwards librdkafka's global errors (all brokers down...) as warnings, so a wait is never
/// silent.
struct Context {
    brokers: String,
}

impl ClientContext for Context {
    /// librdkafka's own log: one line per message, warnings and worse shown by default,
    /// the rest with -v.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        use RDKafkaLogLevel as L;
        // A failed connection (FAIL) is what each retry reports in one line of its own
        // ("attempt n/N: brokers unreachable"); librdkafka's copy of it is kept for -v.
        let level = if fac == "FAIL" { L::Info } else { level };
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error | L::Warning => {
                tracing::warn!(target: "librdkafka", "kafka {}: {fac}: {message}", self.brokers)
            }
            L::Notice | L::Info => {
                tracing::info!(target: "librdkafka", "kafka {}: {fac}: {message}", self.brokers)
            }
            L::Debug => {
                tracing::debug!(target: "librdkafka", "kafka {}: {fac}: {message}", self.brokers)
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // A lost connection is already one line of librdkafka's log (above), and each
        // retry raised it again here twice: kept for -vv only. Other errors (an
        // authentication failure, a bad setting) are shown.
        let transport = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown)
        );
        if transport {
            tracing::debug!("kafka {}: {error}: {reason} (retrying)", self.brokers);
        } else {
            tracing::warn!("kafka {}: {error}: {reason}", self.brokers);
        }
    }
}

impl ConsumerContext for Context {}

type DeliverySender = mpsc::SyncSender<(usize, Result<i64, String>)>;

impl ProducerContext for Context {
    type DeliveryOpaque = Box<(usize, DeliverySender)>;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: Self::DeliveryOpaque) {
        let (index, reply) = *opaque;
        let outcome = match result {
            Ok(message) => Ok(message.offset()),
            Err((error, _)) => Err(error.to_string()),
        };
        let _ = reply.send((index, outcome));
    }
}

/// A site log in a Kafka topic partition.
pub struct KafkaLog {
    options: KafkaOptions,
    /// Found from the topic's metadata at the first need (a node may start while the
    /// brokers are unreachable).
    partition: std::sync::OnceLock<i32>,
    producer: std::sync::OnceLock<ThreadedProducer<Context>>,
    /// For watermarks and metadata; never assigned.
    probe: BaseConsumer<Context>,
}

impl KafkaLog {
    /// Connects, finds the site's partition, and reports clearly if the brokers cannot be
    /// reached or the topic does not exist.
    pub fn open(options: KafkaOptions) -> Result<KafkaLog, LogError> {
        let log = KafkaLog::open_lazy(options)?;
        let partitions = partition_count(&log.probe, &log.options, true)?;
        let _ = log
            .partition
            .set(site_partition(&log.options.site, partitions));
        Ok(log)
    }

    /// Makes the clients without waiting for any broker: the site's partition is found at
    /// the first operation that needs it (or by [`KafkaLog::find_partition`]).
    pub fn open_lazy(options: KafkaOptions) -> Result<KafkaLog, LogError> {
        let context = || Context {
            brokers: options.brokers.clone(),
        };
        let probe: BaseConsumer<Context> = options
            .client_config()
            .set("group.id", "lhc-probe")
            .set("enable.auto.commit", "false")
            .extras(&options)
            .create_with_context(context())
            .map_err(|e| options.error(format!("cannot create consumer: {e}")))?;
        Ok(KafkaLog {
            options,
            partition: std::sync::OnceLock::new(),
            producer: std::sync::OnceLock::new(),
            probe,
        })
    }

    /// The producer, made at the first append (a reader never needs one, and making and
    /// closing it costs a replay of a small site most of its time).
    fn producer(&self) -> Result<&ThreadedProducer<Context>, LogError> {
        if let Some(producer) = self.producer.get() {
            return Ok(producer);
        }
        let producer: ThreadedProducer<Context> = self
            .options
            .client_config()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "2")
            .set("message.timeout.ms", millis(self.options.timeout))
            .extras(&self.options)
            .create_with_context(Context {
                brokers: self.options.brokers.clone(),
            })
            .map_err(|e| self.options.error(format!("cannot create producer: {e}")))?;
        // Two appenders racing here: the loser's producer is dropped unused.
        Ok(self.producer.get_or_init(|| producer))
    }

    /// The partition holding this site, asking the brokers the first time (retried within
    /// the timeout; an error says why the topic could not be read, and the caller reports
    /// it: a node asks again and again while Kafka is down).
    pub fn find_partition(&self) -> Result<i32, LogError> {
        if let Some(&p) = self.partition.get() {
            return Ok(p);
        }
        let partitions = partition_count(&self.probe, &self.options, false)?;
        Ok(*self
            .partition
            .get_or_init(|| site_partition(&self.options.site, partitions)))
    }

    /// The site: the message key of its records.
    pub fn site(&self) -> &str {
        &self.options.site
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.options.topic
    }

    /// The partition holding this site, if already found (never waits).
    pub fn known_partition(&self) -> Option<i32> {
        self.partition.get().copied()
    }

    fn watermarks(&self) -> Result<(i64, i64), LogError> {
        let partition = self.find_partition()?;
        self.probe
            .fetch_watermarks(&self.options.topic, partition, self.options.timeout)
            .map_err(|e| {
                self.options
                    .error(format!("cannot read offsets of partition {partition}: {e}"))
            })
    }
}

/// Partitions of the topic, retried while the brokers do not answer; each failed attempt
/// is a warning when `loud` (a command waiting for it), else a debug line.
fn partition_count(
    consumer: &BaseConsumer<Context>,
    options: &KafkaOptions,
    loud: bool,
) -> Result<i32, LogError> {
    const ATTEMPTS: u32 = 3;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        match consumer.fetch_metadata(Some(&options.topic), options.timeout / ATTEMPTS) {
            Ok(metadata) => {
                let topic = metadata.topics().iter().find(|t| t.name() == options.topic);
                match topic {
                    Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                        return Ok(t.partitions().len() as i32)
                    }
                    Some(t) => {
                        last = format!(
                        "topic not available ({:?}); create it (one partition per site is enough) \
                             or enable auto-creation on the broker",
                        t.error()
                    )
                    }
                    None => last = "topic not found".to_string(),
                }
            }
            Err(e) => last = format!("brokers unreachable: {e}"),
        }
        if loud {
            tracing::warn!(
                "kafka {} (attempt {attempt}/{ATTEMPTS}): {last}",
                options.brokers
            );
        } else {
            tracing::debug!(
                "kafka {} (attempt {attempt}/{ATTEMPTS}): {last}",
                options.brokers
            );
        }
    }
    Err(options.error(format!("{last}; check --kafka and that the brokers run")))
}

/// One site found in a topic by [`topic_sites`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSite {
    /// The site name (the message key).
    pub site: String,
    /// Its partition.
    pub partition: i32,
    /// Its records in the partition.
    pub records: u64,
}

/// The sites a topic holds (the distinct message keys of every partition), by name; the
/// number of records whose key is absent or not UTF-8 text (which name no site); and the
/// topic's partition count. Reads every record's key once, from each partition's start to
/// its current end.
pub fn topic_sites(options: &KafkaOptions) -> Result<(Vec<TopicSite>, u64, i32), LogError> {
    let context = || Context {
        brokers: options.brokers.clone(),
    };
    let consumer: BaseConsumer<Context> = options
        .client_config()
        .set("group.id", "lhc-sites")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "error")
        .extras(options)
        .create_with_context(context())
        .map_err(|e| options.error(format!("cannot create consumer: {e}")))?;
    let partitions = partition_count(&consumer, options, true)?;
    let mut assignment = TopicPartitionList::new();
    let mut ends = std::collections::BTreeMap::new();
    for partition in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(&options.topic, partition, options.timeout)
            .map_err(|e| {
                options.error(format!("cannot read offsets of partition {partition}: {e}"))
            })?;
        if low > 0 {
            tracing::warn!(
                "kafka {}: partition {partition} of {} starts at offset {low}: the records \
                 before it were deleted (retention or compaction; `lhc kafka init` checks the \
                 topic), so its sites cannot be replayed from their start",
                options.brokers,
                options.topic
            );
        }
        if high > low {
            ends.insert(partition, high);
            assignment
                .add_partition_offset(&options.topic, partition, Offset::Offset(low))
                .map_err(|e| options.error(e.to_string()))?;
        }
    }
    let mut sites: std::collections::BTreeMap<(String, i32), u64> = Default::default();
    let mut unkeyed = 0;
    if ends.is_empty() {
        return Ok((Vec::new(), 0, partitions));
    }
    consumer
        .assign(&assignment)
        .map_err(|e| options.error(format!("cannot assign partitions: {e}")))?;
    let mut last_progress = Instant::now();
    while !ends.is_empty() {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                last_progress = Instant::now();
                let partition = message.partition();
                match message.key().map(std::str::from_utf8) {
                    Some(Ok(site)) => {
                        *sites.entry((site.to_string(), partition)).or_default() += 1;
                    }
                    // No key, or one no `--site` could name.
                    None | Some(Err(_)) => unkeyed += 1,
                }
                if ends
                    .get(&partition)
                    .is_some_and(|&end| message.offset() + 1 >= end)
                {
                    ends.remove(&partition);
                }
            }
            Some(Err(e)) => tracing::warn!("kafka {}: fetch: {e} (retrying)", options.brokers),
            None if last_progress.elapsed() > options.timeout => {
                return Err(options.error(format!(
                "partitions {:?} stopped delivering records before their end; is the broker up?",
                ends.keys().collect::<Vec<_>>()
            )))
            }
            None => {}
        }
    }
    let sites = sites
        .into_iter()
        .map(|((site, partition), records)| TopicSite {
            site,
            partition,
            records,
        })
        .collect();
    Ok((sites, unkeyed, partitions))
}

/// The librdkafka version linked in, like "2.10.0" (for `lhc --version`).
pub fn library_version() -> String {
    rdkafka::util::get_rdkafka_version().1
}

/// The features built into librdkafka (`builtin.features`: ssl, sasl_scram, ...), for
/// `lhc --version`: what a user checks before pointing lhc at a secured cluster.
pub fn library_features() -> String {
    ClientConfig::new()
        .create_native_config()
        .and_then(|c| c.get("builtin.features"))
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// Kafka's default partitioner (murmur2 of the key, positive, modulo the partition count), as
/// Java clients and librdkafka's `murmur2_random` compute it.
pub fn site_partition(site: &str, partitions: i32) -> i32 {
    ((murmur2(site.as_bytes()) & 0x7fff_ffff) % partitions as u32) as i32
}

/// Kafka's murmur2 variant (seed 0x9747b28c).
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes(chunk.try_into().expect("4 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

impl Log for KafkaLog {
    fn append(&self, records: &[&[u8]]) -> Result<Vec<u64>, LogError> {
        let partition = self.find_partition()?;
        let producer = self.producer()?;
        let (reply, delivered) = mpsc::sync_channel(records.len().max(1));
        for (index, record) in records.iter().enumerate() {
            let mut message =
                BaseRecord::with_opaque_to(&self.options.topic, Box::new((index, reply.clone())))
                    .key(self.options.site.as_bytes())
                    .payload(*record)
                    .partition(partition);
            // The local queue may be full: let the background thread drain it, then retry.
            let deadline = Instant::now() + self.options.timeout;
            loop {
                match producer.send(message) {
                    Ok(()) => break,
                    Err((e, back)) if Instant::now() < deadline => {
                        tracing::debug!("kafka producer queue: {e}; retrying");
                        message = back;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err((e, _)) => {
                        return Err(self.options.error(format!("cannot queue record: {e}")))
                    }
                }
            }
        }
        drop(reply);
        let mut offsets = vec![0u64; records.len()];
        let deadline = Instant::now() + self.options.timeout + Duration::from_secs(5);
        for _ in 0..records.len() {
            let wait = deadline.saturating_duration_since(Instant::now());
            match delivered.recv_timeout(wait) {
                Ok((index, Ok(offset))) => offsets[index] = offset as u64,
                Ok((_, Err(e))) => {
                    return Err(self.options.error(format!(
                        "delivery failed: {e}; the record may or may not be in the log, check with `lhc log cat`"
                    )))
                }
                Err(_) => return Err(self.options.error("no delivery report in time; is the broker up?")),
            }
        }
        Ok(offsets)
    }

    fn start_offset(&self) -> Result<u64, LogError> {
        Ok(self.watermarks()?.0.max(0) as u64)
    }

    fn end_offset(&self) -> Result<u64, LogError> {
        Ok(self.watermarks()?.1.max(0) as u64)
    }

    fn reader(&self, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        let (start, end) = self.watermarks()?;
        let (start, end) = (start.max(0) as u64, end.max(0) as u64);
        if from < start || from > end {
            return Err(LogError::OffsetOutOfRange {
                requested: from,
                start,
                end,
            });
        }
        let consumer = self.assigned_consumer(from)?;
        Ok(Box::new(KafkaReader {
            options: self.options.clone(),
            partition: self.find_partition()?,
            consumer,
            next: from,
            end,
        }))
    }

    fn describe(&self) -> String {
        format!(
            "kafka {} topic {} partition {} (site {})",
            self.options.brokers,
            self.options.topic,
            match self.known_partition() {
                Some(p) => p.to_string(),
                None => "not known yet".into(),
            },
            self.options.site
        )
    }
}

impl KafkaLog {
    /// A consumer assigned to the site's partition at `from`, outside any group.
    fn assigned_consumer(&self, from: u64) -> Result<BaseConsumer<Context>, LogError> {
        let consumer: BaseConsumer<Context> = self
            .options
            .client_config()
            .set("group.id", format!("lhc-reader-{}", self.options.site))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            // A live node waits on this fetch for every record: keep it short.
            .set("fetch.wait.max.ms", "10")
            // librdkafka wants the socket timeout well above the fetch wait.
            .set(
                "socket.timeout.ms",
                millis(self.options.timeout.max(Duration::from_secs(10))),
            )
            .extras(&self.options)
            .create_with_context(Context {
                brokers: self.options.brokers.clone(),
            })
            .map_err(|e| self.options.error(format!("cannot create consumer: {e}")))?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(
                &self.options.topic,
                self.find_partition()?,
                Offset::Offset(from as i64),
            )
            .map_err(|e| self.options.error(e.to_string()))?;
        consumer
            .assign(&assignment)
            .map_err(|e| self.options.error(format!("cannot assign partition: {e}")))?;
        Ok(consumer)
    }

    /// A reader for a live consumer that must never block on a lost broker: it returns
    /// whatever arrives within the wait and `None` otherwise, without asking the broker for
    /// watermarks, and keeps its position across a broker outage (librdkafka reconnects).
    /// Unlike [`Log::reader`] it does not check that `from` lies in the partition.
    pub fn tail_reader(&self, from: u64) -> Result<KafkaTailReader, LogError> {
        Ok(KafkaTailReader {
            options: self.options.clone(),
            consumer: self.assigned_consumer(from)?,
            next: from,
            last_warning: None,
        })
    }

    /// A reader in consumer group `group`, for live use: it resumes after the offsets the
    /// group committed (at least once: a crash re-reads what was read since the last
    /// automatic commit, every 1 s), and the broker balances partitions across the group.
    /// Exactly-once consumers (the connector node) store their own offsets and use
    /// [`Log::reader`] instead.
    pub fn group_reader(&self, group: &str) -> Result<KafkaGroupReader, LogError> {
        let consumer: BaseConsumer<Context> = self
            .options
            .client_config()
            .set("group.id", group)
            .set("enable.auto.commit", "true")
            .set("auto.commit.interval.ms", "1000")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            // A member that vanished without leaving blocks the group this long.
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "1000")
            .extras(&self.options)
            .create_with_context(Context {
                brokers: self.options.brokers.clone(),
            })
            .map_err(|e| self.options.error(format!("cannot create consumer: {e}")))?;
        consumer.subscribe(&[&self.options.topic]).map_err(|e| {
            self.options
                .error(format!("cannot join group {group}: {e}"))
        })?;
        Ok(KafkaGroupReader {
            options: self.options.clone(),
            consumer,
            next: None,
        })
    }
}

/// Reads a site's records as a member of a consumer group.
pub struct KafkaGroupReader {
    options: KafkaOptions,
    consumer: BaseConsumer<Context>,
    next: Option<u64>,
}

impl LogReader for KafkaGroupReader {
    fn next(&mut self, wait: Duration) -> Result<Option<LogEntry>, LogError> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.consumer.poll(left.min(Duration::from_millis(200))) {
                Some(Ok(message)) => {
                    // Stored now, committed by the next automatic commit.
                    self.consumer
                        .store_offset_from_message(&message)
                        .map_err(|e| self.options.error(format!("cannot store offset: {e}")))?;
                    if message.key() != Some(self.options.site.as_bytes()) {
                        continue; // another site sharing the partition
                    }
                    let offset = message.offset() as u64;
                    self.next = Some(offset + 1);
                    let bytes = message.payload().unwrap_or_default().to_vec();
                    return Ok(Some(LogEntry { offset, bytes }));
                }
                Some(Err(e)) => {
                    tracing::warn!("kafka {}: fetch: {e} (retrying)", self.options.brokers)
                }
                None => {}
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    fn position(&self) -> u64 {
        self.next.unwrap_or(0)
    }
}

impl Drop for KafkaGroupReader {
    fn drop(&mut self) {
        // Commit what was stored, so the group resumes after it.
        if let Err(e) = self
            .consumer
            .commit_consumer_state(rdkafka::consumer::CommitMode::Sync)
        {
            tracing::debug!("kafka {}: final commit: {e}", self.options.brokers);
        }
    }
}

/// Reads one site's records from its partition.
pub struct KafkaReader {
    options: KafkaOptions,
    partition: i32,
    consumer: BaseConsumer<Context>,
    next: u64,
    /// High watermark last seen: records below it exist and must arrive.
    end: u64,
}

impl LogReader for KafkaReader {
    fn next(&mut self, wait: Duration) -> Result<Option<LogEntry>, LogError> {
        let started = Instant::now();
        let mut last_warning = started;
        loop {
            if self.next >= self.end {
                let (_, high) = self
                    .consumer
                    .fetch_watermarks(&self.options.topic, self.partition, self.options.timeout)
                    .map_err(|e| self.options.error(format!("cannot read offsets: {e}")))?;
                self.end = high.max(0) as u64;
                if self.next >= self.end && started.elapsed() >= wait {
                    return Ok(None);
                }
            }
            let poll_for = if self.next < self.end {
                Duration::from_millis(200)
            } else {
                wait.min(Duration::from_millis(200))
            };
            match self.consumer.poll(poll_for) {
                Some(Ok(message)) => {
                    let offset = message.offset() as u64;
                    if offset < self.next {
                        continue;
                    }
                    self.next = offset + 1;
                    self.end = self.end.max(self.next);
                    if message.key() != Some(self.options.site.as_bytes()) {
                        continue; // another site sharing the partition
                    }
                    let bytes = message.payload().unwrap_or_default().to_vec();
                    return Ok(Some(LogEntry { offset, bytes }));
                }
                Some(Err(e)) => {
                    tracing::warn!("kafka {}: fetch: {e} (retrying)", self.options.brokers)
                }
                None => {}
            }
            if self.next < self.end {
                // Records exist that have not arrived: the broker is slow or gone.
                if started.elapsed() > self.options.timeout {
                    return Err(self.options.error(format!(
                        "offset {} exists but could not be fetched within {:?}; is the broker up?",
                        self.next, self.options.timeout
                    )));
                }
                if last_warning.elapsed() > Duration::from_secs(5) {
                    tracing::warn!(
                        "kafka {}: waiting for offset {}",
                        self.options.brokers,
                        self.next
                    );
                    last_warning = Instant::now();
                }
            } else if started.elapsed() >= wait {
                return Ok(None);
            }
        }
    }

    fn position(&self) -> u64 {
        self.next
    }
}

/// See [`KafkaLog::tail_reader`].
pub struct KafkaTailReader {
    options: KafkaOptions,
    consumer: BaseConsumer<Context>,
    next: u64,
    last_warning: Option<Instant>,
}

impl LogReader for KafkaTailReader {
    fn next(&mut self, wait: Duration) -> Result<Option<LogEntry>, LogError> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.consumer.poll(left.min(Duration::from_millis(100))) {
                Some(Ok(message)) => {
                    let offset = message.offset() as u64;
                    if offset < self.next {
                        continue;
                    }
                    self.next = offset + 1;
                    if message.key() != Some(self.options.site.as_bytes()) {
                        continue; // another site sharing the partition
                    }
                    let bytes = message.payload().unwrap_or_default().to_vec();
                    return Ok(Some(LogEntry { offset, bytes }));
                }
                Some(Err(e))
                    if self
                        .last_warning
                        .is_none_or(|t| t.elapsed() > Duration::from_secs(10)) =>
                {
                    tracing::warn!("kafka {}: fetch: {e} (retrying)", self.options.brokers);
                    self.last_warning = Some(Instant::now());
                }
                Some(Err(_)) => {}
                None => {}
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    fn position(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka_reference_values() {
        // Values from Kafka's UtilsTest (Java), as signed ints.
        assert_eq!(murmur2(b"21") as i32, -973932308);
        assert_eq!(murmur2(b"foobar") as i32, -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string") as i32, -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") as i32,
            -58897971
        );
        assert_eq!(murmur2(b"abc") as i32, 479470107);
    }
}
