//! `lhc forensics sync`: every failed config import (505) explained, like a CSS trace but
//! computed after the fact; terminal, JSON or self-contained HTML.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use lhc_engine::engine::snake;
use lhc_replay::SyncForensics;

use crate::args::SourceArgs;
use crate::render::escape;

/// Forensics computed by replaying a log.
#[derive(Subcommand)]
pub enum ForensicsCommand {
    /// Every 505: the objects at fault and the rule each breaks, the config.change (offset,
    /// version, time) that introduced each, the changes between the last good version and
    /// the failing one, how stale the fallback was, and the LHC-mode launches decided on
    /// that stale configuration that the current one would have decided differently.
    Sync {
        #[command(flatten)]
        source: SourceArgs,
        /// Write a self-contained HTML report here.
        #[arg(long, value_name = "FILE.html")]
        out: Option<PathBuf>,
        /// Print JSON instead of the summary.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a forensics command.
pub fn run(command: ForensicsCommand, quiet: bool) -> anyhow::Result<ExitCode> {
    match command {
        ForensicsCommand::Sync { source, out, json } => {
            let report = source.replay_with(quiet, lhc_replay::sync_forensics)?;
            crate::render::publish(&report, json, summary, html, out.as_deref(), quiet)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn ago(s: Option<i64>) -> String {
    match s {
        Some(s) if s >= 3600 => format!("{}h{:02}m", s / 3600, (s / 60) % 60),
        Some(s) => format!("{}m{:02}s", s / 60, s % 60),
        None => "-".into(),
    }
}

/// Lines describing each failed import (shared by the terminal and HTML forms).
fn failure_lines(report: &SyncForensics) -> Vec<(String, Vec<String>)> {
    report
        .failures
        .iter()
        .map(|f| {
            let repeats = report
                .repeats
                .get(&format!("{} v{}", f.connector, f.version))
                .copied()
                .unwrap_or(1);
            let head = format!(
                "505 at {} on {}: version {} failed ({} time(s), the last at {}); kept version {} — {} version(s) behind, stale for {} by then",
                f.ts,
                f.connector,
                f.version,
                repeats,
                f.last_ts,
                f.fallback_version.map_or("none".into(), |v| v.to_string()),
                f.versions_behind,
                ago(f.stale_for_s)
            );
            let mut lines = Vec::new();
            for c in &f.culprits {
                let by = &c.failure.introduced_by;
                lines.push(format!(
                    "{} {}: {} ({}) — introduced by {} at offset {}{}",
                    snake(&c.failure.kind),
                    c.failure.id,
                    snake(&c.failure.rule),
                    c.failure.detail,
                    by.version
                        .map_or("a storage fault".into(), |v| format!("config.change version {v}")),
                    by.offset,
                    c.introduced_at.map(|t| format!(", {t}")).unwrap_or_default()
                ));
            }
            for change in &f.diff {
                let ops: Vec<String> = change
                    .ops
                    .iter()
                    .take(6)
                    .map(|(op, kind, id)| format!("{op} {kind} {id}"))
                    .collect();
                let more = change.ops.len().saturating_sub(6);
                lines.push(format!(
                    "  change v{} at {} (offset {}): {}{}",
                    change.version,
                    change.ts,
                    change.offset,
                    ops.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                ));
            }
            (head, lines)
        })
        .collect()
}

/// The terminal summary.
pub fn summary(report: &SyncForensics) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{}: {} failed import(s)",
        report.source,
        report.failures.len()
    );
    for (head, lines) in failure_lines(report) {
        let _ = writeln!(t, "\n{head}");
        for l in lines {
            let _ = writeln!(t, "  {l}");
        }
    }
    let _ = writeln!(
        t,
        "\nLHC-mode launches decided on a stale snapshot: {}; the current configuration would decide {} of them differently",
        report.decided_on_stale,
        report.stale_decisions.len()
    );
    for s in report.stale_decisions.iter().take(20) {
        let d = &s.decision;
        let _ = writeln!(
            t,
            "  {} {} via {} ({} on v{}, current v{}): {}",
            d.ts,
            d.request,
            d.connector,
            snake(&d.outcome),
            s.decided_on,
            s.current,
            s.difference
        );
    }
    if report.stale_decisions.len() > 20 {
        let _ = writeln!(
            t,
            "  ... {} more (--json for all)",
            report.stale_decisions.len() - 20
        );
    }
    t
}

/// The self-contained HTML page.
pub fn html(report: &SyncForensics) -> String {
    let mut h = String::from("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Config sync forensics</title><style>body{font-family:sans-serif;margin:20px;color:#222}li{margin:2px 0}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}.rule{color:#b00020;font-weight:bold}</style></head><body>");
    let _ = write!(
        h,
        "<h1>Config sync forensics</h1><p>{} — {} failed import(s).</p>",
        escape(&report.source),
        report.failures.len()
    );
    for (head, lines) in failure_lines(report) {
        let _ = write!(
            h,
            "<section class=\"failure\"><h2>{}</h2><ul>",
            escape(&head)
        );
        for l in lines {
            let _ = write!(h, "<li>{}</li>", escape(&l));
        }
        h.push_str("</ul></section>");
    }
    let _ = write!(
        h,
        "<h2>Launches decided on a stale snapshot</h2><p>{} in LHC mode; {} would go differently on the current configuration.</p><table><tr><th>time</th><th>request</th><th>connector</th><th>outcome</th><th>snapshot</th><th>current</th><th>difference</th></tr>",
        report.decided_on_stale,
        report.stale_decisions.len()
    );
    for s in &report.stale_decisions {
        let d = &s.decision;
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>v{}</td><td>v{}</td><td>{}</td></tr>",
            d.ts,
            escape(&d.request),
            escape(&d.connector),
            snake(&d.outcome),
            s.decided_on,
            s.current,
            escape(&s.difference)
        );
    }
    h.push_str("</table></body></html>\n");
    h
}
