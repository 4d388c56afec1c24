//! Time axes for the report charts: tick positions at round steps and their labels, in
//! UTC and optionally a local zone, so a chart keeps its times in a screenshot or a print.
//!
//! Invariant: ticks depend only on the interval, the width budget and the zone's offset,
//! never on the clock, so the same report renders the same axis everywhere.

use lhc_engine::Ts;

use crate::time::Zone;

/// Steps a tick may take, in seconds: round numbers a reader counts in.
const STEPS: [i64; 17] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
];

/// One tick: its instant and its labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    /// The instant.
    pub ts: Ts,
    /// Its UTC label (HH:MM, or HH:MM:SS under a minute's step).
    pub utc: String,
    /// Its label in the local zone, if one was given.
    pub local: Option<String>,
}

/// The ticks of `[from, to]`: the smallest round step giving at most `max_ticks`, aligned
/// on the local zone's wall clock when one is given (09:00 local, not 09:00 UTC).
pub fn ticks(from: Ts, to: Ts, max_ticks: usize, zone: Option<&Zone>) -> Vec<Tick> {
    let span_s = (to.millis() - from.millis()).max(1) / 1000;
    let max_ticks = max_ticks.max(2) as i64;
    let step = STEPS
        .iter()
        .copied()
        .find(|s| span_s / s < max_ticks)
        .unwrap_or(86_400 * ((span_s / 86_400) / max_ticks + 1));
    let offset_ms = zone.map_or(0, |z| i64::from(z.offset_seconds(from)) * 1000);
    let step_ms = step * 1000;
    // The first multiple of the step at or after `from`, on the chosen wall clock.
    let first = (from.millis() + offset_ms + step_ms - 1).div_euclid(step_ms) * step_ms - offset_ms;
    let seconds = step < 60;
    let mut out = Vec::new();
    let mut t = first;
    while t <= to.millis() {
        let ts = Ts(t);
        out.push(Tick {
            ts,
            utc: clock(ts, 0, seconds),
            local: zone.map(|z| clock(ts, z.offset_seconds(ts), seconds)),
        });
        t += step_ms;
    }
    out
}

/// Wall-clock time of `ts` at `offset_s` from UTC: HH:MM or HH:MM:SS.
fn clock(ts: Ts, offset_s: i32, seconds: bool) -> String {
    let s = (ts.millis().div_euclid(1000) + i64::from(offset_s)).rem_euclid(86_400);
    if seconds {
        format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 3600, (s / 60) % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Ts {
        Ts::parse(text).unwrap()
    }

    #[test]
    fn round_steps_cover_the_interval() {
        let t = ticks(
            at("2026-01-05T09:07:30Z"),
            at("2026-01-05T10:52:00Z"),
            8,
            None,
        );
        let labels: Vec<&str> = t.iter().map(|t| t.utc.as_str()).collect();
        assert_eq!(
            labels,
            ["09:15", "09:30", "09:45", "10:00", "10:15", "10:30", "10:45"]
        );
        assert!(t.iter().all(|t| t.local.is_none()));
    }

    #[test]
    fn short_spans_get_seconds_and_long_ones_hours() {
        let short = ticks(
            at("2026-01-05T09:00:00Z"),
            at("2026-01-05T09:00:40Z"),
            10,
            None,
        );
        assert_eq!(short[1].utc, "09:00:05");
        let long = ticks(
            at("2026-01-05T00:00:00Z"),
            at("2026-01-06T00:00:00Z"),
            10,
            None,
        );
        assert_eq!(long.len(), 9, "every 3 h: {long:?}");
        assert_eq!(long[1].utc, "03:00");
    }

    #[test]
    fn local_labels_align_on_the_local_clock() {
        // India is 5:30 ahead: hourly ticks fall on local hours, at half past in UTC.
        let zone = Zone::named("Asia/Kolkata").unwrap();
        let t = ticks(
            at("2026-01-05T09:00:00Z"),
            at("2026-01-05T14:00:00Z"),
            6,
            Some(&zone),
        );
        assert_eq!(t[0].utc, "09:30");
        assert_eq!(t[0].local.as_deref(), Some("15:00"));
    }
}
