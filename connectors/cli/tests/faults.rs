//! Fault injection against the live node (issue 15): each test names the defect it guards.
//!
//! - Item 3, "the node plays dead but says it is alive": its data disk fills while it
//!   serves. Its committer fails; from then on every probe says so (`/healthz` 503
//!   `failed`, `/adc/probe` DOWN `node_failed`), the reason is logged, and the process exits
//!   non-zero so a supervisor restarts it. Restarted once space is free, it resumes from its
//!   last commit and serves again.
//!
//! The full disk is a small tmpfs mounted for the test: that needs root (CI runs as root);
//! elsewhere the test says it was skipped and why.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod live;
use live::{free_port, http, wait_until};

fn lhc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lhc"))
}

/// Imports the bundled example outage into an embedded log at `log`.
fn import_example(log: &Path) {
    let imported = lhc()
        .args(["log", "import"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/examples/site-outage.jsonl"
        ))
        .arg("--log")
        .arg(log)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
}

/// Starts `lhc connector run` for ddc1.corp.example on `port` over `log` and `data`, asking
/// `cloud` for health, with `extra` options; waits until it serves.
fn spawn_node(
    log: &Path,
    data: &Path,
    port: u16,
    cloud: &str,
    extra: &[&std::ffi::OsStr],
    stderr: Stdio,
) -> std::process::Child {
    let child = start_node(log, data, port, cloud, extra, stderr);
    wait_until("the node serves", Duration::from_secs(30), || {
        http(port, "GET", "/healthz", None, None).is_some_and(|(s, _)| s == 200)
    });
    child
}

/// Options of a quiet node: it appends its own records at start, then nothing for an
/// hour (no health checks, peer probes or ticks).
fn quiet_node() -> Vec<&'static std::ffi::OsStr> {
    [
        "--health-interval",
        "1h",
        "--probe-interval",
        "1h",
        "--tick-interval",
        "1h",
    ]
    .iter()
    .map(std::ffi::OsStr::new)
    .collect()
}

/// Starts a node like [`spawn_node`], without waiting for it to serve.
fn start_node(
    log: &Path,
    data: &Path,
    port: u16,
    cloud: &str,
    extra: &[&std::ffi::OsStr],
    stderr: Stdio,
) -> std::process::Child {
    let child = lhc()
        .args([
            "connector",
            "run",
            "--connector",
            "ddc1.corp.example",
            "--listen",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--cloud-url")
        .arg(cloud)
        .args(["--fsync", "never", "--log"])
        .arg(log)
        .arg("--data")
        .arg(data)
        .args(extra)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    child
}

/// Waits up to 30 s for `child` to exit (killing it and failing with `what` if it does
/// not), and returns its status.
fn exit_within(child: &mut std::process::Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`exit_within`], then what `child` wrote on its piped stderr too.
fn exit_and_stderr(child: &mut std::process::Child, what: &str) -> (ExitStatus, String) {
    use std::io::Read;
    let status = exit_within(child, what);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

/// A cloud URL nothing answers on (health checks fail, which these tests do not mind).
const NO_CLOUD: &str = "http://127.0.0.1:9/";

/// `lhc log append --log LOG` with `input` on its standard input.
fn append_stdin(log: &Path, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = lhc()
        .args(["log", "append", "--log"])
        .arg(log)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// A tmpfs of `mb` MiB at `dir`, unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, mb: u32) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system holding `dir` (a file of zeros until a write fails).
fn fill(dir: &Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 64 << 10];
    while file.write_all(&block).is_ok() {}
    let _ = file.sync_all();
    path
}

#[test]
fn a_node_whose_data_disk_fills_says_so_on_every_probe_and_exits_non_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&tmp.path().join("disk"), 24) else {
        eprintln!("skipped: mounting a tmpfs needs root (CI runs as root)");
        return;
    };
    let log = tmp.path().join("log");
    import_example(&log);
    let data = disk.0.join("node");
    let port = free_port();
    let fast: Vec<&std::ffi::OsStr> = [
        "--health-interval",
        "100ms",
        "--tick-interval",
        "50ms",
        "--commit-interval",
        "10ms",
    ]
    .iter()
    .map(|s| std::ffi::OsStr::new(*s))
    .collect();
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &fast, Stdio::piped());
    let filler = fill(&disk.0);
    // Within a few commits the committer hits the full disk: the node says it cannot decide.
    let mut seen_health = None;
    let mut seen_probe = None;
    let mut seen_ready = None;
    let mut seen_live = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline
        && (seen_health.is_none()
            || seen_probe.is_none()
            || seen_ready.is_none()
            || seen_live.is_none())
    {
        if let Some((503, body)) = http(port, "GET", "/healthz", None, None) {
            seen_health.get_or_insert(body);
        }
        // The dead fold fails liveness (restart me) and readiness alike.
        if let Some((503, body)) = http(port, "GET", "/readyz", None, None) {
            seen_ready.get_or_insert(body);
        }
        if let Some((503, body)) = http(port, "GET", "/livez", None, None) {
            seen_live.get_or_insert(body);
        }
        if let Some((503, body)) = http(port, "GET", "/adc/probe", None, None) {
            if body["reason"] == "node_failed" {
                seen_probe.get_or_insert(body);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let health = seen_health.expect("/healthz answered 503 after the disk filled");
    assert_eq!(health["status"], "failed", "{health}");
    assert_eq!(health["reason"], "node_failed", "{health}");
    // The detail names the cause (the disk), not only that the committer stopped.
    assert!(
        health["detail"]
            .as_str()
            .is_some_and(|d| d.contains("No space left on device")),
        "{health}"
    );
    let ready = seen_ready.expect("/readyz answered 503 after the disk filled");
    assert_eq!(ready["reason"], "node_failed", "{ready}");
    let live = seen_live.expect("/livez answered 503: the fold is dead");
    assert_eq!(
        (live["status"].as_str(), live["reason"].as_str()),
        (Some("dead"), Some("node_failed")),
        "{live}"
    );
    let probe = seen_probe.expect("/adc/probe answered DOWN node_failed");
    assert_eq!(probe["status"], "DOWN", "{probe}");
    // It exits non-zero on its own, having logged why.
    let (status, stderr) = exit_and_stderr(&mut child, "the failed node did not exit");
    assert!(!status.success(), "a failed node exits non-zero");
    assert!(stderr.contains("cannot decide"), "{stderr}");
    // Space freed, restarted by its supervisor: it resumes and serves again.
    std::fs::remove_file(filler).unwrap();
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &fast, Stdio::null());
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    drop(disk);
}

/// The site log's disk full: every request is refused (503) and the probes say why, but the
/// error is logged once, not once per refused request (thousands of identical lines a
/// second; found by hostile testing); space freed, appends go on.
#[test]
fn a_full_log_disk_is_logged_once_and_appends_resume_when_space_is_freed() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&tmp.path().join("disk"), 16) else {
        eprintln!("skipped: mounting a tmpfs needs root (CI runs as root)");
        return;
    };
    let log = disk.0.join("log");
    import_example(&log);
    let data = tmp.path().join("node");
    let port = free_port();
    let child = spawn_node(&log, &data, port, NO_CLOUD, &[], Stdio::piped());
    let filler = fill(&disk.0);
    let beat = r#"{"machine":"vda-01.corp.example","sessions":[]}"#;
    let mut refused = 0;
    // (The segment's last page takes a few more records before writes fail.)
    for _ in 0..200 {
        if let Some((503, _)) = http(port, "POST", "/vda/heartbeat", Some(beat), None) {
            refused += 1;
        }
    }
    assert!(refused >= 100, "{refused} of 200 refused");
    std::fs::remove_file(filler).unwrap();
    wait_until("appends resume", Duration::from_secs(10), || {
        http(port, "POST", "/vda/heartbeat", Some(beat), None).is_some_and(|(s, _)| s == 202)
    });
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = stderr.matches("No space left on device").count();
    assert!((1..=3).contains(&lines), "{lines} lines:\n{stderr}");
    drop(disk);
}

/// Item 5, "concurrent identical admin commands get 503 although they were applied": the
/// same command sent many times at once is stamped alike within one batch, so the records
/// are byte-identical; each request must still be told it was applied.
#[test]
fn concurrent_identical_admin_commands_are_all_answered_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    import_example(&log);
    let token = tmp.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let port = free_port();
    let token_args = [
        std::ffi::OsStr::new("--admin-token-file"),
        token.as_os_str(),
    ];
    let data = tmp.path().join("node");
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &token_args, Stdio::null());
    for round in 0..5 {
        let answers: Vec<_> = (0..16)
            .map(|_| {
                std::thread::spawn(move || {
                    http(
                        port,
                        "POST",
                        "/admin/css-trace",
                        Some(r#"{"on":true}"#),
                        Some("t0ken"),
                    )
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        for answer in answers {
            let (status, body) = answer.expect("answered");
            assert_eq!(status, 200, "round {round}: {body}");
        }
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

fn tick(i: usize) -> String {
    format!(
        r#"{{"ts":"2026-01-05T09:00:00.000Z","type":"clock.tick"}}{}"#,
        " ".repeat(i % 7)
    )
}

/// Item 4, "appends are not all-or-nothing": a full disk during `log import` keeps whole
/// batches only (the failed one is rolled back), says how many records were appended and
/// at which offsets, and leaves a log that `log check` finds whole; `log append` on the
/// full disk appends nothing of its batch.
#[test]
fn a_full_disk_keeps_whole_batches_and_the_import_says_what_it_appended() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&tmp.path().join("disk"), 2) else {
        eprintln!("skipped: mounting a tmpfs needs root (CI runs as root)");
        return;
    };
    let log = disk.0.join("log");
    let input = tmp.path().join("big.jsonl");
    let lines: Vec<String> = (0..60_000).map(tick).collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = lhc()
        .args(["log", "import"])
        .arg(&input)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the disk cannot hold it all");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let appended: u64 = stderr
        .split(" record(s) were appended before it")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the error says how many were appended: {stderr}"));
    assert!(appended > 0 && appended < 60_000, "{stderr}");
    assert!(
        stderr.contains("no part of the failed batch was kept"),
        "{stderr}"
    );
    // The log holds exactly that many records, whole, and nothing of the failed batch.
    let check = lhc()
        .args(["log", "check", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    let cat = lhc()
        .args(["log", "cat", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(cat.status.success());
    assert_eq!(
        String::from_utf8_lossy(&cat.stdout).lines().count() as u64,
        appended
    );
    // `log append` of a batch that does not fit appends none of it.
    let batch: String = (0..5_000).map(|i| tick(i) + "\n").collect();
    let out = append_stdin(&log, batch.as_bytes());
    assert!(!out.status.success());
    let cat = lhc()
        .args(["log", "cat", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&cat.stdout).lines().count() as u64,
        appended,
        "a failed append keeps nothing of its batch"
    );
    drop(disk);
}

/// Item 4: a record over 64 MiB anywhere in the input is refused before anything is
/// appended (before, 4,096 records went in first).
#[test]
fn an_oversized_record_is_refused_before_anything_is_appended() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.jsonl");
    let mut text: String = (0..5_000).map(|i| tick(i) + "\n").collect();
    let huge = format!(
        r#"{{"ts":"2026-01-05T09:00:00.000Z","type":"clock.tick","x":"{}"}}"#,
        "a".repeat(65 << 20)
    );
    text.push_str(&huge);
    text.push('\n');
    std::fs::write(&input, text).unwrap();
    let log = tmp.path().join("log");
    let out = lhc()
        .args(["log", "import"])
        .arg(&input)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("5001") && stderr.contains("64 MiB"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing appended"), "{stderr}");
    let empty = !log.exists()
        || lhc()
            .args(["log", "cat", "--log"])
            .arg(&log)
            .output()
            .unwrap()
            .stdout
            .is_empty();
    assert!(empty, "nothing appended");
}

/// Item 8: invalid UTF-8 is one bad record, not the end of the command: `--skip-invalid`
/// rejects that line and imports the rest; a replay of the file quarantines it where it
/// lies. Item 8 and 9: a line of NBSP is a record (rejected), and `log append` numbers
/// rejections by input line, blank lines counted.
#[test]
fn invalid_utf8_and_odd_whitespace_are_rejected_where_they_lie() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.jsonl");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(tick(0).as_bytes());
    bytes.extend_from_slice(
        b"\n{\"ts\":\"2026-01-05T09:00:00.000Z\",\"type\":\"clock.tick\xff\"}\n",
    );
    bytes.extend_from_slice("\u{a0}\u{a0}\n".as_bytes());
    bytes.extend_from_slice(b"\n");
    bytes.extend_from_slice(tick(1).as_bytes());
    bytes.push(b'\n');
    std::fs::write(&input, &bytes).unwrap();
    let log = tmp.path().join("log");
    let out = lhc()
        .args(["log", "import", "--skip-invalid"])
        .arg(&input)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rejects = std::fs::read_to_string(tmp.path().join("in.jsonl.rejects.jsonl")).unwrap();
    let lines: Vec<u64> = rejects
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["line"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        lines,
        vec![2, 3],
        "the invalid UTF-8 line and the NBSP line: {rejects}"
    );
    let cat = lhc()
        .args(["log", "cat", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cat.stdout).lines().count(), 2);
    // A replay of the file itself quarantines both at their offsets (1 and 2).
    let replay = lhc().arg("replay").arg(&input).output().unwrap();
    assert!(replay.status.success(), "{replay:?}");
    let quarantined: Vec<u64> = String::from_utf8_lossy(&replay.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|o| o["type"] == "quarantine")
        .map(|o| o["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(quarantined, vec![1, 2]);
    // `log append` names the input line, blank lines counted.
    let out = append_stdin(&log, format!("\n\n{}\nnot json\n", tick(2)).as_bytes());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stdin:line 4"), "{stderr}");
}

/// Item 7, "no idle or header timeout and no connection cap": hundreds of idle sockets and
/// sockets that send half a request do not keep the node from answering; a socket that
/// never finishes its headers is closed after the header timeout (10 s).
#[test]
fn idle_and_slow_sockets_neither_starve_the_node_nor_stay_open() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    import_example(&log);
    let port = free_port();
    let data = tmp.path().join("node");
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &[], Stdio::null());
    let mut idle = Vec::new();
    for i in 0..300 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        if i % 2 == 0 {
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                .unwrap(); // never finished
        }
        idle.push(s);
    }
    let started = Instant::now();
    let answer = http(port, "GET", "/healthz", None, None);
    assert!(
        answer.is_some_and(|(s, _)| s == 200),
        "answered while 300 sockets idle"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The half-sent request is closed by the header timeout.
    let slow = &mut idle[0];
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let waited = Instant::now();
    let mut buf = [0u8; 256];
    let closed = match slow.read(&mut buf) {
        Ok(_) => true, // EOF, or an error answer before closing
        Err(e) => {
            e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut
        }
    };
    assert!(
        closed,
        "the node closes a socket that never finishes its headers"
    );
    assert!(waited.elapsed() < Duration::from_secs(15));
    drop(idle);
    // A body that stops arriving is answered 408 (JSON) rather than holding the slot.
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stalled
        .write_all(
            b"POST /storefront/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"sto",
        )
        .unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let waited = Instant::now();
    let mut answer = String::new();
    let _ = stalled.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
    assert!(waited.elapsed() < Duration::from_secs(15));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

/// Item 9: `--cloud-url` health checks do not follow a redirect to another host (a 302 to
/// another port is a failed check naming the status), and a peer whose id is not a host
/// name gets no URL built from it (`evil@127.0.0.1` would have probed this very node).
#[test]
fn health_checks_stay_on_their_host_and_peer_ids_are_not_urls() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = live::stub_cloud(Arc::new(AtomicBool::new(true)));
    let redirect_port = live::stub_server(move || {
        format!(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{elsewhere}/health\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    });
    let config = tmp.path().join("config.jsonl");
    std::fs::write(
        &config,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":1,"ops":[{"op":"upsert","kind":"site","id":"site"},{"op":"upsert","kind":"zone","id":"z1","data":{"name":"z"}},{"op":"upsert","kind":"connector","id":"ddc1.corp.example","data":{"zone":"z1"}},{"op":"upsert","kind":"connector","id":"evil@127.0.0.1","data":{"zone":"z1"}}]}
"#,
    )
    .unwrap();
    let log = tmp.path().join("log");
    let imported = lhc()
        .args(["log", "import"])
        .arg(&config)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let port = free_port();
    let cloud = format!("http://127.0.0.1:{redirect_port}/health");
    let often: Vec<&std::ffi::OsStr> = ["--health-interval", "200ms", "--probe-interval", "200ms"]
        .iter()
        .map(|s| std::ffi::OsStr::new(*s))
        .collect();
    let data = tmp.path().join("node");
    let mut child = spawn_node(&log, &data, port, &cloud, &often, Stdio::null());
    std::thread::sleep(Duration::from_millis(1500));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    let cat = lhc()
        .args(["log", "cat", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&cat.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let checks: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["type"] == "health.check")
        .collect();
    assert!(checks.len() >= 3, "{checks:?}");
    for check in &checks {
        assert_eq!(
            check["ok"], false,
            "a redirect elsewhere is no answer: {check}"
        );
        assert!(check["detail"].as_str().unwrap().contains("302"), "{check}");
    }
    let probes: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["type"] == "peer.probe" && r["peer"] == "evil@127.0.0.1")
        .collect();
    assert!(!probes.is_empty());
    assert!(
        probes.iter().all(|p| p["ok"] == false),
        "no URL from an id that is not a host name: {probes:?}"
    );
}

/// Item 9, "HTTP-layer errors with empty bodies": requests hyper refuses before the API
/// sees them (a malformed request line, a bad header value, a URI or header section over
/// the limits) are answered with their status and a JSON body naming the problem, like
/// every other answer of the node; the node keeps serving.
#[test]
fn requests_refused_by_the_http_layer_get_a_json_error() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    import_example(&log);
    let port = free_port();
    let data = tmp.path().join("node");
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &[], Stdio::null());
    let raw = |request: Vec<u8>| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // The node may answer and close before it has read everything sent.
        let _ = s.write_all(&request);
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        String::from_utf8(answer).unwrap()
    };
    let long_uri = [
        b"GET /".as_slice(),
        &[b'a'; 70_000],
        b" HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    .concat();
    let big_headers = [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n".as_slice(),
        &b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
            .repeat(200),
        b"\r\n",
    ]
    .concat();
    let cases: [(&str, Vec<u8>, &str, &str); 5] = [
        (
            "malformed header after an HTTP/1.0 keep-alive request",
            b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /x HTTP/1.1\r\nBad Header\r\n\r\n"
                .to_vec(),
            "400",
            "malformed",
        ),
        (
            "malformed request line",
            b"GARBAGE\r\n\r\n".to_vec(),
            "400",
            "malformed",
        ),
        (
            "bad Content-Length",
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n".to_vec(),
            "400",
            "malformed",
        ),
        ("URI over the limit", long_uri, "414", "URI too long"),
        ("too many headers", big_headers, "431", "too large"),
    ];
    for (what, request, status, words) in cases {
        let mut answer = raw(request);
        if answer.starts_with("HTTP/1.0 200") {
            // The keep-alive request's answer comes first.
            let json_end = answer.find("}").unwrap() + 1;
            answer = answer[json_end..].to_string();
        }
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{what}: no answer: {answer:?}"));
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status} "))
                || head.starts_with(&format!("HTTP/1.0 {status} ")),
            "{what}: {head}"
        );
        assert!(
            head.contains("content-type: application/json"),
            "{what}: {head}"
        );
        let json: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{what}: body {body:?} is not JSON: {e}"));
        let error = json["error"].as_str().unwrap_or_default();
        assert!(error.contains(words), "{what}: {error}");
    }
    assert!(http(port, "GET", "/healthz", None, None).is_some_and(|(s, _)| s == 200));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_standard_output_that_cannot_be_written_is_an_error_not_a_panic() {
    // `> /dev/full`: every write fails with "no space left". The commands that print
    // through the binary's `println!` (report, lint, forensics) and the completion
    // script used to panic (status 101); they now say why and exit 2.
    if !Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full on this system");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    import_example(&log);
    let log = log.to_str().unwrap();
    // Into the scratch folder: the default `schemas` is relative to the source tree.
    let schemas = dir.path().join("schemas");
    let schemas = schemas.to_str().unwrap();
    for args in [
        vec!["report", "outage", log],
        vec!["lint", "--format", "json", log],
        vec!["forensics", "sync", log],
        vec!["log", "check", log],
        vec!["completions", "bash"],
        vec!["log", "cat", log],
        vec!["replay", log],
        // clap printed these itself and exited 0 whatever became of the write.
        vec!["--help"],
        vec!["--version"],
        vec!["query", "--help"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = lhc().args(&args).stdout(full).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("No space left on device") && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
        // The message says where it was writing.
        assert!(
            stderr.contains("standard output") || stderr.contains("completion script"),
            "{args:?}: {stderr}"
        );
        // Stderr full as well: nowhere to say why, but still status 2, not a panic's 101;
        // stderr alone full: diagnostics are dropped and the command does its work.
        let full = || {
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap()
        };
        let both = lhc().args(&args).stdout(full()).stderr(full()).status();
        assert_eq!(both.unwrap().code(), Some(2), "{args:?}");
        let errors_only = lhc()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(full())
            .status();
        assert_eq!(errors_only.unwrap().code(), Some(0), "{args:?}");
    }
    // Help and the version to a reader already gone (`lhc --help | head -1` once head has
    // exited): not an error, clap's status as before, and nothing on stderr.
    for args in [vec!["--help"], vec!["--version"], vec!["query", "--help"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = lhc()
            .args(&args)
            .stdout(Stdio::from(writer))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {:?}", out.stderr);
    }
    // `schema --out` writes files and says so on stderr: a full stdout stops nothing (it
    // used to stop after the first file).
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = lhc()
        .args(["schema", "--out", schemas])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stderr);
    let written = lhc_engine::schema::generate();
    assert_eq!(said.matches("wrote ").count(), written.len(), "{said}");
    for file in written {
        let path = Path::new(schemas).join(&file.path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), file.text);
    }
}

/// The site log's tail cut in place under a running node and refilled at once by another
/// writer with as many records or more: the frames line up where the node's fold stood,
/// so it read on, and it stayed UP with records the log no longer holds (found by hostile
/// testing). The writer keeps the loss in `LOST` before it appends; the node watches that
/// file and fails, naming the loss.
#[test]
fn records_cut_and_refilled_under_a_running_node_fail_it() {
    // Out of line, the fold found a broken frame and called the log corrupted (a loss
    // kept in LOST, or an end below the fold, is said as what it is).
    // And when someone clears LOST (losses dealt with) just before the new loss: the
    // watch judged only lines past the count it had, and missed it.
    for (in_line, cleared) in [(true, false), (false, false), (true, true)] {
        cut_and_refill_under_a_node(in_line, cleared);
    }
}

/// One run of [`records_cut_and_refilled_under_a_running_node_fail_it`].
fn cut_and_refill_under_a_node(in_line: bool, cleared: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    import_example(&log);
    let segment = log.join("00000000000000000000.log");
    let data = tmp.path().join("node");
    let port = free_port();
    // The node appends nothing of its own for an hour once started: the log's tail is
    // the test's ticks.
    let quiet = quiet_node();
    let lost = log.join("LOST");
    if cleared {
        // Losses of an earlier incident, kept when the node starts.
        std::fs::write(
            &lost,
            "00000000000000000000.log 7 9\n00000000000000000000.log 20 30\n",
        )
        .unwrap();
    }
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &quiet, Stdio::piped());
    wait_until("the node caught up", Duration::from_secs(30), || {
        http(port, "GET", "/readyz", None, None).is_some_and(|(s, _)| s == 200)
    });
    std::thread::sleep(Duration::from_millis(500));
    // Ticks of one length each (stamped a minute ahead of the node's own records), so
    // that frames line up once cut and refilled.
    let at = std::time::SystemTime::now() + Duration::from_secs(60);
    let ticks = |from: u64, n: u64| -> String {
        (from..from + n)
            .map(|i| {
                let ts = humantime::format_rfc3339_millis(at + Duration::from_millis(i));
                format!("{{\"ts\":\"{ts}\",\"type\":\"clock.tick\"}}\n")
            })
            .collect()
    };
    let before = std::fs::metadata(&segment).unwrap().len();
    assert!(append_stdin(&log, ticks(0, 30).as_bytes()).status.success());
    let size = std::fs::metadata(&segment).unwrap().len();
    let frame = (size - before) / 30;
    assert_eq!(size - before, 30 * frame, "ticks of one frame size each");
    wait_until(
        "the node applied the ticks",
        Duration::from_secs(10),
        || {
            http(port, "GET", "/adc/probe", None, None).is_some()
                && std::fs::metadata(&segment).unwrap().len() == size
        },
    );
    std::thread::sleep(Duration::from_millis(300));
    if cleared {
        std::fs::remove_file(&lost).unwrap();
    }
    // Cut by ten records in place, then twenty others appended at once.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(size - 10 * frame)
        .unwrap();
    // In line: ticks as long as those cut, so the fold reads on at the same byte
    // position; out of line: longer records, so it finds a broken frame there.
    let refill: String = if in_line {
        ticks(100, 20)
    } else {
        (0..20)
            .map(|i| {
                let ts = humantime::format_rfc3339_millis(at + Duration::from_millis(100 + i));
                format!(
                    "{{\"ts\":\"{ts}\",\"type\":\"peer.probe\",\"connector\":\"ddc2.corp.example\",\"peer\":\"ddc1.corp.example\",\"ok\":true}}\n"
                )
            })
            .collect()
    };
    assert!(append_stdin(&log, refill.as_bytes()).status.success());
    let mut seen = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && seen.is_none() {
        if let Some((503, body)) = http(port, "GET", "/adc/probe", None, None) {
            seen = Some(body);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let probe = seen.expect("/adc/probe answered DOWN once records it applied were lost");
    assert_eq!(probe["reason"], "node_failed", "{probe}");
    let (status, stderr) = exit_and_stderr(&mut child, "the failed node did not exit");
    assert!(!status.success());
    assert!(
        stderr.contains("records it applied are gone from the log"),
        "{stderr}"
    );
    assert!(stderr.contains("LOST"), "{stderr}");
}

/// The site log going back under a running node (an older copy of its segment restored,
/// its last records cut): the node applied records the log no longer holds, and records
/// appended now would take offsets its fold has passed. It says so on its probes and exits
/// non-zero, rather than answering UP from a state that is not the log's (found by hostile
/// testing: it stayed ready, and a restart accepted the store once appends had refilled
/// the offsets); restarted, it refuses the log.
#[test]
fn a_log_that_goes_back_under_a_running_node_fails_it_visibly() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    import_example(&log);
    let segment = log.join("00000000000000000000.log");
    let older = std::fs::read(&segment).unwrap();
    let ticks: String = (0..5)
        .map(|i| format!("{{\"ts\":\"2026-01-05T10:00:0{i}.000Z\",\"type\":\"clock.tick\"}}\n"))
        .collect();
    assert!(append_stdin(&log, ticks.as_bytes()).status.success());
    let data = tmp.path().join("node");
    let port = free_port();
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &[], Stdio::piped());
    wait_until("the node caught up", Duration::from_secs(30), || {
        http(port, "GET", "/readyz", None, None).is_some_and(|(s, _)| s == 200)
    });
    // The older copy, in place (the node keeps the file open): the older copy is the
    // first bytes of the newer, so cutting the file to its length restores it in one step
    // (a write that truncates first shows the node an empty segment meanwhile).
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    assert_eq!(std::fs::read(&segment).unwrap()[..older.len()], older[..]);
    file.set_len(older.len() as u64).unwrap();
    // A launch at once, before the fold looks at the log's end (once a second while
    // idle, so the launch usually comes first: the guard is what refuses it then):
    // refused, and not written at the offsets the fold has passed (it was, brokered by
    // whoever folded the log later while this node answered 503: found by hostile
    // testing). The log's content is checked below whichever came first.
    let early = r#"{"user":"u1","resource":"office","client":{"name":"pc","ip":"10.0.0.1"},"request":"in-the-gap"}"#;
    if let Some((status, body)) = http(port, "POST", "/storefront/launch", Some(early), None) {
        assert_eq!(status, 503, "{body}");
    }
    let mut seen = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && seen.is_none() {
        if let Some((503, body)) = http(port, "GET", "/adc/probe", None, None) {
            seen = Some(body);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let probe = seen.expect("/adc/probe answered DOWN once the log went back");
    assert_eq!(probe["reason"], "node_failed", "{probe}");
    // Failed, it writes nothing more before it exits: a launch appended then was answered
    // 503 and brokered by whoever folded the log later (found by hostile testing).
    let launch = r#"{"user":"u1","resource":"office","client":{"name":"pc","ip":"10.0.0.1"},"request":"after-failure"}"#;
    if let Some((status, body)) = http(port, "POST", "/storefront/launch", Some(launch), None) {
        assert_eq!(status, 503, "{body}");
    }
    let heartbeat = r#"{"machine":"hb-after-failure.example","sessions":[]}"#;
    if let Some((status, body)) = http(port, "POST", "/vda/heartbeat", Some(heartbeat), None) {
        assert_eq!(status, 503, "{body}");
    }
    let (status, stderr) = exit_and_stderr(&mut child, "the failed node did not exit");
    assert!(!status.success(), "a failed node exits non-zero");
    assert!(
        stderr.contains("records it applied are gone from the log"),
        "{stderr}"
    );
    let out = lhc().args(["log", "cat"]).arg(&log).output().unwrap();
    let written = String::from_utf8_lossy(&out.stdout);
    assert!(!written.contains("after-failure"), "{written}");
    assert!(!written.contains("in-the-gap"), "{written}");
    // Restarted over the same store, it refuses the shorter log.
    let mut restarted = lhc()
        .args([
            "connector",
            "run",
            "--connector",
            "ddc1.corp.example",
            "--listen",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--cloud-url", NO_CLOUD, "--log"])
        .arg(&log)
        .arg("--data")
        .arg(&data)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, stderr) = exit_and_stderr(
        &mut restarted,
        "the restarted node accepted a log shorter than its store",
    );
    assert!(!status.success());
    assert!(stderr.contains("more than"), "{stderr}");
}

/// The same with records of the same size appended where the cut ones were, between two
/// of the node's looks at the log's end: the end alone does not show it, so the node
/// compares the log's record at the offset it applied last with that record (found by
/// hostile testing: the node stayed UP).
#[test]
fn records_replaced_under_a_running_node_fail_it_visibly() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    import_example(&log);
    let data = tmp.path().join("node");
    let port = free_port();
    let quiet = quiet_node();
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &quiet, Stdio::piped());
    wait_until("the node caught up", Duration::from_secs(30), || {
        http(port, "GET", "/readyz", None, None).is_some_and(|(s, _)| s == 200)
    });
    let segment = log.join("00000000000000000000.log");
    let settled = || {
        let size = std::fs::metadata(&segment).unwrap().len();
        std::thread::sleep(Duration::from_millis(500));
        size == std::fs::metadata(&segment).unwrap().len()
    };
    wait_until(
        "the node's own appends ended",
        Duration::from_secs(30),
        settled,
    );
    // A copy of the log as it is now, given other records of the same size.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    for entry in std::fs::read_dir(&log).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), other.join(entry.file_name())).unwrap();
    }
    // Clock ticks an hour ahead (records go in time order, after the node's own); the
    // copy's half a second later, so the same size.
    let base = live::now_ms() + 3_600_000;
    let ticks = |shift: i64| -> String {
        (0..5)
            .map(|i| {
                let ts = lhc_engine::Ts(base + shift + i * 1_000).to_rfc3339();
                format!("{{\"ts\":\"{ts}\",\"type\":\"clock.tick\"}}\n")
            })
            .collect()
    };
    assert!(append_stdin(&log, ticks(0).as_bytes()).status.success());
    assert!(append_stdin(&other, ticks(500).as_bytes()).status.success());
    let lag_is_zero = || {
        http(port, "GET", "/metrics", None, None).is_some_and(|(_, body)| {
            body.as_str()
                .unwrap_or("")
                .lines()
                .any(|l| l.starts_with("lhc_fold_lag_records") && l.ends_with(" 0"))
        })
    };
    wait_until(
        "the node applied the ticks",
        Duration::from_secs(30),
        lag_is_zero,
    );
    let replacement = std::fs::read(other.join("00000000000000000000.log")).unwrap();
    assert_eq!(
        replacement.len() as u64,
        std::fs::metadata(&segment).unwrap().len(),
        "the node appended nothing meanwhile"
    );
    // Written in place, as the cut and the refill would leave it between two looks (one
    // write of the same length: a truncation first would show the node an empty segment).
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.write_all_at(&replacement, 0).unwrap();
    let (status, stderr) = exit_and_stderr(&mut child, "the node went on over replaced records");
    assert!(!status.success(), "a failed node exits non-zero");
    assert!(
        stderr.contains("holds another record at offset"),
        "{stderr}"
    );
    // The exit names that first cause, not what a fold still reading made of the file.
    assert!(!stderr.contains("fold stopped"), "{stderr}");
}

/// A typo in `--cloud-url`, or a file given as `--data`, is refused at start with a message
/// naming it (found by hostile testing: a URL without a scheme failed every health check
/// and wrote a real outage into the site log; a file as `--data` gave RocksDB's debug dump
/// of the OS error, or "File exists").
#[test]
fn bad_cloud_urls_and_data_paths_are_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    import_example(&log);
    let segment = log.join("00000000000000000000.log");
    let before = std::fs::read(&segment).unwrap();
    for url in [
        "not a url",
        "ftp://cloud.example/",
        "http://",
        "cloud.example/health",
    ] {
        let out = lhc()
            .args(["connector", "run", "--connector", "ddc1.corp.example"])
            .args(["--cloud-url", url, "--log"])
            .arg(&log)
            .arg("--data")
            .arg(tmp.path().join("node"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{url}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--cloud-url") && stderr.contains("http(s)://"),
            "{url}: {stderr}"
        );
    }
    assert_eq!(std::fs::read(&segment).unwrap(), before, "nothing appended");
    assert!(!tmp.path().join("node").exists(), "no store left behind");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let run = lhc()
        .args(["connector", "run", "--connector", "ddc1.corp.example"])
        .args(["--cloud-url", NO_CLOUD, "--log"])
        .arg(&log)
        .arg("--data")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("is a file"), "{stderr}");
    let fold = lhc()
        .args(["connector", "fold"])
        .arg(&log)
        .arg("--data")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!fold.status.success());
    let stderr = String::from_utf8_lossy(&fold.stderr);
    assert!(
        stderr.contains("Not a directory") && !stderr.contains("Os {"),
        "{stderr}"
    );
}

/// A record decades later while the zone is in LHC mode: the spec asks for a report every
/// interval of the gap, millions of outputs, applied in steps. Meanwhile the probe says
/// DOWN `catching_up` (no launch can be decided), and SIGTERM stops the node between two
/// steps (found by hostile testing: the probe said UP while every launch timed out, and
/// the node went on for minutes after SIGTERM, writing gigabytes).
#[test]
fn a_node_applying_a_long_gap_in_steps_says_so_and_stops_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/examples/site-outage.jsonl"
    ))
    .unwrap();
    // Up to 09:30 the zone is in LHC mode (extended_ha).
    let lines: Vec<&str> = example
        .lines()
        .filter(|l| l.get(7..23).is_some_and(|ts| ts < "2026-01-05T09:30"))
        .collect();
    assert!(lines.len() > 100 && lines.len() < example.lines().count());
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let log = tmp.path().join("log");
    let imported = lhc()
        .args(["log", "import", "-q"])
        .arg(&input)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let data = tmp.path().join("node");
    let port = free_port();
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &[], Stdio::null());
    wait_until("the node caught up", Duration::from_secs(30), || {
        http(port, "GET", "/readyz", None, None)
            .is_some_and(|(_, body)| body["applied_offset"].as_u64() >= Some(lines.len() as u64))
    });
    let later = "{\"ts\":\"2046-01-05T09:30:00.000Z\",\"type\":\"clock.tick\"}\n";
    assert!(append_stdin(&log, later.as_bytes()).status.success());
    wait_until(
        "the probe says the node is applying in steps",
        Duration::from_secs(30),
        || {
            http(port, "GET", "/adc/probe", None, None).is_some_and(|(s, body)| {
                s == 503
                    && body["reason"] == "catching_up"
                    && body["detail"]
                        .as_str()
                        .is_some_and(|d| d.contains("in steps"))
            })
        },
    );
    // A launch now is refused at once and not written: appended, it would time out and
    // still be brokered once the record is applied (a session nobody waits for). So are
    // the other records callers wait for (they held their callers for the whole launch
    // timeout, and were retried into the log again).
    for (path, body) in [
        (
            "/storefront/launch",
            r#"{"user":"u1","resource":"office","client":{"name":"pc","ip":"10.0.0.1"},"request":"while-in-steps"}"#,
        ),
        (
            "/vda/heartbeat",
            r#"{"machine":"hb-while-in-steps.example","sessions":[]}"#,
        ),
        (
            "/storefront/heartbeat",
            r#"{"storefront":"sf-while-in-steps"}"#,
        ),
        (
            "/vda/session",
            r#"{"machine":"vda1.example","session":"s-while-in-steps","user":"u1","event":"logon"}"#,
        ),
    ] {
        let (status, refused) = http(port, "POST", path, Some(body), None).unwrap();
        assert_eq!(status, 503, "{path}: {refused}");
        assert!(
            refused["error"]
                .as_str()
                .is_some_and(|e| e.contains("in steps") && e.contains("nothing was appended")),
            "{path}: {refused}"
        );
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = exit_within(&mut child, "the node went on after SIGTERM");
    assert!(
        status.success(),
        "a stop asked for is no failure: {status:?}"
    );
    // Started again, the node resumes that record in steps while it catches up: its probes
    // say so, with the records before it applied (they said `applied_offset: 0` and "N
    // records to fold", though the steps were committed).
    // Killed if the wait below fails: a node left behind would go on through 20 years.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut node = KillOnDrop(start_node(&log, &data, port, NO_CLOUD, &[], Stdio::null()));
    let child = &mut node.0;
    wait_until(
        "the readiness says the start's catch-up applies a record in steps",
        Duration::from_secs(30),
        || {
            http(port, "GET", "/readyz", None, None).is_some_and(|(s, body)| {
                // The record in steps: the 2046 tick, or a tick the node appended itself
                // at its first start (the example ends in LHC mode, months ago).
                let in_steps = body["detail"]
                    .as_str()
                    .filter(|d| d.contains("at start:"))
                    .and_then(|d| d.strip_prefix("applying record "))
                    .and_then(|d| d.split(' ').next())
                    .and_then(|n| n.parse::<u64>().ok());
                s == 503
                    && in_steps.is_some_and(|n| n >= lines.len() as u64)
                    && body["applied_offset"].as_u64() == in_steps
            })
        },
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    exit_within(child, "the node went on after SIGTERM");
    // The refused launch was never written.
    let out = lhc().args(["log", "cat"]).arg(&log).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("while-in-steps"));
}

/// Records a stopped writer left past the log's commit mark (`kill -STOP` on an import
/// mid-batch: its lock held, the mark not moved yet) are not committed: the node's
/// readiness does not count them as records to fold (it said "1500 log record(s) not
/// folded yet" and was not ready, though nothing it could fold was missing).
#[test]
fn records_past_the_commit_mark_of_a_stopped_writer_are_not_lag() {
    use lhc_log::Log;
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    import_example(&log);
    let data = tmp.path().join("node");
    let port = free_port();
    let quiet = ["--tick-interval", "1h"].map(std::ffi::OsStr::new);
    let mut child = spawn_node(&log, &data, port, NO_CLOUD, &quiet, Stdio::null());
    // The lock held as a stopped writer holds it; a copy of the log takes a batch of more
    // records than the node's readiness bound (1,000), whose bytes then land in the
    // node's log past its mark, as that writer's batch would.
    let lock = std::fs::File::open(log.join("LOCK")).unwrap();
    lock.lock().unwrap();
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(&log).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    let tick = br#"{"ts":"2026-01-05T12:00:00.000Z","type":"clock.tick"}"#;
    let batch: Vec<&[u8]> = vec![tick.as_slice(); 1500];
    let copied = lhc_log::EmbeddedLog::open(&copy, lhc_log::EmbeddedOptions::default()).unwrap();
    copied.append(&batch).unwrap();
    drop(copied);
    let segment = "00000000000000000000.log";
    let had = std::fs::metadata(log.join(segment)).unwrap().len() as usize;
    let bytes = std::fs::read(copy.join(segment)).unwrap();
    assert!(bytes.len() > had);
    std::fs::OpenOptions::new()
        .append(true)
        .open(log.join(segment))
        .unwrap()
        .write_all(&bytes[had..])
        .unwrap();
    let (status, body) = http(port, "GET", "/readyz", None, None).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{body}");
    // (A record of the node's own may wait to be folded; the batch's 1,500 do not count.)
    assert!(body["lag"].as_u64().is_some_and(|lag| lag < 1500), "{body}");
}
