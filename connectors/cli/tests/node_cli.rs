//! The connector node's cache snapshot: kill -9 at random moments while it folds a long
//! log; afterwards its outputs equal an uninterrupted fold's, none missing or repeated,
//! and its digest matches (principle 4).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lhc_engine::build::{self, records, SiteBuilder};
use lhc_engine::config::DeliveryGroupKind;
use lhc_engine::Ts;

mod live;

fn lhc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(args)
        .output()
        .expect("lhc runs")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A site of 3 connectors and `vdas` VDAs over `hours`, with a cloud outage in the middle.
fn site_log(vdas: usize, hours: u64) -> String {
    let t0 = Ts(1_767_603_600_000);
    let connectors = ["cc1.z1.example", "cc2.z1.example", "cc3.z1.example"];
    let mut site = SiteBuilder::new()
        .zone("z1")
        .group("g", DeliveryGroupKind::MultiSession)
        .application("app", &["g"])
        .user("alice", &[])
        .entitlement("e", "app", &["alice"]);
    for c in connectors {
        site = site.connector(c, "z1");
    }
    for v in 0..vdas {
        site = site.machine(&format!("vda{v:04}.z1.example"), "z1", "g", None);
    }
    let mut lines = vec![build::text(&site.change(t0, 1))];
    let total = hours * 3600;
    for second in 1..total {
        let ts = t0.plus_s(second);
        if second % 60 == 1 {
            let ok = !(total / 3..2 * total / 3).contains(&second);
            for c in connectors {
                lines.push(build::text(&records::health_check(ts, c, ok)));
                lines.push(build::text(&records::storefront(ts, c, "sf")));
                for p in connectors.iter().filter(|p| **p != c) {
                    lines.push(build::text(&records::peer_probe(ts, c, p, true)));
                }
            }
            let request = format!("r{second}");
            let launch = records::launch(ts, &request, "cc1.z1.example", "alice", "app");
            lines.push(build::text(&launch));
        }
        for v in (0..vdas).filter(|v| (*v as u64 * 300 / vdas as u64) == second % 300) {
            let machine = format!("vda{v:04}.z1.example");
            lines.push(build::text(&records::heartbeat(ts, &machine, &[])));
        }
    }
    lines.join("\n") + "\n"
}

fn import(dir: &Path, text: &str) -> String {
    let file = dir.join("site.jsonl");
    std::fs::write(&file, text).unwrap();
    let log = dir.join("log").display().to_string();
    ok(lhc(&[
        "log",
        "import",
        file.to_str().unwrap(),
        "--log",
        &log,
        "--fsync",
        "never",
        "-q",
    ]));
    log
}

#[test]
fn kill_9_at_random_moments_loses_and_repeats_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let log = import(tmp.path(), &site_log(100, 8));
    let data = tmp.path().join("node").display().to_string();

    // The reference: an uninterrupted replay of the same log.
    let expected = ok(lhc(&["replay", &log, "-q"]));
    let digest_out = lhc(&["replay", &log, "--no-outputs", "--digest", "-q"]);
    let expected_digest = String::from_utf8(digest_out.stderr).unwrap();
    let expected_digest = expected_digest
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();

    // Fold one record per synced commit (so the fold lasts seconds), killed at
    // pseudo-random moments (a fixed seed, so a failure reproduces) 60 times, each run
    // resuming where the last commit left it. The moments are drawn after a base delay
    // that doubles while kills land before the first commit (a loaded machine can take
    // longer than the whole random window to start a process and open its store) and
    // shrinks after each that did not, so the kills keep landing mid-fold wherever this
    // runs.
    let mut seed: u64 = 0x5eed_1e55;
    let mut kills = 0;
    let mut mid_fold = 0;
    let mut base_ms: u64 = 5;
    let mut last_next = 0;
    let started = Instant::now();
    while kills < 60 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lhc"))
            .args([
                "connector",
                "fold",
                "--log",
                &log,
                "--data",
                &data,
                "--batch",
                "1",
                "--sync",
                "-q",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(base_ms + (seed >> 33) % 40));
        match child.try_wait().unwrap() {
            Some(status) => {
                assert!(status.success(), "fold failed on its own");
                break; // it finished: the log is folded
            }
            None => {
                child.kill().unwrap(); // SIGKILL: no destructor, no flush
                child.wait().unwrap();
                kills += 1;
            }
        }
        let next = next_offset(&data);
        assert!(
            next >= last_next,
            "a kill lost committed records: {next} < {last_next}"
        );
        if next == last_next {
            base_ms = (base_ms * 2).min(2_000);
        } else {
            // Back off towards the start-up time, so each run folds few records.
            base_ms = (base_ms * 3 / 4).max(5);
            mid_fold += 1;
            last_next = next;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "kill loop took too long ({kills} kills, base delay {base_ms} ms)"
        );
    }
    eprintln!("{mid_fold} of {kills} kills landed mid-fold (base delay {base_ms} ms)");
    assert!(
        kills >= 50,
        "only {kills} kills before the fold finished: make the log longer"
    );
    assert!(mid_fold >= 10, "only {mid_fold} kills landed mid-fold");
    // The kills landed while it was folding: some records applied, not all.
    let next = next_offset(&data);
    let total = expected_records(&log);
    assert!(
        next > 0 && next < total,
        "interrupted mid-fold: next offset {next} of {total}"
    );
    // Finish whatever remains, then compare.
    ok(lhc(&[
        "connector",
        "fold",
        "--log",
        &log,
        "--data",
        &data,
        "-q",
    ]));
    let outputs = ok(lhc(&["connector", "outputs", "--data", &data]));
    assert_eq!(
        outputs.lines().count(),
        expected.lines().count(),
        "no output missing or repeated"
    );
    assert_eq!(outputs, expected, "outputs equal an uninterrupted fold's");
    let status = ok(lhc(&["connector", "status", "--data", &data]));
    assert!(
        status.contains(&format!("digest {expected_digest}")),
        "{status} vs {expected_digest}"
    );
}

/// The same for the live node (`lhc connector run`): killed at random moments while it
/// catches up with a long log and while it serves, then left to finish; its stored outputs
/// are an uninterrupted replay's, and so is its digest.
#[test]
fn kill_9_of_the_running_node_loses_and_repeats_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let log = import(tmp.path(), &site_log(100, 120));
    let total = expected_records(&log);
    let data = tmp.path().join("node").display().to_string();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "connector",
        "run",
        "--connector",
        "cc1.z1.example",
        "--log",
        &log,
        "--data",
        &data,
        "--listen",
        &listen,
        "--cloud-url",
        "http://127.0.0.1:9/",
        "--commit-interval",
        "1ms",
        "--sync",
        "--fsync",
        "never",
    ];
    let mut seed: u64 = 0x0dd_ba11;
    let mut kills = 0;
    let mut mid_fold = 0;
    let started = Instant::now();
    while kills < 60 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lhc"))
            .args(args)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(20 + (seed >> 33) % 60));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the node exited on its own"
        );
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        if next_offset(&data) < total {
            mid_fold += 1;
        }
        assert!(started.elapsed() < Duration::from_secs(240));
    }
    eprintln!("{mid_fold} of {kills} kills landed mid-fold");
    assert!(mid_fold >= 10, "only {mid_fold} kills landed mid-fold");
    // A last run catches up and stops cleanly (SIGTERM), recording its stop.
    let mut child = Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(args)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the node never served");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Stopped before it caught up, a node commits what it folded and leaves the rest for
    // its next start: wait until it has folded the whole log (on a loaded machine that can
    // take longer than the first answer).
    live::wait_until("the node caught up", Duration::from_secs(120), || {
        live::http(port, "GET", "/readyz", None, None).is_some_and(|(_, body)| body["lag"] == 0)
    });
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());

    // The log now also holds what the node appended; the node folded all of it.
    let expected = ok(lhc(&["replay", &log, "-q"]));
    let digest_out = lhc(&["replay", &log, "--no-outputs", "--digest", "-q"]);
    let expected_digest = String::from_utf8(digest_out.stderr).unwrap();
    let expected_digest = expected_digest.split_whitespace().nth(1).unwrap();
    let outputs = ok(lhc(&["connector", "outputs", "--data", &data]));
    assert_eq!(
        outputs.lines().count(),
        expected.lines().count(),
        "no output missing or repeated ({kills} kills, {mid_fold} mid-fold)"
    );
    assert_eq!(outputs, expected);
    let status = ok(lhc(&["connector", "status", "--data", &data]));
    assert!(
        status.contains(&format!("digest {expected_digest}")),
        "{status} vs {expected_digest}"
    );
}

#[test]
fn a_resumed_fold_applies_only_new_records() {
    let tmp = tempfile::tempdir().unwrap();
    let text = site_log(10, 1);
    let lines: Vec<&str> = text.lines().collect();
    let half = lines.len() / 2;
    let log = import(tmp.path(), &(lines[..half].join("\n") + "\n"));
    let data = tmp.path().join("node").display().to_string();
    let first = lhc(&["connector", "fold", "--log", &log, "--data", &data]);
    assert!(String::from_utf8_lossy(&first.stderr)
        .contains(&format!("folded {half} record(s) from offset 0")));
    // The same layout as `connector run --data`: a node started on this directory
    // continues the fold's store, and a fold continues a node's.
    assert!(tmp.path().join("node/snapshot/CURRENT").is_file());
    let rest = tmp.path().join("rest.jsonl");
    std::fs::write(&rest, lines[half..].join("\n") + "\n").unwrap();
    ok(lhc(&[
        "log",
        "import",
        rest.to_str().unwrap(),
        "--append",
        "--log",
        &log,
        "-q",
    ]));
    let second = lhc(&["connector", "fold", "--log", &log, "--data", &data]);
    let stderr = String::from_utf8_lossy(&second.stderr).to_string();
    assert!(
        stderr.contains(&format!(
            "folded {} record(s) from offset {half}",
            lines.len() - half
        )),
        "{stderr}"
    );
    assert_eq!(
        ok(lhc(&["connector", "outputs", "--data", &data])),
        ok(lhc(&["replay", &log, "-q"]))
    );
}

/// The next offset a node data directory's snapshot would fold (0 while no snapshot
/// exists yet: a kill can land before the first run creates it).
fn next_offset(data: &str) -> u64 {
    let out = lhc(&["connector", "status", "--data", data]);
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no cache snapshot") {
        return 0;
    }
    ok(out)
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("next offset ")
        .parse()
        .unwrap()
}

fn expected_records(log: &str) -> u64 {
    let stats = ok(lhc(&["log", "stats", "--json", "--log", log]));
    let value: serde_json::Value = serde_json::from_str(&stats).unwrap();
    value["end_offset"].as_u64().unwrap()
}

/// A store stopped between two steps of a record applied in steps (a long gap's timers):
/// `lhc connector status` says it is part-way through that record, beside a digest no
/// replay of whole records gives; `lhc connector fold` finishes the record, and the status
/// then is a replay's.
#[test]
fn status_names_a_record_the_store_stopped_part_way_through() {
    let scenario = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../engine/tests/scenarios/r-elect-4-split-brain-launches.jsonl"
    ))
    .unwrap();
    let mut lines: Vec<String> = scenario.lines().map(str::to_string).collect();
    lines.push(r#"{"ts":"2026-02-14T09:00:00.000Z","type":"clock.tick"}"#.to_string());
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("gap.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let data = tmp.path().join("node");
    let store_dir = data.join("snapshot");
    std::fs::create_dir_all(&store_dir).unwrap();
    {
        let store = lhc_node::Store::open(&store_dir, &lhc_node::StoreOptions::default()).unwrap();
        let mut folder = lhc_node::Folder::open(&store).unwrap();
        for (offset, line) in lines.iter().enumerate() {
            folder.apply(&lhc_log::LogEntry {
                offset: offset as u64,
                bytes: line.as_bytes().to_vec(),
            });
            if folder.in_progress() {
                // One step committed, then the process stops.
                folder.commit().unwrap();
                break;
            }
        }
    }
    let last = lines.len() as u64 - 1;
    let data_arg = data.display().to_string();
    let status = ok(lhc(&[
        "connector",
        "status",
        "--data",
        &data_arg,
        "--format",
        "json",
    ]));
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["next_offset"], last, "{status}");
    assert_eq!(status["part_way"]["offset"], last, "{status}");
    assert!(
        status["part_way"]["outputs_committed"].as_u64().unwrap() > 0,
        "{status}"
    );
    let table = ok(lhc(&["connector", "status", "--data", &data_arg]));
    assert!(
        table.contains(&format!("part-way through record {last}")),
        "{table}"
    );
    // Finished by a fold: whole records, a replay's digest, nothing part-way.
    let log = tmp.path().join("log").display().to_string();
    ok(lhc(&[
        "log",
        "import",
        "-q",
        &file.display().to_string(),
        "--log",
        &log,
    ]));
    ok(lhc(&["connector", "fold", "-q", "--data", &data_arg, &log]));
    let status = ok(lhc(&[
        "connector",
        "status",
        "--data",
        &data_arg,
        "--format",
        "json",
    ]));
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status.get("part_way").is_none(), "{status}");
    let replay = lhc(&["replay", "-q", "--no-outputs", "--digest", &log]);
    let stderr = String::from_utf8_lossy(&replay.stderr);
    let digest = status["digest"].as_str().unwrap();
    assert!(
        stderr.contains(&format!("digest {digest} after offset {last}")),
        "{stderr} / {status}"
    );
}

/// A record dated long after the previous one while the zone is in LHC mode is applied in
/// steps, for seconds (3507/3509 reports every two minutes of the gap): meanwhile the node
/// cannot decide, and its probes say so (not ready, naming the record) instead of "ok".
/// Here the gap is the node's own first record: the log ends in January 2026, in LHC mode,
/// and the node stamps its health checks with today's time.
#[test]
fn probes_say_not_ready_while_a_record_is_applied_in_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("split.jsonl");
    std::fs::write(
        &file,
        include_str!("../../../engine/tests/scenarios/r-elect-4-split-brain-launches.jsonl"),
    )
    .unwrap();
    let records = std::fs::read_to_string(&file).unwrap().lines().count() as u64;
    let log = tmp.path().join("log");
    ok(lhc(&[
        "log",
        "import",
        "-q",
        &file.display().to_string(),
        "--log",
        &log.display().to_string(),
    ]));
    let port = live::free_port();
    let cloud = format!("http://127.0.0.1:{}/", live::free_port());
    let _node = live::Kill(
        live::node_command(
            "cc-a.z1.example",
            port,
            &log,
            &tmp.path().join("node"),
            &cloud,
        )
        .spawn()
        .unwrap(),
    );
    let mut seen_in_steps = None;
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never ready again after the gap; applying in steps seen: {seen_in_steps:?}"
        );
        if let Some((status, body)) = live::http(port, "GET", "/healthz", None, None) {
            let detail = body["detail"].as_str().unwrap_or_default();
            if detail.contains("in steps") {
                assert_eq!(status, 503, "{body}");
                assert_eq!(body["status"], "not_ready", "{body}");
                assert_eq!(body["reason"], "catching_up", "{body}");
                seen_in_steps = Some(body.clone());
            } else if body["applied_offset"].as_u64().unwrap_or(0) > records
                && body["lag"] == 0
                && body["status"] != "not_ready"
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let body = seen_in_steps.expect("the probes named the record applied in steps");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!("applying record {records} in steps")),
        "the node's first record follows the log's {records}: {detail}"
    );
}

/// A second fold on a data directory a running fold holds is refused with what to do (not
/// RocksDB's lock-file message), and a fold of a log that does not open leaves no empty
/// store behind.
#[test]
fn a_fold_on_a_store_in_use_or_of_a_missing_log_says_so_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let log = import(tmp.path(), &site_log(10, 1));
    let data = tmp.path().join("node").display().to_string();
    let mut following = Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args([
            "connector",
            "fold",
            "--log",
            &log,
            "--data",
            &data,
            "--follow",
            "-q",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tmp.path().join("node/snapshot/CURRENT").is_file() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = lhc(&["connector", "fold", "--log", &log, "--data", &data]);
    following.kill().unwrap();
    following.wait().unwrap();
    assert!(!second.status.success());
    let said = String::from_utf8_lossy(&second.stderr).to_string();
    assert!(
        said.contains("in use by another process") && !said.contains("lock file"),
        "{said}"
    );

    let missing = tmp.path().join("no-such-log").display().to_string();
    let other = tmp.path().join("other").display().to_string();
    let refused = lhc(&["connector", "fold", "--log", &missing, "--data", &other]);
    assert!(!refused.status.success());
    assert!(
        !tmp.path().join("other").exists(),
        "a fold of a log that does not open made {other}"
    );
    // No commit every 0 records either (it meant 1 before).
    let zero = lhc(&[
        "connector",
        "fold",
        "--log",
        &log,
        "--data",
        &other,
        "--batch",
        "0",
    ]);
    assert!(!zero.status.success());
    assert!(String::from_utf8_lossy(&zero.stderr).contains("--batch"));
    assert!(!tmp.path().join("other").exists());
}

/// Ctrl-C (SIGINT) stops a fold after the record being applied: what was folded is
/// committed, the fold says where it stopped and exits 130, and running it again continues
/// from there to a store equal to an uninterrupted fold's. Following, Ctrl-C is how a fold
/// ends: exit 0, everything read committed.
#[test]
fn ctrl_c_stops_a_fold_between_records_and_commits_what_it_folded() {
    let tmp = tempfile::tempdir().unwrap();
    let log = import(tmp.path(), &site_log(100, 8));
    let data = tmp.path().join("node").display().to_string();
    let total = expected_records(&log);
    // One synced commit per record, so the fold lasts long enough to be interrupted.
    let (code, said) = interrupted_fold(&log, &data, &["--batch", "1", "--sync", "-q"], 50);
    assert_eq!(code, Some(130), "{said}");
    let stopped = next_offset(&data);
    assert!(
        stopped >= 50 && stopped < total,
        "stopped at {stopped} of {total}"
    );
    // What it says is what the store holds: the offset and the digest committed.
    let status = ok(lhc(&["connector", "status", "--data", &data]));
    let digest = status.lines().nth(1).unwrap().trim_start_matches("digest ");
    assert!(
        said.contains("interrupted before the end of the log")
            && said.contains(&format!("next offset {stopped}; digest {digest}"))
            && said.contains(&format!("continue from offset {stopped}")),
        "{said}"
    );
    // Run again: it continues from there, and the store is an uninterrupted fold's.
    let again = lhc(&["connector", "fold", "--log", &log, "--data", &data]);
    let again = String::from_utf8_lossy(&again.stderr).to_string();
    assert!(
        again.contains(&format!(
            "folded {} record(s) from offset {stopped}",
            total - stopped
        )),
        "{again}"
    );
    assert_eq!(
        ok(lhc(&["connector", "outputs", "--data", &data])),
        ok(lhc(&["replay", &log, "-q"]))
    );

    // Following and still catching up: Ctrl-C ends it at once too (status 0: following,
    // a stop is how it ends), what it folded committed.
    let catching = tmp.path().join("catching").display().to_string();
    let (code, said) =
        interrupted_fold(&log, &catching, &["--follow", "--batch", "1", "--sync"], 50);
    assert_eq!(code, Some(0), "{said}");
    let stopped = next_offset(&catching);
    assert!(stopped < total, "stopped at {stopped} of {total}");
    assert!(said.contains(&format!("next offset {stopped};")), "{said}");

    // Following: Ctrl-C ends it with status 0, everything read committed.
    let followed = tmp.path().join("followed").display().to_string();
    let (code, said) = interrupted_fold(&log, &followed, &["--follow"], total);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains(&format!("next offset {total}")), "{said}");
}

/// Runs `lhc connector fold` of `log` into `data` with `extra` arguments, sends it Ctrl-C
/// once its store says it folded `at_least` records, and returns its exit status and what
/// it said on stderr.
fn interrupted_fold(log: &str, data: &str, extra: &[&str], at_least: u64) -> (Option<i32>, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["connector", "fold", "--log", log, "--data", data])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Polled while the fold writes: a read that meets the store mid-change is retried.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut reached = 0;
    while reached < at_least && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        reached = polled_offset(data).unwrap_or(reached);
    }
    assert!(
        reached >= at_least,
        "the fold reached {reached} of {at_least} records"
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// [`next_offset`] while a fold may be writing the store: `None` when the status cannot be
/// read right now (no store yet, or a read that met it mid-change).
fn polled_offset(data: &str) -> Option<u64> {
    let out = lhc(&["connector", "status", "--data", data]);
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .strip_prefix("next offset ")?
        .parse()
        .ok()
}

/// `connector status` (and `outputs`, `journal`) without --data find the store `connector
/// run` made by default (lhc-data/node-FQDN) when it is the only one; several are named,
/// not guessed. (`status` after a default `run` said there was no cache snapshot: found
/// by hostile testing.)
#[test]
fn read_only_commands_find_the_default_node_store() {
    let tmp = tempfile::tempdir().unwrap();
    let log = import(tmp.path(), &site_log(10, 1));
    let in_tmp = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lhc"))
            .args(args)
            .current_dir(tmp.path())
            .output()
            .unwrap()
    };
    let data = "lhc-data/node-cc1.z1.example";
    ok(in_tmp(&[
        "connector",
        "fold",
        "-q",
        "--log",
        &log,
        "--data",
        data,
    ]));
    let status: serde_json::Value =
        serde_json::from_str(&ok(in_tmp(&["connector", "status", "--format", "json"]))).unwrap();
    assert!(status["next_offset"].as_u64().unwrap() > 0, "{status}");
    assert!(!ok(in_tmp(&["connector", "outputs"])).is_empty());
    std::fs::create_dir_all(tmp.path().join("lhc-data/node-cc2.z1.example")).unwrap();
    let out = in_tmp(&["connector", "status"]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("several node data directories here")
            && said.contains("lhc-data/node-cc2.z1.example"),
        "{said}"
    );
}
