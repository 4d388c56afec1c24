//! `lhc report outage`: golden JSON on the example outage, the episode facts checked
//! against the spec, split brain found in a partitioned simulation, and an HTML page with
//! one SVG lane per connector. `LHC_BLESS=1` rewrites the golden file.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn lhc(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(args)
        .output()
        .expect("lhc runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn outage_report_of_the_example_matches_its_golden_file() {
    let example = root().join("docs/examples/site-outage.jsonl");
    let (json, _) = lhc(&["report", "outage", example.to_str().unwrap(), "--json"]);
    let mut report: Value = serde_json::from_str(&json).unwrap();
    report["source"] = Value::String("site-outage.jsonl".into());
    let text = serde_json::to_string_pretty(&report).unwrap() + "\n";
    let golden = root().join("connectors/cli/tests/golden/outage-report.json");
    if std::env::var_os("LHC_BLESS").is_some() {
        std::fs::write(&golden, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&golden).expect("golden file (LHC_BLESS=1 writes it)");
    assert_eq!(text, expected, "report differs from {}", golden.display());

    // The facts the golden file holds, as the spec states them.
    let e = &report["episodes"][0];
    assert_eq!(report["episodes"].as_array().unwrap().len(), 1);
    assert_eq!(e["zone"], "zone-east");
    // R-STATE-3: LHC mode second_check_s (60 s) after the first failed check.
    assert_eq!(e["detected_from"], "2026-01-05T09:10:01.000Z");
    assert_eq!(e["start"], "2026-01-05T09:11:01.000Z");
    // R-ELECT-2: the alphabetically first brokers; the other never does.
    let brokered = |c: &str| {
        e["lanes"][c]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["brokering"] == true)
    };
    assert!(brokered("ddc1.corp.example") && !brokered("ddc2.corp.example"));
    assert_eq!(e["split_brain"].as_array().unwrap().len(), 0);
    assert_eq!(e["launches"]["brokered"], 2);
}

/// R-ELECT-4: a partition of the election channel during an outage makes several brokers;
/// the report names the intervals and who brokered. The HTML has one lane per connector.
#[test]
fn a_partition_shows_as_split_brain_and_the_html_has_a_lane_per_connector() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("sim.jsonl").display().to_string();
    lhc(&[
        "simulate",
        "--seed",
        "2",
        "--zones",
        "1",
        "--vdas-per-zone",
        "200",
        "--users",
        "300",
        "--hours",
        "1",
        "--outage",
        "10m+30m",
        "--partition",
        "20m+5m",
        "--out",
        &log,
        "-q",
    ]);
    let html = tmp.path().join("r.html");
    let (json, _) = lhc(&[
        "report",
        "outage",
        &log,
        "--json",
        "--out",
        html.to_str().unwrap(),
    ]);
    let report: Value = serde_json::from_str(&json).unwrap();
    let e = &report["episodes"][0];
    let split = e["split_brain"].as_array().unwrap();
    assert!(
        !split.is_empty(),
        "a partition during LHC mode is a split brain"
    );
    assert!(split
        .iter()
        .any(|s| s["brokers"].as_array().unwrap().len() == 3));
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<g class=\"lane\"").count(), 3);
    assert!(page.contains("class=\"split-brain\""));
    // Self-contained: no script, no external resource.
    assert!(!page.contains("<script"));
    assert!(!page.contains("src=") && !page.contains("href="));
}

/// The HTML report opens in headless Chromium without console errors, its rendered DOM has
/// one SVG lane per connector, and a screenshot shows the timeline's colours (the brokering
/// green and the LHC orange cover a visible area).
#[test]
fn the_html_report_renders_in_headless_chromium() {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("chromium is needed for this test: run .ci/deps (installs Debian's chromium)");
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("sim.jsonl").display().to_string();
    lhc(&[
        "simulate",
        "--seed",
        "4",
        "--zones",
        "1",
        "--vdas-per-zone",
        "100",
        "--users",
        "200",
        "--hours",
        "1",
        "--outage",
        "10m+30m",
        "--out",
        &log,
        "-q",
    ]);
    let html = tmp.path().join("report.html");
    lhc(&[
        "report",
        "outage",
        &log,
        "--out",
        html.to_str().unwrap(),
        "-q",
    ]);
    let url = format!("file://{}", html.display());
    let profile = tmp.path().join("profile");
    let common = [
        "--headless=new".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--enable-logging=stderr".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    let dom = Command::new(chromium)
        .args(&common)
        .args(["--dump-dom", &url])
        .output()
        .unwrap();
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let stderr = String::from_utf8_lossy(&dom.stderr);
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    let rendered = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(
        rendered.matches("class=\"lane\"").count(),
        3,
        "one lane per connector"
    );

    let shot = tmp.path().join("shot.png");
    let out = Command::new(chromium)
        .args(&common)
        .args([
            format!("--screenshot={}", shot.display()),
            "--window-size=1200,700".into(),
            url,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    let count = |rgb: [u8; 3]| {
        pixels[..info.buffer_size()]
            .chunks(channels)
            .filter(|p| {
                p[..3]
                    .iter()
                    .zip(rgb)
                    .all(|(a, b)| (i16::from(*a) - i16::from(b)).abs() <= 3)
            })
            .count()
    };
    let brokering = count([0x1b, 0x7f, 0x3b]);
    let lhc = count([0xe0, 0x7a, 0x5f]);
    assert!(brokering > 2_000, "brokering lane visible: {brokering} px");
    assert!(lhc > 2_000, "LHC lanes visible: {lhc} px");
}
