//! Nothing wrong in silence: the CLI refuses what it cannot answer truly, with an exit
//! status a script can tell apart (0 ok, 1 findings, 2 error) and a message on stderr that
//! says what to do. Each case here answered wrongly, or quietly, before.

use std::process::Command;

mod common;

use common::{example, lhc, ok, refused, root, stderr};

#[test]
fn a_directory_that_is_not_a_log_is_an_error_not_zero_episodes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("photos");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("cat.jpg"), b"meow").unwrap();
    let d = dir.to_str().unwrap();
    for args in [
        vec!["report", "outage", d],
        vec!["lint", d],
        vec!["forensics", "sync", d],
        vec!["query", d, "--at", "2026-01-05T09:00:00Z"],
        vec!["replay", d],
    ] {
        refused(lhc(&args), "not an lhc log");
    }
}

#[test]
fn an_import_into_a_log_that_holds_records_needs_append() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let log = log.to_str().unwrap();
    ok(lhc(&["log", "import", &example(), "--log", log, "-q"]));
    // The same file again would double the log: refused, and the log is unchanged.
    let err = refused(
        lhc(&["log", "import", &example(), "--log", log]),
        "already holds all 471 record(s)",
    );
    assert!(err.contains("--append"), "{err}");
    let (stats, _) = ok(lhc(&["log", "stats", "--log", log, "--json"]));
    assert!(stats.contains("\"records\": 471"), "{stats}");
    // With --append, the same file is still refused: the log holds it already.
    refused(
        lhc(&["log", "import", &example(), "--log", log, "--append"]),
        "already holds all 471 record(s) of",
    );
    // A file that is not the log's own, with records older than the log's end: refused
    // too, lhc appends in time order (R-LOG-4).
    let older = tmp.path().join("older.jsonl");
    let text = std::fs::read_to_string(example()).unwrap();
    std::fs::write(&older, text.split_once('\n').unwrap().1).unwrap();
    let err = refused(
        lhc(&[
            "log",
            "import",
            older.to_str().unwrap(),
            "--log",
            log,
            "--append",
        ]),
        "older than the log's last record (offset 470)",
    );
    assert!(
        err.contains("offset 471 would be out of order"),
        "names the offset: {err}"
    );
    // A configuration change that does not continue the log's versions would only be
    // quarantined too.
    let stale = tmp.path().join("stale.jsonl");
    std::fs::write(
        &stale,
        "{\"ts\":\"2026-01-05T10:00:00Z\",\"type\":\"config.change\",\"version\":1,\"ops\":[]}\n",
    )
    .unwrap();
    refused(
        lhc(&[
            "log",
            "import",
            stale.to_str().unwrap(),
            "--log",
            log,
            "--append",
        ]),
        "configuration version 1 is not above version",
    );
    // A later record is appended.
    let later = tmp.path().join("later.jsonl");
    std::fs::write(
        &later,
        "{\"ts\":\"2026-01-05T10:00:00Z\",\"type\":\"clock.tick\"}\n",
    )
    .unwrap();
    ok(lhc(&[
        "log",
        "import",
        later.to_str().unwrap(),
        "--log",
        log,
        "--append",
        "-q",
    ]));
}

#[test]
fn records_out_of_time_order_are_refused_at_import_with_line_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("in.jsonl");
    std::fs::write(
        &file,
        "{\"ts\":\"2026-01-05T09:00:10Z\",\"type\":\"clock.tick\"}\n\
         {\"ts\":\"2026-01-05T09:00:05Z\",\"type\":\"clock.tick\"}\n\
         {\"ts\":\"2026-01-05T09:00:20Z\",\"type\":\"clock.tick\"}\n",
    )
    .unwrap();
    let log = tmp.path().join("log");
    let log = log.to_str().unwrap();
    let err = refused(
        lhc(&["log", "import", file.to_str().unwrap(), "--log", log]),
        "line 2",
    );
    assert!(err.contains("offset 1 would be out of order"), "{err}");
    assert!(err.contains("R-LOG-4"), "{err}");
    assert!(
        !tmp.path().join("log").exists(),
        "nothing created for a refused import"
    );
    // --skip-invalid appends the rest and keeps the stray one in the rejects file.
    ok(lhc(&[
        "log",
        "import",
        file.to_str().unwrap(),
        "--log",
        log,
        "--skip-invalid",
        "-q",
    ]));
    let rejects = std::fs::read_to_string(tmp.path().join("in.jsonl.rejects.jsonl")).unwrap();
    assert!(rejects.contains("\"line\":2"), "{rejects}");
    // `log append` keeps the same order: a record older than the end is refused.
    let out = common::output_with_stdin(
        Command::new(env!("CARGO_BIN_EXE_lhc")).args(["log", "append", "--log", log]),
        b"{\"ts\":\"2026-01-05T09:00:15Z\",\"type\":\"clock.tick\"}\n",
    );
    refused(out, "older than the log's last record (offset 1)");
}

#[test]
fn query_says_when_the_instant_is_outside_the_log_and_reads_offsets_and_zones() {
    let ex = example();
    refused(
        lhc(&["query", &ex, "--at", "2026-01-05T08:00:00Z"]),
        "before the log's first record (2026-01-05T09:00:00.000Z)",
    );
    let after = lhc(&["query", &ex, "--at", "2026-01-06T00:00:00Z", "digest"]);
    assert!(after.status.success(), "{}", stderr(&after));
    assert!(
        stderr(&after).contains("after the log's last record"),
        "{}",
        stderr(&after)
    );
    // One instant, three spellings: the same answer.
    let (utc, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        "2026-01-05T09:30:00Z",
        "digest",
    ]));
    let (offset, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        "2026-01-05T10:30:00+01:00",
        "digest",
    ]));
    let (zoned, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        "2026-01-05 10:30:00",
        "--tz",
        "Europe/Berlin",
        "digest",
    ]));
    assert_eq!(utc, offset);
    assert_eq!(utc, zoned);
    // The log may follow the subcommand, as it follows every other command's options.
    let (after_subcommand, _) = ok(lhc(&[
        "query",
        "--at",
        "2026-01-05T09:30:00Z",
        "digest",
        &ex,
    ]));
    assert_eq!(utc, after_subcommand);
    let (machine_before, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        "2026-01-05T09:30:00Z",
        "--json",
        "machine",
        "vda-srv01.corp.example",
    ]));
    let (machine_after, _) = ok(lhc(&[
        "query",
        "--at",
        "2026-01-05T09:30:00Z",
        "--json",
        "machine",
        "vda-srv01.corp.example",
        &ex,
    ]));
    assert_eq!(machine_before, machine_after);
    // Named on both sides, the same log is fine; two different logs are refused (the one
    // after the subcommand silently won before).
    let (both, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        "2026-01-05T09:30:00Z",
        "digest",
        &ex,
    ]));
    assert_eq!(utc, both);
    // The same log spelled another way (absolute, through a link) is the same log.
    let link = tempfile::tempdir().unwrap();
    let linked = link.path().join("site.jsonl");
    std::os::unix::fs::symlink(std::fs::canonicalize(&ex).unwrap(), &linked).unwrap();
    let (spelled, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        "2026-01-05T09:30:00Z",
        "digest",
        linked.to_str().unwrap(),
    ]));
    assert_eq!(utc, spelled);
    let other = root().join("engine/tests/scenarios/r-launch-6.jsonl");
    let other = other.to_str().unwrap();
    refused(
        lhc(&[
            "query",
            &ex,
            "--at",
            "2026-01-05T09:30:00Z",
            "digest",
            other,
        ]),
        "the log is named twice",
    );
    refused(
        lhc(&[
            "query",
            "--at",
            "2026-01-05T09:30:00Z",
            "--kafka",
            "localhost:9",
            "digest",
            &ex,
        ]),
        "name two sources",
    );
    refused(
        lhc(&["query", &ex, "--at", "2026-01-05T10:30:00", "digest"]),
        "with --tz",
    );
    refused(
        lhc(&[
            "query",
            &ex,
            "--at",
            "2026-01-05 10:30",
            "--tz",
            "Mars/Base",
        ]),
        "not a time zone",
    );
}

#[test]
fn simulate_refuses_scenarios_outside_its_hours_and_a_log_that_holds_records() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s.jsonl");
    let out = out.to_str().unwrap();
    for (flag, value) in [
        ("--outage", "50m+20m"),
        ("--bad-config", "dangling@2h"),
        ("--stop", "z1c1@3h+1m"),
    ] {
        refused(
            lhc(&[
                "simulate",
                "--hours",
                "1",
                "--vdas-per-zone",
                "10",
                "--users",
                "10",
                flag,
                value,
                "--out",
                out,
            ]),
            "outside the simulated",
        );
    }
    let log = tmp.path().join("log");
    let log = log.to_str().unwrap();
    let sim = |extra: &[&str]| {
        let mut args = vec![
            "simulate",
            "--hours",
            "1",
            "--vdas-per-zone",
            "10",
            "--users",
            "10",
            "--log",
            log,
            "-q",
        ];
        args.extend_from_slice(extra);
        lhc(&args)
    };
    ok(sim(&[]));
    refused(sim(&[]), "--append");
    // Appending a simulation that starts before the log's end would only quarantine it.
    refused(sim(&["--append"]), "before the log's last record");
    ok(sim(&["--append", "--start", "2026-01-05T11:00:00Z"]));
    // Appended, it continues the log's configuration versions: nothing is quarantined.
    let (outputs, _) = ok(lhc(&["replay", log, "-q"]));
    assert!(
        !outputs.contains("\"quarantine\""),
        "no quarantine after --append"
    );
}

#[test]
fn exit_status_tells_findings_from_errors() {
    // A lint with findings is 1, not an error.
    let lint = lhc(&["lint", &example()]);
    let code = lint.status.code();
    assert!(code == Some(0) || code == Some(1), "{code:?}");
    // A missing file is an error: 2.
    refused(
        lhc(&["report", "outage", "/nonexistent/x.jsonl"]),
        "cannot read",
    );
    // A usage error is 2 too (clap's convention).
    assert_eq!(lhc(&["report", "outage", "--bogus"]).status.code(), Some(2));
}

#[test]
fn completions_man_page_and_version_for_packagers_and_bug_reports() {
    let (bash, _) = ok(lhc(&["completions", "bash"]));
    assert!(bash.contains("_lhc()") && bash.contains("outage"), "{bash}");
    let (zsh, _) = ok(lhc(&["completions", "zsh"]));
    assert!(zsh.starts_with("#compdef lhc"), "{zsh}");
    let (man, _) = ok(lhc(&["man"]));
    assert!(man.contains(".TH lhc"), "{man}");
    let (version, _) = ok(lhc(&["--version"]));
    assert!(version.starts_with("lhc "), "{version}");
    for part in ["commit ", "librdkafka ", "RocksDB "] {
        assert!(version.contains(part), "{part:?} in {version}");
    }
}

/// `query launches` names who launched what, with a header, and filters; `query machine`
/// is a table; `--format jsonl` prints one row per line.
#[test]
fn query_launches_and_machine_read_as_tables_and_filter() {
    let ex = example();
    let at = "2026-01-05T09:59:00Z";
    let (table, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        at,
        "launches",
        "--since",
        "2026-01-05T09:00:00Z",
    ]));
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    for column in [
        "ts",
        "request",
        "user",
        "resource",
        "connector",
        "outcome",
        "reason",
    ] {
        assert!(header.split_whitespace().any(|c| c == column), "{header}");
    }
    assert_eq!(lines.count(), 6, "{table}");
    let (rejected, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        at,
        "--format",
        "jsonl",
        "launches",
        "--since",
        "2026-01-05T09:00:00Z",
        "--outcome",
        "rejected",
    ]));
    let rows: Vec<serde_json::Value> = rejected
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{rejected}");
    assert!(rows.iter().all(|r| r["outcome"] == "rejected"));
    assert_eq!(rows[0]["user"], "bob");
    assert_eq!(rows[0]["reason"], "not_elected");
    for (filter, value, expected) in [
        ("--user", "alice", 2),
        ("--connector", "ddc2.corp.example", 1),
        ("--reason", "not_entitled", 1),
    ] {
        let (out, _) = ok(lhc(&[
            "query",
            &ex,
            "--at",
            at,
            "--format",
            "jsonl",
            "launches",
            "--since",
            "2026-01-05T09:00:00Z",
            filter,
            value,
        ]));
        assert_eq!(out.lines().count(), expected, "{filter} {value}: {out}");
    }
    let (until, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        at,
        "--format",
        "jsonl",
        "launches",
        "--since",
        "2026-01-05T09:00:00Z",
        "--until",
        "2026-01-05T09:10:00Z",
    ]));
    assert_eq!(until.lines().count(), 2, "{until}");
    let (machine, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        at,
        "machine",
        "vda-win01.corp.example",
    ]));
    let mut lines = machine.lines();
    assert!(
        lines.next().unwrap().contains("registered with cloud"),
        "{machine}"
    );
    assert!(lines.next().unwrap().starts_with("ts "), "{machine}");
    assert!(machine.contains("launch brokered here"), "{machine}");
}

/// librdkafka's retries are one line each on stderr, without colour when stderr is not a
/// terminal, and -q leaves only the error.
#[test]
fn kafka_retries_are_one_line_each_uncoloured_and_quiet_under_q() {
    let args = [
        "replay",
        "--kafka",
        "127.0.0.1:1",
        "--site",
        "s",
        "--kafka-timeout",
        "2",
    ];
    let out = lhc(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(!err.contains('\u{1b}'), "no colour off a terminal: {err}");
    let warnings = err.lines().filter(|l| l.contains("WARN")).count();
    assert!(warnings >= 1, "{err}");
    // One line per retry, not the same failure repeated by each of librdkafka's layers.
    assert!(
        !err.contains("Global error"),
        "transport failures are not repeated as global errors: {err}"
    );
    let mut quiet = vec!["-q"];
    quiet.extend_from_slice(&args);
    let out = lhc(&quiet);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "only the error under -q: {err}");
    assert!(err.starts_with("error: "), "{err}");
}

/// A log is named the same way everywhere: a positional LOG (or --log, or --kafka) for the
/// `log` tools, the node and the simulator, as a positional SOURCE for the reports.
#[test]
fn the_log_is_named_by_a_positional_argument_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("site");
    let log = log.to_str().unwrap();
    ok(lhc(&["log", "import", &example(), log, "-q"]));
    let (stats, _) = ok(lhc(&["log", "stats", log, "--json"]));
    assert!(stats.contains("\"records\": 471"), "{stats}");
    let (same, _) = ok(lhc(&["log", "stats", "--log", log, "--json"]));
    assert_eq!(stats, same);
    let (cat, _) = ok(lhc(&["log", "cat", log]));
    assert_eq!(cat.lines().count(), 471);
    ok(lhc(&["log", "check", log, "-q"]));
    let (report, _) = ok(lhc(&["report", "outage", log, "--format", "json"]));
    assert!(report.contains("\"episodes\""));
    // Both spellings at once is ambiguous: refused.
    let both = lhc(&["log", "stats", log, "--log", log]);
    assert_eq!(both.status.code(), Some(2));
}

/// What the hostile review found: an output over its input, options that would write
/// records out of the contract, answers computed from nothing, a machine named in another
/// case, filters that cannot match, control characters in tables, a damaged log's status.
#[test]
fn outputs_never_destroy_inputs_and_impossible_options_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("in.jsonl");
    std::fs::copy(example(), &file).unwrap();
    let f = file.to_str().unwrap();
    refused(
        lhc(&["report", "outage", f, "--out", f]),
        "the input itself",
    );
    refused(
        lhc(&["forensics", "sync", f, "--out", f]),
        "the input itself",
    );
    refused(lhc(&["replay", f, "-o", f]), "the input itself");
    refused(
        lhc(&[
            "log",
            "import",
            f,
            "--skip-invalid",
            "--rejects",
            f,
            "--log",
            "x",
        ]),
        "the input itself",
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        std::fs::read_to_string(example()).unwrap(),
        "the input is intact"
    );
    let log = tmp.path().join("log");
    let l = log.to_str().unwrap();
    ok(lhc(&["log", "import", f, l, "-q"]));
    let segment = log.join("00000000000000000000.log");
    refused(
        lhc(&["log", "export", l, "-o", segment.to_str().unwrap()]),
        "inside the log",
    );
    refused(
        lhc(&["log", "export", l, "--from", "100", "--to", "50"]),
        "before --from",
    );
    let sim = |extra: &[&str]| {
        let mut args = vec![
            "simulate",
            "--hours",
            "1",
            "--vdas-per-zone",
            "10",
            "--users",
            "10",
            "--out",
        ];
        let out = tmp.path().join("s.jsonl");
        let out = out.to_str().unwrap().to_string();
        let mut owned: Vec<String> = args.drain(..).map(String::from).collect();
        owned.push(out);
        owned.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        lhc(&refs)
    };
    refused(sim(&["--session-minutes", "inf"]), "--session-minutes");
    refused(sim(&["--start", "9999-12-31T23:59:00Z"]), "1970..=9999");
    refused(sim(&["--outage", "10m+0m"]), "lasts 0 s");
    refused(sim(&["--flap", "10m+20m/0s"]), "period");
}

#[test]
fn answers_from_nothing_and_quarantines_are_said() {
    let tmp = tempfile::tempdir().unwrap();
    let garbage = tmp.path().join("notes.txt");
    std::fs::write(&garbage, "shopping list\nmilk\n").unwrap();
    let g = garbage.to_str().unwrap();
    refused(lhc(&["report", "outage", g]), "every one was quarantined");
    refused(lhc(&["forensics", "sync", g]), "every one was quarantined");
    let empty = tmp.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    refused(
        lhc(&["report", "outage", empty.to_str().unwrap()]),
        "holds no records",
    );
    // A byte-order mark at the start of the file is skipped: the same answer as without.
    let text = std::fs::read_to_string(example()).unwrap();
    let bom = tmp.path().join("bom.jsonl");
    std::fs::write(&bom, format!("\u{feff}{text}")).unwrap();
    let ex = example();
    let plain = lhc(&["report", "outage", ex.as_str()]);
    let out = lhc(&["report", "outage", bom.to_str().unwrap()]);
    assert!(out.status.success());
    // (The first line names the file.)
    let body = |o: &std::process::Output| -> String {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .skip(1)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(out.stdout.starts_with(b"JSONL file"), "{}", body(&out));
    assert_eq!(body(&out), body(&plain));
    assert!(!stderr(&out).contains("quarantined"), "{}", stderr(&out));
    // One in front of a later record (files joined together) quarantines that record:
    // said on stderr, the answer still given.
    let (first, rest) = text.split_once('\n').unwrap();
    let joined = tmp.path().join("joined.jsonl");
    std::fs::write(&joined, format!("{first}\n\u{feff}{rest}")).unwrap();
    let out = lhc(&["report", "outage", joined.to_str().unwrap()]);
    assert!(out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("of 471 record(s)") && err.contains("quarantined"),
        "{err}"
    );
}

#[test]
fn queries_resolve_case_and_refuse_filters_that_cannot_match() {
    let ex = example();
    let at = "2026-01-05T09:30:00Z";
    let (lower, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        at,
        "machine",
        "vda-srv01.corp.example",
    ]));
    let (upper, _) = ok(lhc(&[
        "query",
        &ex,
        "--at",
        at,
        "machine",
        "VDA-SRV01.corp.example",
    ]));
    assert!(
        lower.contains("registered with ddc1.corp.example"),
        "{lower}"
    );
    assert_eq!(
        lower.lines().skip(1).collect::<Vec<_>>(),
        upper.lines().skip(1).collect::<Vec<_>>()
    );
    assert!(
        upper.contains("registered with ddc1.corp.example"),
        "{upper}"
    );
    refused(
        lhc(&[
            "query",
            &ex,
            "--at",
            at,
            "launches",
            "--since",
            "2026-01-05T09:20:00Z",
            "--until",
            "2026-01-05T09:10:00Z",
        ]),
        "nothing to list",
    );
    refused(
        lhc(&["query", &ex, "--at", at, "launches", "--reason", "bogus"]),
        "not a reason code",
    );
}

#[test]
fn table_cells_escape_control_characters() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ctl.jsonl");
    let text = std::fs::read_to_string(example())
        .unwrap()
        .replace("\"user\":\"bob\"", "\"user\":\"bob\\u001b[31m\\nX\"");
    std::fs::write(&file, text).unwrap();
    let (table, _) = ok(lhc(&[
        "query",
        file.to_str().unwrap(),
        "--at",
        "2026-01-05T09:59:00Z",
        "launches",
    ]));
    assert!(!table.contains('\u{1b}'), "{table:?}");
    assert!(table.contains("bob\\u{1b}[31m\\nX"), "{table}");
    assert_eq!(table.lines().count(), 1 + 6, "no row split: {table}");
}

#[test]
fn a_damaged_log_is_a_finding_and_an_empty_chain_verifies_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let l = log.to_str().unwrap();
    ok(lhc(&["log", "import", &example(), l, "-q"]));
    let segment = log.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[30_000] ^= 0x40;
    std::fs::write(&segment, bytes).unwrap();
    let out = lhc(&["log", "check", l]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "damage is a finding: {}",
        stderr(&out)
    );
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = lhc(&["log", "check", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "no 'framing ok' before the error");
    let chain = tmp.path().join("chain.jsonl");
    std::fs::write(&chain, "").unwrap();
    refused(
        lhc(&["replay", &example(), "--verify", chain.to_str().unwrap()]),
        "holds no digest",
    );
}

#[test]
fn a_retry_naming_another_users_launch_hides_no_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("forged.jsonl");
    // alice's launch at 09:26:35 claims to retry bob's refused req-004.
    let text = std::fs::read_to_string(example()).unwrap().replace(
        "\"request\":\"req-005\",",
        "\"request\":\"req-005\",\"retry_of\":\"req-004\",",
    );
    assert!(text.contains("retry_of"));
    std::fs::write(&file, text).unwrap();
    let (json, _) = ok(lhc(&[
        "report",
        "outage",
        file.to_str().unwrap(),
        "--format",
        "json",
    ]));
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let affected = &report["episodes"][0]["users_affected"];
    assert_eq!(affected, &serde_json::json!(["bob"]), "{affected}");
}
