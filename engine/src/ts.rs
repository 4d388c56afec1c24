//! Record timestamps: the only clock the engine knows.
//!
//! A [`Ts`] is a count of milliseconds since the Unix epoch, UTC. On the wire it is an
//! RFC 3339 string in UTC (`Z` or `+00:00`) with at most millisecond precision; it is
//! always written back in one canonical form (`2026-01-05T09:14:07.250Z`) so outputs are
//! byte-identical whatever form the input used.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::string_form;

/// Prefix of every timestamp error message; the decoder classifies errors by it.
pub const TIMESTAMP_ERROR_PREFIX: &str = "invalid timestamp";

/// Pattern of an accepted timestamp, published in the JSON Schemas.
pub const TIMESTAMP_PATTERN: &str =
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,3})?([Zz]|\+00:00)$";

/// A record time: milliseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ts(pub i64);

impl Ts {
    /// Milliseconds since the Unix epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// This instant plus `seconds` (saturating, so a huge parameter never wraps).
    pub fn plus_s(self, seconds: u64) -> Ts {
        Ts(self.0.saturating_add(seconds_ms(seconds)))
    }

    /// Whole seconds from `earlier` to `self` (negative if `earlier` is later).
    pub fn seconds_since(self, earlier: Ts) -> i64 {
        (self.0 - earlier.0).div_euclid(1000)
    }

    /// Parses an RFC 3339 UTC timestamp with at most millisecond precision.
    pub fn parse(text: &str) -> Result<Ts, String> {
        let bad = |why: &str| {
            format!(
                "{TIMESTAMP_ERROR_PREFIX} {text:?}: {why}; expected RFC 3339 in UTC with at most \
                 millisecond precision, like \"2026-01-05T09:14:07.250Z\""
            )
        };
        let bytes = text.as_bytes();
        let utc_suffix = text.ends_with('Z') || text.ends_with('z') || text.ends_with("+00:00");
        if !utc_suffix {
            return Err(bad("not in UTC"));
        }
        if !matches!(bytes.get(10), Some(b'T' | b't')) {
            return Err(bad("date and time must be separated by 'T'"));
        }
        // Digits after the seconds' decimal point, if any: the engine keeps milliseconds,
        // so finer precision would be silently lost on replay.
        if bytes.len() > 19 && bytes[19] == b'.' {
            let digits = bytes[20..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if digits == 0 || digits > 3 {
                return Err(bad("fraction of a second must have 1 to 3 digits"));
            }
        }
        let parsed = DateTime::parse_from_rfc3339(text).map_err(|e| bad(&e.to_string()))?;
        Ok(Ts(parsed.timestamp_millis()))
    }

    /// The canonical text form, `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub fn to_rfc3339(self) -> String {
        let mut buf = [0u8; CANONICAL_LEN];
        match self.write_canonical(&mut buf) {
            Some(text) => text.to_string(),
            None => self.to_rfc3339_slow(),
        }
    }

    /// The canonical form by chrono, for the years outside 0000-9999 (which it writes with
    /// a sign) and instants it cannot represent.
    fn to_rfc3339_slow(self) -> String {
        match DateTime::<Utc>::from_timestamp_millis(self.0) {
            Some(t) => t.to_rfc3339_opts(SecondsFormat::Millis, true),
            None => format!("invalid-ts({})", self.0),
        }
    }

    /// Writes the canonical form into `buf` without allocating, for the years 0000-9999
    /// (every real record): every state row, output and digest writes timestamps, and
    /// formatting them through chrono was a quarter of a node's commits. `None` outside
    /// those years. The civil date comes from the day count by Howard Hinnant's
    /// `civil_from_days` (proleptic Gregorian, as chrono's).
    fn write_canonical(self, buf: &mut [u8; CANONICAL_LEN]) -> Option<&str> {
        const DAY_MS: i64 = 86_400_000;
        let days = self.0.div_euclid(DAY_MS);
        let in_day = self.0.rem_euclid(DAY_MS);
        // Days from 0000-03-01, so that leap days fall at the end of a year.
        let z = days.checked_add(719_468)?;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        if !(0..=9999).contains(&year) {
            return None;
        }
        let (hour, minute) = (in_day / 3_600_000, in_day / 60_000 % 60);
        let (second, milli) = (in_day / 1000 % 60, in_day % 1000);
        let mut put = |at: usize, value: i64, width: usize| {
            let mut v = value;
            for i in (at..at + width).rev() {
                buf[i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, year, 4);
        put(5, month, 2);
        put(8, day, 2);
        put(11, hour, 2);
        put(14, minute, 2);
        put(17, second, 2);
        put(20, milli, 3);
        for (at, sep) in [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')] {
            buf[at] = sep;
        }
        buf[19] = b'.';
        buf[23] = b'Z';
        std::str::from_utf8(buf).ok()
    }
}

/// Length of the canonical form of a year 0000-9999.
const CANONICAL_LEN: usize = 24;

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; CANONICAL_LEN];
        match self.write_canonical(&mut buf) {
            Some(text) => f.write_str(text),
            None => f.write_str(&self.to_rfc3339_slow()),
        }
    }
}

string_form::impl_string_form!(Ts, parse: Ts::parse,
expecting: "an RFC 3339 UTC timestamp string", name: "Timestamp", schema: {
    "type": "string",
    "format": "date-time",
    "pattern": TIMESTAMP_PATTERN,
    "description": "RFC 3339 time in UTC with at most millisecond precision."
});

/// `seconds` in milliseconds, saturating: a window or delay set to an enormous value (an
/// `engine.params` of `u64::MAX` seconds) means "for ever", never a negative or wrapped one.
pub fn seconds_ms(seconds: u64) -> i64 {
    i64::try_from(seconds)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_writes_canonical_form() {
        let t = Ts::parse("2026-01-05T09:14:07.25Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-01-05T09:14:07.250Z");
        assert_eq!(
            Ts::parse("2026-01-05T09:14:07+00:00").unwrap().to_rfc3339(),
            "2026-01-05T09:14:07.000Z"
        );
        assert_eq!(Ts::parse("1970-01-01T00:00:01.000Z").unwrap(), Ts(1000));
    }

    /// The allocation-free form is chrono's, byte for byte: at the edges of the years it
    /// covers, around leap days and the epoch, and at a million instants spread over the
    /// whole range chrono can represent.
    #[test]
    fn canonical_form_is_chronos() {
        let day = 86_400_000i64;
        let mut instants = vec![
            0,
            -1,
            1,
            i64::MIN,
            i64::MAX,
            Ts::parse("0000-01-01T00:00:00Z").unwrap().0,
            Ts::parse("9999-12-31T23:59:59.999Z").unwrap().0,
            Ts::parse("2000-02-29T12:00:00Z").unwrap().0,
            Ts::parse("1900-03-01T00:00:00Z").unwrap().0,
            Ts::parse("2026-01-05T09:14:07.250Z").unwrap().0,
        ];
        for edge in instants.clone() {
            for delta in [-day, -1001, -1, 1, 999, day] {
                instants.push(edge.saturating_add(delta));
            }
        }
        // A fixed-seed generator: the test checks the same instants on every run.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let span = 300_000 * 366 * day;
        for i in 0..1_000_000 {
            let r = next() as i64;
            instants.push(match i % 3 {
                // Any instant chrono knows (and some it does not).
                0 => r % span,
                // The years 0000-9999.
                1 => r.rem_euclid(10_000 * 366 * day) - 1970 * 366 * day,
                // Around now, where the records are.
                _ => 1_700_000_000_000 + r.rem_euclid(100 * 366 * day),
            });
        }
        for ms in instants {
            let t = Ts(ms);
            assert_eq!(t.to_rfc3339(), t.to_rfc3339_slow(), "{ms}");
            assert_eq!(t.to_string(), t.to_rfc3339_slow(), "{ms}");
        }
    }

    #[test]
    fn rejects_non_utc_and_sub_millisecond() {
        for bad in [
            "2026-01-05T09:14:07.250+01:00",
            "2026-01-05T09:14:07.2501Z",
            "2026-01-05 09:14:07Z",
            "2026-13-05T09:14:07Z",
            "yesterday",
            "2026-01-05T09:14:07.Z",
        ] {
            let err = Ts::parse(bad).unwrap_err();
            assert!(err.starts_with(TIMESTAMP_ERROR_PREFIX), "{bad}: {err}");
        }
    }

    #[test]
    fn arithmetic() {
        let t = Ts(10_500);
        assert_eq!(t.plus_s(60), Ts(70_500));
        assert_eq!(Ts(70_499).seconds_since(t), 59);
    }
}
