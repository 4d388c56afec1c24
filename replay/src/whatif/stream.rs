//! The what-if's records: the source's records with the plan's changes applied, in log
//! order, never written anywhere.
//!
//! Invariant: every source record is handed out once, in order, changed only as the plan
//! says; added records are placed by `ts` (after every source record at or before their
//! time) and carry the offset of the source record they precede, so outputs still point at
//! the source log. Config versions stay strictly increasing: a patched `config.change` takes
//! the next version and later versions move up by one.

use std::collections::BTreeSet;

use lhc_engine::config::{ConfigObject, ConfigOp, ObjectKind, SiteData};
use lhc_engine::record::EngineParams;
use lhc_engine::{Record, Ts};

use super::plan::{with_setting, Plan};
use crate::drive::Records;
use crate::source::{Decoded, SourceError};

/// What the stream saw, to check the plan against the log afterwards.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Records each `--drop` filter removed, in plan order.
    pub dropped: Vec<u64>,
    /// Config ops removed for `--without-bad-changes`.
    pub ops_dropped: u64,
    /// Later deletes of objects whose upsert was removed, removed with it.
    pub deletes_dropped: u64,
    /// Delivery groups the log upserts.
    pub groups: BTreeSet<String>,
    /// Upserts of the site object rewritten or added.
    pub site_upserts: u64,
    /// Upserts of each `--group` rewritten, in plan order.
    pub group_upserts: Vec<u64>,
    /// Added records the engine refused: (origin, index among the quarantined records).
    pub refused: Vec<(String, usize)>,
    /// Records quarantined in all.
    pub quarantined: usize,
    /// Config versions moved up to make room for patched changes: (first source version
    /// moved, by how much at the end).
    pub versions_shifted: Option<(u64, u64)>,
    /// Offset of the last source record read.
    pub last_source_offset: Option<u64>,
    /// Records handed out.
    pub records: u64,
    /// Time of the last source record read.
    pub last_source_ts: Option<Ts>,
}

/// A source with the plan applied.
pub struct Modified<'a, R> {
    source: R,
    plan: &'a Plan,
    /// The next source record, read ahead to place added records before it.
    peeked: Option<Decoded>,
    /// Whether the source has ended.
    ended: bool,
    /// Next patch record to merge.
    next_patch: usize,
    /// Whether the engine.params record of `--set` was handed out.
    params_sent: bool,
    /// Whether a `config.change` was seen (the first gets the site object if it lacks it).
    first_change_seen: bool,
    /// Last config version handed out.
    last_version: u64,
    /// Versions added so far by patched changes.
    shift: u64,
    /// Origin of the record last handed out, when it was added.
    last_added: Option<String>,
    /// Offset of the last source record handed out.
    last_source: Option<u64>,
    /// Objects whose upsert a removed op made: a later delete of one goes too.
    unmade: BTreeSet<(ObjectKind, String)>,
    /// The last source offset to read (the one the "as it happened" side read last), so
    /// a live log read twice gives both sides the same records.
    limit: Option<u64>,
    /// What was seen.
    pub seen: Seen,
}

impl<'a, R: Records> Modified<'a, R> {
    /// The records of `source` with `plan` applied.
    pub fn new(source: R, plan: &'a Plan) -> Self {
        Modified {
            source,
            plan,
            peeked: None,
            ended: false,
            next_patch: 0,
            params_sent: plan.params.is_empty(),
            first_change_seen: false,
            last_version: 0,
            shift: 0,
            last_added: None,
            last_source: None,
            unmade: BTreeSet::new(),
            limit: None,
            seen: Seen {
                dropped: vec![0; plan.drops.len()],
                group_upserts: vec![0; plan.groups.len()],
                ..Seen::default()
            },
        }
    }

    /// Reads no source record past `offset`.
    pub fn up_to(mut self, offset: Option<u64>) -> Self {
        self.limit = offset;
        self
    }

    /// The next source record that is not dropped.
    fn fill(&mut self) -> Result<(), SourceError> {
        while self.peeked.is_none() && !self.ended {
            match self.source.next_record()? {
                Some((offset, _)) if self.limit.is_some_and(|l| offset > l) => {
                    self.ended = true;
                }
                None => self.ended = true,
                Some((offset, Ok(record))) => {
                    self.seen.last_source_offset = Some(offset);
                    self.seen.last_source_ts = Some(record.ts());
                    if let Some(i) = self.plan.drops.iter().position(|f| f.matches(&record)) {
                        self.seen.dropped[i] += 1;
                        continue;
                    }
                    self.peeked = Some((offset, Ok(record)));
                }
                Some(other) => {
                    self.seen.last_source_offset = Some(other.0);
                    self.peeked = Some(other);
                }
            }
        }
        Ok(())
    }

    /// The offset added records take: the next source record's, or one past the last.
    fn offset_here(&self) -> u64 {
        match &self.peeked {
            Some((o, _)) => *o,
            None => self.last_source.map_or(0, |o| o + 1),
        }
    }

    /// The `--set` parameters as one record at `ts`.
    fn params_record(&self, ts: Ts) -> Record {
        let mut params = EngineParams {
            ts,
            ..EngineParams::default()
        };
        for s in &self.plan.params {
            params = with_setting(&params, s).expect("checked when the plan was made");
        }
        Record::EngineParams(Box::new(params))
    }

    /// A source record with the plan's rewrites.
    fn rewrite(&mut self, offset: u64, record: Record) -> Record {
        match record {
            Record::ConfigChange(mut change) => {
                let before = change.ops.len();
                let drop_ops = &self.plan.drop_ops;
                if drop_ops.iter().any(|(o, _, _)| *o == offset) {
                    let named = |op: &ConfigOp| {
                        let (kind, id) = op_target(op);
                        drop_ops.contains(&(offset, kind, id.to_string()))
                    };
                    // A failing object no op of this change names: the change broke it by
                    // deleting what it refers to, so its deletes go too. (Per failing
                    // object: a change that also wrote another failing object kept its
                    // deletes, and the what-if went on failing while saying the bad
                    // changes were not made; found by an independent check.)
                    let orphaned =
                        drop_ops
                            .iter()
                            .filter(|(o, _, _)| *o == offset)
                            .any(|(_, kind, id)| {
                                !change.ops.iter().any(|op| {
                                    let (k, i) = op_target(op);
                                    k == *kind && i == id
                                })
                            });
                    let unmade = &mut self.unmade;
                    change.ops.retain(|op| {
                        let drop = named(op) || (orphaned && matches!(op, ConfigOp::Delete(_)));
                        if drop {
                            if let ConfigOp::Upsert(o) = op {
                                unmade.insert((o.kind(), o.id().to_string()));
                            }
                        }
                        !drop
                    });
                }
                self.seen.ops_dropped += (before - change.ops.len()) as u64;
                if !self.unmade.is_empty() {
                    // A later delete of an object whose upsert was removed would name what
                    // the what-if never made: it goes too (a re-creation ends that).
                    let before = change.ops.len();
                    let unmade = &mut self.unmade;
                    change.ops.retain(|op| match op {
                        ConfigOp::Delete(r) => !unmade.remove(&(r.kind, r.id.clone())),
                        ConfigOp::Upsert(o) => {
                            unmade.remove(&(o.kind(), o.id().to_string()));
                            true
                        }
                    });
                    self.seen.deletes_dropped += (before - change.ops.len()) as u64;
                }
                self.settings(&mut change.ops);
                if self.shift > 0 {
                    self.seen
                        .versions_shifted
                        .get_or_insert((change.version, 0))
                        .1 = self.shift;
                    change.version += self.shift;
                }
                self.last_version = change.version;
                Record::ConfigChange(change)
            }
            Record::EngineParams(mut params) if !self.plan.params.is_empty() => {
                // The log's own later parameter records keep the what-if's values.
                for s in &self.plan.params {
                    let value = serde_json::to_value(&params).expect("params serialize");
                    if value.get(&s.key).is_some() {
                        params = with_setting(&params, s).expect("checked in the plan");
                    }
                }
                Record::EngineParams(params)
            }
            other => other,
        }
    }

    /// The `--site` and `--group` settings on a change's upserts (source or patched: a
    /// later change never undoes them); the first change gets the site object if it lacks
    /// it.
    fn settings(&mut self, ops: &mut Vec<ConfigOp>) {
        if !self.first_change_seen && !self.plan.site.is_empty() {
            let has_site = ops
                .iter()
                .any(|op| matches!(op, ConfigOp::Upsert(ConfigObject::Site { .. })));
            if !has_site {
                ops.insert(
                    0,
                    ConfigOp::Upsert(ConfigObject::Site {
                        id: "site".into(),
                        data: SiteData::default(),
                    }),
                );
            }
        }
        self.first_change_seen = true;
        for op in ops.iter_mut() {
            let ConfigOp::Upsert(object) = op else {
                continue;
            };
            match object {
                ConfigObject::Site { data, .. } if !self.plan.site.is_empty() => {
                    for s in &self.plan.site {
                        *data = with_setting(data, s).expect("checked in the plan");
                    }
                    self.seen.site_upserts += 1;
                }
                ConfigObject::DeliveryGroup { id, data } => {
                    self.seen.groups.insert(id.clone());
                    for (i, (group, s)) in self.plan.groups.iter().enumerate() {
                        if group == id {
                            // The plan checked the value against the type, whatever the
                            // group's kind.
                            *data = with_setting(data, s).expect("checked in the plan");
                            self.seen.group_upserts[i] += 1;
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// A patch record ready to apply (a `config.change` takes the next version and the
    /// plan's settings).
    fn added(&mut self, record: &Record) -> Record {
        match record {
            Record::ConfigChange(change) => {
                let mut change = change.clone();
                self.settings(&mut change.ops);
                change.version = self.last_version + 1;
                self.last_version = change.version;
                self.shift += 1;
                Record::ConfigChange(change)
            }
            other => other.clone(),
        }
    }

    /// What the stream saw, once it has ended.
    pub fn finish(self) -> Seen {
        self.seen
    }
}

/// The (kind, id) an op names.
fn op_target(op: &ConfigOp) -> (ObjectKind, &str) {
    match op {
        ConfigOp::Upsert(o) => (o.kind(), o.id()),
        ConfigOp::Delete(r) => (r.kind, r.id.as_str()),
    }
}

impl<R: Records> Records for Modified<'_, R> {
    fn next_record(&mut self) -> Result<Option<Decoded>, SourceError> {
        self.fill()?;
        self.last_added = None;
        let peeked_ts = match &self.peeked {
            Some((_, Ok(r))) => Some(r.ts()),
            _ => None,
        };
        if !self.params_sent {
            // Before the first decodable record (source or patch), at its time: the
            // parameters hold from the start.
            let first_patch = self.plan.patch.get(self.next_patch).map(|p| p.record.ts());
            let first = match (peeked_ts, first_patch) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(ts) = first {
                self.params_sent = true;
                self.seen.records += 1;
                self.last_added = Some("--set".into());
                let offset = self.offset_here();
                return Ok(Some((offset, Ok(self.params_record(ts)))));
            }
        }
        if let Some(patch) = self.plan.patch.get(self.next_patch) {
            let ts = patch.record.ts();
            // Placed after every source record at or before its time; an undecodable
            // source record has no time and keeps its place.
            let due = match &self.peeked {
                // After the log's last record: `check` refuses the patch. Applying it
                // first would make the timers of the whole gap fire (years of periodic
                // reports for a zone left in LHC mode) only to be refused afterwards.
                None if self.seen.last_source_ts.is_some_and(|last| ts > last) => {
                    return Ok(None);
                }
                None => true,
                Some((_, Ok(r))) => r.ts() > ts,
                Some((_, Err(_))) => false,
            };
            if due {
                self.next_patch += 1;
                let record = self.added(&patch.record);
                self.last_added = Some(patch.origin.clone());
                self.seen.records += 1;
                let offset = self.offset_here();
                return Ok(Some((offset, Ok(record))));
            }
        }
        let Some((offset, decoded)) = self.peeked.take() else {
            return Ok(None);
        };
        self.last_source = Some(offset);
        self.seen.records += 1;
        let decoded = decoded.map(|r| self.rewrite(offset, r));
        Ok(Some((offset, decoded)))
    }

    fn note_quarantined(&mut self) {
        if let Some(origin) = self.last_added.take() {
            self.seen.refused.push((origin, self.seen.quarantined));
        }
        self.seen.quarantined += 1;
        self.source.note_quarantined();
    }

    /// The source's next records, unmodified: a hint for [`lhc_engine::Engine::warm`],
    /// which reads what they name and changes nothing, so rewrites and added records that
    /// it does not see only leave those records' lookups cold.
    fn upcoming(&self) -> &[Decoded] {
        self.source.upcoming()
    }
}
