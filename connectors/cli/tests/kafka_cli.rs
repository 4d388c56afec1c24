//! Kafka in production (issue 18): client settings for secured clusters, `lhc kafka init`,
//! and `lhc kafka mock`. On librdkafka's mock cluster; `lhc kafka init` needs the admin API,
//! which the mock cluster lacks, so its success path runs against a real broker given by
//! `LHC_KAFKA_BROKERS` (and is skipped, saying so, without one).

mod common;
use common::{lhc, ok, refused};

#[test]
fn version_lists_tls_and_sasl_support() {
    let (out, _) = ok(lhc(&["--version"]));
    let features = out
        .lines()
        .find(|l| l.starts_with("librdkafka"))
        .expect("a librdkafka line");
    for feature in [
        "ssl",
        "sasl_scram",
        "sasl_oauthbearer",
        "sasl_gssapi",
        "oidc",
        "zstd",
    ] {
        assert!(
            features.split([',', '(', ')', ' ']).any(|f| f == feature),
            "{feature} missing from {features}"
        );
    }
}

#[test]
fn bad_settings_fail_at_start_with_librdkafkas_words() {
    let base = ["log", "stats", "--kafka", "127.0.0.1:1", "--site", "s"];
    let with = |extra: &[&str]| lhc(&[&base[..], extra].concat());
    refused(
        with(&["--kafka-config", "no.such.key=1"]),
        "No such configuration property: \"no.such.key\"",
    );
    refused(
        with(&[
            "--kafka-config",
            "security.protocol=SASL_SSL",
            "--kafka-config",
            "sasl.mechanism=NOPE",
        ]),
        "Unsupported SASL mechanism: NOPE",
    );
    refused(with(&["--kafka-config", "acks=1"]), "lhc sets acks itself");
    refused(with(&["--kafka-config", "novalue"]), "expected KEY=VALUE");
    refused(
        with(&["--kafka-config", "bootstrap.servers=elsewhere:9092"]),
        "differs from --kafka",
    );

    // A Java properties file, as Confluent Cloud hands them out: comments, ':' separators,
    // a value with '=' in it; a bad key in it is named.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client.properties");
    std::fs::write(
        &file,
        "# Confluent Cloud\nsecurity.protocol=SASL_SSL\nsasl.mechanisms : PLAIN\n\
         sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"k\" password=\"s=x\";\n\
         sasl.username=k\nsasl.password=s=x\n",
    )
    .unwrap();
    refused(
        with(&["--kafka-config-file", file.to_str().unwrap()]),
        "Java JAAS configuration is not supported",
    );
    // librdkafka's other names for lhc's settings are lhc's settings too.
    refused(
        with(&["--kafka-config", "metadata.broker.list=elsewhere:9092"]),
        "differs from --kafka",
    );
    refused(
        with(&["--kafka-config", "delivery.timeout.ms=1"]),
        "lhc sets message.timeout.ms",
    );
    refused(with(&["--kafka-config", "topic.acks=1"]), "lhc sets acks");
    refused(
        with(&["--kafka-config", "request.required.acks=1"]),
        "lhc sets acks",
    );
    // Values librdkafka would crash on, and files that are no properties file.
    let long = dir.path().join("long.properties");
    std::fs::write(&long, format!("client.id={}\n", "a".repeat(300 << 10))).unwrap();
    refused(
        with(&["--kafka-config-file", long.to_str().unwrap()]),
        "more than the",
    );
    refused(
        with(&["--kafka-config-file", "/dev/zero"]),
        "not a regular file",
    );
    // Secrets are never echoed, not even under a misspelled key.
    let err = common::stderr(&with(&["--kafka-config", "sasl.pasword=hunter5"]));
    assert!(
        err.contains("sasl.pasword") && !err.contains("hunter5"),
        "{err}"
    );
    let err = common::stderr(&with(&["--kafka-config-file", file.to_str().unwrap()]));
    assert!(!err.contains("s=x"), "{err}");
    refused(
        with(&["--kafka-config-file", "/nonexistent/client.properties"]),
        "--kafka-config-file /nonexistent/client.properties",
    );
}

/// The settings reach the clients: on the plaintext mock cluster, a command works with
/// `security.protocol=PLAINTEXT` (from a file) and cannot connect with `SSL` (a flag, which
/// wins over the file).
#[test]
fn settings_reach_the_kafka_clients() {
    let cluster = lhc_log::MockKafka::new(1).unwrap();
    cluster.create_topic("lhc.events", 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client.properties");
    std::fs::write(&file, "security.protocol=PLAINTEXT\nclient.id=lhc-test\n").unwrap();
    let file = file.to_str().unwrap();
    let kafka = [
        "--kafka",
        brokers.as_str(),
        "--site",
        "s",
        "--kafka-timeout",
        "3",
    ];
    ok(lhc(&[
        &["log", "import", &common::example()],
        &kafka[..],
        &["--kafka-config-file", file],
    ]
    .concat()));
    let (cat, _) = ok(lhc(&[
        &["log", "cat"],
        &kafka[..],
        &["--kafka-config-file", file],
    ]
    .concat()));
    assert!(cat.lines().count() > 100);
    let out = lhc(&[
        &["log", "cat"],
        &kafka[..],
        &[
            "--kafka-config-file",
            file,
            "--kafka-config",
            "security.protocol=SSL",
        ],
    ]
    .concat());
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
}

#[test]
fn init_on_a_cluster_without_the_admin_api_says_so() {
    let cluster = lhc_log::MockKafka::new(1).unwrap();
    let brokers = cluster.bootstrap_servers();
    refused(
        lhc(&["kafka", "init", "--kafka", &brokers, "--kafka-timeout", "2"]),
        "may not support Kafka's admin API",
    );
    refused(
        lhc(&["kafka", "init", "--kafka", &brokers, "--replication", "3"]),
        "--replication 3 but the cluster has 1 broker(s)",
    );
    refused(
        lhc(&[
            "kafka",
            "init",
            "--kafka",
            &brokers,
            "--output-topic",
            "lhc.events",
        ]),
        "outputs need a topic of their own",
    );
}

/// Against a real cluster (`LHC_KAFKA_BROKERS`; the mock cluster has no admin API):
/// creates both topics with the settings the design needs, then finds them in order on a
/// second run. Run with `LHC_KAFKA_BROKERS=host:port cargo test --release -p lhc-cli --test
/// kafka_cli -- --ignored`.
#[test]
#[ignore = "needs a broker with Kafka's admin API in LHC_KAFKA_BROKERS"]
fn init_creates_and_checks_topics_on_a_real_broker() {
    let brokers = std::env::var("LHC_KAFKA_BROKERS")
        .expect("LHC_KAFKA_BROKERS=host:port names a broker with the admin API");
    let suffix = std::process::id();
    let (events, outputs) = (
        format!("lhc-test-{suffix}.events"),
        format!("lhc-test-{suffix}.outputs"),
    );
    let args = [
        "kafka",
        "init",
        "--kafka",
        &brokers,
        "--topic",
        &events,
        "--output-topic",
        &outputs,
        "--partitions",
        "3",
        "--replication",
        "1",
        "--format",
        "json",
    ];
    let (first, _) = ok(lhc(&args));
    let topics: Vec<serde_json::Value> = first
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(topics.len(), 2);
    for topic in &topics {
        assert_eq!(topic["created"], true, "{topic}");
        assert_eq!(topic["partitions"], 3, "{topic}");
        assert_eq!(topic["settings"]["retention.ms"], "-1", "{topic}");
        assert_eq!(topic["settings"]["cleanup.policy"], "delete", "{topic}");
        // One replica is all a test broker has: the only warning.
        assert_eq!(topic["warnings"].as_array().unwrap().len(), 1, "{topic}");
    }
    let (second, _) = ok(lhc(&args));
    assert!(
        second.lines().all(|l| l.contains("\"created\":false")),
        "{second}"
    );
}

#[test]
fn mock_prints_its_address_and_serves_kafka() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["kafka", "mock", "--topic", "lhc.events:4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let brokers = line.trim().to_string();
    let kafka = [
        "--kafka",
        brokers.as_str(),
        "--site",
        "s",
        "--kafka-timeout",
        "5",
    ];
    let imported = lhc(&[&["log", "import", &common::example()], &kafka[..]].concat());
    let _ = child.kill();
    let _ = child.wait();
    let (_, err) = ok(imported);
    assert!(err.contains("partition"), "{err}");
}

/// Many sites on one cluster (issue 18, item 5): three sites, two sharing a partition;
/// `--all-sites` gives each site the digest `--site NAME` gives it, the same with one
/// thread or several, and report, lint and forensics answer site by site.
#[test]
fn all_sites_folds_each_site_like_its_own_replay() {
    let cluster = lhc_log::MockKafka::new(1).unwrap();
    cluster.create_topic("lhc.events", 2).unwrap();
    let brokers = cluster.bootstrap_servers();
    let sites = ["alpha", "beta", "gamma"];
    let partitions: Vec<i32> = sites
        .iter()
        .map(|s| lhc_log::kafka::site_partition(s, 2))
        .collect();
    assert!(
        partitions.iter().filter(|&&p| p == partitions[0]).count() >= 2
            || partitions.iter().filter(|&&p| p == partitions[1]).count() >= 2,
        "two of three sites share one of two partitions"
    );
    // beta's log is cut after its outage began: it ends in LHC mode; gamma is the 505
    // scenario (failed imports).
    let example = std::fs::read_to_string(common::example()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.jsonl");
    let lines: Vec<&str> = example.lines().collect();
    std::fs::write(&cut, lines[..lines.len() * 2 / 5].join("\n") + "\n").unwrap();
    let failing = common::root()
        .join("engine/tests/scenarios/r-css-4.jsonl")
        .display()
        .to_string();
    for site in sites {
        let file = match site {
            "beta" => cut.to_str().unwrap().to_string(),
            "gamma" => failing.clone(),
            _ => common::example(),
        };
        ok(lhc(&[
            "log", "import", &file, "--kafka", &brokers, "--site", site,
        ]));
    }
    let kafka = ["--kafka", brokers.as_str()];
    let (all, err) = ok(lhc(
        &[&["replay", "--all-sites", "--digest"], &kafka[..]].concat()
    ));
    assert!(err.contains("3 site(s) in topic lhc.events"), "{err}");
    let summaries: Vec<serde_json::Value> = all
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(summaries.len(), 4, "{all}");
    for (summary, site) in summaries.iter().zip(sites) {
        assert_eq!(summary["site"], site);
        let (_, alone) = ok(lhc(&[
            &["replay", "--no-outputs", "--digest", "--site", site],
            &kafka[..],
        ]
        .concat()));
        let digest = summary["digest"].as_str().unwrap();
        assert!(
            alone.contains(&format!("digest {digest} after")),
            "{site}: {alone}"
        );
    }
    let in_lhc: Vec<bool> = summaries[..3]
        .iter()
        .map(|s| !s["in_lhc"].as_array().unwrap().is_empty())
        .collect();
    assert_eq!(in_lhc[..2], [false, true], "{all}");
    assert_eq!(summaries[0]["failed_imports"], 0, "{all}");
    assert_eq!(summaries[2]["failed_imports"], 4, "{all}");
    assert_eq!(summaries[3]["fleet"]["sites"], 3);
    assert_eq!(summaries[3]["fleet"]["sites_in_lhc"], 1);
    assert_eq!(
        summaries[3]["fleet"]["failed_launches"],
        summaries[..3]
            .iter()
            .map(|s| s["failed_launches"].as_u64().unwrap())
            .sum::<u64>()
    );
    let (one_thread, _) = ok(lhc(&[
        &["replay", "--all-sites", "--threads", "1"],
        &kafka[..],
    ]
    .concat()));
    assert_eq!(one_thread, all, "the same answers with one thread");

    let (report, _) = ok(lhc(&[
        &["report", "outage", "--all-sites", "--format", "json"],
        &kafka[..],
    ]
    .concat()));
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        report.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["alpha", "beta", "gamma"]
    );
    // gamma's failed imports are lint errors: the fleet fails, each site has its section.
    let linted = lhc(&[&["lint", "--all-sites"], &kafka[..]].concat());
    assert_eq!(linted.status.code(), Some(1), "{}", common::stderr(&linted));
    let lint = String::from_utf8(linted.stdout).unwrap();
    assert_eq!(lint.matches("== site ").count(), 3, "{lint}");
    let gamma = lint.split("== site gamma").nth(1).unwrap();
    assert!(gamma.contains("error["), "{lint}");
    // Only gamma has failed imports: its root causes, each naming the site.
    let (forensics, _) = ok(lhc(&[
        &["forensics", "sync", "--all-sites", "--format", "jsonl"],
        &kafka[..],
    ]
    .concat()));
    let causes: Vec<serde_json::Value> = forensics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!causes.is_empty(), "{forensics}");
    assert!(causes.iter().all(|c| c["site"] == "gamma"), "{forensics}");
    let (alone, _) = ok(lhc(&[
        &["forensics", "sync", "--site", "gamma", "--format", "jsonl"],
        &kafka[..],
    ]
    .concat()));
    assert_eq!(alone.lines().count(), causes.len());
    refused(
        lhc(&[&["replay", "--all-sites", "--site", "alpha"], &kafka[..]].concat()),
        "cannot be used with",
    );
    refused(lhc(&["replay", "--all-sites", "x.jsonl"]), "--kafka");
}

/// The virtualenv's python with confluent-kafka: `LHC_PYTHON`, else the CI virtualenv.
fn python_with_confluent_kafka() -> std::path::PathBuf {
    let candidates = [
        std::env::var_os("LHC_PYTHON").map(std::path::PathBuf::from),
        std::env::var_os("CARGO_TARGET_DIR")
            .map(|t| std::path::PathBuf::from(t).join("ci-venv/bin/python")),
        Some(common::root().join("target/ci-venv/bin/python")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|python| {
            std::process::Command::new(python)
                .args(["-c", "import confluent_kafka"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect(
            "python with confluent-kafka is needed for this test: run .ci/deps (installs it \
             into target/ci-venv)",
        )
}

/// Consumers of the output topic (issue 18, item 6): the records a node publishes, read
/// with docs/kafka.md's kcat one-liner and its Python example (confluent-kafka).
#[test]
fn the_documented_consumers_read_the_output_topic() {
    use lhc_engine::output::PublishedOutput;
    use lhc_engine::Output;
    use lhc_log::Log;
    let cluster = lhc_log::MockKafka::new(1).unwrap();
    cluster.create_topic("lhc.outputs", 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    // What the example's nodes publish: each connector its own outputs, keyed by its name.
    let (replayed, _) = ok(lhc(&["replay", &common::example()]));
    let outputs: Vec<Output> = replayed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut by_node: std::collections::BTreeMap<String, Vec<Vec<u8>>> = Default::default();
    for (i, output) in outputs.iter().enumerate() {
        let Some(node) = output.connector() else {
            continue;
        };
        let record = PublishedOutput {
            input_offset: i as u64,
            index: 0,
            node: node.to_string(),
            site: Some("demo".into()),
            output: output.clone(),
        };
        by_node
            .entry(node.to_string())
            .or_default()
            .push(serde_json::to_vec(&record).unwrap());
    }
    let mut published = 0;
    for (node, records) in &by_node {
        let mut options = lhc_log::KafkaOptions::new(brokers.clone(), node.clone());
        options.topic = "lhc.outputs".into();
        let log = lhc_log::KafkaLog::open(options).unwrap();
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        log.append(&refs).unwrap();
        published += records.len();
    }
    let rejected: Vec<&Output> = outputs
        .iter()
        .filter(|o| matches!(o, Output::LaunchDecision(d) if d.outcome == lhc_engine::output::Outcome::Rejected))
        .collect();
    assert!(!rejected.is_empty());

    // docs/kafka.md: kcat -C -b BROKERS -t lhc.outputs -o beginning -e -q -f '%k\t%s\n'
    let kcat = std::process::Command::new("kcat")
        .args([
            "-C",
            "-b",
            &brokers,
            "-t",
            "lhc.outputs",
            "-o",
            "beginning",
            "-e",
            "-q",
        ])
        .args(["-f", "%k\t%s\n"])
        .output()
        .expect("kcat runs (.ci/deps installs it)");
    let text = String::from_utf8(kcat.stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        published,
        "{}",
        String::from_utf8_lossy(&kcat.stderr)
    );
    for line in text.lines() {
        let (key, value) = line.split_once('\t').unwrap();
        let record: PublishedOutput = serde_json::from_str(value).unwrap();
        assert_eq!(record.node, key);
    }

    // docs/examples/consume_outputs.py: the refused launches, keyed by connector; the
    // snippet docs/kafka.md shows is the script's own code.
    let script = common::root().join("docs/examples/consume_outputs.py");
    let doc = std::fs::read_to_string(common::root().join("docs/kafka.md")).unwrap();
    let snippet = doc
        .split("```python\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("docs/kafka.md shows the Python consumer");
    assert!(
        std::fs::read_to_string(&script).unwrap().contains(snippet),
        "docs/kafka.md's Python snippet differs from {}",
        script.display()
    );
    let run = std::process::Command::new(python_with_confluent_kafka())
        .arg(&script)
        .arg(&brokers)
        .output()
        .unwrap();
    let printed = String::from_utf8(run.stdout).unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut expected: Vec<String> = rejected
        .iter()
        .map(|o| match o {
            Output::LaunchDecision(d) => format!(
                "{} {} {} {}",
                d.connector,
                serde_json::to_value(d.ts).unwrap().as_str().unwrap(),
                d.request,
                d.reason
                    .map_or("None".into(), |r| lhc_engine::engine::snake(&r))
            ),
            _ => unreachable!(),
        })
        .collect();
    let mut got: Vec<String> = printed.lines().map(str::to_string).collect();
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
}
