//! `/openapi.json`: the node's API described as OpenAPI 3.1, generated from the types the
//! handlers decode and answer (their `JsonSchema` derives, via schemars) and the route
//! table below, which `http::router` serves route for route (a test asks a live node every
//! route described, and schemathesis checks the answers against the description).
//!
//! Invariant: every request body, query and JSON answer of the API is one of the types
//! named here; CI runs schemathesis against a live node to prove the answers match.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::{json, Map, Value};

use lhc_engine::engine::MachineSummary;
use lhc_engine::output::{ConnectorState, Output};
use lhc_engine::record::{AdminCommandName, SessionState};
use lhc_engine::view::{ElectionView, ResourceSource};

use super::http::{
    Interval, LaunchBody, ResourcesQuery, SessionBody, StorefrontBody, Switch, VdaHeartbeatBody,
};

/// An error answer.
#[derive(Serialize, JsonSchema)]
pub struct ErrorBody {
    /// What is wrong, naming the field at fault, and what to do.
    pub error: String,
}

/// An observation appended to the site log.
#[derive(Serialize, JsonSchema)]
pub struct Accepted {
    /// Its offset in the site log.
    pub offset: u64,
}

/// An admin command applied.
#[derive(Serialize, JsonSchema)]
pub struct AdminDone {
    /// Its offset in the site log.
    pub offset: u64,
    /// The command.
    pub command: AdminCommandName,
}

/// The resources a user is offered.
#[derive(Serialize, JsonSchema)]
pub struct Resources {
    /// The user asked about.
    pub user: String,
    /// This connector.
    pub connector: String,
    /// Where the answer comes from: the cloud, or this connector's snapshot in LHC mode.
    pub source: ResourceSource,
    /// The resources, with the zones that can run them.
    pub resources: Vec<lhc_engine::broker::Enumerated>,
}

/// This connector's view of the election (what peers probe).
#[derive(Serialize, JsonSchema)]
pub struct Election {
    /// This connector.
    pub connector: String,
    /// Its view.
    #[serde(flatten)]
    pub view: ElectionView,
}

/// What a load balancer's CITRIX-XD-DDC monitor sees.
#[derive(Serialize, JsonSchema)]
pub struct AdcAnswer {
    /// "UP" while this connector can broker, else "DOWN".
    pub status: &'static str,
    /// Why DOWN: `not_elected`, `connector_stopped`, `not_configured`, `node_failed` or
    /// `log_unwritable`.
    pub reason: Option<String>,
    /// The site (farm) name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// This connector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    /// Its state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<ConnectorState>,
    /// The broker it sees elected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elected: Option<Option<String>>,
    /// The failure, when the node cannot decide.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Liveness.
#[derive(Serialize, JsonSchema)]
pub struct Liveness {
    /// "alive", or "dead" when the fold stopped.
    pub status: &'static str,
    /// This connector (alive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    /// `node_failed` (dead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// Why the fold stopped (dead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The latest quarantined input.
#[derive(Serialize, JsonSchema)]
pub struct LastQuarantine {
    /// Its offset.
    pub offset: u64,
    /// Why.
    pub error: String,
}

/// Readiness, with the figures an operator looks at.
#[derive(Serialize, JsonSchema)]
pub struct Readiness {
    /// "ok", "not_ready", "degraded" (appends fail) or "failed" (the fold stopped).
    pub status: &'static str,
    /// This connector.
    pub connector: String,
    /// Next offset the fold applies.
    pub applied_offset: u64,
    /// The site log.
    pub log: String,
    /// Inputs quarantined so far.
    pub quarantined: u64,
    /// The latest quarantine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_quarantine: Option<LastQuarantine>,
    /// End of the site log.
    pub log_end: u64,
    /// Records not folded yet.
    pub lag: u64,
    /// Kafka mode: the next topic offset to read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka_next: Option<u64>,
    /// Kafka mode: the broker is reachable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka_up: Option<bool>,
    /// Kafka mode: records written while Kafka was unreachable, not yet published.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbox: Option<usize>,
    /// Kafka mode, while Kafka is unreachable: where the node's decisions come from, in
    /// words (the node still decides: from its journal and last state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka_detail: Option<String>,
    /// Why not ready: `not_configured`, `catching_up`, `node_failed` or `log_unwritable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// The cause, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `Get-BrokerMachine`: the machines of this connector's zone.
#[derive(Serialize, JsonSchema)]
pub struct SdkMachines<'a> {
    /// This connector.
    pub connector: &'a str,
    /// The machines.
    pub machines: Vec<MachineSummary<'a>>,
}

/// One session on a machine registered with this connector.
#[derive(Serialize, JsonSchema)]
pub struct SdkSession<'a> {
    /// The machine.
    pub machine: &'a str,
    /// Session id.
    pub session: &'a str,
    /// Its user.
    pub user: &'a str,
    /// Its state.
    pub state: SessionState,
}

/// `Get-BrokerSession`: sessions on the machines registered with this connector.
#[derive(Serialize, JsonSchema)]
pub struct SdkSessions<'a> {
    /// This connector.
    pub connector: &'a str,
    /// The sessions.
    pub sessions: Vec<SdkSession<'a>>,
}

/// The machines registered with this connector.
#[derive(Serialize, JsonSchema)]
pub struct SdkRegistrations {
    /// This connector.
    pub connector: String,
    /// Their ids.
    pub registrations: Vec<String>,
}

/// One answer of a route: status, what it means, and its body.
struct Answer {
    status: u16,
    description: &'static str,
    body: Body,
}

/// A body's media type and schema.
enum Body {
    Json(fn(&mut SchemaGenerator) -> Schema),
    /// JSON of no fixed shape (the dashboard's data).
    AnyJson,
    Text(&'static str),
    None,
}

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

fn ok<T: JsonSchema>(description: &'static str) -> Answer {
    Answer {
        status: 200,
        description,
        body: Body::Json(schema::<T>),
    }
}

fn err(status: u16, description: &'static str) -> Answer {
    Answer {
        status,
        description,
        body: Body::Json(schema::<ErrorBody>),
    }
}

/// One route: method, path, summary, its input and its answers.
struct Route {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    tag: &'static str,
    request: Body,
    /// The query's type, inlined (its properties become parameters).
    query: Option<fn() -> Schema>,
    admin: bool,
    answers: Vec<Answer>,
}

fn accepted() -> Answer {
    Answer {
        status: 202,
        description: "appended to the site log",
        body: Body::Json(schema::<Accepted>),
    }
}

/// Answers every JSON-bodied route may give.
fn body_errors() -> Vec<Answer> {
    vec![
        err(
            400,
            "the body is not the JSON described: the error names the field",
        ),
        err(408, "the body did not arrive whole within 10 s"),
        err(413, "the body is over --body-limit-kb"),
        err(415, "the body is not application/json"),
        err(
            409,
            "no configuration names this connector yet, or the engine refused the record",
        ),
        err(
            503,
            "the site log refused the record, or the node cannot decide",
        ),
    ]
}

fn post(path: &'static str, summary: &'static str, tag: &'static str, request: Body) -> Route {
    let mut answers = vec![accepted()];
    answers.extend(body_errors());
    Route {
        method: "post",
        path,
        summary,
        tag,
        request,
        query: None,
        admin: false,
        answers,
    }
}

fn admin_route(
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    request: Body,
) -> Route {
    let mut answers = vec![ok::<AdminDone>("applied")];
    answers.extend(body_errors());
    answers.push(err(
        401,
        "no or a wrong bearer token (or no --admin-token-file)",
    ));
    Route {
        method,
        path,
        summary,
        tag: "admin",
        request,
        query: None,
        admin: true,
        answers,
    }
}

fn get(
    path: &'static str,
    summary: &'static str,
    tag: &'static str,
    answers: Vec<Answer>,
) -> Route {
    Route {
        method: "get",
        path,
        summary,
        tag,
        request: Body::None,
        query: None,
        admin: false,
        answers,
    }
}

/// Every route the node serves.
fn routes() -> Vec<Route> {
    let not_configured = || err(409, "no configuration names this connector yet");
    let catching_up = || err(503, "the node is catching up with the site log at start");
    let sdk = |path, summary, answer: Answer| {
        get(
            path,
            summary,
            "sdk",
            vec![
                answer,
                not_configured(),
                catching_up(),
                err(403, "the HA SDK is disabled on this connector"),
            ],
        )
    };
    let mut resources = get(
        "/storefront/resources",
        "Resources a user is offered, and where from",
        "storefront",
        vec![
            ok::<Resources>("the resources"),
            err(400, "no or an empty user"),
            not_configured(),
            catching_up(),
        ],
    );
    resources.query = Some(|| schemars::schema_for!(ResourcesQuery));
    let mut launch = post(
        "/storefront/launch",
        "Launch a resource: the engine's decision",
        "storefront",
        Body::Json(schema::<LaunchBody>),
    );
    launch.answers[0] = ok::<Output>("the launch.decision (brokered or rejected, with its reason)");
    vec![
        post(
            "/storefront/heartbeat",
            "A StoreFront server's heartbeat",
            "storefront",
            Body::Json(schema::<StorefrontBody>),
        ),
        resources,
        launch,
        post(
            "/vda/heartbeat",
            "A VDA's heartbeat, with its sessions",
            "vda",
            Body::Json(schema::<VdaHeartbeatBody>),
        ),
        post(
            "/vda/session",
            "A VDA's session event",
            "vda",
            Body::Json(schema::<SessionBody>),
        ),
        get(
            "/adc/probe",
            "The load balancer's monitor: UP while this connector can broker",
            "operations",
            vec![
                ok::<AdcAnswer>("UP"),
                Answer {
                    status: 503,
                    description: "DOWN, with the reason",
                    body: Body::Json(schema::<AdcAnswer>),
                },
            ],
        ),
        get(
            "/election",
            "This connector's view of the election (peers probe it)",
            "peers",
            vec![ok::<Election>("its view"), not_configured(), catching_up()],
        ),
        get(
            "/livez",
            "Liveness: the process serves and its fold runs",
            "operations",
            vec![
                ok::<Liveness>("alive"),
                Answer {
                    status: 503,
                    description: "dead: restart the node",
                    body: Body::Json(schema::<Liveness>),
                },
            ],
        ),
        get(
            "/readyz",
            "Readiness: configured, caught up, able to decide",
            "operations",
            vec![
                ok::<Readiness>("ready"),
                Answer {
                    status: 503,
                    description: "not ready: the reason and detail say why",
                    body: Body::Json(schema::<Readiness>),
                },
            ],
        ),
        get(
            "/healthz",
            "The same as /readyz",
            "operations",
            vec![
                ok::<Readiness>("ready"),
                Answer {
                    status: 503,
                    description: "not ready",
                    body: Body::Json(schema::<Readiness>),
                },
            ],
        ),
        get(
            "/metrics",
            "Prometheus metrics (text format 0.0.4, or OpenMetrics on Accept)",
            "operations",
            vec![Answer {
                status: 200,
                description: "the metrics",
                body: Body::Text("text/plain"),
            }],
        ),
        get(
            "/openapi.json",
            "This description",
            "operations",
            vec![Answer {
                status: 200,
                description: "OpenAPI 3.1",
                body: Body::AnyJson,
            }],
        ),
        get(
            "/",
            "The live dashboard (one self-contained page)",
            "dashboard",
            vec![Answer {
                status: 200,
                description: "the page",
                body: Body::Text("text/html"),
            }],
        ),
        get(
            "/dashboard/state",
            "The dashboard's data",
            "dashboard",
            vec![ok::<super::dashboard::DashboardState>(
                "lanes, connectors, registrations, launches, configuration",
            )],
        ),
        get(
            "/dashboard/events",
            "The dashboard's data as server-sent events (event: state), never ending",
            "dashboard",
            vec![
                Answer {
                    status: 200,
                    description: "the event stream",
                    body: Body::Text("text/event-stream"),
                },
                err(503, "too many dashboards open on this node"),
            ],
        ),
        admin_route(
            "post",
            "/admin/forced-outage",
            "Set or clear forced outage",
            Body::Json(schema::<Switch>),
        ),
        admin_route(
            "post",
            "/admin/sync-interval",
            "Override the config sync interval (60..=3600 s)",
            Body::Json(schema::<Interval>),
        ),
        admin_route(
            "delete",
            "/admin/sync-interval",
            "Clear the config sync interval override",
            Body::None,
        ),
        admin_route(
            "post",
            "/admin/ha-sdk",
            "Enable or disable the HA SDK",
            Body::Json(schema::<Switch>),
        ),
        admin_route(
            "post",
            "/admin/css-trace",
            "Enable or disable CSS trace mode",
            Body::Json(schema::<Switch>),
        ),
        sdk(
            "/sdk/machines",
            "Get-BrokerMachine: the machines of this zone",
            ok::<SdkMachines>("the machines"),
        ),
        sdk(
            "/sdk/sessions",
            "Get-BrokerSession: sessions on machines registered here",
            ok::<SdkSessions>("the sessions"),
        ),
        sdk(
            "/sdk/registrations",
            "The machines registered with this connector",
            ok::<SdkRegistrations>("the registrations"),
        ),
    ]
}

fn content(body: &Body, g: &mut SchemaGenerator) -> Option<Value> {
    match body {
        Body::Json(f) => Some(json!({ "application/json": { "schema": f(g) } })),
        Body::AnyJson => Some(json!({ "application/json": { "schema": { "type": "object" } } })),
        Body::Text(media) => Some(json!({ *media: { "schema": { "type": "string" } } })),
        Body::None => None,
    }
}

/// The query parameters of a query type: one per property.
fn parameters(schema: Schema) -> Vec<Value> {
    let value = schema.to_value();
    let required: Vec<&str> = value["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    value["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(name, schema)| {
                    json!({
                        "name": name,
                        "in": "query",
                        "required": required.contains(&name.as_str()),
                        "schema": schema,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The OpenAPI document.
pub fn document(version: &str) -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut g = SchemaGenerator::new(settings);
    let mut paths: Map<String, Value> = Map::new();
    for route in routes() {
        let mut responses = Map::new();
        for answer in &route.answers {
            let mut r = json!({ "description": answer.description });
            if let Some(c) = content(&answer.body, &mut g) {
                r["content"] = c;
            }
            responses.insert(answer.status.to_string(), r);
        }
        let mut operation = json!({
            "summary": route.summary,
            "tags": [route.tag],
            "responses": responses,
        });
        if let Some(c) = content(&route.request, &mut g) {
            operation["requestBody"] = json!({ "required": true, "content": c });
        }
        if let Some(query) = route.query {
            operation["parameters"] = json!(parameters(query()));
        }
        if route.admin {
            operation["security"] = json!([{ "bearer": [] }]);
        }
        let item = paths
            .entry(route.path.to_string())
            .or_insert_with(|| json!({}));
        item[route.method] = operation;
    }
    let schemas: Map<String, Value> = g.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "lhc connector node",
            "version": version,
            "description": "The connector node's API: StoreFront, VDAs, the load balancer's \
                monitor, peers, operations, admin (bearer token) and the read-only HA SDK. \
                Every request that changes anything is appended to the site log as a record; \
                a bad request is answered 4xx with {\"error\": ...} and appends nothing.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
        },
    })
}
