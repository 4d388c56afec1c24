//! The `lhc log` commands, driven as a user would: through the binary.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const EXAMPLE: &str = include_str!("../../../docs/examples/site-outage.jsonl");

fn lhc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lhc"))
}

fn run(args: &[&str]) -> Output {
    lhc().args(args).output().expect("lhc runs")
}

fn run_stdin(args: &[&str], stdin: &str) -> Output {
    spawn_stdin(args, stdin).wait_with_output().unwrap()
}

/// Starts `lhc args` with `stdin` written and closed, its output piped, without waiting.
fn spawn_stdin(args: &[&str], stdin: &str) -> std::process::Child {
    let mut child = lhc()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn log_arg(dir: &Path) -> String {
    dir.join("log").display().to_string()
}

/// Cuts segment `seg` right after its first `n` records: 16 bytes of segment header, then
/// frames of 20 bytes + payload.
fn cut_after_records(seg: &Path, n: usize) {
    let bytes = std::fs::read(seg).unwrap();
    let mut at = 16usize;
    for _ in 0..n {
        at += 20 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    std::fs::write(seg, &bytes[..at]).unwrap();
}

fn end_offset(log: &str) -> u64 {
    let out = run(&["log", "stats", "--json", "--log", log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["end_offset"].as_u64().unwrap()
}

/// A log at `dir`/log holding the example site's records, imported as a user would.
fn example_log(dir: &Path) -> String {
    let log = log_arg(dir);
    let file = write(dir, "in.jsonl", EXAMPLE);
    let out = run(&["log", "import", "-q", file.to_str().unwrap(), "--log", &log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    log
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

#[test]
fn import_then_export_gives_back_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    let out = run(&["log", "import", file.to_str().unwrap(), "--log", &log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The summary is a diagnostic: stderr, like `log append`'s.
    assert!(
        text(&out.stderr).contains("appended 471 record(s)"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let out = run(&["log", "export", "--log", &log]);
    assert_eq!(text(&out.stdout), EXAMPLE);
    let out = run(&["log", "export", "--log", &log, "--from", "10", "--to", "12"]);
    let lines: Vec<&str> = EXAMPLE.lines().collect();
    assert_eq!(text(&out.stdout), format!("{}\n{}\n", lines[10], lines[11]));
    let out = run(&["log", "check", "--log", &log]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("471 record(s) valid"),
        "{}",
        text(&out.stdout)
    );
}

const BAD_FILE: &str = r#"{"ts":"2026-01-05T09:00:00.000Z","type":"clock.tick"}
{"ts":"2026-01-05T09:00:01.000Z","type":"clock.tock"}
{"ts":"2026-01-05T09:00:02.000Z","type":"health.check","connector":"c1","ok":true,"colour":"red"}

{"ts":"2026-01-05T09:00:03.000Z","type":"peer.probe","connector":"c1","ok":true}
{"ts":"2026-01-05T09:00:04.000Z","type":"health.check","connector":"c1","ok":"yes"}
{"ts":"2026-01-05T10:00:05.000+01:00","type":"clock.tick"}
{"ts":"2026-01-05T09:00:06.000Z","type":"config.change","version":1,"ops":[{"op":"upsert","kind":"machine","id":"m","data":{"zone":"z"}}]}
not json at all
{"ts":"2026-01-05T09:00:08.000Z","type":"clock.tick"}
"#;

#[test]
fn import_refuses_a_file_with_invalid_lines_and_lists_each() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let file = write(tmp.path(), "bad.jsonl", BAD_FILE);
    let out = run(&["log", "import", file.to_str().unwrap(), "--log", &log]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    for expected in [
        "bad.jsonl:line 2: field `type`: unknown type",
        "bad.jsonl:line 3: field `colour`: unknown field",
        "bad.jsonl:line 5: field `peer`: missing field",
        "bad.jsonl:line 6: field `ok`: wrong type",
        "bad.jsonl:line 7: field `ts`: bad timestamp",
        "bad.jsonl:line 8: field `ops[0].data.delivery_group`: missing field",
        "bad.jsonl:line 9: field `(record)`: syntax",
        "nothing appended: 7 of 9 line(s)",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
    assert!(
        !err.contains("line 1:") && !err.contains("line 10:"),
        "{err}"
    );
    assert!(
        !tmp.path().join("log").exists() || end_offset(&log) == 0,
        "a refused import appends nothing"
    );
}

#[test]
fn skip_invalid_appends_the_rest_and_writes_rejects_with_reasons() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let file = write(tmp.path(), "bad.jsonl", BAD_FILE);
    let out = run(&[
        "log",
        "import",
        file.to_str().unwrap(),
        "--log",
        &log,
        "--skip-invalid",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(end_offset(&log), 2);
    let rejects = std::fs::read_to_string(tmp.path().join("bad.jsonl.rejects.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = rejects
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 7);
    assert_eq!(rows[0]["line"], 2);
    assert_eq!(rows[0]["path"], "type");
    assert_eq!(rows[0]["kind"], "unknown_type");
    assert_eq!(rows[1]["path"], "colour");
    assert!(rows[6]["record"].as_str().unwrap().starts_with("not json"));
}

#[test]
fn append_from_stdin_is_all_or_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let good = "{\"ts\":\"2026-01-05T09:00:00.000Z\",\"type\":\"clock.tick\"}\n";
    let out = run_stdin(&["log", "append", "--log", &log], &format!("{good}{good}"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("offsets 0..=1"),
        "{}",
        text(&out.stderr)
    );
    let out = run_stdin(
        &["log", "append", "--log", &log],
        &format!("{good}{{\"type\":\"clock.tick\"}}\n"),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("stdin:line 2: field `ts`: missing field"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(end_offset(&log), 2);
}

#[test]
fn cat_follow_prints_records_appended_later() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let tick =
        |s: u32| format!("{{\"ts\":\"2026-01-05T09:00:{s:02}.000Z\",\"type\":\"clock.tick\"}}\n");
    assert!(run_stdin(&["log", "append", "--log", &log], &tick(0))
        .status
        .success());
    let mut cat = lhc()
        .args([
            "log",
            "cat",
            "--follow",
            "--offsets",
            "--from",
            "0",
            "--log",
            &log,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(cat.stdout.take().unwrap()).lines();
    assert_eq!(
        lines.next().unwrap().unwrap(),
        format!("0\t{}", tick(0).trim_end())
    );
    assert!(run_stdin(&["log", "append", "--log", &log], &tick(1))
        .status
        .success());
    assert_eq!(
        lines.next().unwrap().unwrap(),
        format!("1\t{}", tick(1).trim_end())
    );
    cat.kill().unwrap();
    cat.wait().unwrap();
}

#[test]
fn several_processes_append_to_one_log_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let children: Vec<_> = (0..4)
        .map(|p| {
            let records: String = (0..50)
                .map(|i| {
                    format!(
                        "{{\"ts\":\"2026-01-05T09:00:00.000Z\",\"type\":\"storefront.heartbeat\",\"connector\":\"c{p}\",\"storefront\":\"sf{i}\"}}\n"
                    )
                })
                .collect();
            // Several small appends per process, so the processes interleave.
            let chunks: Vec<String> = records.lines().collect::<Vec<_>>().chunks(5).map(|c| c.join("\n") + "\n").collect();
            let log = log.clone();
            std::thread::spawn(move || {
                for chunk in chunks {
                    let out = run_stdin(&["log", "append", "--log", &log], &chunk);
                    assert!(out.status.success(), "{}", text(&out.stderr));
                }
            })
        })
        .collect();
    for c in children {
        c.join().unwrap();
    }
    let out = run(&["log", "check", "--log", &log]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("200 record(s), offsets 0..200"),
        "{}",
        text(&out.stdout)
    );
    // Each process's records are in its own order.
    let exported = text(&run(&["log", "export", "--log", &log]).stdout);
    for p in 0..4 {
        let mine: Vec<&str> = exported
            .lines()
            .filter(|l| l.contains(&format!("\"c{p}\"")))
            .collect();
        let order: Vec<String> = (0..50).map(|i| format!("\"sf{i}\"")).collect();
        for (line, sf) in mine.iter().zip(&order) {
            assert!(line.contains(sf.as_str()), "{line} vs {sf}");
        }
        assert_eq!(mine.len(), 50);
    }
}

#[test]
fn check_names_segment_and_offset_of_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    assert!(
        run(&["log", "import", file.to_str().unwrap(), "--log", &log])
            .status
            .success()
    );
    let seg = tmp.path().join("log").join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x55;
    std::fs::write(&seg, &bytes).unwrap();
    let out = run(&["log", "check", "--log", &log]);
    // Damage is a finding (exit 1), reported with the answer on stdout.
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stdout);
    assert!(
        err.contains("log corrupted in segment")
            && err.contains("00000000000000000000.log at offset"),
        "{err}"
    );
}

#[test]
fn kafka_needs_a_site_and_says_so() {
    let out = run(&["log", "stats", "--kafka", "127.0.0.1:1"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--kafka needs --site"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn import_and_cat_through_kafka() {
    let cluster = lhc_log::MockKafka::new(1).unwrap();
    cluster.create_topic("lhc.events", 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let tmp = tempfile::tempdir().unwrap();
    let head: String = EXAMPLE.lines().take(30).map(|l| format!("{l}\n")).collect();
    let file = write(tmp.path(), "in.jsonl", &head);
    let kafka = ["--kafka", brokers.as_str(), "--site", "site-a"];
    let out = lhc()
        .args(["log", "import", file.to_str().unwrap()])
        .args(kafka)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = lhc().args(["log", "export"]).args(kafka).output().unwrap();
    assert_eq!(text(&out.stdout), head);
    let out = lhc()
        .args(["log", "cat", "--offsets", "--from", "29"])
        .args(kafka)
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        format!("29\t{}\n", EXAMPLE.lines().nth(29).unwrap())
    );
    let out = lhc().args(["log", "check"]).args(kafka).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stdout));
}

#[test]
fn committed_schemas_are_current_via_cli() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../schemas");
    let out = run(&["schema", "--check", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&["schema", "--out", tmp.path().to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("input.schema.json")).unwrap(),
        std::fs::read_to_string(dir.join("input.schema.json")).unwrap()
    );
}

#[test]
fn demo_imports_and_prints_the_example() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    for _ in 0..2 {
        let out = run(&["demo", "--example", "--dir", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("imported 471 records"), "{stdout}");
        assert!(stdout.contains("471 records -> 117 outputs"), "{stdout}");
        assert!(
            stdout.contains("ddc1.corp.example          HA 3502       Brokering in LHC mode"),
            "{stdout}"
        );
    }
}

/// `lhc demo --dir` given an admin's log (or a folder holding one as `log/`) refuses and
/// changes nothing; it replaced it (found by hostile testing).
#[test]
fn demo_never_replaces_a_log_it_did_not_write() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    let log = log_arg(tmp.path());
    assert!(
        run(&["log", "import", "-q", file.to_str().unwrap(), "--log", &log])
            .status
            .success()
    );
    let before = run(&["log", "export", "--log", &log]).stdout;
    for dir in [tmp.path().to_str().unwrap(), log.as_str()] {
        let out = run(&["demo", "--example", "--dir", dir]);
        assert_eq!(out.status.code(), Some(2), "{dir}");
        let said = text(&out.stderr);
        assert!(
            said.contains("give") && said.contains("a directory of its own (--dir)"),
            "{said}"
        );
        assert_eq!(run(&["log", "export", "--log", &log]).stdout, before);
    }
    assert!(!tmp.path().join("log/.lhc-demo").exists());
    // A demo's own log, replaced by a real one later: the real one is refused too (a
    // marker beside log/ outlived the demo's log; found by hostile testing).
    let work = tmp.path().join("work");
    let run_demo = || run(&["demo", "--example", "--dir", work.to_str().unwrap()]);
    assert!(run_demo().status.success());
    assert!(run_demo().status.success(), "the demo replaces its own log");
    std::fs::remove_dir_all(work.join("log")).unwrap();
    let real = work.join("log").display().to_string();
    assert!(run(&[
        "log",
        "import",
        "-q",
        file.to_str().unwrap(),
        "--log",
        &real
    ])
    .status
    .success());
    assert_eq!(run_demo().status.code(), Some(2));
    assert_eq!(run(&["log", "export", "--log", &real]).stdout, before);
    // An empty log/ holds nothing to protect (made by hand, or a run stopped before its
    // marker).
    std::fs::remove_dir_all(work.join("log")).unwrap();
    std::fs::create_dir_all(work.join("log")).unwrap();
    assert!(run_demo().status.success());
    let out = run(&["log", "check", "--log", &log]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

/// The README's first command: a simulated site through an outage, summarized, with
/// both HTML reports written.
#[test]
fn demo_simulates_an_outage_and_writes_the_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    for _ in 0..2 {
        let out = run(&["demo", "--dir", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("2 LHC episode(s)"), "{stdout}");
        assert!(stdout.contains("dangling_reference"), "{stdout}");
        // The stopped broker's peers elect the next one (R-ELECT-5).
        assert!(
            stdout.contains("cc3.z1.sim.example: elected cc1.z1.sim.example → cc2.z1.sim.example"),
            "failover shown: {stdout}"
        );
        for report in ["outage-report.html", "sync-forensics.html"] {
            let page = std::fs::read_to_string(dir.join(report)).unwrap();
            assert!(page.starts_with("<!DOCTYPE html>"), "{report}");
        }
        // It ends by suggesting the what-if that would have helped most: in this scenario
        // the pooled desktops refused in the outage, rescued by the reuse flags (the bad
        // change broke no launch; keeping cc1.z2 off sends its requests to a stopped
        // connector).
        let suggestion = stdout
            .split("== What would have helped most (lhc whatif) ==")
            .nth(1)
            .expect("a what-if suggested");
        assert!(
            suggestion.contains("--group pool-z1:reuse_machines_without_shutdown_in_outage=true")
                && suggestion.contains(
                    "938 of the 1,694 launches users saw refused would have been brokered"
                )
                && suggestion.contains("--without-bad-changes\n       rescues 0"),
            "{suggestion}"
        );
    }
}

#[test]
fn cat_follows_as_a_kafka_consumer_group() {
    let cluster = lhc_log::MockKafka::new(1).unwrap();
    cluster.create_topic("lhc.events", 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let tmp = tempfile::tempdir().unwrap();
    let head: String = EXAMPLE.lines().take(10).map(|l| format!("{l}\n")).collect();
    let file = write(tmp.path(), "in.jsonl", &head);
    let kafka = ["--kafka", brokers.as_str(), "--site", "site-a"];
    assert!(lhc()
        .args(["log", "import", file.to_str().unwrap()])
        .args(kafka)
        .output()
        .unwrap()
        .status
        .success());
    let mut cat = lhc()
        .args(["log", "cat", "--follow", "--group", "tail", "--offsets"])
        .args(kafka)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(cat.stdout.take().unwrap()).lines();
    for (i, expected) in head.lines().enumerate() {
        assert_eq!(lines.next().unwrap().unwrap(), format!("{i}\t{expected}"));
    }
    cat.kill().unwrap();
    cat.wait().unwrap();
}

/// `log import` reads its file twice (validate all, then append): a pipe is refused at
/// once, pointing at `log append`, instead of "changed while it was imported"; and a file
/// saved with a byte order mark imports as the same records.
#[test]
fn import_refuses_a_pipe_and_takes_a_file_with_a_byte_order_mark() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let out = run_stdin(&["log", "import", "/dev/stdin", "--log", &log], EXAMPLE);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("not a regular file") && err.contains("lhc log append"),
        "{err}"
    );
    assert!(!tmp.path().join("log").exists() || end_offset(&log) == 0);
    let marked = write(tmp.path(), "bom.jsonl", &format!("\u{feff}{EXAMPLE}"));
    let out = run(&["log", "import", marked.to_str().unwrap(), "--log", &log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let exported = run(&["log", "export", "--log", &log]);
    assert_eq!(text(&exported.stdout), EXAMPLE);
}

/// An import cut short (killed, a full disk) leaves a whole-record prefix of the file. The
/// same import again, with or without --append, would hold that prefix twice (--append
/// took the record at the cut, as old as the log's last, as in order): refused, naming
/// --resume, which checks the prefix byte for byte and appends the rest. Found by hostile
/// testing.
#[test]
fn an_interrupted_import_is_resumed_not_doubled() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    let cut: String = EXAMPLE
        .lines()
        .take(200)
        .map(|l| format!("{l}\n"))
        .collect();
    let part = write(tmp.path(), "part.jsonl", &cut);
    let file = file.to_str().unwrap();
    assert!(
        run(&["log", "import", "-q", part.to_str().unwrap(), "--log", &log])
            .status
            .success()
    );
    for extra in [&[][..], &["--append"], &["--append", "--skip-invalid"]] {
        let mut args = vec!["log", "import", file, "--log", &log];
        args.extend_from_slice(extra);
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let said = text(&out.stderr);
        assert!(
            said.contains("already holds 200 record(s), the same as the valid lines of")
                && said.contains("pass --resume"),
            "{extra:?}: {said}"
        );
        assert_eq!(end_offset(&log), 200, "{extra:?}: nothing appended");
    }
    let out = run(&["log", "import", "--resume", file, "--log", &log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("appended 271 record(s)"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        text(&run(&["log", "export", "--log", &log]).stdout),
        EXAMPLE
    );
    // Again: nothing left to append.
    let out = run(&["log", "import", "--resume", file, "--log", &log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("appended nothing"));
    // Another file is not this log's import: refused, nothing appended.
    let other: String = EXAMPLE.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let other = write(tmp.path(), "other.jsonl", &other);
    let out = run(&[
        "log",
        "import",
        "--resume",
        other.to_str().unwrap(),
        "--log",
        &log,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is not an interrupted import of"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(end_offset(&log), 471);
}

/// Two imports of one file into one new log at once: at most one says it succeeded, and
/// if one did, the log holds the file once (each batch's offset is checked, not only the
/// first's: the import whose batches were interleaved used to report success).
#[test]
fn two_imports_at_once_never_both_claim_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("big.jsonl");
    let out = run(&[
        "simulate",
        "-q",
        "--seed",
        "9",
        "--zones",
        "1",
        "--vdas-per-zone",
        "4000",
        "--users",
        "4000",
        "--hours",
        "2",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = log_arg(tmp.path());
    let spawn = || {
        lhc()
            .args(["log", "import", "-q", file.to_str().unwrap(), "--log", &log])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let succeeded = [&a, &b].iter().filter(|o| o.status.success()).count();
    assert!(
        succeeded <= 1,
        "both succeeded: {} / {}",
        text(&a.stderr),
        text(&b.stderr)
    );
    let exported = run(&["log", "export", "--log", &log]).stdout;
    if succeeded == 1 {
        assert!(
            exported == std::fs::read(&file).unwrap(),
            "one import said it succeeded, yet the log is not the file once: {} / {}",
            text(&a.stderr),
            text(&b.stderr)
        );
    }
    // Whatever happened, the two never interleave: each batch is written only where its
    // import's previous one ended (they did, leaving thousands of records twice and out
    // of order in the log, found by hostile testing).
    assert!(
        std::fs::read(&file).unwrap().starts_with(&exported),
        "the log is not a prefix of the file: {} / {}",
        text(&a.stderr),
        text(&b.stderr)
    );
    let check = run(&["log", "check", "--log", &log]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));
}

/// A segment cut at a record's boundary reads as a whole, shorter log; its index and the
/// checkpoints written before still name the records that were there. `log check` says
/// they are gone (exit 1) instead of "ok". Found by hostile testing.
#[test]
fn check_names_records_cut_off_at_a_frame_boundary() {
    let tmp = tempfile::tempdir().unwrap();
    let log = example_log(tmp.path());
    let out = run(&["log", "checkpoint", "-q", "--every", "100", &log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["log", "check", "--log", &log]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(!text(&out.stdout).contains("records lost"));

    let seg = tmp.path().join("log").join(format!("{:020}.log", 0));
    cut_after_records(&seg, 200);
    let out = run(&["log", "check", "--log", &log]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("records lost: ") && said.contains("ends at offset 200, but its index"),
        "{said}"
    );
    assert!(
        said.contains("00000000000000000400.ckpt covers 400 records"),
        "{said}"
    );
    // Refreshing the checkpoints would remove that evidence (found by hostile testing: it
    // did, and said nothing): it refuses, changing nothing.
    let ckpts = || {
        let mut names: Vec<_> = std::fs::read_dir(tmp.path().join("log").join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let before = ckpts();
    assert!(before.len() >= 4, "{before:?}");
    let out = run(&["log", "checkpoint", "-q", "--every", "100", &log]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("holds records up to offset 200")
            && said.contains("covers 400 records: records 200..400 are gone")
            && said.contains("Nothing was changed"),
        "{said}"
    );
    assert_eq!(ckpts(), before);
    let out = run(&["log", "check", "--log", &log]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("refuses while that checkpoint is there"));
}

/// `lhc log check` (and the other `log` commands) given a JSONL file: said so, with what
/// to run instead, not the advice to import into a directory over the file.
#[test]
fn log_commands_on_a_jsonl_file_say_what_to_run() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    for command in ["check", "stats", "cat"] {
        let out = run(&["log", command, "--log", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{command}");
        let said = text(&out.stderr);
        assert!(
            said.contains("is a file, not an embedded log directory")
                && said.contains("lhc log import"),
            "{command}: {said}"
        );
    }
}

/// A writer that appends after records cut off at a frame boundary says so, and the loss
/// stays named by `lhc log check` after the writer rebuilt the index that showed it (its
/// offsets now hold other records). Found by hostile testing: `log append` rebuilt the
/// index silently and `log check` said ok.
#[test]
fn an_append_after_lost_records_names_them_for_good() {
    let tmp = tempfile::tempdir().unwrap();
    let log = example_log(tmp.path());
    let seg = tmp.path().join("log").join(format!("{:020}.log", 0));
    cut_after_records(&seg, 200);
    let tick = "{\"ts\":\"2026-01-05T10:00:00.000Z\",\"type\":\"clock.tick\"}\n";
    for round in 0..2 {
        let out = run_stdin(&["log", "append", "--log", &log], tick);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let warned = text(&out.stderr).contains("warning: records lost from");
        // Said by the append that found it; the next one finds a consistent index.
        assert_eq!(warned, round == 0, "round {round}: {}", text(&out.stderr));
        let out = run(&["log", "check", "--log", &log]);
        let said = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert_eq!(said.matches("records lost: ").count(), 1, "{said}");
        assert!(
            said.contains(
                "ended at offset 200, but its index, the commit mark or a checkpoint had named a record at offset"
            ) && said.contains("their offsets go to the records appended since"),
            "{said}"
        );
    }
    assert_eq!(end_offset(&log), 202);
}

/// The same when only a checkpoint shows the loss (the segment cut and its index gone
/// with it, as a restore of older segments leaves it): a writer keeps it in `LOST` before
/// appending at those offsets, once, and `lhc log check` keeps naming it.
#[test]
fn an_append_after_records_only_a_checkpoint_shows_names_them_for_good() {
    let tmp = tempfile::tempdir().unwrap();
    let log = example_log(tmp.path());
    let out = run(&["log", "checkpoint", "-q", "--every", "100", &log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let seg = tmp.path().join("log").join(format!("{:020}.log", 0));
    cut_after_records(&seg, 200);
    std::fs::remove_file(seg.with_extension("idx")).unwrap();
    // The commit mark gone too (a log older than it, or restored without it).
    std::fs::remove_file(tmp.path().join("log").join("COMMITTED")).unwrap();
    let tick = "{\"ts\":\"2026-01-05T10:00:00.000Z\",\"type\":\"clock.tick\"}\n";
    for round in 0..2 {
        let out = run_stdin(&["log", "append", "--log", &log], tick);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let said = text(&out.stderr);
        assert_eq!(
            said.contains("warning: records lost from")
                && said.contains("covers 400 records; records 200..=399"),
            round == 0,
            "round {round}: {said}"
        );
        let lost = std::fs::read_to_string(tmp.path().join("log").join("LOST")).unwrap();
        assert_eq!(lost, format!("{:020}.log 200 399\n", 0));
        let out = run(&["log", "check", "--log", &log]);
        let said = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(
            said.contains("ended at offset 200, but its index, the commit mark or a checkpoint had named a record at offset 399"),
            "{said}"
        );
    }
    assert_eq!(end_offset(&log), 202);
    // The loss said for good in LOST, the checkpoint past the end is no longer needed as
    // evidence: `log checkpoint` refreshes (removing it) instead of refusing for ever.
    let out = run(&["log", "checkpoint", "-q", "--every", "100", &log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["log", "check", "--log", &log]);
    assert_eq!(out.status.code(), Some(1), "still named from LOST");
}

/// A file of junk named like a checkpoint past the end proves nothing: `log check` does not
/// call records lost, a writer keeps no loss, and `log checkpoint` removes it as unusable
/// (it was taken as evidence by its name alone and recorded a loss for good; found by
/// hostile testing).
#[test]
fn junk_named_like_a_checkpoint_is_no_evidence_of_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let log = example_log(tmp.path());
    let dir = tmp.path().join("log").join("checkpoints");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in [
        ("00000000000000099999.ckpt", &b""[..]),
        (
            "18446744073709551615.ckpt",
            &b"{\"format\":\"lhc-checkpoint/1\"}\n"[..],
        ),
    ] {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let out = run(&["log", "check", "--log", &log]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let tick = "{\"ts\":\"2026-01-05T10:00:00.000Z\",\"type\":\"clock.tick\"}\n";
    let out = run_stdin(&["log", "append", "--log", &log], tick);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("records lost"),
        "{}",
        text(&out.stderr)
    );
    assert!(!tmp.path().join("log").join("LOST").exists());
    let out = run(&["log", "checkpoint", "--every", "100", &log]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!dir.join("00000000000000099999.ckpt").exists());
    assert!(!dir.join("18446744073709551615.ckpt").exists());
}

/// `--resume --skip-invalid` keeps the rejects the interrupted import wrote for the lines
/// it had done, and adds those of the rest (they were overwritten, found by hostile
/// testing).
#[test]
fn a_resumed_import_keeps_the_earlier_rejects() {
    let tmp = tempfile::tempdir().unwrap();
    let log = log_arg(tmp.path());
    let lines: Vec<String> = EXAMPLE
        .lines()
        .enumerate()
        .map(|(i, l)| {
            // Lines 3 and 250 are not JSON.
            if i == 2 || i == 249 {
                "not json\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let file = write(tmp.path(), "in.jsonl", &lines.concat());
    let part = write(tmp.path(), "part.jsonl", &lines[..200].concat());
    let rejects = tmp.path().join("rejects.jsonl");
    let rejects = rejects.to_str().unwrap();
    let part = part.to_str().unwrap();
    let args = [
        "log",
        "import",
        "-q",
        "--skip-invalid",
        "--rejects",
        rejects,
    ];
    let out = run(&[&args[..], &[part, "--log", &log]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&[
        &args[..],
        &["--resume", file.to_str().unwrap(), "--log", &log],
    ]
    .concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows: Vec<u64> = std::fs::read_to_string(rejects)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["line"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(rows, [3, 250]);
    assert_eq!(end_offset(&log), EXAMPLE.lines().count() as u64 - 2);
}

/// `log append` checks the time order against the records another writer is still
/// appending too (readers stop at the commit mark until that batch ends): it appends only
/// where the records it checked against end, and checks again when the log moved (found
/// by hostile testing: a record older than the log's last landed after it).
#[test]
fn an_append_racing_another_writers_batch_keeps_the_time_order() {
    let tmp = tempfile::tempdir().unwrap();
    let log = example_log(tmp.path());
    let dir = tmp.path().join("log");
    let end = end_offset(&log);
    // Another writer's batch, written and not yet marked: it holds the lock meanwhile.
    let lock = std::fs::File::open(dir.join("LOCK")).unwrap();
    lock.lock().unwrap();
    let mut frames = Vec::new();
    let later = r#"{"ts":"2026-01-05T10:00:05.000Z","type":"clock.tick"}"#;
    lhc_log::frame::encode_frame(&mut frames, end, later.as_bytes());
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(format!("{:020}.log", 0)))
        .unwrap()
        .write_all(&frames)
        .unwrap();
    let child = spawn_stdin(
        &["log", "append", "--log", &log],
        "{\"ts\":\"2026-01-05T10:00:01.000Z\",\"type\":\"clock.tick\"}\n",
    );
    // It checked against the readers' end; the batch ends while it waits for the lock.
    std::thread::sleep(std::time::Duration::from_millis(500));
    lock.unlock().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "appended out of order");
    assert!(
        text(&out.stderr).contains("older than the log's last record"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(end_offset(&log), end + 1, "only the other writer's record");
    let out = run(&["log", "check", "--log", &log]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

/// `log check` tells a whole segment a writer set aside (a batch that rolled past a
/// segment replaced by an older copy) from a torn tail's cut bytes: it called both a torn
/// tail, whose advice ("if its first bytes are a whole record, the log was damaged") read
/// a healthy set-aside segment as damage (found by hostile testing).
#[test]
fn check_tells_a_segment_set_aside_from_cut_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let log_arg = log.to_str().unwrap();
    let file = tmp.path().join("site.jsonl");
    std::fs::write(&file, EXAMPLE).unwrap();
    let out = run(&["log", "import", file.to_str().unwrap(), "--log", log_arg]);
    assert!(out.status.success(), "{out:?}");
    let segment = log.join("00000000000000000000.log");
    std::fs::copy(&segment, log.join("00000000000000000000.log.cut-0")).unwrap();
    std::fs::write(log.join("00000000000000000000.log.cut-300"), b"{\"ts\":").unwrap();
    let out = lhc().args(["log", "check", log_arg]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("segment set aside:") && said.contains("log.cut-0 ("),
        "{said}"
    );
    assert!(
        said.contains("cut bytes kept:") && said.contains("log.cut-300 ("),
        "{said}"
    );
    assert_eq!(said.matches("torn tail a writer cut").count(), 1, "{said}");
}
