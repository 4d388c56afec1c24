//! Helpers the CLI tests share: running the `lhc` binary, and simulating small sites.
// Each test file uses a part of them.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `lhc` with `args`.
pub fn lhc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(args)
        .output()
        .expect("lhc runs")
}

/// Stdout and stderr of a run that must have succeeded (both shown if it did not).
pub fn ok(out: Output) -> (String, String) {
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    (stdout, stderr)
}

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Simulates a small site into the JSONL file `out`: `vdas` per zone and `users` for
/// `hours`, with `seed`, plus `extra` options (zones, outages, faults).
pub fn simulate(out: &str, seed: u32, vdas: u32, users: u32, hours: u32, extra: &[&str]) {
    let (seed, vdas, users, hours) = (
        seed.to_string(),
        vdas.to_string(),
        users.to_string(),
        hours.to_string(),
    );
    let mut args = vec![
        "simulate",
        "--seed",
        &seed,
        "--vdas-per-zone",
        &vdas,
        "--users",
        &users,
        "--hours",
        &hours,
        "--out",
        out,
        "-q",
    ];
    args.extend_from_slice(extra);
    ok(lhc(&args));
}
