//! Instants as an admin types them (`--at`, `--since`, `--until`) and shows them (`--tz`).
//!
//! The log itself is UTC with millisecond precision (the record contract); only the CLI's
//! edges accept offsets and time zones, and everything is converted to `Ts` here, so the
//! engine never sees a zone.

use anyhow::{bail, Context};
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use lhc_engine::Ts;

/// A time zone given with `--tz` (an IANA name like Europe/Berlin, or UTC).
#[derive(Clone, Debug)]
pub struct Zone {
    name: String,
    tz: TimeZone,
}

impl Zone {
    /// Looks a zone up by its IANA name.
    pub fn named(name: &str) -> anyhow::Result<Zone> {
        let tz = TimeZone::get(name).with_context(|| {
            format!("--tz {name:?}: not a time zone; give an IANA name like Europe/Berlin or UTC")
        })?;
        Ok(Zone {
            name: name.to_string(),
            tz,
        })
    }

    /// Its name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ts` as local wall-clock time with its offset, like 2026-01-05 10:14:07 +01:00.
    pub fn format(&self, ts: Ts) -> String {
        match Timestamp::from_millisecond(ts.millis()) {
            Ok(t) => t
                .to_zoned(self.tz.clone())
                .strftime("%Y-%m-%d %H:%M:%S %:z")
                .to_string(),
            Err(_) => ts.to_string(),
        }
    }

    /// `ts`'s offset from UTC in this zone, in seconds.
    pub fn offset_seconds(&self, ts: Ts) -> i32 {
        Timestamp::from_millisecond(ts.millis())
            .map(|t| self.tz.to_offset(t).seconds())
            .unwrap_or(0)
    }
}

/// Parses an instant: RFC 3339 with `Z` or any offset (`2026-01-05T10:14:07+01:00`), or,
/// with `--tz`, a local date and time without an offset (`2026-01-05T10:14:07` or
/// `2026-01-05 10:14`). Precision beyond milliseconds is refused (the log keeps
/// milliseconds: a finer instant would silently mean another one).
pub fn parse_instant(text: &str, zone: Option<&Zone>) -> anyhow::Result<Ts> {
    let text = text.trim();
    let utc = match Ts::parse(text) {
        Ok(ts) => return Ok(ts),
        Err(e) => e,
    };
    let timestamp = match text.parse::<Timestamp>() {
        Ok(t) => t,
        // The log's own reading refused it for a reason of its own (the leap second at
        // the very end of 9999): that reason, not jiff's range arithmetic.
        Err(_) if utc.contains("after the year 9999") => bail!("{utc}"),
        Err(offset_error) => {
            let Some(zone) = zone else {
                bail!(
                    "{text:?} is not an instant: {offset_error}; give RFC 3339 with Z or an \
                     offset (2026-01-05T09:14:07Z, 2026-01-05T10:14:07+01:00), or a local \
                     time with --tz"
                );
            };
            let civil: DateTime = text.parse().with_context(|| {
                format!(
                    "{text:?} is not a local date and time like 2026-01-05T10:14:07 (read in \
                     --tz {})",
                    zone.name
                )
            })?;
            // A time skipped or repeated by a clock change is refused, not guessed.
            zone.tz
                .to_ambiguous_zoned(civil)
                .unambiguous()
                .with_context(|| {
                    format!(
                        "{text:?} is skipped or repeated by a clock change in {}; give it \
                         with an offset",
                        zone.name
                    )
                })?
                .timestamp()
        }
    };
    if timestamp.subsec_nanosecond() % 1_000_000 != 0 {
        bail!("{text:?}: the log keeps milliseconds; give at most 3 digits after the seconds");
    }
    // jiff reads a leap second as :59; a record's `ts` (and `--at` in UTC) reads it as the
    // next minute's :00. One meaning whatever the form.
    let leap_ms = if leap_second(text) { 1000 } else { 0 };
    Ok(Ts(timestamp.as_millisecond() + leap_ms))
}

/// Whether the time of day in `text` has second 60: `HH:MM:60` (extended form) or
/// `THHMM60` (basic form), not followed by another digit.
fn leap_second(text: &str) -> bool {
    let b = text.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let sixty_at =
        |i: usize| b.get(i) == Some(&b'6') && b.get(i + 1) == Some(&b'0') && !digit(i + 2);
    (0..b.len()).any(|i| {
        let extended = digit(i)
            && digit(i + 1)
            && b[i + 2..].starts_with(b":")
            && digit(i + 3)
            && digit(i + 4)
            && b[i + 5..].starts_with(b":")
            && sixty_at(i + 6)
            && (i == 0 || !digit(i - 1));
        let basic =
            matches!(b[i], b'T' | b't' | b' ') && (1..=4).all(|k| digit(i + k)) && sixty_at(i + 5);
        extended || basic
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leap second at the very end of 9999 is refused for that reason, as a record's
    /// `ts` is, not with jiff's range arithmetic (found by hostile testing).
    #[test]
    fn the_last_leap_second_is_refused_in_the_logs_words() {
        let said = parse_instant("9999-12-31T23:59:60Z", None)
            .unwrap_err()
            .to_string();
        assert!(said.contains("after the year 9999"), "{said}");
        assert!(!said.contains("Unix timestamp"), "{said}");
    }

    /// Second 60 is the next minute's :00 in every form `--at` takes, as in a record's
    /// `ts` (review of 2026-12-05: jiff read it as :59 in every form but UTC's).
    #[test]
    fn a_leap_second_means_the_same_in_every_form() {
        let next = Ts::parse("2026-01-05T10:01:00Z").unwrap();
        let berlin = Zone::named("Europe/Berlin").unwrap();
        for text in [
            "2026-01-05T10:00:60Z",
            "2026-01-05T10:00:60+00:00",
            "2026-01-05T10:00:60-00:00",
            "2026-01-05T12:00:60+02:00",
            "2026-01-05 10:00:60Z",
            "20260105T100060Z",
        ] {
            assert_eq!(parse_instant(text, None).unwrap(), next, "{text}");
        }
        assert_eq!(
            parse_instant("2026-01-05 11:00:60", Some(&berlin)).unwrap(),
            next
        );
        assert_eq!(
            parse_instant("2026-01-05T12:00:60.250+02:00", None).unwrap(),
            Ts(next.millis() + 250)
        );
        // Not a leap second: 60 elsewhere.
        for (text, utc) in [
            ("2026-01-05T10:00:59+00:00", "2026-01-05T10:00:59Z"),
            ("2060-01-05T10:00:00+01:00", "2060-01-05T09:00:00Z"),
            ("2026-01-05T10:59:00+01:00", "2026-01-05T09:59:00Z"),
        ] {
            assert_eq!(
                parse_instant(text, None).unwrap(),
                Ts::parse(utc).unwrap(),
                "{text}"
            );
        }
    }

    #[test]
    fn offsets_and_zones_name_the_same_instant() {
        let utc = Ts::parse("2026-01-05T09:14:07Z").unwrap();
        assert_eq!(
            parse_instant("2026-01-05T10:14:07+01:00", None).unwrap(),
            utc
        );
        let berlin = Zone::named("Europe/Berlin").unwrap();
        assert_eq!(
            parse_instant("2026-01-05T10:14:07", Some(&berlin)).unwrap(),
            utc
        );
        assert_eq!(
            parse_instant("2026-01-05 10:14:07", Some(&berlin)).unwrap(),
            utc
        );
        // An explicit offset wins over --tz.
        assert_eq!(
            parse_instant("2026-01-05T09:14:07Z", Some(&berlin)).unwrap(),
            utc
        );
        assert_eq!(berlin.format(utc), "2026-01-05 10:14:07 +01:00");
        assert_eq!(berlin.offset_seconds(utc), 3600);
    }

    #[test]
    fn refuses_what_it_cannot_read_exactly() {
        assert!(parse_instant("2026-01-05T10:14:07", None).is_err());
        assert!(parse_instant("2026-01-05T09:14:07.0001Z", None).is_err());
        assert!(parse_instant("yesterday", None).is_err());
        assert!(Zone::named("Mars/Olympus").is_err());
        // A local time skipped by the spring change does not exist: refused, not guessed.
        let berlin = Zone::named("Europe/Berlin").unwrap();
        let skipped = parse_instant("2026-03-29T02:30:00", Some(&berlin));
        assert!(skipped.is_err(), "{skipped:?}");
    }
}
