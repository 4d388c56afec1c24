//! `lhc report outage`: the outage report as a terminal summary, JSON, and a self-contained
//! HTML page with SVG charts on a time axis (no script, no external resource: readable
//! offline; see `render::outage`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use lhc_engine::event::EventKind;
use lhc_replay::OutageReport;

use crate::args::{FleetArgs, Format, FormatArgs, SourceArgs};
use crate::render::duration;
use crate::render::outage::version_outcome;
use crate::time::Zone;

/// Reports computed by replaying a log.
#[derive(Subcommand)]
pub enum ReportCommand {
    /// Every LHC episode of every zone: when the outage was detected and LHC mode began,
    /// each connector's states, who was elected (and every change), time without a broker,
    /// split brain, registrations over time, every failed launch with its cause and fix,
    /// the users affected, the HA summaries (3507–3510) and each connector's config
    /// versions.
    Outage {
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        fleet: FleetArgs,
        /// Write a self-contained HTML report with charts on a time axis here.
        #[arg(long, value_name = "FILE.html")]
        out: Option<PathBuf>,
        /// Also show times in this zone (IANA name, like Europe/Berlin): the axis gets a
        /// second row of labels, tables a local time under each UTC one.
        #[arg(long, value_name = "ZONE")]
        tz: Option<String>,
        #[command(flatten)]
        format: FormatArgs,
    },
}

/// Runs a report.
pub fn run(command: ReportCommand, quiet: bool) -> anyhow::Result<ExitCode> {
    match command {
        ReportCommand::Outage {
            source,
            fleet,
            out,
            tz,
            format,
        } => {
            let zone = tz.as_deref().map(Zone::named).transpose()?;
            fleet.refuse_threads_without_sites()?;
            if fleet.all_sites {
                if out.is_some() {
                    anyhow::bail!(
                        "--out writes one site's page: give --site NAME instead of --all-sites"
                    );
                }
                let sites =
                    source.replay_sites_with(&fleet, quiet, |_, s| lhc_replay::outage_report(s))?;
                crate::args::print_sites(
                    &sites,
                    format.get(),
                    |r| summary(r, zone.as_ref()),
                    |r| &r.episodes,
                )?;
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(path) = &out {
                crate::render::check_out(path)?;
            }
            if let (Some(path), Some(input)) = (&out, source.input_path()) {
                crate::args::refuse_overwrite(path, &[&input])?;
            }
            let report = source.replay_with(quiet, lhc_replay::outage_report)?;
            match format.get() {
                Format::Table => print!("{}", summary(&report, zone.as_ref())),
                Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
                Format::Jsonl => {
                    for e in &report.episodes {
                        println!("{}", serde_json::to_string(e)?);
                    }
                }
            }
            if let Some(path) = out {
                crate::render::write_page(
                    &path,
                    &crate::render::outage::page(&report, zone.as_ref()),
                    quiet,
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The terminal summary.
pub fn summary(report: &OutageReport, zone: Option<&Zone>) -> String {
    let local = |ts: lhc_engine::Ts| match zone {
        Some(z) => format!("{ts} ({})", z.format(ts)),
        None => ts.to_string(),
    };
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
            "\nepisode {} — zone {}: LHC mode from {} to {} ({})",
            i + 1,
            e.zone,
            local(e.start),
            e.end.map(local).unwrap_or("(still on)".into()),
            duration(e.duration_s),
        );
        let _ = writeln!(
            t,
            "  detected   {} (first failed health check); detection gap {}, {} launch(es) lost in it",
            local(e.detected_from),
            duration(e.detection_gap.to.seconds_since(e.detection_gap.from)),
            e.lost_in_detection_gap
        );
        let no_broker: i64 = e.no_broker.iter().map(|b| b.to.seconds_since(b.from)).sum();
        let _ = writeln!(
            t,
            "  no broker  {} in {} interval(s){}",
            duration(no_broker),
            e.no_broker.len(),
            e.no_broker
                .iter()
                .take(3)
                .map(|b| format!(" {} .. {}", b.from, b.to))
                .collect::<Vec<_>>()
                .join(",")
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
        const SHOWN: usize = 12;
        let _ = writeln!(t, "  what happened:");
        for a in e.annotations.iter().take(SHOWN) {
            let _ = writeln!(t, "    {}  {}", local(a.ts), a.text);
        }
        if e.annotations.len() > SHOWN {
            let _ = writeln!(
                t,
                "    … and {} more (--format json, or the HTML report)",
                e.annotations.len() - SHOWN
            );
        }
        let _ = writeln!(
            t,
            "  launches users saw: {} of {} failed; {} user(s) affected",
            e.seen_failed(),
            e.seen_launches(),
            e.users_affected.len()
        );
        let _ = writeln!(
            t,
            "  attempts: {} brokered, {} rejected ({} retried by StoreFront on the next controller)",
            e.brokered(),
            e.failed_launches.len(),
            e.retried()
        );
        let by_reason = e.by_reason();
        if !by_reason.is_empty() {
            let _ = writeln!(t, "    {:<30} {:>8} {:>6}", "reason", "attempts", "seen");
        }
        for (reason, r) in &by_reason {
            let (count, seen) = (r.attempts, r.seen);
            let _ = writeln!(t, "    {reason:<30} {count:>8} {seen:>6}  {}", r.cause);
            let _ = writeln!(t, "    {:<30} {:>8} {:>6}  fix: {}", "", "", "", r.fix);
        }
        if let (Some(first), Some(last)) = (e.registrations.first(), e.registrations.last()) {
            let peak = e
                .registrations
                .iter()
                .flat_map(|s| s.by_registrar.iter())
                .max_by_key(|(_, v)| **v);
            let unregistered = e
                .registrations
                .iter()
                .map(|s| s.unregistered)
                .max()
                .unwrap_or(0);
            let _ = writeln!(
                t,
                "  registrations: cloud {} at the start, {} at the end; peak on a connector: {}; \
                 unregistered at most {unregistered}",
                first.cloud,
                last.cloud,
                peak.map(|(k, v)| format!("{v} on {k}"))
                    .unwrap_or("-".into())
            );
        }
        for s in &e.summaries {
            if let lhc_engine::Output::Event(ev) = s {
                if let Some(EventKind::ElectedSummary(_) | EventKind::NonElectedSummary(_)) =
                    ev.kind()
                {
                    let fields: Vec<String> = serde_json::to_value(&ev.data)
                        .unwrap_or_default()
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .map(|(k, v)| format!("{k}={}", v.to_string().trim_matches('"')))
                                .collect()
                        })
                        .unwrap_or_default();
                    let _ = writeln!(
                        t,
                        "  {} {} {}: {}",
                        ev.event_id,
                        ev.ts,
                        ev.connector,
                        fields.join(" ")
                    );
                }
            }
        }
    }
    let failing: Vec<String> = report
        .config_versions
        .iter()
        .flat_map(|(c, lines)| {
            lines
                .iter()
                .filter(|l| l.failed > 0)
                .map(move |l| format!("  {c}: v{} {}", l.version, version_outcome(l)))
        })
        .collect();
    if !failing.is_empty() {
        let _ = writeln!(t, "\nconfig versions that failed to import (505):");
        for line in failing {
            let _ = writeln!(t, "{line}");
        }
    }
    t
}
