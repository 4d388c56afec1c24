//! The node's live dashboard (`GET /`) in headless Chromium, driven over the DevTools
//! protocol: the page makes no request to another host, shows the zone's lanes, then —
//! with no reload (server-sent events) — launch decisions by reason when launches arrive
//! and the new version when a configuration change arrives. A screenshot shows the lanes.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use lhc_engine::build::{self, records};
use lhc_engine::Ts;
use serde_json::{json, Value};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

mod common;
mod live;
use live::{
    append, free_port, http, launch_app, node_command, now_ms, small_site, stub_cloud, wait_until,
    Kill,
};

const A: &str = "a.z1.dash";
const B: &str = "b.z1.dash";

/// A page of headless Chromium, driven over the DevTools protocol.
struct Page {
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Page {
    /// Sends `method` and returns its result, skipping the events in between.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let message = json!({ "id": id, "method": method, "params": params });
        self.ws.send(Message::text(message.to_string())).unwrap();
        loop {
            let Message::Text(text) = self.ws.read().unwrap() else {
                continue;
            };
            let answer: Value = serde_json::from_str(text.as_str()).unwrap();
            if answer["id"] == id {
                assert!(answer["error"].is_null(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Evaluates `expression` in the page.
    fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        );
        result["result"]["value"].clone()
    }
}

/// The DevTools target list (its server keeps the connection open: read by length).
fn devtools_targets(port: u16) -> Value {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The target URLs it answers are built from the Host header: give the port.
    let request = format!("GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// Starts Chromium with a DevTools port and attaches to its first page.
fn chromium(profile: &std::path::Path) -> (Kill, Page) {
    let binary = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("chromium is needed for this test: run .ci/deps (installs Debian's chromium)");
    let mut child = Command::new(binary)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-port=0",
            "--window-size=1100,1400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut endpoint = None;
    for line in stderr.lines() {
        let line = line.unwrap();
        if let Some(at) = line.find("ws://") {
            endpoint = Some(line[at..].trim().to_string());
            break;
        }
    }
    let endpoint = endpoint.expect("chromium prints its DevTools endpoint");
    let port: u16 = endpoint["ws://127.0.0.1:".len()..]
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let targets = devtools_targets(port);
    let page = targets
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "page")
        .expect("a page target")["webSocketDebuggerUrl"]
        .as_str()
        .unwrap()
        .to_string();
    let (ws, _) = tungstenite::connect(page).unwrap();
    (Kill(child), Page { ws, next: 0 })
}

#[test]
fn the_live_dashboard_updates_in_chromium_as_records_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // The zone was configured twenty minutes ago: the lanes have a history to show.
    let t = now_ms() - 20 * 60_000;
    let site = small_site(&[A, B], None);
    append(
        &log,
        &[
            build::text(&site.change(Ts(t), 1)),
            build::text(&records::storefront(Ts(t + 1), A, "sf")),
        ],
    );
    let cloud = stub_cloud(Arc::new(AtomicBool::new(true)));
    let port = free_port();
    let cloud_url = format!("http://127.0.0.1:{cloud}/health");
    let node = node_command(A, port, &log, &dir.path().join("node"), &cloud_url)
        .spawn()
        .unwrap();
    let _node = Kill(node);
    wait_until("the node is ready", Duration::from_secs(30), || {
        http(port, "GET", "/readyz", None, None).is_some_and(|(s, _)| s == 200)
    });
    let (_chrome, mut page) = chromium(&dir.path().join("profile"));
    let url = format!("http://127.0.0.1:{port}/");
    page.call("Page.navigate", json!({ "url": url }));
    let updates = |page: &mut Page| {
        page.eval("Number(document.getElementById('status').dataset.updates)")
            .as_u64()
            .unwrap_or(0)
    };
    wait_until("the lanes appear", Duration::from_secs(20), || {
        page.eval("document.querySelectorAll('#lanes g.lane').length")
            .as_u64()
            == Some(2)
    });
    let status = page.eval("document.getElementById('status').textContent");
    assert!(status.as_str().unwrap().contains("live"), "{status}");
    let before = updates(&mut page);

    // Launches arrive (no machine is registered: rejected with a reason); the chart shows
    // them by reason, with no reload.
    for _ in 0..3 {
        let (status, body) = launch_app(port);
        assert_eq!(status, 200, "{body}");
    }
    wait_until("the launches appear", Duration::from_secs(20), || {
        page.eval("document.querySelectorAll('#launches rect.bar').length")
            .as_u64()
            .unwrap_or(0)
            >= 1
    });
    assert!(updates(&mut page) > before, "more events arrived");
    let legend = page.eval("document.getElementById('launch-legend').textContent");
    assert!(
        !legend.as_str().unwrap().is_empty() && !legend.as_str().unwrap().contains("brokered"),
        "the rejection reason is named: {legend}"
    );
    let rows = page.eval("document.querySelectorAll('#connectors tr').length");
    assert_eq!(rows.as_u64(), Some(3), "a header and a row per connector");
    let config = page.eval("document.getElementById('config').textContent");
    assert!(
        config.as_str().unwrap().contains("configuration v1"),
        "{config}"
    );
    // A configuration change arrives through the log: the page shows v2, unreloaded.
    let changed = site
        .clone()
        .machine("vda1.z1.dash", "z1", "g", Some(10))
        .change(Ts(now_ms() + 2_000), 2);
    append(&log, &[build::text(&changed)]);
    wait_until("v2 appears", Duration::from_secs(20), || {
        page.eval("document.getElementById('config').textContent")
            .as_str()
            .is_some_and(|t| t.contains("configuration v2"))
    });
    // Axis labels are on the charts.
    let ticks = page.eval("document.querySelectorAll('g.axis text').length");
    assert!(ticks.as_u64().unwrap() >= 3, "{ticks}");
    // Nothing was requested from anywhere but the node.
    let others = page.eval(&format!(
        "performance.getEntriesByType('resource').map(e => e.name)\
         .filter(n => !n.startsWith('http://127.0.0.1:{port}/')).length"
    ));
    assert_eq!(others.as_u64(), Some(0));

    // On a phone's width the charts are drawn at that width (text at its CSS size) and the
    // page does not scroll sideways.
    page.call(
        "Emulation.setDeviceMetricsOverride",
        json!({ "width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": true }),
    );
    wait_until(
        "the charts follow the width",
        Duration::from_secs(10),
        || {
            page.eval("document.querySelector('#lanes svg').viewBox.baseVal.width")
                .as_f64()
                .is_some_and(|w| w <= 390.0)
        },
    );
    let overflow = page.eval("document.documentElement.scrollWidth");
    assert!(
        overflow.as_f64().unwrap() <= 390.0,
        "no sideways scroll: {overflow}"
    );
    page.call("Emulation.clearDeviceMetricsOverride", json!({}));
    wait_until("back to the desktop width", Duration::from_secs(10), || {
        page.eval("document.querySelector('#lanes svg').viewBox.baseVal.width")
            .as_f64()
            .is_some_and(|w| w > 600.0)
    });
    // A screenshot shows the lanes (working_normally is #9ecae1).
    let shot = page.call("Page.captureScreenshot", json!({ "format": "png" }));
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().unwrap())
        .unwrap();
    let decoder = png::Decoder::new(std::io::Cursor::new(&png));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let step = info.color_type.samples();
    let lane_px = pixels[..info.buffer_size()]
        .chunks(step)
        .filter(|p| p[..3] == [0x9e, 0xca, 0xe1])
        .count();
    assert!(
        lane_px > 5_000,
        "lanes visible in the screenshot: {lane_px} px"
    );
    std::fs::write(dir.path().join("dashboard.png"), &png).unwrap();
    if std::env::var_os("LHC_BLESS").is_some() {
        std::fs::write(common::root().join("docs/img/dashboard.png"), &png).unwrap();
    }
}
