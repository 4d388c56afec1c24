//! The committed `schemas/` must equal what the types generate (R-LOG-3).
//! Run with `LHC_BLESS=1` to rewrite them, then review the diff.

use std::path::PathBuf;

#[test]
fn committed_schemas_match_the_types() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    let bless = std::env::var_os("LHC_BLESS").is_some();
    let mut stale = Vec::new();
    for file in lhc_engine::schema::generate() {
        let path = root.join(&file.path);
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &file.text).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(text) if text == file.text => {}
            Ok(_) => stale.push(format!("{} differs", file.path)),
            Err(e) => stale.push(format!("{} unreadable: {e}", file.path)),
        }
    }
    assert!(
        stale.is_empty(),
        "schemas/ is out of date with the record types: {stale:?}\n\
         regenerate with `cargo run --release -- schema --out schemas/` \
         (or LHC_BLESS=1 cargo test -p lhc-engine --test schemas) and commit the result"
    );
}

/// The published schema and the decoder agree in both directions (issue 15, item 8): every
/// record of the scenario logs is accepted by both, and each mutation of them — a tag given
/// as a number (`"op":0`, `"kind":1`, `"type":2`), an unknown key in an op or in the record,
/// a missing `ts` — is refused by both.
#[test]
fn the_schema_and_the_decoder_agree_on_generated_records() {
    use serde_json::{json, Value};
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let schema_path = root.join("../schemas/input.schema.json");
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    let input = compiler
        .compile(schema_path.to_str().unwrap(), &mut schemas)
        .expect("the published input schema compiles");
    let mut records: Vec<Value> = Vec::new();
    let dir = root.join("tests/scenarios");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "jsonl")
                && !p.to_string_lossy().ends_with(".expected.jsonl")
        })
        .collect();
    logs.sort();
    for log in logs {
        for line in std::fs::read_to_string(&log).unwrap().lines() {
            if lhc_engine::decode_record(line.as_bytes()).is_ok() {
                records.push(serde_json::from_str(line).unwrap());
            }
        }
    }
    assert!(records.len() > 1000, "{} records", records.len());
    let agree = |value: &Value, what: &str| {
        let bytes = serde_json::to_vec(value).unwrap();
        let decoded = lhc_engine::decode_record(&bytes).is_ok();
        let valid = schemas.validate(value, input).is_ok();
        assert_eq!(
            decoded,
            valid,
            "{what}: the decoder {} it, the schema {} it: {value}",
            if decoded { "accepts" } else { "refuses" },
            if valid { "accepts" } else { "refuses" }
        );
        decoded
    };
    let mut refused = 0;
    for (i, record) in records.iter().enumerate() {
        assert!(
            agree(record, "a scenario record"),
            "scenario records are valid"
        );
        let mut mutants: Vec<(Value, &str)> = Vec::new();
        let mut m = record.clone();
        m["type"] = json!(i % 13);
        mutants.push((m, "an integer type"));
        let mut m = record.clone();
        m["unexpected"] = json!(1);
        mutants.push((m, "an unknown key in the record"));
        let mut m = record.clone();
        m.as_object_mut().unwrap().remove("ts");
        mutants.push((m, "no ts"));
        if record["type"] == "config.change" && record["ops"][0].is_object() {
            let mut m = record.clone();
            m["ops"][0]["op"] = json!(0);
            mutants.push((m, "an integer op"));
            let mut m = record.clone();
            m["ops"][0]["kind"] = json!(1);
            mutants.push((m, "an integer kind"));
            let mut m = record.clone();
            m["ops"][0]["surprise"] = json!(true);
            mutants.push((m, "an unknown key in an op"));
        }
        // serde's other forms, which the schema refuses: a nested object as the array of
        // its values (`"client":["pc","10.0.0.1"]`), a string (an enum's name among them)
        // as a one-key object (`"event":{"logon":null}`). At most 8 places per record.
        let (mut objects, mut strings) = (Vec::new(), Vec::new());
        places(record, String::new(), &mut objects, &mut strings);
        for pointer in objects.iter().take(8) {
            let mut m = record.clone();
            let target = m.pointer_mut(pointer).unwrap();
            let values: Vec<Value> = target.as_object().unwrap().values().cloned().collect();
            *target = Value::Array(values);
            mutants.push((m, "a nested object as an array of its values"));
        }
        for pointer in strings.iter().take(8) {
            let mut m = record.clone();
            let target = m.pointer_mut(pointer).unwrap();
            let name = target.as_str().unwrap().to_string();
            *target = json!({ name: null });
            mutants.push((m, "a string as a one-key object"));
        }
        for (mutant, what) in mutants {
            if !agree(&mutant, what) {
                refused += 1;
            }
        }
    }
    assert!(refused > 3000, "mutants refused: {refused}");
}

/// JSON pointers of the objects nested in `value` (not `value` itself when it is the
/// record) and of its strings, in document order.
fn places(
    value: &serde_json::Value,
    at: String,
    objects: &mut Vec<String>,
    strings: &mut Vec<String>,
) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            if !at.is_empty() {
                objects.push(at.clone());
            }
            for (key, item) in map {
                places(item, format!("{at}/{key}"), objects, strings);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                places(item, format!("{at}/{i}"), objects, strings);
            }
        }
        Value::String(_) => strings.push(at),
        _ => {}
    }
}
