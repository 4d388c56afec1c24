//! Scenario tests: one log per requirement under `tests/scenarios/`, replayed through the
//! engine. Each test checks the outputs against the committed `NAME.expected.jsonl`
//! (regenerate with `LHC_BLESS=1 cargo test -p lhc-engine --test scenarios`, then review
//! the diff) and asserts what its requirement says, so a golden-file update cannot hide a
//! broken rule.

use std::path::PathBuf;

use lhc_engine::output::*;
use lhc_engine::{decode_record_at, Engine, Output, Ts};

const T0_MS: i64 = 1_767_603_600_000; // 2026-01-05T09:00:00Z, the scenarios' origin

/// Seconds after the scenarios' origin.
fn at(seconds: f64) -> Ts {
    Ts(T0_MS + (seconds * 1000.0).round() as i64)
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios")
}

/// Replays a scenario, checks its golden file, returns its outputs.
fn run(name: &str) -> Vec<Output> {
    run_engine(name).0
}

/// Replays a scenario, checks its golden file, returns its outputs and the final engine.
fn run_engine(name: &str) -> (Vec<Output>, Engine) {
    let log = std::fs::read_to_string(dir().join(format!("{name}.jsonl"))).expect("scenario log");
    let mut engine = Engine::new();
    let mut outputs = Vec::new();
    for (offset, line) in log.lines().enumerate() {
        let decoded = decode_record_at(line.as_bytes(), offset as u64);
        engine.apply(offset as u64, decoded, &mut outputs);
        if let Err(broken) = engine.check_invariants() {
            panic!("{name}: invariant broken after offset {offset}: {broken}");
        }
    }
    let text: String = outputs
        .iter()
        .map(|o| serde_json::to_string(o).unwrap() + "\n")
        .collect();
    let expected_path = dir().join(format!("{name}.expected.jsonl"));
    if std::env::var_os("LHC_BLESS").is_some() {
        std::fs::write(&expected_path, &text).unwrap();
    } else {
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != text {
            let first = expected.lines().zip(text.lines()).position(|(a, b)| a != b);
            panic!(
                "{name}: outputs differ from {} (first differing line: {:?}); run with LHC_BLESS=1 \
                 and review the diff",
                expected_path.display(),
                first.map(|i| i + 1)
            );
        }
    }
    (outputs, engine)
}

fn events<'a>(outputs: &'a [Output], connector: &str, id: u32) -> Vec<&'a Event> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Event(e) if e.connector == connector && e.event_id == id => Some(e),
            _ => None,
        })
        .collect()
}

/// (time, from, to, cause) of a connector's 3003 events.
fn transitions(
    outputs: &[Output],
    connector: &str,
) -> Vec<(Ts, ConnectorState, ConnectorState, TransitionCause)> {
    events(outputs, connector, 3003)
        .into_iter()
        .map(|e| match &e.data {
            EventData::Transition(t) => (e.ts, t.from, t.to, t.cause),
            other => panic!("3003 with {other:?}"),
        })
        .collect()
}

fn registrations<'a>(outputs: &'a [Output], machine: &str) -> Vec<&'a Registration> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Registration(r) if r.machine == machine => Some(r),
            _ => None,
        })
        .collect()
}

fn elected_views(outputs: &[Output], connector: &str) -> Vec<(Ts, Option<String>)> {
    events(outputs, connector, 3504)
        .into_iter()
        .map(|e| match &e.data {
            EventData::ElectionView(v) => (e.ts, v.elected.clone()),
            other => panic!("3504 with {other:?}"),
        })
        .collect()
}

const A: &str = "cc-a.z1.example";
const B: &str = "cc-b.z1.example";
const C: &str = "cc-c.z1.example";
const M1: &str = "vda-1.z1.example";
const M2: &str = "vda-2.z1.example";
const M3: &str = "vda-3.z1.example";

use ConnectorState::*;
use TransitionCause::*;

fn ineligible_reasons(outputs: &[Output], connector: &str) -> Vec<(Ts, IneligibleReason)> {
    events(outputs, connector, 3002)
        .into_iter()
        .map(|e| match &e.data {
            EventData::Ineligible(i) => (e.ts, i.reason),
            other => panic!("3002 with {other:?}"),
        })
        .collect()
}

fn css_ids(outputs: &[Output], connector: &str) -> Vec<(Ts, u32)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Event(e)
                if e.connector == connector && e.source == EventSource::ConfigSyncService =>
            {
                Some((e.ts, e.event_id))
            }
            _ => None,
        })
        .collect()
}

fn import_failures(outputs: &[Output], connector: &str) -> Vec<(Ts, ImportFailed)> {
    events(outputs, connector, 505)
        .into_iter()
        .map(|e| match &e.data {
            EventData::ImportFailed(f) => (e.ts, f.clone()),
            other => panic!("505 with {other:?}"),
        })
        .collect()
}

/// R-STATE-1
#[test]
fn r_state_1_failed_check_in_working_normally_goes_pending_ha_with_3001() {
    let out = run("r-state-1");
    let e3001 = events(&out, A, 3001);
    assert_eq!(e3001.len(), 1);
    assert_eq!((e3001[0].ts, e3001[0].level), (at(121.0), Level::Warning));
    assert_eq!(
        transitions(&out, A)[0],
        (at(121.0), WorkingNormally, PendingHa, HealthCheckFailed)
    );
}

/// R-STATE-2
#[test]
fn r_state_2_ok_check_in_pending_ha_returns_to_working_normally() {
    let out = run("r-state-2");
    assert_eq!(
        transitions(&out, A),
        vec![
            (at(61.0), WorkingNormally, PendingHa, HealthCheckFailed),
            (at(121.0), PendingHa, WorkingNormally, HealthCheckOk)
        ]
    );
}

/// R-STATE-3
#[test]
fn r_state_3_second_failure_after_60s_enters_lhc_unless_a_healthy_peer_keeps_the_zone_out() {
    let out = run("r-state-3");
    let a = transitions(&out, A);
    // A's first failure at 61 s; the failure at 90 s is too early; at 121 s and 181 s cc-b's
    // ok checks (age < 120 s) keep the zone out; at 241 s cc-b's latest check has failed.
    assert_eq!(
        a[0],
        (at(61.0), WorkingNormally, PendingHa, HealthCheckFailed)
    );
    assert_eq!(a[1], (at(241.0), PendingHa, InitialHa, OutageConfirmed));
    let b = transitions(&out, B);
    assert_eq!(
        b[0],
        (at(181.1), WorkingNormally, PendingHa, HealthCheckFailed)
    );
    assert_eq!(b[1], (at(241.1), PendingHa, InitialHa, OutageConfirmed));
}

/// R-STATE-4
#[test]
fn r_state_4_ineligible_connectors_report_3002_once_per_reason_in_priority_order() {
    let out = run("r-state-4");
    // lhc_disabled outranks the stopped HA service; each reason is reported once while it
    // holds; after the re-import with lhc_enabled, the HA service, then StoreFront traffic.
    assert_eq!(
        ineligible_reasons(&out, A),
        vec![
            (at(121.0), IneligibleReason::LhcDisabled),
            (at(421.0), IneligibleReason::HaServiceNotRunning),
            (at(481.0), IneligibleReason::NoStorefrontTraffic),
        ]
    );
    assert!(events(&out, A, 3002)
        .iter()
        .all(|e| e.level == Level::Warning));
    let entered = transitions(&out, A)
        .into_iter()
        .find(|t| t.2 == InitialHa)
        .unwrap();
    assert_eq!(
        entered.0,
        at(601.0),
        "eligible again once StoreFront traffic is back"
    );
}

/// R-STATE-5
#[test]
fn r_state_5_initial_ha_lasts_300s_and_the_first_check_after_it_decides() {
    let out = run("r-state-5");
    let t = transitions(&out, A);
    assert_eq!(t[1], (at(121.0), PendingHa, InitialHa, OutageConfirmed));
    assert_eq!(
        t[2],
        (at(421.0), InitialHa, PendingRecovery, InitialHaElapsed)
    );
    let out = run("r-state-6");
    assert_eq!(
        transitions(&out, A)[2],
        (at(421.0), InitialHa, ExtendedHa, InitialHaElapsed)
    );
}

/// R-STATE-6
#[test]
fn r_state_6_extended_ha_with_an_ok_check_goes_pending_recovery() {
    let out = run("r-state-6");
    assert_eq!(
        transitions(&out, A)[3],
        (at(841.0), ExtendedHa, PendingRecovery, HealthCheckOk)
    );
}

/// R-STATE-7
#[test]
fn r_state_7_pending_recovery_falls_back_on_failure_and_ends_after_600s() {
    let out = run("r-state-7");
    let t = transitions(&out, A);
    assert_eq!(
        t[3],
        (at(541.0), ExtendedHa, PendingRecovery, HealthCheckOk)
    );
    assert_eq!(
        t[4],
        (at(721.0), PendingRecovery, ExtendedHa, HealthCheckFailed)
    );
    assert_eq!(
        t[5],
        (at(781.0), ExtendedHa, PendingRecovery, HealthCheckOk)
    );
    assert_eq!(
        t[6],
        (
            at(1381.0),
            PendingRecovery,
            WorkingNormally,
            RecoveryPeriodElapsed
        )
    );
}

/// R-STATE-8
#[test]
fn r_state_8_forced_outage_needs_the_whole_zone_holds_lhc_and_survives_a_restart() {
    let out = run("r-state-8");
    // Forcing a subset: 3002 forced_on_subset, once per connector, and no LHC mode.
    assert_eq!(
        ineligible_reasons(&out, B)[0],
        (at(125.0), IneligibleReason::ForcedOnSubset)
    );
    assert_eq!(
        ineligible_reasons(&out, C)[0],
        (at(185.0), IneligibleReason::ForcedOnSubset)
    );
    assert_eq!(ineligible_reasons(&out, B).len(), 1, "cc-b waits silently");
    // Forcing the last one brings the zone in at that record: cc-a, then cc-b, cc-c.
    let entries: Vec<(Ts, String)> = out
        .iter()
        .filter_map(|o| match o {
            Output::Event(e) if e.event_id == 3003 => match &e.data {
                EventData::Transition(t) if t.to == InitialHa => Some((e.ts, e.connector.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(
        entries[..3],
        [
            (at(245.0), A.to_string()),
            (at(245.0), B.to_string()),
            (at(245.0), C.to_string())
        ]
    );
    // Held: every check is ok, yet only the end of initial_ha moves it (to extended_ha).
    let a = transitions(&out, A);
    assert_eq!(a[1], (at(601.0), InitialHa, ExtendedHa, InitialHaElapsed));
    // The setting survives a restart: tried at the start (no StoreFront traffic yet after
    // the reboot), in again at its next StoreFront heartbeat.
    let c = transitions(&out, C);
    assert_eq!(c[1], (at(600.0), InitialHa, Stopped, ConnectorStopped));
    assert_eq!(
        c[2],
        (at(630.0), Stopped, WorkingNormally, ConnectorStarted)
    );
    assert_eq!(
        ineligible_reasons(&out, C)[1],
        (at(630.0), IneligibleReason::NoStorefrontTraffic)
    );
    assert_eq!(
        c[3],
        (at(701.21), WorkingNormally, InitialHa, ForcedOutageEnabled)
    );
    // Disabled: pending_recovery. Forced again there, the period stops (it would have ended
    // at 1500 s); disabled again at 1400 s, a full new period: normal at 2000 s.
    assert_eq!(
        a[2],
        (at(900.0), ExtendedHa, PendingRecovery, ForcedOutageDisabled)
    );
    assert_eq!(
        a[3],
        (
            at(2000.0),
            PendingRecovery,
            WorkingNormally,
            RecoveryPeriodElapsed
        )
    );
    assert_eq!(a.len(), 4);
    // cc-b, still forced, stays in LHC mode to the end.
    assert_eq!(transitions(&out, B).last().unwrap().2, ExtendedHa);
    assert_no_output_before_its_cause(&out);
}

/// R-STATE-8 with R-STATE-5 and R-STATE-6: `disable_forced_outage` ends a forced outage
/// only. On connectors never forced, in a real outage, it changes nothing: no 3003 at the
/// command, initial_ha still ends at its first check after 300 s, extended_ha at an ok check.
#[test]
fn r_state_8_disabling_a_forced_outage_that_was_never_enabled_changes_nothing() {
    let out = run("r-state-8-disable-unforced");
    for c in [A, B] {
        assert!(
            transitions(&out, c)
                .iter()
                .all(|t| t.3 != ForcedOutageDisabled),
            "{c}: {:?}",
            transitions(&out, c)
        );
    }
    let a = transitions(&out, A);
    // Failed checks from 61 s: pending_ha, then initial_ha at the check 60 s later, held
    // through the command at 200 s, extended_ha at the check that ends its 300 s.
    assert_eq!(a[1], (at(121.0), PendingHa, InitialHa, OutageConfirmed));
    assert_eq!(a[2], (at(421.0), InitialHa, ExtendedHa, InitialHaElapsed));
    // B's command at 700 s, in extended_ha: it leaves at the first ok check (1501.1 s).
    let b = transitions(&out, B);
    assert!(
        b.iter().any(|t| t.2 == ExtendedHa && t.0 < at(700.0)),
        "{b:?}"
    );
    assert_eq!(
        b.iter().find(|t| t.0 > at(700.0)).copied(),
        Some((at(1501.1), ExtendedHa, PendingRecovery, HealthCheckOk))
    );
    assert_no_output_before_its_cause(&out);
}

/// Outputs come in time order: none is stamped before the record or timer that caused it.
fn assert_no_output_before_its_cause(out: &[Output]) {
    let stamps: Vec<Ts> = out
        .iter()
        .filter_map(|o| match o {
            Output::Event(e) => Some(e.ts),
            Output::LaunchDecision(d) => Some(d.ts),
            Output::Registration(r) => Some(r.ts),
            Output::MachineMaintenance(m) => Some(m.ts),
            Output::Quarantine(_) => None,
        })
        .collect();
    assert!(
        stamps.windows(2).all(|w| w[0] <= w[1]),
        "an output is stamped before the one before it"
    );
}

/// R-STATE-8, R-STATE-9: lowering pending_recovery_s and peer_timeout_s makes deadlines
/// fall before the record that lowered them: they fire at that record, never in the past.
#[test]
fn r_state_9_lowered_periods_fire_at_the_record_that_lowered_them() {
    let out = run("r-state-9-lowered-params");
    let params_at = at(760.5);
    let a = transitions(&out, A);
    assert_eq!(
        a.last().unwrap(),
        &(
            params_at,
            PendingRecovery,
            WorkingNormally,
            RecoveryPeriodElapsed
        )
    );
    // cc-b's last ok probe of cc-a (721.12 s) aged past the new 10 s timeout: its view
    // changes at the params record, not at 731.12 s.
    assert!(elected_views(&out, B).contains(&(params_at, Some(B.to_string()))));
    // R-STATE-9: one connector's timers due at one instant fire in a fixed order — peer-probe
    // expiry (cc-b's view: 3504) before the end of pending_recovery (3003).
    let b_then: Vec<u32> = events(&out, B, 3504)
        .into_iter()
        .chain(events(&out, B, 3003))
        .filter(|e| e.ts == params_at)
        .map(|e| e.event_id)
        .collect();
    assert_eq!(b_then.len(), 2, "{b_then:?}");
    let position = |id: u32| {
        out.iter()
            .position(|o| matches!(o, Output::Event(e) if e.connector == B && e.ts == params_at && e.event_id == id))
            .unwrap()
    };
    assert!(
        position(3504) < position(3003),
        "probe expiry fires before the recovery end"
    );
    assert_no_output_before_its_cause(&out);
}

/// R-STATE-9, §9: a changed `report_interval_s` applies after the report already
/// scheduled, as a sync period does (docs/engine.md): the episode starts at 121 s, the
/// first report comes at 241 s, the interval falls to 30 s at 250.5 s, and the report
/// scheduled for 361 s stays; every 30 s after it.
#[test]
fn r_state_9_a_new_report_interval_applies_after_the_scheduled_report() {
    let out = run("r-state-9-report-interval");
    let reports: Vec<Ts> = events(&out, A, 3507).iter().map(|e| e.ts).collect();
    assert_eq!(reports[..4], [at(241.0), at(361.0), at(391.0), at(421.0)]);
    assert_no_output_before_its_cause(&out);
}

/// R-STATE-9
#[test]
fn r_state_9_timers_fire_at_their_deadline_in_deadline_then_fqdn_order() {
    let out = run("r-state-9");
    // Both entered LHC at 121 s (cc-b's records first in log order); reports every 100 s
    // fire at their deadlines before the tick at 2000 s, cc-a before cc-b at each instant.
    let reports: Vec<(Ts, String)> = out
        .iter()
        .filter_map(|o| match o {
            Output::Event(e) if e.event_id == 3507 || e.event_id == 3509 => {
                Some((e.ts, e.connector.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(reports[0], (at(221.0), A.to_string()));
    assert_eq!(
        reports[1],
        (at(221.0), B.to_string()),
        "cc-b's 3509 at the same deadline, after cc-a"
    );
    assert!(reports.windows(2).all(|w| w[0].0 <= w[1].0));
    let last = reports.last().unwrap();
    assert_eq!(last.0, at(2021.0 - 100.0));
    // cc-b's last ok probe of cc-a (361 s) ages out at exactly 481 s, without any record then.
    assert_eq!(
        elected_views(&out, B).last().unwrap(),
        &(at(481.0), Some(B.to_string()))
    );
}

/// R-STATE-10
#[test]
fn r_state_10_stop_ends_the_episode_and_a_restart_during_the_outage_keeps_the_snapshot() {
    let out = run("r-state-10");
    let t = transitions(&out, A);
    let stop = t.iter().position(|x| x.3 == ConnectorStopped).unwrap();
    assert_eq!(
        (t[stop].0, t[stop].1, t[stop].2),
        (at(600.0), ExtendedHa, Stopped)
    );
    match &events(&out, A, 3508)[0].data {
        EventData::ElectedSummary(s) => assert_eq!(s.ended_by, EndedBy::ConnectorStopped),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        events(&out, A, 3508)[0].ts,
        at(600.0),
        "it was the elected broker"
    );
    assert!(
        events(&out, A, 3503).is_empty() || events(&out, A, 3503)[0].ts > at(700.0),
        "no 3503 at the stop: normal operations did not resume"
    );
    let dropped = registrations(&out, M1)
        .into_iter()
        .find(|r| r.connector == A && !r.accepted)
        .unwrap();
    assert_eq!(
        (dropped.ts, dropped.reason),
        (at(600.0), Some(Reason::ConnectorStopped))
    );
    assert_eq!(
        t[stop + 1],
        (at(700.0), Stopped, WorkingNormally, ConnectorStarted)
    );
    // Stopped in LHC mode: the snapshot stays usable. The stop cleared its StoreFront
    // history and its first check after the start (721 s) comes before StoreFront traffic,
    // so it waits for that (3002), then the next failed check brings it back as broker.
    assert_eq!(
        ineligible_reasons(&out, A),
        vec![(at(721.0), IneligibleReason::NoStorefrontTraffic)]
    );
    assert_eq!(
        t[stop + 2],
        (at(721.0), WorkingNormally, PendingHa, HealthCheckFailed)
    );
    assert_eq!(
        t[stop + 3],
        (at(781.0), PendingHa, InitialHa, OutageConfirmed)
    );
    assert_eq!(
        elected_views(&out, B).last().unwrap(),
        &(at(721.12), Some(A.to_string()))
    );
    // Its first sync check after the start runs at that first check: 510, not an import.
    assert_eq!(
        css_ids(&out, A)
            .into_iter()
            .find(|(t, _)| *t > at(700.0))
            .unwrap(),
        (at(721.0), 510)
    );
}

/// R-STATE-10, R-ELECT-5: the elected broker restarted during the outage; failover to
/// cc-b, then its first failed check takes it straight back to initial_ha (StoreFront
/// reached it first) and the VDA re-registers with it: failback with registration churn.
#[test]
fn r_state_10_restarted_elected_broker_fails_over_then_back() {
    let out = run("r-state-10-restart-elected");
    let a = transitions(&out, A);
    assert_eq!(a[3], (at(600.0), ExtendedHa, Stopped, ConnectorStopped));
    assert_eq!(
        a[4],
        (at(700.0), Stopped, WorkingNormally, ConnectorStarted)
    );
    assert_eq!(
        a[5],
        (at(721.0), WorkingNormally, PendingHa, HealthCheckFailed)
    );
    assert_eq!(
        a[6],
        (at(721.0), PendingHa, InitialHa, OutageConfirmed),
        "no second_check_s wait"
    );
    assert_eq!(events(&out, A, 3001).last().unwrap().ts, at(721.0));
    assert!(ineligible_reasons(&out, A).is_empty());
    assert_eq!(events(&out, B, 3502)[0].ts, at(601.12), "failover");
    assert_eq!(events(&out, A, 3502)[1].ts, at(721.0), "failback");
    let m: Vec<(Ts, &str, bool)> = registrations(&out, M1)
        .iter()
        .filter(|r| r.accepted || r.reason != Some(Reason::NotElected))
        .map(|r| (r.ts, r.connector.as_str(), r.accepted))
        .collect();
    assert_eq!(
        m,
        vec![
            (at(200.0), A, true),
            (at(600.0), A, false),
            (at(650.0), B, true),
            // (721.12 s: cc-b drops it, not_elected, when it elects cc-a again)
            (at(800.0), A, true),
            (at(2101.0), A, false),
            (at(2300.0), "cloud", true),
        ]
    );
    assert_eq!(chose(&out, "r2").0, B);
    assert_eq!(chose(&out, "r3").0, A);
    assert_eq!(refused(&out, "r4"), (Via::Lhc, Reason::NotElected));
    // Its first sync check after the start runs at its first check: 510.
    assert!(css_ids(&out, A).contains(&(at(721.0), 510)));
}

/// R-STATE-10, R-REG-1: restarting the non-elected connector has no impact: before its
/// first check it offers no cloud path, so the VDA stays with cc-a, and its first failed
/// check takes it back to LHC mode as a non-elected broker.
#[test]
fn r_state_10_restarted_non_elected_connector_has_no_impact() {
    let out = run("r-state-10-restart-non-elected");
    let regs: Vec<&Registration> = registrations(&out, M1)
        .into_iter()
        .filter(|r| r.accepted || r.reason != Some(Reason::NotElected))
        .collect();
    assert_eq!(
        regs.len(),
        1,
        "registered with cc-a once, never moved: {regs:?}"
    );
    assert_eq!((regs[0].connector.as_str(), regs[0].ts), (A, at(200.0)));
    assert_eq!(chose(&out, "r1").0, A);
    assert_eq!(chose(&out, "r2").0, A);
    let b = transitions(&out, B);
    assert_eq!(
        b[5],
        (at(721.1), WorkingNormally, PendingHa, HealthCheckFailed)
    );
    assert_eq!(b[6], (at(721.1), PendingHa, InitialHa, OutageConfirmed));
    match &events(&out, B, 3510)[0].data {
        EventData::NonElectedSummary(s) => {
            assert_eq!(s.ended_by, EndedBy::ConnectorStopped);
            assert_eq!(s.elected.as_deref(), Some(A));
        }
        other => panic!("{other:?}"),
    }
    assert!(events(&out, B, 3502).is_empty(), "cc-b never brokers");
}

/// R-STATE-10: powered off in normal operations and on during the outage, cc-a's first
/// check fails: its snapshot is unusable, yet cc-b elects it (it answers probes), so
/// nobody brokers: the documented blackout.
#[test]
fn r_state_10_powered_on_during_the_outage_blacks_out_the_zone() {
    let out = run("r-state-10-blackout");
    assert_eq!(
        ineligible_reasons(&out, A),
        vec![(at(721.0), IneligibleReason::NoLhcDatabase)]
    );
    assert_eq!(
        elected_views(&out, B).last().unwrap(),
        &(at(661.12), Some(A.to_string()))
    );
    assert_eq!(chose(&out, "r1").0, B, "before the restart cc-b brokers");
    assert_eq!(refused(&out, "r2"), (Via::Lhc, Reason::NotElected));
    assert_eq!(refused(&out, "r3"), (Via::Cloud, Reason::NoLhcDatabase));
    assert!(events(&out, A, 3502).is_empty());
    // Nobody holds the VDA: dropped by cc-b, refused by it after.
    assert!(registrations(&out, M1)
        .iter()
        .filter(|r| r.ts > at(661.0))
        .all(|r| !r.accepted));
}

/// R-CSS-1: restarted during the outage after a config change, cc-b's first sync check
/// waits for its first health check, which failed: 510, and it never imports version 2.
#[test]
fn r_css_1_a_restart_during_the_outage_reports_510_and_imports_nothing() {
    let out = run("r-css-1-restart");
    let b: Vec<(Ts, u32)> = css_ids(&out, B)
        .into_iter()
        .filter(|(t, _)| *t > at(500.0))
        .collect();
    assert_eq!(
        b[0],
        (at(601.1), 510),
        "at its first check, not at the start"
    );
    assert!(b.iter().all(|(_, id)| *id == 510), "{b:?}");
    assert!(!css_ids(&out, B)
        .iter()
        .any(|(t, id)| *t > at(400.0) && *id == 503));
}

/// R-REG-1: cc-b cannot enter LHC mode (no StoreFront traffic) and waits in pending_ha;
/// it does not pull the VDA back to the cloud: only the detection gap keeps it there.
#[test]
fn r_reg_1_a_pending_connector_never_pulls_vdas_off_the_lhc_broker() {
    let out = run("r-reg-1-pending");
    let regs: Vec<(Ts, &str, bool, Option<Reason>)> = registrations(&out, M1)
        .iter()
        .map(|r| (r.ts, r.connector.as_str(), r.accepted, r.reason))
        .collect();
    assert_eq!(
        regs,
        vec![
            (at(30.0), "cloud", true, None),
            // 90 s: both pending_ha, the detection gap: it stays with the cloud (silent).
            (at(400.0), "cloud", false, Some(Reason::CloudUnreachable)),
            (at(400.0), A, true, None),
        ]
    );
    assert_eq!(
        ineligible_reasons(&out, B),
        vec![(at(121.1), IneligibleReason::NoStorefrontTraffic)]
    );
    assert_eq!(chose(&out, "r1").0, A);
}

/// R-ELECT-4, R-REG-2: split brain with launches through both brokers.
#[test]
fn r_elect_4_split_brain_launches_through_the_second_broker_fail() {
    let out = run("r-elect-4-split-brain-launches");
    assert_eq!(events(&out, A, 3502)[0].ts, at(121.0));
    assert_eq!(events(&out, B, 3502)[0].ts, at(121.1));
    for m in [M1, M2] {
        let regs = registrations(&out, m);
        let accepted: Vec<&str> = regs
            .iter()
            .filter(|r| r.accepted)
            .map(|r| r.connector.as_str())
            .collect();
        assert_eq!(accepted.last(), Some(&A), "{m}: the first in FQDN order");
    }
    assert_eq!(chose(&out, "r-a").0, A);
    assert_eq!(
        refused(&out, "r-b"),
        (Via::Lhc, Reason::NoRegisteredMachine)
    );
}

/// R-STATE-4: the StoreFront condition is the DaaS profile's; Service Continuity lifts it.
#[test]
fn r_state_4_storefront_traffic_is_needed_only_in_daas_without_service_continuity() {
    let out = run("r-state-4-daas-only");
    assert_eq!(
        ineligible_reasons(&out, A),
        vec![(at(121.0), IneligibleReason::NoStorefrontTraffic)]
    );
    // Version 2 (imported at 601 s) enables Service Continuity: the next outage enters LHC
    // mode without any StoreFront traffic.
    assert!(transitions(&out, A).contains(&(at(881.0), PendingHa, InitialHa, OutageConfirmed)));
    // On-premises: no StoreFront heartbeat at all, and LHC mode all the same.
    let onprem = run("r-launch-6-onprem");
    assert!(ineligible_reasons(&onprem, A).is_empty());
    assert!(transitions(&onprem, A).contains(&(at(181.0), PendingHa, InitialHa, OutageConfirmed)));
}

/// R-LAUNCH-6, profile "onprem": only pooled groups that shut machines down after use are
/// unavailable in an outage.
#[test]
fn r_launch_6_onprem_concerns_only_groups_that_shut_down_after_use() {
    let out = run("r-launch-6-onprem");
    assert_eq!(chose(&out, "r-keep").0, A);
    assert_eq!(
        refused(&out, "r-shut"),
        (Via::Lhc, Reason::PooledUnavailableInOutage)
    );
}

/// §6.2: the cloud broker picks the registered machine with the fewest sessions site-wide,
/// the preferred zone first, ties in FQDN order; a static user without an assignment gets
/// the first free machine of the group in FQDN order across zones.
#[test]
fn launch_cloud_brokering_is_site_wide() {
    let out = run("launch-cloud-site-wide");
    let machine = |r: &str| decision(&out, r).machine.clone().unwrap();
    assert_eq!(
        machine("r1"),
        "m2.z2.example",
        "fewest sessions, another zone"
    );
    assert_eq!(machine("r2"), "m1.z1.example", "a tie: FQDN order");
    assert_eq!(
        machine("r3"),
        "m2.z2.example",
        "the preferred zone over fewer sessions"
    );
    let r4 = decision(&out, "r4");
    assert_eq!(
        (r4.machine.as_deref(), r4.new_assignment),
        (Some("s-a.z2.example"), Some(true)),
        "FQDN order across zones, whatever the preferred zone"
    );
    assert_eq!(
        machine("r5"),
        "m1.z1.example",
        "the preferred zone across the resource's groups, not the first group listed"
    );
}

/// A launch the VDA never reports stops counting at its 120 s deadline.
#[test]
fn launch_pending_launches_expire_at_their_deadline() {
    let out = run("launch-pending-expiry");
    assert_eq!(chose(&out, "r1").1, "vda-3.z1.example");
    assert_eq!(refused(&out, "r2"), (Via::Cloud, Reason::MachineCapacity));
    assert_eq!(chose(&out, "r3").1, "vda-3.z1.example");
}

/// R-CSS-3: LHC mode started during the import and ended before it completed: 507, and
/// the previous snapshot stays in use.
#[test]
fn r_css_3_an_import_overlapping_an_episode_is_abandoned_even_after_it_ended() {
    let (out, engine) = run_engine("r-css-3-episode-ended");
    assert!(css_ids(&out, A).contains(&(at(901.0), 507)));
    assert!(!css_ids(&out, A).contains(&(at(901.0), 504)));
    assert_eq!(
        transitions(&out, A).last().unwrap().2,
        WorkingNormally,
        "LHC mode was over by then"
    );
    assert_eq!(engine.connectors()[A].snapshot(), Some(1));
    assert_eq!(engine.snapshot_of(A).unwrap().version, 1);
}

/// R-ELECT-1
#[test]
fn r_elect_1_candidates_are_self_and_peers_with_fresh_ok_probes() {
    let out = run("r-elect-1");
    let view = events(&out, B, 3504)
        .last()
        .map(|e| e.data.clone())
        .unwrap();
    match view {
        EventData::ElectionView(v) => {
            assert_eq!(
                v.candidates,
                vec![B.to_string(), C.to_string()],
                "cc-a no longer probed by cc-b"
            );
            assert_eq!(v.elected.as_deref(), Some(B));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        events(&out, B, 3504).last().unwrap().ts,
        at(301.12),
        "120 s after the last ok probe"
    );
}

/// R-LAUNCH-5: "Remote PC machines follow the same rule", whatever their group's kind. In
/// LHC mode (a pooled group of two Remote PC machines, r1 assigned to alice): alice gets
/// her PC, bob (entitled, unassigned) is refused `assignment_required` although r2 is
/// registered and idle; the static group beside it is unchanged.
#[test]
fn r_launch_5_remote_pc_machines_are_their_assigned_users_only() {
    let out = run("r-launch-5-remote-pc");
    assert_eq!(chose(&out, "q1").1, "r1.z1.example");
    assert_eq!(refused(&out, "q2"), (Via::Lhc, Reason::AssignmentRequired));
    assert_eq!(chose(&out, "q3").1, "st1.z1.example");
    assert_eq!(refused(&out, "q5"), (Via::Lhc, Reason::AssignmentRequired));
    // The cloud assigns the first free Remote PC machine to a user without one.
    let cloud = run("r-launch-5-remote-pc-cloud");
    assert_eq!(assigned(&cloud, "q1"), ("r1.z1.example", Some(false)));
    assert_eq!(assigned(&cloud, "q2"), ("r2.z1.example", Some(true)));
}

/// R-LAUNCH-5 with R-LAUNCH-6: an assigned Remote PC in a pooled group that shuts its
/// machines down after use is its user's own PC: the user's logoff in LHC mode does not put
/// it in maintenance, and the next launch gets it again.
#[test]
fn r_launch_5_a_remote_pc_is_not_put_in_maintenance_by_its_users_logoff() {
    let out = run("r-launch-5-remote-pc-logoff");
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::MachineMaintenance(_))),
        "no maintenance"
    );
    assert_eq!(chose(&out, "q1").1, "r1.z1.example");
    assert_eq!(chose(&out, "q2").1, "r1.z1.example");
}

/// R-LAUNCH-5 in a group of pooled machines and Remote PCs: the pooled machines keep
/// their own answers (a full one: `machine_capacity`, not `assignment_required`).
#[test]
fn r_launch_5_a_mixed_group_keeps_its_pooled_reasons() {
    let out = run("r-launch-5-remote-pc-mixed");
    assert_eq!(chose(&out, "q1").1, "m1.z1.example");
    assert_eq!(refused(&out, "q2"), (Via::Lhc, Reason::MachineCapacity));
}

/// R-ELECT-2 with `peer_timeout_s` raised to the largest value a record can hold: "for
/// ever", not a window that wrapped around to nothing.
#[test]
fn r_elect_2_a_peer_timeout_raised_for_ever_keeps_peers() {
    let out = run("r-elect-2-timeout-forever");
    assert_eq!(
        elected_views(&out, C).last(),
        Some(&(at(180.0), Some(A.to_string())))
    );
}

/// R-LAUNCH-2: "resource only in other zones → cross_zone; none registered →
/// no_registered_machine". A resource whose group holds no machine at all is in no other
/// zone: no registered machine, in LHC mode as for the cloud.
#[test]
fn r_launch_2_a_resource_with_no_machine_anywhere_is_not_cross_zone() {
    let out = run("r-launch-2-no-machines");
    assert_eq!(
        refused(&out, "e0"),
        (Via::Cloud, Reason::NoRegisteredMachine)
    );
    assert_eq!(refused(&out, "e1"), (Via::Lhc, Reason::NoRegisteredMachine));
}

/// R-ELECT-2: "recomputed after every record" holds for an `engine.params` that raises
/// `peer_timeout_s`: probes that had aged out (at 123 and 124 s) are within the new window
/// again, so cc-c elects cc-a at once (180 s), and their expiry is due again at their time
/// plus the new timeout (604 s). Before, the peer came back only at cc-c's next record.
#[test]
fn r_elect_2_a_raised_peer_timeout_brings_aged_probes_back_at_once() {
    let out = run("r-elect-2-timeout-raised");
    assert_eq!(
        elected_views(&out, C),
        vec![
            (at(1.0), Some(C.to_string())),
            (at(3.0), Some(B.to_string())),
            (at(4.0), Some(A.to_string())),
            (at(124.0), Some(C.to_string())),
            (at(180.0), Some(A.to_string())),
            (at(604.0), Some(C.to_string())),
        ]
    );
}

/// R-ELECT-2
#[test]
fn r_elect_2_the_first_fqdn_wins_and_views_change_with_3504() {
    let out = run("r-elect-2");
    assert_eq!(
        elected_views(&out, C),
        vec![
            (at(1.0), Some(C.to_string())),
            (at(3.0), Some(B.to_string())),
            (at(4.0), Some(A.to_string())),
            (at(124.0), Some(C.to_string())),
        ]
    );
}

/// R-ELECT-3
#[test]
fn r_elect_3_non_elected_connectors_refuse_registrations() {
    let out = run("r-elect-3");
    let m1 = registrations(&out, M1);
    assert!(m1
        .iter()
        .any(|r| r.connector == B && !r.accepted && r.reason == Some(Reason::NotElected)));
    assert!(m1.iter().any(|r| r.connector == A && r.accepted));
    assert!(!m1.iter().any(|r| r.connector == B && r.accepted));
    let m2 = registrations(&out, M2);
    assert_eq!(
        m2.iter().filter(|r| r.connector == A && r.accepted).count(),
        1
    );
}

/// R-ELECT-4
#[test]
fn r_elect_4_split_brain_both_broker_and_the_vda_picks_the_first() {
    let out = run("r-elect-4");
    assert_eq!(events(&out, A, 3502).len(), 1);
    assert_eq!(
        events(&out, B, 3502).len(),
        1,
        "cc-b cannot reach cc-a and elects itself"
    );
    assert_eq!(elected_views(&out, B).last().unwrap().1.as_deref(), Some(B));
    let m1: Vec<_> = registrations(&out, M1)
        .into_iter()
        .filter(|r| r.accepted && r.connector != "cloud")
        .collect();
    assert_eq!(m1.len(), 1);
    assert_eq!(
        m1[0].connector, A,
        "registered with the first of the brokers in FQDN order"
    );
}

/// R-ELECT-5
#[test]
fn r_elect_5_failover_then_failback_with_registration_churn() {
    let out = run("r-elect-5");
    // cc-a stops at 490 s: cc-b's failed probe at 541.1 s elects cc-b, which starts brokering.
    assert_eq!(events(&out, B, 3502)[0].ts, at(541.12));
    let m1 = registrations(&out, M1);
    assert!(
        m1.iter()
            .any(|r| r.connector == B && r.accepted && r.ts == at(650.0)),
        "VDA re-registers with cc-b"
    );
    // cc-a back at 900 s: the peers elect it again and cc-b drops its registrations.
    assert_eq!(
        elected_views(&out, B).last().unwrap(),
        &(at(901.12), Some(A.to_string()))
    );
    assert!(m1
        .iter()
        .any(|r| r.connector == B && !r.accepted && r.reason == Some(Reason::NotElected)));
}

/// R-REG-1
#[test]
fn r_reg_1_normal_operations_register_with_the_cloud() {
    let out = run("r-reg-1");
    let m1 = registrations(&out, M1);
    assert_eq!(m1.len(), 1, "registered once, not at every heartbeat");
    assert_eq!((m1[0].connector.as_str(), m1[0].accepted), ("cloud", true));
    let unknown = registrations(&out, "vda-unknown.z1.example");
    assert_eq!(unknown[0].reason, Some(Reason::UnknownMachine));
}

/// R-REG-2
#[test]
fn r_reg_2_vdas_register_with_the_elected_broker_at_their_next_heartbeat() {
    let out = run("r-reg-2");
    let m1 = registrations(&out, M1);
    assert_eq!(m1[0].connector, "cloud");
    let lhc = m1.iter().find(|r| r.connector == A).unwrap();
    assert_eq!(
        (lhc.ts, lhc.accepted),
        (at(300.0), true),
        "nothing until the heartbeat after LHC entry"
    );
    let engine_sessions = events(&out, A, 3507)
        .last()
        .map(|e| e.data.clone())
        .unwrap();
    match engine_sessions {
        EventData::ElectedReport(r) => assert_eq!((r.registered_machines, r.sessions), (2, 1)),
        other => panic!("{other:?}"),
    }
}

/// R-REG-3
#[test]
fn r_reg_3_lhc_end_drops_registrations_and_vdas_register_anew() {
    let out = run("r-reg-3");
    let m1 = registrations(&out, M1);
    let drop = m1.iter().find(|r| r.connector == A && !r.accepted).unwrap();
    assert_eq!((drop.ts, drop.reason), (at(1141.0), None));
    assert_eq!(m1.last().unwrap().connector, "cloud");
    assert_eq!(m1.last().unwrap().ts, at(1300.0));
}

/// R-STATE-10: restarted during an outage, a connector whose first check after the start
/// passes still re-enters LHC mode at once at its first *failed* check after the start (no
/// `second_check_s` wait), as SPEC.md words it.
#[test]
fn r_state_10_the_first_failed_check_after_a_restart_in_an_outage_re_enters_at_once() {
    let out = run("r-state-10-restart-checked-ok-first");
    let a: Vec<_> = transitions(&out, "a.ex")
        .into_iter()
        .filter(|t| t.0 >= at(200.0))
        .collect();
    assert_eq!(
        a,
        vec![
            (
                at(200.0),
                ConnectorState::Stopped,
                ConnectorState::WorkingNormally,
                TransitionCause::ConnectorStarted
            ),
            (
                at(240.0),
                ConnectorState::WorkingNormally,
                ConnectorState::PendingHa,
                TransitionCause::HealthCheckFailed
            ),
            (
                at(240.0),
                ConnectorState::PendingHa,
                ConnectorState::InitialHa,
                TransitionCause::OutageConfirmed
            ),
        ]
    );
}

/// R-STATE-4: 3002 once per reason change, not again each time flapping health checks
/// bring a forced connector (kept out by its unforced peer) back to try.
#[test]
fn r_state_4_a_forced_connector_flapping_reports_its_reason_once() {
    let out = run("r-state-4-forced-flapping");
    let reasons: Vec<Ts> = events(&out, "a.ex", 3002).iter().map(|e| e.ts).collect();
    assert_eq!(reasons, vec![at(5.0)]);
    assert!(transitions(&out, "a.ex").len() >= 4, "it flaps");
}

/// R-STATE-4: the same with `no_storefront_traffic` (profile "daas", no StoreFront).
#[test]
fn r_state_4_a_connector_without_storefront_traffic_flapping_reports_its_reason_once() {
    let out = run("r-state-4-flapping-without-storefront");
    let reasons: Vec<Ts> = events(&out, "a.ex", 3002).iter().map(|e| e.ts).collect();
    assert_eq!(reasons, vec![at(80.0)]);
}

/// R-ELECT-2: a connector first named by a probe of its peer imports at that contact and
/// its view is recomputed after the record: one 3504, electing the peer first in FQDN
/// order, not a first one without the probe the record brings.
#[test]
fn r_elect_2_the_view_after_a_first_contact_import_sees_the_record() {
    let out = run("r-elect-2-first-contact-probe");
    let views = elected_views(&out, "b.ex");
    assert_eq!(views[0], (at(1.0), Some("a.ex".to_string())), "{views:?}");
    assert_eq!(views.iter().filter(|(t, _)| *t == at(1.0)).count(), 1);
    match &events(&out, "b.ex", 3504)[0].data {
        EventData::ElectionView(v) => assert_eq!(v.candidates, vec!["a.ex", "b.ex"]),
        other => panic!("{other:?}"),
    }
}

/// R-LAUNCH-8 with R-LAUNCH-5: in LHC mode a static group restricted to a tag does not
/// broker onto the user's assigned machine when it lacks the tag.
#[test]
fn r_launch_8_an_assigned_machine_without_the_tag_is_refused_in_lhc_mode() {
    let out = run("r-launch-8-static-assigned-untagged");
    let q1 = decision(&out, "q1");
    assert_eq!(
        (q1.outcome, q1.via, q1.reason),
        (Outcome::Rejected, Via::Lhc, Some(Reason::TagRestriction))
    );
}

/// R-REG-4
#[test]
fn r_reg_4_machines_missing_from_the_snapshot_are_refused_as_unknown() {
    let out = run("r-reg-4");
    let m3 = registrations(&out, M3);
    assert_eq!(
        (m3[0].connector.as_str(), m3[0].accepted, m3[0].reason),
        (A, false, Some(Reason::UnknownMachine))
    );
    assert!(registrations(&out, M1)
        .iter()
        .any(|r| r.connector == A && r.accepted));
}

/// R-REG-4 (and R-REG-2/3): a machine deleted from the cloud's configuration during LHC
/// mode is still in the elected broker's snapshot: it registers there at its next
/// heartbeat and takes launches; once LHC mode ends the cloud, which no longer knows it,
/// refuses it.
#[test]
fn r_reg_4_a_machine_deleted_in_the_cloud_during_lhc_mode_registers_from_the_snapshot() {
    let out = run("r-reg-4-deleted-in-outage");
    let m2: Vec<(Ts, &str, bool, Option<Reason>)> = registrations(&out, M2)
        .iter()
        .map(|r| (r.ts, r.connector.as_str(), r.accepted, r.reason))
        .collect();
    assert_eq!(
        m2,
        vec![
            (at(305.0), A, true, None),
            (at(1501.0), A, false, None),
            (at(1630.0), "cloud", false, Some(Reason::UnknownMachine)),
        ],
        "no refusal by the cloud while the zone is in LHC mode"
    );
    let l1 = decision(&out, "L1");
    assert_eq!(
        (l1.outcome, l1.machine.as_deref()),
        (Outcome::Brokered, Some(M2))
    );
}

/// R-REG-1/3: a machine registered with the cloud, then deleted from its configuration,
/// leaves the cloud at its next heartbeat (the refusal); added again, it is not brokered
/// onto until a heartbeat registers it again, visibly.
#[test]
fn r_reg_1_a_machine_refused_as_unknown_is_not_registered_until_it_registers_again() {
    let out = run("r-reg-1-deleted-and-added");
    let m2: Vec<(Ts, &str, bool, Option<Reason>)> = registrations(&out, M2)
        .iter()
        .map(|r| (r.ts, r.connector.as_str(), r.accepted, r.reason))
        .collect();
    assert_eq!(
        m2,
        vec![
            (at(5.0), "cloud", true, None),
            (at(15.0), "cloud", false, Some(Reason::UnknownMachine)),
            (at(30.0), "cloud", true, None),
        ]
    );
    let l1 = decision(&out, "L1");
    assert_eq!(
        (l1.outcome, l1.reason),
        (Outcome::Rejected, Some(Reason::NoRegisteredMachine)),
        "added again but not registered again"
    );
    assert_eq!(decision(&out, "L2").machine.as_deref(), Some(M2));
}

/// (time, connector, accepted, reason) of a machine's registration outputs.
fn registration_history(
    outputs: &[Output],
    machine: &str,
) -> Vec<(Ts, String, bool, Option<Reason>)> {
    registrations(outputs, machine)
        .iter()
        .map(|r| (r.ts, r.connector.clone(), r.accepted, r.reason))
        .collect()
}

/// R-REG-2 with §2.1: a machine renamed by case in the configuration during LHC mode (in
/// one change, or deleted then named again by a later one) is the same VDA: it stays
/// registered once with the elected broker, its sessions count once in 3507 and it counts
/// once in 3508, and a reconnect finds its disconnected session under the new id.
#[test]
fn r_reg_2_a_machine_renamed_by_case_in_an_outage_registers_once() {
    let out = run("r-reg-2-renamed-by-case-in-outage");
    for renamed in ["VDA-1.Z1.EXAMPLE", "Vda-2.Z1.Example"] {
        // No second registration under the new spelling: its registration carried over,
        // and the stop drops it once.
        assert_eq!(
            registration_history(&out, renamed),
            vec![(
                at(360.0),
                A.to_string(),
                false,
                Some(Reason::ConnectorStopped)
            )],
            "{renamed}"
        );
    }
    let reports: Vec<(u64, u64)> = events(&out, A, 3507)
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ElectedReport(r) => Some((r.registered_machines, r.sessions)),
            _ => None,
        })
        .collect();
    assert_eq!(reports, vec![(3, 2), (3, 2)]);
    match &events(&out, A, 3508)[0].data {
        EventData::ElectedSummary(s) => assert_eq!(s.registered_machines, 3),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        summary(decision(&out, "q1")),
        brokered(Via::Lhc, "Vda-2.Z1.Example", SessionKind::Reconnect)
    );
}

/// R-REG-1 with §2.1: renamed by case while registered with the cloud and holding a launch
/// not reported yet, a machine keeps its registration (no new one at its next heartbeat)
/// and its load: the launch counts until the VDA reports it under the new id, and a full
/// machine is not offered twice.
#[test]
fn r_reg_1_a_machine_renamed_by_case_keeps_its_registration_and_load() {
    let (out, engine) = run_engine("r-reg-1-renamed-by-case");
    assert!(registration_history(&out, "VDA-1.Z1.EXAMPLE").is_empty());
    assert_eq!(chose(&out, "q2").1, "VDA-1.Z1.EXAMPLE");
    // VDA-1 reported alice's and bob's sessions: full (max_sessions 2).
    assert_eq!(chose(&out, "q3").1, "vda-2.z1.example");
    let mut runtimes: Vec<&str> = engine.machines().keys().map(|k| k.as_str()).collect();
    runtimes.sort_unstable();
    assert_eq!(runtimes, vec!["VDA-1.Z1.EXAMPLE", "vda-2.z1.example"]);
}

/// R-REG-1 with §2.1: deleted, heartbeating in another spelling (refused, a runtime of
/// its own holding only that refusal), then configured again in that spelling: one
/// runtime is left, not two registered with the cloud each holding the session.
#[test]
fn r_reg_1_a_machine_renamed_by_case_after_a_refusal_keeps_one_runtime() {
    let (out, engine) = run_engine("r-reg-1-renamed-by-case-after-refusal");
    let mut spellings: Vec<&str> = engine
        .machines()
        .keys()
        .map(|k| k.as_str())
        .filter(|k| k.eq_ignore_ascii_case("vda-1.z1.example"))
        .collect();
    spellings.sort_unstable();
    assert_eq!(spellings, vec!["vda-1.z1.example"]);
    let runtime = &engine.machines()["vda-1.z1.example"];
    assert_eq!(runtime.sessions().len(), 1);
    assert_eq!(chose(&out, "q1").1, "vda-1.z1.example");
    assert_eq!(refused(&out, "q2"), (Via::Cloud, Reason::MachineCapacity));
}

/// R-REG-1/3: the refusal of a deleted machine whose VDA spells its name in another case
/// ends the cloud registration of the machine's runtime, not of a second one.
#[test]
fn r_reg_1_a_deleted_machine_named_in_another_case_leaves_the_cloud() {
    let out = run("r-reg-1-deleted-named-in-another-case");
    assert_eq!(
        registration_history(&out, M2),
        vec![
            (at(5.0), "cloud".into(), true, None),
            (
                at(15.0),
                "cloud".into(),
                false,
                Some(Reason::UnknownMachine)
            ),
            (at(30.0), "cloud".into(), true, None),
        ]
    );
    assert_eq!(
        decision(&out, "L1").reason,
        Some(Reason::NoRegisteredMachine)
    );
    assert_eq!(decision(&out, "L2").machine.as_deref(), Some(M2));
}

/// R-REG-2/3: a deleted machine that registered with the LHC broker from its snapshot
/// leaves it, visibly, once its zone offers the cloud path again (a connector restarted and
/// checked), and the cloud refuses it; the broker no longer brokers onto it.
#[test]
fn r_reg_3_a_deleted_machine_leaves_the_lhc_broker_when_the_cloud_path_returns() {
    let out = run("r-reg-3-deleted-leaves-lhc-broker");
    let history = registration_history(&out, M2);
    let leave = history.iter().position(|r| r.0 == at(500.0)).unwrap();
    assert_eq!(
        history[leave..],
        [
            (at(500.0), A.to_string(), false, None),
            (
                at(500.0),
                "cloud".into(),
                false,
                Some(Reason::UnknownMachine)
            ),
        ]
    );
    assert_eq!(
        decision(&out, "L1").reason,
        Some(Reason::NoRegisteredMachine)
    );
}

/// R-REG-4: after a failover the elected broker, whose snapshot (imported after the delete)
/// lacks the machine, refuses it `unknown_machine`; the cloud, unreachable, does not.
#[test]
fn r_reg_4_a_deleted_machine_is_refused_by_the_broker_whose_snapshot_lacks_it() {
    let out = run("r-reg-4-deleted-failover");
    let history = registration_history(&out, M2);
    assert!(history.iter().all(|r| r.1 != "cloud"), "{history:?}");
    assert!(history.contains(&(
        at(900.0),
        "cc-b.z1.example".into(),
        false,
        Some(Reason::UnknownMachine)
    )));
    assert_eq!(decision(&out, "L1").machine.as_deref(), Some(M2));
    assert_eq!(
        decision(&out, "L2").reason,
        Some(Reason::NoRegisteredMachine)
    );
}

/// R-REG-2/4: a machine moved to zone 2, then deleted during zone 2's outage, stays with
/// zone 2's broker (whose snapshot holds it there) although a zone-1 connector whose name
/// comes first still has a snapshot from before the move.
#[test]
fn r_reg_4_a_deleted_machine_stays_with_its_broker_when_snapshots_disagree() {
    let out = run("r-reg-4-deleted-snapshots-disagree");
    let d = "cc-d.z2.example";
    assert_eq!(
        registration_history(&out, "vda-9.example"),
        vec![(at(450.0), d.to_string(), true, None)]
    );
    assert_eq!(
        decision(&out, "L1").machine.as_deref(),
        Some("vda-9.example")
    );
}

/// R-REG-1/3: a machine moved to zone 2 and registered with the cloud there, then deleted,
/// is refused by the cloud; a zone-1 broker in LHC mode whose snapshot (older than the
/// move) still has it in zone 1 does not take it: it was deleted from zone 2.
#[test]
fn r_reg_1_a_deleted_machine_is_not_taken_by_a_stale_snapshot_of_another_zone() {
    let out = run("r-reg-1-deleted-stale-snapshot-elsewhere");
    let history = registration_history(&out, "vda-9.example");
    assert!(history.iter().all(|r| r.1 == "cloud"), "{history:?}");
    assert_eq!(
        history.last().map(|r| (r.2, r.3)),
        Some((false, Some(Reason::UnknownMachine)))
    );
    assert_eq!(
        decision(&out, "L1").reason,
        Some(Reason::NoRegisteredMachine)
    );
}

/// R-REG-3 and 3507: a deleted machine with sessions, registered from the snapshot, leaves
/// the broker when the cloud path returns; the broker's session count drops by its
/// sessions (a session event spelled in another case counted among them).
#[test]
fn r_reg_3_a_deleted_machine_leaving_the_broker_takes_its_sessions_out_of_the_count() {
    let out = run("r-reg-3-deleted-leaves-with-sessions");
    let counts: Vec<(u64, u64)> = events(&out, A, 3507)
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ElectedReport(r) => Some((r.registered_machines, r.sessions)),
            _ => None,
        })
        .collect();
    assert!(counts.contains(&(2, 4)), "{counts:?}");
    assert!(counts.contains(&(1, 1)), "{counts:?}");
    assert_eq!(counts.last(), Some(&(0, 0)));
}

/// R-REG-2/4: as `r-reg-4-deleted-snapshots-disagree`, with both zones in LHC mode and the
/// heartbeat after the delete naming the machine in another case.
#[test]
fn r_reg_4_a_deleted_machine_named_in_another_case_stays_with_its_broker() {
    let out = run("r-reg-4-deleted-snapshots-disagree-case");
    let history = registration_history(&out, "vda-9.example");
    assert_eq!(
        history,
        vec![(at(450.0), "cc-d.z2.example".to_string(), true, None)]
    );
    assert_eq!(
        decision(&out, "L1").machine.as_deref(),
        Some("vda-9.example")
    );
}

/// R-REG-2: a machine the cloud refused, then registered with an LHC broker, is refused by
/// the cloud again when it comes back to it still unknown.
#[test]
fn r_reg_2_the_cloud_refuses_an_unknown_machine_again_after_it_registered_elsewhere() {
    let out = run("r-reg-2-unknown-refused-again");
    let refusals: Vec<Ts> = registration_history(&out, M2)
        .into_iter()
        .filter(|r| r.1 == "cloud")
        .map(|r| r.0)
        .collect();
    assert_eq!(refusals, vec![at(40.0), at(1700.0)]);
}

/// R-LAUNCH-3: a session event naming a deleted (snapshot-registered) machine in another
/// case reaches the machine's sessions, so the launch reconnects.
#[test]
fn r_launch_3_a_session_event_in_another_case_reaches_a_deleted_machine() {
    let out = run("r-launch-3-deleted-session-event-case");
    let l1 = decision(&out, "L1");
    assert_eq!(
        (l1.machine.as_deref(), l1.session),
        (Some(M2), Some(SessionKind::Reconnect))
    );
}

/// R-CSS-1
#[test]
fn r_css_1_first_check_at_first_naming_then_every_interval_with_overrides() {
    let out = run("r-css-1");
    let imports: Vec<Ts> = css_ids(&out, A)
        .into_iter()
        .filter(|(_, id)| *id == 504)
        .map(|(t, _)| t)
        .collect();
    // First naming at 100 s; the 60 s override takes effect after the check scheduled at
    // 1000 s; clearing it takes effect after the check scheduled at 1120 s.
    assert_eq!(imports, vec![at(100.0), at(1000.0), at(1120.0), at(1420.0)]);
    let q: Vec<_> = out
        .iter()
        .filter(|o| matches!(o, Output::Quarantine(_)))
        .collect();
    assert_eq!(q.len(), 1, "the 30 s override is out of range");
}

/// R-CSS-2
#[test]
fn r_css_2_checks_report_518_517_510_507_or_import_in_that_order() {
    let out = run("r-css-2");
    let ids: Vec<u32> = css_ids(&out, A).into_iter().map(|(_, id)| id).collect();
    assert_eq!(
        ids,
        vec![503, 504, 518, 518, 517, 510, 510, 507, 507, 503, 504]
    );
    assert!(events(&out, A, 518).iter().all(|e| e.level == Level::Error));
    assert!(events(&out, A, 510)
        .iter()
        .all(|e| e.level == Level::Warning));
}

/// R-CSS-3
#[test]
fn r_css_3_an_import_interrupted_by_lhc_mode_is_abandoned_with_507() {
    let out = run("r-css-3");
    let css = css_ids(&out, A);
    assert_eq!(
        css[..4],
        [
            (at(1.0), 503),
            (at(121.0), 504),
            (at(301.0), 503),
            (at(421.0), 507)
        ]
    );
}

/// R-CSS-3: an import copies the version that was current when it started; a change
/// during the import is the next import's, and its failure is not the first's.
#[test]
fn r_css_3_a_change_during_an_import_is_left_to_the_next_import() {
    let out = run("r-css-3-change-during-import");
    let css = css_ids(&out, A);
    assert_eq!(
        css[..4],
        [
            (at(1.0), 503),
            (at(121.0), 504),
            (at(301.0), 503),
            (at(421.0), 505)
        ]
    );
    let versions: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            Output::Event(e) if e.connector == A && [504, 505].contains(&e.event_id) => {
                match &e.data {
                    EventData::Imported(i) => Some(i.version),
                    EventData::ImportFailed(f) => Some(f.version),
                    other => panic!("{other:?}"),
                }
            }
            _ => None,
        })
        .collect();
    assert_eq!(versions, [1, 2], "version 1 imports; version 2 fails");
    let (_, failed) = &import_failures(&out, A)[0];
    assert_eq!(failed.failures[0].id, "vda-9.z1.example");
    assert_eq!(failed.failures[0].introduced_by.version, Some(2));
}

/// R-CSS-4
#[test]
fn r_css_4_validation_failures_name_object_rule_and_introducing_change() {
    let out = run("r-css-4");
    let failures = import_failures(&out, A);
    let (_, first) = &failures[0];
    assert_eq!(
        first.failures.len(),
        1,
        "without trace mode only the first failure"
    );
    assert_eq!(
        (
            first.failures[0].kind,
            first.failures[0].id.as_str(),
            first.failures[0].rule
        ),
        (
            lhc_engine::config::ObjectKind::Machine,
            "vda-9.z1.example",
            Rule::DanglingReference
        )
    );
    assert_eq!(
        first.failures[0].introduced_by,
        IntroducedBy {
            offset: 5,
            version: Some(2)
        }
    );
    assert_eq!(first.fallback_version, Some(1));
    let (_, traced) = &failures[1];
    let rules: Vec<Rule> = traced.failures.iter().map(|f| f.rule).collect();
    assert_eq!(
        rules,
        vec![
            Rule::HeartbeatPeriodOutOfRange,
            Rule::DuplicateId,
            Rule::MaxSessionsZero,
            Rule::DanglingReference,
            Rule::AssignmentNotStatic
        ]
    );
    // Each failure says what is wrong in words an admin can act on.
    assert_eq!(first.failures[0].detail, "zone z9 does not exist");
    let details: Vec<&str> = traced.failures.iter().map(|f| f.detail.as_str()).collect();
    assert!(
        details[0].starts_with("heartbeat_period_ms 10 is outside"),
        "{details:?}"
    );
    assert!(
        details[1].starts_with("machine VDA-1.Z1.EXAMPLE collides with vda-1.z1.example"),
        "{details:?}"
    );
    assert!(details[2].starts_with("max_sessions is 0"), "{details:?}");
    assert!(
        details[4].contains("multi_session group and not remote_pc"),
        "{details:?}"
    );
    // A reference left dangling by a delete was introduced by that delete.
    let (_, v4) = &failures[2];
    let entitlement = v4.failures.iter().find(|f| f.id == "e1").unwrap();
    assert_eq!(entitlement.introduced_by.version, Some(4));
    assert_eq!(
        entitlement.detail,
        format!(
            "resource app does not exist (deleted by the change at offset {})",
            entitlement.introduced_by.offset
        )
    );
    // A storage fault fails the next import, then is gone.
    let (_, fault) = failures.last().unwrap();
    assert_eq!(fault.failures[0].rule, Rule::StorageFault);
    assert!(fault.failures[0].detail.contains("local store failed"));
    assert_eq!(fault.fallback_version, Some(5));
    assert_eq!(css_ids(&out, A).last().unwrap().1, 504);
}

/// A failure of a 505 as (kind, id, rule, offset of the change that introduced it).
type FailureKey = (String, String, Rule, u64);

/// The key of each failure of a 505.
fn failure_keys(failed: &ImportFailed) -> Vec<FailureKey> {
    failed
        .failures
        .iter()
        .map(|f| {
            (
                f.kind.to_string(),
                f.id.clone(),
                f.rule,
                f.introduced_by.offset,
            )
        })
        .collect()
}

/// R-CSS-4: an assignment that a change to its machine or the machine's group makes
/// invalid fails at that version, and its detail names the offset of that change (its
/// `introduced_by` stays the assignment's write, for `whatif --without-bad-changes`).
#[test]
fn r_css_4_assignment_broken_by_its_machine_or_group() {
    let out = run("r-css-4-assignment-broken-by-machine");
    let failures = import_failures(&out, A);
    let seen: Vec<(u64, Option<u64>, Vec<FailureKey>)> = failures
        .iter()
        .map(|(_, f)| (f.version, f.fallback_version, failure_keys(f)))
        .collect();
    let not_static = |id: &str, offset| {
        vec![(
            "assignment".to_string(),
            id.to_string(),
            Rule::AssignmentNotStatic,
            offset,
        )]
    };
    assert_eq!(
        seen,
        vec![
            // v2 (offset 3) moves the assigned machine into a multi-session group.
            (2, Some(1), not_static("as1", 1)),
            // v4 (offset 7) turns the machine's static group into a pooled one.
            (4, Some(3), not_static("as1", 1)),
            // v5 deletes the group of a Remote PC machine: the machine's reference.
            (
                5,
                Some(3),
                vec![(
                    "machine".to_string(),
                    "vda-2.z1.example".to_string(),
                    Rule::DanglingReference,
                    9
                )]
            ),
            // v7 (offset 13) clears remote_pc on a machine of a multi-session group.
            (7, Some(6), not_static("as2", 9)),
        ]
    );
    // The detail names the change that broke each.
    let details: Vec<&str> = failures
        .iter()
        .filter(|(_, f)| f.failures[0].rule == Rule::AssignmentNotStatic)
        .map(|(_, f)| f.failures[0].detail.as_str())
        .collect();
    for (detail, offset) in details.iter().zip([3, 7, 13]) {
        assert!(
            detail.ends_with(&format!(
                "(its machine or delivery group last changed at offset {offset})"
            )),
            "{detail}"
        );
    }
    // Each failure's change is one the connector did not import.
    let imported: Vec<u32> = css_ids(&out, A).iter().map(|(_, id)| *id).collect();
    assert_eq!(imported.iter().filter(|id| **id == 504).count(), 3);
}

/// R-CSS-4: with CSS trace every failure is listed — each dangling reference of an object
/// on its own, and an assignment's machine that cannot be assigned even when its user is
/// missing too; without trace only the first.
#[test]
fn r_css_4_trace_lists_every_failure() {
    let out = run("r-css-4-trace-lists-every-failure");
    let failures = import_failures(&out, A);
    assert_eq!(failures.len(), 2);
    let (_, traced) = &failures[0];
    let details: Vec<(&str, Rule, &str)> = traced
        .failures
        .iter()
        .map(|f| (f.id.as_str(), f.rule, f.detail.as_str()))
        .collect();
    use Rule::{AssignmentNotStatic as NotStatic, DanglingReference as Dangling};
    assert_eq!(
        details,
        vec![
            ("vda-9.z1.example", Dangling, "zone z9 does not exist"),
            (
                "vda-9.z1.example",
                Dangling,
                "delivery_group dg-none does not exist"
            ),
            ("app", Dangling, "delivery_group dg-x does not exist"),
            ("app", Dangling, "delivery_group dg-y does not exist"),
            ("e1", Dangling, "resource nores does not exist"),
            ("e1", Dangling, "user or group nobody does not exist"),
            ("e1", Dangling, "user or group noone does not exist"),
            ("as2", Dangling, "user nobody does not exist"),
            (
                "as2",
                NotStatic,
                "machine vda-2.z1.example is in a multi_session group and not remote_pc: \
                 only machines of a single_session_static group or Remote PC machines can be \
                 assigned"
            ),
        ]
    );
    // Trace off: the same version lists its first failure only.
    let (_, first) = &failures[1];
    assert_eq!(first.failures.len(), 1);
    assert_eq!(first.failures[0], traced.failures[0]);
}

/// R-CSS-4: of two storage faults before one import, the first introduced the failure;
/// the import consumes both (the next import succeeds).
#[test]
fn r_css_4_two_storage_faults_name_the_first() {
    let out = run("r-css-4-two-storage-faults");
    let failures = import_failures(&out, A);
    assert_eq!(failures.len(), 1);
    let fault = &failures[0].1.failures[0];
    assert_eq!(
        (fault.rule, fault.introduced_by.offset),
        (Rule::StorageFault, 4)
    );
    assert!(fault.detail.contains("(first)"), "{}", fault.detail);
    assert_eq!(css_ids(&out, A).last().unwrap().1, 504);
}

/// R-CSS-4 with R-STATE-10: a connector whose snapshot a restart made unusable has no
/// last-known-good to fall back on: its 505s say `fallback_version` null.
#[test]
fn r_css_4_unusable_snapshot_is_no_fallback() {
    let out = run("r-css-4-unusable-snapshot-fallback");
    let failures = import_failures(&out, A);
    assert!(!failures.is_empty());
    for (_, failed) in &failures {
        assert_eq!(failed.fallback_version, None);
    }
    let message = &events(&out, A, 505)[0].message;
    assert!(
        message.ends_with("keeping no usable configuration"),
        "{message}"
    );
}

/// R-CSS-5
#[test]
fn r_css_5_admin_commands_change_what_they_name() {
    let out = run("r-css-5");
    let log = std::fs::read_to_string(dir().join("r-css-5.jsonl")).unwrap();
    let mut engine = Engine::new();
    let mut sink = Vec::new();
    for (offset, line) in log.lines().enumerate() {
        let record = lhc_engine::decode_record(line.as_bytes()).unwrap();
        if record.ts() > at(125.0) && engine.connectors()[A].ha_sdk() {
            let a = &engine.connectors()[A];
            assert!(a.css_trace() && a.sync_override_s() == Some(120));
        }
        engine.apply(offset as u64, Ok(record), &mut sink);
    }
    let a = &engine.connectors()[A];
    assert!(!a.ha_sdk() && !a.css_trace() && a.sync_override_s().is_none() && !a.forced());
    assert_eq!(transitions(&out, B)[0].3, ForcedOutageEnabled);
    match (
        &events(&out, B, 3003)[0].data,
        &events(&out, A, 3003)[0].data,
    ) {
        (EventData::Transition(b), EventData::Transition(a)) => {
            // cc-b forced alone waits (3002 forced_on_subset); forcing cc-a, the last of the
            // zone, brings both in at that record, cc-a first (R-STATE-8).
            assert_eq!(
                (a.cause, b.cause),
                (ForcedOutageEnabled, ForcedOutageEnabled)
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ineligible_reasons(&out, B),
        vec![(at(130.0), IneligibleReason::ForcedOnSubset)]
    );
    assert_eq!(transitions(&out, B)[0].0, at(131.0));
    assert_eq!(transitions(&out, A)[2].3, ForcedOutageDisabled);
}

/// Each quarantine's offset and error, in order.
fn quarantines(out: &[Output]) -> Vec<(u64, &str)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Quarantine(q) => Some((q.offset, q.error.as_str())),
            _ => None,
        })
        .collect()
}

/// R-LOG-4
#[test]
fn r_log_4_records_that_cannot_apply_are_quarantined_and_change_nothing() {
    let out = run("r-log-4");
    let q = quarantines(&out);
    assert_eq!(
        q.iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![2, 3, 4, 5, 6, 7, 8, 9]
    );
    assert!(q[0].1.contains("field `ts`"));
    assert!(q[1].1.contains("field `connector`"));
    // The failed check at offset 2 was quarantined: the only 3001 is the one at 20 s.
    assert_eq!(events(&out, A, 3001).len(), 1);
    assert_eq!(events(&out, A, 3001)[0].ts, at(20.0));
}

#[test]
fn outage_with_three_connectors_failover_failback_and_recovery() {
    let out = run("outage-3-connectors");
    // Outage 1: cloud lost at 600 s; pending_ha at the first failure, LHC 60 s later.
    for (c, o) in [(A, 0.0), (B, 0.1), (C, 0.2)] {
        let t = transitions(&out, c);
        assert_eq!(
            t[0],
            (at(601.0 + o), WorkingNormally, PendingHa, HealthCheckFailed),
            "{c}"
        );
        assert_eq!(
            t[1],
            (at(661.0 + o), PendingHa, InitialHa, OutageConfirmed),
            "{c}"
        );
        assert_eq!(
            t[2],
            (at(961.0 + o), InitialHa, ExtendedHa, InitialHaElapsed),
            "{c}"
        );
    }
    // The alphabetically first is elected and brokers; the others report 3509.
    assert_eq!(events(&out, A, 3502)[0].ts, at(661.0));
    assert!(events(&out, B, 3509).iter().any(|e| e.ts == at(781.1)));
    assert!(registrations(&out, M1)
        .iter()
        .any(|r| r.connector == A && r.accepted && r.ts == at(930.0)));
    // cc-a stopped at 1190 s: 3508, registrations dropped; failover to cc-b at its next probe.
    assert_eq!(events(&out, A, 3508)[0].ts, at(1190.0));
    assert_eq!(events(&out, B, 3502)[0].ts, at(1201.12));
    assert!(registrations(&out, M1)
        .iter()
        .any(|r| r.connector == B && r.accepted && r.ts == at(1230.0)));
    // cc-a restarted at 1500 s during the outage (stopped in LHC mode): peers elect it again
    // and its snapshot stays usable (R-STATE-10). Its first check after the start fails, but
    // the stop cleared its StoreFront history, so it waits for StoreFront traffic; the next
    // failed check brings it back: failback, and the VDAs re-register with it.
    assert_eq!(
        elected_views(&out, B)
            .iter()
            .find(|v| v.0 > at(1500.0))
            .unwrap()
            .1
            .as_deref(),
        Some(A)
    );
    assert_eq!(
        ineligible_reasons(&out, A)[0],
        (at(1501.0), IneligibleReason::NoStorefrontTraffic)
    );
    assert_eq!(events(&out, A, 3502)[1].ts, at(1561.0));
    assert!(registrations(&out, M1)
        .iter()
        .any(|r| r.connector == A && r.accepted && r.ts == at(1830.0)));
    // Cloud back at 2400 s: pending recovery, then normal 600 s later; non-elected: 3510.
    assert_eq!(
        transitions(&out, B)[3],
        (at(2401.1), ExtendedHa, PendingRecovery, HealthCheckOk)
    );
    assert_eq!(
        transitions(&out, B)[4],
        (
            at(3001.1),
            PendingRecovery,
            WorkingNormally,
            RecoveryPeriodElapsed
        )
    );
    assert_eq!(events(&out, B, 3510)[0].ts, at(3001.1));
    // Outage 2 (4800 s): cc-a elected again; its HA service restarts: failover to cc-b, then
    // failback to cc-a with VDAs re-registering; on recovery 3503 + 3508 on cc-a.
    assert_eq!(events(&out, A, 3502)[2].ts, at(4861.0));
    assert_eq!(events(&out, B, 3502)[1].ts, at(5401.12));
    assert_eq!(events(&out, A, 3502)[3].ts, at(5700.0));
    assert!(registrations(&out, M1)
        .iter()
        .any(|r| r.connector == A && r.accepted && r.ts == at(5730.0)));
    let e3503 = events(&out, A, 3503);
    assert_eq!(e3503.len(), 2, "after the failback, and after outage 2");
    assert_eq!(e3503[1].ts, at(7201.0));
    match &events(&out, A, 3508).last().unwrap().data {
        EventData::ElectedSummary(s) => {
            assert_eq!((s.outage_duration_s, s.registered_machines), (2340, 3));
            assert_eq!(s.ended_by, EndedBy::NormalOperations);
        }
        other => panic!("{other:?}"),
    }
    match &events(&out, A, 3507).last().unwrap().data {
        EventData::ElectedReport(r) => assert_eq!((r.registered_machines, r.sessions), (3, 2)),
        other => panic!("{other:?}"),
    }
    assert_eq!(events(&out, C, 3510).len(), 2);
    assert!(registrations(&out, M1).last().unwrap().connector == "cloud");
}

// ----- brokering (R-LAUNCH) -------------------------------------------------------------

const MM1: &str = "m-multi-1.z1.example";
const MM2: &str = "m-multi-2.z1.example";

fn decision<'a>(outputs: &'a [Output], request: &str) -> &'a LaunchDecision {
    let found: Vec<&LaunchDecision> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::LaunchDecision(d) if d.request == request => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 1, "exactly one decision for {request}");
    found[0]
}

/// (outcome, via, machine, session, reason) of a decision, for compact assertions.
fn summary(
    d: &LaunchDecision,
) -> (
    Outcome,
    Via,
    Option<&str>,
    Option<SessionKind>,
    Option<Reason>,
) {
    (d.outcome, d.via, d.machine.as_deref(), d.session, d.reason)
}

fn brokered(
    via: Via,
    machine: &str,
    session: SessionKind,
) -> (
    Outcome,
    Via,
    Option<&str>,
    Option<SessionKind>,
    Option<Reason>,
) {
    (Outcome::Brokered, via, Some(machine), Some(session), None)
}

/// (connector, machine) of a brokered decision.
fn chose<'a>(outputs: &'a [Output], request: &str) -> (&'a str, &'a str) {
    let d = decision(outputs, request);
    assert_eq!(d.outcome, Outcome::Brokered, "{d:?}");
    (d.connector.as_str(), d.machine.as_deref().unwrap())
}

/// (machine, new_assignment) of a brokered decision.
fn assigned<'a>(outputs: &'a [Output], request: &str) -> (&'a str, Option<bool>) {
    let d = decision(outputs, request);
    (d.machine.as_deref().unwrap_or_default(), d.new_assignment)
}

/// (via, reason) of a rejected decision.
fn refused(outputs: &[Output], request: &str) -> (Via, Reason) {
    let d = decision(outputs, request);
    assert_eq!(d.outcome, Outcome::Rejected, "{d:?}");
    (d.via, d.reason.unwrap())
}

fn rejected(
    via: Via,
    reason: Reason,
) -> (
    Outcome,
    Via,
    Option<&'static str>,
    Option<SessionKind>,
    Option<Reason>,
) {
    (Outcome::Rejected, via, None, None, Some(reason))
}

/// R-LAUNCH-1
#[test]
fn r_launch_1_unknown_resources_and_unentitled_users_are_rejected_in_both_modes() {
    let out = run("r-launch-1");
    for (mode, via) in [("cloud", Via::Cloud), ("lhc", Via::Lhc)] {
        assert_eq!(
            summary(decision(&out, &format!("{mode}-ok"))),
            brokered(via, MM1, SessionKind::New)
        );
        assert_eq!(
            summary(decision(&out, &format!("{mode}-unknown"))),
            rejected(via, Reason::UnknownResource)
        );
        assert_eq!(
            summary(decision(&out, &format!("{mode}-not-entitled"))),
            rejected(via, Reason::NotEntitled)
        );
        // Resource ids resolve case-insensitively; dave is entitled directly, not by group.
        assert_eq!(
            decision(&out, &format!("{mode}-dave")).outcome,
            Outcome::Brokered
        );
    }
}

/// R-LAUNCH-2
#[test]
fn r_launch_2_lhc_uses_only_registered_machines_of_its_zone_not_in_maintenance() {
    let out = run("r-launch-2");
    // m-multi-1 is in maintenance: never chosen.
    assert_eq!(
        summary(decision(&out, "cloud-multi")),
        brokered(Via::Cloud, MM2, SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "cloud-z2")),
        brokered(Via::Cloud, "m-z2-1.z2.example", SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-before-registration")),
        rejected(Via::Lhc, Reason::NoRegisteredMachine)
    );
    assert_eq!(
        summary(decision(&out, "lhc-multi")),
        brokered(Via::Lhc, MM2, SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-z2")),
        rejected(Via::Lhc, Reason::CrossZone)
    );
}

/// R-LAUNCH-3
#[test]
fn r_launch_3_reconnect_first_except_in_the_re_registration_gap() {
    let out = run("r-launch-3");
    assert_eq!(
        summary(decision(&out, "cloud-reconnect")),
        brokered(Via::Cloud, MM1, SessionKind::Reconnect)
    );
    // m-multi-1 (with alice's disconnected session) has not re-registered yet: a new session.
    assert_eq!(
        summary(decision(&out, "lhc-gap-new-session")),
        brokered(Via::Lhc, MM2, SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-reconnect")),
        brokered(Via::Lhc, MM1, SessionKind::Reconnect)
    );
}

/// R-LAUNCH-4 with a leftover runtime: a heartbeat named `P-B.Z1.example` before any such
/// machine was configured left a runtime of that (unknown) name; the configured machine is
/// `p-b.z1.example`, another object. The leftover must not take p-b's rank into the pool of
/// powered-off machines: after a change re-placed every machine it did, and carol's launch
/// went to p-b, single-session and busy, instead of the idle p-d (or, where that pool was
/// gone, the engine panicked).
#[test]
fn r_launch_4_a_runtime_named_in_another_case_takes_no_configured_machines_rank() {
    let out = run("r-launch-4-case-twin");
    assert_eq!(
        summary(decision(&out, "L1")),
        brokered(Via::Cloud, "p-c.z1.example", SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "L2")),
        brokered(Via::Cloud, "p-d.z1.example", SessionKind::New)
    );
}

/// R-LAUNCH-4 (and R-REG-4) for a machine renamed by case in the cloud during an outage:
/// the connector's snapshot still names it `M-A.z1.example`, the cloud now
/// `m-a.z1.example`, and its heartbeat registers it (under the current id) with the LHC
/// broker, which must offer it: it is the machine its snapshot's entry stands for.
#[test]
fn r_launch_4_a_machine_renamed_by_case_is_offered_from_the_older_snapshot() {
    let out = run("r-launch-4-renamed-by-case");
    assert_eq!(
        summary(decision(&out, "L1")),
        brokered(Via::Lhc, "M-A.z1.example", SessionKind::New)
    );
}

/// R-LAUNCH-5 for an assigned machine renamed by case in the cloud during an outage: the
/// connector's snapshot assigns `S-A.z1.example`, the cloud now names it `s-a.z1.example`,
/// and its heartbeat registers it with the LHC broker, which must give alice her machine
/// (it looked for the runtime under the snapshot's id and refused
/// `no_registered_machine`).
#[test]
fn r_launch_5_an_assigned_machine_renamed_by_case_is_still_its_users() {
    let out = run("r-launch-5-static-renamed-by-case");
    assert_eq!(
        summary(decision(&out, "L1")),
        brokered(Via::Lhc, "S-A.z1.example", SessionKind::New)
    );
}

/// R-LAUNCH-4 across a configuration change that moves every machine's rank (a machine
/// added first in FQDN order): the pools order machines by rank, and re-placing them one by
/// one after the change dropped m-b from its pool (taken out as m-c's old rank), so the
/// launch went to m-c.
#[test]
fn r_launch_4_fewest_sessions_still_wins_after_a_change_moves_every_rank() {
    let out = run("r-launch-4-ranks-move");
    assert_eq!(
        summary(decision(&out, "before-change")),
        brokered(Via::Cloud, "m-c.z1.example", SessionKind::New)
    );
    // m-b (bob's session) and m-c (alice's launch, not yet reported) hold one each, m-a
    // never registered: the tie goes to m-b in FQDN order.
    assert_eq!(
        summary(decision(&out, "after-change")),
        brokered(Via::Cloud, "m-b.z1.example", SessionKind::New)
    );
}

/// R-LAUNCH-4
#[test]
fn r_launch_4_multi_session_picks_the_fewest_sessions_then_fqdn_and_knows_capacity() {
    let out = run("r-launch-4");
    assert_eq!(
        summary(decision(&out, "cloud-fewest")),
        brokered(Via::Cloud, MM2, SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "cloud-tie")),
        brokered(Via::Cloud, MM1, SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-fewest")),
        brokered(Via::Lhc, MM2, SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-tie")),
        brokered(Via::Lhc, MM1, SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-last-room")),
        brokered(Via::Lhc, MM2, SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-full")),
        rejected(Via::Lhc, Reason::MachineCapacity)
    );
}

/// R-LAUNCH-5
#[test]
fn r_launch_5_static_machines_need_an_assignment_made_in_normal_operations() {
    let out = run("r-launch-5");
    let assigned = decision(&out, "cloud-assigned");
    assert_eq!(
        summary(assigned),
        brokered(Via::Cloud, "m-static-1.z1.example", SessionKind::New)
    );
    assert_eq!(assigned.new_assignment, Some(false));
    let fresh = decision(&out, "cloud-new-assignment");
    assert_eq!(
        summary(fresh),
        brokered(Via::Cloud, "m-static-2.z1.example", SessionKind::New)
    );
    assert_eq!(
        fresh.new_assignment,
        Some(true),
        "the cloud assigns the first free machine"
    );
    assert_eq!(
        summary(decision(&out, "cloud-none-free")),
        rejected(Via::Cloud, Reason::MachineCapacity)
    );
    let lhc = decision(&out, "lhc-assigned");
    assert_eq!(
        summary(lhc),
        brokered(Via::Lhc, "m-static-1.z1.example", SessionKind::New)
    );
    assert_eq!(
        lhc.new_assignment, None,
        "new_assignment is a cloud-only field"
    );
    // bob's assignment was made by the cloud and never recorded in a config.change.
    assert_eq!(
        summary(decision(&out, "lhc-assignment-required")),
        rejected(Via::Lhc, Reason::AssignmentRequired)
    );
}

/// R-LAUNCH-6
#[test]
fn r_launch_6_pooled_machines_in_an_outage_and_maintenance_after_a_pooled_logoff() {
    let out = run("r-launch-6");
    assert_eq!(
        summary(decision(&out, "cloud-pooled")),
        brokered(Via::Cloud, "m-pool-1.z1.example", SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-pooled")),
        rejected(Via::Lhc, Reason::PooledUnavailableInOutage)
    );
    assert_eq!(
        summary(decision(&out, "lhc-reuse-group-only")),
        rejected(Via::Lhc, Reason::PooledUnavailableInOutage),
        "the group allows reuse but the site does not"
    );
    let marks: Vec<(Ts, bool, MaintenanceReason)> = out
        .iter()
        .filter_map(|o| match o {
            Output::MachineMaintenance(m) if m.machine == "m-pool-1.z1.example" => {
                Some((m.ts, m.on, m.reason))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        marks,
        vec![
            (at(900.0), true, MaintenanceReason::PooledLogoffInOutage),
            (at(2101.0), false, MaintenanceReason::OutageEnded)
        ]
    );
    let out = run("r-launch-6-reuse");
    assert_eq!(
        summary(decision(&out, "lhc-reuse-allowed")),
        brokered(Via::Lhc, "m-reuse-1.z1.example", SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-pooled-group-flag-off")),
        rejected(Via::Lhc, Reason::PooledUnavailableInOutage)
    );
}

/// R-LAUNCH-7
#[test]
fn r_launch_7_session_limits_count_only_sessions_the_broker_knows() {
    let out = run("r-launch-7");
    // alice's session on m-limit-2 (zone 2) counts for the cloud, not for cc-a in LHC mode.
    assert_eq!(
        summary(decision(&out, "cloud-limit-site-wide")),
        rejected(Via::Cloud, Reason::SessionLimit)
    );
    assert_eq!(
        summary(decision(&out, "cloud-bob")),
        brokered(Via::Cloud, "m-limit-1.z1.example", SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "lhc-limit-own-sessions-only")),
        brokered(Via::Lhc, "m-limit-1.z1.example", SessionKind::New)
    );
    // The session it just brokered counts before the VDA reports it.
    assert_eq!(
        summary(decision(&out, "lhc-limit-reached")),
        rejected(Via::Lhc, Reason::SessionLimit)
    );
}

/// R-LAUNCH-8
#[test]
fn r_launch_8_tag_restrictions_apply_and_zone_preference_is_ignored_in_lhc_mode() {
    let out = run("r-launch-8");
    assert_eq!(
        summary(decision(&out, "cloud-tag")),
        brokered(Via::Cloud, "m-tag-2.z1.example", SessionKind::New)
    );
    assert_eq!(
        summary(decision(&out, "cloud-preference")),
        brokered(Via::Cloud, "m-span-2.z2.example", SessionKind::New),
        "the cloud prefers the resource's zone"
    );
    assert_eq!(
        summary(decision(&out, "lhc-tag-restriction")),
        rejected(Via::Lhc, Reason::TagRestriction)
    );
    assert_eq!(
        summary(decision(&out, "lhc-preference-ignored")),
        brokered(Via::Lhc, "m-span-1.z1.example", SessionKind::New)
    );
}

/// R-LAUNCH-9
#[test]
fn r_launch_9_a_stopped_connector_rejects_every_launch() {
    let out = run("r-launch-9");
    assert_eq!(
        summary(decision(&out, "cloud-stopped")),
        rejected(Via::Cloud, Reason::ConnectorStopped)
    );
    assert_eq!(
        summary(decision(&out, "lhc-stopped")),
        rejected(Via::Cloud, Reason::ConnectorStopped)
    );
    assert_eq!(decision(&out, "lhc-elected").outcome, Outcome::Brokered);
}

#[test]
fn launches_in_the_detection_gap_say_why_they_fail() {
    let out = run("launch-detection-gap");
    assert_eq!(
        summary(decision(&out, "gap-a")),
        rejected(Via::Cloud, Reason::CloudUnreachable)
    );
    assert_eq!(
        summary(decision(&out, "gap-b-no-ha")),
        rejected(Via::Cloud, Reason::HaServiceNotRunning)
    );
    assert_eq!(
        summary(decision(&out, "lhc-a")),
        rejected(Via::Lhc, Reason::NoRegisteredMachine)
    );
}

/// Replays a scenario and returns the engine as it stands after the record at `until`
/// (an offset), for tests that query state rather than outputs.
fn engine_after(name: &str, until_ts: Ts) -> Engine {
    let log = std::fs::read_to_string(dir().join(format!("{name}.jsonl"))).unwrap();
    let mut engine = Engine::new();
    let mut sink = Vec::new();
    for (offset, line) in log.lines().enumerate() {
        let record = lhc_engine::decode_record(line.as_bytes()).unwrap();
        if record.ts() > until_ts {
            break;
        }
        engine.apply(offset as u64, Ok(record), &mut sink);
    }
    engine
}

/// R-DATA
#[test]
fn r_data_connectors_keep_users_clients_storefronts_and_lhc_activity() {
    let engine = engine_after("r-launch-1", at(900.0));
    let data = engine.lhc_data(A).unwrap();
    assert_eq!(
        data.recent_users
            .sorted()
            .into_iter()
            .map(|(user, _)| user)
            .collect::<Vec<_>>(),
        vec!["alice", "dave"]
    );
    assert_eq!(data.recent_users["alice"], at(802.0));
    assert_eq!(
        data.clients["alice-pc"].1,
        at(802.0),
        "client machines with their last contact"
    );
    assert!(data.clients["alice-pc"].0.starts_with("192.0.2."));
    assert_eq!(
        engine.connectors()[A].storefronts()["sf1.example"],
        at(841.01)
    );
    // Activity is recorded during LHC mode only: the four launches at 800-803 s.
    let kinds: Vec<(&str, Ts)> = data
        .activity
        .iter()
        .map(|a| (a.kind.as_str(), a.ts))
        .collect();
    assert_eq!(kinds.iter().filter(|(k, _)| *k == "launch").count(), 4);
    assert!(kinds.iter().all(|(_, ts)| *ts >= at(661.0)));
    assert!(data.activity[0]
        .detail
        .contains("alice launched app-multi: brokered on m-multi-1.z1.example"));
}

#[test]
fn the_cloud_unreachable_gap_is_counted_per_connector() {
    let engine = engine_after("launch-detection-gap", at(1000.0));
    assert_eq!(engine.lhc_data(A).unwrap().cloud_unreachable, 1);
    assert_eq!(
        engine.lhc_data(B).unwrap().cloud_unreachable,
        0,
        "cc-b's gap launch had another reason"
    );
}

#[test]
fn enumeration_lists_what_a_user_may_launch_and_where_it_runs() {
    let engine = engine_after("r-launch-8", at(900.0));
    let alice = engine.enumerate("Alice", None);
    let names: Vec<&str> = alice.iter().map(|e| e.resource.as_str()).collect();
    assert!(
        names.contains(&"app-multi") && !names.contains(&"app-secret"),
        "{names:?}"
    );
    let span = alice.iter().find(|e| e.resource == "app-span").unwrap();
    assert_eq!(
        span.zones,
        vec!["z1".to_string(), "z2".to_string()],
        "StoreFront can route to either zone"
    );
    // During the outage, from cc-a's snapshot: the same resources.
    assert_eq!(engine.enumerate("alice", Some(A)), alice);
    assert!(engine
        .enumerate("dave", None)
        .iter()
        .map(|e| e.resource.as_str())
        .eq(["app-secret"]));
}

#[test]
fn a_brokered_session_counts_until_the_vda_reports_it() {
    // r-launch-4: alice brokered to m-multi-2 at 800 s in LHC mode.
    let mut engine = engine_after("r-launch-4", at(800.5));
    let pending = &engine.machines()[MM2].pending();
    assert_eq!(pending.len(), 1, "carol's launch at 802 s comes later");
    assert_eq!(
        (pending[0].user.as_str(), pending[0].ts),
        ("alice", at(800.0))
    );
    // A heartbeat without alice's session, younger than 120 s: still pending.
    let later = engine_after("r-launch-4", at(911.0));
    assert!(later.machines()[MM2]
        .pending()
        .iter()
        .any(|p| p.user == "alice"));
    // The VDA reports alice's session: matched, and the session itself now counts.
    let report = format!(
        r#"{{"ts":"{}","type":"vda.heartbeat","machine":"{MM2}","sessions":[{{"id":"n1","user":"alice","state":"active"}}]}}"#,
        at(805.0)
    );
    let mut out = Vec::new();
    engine.apply(
        99_999,
        decode_record_at(report.as_bytes(), 99_999),
        &mut out,
    );
    assert!(engine.machines()[MM2].pending().is_empty());
    assert_eq!(engine.machines()[MM2].sessions().len(), 1);
    engine.check_invariants().unwrap();
}

/// R-LOG-5
#[test]
fn r_log_5_a_connector_is_started_with_every_service_running_until_a_record_says_otherwise() {
    let engine = engine_after("r-state-1", at(60.0));
    let a = &engine.connectors()[A];
    assert_eq!(a.state(), WorkingNormally);
    assert!(a.ha_running() && a.rbp_running() && a.css_running());
    let engine = engine_after("r-state-4", at(100.0));
    assert!(
        !engine.connectors()[A].ha_running(),
        "service.status stopped it at 62 s"
    );
}

/// §2.1: a group written without the reuse flag keeps its earlier value, or takes the site
/// default as of the change that creates it; a later change of the site default does not
/// change existing groups.
#[test]
fn r_launch_6_reuse_flag_is_resolved_when_the_group_is_written() {
    let change = |v: u64, ops: &str| {
        format!(
            r#"{{"ts":"{}","type":"config.change","version":{v},"ops":[{ops}]}}"#,
            at(v as f64)
        )
    };
    let site = |default: bool| {
        format!(
            r#"{{"op":"upsert","kind":"site","id":"site","data":{{"default_reuse_machines_without_shutdown_in_outage":{default}}}}}"#
        )
    };
    let group = |id: &str, flag: &str| {
        format!(
            r#"{{"op":"upsert","kind":"delivery_group","id":"{id}","data":{{"kind":"single_session_pooled"{flag}}}}}"#
        )
    };
    let lines = [
        change(1, &format!("{},{}", site(true), group("old", ""))),
        change(2, &site(false)),
        change(3, &group("new", "")),
        change(4, &group("old", "")),
        change(
            5,
            &group(
                "explicit",
                r#","reuse_machines_without_shutdown_in_outage":true"#,
            ),
        ),
        change(6, &group("explicit", "")),
        // One change creating a group before the site op that sets the default: the
        // default as of the change is the one the change leaves.
        change(7, &format!("{},{}", group("same-change", ""), site(true))),
    ];
    let mut engine = Engine::new();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        engine.apply(
            i as u64,
            lhc_engine::decode_record_at(line.as_bytes(), i as u64),
            &mut out,
        );
    }
    assert!(out.is_empty(), "{out:?}");
    let reuse = |id: &str| match &engine
        .site()
        .get(lhc_engine::config::ObjectKind::DeliveryGroup, id)
        .unwrap()
        .object
    {
        lhc_engine::config::ConfigObject::DeliveryGroup { data, .. } => {
            data.reuse_machines_without_shutdown_in_outage
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        reuse("old"),
        Some(true),
        "created under default true, kept when rewritten"
    );
    assert_eq!(reuse("new"), Some(false), "created under default false");
    assert_eq!(
        reuse("explicit"),
        Some(true),
        "an explicit value is kept when omitted later"
    );
}

/// Issue 15 (6): a VDA the site does not know costs its refusal, not its sessions: 2,000
/// heartbeats of unknown machines reporting 50 sessions each keep no session in the state.
#[test]
fn unknown_machines_keep_no_sessions() {
    let mut engine = Engine::new();
    let mut out = Vec::new();
    let config = format!(
        r#"{{"ts":"{}","type":"config.change","version":1,"ops":[{{"op":"upsert","kind":"site","id":"site"}},{{"op":"upsert","kind":"zone","id":"z1","data":{{"name":"z"}}}},{{"op":"upsert","kind":"connector","id":"{A}","data":{{"zone":"z1"}}}}]}}"#,
        at(0.0)
    );
    engine.apply(
        0,
        lhc_engine::decode_record_at(config.as_bytes(), 0),
        &mut out,
    );
    let before = serde_json::to_vec(&engine).unwrap().len();
    let sessions: Vec<String> = (0..50)
        .map(|s| format!(r#"{{"id":"s{s}","user":"user-{s}","state":"active"}}"#))
        .collect();
    for i in 0..2000u64 {
        let line = format!(
            r#"{{"ts":"{}","type":"vda.heartbeat","machine":"rogue-{i}.example","sessions":[{}]}}"#,
            at(1.0 + i as f64 / 1000.0),
            sessions.join(",")
        );
        engine.apply(
            i + 1,
            lhc_engine::decode_record_at(line.as_bytes(), i + 1),
            &mut out,
        );
        let event = format!(
            r#"{{"ts":"{}","type":"session.event","machine":"ghost-{i}.example","session":"x","user":"u","event":"logon"}}"#,
            at(1.0 + i as f64 / 1000.0)
        );
        engine.apply(
            i + 1,
            lhc_engine::decode_record_at(event.as_bytes(), i + 1),
            &mut out,
        );
    }
    assert!(engine.machines().values().all(|m| m.sessions().is_empty()));
    let grown = serde_json::to_vec(&engine).unwrap().len() - before;
    assert!(
        grown < 2000 * 300,
        "state grew by {grown} bytes for 2,000 unknown VDAs"
    );
    engine.check_invariants().unwrap();
}

/// §6.2: a zone that lost the cloud path offers the cloud nothing — its VDAs are not
/// launched on before their next heartbeat moves them (`no_registered_machine`, not
/// `machine_capacity`), and a static user is assigned the first free machine the cloud
/// reaches.
#[test]
fn launch_the_cloud_reaches_only_zones_that_offer_the_cloud_path() {
    let out = run("launch-cloud-unreachable-zone");
    assert_eq!(
        refused(&out, "r1"),
        (Via::Cloud, Reason::NoRegisteredMachine)
    );
    assert_eq!(assigned(&out, "r2"), ("s-b.z1.example", Some(true)));
}

/// R-LAUNCH-5 (cloud side): a rejected launch makes no assignment; the next one that is
/// brokered makes it, and says so.
#[test]
fn r_launch_5_a_rejected_launch_assigns_nothing() {
    let out = run("r-launch-5-rejected-assigns-nothing");
    assert_eq!(
        refused(&out, "r1"),
        (Via::Cloud, Reason::NoRegisteredMachine)
    );
    assert_eq!(assigned(&out, "r2"), ("s-a.z2.example", Some(true)));
}

/// R-STATE-10 with forced outage: a forced connector stopped outside LHC mode and started
/// during the outage enters LHC mode at its start record (the setting survives a restart),
/// but its first check fails, so its snapshot is not usable: it decides nothing
/// (`no_lhc_database`), the same hazard as without the force.
#[test]
fn r_state_10_a_forced_connector_powered_on_during_the_outage_cannot_broker() {
    let (out, engine) = run_engine("r-state-10-forced-powered-on");
    assert_eq!(refused(&out, "r1"), (Via::Lhc, Reason::NoLhcDatabase));
    // The control plane answers again while it is held in LHC mode: the sync check that can
    // run re-imports the unusable snapshot (R-CSS-2), and that import completes — R-CSS-3's
    // 507 is for an episode that starts during an import — so it brokers again.
    assert!(css_ids(&out, A).contains(&(at(901.0), 503)));
    assert!(css_ids(&out, A).contains(&(at(901.0), 504)));
    assert_eq!(chose(&out, "r2").0, A);
    assert!(engine.connectors()[A].snapshot_usable());
}

/// LHC-RID-1 (lhc's own requirement, not in SPEC.md; docs/kafka.md): a record whose
/// `record_id` was seen before is a duplicate: quarantined, never applied twice, whatever
/// its `ts` (older, or equal: the case a Kafka delivery in doubt makes) and its type.
#[test]
fn lhc_rid_1_a_record_appended_twice_is_applied_once() {
    let (out, engine) = run_engine("lhc-rid-1-record-ids");
    let q = quarantines(&out);
    let duplicates = [3, 4, 7, 12, 14];
    assert_eq!(q.iter().map(|x| x.0).collect::<Vec<_>>(), duplicates);
    // Named as duplicates, not as records older than the previous one.
    assert!(
        q[0].1
            .contains("cc-a.z1.example@5eed:1.0 was already applied"),
        "{}",
        q[0].1
    );
    assert!(
        q[1].1
            .contains("cc-a.z1.example@5eed:1.1 was already applied"),
        "{}",
        q[1].1
    );
    assert!(q[2].1.contains("record_id"), "{}", q[2].1);
    // A config.change and a health check, each again at the same time.
    assert!(
        q[3].1
            .contains("cc-a.z1.example@5eed:3.0 was already applied"),
        "{}",
        q[3].1
    );
    assert!(
        q[4].1
            .contains("cc-a.z1.example@5eed:3.1 was already applied"),
        "{}",
        q[4].1
    );
    // Without the duplicates (and the malformed id), the log gives the same outputs.
    let log = std::fs::read_to_string(dir().join("lhc-rid-1-record-ids.jsonl")).unwrap();
    let mut clean = Engine::new();
    let mut clean_out = Vec::new();
    for (offset, line) in log.lines().enumerate() {
        if duplicates.contains(&(offset as u64)) {
            continue;
        }
        clean.apply(
            offset as u64,
            decode_record_at(line.as_bytes(), offset as u64),
            &mut clean_out,
        );
    }
    let applied: Vec<&Output> = out
        .iter()
        .filter(|o| !matches!(o, Output::Quarantine(_)))
        .collect();
    assert_eq!(applied, clean_out.iter().collect::<Vec<_>>());
    assert!(!applied.is_empty());
    assert_eq!(engine.digest(), clean.digest());
    // The seen ids are part of the state a store keeps: saved as rows and rebuilt, the
    // engine has the same digest and still refuses the copies.
    let mut rows = lhc_engine::rows::StateRows::new();
    engine.for_each_state_row(|key, value| rows.add(key, value).unwrap());
    let mut rebuilt = rows.finish().unwrap().expect("rows");
    rebuilt.restore_config(engine.clone().take_config());
    assert_eq!(rebuilt.digest(), engine.digest());
    let copy = log.lines().nth(14).unwrap();
    let mut again = Vec::new();
    rebuilt.apply(15, decode_record_at(copy.as_bytes(), 15), &mut again);
    assert!(
        matches!(&again[..], [Output::Quarantine(q)] if q.error.contains("already applied")),
        "{again:?}"
    );
}
