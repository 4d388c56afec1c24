//! The per-object runtime state the reducer keeps: connectors, machines, outage episodes,
//! imports in progress, and the validation of each configuration version.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::output::*;
use crate::record::*;
use crate::snapshot::Snapshot;
use crate::ts::Ts;

/// The result of validating one configuration version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Validation {
    /// It imports: the shared snapshot.
    Valid(Arc<Snapshot>),
    /// It fails: every failure, in (kind, id) order.
    Invalid(Vec<ImportFailure>),
}

/// Who a VDA is registered with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Registrar {
    /// Nobody.
    #[default]
    None,
    /// The cloud broker, through its zone's connectors (R-REG-1).
    Cloud,
    /// A connector brokering in LHC mode.
    Connector(String),
}

impl Registrar {
    /// Who holds the registration, as outputs name it: "cloud", a connector id, or nobody.
    pub fn name(&self) -> Option<&str> {
        match self {
            Registrar::None => None,
            Registrar::Cloud => Some("cloud"),
            Registrar::Connector(c) => Some(c),
        }
    }

    /// The registrar as a borrowed [`Holder`].
    pub fn holder(&self) -> Holder<'_> {
        match self {
            Registrar::None => Holder::Off,
            Registrar::Cloud => Holder::Cloud,
            Registrar::Connector(c) => Holder::Connector(c),
        }
    }
}

/// Who holds machines, typed: a connector named "cloud" is not the cloud broker. The
/// brokering pools and a machine's refusals are keyed by [`Holder::key`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder<'a> {
    /// Nobody: an unregistered machine (the cloud may power it on).
    Off,
    /// The cloud broker.
    Cloud,
    /// A connector brokering in LHC mode.
    Connector(&'a str),
}

/// First character of a connector's key when its id would read as another holder's.
const ESCAPE: char = '\u{2}';

impl<'a> Holder<'a> {
    /// Its key in the pools and refusals: "" for nobody, "cloud" for the cloud, a
    /// connector's id — escaped with a leading U+0002 when the id would read as one of the
    /// others ("cloud", "", or an id that starts with U+0002), so keys never collide and
    /// the keys (and digests) of every other site are what they always were.
    pub fn key(self) -> std::borrow::Cow<'a, str> {
        match self {
            Holder::Off => "".into(),
            Holder::Cloud => "cloud".into(),
            Holder::Connector(c) if c == "cloud" || c.is_empty() || c.starts_with(ESCAPE) => {
                format!("{ESCAPE}{c}").into()
            }
            Holder::Connector(c) => c.into(),
        }
    }

    /// As outputs name it: "cloud", a connector id; "" for nobody.
    pub fn name(self) -> &'a str {
        match self {
            Holder::Off => "",
            Holder::Cloud => "cloud",
            Holder::Connector(c) => c,
        }
    }
}

/// What the engine knows of a VDA at run time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineRuntime {
    /// Current registration.
    pub(crate) registrar: Registrar,
    /// Sessions of its last heartbeat (updated by session events).
    pub(crate) sessions: Vec<SessionReport>,
    /// Last refusal per connector ("cloud" included) with the connector's epoch, so a
    /// refusal is reported once per change, not at every heartbeat.
    pub(crate) refusals: crate::detmap::VecMap<compact_str::CompactString, (Reason, u64)>,
    /// The machine's zone as of a site version (None: not configured), so a heartbeat
    /// costs one lookup. Derived from the configuration, so not saved.
    #[serde(skip)]
    pub(crate) resolved: Option<(u64, Option<u32>)>,
    /// The zone (lowercased id) the site configuration gave it when a change deleted it,
    /// until a change names it again: where its VDA still is for the brokers, whatever
    /// other zones' older snapshots say (R-REG-4). Absent for every configured machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deleted_from: Option<compact_str::CompactString>,
    /// Launches brokered to it that it has not reported yet (they count as load).
    pub(crate) pending: Vec<crate::broker::PendingLaunch>,
    /// Its contribution to the brokering pools.
    pub(crate) placement: Option<Box<crate::broker::Placement>>,
    /// Its rank in the catalog it was last placed from, as of that catalog's version
    /// (None: the catalog does not know it), so placing it again costs no lookup by name.
    /// Derived from the configuration, so not saved.
    #[serde(skip)]
    pub(crate) placed_in: PlacedIn,
}

/// A machine's rank in the catalog of a configuration version, remembered (see
/// [`MachineRuntime::placed_in`]). A cache: runtimes that differ only in it are equal.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PlacedIn(pub(crate) Option<(u64, Option<u32>)>);

impl PartialEq for PlacedIn {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for PlacedIn {}

/// A machine as listings show it (the node's SDK, `lhc query`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct MachineSummary<'a> {
    /// Its exact id.
    pub machine: &'a str,
    /// Who holds its registration ("cloud", a connector id, or nobody).
    pub registered_with: Option<&'a str>,
    /// Sessions of its last report.
    pub sessions: usize,
}

impl MachineRuntime {
    /// Who holds its registration.
    pub fn registrar(&self) -> &Registrar {
        &self.registrar
    }

    /// Sessions of its last report, as session events updated them.
    pub fn sessions(&self) -> &[SessionReport] {
        &self.sessions
    }

    /// Launches brokered to it that it has not reported yet.
    pub fn pending(&self) -> &[crate::broker::PendingLaunch] {
        &self.pending
    }

    /// This machine, named `machine`, as listings show it.
    pub fn summary<'a>(&'a self, machine: &'a str) -> MachineSummary<'a> {
        MachineSummary {
            machine,
            registered_with: self.registrar.name(),
            sessions: self.sessions.len(),
        }
    }
}

/// One outage episode of a connector: from entry into initial_ha to its end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Episode {
    /// Entry into initial_ha.
    pub(crate) started: Ts,
    /// When the next 3507/3509 is due.
    pub(crate) next_report: Ts,
    /// Distinct machines that registered with this connector during the episode.
    pub(crate) registered: BTreeSet<String>,
    /// `via: "lhc"` launches brokered.
    pub(crate) successful_launches: u64,
    /// `via: "lhc"` launches rejected.
    pub(crate) failed_launches: u64,
}

/// An import in progress (`import_duration_s` > 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingImport {
    /// Version being imported.
    pub(crate) version: u64,
    /// When it completes.
    pub(crate) done_at: Ts,
    /// LHC mode started while it ran: it is abandoned with 507 even if LHC mode has ended
    /// by the time it completes (R-CSS-3).
    #[serde(default)]
    pub(crate) lhc_started: bool,
}

/// One connector's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connector {
    /// Zone id (lowercased), per the site configuration.
    pub(crate) zone: String,
    /// `zone` as an index into the site's zone names (`SiteConfig::zone_names`), when it
    /// is one: the hot path compares integers instead of strings. Derived from the
    /// configuration at each change and by `Engine::restore_config`, so not saved; `None`
    /// for a zone no machine names, or in a state deserialized without `restore_config`:
    /// then the names are compared.
    #[serde(skip)]
    pub(crate) zone_index: Option<u32>,
    /// State of the Remote Broker Provider state machine. Private with `state_since` and
    /// `episode`: [`Connector::enter`] is the only way to change it, and it opens and
    /// closes the episode in the same step.
    state: ConnectorState,
    /// When the current state was entered.
    state_since: Ts,
    /// High Availability Service running.
    pub(crate) ha_running: bool,
    /// Remote Broker Provider running.
    pub(crate) rbp_running: bool,
    /// Config Synchronizer running.
    pub(crate) css_running: bool,
    /// Latest health check: (time, ok).
    pub(crate) last_check: Option<(Ts, bool)>,
    /// First failed check of the current failure streak.
    pub(crate) first_failure: Option<Ts>,
    /// Started (`connector.lifecycle` start) and no health check since: its first check
    /// decides what the restart did to its snapshot (R-STATE-10), runs its first config
    /// sync check (R-CSS-1), and until then it offers no cloud path (R-REG-1).
    pub(crate) first_check_after_start: bool,
    /// It was stopped while in LHC mode (restarted during an outage): its snapshot stays
    /// usable and its first failed check after the start re-enters LHC mode at once
    /// (R-STATE-10). Consumed by that check.
    #[serde(default)]
    pub(crate) stopped_in_lhc: bool,
    /// Start of the running pending_recovery period: entering pending_recovery, or
    /// disabling forced outage in it (a full new period, R-STATE-8).
    #[serde(default)]
    pub(crate) recovery_since: Option<Ts>,
    /// Latest StoreFront heartbeat.
    pub(crate) storefront_last: Option<Ts>,
    /// StoreFront servers seen, with their last contact (R-DATA).
    pub(crate) storefronts: BTreeMap<String, Ts>,
    /// Latest probe of each peer: (time, ok, expiry already handled).
    pub(crate) probes: BTreeMap<String, (Ts, bool, bool)>,
    /// Version of the imported snapshot.
    pub(crate) snapshot: Option<u64>,
    /// Whether the snapshot may be used (R-STATE-10 makes it unusable).
    pub(crate) snapshot_usable: bool,
    /// A record has named this connector (its first sync check happened).
    pub(crate) named: bool,
    /// Next config sync check.
    pub(crate) next_sync: Option<Ts>,
    /// `set_config_sync_interval` override.
    pub(crate) sync_override_s: Option<u64>,
    /// Import in progress.
    pub(crate) import: Option<PendingImport>,
    /// A `storage.fault` waiting to fail the next import: its offset and detail.
    pub(crate) storage_fault: Option<(u64, String)>,
    /// CSS trace mode.
    pub(crate) css_trace: bool,
    /// HA SDK (read-only query API) enabled.
    pub(crate) ha_sdk: bool,
    /// Forced outage set.
    pub(crate) forced: bool,
    /// Last 3002 reason reported, so each reason is reported once.
    pub(crate) reported_ineligible: Option<IneligibleReason>,
    /// Elected broker in this connector's view.
    pub(crate) elected: Option<String>,
    /// Candidates in this connector's view, sorted.
    pub(crate) candidates: Vec<String>,
    /// In LHC mode and elected in its own view.
    pub(crate) brokering: bool,
    /// Bumped at every change that may turn a refusal into something else.
    pub(crate) epoch: u64,
    /// Machines registered with this connector.
    pub(crate) registrations: BTreeSet<String>,
    /// Sessions on the machines registered with this connector (kept in step, for 3507).
    pub(crate) session_count: u64,
    /// The current outage episode: there is one exactly while in LHC mode, by
    /// construction (only [`Connector::enter`] sets it).
    episode: Option<Episode>,
    /// Machines this connector put in maintenance.
    pub(crate) maintenance: BTreeSet<String>,
    /// The LHC database content besides the configuration (R-DATA).
    pub(crate) data: crate::broker::LhcData,
}

/// What [`Connector::enter`] changed.
pub(crate) struct Entered {
    /// The state it left.
    pub(crate) from: ConnectorState,
    /// Seconds it had been in that state.
    pub(crate) held_s: u64,
    /// It entered LHC mode: a new episode is open.
    pub(crate) opened: bool,
    /// It left LHC mode: the episode that ended.
    pub(crate) closed: Option<Episode>,
}

impl Connector {
    /// Moves the state machine to `to` at `ts`: an episode opens on entry into LHC mode
    /// (its first 3507/3509 due at `first_report`) and closes on leaving it, so a connector
    /// in LHC mode always has one and a connector outside it never does.
    pub(crate) fn enter(&mut self, to: ConnectorState, ts: Ts, first_report: Ts) -> Entered {
        let from = std::mem::replace(&mut self.state, to);
        let held_s = ts.seconds_since(self.state_since).max(0) as u64;
        self.state_since = ts;
        let opened = !from.in_lhc() && to.in_lhc();
        let closed = if opened {
            self.episode = Some(Episode {
                started: ts,
                next_report: first_report,
                registered: BTreeSet::new(),
                successful_launches: 0,
                failed_launches: 0,
            });
            None
        } else if from.in_lhc() && !to.in_lhc() {
            self.episode.take()
        } else {
            None
        };
        Entered {
            from,
            held_s,
            opened,
            closed,
        }
    }

    /// The current outage episode, to count into (`Some` exactly while in LHC mode).
    pub(crate) fn episode_mut(&mut self) -> Option<&mut Episode> {
        self.episode.as_mut()
    }

    pub(super) fn new(ts: Ts) -> Connector {
        Connector {
            zone: String::new(),
            zone_index: None,
            state: ConnectorState::WorkingNormally,
            state_since: ts,
            ha_running: true,
            rbp_running: true,
            css_running: true,
            last_check: None,
            first_failure: None,
            first_check_after_start: false,
            stopped_in_lhc: false,
            recovery_since: None,
            storefront_last: None,
            storefronts: BTreeMap::new(),
            probes: BTreeMap::new(),
            snapshot: None,
            snapshot_usable: false,
            named: false,
            next_sync: None,
            sync_override_s: None,
            import: None,
            storage_fault: None,
            css_trace: false,
            ha_sdk: false,
            forced: false,
            reported_ineligible: None,
            elected: None,
            candidates: Vec::new(),
            brokering: false,
            epoch: 0,
            registrations: BTreeSet::new(),
            session_count: 0,
            episode: None,
            maintenance: BTreeSet::new(),
            data: Default::default(),
        }
    }

    /// Zone id (lowercased), per the site configuration.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// Forced outage is set on it.
    pub fn forced(&self) -> bool {
        self.forced
    }

    /// Version of its imported snapshot, if any.
    pub fn snapshot(&self) -> Option<u64> {
        self.snapshot
    }

    /// Machines registered with it.
    pub fn registrations(&self) -> &BTreeSet<String> {
        &self.registrations
    }

    /// The broker it sees elected, if any.
    pub fn elected(&self) -> Option<&str> {
        self.elected.as_deref()
    }

    /// In LHC mode and elected in its own view: it brokers.
    pub fn brokering(&self) -> bool {
        self.brokering
    }

    /// The reason it last reported it cannot enter LHC mode (3002), if it cannot now.
    pub fn reported_ineligible(&self) -> Option<IneligibleReason> {
        self.reported_ineligible
    }

    /// Its High Availability SDK (read-only query API) is enabled.
    pub fn ha_sdk(&self) -> bool {
        self.ha_sdk
    }

    /// Candidates in its view, sorted.
    pub fn candidates(&self) -> &[String] {
        &self.candidates
    }

    /// CSS trace mode is on.
    pub fn css_trace(&self) -> bool {
        self.css_trace
    }

    /// Its `set_config_sync_interval` override, in seconds.
    pub fn sync_override_s(&self) -> Option<u64> {
        self.sync_override_s
    }

    /// StoreFront servers it has seen, with their last contact.
    pub fn storefronts(&self) -> &BTreeMap<String, Ts> {
        &self.storefronts
    }

    /// Its High Availability Service runs.
    pub fn ha_running(&self) -> bool {
        self.ha_running
    }

    /// Its Remote Broker Provider runs.
    pub fn rbp_running(&self) -> bool {
        self.rbp_running
    }

    /// Its Config Synchronizer runs.
    pub fn css_running(&self) -> bool {
        self.css_running
    }

    /// Its latest health check: (time, ok).
    pub fn last_check(&self) -> Option<(Ts, bool)> {
        self.last_check
    }

    /// Its snapshot may be used (a restart outside LHC mode makes it unusable).
    pub fn snapshot_usable(&self) -> bool {
        self.snapshot_usable
    }

    /// Machines it put in maintenance.
    pub fn maintenance(&self) -> &BTreeSet<String> {
        &self.maintenance
    }

    /// State of the Remote Broker Provider state machine.
    pub fn state(&self) -> ConnectorState {
        self.state
    }

    /// When the current state was entered.
    pub fn state_since(&self) -> Ts {
        self.state_since
    }

    /// The current outage episode: `Some` exactly while in LHC mode ([`Connector::enter`]
    /// opens and closes it with the state; `check_invariants` checks a restored state).
    pub fn episode(&self) -> Option<&Episode> {
        self.episode.as_ref()
    }

    /// In LHC mode: initial_ha, extended_ha or pending_recovery.
    pub fn in_lhc(&self) -> bool {
        self.state.in_lhc()
    }

    /// Not stopped (R-STATE-10).
    pub fn started(&self) -> bool {
        self.state != ConnectorState::Stopped
    }
}
