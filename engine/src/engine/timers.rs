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

    /// Every timer of the started connectors, in FQDN order: `visit(deadline, position,
    /// timer, connector, detail)`, the deadline never before the last record's time (a
    /// deadline a lowered period moved into the past is due now, and orders with the
    /// others due now by connector, then timer kind).
    fn for_each_timer<'a>(&'a self, mut visit: impl FnMut(Ts, usize, Timer, &'a str, &'a str)) {
        let now = self.now;
        for (position, name) in self.connector_order.iter().enumerate() {
            let c = &self.connectors[name];
            let mut consider = |deadline: Ts, timer: Timer, detail: &'a str| {
                let deadline = now.map_or(deadline, |now| deadline.max(now));
                visit(deadline, position, timer, name.as_str(), detail);
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
    }

    pub(super) fn next_timer(&self) -> Option<(Ts, String, Timer, String)> {
        // Connectors are visited in FQDN order, so (deadline, position, timer) orders ties
        // without comparing names.
        let mut best: Option<(Ts, usize, Timer, &str, &str)> = None;
        self.for_each_timer(|deadline, position, timer, name, detail| {
            if best.is_none_or(|b| (deadline, position, timer) < (b.0, b.1, b.2)) {
                best = Some((deadline, position, timer, name, detail));
            }
        });
        best.map(|(deadline, _, timer, name, detail)| {
            (deadline, name.to_string(), timer, detail.to_string())
        })
    }

    /// Fires, in one step, every config sync check due by `until` that would find nothing
    /// (R-CSS-2: it only schedules the next one) and comes before every other timer: the
    /// state is the one firing them one by one leaves (each connector's next check, the
    /// clock at the last one fired), and none has an output. Without this, a record years
    /// after the previous one (a hostile or mistyped `ts`) fired hundreds of millions of
    /// checks, one by one, before it was applied. True if it fired any.
    fn fire_idle_syncs(&mut self, until: Ts) -> bool {
        let mut others: Option<Ts> = None;
        let mut idle: Vec<(&str, Ts)> = Vec::new();
        self.for_each_timer(|deadline, _, timer, name, _| {
            // Nothing a check finds, and the connector's view of the election settled: with
            // no other timer before it, each check until then is the same check.
            if timer == Timer::Sync
                && self.sync_finding(name).is_none()
                && self.view_settled(name, deadline)
            {
                idle.push((name, deadline));
            } else if others.is_none_or(|o| deadline < o) {
                others = Some(deadline);
            }
        });
        // Checks due at the same instant as another timer may come before or after it:
        // they are left to fire one by one, in order.
        let bound = others.map_or(until, |o| until.min(Ts(o.0.saturating_sub(1))));
        let mut fired: Vec<(String, Ts, Ts)> = Vec::new();
        for (name, first) in idle {
            if first > bound {
                continue;
            }
            let c = &self.connectors[name];
            let interval =
                crate::ts::seconds_ms(c.sync_override_s.unwrap_or(self.params.sync_interval_s));
            // Periods are at least a second; the last check fired is the last one by the
            // bound, and the next is a period after it.
            let count = (i128::from(bound.0) - i128::from(first.0)) / i128::from(interval.max(1));
            let last = Ts(first.0.saturating_add(
                i64::try_from(count)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(interval),
            ));
            fired.push((name.to_string(), last, Ts(last.0.saturating_add(interval))));
        }
        let Some(latest) = fired.iter().map(|f| f.1).max() else {
            return false;
        };
        for (name, _, next) in fired {
            self.connector_mut(&name).next_sync = Some(next);
        }
        self.now = Some(self.now.map_or(latest, |now| now.max(latest)));
        true
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
            // Worth a look only when a second check could be due before `until`: periods
            // are at least a second.
            if timer == Timer::Sync
                && !self.one_by_one
                && until.0.saturating_sub(deadline.0) >= 1_000
                && self.fire_idle_syncs(until)
            {
                continue;
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
