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
        let mut json = Vec::new();
        write_config(&mut json, &self.site, &self.validations).expect("a Vec takes any write");
        ConfigJson {
            site: Arc::clone(&self.site),
            validations: self.validations.clone(),
            json,
        }
    }

    /// [`Engine::digest`], writing the configuration part from `config` when this state
    /// holds the configuration it was written from (else as usual): the same digest either
    /// way, without serializing the configuration again.
    pub fn digest_reusing(&self, config: &ConfigJson) -> String {
        self.digest_with(config.fits(self).then_some(config.json.as_slice()))
    }

    /// The digest, with the configuration part's JSON given or written.
    fn digest_with(&self, config: Option<&[u8]>) -> String {
        use sha2::Digest;
        // serde_json writes in small pieces; a buffer hands the hash whole blocks.
        let mut out = std::io::BufWriter::with_capacity(64 << 10, Hashing(sha2::Sha256::new()));
        self.write_canonical(&mut out, config)
            .expect("the state serializes and hashing cannot fail");
        let hash = out
            .into_inner()
            .map_err(|_| "hashing cannot fail")
            .expect("hashing")
            .0
            .finalize();
        hash.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Writes what `serde_json::to_writer(self)` writes (the fields in declaration order,
    /// `record_ids` skipped when empty, the derived ones never), with the configuration
    /// part's JSON taken from `config` when given.
    fn write_canonical(&self, out: &mut impl Write, config: Option<&[u8]>) -> std::io::Result<()> {
        // Named one by one, without `..`: a field added to the state must be placed here.
        let Engine {
            params,
            now,
            site,
            validations,
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
        } = self;
        field(out, b"{\"params\":", params)?;
        field(out, b",\"now\":", now)?;
        out.write_all(b",")?;
        match config {
            Some(json) => out.write_all(json)?,
            None => write_config(out, site, validations)?,
        }
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
                for config in &earlier {
                    assert_eq!(engine.digest_reusing(config), digest, "{name} @{offset}");
                    if config.fits(&engine) {
                        reused_some = true;
                    } else {
                        fell_back = true;
                    }
                }
                earlier.push(engine.config_json());
            }
        }
        assert!(reused_some && fell_back, "both paths were taken");
    }
}
