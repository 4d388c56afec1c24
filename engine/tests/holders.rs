//! A connector named "cloud" is not the cloud broker (issue 19: a typed registrar instead
//! of sentinel strings). Renaming a site's connectors — the first in FQDN order to "cloud",
//! the others to names that keep the FQDN order — changes nothing but the names in the
//! outputs, in scenarios where the renamed connector brokers in LHC mode.

use std::path::PathBuf;

use lhc_engine::{decode_record_at, Engine};

fn scenario(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios")
        .join(format!("{name}.jsonl"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every connector id the log's configuration names, in FQDN order.
fn connector_ids(log: &str) -> Vec<String> {
    let mut ids = std::collections::BTreeSet::new();
    for line in log.lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        for op in record["ops"].as_array().into_iter().flatten() {
            if op["kind"] == "connector" {
                ids.insert(op["id"].as_str().unwrap().to_string());
            }
        }
    }
    let mut ids: Vec<String> = ids.into_iter().collect();
    ids.sort_by_key(|id| id.to_lowercase());
    ids
}

/// The outputs of a log, one JSON line each.
fn run(log: &str) -> Vec<String> {
    let mut engine = Engine::new();
    let mut lines = Vec::new();
    for (i, line) in log.lines().enumerate() {
        let mut out = Vec::new();
        engine.apply(
            i as u64,
            decode_record_at(line.as_bytes(), i as u64),
            &mut out,
        );
        engine.check_invariants().unwrap();
        lines.extend(out.iter().map(|o| serde_json::to_string(o).unwrap()));
    }
    lines
}

fn rename(text: &str, map: &[(String, String)]) -> String {
    let mut text = text.to_string();
    for (from, to) in map {
        text = text.replace(from.as_str(), to);
    }
    text
}

#[test]
fn a_connector_named_cloud_decides_as_under_any_other_name() {
    for name in [
        "r-launch-2",
        "r-launch-3",
        "r-launch-6",
        "r-reg-2",
        "r-reg-3",
        "r-elect-4-split-brain-launches",
        "r-state-10-restart-elected",
        "outage-3-connectors",
    ] {
        let log = scenario(name);
        let ids = connector_ids(&log);
        assert!(!ids.is_empty(), "{name}");
        // Longest ids first, so that no id is replaced inside another.
        let mut map: Vec<(String, String)> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let new = if i == 0 {
                    "cloud".to_string()
                } else {
                    format!("cloud-{i:02}.example")
                };
                (id.clone(), new)
            })
            .collect();
        map.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let expected: Vec<String> = run(&log).iter().map(|l| rename(l, &map)).collect();
        let renamed = run(&rename(&log, &map));
        let lhc_by_cloud = renamed.iter().any(|l| {
            l.contains(r#""connector":"cloud","outcome""#) && l.contains(r#""via":"lhc""#)
        });
        if let Some(i) =
            (0..expected.len().max(renamed.len())).find(|&i| expected.get(i) != renamed.get(i))
        {
            panic!(
                "{name}: output {i} differs once the first connector is named \"cloud\":\n  expected {:?}\n  got      {:?}",
                expected.get(i),
                renamed.get(i)
            );
        }
        if name == "r-launch-2" {
            assert!(
                lhc_by_cloud,
                "the connector named cloud brokers in LHC mode"
            );
        }
    }
}
