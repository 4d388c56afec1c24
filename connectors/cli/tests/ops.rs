//! A node an SRE can operate: liveness and readiness probes that say why, metrics that
//! `promtool check metrics` accepts, and the alert rules and dashboard in `deploy/` checked
//! against what a node really exports.

use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use lhc_engine::build::{self, records};
use lhc_engine::Ts;
use serde_json::Value;

mod common;
mod live;
use live::{
    append, free_port, http, launch_app, node_command, now_ms, small_site, stub_cloud, wait_until,
    Kill,
};

const A: &str = "a.z1.ops";
/// The simulated site's first connector.
const SIM: &str = "cc1.z1.sim.example";
/// A control plane nobody answers at.
const NO_CLOUD: &str = "http://127.0.0.1:9/";

fn promtool() -> &'static str {
    assert!(
        Command::new("promtool").arg("--version").output().is_ok(),
        "promtool is needed for this test: run .ci/deps (installs Debian's prometheus)"
    );
    "promtool"
}

fn get(port: u16, path: &str) -> (u16, Value) {
    http(port, "GET", path, None, None).unwrap_or((0, Value::Null))
}

#[test]
fn probes_metrics_alerts_and_dashboard() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let cloud = stub_cloud(Arc::new(AtomicBool::new(true)));
    let port = free_port();
    let cloud_url = format!("http://127.0.0.1:{cloud}/health");
    let node = node_command(A, port, &log, &dir.path().join("node"), &cloud_url)
        .args(["--log-format", "json"])
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap();
    let mut node = Kill(node);
    wait_until("the node serves", Duration::from_secs(30), || {
        get(port, "/livez").0 == 200
    });
    // At start it folds the (empty) log first and says so ("catching_up"): a loaded
    // machine can ask before that is done.
    wait_until("the node has caught up", Duration::from_secs(30), || {
        get(port, "/readyz").1["reason"] != "catching_up"
    });
    // No configuration names this connector yet: alive, not ready, and it says why.
    let (status, body) = get(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["reason"], "not_configured", "{body}");
    assert_eq!(get(port, "/healthz").0, 503, "/healthz is readiness");
    let (status, body) = get(port, "/livez");
    assert_eq!((status, body["status"].as_str()), (200, Some("alive")));

    // The configuration arrives through the log: ready.
    // A little ahead of the node's own ticks, so the append is not older than the log.
    let t = now_ms() + 2_000;
    let site = small_site(&[A], Some("vda1.z1.ops"));
    // The node appends ticks to the log; these records may land after one.
    append(
        &log,
        &[
            build::text(&site.change(Ts(t), 1)),
            build::text(&records::storefront(Ts(t + 1), A, "sf")),
        ],
    );
    wait_until("ready", Duration::from_secs(30), || {
        get(port, "/readyz").0 == 200
    });
    let (_, body) = get(port, "/readyz");
    assert_eq!(body["status"], "ok", "{body}");

    // A launch, so the latency histogram has an observation.
    let launch = launch_app(port);
    assert_eq!(launch.0, 200, "{launch:?}");

    // The scrape: promtool accepts it, and the metrics an SRE pages on are there.
    let (status, scrape) = get(port, "/metrics");
    assert_eq!(status, 200);
    let scrape = scrape.as_str().unwrap().to_string();
    for metric in [
        "lhc_build_info{",
        "lhc_ready 1",
        "lhc_config_last_import_timestamp_seconds ",
        "lhc_launch_duration_seconds_count 1",
        "lhc_health_check_failures_total 0",
        "lhc_peer_probe_failures_total",
        "lhc_fold_lag_seconds ",
        "lhc_connector_state{state=\"working_normally\"} 1",
    ] {
        assert!(scrape.contains(metric), "{metric} in:\n{scrape}");
    }
    let checked = common::output_with_stdin(
        Command::new(promtool()).args(["check", "metrics"]),
        scrape.as_bytes(),
    );
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // The rules and the dashboard in deploy/ are valid and use only metrics a node exports.
    let rules = common::root().join("deploy/prometheus/lhc-alerts.yml");
    let checked = Command::new(promtool())
        .args(["check", "rules", rules.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "promtool check rules: {}",
        String::from_utf8_lossy(&checked.stdout)
    );
    let exported: std::collections::BTreeSet<String> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let uses_known = |expr: &str, what: &str| {
        for word in expr.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if word.starts_with("lhc_") {
                let family = ["_total", "_bucket", "_count", "_sum"]
                    .iter()
                    .fold(word, |w, suffix| w.strip_suffix(suffix).unwrap_or(w));
                // The Kafka gauge exists on Kafka-backed nodes only.
                assert!(
                    exported.contains(word)
                        || exported.contains(family)
                        || family == "lhc_kafka_up",
                    "{what} uses {word}, which a node does not export ({exported:?})"
                );
            }
        }
    };
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    uses_known(&rules_text, "the alert rules");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("deploy/grafana/lhc-zone.json")).unwrap(),
    )
    .unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 8);
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            uses_known(target["expr"].as_str().unwrap(), "the dashboard");
        }
    }

    // What the node lived through is in its log, one JSON object per line, at info by
    // default: the import of version 1 (504).
    let _ = node.0.kill();
    let mut stderr = String::new();
    use std::io::Read;
    node.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["event_id"] == 504 && l["level"] == "INFO"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "no colour in JSON logs");
}

/// An embedded log of a simulated one-zone site (4,000 VDAs and users, `hours` long,
/// long enough that a node's catch-up takes a while); returns it and its record count.
fn simulated_log(dir: &std::path::Path, seed: u32, hours: u32) -> (std::path::PathBuf, u64) {
    let sim = dir.join("sim.jsonl");
    common::simulate(
        sim.to_str().unwrap(),
        seed,
        4000,
        4000,
        hours,
        &["--zones", "1"],
    );
    let log = dir.join("log");
    let imported = Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["log", "import"])
        .arg(&sim)
        .arg("--log")
        .arg(&log)
        .arg("-q")
        .output()
        .unwrap();
    assert!(imported.status.success());
    let records = std::fs::read_to_string(&sim).unwrap().lines().count() as u64;
    (log, records)
}

/// At start the node serves its probes while it folds the log (a liveness probe must not
/// kill a node catching up with a long log): alive, not ready (`catching_up`), the ADC
/// probe DOWN with that reason, and the routes that decide refuse with a 503 JSON error
/// until it has caught up; then they answer.
#[test]
fn probes_answer_during_the_catch_up_and_deciding_routes_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = simulated_log(dir.path(), 3, 8);
    let port = free_port();
    let node = node_command(SIM, port, &log, &dir.path().join("node"), NO_CLOUD)
        .spawn()
        .unwrap();
    let _node = Kill(node);
    // The first answer comes while the fold is still far from the log's end.
    let started = std::time::Instant::now();
    let live = loop {
        if let Some(answer) = http(port, "GET", "/livez", None, None) {
            break answer;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the node serves"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(live.0, 200, "alive while catching up: {live:?}");
    let (status, ready) = get(port, "/readyz");
    assert_eq!(
        (status, ready["reason"].as_str()),
        (503, Some("catching_up")),
        "{ready}"
    );
    let (status, probe) = get(port, "/adc/probe");
    assert_eq!(
        (status, probe["status"].as_str()),
        (503, Some("DOWN")),
        "{probe}"
    );
    assert_eq!(probe["reason"], "catching_up", "{probe}");
    let launch = r#"{"user":"u1","resource":"office","client":{"name":"pc","ip":"10.0.0.1"}}"#;
    let (status, refused) = http(port, "POST", "/storefront/launch", Some(launch), None).unwrap();
    assert_eq!(status, 503, "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("catching up"),
        "{refused}"
    );
    // Caught up: ready, and the same launch is decided.
    wait_until("ready", Duration::from_secs(60), || {
        get(port, "/readyz").0 == 200
    });
    let (status, decided) = http(port, "POST", "/storefront/launch", Some(launch), None).unwrap();
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["type"], "launch.decision", "{decided}");
    // The counter counts what this process decided: the one launch, not the history of
    // the log it folded at start (thousands of cc1's decisions).
    let (_, scrape) = get(port, "/metrics");
    let counted: f64 = scrape
        .as_str()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("lhc_launch_decisions_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(counted, 1.0, "{scrape}");
}

/// SIGTERM while the node catches up at start stops it promptly: what it folded is
/// committed, nothing is announced, and the next start goes on from there.
#[test]
fn a_stop_during_the_catch_up_is_prompt_and_the_next_start_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (log, end) = simulated_log(dir.path(), 5, 24);
    let data = dir.path().join("node");
    let start = |port: u16| {
        node_command(SIM, port, &log, &data, NO_CLOUD)
            .spawn()
            .unwrap()
    };
    let port = free_port();
    let mut node = start(port);
    wait_until("catching up", Duration::from_secs(30), || {
        get(port, "/readyz").1["reason"] == "catching_up"
    });
    let stopped = std::time::Instant::now();
    unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
    let status = node.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "stopped in {:?}",
        stopped.elapsed()
    );
    // Nothing was appended by the stopped node (no start, no stop), and the next start
    // folds the rest and is ready.
    let stats = Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["log", "stats", "--json", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["records"].as_u64(), Some(end), "{stats}");
    let port = free_port();
    let _node = Kill(start(port));
    wait_until("ready after the restart", Duration::from_secs(120), || {
        get(port, "/readyz").0 == 200
    });
}
