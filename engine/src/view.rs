//! Read-only answers for the drivers (the live node, the CLI): what a load balancer's
//! monitor sees, which resources a user is offered and from where, a connector's election
//! summary, whether a silent peer has crashed, whether a record would lose a `ts` race.
//!
//! Invariant: the drivers decide nothing. Every rule a driver needs is a function of the
//! engine state and of what the driver passes in (its wall clock included, as a `Ts`), so
//! it is tested here, beside the reducer whose state it reads.

use schemars::JsonSchema;
use serde::Serialize;

use crate::broker::Enumerated;
use crate::output::{ConnectorState, IneligibleReason};
use crate::ts::Ts;
use crate::Engine;

/// Why a connector's ADC probe says DOWN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbeDown {
    /// Stopped (R-STATE-10): it brokers nothing.
    ConnectorStopped,
    /// In LHC mode and not the elected broker: launches sent to it are refused (R-ELECT).
    NotElected,
}

/// What the NetScaler CITRIX-XD-DDC monitor sees of a connector: UP while it can broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdcProbe {
    /// `None`: UP.
    pub down: Option<ProbeDown>,
    /// Its state.
    pub state: ConnectorState,
    /// The broker it sees elected.
    pub elected: Option<String>,
}

/// Where a connector answers resource enumeration from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResourceSource {
    /// The site configuration, through the cloud.
    Cloud,
    /// Its own snapshot, in LHC mode (as the seeds describe).
    Lhc,
}

/// A connector's view of the election.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ElectionView {
    /// Its state.
    pub state: ConnectorState,
    /// In LHC mode.
    pub in_lhc: bool,
    /// The broker it sees elected.
    pub elected: Option<String>,
    /// The candidates it sees, in FQDN order.
    pub candidates: Vec<String>,
    /// Brokering: in LHC mode and elected in its own view.
    pub brokering: bool,
    /// The last 3002 reason while it cannot enter LHC mode.
    pub cannot_enter_lhc: Option<IneligibleReason>,
}

/// A connector as listings show it (`lhc query connectors`, the node's dashboard).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ConnectorSummary<'a> {
    /// Its exact id.
    pub connector: &'a str,
    /// Its zone (lowercase id).
    pub zone: &'a str,
    /// Its state.
    pub state: ConnectorState,
    /// When it entered that state.
    pub since: Ts,
    /// The broker it sees elected.
    pub elected: Option<&'a str>,
    /// The candidates it sees, in FQDN order.
    pub candidates: &'a [String],
    /// In LHC mode and elected in its own view.
    pub brokering: bool,
    /// Version of its imported snapshot.
    pub snapshot_version: Option<u64>,
    /// Machines registered with it.
    pub registrations: usize,
    /// Forced outage is set on it.
    pub forced_outage: bool,
}

impl Engine {
    /// Every connector's summary, in id order.
    pub fn connector_summaries(&self) -> Vec<ConnectorSummary<'_>> {
        self.connectors
            .iter()
            .map(|(name, c)| ConnectorSummary {
                connector: name,
                zone: c.zone(),
                state: c.state(),
                since: c.state_since(),
                elected: c.elected(),
                candidates: c.candidates(),
                brokering: c.brokering(),
                snapshot_version: c.snapshot(),
                registrations: c.registrations().len(),
                forced_outage: c.forced(),
            })
            .collect()
    }

    /// The machines the configuration places in `connector`'s zone, in id order, as
    /// listings show them; empty when the site names no such connector.
    pub fn zone_machines(&self, connector: &str) -> Vec<crate::engine::MachineSummary<'_>> {
        let Some(zone) = self.site.connector_zone(connector) else {
            return Vec::new();
        };
        self.machines()
            .sorted()
            .into_iter()
            .filter(|(name, _)| {
                self.site
                    .machine_zone(name)
                    .is_some_and(|z| z.eq_ignore_ascii_case(zone))
            })
            .map(|(name, m)| m.summary(name))
            .collect()
    }

    /// The ADC probe of `connector` (an id the site names); `None` when it names none.
    pub fn adc_probe(&self, connector: &str) -> Option<AdcProbe> {
        let c = self.connectors.get(connector)?;
        let down = if !c.started() {
            Some(ProbeDown::ConnectorStopped)
        } else if c.in_lhc() && !c.brokering {
            Some(ProbeDown::NotElected)
        } else {
            None
        };
        Some(AdcProbe {
            down,
            state: c.state(),
            elected: c.elected.clone(),
        })
    }

    /// The resources `user` is offered by `connector`, and from where: its snapshot in LHC
    /// mode, the site configuration otherwise. `None` when the site names no such connector.
    pub fn resources(
        &self,
        connector: &str,
        user: &str,
    ) -> Option<(ResourceSource, Vec<Enumerated>)> {
        let lhc = self.connectors.get(connector)?.in_lhc();
        let source = if lhc {
            ResourceSource::Lhc
        } else {
            ResourceSource::Cloud
        };
        Some((source, self.enumerate(user, lhc.then_some(connector))))
    }

    /// `connector`'s view of the election; `None` when the site names no such connector.
    pub fn election_view(&self, connector: &str) -> Option<ElectionView> {
        let c = self.connectors.get(connector)?;
        Some(ElectionView {
            state: c.state(),
            in_lhc: c.in_lhc(),
            elected: c.elected.clone(),
            candidates: c.candidates.clone(),
            brokering: c.brokering,
            cannot_enter_lhc: c.reported_ineligible,
        })
    }

    /// Whether the node running `connector` must record its start before anything else:
    /// the log holds it stopped (it stopped cleanly before, or its peers recorded it dead
    /// while it was unreachable), yet it is running. False for a connector no
    /// configuration names.
    pub fn needs_start_record(&self, connector: &str) -> bool {
        self.connectors.get(connector).is_some_and(|c| !c.started())
    }

    /// Whether `peer` has crashed, seen at `now` (the driver's clock) by a connector whose
    /// probes of it have failed since `unreachable_since` (None: its last probe answered):
    /// unanswered for `after`, started, and nothing it records has reached the log for
    /// `after` either (its last health check, or its start). Nobody else records the stop
    /// of a crashed connector, and until someone does the log says it still brokers. A
    /// peer only cut off from the asker keeps writing health checks, so a partition stays
    /// a split brain (R-ELECT-4).
    pub fn peer_presumed_dead(
        &self,
        peer: &str,
        now: Ts,
        unreachable_since: Option<Ts>,
        after: std::time::Duration,
    ) -> bool {
        let after_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
        let lasted = |since: Ts| now.millis().saturating_sub(since.millis()) >= after_ms;
        let Some(c) = self.connectors.get(peer) else {
            return false;
        };
        if !c.started() || !unreachable_since.is_some_and(lasted) {
            return false;
        }
        let last_heard = c
            .last_check
            .map_or(c.state_since(), |(ts, _)| ts.max(c.state_since()));
        lasted(last_heard)
    }
}

impl Engine {
    /// Whether a record stamped `ts` would lose a race with another writer: it is older
    /// than the last record applied, so it is quarantined before anything else is checked
    /// (R-LOG-4), and the same request stamped again would be applied. Asked before the
    /// record is applied; any other refusal would fail again.
    pub fn lost_ts_race(&self, ts: Ts) -> bool {
        self.now.is_some_and(|now| ts < now)
    }
}

impl Engine {
    /// Whether `zone` (lowercase id) offers the cloud path now (R-REG-1): a connector
    /// working normally with a check since its start, or one in pending_ha while no
    /// connector of the zone is in LHC mode. While it does not, machines registered with
    /// the cloud cannot be brokered.
    pub fn zone_offers_cloud(&self, zone: &str) -> bool {
        crate::engine::zone_offers_cloud(&self.connectors, zone)
    }
}
