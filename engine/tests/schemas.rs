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
