//! Output records: what a fold emits (SPEC §3).
//!
//! Every output is explainable: decisions carry a reason code, 505 names object, rule and
//! introducing offset, quarantine names the offset and the field at fault.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::ObjectKind;
use crate::ts::Ts;

/// One output record. The `type` field selects the variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type")]
pub enum Output {
    /// A Windows-event equivalent.
    #[serde(rename = "event")]
    Event(Event),
    /// The answer to one `launch.request`.
    #[serde(rename = "launch.decision")]
    LaunchDecision(LaunchDecision),
    /// A machine's registration with a connector changed or was refused.
    #[serde(rename = "registration")]
    Registration(Registration),
    /// A connector put a machine in maintenance or lifted it.
    #[serde(rename = "machine.maintenance")]
    MachineMaintenance(MachineMaintenance),
    /// An input that could not be applied.
    #[serde(rename = "quarantine")]
    Quarantine(Quarantine),
}

impl Output {
    /// The connector the output is about; `None` for a quarantine.
    pub fn connector(&self) -> Option<&str> {
        match self {
            Output::Event(Event { connector, .. })
            | Output::LaunchDecision(LaunchDecision { connector, .. })
            | Output::Registration(Registration { connector, .. })
            | Output::MachineMaintenance(MachineMaintenance { connector, .. }) => Some(connector),
            Output::Quarantine(_) => None,
        }
    }
}

/// Services that emit events; event ids are unique only per source.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum EventSource {
    /// Config Synchronizer Service.
    ConfigSyncService,
    /// High Availability Service.
    HighAvailabilityService,
    /// Remote Broker Provider.
    RemoteBrokerProvider,
}

/// Event severity.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Normal operation.
    Information,
    /// Degraded but handled.
    Warning,
    /// Failed.
    Error,
}

/// A Windows-event equivalent. (Read back by `event_id`: see `crate::event`.)
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// When it happened (a record's `ts`, or a timer's deadline).
    pub ts: Ts,
    /// Emitting connector.
    pub connector: String,
    /// Emitting service.
    pub source: EventSource,
    /// Event id, unique per source.
    pub event_id: u32,
    /// Severity.
    pub level: Level,
    /// Human-readable text.
    pub message: String,
    /// Structured data; its shape depends on (source, event_id).
    pub data: EventData,
}

/// Structured event data, untagged on the wire: an event's `event_id` says which shape it
/// is (two shapes can read the same JSON, so `Event` reads its data by id).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum EventData {
    /// 505: import failed.
    ImportFailed(ImportFailed),
    /// 504: import succeeded.
    Imported(Imported),
    /// 503 and 507: a config version.
    Version(VersionData),
    /// 3002: cannot enter LHC mode.
    Ineligible(IneligibleData),
    /// 3003: state transition.
    Transition(TransitionData),
    /// 3504: the elected broker changed in this connector's view.
    ElectionView(ElectionViewData),
    /// 3507: periodic report on the elected broker.
    ElectedReport(ElectedReportData),
    /// 3508: LHC ended on the elected broker.
    ElectedSummary(ElectedSummaryData),
    /// 3510: LHC ended on a non-elected broker.
    NonElectedSummary(NonElectedSummaryData),
    /// 3509: report on a non-elected broker.
    NonElected(NonElectedData),
    /// 3503: normal operations resumed.
    OutageEnded(OutageEndedData),
    /// 3502: brokering started.
    Brokering(BrokeringData),
    /// 510, 517, 518, 3001: no data.
    Empty(EmptyData),
}

/// Data of 503 and 507.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionData {
    /// Site config version concerned.
    pub version: u64,
}

/// Data of 504.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Imported {
    /// Version now in use.
    pub version: u64,
    /// Number of objects in the snapshot.
    pub objects: u64,
}

/// Validation rules of an import (R-CSS-4).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A reference to an object that does not exist.
    DanglingReference,
    /// An assignment to a machine outside static and Remote PC groups.
    AssignmentNotStatic,
    /// Two ids of one kind differ only in case.
    DuplicateId,
    /// A machine with `max_sessions` 0.
    MaxSessionsZero,
    /// `heartbeat_period_ms` outside 60000..=3600000.
    HeartbeatPeriodOutOfRange,
    /// The connector's local store failed.
    StorageFault,
}

/// Where a failing object came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IntroducedBy {
    /// Log offset of the record that introduced it.
    pub offset: u64,
    /// Config version of that record (null for a storage fault).
    pub version: Option<u64>,
}

/// One validation failure of an import.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportFailure {
    /// Kind of the offending object.
    pub kind: ObjectKind,
    /// Id of the offending object.
    pub id: String,
    /// The rule it breaks.
    pub rule: Rule,
    /// What is wrong, in words an admin can act on: the missing referent, the id it
    /// collides with, the value out of range.
    pub detail: String,
    /// The change that introduced it.
    pub introduced_by: IntroducedBy,
}

/// Data of 505.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportFailed {
    /// Version that failed to import.
    pub version: u64,
    /// The failures: the first one, or all in CSS trace mode.
    pub failures: Vec<ImportFailure>,
    /// Version still in use (null: none yet, or the one held is unusable after a restart).
    pub fallback_version: Option<u64>,
}

/// Reasons a connector cannot enter LHC mode (R-STATE-4), in reporting priority order.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum IneligibleReason {
    /// Forced outage is set on part of the zone only: an unforced peer with a recent ok
    /// check keeps the zone out (R-STATE-8).
    ForcedOnSubset,
    /// The site has `lhc_enabled` false.
    LhcDisabled,
    /// No usable snapshot.
    NoLhcDatabase,
    /// The HA service is stopped.
    HaServiceNotRunning,
    /// No StoreFront heartbeat within the window.
    NoStorefrontTraffic,
}

/// Data of 3002.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IneligibleData {
    /// Why.
    pub reason: IneligibleReason,
}

/// Connector states (R-STATE).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ConnectorState {
    /// The cloud broker brokers.
    WorkingNormally,
    /// A check failed; the outage is not confirmed yet.
    PendingHa,
    /// LHC mode, first phase.
    InitialHa,
    /// LHC mode, the outage goes on.
    ExtendedHa,
    /// LHC mode, the control plane answers again.
    PendingRecovery,
    /// The machine is down.
    Stopped,
}

impl ConnectorState {
    /// LHC mode: initial_ha, extended_ha or pending_recovery.
    pub fn in_lhc(self) -> bool {
        matches!(
            self,
            ConnectorState::InitialHa
                | ConnectorState::ExtendedHa
                | ConnectorState::PendingRecovery
        )
    }
}

/// Causes of a state transition (3003).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransitionCause {
    /// A check failed.
    HealthCheckFailed,
    /// A check succeeded.
    HealthCheckOk,
    /// The second failed check confirmed the outage.
    OutageConfirmed,
    /// initial_ha ran its course.
    InitialHaElapsed,
    /// pending_recovery ran its course.
    RecoveryPeriodElapsed,
    /// An admin forced the outage.
    ForcedOutageEnabled,
    /// An admin ended the forced outage.
    ForcedOutageDisabled,
    /// The machine started.
    ConnectorStarted,
    /// The machine stopped.
    ConnectorStopped,
}

/// Data of 3003.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransitionData {
    /// State left.
    pub from: ConnectorState,
    /// State entered.
    pub to: ConnectorState,
    /// Seconds spent in `from`.
    pub previous_state_duration_s: u64,
    /// What caused it.
    pub cause: TransitionCause,
}

/// Data of 3502.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrokeringData {
    /// The broker (this connector).
    pub elected: String,
}

/// Data of 3503.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutageEndedData {
    /// Seconds since the episode began.
    pub outage_duration_s: u64,
}

/// Data of 3504.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ElectionViewData {
    /// Elected broker in this connector's view (null: no candidate).
    pub elected: Option<String>,
    /// Every candidate, sorted.
    pub candidates: Vec<String>,
}

/// Data of 3507.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ElectedReportData {
    /// Seconds since the episode began.
    pub outage_duration_s: u64,
    /// Machines registered now.
    pub registered_machines: u64,
    /// Sessions known now.
    pub sessions: u64,
}

/// Data of 3508.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ElectedSummaryData {
    /// Seconds the episode lasted.
    pub outage_duration_s: u64,
    /// Distinct machines that registered during the episode.
    pub registered_machines: u64,
    /// Brokered `via: "lhc"` decisions of the episode.
    pub successful_launches: u64,
    /// Rejected `via: "lhc"` decisions of the episode.
    pub failed_launches: u64,
    /// What ended the episode.
    pub ended_by: EndedBy,
}

/// What ended an outage episode (3508, 3510): a recovery, or the connector's stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    /// pending_recovery ran its course: normal operations resumed.
    NormalOperations,
    /// The connector stopped during LHC mode.
    ConnectorStopped,
}

/// Data of 3510.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NonElectedSummaryData {
    /// Seconds the episode lasted.
    pub outage_duration_s: u64,
    /// The broker elected in this connector's view (null: none).
    pub elected: Option<String>,
    /// `via: "lhc"` launches it brokered during the episode (while it was elected).
    pub successful_launches: u64,
    /// `via: "lhc"` launches it rejected during the episode, `not_elected` included.
    pub failed_launches: u64,
    /// What ended the episode.
    pub ended_by: EndedBy,
}

/// Data of 3509.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NonElectedData {
    /// Seconds since the episode began.
    pub outage_duration_s: u64,
    /// The broker elected in this connector's view (null: none).
    pub elected: Option<String>,
}

/// Data of events that carry none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyData {}

/// Reason codes of decisions and refusals (SPEC §6.3).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The control plane is unreachable and LHC mode has not started (detection gap).
    CloudUnreachable,
    /// No usable snapshot.
    NoLhcDatabase,
    /// LHC is disabled for the site.
    LhcDisabled,
    /// The HA service is stopped.
    HaServiceNotRunning,
    /// No StoreFront traffic reached the connector.
    NoStorefrontTraffic,
    /// This connector is not the elected broker.
    NotElected,
    /// The connector is down.
    ConnectorStopped,
    /// The resource does not exist.
    UnknownResource,
    /// The user may not launch the resource.
    NotEntitled,
    /// The resource lives only in other zones.
    CrossZone,
    /// No machine of the resource is registered.
    NoRegisteredMachine,
    /// Every candidate machine is full.
    MachineCapacity,
    /// A static group needs an assignment, and none can be made in LHC mode.
    AssignmentRequired,
    /// Pooled machines cannot be reused in an outage.
    PooledUnavailableInOutage,
    /// The user is at the group's session limit.
    SessionLimit,
    /// No registered machine carries the required tag.
    TagRestriction,
    /// The machine is not in the connector's snapshot.
    UnknownMachine,
}

/// Outcome of a launch.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A machine was chosen.
    Brokered,
    /// No machine; `reason` says why.
    Rejected,
}

/// Who decided a launch.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The cloud broker (normal operations).
    Cloud,
    /// The connector's local host cache.
    Lhc,
}

/// Whether a launch starts or resumes a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// A new session.
    New,
    /// Back to a disconnected session.
    Reconnect,
}

/// The answer to one `launch.request`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LaunchDecision {
    /// Decision time (the request's).
    pub ts: Ts,
    /// The request id.
    pub request: String,
    /// Connector asked.
    pub connector: String,
    /// Brokered or rejected.
    pub outcome: Outcome,
    /// Cloud or LHC.
    pub via: Via,
    /// Chosen machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// New session or reconnect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionKind>,
    /// The cloud broker assigned a static machine on this launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_assignment: Option<bool>,
    /// Why (always on rejections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

/// A machine's registration changed or was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// When.
    pub ts: Ts,
    /// The VDA.
    pub machine: String,
    /// The connector, or "cloud" for the cloud broker.
    pub connector: String,
    /// Registered (true) or refused/dropped (false).
    pub accepted: bool,
    /// Why, when refused or dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

/// Why a connector changed a machine's maintenance mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MaintenanceReason {
    /// A pooled machine was logged off during LHC mode (R-LAUNCH-6).
    PooledLogoffInOutage,
    /// LHC mode ended.
    OutageEnded,
    /// The connector stopped.
    ConnectorStopped,
}

/// A connector put a machine in maintenance or lifted it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MachineMaintenance {
    /// When.
    pub ts: Ts,
    /// The VDA.
    pub machine: String,
    /// The connector.
    pub connector: String,
    /// Put in (true) or lifted (false).
    pub on: bool,
    /// Why.
    pub reason: MaintenanceReason,
}

/// One record of the output topic (`lhc.outputs` in Kafka mode; the node's `outputs` log
/// otherwise): an output a connector node published, with the input that produced it. The
/// Kafka message key is the publishing connector's name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishedOutput {
    /// Offset of the input record that produced the output, in the node's engine order
    /// (its journal in Kafka mode).
    pub input_offset: u64,
    /// Position among that input's outputs, from 0: (`input_offset`, `index`) orders a
    /// node's outputs and identifies each one.
    pub index: u32,
    /// The connector node that published it.
    pub node: String,
    /// The site the node serves (Kafka mode: its site log's message key), so consumers of
    /// a topic shared by many sites can tell them apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// The output, as `lhc replay` prints it (SPEC §3).
    pub output: Output,
}

/// An input that could not be applied (R-LOG-3, R-LOG-4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Quarantine {
    /// Log offset of the input.
    pub offset: u64,
    /// What is wrong, naming the JSON path or field at fault.
    pub error: String,
}
