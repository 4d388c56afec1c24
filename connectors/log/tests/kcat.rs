//! Interoperability with kcat (Debian package `kcat`, installed by .ci/run) over the Kafka
//! protocol of librdkafka's mock cluster: a record produced by kcat is read by lhc, and a
//! record appended by lhc is consumed by kcat.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use lhc_log::{KafkaLog, KafkaOptions, Log};
use rdkafka::mocking::MockCluster;

const RECORD: &str = r#"{"ts":"2026-01-05T09:00:00.000Z","type":"storefront.heartbeat","connector":"c1.example","storefront":"sf1"}"#;

fn kcat() -> Command {
    let probe = Command::new("kcat").arg("-V").output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "kcat is not installed: `apt-get install kcat` (.ci/run does this)"
    );
    Command::new("kcat")
}

#[test]
fn kcat_produces_lhc_reads() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("lhc.events", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let mut child = kcat()
        .args([
            "-P",
            "-b",
            &brokers,
            "-t",
            "lhc.events",
            "-k",
            "site-a",
            "-p",
            "0",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{RECORD}\n").as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());

    let log = KafkaLog::open(KafkaOptions::new(&brokers, "site-a")).unwrap();
    let mut reader = log.reader(0).unwrap();
    let entry = reader
        .next(Duration::from_secs(20))
        .unwrap()
        .expect("kcat's record");
    assert_eq!(
        (entry.offset, entry.bytes.as_slice()),
        (0, RECORD.as_bytes())
    );
    lhc_engine::decode_record(&entry.bytes).expect("valid record");
}

#[test]
fn lhc_appends_kcat_consumes() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("lhc.events", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let log = KafkaLog::open(KafkaOptions::new(&brokers, "site-a")).unwrap();
    assert_eq!(log.append(&[RECORD.as_bytes()]).unwrap(), vec![0]);

    let output = kcat()
        .args([
            "-C",
            "-b",
            &brokers,
            "-t",
            "lhc.events",
            "-p",
            "0",
            "-o",
            "0",
            "-c",
            "1",
            "-e",
        ])
        .args(["-f", "%k|%o|%s\n"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        format!("site-a|0|{RECORD}\n")
    );
}
