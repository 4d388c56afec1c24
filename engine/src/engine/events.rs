//! Outputs the reducer builds: events with their level and message, and quarantines.

use serde::Serialize;

use crate::output::*;
use crate::ts::Ts;

use super::Engine;

impl Engine {
    pub(super) fn event(
        &self,
        ts: Ts,
        connector: &str,
        source: EventSource,
        event_id: u32,
        data: EventData,
    ) -> Output {
        let level = match (source, event_id) {
            (EventSource::ConfigSyncService, 505 | 517 | 518) => Level::Error,
            (EventSource::ConfigSyncService, 507 | 510) => Level::Warning,
            (EventSource::RemoteBrokerProvider, 3001 | 3002) => Level::Warning,
            (EventSource::HighAvailabilityService, 3502) => Level::Warning,
            _ => Level::Information,
        };
        let message = message(event_id, &data);
        Output::Event(Event {
            ts,
            connector: connector.to_string(),
            source,
            event_id,
            level,
            message,
            data,
        })
    }
}

pub(super) fn quarantine(offset: u64, error: String) -> Output {
    Output::Quarantine(Quarantine { offset, error })
}

/// The snake_case name serde gives an enum value (`not_elected`), for messages.
pub fn snake<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The human-readable text of an event: one arm per event id, a table kept in one place
/// (so it is one function, however long).
pub(super) fn message(event_id: u32, data: &EventData) -> String {
    match (event_id, data) {
        (503, EventData::Version(v)) => format!("Importing configuration version {}", v.version),
        (504, EventData::Imported(i)) => {
            format!(
                "Imported configuration version {} ({} objects); the local host cache now uses it",
                i.version, i.objects
            )
        }
        (505, EventData::ImportFailed(f)) => {
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
                .map_or("no configuration".to_string(), |v| format!("version {v}"));
            format!(
                "Import of configuration version {} failed{first}; keeping {fallback}",
                f.version
            )
        }
        (507, EventData::Version(v)) => {
            format!(
                "Configuration version {} is available but LHC mode is active or started during the import: import abandoned",
                v.version
            )
        }
        (510, _) => "No configuration data received: the control plane is unreachable".into(),
        (517, _) => "Remote Broker Provider is not running: config sync skipped".into(),
        (518, _) => "High Availability Service is not running: config sync aborted".into(),
        (3001, _) => "Health check of the control plane failed".into(),
        (3002, EventData::Ineligible(i)) => format!("Cannot enter LHC mode: {}", snake(&i.reason)),
        (3003, EventData::Transition(t)) => {
            format!(
                "State changed from {} to {} ({})",
                snake(&t.from),
                snake(&t.to),
                snake(&t.cause)
            )
        }
        (3502, _) => "Brokering in LHC mode as the elected broker".into(),
        (3503, EventData::OutageEnded(o)) => {
            format!(
                "LHC mode ended after {} s; normal operations resumed",
                o.outage_duration_s
            )
        }
        (3504, EventData::ElectionView(v)) => format!(
            "Elected broker is now {} (candidates: {})",
            v.elected.as_deref().unwrap_or("none"),
            v.candidates.join(", ")
        ),
        (3507, EventData::ElectedReport(r)) => format!(
            "LHC mode active for {} s: {} registered machines, {} sessions",
            r.outage_duration_s, r.registered_machines, r.sessions
        ),
        (3508, EventData::ElectedSummary(s)) => format!(
            "LHC mode ended after {} s ({}): {} machines registered, {} launches brokered, {} \
             failed",
            s.outage_duration_s,
            snake(&s.ended_by),
            s.registered_machines,
            s.successful_launches,
            s.failed_launches
        ),
        (3509, EventData::NonElected(n)) => format!(
            "LHC mode active for {} s on a non-elected broker; elected: {}",
            n.outage_duration_s,
            n.elected.as_deref().unwrap_or("none")
        ),
        (3510, EventData::NonElectedSummary(n)) => format!(
            "LHC mode ended after {} s on a non-elected broker (elected: {}; {}): {} launches \
             brokered, {} failed",
            n.outage_duration_s,
            n.elected.as_deref().unwrap_or("none"),
            snake(&n.ended_by),
            n.successful_launches,
            n.failed_launches
        ),
        (id, _) => format!("event {id}"),
    }
}
