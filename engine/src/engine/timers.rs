//! R-STATE-9: timers (peer probe expiry, import completion, the end of pending_recovery,
//! the periodic 3507/3509 reports, config sync checks), fired before each record in
//! (deadline, connector FQDN, timer kind) order with their deadline as time, never earlier
//! than the last record.

use crate::event::EventKind;
use crate::output::*;
use crate::ts::Ts;

use super::Engine;

/// Timers, in the order they fire when due at the same instant on one connector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    ProbeExpiry,
    ImportDone,
    RecoveryElapsed,
    Report,
    Sync,
}

impl Engine {
    /// Advances time to `ts` without a record (end of a replay window).
    pub fn advance_to(&mut self, ts: Ts, out: &mut Vec<Output>) {
        if self.now.is_some_and(|now| ts < now) {
            return;
        }
        self.expire_pending(ts);
        self.fire_timers(ts, out);
        self.now = Some(ts);
    }

    pub(super) fn next_timer<'a>(&'a self) -> Option<(Ts, String, Timer, String)> {
        // Connectors are visited in FQDN order, so (deadline, position, timer) orders ties
        // without comparing names.
        let mut best: Option<(Ts, usize, Timer, &str, &str)> = None;
        for (position, name) in self.connector_order.iter().enumerate() {
            let c = &self.connectors[name];
            let now = self.now;
            let mut consider = |deadline: Ts, timer: Timer, detail: &'a str| {
                // A deadline a lowered period moved into the past is due now, and orders
                // with the others due now by connector, then timer kind.
                let deadline = now.map_or(deadline, |now| deadline.max(now));
                if best.is_none_or(|b| (deadline, position, timer) < (b.0, b.1, b.2)) {
                    best = Some((deadline, position, timer, name.as_str(), detail));
                }
            };
            if !c.started() {
                continue;
            }
            for (peer, (t, ok, handled)) in &c.probes {
                if *ok && !handled {
                    consider(
                        t.plus_s(self.params.peer_timeout_s),
                        Timer::ProbeExpiry,
                        peer,
                    );
                }
            }
            if let Some(import) = &c.import {
                consider(import.done_at, Timer::ImportDone, "");
            }
            if c.state() == ConnectorState::PendingRecovery && !c.forced {
                consider(
                    c.recovery_since
                        .unwrap_or(c.state_since())
                        .plus_s(self.params.pending_recovery_s),
                    Timer::RecoveryElapsed,
                    "",
                );
            }
            if let Some(e) = c.episode() {
                consider(e.next_report, Timer::Report, "");
            }
            if let Some(t) = c.next_sync {
                consider(t, Timer::Sync, "");
            }
        }
        best.map(|(deadline, _, timer, name, detail)| {
            (deadline, name.to_string(), timer, detail.to_string())
        })
    }

    pub(super) fn fire_timers(&mut self, until: Ts, out: &mut Vec<Output>) {
        self.fire_due(until, usize::MAX, out);
    }

    /// Fires the timers due by `until` in order while `out` holds fewer than `max` outputs;
    /// true once none is left due.
    pub(super) fn fire_due(&mut self, until: Ts, max: usize, out: &mut Vec<Output>) -> bool {
        if self.quiet_until.is_some_and(|quiet| until < quiet) {
            return true;
        }
        loop {
            let Some((deadline, name, timer, detail)) = self.next_timer() else {
                self.quiet_until = Some(Ts(i64::MAX));
                return true;
            };
            if deadline > until {
                self.quiet_until = Some(deadline);
                return true;
            }
            if out.len() >= max {
                return false;
            }
            // A deadline that a lowered period moved before the last record fires now, never
            // in the past (R-STATE-8); every other fires at its deadline.
            let deadline = deadline.max(self.now.unwrap_or(deadline));
            self.now = Some(deadline);
            match timer {
                Timer::ProbeExpiry => {
                    if let Some(p) = self.connector_mut(&name).probes.get_mut(&detail) {
                        p.2 = true;
                    }
                }
                Timer::ImportDone => self.finish_import(&name, deadline, out),
                Timer::RecoveryElapsed => self.transition(
                    &name,
                    deadline,
                    ConnectorState::WorkingNormally,
                    TransitionCause::RecoveryPeriodElapsed,
                    out,
                ),
                Timer::Report => self.report(&name, deadline, out),
                Timer::Sync => self.sync_check(&name, deadline, out),
            }
            self.update_view(&name, deadline, out);
        }
    }

    pub(super) fn report(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        let interval = self.params.report_interval_s;
        let c = self.connector_mut(name);
        let Some(episode) = c.episode_mut() else {
            return;
        };
        episode.next_report = ts.plus_s(interval);
        let duration = ts.seconds_since(episode.started).max(0) as u64;
        let kind = if c.brokering {
            EventKind::ElectedReport(ElectedReportData {
                outage_duration_s: duration,
                registered_machines: c.registrations.len() as u64,
                sessions: c.session_count,
            })
        } else {
            EventKind::NonElected(NonElectedData {
                outage_duration_s: duration,
                elected: c.elected.clone(),
            })
        };
        out.push(self.event(ts, name, kind));
    }
}
