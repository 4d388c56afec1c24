//! Two nodes on one embedded log (a zone on one machine, the README's set-up): each stamps
//! its records before the log's lock is its, so one node's record can reach the log after
//! the other's later stamp and be quarantined (R-LOG-4). Whatever a node acknowledged must
//! be applied: no acknowledged input quarantined behind the client's back.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use lhc_engine::build::{self, records};
use lhc_engine::Ts;
use serde_json::Value;

mod common;
mod live;
use live::{append, free_port, http, node_command, now_ms, small_site, stub_cloud, wait_until};

const A: &str = "a.z1.shared";
const B: &str = "b.z1.shared";
const MACHINE: &str = "vda1.z1.shared";

#[test]
fn every_input_two_nodes_acknowledge_on_one_log_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let t = now_ms() - 60_000;
    let site = small_site(&[A, B], Some(MACHINE));
    append(
        &log,
        &[
            build::text(&site.change(Ts(t), 1)),
            build::text(&records::storefront(Ts(t + 1), A, "sf")),
            build::text(&records::storefront(Ts(t + 2), B, "sf")),
        ],
    );
    let cloud = stub_cloud(Arc::new(AtomicBool::new(true)));
    let cloud_url = format!("http://127.0.0.1:{cloud}/health");
    let ports = [free_port(), free_port()];
    let _nodes: Vec<live::Kill> = [A, B]
        .iter()
        .zip(ports)
        .map(|(c, port)| {
            let data = dir.path().join(format!("data-{c}"));
            live::Kill(
                node_command(c, port, &log, &data, &cloud_url)
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    for port in ports {
        wait_until("the node is ready", Duration::from_secs(30), || {
            http(port, "GET", "/readyz", None, None).is_some_and(|(s, _)| s == 200)
        });
    }

    // Session events and heartbeats from 8 clients, alternating between the two nodes.
    let threads: Vec<_> = (0..8)
        .map(|k| {
            let port = ports[k % 2];
            std::thread::spawn(move || {
                let mut acknowledged = Vec::new();
                for i in 0..60 {
                    let (path, body) = if i % 3 == 2 {
                        ("/vda/heartbeat", format!(r#"{{"machine":"{MACHINE}"}}"#))
                    } else {
                        let session = format!("s{k}-{i}");
                        (
                            "/vda/session",
                            format!(
                                r#"{{"machine":"{MACHINE}","session":"{session}","user":"alice","event":"logon"}}"#
                            ),
                        )
                    };
                    let (status, answer) = http(port, "POST", path, Some(&body), None).unwrap();
                    // 503 only for a record that lost its race three times in a row.
                    assert!(
                        status == 202 || status == 503,
                        "{path}: {status} {answer}"
                    );
                    if status == 202 {
                        acknowledged.push((path, answer["offset"].as_u64().unwrap()));
                    }
                }
                acknowledged
            })
        })
        .collect();
    let answers: Vec<(&str, u64)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    // Each session event is a record of its own (its session id), at an offset of its own.
    // (Identical heartbeats stamped in one millisecond by both nodes are one record twice:
    // either copy's application answers, as for identical admin commands.)
    let sessions: BTreeSet<u64> = answers
        .iter()
        .filter(|(path, _)| *path == "/vda/session")
        .map(|(_, offset)| *offset)
        .collect();
    assert!(sessions.len() > 300, "{} session events", sessions.len());
    assert_eq!(
        sessions.len(),
        answers.iter().filter(|(p, _)| *p == "/vda/session").count()
    );
    let acknowledged: BTreeSet<u64> = answers.iter().map(|(_, offset)| *offset).collect();

    // What the log holds, replayed: none of the acknowledged offsets was quarantined.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["replay", "-q"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let quarantined: BTreeSet<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|o| o["type"] == "quarantine")
        .filter_map(|o| o["offset"].as_u64())
        .collect();
    let lost: Vec<&u64> = acknowledged.intersection(&quarantined).collect();
    eprintln!(
        "{} acknowledged, {} quarantined (races lost and stamped again)",
        acknowledged.len(),
        quarantined.len()
    );
    assert!(
        lost.is_empty(),
        "acknowledged, then quarantined: {lost:?} ({} quarantined in all)",
        quarantined.len()
    );
}
