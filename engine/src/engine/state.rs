//! R-STATE: the LHC state machine of each connector — health checks, the zone rule,
//! eligibility (3002), transitions (3003), forced outage, stop and start, and the end of an
//! outage episode with its summary events.
//!
//! Invariant: a connector has an `Episode` exactly while it is in LHC mode (entered and
//! left only through `transition`).

use crate::event::EventKind;
use crate::output::*;
use crate::record::*;
use crate::ts::Ts;

use super::{Connector, Engine, Episode};

impl Engine {
    pub(super) fn admin(&mut self, name: &str, ts: Ts, a: &AdminCommand, out: &mut Vec<Output>) {
        // Forced outage moves deadlines (the pending_recovery timer needs `forced` false).
        self.quiet_until = None;
        let c = self.connector_mut(name);
        match a.command {
            AdminCommandName::EnableForcedOutage => {
                // In LHC mode it is held there from now on (a running pending_recovery
                // period stops: its timer needs `forced` false); outside, its entry is
                // tried after the record (`retry_forced`). Peers of the zone already forced
                // and waiting for the whole zone are retried then too, in FQDN order: forcing
                // the last connector brings the zone in at this record (R-STATE-8).
                c.forced = true;
            }
            AdminCommandName::DisableForcedOutage => {
                let was_forced = std::mem::replace(&mut c.forced, false);
                match c.state() {
                    // Only a forced outage ends so: in a real one, a connector never forced
                    // goes on as R-STATE-5 and R-STATE-6 say (the command has nothing to
                    // disable).
                    ConnectorState::InitialHa | ConnectorState::ExtendedHa if was_forced => self
                        .transition(
                            name,
                            ts,
                            ConnectorState::PendingRecovery,
                            TransitionCause::ForcedOutageDisabled,
                            out,
                        ),
                    // Held in pending_recovery: a full new period starts now.
                    ConnectorState::PendingRecovery if was_forced => c.recovery_since = Some(ts),
                    _ => {}
                }
            }
            AdminCommandName::SetConfigSyncInterval => c.sync_override_s = a.seconds,
            AdminCommandName::ClearConfigSyncInterval => c.sync_override_s = None,
            AdminCommandName::EnableHaSdk => c.ha_sdk = true,
            AdminCommandName::DisableHaSdk => c.ha_sdk = false,
            AdminCommandName::EnableCssTrace => c.css_trace = true,
            AdminCommandName::DisableCssTrace => c.css_trace = false,
        }
    }

    /// R-STATE-8: a forced connector outside LHC mode tries to enter at each record naming
    /// it; enabling forced outage on it also retries the zone's other waiting connectors.
    pub(super) fn retry_forced(
        &mut self,
        name: &str,
        ts: Ts,
        just_forced: bool,
        out: &mut Vec<Output>,
    ) {
        let c = &self.connectors[name];
        if !c.forced || !c.started() {
            return;
        }
        self.quiet_until = None;
        if !just_forced {
            if !c.in_lhc() {
                self.try_enter_forced(name, ts, out);
            }
            return;
        }
        // It now counts as down for the peers waiting for the rest of the zone.
        let zone = self.connectors[name].zone.clone();
        let waiting: Vec<String> = self
            .connector_order
            .iter()
            .filter(|p| {
                let c = &self.connectors[p.as_str()];
                c.zone == zone && c.forced && c.started() && !c.in_lhc()
            })
            .cloned()
            .collect();
        // Every forced connector of the zone waiting outside LHC mode, this one included,
        // in FQDN order: forcing the last one brings the zone in at this record.
        for peer in waiting {
            self.try_enter_forced(&peer, ts, out);
        }
    }

    /// A forced connector's entry: the zone rule with forced peers counting as down, then
    /// eligibility (R-STATE-8, R-STATE-4); 3002 once per reason when it cannot enter.
    pub(super) fn try_enter_forced(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        if self.unforced_healthy_peer(name, ts) {
            self.report_ineligible(name, ts, IneligibleReason::ForcedOnSubset, out);
        } else {
            self.try_enter_lhc(name, ts, TransitionCause::ForcedOutageEnabled, out);
        }
    }

    /// A health check. Returns whether it was the connector's first since a start.
    pub(super) fn health_check(
        &mut self,
        name: &str,
        ts: Ts,
        ok: bool,
        out: &mut Vec<Output>,
    ) -> bool {
        let (first_after_start, restarted_in_outage) = self.note_check(name, ts, ok);
        let c = &self.connectors[name];
        if c.forced && c.in_lhc() {
            // Held in LHC mode; only the end of initial_ha moves it: the outage goes on.
            if c.state() == ConnectorState::InitialHa && self.initial_ha_over(name, ts) {
                self.transition(
                    name,
                    ts,
                    ConnectorState::ExtendedHa,
                    TransitionCause::InitialHaElapsed,
                    out,
                );
            }
        } else {
            self.follow_check(name, ts, ok, restarted_in_outage, out);
        }
        first_after_start
    }

    /// Records a check on the connector; says whether it is the first since a start and
    /// whether that start ended a stop during an outage (R-STATE-10).
    fn note_check(&mut self, name: &str, ts: Ts, ok: bool) -> (bool, bool) {
        let c = self.connector_mut(name);
        let first_after_start = std::mem::take(&mut c.first_check_after_start);
        // R-STATE-10: restarted during an outage, the connector's first failed check after
        // the start (whether checks passed before it or not) re-enters at once.
        let restarted_in_outage = !ok && std::mem::take(&mut c.stopped_in_lhc);
        // (Also for a forced connector that entered LHC mode at its start record: R-STATE-10
        // judges the snapshot by when the connector stopped, not by how it entered.)
        if first_after_start && !ok && !restarted_in_outage && c.snapshot.is_some() {
            // Powered off in normal operations, on during an outage: not usable.
            c.snapshot_usable = false;
        }
        c.last_check = Some((ts, ok));
        (first_after_start, restarted_in_outage)
    }

    /// Whether initial_ha has lasted `initial_ha_s` at `ts`.
    fn initial_ha_over(&self, name: &str, ts: Ts) -> bool {
        ts >= self.connectors[name]
            .state_since()
            .plus_s(self.params.initial_ha_s)
    }

    /// The state machine's answer to a check on a connector that is not held in LHC mode
    /// by a forced outage (R-STATE-1..7).
    fn follow_check(
        &mut self,
        name: &str,
        ts: Ts,
        ok: bool,
        restarted_in_outage: bool,
        out: &mut Vec<Output>,
    ) {
        let threshold = match self.site_settings(name).profile {
            crate::config::Profile::Daas => self.params.second_check_s,
            crate::config::Profile::Onprem => self.params.onprem_outage_s,
        };
        let initial_over = self.initial_ha_over(name, ts);
        let c = self.connector_mut(name);
        match (c.state(), ok) {
            (ConnectorState::WorkingNormally, false) => {
                c.first_failure = Some(ts);
                out.push(self.event(ts, name, EventKind::HealthCheckFailed));
                self.transition(
                    name,
                    ts,
                    ConnectorState::PendingHa,
                    TransitionCause::HealthCheckFailed,
                    out,
                );
                // Restarted during an outage: back into LHC mode at once, without the
                // second_check_s wait (the zone rule and eligibility still apply).
                if restarted_in_outage && self.zone_rule_holds(name, ts) {
                    self.try_enter_lhc(name, ts, TransitionCause::OutageConfirmed, out);
                }
            }
            (ConnectorState::PendingHa, true) => {
                c.first_failure = None;
                self.transition(
                    name,
                    ts,
                    ConnectorState::WorkingNormally,
                    TransitionCause::HealthCheckOk,
                    out,
                );
            }
            (ConnectorState::PendingHa, false) => {
                let first = *c.first_failure.get_or_insert(ts);
                if ts.millis() - first.millis() >= crate::ts::seconds_ms(threshold)
                    && self.zone_rule_holds(name, ts)
                {
                    self.try_enter_lhc(name, ts, TransitionCause::OutageConfirmed, out);
                }
            }
            (ConnectorState::InitialHa, _) if initial_over => {
                let to = if ok {
                    ConnectorState::PendingRecovery
                } else {
                    ConnectorState::ExtendedHa
                };
                self.transition(name, ts, to, TransitionCause::InitialHaElapsed, out);
            }
            (ConnectorState::ExtendedHa, true) => self.transition(
                name,
                ts,
                ConnectorState::PendingRecovery,
                TransitionCause::HealthCheckOk,
                out,
            ),
            (ConnectorState::PendingRecovery, false) => self.transition(
                name,
                ts,
                ConnectorState::ExtendedHa,
                TransitionCause::HealthCheckFailed,
                out,
            ),
            _ => {}
        }
    }

    /// The zone rule's question: does a started peer of `name`'s zone, among those `counts`
    /// keeps, have an ok check as its latest, within `peer_health_window_s`?
    pub(super) fn healthy_peer(
        &self,
        name: &str,
        ts: Ts,
        counts: impl Fn(&Connector) -> bool,
    ) -> bool {
        let Some(zone) = self.site.connector_zone(name) else {
            return false;
        };
        let window_ms = crate::ts::seconds_ms(self.params.peer_health_window_s);
        self.site.zone_connectors(zone).filter(|p| *p != name).any(|peer| {
            self.connectors.get(peer).is_some_and(|p| {
                p.started()
                    && counts(p)
                    && matches!(p.last_check, Some((t, true)) if ts.millis() - t.millis() < window_ms)
            })
        })
    }

    /// R-STATE-8's zone rule: a healthy peer that is not forced keeps a forced connector out
    /// (a forced peer counts as down).
    pub(super) fn unforced_healthy_peer(&self, name: &str, ts: Ts) -> bool {
        self.healthy_peer(name, ts, |p| !p.forced)
    }

    /// R-STATE-3: no other started connector of the zone has an ok check within the window,
    /// forced or not.
    pub(super) fn zone_rule_holds(&self, name: &str, ts: Ts) -> bool {
        !self.healthy_peer(name, ts, |_| true)
    }

    /// The site settings a connector goes by: its snapshot's, else the cloud's.
    pub(super) fn site_settings(&self, name: &str) -> crate::config::SiteData {
        match self.snapshot_of(name) {
            Some(s) => s.site.clone(),
            None => self.site.site(),
        }
    }

    /// R-STATE-4: the first reason the connector cannot enter LHC mode, if any.
    pub(crate) fn ineligible(&self, name: &str, ts: Ts) -> Option<IneligibleReason> {
        let c = &self.connectors[name];
        let site = self.site_settings(name);
        if !site.lhc_enabled {
            return Some(IneligibleReason::LhcDisabled);
        }
        if c.snapshot.is_none() || !c.snapshot_usable {
            return Some(IneligibleReason::NoLhcDatabase);
        }
        if !c.ha_running {
            return Some(IneligibleReason::HaServiceNotRunning);
        }
        // The StoreFront condition is the DaaS profile's, and Service Continuity lifts it
        // (EN seed); the on-prem seeds set none.
        let needs_storefront =
            site.profile == crate::config::Profile::Daas && !site.service_continuity_enabled;
        let window_ms = crate::ts::seconds_ms(self.params.storefront_window_s);
        if needs_storefront
            && c.storefront_last
                .is_none_or(|t| ts.millis() - t.millis() >= window_ms)
        {
            return Some(IneligibleReason::NoStorefrontTraffic);
        }
        None
    }

    pub(super) fn try_enter_lhc(
        &mut self,
        name: &str,
        ts: Ts,
        cause: TransitionCause,
        out: &mut Vec<Output>,
    ) {
        match self.ineligible(name, ts) {
            Some(reason) => self.report_ineligible(name, ts, reason, out),
            None => self.transition(name, ts, ConnectorState::InitialHa, cause, out),
        }
    }

    /// 3002, once per reason change (R-STATE-4).
    pub(super) fn report_ineligible(
        &mut self,
        name: &str,
        ts: Ts,
        reason: IneligibleReason,
        out: &mut Vec<Output>,
    ) {
        let c = self.connector_mut(name);
        if c.reported_ineligible != Some(reason) {
            c.reported_ineligible = Some(reason);
            let data = EventKind::CannotEnterLhc(IneligibleData { reason });
            out.push(self.event(ts, name, data));
        }
    }

    /// Changes state, with 3003 and the episode bookkeeping of entering or leaving LHC mode.
    pub(super) fn transition(
        &mut self,
        name: &str,
        ts: Ts,
        to: ConnectorState,
        cause: TransitionCause,
        out: &mut Vec<Output>,
    ) {
        let report_interval_s = self.params.report_interval_s;
        let c = self.connector_mut(name);
        let entered = c.enter(to, ts, ts.plus_s(report_interval_s));
        let data = TransitionData {
            from: entered.from,
            to,
            previous_state_duration_s: entered.held_s,
            cause,
        };
        c.epoch += 1;
        c.recovery_since = (to == ConnectorState::PendingRecovery).then_some(ts);
        out.push(self.event(ts, name, EventKind::StateChanged(data)));
        let c = self.connector_mut(name);
        if entered.opened {
            c.reported_ineligible = None;
            c.registrations.clear();
            c.session_count = 0;
            if let Some(import) = &mut c.import {
                // R-CSS-3: abandoned at its end, even if LHC mode is over by then.
                import.lhc_started = true;
            }
            self.update_view(name, ts, out);
        } else if let Some(episode) = entered.closed {
            self.end_episode(name, episode, ts, to == ConnectorState::Stopped, out);
        }
        if cause == TransitionCause::ConnectorStarted {
            // 3002 is once per reason change (R-STATE-4), of the connector's process: a
            // restarted connector reports its reason again.
            self.connector_mut(name).reported_ineligible = None;
        }
    }

    /// LHC mode ended (to working_normally, or stopped): summary events, registrations
    /// dropped, maintenance lifted.
    fn end_episode(
        &mut self,
        name: &str,
        episode: Episode,
        ts: Ts,
        stopped: bool,
        out: &mut Vec<Output>,
    ) {
        let c = self.connector_mut(name);
        let was_brokering = std::mem::take(&mut c.brokering);
        let elected = c.elected.clone();
        let duration = ts.seconds_since(episode.started).max(0) as u64;
        let ended_by = if stopped {
            EndedBy::ConnectorStopped
        } else {
            EndedBy::NormalOperations
        };
        if was_brokering {
            if !stopped {
                let data = EventKind::OutageEnded(OutageEndedData {
                    outage_duration_s: duration,
                });
                out.push(self.event(ts, name, data));
            }
            let data = EventKind::ElectedSummary(ElectedSummaryData {
                outage_duration_s: duration,
                registered_machines: episode.registered.len() as u64,
                successful_launches: episode.successful_launches,
                failed_launches: episode.failed_launches,
                ended_by,
            });
            out.push(self.event(ts, name, data));
        } else {
            let data = EventKind::NonElectedSummary(NonElectedSummaryData {
                outage_duration_s: duration,
                elected,
                successful_launches: episode.successful_launches,
                failed_launches: episode.failed_launches,
                ended_by,
            });
            out.push(self.event(ts, name, data));
        }
        let reason = stopped.then_some(Reason::ConnectorStopped);
        self.drop_registrations(name, ts, reason, out);
        let c = self.connector_mut(name);
        let lifted = std::mem::take(&mut c.maintenance);
        let reason = if stopped {
            MaintenanceReason::ConnectorStopped
        } else {
            MaintenanceReason::OutageEnded
        };
        for machine in &lifted {
            self.place(machine);
        }
        out.extend(lifted.into_iter().map(|machine| {
            Output::MachineMaintenance(MachineMaintenance {
                ts,
                machine,
                connector: name.to_string(),
                on: false,
                reason,
            })
        }));
    }

    pub(super) fn stop(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        let in_lhc = self.connectors[name].in_lhc();
        self.transition(
            name,
            ts,
            ConnectorState::Stopped,
            TransitionCause::ConnectorStopped,
            out,
        );
        // A reboot forgets health, probe and StoreFront history and any sync in progress;
        // the snapshot and the registry settings (forced outage, sync interval, CSS trace,
        // HA SDK) survive it (R-STATE-10, R-STATE-8).
        let c = self.connector_mut(name);
        c.stopped_in_lhc = in_lhc;
        c.last_check = None;
        c.first_failure = None;
        c.storefront_last = None;
        c.probes.clear();
        c.import = None;
        c.next_sync = None;
        c.first_check_after_start = false;
    }

    pub(super) fn start(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        self.transition(
            name,
            ts,
            ConnectorState::WorkingNormally,
            TransitionCause::ConnectorStarted,
            out,
        );
        // Its first sync check waits for its first health check (R-CSS-1); a forced
        // outage is retried after this record (`retry_forced`).
        self.connector_mut(name).first_check_after_start = true;
    }
}
