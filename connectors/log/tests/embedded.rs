//! Embedded-log specifics: torn-tail recovery at every byte, corruption detection,
//! sparse index, segment rolling and several writers on one directory (R-LOG-2).

use std::path::{Path, PathBuf};
use std::time::Duration;

use lhc_log::embedded::{check, list_segments};
use lhc_log::{EmbeddedLog, EmbeddedOptions, FsyncPolicy, Log, LogError};

fn options(segment_bytes: u64) -> EmbeddedOptions {
    EmbeddedOptions {
        fsync: FsyncPolicy::Never,
        segment_bytes,
        index_interval_bytes: 128,
        create: true,
        ..EmbeddedOptions::default()
    }
}

fn record(i: usize) -> Vec<u8> {
    format!(r#"{{"ts":"2026-01-05T09:00:00.000Z","type":"clock.tick","n":{i}}}"#).into_bytes()
}

fn write(dir: &Path, n: usize, segment_bytes: u64) {
    let log = EmbeddedLog::open(dir, options(segment_bytes)).unwrap();
    let records: Vec<Vec<u8>> = (0..n).map(record).collect();
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    log.append(&refs).unwrap();
}

/// Writes 40 records in segments of 512 bytes into `dir`: at least four segments, whose
/// bases it returns.
fn segmented(dir: &Path) -> Vec<u64> {
    write(dir, 40, 512);
    let bases = list_segments(dir).unwrap();
    assert!(bases.len() >= 4, "small segments roll: {bases:?}");
    bases
}

fn read_all(log: &dyn Log) -> Result<Vec<(u64, Vec<u8>)>, LogError> {
    let mut reader = log.reader(log.start_offset()?)?;
    let mut out = Vec::new();
    while let Some(e) = reader.next(Duration::ZERO)? {
        out.push((e.offset, e.bytes));
    }
    Ok(out)
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o644) },
        0,
        "{}",
        path.display()
    );
}

fn segment(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Frame size of `record(i)`: 20-byte header plus payload.
fn frame(i: usize) -> u64 {
    20 + record(i).len() as u64
}

#[test]
fn torn_tail_cut_at_every_byte_of_the_last_record_reopens_with_earlier_records() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("original");
    write(&original, 5, 1 << 20);
    let seg = segment(&original, 0);
    let full = std::fs::metadata(&seg).unwrap().len();
    let last_start = full - frame(4);
    for cut in last_start..full {
        let dir = tmp.path().join(format!("cut-{cut}"));
        copy_dir(&original, &dir);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(segment(&dir, 0))
            .unwrap();
        f.set_len(cut).unwrap();
        drop(f);
        let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
        if cut == last_start {
            assert_eq!(
                log.recovery(),
                None,
                "a cut at a frame boundary is a clean log"
            );
        } else {
            let r = log.recovery().expect("torn tail reported");
            assert_eq!(
                (r.offset, r.bytes_dropped),
                (4, cut - last_start),
                "cut at {cut}"
            );
            assert_eq!(r.segment, segment(&dir, 0));
        }
        let read = read_all(&log).unwrap();
        assert_eq!(read.len(), 4, "cut at {cut}");
        for (i, (offset, bytes)) in read.iter().enumerate() {
            assert_eq!((*offset, bytes), (i as u64, &record(i)));
        }
        // The log goes on from the cut.
        assert_eq!(log.append(&[&record(9)]).unwrap(), vec![4]);
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn garbage_after_the_last_record_is_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 3, 1 << 20);
    let seg = segment(tmp.path(), 0);
    let mut bytes = std::fs::read(&seg).unwrap();
    let clean = bytes.len() as u64;
    bytes.extend_from_slice(&[0u8; 100]); // a preallocated, never-written region
    std::fs::write(&seg, &bytes).unwrap();
    let log = EmbeddedLog::open(tmp.path(), options(1 << 20)).unwrap();
    let r = log.recovery().expect("reported");
    assert_eq!((r.offset, r.bytes_dropped), (3, 100));
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), clean);
}

/// A flipped bit in the last record, before bytes never written, looks like a torn tail
/// (found by hostile testing: it was cut, and the record with it). The writer still cuts
/// it, so the log goes on, but keeps the bytes cut beside the segment first (the record
/// can be read back from them), and the commit mark names the record as lost.
#[test]
fn a_damaged_last_record_cut_as_a_torn_tail_is_kept_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 3, 1 << 20);
    let seg = segment(&dir, 0);
    let mut bytes = std::fs::read(&seg).unwrap();
    let last_start = bytes.len() - frame(2) as usize;
    let damaged_at = bytes.len() - 3;
    bytes[damaged_at] ^= 0x10;
    let tail = bytes[last_start..].to_vec();
    bytes.extend_from_slice(&[0u8; 64]);
    std::fs::write(&seg, &bytes).unwrap();
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    let r = log.recovery().expect("cut as a torn tail");
    assert_eq!((r.offset, r.bytes_dropped), (2, frame(2) + 64));
    assert_eq!(r.kept, lhc_log::embedded::cut_path(&seg, 2));
    let kept = std::fs::read(&r.kept).unwrap();
    assert_eq!(
        &kept[..tail.len()],
        &tail[..],
        "the damaged record's bytes are kept"
    );
    assert!(kept[tail.len()..].iter().all(|&b| b == 0));
    let lost = log.lost().expect("the mark names the record cut");
    assert_eq!((lost.first, lost.last_listed), (2, 2));
    assert_eq!(log.append(&[&record(7)]).unwrap(), vec![2]);
    drop(log);
    // Cut again at the same offset: kept beside the first, never over it.
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&[0u8; 8]);
    std::fs::write(&seg, &bytes).unwrap();
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    let r = log.recovery().expect("cut");
    assert_eq!(r.offset, 3);
    drop(log);
    assert_eq!(
        std::fs::read(lhc_log::embedded::cut_path(&seg, 2)).unwrap(),
        kept
    );
    assert!(lhc_log::embedded::is_cut_file(
        "00000000000000000000.log.cut-2"
    ));
    assert!(lhc_log::embedded::is_cut_file(
        "00000000000000000000.log.cut-2.1"
    ));
    assert!(!lhc_log::embedded::is_cut_file("00000000000000000000.log"));
    assert!(!lhc_log::embedded::is_cut_file("x.log.cut-2"));
}

#[test]
fn crc_corruption_before_the_tail_is_an_error_naming_segment_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 5, 1 << 20);
    let seg = segment(tmp.path(), 0);
    let mut bytes = std::fs::read(&seg).unwrap();
    let record2_payload = 16 + frame(0) + frame(1) + 20 + 10;
    bytes[record2_payload as usize] ^= 0x20;
    std::fs::write(&seg, &bytes).unwrap();

    for result in [
        check(tmp.path()).map(|_| ()),
        EmbeddedLog::open(tmp.path(), options(1 << 20)).map(|_| ()),
    ] {
        match result {
            Err(LogError::Corrupt {
                segment,
                offset,
                detail,
            }) => {
                assert_eq!((segment, offset), (seg.clone(), 2));
                assert!(detail.contains("checksum"), "{detail}");
            }
            other => panic!("corruption must be an error, got {other:?}"),
        }
    }
    // A reader gets the records before the damage, then the error; never a skipped record.
    let mut reader =
        lhc_log::embedded::EmbeddedReader::new(tmp.path(), 0).unwrap_or_else(|e| panic!("{e}"));
    use lhc_log::LogReader;
    assert_eq!(reader.next(Duration::ZERO).unwrap().unwrap().offset, 0);
    assert_eq!(reader.next(Duration::ZERO).unwrap().unwrap().offset, 1);
    let error = reader.next(Duration::ZERO).unwrap_err();
    assert!(
        matches!(error, LogError::Corrupt { offset: 2, .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("00000000000000000000.log"),
        "{error}"
    );
}

/// A flipped bit in the last record is corruption, not a torn write: a crash leaves a frame
/// the file ends inside, or unwritten (zero) bytes, never a whole frame ending in its
/// closing brace. Nothing is cut; check, open and readers name segment and offset.
#[test]
fn corruption_of_the_last_record_is_an_error_and_nothing_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 3, 1 << 20);
    let seg = segment(tmp.path(), 0);
    let mut bytes = std::fs::read(&seg).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    assert!(matches!(
        check(tmp.path()),
        Err(LogError::Corrupt { offset: 2, .. })
    ));
    match EmbeddedLog::open(tmp.path(), options(1 << 20)) {
        Err(LogError::Corrupt {
            offset: 2, detail, ..
        }) => {
            assert!(detail.contains("checksum"), "{detail}")
        }
        other => panic!("must refuse to append: {:?}", other.map(|_| ())),
    }
    assert_eq!(std::fs::read(&seg).unwrap(), bytes, "nothing cut");
    let log = EmbeddedLog::open_read_only(tmp.path()).unwrap();
    assert!(matches!(
        read_all(&log),
        Err(LogError::Corrupt { offset: 2, .. })
    ));
}

/// Issue 15 (1): every bit of the length field of a record in the middle of the last
/// segment, of the last record, and of a record in a closed segment: each flip is
/// detected by check, by an appender (which refuses instead of cutting) and by a reader
/// (which returns the records before it, then the error); no byte is ever cut.
#[test]
fn every_flipped_length_bit_is_detected_and_nothing_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("original");
    let bases = segmented(&original);
    let last = *bases.last().unwrap();
    let last_count = {
        let log = EmbeddedLog::open_read_only(&original).unwrap();
        read_all(&log).unwrap().len() as u64 - last
    };
    assert!(last_count >= 3, "the last segment holds a middle record");
    // (segment base, offset of the damaged record)
    let cases = [
        (last, last + 1),              // in the middle of the last segment
        (last, last + last_count - 1), // the last record
        (bases[1], bases[1] + 1),      // a closed segment
    ];
    for (case, (base, target)) in cases.into_iter().enumerate() {
        for bit in 0..32 {
            let dir = tmp.path().join(format!("case-{case}-bit-{bit}"));
            copy_dir(&original, &dir);
            let seg = segment(&dir, base);
            let mut bytes = std::fs::read(&seg).unwrap();
            let position = 16 + (base..target).map(|i| frame(i as usize)).sum::<u64>() as usize;
            bytes[position + bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&seg, &bytes).unwrap();
            let what = format!("case {case}, bit {bit}");
            assert!(
                matches!(check(&dir), Err(LogError::Corrupt { offset, .. }) if offset == target),
                "{what}: check must name offset {target}"
            );
            let reader_log = EmbeddedLog::open_read_only(&dir).unwrap();
            match read_all(&reader_log) {
                Err(LogError::Corrupt { offset, .. }) => assert_eq!(offset, target, "{what}"),
                other => panic!("{what}: a reader must fail at {target}, got {other:?}"),
            }
            if base == last {
                assert!(
                    matches!(
                        EmbeddedLog::open(&dir, options(512)),
                        Err(LogError::Corrupt { .. })
                    ),
                    "{what}: an appender refuses a damaged tail"
                );
            }
            assert_eq!(std::fs::read(&seg).unwrap(), bytes, "{what}: nothing cut");
        }
    }
}

/// Issue 15 (2): a follower waiting on an incomplete frame at the tail, while a writer cuts
/// it as a torn tail and appends new records there, reads the new records, not a splice of
/// stale and new bytes.
#[test]
fn a_follower_racing_a_cutting_writer_reads_the_new_records() {
    use lhc_log::LogReader;
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 3, 1 << 20);
    let seg = segment(tmp.path(), 0);
    // A torn write: a frame of a record that never finished.
    let mut torn = Vec::new();
    lhc_log::frame::encode_frame(&mut torn, 3, &record(99));
    torn.truncate(torn.len() - 5);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&torn);
    std::fs::write(&seg, &bytes).unwrap();
    let mut reader = lhc_log::embedded::EmbeddedReader::new(tmp.path(), 0).unwrap();
    for i in 0..3 {
        assert_eq!(reader.next(Duration::ZERO).unwrap().unwrap().offset, i);
    }
    assert!(
        reader.next(Duration::from_millis(5)).unwrap().is_none(),
        "waits on the torn frame"
    );
    // A writer opens: it cuts the torn frame and appends records 3 and 4 in its place.
    let log = EmbeddedLog::open(tmp.path(), options(1 << 20)).unwrap();
    assert!(log.recovery().is_some());
    let r3 = record(3);
    let r4 = record(4);
    log.append(&[r3.as_slice(), r4.as_slice()]).unwrap();
    let got3 = reader
        .next(Duration::from_secs(2))
        .unwrap()
        .expect("record 3");
    let got4 = reader
        .next(Duration::from_secs(2))
        .unwrap()
        .expect("record 4");
    assert_eq!((got3.offset, got3.bytes), (3, r3));
    assert_eq!((got4.offset, got4.bytes), (4, r4));
    assert_eq!(check(tmp.path()).unwrap().records, 5);
}

#[test]
fn corruption_in_a_closed_segment_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let bases = segmented(tmp.path());
    let seg = segment(tmp.path(), bases[1]);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[16 + 20] ^= 0xff; // inside the first record of the second segment
    std::fs::write(&seg, &bytes).unwrap();
    let log = EmbeddedLog::open(tmp.path(), options(512)).unwrap(); // the tail is fine
    let error = read_all(&log).unwrap_err();
    match &error {
        LogError::Corrupt {
            segment, offset, ..
        } => assert_eq!((segment, *offset), (&seg, bases[1])),
        other => panic!("{other}"),
    }
    assert!(
        matches!(check(tmp.path()), Err(LogError::Corrupt { offset, .. }) if offset == bases[1])
    );
}

#[test]
fn segments_roll_and_every_offset_reads_back_through_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 300, 2048);
    let bases = list_segments(tmp.path()).unwrap();
    assert!(bases.len() >= 10, "{bases:?}");
    assert_eq!(bases[0], 0);
    let index = std::fs::read(tmp.path().join(format!("{:020}.idx", bases[1]))).unwrap();
    assert!(index.len() >= 32, "sparse index written as segments fill");
    let log = EmbeddedLog::open(tmp.path(), options(2048)).unwrap();
    for from in [0u64, 1, 57, bases[3], bases[3] + 1, 299, 300] {
        let mut reader = log.reader(from).unwrap();
        let first = reader.next(Duration::ZERO).unwrap();
        match first {
            Some(e) => assert_eq!((e.offset, e.bytes), (from, record(from as usize))),
            None => assert_eq!(from, 300),
        }
    }
    let report = check(tmp.path()).unwrap();
    assert_eq!(
        (report.records, report.end_offset, report.segments),
        (300, 300, bases.len() as u64)
    );
}

#[test]
fn a_damaged_index_costs_a_scan_not_a_wrong_record() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 100, 1 << 20);
    let idx = tmp.path().join(format!("{:020}.idx", 0));
    // Entries that point into the middle of frames, claiming the wrong offsets.
    let mut garbage = Vec::new();
    for (offset, position) in [(10u64, 999u64), (50, 1501), (90, 3003)] {
        garbage.extend_from_slice(&offset.to_le_bytes());
        garbage.extend_from_slice(&position.to_le_bytes());
    }
    std::fs::write(&idx, &garbage).unwrap();
    let mut reader = lhc_log::embedded::EmbeddedReader::new(tmp.path(), 60).unwrap();
    use lhc_log::LogReader;
    let e = reader.next(Duration::ZERO).unwrap().unwrap();
    assert_eq!((e.offset, e.bytes), (60, record(60)));
}

#[test]
fn two_writers_on_one_directory_share_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let handles: Vec<_> = (0..3)
        .map(|w| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                // Each writer is its own open of the directory, as a separate process would be.
                let log = EmbeddedLog::open(&dir, options(4096)).unwrap();
                let mut offsets = Vec::new();
                for i in 0..50 {
                    offsets.extend(log.append(&[&record(w * 1000 + i)]).unwrap());
                }
                offsets
            })
        })
        .collect();
    let mut all: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..150).collect::<Vec<_>>());
    let report = check(&dir).unwrap();
    assert_eq!((report.records, report.torn_tail), (150, None));
}

/// Every append with `fsync always` is counted in the process's fsync figures (what
/// `lhc bench node` prints beside each run).
#[test]
fn fsyncs_of_appends_are_counted() {
    let tmp = tempfile::tempdir().unwrap();
    // Other tests of this process append too: the counter only grows, by at least ours.
    let before = lhc_log::embedded::fsync_stats().count;
    let log = EmbeddedLog::open(
        tmp.path(),
        EmbeddedOptions {
            fsync: FsyncPolicy::Always,
            ..options(1 << 20)
        },
    )
    .unwrap();
    for i in 0..5 {
        log.append(&[record(i).as_slice()]).unwrap();
    }
    let after = lhc_log::embedded::fsync_stats();
    assert!(after.count >= before + 5, "{before} -> {after:?}");
    assert!(after.over_10ms <= after.count);
}

#[test]
fn fsync_policy_parses() {
    assert_eq!("always".parse::<FsyncPolicy>(), Ok(FsyncPolicy::Always));
    assert_eq!("never".parse::<FsyncPolicy>(), Ok(FsyncPolicy::Never));
    assert_eq!(
        "250ms".parse::<FsyncPolicy>(),
        Ok(FsyncPolicy::IntervalMs(250))
    );
    assert!("sometimes"
        .parse::<FsyncPolicy>()
        .unwrap_err()
        .contains("always, never"));
}

#[test]
fn a_file_that_is_not_a_segment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(segment(tmp.path(), 0), b"hello world, not a log at all").unwrap();
    match EmbeddedLog::open(tmp.path(), options(4096)) {
        Err(LogError::NotALog { .. }) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Cutting the last segment anywhere leaves exactly the records wholly before the
        /// cut, whatever the record sizes and segment size (R-LOG-2).
        #[test]
        fn any_cut_of_the_tail_keeps_a_prefix(
            sizes in proptest::collection::vec(1usize..300, 1..40),
            segment_bytes in 256u64..4096,
            cut_fraction in 0.0f64..1.0,
        ) {
            let tmp = tempfile::tempdir().unwrap();
            let records: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, n)| vec![b'a' + (i % 26) as u8; *n]).collect();
            {
                let log = EmbeddedLog::open(tmp.path(), options(segment_bytes)).unwrap();
                for r in &records {
                    log.append(&[r]).unwrap();
                }
            }
            let bases = list_segments(tmp.path()).unwrap();
            let last = *bases.last().unwrap();
            let seg = segment(tmp.path(), last);
            let len = std::fs::metadata(&seg).unwrap().len();
            let cut = 16 + ((len - 16) as f64 * cut_fraction) as u64;
            std::fs::OpenOptions::new().write(true).open(&seg).unwrap().set_len(cut).unwrap();

            // Records in earlier segments, plus those of the last segment wholly before the cut.
            let mut boundaries = vec![16u64];
            for r in &records[last as usize..] {
                boundaries.push(boundaries.last().unwrap() + 20 + r.len() as u64);
            }
            let whole = boundaries.iter().filter(|&&b| b <= cut).count() - 1;
            let opened = EmbeddedLog::open(tmp.path(), options(segment_bytes));
            if last == 0 && whole == 0 {
                // No record left at all: refused if the index shows records were there
                // (every one is gone), and the segment is left as it is.
                if let Err(e) = &opened {
                    prop_assert!(e.to_string().contains("every record is gone"), "{}", e);
                    prop_assert_eq!(std::fs::metadata(&seg).unwrap().len(), cut);
                    return Ok(());
                }
            }
            let log = opened.unwrap();
            let read = read_all(&log).unwrap();
            prop_assert_eq!(read.len(), last as usize + whole);
            for (i, (offset, bytes)) in read.iter().enumerate() {
                prop_assert_eq!(*offset, i as u64);
                prop_assert_eq!(bytes, &records[i]);
            }
            prop_assert_eq!(log.recovery().is_some(), !boundaries.contains(&cut), "cut a torn tail iff mid-frame");
        }
    }
}

/// A refused append (damage before the tail) changes nothing, not even the index: the
/// records before the damage stay readable, through the index.
#[test]
fn a_refused_append_leaves_the_index_alone() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 300, 1 << 20);
    let seg = segment(tmp.path(), 0);
    let idx = tmp.path().join(format!("{:020}.idx", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    let middle = 16 + (0..150).map(frame).sum::<u64>() as usize + 25;
    bytes[middle] ^= 2;
    std::fs::write(&seg, &bytes).unwrap();
    let index_before = std::fs::read(&idx).unwrap();
    assert!(!index_before.is_empty());
    assert!(matches!(
        EmbeddedLog::open(tmp.path(), options(1 << 20)),
        Err(LogError::Corrupt { offset: 150, .. })
    ));
    assert_eq!(
        std::fs::read(&idx).unwrap(),
        index_before,
        "index untouched"
    );
    assert_eq!(std::fs::read(&seg).unwrap(), bytes, "segment untouched");
    let log = EmbeddedLog::open_read_only(tmp.path()).unwrap();
    let mut reader = log.reader(0).unwrap();
    let mut read = 0;
    let error = loop {
        match reader.next(Duration::ZERO) {
            Ok(Some(_)) => read += 1,
            Ok(None) => panic!("damage must not read as the end of the log"),
            Err(e) => break e,
        }
    };
    assert_eq!(read, 150);
    assert!(
        matches!(error, LogError::Corrupt { offset: 150, .. }),
        "{error}"
    );
}

/// A truncated, emptied or missing closed segment, or a stray one, is never the end of the
/// log: readers fail naming where, `check` fails, and no writer appends where no reader
/// would reach the records.
#[test]
fn a_damaged_segment_sequence_is_an_error_for_readers_writers_and_check() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("original");
    let bases = segmented(&original);
    type Damage = fn(&Path, &[u64]);
    let cases: [(&str, Damage); 4] = [
        ("closed segment truncated", |dir, bases| {
            let seg = segment(dir, bases[1]);
            let len = std::fs::metadata(&seg).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
            f.set_len(len - frame(0) - 3).unwrap();
        }),
        (
            "the segment before the last emptied to its header",
            |dir, bases| {
                let seg = segment(dir, bases[bases.len() - 2]);
                let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
                f.set_len(16).unwrap();
            },
        ),
        ("first segment missing", |dir, _| {
            std::fs::remove_file(segment(dir, 0)).unwrap();
        }),
        ("a stray segment after a gap", |dir, _| {
            let stray = segment(dir, 45);
            let mut bytes = lhc_log::frame::segment_header(45).to_vec();
            lhc_log::frame::encode_frame(&mut bytes, 45, &record(45));
            std::fs::write(stray, bytes).unwrap();
        }),
    ];
    for (what, damage) in cases {
        let dir = tmp.path().join(what.replace(' ', "-"));
        copy_dir(&original, &dir);
        damage(&dir, &bases);
        assert!(
            matches!(check(&dir), Err(LogError::Corrupt { .. })),
            "{what}: check fails"
        );
        assert!(
            matches!(
                EmbeddedLog::open(&dir, options(512)),
                Err(LogError::Corrupt { .. })
            ),
            "{what}: an appender refuses"
        );
        if let Ok(log) = EmbeddedLog::open_read_only(&dir) {
            if let Ok(mut reader) = log.reader(log.start_offset().unwrap()) {
                let result = loop {
                    match reader.next(Duration::ZERO) {
                        Ok(Some(_)) => continue,
                        other => break other,
                    }
                };
                assert!(
                    matches!(result, Err(LogError::Corrupt { .. })),
                    "{what}: a reader fails instead of ending: {result:?}"
                );
            }
        }
    }
}

/// A stray segment after a gap whose header is damaged too: `check` names the gap (where
/// the damage starts, and where an export may stop), not the stray's own offset, which it
/// named first and advised exporting up to.
#[test]
fn check_names_the_gap_before_a_stray_segments_damaged_header() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("original");
    segmented(&original);
    let end = check(&original).unwrap().end_offset;
    let dir = tmp.path().join("stray");
    copy_dir(&original, &dir);
    // The first segment's header (base 0) under a far name.
    let header = std::fs::read(segment(&dir, 0)).unwrap()[..16].to_vec();
    std::fs::write(segment(&dir, 999_999), header).unwrap();
    let error = check(&dir).unwrap_err();
    assert!(
        matches!(error, LogError::Corrupt { offset, .. } if offset == end),
        "{error}"
    );
}

/// A damaged header in a later segment (the last one or one between) is damage at that
/// segment's base offset: a reader reads every record before it, then fails naming that
/// offset; `check` names it; an appender refuses naming it. (It was "not an lhc log
/// segment" with no offset, and a damaged last segment hid every record from readers.)
#[test]
fn a_damaged_header_in_a_later_segment_is_corruption_at_its_base_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("original");
    let bases = segmented(&original);
    for (what, base) in [("middle", bases[1]), ("last", *bases.last().unwrap())] {
        let dir = tmp.path().join(what);
        copy_dir(&original, &dir);
        let seg = segment(&dir, base);
        let mut bytes = std::fs::read(&seg).unwrap();
        bytes[..4].copy_from_slice(b"XXXX");
        std::fs::write(&seg, &bytes).unwrap();
        let named = |e: &LogError| {
            matches!(e, LogError::Corrupt { segment, offset, .. }
                if *offset == base && *segment == seg)
        };
        let log = EmbeddedLog::open_read_only(&dir).unwrap();
        let mut reader = log.reader(0).unwrap();
        let mut read = 0;
        let error = loop {
            match reader.next(Duration::ZERO) {
                Ok(Some(entry)) => {
                    assert_eq!(entry.offset, read);
                    read += 1;
                }
                Ok(None) => panic!("{what}: the reader ended at {read} instead of failing"),
                Err(e) => break e,
            }
        };
        assert_eq!(read, base, "{what}: every record before the damage is read");
        assert!(named(&error), "{what}: {error}");
        assert!(error.to_string().contains("header is damaged"), "{error}");
        assert!(named(&check(&dir).unwrap_err()), "{what}: check");
        let refused = EmbeddedLog::open(&dir, options(512))
            .map(|_| ())
            .unwrap_err();
        assert!(named(&refused), "{what}: an appender: {refused}");
    }
}

/// Not every bad header is damage in a log: a directory of other files named like
/// segments, or a format-1 log, is "not a log" whichever segment is looked at first; and
/// a last segment shorter than its header (a roll in progress, or a crash during one) is
/// the end of the log for readers and `check`, and a writer recreates it.
#[test]
fn foreign_files_old_logs_and_a_segment_being_created_are_not_damage() {
    let tmp = tempfile::tempdir().unwrap();
    // Other files named like segments (a Kafka partition directory's names).
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(segment(&foreign, 0), b"some other program's data file").unwrap();
    std::fs::write(segment(&foreign, 100), b"and another one of them, longer").unwrap();
    assert!(matches!(
        EmbeddedLog::open(&foreign, options(512)),
        Err(LogError::NotALog { .. })
    ));
    assert!(matches!(check(&foreign), Err(LogError::NotALog { .. })));
    let log = EmbeddedLog::open_read_only(&foreign).unwrap();
    assert!(matches!(log.end_offset(), Err(LogError::NotALog { .. })));

    // A format-1 log of several segments: its old magic everywhere.
    let old = tmp.path().join("old");
    write(&old, 40, 512);
    let bases = list_segments(&old).unwrap();
    for &base in &bases {
        let seg = segment(&old, base);
        let mut bytes = std::fs::read(&seg).unwrap();
        bytes[..8].copy_from_slice(lhc_log::frame::SEGMENT_MAGIC_V1);
        std::fs::write(&seg, &bytes).unwrap();
    }
    let refused = EmbeddedLog::open(&old, options(512))
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(&refused, LogError::NotALog { detail, .. } if detail.contains("format-1")),
        "{refused}"
    );

    // A last segment being created: 0 and 9 bytes.
    for len in [0usize, 9] {
        let dir = tmp.path().join(format!("rolling-{len}"));
        write(&dir, 40, 512);
        let end = check(&dir).unwrap().end_offset;
        let header = lhc_log::frame::segment_header(end);
        std::fs::write(segment(&dir, end), &header[..len]).unwrap();
        let report = check(&dir).unwrap();
        assert_eq!(report.end_offset, end, "check ends there ({len} bytes)");
        let log = EmbeddedLog::open_read_only(&dir).unwrap();
        assert_eq!(log.end_offset().unwrap(), end);
        let read = read_all(&log).unwrap();
        assert_eq!(read.len() as u64, end, "readers end there ({len} bytes)");
        drop(log);
        let log = EmbeddedLog::open(&dir, options(512)).unwrap();
        assert_eq!(log.append(&[&record(end as usize)]).unwrap(), vec![end]);
        assert_eq!(read_all(&log).unwrap().len() as u64, end + 1);
    }

    // A short last file named below where the log ends is a stray, not a segment being
    // created: readers fail instead of ending before the records after its name, and
    // a writer refuses instead of appending on offsets already used.
    let dir = tmp.path().join("stray");
    write(&dir, 40, 512);
    let end = check(&dir).unwrap().end_offset;
    let last = *list_segments(&dir).unwrap().last().unwrap();
    let stray = last + 1;
    assert!(stray < end, "{last} {end}");
    std::fs::write(segment(&dir, stray), b"LHCSEG02").unwrap();
    assert!(matches!(check(&dir), Err(LogError::Corrupt { .. })));
    let log = EmbeddedLog::open_read_only(&dir).unwrap();
    assert!(matches!(read_all(&log), Err(LogError::Corrupt { .. })));
    // Also a reader that starts at the stray's name (`log cat --from`).
    let from_stray = log
        .reader(stray)
        .and_then(|mut reader| reader.next(Duration::ZERO));
    assert!(
        matches!(from_stray, Err(LogError::Corrupt { .. })),
        "{from_stray:?}"
    );
    drop(log);
    assert!(matches!(
        EmbeddedLog::open(&dir, options(512)),
        Err(LogError::Corrupt { .. })
    ));
}

/// Records gone from the end of the log, with the index that listed them left behind (the
/// last segment deleted, emptied, emptied below its header, or cut at a record boundary):
/// `check` names them, and a writer keeps them in `LOST` before it reuses their offsets,
/// so they stay named. A flipped bit in an index entry's offset is no such loss.
#[test]
fn records_gone_from_the_end_are_named_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("original");
    let bases = segmented(&original);
    let last = *bases.last().unwrap();
    type Damage = fn(&Path, u64);
    let cases: [(&str, Damage, u64); 4] = [
        (
            "last segment deleted",
            |dir, last| std::fs::remove_file(segment(dir, last)).unwrap(),
            0,
        ),
        (
            "last segment emptied",
            |dir, last| std::fs::write(segment(dir, last), b"").unwrap(),
            0,
        ),
        (
            "last segment below its header",
            |dir, last| {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(segment(dir, last))
                    .unwrap();
                f.set_len(10).unwrap();
            },
            0,
        ),
        (
            "last segment cut after its first record",
            |dir, last| {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(segment(dir, last))
                    .unwrap();
                f.set_len(16 + frame(last as usize)).unwrap();
            },
            1,
        ),
    ];
    for (what, damage, kept) in cases {
        let dir = tmp.path().join(what.replace(' ', "-"));
        copy_dir(&original, &dir);
        damage(&dir, last);
        let report = check(&dir).unwrap();
        let (_, first, listed) = report.lost_tail.clone().expect(what);
        assert_eq!(first, last + kept, "{what}");
        assert!(listed >= first, "{what}");
        let log = EmbeddedLog::open(&dir, options(512)).unwrap();
        let lost = log.lost().cloned().expect(what);
        assert_eq!((lost.first, lost.last_listed), (first, listed), "{what}");
        log.append(&[record(99).as_slice()]).unwrap();
        drop(log);
        // The index that showed it is rebuilt; the loss is kept, once.
        let found = lhc_log::embedded::lost_records(&dir).unwrap();
        assert_eq!(found, vec![Ok(lost)], "{what}");
        let reopened = EmbeddedLog::open(&dir, options(512)).unwrap();
        assert!(reopened.lost().is_none(), "{what}: found once");
    }

    // A flipped high bit in the last index entry's offset: the entry's position is inside
    // the segment, so it is a damaged index, not records lost.
    let dir = tmp.path().join("flipped");
    copy_dir(&original, &dir);
    let idx = dir.join(format!("{last:020}.idx"));
    let mut bytes = std::fs::read(&idx).unwrap();
    let at = bytes.len() - 16;
    bytes[at + 7] ^= 0x40;
    std::fs::write(&idx, &bytes).unwrap();
    assert_eq!(check(&dir).unwrap().lost_tail, None);
    let log = EmbeddedLog::open(&dir, options(512)).unwrap();
    assert!(log.lost().is_none());
    assert!(lhc_log::embedded::lost_records(&dir).unwrap().is_empty());
    // A line whose range ends before it starts is no finding (hostile testing: it was
    // printed as records 100..=5).
    std::fs::write(dir.join("LOST"), "00000000000000000000.log 100 5\n").unwrap();
    assert_eq!(
        lhc_log::embedded::lost_records(&dir).unwrap(),
        vec![Err("00000000000000000000.log 100 5".to_string())]
    );
}

/// `LOCK` deleted under running writers: the next writer locks a new `LOCK` file, so the
/// lock on the log directory is what keeps two writers from writing at the same offsets
/// (found by hostile testing: a node's acknowledged record was overwritten by `lhc log
/// append`, and the log was corrupted).
#[test]
fn writers_stay_exclusive_when_lock_is_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let a = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    a.append(&[&record(0)]).unwrap();
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    let b = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    let per_writer = 1500;
    let offsets: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = [&a, &b]
            .into_iter()
            .enumerate()
            .map(|(w, log)| {
                s.spawn(move || {
                    let mut got = Vec::new();
                    for i in 0..per_writer {
                        got.extend(log.append(&[&record(1 + w * per_writer + i)]).unwrap());
                    }
                    got
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = offsets.concat();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 2 * per_writer, "every offset given once");
    let report = check(&dir).unwrap();
    assert_eq!(report.records, 1 + 2 * per_writer as u64);
    assert_eq!(report.end_offset, 1 + 2 * per_writer as u64);
}

/// Every segment deleted while the indexes remain is not a new log: a writer refuses
/// (it started a new log at offset 0, found by hostile testing), readers say the same,
/// and nothing is created.
#[test]
fn a_log_whose_segments_were_all_deleted_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let bases = segmented(&dir);
    for base in &bases {
        std::fs::remove_file(segment(&dir, *base)).unwrap();
    }
    let said = |e: LogError| {
        let text = e.to_string();
        assert!(
            matches!(e, LogError::NotALog { .. })
                && text.contains("the log's segments were deleted"),
            "{text}"
        );
    };
    said(
        EmbeddedLog::open(&dir, options(512))
            .map(|_| ())
            .unwrap_err(),
    );
    said(EmbeddedLog::open_read_only(&dir).map(|_| ()).unwrap_err());
    assert!(list_segments(&dir).unwrap().is_empty(), "nothing created");
}

/// Indexes left further on than the log's end (the segments from the end on deleted, and
/// the index at the end with them) still show the loss: `check` names it, and a writer
/// keeps it in LOST from the end on before reusing the offsets (an index past the end was
/// ignored and an append reused the offsets silently; found by hostile testing).
#[test]
fn an_index_left_past_the_end_shows_the_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let bases = segmented(&dir);
    let n = bases.len();
    let (cut, last) = (bases[n - 2], bases[n - 1]);
    std::fs::remove_file(segment(&dir, cut)).unwrap();
    std::fs::remove_file(segment(&dir, last)).unwrap();
    std::fs::remove_file(dir.join(format!("{cut:020}.idx"))).unwrap();
    let report = check(&dir).unwrap();
    assert_eq!(report.end_offset, cut);
    let (_, first, listed) = report.lost_tail.expect("the loss is named");
    assert_eq!(first, cut);
    assert!(listed >= last, "{listed} {last}");
    let log = EmbeddedLog::open(&dir, options(512)).unwrap();
    let lost = log.lost().expect("kept").clone();
    assert_eq!((lost.first, lost.last_listed), (cut, listed));
    assert_eq!(lost.segment, segment(&dir, cut));
}

/// A symbolic link swapped under a running writer: it stops appending (the path names
/// another directory now), rather than go on in the old one while other writers append
/// at the same offsets in the new one (found by hostile testing).
#[test]
fn a_writer_stops_when_its_directory_is_swapped() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, link) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("log"),
    );
    write(&a, 3, 1 << 20);
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let log = EmbeddedLog::open(&link, options(1 << 20)).unwrap();
    assert_eq!(log.append(&[&record(3)]).unwrap(), vec![3]);
    copy_dir(&a, &b);
    let swap = tmp.path().join("swap");
    std::os::unix::fs::symlink(&b, &swap).unwrap();
    std::fs::rename(&swap, &link).unwrap();
    let refused = log.append(&[&record(4)]).unwrap_err().to_string();
    assert!(refused.contains("moved or replaced"), "{refused}");
    assert_eq!(
        check(&a).unwrap().end_offset,
        4,
        "nothing more in the old one"
    );
    assert_eq!(check(&b).unwrap().end_offset, 4, "nor in the new one");
}

/// The first segment emptied, or cut to its header, while its index lists records: every
/// record is gone, and a writer refuses rather than start the log again at offset 0 over
/// them, as for a directory whose segments were deleted (found by hostile testing).
#[test]
fn a_first_segment_emptied_is_refused_by_writers() {
    let tmp = tempfile::tempdir().unwrap();
    for keep in [0u64, 10, 16] {
        let dir = tmp.path().join(format!("keep-{keep}"));
        write(&dir, 30, 1 << 20);
        let seg = segment(&dir, 0);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(keep)
            .unwrap();
        let refused = EmbeddedLog::open(&dir, options(1 << 20))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("every record is gone"),
            "{keep}: {refused}"
        );
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), keep, "unchanged");
        assert!(
            check(&dir).unwrap().lost_tail.is_some(),
            "{keep}: check names it"
        );
    }
}

/// A second loss inside the offsets of an earlier one (offsets are reused after a loss) is
/// kept in LOST too: only the same line counts as already said (a range test skipped it
/// while the warning said it was kept; found in review). And a junk file named like an
/// index in an empty directory proves nothing: a new log is made there.
#[test]
fn a_later_loss_over_reused_offsets_is_kept_and_junk_indexes_prove_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 60, 1 << 20);
    let seg = segment(&dir, 0);
    let cut_at = |records: usize| {
        let bytes = std::fs::read(&seg).unwrap();
        let mut at = 16usize;
        for _ in 0..records {
            at += 20 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        }
        std::fs::write(&seg, &bytes[..at]).unwrap();
    };
    cut_at(30);
    {
        let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
        assert_eq!(log.lost().unwrap().first, 30);
        let more: Vec<Vec<u8>> = (100..120).map(record).collect();
        let refs: Vec<&[u8]> = more.iter().map(Vec::as_slice).collect();
        log.append(&refs).unwrap();
    }
    cut_at(40);
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    assert_eq!(log.lost().unwrap().first, 40);
    let kept: Vec<u64> = lhc_log::embedded::lost_records(&dir)
        .unwrap()
        .into_iter()
        .map(|k| k.unwrap().first)
        .collect();
    assert_eq!(kept, [30, 40]);

    let fresh = tmp.path().join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::write(fresh.join(format!("{:020}.idx", 5)), b"junk").unwrap();
    // One entry's worth of junk at the first index's name: a position inside the header.
    let mut entry = 5u64.to_le_bytes().to_vec();
    entry.extend(3u64.to_le_bytes());
    std::fs::write(fresh.join(format!("{:020}.idx", 0)), entry).unwrap();
    let log = EmbeddedLog::open(&fresh, options(1 << 20)).unwrap();
    assert_eq!(log.append(&[&record(0)]).unwrap(), vec![0]);
}

/// Appends frames for `offsets` to the end of segment `base` of `dir` as a writer does,
/// but without its commit mark: a batch in flight (under the lock) or left by a writer
/// that died.
fn append_raw_frames(dir: &Path, base: u64, offsets: std::ops::Range<u64>, tag: &str) -> u64 {
    use std::io::Write;
    let mut frames = Vec::new();
    for offset in offsets {
        let payload = format!(
            r#"{{"ts":"2026-01-05T09:00:00.000Z","type":"clock.tick","n":{offset},"tag":"{tag}"}}"#
        );
        lhc_log::frame::encode_frame(&mut frames, offset, payload.as_bytes());
    }
    let path = segment(dir, base);
    let before = std::fs::metadata(&path).map_or(0, |m| m.len());
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    if before == 0 {
        file.write_all(&lhc_log::frame::segment_header(base))
            .unwrap();
    }
    file.write_all(&frames).unwrap();
    before
}

fn tag_of(bytes: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    value["tag"].as_str().unwrap_or("").to_string()
}

/// A batch another writer is still appending (it holds the lock, its commit mark not yet
/// moved) is not read: had it failed and been rolled back (a full disk), readers that
/// folded its records would hold a state no replay gives (found by hostile testing: a node
/// reading a `log import --append` that ran out of disk failed, and stayed refused).
#[test]
fn a_batch_still_being_appended_is_not_read_and_its_roll_back_is_never_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 10, 1 << 20);
    assert_eq!(lhc_log::embedded::commit_mark(&dir), Some(10));
    let reader_log = EmbeddedLog::open_read_only(&dir).unwrap();
    let mut follower = reader_log.reader(0).unwrap();
    let mut seen = Vec::new();
    while let Some(e) = follower.next(Duration::ZERO).unwrap() {
        seen.push(e.offset);
    }
    assert_eq!(seen, (0..10).collect::<Vec<_>>());

    // Another writer's batch in flight: it holds LOCK and has written five frames.
    let lock = std::fs::File::open(dir.join("LOCK")).unwrap();
    lock.lock().unwrap();
    let cut = append_raw_frames(&dir, 0, 10..15, "failed");
    assert!(
        follower.next(Duration::from_millis(50)).unwrap().is_none(),
        "a follower waits for the batch's end"
    );
    assert_eq!(reader_log.end_offset().unwrap(), 10, "the end readers see");
    let fresh = read_all(&reader_log).unwrap();
    assert_eq!(fresh.len(), 10, "a new reader stops at the mark too");
    assert_eq!(check(&dir).unwrap().commit_mark, Some(10));

    // The batch fails: rolled back, the lock released. Then a writer appends others.
    std::fs::OpenOptions::new()
        .write(true)
        .open(segment(&dir, 0))
        .unwrap()
        .set_len(cut)
        .unwrap();
    lock.unlock().unwrap();
    assert!(follower.next(Duration::ZERO).unwrap().is_none());
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    assert!(log.lost().is_none() && log.recovery().is_none());
    log.append(&[b"{\"tag\":\"kept\"}".as_slice(); 3]).unwrap();
    drop(log);
    let mut after = Vec::new();
    while let Some(e) = follower.next(Duration::ZERO).unwrap() {
        after.push((e.offset, tag_of(&e.bytes)));
    }
    let kept = |o: u64| (o, "kept".to_string());
    assert_eq!(after, vec![kept(10), kept(11), kept(12)]);
}

/// The same when the failed batch had rolled into a segment of its own, which the roll
/// back removes and the next writer creates anew with other records: a follower that
/// waited at it reads the new segment's records, never the removed one's.
#[test]
fn a_segment_a_failed_batch_created_is_never_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 10, 1 << 20);
    let reader_log = EmbeddedLog::open_read_only(&dir).unwrap();
    let mut follower = reader_log.reader(0).unwrap();
    while follower.next(Duration::ZERO).unwrap().is_some() {}
    assert_eq!(follower.position(), 10);

    let lock = std::fs::File::open(dir.join("LOCK")).unwrap();
    lock.lock().unwrap();
    append_raw_frames(&dir, 10, 10..14, "failed");
    assert!(follower.next(Duration::from_millis(30)).unwrap().is_none());
    std::fs::remove_file(segment(&dir, 10)).unwrap();
    lock.unlock().unwrap();

    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    log.append(&[b"{\"tag\":\"kept\"}".as_slice(); 2]).unwrap();
    drop(log);
    let mut after = Vec::new();
    while let Some(e) = follower.next(Duration::ZERO).unwrap() {
        after.push((e.offset, tag_of(&e.bytes)));
    }
    assert_eq!(
        after,
        vec![(10, "kept".to_string()), (11, "kept".to_string())]
    );
}

/// Whole records past the mark with no writer holding the lock were left by a writer that
/// died mid-batch: read, named by `check`, and kept by the next writer (as before marks).
#[test]
fn records_a_dead_writer_left_past_the_mark_are_read_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 10, 1 << 20);
    append_raw_frames(&dir, 0, 10..13, "orphan");
    let report = check(&dir).unwrap();
    assert_eq!((report.end_offset, report.commit_mark), (13, Some(10)));
    assert!(report.lost_tail.is_none());
    let reader_log = EmbeddedLog::open_read_only(&dir).unwrap();
    assert_eq!(reader_log.end_offset().unwrap(), 13);
    assert_eq!(read_all(&reader_log).unwrap().len(), 13);
    // The next writer takes the lock and has not adopted them yet: readers wait at the
    // mark, but nothing read is gone (found by review: a node that had applied them was
    // told its records were gone), and a reader may still start where it stopped.
    let lock = std::fs::File::open(dir.join("LOCK")).unwrap();
    lock.lock().unwrap();
    assert_eq!(reader_log.end_offset().unwrap(), 10);
    assert_eq!(reader_log.written_end().unwrap(), 13);
    let mut reader = reader_log.reader(13).unwrap();
    assert!(reader.next(Duration::ZERO).unwrap().is_none());
    lock.unlock().unwrap();
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    assert!(log.lost().is_none() && log.recovery().is_none());
    assert_eq!(log.append(&[record(0).as_slice()]).unwrap(), vec![13]);
    drop(log);
    assert_eq!(lhc_log::embedded::commit_mark(&dir), Some(14));
}

/// A log without a mark (written before marks, or a copy without the file) reads as
/// before, and its next writer adds the mark.
#[test]
fn a_log_without_a_mark_reads_as_before_and_gets_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 10, 1 << 20);
    std::fs::remove_file(dir.join(lhc_log::embedded::COMMIT_FILE)).unwrap();
    let reader_log = EmbeddedLog::open_read_only(&dir).unwrap();
    assert_eq!(read_all(&reader_log).unwrap().len(), 10);
    assert_eq!(check(&dir).unwrap().commit_mark, None);
    // A stray or torn mark proves nothing, and holds readers back only while a writer
    // appends (it rewrites the mark when its batch ends): where its batch ends is unknown.
    std::fs::write(dir.join(lhc_log::embedded::COMMIT_FILE), [7u8; 16]).unwrap();
    assert_eq!(lhc_log::embedded::commit_mark(&dir), None);
    assert_eq!(check(&dir).unwrap().lost_tail, None);
    assert_eq!(read_all(&reader_log).unwrap().len(), 10);
    let lock = std::fs::File::open(dir.join("LOCK")).unwrap();
    lock.lock().unwrap();
    let mut reader = reader_log.reader(0).unwrap();
    assert!(reader.next(Duration::ZERO).unwrap().is_none());
    lock.unlock().unwrap();
    assert_eq!(reader.next(Duration::ZERO).unwrap().unwrap().offset, 0);
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    assert!(log.lost().is_none());
    drop(log);
    assert_eq!(lhc_log::embedded::commit_mark(&dir), Some(10));
}

/// Records a writer finished that are gone (the file cut at a record's boundary, past the
/// index's last entry) are named to their exact extent by the mark: by `check`, by a
/// writer (kept in LOST) and by readers' end.
#[test]
fn a_mark_past_the_records_names_every_record_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = EmbeddedLog::open(
        &dir,
        EmbeddedOptions {
            index_interval_bytes: 1 << 20,
            ..options(1 << 20)
        },
    )
    .unwrap();
    log.append(&[record(5).as_slice(); 20]).unwrap();
    drop(log);
    // The index has one entry (offset 0): only the mark knows records 1..=19 existed.
    std::fs::OpenOptions::new()
        .write(true)
        .open(segment(&dir, 0))
        .unwrap()
        .set_len(16 + 15 * frame(5))
        .unwrap();
    let report = check(&dir).unwrap();
    assert_eq!(report.end_offset, 15);
    let (_, first, last) = report.lost_tail.expect("named");
    assert_eq!((first, last), (15, 19));
    assert_eq!(
        lhc_log::embedded::lost_past(&dir, 15).map(|l| (l.1, l.2)),
        Some((15, 19))
    );
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    let lost = log.lost().cloned().expect("the writer names it");
    assert_eq!((lost.first, lost.last_listed), (15, 19));
    assert_eq!(log.append(&[record(0).as_slice()]).unwrap(), vec![15]);
    drop(log);
    assert_eq!(
        lhc_log::embedded::lost_records(&dir).unwrap(),
        vec![Ok(lost)]
    );
    assert_eq!(lhc_log::embedded::commit_mark(&dir), Some(16));
}

/// A writer stopped while it holds the lock (`kill -STOP` on an import) fails the others'
/// batches after `lock_wait`, naming the lock, instead of hanging them (found by hostile
/// testing: a node's launches waited as long, its probes UP).
#[test]
fn a_lock_held_too_long_fails_the_batch_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 3, 1 << 20);
    let quick = EmbeddedOptions {
        lock_wait: Duration::from_millis(200),
        ..options(1 << 20)
    };
    let log = EmbeddedLog::open(&dir, quick.clone()).unwrap();
    let lock = std::fs::File::open(dir.join("LOCK")).unwrap();
    lock.lock().unwrap();
    let err = log.append(&[&record(3)]).unwrap_err().to_string();
    assert!(
        err.contains("held the log's lock for more than 200ms"),
        "{err}"
    );
    // Opening waits as long, then says so.
    let err = EmbeddedLog::open(&dir, quick).err().unwrap().to_string();
    assert!(err.contains("held the log's lock"), "{err}");
    lock.unlock().unwrap();
    assert_eq!(log.append(&[&record(3)]).unwrap(), vec![3]);
}

/// Once a batch has waited `lock_wait` in vain, the batches after it fail within moments
/// while the lock stays held, instead of each waiting its own `lock_wait` (found by
/// hostile testing: a node's launches queued behind a failing batch waited twice as
/// long); once the lock is free, batches append again and wait in full as before.
#[test]
fn batches_after_one_that_waited_in_vain_for_the_lock_fail_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 3, 1 << 20);
    let wait = Duration::from_millis(1500);
    let log = EmbeddedLog::open(
        &dir,
        EmbeddedOptions {
            lock_wait: wait,
            ..options(1 << 20)
        },
    )
    .unwrap();
    let lock = std::fs::File::open(dir.join("LOCK")).unwrap();
    lock.lock().unwrap();
    // A batch that fails only once it waited `lock_wait` in full.
    let fails_after_full_wait = |n: usize| {
        let started = std::time::Instant::now();
        assert!(log.append(&[&record(n)]).is_err());
        assert!(started.elapsed() >= wait);
    };
    fails_after_full_wait(3);
    let started = std::time::Instant::now();
    let err = log.append(&[&record(3)]).unwrap_err().to_string();
    // Moments, not another `lock_wait` (20 ms of waiting; a loaded machine's margin).
    assert!(started.elapsed() < wait / 2, "{:?}", started.elapsed());
    assert!(
        err.contains("still holds the log's lock, which a batch before this one waited"),
        "{err}"
    );
    // Once `lock_wait` has passed since the full wait failed, a batch waits in
    // full again (another writer may hold it for a moment, legitimately).
    std::thread::sleep(wait);
    fails_after_full_wait(3);
    lock.unlock().unwrap();
    assert_eq!(log.append(&[&record(3)]).unwrap(), vec![3]);
    // The lock taken again: the next batch waits in full before it fails.
    lock.lock().unwrap();
    fails_after_full_wait(4);
    lock.unlock().unwrap();
    assert_eq!(log.append(&[&record(4)]).unwrap(), vec![4]);
}

/// A `COMMITTED` that is not a regular file is no mark for readers (who never wait on a
/// FIFO nor follow a link), and a writer refuses it, naming it (found by hostile testing:
/// a FIFO hung every command; a symbolic link had a writer overwrite the file it named).
#[test]
fn a_mark_that_is_not_a_regular_file_is_refused_by_writers_and_ignored_by_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious bytes, not a mark").unwrap();
    for kind in ["fifo", "symlink", "dir"] {
        let dir = tmp.path().join(kind);
        write(&dir, 3, 1 << 20);
        let mark = dir.join(lhc_log::embedded::COMMIT_FILE);
        std::fs::remove_file(&mark).unwrap();
        match kind {
            "fifo" => mkfifo(&mark),
            "symlink" => std::os::unix::fs::symlink(&victim, &mark).unwrap(),
            _ => std::fs::create_dir(&mark).unwrap(),
        }
        let reader_log = EmbeddedLog::open_read_only(&dir).unwrap();
        assert_eq!(read_all(&reader_log).unwrap().len(), 3, "{kind}");
        assert_eq!(check(&dir).unwrap().commit_mark, None, "{kind}");
        let err = EmbeddedLog::open(&dir, options(1 << 20))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("not the 16-byte file of the log's commit mark"),
            "{kind}: {err}"
        );
    }
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"precious bytes, not a mark"
    );
}

/// A mark removed under a running writer (then written anew by another): the writer
/// writes the file readers read, not the deleted one it held open.
#[test]
fn a_mark_replaced_under_a_writer_is_the_one_it_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    log.append(&[&record(0)]).unwrap();
    let mark = dir.join(lhc_log::embedded::COMMIT_FILE);
    std::fs::remove_file(&mark).unwrap();
    log.append(&[&record(1)]).unwrap();
    assert_eq!(lhc_log::embedded::commit_mark(&dir), Some(2));
    std::fs::remove_file(&mark).unwrap();
    let other = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    other.append(&[&record(2)]).unwrap();
    drop(other);
    log.append(&[&record(3)]).unwrap();
    assert_eq!(lhc_log::embedded::commit_mark(&dir), Some(4));
}

/// A FIFO where the log keeps an index or a segment never blocks a reader (found by
/// hostile testing: a node's probes, its metrics and its stop hung on `open`): an index
/// that is no regular file is ignored (it is only a hint), a segment that is none is an
/// error that names it.
#[test]
fn a_fifo_in_place_of_an_index_or_a_segment_never_blocks_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let bases = segmented(&dir);
    let fifo = |path: &Path| {
        std::fs::remove_file(path).unwrap();
        mkfifo(path);
    };
    let within = |what: &'static str, f: Box<dyn FnOnce() + Send>| {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = done.send(());
        });
        finished
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{what} blocked"));
    };
    let expected = read_all(&EmbeddedLog::open_read_only(&dir).unwrap()).unwrap();
    let last = *bases.last().unwrap();
    fifo(&dir.join(format!("{last:020}.idx")));
    let at = dir.clone();
    within(
        "reading past an index that is a FIFO",
        Box::new(move || {
            let log = EmbeddedLog::open_read_only(&at).unwrap();
            assert_eq!(read_all(&log).unwrap(), expected);
            assert_eq!(log.end_offset().unwrap(), 40);
        }),
    );
    // A writer refuses it at once, naming it, rather than blocking on it for good (and
    // holding the lock meanwhile).
    let at = dir.clone();
    within(
        "appending with an index that is a FIFO",
        Box::new(move || {
            let err = EmbeddedLog::open(&at, options(512))
                .and_then(|log| log.append(&[&record(40)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains("not a regular file"), "{err}");
        }),
    );
    let lock = tmp.path().join("lock-fifo");
    std::fs::create_dir(&lock).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), lock.join(entry.file_name())).unwrap();
        }
    }
    fifo(&lock.join("LOCK"));
    within(
        "opening a writer whose LOCK is a FIFO",
        Box::new(move || {
            let err = EmbeddedLog::open(&lock, options(512))
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains("not a regular file"), "{err}");
        }),
    );
    fifo(&dir.join(format!("{last:020}.log")));
    let at = dir.clone();
    within(
        "reading a segment that is a FIFO",
        Box::new(move || {
            let log = EmbeddedLog::open_read_only(&at).unwrap();
            let err = read_all(&log).unwrap_err().to_string();
            assert!(err.contains("not a regular file"), "{err}");
        }),
    );
}

/// A last segment replaced under a running writer: by a copy renamed over it, the writer
/// appends to the file readers read (it wrote through the file it held, which no reader
/// reads any more, and a node's launches waited for a fold that never saw them: found by
/// hostile testing); by a FIFO, the batch is refused at once, naming it.
#[test]
fn a_segment_replaced_under_a_writer_is_the_one_it_appends_to() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    assert_eq!(log.append(&[&record(0), &record(1)]).unwrap(), vec![0, 1]);
    // A follower at the end of the segment (a node's fold) reads the new file too: it
    // waited on the old one for good.
    let mut follower = log.reader(0).unwrap();
    for i in 0..2 {
        assert_eq!(follower.next(Duration::ZERO).unwrap().unwrap().offset, i);
    }
    assert!(follower.next(Duration::ZERO).unwrap().is_none());
    let seg = segment(&dir, 0);
    let copy = tmp.path().join("copy");
    std::fs::copy(&seg, &copy).unwrap();
    std::fs::rename(&copy, &seg).unwrap();
    assert_eq!(log.append(&[&record(2)]).unwrap(), vec![2]);
    let next = follower.next(Duration::from_secs(5)).unwrap();
    assert_eq!(next.map(|e| (e.offset, e.bytes)), Some((2, record(2))));
    assert_eq!(log.append(&[&record(3)]).unwrap(), vec![3]);
    let reader = EmbeddedLog::open_read_only(&dir).unwrap();
    let read = read_all(&reader).unwrap();
    assert_eq!(
        read,
        (0..4).map(|i| (i as u64, record(i))).collect::<Vec<_>>()
    );
    assert_eq!(check(&dir).unwrap().commit_mark, Some(4));
    // Its index replaced by an empty file: the writer writes the index readers read.
    let index = dir.join(format!("{:020}.idx", 0));
    let before = std::fs::read(&index).unwrap();
    assert!(!before.is_empty());
    std::fs::write(&copy, b"").unwrap();
    std::fs::rename(&copy, &index).unwrap();
    assert_eq!(log.append(&[&record(4)]).unwrap(), vec![4]);
    assert!(std::fs::read(&index).unwrap().starts_with(&before));

    std::fs::remove_file(&seg).unwrap();
    mkfifo(&seg);
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(log.append(&[&record(5)]).map_err(|e| e.to_string()));
    });
    let err = finished
        .recv_timeout(Duration::from_secs(20))
        .expect("an append to a segment replaced by a FIFO blocked")
        .unwrap_err();
    assert!(err.contains("not a regular file"), "{err}");
    assert!(err.contains(&seg.display().to_string()), "{err}");
}

/// A huge sparse file in place of an index (2 GiB of nothing on disk) is never read
/// whole: readers read every record and find the end, `log check` passes, and a writer
/// appends, in little memory (every reader read the whole file into memory: one took
/// 1 GB and 19 s of `log stats`, found by hostile testing).
#[test]
fn a_huge_sparse_index_is_never_read_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let bases = segmented(&dir);
    let expected = read_all(&EmbeddedLog::open_read_only(&dir).unwrap()).unwrap();
    for base in [bases[0], *bases.last().unwrap()] {
        let index = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(format!("{base:020}.idx")))
            .unwrap();
        index.set_len(2 << 30).unwrap();
    }
    let peak_before = peak_rss_kib();
    let reader = EmbeddedLog::open_read_only(&dir).unwrap();
    assert_eq!(read_all(&reader).unwrap(), expected);
    assert_eq!(reader.end_offset().unwrap(), 40);
    let mut from_middle = reader.reader(35).unwrap();
    assert_eq!(
        from_middle.next(Duration::ZERO).unwrap().unwrap().offset,
        35
    );
    let report = check(&dir).unwrap();
    assert_eq!((report.records, report.end_offset), (40, 40));
    assert_eq!((report.torn_tail, report.lost_tail), (None, None));
    let log = EmbeddedLog::open(&dir, options(512)).unwrap();
    assert_eq!(log.append(&[&record(40)]).unwrap(), vec![40]);
    drop(log);
    assert_eq!(read_all(&reader).unwrap().len(), 41);
    let grown = peak_rss_kib() - peak_before;
    assert!(grown < 256 << 10, "peak memory grew by {grown} KiB");
}

/// This process's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A symbolic link or a directory in place of the last segment's index: a writer refuses,
/// naming it, and never writes through the link (it truncated and wrote the file the link
/// named; a directory said only "Is a directory": found by hostile testing). Readers,
/// for whom the index is only a hint, read every record.
#[test]
fn a_writer_never_writes_an_index_through_a_link_nor_into_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious bytes, not an index").unwrap();
    for kind in ["symlink", "dir"] {
        let dir = tmp.path().join(kind);
        let bases = segmented(&dir);
        let last = *bases.last().unwrap();
        let index = dir.join(format!("{last:020}.idx"));
        std::fs::remove_file(&index).unwrap();
        match kind {
            "symlink" => std::os::unix::fs::symlink(&victim, &index).unwrap(),
            _ => std::fs::create_dir(&index).unwrap(),
        }
        let reader = EmbeddedLog::open_read_only(&dir).unwrap();
        assert_eq!(read_all(&reader).unwrap().len(), 40, "{kind}");
        let err = EmbeddedLog::open(&dir, options(512))
            .and_then(|log| log.append(&[&record(40)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a regular file"), "{kind}: {err}");
        assert!(err.contains(&index.display().to_string()), "{kind}: {err}");
        assert_eq!(reader.end_offset().unwrap(), 40, "{kind}");
        // Nothing changed: the link's target was never read as evidence of lost records
        // (it wrote a false loss to LOST), and `log check` finds nothing.
        assert!(!dir.join(lhc_log::embedded::LOST_FILE).exists(), "{kind}");
        let report = check(&dir).unwrap();
        assert_eq!((report.lost_tail, report.end_offset), (None, 40), "{kind}");
        assert_eq!(list_segments(&dir).unwrap(), bases, "{kind}");
    }
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"precious bytes, not an index"
    );
}

/// A last segment that is a symbolic link to a file elsewhere (an admin's storage layout)
/// is appended to as before, and readers read it.
#[test]
fn a_last_segment_linked_from_elsewhere_is_appended_to() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    log.append(&[&record(0)]).unwrap();
    drop(log);
    let seg = segment(&dir, 0);
    let elsewhere = tmp.path().join("elsewhere.log");
    std::fs::rename(&seg, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &seg).unwrap();
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    for i in 1..4 {
        assert_eq!(log.append(&[&record(i)]).unwrap(), vec![i as u64]);
    }
    assert!(std::fs::symlink_metadata(&seg)
        .unwrap()
        .file_type()
        .is_symlink());
    let read = read_all(&EmbeddedLog::open_read_only(&dir).unwrap()).unwrap();
    assert_eq!(
        read,
        (0..4).map(|i| (i as u64, record(i))).collect::<Vec<_>>()
    );
}

/// A flipped bit in an index entry's position (the index has no checksum), or an entry
/// crafted at the segment's end: readers start from a frame the entry does not land on
/// only after checking it, so they read every record (they read none past the entry,
/// silently, or called the log corrupt: found by hostile testing).
#[test]
fn an_index_entry_that_does_not_land_on_its_frame_is_not_used() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let bases = segmented(&dir);
    let expected = read_all(&EmbeddedLog::open_read_only(&dir).unwrap()).unwrap();
    for base in [bases[0], *bases.last().unwrap()] {
        let path = dir.join(format!("{base:020}.idx"));
        let clean = std::fs::read(&path).unwrap();
        let n = clean.len();
        assert!(n >= 32, "two entries at least");
        let seg_len = std::fs::metadata(segment(&dir, base)).unwrap().len();
        let last_offset = u64::from_le_bytes(clean[n - 16..n - 8].try_into().unwrap());
        let damaged = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            let log = EmbeddedLog::open_read_only(&dir).unwrap();
            assert_eq!(read_all(&log).unwrap(), expected, "{base}");
            assert_eq!(log.end_offset().unwrap(), 40, "{base}");
            let mut from = log.reader(last_offset).unwrap();
            let first = from.next(Duration::ZERO).unwrap().unwrap();
            assert_eq!(first.offset, last_offset, "{base}");
            let report = check(&dir).unwrap();
            assert_eq!((report.records, report.lost_tail), (40, None), "{base}");
        };
        // A bit of the last entry's position flipped upward: past the segment's end.
        let mut flipped = clean.clone();
        flipped[n - 6] ^= 0x02;
        damaged(&flipped);
        // Inside the segment, off its frame.
        let mut off = clean.clone();
        off[n - 8] ^= 0x01;
        damaged(&off);
        // Crafted at the segment's exact end.
        let mut at_end = clean.clone();
        at_end[n - 8..].copy_from_slice(&seg_len.to_le_bytes());
        damaged(&at_end);
        std::fs::write(&path, &clean).unwrap();
    }
}

/// Junk named like an index (a file's text, a link's target) is no evidence of records
/// lost: a writer appends without writing LOST (it kept records up to offset 6e18 as lost,
/// and `log check` failed for good: found by hostile testing).
#[test]
fn junk_in_place_of_an_index_is_no_evidence_of_a_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 5, 1 << 20);
    std::fs::write(dir.join(format!("{:020}.idx", 0)), b"PRECIOUS DATA DO").unwrap();
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    assert_eq!(log.append(&[&record(5)]).unwrap(), vec![5]);
    assert!(log.lost().is_none());
    assert!(!dir.join(lhc_log::embedded::LOST_FILE).exists());
    drop(log);
    let report = check(&dir).unwrap();
    assert_eq!((report.records, report.lost_tail), (6, None));
}

/// `LOST` that is a symbolic link: a writer that finds records lost refuses, naming it,
/// and never writes through the link.
#[test]
fn lost_is_never_written_through_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious bytes\n").unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 5, 1 << 20);
    let seg = segment(&dir, 0);
    let older = std::fs::read(&seg).unwrap();
    {
        let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
        log.append(&[&record(5), &record(6)]).unwrap();
    }
    // An older copy of the segment: records 5 and 6 are gone, the commit mark names them.
    std::fs::write(&seg, &older).unwrap();
    let lost = dir.join(lhc_log::embedded::LOST_FILE);
    std::os::unix::fs::symlink(&victim, &lost).unwrap();
    let err = EmbeddedLog::open(&dir, options(1 << 20))
        .and_then(|log| log.append(&[&record(5)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a regular file"), "{err}");
    assert!(err.contains(&lost.display().to_string()), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious bytes\n");
}

/// A follower whose last segment is replaced by an older copy, on which a writer appends
/// at the offsets it had read: an error naming the loss, never the new records skipped
/// (a node's fold skipped them silently and stayed UP with another state than the log's:
/// found by hostile testing).
#[test]
fn a_follower_whose_log_went_back_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    log.append(&[&record(0), &record(1)]).unwrap();
    let seg = segment(&dir, 0);
    let older = tmp.path().join("older");
    std::fs::copy(&seg, &older).unwrap();
    log.append(&[&record(2), &record(3)]).unwrap();
    let mut follower = log.reader(0).unwrap();
    for i in 0..4 {
        assert_eq!(follower.next(Duration::ZERO).unwrap().unwrap().offset, i);
    }
    std::fs::rename(&older, &seg).unwrap();
    // The writer keeps the loss in LOST and appends at offset 2 again.
    assert_eq!(log.append(&[&record(20)]).unwrap(), vec![2]);
    assert!(dir.join(lhc_log::embedded::LOST_FILE).exists());
    let err = follower
        .next(Duration::from_secs(2))
        .unwrap_err()
        .to_string();
    assert!(err.contains("went back"), "{err}");
}

/// A guarded append (`append_past`) is refused, writing nothing, once the log ends below
/// its floor (an older copy restored under the writer), and shares a group commit with
/// plain appends otherwise: a node appending after its log went back wrote its records at
/// offsets its fold had passed, brokered later by whoever folded the log (hostile testing).
#[test]
fn a_guarded_append_below_its_floor_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = std::sync::Arc::new(EmbeddedLog::open(&dir, options(1 << 20)).unwrap());
    log.append(&[&record(0), &record(1)]).unwrap();
    let seg = segment(&dir, 0);
    let older = tmp.path().join("older");
    std::fs::copy(&seg, &older).unwrap();
    // At or past its floor it appends, as `append` does.
    assert_eq!(log.append_past(2, &[&record(2)]).unwrap(), vec![2]);
    assert_eq!(log.append_past(0, &[&record(3)]).unwrap(), vec![3]);
    std::fs::rename(&older, &seg).unwrap();
    let err = log.append_past(4, &[&record(40)]).unwrap_err();
    assert!(
        matches!(err, lhc_log::LogError::WentBack { floor: 4, end: 2 }),
        "{err}"
    );
    assert!(err.to_string().contains("nothing was written"), "{err}");
    assert_eq!(log.end_offset().unwrap(), 2);
    // Many writers at once: each guarded request is judged alone, in whatever batches
    // they share; the plain ones and the guarded ones the end allows are written.
    let threads: Vec<_> = (0..8usize)
        .map(|i| {
            let log = log.clone();
            std::thread::spawn(move || {
                let bytes = record(100 + i);
                match i % 3 {
                    0 => log.append(&[&bytes]).map(|_| ()),
                    1 => log.append_past(0, &[&bytes]).map(|_| ()),
                    _ => log.append_past(1_000, &[&bytes]).map(|_| ()),
                }
            })
        })
        .collect();
    let mut refused = 0;
    for (i, t) in threads.into_iter().enumerate() {
        match t.join().unwrap() {
            Ok(()) => assert_ne!(i % 3, 2, "a floor past the end was written"),
            Err(e) => {
                assert!(
                    matches!(e, lhc_log::LogError::WentBack { floor: 1_000, .. }),
                    "{e}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 2);
    assert_eq!(log.end_offset().unwrap(), 2 + 6);
    let mut reader = log.reader(2).unwrap();
    let mut seen = Vec::new();
    while let Some(r) = reader.next(Duration::ZERO).unwrap() {
        seen.push(r.bytes);
    }
    assert_eq!(seen.len(), 6);
    for i in [102, 105] {
        assert!(!seen.contains(&record(i)), "record {i} was written");
    }
}

/// A backup of hard links (`cp -al`, rsnapshot) keeps what it held: a writer gives each
/// file it changes in place (the last segment, its index, the commit mark, `LOST`) a
/// copy of its own first, whether the links were made before it opened the log or while
/// it appends. Before, appends, cuts and the mark went into the backup's files too, and
/// the backup's mark named records it lacked as lost (found by hostile testing).
#[test]
fn a_hard_linked_backup_keeps_what_it_held() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let snapshot = |to: &Path| -> Vec<(String, Vec<u8>)> {
        std::fs::create_dir_all(to).unwrap();
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if !entry.file_type().unwrap().is_file() || entry.file_name() == "LOCK" {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            std::fs::hard_link(entry.path(), to.join(&name)).unwrap();
            files.push((name, std::fs::read(entry.path()).unwrap()));
        }
        files.sort();
        files
    };
    let same = |to: &Path, files: &[(String, Vec<u8>)]| {
        for (name, bytes) in files {
            assert_eq!(
                &std::fs::read(to.join(name)).unwrap(),
                bytes,
                "{} changed",
                to.join(name).display()
            );
        }
    };
    let batch = |from: usize| -> Vec<Vec<u8>> { (from..from + 5).map(record).collect() };
    let append = |log: &EmbeddedLog, from: usize| {
        let records = batch(from);
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        log.append(&refs).unwrap()
    };
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    append(&log, 0);
    // Linked while the writer has the log open.
    let live = tmp.path().join("live-backup");
    let held = snapshot(&live);
    assert!(held
        .iter()
        .any(|(n, _)| n == lhc_log::embedded::COMMIT_FILE));
    assert_eq!(append(&log, 5), (5..10).collect::<Vec<u64>>());
    same(&live, &held);
    drop(log);
    // Linked before a writer opens it, with a torn tail the writer cuts.
    let cold = tmp.path().join("cold-backup");
    let segment = segment(&dir, 0);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend_from_slice(b"torn");
    std::fs::write(&segment, &bytes).unwrap();
    let held_cold = snapshot(&cold);
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    assert!(log.recovery().is_some(), "the torn tail is cut");
    assert_eq!(append(&log, 10), (10..15).collect::<Vec<u64>>());
    drop(log);
    same(&cold, &held_cold);
    same(&live, &held);
    // The backups read as the logs they were: no loss named, every record there.
    for (backup, records) in [(&live, 5u64), (&cold, 10)] {
        let report = lhc_log::embedded::check(backup).unwrap();
        assert_eq!(report.end_offset, records, "{report:?}");
        assert!(report.lost_tail.is_none(), "{report:?}");
    }
    assert_eq!(lhc_log::embedded::check(&dir).unwrap().end_offset, 15);
    // `LOST` too: a loss found after the backup was linked goes into the log's own.
    let lost = dir.join(lhc_log::embedded::LOST_FILE);
    std::fs::write(&lost, "00000000000000000000.log 100 200\n").unwrap();
    let with_lost = tmp.path().join("lost-backup");
    let held_lost = snapshot(&with_lost);
    // The live segment (a copy of its own, not the backup's) cut by its last two records,
    // which are as long as each other: the mark names them, and the next writer keeps
    // the loss in LOST.
    let name = segment.file_name().unwrap().to_string_lossy().into_owned();
    let ten = held_cold.iter().find(|(n, _)| *n == name).unwrap().1.len() as u64 - 4;
    let fifteen = std::fs::metadata(&segment).unwrap().len();
    let frame = (fifteen - ten) / 5;
    let own = tmp.path().join("own-segment");
    std::fs::copy(&segment, &own).unwrap();
    std::fs::rename(&own, &segment).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(fifteen - 2 * frame)
        .unwrap();
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    let found = log.lost().expect("the cut records are found lost").clone();
    assert_eq!((found.first, found.last_listed), (13, 14));
    drop(log);
    let kept = std::fs::read_to_string(&lost).unwrap();
    assert!(
        kept.lines().count() == 2 && kept.contains(" 13 14"),
        "{kept}"
    );
    same(&with_lost, &held_lost);
    // The index alone linked while a writer appends.
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    append(&log, 20);
    let index = dir.join(format!("{:020}.idx", 0));
    let other = tmp.path().join("index-link");
    std::fs::hard_link(&index, &other).unwrap();
    let held_index = std::fs::read(&other).unwrap();
    for from in [25, 30, 35] {
        append(&log, from);
    }
    assert_eq!(std::fs::read(&other).unwrap(), held_index);
}

/// A FIFO named like the segment after the last one is no segment being created (it
/// reads as empty): `check` refuses it, naming it, instead of a clean report that the
/// readers then contradicted (`lhc log check` printed "framing ok" before failing).
#[test]
fn a_fifo_after_the_last_segment_is_refused_by_check() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write(&dir, 3, 1 << 20);
    mkfifo(&segment(&dir, 3));
    let err = lhc_log::embedded::check(&dir).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
}

/// A follower whose segment is replaced by a copy refilled past it checks that the copy
/// holds, at the last offset it read, the record it read: other records there are an
/// error (a node read on and kept records the log no longer had: hostile testing); the
/// same records, more after them, read on.
#[test]
fn a_follower_whose_segment_is_replaced_by_other_records_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    // Lagging: records were appended to the old file after the follower's last read, so
    // it finds the replacement past what it knew committed (a busy node), not at the end.
    for (same, lagging) in [(false, false), (true, false), (false, true)] {
        let dir = tmp.path().join(format!("log-{same}-{lagging}"));
        let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
        log.append(&[&record(0), &record(1), &record(2), &record(3)])
            .unwrap();
        let mut follower = log.reader(0).unwrap();
        for i in 0..4 {
            assert_eq!(follower.next(Duration::ZERO).unwrap().unwrap().offset, i);
        }
        // A copy made elsewhere: records 0 and 1, then others (or the same) and more.
        if lagging {
            log.append(&[&record(4)]).unwrap();
        }
        let other = tmp.path().join(format!("other-{same}-{lagging}"));
        let copy = EmbeddedLog::open(&other, options(1 << 20)).unwrap();
        let rest: Vec<Vec<u8>> = if same {
            (2..6).map(record).collect()
        } else {
            (20..24).map(record).collect()
        };
        let mut all = vec![record(0), record(1)];
        all.extend(rest);
        let refs: Vec<&[u8]> = all.iter().map(Vec::as_slice).collect();
        copy.append(&refs).unwrap();
        drop(copy);
        std::fs::rename(segment(&other, 0), segment(&dir, 0)).unwrap();
        let _ = std::fs::remove_file(dir.join(format!("{:020}.idx", 0)));
        let got = follower.next(Duration::from_millis(200));
        if same {
            assert_eq!(got.unwrap().unwrap().offset, 4);
        } else {
            let err = got.unwrap_err().to_string();
            assert!(err.contains("another record at offset 3"), "{err}");
        }
    }
}

/// A follower waiting at the end whose last record is cut in place and written again
/// with other records of the same size (frames that line up where it stands) says so at
/// its next record: it read on silently, and a node kept records the log no longer had
/// (found by hostile testing). Records simply appended read on.
#[test]
fn a_follower_whose_last_record_is_rewritten_in_place_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    log.append(&[&record(10), &record(11), &record(12)])
        .unwrap();
    let mut follower = log.reader(0).unwrap();
    for i in 0..3 {
        assert_eq!(follower.next(Duration::ZERO).unwrap().unwrap().offset, i);
    }
    assert!(follower.next(Duration::ZERO).unwrap().is_none());
    log.append(&[&record(13)]).unwrap();
    assert_eq!(follower.next(Duration::ZERO).unwrap().unwrap().offset, 3);
    assert!(follower.next(Duration::ZERO).unwrap().is_none());
    drop(log);
    // The last two records cut in place; then records of the same size in their place.
    let seg = segment(&dir, 0);
    let len = std::fs::metadata(&seg).unwrap().len();
    let frame = {
        let four = len;
        let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
        log.append(&[&record(14)]).unwrap();
        drop(log);
        std::fs::metadata(&seg).unwrap().len() - four
    };
    assert_eq!(follower.next(Duration::ZERO).unwrap().unwrap().offset, 4);
    assert!(follower.next(Duration::ZERO).unwrap().is_none());
    let file = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    file.set_len(len + frame - 2 * frame).unwrap();
    drop(file);
    let log = EmbeddedLog::open(&dir, options(1 << 20)).unwrap();
    log.append(&[&record(23), &record(24), &record(25)])
        .unwrap();
    let err = follower.next(Duration::ZERO).unwrap_err().to_string();
    assert!(err.contains("replaced in place"), "{err}");
}

/// A `LOST` that is a FIFO or a link is refused by readers, naming it, at once (a FIFO
/// hung `log check` for good; a link to /dev/zero read until memory ran out).
#[test]
fn a_lost_file_that_is_no_regular_file_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    for kind in ["fifo", "zero"] {
        let dir = tmp.path().join(kind);
        write(&dir, 3, 1 << 20);
        let lost = dir.join(lhc_log::embedded::LOST_FILE);
        match kind {
            "fifo" => mkfifo(&lost),
            _ => std::os::unix::fs::symlink("/dev/zero", &lost).unwrap(),
        }
        let (done, finished) = std::sync::mpsc::channel();
        let at = dir.clone();
        std::thread::spawn(move || {
            let _ = done.send(lhc_log::embedded::lost_records(&at).map(|l| l.len()));
        });
        let err = finished
            .recv_timeout(Duration::from_secs(20))
            .expect("reading LOST blocked")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a regular file"), "{kind}: {err}");
    }
}
