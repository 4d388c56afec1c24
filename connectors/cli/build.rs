//! Build facts for `lhc --version`: the commit built (with `-dirty` when tracked files
//! differ from it) and the RocksDB version bundled.
//!
//! Both are read at build time because neither exists at run time: the binary has no
//! repository, and the rocksdb crate exposes no version call. A build outside a git
//! checkout (a source tarball) says "unknown" rather than failing.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    // Tracked files changed since the commit: this build is not the commit's, so say so
    // (checkpoints name the build that wrote them and another build's are not trusted).
    // The changes' hash tells two dirty builds of one commit apart.
    let diff = (commit != "unknown")
        .then(|| {
            Command::new("git")
                .args(["diff", "HEAD", "--no-ext-diff"])
                .output()
                .ok()
        })
        .flatten()
        .filter(|o| o.status.success() && !o.stdout.is_empty());
    let commit = match diff {
        Some(diff) => {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::hash::DefaultHasher::new();
            diff.stdout.hash(&mut hasher);
            format!("{commit}-dirty.{:08x}", hasher.finish() as u32)
        }
        None => commit,
    };
    println!("cargo:rustc-env=LHC_COMMIT={commit}");
    // librocksdb-sys versions read 0.17.3+10.4.2: the part after '+' is RocksDB's.
    let lock = std::fs::read_to_string("../../Cargo.lock").unwrap_or_default();
    let rocksdb = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"librocksdb-sys\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .and_then(|v| {
            v.trim_end_matches('"')
                .split_once('+')
                .map(|(_, r)| r.to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LHC_ROCKSDB_VERSION={rocksdb}");
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
    // A directory is scanned whole: an edit anywhere in the sources is seen.
    for sources in ["../../engine/src", "../../replay/src", "../../connectors"] {
        println!("cargo:rerun-if-changed={sources}");
    }
    println!("cargo:rerun-if-changed=../../.git/index");
}
