//! Shared pieces of the report renderers (writing a page), the time axis and the outage
//! report page. HTML is built with maud, which escapes every interpolated value.

pub mod axis;
pub mod outage;

use std::path::Path;

use anyhow::Context;

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
