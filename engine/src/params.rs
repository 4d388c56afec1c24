//! Engine parameters (SPEC §9), changed only by `engine.params` records so replays stay exact.

use serde::{Deserialize, Serialize};

use crate::record::EngineParams;

/// Timer lengths and windows, in seconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// Delay after a first failed check before a second failure confirms the outage.
    pub second_check_s: u64,
    /// The same delay for the on-premises profile.
    pub onprem_outage_s: u64,
    /// Age under which a peer's ok check keeps the zone out of LHC mode.
    pub peer_health_window_s: u64,
    /// Age under which a StoreFront heartbeat makes a connector eligible.
    pub storefront_window_s: u64,
    /// Length of initial_ha.
    pub initial_ha_s: u64,
    /// Length of pending_recovery without a failed check.
    pub pending_recovery_s: u64,
    /// Age under which an ok peer probe makes the peer a candidate.
    pub peer_timeout_s: u64,
    /// Period of the 3507/3509 reports.
    pub report_interval_s: u64,
    /// Default period of config sync checks.
    pub sync_interval_s: u64,
    /// Model time an import takes.
    pub import_duration_s: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            second_check_s: 60,
            onprem_outage_s: 90,
            peer_health_window_s: 120,
            storefront_window_s: 259_200,
            initial_ha_s: 300,
            pending_recovery_s: 600,
            peer_timeout_s: 120,
            report_interval_s: 120,
            sync_interval_s: 300,
            import_duration_s: 0,
        }
    }
}

impl Params {
    /// Applies overrides; a period of 0 (which would fire forever) is refused whole.
    pub fn apply(&mut self, p: &EngineParams) -> Result<(), String> {
        for (name, value) in [
            ("report_interval_s", p.report_interval_s),
            ("sync_interval_s", p.sync_interval_s),
        ] {
            if value == Some(0) {
                return Err(format!(
                    "field `{name}`: a period must be at least 1 second"
                ));
            }
        }
        let set = |slot: &mut u64, value: Option<u64>| {
            if let Some(v) = value {
                *slot = v;
            }
        };
        set(&mut self.second_check_s, p.second_check_s);
        set(&mut self.onprem_outage_s, p.onprem_outage_s);
        set(&mut self.peer_health_window_s, p.peer_health_window_s);
        set(&mut self.storefront_window_s, p.storefront_window_s);
        set(&mut self.initial_ha_s, p.initial_ha_s);
        set(&mut self.pending_recovery_s, p.pending_recovery_s);
        set(&mut self.peer_timeout_s, p.peer_timeout_s);
        set(&mut self.report_interval_s, p.report_interval_s);
        set(&mut self.sync_interval_s, p.sync_interval_s);
        set(&mut self.import_duration_s, p.import_duration_s);
        Ok(())
    }
}
