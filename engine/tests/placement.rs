//! A machine's placement remembers its rank in the catalog it was placed from (issue 20):
//! a configuration change that moves every rank must not leave a machine in its pool under
//! the rank of another. The invariant check rebuilds the pools by name, without the
//! remembered ranks, after every record.

use lhc_engine::build::{records, SiteBuilder};
use lhc_engine::config::DeliveryGroupKind;
use lhc_engine::output::{Outcome, Output};
use lhc_engine::record::{Record, SessionState};
use lhc_engine::{Engine, Ts};

fn site(machines: &[&str]) -> SiteBuilder {
    let mut site = SiteBuilder::new()
        .site(Default::default())
        .zone("z1")
        .connector("cc1.z1.example", "z1")
        .group("g", DeliveryGroupKind::MultiSession)
        .application("app", &["g"])
        .user_group("staff")
        .user("alice", &["staff"])
        .user("bob", &["staff"])
        .entitlement("e", "app", &["staff"]);
    for m in machines {
        site = site.machine(m, "z1", "g", Some(5));
    }
    site
}

/// Applies `record`, checks the invariants, and returns the launch decision it made.
fn apply(engine: &mut Engine, offset: u64, record: Record) -> Option<(Outcome, Option<String>)> {
    let mut out = Vec::new();
    engine.apply(offset, Ok(record), &mut out);
    if let Err(broken) = engine.check_invariants() {
        panic!("after offset {offset}: {broken}\noutputs: {out:?}");
    }
    out.into_iter().find_map(|o| match o {
        Output::LaunchDecision(d) => Some((d.outcome, d.machine)),
        _ => None,
    })
}

#[test]
fn a_change_that_moves_every_rank_places_each_machine_under_its_new_rank() {
    let t0 = Ts::parse("2026-01-05T09:00:00.000Z").unwrap();
    let mut engine = Engine::new();
    let mut offset = 0;
    let mut next = |engine: &mut Engine, record: Record| {
        offset += 1;
        apply(engine, offset, record)
    };
    next(
        &mut engine,
        site(&["vdb.example", "vdc.example"]).change(t0, 1),
    );
    next(
        &mut engine,
        records::health_check(t0.plus_s(1), "cc1.z1.example", true),
    );
    let busy = [("s1", "bob", SessionState::Active)];
    next(
        &mut engine,
        records::heartbeat(t0.plus_s(2), "vdb.example", &busy),
    );
    next(
        &mut engine,
        records::heartbeat(t0.plus_s(2), "vdc.example", &[]),
    );
    // vdc is the least loaded: ranks 0 (vdb) and 1 (vdc).
    let first = next(
        &mut engine,
        records::launch(t0.plus_s(3), "r1", "cc1.z1.example", "alice", "app"),
    );
    assert_eq!(
        first,
        Some((Outcome::Brokered, Some("vdc.example".to_string())))
    );
    // Version 2 adds a machine first in FQDN order: vdb is now rank 1, vdc rank 2.
    next(
        &mut engine,
        site(&["vda.example", "vdb.example", "vdc.example"]).change(t0.plus_s(4), 2),
    );
    // Sessions move on both known machines (each placed again), the new one registers busy.
    let two = [
        ("s1", "bob", SessionState::Active),
        ("s2", "bob", SessionState::Active),
    ];
    next(
        &mut engine,
        records::heartbeat(t0.plus_s(5), "vda.example", &two),
    );
    next(
        &mut engine,
        records::heartbeat(t0.plus_s(5), "vdb.example", &[]),
    );
    let alice = [("s3", "alice", SessionState::Active)];
    next(
        &mut engine,
        records::heartbeat(t0.plus_s(5), "vdc.example", &alice),
    );
    // vdb is now the least loaded; a stale rank would name vda (its old rank 0) or place
    // vdb where vdc's rank is.
    let second = next(
        &mut engine,
        records::launch(t0.plus_s(6), "r2", "cc1.z1.example", "alice", "app"),
    );
    assert_eq!(
        second,
        Some((Outcome::Brokered, Some("vdb.example".to_string())))
    );
}
