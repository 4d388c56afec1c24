//! `lhc replay`: identical outputs from a file, a log directory and Kafka; digests; chains
//! that name the first divergence.

mod common;

use std::path::Path;

use common::{chain_of, lhc, lhc_limited, ok, refused, simulate};

const EXAMPLE: &str = include_str!("../../../docs/examples/site-outage.jsonl");

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn replays_of_a_file_and_of_its_imported_log_are_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    let log = tmp.path().join("log").display().to_string();
    ok(lhc(&["log", "import", &file, "--log", &log, "-q"]));
    let (from_file, _) = ok(lhc(&["replay", &file, "-q"]));
    let (from_log, _) = ok(lhc(&["replay", &log, "-q"]));
    let (again, _) = ok(lhc(&["replay", &file, "-q"]));
    assert_eq!(from_file, from_log);
    assert_eq!(from_file, again);
    assert_eq!(from_file.lines().count(), 117);
    for line in from_file.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(value["type"].is_string(), "{line}");
    }
}

#[test]
fn the_digest_is_stable_and_a_chain_names_the_first_divergence() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    let chain = tmp.path().join("chain.jsonl").display().to_string();
    let (_, first) = ok(lhc(&["replay", &file, "--no-outputs", "--digest", "-q"]));
    let (_, second) = ok(lhc(&["replay", &file, "--no-outputs", "--digest", "-q"]));
    assert!(
        first.starts_with("digest ") && first.contains("after offset 470"),
        "{first}"
    );
    assert_eq!(first, second);
    assert_eq!(chain_of(&file, 1, &chain, &[]).lines().count(), 471);
    ok(lhc(&[
        "replay",
        &file,
        "--no-outputs",
        "--verify",
        &chain,
        "-q",
    ]));
    // A chain that stops early verifies what it holds, and says the rest was not verified.
    let sparse = tmp.path().join("sparse.jsonl").display().to_string();
    let links = chain_of(&file, 100, &sparse, &[]);
    let (_, said) = ok(lhc(&["replay", &file, "--no-outputs", "--verify", &sparse]));
    assert!(said.contains("verified: all"), "{said}");
    assert!(!said.contains("not verified"), "{links}\n{said}");
    let cut: Vec<&str> = links.lines().collect();
    std::fs::write(&sparse, cut[..cut.len() - 1].join("\n") + "\n").unwrap();
    let (_, said) = ok(lhc(&[
        "replay",
        &file,
        "--no-outputs",
        "--verify",
        &sparse,
        "-q",
    ]));
    assert!(
        said.contains("the last 71 record(s) were not verified"),
        "{said}"
    );
    // A chain lists each offset once, in order; --chain may not overwrite it.
    let doubled = format!("{}\n{}\n", cut[1], cut[1]);
    std::fs::write(&sparse, &doubled).unwrap();
    let out = lhc(&["replay", &file, "--no-outputs", "--verify", &sparse]);
    refused(out, "line 2: offset 199 does not follow offset 199");
    let out = lhc(&[
        "replay",
        &file,
        "--no-outputs",
        "--verify",
        &sparse,
        "--digest-every",
        "10",
        "--chain",
        &sparse,
    ]);
    refused(out, "would be written over the chain --verify reads");
    assert_eq!(
        std::fs::read_to_string(&sparse).unwrap(),
        doubled,
        "the chain is kept"
    );
    // Nor under the names the chain is written by first, nor by the outputs.
    let base = sparse.strip_suffix(".jsonl").unwrap().to_string() + ".jsonl";
    let partial = format!("{base}.partial");
    std::fs::copy(&sparse, &partial).unwrap();
    let out = lhc(&[
        "replay",
        &file,
        "--verify",
        &partial,
        "--digest-every",
        "10",
        "--chain",
        &base,
    ]);
    refused(out, "would be written over the chain --verify reads");
    let other = tmp.path().join("other.jsonl").display().to_string();
    let out = lhc(&[
        "replay",
        &file,
        "--out",
        &other,
        "--digest-every",
        "10",
        "--chain",
        &other,
    ]);
    refused(out, "is where a chain is read or written");
    assert!(
        !std::path::Path::new(&other).exists(),
        "refused before writing"
    );
    std::fs::remove_file(&partial).unwrap();
    let short: Vec<&str> = links.lines().take(2).collect();
    std::fs::write(&sparse, short.join("\n") + "\n").unwrap();
    let (_, said) = ok(lhc(&[
        "replay",
        &file,
        "--no-outputs",
        "--verify",
        &sparse,
        "-q",
    ]));
    assert!(
        said.contains("warning: the chain ends at offset 199 but the log goes on to offset 470")
            && said.contains("the last 271 record(s) were not verified"),
        "{said}"
    );

    // Turn one ok health check (after the outage) into a failure: verification names its offset.
    let mut lines: Vec<String> = EXAMPLE.lines().map(str::to_string).collect();
    let at = (400..lines.len())
        .find(|&i| {
            lines[i].contains(r#""type":"health.check""#) && lines[i].contains(r#""ok":true"#)
        })
        .unwrap();
    lines[at] = lines[at].replace(r#""ok":true"#, r#""ok":false"#);
    let tampered = write(tmp.path(), "tampered.jsonl", &(lines.join("\n") + "\n"));
    let out = lhc(&[
        "replay",
        &tampered,
        "--no-outputs",
        "--verify",
        &chain,
        "-q",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let expected = format!("diverged at offset {at}");
    let agreed = format!("last agreement at offset {}", at - 1);
    assert!(
        stderr.contains(&expected) && stderr.contains(&agreed),
        "{stderr}"
    );
}

/// A replay stopped by a damaged record keeps the chain of the digests it took before it,
/// beside the chain's name, and says where it is; a chain path that cannot be written is
/// refused before replaying.
#[test]
fn a_stopped_replay_keeps_its_chain_and_an_unwritable_chain_is_refused_first() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    let log = tmp.path().join("log").display().to_string();
    ok(lhc(&["log", "import", &file, "--log", &log, "-q"]));
    let seg = tmp.path().join("log").join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() * 3 / 4;
    bytes[at] ^= 0x55;
    std::fs::write(&seg, &bytes).unwrap();
    let chain = tmp.path().join("chain.jsonl").display().to_string();
    let partial = format!("{chain}.partial");
    let out = lhc(&[
        "replay",
        &log,
        "--no-outputs",
        "--digest-every",
        "50",
        "--chain",
        &chain,
        "-q",
    ]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    let links = std::fs::read_to_string(&partial).unwrap();
    let last = links.lines().last().unwrap();
    let last: serde_json::Value = serde_json::from_str(last).unwrap();
    assert!(links.lines().count() >= 5, "{links}");
    assert!(
        said.contains(&format!(
            "({partial} holds the {} digest(s) taken until then, the last after offset {})",
            links.lines().count(),
            last["offset"]
        )) && said.contains("corrupt"),
        "{said}"
    );
    assert!(
        !std::path::Path::new(&chain).exists()
            && !std::path::Path::new(&format!("{chain}.tmp")).exists(),
        "the chain's own name is left alone, and no temporary file"
    );
    // A whole replay then writes the chain under its name, and the partial one goes.
    chain_of(&file, 50, &chain, &[]);
    assert!(
        !std::path::Path::new(&partial).exists()
            && !std::path::Path::new(&format!("{chain}.tmp")).exists()
    );
    // A divergence met before the damage is said with it.
    let wrong = tmp.path().join("wrong.jsonl").display().to_string();
    let mut first: serde_json::Value = serde_json::from_str(links.lines().next().unwrap()).unwrap();
    first["digest"] = serde_json::Value::String("0".repeat(64));
    std::fs::write(&wrong, format!("{first}\n")).unwrap();
    let out = lhc(&["replay", &log, "--no-outputs", "--verify", &wrong]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "the replay had already diverged from the chain --verify reads at offset {}",
            first["offset"]
        )),
        "{out:?}"
    );
    // The links kept are those of a whole replay, as far as they go.
    let whole = chain_of(
        &file,
        50,
        &tmp.path().join("whole.jsonl").display().to_string(),
        &[],
    );
    assert!(whole.starts_with(&links), "{links}\n{whole}");

    // A chain named by a symbolic link is written through it, the link left in place.
    let target = tmp.path().join("target.jsonl");
    let link = tmp.path().join("link.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::fs::write(&target, "").unwrap();
    let through = chain_of(&file, 50, link.to_str().unwrap(), &[]);
    assert_eq!(through, whole);
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), whole);
    // The names beside the link's target are the chain's too: not an output, not a
    // verified chain.
    let beside = format!("{}.tmp", target.display());
    let out = lhc(&[
        "replay",
        &file,
        "--digest-every",
        "50",
        "--chain",
        link.to_str().unwrap(),
        "--out",
        &beside,
    ]);
    refused(out, "is where a chain is read or written");
    std::fs::write(&beside, &whole).unwrap();
    let out = lhc(&[
        "replay",
        &file,
        "--digest-every",
        "50",
        "--chain",
        link.to_str().unwrap(),
        "--verify",
        &beside,
    ]);
    refused(out, "would be written over the chain --verify reads");
    // A link left under the temporary name is replaced, never written through.
    let precious = tmp.path().join("precious.txt");
    std::fs::write(&precious, "keep me").unwrap();
    std::fs::remove_file(&beside).unwrap();
    std::os::unix::fs::symlink(&precious, &beside).unwrap();
    chain_of(&file, 50, link.to_str().unwrap(), &[]);
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");
    assert!(!std::path::Path::new(&beside).exists());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), whole);

    let unwritable = tmp
        .path()
        .join("no/such/dir/chain.jsonl")
        .display()
        .to_string();
    let out = lhc(&[
        "replay",
        &file,
        "--digest-every",
        "50",
        "--chain",
        &unwritable,
    ]);
    let said = refused(out, "creating ");
    assert!(said.contains("no/such/dir/chain.jsonl.tmp"), "{said}");
}

/// `replay --checkpoint-every N` writes, in the same pass, the checkpoints `lhc log
/// checkpoint --every N` writes (byte for byte, quarantined records counted, whatever the
/// decoding threads), and its outputs are a plain replay's; a second run keeps them; a
/// JSONL file (no folder to keep them in) is refused before replaying.
#[test]
fn a_replay_writes_the_checkpoints_log_checkpoint_writes() {
    let tmp = tempfile::tempdir().unwrap();
    // A record the engine quarantines (an unknown connector) counts in the headers.
    let mut lines: Vec<String> = EXAMPLE.lines().map(str::to_string).collect();
    let ts: serde_json::Value = serde_json::from_str(&lines[149]).unwrap();
    let unknown = format!(
        r#"{{"ts":{},"type":"health.check","connector":"nobody.corp.example","ok":true}}"#,
        ts["ts"]
    );
    lines.insert(150, unknown);
    let file = write(tmp.path(), "in.jsonl", &(lines.join("\n") + "\n"));
    let log = tmp.path().join("log").display().to_string();
    ok(lhc(&["log", "import", &file, "--log", &log, "-q"]));
    let (plain, _) = ok(lhc(&["replay", &log, "-q"]));
    assert!(
        plain.contains("\"offset\":150"),
        "the record is quarantined"
    );
    let (outputs, said) = ok(lhc(&[
        "replay",
        &log,
        "--checkpoint-every",
        "100",
        "--threads",
        "2",
    ]));
    assert_eq!(outputs, plain);
    assert!(
        said.contains("wrote 4 checkpoint(s) and kept 0 already there, one every 100 records"),
        "{said}"
    );
    let dir = tmp.path().join("log/checkpoints");
    let read = |dir: &std::path::Path| -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().to_string(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    };
    let by_replay = read(&dir);
    let names: Vec<String> = by_replay.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, [100, 200, 300, 400].map(|n| format!("{n:020}.ckpt")));
    let header = String::from_utf8_lossy(&by_replay[1].1[..400]).to_string();
    assert!(header.contains("\"quarantined\":1"), "{header}");
    // A second replay keeps those already there.
    let (_, said) = ok(lhc(&[
        "replay",
        &log,
        "--no-outputs",
        "--checkpoint-every",
        "100",
    ]));
    assert!(
        said.contains("wrote 0 checkpoint(s) and kept 4 already there"),
        "{said}"
    );
    assert!(read(&dir) == by_replay);
    std::fs::remove_dir_all(&dir).unwrap();
    ok(lhc(&["log", "checkpoint", &log, "--every", "100", "-q"]));
    assert!(
        read(&dir) == by_replay,
        "the same checkpoints, byte for byte"
    );
    // A query then starts from one of them.
    let (_, said) = ok(lhc(&[
        "query",
        &log,
        "--at",
        "2026-01-05T09:55:00Z",
        "digest",
    ]));
    assert!(
        said.contains("note: started from the checkpoint after"),
        "{said}"
    );

    let out = lhc(&["replay", &file, "--checkpoint-every", "100"]);
    refused(out, "--checkpoint-every needs an embedded log directory");
}

#[test]
fn one_or_several_decoding_threads_give_the_same_digest_chain_and_outputs() {
    // Issue 20: decoding in parallel must leave records applied one by one in log order.
    // A site with an outage, a restart and bad records (quarantined at their offsets),
    // over many batches of 1,024 records, so decoders finish out of order.
    let tmp = tempfile::tempdir().unwrap();
    let site = tmp.path().join("site.jsonl");
    let site = site.display().to_string();
    simulate(
        &site,
        5,
        200,
        600,
        2,
        &["--outage", "40m+30m", "--stop", "z1c1@1h20m+10m"],
    );
    let mut lines: Vec<String> = std::fs::read_to_string(&site)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(lines.len() > 10 * 1024, "{} records", lines.len());
    for at in [3 * 1024 + 5, 7 * 1024, lines.len() - 2] {
        lines[at] = "{\"type\":\"vda.heartbeat\"}".to_string();
    }
    let file = write(tmp.path(), "damaged.jsonl", &(lines.join("\n") + "\n"));
    // (An import refuses invalid lines: the embedded log holds the undamaged site.)
    let log = tmp.path().join("log").display().to_string();
    ok(lhc(&["log", "import", &site, "--log", &log, "-q"]));
    let chain = |threads: &str, input: &str, name: &str| {
        let path = tmp.path().join(name).display().to_string();
        chain_of(input, 997, &path, &["--threads", threads])
    };
    let one = chain("1", &file, "one.jsonl");
    assert!(one.lines().count() > 10, "{one}");
    // (65535: more than the source starts; it decodes on its most.)
    for threads in ["3", "65535"] {
        assert_eq!(
            one,
            chain(threads, &file, &format!("{threads}.jsonl")),
            "{threads} threads"
        );
    }
    let one_from_log = chain("1", &log, "log-one.jsonl");
    assert_ne!(one, one_from_log, "the log holds the undamaged records");
    for threads in ["2", "7"] {
        assert_eq!(
            one_from_log,
            chain(threads, &log, &format!("log-{threads}.jsonl")),
            "{threads} threads on the embedded log"
        );
    }
    let (outputs_one, _) = ok(lhc(&["replay", &file, "--threads", "1", "-q"]));
    let (outputs_three, _) = ok(lhc(&["replay", &file, "--threads", "3", "-q"]));
    assert_eq!(outputs_one, outputs_three);
    assert_eq!(
        outputs_one.matches(r#""type":"quarantine""#).count(),
        3,
        "the three damaged records are quarantined"
    );
    // Commands that decode on one thread refuse the option rather than ignore it.
    let out = lhc(&["report", "outage", &file, "--threads", "2", "-q"]);
    refused(out, "--threads needs --all-sites");
}

#[test]
fn the_table_has_one_aligned_line_per_output() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    let (table, _) = ok(lhc(&["replay", &file, "--format", "table", "-q"]));
    assert_eq!(table.lines().count(), 117);
    let transition = table.lines().find(|l| l.contains("RBP 3003")).unwrap();
    assert_eq!(&transition[..24], "2026-01-05T09:10:01.000Z");
    assert_eq!(transition[25..51].trim_end(), "ddc1.corp.example");
    assert!(
        transition[52..]
            .starts_with("RBP 3003      State changed from working_normally to pending_ha"),
        "{transition}"
    );
}

#[test]
fn bad_records_in_a_replayed_file_are_quarantined_at_their_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let mut lines: Vec<&str> = EXAMPLE.lines().take(20).collect();
    lines.insert(5, r#"{"ts":"2026-01-05T09:00:02.500Z","type":"health.check","connector":"ddc1.corp.example","ok":"maybe"}"#);
    let file = write(tmp.path(), "bad.jsonl", &(lines.join("\n") + "\n"));
    let (out, _) = ok(lhc(&["replay", &file, "-q"]));
    let quarantine = out
        .lines()
        .find(|l| l.contains(r#""type":"quarantine""#))
        .unwrap();
    assert!(
        quarantine.contains(r#""offset":5"#) && quarantine.contains("field `ok`"),
        "{quarantine}"
    );
}

#[test]
fn replay_reads_a_site_from_kafka() {
    let cluster = lhc_log::MockKafka::new(1).unwrap();
    cluster.create_topic("lhc.events", 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    ok(lhc(&[
        "log", "import", &file, "--kafka", &brokers, "--site", "site-a", "-q",
    ]));
    let (from_kafka, _) = ok(lhc(&[
        "replay", "--kafka", &brokers, "--site", "site-a", "-q",
    ]));
    let (from_file, _) = ok(lhc(&["replay", &file, "-q"]));
    assert_eq!(from_kafka, from_file);
}

/// The benchmarks keep working (no thresholds here: figures vary by machine).
#[test]
fn quick_benchmarks_run_and_report_their_ratios() {
    let (log, _) = ok(lhc(&["bench", "log", "--quick"]));
    assert!(
        log.contains("read+CRC / decode") && log.contains("group commit"),
        "{log}"
    );
    let (fold, _) = ok(lhc(&["bench", "fold", "--quick"]));
    assert!(fold.contains("ratio fold / decode"), "{fold}");
    let (launch, _) = ok(lhc(&["bench", "launch", "--quick"]));
    assert!(launch.contains("10000 brokered, 0 rejected"), "{launch}");
    // The live node: every launch of each run brokered, on both logs, the runs' median,
    // and a restart.
    let (node, _) = ok(lhc(&["bench", "node", "--quick", "--runs", "2"]));
    let rows: Vec<&str> = node
        .lines()
        .filter(|l| l.starts_with("embedded") || l.starts_with("kafka"))
        .collect();
    assert_eq!(
        rows.len(),
        6,
        "two runs of each log and their medians: {node}"
    );
    assert!(node.contains("median of 2 runs:"), "{node}");
    for row in rows {
        let brokered: Vec<&str> = row.split_whitespace().collect();
        assert!(
            brokered.contains(&"400"),
            "all 400 launches brokered: {row}"
        );
    }
    assert!(node.contains("start to serving /healthz"), "{node}");
    // The targets, each with its verdict.
    for line in [
        "launch p99 on the embedded log, median of 2 runs: ",
        "launch p99 on Kafka, median of 2 runs: ",
        "restart to serving: ",
    ] {
        let target = node
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("{line:?} in {node}"));
        assert!(
            target.ends_with(": met)") || target.ends_with(": NOT met)"),
            "{target}"
        );
    }
    assert!(node.contains("\nevery launch brokered: yes\n"), "{node}");
    // Under each embedded run, its log's fsyncs (with `fsync always`, at least one each).
    let fsyncs: Vec<u64> = node
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("fsyncs of its embedded logs (site log and outputs): ")
        })
        .map(|rest| rest.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(fsyncs.len(), 2, "{node}");
    assert!(fsyncs.iter().all(|&n| n > 0), "{node}");
    let (replay, _) = ok(lhc(&["bench", "replay", "--quick"]));
    assert!(
        replay.contains("ratio replay / decode")
            && replay.contains("peak RSS")
            && replay.contains("ratio whatif / replay"),
        "{replay}"
    );
    let (import, _) = ok(lhc(&["bench", "import", "--quick"]));
    assert!(import.contains("ratio raw / import"), "{import}");
}

/// `lhc simulate` writes the same bytes for the same seed, to a file or to the embedded
/// log, and refuses options it cannot honour with a message naming them.
#[test]
fn simulate_is_deterministic_across_destinations() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a.jsonl").display().to_string();
    let again = tmp.path().join("b.jsonl").display().to_string();
    let log = tmp.path().join("log").display().to_string();
    let common = [
        "simulate",
        "--seed",
        "3",
        "--vdas-per-zone",
        "100",
        "--users",
        "200",
        "--hours",
        "1",
        "--outage",
        "20m+15m",
        "--stop",
        "z1c1@25m+5m",
        "--bad-config",
        "duplicate@10m",
        "-q",
    ];
    ok(lhc(&[&common[..], &["--out", &file]].concat()));
    ok(lhc(&[&common[..], &["--out", &again]].concat()));
    let a = std::fs::read_to_string(&file).unwrap();
    assert_eq!(a, std::fs::read_to_string(&again).unwrap());
    ok(lhc(
        &[&common[..], &["--log", &log, "--fsync", "never"]].concat()
    ));
    let (cat, _) = ok(lhc(&["log", "cat", "--log", &log]));
    assert_eq!(cat, a, "the embedded log holds the same records");
    assert!(a.contains("\"event\":\"stop\"") && a.contains("USER000000"));
    let refused = lhc(&["simulate", "--vdas-per-zone", "20000", "--out", &file]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("10,000"));
}

/// `lhc query --at T` agrees with a replay of the log cut at T (records up to T, then a
/// clock.tick at T so the timers due by then fire), at several instants of an outage.
#[test]
fn query_at_agrees_with_a_replay_cut_at_the_same_instant() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("site.jsonl").display().to_string();
    simulate(&file, 5, 100, 200, 1, &["--outage", "15m+20m"]);
    let text = std::fs::read_to_string(&file).unwrap();
    for at in [
        "2026-01-05T09:10:00.000Z",
        "2026-01-05T09:17:30.000Z",
        "2026-01-05T09:31:00.000Z",
        "2026-01-05T09:50:00.000Z",
    ] {
        let at_ms = lhc_engine::Ts::parse(at).unwrap();
        let mut cut: Vec<&str> = text
            .lines()
            .take_while(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                lhc_engine::Ts::parse(v["ts"].as_str().unwrap()).unwrap() <= at_ms
            })
            .collect();
        let tick = format!(r#"{{"ts":"{at}","type":"clock.tick"}}"#);
        cut.push(&tick);
        let cut_file = write(tmp.path(), "cut.jsonl", &(cut.join("\n") + "\n"));
        let (_, stderr) = ok(lhc(&[
            "replay",
            &cut_file,
            "--no-outputs",
            "--digest",
            "-q",
        ]));
        let replayed = stderr.split_whitespace().nth(1).unwrap().to_string();
        let (queried, _) = ok(lhc(&["query", &file, "--at", at, "digest"]));
        assert_eq!(queried.trim(), replayed, "at {at}");
        let (states, _) = ok(lhc(&["query", &file, "--at", at, "--json"]));
        let states: serde_json::Value = serde_json::from_str(&states).unwrap();
        assert_eq!(states["connectors"].as_array().unwrap().len(), 6);
    }
}

/// `lhc log checkpoint` writes checkpoints beside an embedded log; `lhc query` then starts
/// from the nearest one, says so, and answers every kind of question as a replay from the
/// first record does; a damaged checkpoint is named in a warning and not used.
#[test]
fn query_from_a_checkpoint_answers_as_from_the_start_and_a_damaged_one_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("site.jsonl").display().to_string();
    simulate(&file, 9, 100, 200, 2, &["--outage", "30m+40m"]);
    let log = tmp.path().join("log").display().to_string();
    ok(lhc(&["log", "import", &file, &log, "-q"]));
    let refused_zero = lhc(&["log", "checkpoint", &log, "--every", "0"]);
    assert_eq!(refused_zero.status.code(), Some(2));
    let (out, said) = ok(lhc(&["log", "checkpoint", &log, "--every", "4000"]));
    assert!(said.contains("checkpoint(s) written"), "{said}");
    assert!(out.is_empty(), "the summary goes to stderr: {out}");
    let written = std::fs::read_dir(tmp.path().join("log/checkpoints"))
        .unwrap()
        .count();
    assert!(written >= 4, "{said}");
    // Again: nothing to write, every one kept.
    let (_, again) = ok(lhc(&["log", "checkpoint", &log, "--every", "4000"]));
    assert!(
        again.contains(&format!("0 checkpoint(s) written, {written} kept")),
        "{again}"
    );

    let ask = |at: &str, what: &[&str], extra: &[&str]| {
        let mut args = vec!["query", &log, "--at", at, "--format", "json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(what);
        ok(lhc(&args))
    };
    let kinds: [&[&str]; 5] = [
        &["digest"],
        &["connectors"],
        &["registrations"],
        &["sessions"],
        &["launches"], // the hour before the instant
    ];
    for at in [
        "2026-01-05T09:50:00Z",
        "2026-01-05T10:21:07Z",
        "2026-01-05T10:55:00Z",
    ] {
        for what in kinds {
            let (fast, note) = ask(at, what, &[]);
            let (slow, plain) = ask(at, what, &["--from-start"]);
            assert_eq!(fast, slow, "at {at} {what:?}");
            assert!(!plain.contains("checkpoint"), "{plain}");
            // A window of launches needs a checkpoint from before it.
            if at != "2026-01-05T09:50:00Z" && what[0] != "launches" {
                assert!(note.contains("started from the checkpoint after"), "{note}");
            }
        }
    }
    // The machine's whole history: always from the start.
    let (_, note) = ask(
        "2026-01-05T10:55:00Z",
        &["machine", "pc00080.z1.sim.example"],
        &[],
    );
    assert!(!note.contains("checkpoint"), "{note}");

    // A window of launches that cannot give a list is refused before any checkpoint is
    // loaded or record replayed.
    for (extra, says) in [
        (
            ["--since", "2026-01-05T10:58:00Z"],
            "is after the end of the window",
        ),
        (["--reason", "no_such_reason"], "is not a reason code"),
        (
            ["--reason", "not_elected"],
            "with --outcome brokered: only rejections carry a reason",
        ),
    ] {
        let mut args = vec!["query", &log, "--at", "2026-01-05T10:55:00Z", "launches"];
        if extra[1] == "not_elected" {
            args.extend_from_slice(&["--outcome", "brokered"]);
        }
        args.extend_from_slice(&extra);
        let out = lhc(&args);
        let said = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success(), "{extra:?}: {said}");
        assert!(said.contains(says), "{said}");
        assert!(!said.contains("checkpoint"), "{said}");
    }

    // Damage the last checkpoint's state: named, skipped, and the answer is unchanged.
    let mut found: Vec<_> = std::fs::read_dir(tmp.path().join("log/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    found.sort();
    let last = found.last().unwrap();
    let mut bytes = std::fs::read(last).unwrap();
    let n = bytes.len();
    bytes[n - 50] ^= 0xff;
    bytes[n - 60] ^= 0xff;
    std::fs::write(last, &bytes).unwrap();
    let (fast, note) = ask("2026-01-05T10:59:00Z", &["digest"], &[]);
    let (slow, _) = ask("2026-01-05T10:59:00Z", &["digest"], &["--from-start"]);
    assert_eq!(fast, slow);
    assert!(
        note.contains(&format!("warning: ignoring checkpoint {}", last.display())),
        "{note}"
    );
    assert!(note.contains("started from the checkpoint after"), "{note}");
    let (_, said) = ok(lhc(&["log", "checkpoint", &log, "--every", "4000"]));
    assert!(said.contains("warning: removed checkpoint"), "{said}");
    assert!(said.contains("1 checkpoint(s) written"), "{said}");
}

/// An error names each cause once: a missing file's OS error and a missing log's reason
/// used to be repeated at the end of the line.
#[test]
fn an_error_line_says_each_cause_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing").display().to_string();
    for args in [
        vec!["replay", missing.as_str()],
        vec!["log", "stats", missing.as_str()],
        vec!["report", "outage", missing.as_str()],
    ] {
        let out = lhc(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let said = String::from_utf8(out.stderr).unwrap();
        assert!(said.starts_with("error: "), "{args:?}: {said}");
        for cause in [
            "No such file or directory (os error 2)",
            "no log directory here",
        ] {
            assert!(said.matches(cause).count() <= 1, "{args:?}: {said}");
        }
        assert!(said.contains(&missing), "{args:?}: {said}");
    }
}

/// A record dated four years after the last while a zone is in LHC mode: the timers due
/// before it make about two million 3507/3509 reports (R-STATE-9). Every command that
/// replays takes them in bounded steps: each runs in a 600 MB address space, where holding
/// them at once (the one record's outputs in a single list) ran out of memory.
#[test]
fn a_record_years_later_replays_in_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log =
        include_str!("../../../engine/tests/scenarios/r-elect-4-split-brain-launches.jsonl")
            .to_string();
    log.push_str("{\"ts\":\"2030-01-05T09:00:00.000Z\",\"type\":\"clock.tick\"}\n");
    let file = write(tmp.path(), "gap.jsonl", &log);
    let commands: [&[&str]; 5] = [
        &["replay", "-q", "--no-outputs", "--digest", &file],
        &["report", "outage", "-q", "--format", "json", &file],
        &["lint", "-q", &file],
        &["forensics", "sync", "-q", &file],
        &[
            "query",
            "-q",
            "--at",
            "2031-01-01T00:00:00Z",
            &file,
            "digest",
        ],
    ];
    let mut digests = Vec::new();
    for args in commands {
        let output = lhc_limited("-v 600000", args);
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        let stderr = String::from_utf8_lossy(&output.stderr);
        // lint exits 1: it finds the split brain's failed probes.
        let expected = if args[0] == "lint" { 1 } else { 0 };
        assert_eq!(output.status.code(), Some(expected), "{args:?}: {stderr}");
        match args[0] {
            // `replay --digest` says "digest D after offset N" on stderr.
            "replay" => digests.push(
                stderr
                    .lines()
                    .find_map(|l| l.strip_prefix("digest "))
                    .and_then(|l| l.split_whitespace().next())
                    .map(str::to_string),
            ),
            "query" => digests.push(stdout.split_whitespace().next().map(str::to_string)),
            "report" => {
                let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                let episode = &report["episodes"][0];
                let listed = episode["summaries"].as_array().unwrap().len();
                let more = episode["periodic_not_listed"].as_u64().unwrap();
                assert_eq!(listed, lhc_replay::report::PERIODIC_LISTED);
                // Two connectors, every two minutes, for four years.
                assert!(listed as u64 + more > 2 * 4 * 365 * 720, "{more}");
            }
            _ => {}
        }
    }
    // The replay ends at the tick; the cut a year later fired a year more of timers.
    assert_eq!(digests.len(), 2);
    assert!(digests
        .iter()
        .all(|d| d.as_ref().is_some_and(|d| d.len() == 64)));
    assert_ne!(digests[0], digests[1]);
}

/// R-DATA: `lhc query lhc-data` shows each connector's LHC database content, the StoreFront
/// servers it has seen (with their last contact) among it, as at the instant asked.
#[test]
fn lhc_data_names_the_storefront_servers_seen_with_their_last_contact() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "in.jsonl", EXAMPLE);
    let at = "2026-01-05T09:30:00Z";
    // The last StoreFront heartbeat to ddc1 at or before the instant, from the log itself.
    let last = EXAMPLE
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .rfind(|r| {
            r["type"] == "storefront.heartbeat"
                && r["connector"] == "ddc1.corp.example"
                && r["ts"].as_str().unwrap() <= "2026-01-05T09:30:00.000Z"
        })
        .unwrap();
    let (out, _) = ok(lhc(&[
        "query",
        &file,
        "--at",
        at,
        "--format",
        "json",
        "lhc-data",
        "ddc1.corp.example",
    ]));
    let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
    let storefronts = answer["data"]["storefronts"].as_object().unwrap();
    assert_eq!(storefronts.len(), 1, "{answer}");
    assert_eq!(storefronts["sf1.corp.example"], last["ts"], "{answer}");
    for field in ["recent_users", "clients", "activity"] {
        assert!(!answer["data"][field].is_null(), "{field}: {answer}");
    }
    // Before the first heartbeat: none seen yet.
    let (out, _) = ok(lhc(&[
        "query",
        &file,
        "--at",
        "2026-01-05T09:00:01Z",
        "--format",
        "json",
        "lhc-data",
        "ddc1.corp.example",
    ]));
    let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        answer["data"]["storefronts"],
        serde_json::json!({}),
        "{answer}"
    );
}

/// `lhc query launches` names, for each decision, the user and resource of the request it
/// answers, when StoreFront reuses a request id once its launch is decided: a map by id
/// named the later user for both (found by hostile testing).
#[test]
fn query_launches_names_the_user_of_each_request_when_ids_are_reused() {
    let tmp = tempfile::tempdir().unwrap();
    let log = include_str!("../../../engine/tests/scenarios/launch-cloud-site-wide.jsonl")
        .replace("\"request\":\"r2\"", "\"request\":\"r1\"");
    let file = write(tmp.path(), "reused.jsonl", &log);
    let (out, _) = ok(lhc(&[
        "query",
        &file,
        "-q",
        "--at",
        "2026-01-05T09:05:00Z",
        "--format",
        "json",
        "launches",
        "--since",
        "2026-01-05T09:00:00Z",
    ]));
    let value: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r1: Vec<(&str, &str)> = value["launches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["request"] == "r1")
        .map(|l| (l["ts"].as_str().unwrap(), l["user"].as_str().unwrap()))
        .collect();
    assert_eq!(
        r1,
        [
            ("2026-01-05T09:00:20.000Z", "alice"),
            ("2026-01-05T09:00:40.000Z", "carol")
        ],
        "{out}"
    );
    // A connector the log never named: refused, naming those it did (it listed nothing).
    let out = lhc(&[
        "query",
        &file,
        "-q",
        "--at",
        "2026-01-05T09:05:00Z",
        "launches",
        "--connector",
        "nosuch.example",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no connector \"nosuch.example\""), "{said}");
}
