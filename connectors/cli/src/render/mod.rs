//! Shared pieces of the report renderers (writing a page), the time axis and the outage
//! report page. HTML is built with maud, which escapes every interpolated value.

pub mod axis;
pub mod outage;
pub mod whatif;

use std::path::Path;

use anyhow::Context;
use maud::{html, Markup, PreEscaped, DOCTYPE};

/// The style every page shares: readable text, ruled tables.
const BASE_STYLE: &str = "body{font-family:sans-serif;margin:20px;color:#222;max-width:1200px}\
    table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;\
    text-align:left;vertical-align:top}th{background:#f3f3f3}";

/// A self-contained HTML page (no external requests, usable on a phone): `title` as its
/// title and first heading, then `body`; `css` is added to the shared style.
pub fn page(title: &str, css: &str, body: Markup) -> String {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(BASE_STYLE)) (PreEscaped(css)) }
            }
            body {
                h1 { (title) }
                (body)
            }
        }
    };
    markup.into_string() + "\n"
}

/// A span of seconds as 1h02m03s, or 2m03s under an hour; negative spans read as 0.
pub fn duration(s: i64) -> String {
    let s = s.max(0);
    if s >= 3600 {
        format!("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60)
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

/// Refuses an `--out` that cannot be written as a page, before any work: a directory, or a
/// path whose folder does not exist (the report was computed, printed, then refused).
pub fn check_out(path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        anyhow::bail!("--out {} is a directory: give a file name", path.display());
    }
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(folder) = folder.filter(|f| !f.is_dir()) {
        anyhow::bail!(
            "--out {}: the folder {} does not exist",
            path.display(),
            folder.display()
        );
    }
    Ok(())
}

/// Writes an HTML page and says so unless quiet.
pub fn write_page(path: &Path, html: &str, quiet: bool) -> anyhow::Result<()> {
    std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))?;
    if !quiet {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// A page to be written at `path`: a temporary file beside it is created at once (so a
/// path that cannot be written fails before any work), filled and renamed over `path` at
/// the end (so a reader never sees half a page, and a hard link to another file at `path`
/// is replaced, never written through). Dropped unfinished, it removes its file.
///
/// A `path` that exists and is not a regular file (a symbolic link, a device such as
/// `/dev/stdout`, a pipe) is opened and written into instead: renaming over it would
/// replace the link or the device node itself (as root, `/dev/full` became a file).
pub struct PendingPage {
    path: std::path::PathBuf,
    /// The temporary file, or None when writing into `path` itself.
    temp: Option<std::path::PathBuf>,
    file: Option<std::fs::File>,
}

impl PendingPage {
    /// Creates the temporary file beside `path` (or opens `path`, see the type).
    pub fn create(path: &Path) -> anyhow::Result<PendingPage> {
        if path.is_dir() {
            anyhow::bail!("--out {} is a directory: give a file name", path.display());
        }
        if std::fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_file()) {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(path)
                .with_context(|| format!("cannot write {} (--out)", path.display()))?;
            return Ok(PendingPage {
                path: path.to_path_buf(),
                temp: None,
                file: Some(file),
            });
        }
        let name = path
            .file_name()
            .with_context(|| format!("--out {}: no file name", path.display()))?;
        let temp = path.with_file_name(format!(
            ".{}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let file = std::fs::File::create(&temp)
            .with_context(|| format!("cannot write {} (--out)", path.display()))?;
        Ok(PendingPage {
            path: path.to_path_buf(),
            temp: Some(temp),
            file: Some(file),
        })
    }

    /// Writes `html` and puts it in place; says so unless quiet.
    pub fn finish(mut self, html: &str, quiet: bool) -> anyhow::Result<()> {
        use std::io::Write as _;
        let mut file = self.file.take().expect("finished once");
        // Into a link's target or a device: no fsync (a pipe or a terminal refuses one)
        // and no rename.
        file.write_all(html.as_bytes())
            .and_then(|()| match self.temp {
                Some(_) => file.sync_all(),
                None => file.flush(),
            })
            .with_context(|| format!("writing {}", self.path.display()))?;
        drop(file);
        if let Some(temp) = &self.temp {
            std::fs::rename(temp, &self.path)
                .with_context(|| format!("writing {}", self.path.display()))?;
        }
        if !quiet {
            eprintln!("wrote {}", self.path.display());
        }
        Ok(())
    }
}

impl Drop for PendingPage {
    fn drop(&mut self) {
        if let (Some(_), Some(temp)) = (&self.file, &self.temp) {
            let _ = std::fs::remove_file(temp);
        }
    }
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
