//! `lhc connector ...`: the connector node's cache snapshot (RocksDB), folded from the log.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use lhc_node::{Store, StoreOptions};

use crate::target::LogArgs;

/// The connector node.
#[derive(Subcommand)]
pub enum ConnectorCommand {
    /// Fold the site log into the node's cache snapshot, from where it stopped.
    ///
    /// State, applied offset and outputs are committed together every --batch records, so
    /// the fold can be killed at any instant and resumed without losing or repeating
    /// anything.
    Fold {
        #[command(flatten)]
        target: LogArgs,
        /// The node's data directory (the RocksDB cache snapshot).
        #[arg(long, value_name = "DIR", default_value = "lhc-data/node")]
        data: PathBuf,
        /// Records per commit.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Keep folding records as they are appended (stop with Ctrl-C).
        #[arg(long)]
        follow: bool,
        /// fsync each commit (survives power loss; kill -9 is survived either way).
        #[arg(long)]
        sync: bool,
        /// RocksDB block cache, MiB (bounds read memory).
        #[arg(long, value_name = "MIB", default_value_t = 32)]
        block_cache_mb: usize,
        /// RocksDB write buffer, MiB (bounds memtable memory; two are kept).
        #[arg(long, value_name = "MIB", default_value_t = 16)]
        write_buffer_mb: usize,
    },
    /// Print the outputs stored in the node's cache snapshot, in order (JSONL).
    Outputs {
        /// The node's data directory.
        #[arg(long, value_name = "DIR", default_value = "lhc-data/node")]
        data: PathBuf,
    },
    /// Print the next offset to apply and the state digest of the node's cache snapshot.
    Status {
        /// The node's data directory.
        #[arg(long, value_name = "DIR", default_value = "lhc-data/node")]
        data: PathBuf,
    },
}

/// Runs one `lhc connector` command.
pub fn run(command: ConnectorCommand, quiet: bool) -> anyhow::Result<ExitCode> {
    match command {
        ConnectorCommand::Fold {
            target,
            data,
            batch,
            follow,
            sync,
            block_cache_mb,
            write_buffer_mb,
        } => {
            let options = StoreOptions {
                block_cache_bytes: block_cache_mb.max(1) << 20,
                write_buffer_bytes: write_buffer_mb.max(1) << 20,
                sync,
            };
            let store = Store::open(&data, &options)?;
            let log = target.open_for_read()?;
            // Following runs until the process is stopped (Ctrl-C); nothing else ends it.
            let never = || false;
            let (summary, engine) = lhc_node::fold(
                &store,
                &*log,
                batch,
                follow.then_some(&never as &dyn Fn() -> bool),
            )
            .with_context(|| format!("folding {} into {}", log.describe(), data.display()))?;
            if !quiet {
                eprintln!(
                    "folded {} record(s) from offset {} into {} ({} commit(s)); next offset {}; digest {}",
                    summary.applied,
                    summary.resumed_at,
                    data.display(),
                    summary.commits,
                    summary.next,
                    engine.digest()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ConnectorCommand::Outputs { data } => {
            let store = Store::open(&data, &StoreOptions::default())?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for (_, json) in store.outputs()? {
                out.write_all(&json)?;
                out.write_all(b"\n")?;
            }
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        ConnectorCommand::Status { data } => {
            let store = Store::open(&data, &StoreOptions::default())?;
            let (engine, next) = store.load()?;
            println!("next offset {next}");
            println!("digest {}", engine.digest());
            Ok(ExitCode::SUCCESS)
        }
    }
}
