//! `lhc report outage`: the outage report as a terminal summary, JSON, and a self-contained
//! HTML page with an SVG timeline (no script, no external resource: readable offline).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use lhc_engine::event::EventKind;
use lhc_engine::Ts;
use lhc_replay::{Episode, OutageReport};

use crate::args::SourceArgs;
use crate::render::escape;

/// Reports computed by replaying a log.
#[derive(Subcommand)]
pub enum ReportCommand {
    /// Every LHC episode of every zone: each connector's states, election changes,
    /// split-brain intervals, registrations over time, launches by reason, launches lost in
    /// the detection gap, and the HA summaries (3507/3508).
    Outage {
        #[command(flatten)]
        source: SourceArgs,
        /// Write a self-contained HTML report with an SVG timeline here.
        #[arg(long, value_name = "FILE.html")]
        out: Option<PathBuf>,
        /// Print the report as JSON instead of the summary.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a report.
pub fn run(command: ReportCommand, quiet: bool) -> anyhow::Result<ExitCode> {
    match command {
        ReportCommand::Outage { source, out, json } => {
            let report = source.replay_with(quiet, lhc_replay::outage_report)?;
            crate::render::publish(&report, json, summary, html, out.as_deref(), quiet)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn duration(s: i64) -> String {
    let s = s.max(0);
    if s >= 3600 {
        format!("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60)
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

/// The terminal summary.
pub fn summary(report: &OutageReport) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{}: {} records{}; {} LHC episode(s)",
        report.source,
        report.records,
        report
            .span
            .map(|(a, b)| format!(", {a} .. {b}"))
            .unwrap_or_default(),
        report.episodes.len()
    );
    for (i, e) in report.episodes.iter().enumerate() {
        let _ = writeln!(
            t,
            "\nepisode {} — zone {}: LHC from {} to {} ({}), outage detected from {}",
            i + 1,
            e.zone,
            e.start,
            e.end.map(|t| t.to_string()).unwrap_or("(still on)".into()),
            duration(e.duration_s),
            e.detected_from
        );
        for (connector, lane) in &e.lanes {
            let path: Vec<String> = lane
                .iter()
                .map(|s| {
                    format!(
                        "{}{} {}",
                        s.state,
                        if s.brokering { "*" } else { "" },
                        duration(s.to.seconds_since(s.from))
                    )
                })
                .collect();
            let _ = writeln!(t, "  {connector:<28} {}", path.join(" → "));
        }
        let _ = writeln!(t, "  (* = brokering: in LHC mode and elected)");
        let brokers: Vec<String> = e
            .elections
            .iter()
            .map(|c| {
                format!(
                    "{} {} → {}",
                    c.ts,
                    c.connector,
                    c.elected.as_deref().unwrap_or("none")
                )
            })
            .collect();
        let _ = writeln!(t, "  election changes: {}", brokers.len());
        for b in brokers.iter().take(8) {
            let _ = writeln!(t, "    {b}");
        }
        if e.split_brain.is_empty() {
            let _ = writeln!(t, "  split brain: none");
        }
        for s in &e.split_brain {
            let _ = writeln!(
                t,
                "  SPLIT BRAIN {} .. {} ({}): {} all brokering (R-ELECT-4)",
                s.from,
                s.to,
                duration(s.to.seconds_since(s.from)),
                s.brokers.join(", ")
            );
        }
        let launches: Vec<String> = e.launches.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(t, "  launches: {}", launches.join(", "));
        let _ = writeln!(
            t,
            "  launches lost in the detection gap (cloud_unreachable): {}",
            e.lost_in_detection_gap
        );
        if let (Some(first), Some(last)) = (e.registrations.first(), e.registrations.last()) {
            let peak = e
                .registrations
                .iter()
                .flat_map(|s| s.by_registrar.iter())
                .max_by_key(|(_, v)| **v);
            let _ = writeln!(
                t,
                "  registrations: cloud {} at the start, {} at the end; peak on a connector: {}",
                first.cloud,
                last.cloud,
                peak.map(|(k, v)| format!("{v} on {k}"))
                    .unwrap_or("-".into())
            );
        }
        for s in &e.summaries {
            if let lhc_engine::Output::Event(ev) = s {
                if let Some(EventKind::ElectedSummary(_)) = ev.kind() {
                    let _ = writeln!(
                        t,
                        "  3508 {} {}: {}",
                        ev.ts,
                        ev.connector,
                        serde_json::to_string(&ev.data).unwrap_or_default()
                    );
                }
            }
        }
    }
    t
}

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

/// The SVG timeline of one episode: a lane per connector, election changes as ticks,
/// split-brain intervals shaded, registrations and launches per minute below.
fn timeline(e: &Episode) -> String {
    let (t0, t1) = (
        e.detected_from.millis(),
        e.end
            .map(|t| t.millis())
            .or_else(|| {
                e.lanes
                    .values()
                    .flat_map(|l| l.last())
                    .map(|s| s.to.millis())
                    .max()
            })
            .unwrap_or(e.start.millis())
            .max(e.detected_from.millis() + 1000),
    );
    let (left, width, lane_h) = (230.0, 900.0, 26.0);
    let x = |ts: Ts| left + (ts.millis() - t0) as f64 / (t1 - t0) as f64 * width;
    let lanes = e.lanes.len() as f64;
    let chart_top = 30.0 + lanes * lane_h + 20.0;
    let chart_h = 90.0;
    let total_h = chart_top + 2.0 * (chart_h + 30.0) + 20.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{}" height="{total_h}" viewBox="0 0 {} {total_h}">"#,
        left + width + 20.0,
        left + width + 20.0
    );
    for sb in &e.split_brain {
        let _ = write!(
            s,
            r##"<rect class="split-brain" x="{:.1}" y="20" width="{:.1}" height="{:.1}" fill="#ff000033"><title>split brain: {}</title></rect>"##,
            x(sb.from),
            (x(sb.to) - x(sb.from)).max(1.0),
            lanes * lane_h + 10.0,
            escape(&sb.brokers.join(", "))
        );
    }
    for (i, (connector, lane)) in e.lanes.iter().enumerate() {
        let y = 30.0 + i as f64 * lane_h;
        let _ = write!(
            s,
            r#"<g class="lane" data-connector="{c}"><text x="4" y="{:.1}" font-size="12">{c}</text>"#,
            y + 14.0,
            c = escape(connector)
        );
        for seg in lane {
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}{} .. {}</title></rect>"#,
                x(seg.from),
                (x(seg.to) - x(seg.from)).max(0.5),
                lane_h - 6.0,
                color(&seg.state, seg.brokering),
                escape(&seg.state),
                if seg.brokering { "(brokering) " } else { "" },
                seg.from,
                seg.to
            );
        }
        s.push_str("</g>");
    }
    for c in &e.elections {
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="22" y2="{:.1}" stroke="#222" stroke-dasharray="2,2"><title>{} {}: elected {}</title></line>"##,
            30.0 + lanes * lane_h,
            c.ts,
            escape(&c.connector),
            escape(c.elected.as_deref().unwrap_or("none")),
            x = x(c.ts)
        );
    }
    // Registrations per registrar: each connector of the zone, then the cloud broker.
    let registrars: std::collections::BTreeSet<&String> = e
        .registrations
        .iter()
        .flat_map(|r| r.by_registrar.keys())
        .collect();
    let mut series: Vec<(String, Vec<u64>)> = registrars
        .iter()
        .map(|name| {
            let values = e
                .registrations
                .iter()
                .map(|r| r.by_registrar.get(*name).copied().unwrap_or(0))
                .collect();
            (name.to_string(), values)
        })
        .collect();
    series.push((
        "cloud broker".to_string(),
        e.registrations.iter().map(|r| r.cloud).collect(),
    ));
    let max_reg = series
        .iter()
        .flat_map(|(_, values)| values.iter())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let _ = write!(
        s,
        r#"<text x="4" y="{:.1}" font-size="12">registrations (max {max_reg})</text>"#,
        chart_top + 12.0
    );
    let palette = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    ];
    for (i, (name, values)) in series.iter().enumerate() {
        let points: Vec<String> = e
            .registrations
            .iter()
            .zip(values)
            .map(|(r, v)| {
                format!(
                    "{:.1},{:.1}",
                    x(r.ts),
                    chart_top + chart_h - *v as f64 / max_reg * chart_h
                )
            })
            .collect();
        let _ = write!(
            s,
            r#"<polyline class="registrations" fill="none" stroke="{}" stroke-width="1.5" points="{}"><title>{}</title></polyline>"#,
            palette[i % palette.len()],
            points.join(" "),
            escape(name)
        );
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" fill="{}">{}</text>"#,
            left + width - 150.0,
            chart_top + 12.0 + i as f64 * 11.0,
            palette[i % palette.len()],
            escape(name)
        );
    }
    // Launches per minute.
    let top = chart_top + chart_h + 30.0;
    let max_l = e
        .launches_per_minute
        .iter()
        .map(|(_, b, r)| b + r)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let _ = write!(
        s,
        r#"<text x="4" y="{:.1}" font-size="12">launches per minute (green brokered, red rejected; max {max_l})</text>"#,
        top + 12.0
    );
    let bar_w = (60_000.0 / (t1 - t0) as f64 * width).max(1.0);
    for (minute, b, r) in &e.launches_per_minute {
        let hb = *b as f64 / max_l * chart_h;
        let hr = *r as f64 / max_l * chart_h;
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{bar_w:.1}" height="{hb:.1}" fill="#2ca02c"/><rect x="{:.1}" y="{:.1}" width="{bar_w:.1}" height="{hr:.1}" fill="#d62728"/>"##,
            x(*minute),
            top + chart_h - hb,
            x(*minute),
            top + chart_h - hb - hr
        );
    }
    s.push_str("</svg>");
    s
}

/// The self-contained HTML page.
pub fn html(report: &OutageReport) -> String {
    let mut h = String::new();
    h.push_str("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>LHC outage report</title><style>body{font-family:sans-serif;margin:20px;color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}pre{background:#f6f6f6;padding:8px}</style></head><body>");
    let _ = write!(
        h,
        "<h1>LHC outage report</h1><p>{} — {} records, {} episode(s).</p>",
        escape(&report.source),
        report.records,
        report.episodes.len()
    );
    h.push_str("<p class=\"legend\">");
    for (label, state, b) in [
        ("working normally", "working_normally", false),
        ("pending HA", "pending_ha", false),
        ("LHC (not brokering)", "extended_ha", false),
        ("LHC, brokering", "extended_ha", true),
        ("pending recovery", "pending_recovery", false),
        ("stopped", "stopped", false),
    ] {
        let _ = write!(
            h,
            "<span style=\"background:{}\"></span>{label}",
            color(state, b)
        );
    }
    h.push_str("<span style=\"background:#ff000033\"></span>split brain; dashed lines: election changes</p>");
    for (i, e) in report.episodes.iter().enumerate() {
        let _ = write!(
            h,
            "<section class=\"episode\"><h2>Episode {} — zone {}</h2><p>LHC from {} to {} ({}); outage detected from {}.</p>",
            i + 1,
            escape(&e.zone),
            e.start,
            e.end.map(|t| t.to_string()).unwrap_or("(still on at the end of the log)".into()),
            duration(e.duration_s),
            e.detected_from
        );
        h.push_str(&timeline(e));
        h.push_str("<h3>Launches</h3><table><tr><th>outcome / reason</th><th>count</th></tr>");
        for (k, v) in &e.launches {
            let _ = write!(h, "<tr><td>{}</td><td>{v}</td></tr>", escape(k));
        }
        let _ = write!(
            h,
            "</table><p>Launches lost in the detection gap (cloud_unreachable): {}.</p>",
            e.lost_in_detection_gap
        );
        if !e.split_brain.is_empty() {
            h.push_str("<h3>Split brain (R-ELECT-4)</h3><ul>");
            for s in &e.split_brain {
                let _ = write!(
                    h,
                    "<li>{} .. {}: {}</li>",
                    s.from,
                    s.to,
                    escape(&s.brokers.join(", "))
                );
            }
            h.push_str("</ul>");
        }
        h.push_str("<h3>HA summaries (3507–3510)</h3><pre>");
        for s in e.summaries.iter().rev().take(12).rev() {
            h.push_str(&escape(&serde_json::to_string(s).unwrap_or_default()));
            h.push('\n');
        }
        h.push_str("</pre></section>");
    }
    h.push_str("</body></html>\n");
    h
}
