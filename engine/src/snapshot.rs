//! A connector's imported configuration (its LHC database content from config sync) and
//! the import validation rules (R-CSS-3, R-CSS-4).
//!
//! A snapshot is the whole configuration at one version, validated and indexed. Identical
//! versions are one shared `Arc`, so eight connectors of a big site (and the cloud broker,
//! whose index of the current version it is) hold one copy.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use rustc_hash::FxBuildHasher;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigObject, DeliveryGroupKind, ObjectKind, SiteData};
use crate::output::{ImportFailure, IntroducedBy, Rule};
use crate::site::{SiteConfig, Stored};

/// What brokering and election need of a machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineEntry {
    /// Exact id.
    pub id: String,
    /// Zone id, lowercased.
    pub zone: String,
    /// Delivery group id, lowercased.
    pub delivery_group: String,
    /// Session capacity, default resolved (1 single-session, 20 multi-session).
    pub max_sessions: u32,
    /// Tags.
    pub tags: Vec<String>,
    /// A Remote PC Access machine.
    pub remote_pc: bool,
    /// In maintenance mode per the configuration.
    pub maintenance: bool,
    /// Position in FQDN order among the snapshot's machines: pools order by it, comparing
    /// integers rather than names.
    pub rank: u32,
}

/// What brokering needs of a delivery group, defaults resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEntry {
    /// Exact id.
    pub id: String,
    /// Group kind.
    pub kind: DeliveryGroupKind,
    /// The broker controls power.
    pub power_managed: bool,
    /// Pooled machines shut down after each session.
    pub shutdown_after_use: bool,
    /// The group's reuse-without-shutdown-in-outage flag (site default applied).
    pub reuse_in_outage: bool,
    /// Most sessions per user in the group.
    pub session_limit_per_user: Option<u32>,
    /// Required machine tag.
    pub restrict_to_tag: Option<String>,
}

/// What brokering needs of a published resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceEntry {
    /// Exact id.
    pub id: String,
    /// Delivery groups, lowercased, in the configured order.
    pub delivery_groups: Vec<String>,
    /// Preferred zone, lowercased.
    pub zone_preference: Option<String>,
    /// Principals (users and groups), lowercased.
    pub principals: BTreeSet<String>,
}

/// A validated configuration at one version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Site version.
    pub version: u64,
    /// Number of objects copied.
    pub objects: u64,
    /// Site settings.
    pub site: SiteData,
    /// Connectors (exact ids) by lowercased zone id.
    pub(crate) zone_connectors: BTreeMap<String, BTreeSet<String>>,
    /// Lowercased zone id by lowercased connector id.
    pub(crate) connector_zone: BTreeMap<String, String>,
    /// Machines by lowercased id.
    pub machines: crate::detmap::DetMap<compact_str::CompactString, MachineEntry>,
    /// Lowercased machine ids in FQDN order (index = rank).
    pub(crate) by_rank: Vec<compact_str::CompactString>,
    /// Delivery groups by lowercased id.
    pub groups: BTreeMap<String, GroupEntry>,
    /// Resources by lowercased id.
    pub resources: BTreeMap<String, ResourceEntry>,
    /// Groups of each user (lowercased ids).
    pub(crate) user_groups: crate::detmap::DetMap<String, Vec<String>>,
    /// Static assignments: group → user → machine, all lowercased.
    pub(crate) assignments: BTreeMap<String, BTreeMap<String, String>>,
    /// Machines (lowercased) with an assignment.
    pub(crate) assigned: BTreeSet<String>,
    /// Machines per group, then zone, lowercased, in FQDN order: where a group can run.
    pub(crate) group_zone_machines: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// What placing a machine asks of this catalog, by rank. Derived, so not saved.
    #[serde(skip)]
    pub(crate) fits: Fits,
}

/// What placing a machine in a pool asks of its catalog entry and of its delivery group,
/// resolved once per catalog: a dense row by rank.
///
/// Why: every heartbeat that moves a session, every session event and every launch places
/// its machine again; looking the machine up in a 40,000-entry map and its group in the
/// groups' tree each time cost a cache miss and a dozen string comparisons per placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fit {
    /// Its delivery group's name (lowercased), an index into [`FitTable::names`].
    pub(crate) group: u32,
    /// Its zone (lowercased), an index into [`FitTable::names`].
    pub(crate) zone: u32,
    /// Session capacity.
    pub(crate) max_sessions: u32,
    /// It carries its group's required tag (or the group requires none, or is unknown).
    pub(crate) tagged: bool,
    /// Its group is pooled and power-managed: the cloud may power it on.
    pub(crate) power_on: bool,
    /// A Remote PC Access machine.
    pub(crate) remote_pc: bool,
    /// In maintenance mode per the configuration.
    pub(crate) maintenance: bool,
}

/// The fits of a catalog's machines, and the group and zone names they point to.
#[derive(Clone, Debug, Default)]
pub(crate) struct FitTable {
    /// By rank.
    pub(crate) rows: Vec<Fit>,
    /// Group and zone names, each once.
    pub(crate) names: Vec<String>,
}

/// A catalog's [`FitTable`], built on first use. A cache of what the catalog says:
/// snapshots that differ only in it are equal.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fits(std::sync::OnceLock<FitTable>);

impl PartialEq for Fits {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Snapshot {
    /// What placing each machine asks of this catalog, by rank (built on first use).
    pub(crate) fn fits(&self) -> &FitTable {
        self.fits.0.get_or_init(|| {
            /// `name`'s index in `names`, added at the end the first time.
            fn intern<'a>(
                name: &'a str,
                names: &mut Vec<String>,
                known: &mut HashMap<&'a str, u32, FxBuildHasher>,
            ) -> u32 {
                *known.entry(name).or_insert_with(|| {
                    names.push(name.to_string());
                    (names.len() - 1) as u32
                })
            }
            let mut names: Vec<String> = Vec::new();
            let mut known = HashMap::default();
            let rows =
                self.by_rank
                    .iter()
                    .map(|id| {
                        let entry = self.machines.get(id).expect("ranked machines are indexed");
                        let group = self.groups.get(&entry.delivery_group);
                        Fit {
                            group: intern(&entry.delivery_group, &mut names, &mut known),
                            zone: intern(&entry.zone, &mut names, &mut known),
                            max_sessions: entry.max_sessions,
                            tagged: group.and_then(|g| g.restrict_to_tag.as_ref()).is_none_or(
                                |tag| entry.tags.iter().any(|t| t.eq_ignore_ascii_case(tag)),
                            ),
                            power_on: group.is_some_and(|g| {
                                g.kind == DeliveryGroupKind::SingleSessionPooled && g.power_managed
                            }),
                            remote_pc: entry.remote_pc,
                            maintenance: entry.maintenance,
                        }
                    })
                    .collect();
            FitTable { rows, names }
        })
    }

    /// The machine named (case-insensitively).
    pub fn machine(&self, name: &str) -> Option<&MachineEntry> {
        self.machines
            .get(name)
            .or_else(|| self.machines.get(name.to_lowercase().as_str()))
    }

    /// Peers in the zone of `connector`, itself excluded, in id order.
    pub fn zone_peers<'a>(&'a self, connector: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let zone = self.connector_zone.get(&connector.to_lowercase());
        zone.and_then(|z| self.zone_connectors.get(z))
            .into_iter()
            .flatten()
            .filter(move |c| !c.eq_ignore_ascii_case(connector))
            .map(String::as_str)
    }
}

/// A hash map for validation's lookups: never iterated, so its order never shows.
type Lookup<'a, V> = HashMap<Cow<'a, str>, V, FxBuildHasher>;

/// `id` lowercased as the snapshot keys ids, borrowed when lowercasing changes nothing
/// (most ids are lowercase already, so validating 150,000 objects or placing a machine
/// need not allocate).
pub(crate) fn lower(id: &str) -> Cow<'_, str> {
    if id.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) {
        Cow::Owned(id.to_lowercase())
    } else {
        Cow::Borrowed(id)
    }
}

/// Lowercased ids present, per kind, each with the object that claims it.
struct Ids<'a> {
    config: &'a SiteConfig,
    lower: BTreeMap<ObjectKind, Lookup<'a, &'a Stored>>,
}

impl Ids<'_> {
    fn has(&self, kind: ObjectKind, id: &str) -> bool {
        self.lower
            .get(&kind)
            .is_some_and(|s| s.contains_key(lower(id).as_ref()))
    }

    /// Provenance of a dangling reference: the later of the referrer's write and the
    /// deletion of the target, when the target was deleted.
    fn dangling(&self, referrer: &Stored, kinds: &[ObjectKind], target: &str) -> IntroducedBy {
        let deleted = kinds
            .iter()
            .filter_map(|k| self.config.deleted.get(k)?.get(&target.to_lowercase()))
            .max_by_key(|p| p.offset);
        match deleted {
            Some(d) if d.offset > referrer.introduced_by.offset => d.clone(),
            _ => referrer.introduced_by.clone(),
        }
    }
}

/// Validates the whole configuration: every failure, in (kind, id) order. A valid
/// configuration's snapshot is [`index`] of it (an engine reuses the index it already
/// holds for the cloud broker at that version).
pub fn validate(config: &SiteConfig) -> Result<(), Vec<ImportFailure>> {
    let mut failures = Vec::new();
    let claimed = claim_ids(config, &mut failures);
    let mut checks = Checks {
        ids: Ids {
            config,
            lower: claimed,
        },
        failures,
    };
    let groups: Lookup<'_, (DeliveryGroupKind, &Stored)> = config
        .of_kind(ObjectKind::DeliveryGroup)
        .filter_map(|s| match &s.object {
            ConfigObject::DeliveryGroup { id, data } => Some((lower(id), (data.kind, s))),
            _ => None,
        })
        .collect();
    // What an assignment needs of its machine: Remote PC, its group's kind, and the last
    // change to either (what makes an assignment not static may be a change to the
    // machine or its group, not to the assignment).
    let machines: Lookup<'_, Assignable> = config
        .of_kind(ObjectKind::Machine)
        .filter_map(|s| match &s.object {
            ConfigObject::Machine { id, data } => {
                let group_key = lower(&data.delivery_group);
                let group = groups.get(group_key.as_ref());
                let group_change = match group {
                    Some((_, g)) => Some(&g.introduced_by),
                    None => config
                        .deleted
                        .get(&ObjectKind::DeliveryGroup)
                        .and_then(|d| d.get(group_key.as_ref())),
                };
                let since = match group_change {
                    Some(g) if g.offset > s.introduced_by.offset => g.clone(),
                    _ => s.introduced_by.clone(),
                };
                Some((
                    lower(id),
                    Assignable {
                        remote_pc: data.remote_pc,
                        kind: group.map(|(kind, _)| *kind),
                        since,
                    },
                ))
            }
            _ => None,
        })
        .collect();
    for stored in config.all() {
        check_object(&mut checks, stored, &machines);
    }
    let mut failures = checks.failures;
    if !failures.is_empty() {
        failures.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
        failures.dedup();
        return Err(failures);
    }
    Ok(())
}

/// duplicate_id: every object whose lowercased id another object of its kind already took,
/// the earliest written keeping its claim. Returns the claims: lowercased id → object, by
/// kind.
fn claim_ids<'a>(
    config: &'a SiteConfig,
    failures: &mut Vec<ImportFailure>,
) -> BTreeMap<ObjectKind, Lookup<'a, &'a Stored>> {
    let mut claimed: BTreeMap<ObjectKind, Lookup<'_, &Stored>> = BTreeMap::new();
    for (kind, objects) in &config.objects {
        let claims = claimed.entry(*kind).or_default();
        claims.reserve(objects.len());
        for stored in objects.values() {
            let key = lower(stored.object.id());
            match claims.get(key.as_ref()) {
                Some(first) if first.introduced_by.offset <= stored.introduced_by.offset => {
                    failures.push(failure(
                        stored,
                        Rule::DuplicateId,
                        collides(stored, first),
                        stored.introduced_by.clone(),
                    ));
                }
                Some(first) => {
                    failures.push(failure(
                        first,
                        Rule::DuplicateId,
                        collides(first, stored),
                        first.introduced_by.clone(),
                    ));
                    claims.insert(key, stored);
                }
                None => {
                    claims.insert(key, stored);
                }
            }
        }
    }
    claimed
}

/// The validation's findings so far, and the ids references resolve against.
struct Checks<'a> {
    ids: Ids<'a>,
    failures: Vec<ImportFailure>,
}

impl Checks<'_> {
    /// dangling_reference: whether `target` names an object of one of `kinds`; if not, the
    /// failure is recorded against `stored`, naming the change that deleted the target
    /// when one did.
    fn reference(&mut self, stored: &Stored, kinds: &[ObjectKind], target: &str) -> bool {
        if kinds.iter().any(|k| self.ids.has(*k, target)) {
            return true;
        }
        let introduced_by = self.ids.dangling(stored, kinds, target);
        let names: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
        let mut detail = format!("{} {target} does not exist", names.join(" or "));
        if introduced_by.offset != stored.introduced_by.offset {
            detail.push_str(&format!(
                " (deleted by the change at offset {})",
                introduced_by.offset
            ));
        }
        self.failures.push(failure(
            stored,
            Rule::DanglingReference,
            detail,
            introduced_by,
        ));
        false
    }
}

/// What an assignment's check needs of its machine.
struct Assignable {
    /// The machine is Remote PC.
    remote_pc: bool,
    /// Its delivery group's kind (None: the group does not exist).
    kind: Option<DeliveryGroupKind>,
    /// The later of the machine's last write and its group's (or the group's deletion).
    since: IntroducedBy,
}

/// The rules of one object: every reference it makes (each dangling one is a failure of
/// its own, so CSS trace mode lists them all and an admin fixes them in one go), and the
/// rules of its kind. `machines` says what an assignment needs of its machine.
fn check_object(checks: &mut Checks<'_>, stored: &Stored, machines: &Lookup<'_, Assignable>) {
    match &stored.object {
        ConfigObject::Site { data, .. } => {
            if !(60_000..=3_600_000).contains(&data.heartbeat_period_ms) {
                checks.failures.push(failure(
                    stored,
                    Rule::HeartbeatPeriodOutOfRange,
                    format!(
                        "heartbeat_period_ms {} is outside the allowed 60000..=3600000 \
                         (1 minute to 1 hour)",
                        data.heartbeat_period_ms
                    ),
                    stored.introduced_by.clone(),
                ));
            }
        }
        ConfigObject::Zone { .. } | ConfigObject::User { .. } | ConfigObject::Group { .. } => {}
        ConfigObject::DeliveryGroup { .. } => {}
        ConfigObject::Connector { data, .. } => {
            checks.reference(stored, &[ObjectKind::Zone], &data.zone);
        }
        ConfigObject::Machine { data, .. } => {
            checks.reference(stored, &[ObjectKind::Zone], &data.zone);
            checks.reference(stored, &[ObjectKind::DeliveryGroup], &data.delivery_group);
            if data.max_sessions == Some(0) {
                checks.failures.push(failure(
                    stored,
                    Rule::MaxSessionsZero,
                    "max_sessions is 0: a machine must accept at least 1 session".to_string(),
                    stored.introduced_by.clone(),
                ));
            }
        }
        ConfigObject::Resource { data, .. } => {
            for group in &data.delivery_groups {
                checks.reference(stored, &[ObjectKind::DeliveryGroup], group);
            }
        }
        ConfigObject::Entitlement { data, .. } => {
            checks.reference(stored, &[ObjectKind::Resource], &data.resource);
            for principal in &data.principals {
                checks.reference(stored, &[ObjectKind::User, ObjectKind::Group], principal);
            }
        }
        ConfigObject::Assignment { data, .. } => {
            checks.reference(stored, &[ObjectKind::Machine], &data.machine);
            checks.reference(stored, &[ObjectKind::User], &data.user);
            // Whatever the user: a missing user and a machine that cannot be assigned are
            // two things to fix.
            if checks.ids.has(ObjectKind::Machine, &data.machine) {
                if let Some(machine) = machines.get(lower(&data.machine).as_ref()) {
                    check_assignable(checks, stored, &data.machine, machine);
                }
            }
        }
    }
}

/// assignment_not_static: only machines of a single_session_static group, or Remote PC
/// machines, can be assigned.
fn check_assignable(
    checks: &mut Checks<'_>,
    stored: &Stored,
    machine: &str,
    assignable: &Assignable,
) {
    let Assignable {
        remote_pc,
        kind,
        since,
    } = assignable;
    if *remote_pc || *kind == Some(DeliveryGroupKind::SingleSessionStatic) {
        return;
    }
    let group = match kind {
        Some(DeliveryGroupKind::MultiSession) => "a multi_session group",
        Some(DeliveryGroupKind::SingleSessionPooled) => "a single_session_pooled group",
        _ => "no delivery group",
    };
    // Introduced by the assignment's last write, even when a later change to its
    // machine or group broke it (`since` says when those last changed, for the detail):
    // `whatif --without-bad-changes` removes the ops of the object a failure names at the
    // change it names, and a change that made no op on the assignment would lose
    // unrelated ops instead (found by a review; see docs/engine.md).
    let introduced_by = stored.introduced_by.clone();
    let changed = if since.offset > stored.introduced_by.offset {
        format!(
            " (its machine or delivery group last changed at offset {})",
            since.offset
        )
    } else {
        String::new()
    };
    checks.failures.push(failure(
        stored,
        Rule::AssignmentNotStatic,
        format!(
            "machine {machine} is in {group} and not remote_pc: only machines of a \
             single_session_static group or Remote PC machines can be assigned{changed}"
        ),
        introduced_by,
    ));
}

fn failure(
    stored: &Stored,
    rule: Rule,
    detail: String,
    introduced_by: IntroducedBy,
) -> ImportFailure {
    ImportFailure {
        kind: stored.object.kind(),
        id: stored.object.id().to_string(),
        rule,
        detail,
        introduced_by,
    }
}

/// The `duplicate_id` detail of `loser`, whose id `keeper` already claims.
fn collides(loser: &Stored, keeper: &Stored) -> String {
    format!(
        "{} {} collides with {} (written at offset {}): ids of one kind must differ by more \
         than case",
        loser.object.kind(),
        loser.object.id(),
        keeper.object.id(),
        keeper.introduced_by.offset
    )
}

/// Indexes a configuration for election and brokering, without validating it (the cloud
/// broker works from whatever the site holds; a connector only from a validated copy).
pub fn index(config: &SiteConfig) -> Snapshot {
    let mut snapshot = Snapshot {
        version: config.version,
        objects: config.len(),
        site: config.site(),
        zone_connectors: BTreeMap::new(),
        connector_zone: BTreeMap::new(),
        machines: Default::default(),
        by_rank: Vec::new(),
        groups: BTreeMap::new(),
        resources: BTreeMap::new(),
        user_groups: Default::default(),
        assignments: BTreeMap::new(),
        assigned: BTreeSet::new(),
        group_zone_machines: BTreeMap::new(),
        fits: Fits::default(),
    };
    let count = |kind| config.objects.get(&kind).map_or(0, |m| m.len());
    snapshot.user_groups.reserve(count(ObjectKind::User));
    snapshot.machines.reserve(count(ObjectKind::Machine));
    for stored in config.all() {
        snapshot.add_named(&stored.object);
    }
    // Machines and resources need the groups; entitlements and assignments need both.
    for stored in config.all() {
        match &stored.object {
            ConfigObject::Machine { id, data } => snapshot.add_machine(id, data),
            ConfigObject::Resource { id, data } => snapshot.add_resource(id, data),
            _ => {}
        }
    }
    snapshot.rank_machines();
    for stored in config.all() {
        snapshot.add_grant(&stored.object);
    }
    snapshot
}

impl Snapshot {
    /// Connectors, delivery groups and users.
    fn add_named(&mut self, object: &ConfigObject) {
        match object {
            ConfigObject::Connector { id, data } => {
                let zone = data.zone.to_lowercase();
                self.zone_connectors
                    .entry(zone.clone())
                    .or_default()
                    .insert(id.clone());
                self.connector_zone.insert(id.to_lowercase(), zone);
            }
            ConfigObject::DeliveryGroup { id, data } => {
                let pooled = data.kind == DeliveryGroupKind::SingleSessionPooled;
                let reuse = data
                    .reuse_machines_without_shutdown_in_outage
                    .unwrap_or(self.site.default_reuse_machines_without_shutdown_in_outage);
                let entry = GroupEntry {
                    id: id.clone(),
                    kind: data.kind,
                    power_managed: data.power_managed,
                    shutdown_after_use: data.shutdown_desktops_after_use.unwrap_or(pooled),
                    reuse_in_outage: reuse,
                    session_limit_per_user: data.session_limit_per_user,
                    restrict_to_tag: data.restrict_to_tag.clone(),
                };
                self.groups.insert(id.to_lowercase(), entry);
            }
            ConfigObject::User { id, data } => {
                let groups = data.groups.iter().map(|g| g.to_lowercase()).collect();
                self.user_groups.insert(id.to_lowercase(), groups);
            }
            _ => {}
        }
    }

    /// A machine, in its group's and zone's lists.
    fn add_machine(&mut self, id: &str, data: &crate::config::MachineData) {
        let group = lower(&data.delivery_group);
        let multi = self
            .groups
            .get(group.as_ref())
            .is_some_and(|g| g.kind == DeliveryGroupKind::MultiSession);
        let zone = lower(&data.zone);
        let key = compact_str::CompactString::from(lower(id).as_ref());
        // Most machines join an existing group and zone: look up before allocating keys.
        let zones = match self.group_zone_machines.get_mut(group.as_ref()) {
            Some(zones) => zones,
            None => self
                .group_zone_machines
                .entry(group.to_string())
                .or_default(),
        };
        match zones.get_mut(zone.as_ref()) {
            Some(machines) => machines,
            None => zones.entry(zone.to_string()).or_default(),
        }
        .insert(key.to_string());
        let (zone, group) = (zone.into_owned(), group.into_owned());
        let entry = MachineEntry {
            id: id.to_string(),
            zone,
            delivery_group: group,
            max_sessions: data.max_sessions.unwrap_or(if multi { 20 } else { 1 }),
            tags: data.tags.clone(),
            remote_pc: data.remote_pc,
            maintenance: data.maintenance,
            rank: 0,
        };
        self.machines.insert(key, entry);
    }

    /// A resource (its principals come with the entitlements).
    fn add_resource(&mut self, id: &str, data: &crate::config::ResourceData) {
        let entry = ResourceEntry {
            id: id.to_string(),
            delivery_groups: data
                .delivery_groups
                .iter()
                .map(|g| g.to_lowercase())
                .collect(),
            zone_preference: data.zone_preference.as_ref().map(|z| z.to_lowercase()),
            principals: BTreeSet::new(),
        };
        self.resources.insert(id.to_lowercase(), entry);
    }

    /// Ranks machines in FQDN order (ids are lowercase: byte order is FQDN order).
    fn rank_machines(&mut self) {
        let mut ids: Vec<compact_str::CompactString> = self.machines.keys().cloned().collect();
        ids.sort_unstable();
        for (rank, id) in ids.iter().enumerate() {
            self.machines.get_mut(id).expect("listed").rank = rank as u32;
        }
        self.by_rank = ids;
    }

    /// Entitlements and assignments.
    fn add_grant(&mut self, object: &ConfigObject) {
        match object {
            ConfigObject::Entitlement { data, .. } => {
                if let Some(r) = self.resources.get_mut(lower(&data.resource).as_ref()) {
                    r.principals
                        .extend(data.principals.iter().map(|p| p.to_lowercase()));
                }
            }
            ConfigObject::Assignment { data, .. } => {
                let machine = lower(&data.machine).into_owned();
                if let Some(m) = self.machines.get(machine.as_str()) {
                    let users = self
                        .assignments
                        .entry(m.delivery_group.clone())
                        .or_default();
                    users.insert(data.user.to_lowercase(), machine.clone());
                    self.assigned.insert(machine);
                }
            }
            _ => {}
        }
    }
}
