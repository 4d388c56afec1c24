//! Helpers shared by the tests that run live nodes (`zone.rs`, `kafka_lost.rs`): a raw
//! HTTP/1.1 client, a stub control plane, polling with a deadline, the wall clock.

#![allow(dead_code)] // each test binary uses its own subset

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// A child process (a node, a browser) killed and reaped when dropped, so a failed
/// assertion leaves nothing running.
pub struct Kill(pub std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `lhc connector run` as connector `connector` on 127.0.0.1:`port`, over the embedded
/// log `log`, its data in `data`, health-checking `cloud_url`: test timers (300 ms
/// checks and ticks, 50 ms commits), no fsync, output discarded. Add options, then spawn.
pub fn node_command(
    connector: &str,
    port: u16,
    log: &std::path::Path,
    data: &std::path::Path,
    cloud_url: &str,
) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lhc"));
    command
        .args(["connector", "run", "--connector", connector, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--cloud-url", cloud_url])
        .args(["--health-interval", "300ms", "--tick-interval", "300ms"])
        .args(["--commit-interval", "50ms", "--fsync", "never", "--data"])
        .arg(data)
        .arg("--log")
        .arg(log)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    command
}

/// A one-zone site (z1) with `connectors`, a multi-session group `g` (with `machine`, up
/// to 10 sessions, if given) publishing the application `app` to the user `alice`.
pub fn small_site(connectors: &[&str], machine: Option<&str>) -> lhc_engine::build::SiteBuilder {
    use lhc_engine::config::DeliveryGroupKind;
    let mut site = lhc_engine::build::SiteBuilder::new().zone("z1");
    for c in connectors {
        site = site.connector(c, "z1");
    }
    site = site.group("g", DeliveryGroupKind::MultiSession);
    if let Some(m) = machine {
        site = site.machine(m, "z1", "g", Some(10));
    }
    site.application("app", &["g"])
        .user("alice", &[])
        .entitlement("e", "app", &["alice"])
}

/// Appends `lines` to the embedded log `log` with `lhc log append` (created if need be).
pub fn append(log: &std::path::Path, lines: &[String]) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["log", "append", "--log"])
        .arg(log)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all((lines.join("\n") + "\n").as_bytes())
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `alice` launches `app` on the node at `port` (StoreFront's request): the answer.
pub fn launch_app(port: u16) -> (u16, Value) {
    let body = r#"{"user":"alice","resource":"app","client":{"name":"pc","ip":"10.0.0.1"}}"#;
    http(port, "POST", "/storefront/launch", Some(body), None).expect("the node answers")
}

/// One HTTP/1.1 exchange, with a bearer token if given; `None` when nothing answers.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> Option<(u16, Value)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .ok()?;
    let body = body.unwrap_or("");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer);
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let json = serde_json::from_str(body).unwrap_or(Value::String(body.to_string()));
    Some((status, json))
}

/// A control plane that answers 200 while `up`, else 503; returns its port.
pub fn stub_cloud(up: Arc<AtomicBool>) -> u16 {
    stub_server(move || {
        if up.load(Ordering::SeqCst) {
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_string()
        } else {
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\ndown"
                .to_string()
        }
    })
}

/// A loopback HTTP server that reads each request and sends `answer()`, whole, then closes;
/// returns its port.
pub fn stub_server(answer: impl Fn() -> String + Send + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 2048];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(answer().as_bytes());
        }
    });
    port
}

/// A port nothing listens on (as far as the kernel knows now).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` until it holds or `limit` passes; the panic names `what`.
pub fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
