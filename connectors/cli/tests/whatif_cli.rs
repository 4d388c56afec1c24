//! `lhc whatif` on scenario logs, each change kind with its expected difference worked out
//! by hand from the scenario and the spec rule it exercises (docs/whatif.md).

mod common;

use common::{chain_of, lhc, lhc_limited, ok, refused, root, simulate};
use serde_json::Value;

fn scenario(name: &str) -> String {
    root()
        .join("engine/tests/scenarios")
        .join(name)
        .display()
        .to_string()
}

/// The what-if as JSON.
fn whatif(args: &[&str]) -> Value {
    let mut all = vec!["whatif", "-q", "--format", "json"];
    all.extend_from_slice(args);
    let (out, _) = ok(lhc(&all));
    serde_json::from_str(&out).unwrap()
}

/// `lhc replay --digest` of a source: the digest the "as it happened" side must show.
fn replay_digest(source: &[&str]) -> String {
    let mut args = vec!["replay", "--digest", "--no-outputs"];
    args.extend_from_slice(source);
    let out = lhc(&args);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    err.split_whitespace().nth(1).unwrap().to_string()
}

fn zone<'a>(w: &'a Value, id: &str) -> &'a Value {
    w["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["zone"] == id)
        .unwrap_or_else(|| panic!("zone {id} in {w}"))
}

fn changed(w: &Value) -> Vec<(String, String, String)> {
    w["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["request"].as_str().unwrap().to_string(),
                c["change"].as_str().unwrap().to_string(),
                c["after"]["machine"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// R-LAUNCH-6: a pooled launch in LHC mode needs both the site permission and the group
/// flag. In r-launch-6, "lhc-pooled" (group dg-pooled, no flag) and "lhc-reuse-group-only"
/// (dg-reuse, flag set) are both refused because the site does not allow reuse. Allowing
/// it at the site rescues only the second (on the group's one machine, m-reuse-1);
/// setting dg-pooled's flag too rescues the first on m-pool-1 (the first registered free
/// machine of the pool in FQDN order). Nothing gets worse.
#[test]
fn reuse_flags_turn_pooled_rejections_into_brokered_launches() {
    let log = scenario("r-launch-6.jsonl");
    let site = whatif(&[
        &log,
        "--site",
        "reuse_machines_without_shutdown_in_outage_allowed=true",
    ]);
    assert_eq!(
        changed(&site),
        vec![(
            "lhc-reuse-group-only".into(),
            "better".into(),
            "m-reuse-1.z1.example".into()
        )]
    );
    assert_eq!(site["before"]["digest"], replay_digest(&[&log]));
    assert_ne!(site["after"]["digest"], site["before"]["digest"]);
    let both = whatif(&[
        &log,
        "--site",
        "reuse_machines_without_shutdown_in_outage_allowed=true",
        "--group",
        "dg-pooled:reuse_machines_without_shutdown_in_outage=true",
    ]);
    assert_eq!(
        changed(&both),
        vec![
            (
                "lhc-pooled".into(),
                "better".into(),
                "m-pool-1.z1.example".into()
            ),
            (
                "lhc-reuse-group-only".into(),
                "better".into(),
                "m-reuse-1.z1.example".into()
            ),
        ]
    );
    assert_eq!(
        (both["better"].as_u64(), both["worse"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(both["before"]["refused"], 2);
    assert_eq!(both["after"]["refused"], 0);
    assert_eq!(both["after"]["users_affected"], serde_json::json!([]));
    let totals: Vec<(String, u64, u64)> = both["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["outcome"].as_str().unwrap().into(),
                t["before"].as_u64().unwrap(),
                t["after"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        totals,
        vec![
            ("brokered".into(), 1, 3),
            ("pooled_unavailable_in_outage".into(), 2, 0)
        ]
    );
    // The machines the what-if sent launches to hold no recorded session for them.
    let flagged: Vec<&str> = both["flagged_machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["machine"].as_str().unwrap())
        .collect();
    assert_eq!(flagged, ["m-pool-1.z1.example", "m-reuse-1.z1.example"]);
    assert!(both["session_policy"]
        .as_str()
        .unwrap()
        .contains("replayed as recorded"));
    let verdict = both["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("2 of the 2 launches users saw refused would have been brokered")
            && verdict.contains("0 launches brokered as it happened would have been refused"),
        "{verdict}"
    );
}

/// R-CSS-4: a config change adding a machine of a group that does not exist fails every
/// import from then on (505) and leaves the connectors on the previous snapshot, so every
/// LHC launch of the outage is decided on a stale snapshot. Without that change (by
/// `--without-bad-changes`, or by dropping version 2 by hand) imports succeed: no 505,
/// no stale decision. The launches themselves are decided alike (the bad machine was never
/// usable either way).
#[test]
fn dropping_the_bad_change_removes_every_505_and_the_stale_snapshot_decisions() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("bad.jsonl");
    let log = log.to_str().unwrap();
    simulate(
        log,
        7,
        40,
        60,
        2,
        &["--bad-config", "dangling@20m", "--outage", "30m+40m"],
    );
    let auto = whatif(&[log, "--without-bad-changes"]);
    let by_hand = whatif(&[log, "--drop", "config.change version=2"]);
    for w in [&auto, &by_hand] {
        for z in ["z1", "z2"] {
            let (b, a) = (&zone(w, z)["before"], &zone(w, z)["after"]);
            assert!(b["import_failures"].as_u64().unwrap() > 0, "{z}: {b}");
            assert!(b["decided_on_stale"].as_u64().unwrap() > 0, "{z}: {b}");
            assert_eq!(a["import_failures"], 0, "{z}");
            assert_eq!(a["decided_on_stale"], 0, "{z}");
            assert_eq!(a["lhc_s"], b["lhc_s"], "the outage itself is unchanged");
        }
        assert_eq!(w["changed"], serde_json::json!([]));
        assert_eq!(w["before"]["digest"], replay_digest(&[log]));
    }
    assert_eq!(
        auto["changes"][0],
        "the 1 config op(s) that introduced the failed imports not made"
    );
    let notes = auto["notes"].to_string();
    assert!(
        notes.contains("not made: machine new-vda-2.sim.example (version 2")
            && notes.contains("dangling_reference"),
        "{notes}"
    );
    assert!(by_hand["notes"][0]
        .as_str()
        .unwrap()
        .contains("removed 1 record(s)"));
}

/// The R-CSS-4 scenario's 505s come from four bad changes and one storage fault. Without
/// the bad changes only the storage fault's failed import remains: a disk failing is an
/// observation, not a change, and the report says it kept it.
#[test]
fn without_bad_changes_keeps_the_storage_fault() {
    let w = whatif(&[&scenario("r-css-4.jsonl"), "--without-bad-changes"]);
    let z1 = zone(&w, "z1");
    assert_eq!(z1["before"]["import_failures"], 4);
    assert_eq!(z1["after"]["import_failures"], 1);
    let notes = w["notes"].to_string();
    assert!(notes.contains("storage faults kept"), "{notes}");
    // Version 5 deletes vda-9, whose upsert (version 2) is the first bad op: the delete
    // goes with it, or the what-if's log would be invalid. So do the deletes of
    // VDA-1.Z1.EXAMPLE and as1 (version 5), made by removed ops of version 3.
    assert!(
        notes.contains(
            "6 config op(s) that introduced failed imports removed, and 3 later delete(s)"
        ),
        "{notes}"
    );
}

/// A 505 names only its first failure (without CSS tracing): one change adding two
/// machines in zones that do not exist fails every import on vda-8 first; once vda-8 is
/// gone, on vda-9. The removal goes round until no failure names a config change.
#[test]
fn without_bad_changes_goes_round_until_no_import_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("two-bad.jsonl");
    let records = [
        r#"{"ts":"2026-01-05T09:00:00Z","type":"config.change","version":1,"ops":[{"op":"upsert","kind":"site","id":"site"},{"op":"upsert","kind":"zone","id":"z1","data":{"name":"Zone 1"}},{"op":"upsert","kind":"connector","id":"cc-a.z1.example","data":{"zone":"z1"}},{"op":"upsert","kind":"delivery_group","id":"dg","data":{"kind":"multi_session"}}]}"#,
        r#"{"ts":"2026-01-05T09:00:01Z","type":"health.check","connector":"cc-a.z1.example","ok":true}"#,
        r#"{"ts":"2026-01-05T09:01:00Z","type":"config.change","version":2,"ops":[{"op":"upsert","kind":"machine","id":"vda-8.z1.example","data":{"zone":"z8","delivery_group":"dg"}},{"op":"upsert","kind":"machine","id":"vda-9.z1.example","data":{"zone":"z9","delivery_group":"dg"}}]}"#,
        r#"{"ts":"2026-01-05T09:30:00Z","type":"health.check","connector":"cc-a.z1.example","ok":true}"#,
    ];
    std::fs::write(&log, records.join("\n") + "\n").unwrap();
    let w = whatif(&[log.to_str().unwrap(), "--without-bad-changes"]);
    let z1 = zone(&w, "z1");
    assert!(
        z1["before"]["import_failures"].as_u64().unwrap() > 1,
        "{z1}"
    );
    assert_eq!(z1["after"]["import_failures"], 0, "{}", w["notes"]);
    let notes = w["notes"].to_string();
    assert!(
        notes.contains("not made: machine vda-8.z1.example")
            && notes.contains("not made: machine vda-9.z1.example"),
        "{notes}"
    );
}

/// A change that both writes one failing object and deletes what another refers to: both
/// its bad ops go (the delete was kept, since an op of the change named a failing object,
/// and the what-if still failed while saying the bad changes were not made; found by an
/// independent check against R-CSS-4).
#[test]
fn without_bad_changes_removes_a_delete_beside_a_bad_upsert() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("mixed.jsonl");
    let records = [
        r#"{"ts":"2026-01-05T09:00:00Z","type":"config.change","version":1,"ops":[{"op":"upsert","kind":"site","id":"site"},{"op":"upsert","kind":"zone","id":"z1","data":{"name":"Zone 1"}},{"op":"upsert","kind":"connector","id":"cc-a.z1.example","data":{"zone":"z1"}},{"op":"upsert","kind":"delivery_group","id":"dg","data":{"kind":"multi_session"}},{"op":"upsert","kind":"delivery_group","id":"dg-x","data":{"kind":"multi_session"}},{"op":"upsert","kind":"machine","id":"vda-1.z1.example","data":{"zone":"z1","delivery_group":"dg"}},{"op":"upsert","kind":"machine","id":"vda-5.z1.example","data":{"zone":"z1","delivery_group":"dg-x"}}]}"#,
        r#"{"ts":"2026-01-05T09:00:01Z","type":"health.check","connector":"cc-a.z1.example","ok":true}"#,
        r#"{"ts":"2026-01-05T09:00:02Z","type":"admin.command","connector":"cc-a.z1.example","command":"enable_css_trace"}"#,
        r#"{"ts":"2026-01-05T09:01:00Z","type":"config.change","version":2,"ops":[{"op":"upsert","kind":"machine","id":"vda-1.z1.example","data":{"zone":"z1","delivery_group":"dg","max_sessions":0}},{"op":"delete","kind":"delivery_group","id":"dg-x"}]}"#,
        r#"{"ts":"2026-01-05T09:30:00Z","type":"health.check","connector":"cc-a.z1.example","ok":true}"#,
    ];
    std::fs::write(&log, records.join("\n") + "\n").unwrap();
    let w = whatif(&[log.to_str().unwrap(), "--without-bad-changes"]);
    let z1 = zone(&w, "z1");
    assert!(
        z1["before"]["import_failures"].as_u64().unwrap() > 0,
        "{z1}"
    );
    assert_eq!(z1["after"]["import_failures"], 0, "{}", w["notes"]);
    let notes = w["notes"].to_string();
    assert!(
        notes.contains("2 config op(s) that introduced failed imports removed")
            && !notes.contains("still failing"),
        "{notes}"
    );
}

/// The settings hold against later changes, patched ones included: a patched upsert of
/// the site object (a heartbeat period) keeps the reuse permission.
#[test]
fn settings_hold_against_a_patched_site_change() {
    let tmp = tempfile::tempdir().unwrap();
    let patch = tmp.path().join("site.jsonl");
    std::fs::write(
        &patch,
        r#"{"ts":"2026-01-05T09:02:00.000Z","type":"config.change","ops":[{"op":"upsert","kind":"site","id":"site","data":{"heartbeat_period_ms":300000}}]}"#,
    )
    .unwrap();
    let w = whatif(&[
        &scenario("r-launch-6.jsonl"),
        "--patch",
        patch.to_str().unwrap(),
        "--site",
        "reuse_machines_without_shutdown_in_outage_allowed=true",
        "--group",
        "dg-pooled:reuse_machines_without_shutdown_in_outage=true",
    ]);
    assert_eq!(w["better"], 2, "{}", w["verdict"]);
}

/// `--at` places every patch record at one instant: a forced outage on both connectors of
/// zone 1 at 09:05, five minutes before the cloud fails in r-launch-6, enters LHC mode
/// there at once (R-STATE-8): zone 1 spends five minutes more in LHC mode, and the
/// "cloud-pooled" launch at 09:05:00 (brokered by the cloud as it happened) meets LHC
/// rules instead: the pooled group without reuse refuses it.
#[test]
fn a_patch_at_one_instant_forces_the_outage_earlier() {
    let tmp = tempfile::tempdir().unwrap();
    let patch = tmp.path().join("force.jsonl");
    std::fs::write(
        &patch,
        "{\"type\":\"admin.command\",\"connector\":\"cc-a.z1.example\",\"command\":\"enable_forced_outage\"}\n\
         {\"type\":\"admin.command\",\"connector\":\"cc-b.z1.example\",\"command\":\"enable_forced_outage\"}\n",
    )
    .unwrap();
    let log = scenario("r-launch-6.jsonl");
    let patch = patch.to_str().unwrap();
    let w = whatif(&[&log, "--patch", patch, "--at", "2026-01-05T09:04:59Z"]);
    let z1 = zone(&w, "z1");
    assert!(
        z1["after"]["lhc_s"].as_i64().unwrap() > z1["before"]["lhc_s"].as_i64().unwrap(),
        "{z1}"
    );
    let cloud = w["changed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["request"] == "cloud-pooled")
        .unwrap_or_else(|| panic!("{}", w["changed"]));
    assert_eq!(cloud["change"], "worse");
    assert_eq!(cloud["after"]["outcome"], "pooled_unavailable_in_outage");
    // After the log's end, the patch would stretch it: refused, naming the line.
    refused(
        lhc(&[
            "whatif",
            &log,
            "--patch",
            patch,
            "--at",
            "2027-01-01T00:00:00Z",
        ]),
        "force.jsonl line 1: its ts 2027-01-01T00:00:00.000Z is after the log's last record",
    );
}

/// A drop that leaves later records without what they build on makes the log invalid:
/// refused, naming the change and the first record it breaks.
#[test]
fn a_drop_that_breaks_the_log_is_refused() {
    refused(
        lhc(&[
            "whatif",
            &scenario("r-launch-6.jsonl"),
            "--drop",
            "config.change version=1",
        ]),
        "records dropped: config.change version=1: these changes make the log invalid: 323 \
         record(s) of it could no longer be applied, the first at offset 1: field `connector`",
    );
}

/// `--verify`: the "as it happened" side reproduces a chain `lhc replay` wrote; a chain
/// that differs is refused with the offset.
#[test]
fn the_as_it_happened_side_verifies_a_recorded_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let log = scenario("r-launch-6.jsonl");
    let chain = tmp.path().join("chain.jsonl");
    let chain = chain.to_str().unwrap();
    let text = chain_of(&log, 50, chain, &[]);
    let setting = "reuse_machines_without_shutdown_in_outage_allowed=true";
    let w = whatif(&[&log, "--site", setting, "--verify", chain]);
    assert_eq!(w["before"]["verified"]["links"], 11, "{}", w["before"]);
    assert!(w["before"]["verified"].get("first_difference").is_none());
    let whole_log_after_last_link = w["before"]["verified"]["unverified"].as_u64().unwrap();
    // A chain cut short verifies only what it covers, and says so (it claimed the side
    // checked; found by hostile testing).
    let short = tmp.path().join("short.jsonl");
    let two: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(&short, two).unwrap();
    let w = whatif(&[&log, "--site", setting, "--verify", short.to_str().unwrap()]);
    assert_eq!(w["before"]["verified"]["links"], 2);
    assert!(
        w["before"]["verified"]["unverified"].as_u64().unwrap() > whole_log_after_last_link,
        "{}",
        w["before"]
    );
    let (said, _) = ok(lhc(&[
        "whatif",
        &log,
        "-q",
        "--site",
        setting,
        "--verify",
        short.to_str().unwrap(),
    ]));
    assert!(said.contains("record(s) were not verified"), "{said}");
    // One hex digit of the digest after offset 99 changed (still a well-formed digest).
    let at =
        text.find("\"offset\":99,\"digest\":\"").unwrap() + "\"offset\":99,\"digest\":\"".len();
    let digit = if &text[at..=at] == "0" { "1" } else { "0" };
    let bad = format!("{}{digit}{}", &text[..at], &text[at + 1..]);
    assert_ne!(bad, text);
    std::fs::write(chain, bad).unwrap();
    refused(
        lhc(&["whatif", &log, "--site", setting, "--verify", chain]),
        "--verify: the replay does not reproduce the recorded chain: after offset 99",
    );
}

/// R-ELECT-2 with one more connector: cc-0.z1 sorts before cc-a, cc-b and cc-c, answers
/// its peers' probes and sees the same outages as cc-b, so every connector elects it and
/// it alone brokers both episodes. cc-a's stop at 09:19:50 no longer matters: the 81 s
/// without a broker (peers noticing the stop, then cc-a re-entering LHC mode) are gone.
#[test]
fn an_extra_connector_changes_the_election() {
    let log = scenario("outage-3-connectors.jsonl");
    let mut patch = vec![serde_json::json!({
        "ts": "2026-01-05T09:00:00.000Z", "type": "config.change",
        "ops": [{"op": "upsert", "kind": "connector", "id": "cc-0.z1.example",
                 "data": {"zone": "z1"}}]
    })
    .to_string()];
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        // cc-b's last check is the log's last minute: a patch record after the log's
        // last record would be refused.
        if r["type"] != "health.check"
            || r["connector"] != "cc-b.z1.example"
            || r["ts"].as_str() >= Some("2026-01-05T11:19")
        {
            continue;
        }
        // Half a second after cc-b's check: the patch stays in time order.
        let ts = format!("{}.500Z", &r["ts"].as_str().unwrap()[..19]);
        let mut push = |v: Value| patch.push(v.to_string());
        push(serde_json::json!({"ts": ts, "type": "health.check",
            "connector": "cc-0.z1.example", "ok": r["ok"]}));
        push(serde_json::json!({"ts": ts, "type": "storefront.heartbeat",
            "connector": "cc-0.z1.example", "storefront": "sf1.example"}));
        for peer in ["cc-a.z1.example", "cc-b.z1.example", "cc-c.z1.example"] {
            push(serde_json::json!({"ts": ts, "type": "peer.probe",
                "connector": peer, "peer": "cc-0.z1.example", "ok": true}));
            push(serde_json::json!({"ts": ts, "type": "peer.probe",
                "connector": "cc-0.z1.example", "peer": peer, "ok": true}));
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("extra-connector.jsonl");
    std::fs::write(&file, patch.join("\n") + "\n").unwrap();
    let w = whatif(&[&log, "--patch", file.to_str().unwrap()]);
    let z1 = zone(&w, "z1");
    assert_eq!(
        z1["before"]["brokers"],
        serde_json::json!(["cc-a.z1.example", "cc-b.z1.example"])
    );
    assert_eq!(
        z1["after"]["brokers"],
        serde_json::json!(["cc-0.z1.example"])
    );
    assert_eq!(z1["before"]["no_broker_s"], 81);
    assert_eq!(z1["after"]["no_broker_s"], 0);
    assert_eq!(z1["after"]["brokering_s"], z1["after"]["lhc_s"]);
    assert_eq!(z1["before"]["lhc_s"], z1["after"]["lhc_s"]);
    assert_ne!(z1["before"]["elections"], z1["after"]["elections"]);
    assert_eq!(
        w["after"]["records"].as_u64().unwrap(),
        w["before"]["records"].as_u64().unwrap() + patch.len() as u64
    );
}

/// R-STATE-10 / R-ELECT-5: in outage-3-connectors the elected broker cc-a stops at
/// 09:19:50 in LHC mode and starts at 09:25:00. The zone is without a broker 11 s until
/// its peers' probes fail and they elect cc-b, then 59 s after the restart until cc-a is
/// back in LHC mode (its first failed check, 09:26:01): 70 s, plus 11 s in the second
/// episode. Had cc-a not stopped, it brokers on through the first episode (its peers'
/// failed probes, recorded, only make them elect cc-b in their own view): 11 s remain.
#[test]
fn dropping_a_connectors_stop() {
    let log = scenario("outage-3-connectors.jsonl");
    let w = whatif(&[
        &log,
        "--drop",
        "connector.lifecycle connector=cc-a.z1.example event=stop",
    ]);
    let z1 = zone(&w, "z1");
    assert_eq!(z1["before"]["no_broker_s"], 81);
    assert_eq!(z1["after"]["no_broker_s"], 11);
    assert_eq!(z1["before"]["episodes"], z1["after"]["episodes"]);
    assert_eq!(w["after"]["records"], 1748);
    assert!(w["verdict"]
        .as_str()
        .unwrap()
        .contains("time without a broker 81 s → 11 s"));
}

/// SPEC §9 / R-STATE-3: second_check_s is how long after a first failed check a failed
/// check confirms the outage. Checks come once a minute in outage-3-connectors, so at 150 s
/// the outage is confirmed by the fourth failed check instead of the second: each of the
/// two episodes starts two minutes later and lasts 240 s less.
#[test]
fn an_engine_parameter_from_the_start() {
    let w = whatif(&[
        &scenario("outage-3-connectors.jsonl"),
        "--set",
        "second_check_s=150",
    ]);
    let z1 = zone(&w, "z1");
    assert_eq!(z1["before"]["lhc_s"], 4680);
    assert_eq!(z1["after"]["lhc_s"], 4680 - 240);
    assert_eq!(w["changes"][0], "engine parameter second_check_s = 150");
}

/// Invalid changes are refused with the item named, before anything is reported; the
/// source log is never written.
#[test]
fn invalid_changes_are_refused_naming_the_item_and_the_log_is_untouched() {
    let log = scenario("r-launch-6.jsonl");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    ok(lhc(&[
        "log",
        "import",
        &log,
        "--log",
        dir.to_str().unwrap(),
        "-q",
    ]));
    let dir = dir.to_str().unwrap();
    let files = |d: &str| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = files(dir);
    let err = refused(
        lhc(&[
            "whatif",
            dir,
            "--group",
            "dg-pool:reuse_machines_without_shutdown_in_outage=true",
        ]),
        "no delivery group \"dg-pool\"",
    );
    assert!(
        err.contains("dg-pooled") && err.contains("--group dg-pool:"),
        "{err}"
    );
    refused(
        lhc(&["whatif", dir, "--drop", "config.change version=9"]),
        "--drop 'config.change version=9': matched no record",
    );
    refused(
        lhc(&["whatif", dir, "--set", "second_check=30"]),
        "unknown parameter; one of: second_check_s",
    );
    refused(
        lhc(&["whatif", dir, "--site", "reuse=true"]),
        "--site reuse=true: unknown field `reuse`",
    );
    refused(lhc(&["whatif", dir]), "no change given");
    let patch = tmp.path().join("p.jsonl");
    std::fs::write(
        &patch,
        "{\"ts\":\"2026-01-05T09:10:00Z\",\"type\":\"clock.tick\"}\n\
         {\"ts\":\"2026-01-05T09:05:00Z\",\"type\":\"clock.tick\"}\n",
    )
    .unwrap();
    refused(
        lhc(&["whatif", dir, "--patch", patch.to_str().unwrap()]),
        "p.jsonl line 2: its ts 2026-01-05T09:05:00.000Z is older than line 1's",
    );
    std::fs::write(
        &patch,
        "{\"ts\":\"2026-01-05T09:10:00Z\",\"type\":\"connector.lifecycle\",\
         \"connector\":\"cc-x.z1.example\",\"event\":\"stop\"}\n",
    )
    .unwrap();
    refused(
        lhc(&["whatif", dir, "--patch", patch.to_str().unwrap()]),
        "p.jsonl line 1: the engine cannot apply it here: field `connector`: unknown connector",
    );
    // A valid what-if on the embedded log: JSON, HTML, and the log unchanged.
    let html = tmp.path().join("w.html");
    let (out, _) = ok(lhc(&[
        "whatif",
        dir,
        "-q",
        "--site",
        "reuse_machines_without_shutdown_in_outage_allowed=true",
        "--out",
        html.to_str().unwrap(),
    ]));
    assert!(
        out.contains("lhc-reuse-group-only") && out.contains("better"),
        "{out}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("lhc-reuse-group-only") && page.contains("Sessions after a changed decision")
    );
    assert!(!page.contains("<script") && !page.contains("http://") && !page.contains("https://"));
    assert_eq!(files(dir), before, "the source log was written");
    let setting = "reuse_machines_without_shutdown_in_outage_allowed=true";
    let (embedded, file) = (
        whatif(&[dir, "--site", setting]),
        whatif(&[&log, "--site", setting]),
    );
    for key in ["changed", "zones", "before", "after", "verdict"] {
        assert_eq!(embedded[key], file[key], "{key}");
    }
}

/// The same what-if from a Kafka partition (librdkafka's mock cluster) as from the file.
#[test]
fn whatif_reads_a_site_from_kafka() {
    let cluster = lhc_log::MockKafka::new(1).unwrap();
    cluster.create_topic("lhc.events", 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let log = scenario("r-launch-6.jsonl");
    ok(lhc(&[
        "log", "import", &log, "--kafka", &brokers, "--site", "site-a", "-q",
    ]));
    let setting = "reuse_machines_without_shutdown_in_outage_allowed=true";
    let from_kafka = whatif(&["--kafka", &brokers, "--site", "site-a", "--site", setting]);
    let from_file = whatif(&[&log, "--site", setting]);
    assert_eq!(from_kafka["changed"], from_file["changed"]);
    assert_eq!(
        from_kafka["before"]["digest"],
        from_file["before"]["digest"]
    );
    assert_eq!(from_kafka["after"]["digest"], from_file["after"]["digest"]);
}

/// Keeping a connector off that was powered on during the outage (its start and its peers'
/// probes of it dropped): the requests StoreFront sent to it are refused
/// `connector_stopped`, which the report notes; the zone gets its broker back, so first
/// attempts it refused `not_elected` are brokered, and the StoreFront retries that followed
/// them become moot — each moot request is a retry whose launch is brokered earlier.
#[test]
fn retries_after_a_now_brokered_attempt_are_moot() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("stop.jsonl");
    let log = log.to_str().unwrap();
    simulate(
        log,
        2026,
        200,
        400,
        2,
        &[
            "--connectors-per-zone",
            "3",
            "--stop",
            "z2c1@10m+40m",
            "--outage",
            "30m+40m",
        ],
    );
    let name = "cc1.z2.sim.example";
    let w = whatif(&[
        log,
        "--drop",
        &format!("connector.lifecycle connector={name} event=start"),
        "--drop",
        &format!("peer.probe peer={name}"),
    ]);
    let notes = w["notes"].to_string();
    assert!(
        notes.contains("reached a connector the what-if keeps stopped"),
        "{notes}"
    );
    let mut retry_of = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        if let (Some(id), Some(root)) = (r["request"].as_str(), r["retry_of"].as_str()) {
            retry_of.insert(id.to_string(), root.to_string());
        }
    }
    let changed = w["changed"].as_array().unwrap();
    let brokered_after: std::collections::BTreeSet<&str> = changed
        .iter()
        .filter(|c| c["after"]["outcome"] == "brokered")
        .map(|c| c["request"].as_str().unwrap())
        .collect();
    let moot: Vec<&Value> = changed.iter().filter(|c| c["change"] == "moot").collect();
    assert!(!moot.is_empty(), "no moot retry in {}", w["verdict"]);
    for m in moot {
        let request = m["request"].as_str().unwrap();
        let root = &retry_of[request];
        let earlier = changed.iter().any(|c| {
            let id = c["request"].as_str().unwrap();
            id != request
                && brokered_after.contains(id)
                && (id == root || retry_of.get(id) == Some(root))
                && c["ts"].as_str() <= m["ts"].as_str()
        });
        assert!(
            earlier,
            "{request} (launch {root}) is moot without an earlier brokered attempt"
        );
    }
    let better = w["better"].as_u64().unwrap();
    assert!(
        better > 0 && w["rescued"].as_u64().unwrap() > 0,
        "{}",
        w["verdict"]
    );
    // Moot retries count in neither better nor worse.
    let kind = |k: &str| changed.iter().filter(|c| c["change"] == k).count() as u64;
    assert_eq!(
        (better, w["worse"].as_u64().unwrap()),
        (kind("better"), kind("worse"))
    );
    assert_eq!(
        w["other"].as_u64().unwrap(),
        changed.len() as u64 - kind("better") - kind("worse")
    );
    assert!(w["verdict"]
        .as_str()
        .unwrap()
        .contains("reached a connector the what-if keeps stopped"));
}

/// What a careless or hostile user tried: a hard link to the log as --out, a pipe read
/// twice, a setting given twice, a full stdout, a request id the log holds twice. Each is
/// refused with exit 2 and a message, or counted right; the log is never written.
#[test]
fn careless_inputs_are_refused_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("o.jsonl");
    std::fs::copy(scenario("r-launch-6.jsonl"), &log).unwrap();
    let link = tmp.path().join("link.html");
    std::fs::hard_link(&log, &link).unwrap();
    let before = std::fs::read(&log).unwrap();
    let log_s = log.to_str().unwrap();
    refused(
        lhc(&[
            "whatif",
            log_s,
            "--set",
            "second_check_s=5",
            "--out",
            link.to_str().unwrap(),
        ]),
        "is a link to",
    );
    assert_eq!(std::fs::read(&log).unwrap(), before);
    refused(
        lhc(&[
            "whatif",
            log_s,
            "--set",
            "second_check_s=5",
            "--set",
            "second_check_s=6",
        ]),
        "second_check_s is set twice",
    );
    refused(
        lhc(&["whatif", "/dev/stdin", "--without-bad-changes"]),
        "reads /dev/stdin twice",
    );
    let full = std::fs::File::create("/dev/full").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["whatif", log_s, "--set", "second_check_s=5"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("writing the what-if to stdout"));
    // The log's launch requests patched in again at their own times: every request id is
    // then decided twice, and every attempt is counted ("id#2"), none merged.
    let twice = tmp.path().join("twice.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let launches: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("\"launch.request\""))
        .collect();
    std::fs::write(&twice, launches.join("\n") + "\n").unwrap();
    let w = whatif(&[log_s, "--patch", twice.to_str().unwrap()]);
    assert_eq!(w["before"]["attempts"], 3);
    assert_eq!(w["after"]["attempts"], 6, "{}", w["after"]);
    let added: Vec<&str> = w["changed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["change"] == "added")
        .map(|c| c["request"].as_str().unwrap())
        .collect();
    assert_eq!(
        added,
        ["cloud-pooled#2", "lhc-pooled#2", "lhc-reuse-group-only#2"]
    );
}

/// `--set` with a patch record older than the log's first record: the parameters record
/// goes first, at the earliest time, so neither is refused for going back in time.
#[test]
fn parameters_go_before_a_patch_older_than_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let patch = tmp.path().join("early.jsonl");
    std::fs::write(
        &patch,
        r#"{"ts":"2026-01-05T08:00:00Z","type":"clock.tick"}"#.to_string() + "\n",
    )
    .unwrap();
    let w = whatif(&[
        &scenario("outage-3-connectors.jsonl"),
        "--set",
        "second_check_s=150",
        "--patch",
        patch.to_str().unwrap(),
    ]);
    assert_eq!(zone(&w, "z1")["after"]["lhc_s"], 4680 - 240);
    assert_eq!(w["after"]["quarantined"], 0);
}

/// `--out` naming a symbolic link or a device writes into it: renaming the page over it
/// replaced the link itself, and, as root, turned `/dev/full` into a regular file (a
/// hostile test found it). A device that refuses the page is an error, exit 2.
#[test]
fn out_through_a_link_or_onto_a_device_writes_into_it() {
    use std::os::unix::fs::FileTypeExt;
    let tmp = tempfile::tempdir().unwrap();
    let log = scenario("r-launch-6.jsonl");
    let target = tmp.path().join("page.html");
    std::fs::write(&target, "old").unwrap();
    let link = tmp.path().join("link.html");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let whatif_to = |out: &str| {
        lhc(&[
            "whatif",
            &log,
            "-q",
            "--set",
            "second_check_s=5",
            "--out",
            out,
        ])
    };
    ok(whatif_to(link.to_str().unwrap()));
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    let page = std::fs::read_to_string(&target).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{page:.80}");
    if std::fs::metadata("/dev/full").is_ok_and(|m| m.file_type().is_char_device()) {
        let full = tmp.path().join("full");
        std::os::unix::fs::symlink("/dev/full", &full).unwrap();
        for out in [full.to_str().unwrap(), "/dev/full"] {
            refused(whatif_to(out), "No space left on device");
            let kind = std::fs::metadata("/dev/full").unwrap().file_type();
            assert!(kind.is_char_device(), "/dev/full was replaced");
        }
    }
}

/// A patch record dated long after the log's end, on a log that ends with a zone in LHC
/// mode: refused before the timers of the gap run (they would make a 3507/3509 report
/// per connector every report interval up to the year 9999, about half an hour of CPU).
/// The run gets 20 seconds of CPU; refusing takes a fraction of one.
#[test]
fn a_patch_far_past_the_end_is_refused_without_replaying_the_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let patch = tmp.path().join("far.jsonl");
    std::fs::write(
        &patch,
        "{\"ts\":\"9999-01-01T00:00:00.000Z\",\"type\":\"clock.tick\"}\n",
    )
    .unwrap();
    let log = scenario("r-elect-4-split-brain-launches.jsonl");
    let out = lhc_limited(
        "-t 20",
        &["whatif", "-q", &log, "--patch", patch.to_str().unwrap()],
    );
    refused(
        out,
        "far.jsonl line 1: its ts 9999-01-01T00:00:00.000Z is after the log's last record",
    );
}
