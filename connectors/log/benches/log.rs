//! Micro-benchmarks: the per-record cost of the log's framing (encode, parse + CRC) next to
//! decoding the same record's JSON, the work replay does after reading it. Run with
//! `cargo bench -p lhc-log`; `lhc bench log` measures the same end to end.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use lhc_log::frame::{encode_frame, parse_frame, Parsed};

const RECORDS: [&str; 3] = [
    r#"{"ts":"2026-01-05T09:00:00.000Z","type":"vda.heartbeat","machine":"vda00017.corp.example","sessions":[{"id":"s-1","user":"user00042","state":"active"},{"id":"s-2","user":"user00043","state":"disconnected"}]}"#,
    r#"{"ts":"2026-01-05T09:00:00.000Z","type":"health.check","connector":"cc1.zone1.corp.example","ok":true}"#,
    r#"{"ts":"2026-01-05T09:00:00.000Z","type":"launch.request","request":"r1","connector":"cc1.zone1.corp.example","user":"user00042","resource":"app7","client":{"name":"pc1","ip":"10.1.0.1"}}"#,
];

fn framing_vs_decoding(c: &mut Criterion) {
    let bytes: usize = RECORDS.iter().map(|r| r.len()).sum();
    let mut group = c.benchmark_group("per record");
    group.throughput(Throughput::Bytes(bytes as u64));
    let mut framed = Vec::new();
    for (i, r) in RECORDS.iter().enumerate() {
        encode_frame(&mut framed, i as u64, r.as_bytes());
    }
    group.bench_function("frame parse + CRC32C", |b| {
        b.iter(|| {
            let mut at = 0;
            for i in 0..RECORDS.len() as u64 {
                match parse_frame(&framed[at..], i) {
                    Parsed::Frame { payload, size, .. } => {
                        std::hint::black_box(payload);
                        at += size;
                    }
                    other => panic!("{other:?}"),
                }
            }
        })
    });
    group.bench_function("frame encode", |b| {
        b.iter_batched_ref(
            || Vec::with_capacity(1024),
            |out| {
                for (i, r) in RECORDS.iter().enumerate() {
                    encode_frame(out, i as u64, r.as_bytes());
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("serde_json decode (baseline)", |b| {
        b.iter(|| {
            for r in RECORDS {
                std::hint::black_box(lhc_engine::decode_record(r.as_bytes()).unwrap());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, framing_vs_decoding);
criterion_main!(benches);
