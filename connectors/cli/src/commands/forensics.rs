//! `lhc forensics sync`: every failed config import (505) explained, like a CSS trace but
//! computed after the fact; terminal, JSON or self-contained HTML.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use lhc_engine::engine::snake;
use lhc_replay::SyncForensics;

use maud::html;

use crate::args::{FleetArgs, Format, FormatArgs, SourceArgs};

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
        #[command(flatten)]
        fleet: FleetArgs,
        /// Write a self-contained HTML report here.
        #[arg(long, value_name = "FILE.html")]
        out: Option<PathBuf>,
        #[command(flatten)]
        format: FormatArgs,
    },
}

/// Runs a forensics command.
pub fn run(command: ForensicsCommand, quiet: bool) -> anyhow::Result<ExitCode> {
    match command {
        ForensicsCommand::Sync {
            source,
            fleet,
            out,
            format,
        } => {
            fleet.refuse_threads_without_sites()?;
            if fleet.all_sites {
                if out.is_some() {
                    anyhow::bail!(
                        "--out writes one site's page: give --site NAME instead of --all-sites"
                    );
                }
                let sites = source
                    .replay_sites_with(&fleet, quiet, |_, s| lhc_replay::sync_forensics(s))?;
                crate::args::print_sites(&sites, format.get(), summary, |r| &r.root_causes)?;
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(path) = &out {
                crate::render::check_out(path)?;
            }
            if let (Some(path), Some(input)) = (&out, source.input_path()) {
                crate::args::refuse_overwrite(path, &[&input])?;
            }
            let report = source.replay_with(quiet, lhc_replay::sync_forensics)?;
            match format.get() {
                Format::Table => print!("{}", summary(&report)),
                Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
                // One root cause per line: what to fix, for scripts and tickets.
                Format::Jsonl => {
                    for c in &report.root_causes {
                        println!("{}", serde_json::to_string(c)?);
                    }
                }
            }
            if let Some(path) = out {
                crate::render::write_page(&path, &html(&report), quiet)?;
            }
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
            let repeats = f.count;
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

/// Every 505, repeats included.
fn total_failed(report: &SyncForensics) -> u64 {
    report.failures.iter().map(|f| f.count).sum()
}

/// One root cause as lines: what, where it came from, what it broke, the fix.
fn cause_lines(n: usize, c: &lhc_replay::forensics::RootCause) -> Vec<String> {
    let by = match c.introduced_by.version {
        Some(v) => format!("config.change v{v} at offset {}", c.introduced_by.offset),
        None => format!("a storage fault at offset {}", c.introduced_by.offset),
    };
    let connectors = if c.connectors.len() > 6 {
        format!(
            "{}, … ({} in all)",
            c.connectors[..6].join(", "),
            c.connectors.len()
        )
    } else {
        c.connectors.join(", ")
    };
    let versions: Vec<String> = c.versions.iter().map(|v| format!("v{v}")).collect();
    vec![
        format!("{n}. {} {} breaks {}: {}", c.kind, c.id, c.rule, c.detail),
        format!(
            "   introduced by {by}{}",
            c.introduced_at
                .map(|t| format!(", {t}"))
                .unwrap_or_default()
        ),
        format!(
            "   failed {} import(s) of {} on {} connector(s): {connectors} ({} .. {})",
            c.failed_imports,
            versions.join(", "),
            c.connectors.len(),
            c.between.0,
            c.between.1
        ),
        format!("   fix: {}", c.fix),
    ]
}

/// The head line and the root causes alone (what to fix), as the demo shows them.
pub fn root_causes(report: &SyncForensics) -> String {
    let full = summary(report);
    match full.split_once("\neach failed import:") {
        Some((causes, _)) => causes.to_string(),
        None => full,
    }
}

/// The terminal summary: root causes first (what to fix), then each failed import.
pub fn summary(report: &SyncForensics) -> String {
    let mut t = String::new();
    if report.failures.is_empty() {
        let _ = writeln!(t, "{}: no failed import (505)", report.source);
    } else {
        let _ = writeln!(
            t,
            "{}: {} failed import(s) (505) from {} root cause(s)",
            report.source,
            total_failed(report),
            report.root_causes.len()
        );
        let _ = writeln!(t, "\nroot causes, most failed imports first:");
        for (i, c) in report.root_causes.iter().enumerate() {
            for line in cause_lines(i + 1, c) {
                let _ = writeln!(t, "{line}");
            }
        }
        let _ = writeln!(t, "\neach failed import:");
    }
    for (head, lines) in failure_lines(report) {
        let _ = writeln!(t, "\n{head}");
        for l in lines {
            let _ = writeln!(t, "  {l}");
        }
    }
    if report.decided_on_stale > 0 {
        let _ = writeln!(
            t,
            "\nLHC-mode launches decided on a stale snapshot: {}; the current configuration would decide {} of them differently",
            report.decided_on_stale,
            report.stale_decisions.len()
        );
    }
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
            "  ... {} more (--format json for all)",
            report.stale_decisions.len() - 20
        );
    }
    t
}

/// The self-contained HTML page (sections with nothing to show are left out).
pub fn html(report: &SyncForensics) -> String {
    let failures = failure_lines(report);
    const STYLE: &str =
        "li{margin:2px 0}.fix{background:#eef7ee;padding:6px 10px;border-left:4px solid #2a7d4f}";
    let body = html! {
        @if report.failures.is_empty() {
            p { (report.source) ": no failed import (505)." }
        } @else {
            p { (report.source) " — " (total_failed(report)) " failed import(s) (505) from "
                (report.root_causes.len()) " root cause(s)." }
            h2 { "Root causes" }
            @for (i, c) in report.root_causes.iter().enumerate() {
                section class="root-cause" {
                    h3 { (i + 1) ". " (c.kind) " " code { (c.id) } " breaks " code { (c.rule) } }
                    p { (c.detail) }
                    p {
                        "Introduced by "
                        @match c.introduced_by.version {
                            Some(v) => { "config.change v" (v) }
                            None => { "a storage fault" }
                        }
                        " at offset " (c.introduced_by.offset)
                        @if let Some(t) = c.introduced_at { ", " (t) }
                        ". It failed " (c.failed_imports) " import(s) on "
                        (c.connectors.len()) " connector(s): " (c.connectors.join(", ")) "."
                    }
                    p class="fix" { "Fix: " (c.fix) }
                }
            }
            h2 { "Each failed import" }
            @for (head, lines) in &failures {
                section class="failure" {
                    h3 { (head) }
                    ul { @for l in lines { li { (l) } } }
                }
            }
        }
        @if !report.stale_decisions.is_empty() {
            h2 { "Launches decided on a stale snapshot" }
            p { (report.decided_on_stale) " in LHC mode; " (report.stale_decisions.len())
                " would go differently on the current configuration." }
            table {
                tr { th { "time" } th { "request" } th { "connector" } th { "outcome" }
                     th { "snapshot" } th { "current" } th { "difference" } }
                @for s in &report.stale_decisions {
                    tr {
                        td { (s.decision.ts) } td { (s.decision.request) } td { (s.decision.connector) }
                        td { (snake(&s.decision.outcome)) } td { "v" (s.decided_on) } td { "v" (s.current) }
                        td { (s.difference) }
                    }
                }
            }
        }
    };
    crate::render::page("Config sync forensics", STYLE, body)
}
