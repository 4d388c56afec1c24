//! The conformance suite on Kafka: against librdkafka's mock cluster (a real Kafka protocol
//! endpoint on a loopback port), and against a real broker when `LHC_KAFKA_BROKERS` is set.

mod suite;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lhc_log::{KafkaLog, KafkaOptions, Log};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

struct Kafka {
    /// Kept alive for the test; `None` when a real broker is used.
    _cluster: Option<MockCluster<'static, DefaultProducerContext>>,
    options: KafkaOptions,
}

impl suite::Harness for Kafka {
    fn open(&self) -> Box<dyn Log> {
        Box::new(KafkaLog::open(self.options.clone()).unwrap())
    }
}

static TOPICS: AtomicUsize = AtomicUsize::new(0);

/// A mock cluster with the topic made, with `partitions` partitions.
fn mock(partitions: i32) -> Box<Kafka> {
    let cluster = MockCluster::new(3).expect("mock cluster");
    let topic = "lhc.events";
    cluster
        .create_topic(topic, partitions, 3)
        .expect("create topic");
    let mut options = KafkaOptions::new(cluster.bootstrap_servers(), "site-a");
    options.timeout = Duration::from_secs(20);
    Box::new(Kafka {
        _cluster: Some(cluster),
        options,
    })
}

fn fresh() -> Box<Kafka> {
    mock(1)
}

conformance_tests!(fresh);

/// Several partitions: the site must still land in one and be read back from it.
mod multi_partition {
    use super::*;

    fn fresh() -> Box<Kafka> {
        mock(6)
    }

    conformance_tests!(fresh);
}

/// A real broker, when one is given. Each case gets its own topic (the broker must allow
/// auto-creation).
mod real_broker {
    use super::*;

    fn fresh() -> Option<Box<Kafka>> {
        let brokers = std::env::var("LHC_KAFKA_BROKERS").ok()?;
        let n = TOPICS.fetch_add(1, Ordering::SeqCst);
        let mut options = KafkaOptions::new(brokers, "site-a");
        options.topic = format!("lhc-test-{}-{n}", std::process::id());
        Some(Box::new(Kafka {
            _cluster: None,
            options,
        }))
    }

    #[test]
    fn suite_against_real_broker_when_configured() {
        let Some(_) = fresh() else {
            eprintln!(
                "LHC_KAFKA_BROKERS not set: real-broker run skipped (mock cluster runs above)"
            );
            return;
        };
        suite::empty_log_reads_nothing(&*fresh().unwrap());
        suite::append_gives_dense_offsets_and_reads_back(&*fresh().unwrap());
        suite::read_from_any_offset(&*fresh().unwrap());
        suite::follow_sees_later_appends(&*fresh().unwrap());
        suite::restart_keeps_everything(&*fresh().unwrap());
        suite::concurrent_appenders_keep_their_order(&*fresh().unwrap());
        suite::bad_records_are_rejected_or_located(&*fresh().unwrap());
    }
}

#[test]
fn unreachable_broker_is_a_clear_error_not_a_hang() {
    let mut options = KafkaOptions::new("127.0.0.1:1", "site-a");
    options.timeout = Duration::from_secs(3);
    let started = std::time::Instant::now();
    let error = KafkaLog::open(options)
        .err()
        .expect("no broker listens on port 1");
    let message = error.to_string();
    assert!(
        message.contains("127.0.0.1:1") && message.contains("lhc.events"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(30), "bounded wait");
}

#[test]
fn site_partition_matches_librdkafka_murmur2_partitioner() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("t", 12, 1).unwrap();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap();
    let sites = [
        "site-a",
        "Site B",
        "zürich",
        "x",
        "a-much-longer-site-name.example.com",
    ];
    for site in sites {
        producer
            .send(BaseRecord::<str, str>::to("t").key(site).payload(site))
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let consumer: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("group.id", "g")
        .create()
        .unwrap();
    use rdkafka::consumer::Consumer;
    for site in sites {
        let p = lhc_log::kafka::site_partition(site, 12);
        let (_, high) = consumer
            .fetch_watermarks("t", p, Duration::from_secs(10))
            .unwrap();
        assert!(
            high >= 1,
            "librdkafka put {site:?} elsewhere than partition {p}"
        );
    }
}

#[test]
fn a_consumer_group_resumes_after_what_it_read() {
    use lhc_log::LogReader;
    let harness = mock(1);
    let log = KafkaLog::open(harness.options.clone()).unwrap();
    let first: Vec<Vec<u8>> = (0..5).map(suite::record).collect();
    log.append(&first.iter().map(Vec::as_slice).collect::<Vec<_>>())
        .unwrap();
    let read = |count: usize| -> Vec<u64> {
        let mut reader = log.group_reader("live").unwrap();
        let mut offsets = Vec::new();
        while offsets.len() < count {
            // Joining a group takes a few seconds on the mock cluster.
            match reader.next(Duration::from_secs(30)).unwrap() {
                Some(entry) => offsets.push(entry.offset),
                None => panic!("no record within 30 s; read {offsets:?} of {count}"),
            }
        }
        offsets
    };
    assert_eq!(read(5), vec![0, 1, 2, 3, 4]);
    let more: Vec<Vec<u8>> = (5..8).map(suite::record).collect();
    log.append(&more.iter().map(Vec::as_slice).collect::<Vec<_>>())
        .unwrap();
    assert_eq!(
        read(3),
        vec![5, 6, 7],
        "the group resumes after the committed offsets"
    );
}
