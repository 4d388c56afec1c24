//! `lhc lint PATH`: the seeds' configuration advice as checks on a log.

use std::process::ExitCode;

use lhc_replay::Severity;

use crate::args::{Format, FormatArgs, SourceArgs};

/// Options of `lhc lint`.
#[derive(clap::Args)]
pub struct LintArgs {
    #[command(flatten)]
    source: SourceArgs,
    #[command(flatten)]
    fleet: crate::args::FleetArgs,
    #[command(flatten)]
    format: FormatArgs,
    /// Exit 1 on warnings too (by default only errors fail).
    #[arg(long)]
    strict: bool,
}

/// Runs `lhc lint`: exit 1 when a finding is an error (or a warning, with --strict).
pub fn run(args: LintArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    args.fleet.refuse_threads_without_sites()?;
    if args.fleet.all_sites {
        return fleet(args, quiet);
    }
    let report = args.source.lint_with(quiet, lhc_replay::lint)?;
    match args.format.get() {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Jsonl => {
            for f in &report.findings {
                println!("{}", serde_json::to_string(f)?);
            }
        }
        Format::Table => {
            for f in &report.findings {
                println!("{}", finding_text(f));
            }
            // The count is a diagnostic, not part of the answer.
            if !quiet {
                eprintln!("{}: {} finding(s)", report.source, report.findings.len());
            }
        }
    }
    Ok(if fails(&report, args.strict) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A finding for people: severity, check, subject, detail, the fix and where to read more.
fn finding_text(f: &lhc_replay::Finding) -> String {
    let severity = match f.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    };
    format!(
        "{severity}[{}] {}: {}\n    fix: {}\n    see: {} ({})",
        f.check, f.subject, f.detail, f.fix, f.docs, f.cites
    )
}

/// Whether the report fails the lint (errors, or warnings too with --strict).
fn fails(report: &lhc_replay::LintReport, strict: bool) -> bool {
    report
        .findings
        .iter()
        .any(|f| f.severity == Severity::Error || (strict && f.severity == Severity::Warning))
}

/// `lhc lint --kafka B --all-sites`: every site's findings, site by site; exit 1 when any
/// site fails.
fn fleet(args: LintArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let sites = args
        .source
        .replay_sites_with(&args.fleet, quiet, |_, source| lhc_replay::lint(source))?;
    crate::args::print_sites(
        &sites,
        args.format.get(),
        |r| {
            let mut text = format!("{} finding(s)\n", r.findings.len());
            for f in &r.findings {
                text += &finding_text(f);
                text.push('\n');
            }
            text
        },
        |r| &r.findings,
    )?;
    let failing = sites.iter().filter(|(_, r)| fails(r, args.strict)).count();
    Ok(if failing > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
