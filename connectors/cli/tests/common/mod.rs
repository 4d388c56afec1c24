//! Helpers the CLI tests share: running the `lhc` binary, and simulating small sites.
// Each test file uses a part of them.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// Runs `lhc` with `args`.
pub fn lhc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(args)
        .output()
        .expect("lhc runs")
}

/// Runs `command` with `stdin` written to it and closed, its stdout and stderr kept.
pub fn output_with_stdin(command: &mut Command, stdin: &[u8]) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command runs");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(stdin)
        .expect("stdin written");
    child.wait_with_output().expect("the command ends")
}

/// Runs the lhc binary under a shell resource limit (`ulimit` options, like `-v 600000` for
/// address space in KB or `-t 20` for CPU seconds).
pub fn lhc_limited(limit: &str, args: &[&str]) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit {limit} && exec \"$@\""))
        .arg("bash")
        .arg(env!("CARGO_BIN_EXE_lhc"))
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

/// Replays `input` (with `extra` arguments) writing a digest chain every `every` records
/// to `chain`, and returns the chain's text.
pub fn chain_of(input: &str, every: u64, chain: &str, extra: &[&str]) -> String {
    let every = every.to_string();
    let mut args = vec![
        "replay",
        input,
        "--no-outputs",
        "--digest-every",
        &every,
        "--chain",
        chain,
        "-q",
    ];
    args.extend_from_slice(extra);
    ok(lhc(&args));
    std::fs::read_to_string(chain).unwrap()
}

/// Compares `text` with the golden file `name` (in tests/golden); `LHC_BLESS=1` writes
/// it first, for a change that means to alter the output.
pub fn golden(name: &str, text: &str) {
    let golden = root().join("connectors/cli/tests/golden").join(name);
    if std::env::var_os("LHC_BLESS").is_some() {
        std::fs::write(&golden, text).unwrap();
    }
    let expected = std::fs::read_to_string(&golden).expect("golden file (LHC_BLESS=1 writes it)");
    assert_eq!(text, expected, "output differs from {}", golden.display());
}

/// Stderr of a run, lossily.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts an error exit (2) whose message contains `needle`, with nothing on stdout.
pub fn refused(out: Output, needle: &str) -> String {
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "exit 2 expected; stderr: {err}");
    assert!(err.contains(needle), "{needle:?} not in: {err}");
    assert!(out.stdout.is_empty(), "no answer on stdout when refused");
    err
}

/// The bundled example outage log's path.
pub fn example() -> String {
    root()
        .join("docs/examples/site-outage.jsonl")
        .display()
        .to_string()
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
