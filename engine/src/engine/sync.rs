//! R-CSS: config sync checks (503/507/510/517/518), imports and their validation (504, 505
//! naming object, rule and the offset that introduced it), and the validations kept per
//! configuration version.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::event::EventKind;
use crate::output::*;
use crate::snapshot::{self, Snapshot};
use crate::ts::Ts;

use super::{Connector, Engine, PendingImport, Validation};

impl Engine {
    /// One config sync check (R-CSS-2), then the next is scheduled.
    pub(super) fn sync_check(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        let interval = self.connectors[name]
            .sync_override_s
            .unwrap_or(self.params.sync_interval_s);
        let latest = self.site.version;
        self.connector_mut(name).next_sync = Some(ts.plus_s(interval));
        let Some(kind) = self.sync_finding(name) else {
            return;
        };
        let starts_import = matches!(kind, EventKind::ImportStarted(_));
        out.push(self.event(ts, name, kind));
        if !starts_import {
            return;
        }
        // The import copies the configuration as it is now: validated now, so a change
        // that lands while the import runs is the next import's (before, a failure it
        // introduced was reported against this version).
        self.validation(latest);
        let duration = self.params.import_duration_s;
        let c = self.connector_mut(name);
        c.import = Some(PendingImport {
            version: latest,
            done_at: ts.plus_s(duration),
            lhc_started: false,
        });
        if duration == 0 {
            self.finish_import(name, ts, out);
        }
    }

    /// What a config sync check on `name` reports now (R-CSS-2); `None` when it would only
    /// schedule the next check. Depends on the connector and the configuration version,
    /// never on the time: a check that finds nothing finds nothing until a record or
    /// another timer changes them.
    pub(super) fn sync_finding(&self, name: &str) -> Option<EventKind> {
        let latest = self.site.version;
        let c = &self.connectors[name];
        if !c.css_running || !c.started() || c.import.is_some() {
            return None;
        }
        let newer = latest > 0 && c.snapshot.is_none_or(|v| v < latest);
        let needs_import = latest > 0 && (newer || !c.snapshot_usable);
        let latest_data = VersionData { version: latest };
        Some(if !c.ha_running {
            EventKind::HaNotRunning
        } else if !c.rbp_running {
            EventKind::RbpNotRunning
        } else if matches!(c.last_check, Some((_, false))) {
            EventKind::NoConfigData
        } else if c.in_lhc() && newer {
            EventKind::ImportAbandoned(latest_data)
        } else if needs_import {
            EventKind::ImportStarted(latest_data)
        } else {
            return None;
        })
    }

    /// Validates (once per version) and caches; drops validations nobody needs any more.
    pub(super) fn validation(&mut self, version: u64) -> &Validation {
        // Only the current version is ever built: an import pins its version's validation
        // when it starts, and `collect_validations` keeps it while the import runs.
        debug_assert!(
            self.validations.contains_key(&version) || version == self.site.version,
            "version {version} is neither validated nor current"
        );
        if !self.validations.contains_key(&version) {
            let validation = match snapshot::validate(&self.site) {
                Ok(()) => Validation::Valid(self.cloud_catalog()),
                Err(failures) => Validation::Invalid(failures),
            };
            self.validations.insert(version, validation);
        }
        &self.validations[&version]
    }

    pub(super) fn collect_validations(&mut self) {
        let keep: BTreeSet<u64> = self
            .connectors
            .values()
            .flat_map(|c| {
                c.snapshot
                    .into_iter()
                    .chain(c.import.as_ref().map(|i| i.version))
            })
            .chain(std::iter::once(self.site.version))
            .collect();
        self.validations.retain(|v, _| keep.contains(v));
    }

    pub(super) fn finish_import(&mut self, name: &str, ts: Ts, out: &mut Vec<Output>) {
        let c = self.connector_mut(name);
        let Some(import) = c.import.take() else {
            return;
        };
        if import.lhc_started {
            // LHC mode started during the import (even if it has ended since): abandoned,
            // the previous snapshot stays (R-CSS-3). An import that began in LHC mode (an
            // unusable snapshot re-imported while the control plane answers) completes.
            let data = EventKind::ImportAbandoned(VersionData {
                version: import.version,
            });
            out.push(self.event(ts, name, data));
            return;
        }
        let storage_fault = c.storage_fault.take();
        let trace = c.css_trace;
        // What the connector keeps: its snapshot, unless a restart found it unusable
        // (R-STATE-10: it cannot broker from it, so it is no last-known-good).
        let fallback = c.snapshot.filter(|_| c.snapshot_usable);
        let mut failures = match self.validation(import.version) {
            Validation::Valid(_) => Vec::new(),
            Validation::Invalid(f) => f.clone(),
        };
        if let Some((offset, detail)) = storage_fault {
            failures.push(ImportFailure {
                kind: crate::config::ObjectKind::Connector,
                id: name.to_string(),
                rule: Rule::StorageFault,
                detail: format!(
                    "the connector's local store failed ({detail}): repair or replace its \
                     disk; the next import retries"
                ),
                introduced_by: IntroducedBy {
                    offset,
                    version: None,
                },
            });
            failures.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
        }
        if failures.is_empty() {
            let objects = match self.validation(import.version) {
                Validation::Valid(s) => s.objects,
                Validation::Invalid(_) => 0,
            };
            let c = self.connector_mut(name);
            c.snapshot = Some(import.version);
            c.snapshot_usable = true;
            let data = EventKind::Imported(Imported {
                version: import.version,
                objects,
            });
            out.push(self.event(ts, name, data));
            self.collect_validations();
            // Machines it holds are now brokered from the new snapshot.
            let held: Vec<String> = self.connectors[name]
                .registrations
                .iter()
                .cloned()
                .collect();
            self.replace_all(&held);
            // (The election view, which the new snapshot's peers change, is recomputed
            // by every caller once the import's record or timer is done.)
        } else {
            if !trace {
                failures.truncate(1);
            }
            let data = EventKind::ImportFailed(ImportFailed {
                version: import.version,
                failures,
                fallback_version: fallback,
            });
            out.push(self.event(ts, name, data));
        }
    }
}

/// The snapshot a connector uses, looked up in the validations store.
pub(super) fn snapshot_in<'a>(
    validations: &'a BTreeMap<u64, Validation>,
    c: &Connector,
) -> Option<&'a Arc<Snapshot>> {
    match validations.get(&c.snapshot?)? {
        Validation::Valid(s) => Some(s),
        Validation::Invalid(_) => None,
    }
}
