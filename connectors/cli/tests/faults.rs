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
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod live;
use live::{free_port, http, wait_until};

fn lhc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lhc"))
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
    let imported = lhc()
        .args(["log", "import"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/examples/site-outage.jsonl"
        ))
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let data = disk.0.join("node");
    let port = free_port();
    let args = |data: &Path| -> Vec<String> {
        [
            "connector",
            "run",
            "--connector",
            "ddc1.corp.example",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--cloud-url",
            "http://127.0.0.1:9/",
            "--health-interval",
            "100ms",
            "--tick-interval",
            "50ms",
            "--commit-interval",
            "10ms",
            "--fsync",
            "never",
            "--log",
            &log.display().to_string(),
            "--data",
            &data.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut child = lhc()
        .args(args(&data))
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the node serves", Duration::from_secs(30), || {
        http(port, "GET", "/healthz", None, None)
            .is_some_and(|(s, b)| s == 200 && b["status"] == "ok")
    });
    let filler = fill(&disk.0);
    // Within a few commits the committer hits the full disk: the node says it cannot decide.
    let mut seen_health = None;
    let mut seen_probe = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && (seen_health.is_none() || seen_probe.is_none()) {
        if let Some((503, body)) = http(port, "GET", "/healthz", None, None) {
            seen_health.get_or_insert(body);
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
    assert!(
        health["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{health}"
    );
    let probe = seen_probe.expect("/adc/probe answered DOWN node_failed");
    assert_eq!(probe["status"], "DOWN", "{probe}");
    // It exits non-zero on its own, having logged why.
    let exited = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < exited, "the failed node did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "a failed node exits non-zero");
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("cannot decide"), "{stderr}");
    // Space freed, restarted by its supervisor: it resumes and serves again.
    std::fs::remove_file(filler).unwrap();
    let mut child = lhc()
        .args(args(&data))
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the restarted node serves", Duration::from_secs(30), || {
        http(port, "GET", "/healthz", None, None)
            .is_some_and(|(s, b)| s == 200 && b["status"] == "ok")
    });
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    drop(disk);
}

/// Item 5, "concurrent identical admin commands get 503 although they were applied": the
/// same command sent many times at once is stamped alike within one batch, so the records
/// are byte-identical; each request must still be told it was applied.
#[test]
fn concurrent_identical_admin_commands_are_all_answered_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let imported = lhc()
        .args(["log", "import"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/examples/site-outage.jsonl"
        ))
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let token = tmp.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let port = free_port();
    let mut child = lhc()
        .args([
            "connector",
            "run",
            "--connector",
            "ddc1.corp.example",
            "--listen",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .args([
            "--cloud-url",
            "http://127.0.0.1:9/",
            "--fsync",
            "never",
            "--log",
        ])
        .arg(&log)
        .arg("--data")
        .arg(tmp.path().join("node"))
        .arg("--admin-token-file")
        .arg(&token)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the node serves", Duration::from_secs(30), || {
        http(port, "GET", "/healthz", None, None).is_some_and(|(s, _)| s == 200)
    });
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
