//! The state digest that replay chains verify: SHA-256 of the state's canonical JSON, which
//! is serde_json's compact form of [`Engine`], written here field by field so that the
//! configuration part (tens of MB at a big site) can be written once and reused.
//!
//! Invariant: every digest hashes exactly the bytes `serde_json::to_writer(engine)` writes.
//! A [`ConfigJson`] stands in for the configuration part only of a state that holds the
//! very objects it was written from; it keeps them shared while it lives, so none of them
//! can be changed in place (a change copies a shared object first: a new object, which it
//! does not fit).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use serde::Serialize;

use super::{Engine, Validation};
use crate::site::SiteConfig;

/// The canonical JSON of a state's configuration part (`"site":…,"validations":…`), kept
/// with the objects it was written from, for the digests of later states that still hold
/// them ([`Engine::digest_reusing`]): a query from a checkpoint writes it once for the
/// check of the checkpoint and reuses it for the answer.
#[derive(Debug)]
pub struct ConfigJson {
    site: Arc<SiteConfig>,
    validations: BTreeMap<u64, Validation>,
    json: Vec<u8>,
    /// The start of a later state's JSON (its parameters and clock, then this
    /// configuration) and the hash of it, written ahead: [`ConfigJson::anticipate`].
    head: Option<(Vec<u8>, sha2::Sha256)>,
}

impl ConfigJson {
    /// Whether `engine` holds the configuration this was written from: the same site
    /// object and the same validations (the same snapshot objects, equal failures).
    fn fits(&self, engine: &Engine) -> bool {
        Arc::ptr_eq(&self.site, &engine.site)
            && self.validations.len() == engine.validations.len()
            && self
                .validations
                .iter()
                .zip(&engine.validations)
                .all(|((v1, a), (v2, b))| {
                    v1 == v2
                        && match (a, b) {
                            (Validation::Valid(a), Validation::Valid(b)) => Arc::ptr_eq(a, b),
                            (Validation::Invalid(a), Validation::Invalid(b)) => a == b,
                            _ => false,
                        }
                })
    }

    /// Hashes ahead the start of the JSON of a later state that holds this configuration,
    /// `engine`'s parameters and the clock `now`: that state's digest
    /// ([`Engine::digest_reusing`]) then only writes what follows (a query knows the clock
    /// its answer will have, the instant asked, and its check has a core to spare). A
    /// state whose start differs is digested as usual.
    pub fn anticipate(&mut self, engine: &Engine, now: crate::Ts) {
        use sha2::Digest;
        let mut start = Vec::new();
        write_start(&mut start, &engine.params, &Some(now)).expect("a Vec takes any write");
        let mut hash = sha2::Sha256::new();
        hash.update(&start);
        hash.update(&self.json);
        self.head = Some((start, hash));
    }
}

/// Feeds the JSON to the hash as it is written: a 40,000-VDA state's JSON is tens of MB,
/// which a buffer would allocate (and fault in) at every digest.
struct Hashing(sha2::Sha256);

impl Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(&mut self.0, bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `value`'s compact JSON after `key` (the field's name, quoted, and a colon).
fn field<T: Serialize + ?Sized>(
    out: &mut impl Write,
    key: &[u8],
    value: &T,
) -> std::io::Result<()> {
    out.write_all(key)?;
    serde_json::to_writer(&mut *out, value).map_err(std::io::Error::other)
}

/// The state's JSON before its configuration part: `{"params":…,"now":…,`.
fn write_start(
    out: &mut impl Write,
    params: &crate::params::Params,
    now: &Option<crate::Ts>,
) -> std::io::Result<()> {
    field(out, b"{\"params\":", params)?;
    field(out, b",\"now\":", now)?;
    out.write_all(b",")
}

/// The configuration part's two fields, as the state's JSON holds them.
fn write_config(
    out: &mut impl Write,
    site: &SiteConfig,
    validations: &BTreeMap<u64, Validation>,
) -> std::io::Result<()> {
    field(out, b"\"site\":", site)?;
    field(out, b",\"validations\":", validations)
}

impl Engine {
    /// Canonical digest of the whole state: SHA-256 of its canonical JSON, hex.
    pub fn digest(&self) -> String {
        self.digest_with(None)
    }

    /// The canonical JSON of the configuration part, for [`Engine::digest_reusing`].
    pub fn config_json(&self) -> ConfigJson {
        self.config_json_in(Vec::new())
    }

    /// [`Engine::config_json`], written into `json` (cleared first): a buffer already
    /// grown to about its size saves growing a new one of tens of MB.
    pub fn config_json_in(&self, mut json: Vec<u8>) -> ConfigJson {
        json.clear();
        write_config(&mut json, &self.site, &self.validations).expect("a Vec takes any write");
        ConfigJson {
            site: Arc::clone(&self.site),
            validations: self.validations.clone(),
            json,
            head: None,
        }
    }

    /// [`Engine::digest`], writing the configuration part from `config` when this state
    /// holds the configuration it was written from (else as usual), and starting from the
    /// hash written ahead when this state starts as anticipated
    /// ([`ConfigJson::anticipate`]): the same digest either way, with less to write.
    pub fn digest_reusing(&self, config: &ConfigJson) -> String {
        if !config.fits(self) {
            return self.digest_with(None);
        }
        if let Some((start, hash)) = &config.head {
            let mut mine = Vec::with_capacity(start.len());
            write_start(&mut mine, &self.params, &self.now).expect("a Vec takes any write");
            if mine == *start {
                let mut out = hashing(hash.clone());
                self.write_rest(&mut out)
                    .expect("the state serializes and hashing cannot fail");
                return finish(out);
            }
        }
        self.digest_with(Some(config.json.as_slice()))
    }

    /// The digest, with the configuration part's JSON given or written.
    fn digest_with(&self, config: Option<&[u8]>) -> String {
        use sha2::Digest;
        let mut out = hashing(sha2::Sha256::new());
        self.write_canonical(&mut out, config)
            .expect("the state serializes and hashing cannot fail");
        finish(out)
    }

    /// Writes what `serde_json::to_writer(self)` writes (the fields in declaration order,
    /// `record_ids` skipped when empty, the derived ones never), with the configuration
    /// part's JSON taken from `config` when given.
    fn write_canonical(&self, out: &mut impl Write, config: Option<&[u8]>) -> std::io::Result<()> {
        write_start(out, &self.params, &self.now)?;
        match config {
            Some(json) => out.write_all(json)?,
            None => write_config(out, &self.site, &self.validations)?,
        }
        self.write_rest(out)
    }

    /// The fields after the configuration part, and the closing brace.
    fn write_rest(&self, out: &mut impl Write) -> std::io::Result<()> {
        // Named one by one, without `..`: a field added to the state must be placed here
        // (or in `write_start` or the configuration part).
        let Engine {
            params: _,
            now: _,
            site: _,
            validations: _,
            connectors,
            connector_order,
            machines,
            pools,
            user_sessions,
            cloud_assignments,
            cloud_assigned,
            pending_expiry,
            record_ids,
            cloud: _,
            quiet_until: _,
            remote_pc_groups: _,
            one_by_one: _,
        } = self;
        field(out, b",\"connectors\":", connectors)?;
        field(out, b",\"connector_order\":", connector_order)?;
        field(out, b",\"machines\":", machines)?;
        field(out, b",\"pools\":", pools)?;
        field(out, b",\"user_sessions\":", user_sessions)?;
        field(out, b",\"cloud_assignments\":", cloud_assignments)?;
        field(out, b",\"cloud_assigned\":", cloud_assigned)?;
        field(out, b",\"pending_expiry\":", pending_expiry)?;
        if !record_ids.is_empty() {
            field(out, b",\"record_ids\":", record_ids)?;
        }
        out.write_all(b"}")
    }
}

/// A hash fed through a buffer: serde_json writes in small pieces, the hash takes whole
/// blocks.
fn hashing(hash: sha2::Sha256) -> std::io::BufWriter<Hashing> {
    std::io::BufWriter::with_capacity(64 << 10, Hashing(hash))
}

/// The hash's hex digest.
fn finish(out: std::io::BufWriter<Hashing>) -> String {
    use sha2::Digest;
    let hash = out
        .into_inner()
        .map_err(|_| "hashing cannot fail")
        .expect("hashing")
        .0
        .finalize();
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode_record_at;

    /// The digest as it was defined before it was written field by field: of serde's JSON.
    fn serde_digest(engine: &Engine) -> String {
        use sha2::Digest;
        let json = serde_json::to_vec(engine).unwrap();
        sha2::Sha256::digest(&json)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn scenario(name: &str) -> Vec<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/scenarios")
            .join(format!("{name}.jsonl"));
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// After every record of logs with configuration changes, refused versions, connectors
    /// on older snapshots and record ids: the digest is serde's, and a configuration JSON
    /// written at any earlier record gives the same digest (reused while it fits).
    #[test]
    fn digest_is_serdes_and_reusing_changes_nothing() {
        let mut reused_some = false;
        let mut written_ahead = false;
        let mut fell_back = false;
        for name in [
            "r-css-2",
            "r-css-3",
            "r-css-3-change-during-import",
            "r-css-4",
            "lhc-rid-1-record-ids",
            "r-launch-5-remote-pc",
        ] {
            let mut engine = Engine::new();
            let mut outputs = Vec::new();
            let mut earlier: Vec<ConfigJson> = Vec::new();
            for (offset, line) in scenario(name).iter().enumerate() {
                engine.apply(
                    offset as u64,
                    decode_record_at(line.as_bytes(), offset as u64),
                    &mut outputs,
                );
                let digest = engine.digest();
                assert_eq!(
                    digest,
                    serde_digest(&engine),
                    "{name} after offset {offset}"
                );
                for config in &mut earlier {
                    assert_eq!(engine.digest_reusing(config), digest, "{name} @{offset}");
                    // Written ahead for this clock (used when the parameters match too),
                    // and for another one (never used): the same digest.
                    let now = engine.now.unwrap_or(crate::Ts(0));
                    for anticipated in [now, crate::Ts(now.0 + 1)] {
                        config.anticipate(&engine, anticipated);
                        assert_eq!(engine.digest_reusing(config), digest, "{name} @{offset}");
                    }
                    if config.fits(&engine) {
                        reused_some = true;
                        written_ahead |= engine.now.is_some();
                    } else {
                        fell_back = true;
                    }
                }
                earlier.push(engine.config_json());
            }
        }
        assert!(
            reused_some && fell_back && written_ahead,
            "every path was taken"
        );
    }
}
