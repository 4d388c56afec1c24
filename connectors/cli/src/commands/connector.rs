//! `lhc connector ...`: the connector node's cache snapshot (RocksDB), folded from the log.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lhc_log::{EmbeddedLog, EmbeddedOptions, KafkaLog, Log};
use lhc_node::live::{self, tls, NodeConfig, SiteLog};
use lhc_node::{Store, StoreOptions};

use crate::args::LogArgs;

/// The connector node.
// Parsed once per process; boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum ConnectorCommand {
    /// Fold the site log into the node's cache snapshot, from where it stopped.
    ///
    /// State, applied offset and outputs are committed together every --batch records (and
    /// whenever the fold reaches the end of the log), so the fold can be killed at any
    /// instant and resumed without losing or repeating anything. Ctrl-C (or SIGTERM) stops
    /// it after the record being applied, commits what was folded and says where it
    /// stopped (exit status 130, 143 for SIGTERM; 0 with --follow, which Ctrl-C ends); a
    /// second Ctrl-C quits at once, keeping what was committed.
    Fold {
        #[command(flatten)]
        target: LogArgs,
        /// The node's data directory, the same as `connector run --data` takes: its RocksDB
        /// cache snapshot is DIR/snapshot, so a fold continues a node's store and a node
        /// continues a fold's.
        #[arg(long, value_name = "DIR", default_value = "lhc-data/node")]
        data: PathBuf,
        /// Records per commit (and a commit whenever the fold reaches the end of the log).
        /// Each commit writes what changed since the previous one, so fewer, larger
        /// commits fold faster (a 12-hour, 40,000-VDA log: 44 s with 1,000, 24 s with
        /// 10,000). Commits are written on a thread of their own while the fold goes on,
        /// so a fold killed part-way folds again what its last commits had not written:
        /// up to about three times this many records. At least 1.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        batch: u64,
        /// Keep folding records as they are appended (stop with Ctrl-C: what was folded is
        /// committed first).
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Run the connector node: fold the log, observe, and serve the HTTP API.
    ///
    /// The node catches up with the site log into its cache snapshot (RocksDB under
    /// --data), then health-checks --cloud-url, probes its zone peers' /election, appends a
    /// clock.tick when the log is quiet, and serves StoreFront (/storefront/heartbeat,
    /// /storefront/resources, /storefront/launch), VDAs (/vda/heartbeat, /vda/session), load
    /// balancers (/adc/probe), peers (/election), operations (/livez, /readyz, /metrics,
    /// /openapi.json; these answer during the catch-up too), a live dashboard (/), admin
    /// (/admin/..., bearer token) and the read-only SDK (/sdk/..., while enabled). Every
    /// observation and request becomes a log record; answers come from the fold, so a
    /// replay of the log makes the same decisions. Outputs about this connector are
    /// published to the output log. Ctrl-C or SIGTERM appends connector.lifecycle stop and
    /// exits.
    Run {
        /// FQDN of this connector, as the site configuration names it.
        #[arg(long, value_name = "FQDN")]
        connector: String,
        #[command(flatten)]
        target: LogArgs,
        /// The node's data directory: cache snapshot and output log
        /// [default: lhc-data/node-FQDN].
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Address of the HTTP API (loopback unless you mean otherwise).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Control plane URL, http(s)://HOST[:PORT]/PATH (anything else is refused at
        /// start); any 2xx answer is a good health check. An https URL is
        /// checked against the system's certificate authorities and --cloud-ca; redirects
        /// are followed only to the same host.
        #[arg(long, value_name = "URL", value_parser = parse_cloud_url)]
        cloud_url: String,
        /// Extra certificate authorities (PEM) to trust for --cloud-url and peer probes,
        /// besides the system's: a private CA, or a test one.
        #[arg(long, value_name = "FILE")]
        cloud_ca: Option<PathBuf>,
        /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
        /// Peers are then probed over https.
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key (PEM) of --tls-cert.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Period of health checks.
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
        health_interval: Duration,
        /// Period of peer probes (keep it well under the engine's peer_timeout_s).
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
        probe_interval: Duration,
        /// A peer that fails probes and wrote no health check for this long has crashed:
        /// record its stop so VDAs re-register with the next elected broker.
        #[arg(long, value_name = "DURATION", default_value = "180s", value_parser = humantime::parse_duration)]
        peer_dead_after: Duration,
        /// Append a clock.tick when the log has been quiet this long, so timers fire.
        #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
        tick_interval: Duration,
        /// How long a launch waits for its decision before answering 503.
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
        launch_timeout: Duration,
        /// Longest time folded records stay uncommitted (outputs are published after commit;
        /// after a crash the node refolds at most this much).
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
        commit_interval: Duration,
        /// A peer's API base URL, FQDN=URL (repeat); others are http://FQDN:PORT with this
        /// node's port (https with --tls-cert).
        #[arg(long = "peer", value_name = "FQDN=URL", value_parser = parse_peer)]
        peers: Vec<(String, String)>,
        /// With --kafka: how long an append may wait for the broker before the node
        /// brokers from its local journal instead.
        #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
        kafka_append_timeout: Duration,
        /// With --kafka: the topic outputs are published to (message key: this connector).
        #[arg(long, value_name = "TOPIC", default_value = "lhc.outputs")]
        output_topic: String,
        /// File holding the admin bearer token; without it admin endpoints answer 401.
        #[arg(long, value_name = "FILE")]
        admin_token_file: Option<PathBuf>,
        /// Site (farm) name that /adc/probe reports [default: --site, else "site"].
        #[arg(long, value_name = "NAME")]
        site_name: Option<String>,
        /// Largest request body accepted, KiB.
        #[arg(long, value_name = "KIB", default_value_t = 256)]
        body_limit_kb: usize,
        /// /readyz answers ready while at most this many log records wait to be folded (the
        /// node's own checks and ticks are a few records: 0 makes readiness flap).
        #[arg(long, value_name = "RECORDS", default_value_t = 1000)]
        ready_lag: u64,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Print the outputs stored in the node's cache snapshot, in order (JSONL).
    Outputs {
        /// The node's data directory [default: lhc-data/node, else the only
        /// lhc-data/node-FQDN that `connector run` made].
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Print the node's journal (Kafka mode), in the order the node applied it (JSONL).
    ///
    /// Every record the node applied, from the topic or written locally while Kafka was
    /// unreachable; `lhc replay` of this file reproduces the node's decisions exactly.
    Journal {
        /// The node's data directory [default: lhc-data/node, else the only
        /// lhc-data/node-FQDN that `connector run` made].
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Print the next offset to apply and the state digest of the node's cache snapshot
    /// (and, when it stopped part-way through a record applied in steps, how far it got).
    Status {
        /// The node's data directory [default: lhc-data/node, else the only
        /// lhc-data/node-FQDN that `connector run` made].
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        #[command(flatten)]
        format: crate::args::FormatArgs,
    },
}

/// RocksDB settings of the cache snapshot (memory bounds, durability).
#[derive(clap::Args, Clone, Debug)]
pub struct StoreArgs {
    /// fsync each commit (survives power loss; kill -9 is survived either way).
    #[arg(long)]
    sync: bool,
    /// RocksDB block cache, MiB (bounds read memory).
    #[arg(long, value_name = "MIB", default_value_t = 32)]
    block_cache_mb: usize,
    /// RocksDB write buffer, MiB (bounds memtable memory; two are kept).
    #[arg(long, value_name = "MIB", default_value_t = 16)]
    write_buffer_mb: usize,
    /// Keep a checkpoint of the engine state in the cache snapshot after every N records
    /// folded (0: none), so `lhc query --at T --data DIR` starts near T. Written on a
    /// thread of its own: `connector fold` waits for each (exactly every N), a running
    /// node never does (one due while the previous is being written is taken a few
    /// records later). A process killed while checkpoints wait to be written loses them;
    /// the next fold takes one at its first record. A fold of --kafka takes none.
    #[arg(long, value_name = "N", default_value_t = lhc_node::checkpoints::DEFAULT_EVERY)]
    checkpoint_every: u64,
    /// How many checkpoints to keep (the newest; older ones are deleted).
    #[arg(long, value_name = "K", default_value_t = lhc_node::checkpoints::DEFAULT_KEEP,
          value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_keep: u64,
}

impl StoreArgs {
    fn options(&self) -> StoreOptions {
        StoreOptions {
            block_cache_bytes: self.block_cache_mb.max(1) << 20,
            write_buffer_bytes: self.write_buffer_mb.max(1) << 20,
            sync: self.sync,
        }
    }

    fn checkpoints(&self) -> lhc_node::checkpoints::CheckpointPolicy {
        lhc_node::checkpoints::CheckpointPolicy {
            every: self.checkpoint_every,
            keep: usize::try_from(self.checkpoint_keep).unwrap_or(usize::MAX),
            build: crate::build_id(),
        }
    }
}

/// Runs one `lhc connector` command.
pub fn run(command: ConnectorCommand, quiet: bool) -> anyhow::Result<ExitCode> {
    match command {
        ConnectorCommand::Fold {
            target,
            data,
            batch,
            follow,
            store: store_args,
        } => {
            let options = store_args.options();
            let dir = fold_store_dir(&data);
            // The log first: a log that does not open leaves no empty store behind.
            let log = target.open_for_read()?;
            let store = Store::open(&dir, &options)?;
            // Ctrl-C or SIGTERM: a following fold ends, another one stops early; either
            // commits what it folded first.
            let signalled = stop_on_signal(quiet)?;
            let stop = || signalled.load(std::sync::atomic::Ordering::SeqCst) != 0;
            let until = if follow {
                lhc_node::Until::Stopped(&stop)
            } else {
                lhc_node::Until::End(&stop)
            };
            // Checkpoints name records by offset: a topic partition shared by sites has
            // gaps in this site's offsets, so only an embedded log's fold takes them.
            let checkpoints = match target.kafka.kafka {
                None => store_args.checkpoints(),
                Some(_) => lhc_node::checkpoints::CheckpointPolicy::off(),
            };
            let (summary, engine) = lhc_node::fold_until(
                &store,
                &*log,
                usize::try_from(batch).unwrap_or(usize::MAX),
                until,
                &checkpoints,
            )
            .with_context(|| format!("folding {} into {}", log.describe(), dir.display()))?;
            let said = format!(
                "folded {} record(s) from offset {} into {} ({} commit(s)); next offset {}; digest {}",
                summary.applied,
                summary.resumed_at,
                dir.display(),
                summary.commits,
                summary.next,
                engine.digest()
            );
            if summary.interrupted {
                // Said even with -q: the log was not folded to its end. The status is the
                // shell's for the signal (130 Ctrl-C, 143 SIGTERM).
                eprintln!(
                    "interrupted before the end of the log: {said}; run the same command to continue from offset {}",
                    summary.next
                );
                let signal = signalled.load(std::sync::atomic::Ordering::SeqCst);
                return Ok(ExitCode::from(128 + signal as u8));
            }
            if !quiet {
                eprintln!("{said}");
            }
            // Even with -q: a store folded from a log that lost records is not the site's
            // whole story.
            if let Some(log_dir) = log.local_dir() {
                for loss in lhc_replay::source::losses(log_dir, &*log, summary.next) {
                    eprintln!("warning: {loss}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ConnectorCommand::Run {
            connector,
            target,
            data,
            listen,
            cloud_url,
            cloud_ca,
            tls_cert,
            tls_key,
            health_interval,
            probe_interval,
            peer_dead_after,
            tick_interval,
            launch_timeout,
            commit_interval,
            kafka_append_timeout,
            output_topic,
            peers,
            admin_token_file,
            site_name,
            body_limit_kb,
            ready_lag,
            store,
        } => {
            let data = data.unwrap_or_else(|| PathBuf::from(format!("lhc-data/node-{connector}")));
            let admin_token = match admin_token_file {
                Some(file) => {
                    let token = std::fs::read_to_string(&file)
                        .with_context(|| {
                            format!("reading the admin token from {}", file.display())
                        })?
                        .trim()
                        .to_string();
                    if token.is_empty() {
                        anyhow::bail!(
                            "{} is empty: put the admin bearer token in it",
                            file.display()
                        );
                    }
                    Some(token)
                }
                None => None,
            };
            let mut config = NodeConfig::new(&connector, &data);
            config.site = site_name
                .or_else(|| target.kafka.site.clone())
                .unwrap_or_else(|| "site".into());
            config.listen = listen;
            config.cloud_url = cloud_url;
            if let Some(ca) = &cloud_ca {
                config.extra_roots = tls::ca_certificates(ca)?;
            }
            if let (Some(cert), Some(key)) = (&tls_cert, &tls_key) {
                config.tls = Some(tls::server_config(cert, key)?);
            }
            config.health_interval = health_interval.max(Duration::from_millis(100));
            config.probe_interval = probe_interval.max(Duration::from_millis(100));
            config.peer_dead_after = peer_dead_after;
            config.tick_interval = tick_interval.max(Duration::from_millis(100));
            config.launch_timeout = launch_timeout;
            config.commit_interval = commit_interval;
            config.peers = peers.into_iter().collect();
            config.admin_token = admin_token;
            config.body_limit = body_limit_kb.max(1) << 10;
            config.ready_lag = ready_lag;
            config.build = (
                env!("CARGO_PKG_VERSION").to_string(),
                env!("LHC_COMMIT").to_string(),
            );
            config.store = store.options();
            config.checkpoints = store.checkpoints();
            if data.exists() && !data.is_dir() {
                anyhow::bail!(
                    "--data {} is a file: give the directory where the node keeps its cache \
                     snapshot (created if missing)",
                    data.display()
                );
            }
            std::fs::create_dir_all(&data)
                .with_context(|| format!("creating the --data directory {}", data.display()))?;
            let site_log = match target.kafka.options()? {
                Some(mut options) => {
                    // A short delivery timeout: past it the node brokers from its journal.
                    options.timeout = kafka_append_timeout.max(Duration::from_millis(200));
                    // Brokers unreachable at start: the node starts from its journal and
                    // last state (see `live::run`), so nothing waits for them here.
                    SiteLog::Kafka(Arc::new(KafkaLog::open_lazy(options)?))
                }
                None => SiteLog::Direct(Arc::from(target.open_for_append()?)),
            };
            let describe = match &site_log {
                SiteLog::Kafka(k) => k.describe(),
                SiteLog::Direct(l) => l.describe(),
            };
            let outputs_dir = data.join("outputs");
            let (outputs, outputs_name): (Arc<dyn Log>, String) = match target.kafka.options()? {
                Some(mut options) => {
                    // Every node publishes to one topic; the message key is the node.
                    options.topic = output_topic.clone();
                    options.site = connector.clone();
                    options.timeout = kafka_append_timeout.max(Duration::from_millis(200));
                    let log = KafkaLog::open_lazy(options)
                        .with_context(|| format!("opening the output topic {output_topic}"))?;
                    let name = log.describe();
                    (Arc::new(log), name)
                }
                None => (
                    Arc::new(
                        EmbeddedLog::open(&outputs_dir, EmbeddedOptions::default()).with_context(
                            || format!("opening the output log {}", outputs_dir.display()),
                        )?,
                    ),
                    outputs_dir.display().to_string(),
                ),
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            // Through the log, so --log-format json keeps every stderr line JSON.
            if !quiet {
                let scheme = if config.tls.is_some() {
                    "https"
                } else {
                    "http"
                };
                tracing::info!(
                    "connector {connector}: log {}, snapshot {}, outputs {}, API on {scheme}://{listen}",
                    describe,
                    data.join("snapshot").display(),
                    outputs_name
                );
            }
            runtime
                .block_on(async move {
                    let shutdown = shutdown_signal();
                    live::run(config, site_log, outputs, shutdown).await
                })
                .with_context(|| format!("connector node {connector}"))?;
            Ok(ExitCode::SUCCESS)
        }
        ConnectorCommand::Journal { data } => {
            let store = open_existing(&node_data(data)?)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut after = None;
            loop {
                let chunk = store.journal(after, 10_000)?;
                let Some(&(last, _)) = chunk.last() else {
                    break;
                };
                for (_, bytes) in &chunk {
                    out.write_all(bytes)?;
                    out.write_all(b"\n")?;
                }
                after = Some(last);
            }
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        ConnectorCommand::Outputs { data } => {
            let store = open_existing(&node_data(data)?)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut after = None;
            loop {
                let chunk = store.outputs_after(after, 10_000)?;
                let Some(&(offset, index, _)) = chunk.last() else {
                    break;
                };
                for (_, _, json) in &chunk {
                    out.write_all(json)?;
                    out.write_all(b"\n")?;
                }
                after = Some((offset, index));
            }
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        ConnectorCommand::Status { data, format } => {
            let store = open_existing(&node_data(data)?)?;
            let (engine, next) = store.load()?;
            let mut status = serde_json::json!({ "next_offset": next, "digest": engine.digest() });
            // A record after a long gap is applied and committed in steps: stopped between
            // two, the state is part-way through it, and no replay of whole records has
            // this digest until the node's next start finishes the record.
            let part_way = store.outputs_of(next)?;
            if part_way > 0 {
                status["part_way"] = serde_json::json!({
                    "offset": next,
                    "outputs_committed": part_way,
                });
            }
            match format.get() {
                crate::args::Format::Table => {
                    println!("next offset {next}");
                    println!("digest {}", engine.digest());
                    if part_way > 0 {
                        println!(
                            "part-way through record {next}: {part_way} of its outputs \
                             committed (a long gap's timers, applied in steps); the digest is \
                             of that point inside the record, and the node's next start \
                             finishes it (on an embedded log, `lhc connector fold` does too)"
                        );
                    }
                }
                crate::args::Format::Json => {
                    println!("{}", serde_json::to_string_pretty(&status)?)
                }
                crate::args::Format::Jsonl => println!("{}", serde_json::to_string(&status)?),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Parses `FQDN=URL`.
fn parse_peer(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, url)) if !name.is_empty() && url.starts_with("http") => {
            Ok((name.to_string(), url.to_string()))
        }
        _ => Err(format!(
            "expected FQDN=URL, like ddc2.corp.example=http://10.0.0.12:8080; got {text:?}"
        )),
    }
}

/// The number of the first Ctrl-C (SIGINT) or SIGTERM received, 0 before (for work that
/// stops between records and commits what it did); a second one ends the process at once
/// with the shell's status for it (128 + its number), which loses nothing committed (every
/// commit is whole).
fn stop_on_signal(quiet: bool) -> anyhow::Result<Arc<std::sync::atomic::AtomicI32>> {
    use std::sync::atomic::{AtomicI32, Ordering};
    use tokio::signal::unix::{signal, SignalKind};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal handler")?;
    // Installed here, before the work starts: a Ctrl-C from now on is seen.
    let (mut interrupt, mut terminate) = runtime
        .block_on(async {
            Ok::<_, std::io::Error>((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            ))
        })
        .context("installing the Ctrl-C and SIGTERM handlers")?;
    let flag = Arc::new(AtomicI32::new(0));
    let raised = Arc::clone(&flag);
    std::thread::Builder::new()
        .name("lhc-signals".into())
        .spawn(move || {
            runtime.block_on(async move {
                loop {
                    let signal = tokio::select! {
                        _ = interrupt.recv() => libc::SIGINT,
                        _ = terminate.recv() => libc::SIGTERM,
                    };
                    if raised.load(Ordering::SeqCst) != 0 {
                        // `_exit`: no exit handlers while RocksDB's threads run (C++ static
                        // destructors under live threads can crash on the way out).
                        unsafe { libc::_exit(128 + signal) };
                    }
                    raised.store(signal, Ordering::SeqCst);
                    if !quiet {
                        eprintln!(
                            "stopping: committing what was folded (Ctrl-C again to quit at once)"
                        );
                    }
                }
            })
        })
        .context("starting the signal handler")?;
    Ok(flag)
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed when this is called (inside
/// the runtime), not when first polled: a signal during catch-up still stops the node
/// cleanly once it serves.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    let mut terminate = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        tracing::info!("stopping");
    }
}

/// Where `connector fold --data DIR` folds: `DIR/snapshot`, the store `connector run`
/// keeps, except in a directory an older fold made a store of itself (`DIR/CURRENT`), which
/// it continues.
fn fold_store_dir(data: &std::path::Path) -> PathBuf {
    if !data.join("snapshot").is_dir() && data.join("CURRENT").is_file() {
        data.to_path_buf()
    } else {
        data.join("snapshot")
    }
}

/// The store of a node data directory: `DIR/snapshot` (`connector run`, `connector fold`),
/// else `DIR` itself (a store an older `connector fold --data DIR` made).
pub(crate) fn store_dir(data: &std::path::Path) -> PathBuf {
    let run_layout = data.join("snapshot");
    if run_layout.is_dir() {
        run_layout
    } else {
        data.to_path_buf()
    }
}

/// The data directory a read-only command looks at: `--data`, else `lhc-data/node` (the
/// default of `connector fold`), else the one `lhc-data/node-FQDN` (the default of
/// `connector run`). Several of those: the user says which (a `status` right after a
/// default `run` said there was no cache snapshot; found by hostile testing).
fn node_data(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(data) = given {
        return Ok(data);
    }
    let fold = PathBuf::from("lhc-data/node");
    if fold.exists() {
        return Ok(fold);
    }
    let mut runs: Vec<PathBuf> = std::fs::read_dir("lhc-data")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("node-"))
        .map(|e| PathBuf::from("lhc-data").join(e.file_name()))
        .collect();
    runs.sort();
    match runs.as_slice() {
        [] => Ok(fold),
        [one] => Ok(one.clone()),
        several => anyhow::bail!(
            "several node data directories here ({}): say which with --data",
            several
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Opens the cache snapshot of a data directory for reading (read-only: beside a running
/// node too); an error if there is none.
fn open_existing(data: &std::path::Path) -> anyhow::Result<Store> {
    let dir = store_dir(data);
    if !dir.join("CURRENT").exists() {
        anyhow::bail!(
            "no cache snapshot in {} (create one with `lhc connector fold --data {}` or \
             `lhc connector run --data {}`)",
            data.display(),
            data.display(),
            data.display()
        );
    }
    match Store::open_read_only(&dir) {
        // Killed while it was being made: opened to write, its families are made (empty),
        // as any open before read-only ones did.
        Err(lhc_node::NodeError::Unfinished { .. }) => {
            Ok(Store::open(&dir, &StoreOptions::default())?)
        }
        other => Ok(other?),
    }
}

/// `--cloud-url`: an absolute http or https URL with a host. Refused at start: a typo would
/// otherwise fail every health check and write a real outage into the site log.
fn parse_cloud_url(value: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(value).map_err(|e| {
        format!("{value:?} is not a URL ({e}): give the control plane's http(s)://HOST[:PORT]/PATH")
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "{value:?}: the control plane is asked over http or https; give \
             http(s)://HOST[:PORT]/PATH"
        ));
    }
    Ok(value.to_string())
}
