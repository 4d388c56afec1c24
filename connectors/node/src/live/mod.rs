//! The live connector node (`lhc connector run`): a fold thread that applies the site log to
//! the RocksDB cache snapshot, an appender that stamps and writes observations, observers
//! (health checks, peer probes, clock ticks) and the HTTP API.
//!
//! Invariant: the node never decides anything itself. Every observation and request is
//! appended to the log first, and answers come from the fold reaching that record, so the
//! live run and a later replay of the log make the same decisions. Outputs are published to
//! the output log only after the state that produced them is committed, keyed by input
//! offset, so a restart neither repeats nor loses one.

mod appender;
mod http;
mod observe;
mod publish;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use lhc_engine::output::{EventData, LaunchDecision};
use lhc_engine::record::{ConnectorLifecycle, LifecycleEvent};
use lhc_engine::{decode_record_at, engine::snake, Engine, Output, Record, Ts};
use lhc_log::Log;
use tokio::sync::{oneshot, watch};

pub use appender::Appender;
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
    /// Base URL of each peer's API by FQDN; others are `http://FQDN:PORT` (this node's port).
    pub peers: BTreeMap<String, String>,
    /// Bearer token of the admin endpoints; admin is refused when `None`.
    pub admin_token: Option<String>,
    /// RocksDB memory settings.
    pub store: StoreOptions,
    /// Longest time applied records stay uncommitted.
    pub commit_interval: Duration,
    /// Largest request body accepted, bytes.
    pub body_limit: usize,
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
            commit_interval: Duration::from_millis(100),
            body_limit: 256 << 10,
        }
    }
}

/// What a launch handler learns from the fold.
#[derive(Debug)]
pub(crate) enum LaunchAnswer {
    /// The engine decided.
    Decided(LaunchDecision),
    /// The record was quarantined (for instance its `ts` lost a race with another node).
    Quarantined(String),
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
    /// Quarantined inputs.
    pub quarantined: u64,
    /// Last successful import of this connector: (version, ts).
    pub last_import: Option<(u64, Ts)>,
    /// Recent quarantines (offset, error), newest last, bounded.
    pub recent_quarantines: VecDeque<(u64, String)>,
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
    /// Offset of the next record the fold applies.
    pub applied: watch::Sender<u64>,
    /// Launch handlers waiting for their decision, by request id.
    pub waiters: Mutex<HashMap<String, oneshot::Sender<LaunchAnswer>>>,
    pub stats: Mutex<FoldStats>,
    /// Log end offset when last looked at (for lag).
    pub log_end: AtomicU64,
    pub stopping: AtomicBool,
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
}

/// Runs the node until `shutdown` resolves: catches up with the log, then serves. On
/// shutdown it appends `connector.lifecycle stop` and commits.
pub async fn run(
    config: NodeConfig,
    log: Arc<dyn Log>,
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
    let appender = Appender::start(log.clone(), last_ts.clone(), bell.clone());
    let (applied, _) = watch::channel(folder.next());
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
        waiters: Mutex::new(HashMap::new()),
        stats: Mutex::new(FoldStats::default()),
        log_end: AtomicU64::new(0),
        stopping: AtomicBool::new(false),
    });

    let publisher = publish::Publisher::open(outputs, &shared.config.connector)?;
    let fold_shared = shared.clone();
    let fold_thread = std::thread::Builder::new()
        .name("lhc-fold".into())
        .spawn(move || fold_loop(&fold_shared, folder, publisher))
        .map_err(|e| RunError::Fold(e.to_string()))?;

    // Catch up before serving, so the first answers come from current state.
    let end = tokio::task::spawn_blocking({
        let log = log.clone();
        move || log.end_offset()
    })
    .await
    .map_err(|e| RunError::Fold(e.to_string()))??;
    let started = Instant::now();
    let mut applied_rx = shared.applied.subscribe();
    while *applied_rx.borrow_and_update() < end {
        if fold_thread.is_finished() {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), applied_rx.changed()).await;
    }
    tracing::info!(
        offset = end,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "caught up with the log; serving on {}",
        shared.config.listen
    );
    announce_start(&shared).await;

    let observers = observe::spawn(shared.clone());
    let app = http::router(shared.clone());
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown);
    let served = server.await;
    for task in observers {
        task.abort();
    }
    announce_stop(&shared).await;
    shared.stopping.store(true, Ordering::SeqCst);
    shared.bell.ring();
    let folded = tokio::task::spawn_blocking(move || fold_thread.join())
        .await
        .map_err(|e| RunError::Fold(e.to_string()))?;
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

/// After a clean stop the engine holds this connector stopped: say it started again.
async fn announce_start(shared: &Arc<Shared>) {
    let stopped = {
        let engine = shared.engine.read().expect("engine lock");
        shared
            .my_id(&engine)
            .map(|me| (!engine.connectors()[&me].started(), me))
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
    let appended = shared
        .appender
        .append(move |ts| {
            Record::ConnectorLifecycle(ConnectorLifecycle {
                ts,
                connector: me,
                event,
            })
        })
        .await;
    match appended {
        Ok(offset) => {
            let mut rx = shared.applied.subscribe();
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                rx.wait_for(|applied| *applied > offset),
            )
            .await;
        }
        Err(e) => tracing::error!("could not append connector.lifecycle {event:?}: {e}"),
    }
}

/// The fold thread: applies records as they arrive, answers launch waiters, commits at
/// most every `commit_interval`, then publishes what it committed.
fn fold_loop(
    shared: &Shared,
    mut folder: Folder<Arc<Store>>,
    mut publisher: publish::Publisher,
) -> Result<(), NodeError> {
    let mut reader = shared.log.reader(folder.next())?;
    publisher.catch_up(folder.store())?;
    let mut last_commit = Instant::now();
    let interval = shared.config.commit_interval;
    loop {
        let seen = shared.bell.count();
        let mut applied = 0;
        while applied < 512 {
            match reader.next(Duration::ZERO)? {
                Some(entry) => {
                    apply_entry(shared, &mut folder, entry.offset, &entry.bytes);
                    applied += 1;
                }
                None => break,
            }
        }
        if applied > 0 {
            shared.applied.send_replace(folder.next());
        }
        let due = last_commit.elapsed() >= interval || folder.uncommitted() >= 4096;
        let stopping = shared.stopping.load(Ordering::SeqCst);
        if folder.uncommitted() > 0 && (due || stopping) {
            folder.commit()?;
            last_commit = Instant::now();
            publisher.catch_up(folder.store())?;
        }
        if applied == 0 {
            if stopping {
                return Ok(());
            }
            if let Ok(end) = shared.log.end_offset() {
                shared.log_end.store(end, Ordering::Relaxed);
            }
            // Other processes' appends are seen by polling; ours ring the bell.
            shared.bell.wait(seen, Duration::from_millis(10));
        }
    }
}

fn apply_entry(shared: &Shared, folder: &mut Folder<Arc<Store>>, offset: u64, bytes: &[u8]) {
    let record = decode_record_at(bytes, offset);
    let mut waiting_launch = None;
    if let Ok(r) = &record {
        shared.last_ts.fetch_max(r.ts().millis(), Ordering::SeqCst);
        if let Record::LaunchRequest(l) = r {
            if l.connector.eq_ignore_ascii_case(&shared.config.connector) {
                waiting_launch = Some(l.request.clone());
            }
        }
    }
    let me = &shared.config.connector;
    let outputs = folder.apply_decoded(offset, record);
    let mut stats = shared.stats.lock().expect("stats");
    for output in outputs {
        match output {
            Output::Quarantine(q) => {
                stats.quarantined += 1;
                stats
                    .recent_quarantines
                    .push_back((offset, q.error.clone()));
                if stats.recent_quarantines.len() > 1024 {
                    stats.recent_quarantines.pop_front();
                }
            }
            Output::LaunchDecision(d) if d.connector.eq_ignore_ascii_case(me) => {
                let reason = d.reason.map(|r| snake(&r)).unwrap_or_default();
                let key = (snake(&d.outcome), snake(&d.via), reason);
                *stats.decisions.entry(key).or_default() += 1;
            }
            Output::Event(e) if e.connector.eq_ignore_ascii_case(me) => {
                if let EventData::Imported(imported) = &e.data {
                    stats.last_import = Some((imported.version, e.ts));
                }
            }
            _ => {}
        }
    }
    drop(stats);
    let Some(request) = waiting_launch else {
        return;
    };
    let answer = outputs.iter().find_map(|o| match o {
        Output::LaunchDecision(d) if d.request == request => Some(LaunchAnswer::Decided(d.clone())),
        Output::Quarantine(q) => Some(LaunchAnswer::Quarantined(q.error.clone())),
        _ => None,
    });
    let answer = answer.unwrap_or_else(|| {
        LaunchAnswer::Quarantined("the engine made no decision for this request".into())
    });
    if let Some(waiter) = shared.waiters.lock().expect("waiters").remove(&request) {
        let _ = waiter.send(answer);
    }
}
