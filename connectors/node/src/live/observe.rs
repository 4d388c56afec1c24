//! What the node observes on its own: health checks of the control plane, probes of its
//! zone peers' `/election`, and clock ticks when the log is quiet.
//!
//! Invariant: an observer only appends records; it reads engine state to know whom to
//! probe, and asks the engine's view (`lhc_engine::view`) whether to record a start or a
//! peer's death: it decides neither itself.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use lhc_engine::record::{ClockTick, ConnectorLifecycle, HealthCheck, LifecycleEvent, PeerProbe};
use lhc_engine::{Record, Ts};
use tokio::task::JoinHandle;

use super::{wall_ms, Shared};

/// Starts the observers; abort the handles to stop them.
pub(crate) fn spawn(shared: Arc<Shared>) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(health_checks(shared.clone())),
        tokio::spawn(peer_probes(shared.clone())),
        tokio::spawn(ticks(shared)),
    ]
}

/// The client of health checks and peer probes: the system's roots plus `--cloud-ca`.
fn client(shared: &Shared, timeout: Duration) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(same_host_redirects())
        .use_rustls_tls();
    for ca in &shared.config.extra_roots {
        builder = builder.add_root_certificate(ca.clone());
    }
    builder
        .build()
        .expect("an HTTP client with rustls and checked roots builds")
}

/// Redirects are followed only to the same scheme, host and port, at most 5: a health
/// check of `--cloud-url` must not end up asking another host whether the cloud is up. A
/// redirect elsewhere is answered as it is (3xx: a failed check, naming the status).
fn same_host_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = &attempt.previous()[0];
        let same = attempt.url().scheme() == first.scheme()
            && attempt.url().host_str() == first.host_str()
            && attempt.url().port_or_known_default() == first.port_or_known_default();
        if same && attempt.previous().len() <= 5 {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

fn interval(period: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval
}

/// This connector's id once a configuration names it.
fn me(shared: &Shared) -> Option<String> {
    shared.my_id(&shared.engine.read().expect("engine lock"))
}

async fn health_checks(shared: Arc<Shared>) {
    let period = shared.config.health_interval;
    let http = client(&shared, period.min(Duration::from_secs(10)));
    let mut every = interval(period);
    loop {
        every.tick().await;
        let Some(me) = me(&shared) else { continue };
        if shared
            .engine
            .read()
            .expect("engine lock")
            .needs_start_record(&me)
        {
            // Peers recorded this node's stop while it was unreachable, or it stopped
            // cleanly before: it is running, so say so first.
            tracing::warn!("the log says this connector is stopped: recording its start");
            record_lifecycle(&shared, me.clone(), LifecycleEvent::Start).await;
        }
        let (ok, detail) = match http.get(&shared.config.cloud_url).send().await {
            Ok(answer) => (
                answer.status().is_success(),
                format!("HTTP {}", answer.status().as_u16()),
            ),
            Err(e) => (false, error_text(&e)),
        };
        if !ok {
            shared
                .counters
                .health_check_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        record(&shared, "health check", move |ts| {
            Record::HealthCheck(HealthCheck {
                record_id: None,
                ts,
                connector: me,
                ok,
                detail: Some(detail),
            })
        })
        .await;
    }
}

/// The error and its causes on one line (reqwest's Display stops at the outermost).
fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Base URL of a peer's API: its `--peer` URL, else `http://ID:PORT` when the id is a host
/// name. An id with any other character (`/`, `@`, `:`, `?`...) would change what the URL
/// points at, so it gets no URL: its probes fail until `--peer` gives one.
pub(crate) fn peer_url(shared: &Shared, peer: &str) -> Option<String> {
    if let Some((_, url)) = shared
        .config
        .peers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(peer))
    {
        return Some(url.trim_end_matches('/').to_string());
    }
    let host_name = !peer.is_empty()
        && peer
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    let scheme = if shared.config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    host_name.then(|| format!("{scheme}://{peer}:{}", shared.config.listen.port()))
}

async fn peer_probes(shared: Arc<Shared>) {
    let period = shared.config.probe_interval;
    let http = client(&shared, period.min(Duration::from_secs(5)));
    let mut every = interval(period);
    // When each peer's current run of failed probes began (this node's clock): an
    // observation the engine's rule weighs (`Engine::peer_presumed_dead`).
    let mut failing_since: BTreeMap<String, Ts> = BTreeMap::new();
    // Peers whose id is not a host name, warned about once.
    let mut warned: std::collections::BTreeSet<String> = Default::default();
    loop {
        every.tick().await;
        let peers: Vec<(String, String)> = {
            let engine = shared.engine.read().expect("engine lock");
            let Some(me) = shared.my_id(&engine) else {
                continue;
            };
            let site = engine.site();
            let zone = site.connector_zone(&me).unwrap_or_default().to_string();
            site.zone_connectors(&zone)
                .filter(|peer| *peer != me)
                .map(|peer| (me.clone(), peer.to_string()))
                .collect()
        };
        let mut probes = tokio::task::JoinSet::new();
        for (me, peer) in peers {
            let url = peer_url(&shared, &peer).map(|base| format!("{base}/election"));
            if url.is_none() && warned.insert(peer.clone()) {
                tracing::warn!(
                    "peer {peer:?} is not a host name, so no URL is built from it: its probes \
                     fail until --peer {peer}=URL gives one"
                );
            }
            let http = http.clone();
            probes.spawn(async move {
                let ok = match url {
                    Some(url) => match http.get(&url).send().await {
                        Ok(answer) => answer.status().is_success(),
                        Err(_) => false,
                    },
                    None => false,
                };
                (me, peer, ok)
            });
        }
        while let Some(Ok((me, peer, ok))) = probes.join_next().await {
            if !ok {
                shared
                    .counters
                    .peer_probe_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let since = if ok {
                failing_since.remove(&peer);
                None
            } else {
                Some(
                    *failing_since
                        .entry(peer.clone())
                        .or_insert_with(|| Ts(wall_ms())),
                )
            };
            if peer_is_dead(&shared, &peer, since) {
                failing_since.remove(&peer);
                tracing::warn!(peer = %peer, "peer unreachable and silent in the log: recording its stop");
                record_lifecycle(&shared, peer.clone(), LifecycleEvent::Stop).await;
            }
            record(&shared, "peer probe", move |ts| {
                Record::PeerProbe(PeerProbe {
                    record_id: None,
                    ts,
                    connector: me,
                    peer,
                    ok,
                })
            })
            .await;
        }
    }
}

/// Appends an observation. A failure is logged and not retried: the next period observes
/// again.
async fn record(shared: &Shared, what: &str, make: impl FnOnce(Ts) -> Record + Send + 'static) {
    if let Err(e) = shared.appender.append(make).await {
        tracing::error!("{what} not recorded: {e}");
    }
}

/// Appends a `connector.lifecycle` record about `connector`.
async fn record_lifecycle(shared: &Shared, connector: String, event: LifecycleEvent) {
    record(shared, "connector.lifecycle", move |ts| {
        Record::ConnectorLifecycle(ConnectorLifecycle {
            record_id: None,
            ts,
            connector,
            event,
        })
    })
    .await;
}

/// Whether a peer has crashed: the engine's rule (`Engine::peer_presumed_dead`), asked
/// with this node's clock, when its probes began failing, and `peer_dead_after`.
fn peer_is_dead(shared: &Shared, peer: &str, unreachable_since: Option<Ts>) -> bool {
    let engine = shared.engine.read().expect("engine lock");
    engine.peer_presumed_dead(
        peer,
        Ts(wall_ms()),
        unreachable_since,
        shared.config.peer_dead_after,
    )
}

async fn ticks(shared: Arc<Shared>) {
    let period = shared.config.tick_interval;
    let mut every = interval(period);
    loop {
        every.tick().await;
        let quiet_ms = wall_ms() - shared.last_ts.load(Ordering::SeqCst);
        if quiet_ms < period.as_millis() as i64 {
            continue;
        }
        record(&shared, "clock tick", |ts| {
            Record::ClockTick(ClockTick {
                record_id: None,
                ts,
            })
        })
        .await;
    }
}
