//! The full matrix of delivery group kind × {normal, LHC} × reuse flags (pooled groups),
//! and static groups with and without an assignment (R-LAUNCH-5, R-LAUNCH-6).

use lhc_engine::build::{records, text, SiteBuilder};
use lhc_engine::config::{ConfigObject, DeliveryGroupData, DeliveryGroupKind, SiteData};
use lhc_engine::output::{LaunchDecision, Outcome, Reason, Via};
use lhc_engine::{decode_record_at, Engine, Output, Ts};

#[derive(Clone, Copy, Debug)]
struct Cell {
    kind: DeliveryGroupKind,
    power_managed: bool,
    site_reuse: bool,
    group_reuse: bool,
    assigned: bool,
}

/// One connector, one machine of the group, alice entitled; a launch at 300 s (normal
/// operations) and at 800 s (LHC mode since 661 s, the VDA re-registered at 760 s).
fn run(cell: Cell) -> (LaunchDecision, LaunchDecision) {
    let ts = |s: u64| Ts(1_767_603_600_000 + s as i64 * 1000);
    let mut site = SiteBuilder::new()
        .site(SiteData {
            reuse_machines_without_shutdown_in_outage_allowed: cell.site_reuse,
            ..SiteData::default()
        })
        .zone("z1")
        .connector("cc.z1", "z1")
        .object(ConfigObject::DeliveryGroup {
            id: "g".into(),
            data: DeliveryGroupData {
                kind: cell.kind,
                power_managed: cell.power_managed,
                shutdown_desktops_after_use: None,
                reuse_machines_without_shutdown_in_outage: Some(cell.group_reuse),
                session_limit_per_user: None,
                restrict_to_tag: None,
            },
        })
        .machine("m1.z1", "z1", "g", None)
        .desktop("r", &["g"])
        .user("alice", &[])
        .entitlement("e", "r", &["alice"]);
    if cell.assigned {
        site = site.assignment("as", "m1.z1", "alice");
    }
    let mut records = vec![(0, site.change(ts(0), 1))];
    for t in (1..1000).step_by(60) {
        records.push((t, records::health_check(ts(t), "cc.z1", t < 600)));
        records.push((t, records::storefront(ts(t), "cc.z1", "sf")));
    }
    for t in [10, 160, 760] {
        records.push((t, records::heartbeat(ts(t), "m1.z1", &[])));
    }
    for (t, request) in [(300, "normal"), (800, "lhc")] {
        records.push((t, records::launch(ts(t), request, "cc.z1", "alice", "r")));
    }
    // Stable: at one instant, checks before heartbeats before launches, as pushed.
    records.sort_by_key(|r| r.0);
    let lines: Vec<String> = records.iter().map(|(_, r)| text(r)).collect();
    let mut engine = Engine::new();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        engine.apply(
            i as u64,
            decode_record_at(line.as_bytes(), i as u64),
            &mut out,
        );
    }
    let decisions: Vec<LaunchDecision> = out
        .into_iter()
        .filter_map(|o| match o {
            Output::LaunchDecision(d) => Some(d),
            Output::Quarantine(q) => panic!("{cell:?}: {q:?}"),
            _ => None,
        })
        .collect();
    assert_eq!(decisions.len(), 2, "{cell:?}");
    (decisions[0].clone(), decisions[1].clone())
}

fn outcome(d: &LaunchDecision) -> Result<&str, Reason> {
    match d.outcome {
        Outcome::Brokered => Ok(d.machine.as_deref().unwrap()),
        Outcome::Rejected => Err(d.reason.unwrap()),
    }
}

#[test]
fn pooled_groups_across_modes_and_reuse_flags() {
    for power_managed in [true, false] {
        for site_reuse in [false, true] {
            for group_reuse in [false, true] {
                let cell = Cell {
                    kind: DeliveryGroupKind::SingleSessionPooled,
                    power_managed,
                    site_reuse,
                    group_reuse,
                    assigned: false,
                };
                let (normal, lhc) = run(cell);
                assert_eq!(
                    (normal.via, outcome(&normal)),
                    (Via::Cloud, Ok("m1.z1")),
                    "{cell:?}"
                );
                let expected = if power_managed && !(site_reuse && group_reuse) {
                    Err(Reason::PooledUnavailableInOutage)
                } else {
                    Ok("m1.z1")
                };
                assert_eq!((lhc.via, outcome(&lhc)), (Via::Lhc, expected), "{cell:?}");
            }
        }
    }
}

#[test]
fn static_groups_with_and_without_assignment() {
    for assigned in [true, false] {
        let cell = Cell {
            kind: DeliveryGroupKind::SingleSessionStatic,
            power_managed: true,
            site_reuse: false,
            group_reuse: false,
            assigned,
        };
        let (normal, lhc) = run(cell);
        assert_eq!(outcome(&normal), Ok("m1.z1"), "{cell:?}");
        assert_eq!(
            normal.new_assignment,
            Some(!assigned),
            "the cloud assigns when none exists"
        );
        let expected = if assigned {
            Ok("m1.z1")
        } else {
            Err(Reason::AssignmentRequired)
        };
        assert_eq!(outcome(&lhc), expected, "{cell:?}");
    }
}

#[test]
fn multi_session_groups_whatever_the_flags() {
    for (site_reuse, group_reuse) in [(false, false), (true, true)] {
        let cell = Cell {
            kind: DeliveryGroupKind::MultiSession,
            power_managed: true,
            site_reuse,
            group_reuse,
            assigned: false,
        };
        let (normal, lhc) = run(cell);
        assert_eq!(
            (normal.via, outcome(&normal)),
            (Via::Cloud, Ok("m1.z1")),
            "{cell:?}"
        );
        assert_eq!(
            (lhc.via, outcome(&lhc)),
            (Via::Lhc, Ok("m1.z1")),
            "{cell:?}"
        );
    }
}

/// A machine whose id has a non-ASCII capital (lowercased the Unicode way, as the
/// catalog keys it) is placed in its pool and brokered like any other.
#[test]
fn a_machine_named_with_a_non_ascii_capital_is_brokered() {
    let ts = |s: u64| lhc_engine::Ts(1_767_603_600_000 + s as i64 * 1000).to_string();
    let lines = [
        format!(
            r#"{{"ts":"{}","type":"config.change","version":1,"ops":[{{"op":"upsert","kind":"site","id":"site"}},{{"op":"upsert","kind":"zone","id":"z1","data":{{"name":"z"}}}},{{"op":"upsert","kind":"connector","id":"cc.z1","data":{{"zone":"z1"}}}},{{"op":"upsert","kind":"delivery_group","id":"g","data":{{"kind":"multi_session"}}}},{{"op":"upsert","kind":"machine","id":"mÄ.z1","data":{{"zone":"z1","delivery_group":"g"}}}},{{"op":"upsert","kind":"resource","id":"r","data":{{"kind":"desktop","delivery_groups":["g"]}}}},{{"op":"upsert","kind":"user","id":"alice"}},{{"op":"upsert","kind":"entitlement","id":"e","data":{{"resource":"r","principals":["alice"]}}}}]}}"#,
            ts(0)
        ),
        format!(
            r#"{{"ts":"{}","type":"health.check","connector":"cc.z1","ok":true}}"#,
            ts(1)
        ),
        format!(
            r#"{{"ts":"{}","type":"vda.heartbeat","machine":"mÄ.z1","sessions":[]}}"#,
            ts(10)
        ),
        format!(
            r#"{{"ts":"{}","type":"launch.request","request":"q","connector":"cc.z1","user":"alice","resource":"r","client":{{"name":"pc","ip":"10.0.0.1"}}}}"#,
            ts(20)
        ),
    ];
    let mut engine = Engine::new();
    let mut out = Vec::new();
    for (offset, line) in lines.iter().enumerate() {
        engine.apply(
            offset as u64,
            decode_record_at(line.as_bytes(), offset as u64),
            &mut out,
        );
        engine.check_invariants().unwrap();
    }
    let decision = out
        .iter()
        .find_map(|o| match o {
            Output::LaunchDecision(d) => Some(d),
            _ => None,
        })
        .expect("a decision");
    assert_eq!(decision.outcome, Outcome::Brokered, "{decision:?}");
    assert_eq!(decision.machine.as_deref(), Some("mÄ.z1"));
}

/// The launch rules as a literal truth table: two zones, each with its connector; a pooled
/// VDA in z2 that never registered (the cloud may power it on), a pooled group that is not
/// power-managed and unregistered, static, multi-session and a z2-only resource. Every
/// launch goes through cc.z1, once in normal operations (300 s) and once in LHC mode
/// (800 s; both zones entered at 661 s, VDAs re-registered at 760 s).
#[test]
fn literal_truth_table_two_zones() {
    use Reason::*;
    type Expect = Result<&'static str, Reason>;
    #[rustfmt::skip]
    let table: [(&str, &str, Expect, Expect); 10] = [
        // resource      user     normal operations (cloud)   LHC mode (cc.z1)
        ("r-multi",     "alice", Ok("mm.z1"),                 Ok("mm.z1")),
        ("r-pool",      "alice", Ok("p1.z1"),                 Err(PooledUnavailableInOutage)),
        ("r-pool-z2",   "alice", Ok("p2.z2"),                 Err(CrossZone)),
        ("r-unmanaged", "alice", Err(NoRegisteredMachine),    Err(NoRegisteredMachine)),
        ("r-static",    "alice", Ok("s1.z1"),                 Ok("s1.z1")),
        ("r-static",    "bob",   Err(MachineCapacity),        Err(AssignmentRequired)),
        ("r-z2",        "alice", Ok("m2.z2"),                 Err(CrossZone)),
        ("nothing",     "alice", Err(UnknownResource),        Err(UnknownResource)),
        ("r-multi",     "carol", Err(NotEntitled),            Err(NotEntitled)),
        ("r-multi",     "bob",   Ok("mm.z1"),                 Ok("mm.z1")),
    ];
    let ts = |s: u64| Ts(1_767_603_600_000 + s as i64 * 1000);
    let unmanaged = ConfigObject::DeliveryGroup {
        id: "unmanaged".into(),
        data: DeliveryGroupData {
            kind: DeliveryGroupKind::SingleSessionPooled,
            power_managed: false,
            shutdown_desktops_after_use: None,
            reuse_machines_without_shutdown_in_outage: None,
            session_limit_per_user: None,
            restrict_to_tag: None,
        },
    };
    let mut site = SiteBuilder::new()
        .zone("z1")
        .zone("z2")
        .connector("cc.z1", "z1")
        .connector("cc.z2", "z2")
        .group("multi", DeliveryGroupKind::MultiSession)
        .group("pool", DeliveryGroupKind::SingleSessionPooled)
        .group("pool2", DeliveryGroupKind::SingleSessionPooled)
        .object(unmanaged)
        .group("static", DeliveryGroupKind::SingleSessionStatic)
        .group("z2", DeliveryGroupKind::MultiSession);
    for (machine, zone, group) in [
        ("mm.z1", "z1", "multi"),
        ("p1.z1", "z1", "pool"),
        ("p2.z2", "z2", "pool2"),
        ("pu.z1", "z1", "unmanaged"),
        ("s1.z1", "z1", "static"),
        ("m2.z2", "z2", "z2"),
    ] {
        site = site.machine(machine, zone, group, None);
    }
    for (resource, group) in [
        ("r-multi", "multi"),
        ("r-pool", "pool"),
        ("r-pool-z2", "pool2"),
        ("r-unmanaged", "unmanaged"),
        ("r-static", "static"),
        ("r-z2", "z2"),
    ] {
        site = site.desktop(resource, &[group]).entitlement(
            &format!("e-{resource}"),
            resource,
            &["alice", "bob"],
        );
    }
    for user in ["alice", "bob", "carol"] {
        site = site.user(user, &[]);
    }
    let site = site.assignment("as", "s1.z1", "alice");
    let mut events: Vec<(u64, String)> = vec![(0, text(&site.change(ts(0), 1)))];
    for t in (1..1000).step_by(60) {
        for c in ["cc.z1", "cc.z2"] {
            events.push((t, text(&records::health_check(ts(t), c, t < 600))));
            events.push((t, text(&records::storefront(ts(t), c, "sf"))));
        }
    }
    for t in [10, 160, 760] {
        for m in ["mm.z1", "p1.z1", "s1.z1", "m2.z2"] {
            events.push((t, text(&records::heartbeat(ts(t), m, &[]))));
        }
    }
    for (i, (resource, user, _, _)) in table.iter().enumerate() {
        for (base, mode) in [(300, "normal"), (800, "lhc")] {
            let t = base + i as u64;
            let request = format!("{mode}-{i}");
            let launch = records::launch(ts(t), &request, "cc.z1", user, resource);
            events.push((t, text(&launch)));
        }
    }
    events.sort_by_key(|e| e.0);
    let mut engine = Engine::new();
    let mut out = Vec::new();
    for (i, (_, line)) in events.iter().enumerate() {
        engine.apply(
            i as u64,
            decode_record_at(line.as_bytes(), i as u64),
            &mut out,
        );
    }
    let decision = |request: &str| -> LaunchDecision {
        out.iter()
            .find_map(|o| match o {
                Output::LaunchDecision(d) if d.request == request => Some(d.clone()),
                Output::Quarantine(q) => panic!("{q:?}"),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no decision for {request}"))
    };
    for (i, (resource, user, normal, lhc)) in table.iter().enumerate() {
        let n = decision(&format!("normal-{i}"));
        let l = decision(&format!("lhc-{i}"));
        assert_eq!(
            (n.via, outcome(&n)),
            (Via::Cloud, *normal),
            "row {i}: {resource} {user}, normal"
        );
        assert_eq!(
            (l.via, outcome(&l)),
            (Via::Lhc, *lhc),
            "row {i}: {resource} {user}, LHC"
        );
    }
}
