//! Micro-benchmarks of the engine's hot paths, each in a group with its baseline: decoding
//! the same JSON, which a replay pays anyway. A VDA heartbeat in a steady zone (the most
//! frequent record), and a whole configuration: decoded, applied (the cloud's index, every
//! machine placed) and validated. Run with `cargo bench -p lhc-engine`; `lhc bench fold` and
//! `lhc bench import` measure the same paths end to end.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use lhc_engine::build::{self, records, SiteBuilder};
use lhc_engine::config::DeliveryGroupKind;
use lhc_engine::record::SessionState;
use lhc_engine::{decode_record, Engine, Output, Ts};

/// VDAs in the zone.
const VDAS: usize = 1_000;
/// The instant every benchmarked record carries: equal timestamps are in order (R-LOG-4)
/// and leave no timer due, so each iteration does the same work.
const TS: &str = "2026-01-05T09:05:00.000Z";

/// One zone, two connectors, one multi-session group of `vdas` machines, `vdas` users
/// entitled to one application.
fn config(vdas: usize) -> String {
    let mut site = SiteBuilder::new()
        .site(Default::default())
        .zone("z1")
        .connector("cc1.z1.example", "z1")
        .connector("cc2.z1.example", "z1")
        .group("dg", DeliveryGroupKind::MultiSession)
        .application("app", &["dg"])
        .user_group("staff")
        .entitlement("e", "app", &["staff"]);
    for v in 0..vdas {
        site = site
            .machine(&format!("vda{v:05}.z1.example"), "z1", "dg", None)
            .user(&format!("user{v:05}"), &["staff"]);
    }
    build::text(&site.change(ts("2026-01-05T09:00:00.000Z"), 1))
}

/// A heartbeat of machine `v` with one active session.
fn heartbeat(v: usize) -> String {
    build::text(&records::heartbeat(
        ts(TS),
        &format!("vda{v:05}.z1.example"),
        &[(
            &format!("s{v}"),
            &format!("user{v:05}"),
            SessionState::Active,
        )],
    ))
}

fn ts(text: &str) -> Ts {
    Ts::parse(text).expect("a valid time")
}

/// The zone after its connectors' first checks (imports included) and a heartbeat of every
/// VDA: all registered with the cloud, each with its session.
fn steady_zone() -> Engine {
    let mut engine = Engine::new();
    let mut out = Vec::new();
    let mut records = vec![config(VDAS)];
    for c in ["cc1.z1.example", "cc2.z1.example"] {
        let check = records::health_check(ts("2026-01-05T09:00:01.000Z"), c, true);
        records.push(build::text(&check));
    }
    records.extend((0..VDAS).map(heartbeat));
    for (offset, r) in records.iter().enumerate() {
        engine.apply(offset as u64, decode_record(r.as_bytes()), &mut out);
    }
    let registered = out
        .iter()
        .filter(|o| matches!(o, Output::Registration(_)))
        .count();
    assert_eq!(registered, VDAS, "every VDA registers");
    engine
}

fn heartbeats(c: &mut Criterion) {
    let records: Vec<String> = (0..VDAS).map(heartbeat).collect();
    let mut group = c.benchmark_group("vda heartbeat, steady zone");
    group.throughput(Throughput::Elements(records.len() as u64));
    group.bench_function("decode (baseline)", |b| {
        b.iter(|| {
            for r in &records {
                std::hint::black_box(decode_record(r.as_bytes()).unwrap());
            }
        })
    });
    let mut engine = steady_zone();
    let mut offset = 1_000_000u64;
    let mut out = Vec::new();
    group.bench_function("decode + apply", |b| {
        b.iter(|| {
            for r in &records {
                engine.apply(offset, decode_record(r.as_bytes()), &mut out);
                offset += 1;
            }
            assert!(out.is_empty(), "a steady heartbeat has no output");
        })
    });
    group.finish();
}

fn configuration(c: &mut Criterion) {
    let change = config(VDAS);
    let mut group = c.benchmark_group("configuration, 1,000 VDAs and 1,000 users");
    group.throughput(Throughput::Bytes(change.len() as u64));
    group.bench_function("decode (baseline)", |b| {
        b.iter(|| std::hint::black_box(decode_record(change.as_bytes()).unwrap()))
    });
    group.bench_function("decode + apply (index, place every machine)", |b| {
        b.iter_batched(
            Engine::new,
            |mut engine| {
                let mut out = Vec::new();
                engine.apply(0, decode_record(change.as_bytes()), &mut out);
                engine
            },
            BatchSize::SmallInput,
        )
    });
    let mut engine = Engine::new();
    engine.apply(0, decode_record(change.as_bytes()), &mut Vec::new());
    group.bench_function("validate (R-CSS-4)", |b| {
        b.iter(|| lhc_engine::snapshot::validate(engine.site()).unwrap())
    });
    group.finish();
}

criterion_group!(benches, heartbeats, configuration);
criterion_main!(benches);
