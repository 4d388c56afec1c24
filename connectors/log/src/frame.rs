//! On-disk framing of the embedded log (see docs/log-format.md).
//!
//! A segment file starts with a 16-byte header (magic, base offset), then frames:
//! `len: u32 LE | header_crc: u32 LE | offset: u64 LE | payload_crc: u32 LE | payload[len]`.
//! `header_crc` is CRC32C over the len and offset bytes, so a damaged length is seen as
//! damage, never trusted as "the frame is longer than the file" (which would look like a
//! torn write); `payload_crc` is CRC32C over the offset bytes and the payload. Carrying the
//! offset in each frame lets a reader prove it is where it thinks it is, whatever an index
//! says.
//!
//! Invariant: a frame is accepted only when both checksums hold and it carries the offset
//! the reader expects; anything else is `Incomplete` (the file ends inside a frame whose
//! header holds) or `Bad` (damage, described).

use crate::MAX_RECORD_BYTES;

/// Magic bytes at the start of every segment file (format 2: frames with a header checksum).
pub const SEGMENT_MAGIC: &[u8; 8] = b"LHCSEG02";
/// Magic bytes of format-1 segments (before 2026-12-01), which this version does not read.
pub const SEGMENT_MAGIC_V1: &[u8; 8] = b"LHCSEG01";
/// Bytes of the segment header.
pub const SEGMENT_HEADER_BYTES: u64 = 16;
/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 20;

/// The header of a segment whose first record has offset `base`.
pub fn segment_header(base: u64) -> [u8; 16] {
    let mut header = [0u8; 16];
    header[..8].copy_from_slice(SEGMENT_MAGIC);
    header[8..].copy_from_slice(&base.to_le_bytes());
    header
}

/// Checks a segment header; returns its base offset.
pub fn parse_segment_header(bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() < SEGMENT_HEADER_BYTES as usize {
        return Err(format!("header is {} bytes, expected 16", bytes.len()));
    }
    if &bytes[..8] == SEGMENT_MAGIC_V1 {
        return Err(
            "a format-1 segment (LHCSEG01) written by lhc before 2026-12-01: export \
                    it with that version (`lhc log export`) and import the JSONL"
                .to_string(),
        );
    }
    if &bytes[..8] != SEGMENT_MAGIC {
        return Err("bad magic bytes".to_string());
    }
    Ok(u64::from_le_bytes(
        bytes[8..16].try_into().expect("8 bytes"),
    ))
}

fn header_checksum(len: u32, offset: u64) -> u32 {
    let crc = crc32c::crc32c(&len.to_le_bytes());
    crc32c::crc32c_append(crc, &offset.to_le_bytes())
}

fn payload_checksum(offset: u64, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&offset.to_le_bytes());
    crc32c::crc32c_append(crc, payload)
}

/// Appends the frame of one record to `out`.
pub fn encode_frame(out: &mut Vec<u8>, offset: u64, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("caller bounds record size");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&header_checksum(len, offset).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&payload_checksum(offset, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Size on disk of the frame of a `payload_len`-byte record.
pub fn frame_size(payload_len: usize) -> usize {
    FRAME_HEADER_BYTES + payload_len
}

/// The result of reading a frame from the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole, valid frame.
    Frame {
        /// Offset the frame carries.
        offset: u64,
        /// Record bytes.
        payload: &'a [u8],
        /// Bytes the frame occupies.
        size: usize,
    },
    /// The buffer ends inside the frame; `needed` bytes in all would complete it (known when
    /// the header is whole and its checksum holds).
    Incomplete {
        /// Total bytes the frame needs, when its header was readable.
        needed: Option<usize>,
    },
    /// The bytes are not a valid frame.
    Bad(String),
}

/// Reads the frame at the start of `buf`, which must carry offset `expected`.
pub fn parse_frame(buf: &[u8], expected: u64) -> Parsed<'_> {
    if buf.len() < FRAME_HEADER_BYTES {
        return Parsed::Incomplete { needed: None };
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
    let header_crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let offset = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes"));
    if header_checksum(len, offset) != header_crc {
        return Parsed::Bad("frame header checksum mismatch (length or offset damaged)".into());
    }
    if len as usize > MAX_RECORD_BYTES {
        return Parsed::Bad(format!(
            "frame length {len} exceeds the maximum record size"
        ));
    }
    let size = frame_size(len as usize);
    if buf.len() < size {
        return Parsed::Incomplete { needed: Some(size) };
    }
    let payload = &buf[FRAME_HEADER_BYTES..size];
    if payload_checksum(offset, payload) != crc {
        return Parsed::Bad("payload checksum mismatch".to_string());
    }
    if offset != expected {
        return Parsed::Bad(format!(
            "frame carries offset {offset}, expected {expected}"
        ));
    }
    Parsed::Frame {
        offset,
        payload,
        size,
    }
}

/// Whether any valid frame with an offset above `after` starts anywhere in `buf`.
///
/// Tells a torn tail (nothing valid follows the damage: a crash while appending) from
/// corruption before the tail (valid records follow: the log is damaged, never truncate).
pub fn valid_frame_follows(buf: &[u8], after: u64) -> bool {
    let max_offset = after.saturating_add(buf.len() as u64 / FRAME_HEADER_BYTES as u64 + 1);
    (1..buf.len()).any(|start| {
        let rest = &buf[start..];
        if rest.len() < FRAME_HEADER_BYTES {
            return false;
        }
        let offset = u64::from_le_bytes(rest[8..16].try_into().expect("8 bytes"));
        // The cheap plausibility test first: a checksum per byte position would be slow.
        offset > after
            && offset <= max_offset
            && matches!(parse_frame(rest, offset), Parsed::Frame { .. })
    })
}

/// Whether damage found at `position` of a segment, with nothing valid after it, is what a
/// crash while appending leaves: the file ends inside a frame whose header holds (handled as
/// `Incomplete`), or the damaged bytes end in zeros (sectors the crash left unwritten; a
/// record is JSON text and never ends in a zero byte). Anything else — a flipped bit in a
/// length, a checksum or a payload that ends in its closing brace — is corruption: named,
/// never cut.
pub fn looks_torn(rest: &[u8]) -> bool {
    rest.last().is_none_or(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        encode_frame(&mut buf, 7, b"hello");
        assert_eq!(buf.len(), frame_size(5));
        assert_eq!(
            parse_frame(&buf, 7),
            Parsed::Frame {
                offset: 7,
                payload: b"hello",
                size: 25
            }
        );
        assert!(matches!(parse_frame(&buf, 8), Parsed::Bad(_)));
        assert_eq!(
            parse_frame(&buf[..24], 7),
            Parsed::Incomplete { needed: Some(25) }
        );
        assert_eq!(
            parse_frame(&buf[..3], 7),
            Parsed::Incomplete { needed: None }
        );
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let mut buf = Vec::new();
        encode_frame(&mut buf, 3, br#"{"type":"clock.tick"}"#);
        for byte in 0..buf.len() {
            for bit in 0..8 {
                let mut bad = buf.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    !matches!(parse_frame(&bad, 3), Parsed::Frame { .. }),
                    "flip of bit {bit} in byte {byte} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn every_flipped_bit_of_the_length_is_damage_not_a_short_file() {
        let mut buf = Vec::new();
        encode_frame(&mut buf, 3, br#"{"type":"clock.tick"}"#);
        for bit in 0..32 {
            let mut bad = buf.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                matches!(parse_frame(&bad, 3), Parsed::Bad(_)),
                "flip of length bit {bit} must be damage, not an incomplete frame"
            );
        }
    }

    #[test]
    fn finds_valid_frames_after_damage() {
        let mut buf = Vec::new();
        encode_frame(&mut buf, 0, b"first");
        encode_frame(&mut buf, 1, b"second");
        buf[3] = 0xff; // damage the first frame's length
        assert!(valid_frame_follows(&buf, 0));
        assert!(!valid_frame_follows(&buf[..34], 0));
    }

    #[test]
    fn segment_header_round_trip() {
        assert_eq!(parse_segment_header(&segment_header(42)), Ok(42));
        assert!(parse_segment_header(b"LHCSEG03aaaaaaaa").is_err());
        let old = parse_segment_header(b"LHCSEG01aaaaaaaa").unwrap_err();
        assert!(old.contains("format-1"), "{old}");
    }
}
