//! `/openapi.json` against a live node: every route it describes is served (no fallback
//! 404 or 405), and schemathesis (PyPI; `.ci/deps` installs it into `target/ci-venv`)
//! fuzzes every operation: no 5xx, every status, content type and body as described, and
//! bad input refused with a 4xx JSON error.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use lhc_engine::build::{self, records};
use lhc_engine::Ts;
use serde_json::Value;

mod common;
mod live;
use live::{
    append, free_port, http, node_command, now_ms, small_site, stub_cloud, wait_until, Kill,
};

const A: &str = "a.z1.api";
const TOKEN: &str = "test-admin-token";

/// schemathesis's `st`: `LHC_SCHEMATHESIS`, else the CI virtualenv, else on PATH.
fn schemathesis() -> PathBuf {
    let candidates = [
        std::env::var_os("LHC_SCHEMATHESIS").map(PathBuf::from),
        std::env::var_os("CARGO_TARGET_DIR").map(|t| PathBuf::from(t).join("ci-venv/bin/st")),
        Some(common::root().join("target/ci-venv/bin/st")),
        Some(PathBuf::from("st")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|st| {
            Command::new(st)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect(
            "schemathesis is needed for this test: run .ci/deps (installs it into target/ci-venv)",
        )
}

/// A configured node with the HA SDK on and an admin token; returns it and its port.
fn node(dir: &std::path::Path) -> (Kill, u16) {
    let log = dir.join("log");
    let t = now_ms() - 60_000;
    let site = small_site(&[A], Some("vda1.z1.api"));
    append(
        &log,
        &[
            build::text(&site.change(Ts(t), 1)),
            build::text(&records::storefront(Ts(t + 1), A, "sf")),
        ],
    );
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    let cloud = stub_cloud(Arc::new(AtomicBool::new(true)));
    let port = free_port();
    let cloud_url = format!("http://127.0.0.1:{cloud}/health");
    let child = node_command(A, port, &log, &dir.join("node"), &cloud_url)
        .arg("--admin-token-file")
        .arg(dir.join("token"))
        .spawn()
        .unwrap();
    let node = Kill(child);
    wait_until("the node is ready", Duration::from_secs(30), || {
        http(port, "GET", "/readyz", None, None).is_some_and(|(s, _)| s == 200)
    });
    let (status, _) = http(
        port,
        "POST",
        "/admin/ha-sdk",
        Some(r#"{"on":true}"#),
        Some(TOKEN),
    )
    .unwrap();
    assert_eq!(status, 200);
    (node, port)
}

#[test]
fn every_described_route_is_served_and_schemathesis_finds_no_fault() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, port) = node(dir.path());
    let (status, doc) = http(port, "GET", "/openapi.json", None, None).unwrap();
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let mut described = 0;
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            described += 1;
            if path == "/dashboard/events" {
                continue; // a stream that never ends: schemathesis skips it too
            }
            let (status, body) =
                http(port, &method.to_uppercase(), path, Some("{}"), Some(TOKEN)).unwrap();
            let fallback = body
                .get("error")
                .and_then(Value::as_str)
                .is_some_and(|e| e == "no such endpoint" || e == "method not allowed here");
            assert!(
                !fallback,
                "{method} {path} is described but not served: {status} {body}"
            );
            // Every answer's status is one the description gives.
            let statuses = item[method]["responses"].as_object().unwrap();
            assert!(
                statuses.contains_key(&status.to_string()),
                "{method} {path} answered {status}, not described: {body}"
            );
        }
    }
    assert!(described >= 22, "every route: {described}");
    // Fallback answers are JSON errors too.
    let (status, body) = http(port, "GET", "/nope", None, None).unwrap();
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("no such endpoint"))
    );

    let st = schemathesis();
    let out = Command::new(st)
        .arg("run")
        .arg(format!("http://127.0.0.1:{port}/openapi.json"))
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_schema_conformance,negative_data_rejection",
            "--exclude-path",
            "/dashboard/events",
            "-H",
            &format!("Authorization: Bearer {TOKEN}"),
            "--max-examples",
            "40",
            "--generation-deterministic",
            "--request-timeout",
            "15",
        ])
        .env("NO_COLOR", "1")
        // Its example cache stays in the test's directory, not in the repository.
        .current_dir(dir.path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found faults:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("passed"), "{report}");
}
