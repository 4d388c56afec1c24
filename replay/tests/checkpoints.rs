//! Checkpoints (issue 20): the state at an instant computed from the nearest checkpoint is
//! the state a replay from the first record computes, at 50 random instants; a damaged, a
//! foreign or another build's checkpoint is never used.

use std::path::Path;

use lhc_engine::Ts;
use lhc_log::{EmbeddedLog, EmbeddedOptions, FsyncPolicy, Log};
use lhc_replay::checkpoint::{self, Checkpoint};
use lhc_replay::query::{cut_from, Resume};
use lhc_replay::{cut_at, BadConfig, Cut, Scenario, SimOptions, Simulator, Source, SourceSpec};
use rand::{Rng, SeedableRng};

const BUILD: &str = "test build";
const EVERY: u64 = 3_000;

/// A site with an outage, a forced outage and a failed import, plus an undecodable record
/// and a record older than its predecessor (both quarantined) in the middle.
fn site_records() -> Vec<Vec<u8>> {
    let options = SimOptions {
        seed: 5,
        zones: 2,
        connectors_per_zone: 2,
        vdas_per_zone: 150,
        users: 300,
        hours: 3.0,
        logon_rate: 1.0,
        scenarios: vec![
            Scenario::CloudOutage {
                start_s: 3_600,
                duration_s: 1_800,
            },
            Scenario::ForcedOutage {
                zone: None,
                start_s: 7_800,
                duration_s: 900,
            },
            Scenario::BadConfig {
                at_s: 5_000,
                kind: BadConfig::DanglingReference,
            },
        ],
        ..SimOptions::default()
    };
    let mut records = Vec::new();
    Simulator::new(options)
        .unwrap()
        .run(
            &mut |bytes| {
                records.push(bytes.to_vec());
                Ok(())
            },
            &mut |_| {},
        )
        .unwrap();
    let at = records.len() * 2 / 5;
    records.insert(at, b"{not json".to_vec());
    let old = records[10].clone();
    records.insert(records.len() * 3 / 5, old);
    records
}

fn write_log(dir: &Path, records: &[Vec<u8>]) {
    let log = EmbeddedLog::open(
        dir,
        EmbeddedOptions {
            fsync: FsyncPolicy::Never,
            ..EmbeddedOptions::default()
        },
    )
    .unwrap();
    for chunk in records.chunks(5_000) {
        let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        log.append(&refs).unwrap();
    }
}

fn from_start(dir: &Path, at: Ts) -> Cut {
    cut_at(
        &mut Source::open(&SourceSpec::Path(dir.into())).unwrap(),
        at,
    )
    .unwrap()
}

/// The cut at `at` through `checkpoint::resume`: the offset it started from, the cut and
/// the warnings.
fn from_checkpoint(dir: &Path, at: Ts) -> (Option<u64>, Cut, Vec<String>) {
    let mut used = None;
    let (cut, warnings) = checkpoint::resume(
        dir,
        BUILD,
        |h| h.max_ts.is_none_or(|max| max <= at),
        |found: Option<Checkpoint>| -> Result<Cut, checkpoint::CheckpointError> {
            used = found.as_ref().map(|c| c.header.next_offset);
            Ok(match found {
                None => from_start(dir, at),
                Some(Checkpoint { header, engine, .. }) => {
                    let log = EmbeddedLog::open_read_only(dir).unwrap();
                    let mut source = Source::from_log_at(Box::new(log), header.next_offset)?;
                    source.count_earlier_quarantines(header.quarantined);
                    let resume = Resume {
                        last_offset: Some(header.next_offset - 1),
                        first_ts: header.first_ts,
                        last_ts: header.last_ts,
                    };
                    cut_from(&mut source, engine, Some(resume), at)?
                }
            })
        },
    )
    .unwrap();
    (used, cut, warnings)
}

/// Everything a query answers from, as text: the engine (by digest and connector view),
/// the span facts, and the history of the records from `from` on.
fn answer(cut: &Cut, from: u64) -> String {
    let history: Vec<_> = cut.history.iter().filter(|(o, _)| *o >= from).collect();
    serde_json::json!({
        "digest": cut.engine.digest(),
        "connectors": cut.engine.connector_summaries(),
        "last_offset": cut.last_offset,
        "first_ts": cut.first_ts,
        "last_ts": cut.last_ts,
        "more_after": cut.more_after,
        "history": history,
    })
    .to_string()
}

fn first_and_last(records: &[Vec<u8>]) -> (Ts, Ts) {
    let ts: Vec<Ts> = records
        .iter()
        .filter_map(|r| lhc_engine::decode_record(r).ok().map(|r| r.ts()))
        .collect();
    (ts[0], *ts.iter().max().unwrap())
}

/// The site's log in a temporary folder (its guard, the log's directory, its records).
fn written_log() -> (tempfile::TempDir, std::path::PathBuf, Vec<Vec<u8>>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let records = site_records();
    write_log(&dir, &records);
    (tmp, dir, records)
}

#[test]
fn the_state_from_the_nearest_checkpoint_is_the_state_from_the_start_at_50_random_instants() {
    let (_tmp, dir, records) = written_log();
    let done = checkpoint::refresh(&dir, EVERY, BUILD, false, |_| {}).unwrap();
    let n = records.len() as u64;
    assert_eq!(done.written.len() as u64, n / EVERY, "{done:?}");
    assert!(
        done.written.len() >= 8,
        "too few checkpoints to test: {done:?}"
    );

    let (first, last) = first_and_last(&records);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20);
    let mut started_late = 0;
    for _ in 0..50 {
        let at = Ts(rng.random_range(first.0..=last.0 + 60_000));
        let (used, cut, warnings) = from_checkpoint(&dir, at);
        assert!(warnings.is_empty(), "{warnings:?}");
        let plain = from_start(&dir, at);
        let from = used.unwrap_or(0);
        assert_eq!(answer(&cut, from), answer(&plain, from), "at {at}");
        if used.is_some() {
            started_late += 1;
        }
    }
    // Not vacuous: most instants lie after the first checkpoint.
    assert!(
        started_late >= 40,
        "only {started_late} of 50 used a checkpoint"
    );
}

fn header_of(path: &Path) -> checkpoint::Header {
    let text = std::fs::read(path).unwrap();
    let line = text.split(|&b| b == b'\n').next().unwrap();
    serde_json::from_slice(line).unwrap()
}

/// Rewrites a checkpoint's header line, sealed again (as a writer with a bug would).
fn patch_header(path: &Path, change: impl FnOnce(&mut serde_json::Value)) {
    let text = std::fs::read(path).unwrap();
    let newline = text.iter().position(|&b| b == b'\n').unwrap();
    let mut header: serde_json::Value = serde_json::from_slice(&text[..newline]).unwrap();
    change(&mut header);
    let mut header: checkpoint::Header = serde_json::from_value(header).unwrap();
    header.reseal();
    let mut patched = serde_json::to_vec(&header).unwrap();
    patched.extend_from_slice(&text[newline..]);
    std::fs::write(path, &patched).unwrap();
}

/// The folder's guard, the log's directory, its records and its checkpoints.
type Checkpointed = (
    tempfile::TempDir,
    std::path::PathBuf,
    Vec<Vec<u8>>,
    Vec<(u64, std::path::PathBuf)>,
);

/// The site's log in a temporary folder, with its checkpoints written.
fn checkpointed_log() -> Checkpointed {
    let (tmp, dir, records) = written_log();
    checkpoint::refresh(&dir, EVERY, BUILD, false, |_| {}).unwrap();
    let list = checkpoint::list(&dir).unwrap();
    (tmp, dir, records, list)
}

#[test]
fn damaged_foreign_and_other_builds_checkpoints_are_ignored_with_a_warning_and_refreshed() {
    let (_tmp, dir, records, list) = checkpointed_log();
    let n = list.len();
    let (last, before, third) = (&list[n - 1], &list[n - 2], &list[n - 3]);
    let (_, end) = first_and_last(&records);
    let at = Ts(end.0 + 1); // after every checkpoint
    let expected = from_start(&dir, at).engine.digest();

    // 1. A header whose digest does not match the state. It is found only once the state
    // was rebuilt and used (the check runs beside the replay), so the work is done again
    // from the checkpoint before it.
    patch_header(&last.1, |h| h["digest"] = "0".repeat(64).into());
    let (used, cut, warnings) = from_checkpoint(&dir, at);
    assert_eq!(used, Some(before.0));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("not the 0000"), "{warnings:?}");
    assert_eq!(cut.engine.digest(), expected);

    // 2. Flipped bytes in the compressed state as well.
    let mut bytes = std::fs::read(&before.1).unwrap();
    let len = bytes.len();
    for b in &mut bytes[len - 300..len - 100] {
        *b ^= 0x5a;
    }
    std::fs::write(&before.1, &bytes).unwrap();
    let (used, cut, warnings) = from_checkpoint(&dir, at);
    assert_eq!(used, Some(third.0));
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[1].contains(&before.1.display().to_string()),
        "{warnings:?}"
    );
    assert_eq!(cut.engine.digest(), expected);

    // A refresh removes both, says why, and writes them anew.
    let done = checkpoint::refresh(&dir, EVERY, BUILD, false, |_| {}).unwrap();
    assert_eq!(done.resumed_from, Some(third.0), "{done:?}");
    assert_eq!(done.removed.len(), 2, "{done:?}");
    assert_eq!(done.written, vec![before.0, last.0], "{done:?}");
    let (used, _, warnings) = from_checkpoint(&dir, at);
    assert_eq!((used, warnings.len()), (Some(last.0), 0), "{warnings:?}");

    // 3. Another build's checkpoint: not used, even where it is the only one that could
    // serve; a refresh replaces it and writes every one after it again.
    let (first_offset, first_path) = &list[0];
    patch_header(first_path, |h| h["build"] = "other build".into());
    let early = header_of(first_path).max_ts.unwrap();
    let (used, cut, warnings) = from_checkpoint(&dir, early);
    assert_eq!(used, None);
    assert!(
        warnings[0].contains("ignoring 1 checkpoint(s) of")
            && warnings[0].contains("written by lhc other build"),
        "{warnings:?}"
    );
    assert_eq!(cut.engine.digest(), from_start(&dir, early).engine.digest());
    let done = checkpoint::refresh(&dir, EVERY, BUILD, false, |_| {}).unwrap();
    assert_eq!(done.resumed_from, None, "{done:?}");
    assert_eq!(done.removed.len(), 1, "{done:?}");
    assert_eq!(done.written.len(), n, "{done:?}");
    assert_eq!(done.written[0], *first_offset);

    // 4. Another log's checkpoint copied in: its records differ.
    let mut shifted = records.clone();
    shifted.remove(5);
    not_used_over(&shifted, &list[1].1, at);

    // 5. A log whose first record and the last one a checkpoint covers are the same, but
    // one in between (one of those sampled) differs.
    let sampled = checkpoint::sample_offsets(list[1].0)[3] as usize;
    let mut edited = records.clone();
    edited[sampled] = records[sampled - 1].clone();
    assert_ne!(edited[sampled], records[sampled]);
    not_used_over(&edited, &list[1].1, at);
}

/// Copies the checkpoint at `path` beside a log of `records` and asserts that a query at
/// `at` does not use it, saying its records differ.
fn not_used_over(records: &[Vec<u8>], path: &Path, at: Ts) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write_log(&dir, records);
    std::fs::create_dir_all(dir.join(checkpoint::DIR)).unwrap();
    std::fs::copy(
        path,
        dir.join(checkpoint::DIR).join(path.file_name().unwrap()),
    )
    .unwrap();
    let (used, _, warnings) = from_checkpoint(&dir, at);
    assert_eq!(used, None);
    assert!(
        warnings[0].contains("differ from those it was written from"),
        "{warnings:?}"
    );
}

#[test]
fn a_refresh_after_appends_replays_only_the_new_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let records = site_records();
    let half = records.len() / 2;
    write_log(&dir, &records[..half]);
    let first = checkpoint::refresh(&dir, EVERY, BUILD, false, |_| {}).unwrap();
    assert_eq!(first.resumed_from, None);
    write_log(&dir, &records[half..]);
    let second = checkpoint::refresh(&dir, EVERY, BUILD, false, |_| {}).unwrap();
    assert_eq!(second.resumed_from, first.written.last().copied());
    assert_eq!(second.kept, first.written.len());
    // The checkpoints written after resuming hold the states a single pass would.
    let tmp2 = tempfile::tempdir().unwrap();
    let dir2 = tmp2.path().join("log");
    write_log(&dir2, &records);
    checkpoint::refresh(&dir2, EVERY, BUILD, false, |_| {}).unwrap();
    let headers = |dir: &Path| -> Vec<String> {
        checkpoint::list(dir)
            .unwrap()
            .iter()
            .map(|(_, p)| {
                let text = std::fs::read(p).unwrap();
                let line = text.split(|&b| b == b'\n').next().unwrap().to_vec();
                String::from_utf8(line).unwrap()
            })
            .collect()
    };
    assert_eq!(headers(&dir), headers(&dir2));
    assert_eq!(
        EmbeddedLog::open_read_only(&dir)
            .unwrap()
            .end_offset()
            .unwrap(),
        records.len() as u64
    );
}

#[test]
fn an_edited_header_a_renamed_file_and_an_unreadable_folder_cost_only_the_shortcut() {
    let (_tmp, dir, records, list) = checkpointed_log();
    let (_, end) = first_and_last(&records);
    let at = Ts(end.0 + 1);
    let expected = from_start(&dir, at).engine.digest();

    // A header edited (one bit of its max_ts) without its seal: not used.
    let (last, last_path) = list.last().unwrap().clone();
    let text = std::fs::read(&last_path).unwrap();
    let line = String::from_utf8(text.split(|&b| b == b'\n').next().unwrap().to_vec()).unwrap();
    let edited = line.replacen("\"max_ts\":\"2026-01-05T1", "\"max_ts\":\"2026-01-05T0", 1);
    assert_ne!(edited, line);
    let mut bytes = edited.into_bytes();
    bytes.extend_from_slice(&text[line.len()..]);
    std::fs::write(&last_path, &bytes).unwrap();
    let (used, cut, warnings) = from_checkpoint(&dir, at);
    assert!(
        warnings[0].contains("does not match its seal"),
        "{warnings:?}"
    );
    assert_eq!(used, Some(list[list.len() - 2].0));
    assert_eq!(cut.engine.digest(), expected);

    // A checkpoint renamed to an earlier offset (its digest made wrong too): named, never
    // used, and the search goes on below it instead of finding it again.
    std::fs::remove_file(&last_path).unwrap();
    let (second, second_path) = list[list.len() - 2].clone();
    patch_header(&second_path, |h| h["digest"] = "1".repeat(64).into());
    let renamed = dir
        .join(checkpoint::DIR)
        .join(format!("{:020}.ckpt", second - 1));
    std::fs::rename(&second_path, &renamed).unwrap();
    let (used, cut, warnings) = from_checkpoint(&dir, at);
    assert!(
        warnings[0].contains("its name says it covers"),
        "{warnings:?}"
    );
    assert_eq!(used, Some(list[list.len() - 3].0));
    assert_eq!(cut.engine.digest(), expected);
    assert!(last > second);

    // A copy named for the largest offset there is: tried and named like any other, not
    // passed over in silence.
    let largest = format!("{:020}.ckpt", u64::MAX);
    std::fs::copy(&list[0].1, dir.join(checkpoint::DIR).join(&largest)).unwrap();
    let (used, cut, warnings) = from_checkpoint(&dir, at);
    assert!(
        warnings[0].contains(&largest) && warnings[0].contains("its name says it covers"),
        "{warnings:?}"
    );
    assert_eq!(used, Some(list[list.len() - 3].0));
    assert_eq!(cut.engine.digest(), expected);
    std::fs::remove_file(dir.join(checkpoint::DIR).join(&largest)).unwrap();

    // A FIFO and a link to an endless device named like checkpoints: not read (opening a
    // FIFO would wait for a writer; a device would be read forever).
    let folder = dir.join(checkpoint::DIR);
    let fifo = folder.join(format!("{:020}.ckpt", last + EVERY));
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::os::unix::fs::symlink(
        "/dev/zero",
        folder.join(format!("{:020}.ckpt", last + 2 * EVERY)),
    )
    .unwrap();
    let (used, _, warnings) = from_checkpoint(&dir, at);
    assert_eq!(used, Some(list[list.len() - 3].0));
    assert_eq!(
        warnings
            .iter()
            .filter(|w| w.contains("not a regular file"))
            .count(),
        2,
        "{warnings:?}"
    );

    // A file where the folder should be: a warning, and the answer from the start.
    std::fs::remove_dir_all(dir.join(checkpoint::DIR)).unwrap();
    std::fs::write(dir.join(checkpoint::DIR), b"not a folder").unwrap();
    let (used, cut, warnings) = from_checkpoint(&dir, at);
    assert_eq!(used, None);
    assert!(
        warnings[0].contains("ignoring the checkpoints of"),
        "{warnings:?}"
    );
    assert_eq!(cut.engine.digest(), expected);
}

/// A header rewritten on purpose with its seal recomputed, its times made earlier than the
/// records it covers (so it would answer instants before its own records): the last
/// record's time gives it away, it is named and not used, and the answer is the one from
/// the start.
#[test]
fn a_resealed_header_with_times_before_its_records_is_not_used() {
    let (_tmp, dir, records, list) = checkpointed_log();
    let (_, path) = list[list.len() / 2].clone();
    let real = header_of(&path);
    let (first, _) = first_and_last(&records);
    // An instant inside the span the checkpoint covers, before its last record.
    let at = Ts(first.0 + (real.max_ts.unwrap().0 - first.0) / 2);
    let expected = from_start(&dir, at);
    for field in ["max_ts", "last_ts"] {
        let forged = Ts(at.0 - 1).to_string();
        patch_header(&path, |h| {
            h["max_ts"] = forged.clone().into();
            if field == "last_ts" {
                h["last_ts"] = forged.clone().into();
            }
        });
        let (used, cut, warnings) = from_checkpoint(&dir, at);
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("do not fit its last record's")),
            "{field}: {warnings:?}"
        );
        assert_ne!(used, Some(list[list.len() / 2].0));
        assert_eq!(cut.engine.digest(), expected.engine.digest(), "{field}");
    }
}

/// An instant more than a year after the log's last record is refused (the timers due by
/// then would fire one by one for as long as it takes), one within the year is answered.
#[test]
fn an_instant_years_after_the_log_is_refused_not_computed() {
    let (_tmp, dir, records) = written_log();
    let (_, last) = first_and_last(&records);
    let open = || Source::open(&SourceSpec::Path(dir.clone())).unwrap();
    let near = Ts(last.0 + lhc_replay::query::MAX_AFTER_MS);
    assert!(cut_at(&mut open(), near).is_ok());
    let far = Ts(last.0 + lhc_replay::query::MAX_AFTER_MS + 1);
    let Err(error) = cut_at(&mut open(), far) else {
        panic!("{far}, more than a year after the log, was answered");
    };
    let error = error.to_string();
    assert!(error.contains("more than 366 days after"), "{error}");
}

/// An instant more than a year inside a gap between two records is refused as such,
/// naming the records on both sides (it named the record before the gap as the log's
/// last); the limit holds inside the log too, since a replay need not cross the gap (the
/// record after it may be quarantined). One within the year of the record before it is
/// answered.
#[test]
fn an_instant_years_inside_a_gap_is_refused_naming_the_gap() {
    let mut records = site_records();
    let (_, last) = first_and_last(&records);
    let gap = 2 * lhc_replay::query::MAX_AFTER_MS;
    // A clock tick: admitted, so the engine's clock moves to it.
    let later = format!(r#"{{"ts":"{}","type":"clock.tick"}}"#, Ts(last.0 + gap));
    records.push(later.into_bytes());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write_log(&dir, &records);
    let open = || Source::open(&SourceSpec::Path(dir.clone())).unwrap();
    let near = Ts(last.0 + lhc_replay::query::MAX_AFTER_MS);
    let cut = cut_at(&mut open(), near).expect("within the year of the record before it");
    assert!(cut.more_after);
    assert_eq!(cut.last_ts, Some(last));
    let inside = Ts(near.0 + 1);
    let Err(error) = cut_at(&mut open(), inside) else {
        panic!("{inside}, more than a year inside a gap, was answered");
    };
    let error = error.to_string();
    assert!(error.contains("inside a gap of the log"), "{error}");
    assert!(error.contains(&last.to_string()), "{error}");
    assert!(error.contains(&Ts(last.0 + gap).to_string()), "{error}");
    // Past the log's last record, the record named is that one.
    let far = Ts(last.0 + gap + lhc_replay::query::MAX_AFTER_MS + 1);
    let Err(error) = cut_at(&mut open(), far) else {
        panic!("{far}, more than a year after the log's last record, was answered");
    };
    let error = error.to_string();
    assert!(error.contains("after the log's last record"), "{error}");
    assert!(error.contains(&Ts(last.0 + gap).to_string()), "{error}");
}

/// Every checkpoint damaged, in its state or in its digest: a few are tried (each costs a
/// rebuild or a replay for nothing), then the answer comes from the first record with a
/// warning that says so, instead of trying every one (found by hostile testing: a hundred
/// damaged checkpoints made a query 40 times slower than replaying from the start).
#[test]
fn past_a_few_damaged_checkpoints_the_answer_comes_from_the_start() {
    let (_tmp, dir, records, list) = checkpointed_log();
    assert!(list.len() > 5, "{} checkpoints", list.len());
    let (_, end) = first_and_last(&records);
    let at = Ts(end.0 + 1);
    let expected = from_start(&dir, at).engine.digest();
    let gave_up = |warnings: &[String]| {
        warnings
            .iter()
            .filter(|w| w.contains("could not be used: replaying from the first record"))
            .count()
    };
    let ignored = |warnings: &[String]| {
        warnings
            .iter()
            .filter(|w| w.starts_with("ignoring checkpoint "))
            .count()
    };
    let three_tried_then_from_the_start = || {
        let (used, cut, warnings) = from_checkpoint(&dir, at);
        assert_eq!(used, None);
        assert_eq!(cut.engine.digest(), expected);
        assert_eq!(
            (ignored(&warnings), gave_up(&warnings)),
            (3, 1),
            "{warnings:?}"
        );
    };

    // Digests that do not match their states: each costs a replay thrown away.
    for (_, path) in &list {
        patch_header(path, |h| h["digest"] = "1".repeat(64).into());
    }
    three_tried_then_from_the_start();

    // States that do not decompress: each costs a rebuild.
    for (_, path) in &list {
        let mut bytes = std::fs::read(path).unwrap();
        let n = bytes.len();
        bytes[n - 3] ^= 0xff;
        std::fs::write(path, &bytes).unwrap();
    }
    three_tried_then_from_the_start();

    // One usable checkpoint below two damaged ones is still found and used.
    checkpoint::refresh(&dir, EVERY, BUILD, false, |_| {}).unwrap();
    for (_, path) in &list[list.len() - 2..] {
        patch_header(path, |h| h["digest"] = "1".repeat(64).into());
    }
    let (used, cut, warnings) = from_checkpoint(&dir, at);
    assert_eq!(used, Some(list[list.len() - 3].0), "{warnings:?}");
    assert_eq!(cut.engine.digest(), expected);
    assert_eq!(
        (ignored(&warnings), gave_up(&warnings)),
        (2, 0),
        "{warnings:?}"
    );
}

/// A quarantined record dated centuries ahead (here a clock tick repeating an earlier
/// record id) moves no clock: an instant just before it is measured from the last record
/// applied, and refused, instead of firing centuries of LHC-mode timers one by one (found
/// by hostile testing: a query ran for hours where a replay takes 0.1 s).
#[test]
fn a_quarantined_far_future_record_does_not_lift_the_limit() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/site-outage.jsonl"
    ))
    .unwrap();
    // Up to 09:30 the zone is in LHC mode: its timers make reports.
    let mut lines: Vec<&str> = example
        .lines()
        .filter(|l| l.get(7..23).is_some_and(|ts| ts < "2026-01-05T09:30"))
        .collect();
    lines.push(r#"{"ts":"2026-01-05T09:29:59.000Z","type":"clock.tick","record_id":"p:1.0"}"#);
    lines.push(r#"{"ts":"9998-12-30T00:00:00.000Z","type":"clock.tick","record_id":"p:1.0"}"#);
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("site.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let at = Ts::parse("9998-12-30T00:00:00.000Z").unwrap();
    let mut source = Source::open(&SourceSpec::Path(file)).unwrap();
    let Err(error) = cut_at(&mut source, at) else {
        panic!("centuries after the last record applied, answered");
    };
    let error = error.to_string();
    assert!(
        error.contains("records quarantined do not count"),
        "{error}"
    );
    assert!(error.contains("2026-01-05T09:29:59"), "{error}");
}
