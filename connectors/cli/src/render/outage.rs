//! The outage report as one self-contained HTML page (maud templates, inline SVG charts
//! with real time axes; no script, no external request: it reads offline and prints).
//!
//! Invariant: the page shows only what `lhc_replay::OutageReport` holds; every chart
//! shares one time frame per episode, so a band, a marker and a bar at the same instant
//! line up.

use std::collections::BTreeSet;

use lhc_engine::event::EventKind;
use lhc_engine::{Output, Ts};
use lhc_replay::report::{Annotation, Episode, OutageReport};
use maud::{html, Markup};

use super::axis::{ticks, Tick};
use super::duration;
use crate::time::Zone;

/// Rows of the failed-launch table shown per episode (the JSON has them all).
const FAILED_ROWS: usize = 1000;
/// Users listed per episode.
const USERS_SHOWN: usize = 500;

/// Horizontal geometry shared by an episode's charts.
struct Frame {
    t0: i64,
    t1: i64,
    left: f64,
    width: f64,
}

impl Frame {
    fn of(e: &Episode) -> Frame {
        let t0 = e.detected_from.millis();
        let end = e
            .end
            .map(|t| t.millis())
            .or_else(|| {
                e.lanes
                    .values()
                    .flat_map(|l| l.last())
                    .map(|s| s.to.millis())
                    .max()
            })
            .unwrap_or(e.start.millis());
        Frame {
            t0,
            t1: end.max(t0 + 1000),
            left: 230.0,
            width: 840.0,
        }
    }

    fn x(&self, ts: Ts) -> f64 {
        let clamped = ts.millis().clamp(self.t0, self.t1);
        self.left + (clamped - self.t0) as f64 / (self.t1 - self.t0) as f64 * self.width
    }

    fn total_width(&self) -> f64 {
        self.left + self.width + 40.0
    }

    fn ticks(&self, zone: Option<&Zone>) -> Vec<Tick> {
        ticks(Ts(self.t0), Ts(self.t1), 10, zone)
    }
}

fn f(v: f64) -> String {
    format!("{v:.1}")
}

/// Fill of a lane segment.
fn color(state: &str, brokering: bool) -> &'static str {
    match (state, brokering) {
        (_, true) => "#1b7f3b",
        ("working_normally", _) => "#9ec5e8",
        ("pending_ha", _) => "#f2c14e",
        ("initial_ha" | "extended_ha", _) => "#e07a5f",
        ("pending_recovery", _) => "#c9a0dc",
        ("stopped", _) => "#555555",
        _ => "#cccccc",
    }
}

const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// The x axis at `y`: tick lines up to `top`, UTC labels, and local labels under them.
fn axis(frame: &Frame, top: f64, y: f64, zone: Option<&Zone>) -> Markup {
    let ticks = frame.ticks(zone);
    html! {
        g class="axis" {
            line x1=(f(frame.left)) x2=(f(frame.left + frame.width)) y1=(f(y.round() + 0.5)) y2=(f(y.round() + 0.5)) stroke="#444" stroke-width="1" shape-rendering="crispEdges" {}
            @for t in &ticks {
                @let x = frame.x(t.ts);
                line x1=(f(x)) x2=(f(x)) y1=(f(top)) y2=(f(y + 4.0)) stroke="#0000001a" {}
                text class="tick" x=(f(x)) y=(f(y + 16.0)) font-size="11" text-anchor="middle" { (t.utc) }
                @if let Some(local) = &t.local {
                    text class="tick local" x=(f(x)) y=(f(y + 29.0)) font-size="11" fill="#666" text-anchor="middle" { (local) }
                }
            }
            text x="4" y=(f(y + 16.0)) font-size="11" { "UTC" }
            @if let Some(zone) = zone {
                text x="4" y=(f(y + 29.0)) font-size="11" fill="#666" { (zone.name()) }
            }
        }
    }
}

fn axis_height(zone: Option<&Zone>) -> f64 {
    if zone.is_some() {
        36.0
    } else {
        22.0
    }
}

/// Lanes per connector with the bands (detection gap, no broker, split brain), the
/// annotation markers and the axis.
fn timeline(e: &Episode, n: usize, frame: &Frame, zone: Option<&Zone>) -> Markup {
    let lane_h = 26.0;
    let top = 34.0;
    let lanes_bottom = top + e.lanes.len() as f64 * lane_h;
    let height = lanes_bottom + 8.0 + axis_height(zone);
    let hatch = format!("hatch-{n}");
    html! {
        svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img"
            width=(f(frame.total_width())) height=(f(height))
            viewBox=(format!("0 0 {} {}", f(frame.total_width()), f(height))) {
            title { "Connector states over time, zone " (e.zone) }
            defs {
                pattern id=(hatch) width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)" {
                    rect width="6" height="6" fill="#d6272822" {}
                    line x1="0" y1="0" x2="0" y2="6" stroke="#d62728" stroke-width="2" {}
                }
            }
            @for (i, (connector, lane)) in e.lanes.iter().enumerate() {
                @let y = top + i as f64 * lane_h;
                g class="lane" data-connector=(connector) {
                    text x="4" y=(f(y + 14.0)) font-size="12" { (connector) }
                    @for seg in lane {
                        rect x=(f(frame.x(seg.from))) y=(f(y)) width=(f((frame.x(seg.to) - frame.x(seg.from)).max(0.5)))
                            height=(f(lane_h - 6.0)) fill=(color(&seg.state, seg.brokering)) {
                            title { (seg.state) @if seg.brokering { " (brokering)" } " " (seg.from) " .. " (seg.to) }
                        }
                    }
                }
            }
            rect class="band detection-gap" x=(f(frame.x(e.detection_gap.from))) y=(f(top - 4.0))
                width=(f((frame.x(e.detection_gap.to) - frame.x(e.detection_gap.from)).max(1.0)))
                height=(f(lanes_bottom - top + 4.0)) fill="#f2c14e55" stroke="#c99a1a" stroke-dasharray="3,2" {
                title { "detection gap " (e.detection_gap.from) " .. " (e.detection_gap.to) }
            }
            @for b in &e.no_broker {
                rect class="band no-broker" x=(f(frame.x(b.from))) y=(f(top - 4.0))
                    width=(f((frame.x(b.to) - frame.x(b.from)).max(1.0)))
                    height=(f(lanes_bottom - top + 4.0)) fill=(format!("url(#{hatch})")) {
                    title { "no broker " (b.from) " .. " (b.to) }
                }
            }
            @for sb in &e.split_brain {
                rect class="band split-brain" x=(f(frame.x(sb.from))) y=(f(top - 4.0))
                    width=(f((frame.x(sb.to) - frame.x(sb.from)).max(1.0)))
                    height=(f(lanes_bottom - top + 4.0)) fill="none" stroke="#7b2cbf" stroke-width="2" {
                    title { "split brain: " (sb.brokers.join(", ")) }
                }
            }
            @for (i, a) in e.annotations.iter().enumerate() {
                @let x = frame.x(a.ts);
                g class="annotation" data-kind=(a.kind) {
                    line x1=(f(x)) x2=(f(x)) y1="18" y2=(f(lanes_bottom)) stroke="#222" stroke-dasharray="2,2" {}
                    circle cx=(f(x)) cy="10" r="8" fill=(marker_color(a.kind)) {}
                    text x=(f(x)) y="14" font-size="10" fill="#fff" text-anchor="middle" { (i + 1) }
                    title { (a.ts) " " (a.text) }
                }
            }
            (axis(frame, top - 4.0, lanes_bottom + 4.0, zone))
        }
    }
}

fn marker_color(kind: &str) -> &'static str {
    match kind {
        "detected" => "#c99a1a",
        "lhc_start" | "lhc_end" => "#b5442c",
        "cloud_back" => "#2a7d4f",
        "stopped" | "started" => "#555",
        _ => "#1f4e79",
    }
}

/// Lines of values over time, with a y scale, a legend and the axis.
fn line_chart(
    frame: &Frame,
    title: &str,
    class: &str,
    samples: &[Ts],
    series: &[(String, Vec<u64>, bool)],
    zone: Option<&Zone>,
) -> Markup {
    let legend_rows = series.len().div_ceil(4) as f64;
    let (top, chart_h) = (26.0 + legend_rows * 12.0, 110.0);
    let bottom = top + chart_h;
    let height = bottom + 8.0 + axis_height(zone);
    let max = series
        .iter()
        .flat_map(|(_, v, _)| v.iter())
        .copied()
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let y = |v: u64| bottom - v as f64 / max * chart_h;
    html! {
        svg xmlns="http://www.w3.org/2000/svg" class=(class) role="img"
            width=(f(frame.total_width())) height=(f(height))
            viewBox=(format!("0 0 {} {}", f(frame.total_width()), f(height))) {
            title { (title) }
            text x="4" y="14" font-size="12" { (title) }
            @for (v, label) in [(max as u64, max.to_string()), ((max / 2.0) as u64, ((max / 2.0) as u64).to_string()), (0, "0".to_string())] {
                text class="y-tick" x=(f(frame.left - 6.0)) y=(f(y(v) + 4.0)) font-size="10" text-anchor="end" { (label) }
                line x1=(f(frame.left)) x2=(f(frame.left + frame.width)) y1=(f(y(v))) y2=(f(y(v))) stroke="#0000000f" {}
            }
            @for (i, (name, values, dashed)) in series.iter().enumerate() {
                @let points = samples.iter().zip(values).map(|(t, v)| format!("{},{}", f(frame.x(*t)), f(y(*v)))).collect::<Vec<_>>().join(" ");
                polyline fill="none" stroke=(PALETTE[i % PALETTE.len()]) stroke-width="1.5"
                    stroke-dasharray=(if *dashed { "4,3" } else { "none" }) points=(points) {
                    title { (name) }
                }
                rect x=(f(frame.left + 8.0 + (i % 4) as f64 * 205.0)) y=(f(20.0 + (i / 4) as f64 * 12.0)) width="10" height="3" fill=(PALETTE[i % PALETTE.len()]) {}
                text x=(f(frame.left + 22.0 + (i % 4) as f64 * 205.0)) y=(f(25.0 + (i / 4) as f64 * 12.0)) font-size="10" { (name) }
            }
            (axis(frame, top, bottom, zone))
        }
    }
}

/// Rejections per minute, stacked by reason, with a y scale, a legend and the axis.
fn failures_chart(e: &Episode, frame: &Frame, zone: Option<&Zone>) -> Markup {
    let chart_h = 110.0;
    let reasons: BTreeSet<&String> = e
        .failures_per_minute
        .iter()
        .flat_map(|(_, m)| m.keys())
        .collect();
    let reasons: Vec<&String> = reasons.into_iter().collect();
    let top = 26.0 + reasons.len().div_ceil(4) as f64 * 12.0;
    let bottom = top + chart_h;
    let height = bottom + 8.0 + axis_height(zone);
    let max = e
        .failures_per_minute
        .iter()
        .map(|(_, m)| m.values().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let bar_w = (60_000.0 / (frame.t1 - frame.t0) as f64 * frame.width).max(1.0);
    let h = |v: u64| v as f64 / max * chart_h;
    html! {
        svg xmlns="http://www.w3.org/2000/svg" class="failures" role="img"
            width=(f(frame.total_width())) height=(f(height))
            viewBox=(format!("0 0 {} {}", f(frame.total_width()), f(height))) {
            title { "Failed launches per minute by reason" }
            text x="4" y="14" font-size="12" { "failed launches per minute" }
            @for (v, label) in [(max as u64, max.to_string()), (0, "0".to_string())] {
                text class="y-tick" x=(f(frame.left - 6.0)) y=(f(bottom - h(v) + 4.0)) font-size="10" text-anchor="end" { (label) }
            }
            @for (minute, counts) in &e.failures_per_minute {
                @let mut base = bottom;
                @for (i, reason) in reasons.iter().enumerate() {
                    @let v = counts.get(*reason).copied().unwrap_or(0);
                    @if v > 0 {
                        @let top_y = { base -= h(v); base };
                        rect x=(f(frame.x(*minute))) y=(f(top_y)) width=(f(bar_w)) height=(f(h(v))) fill=(PALETTE[(i + 3) % PALETTE.len()]) {
                            title { (minute) " " (reason) ": " (v) }
                        }
                    }
                }
            }
            @for (i, reason) in reasons.iter().enumerate() {
                rect x=(f(frame.left + 8.0 + (i % 4) as f64 * 205.0)) y=(f(18.0 + (i / 4) as f64 * 12.0)) width="10" height="8" fill=(PALETTE[(i + 3) % PALETTE.len()]) {}
                text x=(f(frame.left + 22.0 + (i % 4) as f64 * 205.0)) y=(f(26.0 + (i / 4) as f64 * 12.0)) font-size="10" { (reason) }
            }
            (axis(frame, top, bottom, zone))
        }
    }
}

/// The time of `ts` in the page: UTC, and local when a zone is given.
fn when(ts: Ts, zone: Option<&Zone>) -> Markup {
    html! {
        time datetime=(ts.to_string()) { (ts.to_string()) }
        @if let Some(zone) = zone {
            br; small { (zone.format(ts)) }
        }
    }
}

fn annotations_table(list: &[Annotation], zone: Option<&Zone>) -> Markup {
    html! {
        table class="annotations" {
            tr { th { "#" } th { "time" } th { "what happened" } }
            @for (i, a) in list.iter().enumerate() {
                tr { td { (i + 1) } td { (when(a.ts, zone)) } td { (a.text) } }
            }
        }
    }
}

/// The HA summaries (3507–3510) as a table: one row per event, one column per field.
fn summaries_table(summaries: &[Output]) -> Markup {
    let events: Vec<_> = summaries
        .iter()
        .filter_map(|o| match o {
            Output::Event(e) => Some((e, serde_json::to_value(&e.data).unwrap_or_default())),
            _ => None,
        })
        .collect();
    let mut columns = BTreeSet::new();
    for (_, data) in &events {
        if let Some(map) = data.as_object() {
            columns.extend(map.keys().cloned());
        }
    }
    html! {
        table class="summaries" {
            tr {
                th { "time" } th { "connector" } th { "event" }
                @for c in &columns { th { (c.replace('_', " ")) } }
            }
            @for (e, data) in &events {
                tr {
                    td { (e.ts) } td { (e.connector) }
                    td { (e.event_id) " " (event_name(e.kind())) }
                    @for c in &columns {
                        td { (cell(data.get(c))) }
                    }
                }
            }
        }
    }
}

fn event_name(kind: Option<EventKind>) -> &'static str {
    match kind {
        Some(EventKind::ElectedReport(_)) => "elected, periodic",
        Some(EventKind::ElectedSummary(_)) => "elected, LHC ended",
        Some(EventKind::NonElected(_)) => "not elected, periodic",
        Some(EventKind::NonElectedSummary(_)) => "not elected, LHC ended",
        _ => "",
    }
}

fn cell(value: Option<&serde_json::Value>) -> String {
    match value {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|v| cell(Some(v)))
            .collect::<Vec<_>>()
            .join(", "),
        Some(other) => other.to_string(),
    }
}

fn episode(e: &Episode, n: usize, zone: Option<&Zone>) -> Markup {
    let frame = Frame::of(e);
    let samples: Vec<Ts> = e.registrations.iter().map(|r| r.ts).collect();
    let registrars: BTreeSet<&String> = e
        .registrations
        .iter()
        .flat_map(|r| r.by_registrar.keys())
        .collect();
    let mut series: Vec<(String, Vec<u64>, bool)> = registrars
        .iter()
        .map(|name| {
            let values = e
                .registrations
                .iter()
                .map(|r| r.by_registrar.get(*name).copied().unwrap_or(0))
                .collect();
            (name.to_string(), values, false)
        })
        .collect();
    series.push((
        "cloud broker".into(),
        e.registrations.iter().map(|r| r.cloud).collect(),
        false,
    ));
    series.push((
        "unregistered".into(),
        e.registrations.iter().map(|r| r.unregistered).collect(),
        true,
    ));
    let by_reason = e.by_reason();
    let (seen_failed, launches, retried) = (e.seen_failed(), e.seen_launches(), e.retried());
    let no_broker_s: i64 = e.no_broker.iter().map(|b| b.to.seconds_since(b.from)).sum();
    let brokered = e.brokered();
    html! {
        section class="episode" id=(format!("episode-{n}")) {
            h2 { "Episode " (n) " — zone " (e.zone) }
            p class="verdict" {
                "LHC mode from " (e.start) " to "
                (e.end.map(|t| t.to_string()).unwrap_or("the end of the log (still on)".into()))
                " (" (duration(e.duration_s)) "). The outage was detected from " (e.detected_from)
                "; the detection gap lasted " (duration(e.detection_gap.to.seconds_since(e.detection_gap.from)))
                ". The zone had no broker for " (duration(no_broker_s)) ". "
                "Users saw " (seen_failed) " of " (launches) " launch(es) fail; "
                (e.users_affected.len()) " user(s) affected. Brokers answered "
                (brokered) " attempt(s) with a machine and rejected " (e.failed_launches.len())
                ", of which StoreFront retried " (retried) " on the next controller."
            }
            (timeline(e, n, &frame, zone))
            p class="legend" {
                @for (label, state, b) in [("working normally", "working_normally", false), ("pending HA", "pending_ha", false),
                    ("LHC, not brokering", "extended_ha", false), ("LHC, brokering", "extended_ha", true),
                    ("pending recovery", "pending_recovery", false), ("stopped", "stopped", false)] {
                    span style=(format!("background:{}", color(state, b))) {} (label)
                }
                span style="background:#f2c14e55;border:1px dashed #c99a1a" {} "detection gap"
                span style="background:repeating-linear-gradient(45deg,#d62728,#d62728 2px,#d6272822 2px,#d6272822 6px)" {} "no broker"
                span style="border:2px solid #7b2cbf" {} "split brain"
            }
            h3 { "What happened" }
            (annotations_table(&e.annotations, zone))
            (line_chart(&frame, "registrations", "registrations", &samples, &series, zone))
            @if !e.failures_per_minute.is_empty() {
                (failures_chart(e, &frame, zone))
            }
            @if !by_reason.is_empty() {
                h3 { "Failed launches by reason" }
                table class="reasons" {
                    tr { th { "reason" } th { "attempts" } th { "seen by users" } th { "cause" } th { "fix" } }
                    @for (reason, r) in &by_reason {
                        tr { td { code { (reason) } } td { (r.attempts) } td { (r.seen) } td { (r.cause) } td { (r.fix) } }
                    }
                }
                h3 { "Failed launches" }
                table class="failed-launches" {
                    tr {
                        th { "time" } th { "user" } th { "resource" } th { "delivery group" }
                        th { "connector" } th { "reason" } th { "user saw it" } th { "cause and fix" }
                    }
                    @for row in e.failed_launches.iter().take(FAILED_ROWS) {
                        tr class=(if row.retried { "retried" } else { "seen" }) {
                            td { (when(row.ts, zone)) } td { (row.user) } td { (row.resource) }
                            td { (row.delivery_groups.join(", ")) } td { (row.connector) }
                            td { code { (row.reason) } }
                            td { @if row.retried { "no: retried on the next controller" } @else { "yes" } }
                            td { (row.cause) "; " em { (row.fix) } }
                        }
                    }
                }
                @if e.failed_launches.len() > FAILED_ROWS {
                    p { "… and " (e.failed_launches.len() - FAILED_ROWS) " more (all of them: --format json)." }
                }
            }
            @if !e.users_affected.is_empty() {
                h3 { "Users affected (" (e.users_affected.len()) ")" }
                p class="users" {
                    (e.users_affected.iter().take(USERS_SHOWN).cloned().collect::<Vec<_>>().join(", "))
                    @if e.users_affected.len() > USERS_SHOWN { " …" }
                }
            }
            @if !e.split_brain.is_empty() {
                h3 { "Split brain (R-ELECT-4)" }
                ul { @for s in &e.split_brain { li { (s.from) " .. " (s.to) ": " (s.brokers.join(", ")) } } }
            }
            @if !e.summaries.is_empty() {
                h3 { "HA summaries (3507–3510)" }
                (summaries_table(&e.summaries))
                @if e.periodic_not_listed > 0 {
                    p { "… and " (e.periodic_not_listed) " later periodic reports (3507/3509), \
                        not listed (a list holds " (lhc_replay::report::PERIODIC_LISTED) ")." }
                }
            }
        }
    }
}

/// The self-contained HTML page; `zone` adds local times next to UTC.
pub fn page(report: &OutageReport, zone: Option<&Zone>) -> String {
    const STYLE: &str = "table{margin:6px 0 14px}\
        .legend span{display:inline-block;width:14px;height:12px;margin:0 4px 0 12px;vertical-align:middle}\
        svg{display:block;margin:8px 0}tr.retried td{color:#888}.verdict{font-size:15px}small{color:#666}\
        @media print{section{break-inside:avoid}}";
    let body = html! {
        p {
            (report.source) " — " (report.records) " records"
            @if let Some((a, b)) = report.span { ", " (a) " .. " (b) }
            "; " (report.episodes.len()) " episode(s). Times are UTC"
            @if let Some(zone) = zone { ", with " (zone.name()) " below" }
            "."
        }
        @if report.episodes.is_empty() {
            p { "No zone entered LHC mode in this log." }
        }
        @for (i, e) in report.episodes.iter().enumerate() {
            (episode(e, i + 1, zone))
        }
        @if report.config_versions.values().any(|v| v.iter().any(|l| l.failed > 0)) {
            h2 { "Configuration versions" }
            table class="config-versions" {
                tr { th { "connector" } th { "version" } th { "outcome" } }
                @for (connector, lines) in &report.config_versions {
                    @for line in lines {
                        tr { td { (connector) } td { "v" (line.version) } td { (version_outcome(line)) } }
                    }
                }
            }
        }
    };
    super::page("LHC outage report", STYLE, body)
}

/// "v2 failed 15 times, v1 kept" in words, for one version of one connector.
pub fn version_outcome(line: &lhc_replay::report::VersionLine) -> String {
    let mut parts = Vec::new();
    if line.failed > 0 {
        let between = line
            .failed_between
            .map(|(a, b)| format!(" ({a} .. {b})"))
            .unwrap_or_default();
        parts.push(format!("failed {} time(s){between}", line.failed));
        match line.kept {
            Some(kept) if line.imported.is_none() => parts.push(format!("v{kept} kept")),
            None if line.imported.is_none() => parts.push("no version to keep".into()),
            _ => {}
        }
    }
    if let Some(at) = line.imported {
        parts.push(format!("imported {at}"));
    }
    parts.join(", ")
}
