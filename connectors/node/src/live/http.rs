//! The node's HTTP API (axum): StoreFront, VDA, load balancer monitor, peers, operations,
//! admin and the read-only SDK.
//!
//! Invariant: a request that changes anything is appended to the log as a record and nothing
//! else; a bad request is answered 4xx with a JSON `{"error": ...}` and appends nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lhc_engine::engine::snake;
use lhc_engine::output::ConnectorState;
use lhc_engine::record::{
    AdminCommand, AdminCommandName, Client, LaunchRequest, SessionEvent, SessionEventKind,
    SessionReport, StorefrontHeartbeat, VdaHeartbeat,
};
use lhc_engine::{Engine, Output, Record};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use subtle::ConstantTimeEq;

use super::openapi::{
    Accepted, AdcAnswer, AdminDone, Election, ErrorBody, LastQuarantine, Liveness, Readiness,
    Resources, SdkMachines, SdkRegistrations, SdkSession, SdkSessions,
};
use super::{LaunchAnswer, Shared};

type AppState = Arc<Shared>;

/// The routes, with the body limit applied.
pub(crate) fn router(shared: AppState) -> Router {
    let limit = shared.config.body_limit;
    Router::new()
        .route("/storefront/heartbeat", post(storefront_heartbeat))
        .route("/storefront/resources", get(resources))
        .route("/storefront/launch", post(launch))
        .route("/vda/heartbeat", post(vda_heartbeat))
        .route("/vda/session", post(vda_session))
        .route("/adc/probe", get(adc_probe))
        .route("/election", get(election))
        .route("/healthz", get(healthz))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/admin/forced-outage", post(admin_forced_outage))
        .route(
            "/admin/sync-interval",
            post(admin_sync_interval).delete(admin_sync_interval_clear),
        )
        .route("/admin/ha-sdk", post(admin_ha_sdk))
        .route("/admin/css-trace", post(admin_css_trace))
        .route("/sdk/machines", get(sdk_machines))
        .route("/sdk/sessions", get(sdk_sessions))
        .route("/sdk/registrations", get(sdk_registrations))
        .route("/", get(dashboard_page))
        .route("/dashboard/state", get(dashboard_state))
        .route("/dashboard/events", get(dashboard_events))
        .route("/openapi.json", get(openapi))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
        })
        .layer(axum::middleware::from_fn_with_state(shared.clone(), gate))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(shared)
}

/// Routes that answer while the node catches up with the log at start: they describe the
/// node, and decide nothing.
const ANSWER_WHILE_CATCHING_UP: [&str; 8] = [
    "/livez",
    "/readyz",
    "/healthz",
    "/metrics",
    "/openapi.json",
    "/",
    "/dashboard/state",
    "/dashboard/events",
];

/// Until the start-up catch-up is done, a route that decides (or appends what its answer
/// depends on) answers 503 saying so: an answer from a state behind the log could
/// contradict the log. `/adc/probe` answers DOWN with the reason `catching_up`.
async fn gate(
    State(shared): State<AppState>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    // A node that failed says so itself (`node_failed`), caught up or not.
    if shared.caught_up.load(Ordering::SeqCst)
        || ANSWER_WHILE_CATCHING_UP.contains(&request.uri().path())
        || (request.uri().path() == "/adc/probe" && shared.health.trouble().is_some())
    {
        return next.run(request).await;
    }
    let detail = "this node is catching up with the site log at start and cannot decide yet; \
                  retry shortly (see /readyz)";
    if request.uri().path() == "/adc/probe" {
        let body = AdcAnswer {
            status: "DOWN",
            reason: Some("catching_up".into()),
            site: Some(shared.config.site.clone()),
            connector: None,
            state: None,
            elected: None,
            detail: Some(detail.into()),
        };
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    ApiError::unavailable(detail).into_response()
}

/// The live dashboard: one self-contained page (no external requests).
async fn dashboard_page() -> Response {
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // The page loads nothing from anywhere, and runs only its own script.
            (
                axum::http::header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src 'self' data:",
            ),
        ],
        super::dashboard::PAGE,
    )
        .into_response()
}

/// The dashboard's data as JSON text, serialized once under the locks.
fn dashboard_json(shared: &Shared) -> String {
    let engine = shared.engine.read().expect("engine lock");
    let history = shared.dashboard.lock().expect("dashboard");
    serde_json::to_string(&history.state(&engine, &shared.config.connector)).expect("serializes")
}

/// The dashboard's data once, as JSON.
async fn dashboard_state(State(shared): State<AppState>) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        dashboard_json(&shared),
    )
        .into_response()
}

/// The dashboard's data as server-sent events: one `state` event at once, then one each
/// time the fold has applied records, at most two a second.
async fn dashboard_events(State(shared): State<AppState>) -> Result<Response, ApiError> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    // Each stream holds a connection for minutes: a bounded number, so viewers cannot take
    // the slots StoreFront, VDAs and probes need.
    let Ok(permit) = shared.dashboard_streams.clone().try_acquire_owned() else {
        return Err(ApiError::unavailable(format!(
            "{} dashboards are open on this node already; close one, or use /dashboard/state",
            super::MAX_DASHBOARD_STREAMS
        )));
    };
    let applied = shared.applied.subscribe();
    let closing = shared.closing.subscribe();
    let stream = futures_util::stream::unfold(
        (shared, applied, closing, true, permit),
        |(shared, mut applied, mut closing, first, permit)| async move {
            if !first {
                let next = async {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    applied.changed().await
                };
                tokio::select! {
                    changed = next => changed.ok()?,
                    _ = closing.wait_for(|closing| *closing) => return None,
                }
            }
            applied.borrow_and_update();
            let data = dashboard_json(&shared);
            // A page that lost the node (restart, network) tries again within a second.
            let event = Event::default()
                .event("state")
                .retry(std::time::Duration::from_secs(1))
                .data(data);
            Some((
                Ok::<_, std::convert::Infallible>(event),
                (shared, applied, closing, false, permit),
            ))
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// An error answer: a status and `{"error": message}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

/// A JSON body decoded strictly (unknown fields refused), whose errors name the field.
pub(crate) struct Body<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Only JSON: a form or text/plain POST is what a web page the user visits can send
        // cross-site without a preflight, so anything else is refused before reading.
        let json = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the body must be JSON with Content-Type: application/json",
            ));
        }
        // A body that trickles in (or stops) must not hold the handler and the
        // connection's slot: past the bound the request is answered 408.
        let read = tokio::time::timeout(super::BODY_READ_TIMEOUT, Bytes::from_request(req, state));
        let bytes = read
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request body did not arrive within {} s",
                        super::BODY_READ_TIMEOUT.as_secs()
                    ),
                )
            })?
            .map_err(|rejection| {
                let status = rejection.status();
                let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    "request body too large".to_string()
                } else {
                    rejection.body_text()
                };
                ApiError::new(status, message)
            })?;
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        // The body and its nested objects only as JSON objects, enum names only as
        // strings: the forms the OpenAPI description gives (`lhc_engine::strict`).
        let mut track = serde_path_to_error::Track::new();
        let tracked = serde_path_to_error::Deserializer::new(&mut de, &mut track);
        let value = lhc_engine::strict::form(tracked).map_err(|e| {
            let path = track.path().to_string();
            let inner = clip(&e.to_string());
            if path == "." {
                ApiError::bad(format!("body: {inner}"))
            } else {
                ApiError::bad(format!("field `{}`: {inner}", clip(&path)))
            }
        })?;
        de.end().map_err(|e| ApiError::bad(format!("body: {e}")))?;
        Ok(Body(value))
    }
}

/// At most 200 characters of a message that may echo the client's input (a 10 MB bad value
/// must not come back in full).
fn clip(text: &str) -> String {
    const KEEP: usize = 200;
    match text.char_indices().nth(KEEP) {
        Some((cut, _)) => format!("{}… ({} bytes in all)", &text[..cut], text.len()),
        None => text.to_string(),
    }
}

/// Refuses empty names, which no configuration object can match.
fn non_empty(field: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() {
        Err(ApiError::bad(format!("field `{field}`: must not be empty")))
    } else {
        Ok(())
    }
}

/// This connector's id, or 503 while no configuration names it.
fn me_in(shared: &Shared, engine: &Engine) -> Result<String, ApiError> {
    shared.my_id(engine).ok_or_else(|| {
        ApiError::unavailable(format!(
            "connector {} is not in the site configuration (yet): no config.change names it",
            shared.config.connector
        ))
    })
}

fn me(shared: &Shared) -> Result<String, ApiError> {
    me_in(shared, &shared.engine.read().expect("engine lock"))
}

async fn append(
    shared: &Shared,
    make: impl FnOnce(lhc_engine::Ts) -> Record + Send + 'static,
) -> Result<u64, ApiError> {
    shared
        .appender
        .append(make)
        .await
        .map_err(|e| ApiError::unavailable(format!("the site log refused the record: {e}")))
}

/// Refuses a request that would append while a record is applied in steps (the timers of
/// a long gap before it firing first, for as long as they take): its record would wait
/// behind them and the request time out after being written (a launch was brokered later
/// for nobody; heartbeats held their callers for the whole timeout and were retried into
/// the log again: found by hostile testing). Refused unwritten, as at a start.
fn not_in_steps(shared: &Shared) -> Result<(), ApiError> {
    let in_steps = shared.in_steps.load(Ordering::SeqCst);
    if in_steps == 0 {
        return Ok(());
    }
    Err(ApiError::unavailable(format!(
        "this node is applying record {} in steps (the timers of a long gap before it fire \
         first) and cannot decide yet; nothing was appended: retry shortly (see /readyz)",
        in_steps - 1
    )))
}

/// Appends the record `make` builds and answers once the fold has applied it (the offset).
/// Another writer of the same log (a second node, another process) can append a later
/// stamp between this node's stamping and its append; the engine then quarantines the
/// record (R-LOG-4). Acknowledged as it was, that input was lost; so a record that lost
/// such a race is stamped and appended again, and one refused for any other reason is
/// answered 409 with the engine's error.
async fn append_kept(
    shared: &Shared,
    make: impl Fn(lhc_engine::Ts) -> Record + Send + Sync + 'static,
) -> Result<u64, ApiError> {
    not_in_steps(shared)?;
    let make = Arc::new(make);
    let mut last_error = String::new();
    for _ in 0..LAUNCH_ATTEMPTS {
        let make = Arc::clone(&make);
        let appended = shared.appender.append_applied(move |ts| make(ts));
        let applied = match tokio::time::timeout(shared.config.launch_timeout, appended).await {
            Ok(Ok(applied)) => applied,
            Ok(Err(e)) => {
                return Err(ApiError::unavailable(format!(
                    "the site log refused the record: {e}"
                )))
            }
            Err(_) => {
                return Err(ApiError::unavailable(
                    "the record was appended but not applied in time; see /healthz",
                ))
            }
        };
        match applied.quarantine {
            None => return Ok(applied.offset),
            Some(error) if applied.lost_ts_race => last_error = error,
            Some(error) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!("quarantined at offset {}: {error}", applied.offset),
                ))
            }
        }
    }
    Err(ApiError::unavailable(format!(
        "the record could not be applied ({LAUNCH_ATTEMPTS} tries, each overtaken by another \
         writer's later record): {last_error}"
    )))
}

fn accepted(offset: u64) -> Response {
    (StatusCode::ACCEPTED, Json(Accepted { offset })).into_response()
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StorefrontBody {
    /// The StoreFront server's name.
    #[schemars(length(min = 1))]
    storefront: String,
}

async fn storefront_heartbeat(
    State(shared): State<AppState>,
    Body(body): Body<StorefrontBody>,
) -> Result<Response, ApiError> {
    non_empty("storefront", &body.storefront)?;
    let connector = me(&shared)?;
    let offset = append_kept(&shared, move |ts| {
        Record::StorefrontHeartbeat(StorefrontHeartbeat {
            record_id: None,
            ts,
            connector: connector.clone(),
            storefront: body.storefront.clone(),
        })
    })
    .await?;
    Ok(accepted(offset))
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResourcesQuery {
    /// The user (account name).
    #[schemars(length(min = 1))]
    user: String,
}

async fn resources(
    State(shared): State<AppState>,
    query: Result<Query<ResourcesQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad(e.body_text()))?;
    non_empty("user", &query.user)?;
    let engine = shared.engine.read().expect("engine lock");
    let me = me_in(&shared, &engine)?;
    // In LHC mode the connector answers from its own snapshot, as the seeds describe.
    let (source, list) = engine
        .resources(&me, &query.user)
        .expect("me is configured");
    Ok(Json(Resources {
        user: query.user,
        connector: me,
        source,
        resources: list,
    })
    .into_response())
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LaunchBody {
    /// The request id (default: one made by this node).
    #[serde(default)]
    #[schemars(length(min = 1))]
    request: Option<String>,
    /// The user.
    #[schemars(length(min = 1))]
    user: String,
    /// The resource to launch.
    #[schemars(length(min = 1))]
    resource: String,
    /// The client device (a non-empty name).
    #[serde(deserialize_with = "lhc_engine::strict::form")]
    client: Client,
    /// The first attempt's request id when StoreFront retries on this controller.
    #[serde(default)]
    retry_of: Option<String>,
}

/// Attempts when another node's record wins the race for a later `ts`.
const LAUNCH_ATTEMPTS: usize = 3;

async fn launch(
    State(shared): State<AppState>,
    Body(body): Body<LaunchBody>,
) -> Result<Response, ApiError> {
    non_empty("user", &body.user)?;
    non_empty("resource", &body.resource)?;
    non_empty("client.name", &body.client.name)?;
    let arrived = std::time::Instant::now();
    let connector = me(&shared)?;
    // A record applied in steps holds every decision for as long as its gap's timers take:
    // a launch appended now would time out here and still be brokered later, a session
    // nobody waits for (found by hostile testing). Refused unwritten, as at a start.
    if let Err(e) = not_in_steps(&shared) {
        shared.counters.launch_failed("catching_up");
        return Err(e);
    }
    let request = match body.request {
        Some(r) => {
            non_empty("request", &r)?;
            r
        }
        None => request_id(&connector),
    };
    let mut last_error = String::new();
    for _ in 0..LAUNCH_ATTEMPTS {
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut waiters = shared.waiters.lock().expect("waiters");
            if waiters.contains_key(&request) {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!("request {request:?} is already being decided"),
                ));
            }
            waiters.insert(request.clone(), tx);
        }
        let record = LaunchRequest {
            record_id: None,
            ts: lhc_engine::Ts(0),
            request: request.clone(),
            connector: connector.clone(),
            user: body.user.clone(),
            resource: body.resource.clone(),
            client: body.client.clone(),
            retry_of: body.retry_of.clone(),
        };
        let forget = || shared.waiters.lock().expect("waiters").remove(&request);
        if let Err(e) = append(&shared, move |ts| {
            Record::LaunchRequest(Box::new(LaunchRequest { ts, ..record }))
        })
        .await
        {
            forget();
            shared.counters.launch_failed("log_refused");
            return Err(e);
        }
        match tokio::time::timeout(shared.config.launch_timeout, rx).await {
            Ok(Ok(LaunchAnswer::Decided(decision))) => {
                shared
                    .counters
                    .launch_seconds
                    .observe(arrived.elapsed().as_secs_f64());
                // Tagged like the output log and `lhc replay`, so the two compare as they are.
                return Ok(Json(Output::LaunchDecision(decision)).into_response());
            }
            Ok(Ok(LaunchAnswer::Quarantined {
                error,
                lost_ts_race,
            })) => {
                // Only a lost ts race is worth another try; anything else would fail again.
                last_error = error;
                if !lost_ts_race {
                    break;
                }
            }
            Ok(Err(_)) => {
                shared.counters.launch_failed("shutting_down");
                return Err(ApiError::unavailable("the node is shutting down"));
            }
            Err(_) => {
                forget();
                shared.counters.launch_failed("timeout");
                // Behind, or stopped for good: say which (a fold that died read as behind;
                // found by hostile testing).
                let why = match shared.health.trouble() {
                    Some(("node_failed", reason)) => {
                        format!("this node cannot decide any more ({reason})")
                    }
                    Some((_, reason)) => reason,
                    None => "the fold is behind (see /healthz)".to_string(),
                };
                return Err(ApiError::unavailable(format!(
                    "no decision for request {request:?} within {} ms: {why}",
                    shared.config.launch_timeout.as_millis()
                )));
            }
        }
    }
    shared.counters.launch_failed("quarantined");
    Err(ApiError::unavailable(format!(
        "request {request:?} could not be applied: {last_error}"
    )))
}

/// A request id unique to this node's run.
fn request_id(connector: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let started = super::wall_ms();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{connector}-{started}-{n}")
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct VdaHeartbeatBody {
    /// The VDA.
    #[schemars(length(min = 1))]
    machine: String,
    /// Its sessions (non-empty ids and users).
    #[serde(default, deserialize_with = "lhc_engine::strict::objects")]
    #[schemars(with = "Vec<SessionReport>")]
    sessions: Vec<SessionReport>,
}

async fn vda_heartbeat(
    State(shared): State<AppState>,
    Body(body): Body<VdaHeartbeatBody>,
) -> Result<Response, ApiError> {
    non_empty("machine", &body.machine)?;
    for (i, s) in body.sessions.iter().enumerate() {
        non_empty(&format!("sessions[{i}].id"), &s.id)?;
        non_empty(&format!("sessions[{i}].user"), &s.user)?;
    }
    // The record contract's rule across fields, as `lhc log import` applies it.
    lhc_engine::decode::unique_session_ids(&body.sessions)
        .map_err(|e| ApiError::bad(format!("field `{}`: {}", e.path, e.detail)))?;
    me(&shared)?;
    let offset = append_kept(&shared, move |ts| {
        Record::VdaHeartbeat(VdaHeartbeat {
            record_id: None,
            ts,
            machine: body.machine.as_str().into(),
            sessions: body.sessions.clone(),
        })
    })
    .await?;
    Ok(accepted(offset))
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionBody {
    /// The VDA.
    #[schemars(length(min = 1))]
    machine: String,
    /// Session id.
    #[schemars(length(min = 1))]
    session: String,
    /// Its user.
    #[schemars(length(min = 1))]
    user: String,
    /// What happened.
    #[serde(deserialize_with = "lhc_engine::strict::form")]
    event: SessionEventKind,
}

async fn vda_session(
    State(shared): State<AppState>,
    Body(body): Body<SessionBody>,
) -> Result<Response, ApiError> {
    non_empty("machine", &body.machine)?;
    non_empty("session", &body.session)?;
    non_empty("user", &body.user)?;
    me(&shared)?;
    let offset = append_kept(&shared, move |ts| {
        Record::SessionEvent(SessionEvent {
            record_id: None,
            ts,
            machine: body.machine.clone(),
            session: body.session.clone(),
            user: body.user.clone(),
            event: body.event,
        })
    })
    .await?;
    Ok(accepted(offset))
}

/// The NetScaler CITRIX-XD-DDC monitor's view: UP with the site identity while this
/// connector can broker, DOWN when it is stopped or non-elected in LHC mode.
async fn adc_probe(State(shared): State<AppState>) -> Response {
    let engine = shared.engine.read().expect("engine lock");
    let Some(me) = shared.my_id(&engine) else {
        let body = AdcAnswer {
            status: "DOWN",
            reason: Some("not_configured".into()),
            site: None,
            connector: None,
            state: None,
            elected: None,
            detail: None,
        };
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    };
    let probe = engine.adc_probe(&me).expect("me is configured");
    // A record applied in steps (a long gap's timers, maybe millions of outputs): no
    // launch is decided until it is applied, so the probe says so (found by hostile
    // testing: UP while every launch timed out).
    let in_steps = shared.in_steps.load(Ordering::SeqCst);
    let trouble = shared.health.trouble().or_else(|| {
        (in_steps > 0).then(|| {
            (
                "catching_up",
                format!(
                    "applying record {} in steps (the timers of a long gap before it fire \
                     first): launches are refused until it is applied",
                    in_steps - 1
                ),
            )
        })
    });
    // A node that cannot decide says so, whatever its last state says.
    let down = match &trouble {
        Some((code, _)) => Some(code.to_string()),
        None => probe.down.map(|reason| snake(&reason)),
    };
    let status = if down.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = AdcAnswer {
        status: if down.is_some() { "DOWN" } else { "UP" },
        reason: down,
        site: Some(shared.config.site.clone()),
        connector: Some(me),
        state: Some(probe.state),
        elected: Some(probe.elected),
        detail: trouble.map(|(_, detail)| detail),
    };
    (status, Json(body)).into_response()
}

async fn election(State(shared): State<AppState>) -> Result<Response, ApiError> {
    let engine = shared.engine.read().expect("engine lock");
    let me = me_in(&shared, &engine)?;
    let view = engine.election_view(&me).expect("me is configured");
    Ok(Json(Election {
        connector: me,
        view,
    })
    .into_response())
}

/// Liveness (Kubernetes convention): the process serves and its fold thread runs. Only a
/// dead fold makes it fail: restarting the node is then the cure.
async fn livez(State(shared): State<AppState>) -> Response {
    match shared.health.fatal() {
        Some(detail) => {
            let body = Liveness {
                status: "dead",
                connector: None,
                reason: Some("node_failed"),
                detail: Some(detail),
            };
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
        None => Json(Liveness {
            status: "alive",
            connector: Some(shared.config.connector.clone()),
            reason: None,
            detail: None,
        })
        .into_response(),
    }
}

/// Readiness: configured (the site names this connector), caught up within the lag bound,
/// and able to decide (the fold runs, the log takes appends). The body says why not.
async fn readyz(State(shared): State<AppState>) -> Response {
    healthz(State(shared)).await
}

/// `/healthz`: readiness, with the figures an operator looks at (an alias kept for the
/// probes configured before `/readyz`).
async fn healthz(State(shared): State<AppState>) -> Response {
    let (body, ready) = readiness(&shared).await;
    match ready {
        Ok(()) => Json(body).into_response(),
        Err(()) => (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response(),
    }
}

/// The readiness body and verdict: ready only when configured, caught up within
/// `--ready-lag`, and able to decide; the body names the reason otherwise.
async fn readiness(shared: &AppState) -> (Readiness, Result<(), ()>) {
    let applied = *shared.applied.borrow();
    let position = *shared.site_pos.borrow();
    let trouble = shared.health.trouble();
    let (quarantined, last_quarantine) = {
        let stats = shared.stats.lock().expect("stats");
        let last = stats
            .last_quarantine
            .as_ref()
            .map(|(offset, error)| LastQuarantine {
                offset: *offset,
                error: error.clone(),
            });
        (stats.quarantined, last)
    };
    let end = log_end(shared, position).await;
    let kafka = shared.kafka.as_ref();
    let configured = {
        let engine = shared.engine.read().expect("engine lock");
        shared.my_id(&engine).is_some()
    };
    let lag = end - position;
    let bound = shared.config.ready_lag;
    let caught_up = shared.caught_up.load(Ordering::SeqCst);
    let in_steps = shared.in_steps.load(Ordering::SeqCst);
    let not_ready = match &trouble {
        Some((code, detail)) => Some((*code, detail.clone())),
        // Before the start's catch-up: a record applied in steps can hold it for minutes,
        // and "N records to fold" alone did not say why it does not move.
        None if in_steps > 0 => Some((
            "catching_up",
            format!(
                "applying record {} in steps (the timers of a long gap before it fire first): \
                 launches are refused until it is applied{}",
                in_steps - 1,
                if caught_up {
                    String::new()
                } else if shared.kafka.is_some() {
                    // Kafka positions count other sites' records too: no count.
                    "; catching up with the site log at start".to_string()
                } else {
                    format!(
                        "; catching up with the site log at start: {} more record(s) to fold \
                         after it",
                        lag.saturating_sub(1)
                    )
                }
            ),
        )),
        None if !caught_up => Some((
            "catching_up",
            format!("catching up with the site log at start: {lag} record(s) to fold"),
        )),
        None if !configured => Some((
            "not_configured",
            format!(
                "no configuration names connector {} yet: it cannot decide",
                shared.config.connector
            ),
        )),
        None if lag > bound => Some((
            "catching_up",
            format!("{lag} log record(s) not folded yet (ready at {bound} or fewer)"),
        )),
        None => None,
    };
    let status = match (&trouble, &not_ready) {
        (Some(("node_failed", _)), _) => "failed",
        (Some(_), _) => "degraded",
        (None, Some(_)) => "not_ready",
        (None, None) => "ok",
    };
    let ready = if not_ready.is_some() { Err(()) } else { Ok(()) };
    let (reason, detail) = not_ready.unzip();
    let body = Readiness {
        status,
        connector: shared.config.connector.clone(),
        applied_offset: applied,
        log: shared.log.describe(),
        quarantined,
        last_quarantine,
        log_end: end,
        lag,
        kafka_next: kafka.map(|_| position),
        kafka_up: kafka.map(|link| link.up.load(Ordering::SeqCst)),
        outbox: kafka.map(|link| link.outbox_len.load(Ordering::SeqCst)),
        kafka_detail: kafka.and_then(|link| {
            if link.unreachable_since_start.load(Ordering::SeqCst) {
                Some(format!(
                    "kafka has not answered since this node started: it decides from its \
                     journal and last state (to offset {applied}) and publishes what it \
                     appends when Kafka answers"
                ))
            } else if !link.up.load(Ordering::SeqCst) {
                Some(
                    "kafka unreachable: this node decides from its journal and publishes \
                     what it appends when Kafka answers"
                        .to_string(),
                )
            } else {
                None
            }
        }),
        reason,
        detail,
    };
    (body, ready)
}

/// End of the site log, asked when someone wants it (never below the fold's position):
/// the embedded log's end is read from disk, Kafka's is what the appender last saw.
async fn log_end(shared: &AppState, position: u64) -> u64 {
    let end = match &shared.kafka {
        Some(link) => link.end.load(Ordering::SeqCst),
        None => {
            let log = shared.log.clone();
            // Every whole record written, to tell whether records this node applied are
            // gone; then, when some are past its position, where readers may read to:
            // records past the log's commit mark while another writer appends (or a
            // stopped one holds the lock) are not committed, so not records to fold.
            let (written, readable) = tokio::task::spawn_blocking(move || {
                let written = log.written_end();
                let readable = match &written {
                    Ok(end) if *end > position => log.end_offset().ok(),
                    _ => None,
                };
                (written, readable)
            })
            .await
            .unwrap_or((Ok(position), None));
            let end = written.unwrap_or(position);
            if end < position {
                // Records this node applied are no longer in the log (its tail cut, or an
                // older copy restored under it): its state is not the log's any more.
                shared
                    .health
                    .fail(super::log_went_back(&*shared.log, end, position));
            }
            readable.map_or(end, |readable| readable.min(end))
        }
    };
    end.max(position)
}

type Labels = Vec<(String, String)>;

async fn metrics(State(shared): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    let mut registry = Registry::with_prefix("lhc");
    let state = Family::<Labels, Gauge>::default();
    let elected = Family::<Labels, Gauge>::default();
    let registrations = Gauge::<i64>::default();
    let brokering = Gauge::<i64>::default();
    let config_version = Gauge::<i64>::default();
    config_version.set(-1);
    let last_import = Gauge::<i64>::default();
    let mut import_known = false;
    let ineligible = Family::<Labels, Gauge>::default();
    let fold_lag_seconds = Gauge::<i64>::default();
    {
        let engine = shared.engine.read().expect("engine lock");
        if let Some(me) = shared.my_id(&engine) {
            let c = &engine.connectors()[&me];
            for s in [
                ConnectorState::WorkingNormally,
                ConnectorState::PendingHa,
                ConnectorState::InitialHa,
                ConnectorState::ExtendedHa,
                ConnectorState::PendingRecovery,
                ConnectorState::Stopped,
            ] {
                state
                    .get_or_create(&vec![("state".into(), snake(&s))])
                    .set(i64::from(s == c.state()));
            }
            if let Some(e) = c.elected() {
                elected
                    .get_or_create(&vec![("elected".into(), label(e))])
                    .set(1);
            }
            registrations.set(c.registrations().len() as i64);
            brokering.set(i64::from(c.brokering()));
            config_version.set(c.snapshot().map_or(-1, |v| v as i64));
            let stats = shared.stats.lock().expect("stats");
            if let Some((_, at)) = stats.last_import {
                last_import.set(at.millis() / 1000);
                import_known = true;
            }
            // Every reason has a series (0 or 1), so alerts and dashboards see 0, not absence.
            use lhc_engine::output::IneligibleReason as R;
            for reason in [
                R::ForcedOnSubset,
                R::LhcDisabled,
                R::NoLhcDatabase,
                R::HaServiceNotRunning,
                R::NoStorefrontTraffic,
            ] {
                ineligible
                    .get_or_create(&vec![("reason".into(), snake(&reason))])
                    .set(i64::from(c.reported_ineligible() == Some(reason)));
            }
        }
        // How far the fold's time trails the wall clock (the node appends a clock.tick
        // every few quiet seconds, so a stalled fold shows here).
        if let Some(now) = engine.now() {
            fold_lag_seconds.set(((super::wall_ms() - now.millis()) / 1000).max(0));
        }
    }
    registry.register(
        "connector_state",
        "State of this connector (1 = current)",
        state,
    );
    registry.register(
        "elected_broker",
        "Broker this connector considers elected",
        elected,
    );
    registry.register(
        "brokering",
        "1 while this connector brokers in LHC mode",
        brokering,
    );
    registry.register(
        "registrations",
        "Machines registered with this connector",
        registrations,
    );
    registry.register(
        "config_version",
        "Site config version of the imported snapshot (-1: none)",
        config_version,
    );
    // Unknown (no 504 folded by this process, e.g. just restarted from its snapshot): no
    // sample, rather than a 1970 timestamp.
    if import_known {
        registry.register(
            "config_last_import_timestamp_seconds",
            "Log time of this connector's last successful import (504) folded by this \
             process, Unix seconds",
            last_import,
        );
    }
    registry.register(
        "cannot_enter_lhc",
        "1 for the reason this connector last reported it cannot enter LHC mode (3002)",
        ineligible,
    );
    registry.register(
        "fold_lag_seconds",
        "Wall-clock seconds the last folded record's time trails now",
        fold_lag_seconds,
    );
    // A gauge named *_info with value 1 (the Prometheus convention that promtool's text
    // parser reads; OpenMetrics' `info` type it does not).
    let build = Family::<Labels, Gauge>::default();
    build
        .get_or_create(&vec![
            ("version".into(), label(&shared.config.build.0)),
            ("commit".into(), label(&shared.config.build.1)),
        ])
        .set(1);
    registry.register(
        "build_info",
        "Version and commit of this node (always 1)",
        build,
    );
    let health_failures = Counter::<u64>::default();
    health_failures.inc_by(
        shared
            .counters
            .health_check_failures
            .load(Ordering::Relaxed),
    );
    registry.register(
        "health_check_failures",
        "Failed health checks of the control plane made by this process",
        health_failures,
    );
    let probe_failures = Counter::<u64>::default();
    probe_failures.inc_by(shared.counters.peer_probe_failures.load(Ordering::Relaxed));
    registry.register(
        "peer_probe_failures",
        "Failed probes of a peer made by this process",
        probe_failures,
    );
    registry.register(
        "launch_duration_seconds",
        "Seconds from a launch request's arrival to its decision, in this process",
        shared.counters.launch_seconds.clone(),
    );
    let launch_failures = Family::<Labels, Counter>::default();
    // Every reason has a series, so a rate is 0 rather than absent.
    for why in ["log_refused", "timeout", "quarantined", "shutting_down"] {
        let _ = launch_failures.get_or_create(&vec![("reason".to_string(), why.to_string())]);
    }
    for (why, n) in shared
        .counters
        .launch_failures
        .lock()
        .expect("launch failures")
        .iter()
    {
        launch_failures
            .get_or_create(&vec![("reason".to_string(), why.to_string())])
            .inc_by(*n);
    }
    registry.register(
        "launch_failures",
        "Launch requests this process answered with no decision (5xx): the site log refused \
         the request, no decision in time, quarantined, or shutting down",
        launch_failures,
    );
    let ready = Gauge::<i64>::default();
    ready.set(i64::from(readiness(&shared).await.1.is_ok()));
    registry.register(
        "ready",
        "1 while /readyz answers ready (configured, caught up, able to decide)",
        ready,
    );
    if let Some(link) = &shared.kafka {
        let up = Gauge::<i64>::default();
        up.set(i64::from(link.up.load(Ordering::SeqCst)));
        registry.register("kafka_up", "1 while appends reach Kafka", up);
        let offline = Gauge::<i64>::default();
        offline.set(i64::from(
            link.unreachable_since_start.load(Ordering::SeqCst),
        ));
        registry.register(
            "kafka_unreachable_since_start",
            "1 while Kafka has not answered since the node started (it decides from its \
             journal and last state)",
            offline,
        );
        let outbox = Gauge::<i64>::default();
        outbox.set(link.outbox_len.load(Ordering::SeqCst) as i64);
        registry.register(
            "kafka_outbox_records",
            "Records appended while Kafka was unreachable, not yet published",
            outbox,
        );
    }
    let decisions = Family::<Labels, Counter>::default();
    let quarantined = Counter::<u64>::default();
    let import_failures = Family::<Labels, Gauge>::default();
    {
        let stats = shared.stats.lock().expect("stats");
        // Every rule has a series (0 until a 505 names it), so `delta` sees the first one.
        use lhc_engine::output::Rule;
        for rule in [
            Rule::DanglingReference,
            Rule::AssignmentNotStatic,
            Rule::DuplicateId,
            Rule::MaxSessionsZero,
            Rule::HeartbeatPeriodOutOfRange,
            Rule::StorageFault,
        ] {
            let rule = snake(&rule);
            import_failures
                .get_or_create(&vec![("rule".into(), rule.clone())])
                .set(stats.import_failures.get(&rule).copied().unwrap_or(0) as i64);
        }
        for ((outcome, via, reason), n) in &stats.decisions {
            decisions
                .get_or_create(&vec![
                    ("outcome".into(), outcome.clone()),
                    ("via".into(), via.clone()),
                    ("reason".into(), reason.clone()),
                ])
                .inc_by(*n);
        }
        quarantined.inc_by(stats.quarantined);
    }
    registry.register(
        "launch_decisions",
        "Launch decisions of this connector made since the node caught up with the log at \
         start (the history folded at start is not counted)",
        decisions,
    );
    registry.register(
        "quarantined",
        "Inputs quarantined since the node started",
        quarantined,
    );
    registry.register(
        "config_import_failures",
        "This connector's failed imports (505) in the log folded so far, by rule (history)",
        import_failures,
    );
    let applied = *shared.applied.borrow();
    let position = *shared.site_pos.borrow();
    let lag = Gauge::<i64>::default();
    lag.set((log_end(&shared, position).await - position) as i64);
    registry.register("fold_lag_records", "Records in the log not folded yet", lag);
    let offset = Gauge::<i64>::default();
    offset.set(applied as i64);
    registry.register(
        "fold_next_offset",
        "Offset of the next record to fold",
        offset,
    );
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    // Prometheus asks for OpenMetrics; other scrapers and promtool read the classic text
    // format, which names a counter's help and type after its `_total` samples.
    let openmetrics = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    if openmetrics {
        return (
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response();
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        classic_text(&text),
    )
        .into_response()
}

/// A label value escaped as both text formats require (the encoder writes values as they
/// are, and a connector's name comes from the site configuration).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// OpenMetrics text as the classic Prometheus text format (0.0.4): no `# EOF` or `# UNIT`,
/// and a counter's `# HELP` and `# TYPE` named after its `_total` samples.
fn classic_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if kind == "counter" && !name.ends_with("_total") {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, t)| t);
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Proof that the request carries the admin token. As an extractor it runs before the
/// body is read, so a request without the token gets 401 and learns nothing of the body's
/// schema.
pub(crate) struct AdminAuth;

impl axum::extract::FromRequestParts<AppState> for AdminAuth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        shared: &AppState,
    ) -> Result<Self, Self::Rejection> {
        authorize(shared, &parts.headers).map(|()| AdminAuth)
    }
}

/// Checks the bearer token in constant time (the scheme name is case-insensitive, RFC 9110).
fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &shared.config.admin_token else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "admin is disabled on this node: start it with --admin-token-file",
        ));
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, token)| token.trim());
    if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token",
        ))
    }
}

/// Appends an admin command and answers once the fold has applied it.
async fn admin(
    shared: &Shared,
    _auth: AdminAuth,
    command: AdminCommandName,
    seconds: Option<u64>,
) -> Result<Response, ApiError> {
    let connector = me(shared)?;
    let offset = append_kept(shared, move |ts| {
        Record::AdminCommand(AdminCommand {
            record_id: None,
            ts,
            connector: connector.clone(),
            command,
            seconds,
        })
    })
    .await?;
    Ok(Json(AdminDone { offset, command }).into_response())
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Switch {
    /// On or off.
    on: bool,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Interval {
    /// The interval, 60..=3600 seconds.
    #[schemars(range(min = 60, max = 3600))]
    seconds: u64,
}

async fn admin_forced_outage(
    State(shared): State<AppState>,
    auth: AdminAuth,
    Body(body): Body<Switch>,
) -> Result<Response, ApiError> {
    let command = if body.on {
        AdminCommandName::EnableForcedOutage
    } else {
        AdminCommandName::DisableForcedOutage
    };
    admin(&shared, auth, command, None).await
}

async fn admin_ha_sdk(
    State(shared): State<AppState>,
    auth: AdminAuth,
    Body(body): Body<Switch>,
) -> Result<Response, ApiError> {
    let command = if body.on {
        AdminCommandName::EnableHaSdk
    } else {
        AdminCommandName::DisableHaSdk
    };
    admin(&shared, auth, command, None).await
}

async fn admin_css_trace(
    State(shared): State<AppState>,
    auth: AdminAuth,
    Body(body): Body<Switch>,
) -> Result<Response, ApiError> {
    let command = if body.on {
        AdminCommandName::EnableCssTrace
    } else {
        AdminCommandName::DisableCssTrace
    };
    admin(&shared, auth, command, None).await
}

async fn admin_sync_interval(
    State(shared): State<AppState>,
    auth: AdminAuth,
    Body(body): Body<Interval>,
) -> Result<Response, ApiError> {
    if !(60..=3600).contains(&body.seconds) {
        return Err(ApiError::bad(format!(
            "field `seconds`: {} is outside the allowed 60..=3600",
            body.seconds
        )));
    }
    admin(
        &shared,
        auth,
        AdminCommandName::SetConfigSyncInterval,
        Some(body.seconds),
    )
    .await
}

async fn admin_sync_interval_clear(
    State(shared): State<AppState>,
    auth: AdminAuth,
) -> Result<Response, ApiError> {
    admin(
        &shared,
        auth,
        AdminCommandName::ClearConfigSyncInterval,
        None,
    )
    .await
}

/// Runs `f` on the engine when the HA SDK is enabled on this connector, else 403.
fn sdk<T: serde::Serialize>(
    shared: &Shared,
    f: impl FnOnce(&Engine, &str) -> T,
) -> Result<Response, ApiError> {
    let engine = shared.engine.read().expect("engine lock");
    let me = me_in(shared, &engine)?;
    if !engine.connectors()[&me].ha_sdk() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "the HA SDK is disabled on this connector; enable it with POST /admin/ha-sdk {\"on\": true}",
        ));
    }
    Ok(Json(f(&engine, &me)).into_response())
}

async fn sdk_machines(State(shared): State<AppState>) -> Result<Response, ApiError> {
    sdk(&shared, |engine, me| {
        serde_json::to_value(SdkMachines {
            connector: me,
            machines: engine.zone_machines(me),
        })
        .expect("serializes")
    })
}

async fn sdk_sessions(State(shared): State<AppState>) -> Result<Response, ApiError> {
    sdk(&shared, |engine, me| {
        let c = &engine.connectors()[me];
        let mut sessions = Vec::new();
        for name in c.registrations() {
            if let Some(m) = engine.machines().get(name.as_str()) {
                for s in m.sessions() {
                    sessions.push(SdkSession {
                        machine: name,
                        session: &s.id,
                        user: &s.user,
                        state: s.state,
                    });
                }
            }
        }
        serde_json::to_value(SdkSessions {
            connector: me,
            sessions,
        })
        .expect("serializes")
    })
}

async fn sdk_registrations(State(shared): State<AppState>) -> Result<Response, ApiError> {
    sdk(&shared, |engine, me| {
        let c = &engine.connectors()[me];
        SdkRegistrations {
            connector: me.to_string(),
            registrations: c.registrations().iter().cloned().collect(),
        }
    })
}

/// The API described as OpenAPI 3.1 (see `openapi`).
async fn openapi(State(shared): State<AppState>) -> Json<Value> {
    Json(super::openapi::document(&shared.config.build.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_counters_named_for_the_text_format() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let open = "# HELP lhc_x Things.\n# TYPE lhc_x counter\nlhc_x_total 3\n# HELP lhc_y Y.\n# TYPE lhc_y gauge\n# UNIT lhc_y seconds\nlhc_y 1\n# EOF\n";
        assert_eq!(
            classic_text(open),
            "# HELP lhc_x_total Things.\n# TYPE lhc_x_total counter\nlhc_x_total 3\n# HELP lhc_y Y.\n# TYPE lhc_y gauge\nlhc_y 1\n"
        );
    }
}
