//! A record long after the previous one while a zone is in LHC mode: the timers due before
//! it make one 3507/3509 report per connector every report interval (R-STATE-9), hundreds of
//! thousands a year. `Engine::apply_in_steps` hands them over in bounded steps, with the
//! same outputs in the same order and the same state as `Engine::apply`.

use lhc_engine::{decode_record_at, Engine, Output, CATCH_UP_STEP};

/// The split-brain scenario (a zone in LHC mode to its end), then a record `days` later.
fn log_with_gap(days: u32) -> Vec<String> {
    let scenario = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/scenarios/r-elect-4-split-brain-launches.jsonl"
    ))
    .unwrap();
    let mut lines: Vec<String> = scenario.lines().map(str::to_string).collect();
    // The scenario ends on 2026-01-05.
    let later = format!(
        r#"{{"ts":"2026-{:02}-{:02}T09:00:00.000Z","type":"clock.tick"}}"#,
        1 + (4 + days) / 31,
        1 + (4 + days) % 31
    );
    lines.push(later);
    lines
}

fn apply_all(lines: &[String]) -> (Vec<(u64, Output)>, String) {
    let mut engine = Engine::new();
    let all = apply_to(&mut engine, lines);
    (all, engine.digest())
}

/// Applies `lines` one record at a time to `engine`: every output with its offset.
fn apply_to(engine: &mut Engine, lines: &[String]) -> Vec<(u64, Output)> {
    let mut all = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let mut out = Vec::new();
        engine.apply(
            i as u64,
            decode_record_at(line.as_bytes(), i as u64),
            &mut out,
        );
        all.extend(out.into_iter().map(|o| (i as u64, o)));
    }
    all
}

/// Applies `lines` with `apply_in_steps` in steps of `step`, showing each step's outputs
/// (and the engine part-way) to `seen` before keeping them; every output with its offset,
/// and the final digest.
fn apply_stepped(
    lines: &[String],
    step: usize,
    mut seen: impl FnMut(&Engine, &[Output]),
) -> (Vec<(u64, Output)>, String) {
    let mut engine = Engine::new();
    let mut all = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let offset = i as u64;
        let mut out = Vec::new();
        engine
            .apply_in_steps(
                offset,
                decode_record_at(line.as_bytes(), offset),
                &mut out,
                step,
                |during: &Engine, out: &mut Vec<Output>| {
                    seen(during, out);
                    all.extend(out.drain(..).map(|o| (offset, o)));
                    Ok::<(), ()>(())
                },
            )
            .unwrap();
        all.extend(out.into_iter().map(|o| (offset, o)));
    }
    (all, engine.digest())
}

#[test]
fn a_long_gap_is_applied_in_bounded_steps_with_the_same_outputs() {
    let lines = log_with_gap(40);
    let (whole, digest) = apply_all(&lines);
    let reports = whole
        .iter()
        .filter(|(_, o)| matches!(o, Output::Event(e) if e.event_id == 3507))
        .count();
    assert!(
        reports > 5 * CATCH_UP_STEP,
        "the gap makes many steps' worth of reports ({reports})"
    );

    for step in [1, 7, CATCH_UP_STEP] {
        let mut flushes = 0;
        let (stepped, stepped_digest) = apply_stepped(&lines, step, |during, out| {
            flushes += 1;
            // Bounded: a timer adds at most a few outputs past the step.
            assert!(out.len() < step + 8, "{} outputs in one step", out.len());
            // The engine is part-way: at the last timer's time, before the record.
            let last = out.iter().rev().find_map(|o| match o {
                Output::Event(e) => Some(e.ts),
                _ => None,
            });
            assert_eq!(during.now(), last);
        });
        assert!(
            flushes >= whole.len() / step / 2,
            "step {step}: {flushes} flushes"
        );
        assert_eq!(stepped.len(), whole.len(), "step {step}");
        assert!(
            stepped == whole,
            "step {step}: the same outputs in the same order"
        );
        assert_eq!(stepped_digest, digest, "step {step}: the same state");
    }
}

/// `admit` changes nothing for a record it admits, which `apply_admitted` then applies as
/// `apply` would; a refused record gets the output `apply` gives it.
#[test]
fn admit_then_apply_admitted_is_apply() {
    let lines = log_with_gap(2);
    let (whole, digest) = apply_all(&lines);
    let mut engine = Engine::new();
    let mut outputs = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let offset = i as u64;
        let before = engine.digest();
        match engine.admit(offset, decode_record_at(line.as_bytes(), offset)) {
            Ok(admitted) => {
                assert_eq!(engine.digest(), before, "admitting changes nothing");
                let mut out = Vec::new();
                engine.apply_admitted(admitted, &mut out);
                outputs.extend(out.into_iter().map(|o| (offset, o)));
            }
            Err(quarantined) => outputs.push((offset, quarantined)),
        }
    }
    assert!(outputs == whole);
    assert_eq!(engine.digest(), digest);
}

/// The first record with an id is the one that counts: quarantined for its own fault (an
/// old `ts`, an unknown connector), its id is claimed all the same, and a later copy is a
/// duplicate, whether records are applied whole or in steps.
#[test]
fn a_refused_record_claims_its_id() {
    let config = log_with_gap(0).remove(0);
    let lines = [
        config.as_str(),
        r#"{"ts":"2026-01-05T09:00:10.000Z","type":"health.check","connector":"cc-a.z1.example","ok":true,"record_id":"p@1:1.0"}"#,
        r#"{"ts":"2026-01-05T09:00:05.000Z","type":"health.check","connector":"cc-a.z1.example","ok":false,"record_id":"p@1:1.1"}"#,
        r#"{"ts":"2026-01-05T09:00:20.000Z","type":"health.check","connector":"cc-a.z1.example","ok":false,"record_id":"p@1:1.1"}"#,
        r#"{"ts":"2026-01-05T09:00:30.000Z","type":"health.check","connector":"cc-x.z1.example","ok":false,"record_id":"p@1:1.2"}"#,
        r#"{"ts":"2026-01-05T09:00:40.000Z","type":"health.check","connector":"cc-a.z1.example","ok":false,"record_id":"p@1:1.2"}"#,
    ];
    let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let (whole, digest) = apply_all(&lines);
    let quarantines: Vec<(u64, &str)> = whole
        .iter()
        .filter_map(|(offset, o)| match o {
            Output::Quarantine(q) => Some((*offset, q.error.as_str())),
            _ => None,
        })
        .collect();
    let fields: Vec<(u64, &str)> = quarantines
        .iter()
        .map(|(offset, error)| (*offset, error.split(':').next().unwrap()))
        .collect();
    assert_eq!(
        fields,
        [
            (2, "field `ts`"),
            (3, "field `record_id`"),
            (4, "field `connector`"),
            (5, "field `record_id`"),
        ],
        "{quarantines:?}"
    );
    let (stepped, stepped_digest) = apply_stepped(&lines, 1, |_, _| {});
    assert!(stepped == whole);
    assert_eq!(stepped_digest, digest);
}

/// Applies `lines` (offsets from 0), firing timers one by one if asked: every output as a
/// JSON line with its record's index, the final digest and clock.
fn apply_timers(
    lines: &[String],
    one_by_one: bool,
) -> (Vec<(usize, String)>, String, Option<lhc_engine::Ts>) {
    let mut engine = Engine::new();
    if one_by_one {
        engine.fire_timers_one_by_one();
    }
    let all = apply_to(&mut engine, lines)
        .into_iter()
        .map(|(i, o)| (i as usize, serde_json::to_string(&o).unwrap()))
        .collect();
    (all, engine.digest(), engine.now())
}

/// A record decades later outside LHC mode (a mistyped or hostile `ts`): its sync checks
/// that find nothing are fired in one step, with the outputs and the state that firing
/// them one by one gives (millions of checks; before, a record in the year 9999 held a
/// replay for minutes).
#[test]
fn a_record_decades_later_gives_what_timers_one_by_one_give() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/site-outage.jsonl"
    ))
    .unwrap();
    let mut lines: Vec<String> = example.lines().map(str::to_string).collect();
    lines.push(r#"{"ts":"2046-01-05T10:00:00.000Z","type":"clock.tick"}"#.to_string());
    lines.push(r#"{"ts":"2046-01-05T10:00:01.000Z","type":"clock.tick"}"#.to_string());
    assert_eq!(apply_timers(&lines, false), apply_timers(&lines, true));
}

/// The shortcut's other condition: a connector whose view of the election a record changed
/// without recomputing it (a peer re-cased by a config change) is not idle at its next
/// check, which recomputes the view (3504) at its own instant, not at the next timer's.
#[test]
fn a_check_that_settles_a_view_is_fired_in_its_place() {
    let t = |s: i64| lhc_engine::Ts(1_767_603_600_000 + s * 1000).to_string();
    let connector = |id: &str| {
        format!(r#"{{"op":"upsert","kind":"connector","id":"{id}","data":{{"zone":"z1"}}}}"#)
    };
    let lines = vec![
        format!(
            r#"{{"ts":"{}","type":"engine.params","sync_interval_s":60,"peer_timeout_s":3600}}"#,
            t(0)
        ),
        format!(
            r#"{{"ts":"{}","type":"config.change","version":1,"ops":[{{"op":"upsert","kind":"site","id":"site"}},{{"op":"upsert","kind":"zone","id":"z1","data":{{"name":"one"}}}},{},{},{{"op":"upsert","kind":"delivery_group","id":"g","data":{{"kind":"multi_session"}}}},{{"op":"upsert","kind":"machine","id":"vda-1.z1.example","data":{{"zone":"z1","delivery_group":"g"}}}}]}}"#,
            t(0),
            connector("cc-a.z1.example"),
            connector("cc-b.z1.example")
        ),
        format!(
            r#"{{"ts":"{}","type":"health.check","connector":"cc-a.z1.example","ok":true}}"#,
            t(1)
        ),
        format!(
            r#"{{"ts":"{}","type":"health.check","connector":"cc-b.z1.example","ok":true}}"#,
            t(2)
        ),
        format!(r#"{{"ts":"{}","type":"clock.tick"}}"#, t(300)),
        format!(
            r#"{{"ts":"{}","type":"peer.probe","connector":"cc-b.z1.example","peer":"cc-a.z1.example","ok":true}}"#,
            t(301)
        ),
        format!(
            r#"{{"ts":"{}","type":"service.status","connector":"cc-b.z1.example","service":"config_sync","running":false}}"#,
            t(360)
        ),
        format!(
            r#"{{"ts":"{}","type":"config.change","version":2,"ops":[{{"op":"delete","kind":"connector","id":"cc-a.z1.example"}},{}]}}"#,
            t(420),
            connector("CC-A.z1.example")
        ),
        format!(r#"{{"ts":"{}","type":"clock.tick"}}"#, t(2 * 86_400)),
    ];
    let slow = apply_timers(&lines, true);
    for (i, o) in &slow.0 {
        assert!(
            !o.starts_with(r#"{"type":"quarantine""#),
            "{}: {o}",
            lines[*i]
        );
    }
    // The check after the change recomputes cc-b's view: cc-a is gone from it.
    let view = slow
        .0
        .iter()
        .find(|(i, o)| *i == 8 && o.contains("\"event_id\":3504") && o.contains("cc-b.z1.example"))
        .expect("cc-b's view changes at its first check after the change");
    // (its checks every minute from its first, at 09:00:02)
    assert!(view.1.contains(&t(422)[..19]), "{view:?}");
    assert_eq!(apply_timers(&lines, false), slow);
}
