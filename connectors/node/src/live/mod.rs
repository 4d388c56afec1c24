//! The live connector node (`lhc connector run`): a fold thread that applies the site log to
//! the RocksDB cache snapshot, an appender that stamps and writes observations, observers
//! (health checks, peer probes, clock ticks) and the HTTP API.
//!
//! Invariant: the node decides nothing about LHC. Every observation and request is
//! appended to the log first, and answers come from the fold reaching that record, so the
//! live run and a later replay of the log make the same decisions; the rules its read
//! endpoints and observers need come from `lhc_engine::view`. It judges only its own
//! health (`Health`: a dead fold or committer, an unwritable log). Outputs are published to
//! the output log only after the state that produced them is committed, keyed by input
//! offset, so a restart neither repeats nor loses one.

mod appender;
pub mod dashboard;
mod errbody;
mod fold;
mod http;
mod observe;
mod openapi;
mod publish;
pub mod tls;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use lhc_engine::output::LaunchDecision;
use lhc_engine::record::{ConnectorLifecycle, LifecycleEvent};
use lhc_engine::{Engine, Record, Ts};
use lhc_log::{KafkaLog, Log};
use tokio::sync::{oneshot, watch};

pub use appender::{Appender, Applied};
pub use publish::OutputRecord;

use crate::store::{Folder, NodeError, Store, StoreOptions};

/// Everything `lhc connector run` is told.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// FQDN of the connector this node is, as the site configuration names it.
    pub connector: String,
    /// Site (farm) name, reported to load balancers by `/adc/probe`.
    pub site: String,
    /// Directory of the cache snapshot (RocksDB).
    pub data_dir: PathBuf,
    /// Address of the HTTP API.
    pub listen: SocketAddr,
    /// Control plane URL whose answer (any 2xx) is the health check.
    pub cloud_url: String,
    /// Period of health checks.
    pub health_interval: Duration,
    /// Period of peer probes.
    pub probe_interval: Duration,
    /// A peer that fails probes and wrote nothing to the log for this long is recorded as
    /// stopped (it crashed; nobody else will say so).
    pub peer_dead_after: Duration,
    /// A `clock.tick` is appended when the log has been quiet this long.
    pub tick_interval: Duration,
    /// How long a launch waits for its decision before a 503.
    pub launch_timeout: Duration,
    /// Base URL of each peer's API by FQDN; others are `http://FQDN:PORT` (this node's
    /// port; `https` when this node serves TLS).
    pub peers: BTreeMap<String, String>,
    /// Bearer token of the admin endpoints; admin is refused when `None`.
    pub admin_token: Option<String>,
    /// RocksDB memory settings.
    pub store: StoreOptions,
    /// Longest time applied records stay uncommitted.
    pub commit_interval: Duration,
    /// Largest request body accepted, bytes.
    pub body_limit: usize,
    /// Readiness: the node is ready while at most this many log records wait to be folded.
    pub ready_lag: u64,
    /// Version and commit of the build, for `lhc_build_info`.
    pub build: (String, String),
    /// Serve HTTPS with this configuration (`tls::server_config`); plain HTTP when `None`.
    /// Peers are then probed over https too.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// Certificate authorities the health checks and peer probes trust besides the
    /// system's roots (`tls::ca_certificates`).
    pub extra_roots: Vec<reqwest::Certificate>,
    /// Checkpoints of the engine state kept in the store (`crate::checkpoints`).
    pub checkpoints: crate::checkpoints::CheckpointPolicy,
}

impl NodeConfig {
    /// A configuration with the documented defaults.
    pub fn new(connector: impl Into<String>, data_dir: impl Into<PathBuf>) -> NodeConfig {
        NodeConfig {
            connector: connector.into(),
            site: "site".into(),
            data_dir: data_dir.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            cloud_url: "http://127.0.0.1:8079/".into(),
            health_interval: Duration::from_secs(60),
            probe_interval: Duration::from_secs(30),
            peer_dead_after: Duration::from_secs(180),
            tick_interval: Duration::from_secs(5),
            launch_timeout: Duration::from_secs(10),
            peers: BTreeMap::new(),
            admin_token: None,
            store: StoreOptions::default(),
            commit_interval: Duration::from_secs(1),
            body_limit: 256 << 10,
            ready_lag: 1000,
            build: (env!("CARGO_PKG_VERSION").to_string(), "unknown".to_string()),
            tls: None,
            extra_roots: Vec::new(),
            checkpoints: crate::checkpoints::CheckpointPolicy::off(),
        }
    }
}

/// What a launch handler learns from the fold.
#[derive(Debug)]
pub(crate) enum LaunchAnswer {
    /// The engine decided.
    Decided(LaunchDecision),
    /// The record was quarantined: why, and whether it only lost a `ts` race with another
    /// writer (the engine says, `Engine::lost_ts_race`), so that stamping it again
    /// would get it applied.
    Quarantined { error: String, lost_ts_race: bool },
}

/// Wakes the fold thread when this process appended something.
#[derive(Default)]
pub(crate) struct Bell {
    rung: Mutex<u64>,
    cv: Condvar,
}

impl Bell {
    pub(crate) fn ring(&self) {
        *self.rung.lock().expect("bell") += 1;
        self.cv.notify_all();
    }

    fn wait(&self, seen: u64, timeout: Duration) -> u64 {
        let guard = self.rung.lock().expect("bell");
        let (guard, _) = self
            .cv
            .wait_timeout_while(guard, timeout, |n| *n == seen)
            .expect("bell");
        *guard
    }

    fn count(&self) -> u64 {
        *self.rung.lock().expect("bell")
    }
}

/// Counters the fold keeps for `/metrics`.
#[derive(Default)]
pub(crate) struct FoldStats {
    /// This connector's decisions by (outcome, via, reason).
    pub decisions: BTreeMap<(String, String, String), u64>,
    /// Quarantined inputs folded by this process (the catch-up at start included).
    pub quarantined: u64,
    /// Quarantined inputs folded after the catch-up: what this process saw arrive.
    pub quarantined_live: u64,
    /// Last successful import of this connector: (version, ts).
    pub last_import: Option<(u64, Ts)>,
    /// The latest quarantine: (engine offset, error).
    pub last_quarantine: Option<(u64, String)>,
    /// This connector's failed imports (505) in the log folded so far, by rule.
    pub import_failures: BTreeMap<String, u64>,
}

/// The site log a node works on.
#[derive(Clone)]
pub enum SiteLog {
    /// A log every node of the site can read and append to directly (the embedded log):
    /// the fold reads it, appends go to it.
    Direct(Arc<dyn Log>),
    /// A Kafka topic. The fold consumes it into the node's journal (RocksDB); appends go to
    /// Kafka, or, while Kafka is unreachable, straight into the journal and an outbox that
    /// is published when the broker returns.
    Kafka(Arc<KafkaLog>),
}

/// Records the appender hands to the fold while Kafka is unreachable.
pub(crate) struct LocalBatch {
    pub records: Vec<Vec<u8>>,
    pub replies: Vec<oneshot::Sender<Result<u64, String>>>,
}

/// The node's link to Kafka (Kafka mode only).
pub(crate) struct KafkaLink {
    pub kafka: Arc<KafkaLog>,
    /// Appends go to Kafka (else to the journal).
    pub up: AtomicBool,
    /// Local records not yet published to the topic (the appender's backlog).
    pub outbox_len: AtomicUsize,
    /// Local records not yet seen back in the topic, by engine offset (kept by the fold).
    pub unseen: Mutex<BTreeMap<u64, Vec<u8>>>,
    /// Next Kafka offset the fold reads.
    pub next: AtomicU64,
    /// Kafka end offset when last asked.
    pub end: AtomicU64,
    /// Set while the brokers have not answered since this process started: the node
    /// decides from its journal and last state (probes and metrics say so).
    pub unreachable_since_start: AtomicBool,
    pub local: Mutex<std::sync::mpsc::Sender<LocalBatch>>,
}

/// Waiters for the fold to apply a given record (by content hash).
#[derive(Default)]
pub(crate) struct RecordWaiters {
    pub count: AtomicUsize,
    /// Waiters by record hash, oldest first: identical records must not overwrite each
    /// other's waiter (each would otherwise be told "not applied" although it was).
    pub map: Mutex<HashMap<[u8; 16], std::collections::VecDeque<oneshot::Sender<Applied>>>>,
}

/// Milliseconds since the Unix epoch by the wall clock (the only clock the daemon reads;
/// the engine reads none).
pub(crate) fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Content hash of a record (first 16 bytes of SHA-256): stable across versions and hosts.
pub(crate) fn record_hash(bytes: &[u8]) -> [u8; 16] {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    digest[..16].try_into().expect("16 of 32 bytes")
}

/// State shared by the fold thread, the appender, the observers and the HTTP handlers.
pub(crate) struct Shared {
    pub config: NodeConfig,
    pub engine: Arc<RwLock<Engine>>,
    pub log: Arc<dyn Log>,
    pub appender: Appender,
    pub bell: Arc<Bell>,
    /// Newest record time seen in the log or stamped here, in ms (stamps never go below it).
    pub last_ts: Arc<AtomicI64>,
    /// Offset of the next record the fold applies (engine offsets: log offsets, or journal
    /// offsets in Kafka mode).
    pub applied: watch::Sender<u64>,
    /// Position of the fold in the site log (log or Kafka offset).
    pub site_pos: watch::Sender<u64>,
    pub record_waiters: Arc<RecordWaiters>,
    pub kafka: Option<Arc<KafkaLink>>,
    /// Launch handlers waiting for their decision, by request id.
    pub waiters: Mutex<HashMap<String, oneshot::Sender<LaunchAnswer>>>,
    pub stats: Mutex<FoldStats>,
    pub stopping: AtomicBool,
    /// Whether the node can decide (see [`Health`]).
    pub health: Arc<Health>,
    /// What this process observed and answered, for `/metrics` (not the replayed history).
    pub counters: ProcessCounters,
    /// The zone's recent history for the dashboard (`GET /`).
    pub dashboard: Mutex<dashboard::History>,
    /// Set when the server stops: long-lived answers (server-sent events) end.
    pub closing: Arc<watch::Sender<bool>>,
    /// The start-up catch-up is done: the routes that decide answer.
    pub caught_up: AtomicBool,
    /// One more than the offset of the record the fold is applying in steps (a long gap's
    /// timers: seconds, during which launches wait), 0 when none: probes say so.
    pub in_steps: AtomicU64,
    /// The fold thread has set up its source (in Kafka mode: the outbox of earlier runs is
    /// loaded, which the start publishes): the catch-up waits for it.
    pub fold_ready: AtomicBool,
    /// Dashboard event streams open at once: at most [`MAX_DASHBOARD_STREAMS`].
    pub dashboard_streams: Arc<tokio::sync::Semaphore>,
}

/// Counters of what this process did (health checks, probes, launch latency): a replay of
/// history does not move them.
pub(crate) struct ProcessCounters {
    /// Failed health checks of the control plane.
    pub health_check_failures: AtomicU64,
    /// Failed probes of a peer's /election.
    pub peer_probe_failures: AtomicU64,
    /// Seconds from a launch request's arrival to its decision.
    pub launch_seconds: prometheus_client::metrics::histogram::Histogram,
    /// Launch requests answered with no decision (5xx), by why: the user saw a failure
    /// that no decision records.
    pub launch_failures: Mutex<BTreeMap<&'static str, u64>>,
}

impl ProcessCounters {
    /// Counts a launch answered without a decision.
    pub fn launch_failed(&self, why: &'static str) {
        *self
            .launch_failures
            .lock()
            .expect("launch failures")
            .entry(why)
            .or_default() += 1;
    }
}

impl Default for ProcessCounters {
    fn default() -> Self {
        ProcessCounters {
            health_check_failures: AtomicU64::new(0),
            peer_probe_failures: AtomicU64::new(0),
            // 1 ms to about 16 s, doubling: the launch timeout is 10 s by default.
            launch_seconds: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 15),
            ),
            launch_failures: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Shared {
    /// The connector's id as the configuration spells it, once a config names it.
    pub fn my_id(&self, engine: &Engine) -> Option<String> {
        engine
            .site()
            .connector_id(&self.config.connector)
            .map(str::to_string)
    }
}

/// How long a node whose fold or committer died keeps answering probes with the reason
/// before it exits non-zero (so a load balancer and a person both see why; a supervisor
/// then restarts it from its last commit).
pub const FAILED_LINGER: Duration = Duration::from_secs(3);

/// Whether the node can decide. A dead fold or committer (say, its data disk filled) is
/// fatal: every probe says so, the reason is logged, and the node exits non-zero after
/// [`FAILED_LINGER`]. A failing log append is reported on the probes while it lasts and
/// clears by itself at the next append that succeeds (space freed).
#[derive(Default)]
pub(crate) struct Health {
    fatal: Mutex<Option<String>>,
    append_error: Mutex<Option<String>>,
    failed: tokio::sync::Notify,
}

impl Health {
    /// The node cannot decide any more: the first reason is kept, logged and announced.
    pub fn fail(&self, reason: String) {
        let mut fatal = self.fatal.lock().expect("health");
        if fatal.is_none() {
            tracing::error!(
                "{reason}; this node cannot decide any more: its probes say DOWN and it exits \
                 in {} s so a supervisor can restart it from its last commit",
                FAILED_LINGER.as_secs()
            );
            *fatal = Some(reason);
            self.failed.notify_one();
        }
    }

    /// Why the node failed, if it did.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().expect("health").clone()
    }

    /// An append to the site log failed (logged once per change of error).
    pub fn append_failed(&self, error: String) {
        let mut slot = self.append_error.lock().expect("health");
        if slot.as_deref() != Some(error.as_str()) {
            tracing::error!("{error}; probes say DOWN until an append succeeds");
            *slot = Some(error);
        }
    }

    /// An append succeeded: a failure reported before is over.
    pub fn append_ok(&self) {
        let mut slot = self.append_error.lock().expect("health");
        if let Some(error) = slot.take() {
            tracing::info!("appends succeed again (after: {error})");
        }
    }

    /// What keeps the node from deciding now: (reason code, detail).
    pub fn trouble(&self) -> Option<(&'static str, String)> {
        if let Some(reason) = self.fatal() {
            return Some(("node_failed", reason));
        }
        self.append_error
            .lock()
            .expect("health")
            .clone()
            .map(|e| ("log_unwritable", e))
    }
}

/// Why a node whose fold reached offset `position` cannot decide once the embedded log
/// ends at `end`, below it: records it applied are gone from the log.
pub(crate) fn log_went_back(log: &dyn Log, end: u64, position: u64) -> String {
    format!(
        "{} ends at offset {end} (its next record takes that offset), but this node applied \
         records up to offset {}: records it applied are gone from the log (cut, or an older \
         copy restored under \
         the running node), and records appended now would take their offsets; restore the \
         log from a copy if it was cut, then fold it again into an empty --data (`lhc log \
         check` names a loss it can see)",
        log.describe(),
        position.saturating_sub(1)
    )
}

/// Why a node cannot decide once the log holds, at `offset`, another record than the one
/// its fold applied there.
pub(crate) fn log_replaced(log: &dyn Log, offset: u64) -> String {
    format!(
        "{} holds another record at offset {offset} than the one this node applied there: \
         records it applied were replaced under it (the log's tail cut and other records \
         appended, or another copy put in its place); restore the log from a copy, then \
         fold it again into an empty --data",
        log.describe()
    )
}

/// Marks the node failed if the fold thread ends while the node is not stopping, whether it
/// returned an error or panicked (the guard's drop runs during unwinding too).
struct FoldGuard(Arc<Shared>);

impl Drop for FoldGuard {
    fn drop(&mut self) {
        if !self.0.stopping.load(Ordering::SeqCst) {
            let reason = if std::thread::panicking() {
                "the fold thread panicked".to_string()
            } else {
                "the fold thread stopped".to_string()
            };
            self.0.health.fail(reason);
        }
    }
}

/// Errors that stop the node.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The store or log failed.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The log failed.
    #[error(transparent)]
    Log(#[from] lhc_log::LogError),
    /// The HTTP listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The fold thread stopped on an error.
    #[error("fold stopped: {0}")]
    Fold(String),
    /// The node failed (its probes said DOWN): the first cause, not what failed after it.
    #[error("{0}")]
    Failed(String),
}

/// Runs the node until `shutdown` resolves: catches up with the log, then serves. On
/// shutdown it appends `connector.lifecycle stop` and commits.
pub async fn run(
    config: NodeConfig,
    site_log: SiteLog,
    outputs: Arc<dyn Log>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let store = Store::open(config.data_dir.join("snapshot"), &config.store)?;
    let store = Arc::new(store);
    let folder = Folder::open(store.clone())?;
    let engine = folder.engine();
    let start_ts = engine
        .read()
        .expect("engine lock")
        .now()
        .map_or(0, Ts::millis);
    let last_ts = Arc::new(AtomicI64::new(start_ts));
    let bell = Arc::new(Bell::default());
    let record_waiters = Arc::new(RecordWaiters::default());
    let (log, kafka, local_rx): (Arc<dyn Log>, _, _) = match site_log {
        SiteLog::Direct(log) => {
            store.refuse_kafka_node("a node on an embedded log")?;
            store.refuse_other_log(&*log)?;
            (log, None, None)
        }
        SiteLog::Kafka(k) => {
            let (tx, rx) = std::sync::mpsc::channel();
            let next = store.kafka_next()?.unwrap_or(0);
            let link = Arc::new(KafkaLink {
                kafka: k.clone(),
                up: AtomicBool::new(true),
                outbox_len: AtomicUsize::new(0),
                unseen: Mutex::new(BTreeMap::new()),
                next: AtomicU64::new(next),
                end: AtomicU64::new(0),
                unreachable_since_start: AtomicBool::new(false),
                local: Mutex::new(tx),
            });
            (k as Arc<dyn Log>, Some(link), Some(rx))
        }
    };
    if let Some(link) = &kafka {
        connect_kafka(link, &store, folder.next()).await?;
    }
    let health = Arc::new(Health::default());
    let mut sink = appender::Sink::new(log.clone(), kafka.clone(), health.clone());
    if kafka.is_some() {
        let (instance, epoch) = store.begin_run()?;
        tracing::info!(
            instance = %instance,
            run = epoch,
            "records this node appends carry ids {}@{instance}:{epoch}.N",
            config.connector
        );
        sink.ids = Some(appender::IdStamper::new(
            &config.connector,
            &instance,
            epoch,
        ));
    }
    let (applied, _) = watch::channel(folder.next());
    if kafka.is_none() {
        sink.watch_applied(applied.subscribe());
    }
    let appender = Appender::start(sink, last_ts.clone(), bell.clone(), record_waiters.clone());
    let start_pos = match &kafka {
        Some(link) => link.next.load(Ordering::SeqCst),
        None => folder.next(),
    };
    let (site_pos, _) = watch::channel(start_pos);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| RunError::Listen {
            addr: config.listen,
            source,
        })?;
    let shared = Arc::new(Shared {
        config,
        engine,
        log: log.clone(),
        appender,
        bell,
        last_ts,
        applied,
        site_pos,
        record_waiters,
        kafka,
        waiters: Mutex::new(HashMap::new()),
        stats: Mutex::new(FoldStats::default()),
        stopping: AtomicBool::new(false),
        health: health.clone(),
        counters: ProcessCounters::default(),
        dashboard: Mutex::new(dashboard::History::default()),
        closing: Arc::new(watch::channel(false).0),
        caught_up: AtomicBool::new(false),
        in_steps: AtomicU64::new(0),
        fold_ready: AtomicBool::new(false),
        dashboard_streams: Arc::new(tokio::sync::Semaphore::new(MAX_DASHBOARD_STREAMS)),
    });

    let site = shared.kafka.as_ref().map(|l| l.kafka.site().to_string());
    let publisher = publish::Publisher::new(outputs, &shared.config.connector, site);
    let (committed, commits) = std::sync::mpsc::channel();
    let publisher_thread = publish::spawn(publisher, store.clone(), commits)
        .map_err(|e| RunError::Fold(e.to_string()))?;
    let fold_shared = shared.clone();
    let fold_thread = std::thread::Builder::new()
        .name("lhc-fold".into())
        .spawn(move || {
            let guard = FoldGuard(fold_shared.clone());
            let result = match fold::fold_loop(&fold_shared, folder, committed, local_rx) {
                // A stop asked for, mid-record: what was committed is the state to resume.
                Err(NodeError::Stopped) => Ok(()),
                other => other,
            };
            if let Err(e) = &result {
                if !fold_shared.stopping.load(Ordering::SeqCst) {
                    fold_shared.health.fail(format!("the fold stopped: {e}"));
                }
            }
            drop(guard);
            result
        })
        .map_err(|e| RunError::Fold(e.to_string()))?;

    // The caller's stop signal, watched from now on: a SIGTERM during a long catch-up stops
    // the node too (before, it was only polled once serving).
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let app = http::router(shared.clone());
    // Stop on the caller's signal, or shortly after the node failed (it cannot decide: a
    // supervisor restarts it from its last commit).
    let failed = health.clone();
    let mut stop = stop_rx.clone();
    let closing = shared.closing.clone();
    let shutdown = async move {
        tokio::select! {
            // (The guard `wait_for` returns is dropped inside: the server task is `Send`.)
            _ = async { stop.wait_for(|stopped| *stopped).await.is_ok() } => {}
            _ = failed.failed.notified() => tokio::time::sleep(FAILED_LINGER).await,
        }
        // Streams that never end by themselves (the dashboard's events) end now.
        closing.send_replace(true);
    };
    let tls = shared
        .config
        .tls
        .clone()
        .map(tokio_rustls::TlsAcceptor::from);
    // Probes, metrics and the dashboard answer from now on, during the catch-up too (a
    // liveness probe must not kill a node that is folding a long log); the routes that
    // decide answer 503 until the node has caught up (`http::gate`).
    let server = tokio::spawn(serve(listener, tls, app, shutdown));
    // Catch up before deciding, so the first answers come from current state. Started
    // without Kafka, the node's state is its journal: it is caught up with that.
    let offline = shared
        .kafka
        .as_ref()
        .is_some_and(|l| l.unreachable_since_start.load(Ordering::SeqCst));
    let end = if offline {
        *shared.site_pos.borrow()
    } else {
        tokio::task::spawn_blocking({
            let log = log.clone();
            move || log.end_offset()
        })
        .await
        .map_err(|e| RunError::Fold(e.to_string()))??
    };
    let started = Instant::now();
    // Started without Kafka the node is caught up at once, but not before the fold has
    // loaded the outbox of earlier runs (else `start_serving` would not publish it).
    while !shared.fold_ready.load(Ordering::SeqCst)
        && !fold_thread.is_finished()
        && !*stop_rx.borrow()
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut applied_rx = shared.site_pos.subscribe();
    while *applied_rx.borrow_and_update() < end {
        if fold_thread.is_finished() || *stop_rx.borrow() {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), applied_rx.changed()).await;
    }
    // Stopped (or failed) before the end: nothing was announced, and the fold stops at its
    // next commit instead of folding the rest of the log first.
    let caught_up = *applied_rx.borrow() >= end;
    let observers = if caught_up {
        shared.caught_up.store(true, Ordering::SeqCst);
        tracing::info!(
            offset = end,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "caught up with the log; serving on {}",
            shared.config.listen
        );
        start_serving(&shared).await;
        observe::spawn(shared.clone())
    } else {
        tracing::info!(
            folded = *applied_rx.borrow(),
            end,
            "stopping before the catch-up reached the end of the log"
        );
        Vec::new()
    };
    // Serving until the caller stops the node (or shortly after it failed).
    let served = server.await;
    let served: std::io::Result<()> = served.map_err(std::io::Error::other);
    for task in observers {
        task.abort();
    }
    // A failed node appends nothing more: its fold is dead (the stop would wait 5 s to be
    // applied, for nothing), and when the log went back under it, a record appended now
    // would take an offset it applied, over the only evidence of the loss (found by
    // hostile testing).
    if caught_up && shared.health.fatal().is_none() {
        announce_stop(&shared).await;
    }
    shared.stopping.store(true, Ordering::SeqCst);
    shared.bell.ring();
    let folded = tokio::task::spawn_blocking(move || fold_thread.join())
        .await
        .map_err(|e| RunError::Fold(e.to_string()))?;
    // The fold dropped its end of the channel: the publisher sends what is left and ends.
    let _ = tokio::task::spawn_blocking(move || publisher_thread.join()).await;
    // The first cause: a fold that stopped after the node failed read what made it fail
    // (records replaced under it read as a damaged frame, found by hostile testing).
    if let Some(reason) = health.fatal() {
        return Err(RunError::Failed(reason));
    }
    match folded {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(RunError::Fold(e.to_string())),
        Err(_) => return Err(RunError::Fold("the fold thread panicked".into())),
    }
    served.map_err(|source| RunError::Listen {
        addr: shared.config.listen,
        source,
    })
}

/// Kafka mode, at start: finds the site's partition. When the brokers do not answer and the
/// node has folded the topic before, it starts from its journal and last state: appends go
/// to the journal (published when Kafka returns) and a thread keeps asking the brokers.
/// A node that never folded the topic has nothing to decide from, so it refuses to start.
async fn connect_kafka(link: &Arc<KafkaLink>, store: &Store, folded: u64) -> Result<(), RunError> {
    // A directory folds one site of one topic: another's state would be taken for this
    // site's (and its outbox published as this site's records).
    let source = format!("{}/{}", link.kafka.topic(), link.kafka.site());
    let recorded = store.kafka_source()?;
    // A state folded from a log (`connector fold`, or a node on an embedded log) is at
    // that log's offsets, with no position in the topic: read from the topic's start, its
    // records would be applied again.
    if recorded.is_none() && store.kafka_next()?.is_none() && folded > 0 {
        return Err(RunError::Node(NodeError::OtherSource(format!(
            "this data directory holds {folded} record(s) folded from a log (`lhc connector \
             fold`, or a node on an embedded log), not by a Kafka node: a Kafka node numbers \
             records in its own journal and keeps its position in the topic, and folds the \
             topic itself when it starts; give it an empty --data"
        ))));
    }
    if let Some(recorded) = &recorded {
        if *recorded != source {
            return Err(RunError::Fold(format!(
                "this data directory folds {recorded} (topic/site), not {source}: give each \
                 site its own --data"
            )));
        }
    }
    let kafka = link.kafka.clone();
    let first = tokio::task::spawn_blocking(move || kafka.find_partition())
        .await
        .map_err(|e| RunError::Fold(e.to_string()))?;
    let Err(e) = first else {
        if recorded.is_none() {
            store.set_kafka_source(&source)?;
        }
        return Ok(());
    };
    // Only a directory this node filled from this very topic and site has a state to
    // decide from (not one folded from an embedded log, or from before sites were recorded).
    if recorded.is_none() || store.kafka_next()?.is_none() {
        return Err(RunError::Log(e));
    }
    tracing::warn!(
        "kafka unreachable at start ({e}); this node decides from its journal and last state \
         (offset {folded}), keeps what it appends in its journal and publishes it when Kafka \
         answers; probes and metrics say so meanwhile"
    );
    link.up.store(false, Ordering::SeqCst);
    link.unreachable_since_start.store(true, Ordering::SeqCst);
    let link = link.clone();
    std::thread::Builder::new()
        .name("lhc-kafka-connect".into())
        .spawn(move || loop {
            if Arc::strong_count(&link) == 1 {
                return; // the node has stopped
            }
            match link.kafka.find_partition() {
                Ok(partition) => {
                    tracing::info!(
                        partition,
                        "kafka answers: folding the topic and publishing the journal"
                    );
                    // Appends go to Kafka again once the journal's backlog is published
                    // (the appender publishes it first).
                    link.up.store(true, Ordering::SeqCst);
                    link.unreachable_since_start.store(false, Ordering::SeqCst);
                    return;
                }
                Err(e) => {
                    tracing::debug!("kafka still unreachable: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        })
        .map_err(|e| RunError::Fold(e.to_string()))?;
    Ok(())
}

/// Once caught up: publishes what an earlier run kept while Kafka was unreachable, and
/// records this connector's start if the log holds it stopped.
async fn start_serving(shared: &Arc<Shared>) {
    if let Some(link) = &shared.kafka {
        // Local records of an earlier run the topic does not hold yet: publish them first.
        let backlog: Vec<Vec<u8>> = link
            .unseen
            .lock()
            .expect("unseen")
            .values()
            .cloned()
            .collect();
        if !backlog.is_empty() {
            tracing::info!(
                records = backlog.len(),
                "publishing records kept while kafka was unreachable"
            );
        }
        shared.appender.backlog(backlog);
    }
    announce_start(shared).await;
}

/// Most connections served at once; more wait in the kernel's accept queue until one
/// closes, so idle sockets cannot starve the node of file descriptors or tasks.
pub const MAX_CONNECTIONS: usize = 1024;
/// A client has this long to send a request's headers (idle keep-alive time included):
/// a socket that sends nothing is closed, not kept forever.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection is closed gracefully after this long, whatever it does (bounds a slow
/// body and a keep-alive that never ends).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);
/// A connection asked to close (its lifetime is over, or the node stops) is dropped after
/// this long if its request has not finished.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);
/// A request body must arrive whole within this long, or the request is answered 408.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most dashboard event streams open at once (each holds a connection for minutes).
pub const MAX_DASHBOARD_STREAMS: usize = 32;

/// Serves `app` on `listener` until `shutdown` resolves, with the limits above (axum's own
/// `serve` has no header timeout or connection cap) and JSON bodies on the errors hyper
/// answers itself (see `errbody`), then lets open connections finish
/// their request for up to 10 s.
async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => permit.expect("never closed"),
        };
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before accept: wait a
                    // little rather than spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let stream: Box<dyn Stream> = match tls {
                None => Box::new(stream),
                // The handshake is bounded like a request's headers: a client that opens
                // a connection and says nothing holds a permit for no longer.
                Some(acceptor) => {
                    match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => Box::new(tls),
                        Ok(Err(e)) => {
                            tracing::debug!("TLS handshake failed: {e}");
                            return;
                        }
                        Err(_) => return,
                    }
                }
            };
            let conn =
                builder.serve_connection(TokioIo::new(errbody::JsonErrors::new(stream)), service);
            tokio::pin!(conn);
            let lifetime = tokio::time::sleep(CONNECTION_LIFETIME);
            tokio::pin!(lifetime);
            // After a graceful shutdown is asked, the request in progress has this long to
            // finish; then the connection is dropped (a stalled body or an endless event
            // stream would otherwise hold its slot for ever).
            let grace = tokio::time::sleep(Duration::MAX);
            tokio::pin!(grace);
            let mut closing = false;
            loop {
                tokio::select! {
                    _ = conn.as_mut() => break,
                    _ = stop.changed(), if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                        grace.as_mut().reset(tokio::time::Instant::now() + CLOSE_GRACE);
                    }
                    _ = &mut lifetime, if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                        grace.as_mut().reset(tokio::time::Instant::now() + CLOSE_GRACE);
                    }
                    _ = &mut grace, if closing => break,
                }
            }
            drop(permit);
        });
    }
    let _ = stop_tx.send(true);
    let all = MAX_CONNECTIONS as u32;
    let _ = tokio::time::timeout(Duration::from_secs(10), permits.acquire_many(all)).await;
}

/// A served connection: plain TCP or TLS over it.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

/// After a clean stop the engine holds this connector stopped: say it started again.
async fn announce_start(shared: &Arc<Shared>) {
    let stopped = {
        let engine = shared.engine.read().expect("engine lock");
        shared
            .my_id(&engine)
            .map(|me| (engine.needs_start_record(&me), me))
    };
    match stopped {
        None => tracing::warn!(
            connector = %shared.config.connector,
            "no configuration in the log names this connector yet; it observes nothing until one does"
        ),
        Some((true, me)) => lifecycle(shared, me, LifecycleEvent::Start).await,
        Some((false, _)) => {}
    }
}

async fn announce_stop(shared: &Arc<Shared>) {
    let me = {
        let engine = shared.engine.read().expect("engine lock");
        shared.my_id(&engine)
    };
    if let Some(me) = me {
        lifecycle(shared, me, LifecycleEvent::Stop).await;
    }
}

async fn lifecycle(shared: &Arc<Shared>, me: String, event: LifecycleEvent) {
    let appended = shared.appender.append_applied(move |ts| {
        Record::ConnectorLifecycle(ConnectorLifecycle {
            record_id: None,
            ts,
            connector: me,
            event,
        })
    });
    match tokio::time::timeout(Duration::from_secs(5), appended).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::error!("could not append connector.lifecycle {event:?}: {e}"),
        Err(_) => tracing::error!("connector.lifecycle {event:?} not applied within 5 s"),
    }
}
