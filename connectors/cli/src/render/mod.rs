//! Shared pieces of the report renderers (HTML escaping, writing a page), the time axis
//! and the outage report page.

pub mod axis;
pub mod outage;

use std::path::Path;

use anyhow::Context;

/// Escapes text for HTML content and attribute values.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Prints a report as JSON or as its terminal summary, and writes its HTML page if asked.
pub fn publish<R: serde::Serialize>(
    report: &R,
    json: bool,
    summary: fn(&R) -> String,
    html: fn(&R) -> String,
    out: Option<&Path>,
    quiet: bool,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", summary(report));
    }
    match out {
        Some(path) => write_page(path, &html(report), quiet),
        None => Ok(()),
    }
}

/// Writes an HTML page and says so unless quiet.
pub fn write_page(path: &Path, html: &str, quiet: bool) -> anyhow::Result<()> {
    std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))?;
    if !quiet {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Bytes of the files directly in `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
