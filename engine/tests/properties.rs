//! Property tests of the reducer over generated logs:
//! (a) a replay is byte-identical to itself, outputs and digests;
//! (b) folding in one go equals folding a prefix, serializing and restoring the state, then
//!     folding the rest, at any split point;
//! (c) garbage never panics and always ends in quarantine;
//! (e) a long gap gives what firing its timers one by one, or a clock tick every second
//!     through it, gives.

use lhc_engine::{decode_record_at, Engine, Output};
use proptest::prelude::*;

const CONNECTORS: [&str; 4] = [
    "cc-a.z1.example",
    "cc-b.z1.example",
    "CC-C.z1.example",
    "cc-d.z2.example",
];
const MACHINES: [&str; 7] = [
    "vda-1.z1.example",
    "vda-2.z1.example",
    "vda-3.z2.example",
    "vda-x.example",
    "vda-s1.z1.example",
    "vda-p1.z1.example",
    "vda-p2.z1.example",
];
const RESOURCES: [&str; 4] = ["app", "desk-static", "desk-pool", "nothing"];
/// Brokering objects appended to every generated configuration.
const BROKERING: &str = r#",{"op":"upsert","kind":"delivery_group","id":"gs","data":{"kind":"single_session_static"}},{"op":"upsert","kind":"delivery_group","id":"gp","data":{"kind":"single_session_pooled","reuse_machines_without_shutdown_in_outage":true}},{"op":"upsert","kind":"machine","id":"vda-s1.z1.example","data":{"zone":"z1","delivery_group":"gs"}},{"op":"upsert","kind":"machine","id":"vda-p1.z1.example","data":{"zone":"z1","delivery_group":"gp"}},{"op":"upsert","kind":"machine","id":"vda-p2.z1.example","data":{"zone":"z1","delivery_group":"gp","maintenance":true}},{"op":"upsert","kind":"resource","id":"app","data":{"kind":"application","delivery_groups":["g"]}},{"op":"upsert","kind":"resource","id":"desk-static","data":{"kind":"desktop","delivery_groups":["gs"]}},{"op":"upsert","kind":"resource","id":"desk-pool","data":{"kind":"desktop","delivery_groups":["gp","g"]}},{"op":"upsert","kind":"group","id":"staff"},{"op":"upsert","kind":"user","id":"u0","data":{"groups":["staff"]}},{"op":"upsert","kind":"user","id":"u1","data":{"groups":["staff"]}},{"op":"upsert","kind":"user","id":"u2"},{"op":"upsert","kind":"entitlement","id":"e1","data":{"resource":"app","principals":["staff","u2"]}},{"op":"upsert","kind":"entitlement","id":"e2","data":{"resource":"desk-static","principals":["staff"]}},{"op":"upsert","kind":"entitlement","id":"e3","data":{"resource":"desk-pool","principals":["staff"]}},{"op":"upsert","kind":"assignment","id":"a1","data":{"machine":"vda-s1.z1.example","user":"u0"}}"#;

/// One generated step; rendered to a JSON line with a running clock.
#[derive(Clone, Debug)]
enum Step {
    Config {
        bad: u8,
    },
    Health {
        c: usize,
        ok: bool,
    },
    Probe {
        c: usize,
        p: usize,
        ok: bool,
    },
    Storefront {
        c: usize,
    },
    Vda {
        m: usize,
        sessions: u8,
    },
    Session {
        m: usize,
        kind: u8,
    },
    Admin {
        c: usize,
        command: u8,
        seconds: Option<u64>,
    },
    Service {
        c: usize,
        service: u8,
        running: bool,
    },
    Lifecycle {
        c: usize,
        start: bool,
    },
    Fault {
        c: usize,
    },
    /// Random periods, lowered or raised mid-episode (R-STATE-8: nothing fires in the past).
    Params {
        initial: u64,
        recovery: u64,
        report: u64,
        sync: u64,
        timeout: u64,
        import: u64,
    },
    Launch {
        c: usize,
        user: u8,
        resource: u8,
    },
    Tick,
}

fn step() -> impl Strategy<Value = Step> {
    let c = 0..CONNECTORS.len();
    prop_oneof![
        1 => any::<u8>().prop_map(|bad| Step::Config { bad }),
        8 => (c.clone(), prop::bool::weighted(0.6)).prop_map(|(c, ok)| Step::Health { c, ok }),
        5 => (c.clone(), 0..CONNECTORS.len(), prop::bool::weighted(0.8)).prop_map(|(c, p, ok)| Step::Probe { c, p, ok }),
        4 => c.clone().prop_map(|c| Step::Storefront { c }),
        5 => (0..MACHINES.len(), 0u8..3).prop_map(|(m, sessions)| Step::Vda { m, sessions }),
        2 => (0..MACHINES.len(), 0u8..4).prop_map(|(m, kind)| Step::Session { m, kind }),
        2 => (c.clone(), 0u8..8, prop::option::of(0u64..5000)).prop_map(|(c, command, seconds)| Step::Admin { c, command, seconds }),
        1 => (c.clone(), 0u8..3, any::<bool>()).prop_map(|(c, service, running)| Step::Service { c, service, running }),
        1 => (c.clone(), any::<bool>()).prop_map(|(c, start)| Step::Lifecycle { c, start }),
        1 => c.clone().prop_map(|c| Step::Fault { c }),
        1 => (1u64..600, 1u64..900, 1u64..300, 1u64..600, 1u64..300, 0u64..30).prop_map(
            |(initial, recovery, report, sync, timeout, import)| Step::Params { initial, recovery, report, sync, timeout, import }),
        4 => (c, 0u8..3, 0u8..4).prop_map(|(c, user, resource)| Step::Launch { c, user, resource }),
        1 => Just(Step::Tick),
    ]
}

/// Renders steps with time deltas (some negative, to exercise R-LOG-4) into JSON lines.
fn render(steps: &[(Step, i64)]) -> Vec<String> {
    let mut ms: i64 = 1_767_603_600_000;
    let mut version = 0u64;
    steps
        .iter()
        .map(|(step, delta)| {
            ms += delta;
            let ts = lhc_engine::Ts(ms).to_string();
            let c = |i: usize| CONNECTORS[i];
            match step {
                Step::Config { bad } => {
                    version += if bad % 7 == 0 { 0 } else { 1 };
                    let zone_ref = if bad % 5 == 0 { "z9" } else { "z1" };
                    let max = if bad % 11 == 0 { 0 } else { 5 };
                    let mut extra = String::from(if bad % 3 == 0 { r#",{"op":"delete","kind":"machine","id":"vda-2.z1.example"}"# } else { "" });
                    // A machine first in FQDN order, in some versions only: a change then
                    // moves the ranks of vda-1 and vda-2, which share a pool.
                    if bad % 2 == 0 {
                        extra.push_str(r#",{"op":"upsert","kind":"machine","id":"vda-0.z1.example","data":{"zone":"z1","delivery_group":"g"}}"#);
                    } else {
                        extra.push_str(r#",{"op":"delete","kind":"machine","id":"vda-0.z1.example"}"#);
                    }
                    format!(
                        r#"{{"ts":"{ts}","type":"config.change","version":{version},"ops":[{{"op":"upsert","kind":"site","id":"site"}},{{"op":"upsert","kind":"zone","id":"z1","data":{{"name":"one"}}}},{{"op":"upsert","kind":"zone","id":"z2","data":{{"name":"two"}}}},{{"op":"upsert","kind":"connector","id":"cc-a.z1.example","data":{{"zone":"z1"}}}},{{"op":"upsert","kind":"connector","id":"cc-b.z1.example","data":{{"zone":"z1"}}}},{{"op":"upsert","kind":"connector","id":"CC-C.z1.example","data":{{"zone":"Z1"}}}},{{"op":"upsert","kind":"connector","id":"cc-d.z2.example","data":{{"zone":"z2"}}}},{{"op":"upsert","kind":"delivery_group","id":"g","data":{{"kind":"multi_session"}}}},{{"op":"upsert","kind":"machine","id":"vda-1.z1.example","data":{{"zone":"z1","delivery_group":"g","max_sessions":{max}}}}},{{"op":"upsert","kind":"machine","id":"vda-2.z1.example","data":{{"zone":"{zone_ref}","delivery_group":"g"}}}},{{"op":"upsert","kind":"machine","id":"vda-3.z2.example","data":{{"zone":"z2","delivery_group":"g"}}}}{extra}{BROKERING}]}}"#
                    )
                }
                Step::Health { c: i, ok } => format!(r#"{{"ts":"{ts}","type":"health.check","connector":"{}","ok":{ok}}}"#, c(*i)),
                Step::Probe { c: i, p, ok } => format!(
                    r#"{{"ts":"{ts}","type":"peer.probe","connector":"{}","peer":"{}","ok":{ok}}}"#,
                    c(*i),
                    c(*p).to_lowercase()
                ),
                Step::Storefront { c: i } => {
                    format!(r#"{{"ts":"{ts}","type":"storefront.heartbeat","connector":"{}","storefront":"sf"}}"#, c(*i))
                }
                Step::Vda { m, sessions } => {
                    let list: Vec<String> = (0..*sessions)
                        .map(|s| format!(r#"{{"id":"s{s}","user":"u{s}","state":"{}"}}"#, if s == 1 { "disconnected" } else { "active" }))
                        .collect();
                    format!(r#"{{"ts":"{ts}","type":"vda.heartbeat","machine":"{}","sessions":[{}]}}"#, MACHINES[*m], list.join(","))
                }
                Step::Session { m, kind } => {
                    let event = ["logon", "logoff", "disconnect", "reconnect"][*kind as usize];
                    format!(r#"{{"ts":"{ts}","type":"session.event","machine":"{}","session":"s0","user":"u0","event":"{event}"}}"#, MACHINES[*m])
                }
                Step::Admin { c: i, command, seconds } => {
                    let name = [
                        "enable_forced_outage",
                        "disable_forced_outage",
                        "set_config_sync_interval",
                        "clear_config_sync_interval",
                        "enable_ha_sdk",
                        "disable_ha_sdk",
                        "enable_css_trace",
                        "disable_css_trace",
                    ][*command as usize];
                    let seconds = seconds.map_or(String::new(), |s| format!(r#","seconds":{s}"#));
                    format!(r#"{{"ts":"{ts}","type":"admin.command","connector":"{}","command":"{name}"{seconds}}}"#, c(*i))
                }
                Step::Service { c: i, service, running } => {
                    let name = ["high_availability", "remote_broker_provider", "config_sync"][*service as usize];
                    format!(r#"{{"ts":"{ts}","type":"service.status","connector":"{}","service":"{name}","running":{running}}}"#, c(*i))
                }
                Step::Lifecycle { c: i, start } => format!(
                    r#"{{"ts":"{ts}","type":"connector.lifecycle","connector":"{}","event":"{}"}}"#,
                    c(*i),
                    if *start { "start" } else { "stop" }
                ),
                Step::Fault { c: i } => format!(r#"{{"ts":"{ts}","type":"storage.fault","connector":"{}","detail":"x"}}"#, c(*i)),
                Step::Params { initial, recovery, report, sync, timeout, import } => format!(
                    r#"{{"ts":"{ts}","type":"engine.params","initial_ha_s":{initial},"pending_recovery_s":{recovery},"report_interval_s":{report},"sync_interval_s":{sync},"peer_timeout_s":{timeout},"import_duration_s":{import}}}"#
                ),
                Step::Launch { c: i, user, resource } => format!(
                    r#"{{"ts":"{ts}","type":"launch.request","request":"req-{version}-{ms}","connector":"{}","user":"u{user}","resource":"{}","client":{{"name":"n","ip":"1.1.1.1"}}}}"#,
                    c(*i),
                    RESOURCES[*resource as usize]
                ),
                Step::Tick => format!(r#"{{"ts":"{ts}","type":"clock.tick"}}"#),
            }
        })
        .collect()
}

fn log() -> impl Strategy<Value = Vec<String>> {
    let delta = prop_oneof![20 => 0i64..90_000, 1 => -5_000i64..0, 2 => Just(0i64), 1 => 300_000i64..900_000];
    // A config first, so most records find their connectors.
    prop::collection::vec((step(), delta), 1..160).prop_map(|mut steps| {
        steps.insert(0, (Step::Config { bad: 1 }, 0));
        render(&steps)
    })
}

/// The time an output is stamped with (a quarantine has none).
fn stamp(output: &Output) -> Option<lhc_engine::Ts> {
    match output {
        Output::Event(e) => Some(e.ts),
        Output::LaunchDecision(d) => Some(d.ts),
        Output::Registration(r) => Some(r.ts),
        Output::MachineMaintenance(m) => Some(m.ts),
        Output::Quarantine(_) => None,
    }
}

/// Folds lines from `from` into `engine`; returns the outputs as JSON lines and the digests.
/// Output times never decrease, and none is earlier than the last record applied before it
/// (R-STATE-8: no output is stamped before its cause, timers included).
fn fold(engine: &mut Engine, lines: &[String], from: usize) -> (Vec<String>, Vec<String>) {
    let mut outputs = Vec::new();
    let mut digests = Vec::new();
    let mut buffer = Vec::new();
    let mut last = engine.now();
    for (i, line) in lines.iter().enumerate().skip(from) {
        let decoded = decode_record_at(line.as_bytes(), i as u64);
        let launch = match &decoded {
            Ok(lhc_engine::Record::LaunchRequest(r)) => Some(r.request.clone()),
            _ => None,
        };
        let before = engine.now();
        engine.apply(i as u64, decoded, &mut buffer);
        for o in &buffer {
            if let Some(t) = stamp(o) {
                assert!(
                    last.is_none_or(|l| t >= l) && before.is_none_or(|b| t >= b),
                    "offset {i}: an output at {t} after one at {last:?} (the previous record at \
                     {before:?}): {o:?}\nlog:\n{}",
                    lines[..=i].join("\n")
                );
                last = Some(t);
            }
        }
        if let Some(request) = launch {
            check_launch(engine, &buffer, &request, i);
        }
        if let Err(broken) = engine.check_invariants() {
            panic!(
                "invariant broken after offset {i}: {broken}\nlog:\n{}",
                lines[..=i].join("\n")
            );
        }
        outputs.extend(buffer.drain(..).map(|o| serde_json::to_string(&o).unwrap()));
        digests.push(engine.digest());
    }
    (outputs, digests)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_replays_are_byte_identical(lines in log()) {
        let first = fold(&mut Engine::new(), &lines, 0);
        let second = fold(&mut Engine::new(), &lines, 0);
        prop_assert_eq!(first, second);
    }

    #[test]
    fn b_restoring_a_serialized_state_mid_log_changes_nothing(lines in log(), split in any::<prop::sample::Index>()) {
        let split = split.index(lines.len() + 1);
        let whole = fold(&mut Engine::new(), &lines, 0);

        let mut engine = Engine::new();
        let (mut outputs, mut digests) = fold(&mut engine, &lines[..split], 0);
        let saved = serde_json::to_string(&engine).unwrap();
        let mut restored: Engine = serde_json::from_str(&saved).unwrap();
        prop_assert_eq!(restored.digest(), engine.digest());
        // Step the restored engine beside one that never stopped; name the first difference.
        let mut reference = Engine::new();
        fold(&mut reference, &lines[..split], 0);
        let mut probe: Engine = serde_json::from_str(&saved).unwrap();
        for (i, line) in lines.iter().enumerate().skip(split) {
            let mut sink = Vec::new();
            reference.apply(i as u64, decode_record_at(line.as_bytes(), i as u64), &mut sink);
            probe.apply(i as u64, decode_record_at(line.as_bytes(), i as u64), &mut sink);
            if reference.digest() != probe.digest() {
                let a = serde_json::to_value(&reference).unwrap();
                let b = serde_json::to_value(&probe).unwrap();
                prop_assert!(false, "states differ at offset {i} after a restore at {split}: {}\nrecord: {}", first_difference(&a, &b, String::new()), line);
            }
        }
        let (rest_outputs, rest_digests) = fold(&mut restored, &lines, split);
        outputs.extend(rest_outputs);
        digests.extend(rest_digests);
        if let Some(i) = (0..whole.0.len().max(outputs.len())).find(|&i| whole.0.get(i) != outputs.get(i)) {
            prop_assert!(false, "output {i} differs after a restore at {split}:\n  whole:    {:?}\n  restored: {:?}", whole.0.get(i), outputs.get(i));
        }
        prop_assert_eq!(whole, (outputs, digests));
    }

    /// A store writes the state as rows (issue 15, item 6): rebuilt from them, in any
    /// order, and given back its configuration part, the engine is the same engine; in the
    /// layout of checkpoints and in the store's (R-DATA entries one row each, issue 20).
    #[test]
    fn e_restoring_from_state_rows_mid_log_changes_nothing(lines in log(), split in any::<prop::sample::Index>(), store_layout in any::<bool>()) {
        let split = split.index(lines.len() + 1);
        let whole = fold(&mut Engine::new(), &lines, 0);
        let mut engine = Engine::new();
        let (mut outputs, mut digests) = fold(&mut engine, &lines[..split], 0);
        let mut rows = Vec::new();
        if store_layout {
            engine.for_each_store_row(|k, v| rows.push((k.to_vec(), v.to_vec())));
        } else {
            engine.for_each_state_row(|k, v| rows.push((k.to_vec(), v.to_vec())));
        }
        let keys: std::collections::BTreeSet<_> = rows.iter().map(|(k, _)| k.clone()).collect();
        prop_assert_eq!(keys.len(), rows.len(), "row keys are unique");
        let mut builder = lhc_engine::rows::StateRows::new();
        for (k, v) in rows.iter().rev() {
            builder.add(k, v).unwrap();
        }
        prop_assert!(builder.add(&rows[0].0, &rows[0].1).is_err(), "a row given twice is refused");
        let mut builder = lhc_engine::rows::StateRows::new();
        for (k, v) in rows.iter().rev() {
            builder.add(k, v).unwrap();
        }
        let mut restored = builder.finish().unwrap().expect("there are rows");
        let part = engine.take_config();
        restored.restore_config(part.clone());
        engine.restore_config(part);
        // Derived caches (the cloud catalog) are rebuilt on use, so equality is the digest's.
        prop_assert_eq!(restored.digest(), engine.digest());
        let (rest_outputs, rest_digests) = fold(&mut restored, &lines, split);
        outputs.extend(rest_outputs);
        digests.extend(rest_digests);
        prop_assert_eq!(whole, (outputs, digests));
    }

    #[test]
    fn c_garbage_never_panics_and_is_quarantined(lines in log(), garbage in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 1..20), at in any::<prop::sample::Index>()) {
        let mut engine = Engine::new();
        let mut out = Vec::new();
        let split = at.index(lines.len());
        fold(&mut engine, &lines[..split], 0);
        let before = engine.digest();
        for (i, bytes) in garbage.iter().enumerate() {
            let offset = 1_000_000 + i as u64;
            let decoded = decode_record_at(bytes, offset);
            if decoded.is_ok() {
                continue; // random bytes that happen to be a valid record: not garbage
            }
            engine.apply(offset, decoded, &mut out);
            prop_assert!(matches!(out.as_slice(), [Output::Quarantine(q)] if q.offset == offset));
            out.clear();
        }
        prop_assert_eq!(engine.digest(), before, "quarantined input changes no state");
    }
}

/// A record that decodes but cannot apply (R-LOG-4), of kind `kind`, at or after `now`
/// except the one whose fault is its time.
fn invalid_record(kind: u8, now: Option<lhc_engine::Ts>, pick: usize) -> String {
    let pick = pick % 100_000;
    let now = now.unwrap_or(lhc_engine::Ts(1_767_603_600_000));
    let ts = lhc_engine::Ts(now.0 + (pick as i64 % 3) * 1000).to_string();
    let c = CONNECTORS[pick % CONNECTORS.len()];
    match kind % 8 {
        0 => format!(
            r#"{{"ts":"{ts}","type":"health.check","connector":"nobody-{pick}.example","ok":false}}"#
        ),
        1 => format!(
            r#"{{"ts":"{ts}","type":"admin.command","connector":"{c}","command":"set_config_sync_interval","seconds":{}}}"#,
            if pick.is_multiple_of(2) {
                59
            } else {
                3601 + pick
            }
        ),
        2 => format!(
            r#"{{"ts":"{ts}","type":"admin.command","connector":"{c}","command":"enable_forced_outage","seconds":60}}"#
        ),
        3 => format!(
            r#"{{"ts":"{}","type":"health.check","connector":"{c}","ok":false}}"#,
            lhc_engine::Ts(now.0 - 1 - pick as i64)
        ),
        4 => format!(r#"{{"ts":"{ts}","type":"config.change","version":0,"ops":[]}}"#),
        5 => format!(
            r#"{{"ts":"{ts}","type":"config.change","version":999999,"ops":[{{"op":"delete","kind":"machine","id":"never-{pick}"}}]}}"#
        ),
        6 => format!(
            r#"{{"ts":"{ts}","type":"peer.probe","connector":"{c}","peer":"ghost.example","ok":true}}"#
        ),
        _ => format!(r#"{{"ts":"{ts}","type":"engine.params","report_interval_s":0}}"#),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Records that decode but cannot apply (an unknown connector or peer, a value out of
    /// range, a clock going backwards, a version not above the current one, a delete of
    /// nothing) are quarantined where they lie, alone, and change nothing (R-LOG-4).
    #[test]
    fn d_invalid_but_decodable_records_are_quarantined(lines in log(), bad in prop::collection::vec((any::<u8>(), any::<usize>()), 1..12), at in any::<prop::sample::Index>()) {
        let mut engine = Engine::new();
        let split = at.index(lines.len());
        fold(&mut engine, &lines[..split], 0);
        let before = engine.digest();
        let mut out = Vec::new();
        for (i, (kind, pick)) in bad.iter().enumerate() {
            let line = invalid_record(*kind, engine.now(), *pick);
            let offset = 2_000_000 + i as u64;
            let decoded = decode_record_at(line.as_bytes(), offset);
            prop_assert!(decoded.is_ok(), "{line} decodes");
            engine.apply(offset, decoded, &mut out);
            prop_assert!(matches!(out.as_slice(), [Output::Quarantine(q)] if q.offset == offset), "{line}: {out:?}");
            out.clear();
        }
        prop_assert_eq!(engine.digest(), before, "quarantined records change no state, no clock");
    }
}

/// Applies `lines` (offsets from 0) without checks, firing timers one by one if asked;
/// every output as a JSON line, and the final digest.
fn apply_plain(lines: &[String], one_by_one: bool) -> (Vec<String>, String) {
    let mut engine = Engine::new();
    if one_by_one {
        engine.fire_timers_one_by_one();
    }
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        engine.apply(
            i as u64,
            decode_record_at(line.as_bytes(), i as u64),
            &mut out,
        );
    }
    let outputs = out
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect();
    (outputs, engine.digest())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A long quiet gap (R-STATE-9, R-CSS-2): one record hours or days later gives the
    /// outputs and the state that firing every timer one by one gives, and that a clock
    /// tick every second through the gap gives, however the config sync checks that find
    /// nothing are fired (in one step, up to the next other timer).
    #[test]
    fn e_a_long_gap_is_the_same_as_timers_one_by_one(lines in log(), at in any::<prop::sample::Index>(), gap_s in prop_oneof![600i64..6 * 3600, 6 * 3600i64..3 * 86_400]) {
        let split = at.index(lines.len()) + 1;
        let head = &lines[..split];
        // The clock after the head: the latest record time (a record older than that is
        // quarantined, and does not move it).
        let mut probe = Engine::new();
        let mut sink = Vec::new();
        for (i, line) in head.iter().enumerate() {
            probe.apply(i as u64, decode_record_at(line.as_bytes(), i as u64), &mut sink);
        }
        // (None when every record was quarantined: the generator's start then.)
        let start = probe.now().map_or(1_767_603_600_000, |t| t.0);
        let tick = |ms: i64| format!(r#"{{"ts":"{}","type":"clock.tick"}}"#, lhc_engine::Ts(ms));
        let end = start + gap_s * 1000;
        let mut jumped = head.to_vec();
        jumped.push(tick(end));
        let (fast_out, fast_digest) = apply_plain(&jumped, false);
        let (slow_out, slow_digest) = apply_plain(&jumped, true);
        if let Some(i) = (0..fast_out.len().max(slow_out.len())).find(|&i| fast_out.get(i) != slow_out.get(i)) {
            prop_assert!(false, "output {i} differs after a gap of {gap_s} s at {split}:\n  in one step: {:?}\n  one by one:  {:?}", fast_out.get(i), slow_out.get(i));
        }
        prop_assert_eq!(&fast_digest, &slow_digest, "the state after the gap");
        if gap_s <= 6 * 3600 {
            let mut ticked = head.to_vec();
            ticked.extend((1..=gap_s).map(|s| tick(start + s * 1000)));
            let (ticked_out, ticked_digest) = apply_plain(&ticked, false);
            prop_assert_eq!(fast_out, ticked_out);
            prop_assert_eq!(fast_digest, ticked_digest);
        }
    }
}

/// Records that decode but cannot apply (unknown connectors, a clock going backwards) are
/// quarantined too, and change nothing.
#[test]
fn inapplicable_records_are_quarantined_without_state_change() {
    let mut engine = Engine::new();
    let mut out = Vec::new();
    let lines = [
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"health.check","connector":"nobody.example","ok":false}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"clock.tick"}"#,
        r#"{"ts":"2026-01-05T08:00:00.000Z","type":"clock.tick"}"#,
    ];
    let mut digests = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        digests.push(engine.digest());
        let decoded = decode_record_at(line.as_bytes(), i as u64);
        engine.apply(i as u64, decoded, &mut out);
    }
    let offsets: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            Output::Quarantine(q) => Some(q.offset),
            _ => None,
        })
        .collect();
    assert_eq!(offsets, vec![0, 2]);
    assert_eq!(
        digests[0], digests[1],
        "the quarantined record at offset 0 changed nothing"
    );
    assert_eq!(engine.digest(), {
        let mut e = Engine::new();
        e.apply(1, decode_record_at(lines[1].as_bytes(), 1), &mut Vec::new());
        e.digest()
    });
}

/// The JSON path and values of the first difference between two values.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, path: String) -> String {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                if x.get(key) != y.get(key) {
                    return match (x.get(key), y.get(key)) {
                        (Some(p), Some(q)) => first_difference(p, q, format!("{path}.{key}")),
                        (p, q) => format!("{path}.{key}: {p:?} vs {q:?}"),
                    };
                }
            }
            String::new()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            let i = (0..x.len()).find(|&i| x[i] != y[i]).unwrap_or(0);
            first_difference(&x[i], &y[i], format!("{path}[{i}]"))
        }
        _ => format!("{path}: {a} vs {b}"),
    }
}

/// Every launch request ends in exactly one decision (or a quarantine), and a decision
/// brokered in LHC mode names a machine registered with that connector, in its zone, not
/// in maintenance and within capacity (R-LAUNCH-2, -4).
fn check_launch(engine: &Engine, outputs: &[Output], request: &str, offset: usize) {
    use lhc_engine::engine::Registrar;
    use lhc_engine::output::{Outcome, Via};
    let decisions: Vec<_> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::LaunchDecision(d) => Some(d),
            _ => None,
        })
        .collect();
    let quarantined = outputs
        .iter()
        .any(|o| matches!(o, Output::Quarantine(q) if q.offset == offset as u64));
    if quarantined {
        assert!(
            decisions.is_empty(),
            "offset {offset}: a quarantined launch decides nothing"
        );
        return;
    }
    assert_eq!(decisions.len(), 1, "offset {offset}: exactly one decision");
    let d = decisions[0];
    assert_eq!(d.request, request);
    assert_eq!(
        d.outcome == Outcome::Rejected,
        d.reason.is_some(),
        "a rejection always says why: {d:?}"
    );
    if d.outcome != Outcome::Brokered || d.via != Via::Lhc {
        return;
    }
    let machine = d
        .machine
        .as_deref()
        .expect("brokered decisions name a machine");
    let runtime = &engine.machines()[machine];
    assert_eq!(
        runtime.registrar(),
        &Registrar::Connector(d.connector.clone()),
        "{d:?}: registered with the broker"
    );
    let c = &engine.connectors()[&d.connector];
    let entry = engine
        .snapshot_of(&d.connector)
        .unwrap()
        .machine(machine)
        .expect("in the snapshot")
        .clone();
    assert!(
        !entry.maintenance && !c.maintenance().contains(machine),
        "{d:?}: not in maintenance"
    );
    assert_eq!(entry.zone, c.zone(), "{d:?}: in the broker's zone");
    // A reconnect resumes a session; capacity concerns new ones.
    let load = (runtime.sessions().len() + runtime.pending().len()) as u32;
    let new = d.session == Some(lhc_engine::output::SessionKind::New);
    assert!(
        !new || load <= entry.max_sessions,
        "{d:?}: within capacity ({load} > {})",
        entry.max_sessions
    );
}
