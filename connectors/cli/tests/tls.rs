//! TLS: a node serves HTTPS with a certificate from a CA the test makes (rcgen), a client
//! that trusts that CA gets answers and one that does not is refused, and health checks of
//! an https `--cloud-url` succeed only when `--cloud-ca` names the CA.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use lhc_engine::build::{self, SiteBuilder};
use lhc_engine::Ts;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

mod common;
mod live;
use live::{free_port, http, wait_until, Kill};

/// Writes ca.pem, and cert.pem + key.pem for localhost and 127.0.0.1 signed by it.
fn make_certificates(dir: &Path) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "lhc test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca_cert, &ca_key)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), server.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
}

/// Starts a node on `port` over the log `log`, with `extra` options.
fn node(dir: &Path, name: &str, log: &Path, port: u16, extra: &[&str]) -> Kill {
    let child = Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["connector", "run", "--connector", name, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--health-interval", "200ms", "--tick-interval", "300ms"])
        .args(["--commit-interval", "50ms", "--fsync", "never", "--data"])
        .arg(dir.join(format!("node-{port}")))
        .arg("--log")
        .arg(log)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Kill(child)
}

/// GET over https, trusting `ca` if given: the status, or the error in words.
fn https_get(url: &str, ca: Option<&Path>) -> Result<u16, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(Duration::from_secs(5));
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).unwrap();
            client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap());
        }
        let answer = client.build().unwrap().get(url).send().await;
        match answer {
            Ok(a) => Ok(a.status().as_u16()),
            Err(e) => {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text += &format!(": {s}");
                    source = s.source();
                }
                Err(text)
            }
        }
    })
}

/// `health.check` records of the log: (ok, detail).
fn checks(log: &Path, connector: &str) -> Vec<(bool, String)> {
    let cat = Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["log", "cat", "--log"])
        .arg(log)
        .output()
        .unwrap();
    String::from_utf8_lossy(&cat.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "health.check" && r["connector"] == connector)
        .map(|r| {
            (
                r["ok"].as_bool().unwrap(),
                r["detail"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn https_listener_and_health_checks_against_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_certificates(d);
    let (cert, key, ca) = (d.join("cert.pem"), d.join("key.pem"), d.join("ca.pem"));

    // The "cloud": a node serving HTTPS, whose /livez answers 200.
    let cloud_port = free_port();
    let _cloud = node(
        d,
        "cloud.test",
        &d.join("cloud-log"),
        cloud_port,
        &[
            "--cloud-url",
            "http://127.0.0.1:9/",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let livez = format!("https://localhost:{cloud_port}/livez");
    wait_until("the https node serves", Duration::from_secs(30), || {
        https_get(&livez, Some(&ca)) == Ok(200)
    });
    let by_ip = format!("https://127.0.0.1:{cloud_port}/livez");
    assert_eq!(
        https_get(&by_ip, Some(&ca)),
        Ok(200),
        "the IP is in the certificate"
    );
    let untrusted = https_get(&livez, None).unwrap_err();
    assert!(
        untrusted.to_lowercase().contains("certificate"),
        "a client without the CA is refused by certificate: {untrusted}"
    );
    assert!(
        http(cloud_port, "GET", "/livez", None, None).is_none_or(|(status, _)| status != 200),
        "plain HTTP gets no answer from the TLS listener"
    );

    // Two connectors health-check it: one trusts the CA (--cloud-ca), one does not.
    let log = d.join("log");
    let site = SiteBuilder::new()
        .zone("z1")
        .connector("trusts.z1.test", "z1")
        .connector("doubts.z1.test", "z1");
    std::fs::write(
        d.join("config.jsonl"),
        build::text(&site.change(Ts(0), 1)) + "\n",
    )
    .unwrap();
    let imported = Command::new(env!("CARGO_BIN_EXE_lhc"))
        .args(["log", "import"])
        .arg(d.join("config.jsonl"))
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let cloud_url = format!("https://localhost:{cloud_port}/livez");
    let ca_arg = ca.to_str().unwrap();
    let trusting = node(
        d,
        "trusts.z1.test",
        &log,
        free_port(),
        &["--cloud-url", &cloud_url, "--cloud-ca", ca_arg],
    );
    let doubting = node(
        d,
        "doubts.z1.test",
        &log,
        free_port(),
        &["--cloud-url", &cloud_url],
    );
    wait_until("both record health checks", Duration::from_secs(30), || {
        checks(&log, "trusts.z1.test").len() >= 3 && checks(&log, "doubts.z1.test").len() >= 3
    });
    drop((trusting, doubting));
    let trusted = checks(&log, "trusts.z1.test");
    assert!(trusted.iter().all(|(ok, _)| *ok), "{trusted:?}");
    let doubted = checks(&log, "doubts.z1.test");
    assert!(doubted.iter().all(|(ok, _)| !*ok), "{doubted:?}");
    assert!(
        doubted[0].1.to_lowercase().contains("certificate"),
        "the failed check says why: {doubted:?}"
    );
}

#[test]
fn bad_tls_files_are_refused_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_certificates(d);
    std::fs::write(d.join("junk.pem"), "not a certificate\n").unwrap();
    let pem = |label: &str| format!("-----BEGIN {label}-----\nAAAA\n-----END {label}-----\n");
    std::fs::write(d.join("damaged-ca.pem"), pem("CERTIFICATE")).unwrap();
    std::fs::write(d.join("encrypted.pem"), pem("ENCRYPTED PRIVATE KEY")).unwrap();
    let other_key = KeyPair::generate().unwrap();
    std::fs::write(d.join("other-key.pem"), other_key.serialize_pem()).unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lhc"))
            .args(["connector", "run", "--connector", "a.test", "--cloud-url"])
            .arg("http://127.0.0.1:9/")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--data")
            .arg(d.join("node"))
            .arg("--log")
            .arg(d.join("log"))
            .args(extra)
            .output()
            .unwrap()
    };
    let path = |f: &str| d.join(f).display().to_string();
    let cases: [(Vec<String>, &str); 6] = [
        (
            vec![
                "--tls-cert".into(),
                path("junk.pem"),
                "--tls-key".into(),
                path("key.pem"),
            ],
            "junk.pem: no certificate",
        ),
        (
            vec![
                "--tls-cert".into(),
                path("cert.pem"),
                "--tls-key".into(),
                path("junk.pem"),
            ],
            "junk.pem: no usable private key",
        ),
        (
            vec![
                "--tls-cert".into(),
                path("cert.pem"),
                "--tls-key".into(),
                path("other-key.pem"),
            ],
            "does not go with the certificate",
        ),
        (
            vec!["--cloud-ca".into(), path("missing.pem")],
            "missing.pem",
        ),
        (
            vec!["--cloud-ca".into(), path("damaged-ca.pem")],
            "damaged-ca.pem: not a usable CA certificate",
        ),
        (
            vec![
                "--tls-cert".into(),
                path("cert.pem"),
                "--tls-key".into(),
                path("encrypted.pem"),
            ],
            "encrypted.pem: the private key is encrypted",
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{needle:?} not in: {err}");
    }
    let out = run(&["--tls-cert", &path("cert.pem")]);
    assert_eq!(out.status.code(), Some(2), "--tls-cert needs --tls-key");
}
