//! The typed site builder (`lhc_engine::build`) that tests and benchmarks share: every line
//! it encodes passes the record contract and decodes back to the typed record, and a site
//! it builds imports (validates) and brokers.

use lhc_engine::build::{self, records, SiteBuilder};
use lhc_engine::config::DeliveryGroupKind;
use lhc_engine::output::{Outcome, Output};
use lhc_engine::record::SessionState;
use lhc_engine::{decode_record, Engine, Ts};

#[test]
fn every_built_record_decodes_to_itself_and_the_site_brokers() {
    let t0 = Ts::parse("2026-01-05T09:00:00.000Z").unwrap();
    let site = SiteBuilder::new()
        .site(Default::default())
        .zone("z1")
        .connector("cc1.z1.example", "z1")
        .group("g", DeliveryGroupKind::MultiSession)
        .machine("vda1.z1.example", "z1", "g", Some(5))
        .application("app", &["g"])
        .user_group("staff")
        .user("alice", &["staff"])
        .entitlement("e", "app", &["staff"]);
    let records = [
        site.change(t0, 1),
        records::health_check(t0.plus_s(1), "cc1.z1.example", true),
        records::storefront(t0.plus_s(1), "cc1.z1.example", "sf"),
        records::peer_probe(t0.plus_s(1), "cc1.z1.example", "cc1.z1.example", true),
        records::heartbeat(
            t0.plus_s(2),
            "vda1.z1.example",
            &[("s1", "bob", SessionState::Disconnected)],
        ),
        records::launch(t0.plus_s(3), "r1", "cc1.z1.example", "alice", "app"),
    ];
    let mut engine = Engine::new();
    let mut outputs = Vec::new();
    for (offset, record) in records.iter().enumerate() {
        let line = build::line(record);
        assert_eq!(build::text(record).as_bytes(), line.as_slice());
        let decoded =
            decode_record(&line).unwrap_or_else(|e| panic!("{e}: {}", build::text(record)));
        assert_eq!(&decoded, record);
        engine.apply(offset as u64, Ok(decoded), &mut outputs);
    }
    engine.check_invariants().unwrap();
    // The configuration imported (no 505) and the cloud brokered alice's launch on the VDA.
    assert!(!outputs
        .iter()
        .any(|o| matches!(o, Output::Event(e) if e.event_id == 505)));
    let decision = outputs.iter().find_map(|o| match o {
        Output::LaunchDecision(d) => Some(d),
        _ => None,
    });
    let decision = decision.expect("a decision");
    assert_eq!(decision.outcome, Outcome::Brokered, "{decision:?}");
    assert_eq!(decision.machine.as_deref(), Some("vda1.z1.example"));
}

/// The site is shared, not copied, when taken for a commit or a checkpoint: the handle
/// keeps the version it was taken at while the engine applies a later change, and the
/// engine (its digest included) is the same as one that was never shared.
#[test]
fn a_shared_site_keeps_its_version_while_the_engine_changes() {
    let t0 = Ts::parse("2026-01-05T09:00:00.000Z").unwrap();
    let site = |machines: &[&str]| {
        let mut site = SiteBuilder::new()
            .site(Default::default())
            .zone("z1")
            .connector("cc1.z1.example", "z1")
            .group("g", DeliveryGroupKind::MultiSession);
        for m in machines {
            site = site.machine(m, "z1", "g", Some(5));
        }
        site
    };
    let records = [
        site(&["vda1.z1.example"]).change(t0, 1),
        records::health_check(t0.plus_s(1), "cc1.z1.example", true),
        site(&["vda1.z1.example", "vda2.z1.example"]).change(t0.plus_s(2), 2),
    ];
    let (mut shared, mut alone) = (Engine::new(), Engine::new());
    let mut out = Vec::new();
    shared.apply(0, Ok(records[0].clone()), &mut out);
    alone.apply(0, Ok(records[0].clone()), &mut out);
    let first = shared.shared_site();
    assert!(std::sync::Arc::ptr_eq(&first, &shared.shared_site()));
    for (offset, record) in records.iter().enumerate().skip(1) {
        shared.apply(offset as u64, Ok(record.clone()), &mut out);
        alone.apply(offset as u64, Ok(record.clone()), &mut out);
    }
    // The handle still holds version 1 with its one machine; the engine moved on.
    assert_eq!(first.version, 1);
    assert_eq!(first.machine_id("vda2.z1.example"), None);
    assert_eq!(shared.site().version, 2);
    assert_eq!(
        shared.site().machine_id("vda2.z1.example"),
        Some("vda2.z1.example")
    );
    assert_eq!(shared, alone);
    assert_eq!(shared.digest(), alone.digest());
    // Once no handle holds the old one, changes are made in place again.
    drop(first);
    let before = std::sync::Arc::as_ptr(&shared.shared_site());
    shared.apply(
        3,
        Ok(site(&["vda1.z1.example"]).change(t0.plus_s(3), 3)),
        &mut out,
    );
    assert_eq!(std::sync::Arc::as_ptr(&shared.shared_site()), before);
}

/// A kind a change fills from nothing is built in one go from its upserts: the objects
/// come out in id order with the last upsert of an id kept, exactly as upserting them one
/// by one into a kind that already held objects does.
#[test]
fn a_kind_filled_from_nothing_keeps_the_last_upsert_of_each_id_in_id_order() {
    use lhc_engine::config::{ConfigObject, ObjectKind};
    let t0 = Ts::parse("2026-01-05T09:00:00.000Z").unwrap();
    let base = || {
        SiteBuilder::new()
            .site(Default::default())
            .zone("z1")
            .connector("cc1.z1.example", "z1")
            .user_group("a")
            .user_group("b")
    };
    let users = |site: SiteBuilder| {
        site.user("u3", &["a"])
            .user("U1", &["a"])
            .user("u2", &["a"])
            .user("u2", &["b"])
            .user("u10", &["b"])
    };
    let groups_of = |engine: &Engine| -> Vec<(String, Vec<String>)> {
        engine
            .site()
            .of_kind(ObjectKind::User)
            .map(|s| match &s.object {
                ConfigObject::User { id, data } => (id.clone(), data.groups.clone()),
                other => panic!("not a user: {other:?}"),
            })
            .collect()
    };
    let expected: Vec<(String, Vec<String>)> =
        [("U1", "a"), ("u10", "b"), ("u2", "b"), ("u3", "a")]
            .iter()
            .map(|(id, g)| (id.to_string(), vec![g.to_string()]))
            .collect();
    // From nothing: built in one go.
    let mut fresh = Engine::new();
    let mut out = Vec::new();
    fresh.apply(0, Ok(users(base()).change(t0, 1)), &mut out);
    assert_eq!(groups_of(&fresh), expected);
    // Into a kind that holds a user already: upserted one by one.
    let mut held = Engine::new();
    held.apply(0, Ok(base().user("u0", &["a"]).change(t0, 1)), &mut out);
    held.apply(1, Ok(users(base()).change(t0.plus_s(1), 2)), &mut out);
    let mut with_u0 = expected.clone();
    // Exact ids in byte order: "U1" sorts before "u0".
    with_u0.insert(1, ("u0".to_string(), vec!["a".to_string()]));
    assert_eq!(groups_of(&held), with_u0);
    // The same change applied again upserts in place over the map built in bulk, and
    // leaves every object as it was but its provenance.
    fresh.apply(1, Ok(users(base()).change(t0.plus_s(1), 2)), &mut out);
    assert_eq!(groups_of(&fresh), expected);
    let introduced: Vec<_> = fresh
        .site()
        .of_kind(ObjectKind::User)
        .map(|s| s.introduced_by.offset)
        .collect();
    assert_eq!(introduced, vec![1; 4]);
}
