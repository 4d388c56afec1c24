//! What if: the recorded log replayed twice — as it happened, and with changes (engine
//! parameters, site or group settings, added records, dropped records, the bad config ops
//! removed) — and the difference in launch decisions, LHC episodes, elections and failed
//! imports.
//!
//! Invariant: observations are replayed as recorded on both sides; only the engine's
//! decisions can differ, so every difference comes from the changes. The "as it happened"
//! side is a plain replay: its digest is the one `lhc replay --digest` prints. Nothing is
//! written to the source.

mod compare;
mod plan;
mod side;
mod stream;
mod tee;

use std::collections::BTreeMap;

use lhc_engine::config::ObjectKind;
use rustc_hash::FxHashSet;

pub use compare::{
    compare, thousands, ChangedDecision, FlaggedMachine, Outcome, SideSummary, Total, WhatIf,
    ZoneCompare, ZoneSummary, SESSION_POLICY,
};
pub use plan::{Filter, PatchRecord, Plan, Setting};
pub use side::{replay_side, Decision, Decisions, Names, Side, SideOptions, Verified, ZoneCounts};
pub use stream::{Modified, Seen};
pub use tee::{Follow, Tee};

use crate::drive::Records;
use crate::source::{Source, SourceError};

/// Why a what-if could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    /// A change is invalid, or does not fit this log; `item` names it.
    #[error("{item}: {why}")]
    Bad {
        /// The change at fault, as given (or the patch line).
        item: String,
        /// What is wrong, and what to do.
        why: String,
    },
    /// The source could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
}

impl WhatIfError {
    pub(crate) fn bad(item: impl Into<String>, why: String) -> Self {
        WhatIfError::Bad {
            item: item.into(),
            why,
        }
    }
}

/// The what-if side: the records with `plan` applied, replayed up to the source offset
/// `limit` (the last one the other side read). Returns the side and what the stream saw
/// (to check the plan against the log).
pub fn replay_modified<R: Records>(
    records: R,
    description: &str,
    plan: &Plan,
    limit: Option<u64>,
    forensics: bool,
) -> Result<(Side, Seen), WhatIfError> {
    let mut modified = Modified::new(records, plan).up_to(limit);
    let options = SideOptions {
        forensics,
        verify: None,
    };
    let side = replay_side(&mut modified, description, &options)?;
    Ok((side, modified.finish()))
}

/// Checks what the stream saw against the plan: every change must have found its target.
/// Returns notes on what the changes did.
pub fn check(
    plan: &Plan,
    seen: &Seen,
    before: &Side,
    after: &Side,
) -> Result<Vec<String>, WhatIfError> {
    if let Some((origin, index)) = seen.refused.first() {
        let why = after
            .quarantined
            .get(*index)
            .map(|(_, e)| e.clone())
            .unwrap_or_default();
        return Err(WhatIfError::bad(
            origin,
            format!("the engine cannot apply it here: {why}"),
        ));
    }
    if let (Some(last), Some(late)) = (
        seen.last_source_ts,
        plan.patch
            .iter()
            .find(|p| Some(p.record.ts()) > seen.last_source_ts),
    ) {
        return Err(WhatIfError::bad(
            &late.origin,
            format!(
                "its ts {} is after the log's last record ({last}): the what-if would \
                 stretch the log past what was recorded",
                late.record.ts()
            ),
        ));
    }
    // Source records the what-if makes unusable: the changes broke the log (a dropped
    // change that a later one builds on, a delete of what was never made...).
    let was: FxHashSet<u64> = before.quarantined.iter().map(|(o, _)| *o).collect();
    let broken: Vec<&(u64, String)> = after
        .quarantined
        .iter()
        .filter(|(o, _)| !was.contains(o))
        .collect();
    if let Some((offset, why)) = broken.first() {
        return Err(WhatIfError::bad(
            plan.described.join("; "),
            format!(
                "these changes make the log invalid: {} record(s) of it could no longer be \
                 applied, the first at offset {offset}: {why}",
                broken.len()
            ),
        ));
    }
    for (i, (group, setting)) in plan.groups.iter().enumerate() {
        if seen.group_upserts[i] == 0 {
            let known: Vec<&str> = seen.groups.iter().map(String::as_str).collect();
            let hint = seen
                .groups
                .iter()
                .find(|g| g.eq_ignore_ascii_case(group))
                .map(|g| format!(" (ids are exact: did you mean {g}?)"))
                .unwrap_or_default();
            return Err(WhatIfError::bad(
                format!("--group {group}:{}", setting.key),
                format!(
                    "no delivery group {group:?} in this log{hint}; its groups: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
    }
    if !plan.site.is_empty() && seen.site_upserts == 0 {
        return Err(WhatIfError::bad(
            "--site",
            "this log holds no config.change: there is no site to change".into(),
        ));
    }
    for (filter, n) in plan.drops.iter().zip(&seen.dropped) {
        if *n == 0 {
            return Err(WhatIfError::bad(
                format!("--drop '{}'", filter.text),
                "matched no record of this log (values are exact; end one with * to match a \
                 prefix)"
                    .into(),
            ));
        }
    }
    let mut notes = Vec::new();
    for (filter, n) in plan.drops.iter().zip(&seen.dropped) {
        notes.push(format!("--drop '{}' removed {n} record(s)", filter.text));
    }
    if seen.ops_dropped > 0 {
        notes.push(format!(
            "{} config op(s) that introduced failed imports removed{}",
            seen.ops_dropped,
            match seen.deletes_dropped {
                0 => String::new(),
                n => format!(", and {n} later delete(s) of the objects they made"),
            }
        ));
    }
    if let Some((first, by)) = seen.versions_shifted {
        notes.push(format!(
            "patched config changes took new versions: each of the log's later versions is \
             one higher per patched change before it (from version {first} on, up to {by} \
             higher)"
        ));
    }
    if !plan.patch.is_empty() {
        notes.push(format!(
            "{} patch record(s) merged by time; each carries the offset of the log record it \
             precedes",
            plan.patch.len()
        ));
    }
    Ok(notes)
}

/// What a what-if does besides applying its plan.
#[derive(Clone, Debug, Default)]
pub struct WhatIfOptions {
    /// Also remove the config ops that introduced every failed import.
    pub without_bad_changes: bool,
    /// Verify the "as it happened" side against this digest chain (offset → digest).
    pub verify: Option<BTreeMap<u64, String>>,
}

/// Rounds of `--without-bad-changes` at most: each removes the ops the previous round's
/// 505s still name (a 505 names only its first failure unless CSS tracing is on).
const BAD_CHANGE_ROUNDS: usize = 8;

/// Removes the bad config ops until no failed import names a config change, or the
/// rounds run out: returns the plan, the what-if side, what its stream saw, and notes.
pub fn without_bad_changes<F>(
    open: F,
    description: &str,
    before: &Side,
    plan: &Plan,
) -> Result<(Plan, Side, Seen, Vec<String>), WhatIfError>
where
    F: Fn() -> Result<Source, SourceError>,
{
    let mut plan = plan.clone();
    let base = plan.described.clone();
    let mut removed = Vec::new();
    let (mut new, mut notes) = bad_causes(before);
    let mut round = 0;
    loop {
        new.retain(|(key, _)| !plan.drop_ops.contains(key));
        for (key, text) in new.drain(..) {
            plan.drop_ops.insert(key);
            removed.push(text);
        }
        plan.described = base.clone();
        if !removed.is_empty() {
            plan.described.push(format!(
                "the {} config op(s) that introduced the failed imports not made",
                removed.len()
            ));
        }
        round += 1;
        let (after, seen) = replay_modified(open()?, description, &plan, before.last_offset, true)?;
        let (all, _) = bad_causes(&after);
        let (more, again): (Vec<_>, Vec<_>) = all
            .into_iter()
            .partition(|(key, _)| !plan.drop_ops.contains(key));
        if more.is_empty() || round == BAD_CHANGE_ROUNDS {
            if !more.is_empty() {
                notes.push(format!(
                    "after {round} rounds, {} more config op(s) still fail imports: see `lhc \
                     forensics sync` on the what-if's log",
                    more.len()
                ));
            }
            // Never claim the bad changes gone while the what-if still fails on them.
            for (_, text) in &again {
                notes.push(format!(
                    "still failing in the what-if, though its op was not made: {text}"
                ));
            }
            notes.extend(removed.iter().map(|r| format!("not made: {r}")));
            return Ok((plan, after, seen, notes));
        }
        new = more;
    }
}

/// A config op by the offset of its change, its object's kind and id.
type BadOp = (u64, ObjectKind, String);

/// The ops a side's failed imports blame — ((offset, kind, id), in words) — and notes (the
/// storage faults, which stay: a disk failing is an observation, not a change).
fn bad_causes(side: &Side) -> (Vec<(BadOp, String)>, Vec<String>) {
    let mut causes = Vec::new();
    let mut notes = Vec::new();
    let Some(forensics) = &side.forensics else {
        return (causes, notes);
    };
    let mut storage = 0;
    for cause in &forensics.root_causes {
        let (Some(version), Some(kind)) = (
            cause.introduced_by.version,
            ObjectKind::from_name(&cause.kind),
        ) else {
            storage += 1;
            continue;
        };
        // A change that broke the object by deleting what it refers to loses its deletes,
        // not an op on the object: say so (the note named the object as if its op went).
        let by_delete = cause.detail.contains("(deleted by the change at offset");
        causes.push((
            (cause.introduced_by.offset, kind, cause.id.clone()),
            format!(
                "{}{} {} (version {version}, offset {}: {})",
                if by_delete {
                    "the delete that broke "
                } else {
                    ""
                },
                cause.kind,
                cause.id,
                cause.introduced_by.offset,
                cause.rule
            ),
        ));
    }
    if storage > 0 {
        notes.push(format!(
            "{storage} failure cause(s) from storage faults kept: they are observations, \
             not changes"
        ));
    }
    (causes, notes)
}

/// Runs a what-if on the source `open` gives. Both sides run at once on two threads from
/// one read of the source ([`Tee`]). With `without_bad_changes` the "as it happened" side
/// runs first, alone, to find the bad ops (a 505 can name a change made any time before
/// it), then the what-if reads the source again (up to the same offset), a round per
/// layer of failures, unless there is nothing to remove.
pub fn whatif<F>(open: F, plan: &Plan, options: &WhatIfOptions) -> Result<WhatIf, WhatIfError>
where
    F: Fn() -> Result<Source, SourceError>,
{
    let mut source = open()?;
    let description = source.describe().to_string();
    let side_options = SideOptions {
        forensics: options.without_bad_changes,
        verify: options.verify.clone(),
    };
    if options.without_bad_changes {
        let before = replay_side(&mut source, &description, &side_options)?;
        drop(source);
        verified(&before)?;
        let (causes, _) = bad_causes(&before);
        let mut notes = Vec::new();
        if causes.is_empty() {
            notes
                .push("no config change failed an import: there is no bad change to remove".into());
            if plan.is_empty() {
                // Nothing to remove and nothing else asked: the what-if is the log itself.
                return Ok(compare(plan, notes, &before, &before));
            }
        }
        let (plan, after, seen, more) = without_bad_changes(&open, &description, &before, plan)?;
        if seen.last_source_offset < before.last_offset {
            return Err(WhatIfError::bad(
                "--without-bad-changes",
                format!(
                    "{description} could not be read again up to offset {} (read twice: a \
                     pipe gives its records once); save it to a file first",
                    before.last_offset.unwrap_or_default()
                ),
            ));
        }
        notes.extend(more);
        notes.extend(check(&plan, &seen, &before, &after)?);
        return Ok(compare(&plan, notes, &before, &after));
    }
    let (send, receive) = std::sync::mpsc::sync_channel(8);
    let (before, modified) = std::thread::scope(|scope| {
        let follower =
            scope.spawn(|| replay_modified(Follow::new(receive), &description, plan, None, false));
        let before = replay_side(&mut Tee::new(source, send), &description, &side_options);
        let modified = follower.join().expect("the what-if replay does not panic");
        (before, modified)
    });
    let before = before?;
    verified(&before)?;
    let (after, seen) = modified?;
    let notes = check(plan, &seen, &before, &after)?;
    Ok(compare(plan, notes, &before, &after))
}

/// Refuses a replay that does not reproduce the recorded digest chain.
fn verified(before: &Side) -> Result<(), WhatIfError> {
    let Some(v) = &before.verified else {
        return Ok(());
    };
    if let Some((offset, expected, actual)) = &v.first_difference {
        return Err(WhatIfError::bad(
            "--verify",
            format!(
                "the replay does not reproduce the recorded chain: after offset {offset} the \
                 chain says {expected}, the replay {actual}; a what-if on this log would not \
                 start from what happened (was it recorded by another version of lhc?)"
            ),
        ));
    }
    if v.links == 0 {
        return Err(WhatIfError::bad(
            "--verify",
            "no digest of the chain is at an offset of this log: it is another log's chain".into(),
        ));
    }
    Ok(())
}
