//! Progress bars on stderr for long commands; silent with --quiet or when stderr is no terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar counting `total` items (or a spinner when the total is unknown).
pub fn bar(total: Option<u64>, what: &str, quiet: bool) -> ProgressBar {
    let bar = match total {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{msg:>10} [{bar:30}] {pos}/{len} ({per_sec}, eta {eta})")
                .expect("valid template")
                .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{msg:>10} {spinner} {pos} ({per_sec})")
                .expect("valid template"),
        ),
    };
    if quiet {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.with_message(what.to_string())
}
