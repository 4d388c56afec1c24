//! Kafka lost mid-run (librdkafka's mock cluster with its broker down): the node keeps
//! brokering from its local journal; when the broker returns the outbox is published and
//! the topic holds every record; replaying the node's journal reproduces every decision it
//! answered.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use lhc_engine::build::{self, SiteBuilder};
use lhc_engine::config::DeliveryGroupKind;
use lhc_engine::Ts;
use serde_json::Value;

mod live;
use live::{free_port, now_ms, stub_cloud, wait_until};

const NODE: &str = "a.z1.test";

fn lhc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lhc"))
}

fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, Value)> {
    live::http(port, method, path, Some(body), None)
}

/// Kills the node if the test fails halfway.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn heartbeats(port: u16) {
    http(
        port,
        "POST",
        "/storefront/heartbeat",
        r#"{"storefront":"sf1"}"#,
    );
    http(
        port,
        "POST",
        "/vda/heartbeat",
        r#"{"machine":"vda1.z1.test","sessions":[]}"#,
    );
}

fn launch(port: u16, id: &str) -> Value {
    let body = format!(
        r#"{{"request":"{id}","user":"alice","resource":"app","client":{{"name":"pc1","ip":"10.0.0.9"}}}}"#
    );
    let (status, answer) = http(port, "POST", "/storefront/launch", &body).expect("answers");
    assert_eq!(status, 200, "launch {id}: {answer}");
    answer
}

fn lines(out: std::process::Output) -> Vec<String> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn brokering_goes_on_while_kafka_is_down_and_nothing_is_lost() {
    let Running {
        cluster,
        brokers,
        dir,
        cloud: _,
        data,
        mut node,
        port,
        mut answers,
    } = running("lost-test");
    let kafka = ["--kafka", brokers.as_str(), "--site", "lost-test"];

    cluster.broker_down(1).unwrap();
    for i in 0..5 {
        heartbeats(port);
        let id = format!("during-outage-{i}");
        let d = launch(port, &id);
        assert_eq!(d["outcome"], "brokered", "{id}: {d}");
        answers.push((id, d));
    }
    let (_, health) = http(port, "GET", "/healthz", "").unwrap();
    assert_eq!(health["kafka_up"], false, "{health}");
    assert!(health["outbox"].as_u64().unwrap() > 0, "{health}");

    cluster.broker_up(1).unwrap();
    wait_until("the outbox is published", Duration::from_secs(60), || {
        let (_, health) = http(port, "GET", "/healthz", "").unwrap();
        health["kafka_up"] == true && health["outbox"] == 0
    });
    let d = launch(port, "after-outage");
    assert_eq!(d["outcome"], "brokered");
    answers.push(("after-outage".into(), d));

    let mut child = node.0.take().unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());

    // The topic holds every record the node applied, once.
    let journal = lines(
        lhc()
            .args(["connector", "journal", "--data"])
            .arg(&data)
            .output()
            .unwrap(),
    );
    let topic = lines(lhc().args(["log", "cat"]).args(kafka).output().unwrap());
    let (mut j, mut k) = (journal.clone(), topic.clone());
    j.sort();
    k.sort();
    assert_eq!(j, k, "journal and topic hold the same records");
    assert!(journal.iter().any(|l| l.contains("during-outage-4")));

    // The output topic holds the node's outputs once each, in order, keyed by input offset,
    // and exactly those its cache snapshot stored about it.
    let published: Vec<Value> = lines(
        lhc()
            .args([
                "log",
                "cat",
                "--kafka",
                brokers.as_str(),
                "--topic",
                "lhc.outputs",
            ])
            .args(["--site", NODE])
            .output()
            .unwrap(),
    )
    .iter()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    let stored: Vec<Value> = lines(
        lhc()
            .args(["connector", "outputs", "--data"])
            .arg(&data)
            .output()
            .unwrap(),
    )
    .iter()
    .map(|l| serde_json::from_str::<Value>(l).unwrap())
    .filter(|o| o["connector"].as_str().is_none_or(|c| c == NODE))
    .collect();
    // Each is a record of schemas/published-output.schema.json, naming node and site.
    for p in &published {
        let record: lhc_engine::output::PublishedOutput =
            serde_json::from_value(p.clone()).expect("a published-output record");
        assert_eq!(
            (record.node.as_str(), record.site.as_deref()),
            (NODE, Some("lost-test"))
        );
    }
    let outputs_published: Vec<&Value> = published.iter().map(|p| &p["output"]).collect();
    assert_eq!(outputs_published, stored.iter().collect::<Vec<_>>());
    let keys: Vec<(u64, u64)> = published
        .iter()
        .map(|p| {
            (
                p["input_offset"].as_u64().unwrap(),
                p["index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]));

    // Replaying the node's journal makes every decision the node answered.
    let journal_file = dir.path().join("journal.jsonl");
    std::fs::write(&journal_file, journal.join("\n") + "\n").unwrap();
    let mut replay = lhc();
    replay.arg("replay").arg(&journal_file);
    assert_decisions(replay, &answers);
}

/// A site imported into the mock cluster and a node serving it, the VDA registered.
struct Running {
    cluster: lhc_log::MockKafka,
    brokers: String,
    dir: tempfile::TempDir,
    /// The stub control plane's port.
    cloud: u16,
    /// The node's data directory.
    data: std::path::PathBuf,
    node: KillOnDrop,
    port: u16,
    /// The launches answered so far (those until the VDA registered).
    answers: Vec<(String, Value)>,
}

/// Imports the one-connector site as `site`, starts its node and waits until it brokers.
fn running(site: &str) -> Running {
    let (cluster, brokers) = mock_cluster();
    let kafka = ["--kafka", brokers.as_str(), "--site", site];
    let dir = tempfile::tempdir().unwrap();
    import_site(&kafka, dir.path());
    let cloud = stub_cloud(Arc::new(AtomicBool::new(true)));
    let data = dir.path().join("node");
    let (node, port) = start_node(&kafka, &data, cloud);
    let mut answers = Vec::new();
    wait_brokered(port, "wait", &mut answers);
    Running {
        cluster,
        brokers,
        dir,
        cloud,
        data,
        node,
        port,
        answers,
    }
}

/// librdkafka's mock cluster with the site and output topics; its bootstrap servers.
fn mock_cluster() -> (lhc_log::MockKafka, String) {
    let cluster = lhc_log::MockKafka::new(1).unwrap();
    cluster.create_topic("lhc.events", 1).unwrap();
    cluster.create_topic("lhc.outputs", 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    (cluster, brokers)
}

/// Heartbeats and launches (`PREFIX-N`) until one is brokered (the VDA registered); every
/// answer joins `answers`.
fn wait_brokered(port: u16, prefix: &str, answers: &mut Vec<(String, Value)>) {
    let mut n = 0;
    wait_until("a launch is brokered", Duration::from_secs(20), || {
        heartbeats(port);
        let id = format!("{prefix}-{n}");
        n += 1;
        let d = launch(port, &id);
        let ok = d["outcome"] == "brokered";
        answers.push((id, d));
        ok
    });
}

/// Runs `replay` and asserts that each answered request has exactly the decision the node
/// answered.
fn assert_decisions(mut replay: Command, answers: &[(String, Value)]) {
    let outputs: Vec<Value> = lines(replay.output().unwrap())
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (id, answer) in answers {
        let decisions: Vec<&Value> = outputs
            .iter()
            .filter(|o| o["type"] == "launch.decision" && o["request"] == id.as_str())
            .collect();
        assert_eq!(decisions, vec![answer], "request {id}");
    }
}

/// Starts a node on the site's topic; returns it with its port.
fn start_node(kafka: &[&str], data: &std::path::Path, cloud: u16) -> (KillOnDrop, u16) {
    let port = free_port();
    let node = lhc()
        .args(["connector", "run", "--connector", NODE])
        .args(kafka)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--cloud-url", &format!("http://127.0.0.1:{cloud}/")])
        .args(["--health-interval", "500ms", "--tick-interval", "300ms"])
        .args(["--kafka-append-timeout", "1s", "--commit-interval", "50ms"])
        .arg("--data")
        .arg(data)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let node = KillOnDrop(Some(node));
    // Ready: caught up with the topic, or started from its journal without Kafka.
    wait_until("the node is ready", Duration::from_secs(30), || {
        http(port, "GET", "/readyz", "").is_some_and(|(status, _)| status == 200)
    });
    (node, port)
}

/// Imports a one-connector site into the topic.
fn import_site(kafka: &[&str], dir: &std::path::Path) {
    let site = SiteBuilder::new()
        .zone("z1")
        .connector(NODE, "z1")
        .group("g", DeliveryGroupKind::MultiSession)
        .machine("vda1.z1.test", "z1", "g", Some(100))
        .application("app", &["g"])
        .user("alice", &[])
        .entitlement("e", "app", &["alice"]);
    let config = build::text(&site.change(Ts(now_ms() - 5_000), 1)) + "\n";
    let file = dir.join("site.jsonl");
    std::fs::write(&file, config).unwrap();
    lines(
        lhc()
            .args(["log", "import"])
            .arg(&file)
            .args(kafka)
            .output()
            .unwrap(),
    );
}

/// Exactly once across nodes (issue 18, item 3): the broker stores appends whose answers
/// come too late, so the node reports them failed, keeps them in its journal and publishes
/// them again. The topic then holds those records twice; every reader applies each once.
#[test]
fn records_whose_delivery_was_in_doubt_are_applied_once_by_every_reader() {
    let Running {
        cluster,
        brokers,
        dir: _dir,
        cloud: _,
        data,
        mut node,
        port,
        mut answers,
    } = running("once-test");
    let kafka = ["--kafka", brokers.as_str(), "--site", "once-test"];

    // Answers take 3 s, the node waits 1 s: an append sent before its timeout is stored
    // and reported failed. (On a loaded machine a request may time out before it is even
    // sent, and nothing is doubled: the round is tried again.)
    let read_topic = || -> Vec<Value> {
        lines(lhc().args(["log", "cat"]).args(kafka).output().unwrap())
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let copies = |topic: &[Value]| {
        let mut ids: Vec<&str> = topic
            .iter()
            .filter_map(|r| r["record_id"].as_str())
            .collect();
        let appended = ids.len();
        ids.sort();
        ids.dedup();
        appended - ids.len()
    };
    for round in 0..5 {
        cluster.delay_responses(1, Duration::from_secs(3)).unwrap();
        for i in 0..3 {
            let id = format!("in-doubt-{round}-{i}");
            let d = launch(port, &id);
            assert_eq!(d["outcome"], "brokered", "{id}: {d}");
            answers.push((id, d));
        }
        cluster.delay_responses(1, Duration::ZERO).unwrap();
        wait_until("the journal is published", Duration::from_secs(60), || {
            let (_, health) = http(port, "GET", "/healthz", "").unwrap();
            health["kafka_up"] == true && health["outbox"] == 0
        });
        if copies(&read_topic()) > 0 {
            break;
        }
    }
    let d = launch(port, "after");
    assert_eq!(d["outcome"], "brokered");
    answers.push(("after".into(), d));
    let mut child = node.0.take().unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());

    // The topic holds some records twice: the fault happened.
    let topic = read_topic();
    let twice = copies(&topic);
    assert!(twice > 0, "no record reached the topic twice: {topic:?}");
    let doubled: Vec<&str> = answers
        .iter()
        .map(|(id, _)| id.as_str())
        .filter(|id| {
            topic
                .iter()
                .filter(|r| r["type"] == "launch.request" && r["request"] == *id)
                .count()
                >= 2
        })
        .collect();
    assert!(
        !doubled.is_empty(),
        "a launch request reached the topic twice"
    );

    // A reader of the topic applies each once: the copies are quarantined as duplicates,
    // and each request has the one decision the node answered.
    let outputs: Vec<Value> = lines(lhc().arg("replay").args(kafka).output().unwrap())
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let duplicates = outputs
        .iter()
        .filter(|o| {
            o["type"] == "quarantine" && o["error"].as_str().unwrap().contains("is a duplicate")
        })
        .count();
    assert_eq!(duplicates, twice, "one quarantine per extra copy");
    for (id, answer) in &answers {
        let decisions: Vec<&Value> = outputs
            .iter()
            .filter(|o| o["type"] == "launch.decision" && o["request"] == id.as_str())
            .collect();
        assert_eq!(decisions, vec![answer], "request {id}");
    }

    // The node applied its own doubled records once too: its journal holds each once.
    let journal = lines(
        lhc()
            .args(["connector", "journal", "--data"])
            .arg(&data)
            .output()
            .unwrap(),
    );
    for id in doubled {
        let needle = format!("\"{id}\"");
        let in_journal = journal.iter().filter(|l| l.contains(&needle)).count();
        assert_eq!(in_journal, 1, "{id}: {journal:?}");
    }
}

/// The node's `/metrics` text.
fn metrics(port: u16) -> String {
    match http(port, "GET", "/metrics", "") {
        Some((200, Value::String(text))) => text,
        other => panic!("/metrics: {other:?}"),
    }
}

/// Stops a node with SIGTERM and checks it stopped cleanly.
fn stop(node: &mut KillOnDrop) {
    let mut child = node.0.take().unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

/// Start without Kafka (issue 18, item 4): a node that folded the topic before starts while
/// the broker is down, decides from its journal and last state, says so on its probes and
/// metrics, and publishes what it appended when the broker returns. A node that never
/// folded the topic has nothing to decide from and refuses to start, naming the brokers.
#[test]
fn a_node_starts_without_kafka_and_publishes_when_it_returns() {
    let Running {
        cluster,
        brokers,
        dir,
        cloud,
        data,
        mut node,
        port: _,
        mut answers,
    } = running("offline-test");
    let kafka = ["--kafka", brokers.as_str(), "--site", "offline-test"];
    stop(&mut node);

    cluster.broker_down(1).unwrap();
    let run = |extra: &[&str], data: &std::path::Path| {
        lhc()
            .args(["connector", "run", "--connector", NODE])
            .args(extra)
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--kafka-append-timeout", "1s"])
            .args(["--cloud-url", &format!("http://127.0.0.1:{cloud}/")])
            .arg("--data")
            .arg(data)
            .output()
            .unwrap()
    };
    // A node with no state refuses: it has nothing to decide from.
    let refused = run(&kafka, &dir.path().join("fresh"));
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains(&brokers), "{stderr}");

    // A directory folds one site: started for another, it refuses, naming both.
    let other = run(
        &["--kafka", brokers.as_str(), "--site", "another-site"],
        &data,
    );
    assert!(!other.status.success());
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(
        stderr.contains("folds lhc.events/offline-test") && stderr.contains("another-site"),
        "{stderr}"
    );

    // A directory is continued only by the kind of source that filled it: a state folded
    // from a log is at the log's offsets, a Kafka node's at its journal's, with its
    // position in the topic apart. Continued by the other, records would be read twice.
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/examples/site-outage.jsonl"
    );
    let log = dir.path().join("embedded");
    let folded = dir.path().join("folded");
    let imported = lhc()
        .args(["log", "import", example])
        .arg(&log)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let fold = |data: &std::path::Path| {
        lhc()
            .args(["connector", "fold", "--log"])
            .arg(&log)
            .arg("--data")
            .arg(data)
            .output()
            .unwrap()
    };
    assert!(fold(&folded).status.success());
    let log_arg = log.display().to_string();
    for (what, out, words) in [
        (
            "run --kafka on a folded log",
            run(&kafka, &folded),
            "folded from a log",
        ),
        (
            "fold into a Kafka node's",
            fold(&data),
            "state of a Kafka node",
        ),
        (
            "run on a log with a Kafka node's",
            run(&["--log", log_arg.as_str()], &data),
            "state of a Kafka node",
        ),
    ] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(stderr.contains(words), "{what}: {stderr}");
    }

    // The node that folded the topic starts, and decides.
    let (mut node, port) = start_node(&kafka, &data, cloud);
    let (status, health) = http(port, "GET", "/readyz", "").unwrap();
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["kafka_up"], false, "{health}");
    assert!(
        health["kafka_detail"]
            .as_str()
            .unwrap()
            .contains("has not answered since this node started"),
        "{health}"
    );
    let scrape = metrics(port);
    assert!(
        scrape.contains("lhc_kafka_unreachable_since_start 1"),
        "{scrape}"
    );
    // The restarted node sees the VDA again at its next heartbeat.
    wait_brokered(port, "offline-wait", &mut answers);
    for i in 0..3 {
        heartbeats(port);
        let id = format!("offline-{i}");
        let d = launch(port, &id);
        assert_eq!(d["outcome"], "brokered", "{id}: {d}");
        answers.push((id, d));
    }
    let (_, health) = http(port, "GET", "/healthz", "").unwrap();
    assert!(health["outbox"].as_u64().unwrap() > 0, "{health}");
    assert_eq!(health["kafka_up"], false, "{health}");

    cluster.broker_up(1).unwrap();
    wait_until("the journal is published", Duration::from_secs(60), || {
        let (_, health) = http(port, "GET", "/healthz", "").unwrap();
        health["kafka_up"] == true && health["outbox"] == 0 && health["kafka_detail"].is_null()
    });
    assert!(metrics(port).contains("lhc_kafka_unreachable_since_start 0"));
    stop(&mut node);

    // The topic holds each offline request once, and replaying it gives every answer.
    let topic = lines(lhc().args(["log", "cat"]).args(kafka).output().unwrap());
    for i in 0..3 {
        let needle = format!("\"offline-{i}\"");
        assert_eq!(topic.iter().filter(|l| l.contains(&needle)).count(), 1);
    }
    let mut replay = lhc();
    replay.arg("replay").args(kafka);
    assert_decisions(replay, &answers);
}

/// A partition shared by two sites that ends with the other site's records: the node's
/// position moves past the records it skips, so it is caught up and serves (it used to
/// wait for ever, not ready, with "0 record(s) to fold").
#[test]
fn a_node_is_ready_when_another_site_ends_the_partition() {
    let (_cluster, brokers) = mock_cluster();
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    import_site(&["--kafka", brokers.as_str(), "--site", "a"], dir.path());
    import_site(&["--kafka", brokers.as_str(), "--site", "b"], &other);
    let cloud = stub_cloud(Arc::new(AtomicBool::new(true)));
    let kafka = ["--kafka", brokers.as_str(), "--site", "a"];
    let (mut node, port) = start_node(&kafka, &dir.path().join("node"), cloud);
    let mut answers = Vec::new();
    wait_brokered(port, "shared", &mut answers);
    stop(&mut node);
}
