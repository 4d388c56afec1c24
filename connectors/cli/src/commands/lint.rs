//! `lhc lint PATH`: the seeds' configuration advice as checks on a log.

use std::process::ExitCode;

use lhc_replay::Severity;

use crate::args::SourceArgs;

/// Options of `lhc lint`.
#[derive(clap::Args)]
pub struct LintArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Print JSON instead of one line per finding.
    #[arg(long)]
    json: bool,
    /// Exit 1 on warnings too (by default only errors fail).
    #[arg(long)]
    strict: bool,
}

/// Runs `lhc lint`: exit 1 when a finding is an error (or a warning, with --strict).
pub fn run(args: LintArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let report = args.source.replay_with(quiet, lhc_replay::lint)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for f in &report.findings {
            let severity = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Info => "info",
            };
            println!(
                "{severity}[{}] {}: {}\n    cites {}",
                f.check, f.subject, f.detail, f.cites
            );
        }
        println!("{}: {} finding(s)", report.source, report.findings.len());
    }
    let fails = report
        .findings
        .iter()
        .any(|f| f.severity == Severity::Error || (args.strict && f.severity == Severity::Warning));
    Ok(if fails {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
