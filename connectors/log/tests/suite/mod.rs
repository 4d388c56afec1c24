//! One conformance suite for every log backend (R-LOG-1, R-LOG-2, R-LOG-3): append, read
//! from an offset, follow, restart, ordering and bad records. Each backend's test file
//! supplies a way to open (and reopen) the same log.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lhc_engine::{decode_record_at, DecodeErrorKind};
use lhc_log::validate::{append_validated, AppendError};
use lhc_log::{Log, LogError};

/// Opens the log under test; calling it again reopens the same log (a restart).
pub trait Harness {
    fn open(&self) -> Box<dyn Log>;
}

pub fn record(i: usize) -> Vec<u8> {
    let ms = i % 1000;
    let s = (i / 1000) % 60;
    format!(
        r#"{{"ts":"2026-01-05T09:00:{s:02}.{ms:03}Z","type":"health.check","connector":"c{}.example","ok":{}}}"#,
        i % 3,
        i.is_multiple_of(2)
    )
    .into_bytes()
}

fn append_n(log: &dyn Log, from: usize, n: usize) -> Vec<u64> {
    let records: Vec<Vec<u8>> = (from..from + n).map(record).collect();
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    log.append(&refs).expect("append")
}

fn read_all(log: &dyn Log, from: u64) -> Vec<(u64, Vec<u8>)> {
    let mut reader = log.reader(from).expect("reader");
    let mut out = Vec::new();
    while let Some(entry) = reader.next(Duration::ZERO).expect("read") {
        out.push((entry.offset, entry.bytes));
    }
    out
}

pub fn empty_log_reads_nothing(h: &dyn Harness) {
    let log = h.open();
    let start = log.start_offset().unwrap();
    assert_eq!(log.end_offset().unwrap(), start);
    assert!(log
        .reader(start)
        .unwrap()
        .next(Duration::ZERO)
        .unwrap()
        .is_none());
}

pub fn append_gives_dense_offsets_and_reads_back(h: &dyn Harness) {
    let log = h.open();
    let offsets = append_n(&*log, 0, 10);
    let more = append_n(&*log, 10, 5);
    let all: Vec<u64> = offsets.iter().chain(&more).copied().collect();
    assert_eq!(
        all,
        (0..15).collect::<Vec<u64>>(),
        "offsets are dense from 0 (R-LOG-1)"
    );
    assert_eq!(log.end_offset().unwrap(), 15);
    let read = read_all(&*log, 0);
    assert_eq!(read.len(), 15);
    for (i, (offset, bytes)) in read.iter().enumerate() {
        assert_eq!(*offset, i as u64);
        assert_eq!(bytes, &record(i), "bytes come back exactly as appended");
    }
}

pub fn read_from_any_offset(h: &dyn Harness) {
    let log = h.open();
    append_n(&*log, 0, 40);
    for from in [0u64, 1, 17, 39, 40] {
        let read = read_all(&*log, from);
        assert_eq!(read.len() as u64, 40 - from, "from {from}");
        if let Some((offset, bytes)) = read.first() {
            assert_eq!(*offset, from);
            assert_eq!(bytes, &record(from as usize));
        }
    }
    match log.reader(41) {
        Err(LogError::OffsetOutOfRange {
            requested: 41,
            end: 40,
            ..
        }) => {}
        Err(other) => panic!("reading past the end: {other}"),
        Ok(_) => panic!("reading past the end must fail"),
    }
}

pub fn follow_sees_later_appends(h: &dyn Harness) {
    let log: Arc<dyn Log> = Arc::from(h.open());
    append_n(&*log, 0, 3);
    let mut reader = log.reader(3).unwrap();
    assert!(reader.next(Duration::ZERO).unwrap().is_none());
    let writer = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            append_n(&*log, 3, 2);
        })
    };
    let started = Instant::now();
    let first = reader
        .next(Duration::from_secs(20))
        .unwrap()
        .expect("followed record");
    assert_eq!((first.offset, first.bytes), (3, record(3)));
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "it waited for the append"
    );
    let second = reader
        .next(Duration::from_secs(20))
        .unwrap()
        .expect("second record");
    assert_eq!(second.offset, 4);
    writer.join().unwrap();
    assert!(reader.next(Duration::from_millis(100)).unwrap().is_none());
}

pub fn restart_keeps_everything(h: &dyn Harness) {
    {
        let log = h.open();
        append_n(&*log, 0, 7);
    }
    let log = h.open();
    assert_eq!(log.end_offset().unwrap(), 7);
    assert_eq!(append_n(&*log, 7, 2), vec![7, 8]);
    drop(log);
    let log = h.open();
    let read = read_all(&*log, 0);
    assert_eq!(
        read.iter().map(|r| r.0).collect::<Vec<_>>(),
        (0..9).collect::<Vec<_>>()
    );
    assert_eq!(read[8].1, record(8));
}

pub fn concurrent_appenders_keep_their_order(h: &dyn Harness) {
    let log: Arc<dyn Log> = Arc::from(h.open());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..25 {
                    let n = t * 1000 + i;
                    mine.extend(log.append(&[&record(n)]).unwrap());
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..100).collect::<Vec<u64>>(),
        "every append got a distinct offset"
    );
    let read = read_all(&*log, 0);
    for t in 0..4usize {
        let mine: Vec<&Vec<u8>> = read
            .iter()
            .map(|r| &r.1)
            .filter(|bytes| (0..25).any(|i| **bytes == record(t * 1000 + i)))
            .collect();
        let expected: Vec<Vec<u8>> = (0..25).map(|i| record(t * 1000 + i)).collect();
        assert_eq!(
            mine,
            expected.iter().collect::<Vec<_>>(),
            "thread {t} order kept"
        );
    }
}

pub fn bad_records_are_rejected_or_located(h: &dyn Harness) {
    let log = h.open();
    append_n(&*log, 0, 2);
    let good = record(2);
    let bad =
        br#"{"ts":"2026-01-05T09:00:00.000Z","type":"health.check","connector":"c1","ok":"yes"}"#;
    match append_validated(&*log, &[&good, bad]) {
        Err(AppendError::Invalid(rejected)) => {
            assert_eq!(rejected.len(), 1);
            assert_eq!(rejected[0].line, 2);
            assert_eq!(rejected[0].error.path, "ok");
            assert_eq!(rejected[0].error.kind, DecodeErrorKind::WrongType);
        }
        other => panic!("invalid batch must be refused: {other:?}"),
    }
    assert_eq!(
        log.end_offset().unwrap(),
        2,
        "nothing of a refused batch is appended"
    );
    // A raw writer (another tool) can still put bad bytes in the log: they keep their offset
    // and decoding names it, so replay can quarantine them (R-LOG-3).
    assert_eq!(log.append(&[bad]).unwrap(), vec![2]);
    let read = read_all(&*log, 2);
    let error = decode_record_at(&read[0].1, read[0].0).unwrap_err();
    assert_eq!(error.offset, Some(2));
    assert!(
        error.to_string().contains("offset 2") && error.to_string().contains("`ok`"),
        "{error}"
    );
}

/// Runs every case, each on a fresh log from `fresh`.
#[macro_export]
macro_rules! conformance_tests {
    ($fresh:expr) => {
        #[test]
        fn empty_log_reads_nothing() {
            suite::empty_log_reads_nothing(&*$fresh());
        }
        #[test]
        fn append_gives_dense_offsets_and_reads_back() {
            suite::append_gives_dense_offsets_and_reads_back(&*$fresh());
        }
        #[test]
        fn read_from_any_offset() {
            suite::read_from_any_offset(&*$fresh());
        }
        #[test]
        fn follow_sees_later_appends() {
            suite::follow_sees_later_appends(&*$fresh());
        }
        #[test]
        fn restart_keeps_everything() {
            suite::restart_keeps_everything(&*$fresh());
        }
        #[test]
        fn concurrent_appenders_keep_their_order() {
            suite::concurrent_appenders_keep_their_order(&*$fresh());
        }
        #[test]
        fn bad_records_are_rejected_or_located() {
            suite::bad_records_are_rejected_or_located(&*$fresh());
        }
    };
}
