//! librdkafka's mock cluster, for tests and benchmarks that need a real Kafka protocol
//! endpoint without a broker (principle 7: Kafka is optional at run time, never faked).
//!
//! Crates above `lhc-log` reach Kafka only through this crate, so they name no Kafka
//! client themselves.

use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use crate::LogError;

/// An in-process Kafka cluster speaking the real protocol; it stops when dropped.
pub struct MockKafka {
    cluster: MockCluster<'static, DefaultProducerContext>,
}

impl MockKafka {
    /// Starts a cluster of `brokers` brokers.
    pub fn new(brokers: i32) -> Result<MockKafka, LogError> {
        let cluster = MockCluster::new(brokers).map_err(|e| fail("starting", e))?;
        Ok(MockKafka { cluster })
    }

    /// The bootstrap servers to give clients (`host:port,...`).
    pub fn bootstrap_servers(&self) -> String {
        self.cluster.bootstrap_servers()
    }

    /// Creates topic `name` with `partitions` partitions (replication 1).
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<(), LogError> {
        self.cluster
            .create_topic(name, partitions, 1)
            .map_err(|e| fail(&format!("creating topic {name} on"), e))
    }

    /// Takes broker `id` (1-based) down: clients see it unreachable.
    pub fn broker_down(&self, id: i32) -> Result<(), LogError> {
        self.cluster
            .broker_down(id)
            .map_err(|e| fail(&format!("taking broker {id} of"), e))
    }

    /// Delays every answer of broker `id` by `delay` (zero: none). The broker still handles
    /// each request at once, so a produce request is stored while its client, waiting past
    /// its timeout, reports the delivery as failed: the "in doubt" case.
    pub fn delay_responses(&self, id: i32, delay: std::time::Duration) -> Result<(), LogError> {
        self.cluster
            .broker_round_trip_time(id, delay)
            .map_err(|e| fail(&format!("delaying broker {id} of"), e))
    }

    /// Brings broker `id` back up.
    pub fn broker_up(&self, id: i32) -> Result<(), LogError> {
        self.cluster
            .broker_up(id)
            .map_err(|e| fail(&format!("bringing broker {id} of"), e))
    }
}

fn fail(what: &str, e: rdkafka::error::KafkaError) -> LogError {
    LogError::Kafka {
        brokers: "mock cluster".into(),
        topic: String::new(),
        detail: format!("{what} the mock cluster: {e}"),
    }
}
