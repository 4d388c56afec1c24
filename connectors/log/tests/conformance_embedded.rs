//! The conformance suite on the embedded log, with tiny segments so rolling and the sparse
//! index are exercised on every case.

mod suite;

use lhc_log::{EmbeddedLog, EmbeddedOptions, FsyncPolicy, Log};

struct Embedded {
    dir: tempfile::TempDir,
    options: EmbeddedOptions,
}

impl suite::Harness for Embedded {
    fn open(&self) -> Box<dyn Log> {
        Box::new(EmbeddedLog::open(self.dir.path().join("log"), self.options.clone()).unwrap())
    }
}

fn fresh() -> Box<Embedded> {
    Box::new(Embedded {
        dir: tempfile::tempdir().unwrap(),
        options: EmbeddedOptions {
            fsync: FsyncPolicy::Always,
            segment_bytes: 1024,
            index_interval_bytes: 256,
            create: true,
            ..EmbeddedOptions::default()
        },
    })
}

conformance_tests!(fresh);

mod interval_fsync {
    use super::*;

    fn fresh() -> Box<Embedded> {
        let mut h = super::fresh();
        h.options.fsync = FsyncPolicy::IntervalMs(5);
        h.options.segment_bytes = 64 << 20;
        h
    }

    conformance_tests!(fresh);
}
