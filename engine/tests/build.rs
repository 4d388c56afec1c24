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
