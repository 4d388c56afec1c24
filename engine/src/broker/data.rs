//! The LHC data content besides the configuration (R-DATA): what a connector in LHC mode
//! knows (StoreFronts, activity), and enumeration of the resources a user sees.

use std::collections::BTreeSet;

use crate::snapshot::{self, Snapshot};
use crate::ts::Ts;

use super::launch::entitled;
use super::{Activity, Engine, Enumerated, LhcData, ACTIVITY_KEPT};

impl Engine {
    /// The LHC data content of a connector (R-DATA).
    pub fn lhc_data(&self, connector: &str) -> Option<&LhcData> {
        self.connectors.get(connector).map(|c| &c.data)
    }

    /// Resources `user` may launch, with the zones where each runs; from a connector's
    /// snapshot, or from the site configuration when `connector` is None.
    pub fn enumerate(&self, user: &str, connector: Option<&str>) -> Vec<Enumerated> {
        let fresh;
        let catalog: &Snapshot = match connector {
            Some(c) => match self.snapshot_of(c) {
                Some(s) => s,
                None => return Vec::new(),
            },
            None => match &self.cloud {
                Some(c) if c.version == self.site.version => c,
                _ => {
                    fresh = snapshot::index(&self.site);
                    &fresh
                }
            },
        };
        catalog
            .resources
            .values()
            .filter(|r| entitled(catalog, r, &user.to_lowercase()))
            .map(|r| {
                let zones: BTreeSet<String> = r
                    .delivery_groups
                    .iter()
                    .filter_map(|g| catalog.group_zone_machines.get(g))
                    .flat_map(|zones| zones.keys().cloned())
                    .collect();
                Enumerated {
                    resource: r.id.clone(),
                    zones: zones.into_iter().collect(),
                }
            })
            .collect()
    }
}

impl crate::engine::Connector {
    /// Appends to the recent LHC-mode activity, keeping the last `ACTIVITY_KEPT` entries.
    pub(crate) fn record_activity(&mut self, ts: Ts, kind: &str, detail: String) {
        if !self.in_lhc() {
            return;
        }
        let activity = self.data.activity.get_mut();
        if activity.len() == ACTIVITY_KEPT {
            activity.pop_front();
        }
        activity.push_back(Activity {
            ts,
            kind: kind.to_string(),
            detail,
        });
    }
}
