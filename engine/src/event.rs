//! Typed events (SPEC §3 outputs): each variant carries its data and knows its id, its
//! emitting service, its level and its message, so the reducer builds events by name and
//! reports, lint and forensics match on variants instead of numbers.
//!
//! Invariant: the wire form is unchanged — [`EventKind::into_event`] makes the same
//! `Event` (id, source, level, message, data) the reducer always made, and
//! [`Event::kind`] reads it back.

use serde::{Deserialize, Deserializer};

use crate::engine::snake;
use crate::output::*;
use crate::ts::Ts;

/// An event the engine emits, with its data.
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    /// 503: an import of this version starts.
    ImportStarted(VersionData),
    /// 504: the import succeeded; the LHC database uses this version.
    Imported(Imported),
    /// 505: the import failed, naming objects, rules and the offsets that introduced them.
    ImportFailed(ImportFailed),
    /// 507: a newer version exists but LHC mode is active or started during the import.
    ImportAbandoned(VersionData),
    /// 510: no configuration data received (the control plane is unreachable).
    NoConfigData,
    /// 517: the Remote Broker Provider is not running; config sync skipped.
    RbpNotRunning,
    /// 518: the High Availability Service is not running; config sync aborted.
    HaNotRunning,
    /// 3001: a health check of the control plane failed.
    HealthCheckFailed,
    /// 3002: cannot enter LHC mode, and why.
    CannotEnterLhc(IneligibleData),
    /// 3003: state transition.
    StateChanged(TransitionData),
    /// 3502: brokering in LHC mode as the elected broker.
    Brokering(BrokeringData),
    /// 3503: LHC mode ended; normal operations resumed.
    OutageEnded(OutageEndedData),
    /// 3504: the elected broker changed in this connector's view.
    ElectionView(ElectionViewData),
    /// 3507: periodic report of the elected broker.
    ElectedReport(ElectedReportData),
    /// 3508: LHC mode ended on the elected broker.
    ElectedSummary(ElectedSummaryData),
    /// 3509: periodic report of a non-elected broker.
    NonElected(NonElectedData),
    /// 3510: LHC mode ended on a non-elected broker.
    NonElectedSummary(NonElectedSummaryData),
}

impl EventKind {
    /// Event id, unique per source.
    pub fn id(&self) -> u32 {
        match self {
            EventKind::ImportStarted(_) => 503,
            EventKind::Imported(_) => 504,
            EventKind::ImportFailed(_) => 505,
            EventKind::ImportAbandoned(_) => 507,
            EventKind::NoConfigData => 510,
            EventKind::RbpNotRunning => 517,
            EventKind::HaNotRunning => 518,
            EventKind::HealthCheckFailed => 3001,
            EventKind::CannotEnterLhc(_) => 3002,
            EventKind::StateChanged(_) => 3003,
            EventKind::Brokering(_) => 3502,
            EventKind::OutageEnded(_) => 3503,
            EventKind::ElectionView(_) => 3504,
            EventKind::ElectedReport(_) => 3507,
            EventKind::ElectedSummary(_) => 3508,
            EventKind::NonElected(_) => 3509,
            EventKind::NonElectedSummary(_) => 3510,
        }
    }

    /// The emitting service.
    pub fn source(&self) -> EventSource {
        match self.id() {
            503..=518 => EventSource::ConfigSyncService,
            3001..=3003 => EventSource::RemoteBrokerProvider,
            _ => EventSource::HighAvailabilityService,
        }
    }

    /// Severity.
    pub fn level(&self) -> Level {
        match self {
            EventKind::ImportFailed(_) | EventKind::RbpNotRunning | EventKind::HaNotRunning => {
                Level::Error
            }
            EventKind::ImportAbandoned(_)
            | EventKind::NoConfigData
            | EventKind::HealthCheckFailed
            | EventKind::CannotEnterLhc(_)
            | EventKind::Brokering(_) => Level::Warning,
            _ => Level::Information,
        }
    }

    /// The human-readable text: one arm per event, a table kept in one place (so it is
    /// one function, however long).
    pub fn message(&self) -> String {
        match self {
            EventKind::ImportStarted(v) => format!("Importing configuration version {}", v.version),
            EventKind::Imported(i) => {
                format!(
                    "Imported configuration version {} ({} objects); the local host cache now uses it",
                    i.version, i.objects
                )
            }
            EventKind::ImportFailed(f) => {
                let first = f.failures.first().map_or(String::new(), |x| {
                    format!(
                        ": {} {:?} breaks {}: {} (introduced at offset {})",
                        x.kind,
                        x.id,
                        snake(&x.rule),
                        x.detail,
                        x.introduced_by.offset
                    )
                });
                let fallback = f
                    .fallback_version
                    .map_or("no usable configuration".to_string(), |v| {
                        format!("version {v}")
                    });
                format!(
                    "Import of configuration version {} failed{first}; keeping {fallback}",
                    f.version
                )
            }
            EventKind::ImportAbandoned(v) => {
                format!(
                    "Configuration version {} is available but LHC mode is active or started during the import: import abandoned",
                    v.version
                )
            }
            EventKind::NoConfigData => {
                "No configuration data received: the control plane is unreachable".into()
            }
            EventKind::RbpNotRunning => {
                "Remote Broker Provider is not running: config sync skipped".into()
            }
            EventKind::HaNotRunning => {
                "High Availability Service is not running: config sync aborted".into()
            }
            EventKind::HealthCheckFailed => "Health check of the control plane failed".into(),
            EventKind::CannotEnterLhc(i) => format!("Cannot enter LHC mode: {}", snake(&i.reason)),
            EventKind::StateChanged(t) => {
                format!(
                    "State changed from {} to {} ({})",
                    snake(&t.from),
                    snake(&t.to),
                    snake(&t.cause)
                )
            }
            EventKind::Brokering(_) => "Brokering in LHC mode as the elected broker".into(),
            EventKind::OutageEnded(o) => {
                format!(
                    "LHC mode ended after {} s; normal operations resumed",
                    o.outage_duration_s
                )
            }
            EventKind::ElectionView(v) => format!(
                "Elected broker is now {} (candidates: {})",
                v.elected.as_deref().unwrap_or("none"),
                v.candidates.join(", ")
            ),
            EventKind::ElectedReport(r) => format!(
                "LHC mode active for {} s: {} registered machines, {} sessions",
                r.outage_duration_s, r.registered_machines, r.sessions
            ),
            EventKind::ElectedSummary(s) => format!(
                "LHC mode ended after {} s ({}): {} machines registered, {} launches brokered, {} \
                 failed",
                s.outage_duration_s,
                snake(&s.ended_by),
                s.registered_machines,
                s.successful_launches,
                s.failed_launches
            ),
            EventKind::NonElected(n) => format!(
                "LHC mode active for {} s on a non-elected broker; elected: {}",
                n.outage_duration_s,
                n.elected.as_deref().unwrap_or("none")
            ),
            EventKind::NonElectedSummary(n) => format!(
                "LHC mode ended after {} s on a non-elected broker (elected: {}; {}): {} launches \
                 brokered, {} failed",
                n.outage_duration_s,
                n.elected.as_deref().unwrap_or("none"),
                snake(&n.ended_by),
                n.successful_launches,
                n.failed_launches
            ),
        }
    }

    /// The data as the wire form carries it.
    pub fn data(self) -> EventData {
        match self {
            EventKind::ImportStarted(v) | EventKind::ImportAbandoned(v) => EventData::Version(v),
            EventKind::Imported(i) => EventData::Imported(i),
            EventKind::ImportFailed(f) => EventData::ImportFailed(f),
            EventKind::NoConfigData
            | EventKind::RbpNotRunning
            | EventKind::HaNotRunning
            | EventKind::HealthCheckFailed => EventData::Empty(EmptyData {}),
            EventKind::CannotEnterLhc(i) => EventData::Ineligible(i),
            EventKind::StateChanged(t) => EventData::Transition(t),
            EventKind::Brokering(b) => EventData::Brokering(b),
            EventKind::OutageEnded(o) => EventData::OutageEnded(o),
            EventKind::ElectionView(v) => EventData::ElectionView(v),
            EventKind::ElectedReport(r) => EventData::ElectedReport(r),
            EventKind::ElectedSummary(s) => EventData::ElectedSummary(s),
            EventKind::NonElected(n) => EventData::NonElected(n),
            EventKind::NonElectedSummary(n) => EventData::NonElectedSummary(n),
        }
    }

    /// The event of `connector` at `ts`.
    pub fn into_event(self, ts: Ts, connector: &str) -> Event {
        Event {
            ts,
            connector: connector.to_string(),
            source: self.source(),
            event_id: self.id(),
            level: self.level(),
            message: self.message(),
            data: self.data(),
        }
    }
}

impl Event {
    /// The typed event; `None` for an id and data the engine never emits together (an
    /// output log written by something else).
    pub fn kind(&self) -> Option<EventKind> {
        let data = serde_json::to_value(&self.data).ok()?;
        let kind = EventKind::from_wire(self.event_id, data)?.ok()?;
        (kind.source() == self.source).then_some(kind)
    }
}

impl EventKind {
    /// The event of wire id `id` with the data `value`, in the one shape the engine gives
    /// that id; `None` for an id it never emits. (The inverse of `id` and `data`.)
    fn from_wire(
        id: u32,
        value: serde_json::Value,
    ) -> Option<Result<EventKind, serde_json::Error>> {
        use serde_json::from_value as shape;
        let empty = |value| shape::<EmptyData>(value).map(|_| ());
        let kind = (|| {
            Ok(Some(match id {
                503 => EventKind::ImportStarted(shape(value)?),
                504 => EventKind::Imported(shape(value)?),
                505 => EventKind::ImportFailed(shape(value)?),
                507 => EventKind::ImportAbandoned(shape(value)?),
                510 => empty(value).map(|_| EventKind::NoConfigData)?,
                517 => empty(value).map(|_| EventKind::RbpNotRunning)?,
                518 => empty(value).map(|_| EventKind::HaNotRunning)?,
                3001 => empty(value).map(|_| EventKind::HealthCheckFailed)?,
                3002 => EventKind::CannotEnterLhc(shape(value)?),
                3003 => EventKind::StateChanged(shape(value)?),
                3502 => EventKind::Brokering(shape(value)?),
                3503 => EventKind::OutageEnded(shape(value)?),
                3504 => EventKind::ElectionView(shape(value)?),
                3507 => EventKind::ElectedReport(shape(value)?),
                3508 => EventKind::ElectedSummary(shape(value)?),
                3509 => EventKind::NonElected(shape(value)?),
                3510 => EventKind::NonElectedSummary(shape(value)?),
                _ => return Ok(None),
            }))
        })();
        kind.transpose()
    }
}

/// An event is read back by its id: its untagged data alone can be ambiguous (3503's
/// `{"outage_duration_s": N}` also reads as 3509's data with no elected broker).
impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Event, D::Error> {
        /// The wire form, its data not yet typed.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            ts: Ts,
            connector: String,
            source: EventSource,
            event_id: u32,
            level: Level,
            message: String,
            data: serde_json::Value,
        }
        let wire = Wire::deserialize(deserializer)?;
        let data = data_of(wire.event_id, wire.data).map_err(serde::de::Error::custom)?;
        Ok(Event {
            ts: wire.ts,
            connector: wire.connector,
            source: wire.source,
            event_id: wire.event_id,
            level: wire.level,
            message: wire.message,
            data,
        })
    }
}

/// The data of event `id`, in the shape the engine gives that id (any shape that fits
/// for an id it never emits).
fn data_of(id: u32, value: serde_json::Value) -> Result<EventData, serde_json::Error> {
    match EventKind::from_wire(id, value.clone()) {
        Some(kind) => kind.map(EventKind::data),
        None => EventData::deserialize(value),
    }
}
