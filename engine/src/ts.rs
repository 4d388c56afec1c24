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
        Ts(self.0.saturating_add(
            i64::try_from(seconds)
                .unwrap_or(i64::MAX)
                .saturating_mul(1000),
        ))
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
        match DateTime::<Utc>::from_timestamp_millis(self.0) {
            Some(t) => t.to_rfc3339_opts(SecondsFormat::Millis, true),
            None => format!("invalid-ts({})", self.0),
        }
    }
}

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

string_form::impl_string_form!(Ts, parse: Ts::parse,
expecting: "an RFC 3339 UTC timestamp string", name: "Timestamp", schema: {
    "type": "string",
    "format": "date-time",
    "pattern": TIMESTAMP_PATTERN,
    "description": "RFC 3339 time in UTC with at most millisecond precision."
});

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
