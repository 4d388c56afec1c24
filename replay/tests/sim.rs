//! The simulator: same seed and options → identical bytes; another seed → another log;
//! every record valid and applicable (no quarantine); scenarios do what they say, checked
//! through the engine against the spec's requirement IDs.

use lhc_engine::{decode_record_at, Engine, Output};
use lhc_replay::{BadConfig, Scenario, SimOptions, Simulator};

fn small(seed: u64, scenarios: Vec<Scenario>) -> SimOptions {
    SimOptions {
        seed,
        zones: 2,
        connectors_per_zone: 3,
        vdas_per_zone: 200,
        users: 400,
        hours: 2.0,
        logon_rate: 0.5,
        scenarios,
        ..SimOptions::default()
    }
}

fn generate(options: SimOptions) -> Vec<Vec<u8>> {
    let mut records = Vec::new();
    Simulator::new(options)
        .unwrap()
        .run(
            &mut |bytes| {
                records.push(bytes.to_vec());
                Ok(())
            },
            &mut |_| {},
        )
        .unwrap();
    records
}

fn replay(records: &[Vec<u8>]) -> Vec<(u64, Output)> {
    let mut engine = Engine::new();
    let mut all = Vec::new();
    for (offset, bytes) in records.iter().enumerate() {
        let mut out = Vec::new();
        let offset = offset as u64;
        engine.apply(offset, decode_record_at(bytes, offset), &mut out);
        all.extend(out.into_iter().map(|o| (offset, o)));
    }
    all
}

#[test]
fn same_seed_same_bytes_other_seed_other_log() {
    let a = generate(small(42, vec![]));
    let b = generate(small(42, vec![]));
    assert_eq!(a, b, "same seed, same options: identical bytes");
    let c = generate(small(43, vec![]));
    assert_ne!(a, c, "another seed gives another log");
    assert!(a.len() > 10_000, "{} records", a.len());
}

#[test]
fn a_simulated_log_is_valid_in_order_and_never_quarantined() {
    let records = generate(small(1, vec![]));
    let outputs = replay(&records);
    let quarantined: Vec<_> = outputs
        .iter()
        .filter(|(_, o)| matches!(o, Output::Quarantine(_)))
        .collect();
    assert!(
        quarantined.is_empty(),
        "{:?}",
        &quarantined[..quarantined.len().min(3)]
    );
    let launches = outputs
        .iter()
        .filter(|(_, o)| matches!(o, Output::LaunchDecision(d) if d.outcome == lhc_engine::output::Outcome::Brokered))
        .count();
    assert!(
        launches > 1_000,
        "{launches} brokered launches in 2 h at 0.5/s"
    );
}

/// R-STATE-1/3/5, R-ELECT-2: a cloud outage puts every connector in LHC mode, the first
/// of each zone brokers (3502), and launches go through LHC during it.
#[test]
fn an_outage_scenario_enters_lhc_mode_and_brokers_there() {
    let records = generate(small(
        5,
        vec![Scenario::CloudOutage {
            start_s: 1800,
            duration_s: 2400,
        }],
    ));
    let outputs = replay(&records);
    let entered: Vec<&str> = outputs
        .iter()
        .filter_map(|(_, o)| match o {
            Output::Event(e)
                if e.event_id == 3003
                    && serde_json::to_value(&e.data).unwrap()["to"] == "initial_ha" =>
            {
                Some(e.connector.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        entered.len(),
        6,
        "every connector entered LHC mode: {entered:?}"
    );
    let brokering: Vec<&str> = outputs
        .iter()
        .filter_map(|(_, o)| match o {
            Output::Event(e) if e.event_id == 3502 => Some(e.connector.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(brokering, vec!["cc1.z1.sim.example", "cc1.z2.sim.example"]);
    assert!(outputs.iter().any(|(_, o)| matches!(o,
        Output::LaunchDecision(d) if d.via == lhc_engine::output::Via::Lhc
            && d.outcome == lhc_engine::output::Outcome::Brokered)));
}

/// R-CSS-4: a dangling reference fails the import (505) naming the object, the rule and
/// the offset of the config.change that introduced it.
#[test]
fn a_bad_config_scenario_fails_imports_naming_the_object() {
    let records = generate(small(
        9,
        vec![Scenario::BadConfig {
            at_s: 600,
            kind: BadConfig::DanglingReference,
        }],
    ));
    let bad_offset = records
        .iter()
        .position(|r| {
            let v: serde_json::Value = serde_json::from_slice(r).unwrap();
            v["type"] == "config.change" && v["version"] == 2
        })
        .expect("the bad change is in the log") as u64;
    let outputs = replay(&records);
    let failure = outputs
        .iter()
        .find_map(|(_, o)| match o {
            Output::Event(e) if e.event_id == 505 => Some(serde_json::to_value(&e.data).unwrap()),
            _ => None,
        })
        .expect("a 505");
    let f = &failure["failures"][0];
    assert_eq!(f["kind"], "machine");
    assert_eq!(f["rule"], "dangling_reference");
    assert_eq!(f["introduced_by"]["offset"], bad_offset);
    assert_eq!(f["introduced_by"]["version"], 2);
    assert_eq!(failure["fallback_version"], 1);
}

/// Duplicate names and orphaned accounts fail imports too.
#[test]
fn duplicate_names_and_orphaned_accounts_fail_imports() {
    for (kind, rule) in [
        (BadConfig::DuplicateName, "duplicate_id"),
        (BadConfig::OrphanedAccount, "dangling_reference"),
    ] {
        let outputs = replay(&generate(small(
            11,
            vec![Scenario::BadConfig { at_s: 600, kind }],
        )));
        let rules: Vec<String> = outputs
            .iter()
            .filter_map(|(_, o)| match o {
                Output::Event(e) if e.event_id == 505 => {
                    let data = serde_json::to_value(&e.data).unwrap();
                    Some(data["failures"][0]["rule"].as_str().unwrap().to_string())
                }
                _ => None,
            })
            .collect();
        assert!(rules.iter().any(|r| r == rule), "{kind:?}: {rules:?}");
    }
}
