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
        if let Some(ts) = Ts::parse_canonical(bytes) {
            return Ok(ts);
        }
        // Named before the other checks, which would misname it (a trailing newline is not
        // "not in UTC", a non-ASCII digit not a missing 'T').
        if let Some(c) = text.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(bad(&format!(
                "it holds {c:?}, which is no part of a timestamp (spaces, control and \
                 non-ASCII characters, other scripts' digits)"
            )));
        }
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
        // A leap second is the next second's start: at the very end of 9999, that is out
        // of the years every timestamp is written in.
        let ms = parsed.timestamp_millis();
        if ms > LAST_MS {
            return Err(bad("after the year 9999 (a leap second at its very end)"));
        }
        Ok(Ts(ms))
    }

    /// The canonical form `YYYY-MM-DDTHH:MM:SS.mmmZ` read without chrono (every record,
    /// state row and checkpoint holds timestamps in it: chrono's general RFC 3339 parser was
    /// a tenth of rebuilding a state); `None` for any other text, which [`Ts::parse`] then
    /// reads or refuses through chrono. The day count is Howard Hinnant's
    /// `days_from_civil` (proleptic Gregorian, as chrono's); a test holds the two side by
    /// side.
    fn parse_canonical(bytes: &[u8]) -> Option<Ts> {
        let bytes: &[u8; CANONICAL_LEN] = bytes.try_into().ok()?;
        if bytes[4] != b'-'
            || bytes[7] != b'-'
            || bytes[10] != b'T'
            || bytes[13] != b':'
            || bytes[16] != b':'
            || bytes[19] != b'.'
            || bytes[23] != b'Z'
        {
            return None;
        }
        let number = |at: usize, width: usize| -> Option<i64> {
            bytes[at..at + width].iter().try_fold(0i64, |n, b| {
                b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
            })
        };
        let (year, month, day) = (number(0, 4)?, number(5, 2)?, number(8, 2)?);
        let (hour, minute, second) = (number(11, 2)?, number(14, 2)?, number(17, 2)?);
        let milli = number(20, 3)?;
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        let month_days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return None,
        };
        // A leap second (60) is left to chrono.
        if day == 0 || day > month_days || hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        let y = year - i64::from(month <= 2);
        let era = y.div_euclid(400);
        let yoe = y.rem_euclid(400);
        let mp = (month + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        Some(Ts(days * 86_400_000
            + hour * 3_600_000
            + minute * 60_000
            + second * 1000
            + milli))
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

/// 9999-12-31T23:59:59.999Z, the last instant a timestamp can name.
const LAST_MS: i64 = 253_402_300_799_999;

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

/// The canonical form, written from a buffer on the stack: a state's JSON holds hundreds of
/// thousands of timestamps, and serde's `collect_str` formats each through `fmt`'s
/// machinery (a tenth of a large state's digest).
impl serde::Serialize for Ts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; CANONICAL_LEN];
        match self.write_canonical(&mut buf) {
            Some(text) => serializer.serialize_str(text),
            None => serializer.collect_str(self),
        }
    }
}

string_form::impl_string_form!(Ts, serialized elsewhere, parse: Ts::parse,
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
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.to_rfc3339_slow()), "{ms}");
        }
    }

    /// The canonical form read without chrono is chrono's reading: of every canonical
    /// instant of the years 0000-9999 (edges, leap days, a million spread), and of those
    /// texts with one digit changed (month 13, day 31 of a 30-day month, February 29 of a
    /// year that has none, hour 24, second 60...), which it refuses exactly where
    /// chrono refuses them, leap seconds aside (left to chrono).
    #[test]
    fn canonical_reading_is_chronos() {
        let chrono = |text: &str| {
            DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|t| t.timestamp_millis())
        };
        let day = 86_400_000i64;
        let first = chrono("0000-01-01T00:00:00.000Z").unwrap();
        let last = chrono("9999-12-31T23:59:59.999Z").unwrap();
        let mut instants = vec![first, last, 0, -1, 951_782_400_000, 4_107_542_400_000];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..1_000_000 {
            let r = next() as i64;
            instants.push(match i % 2 {
                0 => first + r.rem_euclid(last - first + 1),
                _ => 1_700_000_000_000 + r.rem_euclid(100 * 366 * day),
            });
        }
        let mut refused = 0;
        for (i, ms) in instants.into_iter().enumerate() {
            let text = Ts(ms).to_rfc3339();
            assert_eq!(Ts::parse_canonical(text.as_bytes()), Some(Ts(ms)), "{text}");
            // One digit changed.
            let mut bytes = text.clone().into_bytes();
            let at = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22][i % 17];
            bytes[at] = b'0' + (next() % 10) as u8;
            let changed = String::from_utf8(bytes).unwrap();
            let fast = Ts::parse_canonical(changed.as_bytes()).map(|t| t.0);
            match (fast, chrono(&changed)) {
                (Some(fast), slow) => assert_eq!(Some(fast), slow, "{changed}"),
                (None, Some(_)) => assert_eq!(&changed[17..19], "60", "{changed}"),
                (None, None) => refused += 1,
            }
            assert_eq!(
                Ts::parse(&changed).ok().map(|t| t.0),
                chrono(&changed),
                "{changed}"
            );
        }
        assert!(
            refused > 1000,
            "changed digits made invalid dates ({refused})"
        );
        // Not the canonical form: left to chrono.
        for other in [
            "2026-01-05T09:14:07.25Z",
            "2026-01-05t09:14:07.250Z",
            "2026-01-05T09:14:07.250z",
            "2026-01-05T09:14:07.250+00:00",
            "2026-01-05T09:14:07Z",
            "2026-01-05T09:14:0a.250Z",
            "+2026-01-05T09:14:07.25Z",
        ] {
            assert_eq!(Ts::parse_canonical(other.as_bytes()), None, "{other}");
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
            "9999-12-31T23:59:60Z",
            "9999-12-31T23:59:60.999Z",
            "2026-01-05T09:14:07Z\n",
            " 2026-01-05T09:14:07Z",
            "2026-01-05T09:14:07 Z",
            "2026-01-0\u{665}T09:14:07Z",
            "２０２６-01-05T09:14:07Z",
        ] {
            let err = Ts::parse(bad).unwrap_err();
            assert!(err.starts_with(TIMESTAMP_ERROR_PREFIX), "{bad}: {err}");
            assert!(
                !err.contains("not in UTC") || !bad.ends_with('Z'),
                "{bad}: {err}"
            );
        }
    }

    /// A leap second is the next minute's start, but never past the year 9999; the last
    /// instant before it is still read.
    #[test]
    fn leap_seconds_stay_in_range() {
        assert_eq!(
            Ts::parse("2026-01-05T09:14:60Z").unwrap(),
            Ts::parse("2026-01-05T09:15:00Z").unwrap()
        );
        assert_eq!(Ts::parse("9999-12-31T23:59:59.999Z").unwrap(), Ts(LAST_MS));
        assert_eq!(Ts(LAST_MS).to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert!(Ts::parse("9999-12-31T23:59:60Z")
            .unwrap_err()
            .contains("after the year 9999"));
    }

    #[test]
    fn arithmetic() {
        let t = Ts(10_500);
        assert_eq!(t.plus_s(60), Ts(70_500));
        assert_eq!(Ts(70_499).seconds_since(t), 59);
    }
}
