//! The read-only view the drivers ask (`lhc_engine::view`): the ADC probe, the resource
//! source, the election summary, a crashed peer, a lost `ts` race. Checked against what the
//! engine's outputs say happened, record by record, on the bundled example outage.

use lhc_engine::output::{ConnectorState, Output};
use lhc_engine::view::{ProbeDown, ResourceSource};
use lhc_engine::{decode_record_at, Engine, Ts};

fn example() -> Vec<String> {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/site-outage.jsonl"
    ))
    .unwrap()
    .lines()
    .map(str::to_string)
    .collect()
}

const CONNECTORS: [&str; 2] = ["ddc1.corp.example", "ddc2.corp.example"];

#[test]
fn the_probe_and_the_resource_source_follow_the_outage() {
    let mut engine = Engine::new();
    // Per connector: in LHC mode (3003 into an LHC state) and brokering (3502 / 3504).
    let mut in_lhc = [false; 2];
    let mut stopped = [false; 2];
    let mut seen = (false, false, false); // UP, NotElected, Lhc source
    for (i, line) in example().iter().enumerate() {
        let mut out = Vec::new();
        engine.apply(
            i as u64,
            decode_record_at(line.as_bytes(), i as u64),
            &mut out,
        );
        for o in &out {
            if let Output::Event(e) = o {
                let k = CONNECTORS.iter().position(|c| *c == e.connector).unwrap();
                if let lhc_engine::output::EventData::Transition(t) = &e.data {
                    in_lhc[k] = matches!(
                        t.to,
                        ConnectorState::InitialHa
                            | ConnectorState::ExtendedHa
                            | ConnectorState::PendingRecovery
                    );
                    stopped[k] = t.to == ConnectorState::Stopped;
                }
            }
        }
        for (k, name) in CONNECTORS.iter().enumerate() {
            let Some(probe) = engine.adc_probe(name) else {
                continue; // not configured yet
            };
            let election = engine.election_view(name).unwrap();
            assert_eq!(election.in_lhc, in_lhc[k], "offset {i}");
            let expected = if stopped[k] {
                Some(ProbeDown::ConnectorStopped)
            } else if in_lhc[k] && !election.brokering {
                Some(ProbeDown::NotElected)
            } else {
                None
            };
            assert_eq!(probe.down, expected, "{name} at offset {i}");
            assert_eq!(probe.elected, election.elected);
            let (source, _) = engine.resources(name, "alice").unwrap();
            let want = if in_lhc[k] {
                ResourceSource::Lhc
            } else {
                ResourceSource::Cloud
            };
            assert_eq!(source, want, "{name} at offset {i}");
            seen.0 |= probe.down.is_none();
            seen.1 |= probe.down == Some(ProbeDown::NotElected);
            seen.2 |= source == ResourceSource::Lhc;
        }
    }
    assert_eq!(
        seen,
        (true, true, true),
        "the example shows UP, not elected and LHC"
    );
    assert!(engine.adc_probe("nobody.corp.example").is_none());
    assert!(engine.resources("nobody.corp.example", "alice").is_none());
}

#[test]
fn a_started_peer_silent_for_the_bound_is_presumed_dead_and_a_stopped_one_never() {
    let mut engine = Engine::new();
    for (i, line) in example().iter().enumerate() {
        engine.apply(
            i as u64,
            decode_record_at(line.as_bytes(), i as u64),
            &mut Vec::new(),
        );
    }
    let name = CONNECTORS[0];
    let c = &engine.connectors()[name];
    assert!(c.started());
    let heard = c.last_check().map(|(t, _)| t).unwrap().max(c.state_since());
    let after = std::time::Duration::from_secs(180);
    let at = |ms: i64| Ts(heard.millis() + ms);
    // Unanswered since it was last heard of: dead once both have lasted the bound.
    let unreachable = Some(heard);
    assert!(!engine.peer_presumed_dead(name, at(179_999), unreachable, after));
    assert!(engine.peer_presumed_dead(name, at(180_000), unreachable, after));
    // Silent in the log, but its probes answer (or only began failing): alive.
    assert!(!engine.peer_presumed_dead(name, at(900_000), None, after));
    assert!(!engine.peer_presumed_dead(name, at(900_000), Some(at(720_001)), after));
    assert!(engine.peer_presumed_dead(name, at(900_000), Some(at(720_000)), after));
    // Unanswered for long, but its health checks still reach the log: a partition.
    assert!(!engine.peer_presumed_dead(name, at(179_999), Some(Ts(0)), after));
    assert!(!engine.peer_presumed_dead("nobody.corp.example", Ts(i64::MAX), Some(Ts(0)), after));
    // Stopped: its stop is recorded, nothing to presume.
    let ts = engine.now().unwrap();
    let stop = format!(
        r#"{{"ts":"{ts}","type":"connector.lifecycle","connector":"{name}","event":"stop"}}"#
    );
    engine.apply(
        9_999,
        decode_record_at(stop.as_bytes(), 9_999),
        &mut Vec::new(),
    );
    assert!(!engine.connectors()[name].started());
    assert!(!engine.peer_presumed_dead(name, Ts(i64::MAX), Some(Ts(0)), after));
    // Its node, running again, must say so before observing anything.
    assert!(engine.needs_start_record(name));
    assert!(!engine.needs_start_record(CONNECTORS[1]));
    assert!(!engine.needs_start_record("nobody.corp.example"));
}

#[test]
fn only_a_record_older_than_the_last_is_a_lost_ts_race() {
    let mut engine = Engine::new();
    let lines = example();
    for (i, line) in lines.iter().enumerate() {
        engine.apply(
            i as u64,
            decode_record_at(line.as_bytes(), i as u64),
            &mut Vec::new(),
        );
    }
    let quarantine = |engine: &mut Engine, line: &str| {
        let mut out = Vec::new();
        engine.apply(10_000, decode_record_at(line.as_bytes(), 10_000), &mut out);
        match out.as_slice() {
            [Output::Quarantine(q)] => q.clone(),
            other => panic!("expected one quarantine, got {other:?}"),
        }
    };
    // The first record again: older than the last one applied, refused for its ts.
    let first = lhc_engine::decode_record(lines[1].as_bytes()).unwrap();
    assert!(engine.lost_ts_race(first.ts()));
    let old = quarantine(&mut engine, &lines[1]);
    assert!(old.error.starts_with("field `ts`"), "{}", old.error);
    // At the last record's time: not a race, whatever else is wrong with it.
    let ts = engine.now().unwrap();
    assert!(!engine.lost_ts_race(ts));
    let unknown = format!(
        r#"{{"ts":"{ts}","type":"health.check","connector":"nobody.corp.example","ok":true}}"#
    );
    let other = quarantine(&mut engine, &unknown);
    assert!(other.error.contains("unknown connector"), "{}", other.error);
    assert!(
        !Engine::new().lost_ts_race(ts),
        "an empty engine refuses no time"
    );
}
