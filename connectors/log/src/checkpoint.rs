//! The checkpoint format: the engine state after the first N records of a log, as bytes,
//! shared by the checkpoint files beside an embedded log (`lhc-replay`) and the checkpoints
//! a node keeps in its RocksDB (`lhc-node`), so both are written and read by one code.
//!
//! A checkpoint is one JSON header line ([`Header`]), then two zstd frames: the
//! configuration part (JSON) and the state rows (`Engine::for_each_state_row`, each key and
//! value after its length).
//!
//! Invariant: this module only encodes and decodes. Whether a checkpoint may be used (its
//! build, the hashes of the log's records, the digest of the state rebuilt from it) is the
//! reader's to check, with [`Header`]'s fields and [`verify`]; nothing here trusts a
//! checkpoint it did not check, and a damaged one is an `Err` that says why, never a panic.

use std::collections::BTreeMap;

use lhc_engine::{ConfigPart, Engine, Ts, Validation};
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The format named in every header.
pub const FORMAT: &str = "lhc-checkpoint/1";
/// Records hashed between the first and the last a checkpoint covers.
pub const SAMPLES: u64 = 16;
/// Longest header line read.
pub const MAX_HEADER_BYTES: u64 = 64 << 10;
/// Records between two checkpoints when the user does not say.
pub const DEFAULT_EVERY: u64 = 150_000;

/// The bytes of the record at `offset` of `log`; `None` when the log does not hold it.
pub fn record_bytes(log: &dyn crate::Log, offset: u64) -> Result<Option<Vec<u8>>, crate::LogError> {
    record_bytes_in(log, offset, log.start_offset()?..log.end_offset()?)
}

/// [`record_bytes`] for a caller that already asked the log which offsets it `holds`
/// (each ask is a round trip to the brokers on Kafka; a check of many records asks once).
pub fn record_bytes_in(
    log: &dyn crate::Log,
    offset: u64,
    holds: std::ops::Range<u64>,
) -> Result<Option<Vec<u8>>, crate::LogError> {
    if !holds.contains(&offset) {
        return Ok(None);
    }
    let mut reader = log.reader(offset)?;
    Ok(reader
        .next(std::time::Duration::ZERO)?
        .filter(|e| e.offset == offset)
        .map(|e| e.bytes))
}

/// The record hashes a checkpoint covering `next_offset` records names: of the first, of
/// the last, and of those at [`sample_offsets`], each asked of `hash`; `None` when one of
/// them is not there.
#[allow(clippy::type_complexity)]
pub fn record_hashes<E>(
    next_offset: u64,
    mut hash: impl FnMut(u64) -> Result<Option<String>, E>,
) -> Result<Option<(String, String, Vec<String>)>, E> {
    let (Some(first), Some(last)) = (hash(0)?, hash(next_offset.saturating_sub(1))?) else {
        return Ok(None);
    };
    let mut samples = Vec::with_capacity(SAMPLES as usize);
    for offset in sample_offsets(next_offset) {
        match hash(offset)? {
            Some(h) => samples.push(h),
            None => return Ok(None),
        }
    }
    Ok(Some((first, last, samples)))
}

/// Largest state a header may claim (a damaged length must not allocate the machine away).
pub const MAX_STATE_BYTES: u64 = 16 << 30;

/// The offsets whose records a checkpoint covering `next_offset` records samples.
pub fn sample_offsets(next_offset: u64) -> Vec<u64> {
    (1..=SAMPLES)
        .map(|k| next_offset.saturating_mul(k) / (SAMPLES + 1))
        .collect()
}

/// SHA-256 of `bytes`, hex: how a header names a record.
pub fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a checkpoint says about itself, on its first line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always `lhc-checkpoint/1`.
    pub format: String,
    /// The build whose engine wrote it (a checkpoint of another build may fold differently).
    pub build: String,
    /// Records covered: offsets `0..next_offset` were applied.
    pub next_offset: u64,
    /// Of those, the ones the engine quarantined.
    pub quarantined: u64,
    /// Time of the first decodable record.
    pub first_ts: Option<Ts>,
    /// Latest time of any decodable record covered (a record older than its predecessor is
    /// quarantined, so this can exceed `last_ts`).
    pub max_ts: Option<Ts>,
    /// Time of the last decodable record covered.
    pub last_ts: Option<Ts>,
    /// SHA-256 of the log's first record, hex: a checkpoint of another log is not used.
    pub first_record: String,
    /// SHA-256 of the last record covered (offset `next_offset - 1`), hex.
    pub last_record: String,
    /// SHA-256 of the records at [`SAMPLES`] offsets spread over those covered
    /// ([`sample_offsets`]), hex, in order: with the first and last, what says the log is
    /// the one it was written from.
    pub samples: Vec<String>,
    /// Digest of the state that follows (`Engine::digest`).
    pub digest: String,
    /// The two zstd frames after the header: the configuration part, then the state rows.
    pub parts: [Part; 2],
    /// SHA-256 of this header's JSON with `seal` empty, hex: the digest covers the state,
    /// this covers the header (a damaged `max_ts` would pick the wrong checkpoint).
    pub seal: String,
}

impl Header {
    /// Seals the header again after an edit (tests use it to make a checkpoint whose header
    /// is whole but whose digest does not match its state).
    pub fn reseal(&mut self) {
        self.seal = self.compute_seal();
    }

    /// The seal of this header's other fields.
    fn compute_seal(&self) -> String {
        let unsealed = Header {
            seal: String::new(),
            ..self.clone()
        };
        sha256_hex(&serde_json::to_vec(&unsealed).expect("a header serializes"))
    }

    /// Bytes the two parts take after the header line, refused when the header claims
    /// more than a state can be (damaged).
    pub fn body_len(&self) -> Result<u64, String> {
        let [config, rows] = self.parts;
        if config.bytes.max(rows.bytes) > MAX_STATE_BYTES {
            return Err("its header claims a state too large to be one (damaged)".into());
        }
        config
            .compressed
            .checked_add(rows.compressed)
            .filter(|&n| n <= MAX_STATE_BYTES)
            .ok_or_else(|| "its header claims parts too large to be real (damaged)".into())
    }
}

/// One compressed part of a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// Bytes in the file.
    pub compressed: u64,
    /// Bytes once decompressed.
    pub bytes: u64,
}

/// What a writer counts of the records it applies, for the headers of its checkpoints:
/// how many were quarantined, and their times. Every writer (a replay's, a node's) follows
/// it the same way, so their checkpoints are the same bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Coverage {
    /// Records the engine quarantined.
    pub quarantined: u64,
    /// Time of the first decodable record.
    pub first_ts: Option<Ts>,
    /// Latest time of any decodable record.
    pub max_ts: Option<Ts>,
    /// Time of the last decodable record.
    pub last_ts: Option<Ts>,
}

impl Coverage {
    /// A decodable record with this time, about to be applied (a quarantined one counts).
    pub fn saw(&mut self, ts: Ts) {
        self.first_ts.get_or_insert(ts);
        self.max_ts = self.max_ts.max(Some(ts));
        self.last_ts = Some(ts);
    }

    /// What a checkpoint's header says of its records.
    pub fn of(header: &Header) -> Coverage {
        Coverage {
            quarantined: header.quarantined,
            first_ts: header.first_ts,
            max_ts: header.max_ts,
            last_ts: header.last_ts,
        }
    }
}

/// What the writer knows of the records a checkpoint covers, besides the state: the
/// header's fields that are not computed from the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct Covered {
    /// The build writing it.
    pub build: String,
    /// Records covered.
    pub next_offset: u64,
    /// Their quarantines and times.
    pub coverage: Coverage,
    /// SHA-256 of the first record, hex.
    pub first_record: String,
    /// SHA-256 of the last record covered, hex.
    pub last_record: String,
    /// SHA-256 of the records at [`sample_offsets`], hex, in order.
    pub samples: Vec<String>,
}

/// The configuration part as written: the same JSON as [`ConfigPart`], borrowed.
#[derive(Serialize)]
struct ConfigRef<'a> {
    site: &'a lhc_engine::site::SiteConfig,
    validations: &'a BTreeMap<u64, Validation>,
}

/// A checkpoint's bytes: header line, configuration part, state rows. Compressing fails
/// only when zstd cannot allocate.
pub fn encode(engine: &Engine, covered: Covered) -> std::io::Result<Vec<u8>> {
    Encoder::default().encode(engine, covered)
}

/// Encodes checkpoints one after the other ([`encode`]), keeping the last configuration
/// part compressed: a site's configuration (tens of megabytes of JSON at 40,000 VDAs)
/// rarely changes between two checkpoints, and serializing and compressing it again made
/// about a third of each checkpoint's cost. The bytes are those [`encode`] makes.
#[derive(Default)]
pub struct Encoder {
    /// The configuration part last encoded.
    last: Option<LastConfig>,
}

/// A configuration part as [`Encoder`] keeps it.
struct LastConfig {
    /// The site, held so that its address names it (an engine changes a site it shares
    /// by copying it).
    site: std::sync::Arc<lhc_engine::site::SiteConfig>,
    /// The validations (their snapshots held, as the site).
    validations: BTreeMap<u64, Validation>,
    /// The part's length.
    bytes: u64,
    /// The part compressed.
    compressed: Vec<u8>,
}

impl Encoder {
    /// A checkpoint's bytes, as [`encode`] makes them.
    pub fn encode(&mut self, engine: &Engine, covered: Covered) -> std::io::Result<Vec<u8>> {
        // Level 1: the state compresses about tenfold (JSON of many alike objects) and
        // writing stays cheap.
        let compress = |bytes: &[u8]| zstd::bulk::compress(bytes, 1);
        let site = engine.shared_site();
        let reusable = self.last.as_ref().is_some_and(|last| {
            std::sync::Arc::ptr_eq(&last.site, &site)
                && same(&last.validations, engine.validations())
        });
        if !reusable {
            let mut config = Vec::new();
            serde_json::to_writer(
                &mut config,
                &ConfigRef {
                    site: &site,
                    validations: engine.validations(),
                },
            )
            .expect("configuration serializes");
            self.last = Some(LastConfig {
                compressed: compress(&config)?,
                site,
                validations: engine.validations().clone(),
                bytes: config.len() as u64,
            });
        }
        let last = self.last.as_ref().expect("set above");
        let (config_len, config_z) = (&last.bytes, &last.compressed);
        let rows = encode_rows(engine);
        let rows_z = compress(&rows)?;
        let mut header = Header {
            format: FORMAT.into(),
            build: covered.build,
            next_offset: covered.next_offset,
            quarantined: covered.coverage.quarantined,
            first_ts: covered.coverage.first_ts,
            max_ts: covered.coverage.max_ts,
            last_ts: covered.coverage.last_ts,
            first_record: covered.first_record,
            last_record: covered.last_record,
            samples: covered.samples,
            digest: engine.digest(),
            parts: [
                Part {
                    compressed: config_z.len() as u64,
                    bytes: *config_len,
                },
                Part {
                    compressed: rows_z.len() as u64,
                    bytes: rows.len() as u64,
                },
            ],
            seal: String::new(),
        };
        header.reseal();
        let mut out = serde_json::to_vec(&header).expect("header serializes");
        out.push(b'\n');
        out.reserve(config_z.len() + rows_z.len());
        out.extend_from_slice(config_z);
        out.extend_from_slice(&rows_z);
        Ok(out)
    }
}

/// Whether two sets of validations are the same: the same versions, each the same shared
/// snapshot (held by `held`, so its address names it) or the same failures. (Comparing
/// snapshots by value would walk tens of thousands of machines.)
fn same(held: &BTreeMap<u64, Validation>, now: &BTreeMap<u64, Validation>) -> bool {
    held.len() == now.len()
        && held.iter().zip(now).all(|((a, x), (b, y))| {
            a == b
                && match (x, y) {
                    (Validation::Valid(x), Validation::Valid(y)) => std::sync::Arc::ptr_eq(x, y),
                    (Validation::Invalid(x), Validation::Invalid(y)) => x == y,
                    _ => false,
                }
        })
}

/// The header a line holds (its newline included or not), refused when it does not parse
/// or does not match its seal.
pub fn parse_header(line: &[u8]) -> Result<Header, String> {
    let header: Header =
        serde_json::from_slice(line).map_err(|e| format!("unreadable header: {e}"))?;
    if header.seal != header.compute_seal() {
        return Err("its header does not match its seal (damaged)".into());
    }
    Ok(header)
}

/// A whole checkpoint held in memory, split into its header and the bytes after it.
pub fn split(bytes: &[u8]) -> Result<(Header, &[u8]), String> {
    let within = &bytes[..bytes.len().min(MAX_HEADER_BYTES as usize)];
    let end = within
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line (damaged)")?;
    Ok((parse_header(&bytes[..end])?, &bytes[end + 1..]))
}

/// The engine a checkpoint's body (the bytes after its header) rebuilds: everything but
/// the digest check ([`verify`]). Refused when the body is not as long as the header says.
pub fn rebuild(header: &Header, body: &[u8]) -> Result<Engine, String> {
    rebuild_parts(header, body, false).map(|rebuilt| rebuilt.engine)
}

/// A checkpoint's engine rebuilt for a reader that checks its digest on another thread
/// while the engine goes on ([`rebuild_parts`]).
#[derive(Debug)]
pub struct Rebuilt {
    /// The engine.
    pub engine: Engine,
    /// A copy of it, for the digest check (`None` unless asked for).
    pub copy: Option<Engine>,
    /// The buffer the configuration part was decompressed into (cleared): its pages are
    /// already in memory, and writing the rebuilt configuration's JSON for the digest check
    /// ([`lhc_engine::Engine::config_json_in`]) needs as many.
    pub spare: Vec<u8>,
}

/// [`rebuild`], with a copy of the engine for a digest check when `copy` (made while the
/// configuration part is still being parsed: copying the state of 40,000 machines took
/// ~30 ms a query otherwise waited for), and the configuration part's buffer.
pub fn rebuild_parts(header: &Header, body: &[u8], copy: bool) -> Result<Rebuilt, String> {
    let expected = header.body_len()?;
    if body.len() as u64 != expected {
        return Err(format!(
            "it holds {} bytes after its header, not what its header says (damaged or cut \
             short)",
            body.len(),
        ));
    }
    let [config, rows] = header.parts;
    let (first, second) = body.split_at(config.compressed as usize);
    // The two parts are parsed at once, one on each core: loading is most of the time a
    // query from a checkpoint takes.
    let parse_config = || -> Result<(ConfigPart, Vec<u8>), String> {
        let mut bytes = decompress(first, config.bytes)?;
        let part =
            serde_json::from_slice(&bytes).map_err(|e| format!("unreadable configuration: {e}"))?;
        bytes.clear();
        Ok((part, bytes))
    };
    let (config, engines) = std::thread::scope(|scope| {
        let parsed = std::thread::Builder::new()
            .name("lhc-checkpoint-config".into())
            .spawn_scoped(scope, parse_config);
        let engines = decompress(second, rows.bytes)
            .and_then(|bytes| engine_from_rows(&bytes))
            .map(|engine| {
                let copy = copy.then(|| engine.clone());
                (engine, copy)
            });
        // Without a thread to spare (the system refused one), parsed here after.
        let config = match parsed {
            Ok(parsed) => parsed.join().expect("parsing does not panic"),
            Err(_) => parse_config(),
        };
        (config, engines)
    });
    let (mut engine, mut copy) = engines?;
    let (config, spare) = config?;
    if let Some(copy) = &mut copy {
        copy.restore_config(config.clone());
    }
    engine.restore_config(config);
    engine
        .check_restored()
        .map_err(|e| format!("its state breaks an engine invariant: {e}"))?;
    Ok(Rebuilt {
        engine,
        copy,
        spare,
    })
}

/// A zstd frame of `bytes` bytes, decompressed into one allocation of that size: growing a
/// buffer of tens of MB costs more in page faults than the decompression itself.
fn decompress(frame: &[u8], bytes: u64) -> Result<Vec<u8>, String> {
    let out = zstd::bulk::decompress(frame, bytes as usize)
        .map_err(|e| format!("unreadable state: the compressed part is damaged (zstd: {e})"))?;
    if out.len() as u64 != bytes {
        return Err(format!(
            "a part is {} bytes, not the {bytes} its header says (damaged)",
            out.len()
        ));
    }
    Ok(out)
}

/// The state rows of `engine` (`Engine::for_each_state_row`), each as its key and value,
/// both preceded by their length (4 bytes, little-endian).
fn encode_rows(engine: &Engine) -> Vec<u8> {
    let mut out = Vec::new();
    engine.for_each_state_row(|key, value| {
        for part in [key, value] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part);
        }
    });
    out
}

/// The engine the rows of [`encode_rows`] make (configuration part empty).
fn engine_from_rows(mut bytes: &[u8]) -> Result<Engine, String> {
    let mut rows = lhc_engine::rows::StateRows::new();
    fn take<'a>(bytes: &mut &'a [u8]) -> Result<&'a [u8], String> {
        let cut = "unreadable state: a row is cut short (damaged)";
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or(cut)?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(cut.into());
        }
        let (part, rest) = rest.split_at(len);
        *bytes = rest;
        Ok(part)
    }
    while !bytes.is_empty() {
        let key = take(&mut bytes)?;
        let value = take(&mut bytes)?;
        rows.add(key, value)
            .map_err(|e| format!("unreadable state: {e}"))?;
    }
    rows.finish()
        .map_err(|e| format!("unreadable state: {e}"))?
        .ok_or_else(|| "unreadable state: no rows".to_string())
}

/// Whether the digest of the rebuilt `engine` is the one written with it.
pub fn verify(engine: &Engine, written: &str) -> Result<(), String> {
    compare(engine.digest(), written)
}

/// [`verify`], with the configuration part's JSON already written from `engine`
/// ([`Engine::config_json`]).
pub fn verify_reusing(
    engine: &Engine,
    config: &lhc_engine::engine::ConfigJson,
    written: &str,
) -> Result<(), String> {
    compare(engine.digest_reusing(config), written)
}

fn compare(digest: String, written: &str) -> Result<(), String> {
    if digest == written {
        Ok(())
    } else {
        Err(format!(
            "the state rebuilt from it has digest {digest}, not the {written} written with it \
             (damaged)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covered(next_offset: u64) -> Covered {
        Covered {
            build: "test".into(),
            next_offset,
            coverage: Coverage {
                quarantined: 0,
                first_ts: Some(Ts(1)),
                max_ts: Some(Ts(2)),
                last_ts: Some(Ts(2)),
            },
            first_record: sha256_hex(b"a"),
            last_record: sha256_hex(b"b"),
            samples: vec![sha256_hex(b"c"); SAMPLES as usize],
        }
    }

    /// An encoder that keeps the last configuration part writes the bytes a fresh
    /// encoding writes, whether the configuration changed between two checkpoints or not.
    #[test]
    fn an_encoder_writes_what_encode_writes_as_the_configuration_changes_or_not() {
        let example = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/examples/site-outage.jsonl"
        ))
        .unwrap();
        let mut engine = Engine::new();
        let mut encoder = Encoder::default();
        let (mut reused, mut changed) = (0, 0);
        let mut site = engine.shared_site();
        let mut validations = engine.validations().clone();
        for (offset, line) in example.lines().enumerate() {
            engine.apply(
                offset as u64,
                lhc_engine::decode_record_at(line.as_bytes(), offset as u64),
                &mut Vec::new(),
            );
            let mine = encoder.encode(&engine, covered(offset as u64 + 1)).unwrap();
            assert_eq!(
                mine,
                encode(&engine, covered(offset as u64 + 1)).unwrap(),
                "offset {offset}"
            );
            let now = engine.shared_site();
            if std::sync::Arc::ptr_eq(&site, &now) && *engine.validations() == validations {
                reused += 1;
            } else {
                changed += 1;
            }
            (site, validations) = (now, engine.validations().clone());
        }
        assert!(
            reused > 0 && changed > 1,
            "{reused} reused, {changed} changed"
        );
    }

    #[test]
    fn a_checkpoint_rebuilds_its_engine_and_a_damaged_one_is_named() {
        let engine = Engine::new();
        let bytes = encode(&engine, covered(3)).unwrap();
        let (header, body) = split(&bytes).unwrap();
        assert_eq!(header.next_offset, 3);
        let rebuilt = rebuild(&header, body).unwrap();
        verify(&rebuilt, &header.digest).unwrap();
        // Cut short, grown, or the header edited without its seal: each refused.
        assert!(rebuild(&header, &body[..body.len() - 1])
            .unwrap_err()
            .contains("cut short"));
        let mut longer = body.to_vec();
        longer.push(0);
        assert!(rebuild(&header, &longer).is_err());
        let text =
            String::from_utf8_lossy(&bytes).replacen("\"next_offset\":3", "\"next_offset\":4", 1);
        assert!(split(text.as_bytes()).unwrap_err().contains("seal"));
        assert!(split(b"no newline").unwrap_err().contains("no header line"));
        assert!(verify(&rebuilt, "0").unwrap_err().contains("not the 0"));
    }
}
