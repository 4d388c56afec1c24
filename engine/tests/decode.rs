//! Every bad-input class of R-LOG-3 is rejected with an error naming the field and offset.

use lhc_engine::record::{Record, RECORD_TYPES};
use lhc_engine::{decode_record, decode_record_at, encode_record, DecodeErrorKind};

fn err(json: &str) -> (String, DecodeErrorKind, String) {
    let e = decode_record_at(json.as_bytes(), 41).expect_err(json);
    assert_eq!(e.offset, Some(41));
    let shown = e.to_string();
    assert!(shown.starts_with("record at offset 41: "), "{shown}");
    (e.path, e.kind, shown)
}

#[test]
fn every_record_type_decodes_and_round_trips() {
    let samples = [
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"engine.params","initial_ha_s":60}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":1,"ops":[{"op":"upsert","kind":"site","id":"site"},{"op":"upsert","kind":"zone","id":"z1","data":{"name":"Zone 1"}},{"op":"delete","kind":"machine","id":"m.example"}]}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"health.check","connector":"c1.example","ok":false,"detail":"timeout"}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"peer.probe","connector":"c1.example","peer":"c2.example","ok":true}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"storefront.heartbeat","connector":"c1.example","storefront":"sf1"}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"service.status","connector":"c1.example","service":"high_availability","running":false}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"connector.lifecycle","connector":"c1.example","event":"stop"}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"storage.fault","connector":"c1.example","detail":"disk full"}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"vda.heartbeat","machine":"m1.example","sessions":[{"id":"s1","user":"alice","state":"disconnected"}]}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"session.event","machine":"m1.example","session":"s1","user":"alice","event":"logon"}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"launch.request","request":"r1","connector":"c1.example","user":"alice","resource":"desk","client":{"name":"pc1","ip":"10.0.0.5"}}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"admin.command","connector":"c1.example","command":"set_config_sync_interval","seconds":120}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"clock.tick"}"#,
    ];
    let mut seen = Vec::new();
    for json in samples {
        let record = decode_record(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"));
        seen.push(record.type_name());
        let again = decode_record(&encode_record(&record)).unwrap();
        assert_eq!(again, record);
    }
    assert_eq!(seen, RECORD_TYPES);
}

#[test]
fn unknown_type_names_the_type_field() {
    let (path, kind, shown) =
        err(r#"{"ts":"2026-01-05T09:00:00.000Z","type":"vda.hearbeat","machine":"m"}"#);
    assert_eq!(
        (path.as_str(), kind),
        ("type", DecodeErrorKind::UnknownType)
    );
    assert!(
        shown.contains("vda.hearbeat") && shown.contains("vda.heartbeat"),
        "{shown}"
    );
}

#[test]
fn missing_type_and_non_objects() {
    let (path, kind, _) = err(r#"{"ts":"2026-01-05T09:00:00.000Z"}"#);
    assert_eq!(
        (path.as_str(), kind),
        ("type", DecodeErrorKind::MissingField)
    );
    let (_, kind, _) = err(r#"[1,2]"#);
    assert_eq!(kind, DecodeErrorKind::NotAnObject);
    let (_, kind, shown) = err(r#"{"ts": "#);
    assert_eq!(kind, DecodeErrorKind::Syntax);
    assert!(shown.contains("EOF"), "{shown}");
}

#[test]
fn unknown_field_at_top_level_and_nested() {
    let (path, kind, _) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"health.check","connector":"c","ok":true,"okay":1}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("okay", DecodeErrorKind::UnknownField)
    );
    let (path, kind, _) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":2,"ops":[{"op":"delete","kind":"zone","id":"z"},{"op":"upsert","kind":"machine","id":"m","data":{"zone":"z","delivery_group":"g","colour":"red"}}]}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("ops[1].data.colour", DecodeErrorKind::UnknownField)
    );
    let (path, kind, _) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"launch.request","request":"r","connector":"c","user":"u","resource":"x","client":{"name":"n","ip":"1.2.3.4","mac":"x"}}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("client.mac", DecodeErrorKind::UnknownField)
    );
}

#[test]
fn missing_field_names_the_full_path() {
    let (path, kind, _) =
        err(r#"{"ts":"2026-01-05T09:00:00.000Z","type":"peer.probe","connector":"c","ok":true}"#);
    assert_eq!(
        (path.as_str(), kind),
        ("peer", DecodeErrorKind::MissingField)
    );
    let (path, kind, _) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":2,"ops":[{"op":"upsert","kind":"machine","id":"m","data":{"zone":"z"}}]}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("ops[0].data.delivery_group", DecodeErrorKind::MissingField)
    );
    let (path, kind, _) =
        err(r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":2}"#);
    assert_eq!(
        (path.as_str(), kind),
        ("ops", DecodeErrorKind::MissingField)
    );
    let (path, kind, _) = err(r#"{"type":"clock.tick"}"#);
    assert_eq!((path.as_str(), kind), ("ts", DecodeErrorKind::MissingField));
    let (path, kind, _) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":2,"ops":[{"kind":"zone","id":"z"}]}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("ops[0].op", DecodeErrorKind::MissingField)
    );
}

#[test]
fn wrong_type_names_the_field() {
    let (path, kind, _) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"health.check","connector":"c","ok":"yes"}"#,
    );
    assert_eq!((path.as_str(), kind), ("ok", DecodeErrorKind::WrongType));
    let (path, kind, _) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"vda.heartbeat","machine":"m","sessions":[{"id":"s","user":"u","state":"active"},{"id":7,"user":"u","state":"active"}]}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("sessions[1].id", DecodeErrorKind::WrongType)
    );
    let (path, kind, _) =
        err(r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":-1,"ops":[]}"#);
    assert_eq!(
        (path.as_str(), kind),
        ("version", DecodeErrorKind::BadValue)
    );
    let (path, kind, _) =
        err(r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":3,"ops":{}}"#);
    assert_eq!((path.as_str(), kind), ("ops", DecodeErrorKind::WrongType));
}

#[test]
fn bad_enum_values_name_the_field() {
    let (path, kind, shown) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"service.status","connector":"c","service":"broker","running":true}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("service", DecodeErrorKind::BadValue)
    );
    assert!(shown.contains("high_availability"), "{shown}");
    let (path, kind, _) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":3,"ops":[{"op":"upsert","kind":"printer","id":"p"}]}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("ops[0].kind", DecodeErrorKind::BadValue)
    );
    let (path, kind, _) = err(
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":3,"ops":[{"op":"merge","kind":"zone","id":"p"}]}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("ops[0].op", DecodeErrorKind::BadValue)
    );
}

#[test]
fn timestamps_must_be_rfc3339_utc() {
    for ts in [
        "2026-01-05T10:00:00.000+01:00",
        "2026-01-05",
        "1767603600",
        "2026-01-05T09:00:00.0001Z",
    ] {
        let json = format!(r#"{{"ts":"{ts}","type":"clock.tick"}}"#);
        let (path, kind, shown) = err(&json);
        assert_eq!(
            (path.as_str(), kind),
            ("ts", DecodeErrorKind::BadTimestamp),
            "{shown}"
        );
    }
    let (path, kind, _) = err(r#"{"ts":1767603600000,"type":"clock.tick"}"#);
    assert_eq!((path.as_str(), kind), ("ts", DecodeErrorKind::WrongType));
}

#[test]
fn canonical_timestamps_survive_round_trip() {
    let record =
        decode_record(br#"{"type":"clock.tick","ts":"2026-01-05T09:00:00.5+00:00"}"#).unwrap();
    assert_eq!(
        String::from_utf8(encode_record(&record)).unwrap(),
        r#"{"type":"clock.tick","ts":"2026-01-05T09:00:00.500Z"}"#
    );
    assert!(matches!(record, Record::ClockTick(_)));
}

/// Records written type-first (as lhc writes them) take a faster path; its errors and
/// edge cases are still the general path's.
#[test]
fn type_first_records_decode_the_same_and_fail_the_same() {
    let (path, kind, _) = err(
        r#"{"type":"health.check","ts":"2026-01-05T09:00:00.000Z","connector":"c","ok":true,"okay":1}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("okay", DecodeErrorKind::UnknownField)
    );
    let (path, kind, _) = err(
        r#"{"type":"vda.heartbeat","ts":"2026-01-05T09:00:00.000Z","machine":"m","sessions":[{"id":"s","user":"u","state":"away"}]}"#,
    );
    assert_eq!(path, "sessions[0].state");
    assert_eq!(kind, DecodeErrorKind::BadValue);
    // A second `type` key is refused as the general path refuses it.
    assert!(decode_record(
        br#"{"type":"clock.tick","ts":"2026-01-05T09:00:00.000Z","type":"clock.tick"}"#
    )
    .is_err());
    // Whitespace, escapes in the tag, or another key order: same value either way.
    let plain = decode_record(
        br#"{"type":"peer.probe","ts":"2026-01-05T09:00:00.000Z","connector":"a","peer":"b","ok":true}"#,
    )
    .unwrap();
    for variant in [
        r#"{ "type" : "peer.probe", "ts":"2026-01-05T09:00:00.000Z","connector":"a","peer":"b","ok":true}"#,
        r#"{"type":"peer\u002eprobe","ts":"2026-01-05T09:00:00.000Z","connector":"a","peer":"b","ok":true}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","connector":"a","peer":"b","ok":true,"type":"peer.probe"}"#,
    ] {
        assert_eq!(
            decode_record(variant.as_bytes()).unwrap(),
            plain,
            "{variant}"
        );
    }
}

/// A `config.change` in lhc's key order decodes on the fast path; another key order, an
/// unknown field or a missing `data` gives the same value or the same error as the
/// general path.
#[test]
fn config_changes_decode_the_same_in_any_key_order() {
    let ops = r#"[{"op":"upsert","kind":"machine","id":"m","data":{"zone":"z","delivery_group":"g"}},{"op":"upsert","kind":"user","id":"u"},{"op":"delete","kind":"zone","id":"z0"}]"#;
    let reordered = r#"[{"kind":"machine","op":"upsert","data":{"zone":"z","delivery_group":"g"},"id":"m"},{"id":"u","kind":"user","op":"upsert"},{"id":"z0","op":"delete","kind":"zone"}]"#;
    let fast = format!(
        r#"{{"type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":2,"ops":{ops}}}"#
    );
    let ts_first = format!(
        r#"{{"ts":"2026-01-05T09:00:00.000Z","type":"config.change","version":2,"ops":{ops}}}"#
    );
    let general = format!(
        r#"{{"version":2,"ops":{reordered},"ts":"2026-01-05T09:00:00.000Z","type":"config.change"}}"#
    );
    let expected = decode_record(general.as_bytes()).unwrap();
    assert_eq!(decode_record(fast.as_bytes()).unwrap(), expected);
    assert_eq!(decode_record(ts_first.as_bytes()).unwrap(), expected);
    // Errors are the general path's, located.
    let (path, kind, _) = err(
        r#"{"type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":2,"ops":[{"op":"upsert","kind":"zone","id":"z"}]}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("ops[0].data", DecodeErrorKind::MissingField)
    );
    let (path, kind, _) = err(
        r#"{"type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":2,"ops":[{"op":"upsert","kind":"zone","id":"z","data":{"name":"n"},"colour":1}]}"#,
    );
    assert_eq!(
        (path.as_str(), kind),
        ("ops[0].colour", DecodeErrorKind::UnknownField)
    );
}

/// serde's derived types also read a struct from an array of its fields and a unit enum
/// from a one-key object; the schemas refuse both, and so does the decoder, on the fast
/// path (type first, lhc's key order) and the general one alike, naming the field.
#[test]
fn nested_objects_and_enum_names_only_in_their_schema_form() {
    let cases = [
        (
            r#""type":"launch.request","ts":"2026-01-05T09:00:00.000Z","request":"r1","connector":"c","user":"u","resource":"d","client":["pc1","10.0.0.5"]"#,
            "client",
        ),
        (
            r#""type":"vda.heartbeat","ts":"2026-01-05T09:00:00.000Z","machine":"m","sessions":[["s1","alice","active"]]"#,
            "sessions[0]",
        ),
        (
            r#""type":"vda.heartbeat","ts":"2026-01-05T09:00:00.000Z","machine":"m","sessions":[{"id":"s1","user":"alice","state":{"active":null}}]"#,
            "sessions[0].state",
        ),
        (
            r#""type":"session.event","ts":"2026-01-05T09:00:00.000Z","machine":"m","session":"s","user":"u","event":{"logon":null}"#,
            "event",
        ),
        (
            r#""type":"service.status","ts":"2026-01-05T09:00:00.000Z","connector":"c","service":{"config_sync":null},"running":true"#,
            "service",
        ),
        (
            r#""type":"connector.lifecycle","ts":"2026-01-05T09:00:00.000Z","connector":"c","event":{"stop":[]}"#,
            "event",
        ),
        (
            r#""type":"admin.command","ts":"2026-01-05T09:00:00.000Z","connector":"c","command":{"enable_ha_sdk":null}"#,
            "command",
        ),
        (
            r#""type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":1,"ops":[{"op":"upsert","kind":"zone","id":"z","data":["Zone 1"]}]"#,
            "ops[0].data",
        ),
        (
            r#""type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":1,"ops":[{"op":"upsert","kind":"group","id":"g","data":[]}]"#,
            "ops[0].data",
        ),
        (
            r#""type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":1,"ops":[{"op":"upsert","kind":"delivery_group","id":"g","data":{"kind":{"multi_session":null}}}]"#,
            "ops[0].data.kind",
        ),
        (
            r#""type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":1,"ops":[{"op":"upsert","kind":"resource","id":"r","data":{"kind":{"desktop":null},"delivery_groups":["g"]}}]"#,
            "ops[0].data.kind",
        ),
        (
            r#""type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":1,"ops":[{"op":"upsert","kind":"site","id":"site","data":{"profile":{"onprem":null}}}]"#,
            "ops[0].data.profile",
        ),
        (
            r#""type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":1,"ops":[{"op":"delete","kind":{"zone":null},"id":"z"}]"#,
            "ops[0].kind",
        ),
    ];
    for (fields, path) in cases {
        // Type first (the fast path), and with a key in front of `type` (the general one).
        for json in [
            format!("{{{fields}}}"),
            format!("{{\"record_id\":null,{fields}}}"),
        ] {
            let (got, kind, shown) = err(&json);
            assert_eq!(
                (got.as_str(), kind),
                (path, DecodeErrorKind::WrongType),
                "{json}: {shown}"
            );
            assert!(shown.contains("invalid type"), "{shown}");
        }
    }
    // The schema's forms still decode, on both paths.
    for json in [
        r#"{"type":"launch.request","ts":"2026-01-05T09:00:00.000Z","request":"r1","connector":"c","user":"u","resource":"d","client":{"name":"pc1","ip":"10.0.0.5"}}"#,
        r#"{"type":"config.change","ts":"2026-01-05T09:00:00.000Z","version":1,"ops":[{"op":"upsert","kind":"site","id":"site","data":{"profile":"onprem"}},{"op":"upsert","kind":"group","id":"g"},{"op":"delete","kind":"zone","id":"z"}]}"#,
        r#"{"ts":"2026-01-05T09:00:00.000Z","type":"vda.heartbeat","machine":"m","sessions":[{"id":"s1","user":"alice","state":"active"}]}"#,
    ] {
        let record = decode_record(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"));
        assert_eq!(decode_record(&encode_record(&record)).unwrap(), record);
    }
}

/// A byte order mark inside a file (files joined together) is named as what is wrong,
/// not "expected value at line 1 column 1".
#[test]
fn a_byte_order_mark_in_front_of_a_record_is_named() {
    let (path, kind, shown) =
        err("\u{feff}{\"type\":\"clock.tick\",\"ts\":\"2026-01-05T09:00:00Z\"}");
    assert_eq!((path.as_str(), kind), ("", DecodeErrorKind::Syntax));
    assert!(shown.contains("byte order mark"), "{shown}");
}

/// "Session id, unique on its machine": a heartbeat listing one id twice is refused,
/// naming the second (it counted as two sessions and refused launches the machine had
/// room for; found by hostile testing). The same id on two machines is fine.
#[test]
fn a_heartbeat_lists_each_session_id_once() {
    let twice = r#"{"type":"vda.heartbeat","ts":"2026-01-05T09:00:00.000Z","machine":"srv01.example","sessions":[{"id":"s-1","user":"ann","state":"active"},{"id":"s-9","user":"dave","state":"active"},{"id":"s-9","user":"dave","state":"active"}]}"#;
    let (path, kind, shown) = err(twice);
    assert_eq!(path, "sessions[2].id");
    assert_eq!(kind, DecodeErrorKind::BadValue);
    assert!(
        shown.contains("\"s-9\" is listed twice (also at sessions[1])"),
        "{shown}"
    );
    // Key order other than the fast path's takes the general way: the same rule.
    let reordered = twice
        .replace(
            r#"{"type":"vda.heartbeat","ts":"2026-01-05T09:00:00.000Z","#,
            r#"{"machine":"srv01.example","ts":"2026-01-05T09:00:00.000Z","type":"vda.heartbeat","#,
        )
        .replacen(
            r#""machine":"srv01.example","sessions""#,
            r#""sessions""#,
            1,
        );
    assert_eq!(err(&reordered).0, "sessions[2].id", "{reordered}");
    let distinct = twice.replacen("\"s-9\"", "\"s-8\"", 1);
    assert!(decode_record(distinct.as_bytes()).is_ok());
}

/// An integer too large for its field reaches serde as a float: the message says so and
/// gives the field's range, not only "floating point" (found by hostile testing).
#[test]
fn an_integer_too_large_is_named_as_such() {
    let (path, kind, shown) = err(
        r#"{"type":"engine.params","ts":"2026-01-05T09:00:00.000Z","report_interval_s":18446744073709551616}"#,
    );
    assert_eq!(path, "report_interval_s");
    assert_eq!(kind, DecodeErrorKind::WrongType);
    assert!(
        shown.contains("this field holds at most 18446744073709551615"),
        "{shown}"
    );
}

/// The same rule on a long list (past the few sessions compared pairwise): the second
/// listing is named, and a long list of distinct ids decodes.
#[test]
fn a_long_heartbeat_lists_each_session_id_once() {
    let sessions = |ids: &[usize]| {
        ids.iter()
            .map(|i| format!(r#"{{"id":"s-{i}","user":"u{i}","state":"active"}}"#))
            .collect::<Vec<_>>()
            .join(",")
    };
    let record = |ids: &[usize]| {
        format!(
            r#"{{"type":"vda.heartbeat","ts":"2026-01-05T09:00:00.000Z","machine":"srv01.example","sessions":[{}]}}"#,
            sessions(ids)
        )
    };
    let distinct: Vec<usize> = (0..5000).collect();
    assert!(decode_record(record(&distinct).as_bytes()).is_ok());
    let mut twice: Vec<usize> = (0..40).collect();
    twice.push(3);
    let (path, _, shown) = err(&record(&twice));
    assert_eq!(path, "sessions[40].id");
    assert!(shown.contains("also at sessions[3]"), "{shown}");
}
