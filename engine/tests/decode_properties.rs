//! Decoding never panics, and what decodes re-encodes to an equal record.

use lhc_engine::{decode_record, encode_record};
use proptest::prelude::*;

const SEED_RECORDS: [&str; 4] = [
    r#"{"ts":"2026-01-05T09:00:00.000Z","type":"vda.heartbeat","machine":"m1","sessions":[{"id":"s1","user":"u","state":"active"}]}"#,
    r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":3,"ops":[{"op":"upsert","kind":"machine","id":"m","data":{"zone":"z","delivery_group":"g","tags":["a"]}}]}"#,
    r#"{"ts":"2026-01-05T09:00:00.000Z","type":"launch.request","request":"r","connector":"c","user":"u","resource":"x","client":{"name":"n","ip":"1.2.3.4"}}"#,
    r#"{"ts":"2026-01-05T09:00:00.000Z","type":"admin.command","connector":"c","command":"set_config_sync_interval","seconds":60}"#,
];

/// Records in the orders lhc's fast path takes (`type` first, or `ts` then `type`), with
/// config ops of every shape: what it accepts must be what serde's derived path accepts.
const FAST_RECORDS: [&str; 4] = [
    r#"{"type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":3,"ops":[{"op":"upsert","kind":"machine","id":"m","data":{"zone":"z","delivery_group":"g","tags":["a"],"max_sessions":2}},{"op":"delete","kind":"user","id":"u"},{"op":"upsert","kind":"site","id":"site"},{"op":"upsert","kind":"user","id":"u2","data":{"groups":["g"]}}]}"#,
    r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":3,"ops":[{"op":"upsert","kind":"group","data":{},"id":"g"},{"op":"upsert","kind":"delivery_group","id":"dg","data":{"kind":"single_session_pooled","restrict_to_tag":"t"}},{"op":"upsert","kind":"entitlement","id":"e","data":{"resource":"r","principals":["g"]}}]}"#,
    r#"{"ts":"2026-01-05T09:00:00.000Z","type":"vda.heartbeat","machine":"m1","sessions":[{"id":"s1","user":"u","state":"active"}]}"#,
    r#"{"type":"launch.request","ts":"2026-01-05T09:00:00.000Z","request":"r","connector":"c","user":"u","resource":"x","client":{"name":"n","ip":"1.2.3.4"}}"#,
];

proptest! {
    /// The fast decode paths agree with the derived one on every one-byte mutation: the
    /// same records accepted, decoded to the same values.
    #[test]
    fn fast_paths_accept_what_the_derived_path_accepts(which in 0usize..4, at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = FAST_RECORDS[which].as_bytes().to_vec();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        let derived = serde_json::from_slice::<lhc_engine::Record>(&bytes).ok();
        prop_assert_eq!(decode_record(&bytes).ok(), derived);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_record(&bytes);
    }

    /// Mutating one byte of a valid record yields either a valid record or an error with a
    /// located explanation, never a panic.
    #[test]
    fn mutated_records_decode_or_explain(which in 0usize..4, at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = SEED_RECORDS[which].as_bytes().to_vec();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        match decode_record(&bytes) {
            Ok(record) => prop_assert_eq!(decode_record(&encode_record(&record)).unwrap(), record),
            Err(e) => prop_assert!(!e.detail.is_empty()),
        }
    }
}
