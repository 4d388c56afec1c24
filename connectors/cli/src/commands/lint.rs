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
    format: FormatArgs,
    /// Exit 1 on warnings too (by default only errors fail).
    #[arg(long)]
    strict: bool,
}

/// Runs `lhc lint`: exit 1 when a finding is an error (or a warning, with --strict).
pub fn run(args: LintArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let report = args.source.replay_with(quiet, lhc_replay::lint)?;
    match args.format.get() {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Jsonl => {
            for f in &report.findings {
                println!("{}", serde_json::to_string(f)?);
            }
        }
        Format::Table => {
            for f in &report.findings {
                let severity = match f.severity {
                    Severity::Error => "error",
                    Severity::Warning => "warning",
                    Severity::Info => "info",
                };
                println!(
                    "{severity}[{}] {}: {}\n    fix: {}\n    see: {} ({})",
                    f.check, f.subject, f.detail, f.fix, f.docs, f.cites
                );
            }
            // The count is a diagnostic, not part of the answer.
            if !quiet {
                eprintln!("{}: {} finding(s)", report.source, report.findings.len());
            }
        }
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
