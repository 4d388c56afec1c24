//! Checkpoints in a node's cache snapshot (issue: time travel without replaying): a fold
//! keeps them every N records across restarts, byte for byte those `lhc log checkpoint`
//! writes beside the log; `lhc query --at T --data DIR` answers from them as a replay from
//! the first record does, ignores a damaged one with a warning, and replays a Kafka node's
//! journal.

mod common;
mod live;

use std::path::Path;
use std::sync::Arc;

use common::{lhc, ok, refused, simulate};
use lhc_log::{EmbeddedLog, EmbeddedOptions, Log, LogEntry};
use lhc_node::checkpoints::{CheckpointPolicy, Records};
use lhc_node::{Folder, Store, StoreOptions};

const EVERY: u64 = 1000;

/// The records of a simulated two-zone site with an outage, and one damaged record early
/// on (quarantined: the checkpoints must count it).
fn site_records(dir: &Path) -> Vec<String> {
    let file = dir.join("site.jsonl").display().to_string();
    simulate(
        &file,
        21,
        60,
        80,
        2,
        &["--zones", "2", "--outage", "40m+20m"],
    );
    let mut lines: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.insert(
        300,
        r#"{"type":"no.such.record","ts":"2026-01-05T09:00:01Z"}"#.into(),
    );
    lines
}

fn append(log_dir: &Path, lines: &[String]) {
    let log = EmbeddedLog::open(log_dir, EmbeddedOptions::default()).unwrap();
    let records: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    for chunk in records.chunks(1000) {
        log.append(chunk).unwrap();
    }
}

/// `count` instants of records spread over the log (a fixed stride, so the test is the
/// same every run), as the record's own `ts`.
fn instants(lines: &[String], count: usize) -> Vec<String> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..count)
        .map(|_| {
            // xorshift: spread, repeatable.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let line = &lines[(state % lines.len() as u64) as usize];
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            value["ts"].as_str().unwrap().to_string()
        })
        .collect()
}

fn stdout_of(args: &[&str]) -> (String, String) {
    ok(lhc(args))
}

#[test]
fn a_fold_keeps_checkpoints_across_a_restart_and_queries_answer_from_them() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = site_records(tmp.path());
    assert!(lines.len() > 8 * EVERY as usize, "{} records", lines.len());
    let log_dir = tmp.path().join("log");
    let log = log_dir.display().to_string();
    let data = tmp.path().join("node").display().to_string();
    let every = EVERY.to_string();
    let fold_into = |data: &str, keep: &str| {
        lhc(&[
            "connector",
            "fold",
            &log,
            "--data",
            data,
            "--batch",
            "700",
            "--checkpoint-every",
            &every,
            "--checkpoint-keep",
            keep,
            "-q",
        ])
    };
    let fold = || ok(fold_into(&data, "100"));
    // A fold of the first part, stopped between two checkpoints; then the rest, folded by a
    // second run that goes on counting from what the first committed.
    let cut = 4 * EVERY as usize + 350;
    append(&log_dir, &lines[..cut]);
    fold();
    append(&log_dir, &lines[cut..]);
    fold();

    let store = Store::open_read_only(tmp.path().join("node/snapshot")).unwrap();
    let held: Vec<u64> = store
        .checkpoints()
        .unwrap()
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    let last = lines.len() as u64 / EVERY * EVERY;
    let expected: Vec<u64> = (1..=last / EVERY).map(|k| k * EVERY).collect();
    assert_eq!(held, expected, "one every {EVERY} records");
    // Byte for byte those a replay writes beside the log (same state, same counts, same
    // record hashes): the ones after the restart prove the counts went on.
    ok(lhc(&["log", "checkpoint", &log, "--every", &every, "-q"]));
    for offset in &held {
        let file = log_dir.join(format!("checkpoints/{offset:020}.ckpt"));
        let from_file = std::fs::read(&file).unwrap();
        let from_store = store.checkpoint(*offset).unwrap().unwrap();
        assert!(
            from_file == from_store,
            "checkpoint after {offset} records differs from {}",
            file.display()
        );
    }
    drop(store);
    // The file checkpoints go, so that only the node's can serve.
    std::fs::remove_dir_all(log_dir.join("checkpoints")).unwrap();

    let mut from_checkpoint = 0;
    for at in instants(&lines, 50) {
        let (expected, _) = stdout_of(&["query", "--at", &at, &log, "digest", "--from-start"]);
        let (got, said) = stdout_of(&["query", "--at", &at, &log, "digest", "--data", &data]);
        assert_eq!(got, expected, "--at {at}: {said}");
        if said.contains("started from the checkpoint after") {
            from_checkpoint += 1;
        }
    }
    // Instants before the first checkpoint's records replay from the first record.
    assert!(
        from_checkpoint >= 40,
        "{from_checkpoint} of 50 from a checkpoint"
    );
    // A listing too, not only the digest.
    let at = instants(&lines, 1).remove(0);
    let (expected, _) = stdout_of(&[
        "query",
        "--at",
        &at,
        &log,
        "--format",
        "json",
        "--from-start",
    ]);
    let (got, _) = stdout_of(&[
        "query", "--at", &at, &log, "--format", "json", "--data", &data,
    ]);
    assert_eq!(got, expected);

    // A flipped bit in the newest checkpoint: named, ignored, the answer unchanged.
    let end = serde_json::from_str::<serde_json::Value>(lines.last().unwrap()).unwrap()["ts"]
        .as_str()
        .unwrap()
        .to_string();
    {
        let store =
            Store::open(tmp.path().join("node/snapshot"), &StoreOptions::default()).unwrap();
        let mut bytes = store.checkpoint(last).unwrap().unwrap();
        let at = bytes.len() - 40;
        bytes[at] ^= 0x10;
        store.put_checkpoint(last, &bytes, 100).unwrap();
    }
    let (expected, _) = stdout_of(&["query", "--at", &end, &log, "digest", "--from-start"]);
    let (got, said) = stdout_of(&["query", "--at", &end, &log, "digest", "--data", &data]);
    assert_eq!(got, expected);
    assert!(
        said.contains(&format!(
            "ignoring checkpoint after {last} records in {data}"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "started from the checkpoint after {}",
            last - EVERY
        )),
        "{said}"
    );

    // Only the newest are kept when asked.
    let pruned = tmp.path().join("pruned").display().to_string();
    ok(fold_into(&pruned, "3"));
    let store = Store::open_read_only(tmp.path().join("pruned/snapshot")).unwrap();
    let held: Vec<u64> = store
        .checkpoints()
        .unwrap()
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_eq!(
        held,
        vec![last - 2 * EVERY, last - EVERY, last],
        "the newest 3"
    );
    drop(store);

    // A store folded from this log does not go on with another one (its checkpoints would
    // mix the two): the fold is refused before anything is applied.
    let other_file = tmp.path().join("other.jsonl").display().to_string();
    simulate(&other_file, 22, 60, 80, 3, &["--zones", "2"]);
    let other = tmp.path().join("other-log").display().to_string();
    ok(lhc(&["log", "import", &other_file, &other, "-q"]));
    let said = common::stderr(&lhc(&["connector", "fold", &other, "--data", &data, "-q"]));
    assert!(said.contains("was folded from another log than"), "{said}");

    // The node's checkpoints name the embedded log's offsets: a JSONL file is refused, as
    // is a directory without a cache snapshot.
    let jsonl = tmp.path().join("site.jsonl").display().to_string();
    refused(
        lhc(&["query", "--at", &end, &jsonl, "digest", "--data", &data]),
        "folds an embedded log",
    );
    refused(
        lhc(&["query", "--at", &end, &log, "digest", "--data", &log]),
        "no cache snapshot in",
    );
}

/// A Kafka node numbers what it applied in its journal: its checkpoints name those
/// offsets, and `lhc query --data DIR` replays the journal from them. The journal is
/// written here as the live node writes it (records with the commit that applied them).
#[test]
fn a_kafka_nodes_checkpoints_name_its_journal_and_a_query_replays_it() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = site_records(tmp.path());
    let snapshot = tmp.path().join("node/snapshot");
    let store = Arc::new(Store::open(&snapshot, &StoreOptions::default()).unwrap());
    store.set_kafka_source("lhc.site/site").unwrap();
    let policy = CheckpointPolicy {
        every: EVERY,
        keep: 100,
        build: String::from_utf8(lhc(&["--version"]).stdout)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .trim_start_matches("lhc ")
            .to_string(),
    };
    let (to, jobs) = std::sync::mpsc::sync_channel(1);
    let writer = {
        let (store, policy) = (store.clone(), policy.clone());
        std::thread::spawn(move || {
            lhc_node::checkpoints::run(&store, &policy, &Records::Journal, jobs, &|| false)
        })
    };
    let mut folder = Folder::open(store.clone()).unwrap();
    folder.take_checkpoints_when_free(EVERY, to);
    for line in &lines {
        let offset = folder.next();
        let bytes = line.as_bytes().to_vec();
        folder.journal_mut().journal.push((offset, bytes.clone()));
        folder.apply(&LogEntry { offset, bytes });
        while folder.in_progress() {
            folder.commit().unwrap();
            folder.resume();
        }
        if folder.uncommitted() >= 300 {
            folder.commit().unwrap();
        }
        // The writer is given time: a checkpoint due while it is busy is skipped.
        if folder.next() % EVERY == 1 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            folder.commit().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    }
    folder.commit().unwrap();
    drop(folder);
    writer.join().unwrap();
    let held = store.checkpoints().unwrap();
    assert!(held.len() >= 4, "{held:?}");
    drop(store);

    let data = tmp.path().join("node").display().to_string();
    let jsonl = tmp.path().join("site.jsonl");
    std::fs::write(&jsonl, lines.join("\n") + "\n").unwrap();
    let jsonl = jsonl.display().to_string();
    let mut from_checkpoint = 0;
    for at in instants(&lines, 12) {
        let (expected, _) = stdout_of(&["query", "--at", &at, &jsonl, "digest", "--from-start"]);
        let (got, said) = stdout_of(&["query", "--at", &at, "digest", "--data", &data]);
        assert_eq!(got, expected, "--at {at}: {said}");
        if said.contains("started from the checkpoint after") {
            from_checkpoint += 1;
        }
    }
    assert!(
        from_checkpoint >= 4,
        "{from_checkpoint} of 12 from a checkpoint"
    );
    // The journal is what is replayed: a log named beside it is refused.
    refused(
        lhc(&[
            "query",
            "--at",
            "2026-01-05T10:00:00Z",
            &jsonl,
            "digest",
            "--data",
            &data,
        ]),
        "is a Kafka node's",
    );
}

/// A running node takes checkpoints as it folds, and a query reads them beside it (a
/// read-only open of its store while it holds it).
#[test]
fn a_running_node_keeps_checkpoints_a_query_reads_beside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = site_records(tmp.path());
    let log_dir = tmp.path().join("log");
    append(&log_dir, &lines);
    let data = tmp.path().join("node");
    let port = live::free_port();
    let node = live::node_command(
        "cc1.z1.sim.example",
        port,
        &log_dir,
        &data,
        "http://127.0.0.1:9/",
    )
    .args(["--checkpoint-every", "500"])
    .spawn()
    .unwrap();
    let node = live::Kill(node);
    live::wait_until(
        "the node caught up",
        std::time::Duration::from_secs(120),
        || live::http(port, "GET", "/readyz", None, None).is_some_and(|(_, body)| body["lag"] == 0),
    );
    let at = serde_json::from_str::<serde_json::Value>(&lines[lines.len() - 10]).unwrap()["ts"]
        .as_str()
        .unwrap()
        .to_string();
    let (log, data) = (log_dir.display().to_string(), data.display().to_string());
    let (expected, _) = stdout_of(&["query", "--at", &at, &log, "digest", "--from-start"]);
    // The first checkpoint is always taken (the writer is free); later ones during a fast
    // catch-up only when it is free again, and those after the node's own records (stamped
    // with today's time) cover records later than the instant: the query starts from one
    // of the catch-up's.
    live::wait_until(
        "a query from a checkpoint",
        std::time::Duration::from_secs(60),
        || {
            let (got, said) = stdout_of(&["query", "--at", &at, &log, "digest", "--data", &data]);
            assert_eq!(got, expected, "{said}");
            said.contains("started from the checkpoint after ")
        },
    );
    drop(node);
}
