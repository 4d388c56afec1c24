//! Input records: what the site log holds (SPEC §2).
//!
//! Field names are exactly the spec's (snake_case); every struct denies unknown fields so a
//! typo is an error at append time (R-LOG-3), never a silently ignored setting. These types
//! are the single source of the JSON Schemas in `schemas/`.

use compact_str::CompactString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::ConfigOp;
use crate::record_id::RecordId;
use crate::ts::Ts;

/// Declares an input record: every record begins with the same two fields, `ts` and
/// `record_id`, written (and documented in the schemas) here once; unknown fields are
/// refused (R-LOG-3).
macro_rules! record_struct {
    ($(#[$attr:meta])* pub struct $name:ident { $($body:tt)* }) => {
        $(#[$attr])*
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// Record time.
            pub ts: Ts,
            /// Unique id given by the appending node; a later record with the same id is a
            /// duplicate and is not applied.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub record_id: Option<RecordId>,
            $($body)*
        }
    };
}

/// One log record. The `type` field selects the variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type")]
pub enum Record {
    /// Overrides engine parameters (§9) from this record on.
    // Boxed, as `LaunchRequest`: the two largest variants, and every record of a replay
    // is moved from the decoding thread to the applying one; a record of 216 bytes was
    // 128 without them (issue 20).
    #[serde(rename = "engine.params")]
    EngineParams(Box<EngineParams>),
    /// A change made in the cloud / site database.
    #[serde(rename = "config.change")]
    ConfigChange(ConfigChange),
    /// Result of a connector's check of its control plane.
    #[serde(rename = "health.check")]
    HealthCheck(HealthCheck),
    /// A connector reached (or not) a peer's election endpoint.
    #[serde(rename = "peer.probe")]
    PeerProbe(PeerProbe),
    /// A StoreFront server contacted a connector.
    #[serde(rename = "storefront.heartbeat")]
    StorefrontHeartbeat(StorefrontHeartbeat),
    /// A connector-local service started or stopped.
    #[serde(rename = "service.status")]
    ServiceStatus(ServiceStatus),
    /// A connector machine started or stopped.
    #[serde(rename = "connector.lifecycle")]
    ConnectorLifecycle(ConnectorLifecycle),
    /// A connector's local store failed; its next import fails.
    #[serde(rename = "storage.fault")]
    StorageFault(StorageFault),
    /// A VDA pinged the brokers of its zone, with its sessions.
    #[serde(rename = "vda.heartbeat")]
    VdaHeartbeat(VdaHeartbeat),
    /// A session event reported by a VDA.
    #[serde(rename = "session.event")]
    SessionEvent(SessionEvent),
    /// StoreFront asked a connector to launch a resource.
    #[serde(rename = "launch.request")]
    LaunchRequest(Box<LaunchRequest>),
    /// A cmdlet equivalent run on one connector (§7).
    #[serde(rename = "admin.command")]
    AdminCommand(AdminCommand),
    /// Advances time only, so timers fire.
    #[serde(rename = "clock.tick")]
    ClockTick(ClockTick),
}

/// Every record `type` string, in the order of the spec's table.
pub const RECORD_TYPES: [&str; 13] = [
    "engine.params",
    "config.change",
    "health.check",
    "peer.probe",
    "storefront.heartbeat",
    "service.status",
    "connector.lifecycle",
    "storage.fault",
    "vda.heartbeat",
    "session.event",
    "launch.request",
    "admin.command",
    "clock.tick",
];

/// Evaluates `$body` with `$r` bound to the record's own struct, whichever variant it
/// is: what every record has (`ts`, `record_id`) is read through this one match.
macro_rules! each_record {
    ($record:expr, $r:ident => $body:expr) => {
        each_record!(@match $record, $r, $body; EngineParams ConfigChange HealthCheck PeerProbe
            StorefrontHeartbeat ServiceStatus ConnectorLifecycle StorageFault VdaHeartbeat
            SessionEvent LaunchRequest AdminCommand ClockTick)
    };
    (@match $record:expr, $r:ident, $body:expr; $($variant:ident)*) => {
        match $record {
            $(Record::$variant($r) => $body,)*
        }
    };
}

impl Record {
    /// The record's time.
    pub fn ts(&self) -> Ts {
        each_record!(self, r => r.ts)
    }

    /// The record's `type` string.
    pub fn type_name(&self) -> &'static str {
        let index = match self {
            Record::EngineParams(_) => 0,
            Record::ConfigChange(_) => 1,
            Record::HealthCheck(_) => 2,
            Record::PeerProbe(_) => 3,
            Record::StorefrontHeartbeat(_) => 4,
            Record::ServiceStatus(_) => 5,
            Record::ConnectorLifecycle(_) => 6,
            Record::StorageFault(_) => 7,
            Record::VdaHeartbeat(_) => 8,
            Record::SessionEvent(_) => 9,
            Record::LaunchRequest(_) => 10,
            Record::AdminCommand(_) => 11,
            Record::ClockTick(_) => 12,
        };
        RECORD_TYPES[index]
    }

    /// The record's unique id, when its producer gave one.
    pub fn record_id(&self) -> Option<&RecordId> {
        self.id_slot().as_ref()
    }

    /// Gives the record an id (the appending node does, just before it appends).
    pub fn set_record_id(&mut self, id: RecordId) {
        *self.id_slot_mut() = Some(id);
    }

    fn id_slot(&self) -> &Option<RecordId> {
        each_record!(self, r => &r.record_id)
    }

    fn id_slot_mut(&mut self) -> &mut Option<RecordId> {
        each_record!(self, r => &mut r.record_id)
    }

    /// The connector the record names in its `connector` field, if it has one.
    pub fn connector(&self) -> Option<&str> {
        match self {
            Record::HealthCheck(r) => Some(&r.connector),
            Record::PeerProbe(r) => Some(&r.connector),
            Record::StorefrontHeartbeat(r) => Some(&r.connector),
            Record::ServiceStatus(r) => Some(&r.connector),
            Record::ConnectorLifecycle(r) => Some(&r.connector),
            Record::StorageFault(r) => Some(&r.connector),
            Record::LaunchRequest(r) => Some(&r.connector),
            Record::AdminCommand(r) => Some(&r.connector),
            Record::EngineParams(_)
            | Record::ConfigChange(_)
            | Record::VdaHeartbeat(_)
            | Record::SessionEvent(_)
            | Record::ClockTick(_) => None,
        }
    }
}

record_struct! {
    /// Engine parameter overrides (SPEC §9); each absent field keeps its current value.
    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct EngineParams {
        /// Seconds after a first failed check before the outage is confirmed (60).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub second_check_s: Option<u64>,
        /// The same delay for the on-premises profile (90).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub onprem_outage_s: Option<u64>,
        /// Age under which a peer's ok check keeps the zone out of LHC mode (120).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub peer_health_window_s: Option<u64>,
        /// Age under which a StoreFront heartbeat makes a connector eligible (259200: 3 days).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub storefront_window_s: Option<u64>,
        /// Length of initial_ha (300).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub initial_ha_s: Option<u64>,
        /// Length of pending_recovery without a failed check (600).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pending_recovery_s: Option<u64>,
        /// Age under which an ok peer probe makes the peer a candidate (120).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub peer_timeout_s: Option<u64>,
        /// Period of the 3507/3509 reports (120).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub report_interval_s: Option<u64>,
        /// Default period of config sync checks (300).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub sync_interval_s: Option<u64>,
        /// Model time an import takes (0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub import_duration_s: Option<u64>,
    }
}

record_struct! {
    /// A batch of configuration operations that together make one new site version.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
    pub struct ConfigChange {
        /// Site configuration version after this change; strictly increasing.
        pub version: u64,
        /// Upserts and deletes, applied in order.
        pub ops: Vec<ConfigOp>,
    }
}

record_struct! {
    /// Result of a connector's check of its control plane.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct HealthCheck {
        /// FQDN of the connector that ran the check.
        pub connector: String,
        /// Whether the control plane answered.
        pub ok: bool,
        /// Free text from the check (HTTP status, error).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub detail: Option<String>,
    }
}

record_struct! {
    /// A connector's attempt to reach a peer's election endpoint.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct PeerProbe {
        /// FQDN of the probing connector.
        pub connector: String,
        /// FQDN of the probed peer.
        pub peer: String,
        /// Whether the peer answered.
        pub ok: bool,
    }
}

record_struct! {
    /// A StoreFront server contacted a connector.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct StorefrontHeartbeat {
        /// FQDN of the contacted connector.
        pub connector: String,
        /// Name of the StoreFront server.
        pub storefront: String,
    }
}

/// Connector-local services whose state matters to LHC.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Service {
    /// The High Availability Service (the LHC broker).
    HighAvailability,
    /// The Remote Broker Provider (talks to the cloud broker).
    RemoteBrokerProvider,
    /// The Config Synchronizer Service.
    ConfigSync,
}

record_struct! {
    /// A connector-local service started or stopped.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct ServiceStatus {
        /// FQDN of the connector.
        pub connector: String,
        /// Which service.
        #[serde(deserialize_with = "crate::strict::form")]
        pub service: Service,
        /// Whether it runs now.
        pub running: bool,
    }
}

/// Start or stop of a connector machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleEvent {
    /// The machine (re)started.
    Start,
    /// The machine went down.
    Stop,
}

record_struct! {
    /// A connector machine started or stopped.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct ConnectorLifecycle {
        /// FQDN of the connector.
        pub connector: String,
        /// What happened.
        #[serde(deserialize_with = "crate::strict::form")]
        pub event: LifecycleEvent,
    }
}

record_struct! {
    /// The connector's local store failed.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct StorageFault {
        /// FQDN of the connector.
        pub connector: String,
        /// What failed.
        pub detail: String,
    }
}

/// State of a session as a VDA reports it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// A client is connected.
    Active,
    /// The session runs without a client; it can be reconnected.
    Disconnected,
}

/// One session in a VDA heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionReport {
    /// Session id, unique on its machine.
    // Compact strings: ids and user names up to 24 bytes live inline, so comparing a
    // heartbeat's sessions with the last ones reads one buffer instead of chasing two
    // pointers per session.
    pub id: CompactString,
    /// User who owns the session.
    pub user: CompactString,
    /// Active or disconnected.
    #[serde(deserialize_with = "crate::strict::form")]
    pub state: SessionState,
}

record_struct! {
    /// A VDA pinged the brokers of its zone.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct VdaHeartbeat {
        /// FQDN of the VDA.
        // Compact: inline up to 24 bytes, so the most frequent record allocates less.
        pub machine: CompactString,
        /// Every session on the machine now.
        #[serde(deserialize_with = "crate::strict::objects")]
        #[schemars(with = "Vec<SessionReport>")]
        pub sessions: Vec<SessionReport>,
    }
}

/// Kinds of session events a VDA reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionEventKind {
    /// A new session started.
    Logon,
    /// The session ended.
    Logoff,
    /// The client left; the session keeps running.
    Disconnect,
    /// A client came back to a disconnected session.
    Reconnect,
}

record_struct! {
    /// A session event reported by a VDA.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct SessionEvent {
        /// FQDN of the VDA.
        pub machine: String,
        /// Session id.
        pub session: String,
        /// Session owner.
        pub user: String,
        /// What happened.
        #[serde(deserialize_with = "crate::strict::form")]
        pub event: SessionEventKind,
    }
}

/// The client device a launch comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Client {
    /// Client machine name.
    pub name: String,
    /// Client IP address as StoreFront saw it.
    pub ip: String,
}

record_struct! {
    /// StoreFront asked a connector to launch a resource.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct LaunchRequest {
        /// Request id, echoed in the decision.
        pub request: String,
        /// FQDN of the connector asked.
        pub connector: String,
        /// User who launches.
        pub user: String,
        /// Resource id.
        pub resource: String,
        /// Client device.
        #[serde(deserialize_with = "crate::strict::form")]
        pub client: Client,
        /// The request id of this launch's first attempt, when StoreFront tries the next
        /// Delivery Controller after a refusal (`not_elected`, `connector_stopped`); absent on
        /// a first attempt. Decisions ignore it: it links the attempts of one launch, so a
        /// report can count what the user saw (the last attempt) apart from raw rejections.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub retry_of: Option<String>,
    }
}

/// Admin commands (SPEC §7, R-CSS-5), the cmdlet equivalents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AdminCommandName {
    /// Force LHC mode whatever the health checks say.
    EnableForcedOutage,
    /// End forced LHC mode (to pending_recovery).
    DisableForcedOutage,
    /// Override the config sync interval; needs `seconds` in 60..=3600.
    SetConfigSyncInterval,
    /// Back to the default sync interval.
    ClearConfigSyncInterval,
    /// Enable the read-only query API during LHC mode.
    EnableHaSdk,
    /// Disable it.
    DisableHaSdk,
    /// List every validation failure in 505, not only the first.
    EnableCssTrace,
    /// Back to listing the first failure only.
    DisableCssTrace,
}

record_struct! {
    /// A cmdlet equivalent run on one connector.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct AdminCommand {
        /// FQDN of the connector.
        pub connector: String,
        /// Which command.
        #[serde(deserialize_with = "crate::strict::form")]
        pub command: AdminCommandName,
        /// Argument of `set_config_sync_interval`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub seconds: Option<u64>,
    }
}

record_struct! {
    /// Advances time only.
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct ClockTick {}
}
