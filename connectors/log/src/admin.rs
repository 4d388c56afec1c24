//! `lhc kafka init`: creates the topics lhc needs with the settings its design relies on,
//! and checks topics that already exist, with Kafka's admin API.
//!
//! The site log is the source of truth: a replay from its start must find every record, so
//! it never expires (`retention.ms=-1`, `retention.bytes=-1`) and is never compacted (every
//! record of a site has the same key, so compaction would keep only a site's last record).
//! The output topic is kept the same way: each node finds its place in it by reading back
//! its own last output. Appends are acknowledged by every in-sync replica (`acks=all`, set
//! by lhc's producer), and `min.insync.replicas` makes "every" mean at least two when there
//! are three replicas or more.
//!
//! Invariant: [`check_topic`] is pure (settings in, findings out), so what lhc warns about is
//! tested without a broker.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::kafka::KafkaOptions;
use crate::LogError;

/// What `lhc kafka init` is asked to make.
#[derive(Clone, Debug)]
pub struct InitRequest {
    /// Topics to create or check (the site log first).
    pub topics: Vec<String>,
    /// Partitions of a created topic (a site lives in one; several sites share a topic).
    pub partitions: i32,
    /// Replicas of a created topic; `None`: three, or as many as the cluster has brokers if
    /// fewer.
    pub replication: Option<i32>,
}

/// One topic after `init`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TopicOutcome {
    /// Its name.
    pub topic: String,
    /// Whether `init` created it (else it existed).
    pub created: bool,
    /// Its partitions.
    pub partitions: usize,
    /// Its replication factor (replicas of partition 0).
    pub replication: usize,
    /// The settings that matter to lhc, as the brokers report them.
    pub settings: BTreeMap<String, String>,
    /// What would lose history or weaken durability, in words an admin can act on.
    pub warnings: Vec<String>,
    /// Some of the warnings are settings that delete records (retention, compaction).
    pub deletes_history: bool,
}

/// The settings a topic of lhc is created with, for `replication` replicas.
pub fn topic_settings(replication: i32) -> Vec<(&'static str, String)> {
    vec![
        ("cleanup.policy", "delete".into()),
        ("retention.ms", "-1".into()),
        ("retention.bytes", "-1".into()),
        ("min.insync.replicas", min_insync(replication).to_string()),
        ("unclean.leader.election.enable", "false".into()),
    ]
}

/// `min.insync.replicas` for `replication` replicas: two when there are three or more (one
/// broker may fail and appends go on, acknowledged by two), else one.
pub fn min_insync(replication: i32) -> i32 {
    if replication >= 3 {
        2
    } else {
        1
    }
}

/// Checks an lhc topic's settings (`settings` as the brokers describe them).
pub fn check_topic(
    topic: &str,
    settings: &BTreeMap<String, String>,
    replication: usize,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let get = |key: &str| settings.get(key).map(String::as_str);
    if let Some(policy) = get("cleanup.policy") {
        if policy.split(',').any(|p| p.trim() == "compact") {
            warnings.push(format!(
                "{topic}: cleanup.policy={policy}: compaction keeps only the last record of \
                 each key, and all of a site's records share its key, so it deletes the \
                 site's history; set cleanup.policy=delete with retention.ms=-1"
            ));
        }
    }
    if let Some(ms) = get("retention.ms").filter(|v| *v != "-1") {
        let age = ms
            .parse::<u64>()
            .map(|ms| humantime::format_duration(Duration::from_secs(ms / 1000)).to_string())
            .unwrap_or_else(|_| ms.to_string());
        warnings.push(format!(
            "{topic}: retention.ms={ms}: records older than {age} are deleted, and a replay \
             or a new node needs the log from its start; set retention.ms=-1"
        ));
    }
    if let Some(bytes) = get("retention.bytes").filter(|v| *v != "-1") {
        warnings.push(format!(
            "{topic}: retention.bytes={bytes}: the oldest records are deleted past that size, \
             and a replay or a new node needs the log from its start; set retention.bytes=-1"
        ));
    }
    let wanted = min_insync(replication as i32);
    if let Some(isr) = get("min.insync.replicas").and_then(|v| v.parse::<i32>().ok()) {
        if isr < wanted {
            warnings.push(format!(
                "{topic}: min.insync.replicas={isr} with {replication} replicas: an append \
                 acknowledged by one broker is lost if that broker fails before the others \
                 copy it; set min.insync.replicas={wanted}"
            ));
        }
    }
    if replication < 2 {
        warnings.push(format!(
            "{topic}: one replica: losing that broker's disk loses the log; use 3 replicas \
             in production"
        ));
    }
    if get("unclean.leader.election.enable") == Some("true") {
        warnings.push(format!(
            "{topic}: unclean.leader.election.enable=true: a replica that missed records can \
             become leader and the records are lost; set it to false"
        ));
    }
    warnings
}

/// Whether the settings delete records: compaction, or a retention by age or size.
pub fn deletes_history(settings: &BTreeMap<String, String>) -> bool {
    let get = |key: &str| settings.get(key).map(String::as_str);
    get("cleanup.policy").is_some_and(|p| p.split(',').any(|p| p.trim() == "compact"))
        || get("retention.ms").is_some_and(|v| v != "-1")
        || get("retention.bytes").is_some_and(|v| v != "-1")
}

/// Creates the missing topics and checks them all.
pub fn init(options: &KafkaOptions, request: &InitRequest) -> Result<Vec<TopicOutcome>, LogError> {
    let error = |detail: String| LogError::Kafka {
        brokers: options.brokers.clone(),
        topic: request.topics.join(", "),
        detail,
    };
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &options.brokers);
    for (key, value) in &options.extra {
        config.set(key, value);
    }
    let probe: BaseConsumer = config
        .create()
        .map_err(|e| error(format!("cannot create a client: {e}")))?;
    let metadata = probe
        .fetch_metadata(None, options.timeout)
        .map_err(|e| error(format!("brokers unreachable: {e}; check --kafka")))?;
    let brokers = metadata.brokers().len() as i32;
    let replication = request.replication.unwrap_or(3.min(brokers.max(1)));
    if replication > brokers {
        return Err(error(format!(
            "--replication {replication} but the cluster has {brokers} broker(s)"
        )));
    }
    let existing = |name: &str| {
        metadata
            .topics()
            .iter()
            .any(|t| t.name() == name && t.error().is_none())
    };
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .map_err(|e| error(format!("cannot create an admin client: {e}")))?;
    let admin_options = AdminOptions::new()
        .request_timeout(Some(options.timeout))
        .operation_timeout(Some(options.timeout));
    let settings = topic_settings(replication);
    let missing: Vec<&String> = request.topics.iter().filter(|t| !existing(t)).collect();
    let new_topics: Vec<NewTopic> = missing
        .iter()
        .map(|name| {
            settings.iter().fold(
                NewTopic::new(
                    name,
                    request.partitions,
                    TopicReplication::Fixed(replication),
                ),
                |topic, (key, value)| topic.set(key, value),
            )
        })
        .collect();
    if !new_topics.is_empty() {
        let results = futures_executor::block_on(admin.create_topics(&new_topics, &admin_options))
            .map_err(|e| error(format!("cannot create topics: {e}{}", no_admin_hint(&e))))?;
        for result in results {
            if let Err((name, code)) = result {
                return Err(error(format!("cannot create topic {name}: {code}")));
            }
        }
    }
    let specifiers: Vec<ResourceSpecifier> = request
        .topics
        .iter()
        .map(|t| ResourceSpecifier::Topic(t))
        .collect();
    let described = futures_executor::block_on(admin.describe_configs(&specifiers, &admin_options))
        .map_err(|e| {
            error(format!(
                "cannot describe the topics: {e}{}",
                no_admin_hint(&e)
            ))
        })?;
    // Partitions and replicas as the cluster sees them now (created topics included).
    let metadata = probe
        .fetch_metadata(None, options.timeout)
        .map_err(|e| error(format!("brokers unreachable: {e}")))?;
    let mut outcomes = Vec::new();
    for (name, described) in request.topics.iter().zip(described) {
        let resource =
            described.map_err(|code| error(format!("cannot describe topic {name}: {code}")))?;
        let settings: BTreeMap<String, String> = resource
            .entries
            .iter()
            .filter(|e| KEYS.contains(&e.name.as_str()))
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect();
        let topic = metadata.topics().iter().find(|t| t.name() == name);
        let partitions = topic.map_or(0, |t| t.partitions().len());
        let replication = topic
            .and_then(|t| t.partitions().first())
            .map_or(0, |p| p.replicas().len());
        let warnings = check_topic(name, &settings, replication);
        outcomes.push(TopicOutcome {
            topic: name.clone(),
            created: missing.contains(&name),
            partitions,
            replication,
            deletes_history: deletes_history(&settings),
            warnings,
            settings,
        });
    }
    Ok(outcomes)
}

/// After an admin request timed out: the likely cause (brokers answer metadata but not
/// admin requests, as librdkafka's mock cluster does).
fn no_admin_hint(e: &rdkafka::error::KafkaError) -> &'static str {
    use rdkafka::types::RDKafkaErrorCode::{OperationTimedOut, RequestTimedOut};
    let code = match e {
        rdkafka::error::KafkaError::AdminOp(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    match code {
        Some(OperationTimedOut | RequestTimedOut) => {
            " (the brokers did not answer the admin request in time: they may not support \
             Kafka's admin API, as librdkafka's mock cluster does not, or the principal \
             lacks DescribeConfigs/CreateTopics rights)"
        }
        _ => "",
    }
}

/// The topic settings `init` reports.
const KEYS: [&str; 5] = [
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "min.insync.replicas",
    "unclean.leader.election.enable",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_settings_init_creates_pass_its_own_check() {
        for replication in [1, 2, 3, 5] {
            let made: BTreeMap<String, String> = topic_settings(replication)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            assert!(!deletes_history(&made));
            let warnings = check_topic("t", &made, replication as usize);
            if replication == 1 {
                assert_eq!(warnings.len(), 1, "{warnings:?}");
                assert!(warnings[0].contains("one replica"));
            } else {
                assert!(warnings.is_empty(), "{replication}: {warnings:?}");
            }
        }
        assert_eq!(min_insync(3), 2);
        assert_eq!(min_insync(2), 1);
    }

    #[test]
    fn kafka_defaults_that_delete_history_are_named() {
        // Apache Kafka's defaults: 7 days, no size limit, min.insync.replicas=1.
        let defaults = settings(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "604800000"),
            ("retention.bytes", "-1"),
            ("min.insync.replicas", "1"),
        ]);
        let warnings = check_topic("lhc.events", &defaults, 3);
        assert!(deletes_history(&defaults));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("retention.ms=604800000"));
        assert!(warnings[0].contains("7days"));
        assert!(warnings[1].contains("min.insync.replicas=2"));
        let compacted = settings(&[("cleanup.policy", "compact,delete")]);
        let warnings = check_topic("lhc.events", &compacted, 3);
        assert!(warnings[0].contains("compaction"), "{warnings:?}");
        let small = settings(&[("retention.bytes", "1073741824")]);
        assert!(check_topic("t", &small, 3)[0].contains("retention.bytes=1073741824"));
        let unclean = settings(&[("unclean.leader.election.enable", "true")]);
        assert!(check_topic("t", &unclean, 3)[0].contains("unclean"));
    }
}
