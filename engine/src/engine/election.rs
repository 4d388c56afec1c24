//! R-ELECT: each connector's view of the election (3504), and brokering (3502) for the
//! elected connector in LHC mode; a connector that stops brokering drops its registrations.

use crate::event::EventKind;
use crate::output::*;
use crate::ts::Ts;

use super::{fqdn_key, Engine};

impl Engine {
    /// R-ELECT-2 after `peer_timeout_s` was raised: a probe that had aged out may be
    /// within the window again, so its expiry is due again (at its time plus the new
    /// timeout), and every connector's view is recomputed now, in FQDN order — no record
    /// naming a connector, nor a timer, would bring the peer back before its next check.
    /// (A lowered timeout needs nothing here: the expiries it moves into the past fire at
    /// once, stamped with the record's time.)
    pub(super) fn peer_timeout_raised(&mut self, ts: Ts, out: &mut Vec<Output>) {
        let timeout_ms = crate::ts::seconds_ms(self.params.peer_timeout_s);
        for name in self.connector_order.clone() {
            let c = self.connector_mut(&name);
            for (t, ok, handled) in c.probes.values_mut() {
                if *ok && *handled && ts.millis() - t.millis() < timeout_ms {
                    *handled = false;
                }
            }
            self.update_view(&name, ts, out);
        }
    }

    /// Recomputes a connector's view of the election, with 3504 on change, 3502 when it
    /// starts brokering and registration drops when it stops (R-ELECT-1..5, R-REG-3).
    pub(super) fn update_view(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        if !self.connectors[name].started() {
            return;
        }
        let candidates = self.view_candidates(name, ts);
        let elected = candidates.first().cloned();
        let c = self.connector_mut(name);
        let changed = c.elected != elected;
        c.candidates = candidates;
        if changed {
            c.elected = elected.clone();
            c.epoch += 1;
            let data = EventKind::ElectionView(ElectionViewData {
                elected,
                candidates: c.candidates.clone(),
            });
            out.push(self.event(ts, name, data));
        }
        let c = self.connector_mut(name);
        let brokering = c.in_lhc() && c.elected.as_deref() == Some(name);
        if brokering != c.brokering {
            c.brokering = brokering;
            c.epoch += 1;
            if brokering {
                let data = EventKind::Brokering(BrokeringData {
                    elected: name.to_string(),
                });
                out.push(self.event(ts, name, data));
            } else {
                self.drop_registrations(name, ts, Some(Reason::NotElected), out);
            }
        }
    }

    /// The candidates a connector's view of the election holds at `ts` (R-ELECT-1, 2):
    /// itself when it can broker, and the zone peers whose last probe succeeded within
    /// `peer_timeout_s`, in FQDN order. Changes with the time only when a probe ages out,
    /// which is a timer of its own.
    fn view_candidates(&self, name: &str, ts: Ts) -> Vec<String> {
        let c = &self.connectors[name];
        let timeout_ms = crate::ts::seconds_ms(self.params.peer_timeout_s);
        let mut candidates: Vec<String> = Vec::new();
        if c.ha_running && c.snapshot.is_some() {
            candidates.push(name.to_string());
        }
        if let Some(snapshot) = self.snapshot_of(name) {
            for peer in snapshot.zone_peers(name) {
                let peer = self.site.connector_id(peer).unwrap_or(peer);
                if matches!(c.probes.get(peer), Some((t, true, _)) if ts.millis() - t.millis() < timeout_ms)
                {
                    candidates.push(peer.to_string());
                }
            }
        }
        candidates.sort_by_key(|a| fqdn_key(a));
        candidates.dedup();
        candidates
    }

    /// Whether [`Engine::update_view`] at `ts` would change nothing for `name`.
    pub(super) fn view_settled(&self, name: &str, ts: Ts) -> bool {
        let c = &self.connectors[name];
        if !c.started() {
            return true;
        }
        let candidates = self.view_candidates(name, ts);
        let brokering = c.in_lhc() && candidates.first().is_some_and(|e| e == name);
        c.elected.as_ref() == candidates.first()
            && c.candidates == candidates
            && c.brokering == brokering
    }
}
