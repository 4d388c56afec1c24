//! `lhc lint`: each check fires on a log that breaks its advice, cites where the advice
//! comes from, and stays quiet on the example site; errors make the exit code 1.

mod common;

use common::{lhc, simulate};
use lhc_engine::build::{records, text, SiteBuilder};
use lhc_engine::config::{ConfigObject, DeliveryGroupData, DeliveryGroupKind, MachineData};
use lhc_engine::Ts;
use serde_json::Value;

fn findings(path: &str) -> (Vec<Value>, bool) {
    let out = lhc(&["lint", path, "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (
        report["findings"].as_array().unwrap().clone(),
        out.status.success(),
    )
}

fn has(findings: &[Value], check: &str, subject: &str) -> bool {
    findings
        .iter()
        .any(|f| f["check"] == check && f["subject"].as_str().unwrap().contains(subject))
}

#[test]
fn the_example_site_is_clean() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/examples/site-outage.jsonl"
    );
    let (found, ok) = findings(example);
    assert!(found.is_empty(), "{found:?}");
    assert!(ok);
}

#[test]
fn configuration_checks_fire_and_cite_their_source() {
    let tmp = tempfile::tempdir().unwrap();
    // Zone z1: 10,001 VDAs and one connector that no StoreFront talks to; a group restricted
    // to a tag with machines in two zones.
    let tagged_machine = |id: &str, zone: &str, tags: &[&str]| ConfigObject::Machine {
        id: id.into(),
        data: MachineData {
            zone: zone.into(),
            delivery_group: "tagged".into(),
            max_sessions: None,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            remote_pc: false,
            maintenance: false,
        },
    };
    let mut site = SiteBuilder::new()
        .zone("z1")
        .zone("z2")
        .connector("a.z1", "z1")
        .connector("a.z2", "z2")
        .connector("b.z2", "z2")
        .group("g", DeliveryGroupKind::MultiSession)
        .object(ConfigObject::DeliveryGroup {
            id: "tagged".into(),
            data: DeliveryGroupData {
                kind: DeliveryGroupKind::MultiSession,
                power_managed: true,
                shutdown_desktops_after_use: None,
                reuse_machines_without_shutdown_in_outage: None,
                session_limit_per_user: None,
                restrict_to_tag: Some("gpu".into()),
            },
        })
        .object(tagged_machine("t1.z1", "z1", &["gpu"]))
        .object(tagged_machine("t1.z2", "z2", &[]));
    for v in 0..10_000 {
        site = site.machine(&format!("m{v}.z1"), "z1", "g", None);
    }
    let t = Ts(1_767_603_600_000);
    let lines = [
        text(&site.change(t, 1)),
        text(&records::storefront(Ts(t.millis() + 1000), "a.z2", "sf")),
        text(&records::storefront(Ts(t.millis() + 1000), "b.z2", "sf")),
    ];
    let path = tmp.path().join("site.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let (found, ok) = findings(path.to_str().unwrap());
    assert!(!ok, "an error finding fails the command");
    assert!(has(&found, "no-storefront-traffic", "a.z1"), "{found:?}");
    assert!(!has(&found, "no-storefront-traffic", "a.z2"));
    assert!(has(&found, "single-connector-zone", "z1"));
    assert!(!has(&found, "single-connector-zone", "z2"));
    assert!(has(&found, "zone-above-10000-vdas", "z1"));
    assert!(has(&found, "tag-restriction-across-zones", "tagged"));
    for f in &found {
        assert!(
            f["cites"].as_str().unwrap().contains("R-")
                || f["cites"].as_str().unwrap().contains("§"),
            "every finding cites the spec: {f}"
        );
        // The Citrix page with the advice, or a page of this repository; never a path
        // outside it.
        let docs = f["docs"].as_str().unwrap();
        assert!(
            docs.starts_with("https://docs.citrix.com/")
                || common::root()
                    .join(docs.split('#').next().unwrap())
                    .is_file(),
            "{f}"
        );
        assert!(!f["fix"].as_str().unwrap().is_empty(), "{f}");
        assert!(!f.to_string().contains("seed"), "no seed paths: {f}");
    }
}

/// Quarantined records, imports failing past a sync interval, and a connector started
/// during an outage are findings; the exit status is 1 (findings), not 2 (error).
#[test]
fn quarantines_long_505s_and_restarts_in_an_outage_are_findings() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("sim.jsonl");
    simulate(
        log.to_str().unwrap(),
        4,
        100,
        200,
        2,
        &[
            "--zones",
            "1",
            "--outage",
            "20m+40m",
            "--stop",
            "z1c2@30m+10m",
            "--bad-config",
            "dangling@5m",
        ],
    );
    // A record older than the one before it: quarantined on replay (R-LOG-4).
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str("{\"ts\":\"2026-01-05T09:00:00Z\",\"type\":\"clock.tick\"}\n");
    std::fs::write(&log, text).unwrap();
    let out = lhc(&["lint", log.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(1), "findings exit 1");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let found = report["findings"].as_array().unwrap().clone();
    assert!(has(&found, "quarantined-records", "offset "), "{found:?}");
    assert!(has(&found, "imports-failing", "cc1.z1"), "{found:?}");
    assert!(
        has(&found, "connector-started-during-outage", "cc2.z1"),
        "{found:?}"
    );
    let failing = found
        .iter()
        .find(|f| f["check"] == "imports-failing")
        .unwrap();
    assert!(failing["fix"]
        .as_str()
        .unwrap()
        .contains("lhc forensics sync"));
    // A single failed import that the next sync check repairs is not a finding: a
    // storage fault fails the import of v2 once, five minutes later v2 imports.
    let mut lines = vec![
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":1,"ops":[{"op":"upsert","kind":"site","id":"site"},{"op":"upsert","kind":"zone","id":"z1","data":{"name":"z"}},{"op":"upsert","kind":"connector","id":"a.z1","data":{"zone":"z1"}},{"op":"upsert","kind":"connector","id":"b.z1","data":{"zone":"z1"}}]}"#.to_string(),
    ];
    for minute in 0..20 {
        for c in ["a.z1", "b.z1"] {
            lines.push(format!(r#"{{"ts":"2026-01-05T09:{minute:02}:01.000Z","type":"health.check","connector":"{c}","ok":true}}"#));
            lines.push(format!(r#"{{"ts":"2026-01-05T09:{minute:02}:01.000Z","type":"storefront.heartbeat","connector":"{c}","storefront":"sf"}}"#));
        }
        if minute == 6 {
            lines.push(r#"{"ts":"2026-01-05T09:06:30.000Z","type":"storage.fault","connector":"a.z1","detail":"disk full"}"#.into());
            lines.push(r#"{"ts":"2026-01-05T09:06:31.000Z","type":"config.change","version":2,"ops":[{"op":"upsert","kind":"user","id":"u1"}]}"#.into());
        }
    }
    let once = tmp.path().join("once.jsonl");
    std::fs::write(&once, lines.join("\n") + "\n").unwrap();
    let replayed =
        String::from_utf8(lhc(&["replay", once.to_str().unwrap(), "-q"]).stdout).unwrap();
    assert_eq!(
        replayed.matches("\"event_id\":505").count(),
        1,
        "{replayed}"
    );
    assert!(replayed.contains("\"event_id\":504"));
    let (once_found, _) = findings(once.to_str().unwrap());
    assert!(!has(&once_found, "imports-failing", ""), "{once_found:?}");
    // One finding per line with --format jsonl.
    let jsonl = lhc(&["lint", log.to_str().unwrap(), "--format", "jsonl"]);
    assert_eq!(
        String::from_utf8_lossy(&jsonl.stdout).lines().count(),
        found.len()
    );
}

#[test]
fn behaviour_checks_fire_on_simulated_scenarios() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("sim.jsonl").display().to_string();
    simulate(
        &log,
        9,
        200,
        300,
        2,
        &[
            "--zones",
            "1",
            "--flap",
            "10m+40m/1m",
            "--partition",
            "70m+5m",
            "--forced-outage",
            "z1c2@90m+20m",
        ],
    );
    let (found, ok) = findings(&log);
    assert!(!ok);
    assert!(has(&found, "network-flapping", "cc1.z1"), "{found:?}");
    assert!(has(
        &found,
        "peers-cannot-probe",
        "cc1.z1.sim.example -> cc2.z1"
    ));
    assert!(has(&found, "forced-outage-on-part-of-zone", "z1"));
    assert!(has(&found, "pooled-fails-in-outage", "pool-z1"));
    // Forcing a whole zone at once is not a finding.
    let whole = tmp.path().join("whole.jsonl").display().to_string();
    simulate(
        &whole,
        9,
        200,
        300,
        2,
        &["--zones", "1", "--forced-outage", "z1@90m+20m"],
    );
    let (found, _) = findings(&whole);
    assert!(
        !has(&found, "forced-outage-on-part-of-zone", "z1"),
        "{found:?}"
    );
}

/// A record dated weeks after the previous one (a producer's clock set wrong): a
/// `clock-jump` warning at its offset that counts the gap's outputs and the later records
/// quarantined for being older; a gap of a few days is not one.
#[test]
fn a_clock_jump_is_named_with_what_it_cost() {
    let tmp = tempfile::tempdir().unwrap();
    let example = include_str!("../../../docs/examples/site-outage.jsonl");
    let lines: Vec<&str> = example.lines().collect();
    let last_ts = |line: &str| {
        let v: Value = serde_json::from_str(line).unwrap();
        Ts::parse(v["ts"].as_str().unwrap()).unwrap()
    };
    let end = last_ts(lines.last().unwrap());
    let tick = |ts: Ts| format!(r#"{{"ts":"{ts}","type":"clock.tick"}}"#);
    let day = 86_400_000;
    // Three days later: quiet. Then thirty days after that, then two records dated
    // before the jump.
    let mut log: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let near = Ts(end.millis() + 3 * day);
    let far = Ts(near.millis() + 30 * day);
    log.push(tick(near));
    log.push(tick(far));
    log.push(tick(Ts(near.millis() + day)));
    log.push(tick(Ts(near.millis() + 2 * day)));
    let path = tmp.path().join("jump.jsonl");
    std::fs::write(&path, log.join("\n") + "\n").unwrap();
    let (found, _) = findings(path.to_str().unwrap());
    let jumps: Vec<&Value> = found
        .iter()
        .filter(|f| f["check"] == "clock-jump")
        .collect();
    assert_eq!(jumps.len(), 1, "{found:?}");
    let jump = jumps[0];
    assert_eq!(jump["subject"], format!("offset {}", lines.len() + 1));
    assert_eq!(jump["severity"], "warning");
    assert_eq!(jump["cites"], "R-STATE-9");
    let detail = jump["detail"].as_str().unwrap();
    assert!(detail.contains("30 day(s)"), "{detail}");
    assert!(
        detail.contains("2 later record(s) were quarantined"),
        "{detail}"
    );
    assert!(has(&found, "quarantined-records", "offset"), "{found:?}");
    // The fix's what-if removes exactly that record.
    let fix = jump["fix"].as_str().unwrap();
    let filter = fix.split('\'').nth(1).unwrap();
    let out = lhc(&["whatif", "-q", "--drop", filter, path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("removed 1 record(s)")
            || String::from_utf8_lossy(&out.stdout).contains("removed 1 record(s)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A file whose every record is quarantined is what lint is for: it lists them (it said
/// "`lhc lint` names why" and listed nothing; found by hostile testing).
#[test]
fn a_file_of_only_quarantined_records_is_linted() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"type\":\"engine.params\",\"ts\":\"2026-01-05T09:00:00.000Z\",\"report_interval_s\":18446744073709551616}\n",
    )
    .unwrap();
    let (found, ok) = findings(path.to_str().unwrap());
    assert!(has(&found, "quarantined-records", "offset 0"), "{found:?}");
    // Nothing applied at all: an error (exit 1), not a warning.
    assert!(!ok);
    assert_eq!(found[0]["severity"], "error", "{found:?}");
}
