//! `lhc query PATH --at TS [what]`: the site as it was at an instant, from a replay up to it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Subcommand;
use lhc_engine::engine::snake;
use lhc_engine::output::Outcome;
use lhc_engine::{Output, Ts};
use lhc_replay::checkpoint::LaterConfigJson;
use serde_json::{json, Value};

use crate::args::{Format, SourceArgs};
use crate::time::{parse_instant, Zone};

/// Options of `lhc query`.
#[derive(clap::Args)]
pub struct QueryArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// The instant: the state after every record up to it and the timers due by then.
    /// RFC 3339 with Z or an offset, or a local time read in --tz.
    #[arg(long, value_name = "TS")]
    at: String,
    /// Time zone (IANA name, like Europe/Berlin) of instants given without an offset.
    #[arg(long, value_name = "ZONE", global = true)]
    tz: Option<String>,
    /// Output format: table (with a header), json (one document), jsonl (one row per
    /// line for listings).
    #[arg(long, value_enum, default_value_t = Format::Table, global = true)]
    format: Format,
    /// Same as --format json.
    #[arg(long, global = true, hide = true, conflicts_with = "format")]
    json: bool,
    /// Replay from the log's first record, ignoring checkpoints (`lhc log checkpoint`).
    #[arg(long, global = true)]
    from_start: bool,
    /// Start from the checkpoints a node keeps in its cache snapshot (`lhc connector run`
    /// or `fold --data DIR`, --checkpoint-every), read beside the running node. A node on
    /// an embedded log is queried with that log (PATH); a Kafka node with nothing else: its
    /// journal, the records in the order it applied them, is replayed.
    #[arg(long, value_name = "DIR", global = true)]
    data: Option<PathBuf>,
    /// What to show [default: connectors].
    #[command(subcommand)]
    what: Option<What>,
}

/// What `lhc query` shows.
#[derive(Subcommand, Clone)]
pub enum What {
    /// Each connector: state and since when, elected broker and candidates, snapshot
    /// version, registrations (the default).
    Connectors {
        #[command(flatten)]
        log: LogAfter,
    },
    /// Each VDA seen: who it is registered with and its sessions.
    Registrations {
        #[command(flatten)]
        log: LogAfter,
    },
    /// Every session the VDAs reported (optionally one user's).
    Sessions {
        /// Only this user's sessions.
        #[arg(long)]
        user: Option<String>,
        #[command(flatten)]
        log: LogAfter,
    },
    /// One machine: its state at the instant and every output about it up to then.
    Machine {
        /// Machine id.
        name: String,
        #[command(flatten)]
        log: LogAfter,
    },
    /// Launch decisions in a window ending at the instant: who launched what, through
    /// which connector, and what came of it.
    Launches {
        /// Start of the window [default: one hour before --at].
        #[arg(long, visible_alias = "from", value_name = "TS")]
        since: Option<String>,
        /// End of the window [default: --at].
        #[arg(long, value_name = "TS")]
        until: Option<String>,
        /// Only brokered or only rejected launches.
        #[arg(long, value_enum)]
        outcome: Option<OutcomeFilter>,
        /// Only rejections for this reason (like not_elected).
        #[arg(long)]
        reason: Option<String>,
        /// Only launches sent to this connector.
        #[arg(long)]
        connector: Option<String>,
        /// Only this user's launches.
        #[arg(long)]
        user: Option<String>,
        #[command(flatten)]
        log: LogAfter,
    },
    /// The LHC database content of a connector besides its configuration (R-DATA).
    LhcData {
        /// Connector FQDN.
        connector: String,
        #[command(flatten)]
        log: LogAfter,
    },
    /// The state digest at the instant (compare with `lhc replay --digest` of a cut log).
    Digest {
        #[command(flatten)]
        log: LogAfter,
    },
}

/// The log, when it is named after the subcommand (`lhc query --at T digest LOG`).
#[derive(clap::Args, Clone, Default)]
pub struct LogAfter {
    /// A JSONL file or an embedded log directory, when not named before the subcommand.
    #[arg(value_name = "PATH")]
    path: Option<PathBuf>,
}

/// Whether two paths name the same file or directory (`x`, `./x`, its absolute path, a
/// link to it); paths that cannot be resolved (missing) are compared as written.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

impl What {
    /// The log named after the subcommand, if any.
    fn log_after(&self) -> Option<&PathBuf> {
        match self {
            What::Connectors { log }
            | What::Registrations { log }
            | What::Sessions { log, .. }
            | What::Machine { log, .. }
            | What::Launches { log, .. }
            | What::LhcData { log, .. }
            | What::Digest { log } => log.path.as_ref(),
        }
    }
}

/// The records an answer needs, by time.
enum Needs {
    /// Every record up to the instant (the state at it).
    UpTo(Ts),
    /// The outputs of every record from this instant on (a window of launches).
    After(Ts),
}

/// `--outcome` of `lhc query launches`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeFilter {
    /// A machine was chosen.
    Brokered,
    /// No machine.
    Rejected,
}

/// Runs `lhc query`.
pub fn run(args: QueryArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let zone = args.tz.as_deref().map(Zone::named).transpose()?;
    let at = parse_instant(&args.at, zone.as_ref())?;
    let mut args = args;
    let what = args.what.clone().unwrap_or(What::Connectors {
        log: LogAfter::default(),
    });
    if let Some(after) = what.log_after() {
        match &args.source.path {
            Some(before) if !same_file(before, after) => bail!(
                "the log is named twice, {} before the subcommand and {} after it: name it once",
                before.display(),
                after.display()
            ),
            _ if args.source.kafka.kafka.is_some() => {
                bail!("{} and --kafka name two sources: give one", after.display())
            }
            _ => args.source.path = Some(after.clone()),
        }
    }
    // The first instant whose records the answer needs: a checkpoint that covers only
    // records before it serves (the outputs of the records it covers are not kept).
    let needs_from = match &what {
        What::Machine { .. } => None, // the machine's whole history
        What::Launches {
            since,
            until,
            reason,
            outcome,
            ..
        } => {
            // Checked before anything is replayed (notes are printed with the answer).
            if let (Some(OutcomeFilter::Brokered), Some(r)) = (outcome, reason) {
                bail!(
                    "--reason {r:?} with --outcome brokered: only rejections carry a reason, \
                     so nothing could be listed (drop one of them)"
                );
            }
            let (from, _) = launch_window(since, until, reason, at, zone.as_ref(), true)?;
            Some(Needs::After(from))
        }
        _ => Some(Needs::UpTo(at)),
    };
    // The answer is computed with the cut: from a checkpoint, the check of its digest runs
    // beside both (see `checkpoint::resume`), and a digest reuses the configuration part's
    // JSON that check writes.
    let answered = |cut: lhc_replay::Cut, config: Option<&LaterConfigJson>| {
        let value = answer(&what, &cut, at, zone.as_ref(), quiet, config);
        (cut, value)
    };
    let from_start = |source: &SourceArgs| {
        source
            .replay_with(quiet, |source| lhc_replay::cut_at(source, at))
            .map(|cut| answered(cut, None))
    };
    let node = match &args.data {
        Some(data) => Some(NodeCheckpoints::open(data, &args.source)?),
        None => None,
    };
    // The log replayed: the node's journal for a Kafka node, else the one named.
    let journal = node.as_ref().and_then(NodeCheckpoints::journal);
    let replay_start = |source: &SourceArgs| match &journal {
        Some(journal) => crate::args::replay_log_with(quiet, journal(), 0, 0, |source| {
            lhc_replay::cut_at(source, at)
        })
        .map(|cut| answered(cut, None)),
        None => from_start(source),
    };
    // Where the checkpoints are, and the log their records are checked against.
    let embedded = args.source.embedded_dir();
    let shelf: Option<(Box<dyn lhc_replay::checkpoint::Shelf>, LogOpener)> = match &node {
        Some(node) => Some((Box::new(node.shelf()), node.log_opener(embedded.clone()))),
        None => embedded.clone().map(|dir| {
            (
                Box::new(lhc_replay::checkpoint::files(&dir))
                    as Box<dyn lhc_replay::checkpoint::Shelf>,
                embedded_opener(dir),
            )
        }),
    };
    let used = std::cell::Cell::new(None);
    // The records after the checkpoint a query starts from are read and decoded while the
    // checkpoint is rebuilt (an embedded log's; a Kafka node's journal is read after).
    let started: std::cell::RefCell<Option<crate::args::Started>> = Default::default();
    // The read-ahead started for the checkpoint at `from` (`None`: for none): any other
    // is abandoned, its memory freed and its spinner cleared.
    let take_ahead = |from: Option<u64>| match started.take() {
        Some(ahead) if Some(ahead.from) == from => Some(ahead),
        Some(unused) => {
            unused.abandon();
            None
        }
        None => None,
    };
    let start = |header: &lhc_replay::checkpoint::Header| {
        let (Some(dir), None) = (embedded.as_ref(), &journal) else {
            return;
        };
        take_ahead(None);
        // Not started, the replay starts after the rebuild as before.
        *started.borrow_mut() = lhc_log::EmbeddedLog::open_read_only(dir)
            .ok()
            .and_then(|log| {
                crate::args::start_replay(
                    quiet,
                    Box::new(log),
                    header.next_offset,
                    header.quarantined,
                    at,
                )
                .ok()
            });
    };
    let (cut, value) = match (&needs_from, shelf) {
        (Some(needs), Some((shelf, log))) if !args.from_start => {
            let wanted = |h: &lhc_replay::checkpoint::Header| match (h.max_ts, needs) {
                (None, _) => true,
                (Some(max), Needs::UpTo(at)) => max <= *at,
                (Some(max), Needs::After(from)) => max < *from && max <= at,
            };
            let (answered, warnings) = lhc_replay::checkpoint::resume_on(
                &*shelf,
                &*log,
                &crate::build_id(),
                // A digest's clock will be the instant asked.
                matches!(what, What::Digest { .. }).then_some(at),
                wanted,
                start,
                |checkpoint| {
                    used.set(checkpoint.as_ref().map(|c| c.header.next_offset));
                    match checkpoint {
                        None => {
                            // A read-ahead started for a checkpoint that was then refused.
                            take_ahead(None);
                            replay_start(&args.source)
                        }
                        Some(checkpoint) => {
                            let header = checkpoint.header;
                            let config = checkpoint.config_json;
                            let resume = lhc_replay::query::Resume {
                                last_offset: Some(header.next_offset - 1),
                                first_ts: header.first_ts,
                                last_ts: header.last_ts,
                            };
                            let cut = |source: &mut lhc_replay::Source| {
                                lhc_replay::query::cut_from(
                                    source,
                                    checkpoint.engine,
                                    Some(resume),
                                    at,
                                )
                            };
                            let ahead = take_ahead(Some(header.next_offset));
                            match (&journal, ahead) {
                                (None, Some(ahead)) => {
                                    crate::args::finish_started(ahead, quiet, cut)
                                }
                                (Some(journal), _) => crate::args::replay_log_with(
                                    quiet,
                                    journal(),
                                    header.next_offset,
                                    header.quarantined,
                                    cut,
                                ),
                                (None, None) => args.source.replay_from_with(
                                    quiet,
                                    header.next_offset,
                                    header.quarantined,
                                    cut,
                                ),
                            }
                            .map(|cut| answered(cut, Some(&config)))
                        }
                    }
                },
            )?;
            for warning in warnings {
                eprintln!("warning: {warning}");
            }
            match (used.get(), quiet) {
                (Some(offset), false) => eprintln!(
                    "note: started from the checkpoint after {offset} records{} (its state's \
                     digest verified; the records it covers were checked by samples, not \
                     read); --from-start replays from the first record",
                    node.as_ref()
                        .map(|n| format!(" in {}", n.dir.display()))
                        .unwrap_or_default()
                ),
                (None, false)
                    if node.is_none()
                        && answered.0.last_offset.unwrap_or(0)
                            >= lhc_replay::checkpoint::DEFAULT_EVERY
                        && embedded.as_ref().is_some_and(|dir| {
                            lhc_replay::checkpoint::list(dir).is_ok_and(|l| l.is_empty())
                        }) =>
                {
                    eprintln!(
                        "note: replayed from the first record; `lhc log checkpoint {}` once \
                         lets later queries start near the instant",
                        embedded
                            .as_ref()
                            .map(|d| d.display().to_string())
                            .unwrap_or_default()
                    )
                }
                _ => {}
            }
            answered
        }
        _ => replay_start(&args.source)?,
    };
    // An instant outside the log's span is said, never answered as if it were inside.
    match (cut.first_ts, cut.last_ts) {
        (None, _) => bail!("the log holds no records: there is no state to show at {at}"),
        (Some(first), _) if at < first => {
            bail!("--at {at} is before the log's first record ({first}): the site had no state yet")
        }
        (_, Some(last)) if !cut.more_after && at > last && !quiet => eprintln!(
            "note: --at {at} is after the log's last record ({last}); this is the state at its \
             end, with the timers due by {at} fired"
        ),
        _ => {}
    }
    let value = value?;
    let format = if args.json { Format::Json } else { args.format };
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&value)?),
        Format::Jsonl => match list_of(&what, &value) {
            Some(rows) => {
                for row in rows.as_array().into_iter().flatten() {
                    println!("{}", serde_json::to_string(row)?);
                }
            }
            None => println!("{}", serde_json::to_string(&value)?),
        },
        Format::Table => print_table(&what, &value),
    }
    // The process ends next: freeing a large site's state object by object would take
    // longer than the operating system takes to reclaim it whole.
    std::mem::forget(cut);
    Ok(ExitCode::SUCCESS)
}

/// Opens the log checkpoints are checked against (only when there are checkpoints).
type LogOpener = Box<dyn Fn() -> Result<Box<dyn lhc_log::Log>, String>>;

/// Opens the embedded log in `dir`, read-only.
fn embedded_opener(dir: PathBuf) -> LogOpener {
    Box::new(move || -> Result<Box<dyn lhc_log::Log>, String> {
        Ok(Box::new(
            lhc_log::EmbeddedLog::open_read_only(&dir).map_err(|e| e.to_string())?,
        ))
    })
}

/// The checkpoints a node keeps in its cache snapshot (`--data DIR`).
struct NodeCheckpoints {
    dir: PathBuf,
    store: Arc<lhc_node::Store>,
    /// A Kafka node: its checkpoints name its journal's offsets.
    kafka: bool,
}

impl NodeCheckpoints {
    /// The node's store, opened to read beside a node that may be running on it; refused
    /// when the log named cannot be the one its checkpoints name.
    fn open(data: &std::path::Path, source: &SourceArgs) -> anyhow::Result<NodeCheckpoints> {
        let snapshot = crate::commands::connector::store_dir(data);
        let current = snapshot.join("CURRENT");
        if let Err(e) = std::fs::metadata(&current) {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                bail!("cannot read {}: {e}", current.display());
            }
        }
        if !current.is_file() {
            bail!(
                "no cache snapshot in {} (a node's data directory, as `lhc connector run \
                 --data` or `lhc connector fold --data` name it)",
                data.display()
            );
        }
        let store = lhc_node::Store::open_read_only(&snapshot)
            .with_context(|| format!("reading the cache snapshot {}", snapshot.display()))?;
        let kafka = store.kafka_source()?.is_some();
        if kafka && (source.path.is_some() || source.kafka.kafka.is_some()) {
            bail!(
                "{} is a Kafka node's: its checkpoints name the records of its journal, in the \
                 order it applied them, and that journal is what is replayed; name no log or \
                 --kafka with --data",
                data.display()
            );
        }
        if !kafka && source.embedded_dir().is_none() {
            bail!(
                "{} folds an embedded log: name that log's directory (its checkpoints name \
                 its records by offset; a JSONL file or --kafka numbers them otherwise)",
                data.display()
            );
        }
        Ok(NodeCheckpoints {
            dir: data.to_path_buf(),
            store: Arc::new(store),
            kafka,
        })
    }

    /// The node's journal as a log to replay, for a Kafka node.
    #[allow(clippy::type_complexity)]
    fn journal(&self) -> Option<Box<dyn Fn() -> Box<dyn lhc_log::Log> + '_>> {
        self.kafka.then(|| {
            Box::new(|| -> Box<dyn lhc_log::Log> { Box::new(journal_of(&self.store, &self.dir)) })
                as Box<dyn Fn() -> Box<dyn lhc_log::Log>>
        })
    }

    /// The checkpoints, as a shelf to resume from.
    fn shelf(&self) -> NodeShelf {
        NodeShelf {
            store: self.store.clone(),
            dir: self.dir.clone(),
            last: std::cell::RefCell::new(None),
        }
    }

    /// The log the checkpoints are checked against: the journal, or the embedded log.
    fn log_opener(&self, embedded: Option<PathBuf>) -> LogOpener {
        match (self.kafka, embedded) {
            (false, Some(dir)) => embedded_opener(dir),
            _ => {
                let (store, dir) = (self.store.clone(), self.dir.clone());
                Box::new(move || -> Result<Box<dyn lhc_log::Log>, String> {
                    Ok(Box::new(journal_of(&store, &dir)))
                })
            }
        }
    }
}

/// The journal of the node whose data directory is `dir`, read as a log.
fn journal_of(
    store: &Arc<lhc_node::Store>,
    dir: &std::path::Path,
) -> lhc_node::journal::JournalLog {
    lhc_node::journal::JournalLog::new(store.clone(), format!("the journal of {}", dir.display()))
}

/// A node's checkpoints, read from its store (the last one read is kept: its header and
/// body are asked one after the other).
struct NodeShelf {
    store: Arc<lhc_node::Store>,
    dir: PathBuf,
    last: std::cell::RefCell<Option<(u64, Vec<u8>)>>,
}

impl NodeShelf {
    fn with<T>(
        &self,
        offset: u64,
        f: impl FnOnce(&[u8]) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut last = self.last.borrow_mut();
        if last.as_ref().is_none_or(|(at, _)| *at != offset) {
            let bytes = self
                .store
                .checkpoint(offset)
                .map_err(|e| e.to_string())?
                .ok_or("it is no longer in the store (deleted by the node meanwhile)")?;
            *last = Some((offset, bytes));
        }
        f(&last.as_ref().expect("just read").1)
    }
}

impl lhc_replay::checkpoint::Shelf for NodeShelf {
    fn describe(&self) -> String {
        format!("the cache snapshot of {}", self.dir.display())
    }

    fn list(&self) -> Result<Vec<(u64, String)>, String> {
        Ok(self
            .store
            .checkpoints()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(offset, _)| {
                (
                    offset,
                    format!("after {offset} records in {}", self.dir.display()),
                )
            })
            .collect())
    }

    fn header(&self, offset: u64) -> Result<lhc_replay::checkpoint::Header, String> {
        self.with(offset, |bytes| {
            let (header, _) = lhc_log::checkpoint::split(bytes)?;
            if header.next_offset != offset {
                return Err(format!(
                    "it is kept as covering {offset} records but its header says {} (damaged)",
                    header.next_offset
                ));
            }
            Ok(header)
        })
    }

    fn body(
        &self,
        offset: u64,
        _header: &lhc_replay::checkpoint::Header,
    ) -> Result<Vec<u8>, String> {
        self.with(offset, |bytes| {
            lhc_log::checkpoint::split(bytes).map(|(_, body)| body.to_vec())
        })
    }

    fn rewrite_hint(&self) -> String {
        "run the query with the node's build, or the node with this one (it writes new ones \
         as it folds on)"
            .into()
    }
}

/// A cell of a table: control characters escaped, so a record's text cannot move the
/// cursor, recolour the terminal or split a row.
fn text(v: &Value) -> String {
    let raw = match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if raw.chars().any(char::is_control) {
        raw.chars().flat_map(char::escape_default).collect()
    } else {
        raw
    }
}

/// The rows of a listing answer.
fn list_of<'a>(what: &What, value: &'a Value) -> Option<&'a Value> {
    Some(match what {
        What::Connectors { .. } => &value["connectors"],
        What::Registrations { .. } => &value["machines"],
        What::Sessions { .. } => &value["sessions"],
        What::Launches { .. } => &value["launches"],
        What::Machine { .. } => &value["history"],
        What::LhcData { .. } | What::Digest { .. } => return None,
    })
}

/// Aligned columns with a header for the listings; JSON for the LHC data.
fn print_table(what: &What, value: &Value) {
    let (rows, columns): (&Value, &[&str]) = match what {
        What::Connectors { .. } => (
            &value["connectors"],
            &[
                "connector",
                "zone",
                "state",
                "since",
                "elected",
                "snapshot_version",
                "registrations",
            ],
        ),
        What::Registrations { .. } => (
            &value["machines"],
            &["machine", "registered_with", "sessions"],
        ),
        What::Sessions { .. } => (&value["sessions"], &["machine", "session", "user", "state"]),
        What::Digest { .. } => {
            println!("{}", text(&value["digest"]));
            return;
        }
        What::Launches { .. } => (
            &value["launches"],
            &[
                "ts",
                "request",
                "user",
                "resource",
                "connector",
                "outcome",
                "via",
                "machine",
                "reason",
            ],
        ),
        What::Machine { .. } => {
            let now = &value["now"];
            println!(
                "{} at {}: registered with {}, {} session(s)",
                text(&value["machine"]),
                text(&value["at"]),
                text(&now["registered_with"]),
                now["sessions"].as_array().map_or(0, Vec::len)
            );
            (
                &value["history"],
                &["ts", "offset", "what", "connector", "detail"],
            )
        }
        _ => {
            println!(
                "{}",
                serde_json::to_string_pretty(value).expect("JSON prints")
            );
            return;
        }
    };
    let rows: Vec<Vec<String>> = rows
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| columns.iter().map(|c| text(&r[*c])).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .map(|r| r[i].len())
                .max()
                .unwrap_or(0)
                .max(c.len())
        })
        .collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    println!("{}", line(columns.iter().map(|c| c.to_string()).collect()));
    for r in rows {
        println!("{}", line(r));
    }
}

/// The answer to `what` from the state and outputs of a cut at `at`.
fn answer(
    what: &What,
    cut: &lhc_replay::Cut,
    at: Ts,
    zone: Option<&Zone>,
    quiet: bool,
    config: Option<&LaterConfigJson>,
) -> anyhow::Result<Value> {
    let engine = &cut.engine;
    Ok(match what {
        What::Connectors { .. } => {
            json!({ "at": at, "connectors": engine.connector_summaries() })
        }
        What::Registrations { .. } => {
            let list: Vec<_> = engine
                .machines()
                .sorted()
                .into_iter()
                .map(|(name, m)| m.summary(name))
                .collect();
            json!({ "at": at, "machines": list })
        }
        What::Sessions { user, .. } => {
            let mut list = Vec::new();
            for (name, m) in engine.machines().sorted() {
                for s in m.sessions() {
                    if user
                        .as_ref()
                        .is_none_or(|u| u.eq_ignore_ascii_case(&s.user))
                    {
                        list.push(json!({
                            "machine": name, "session": s.id, "user": s.user,
                            "state": snake(&s.state),
                        }));
                    }
                }
            }
            json!({ "at": at, "sessions": list })
        }
        What::Machine { name, .. } => {
            // Machine names resolve case-insensitively, as the engine resolves them.
            let exact = engine
                .site()
                .machine_id(name)
                .map(str::to_string)
                .unwrap_or(name.clone());
            let now = engine.machines().get(exact.as_str()).map(|m| {
                json!({
                    "registered_with": m.registrar().name(),
                    "sessions": m.sessions(),
                })
            });
            let history: Vec<Value> = cut
                .history
                .iter()
                .filter(|(_, o)| match o {
                    Output::Registration(r) => r.machine.eq_ignore_ascii_case(name),
                    Output::MachineMaintenance(m) => m.machine.eq_ignore_ascii_case(name),
                    Output::LaunchDecision(d) => d
                        .machine
                        .as_ref()
                        .is_some_and(|m| m.eq_ignore_ascii_case(name)),
                    _ => false,
                })
                .map(|(offset, o)| {
                    let (ts, what, connector, detail) = match o {
                        Output::Registration(r) => (
                            r.ts,
                            if r.accepted {
                                "registered"
                            } else {
                                "registration refused or left"
                            },
                            r.connector.clone(),
                            r.reason.map(|x| snake(&x)).unwrap_or_default(),
                        ),
                        Output::MachineMaintenance(m) => (
                            m.ts,
                            if m.on {
                                "maintenance on"
                            } else {
                                "maintenance off"
                            },
                            m.connector.clone(),
                            String::new(),
                        ),
                        Output::LaunchDecision(d) => (
                            d.ts,
                            "launch brokered here",
                            d.connector.clone(),
                            d.request.clone(),
                        ),
                        _ => unreachable!("filtered above"),
                    };
                    json!({
                        "ts": ts, "offset": offset, "what": what, "connector": connector,
                        "detail": detail, "output": o,
                    })
                })
                .collect();
            if now.is_none() && history.is_empty() {
                anyhow::bail!("no machine {name:?} in the log up to {at}");
            }
            json!({ "at": at, "machine": name, "now": now, "history": history })
        }
        What::Launches {
            since,
            until,
            outcome,
            reason,
            connector,
            user,
            ..
        } => {
            let (from, to) = launch_window(since, until, reason, at, zone, quiet)?;
            // A connector the log never named is a typo, not "no launches" (as `lhc-data`
            // and `machine` say for theirs; found by hostile testing).
            if let Some(name) = connector {
                let known = engine.connectors();
                if !known.keys().any(|k| k.eq_ignore_ascii_case(name)) {
                    let names: Vec<&str> = known.keys().map(|k| k.as_str()).collect();
                    bail!(
                        "no connector {name:?} in the log up to {at} (its connectors: {})",
                        names.join(", ")
                    );
                }
            }
            let same = |filter: &Option<String>, value: &str| {
                filter
                    .as_ref()
                    .is_none_or(|f| f.eq_ignore_ascii_case(value))
            };
            let list: Vec<Value> = cut
                .history
                .iter()
                .enumerate()
                .filter_map(|(at, (offset, o))| match o {
                    Output::LaunchDecision(d) if d.ts >= from && d.ts <= to => {
                        Some((at, offset, d))
                    }
                    _ => None,
                })
                .filter_map(|(at, offset, d)| {
                    let (who, what) = cut.launches.get(&at).cloned().unwrap_or_default();
                    let reason_text = d.reason.map(|r| snake(&r)).unwrap_or_default();
                    let keep = same(user, &who)
                        && same(connector, &d.connector)
                        && same(reason, &reason_text)
                        && outcome.is_none_or(|o| {
                            (o == OutcomeFilter::Brokered) == (d.outcome == Outcome::Brokered)
                        });
                    keep.then(|| {
                        json!({
                            "ts": d.ts, "offset": offset, "request": d.request, "user": who,
                            "resource": what, "connector": d.connector,
                            "outcome": snake(&d.outcome), "via": snake(&d.via),
                            "machine": d.machine, "session": d.session, "reason": d.reason,
                        })
                    })
                })
                .collect();
            json!({ "from": from, "to": to, "launches": list })
        }
        What::LhcData { connector, .. } => {
            let data = engine
                .lhc_data(connector)
                .with_context(|| format!("no connector {connector:?} in the log up to {at}"))?;
            let mut data = serde_json::to_value(data)?;
            // R-DATA: the StoreFront servers seen too, each with its last contact (kept on
            // the connector, where the eligibility rule reads them).
            if let (Some(c), Some(fields)) =
                (engine.connectors().get(connector), data.as_object_mut())
            {
                fields.insert("storefronts".into(), serde_json::to_value(c.storefronts())?);
            }
            json!({ "at": at, "connector": connector, "data": data })
        }
        What::Digest { .. } => {
            let digest = match config {
                Some(config) => config.digest(engine),
                None => engine.digest(),
            };
            json!({ "at": at, "digest": digest })
        }
    })
}

/// The window `lhc query launches` lists, from `--since` (an hour before `--at` if not
/// given) to `--until` (at most `--at`), with `--reason` checked to be a reason code:
/// refused before anything is replayed when they cannot give a list.
fn launch_window(
    since: &Option<String>,
    until: &Option<String>,
    reason: &Option<String>,
    at: Ts,
    zone: Option<&Zone>,
    quiet: bool,
) -> anyhow::Result<(Ts, Ts)> {
    let from = match since {
        Some(f) => parse_instant(f, zone)?,
        None => Ts(at.millis() - 3_600_000),
    };
    let to = match until {
        Some(u) => {
            let until = parse_instant(u, zone)?;
            if until > at && !quiet {
                eprintln!("note: --until {until} is after --at {at}: the window ends at --at");
            }
            until.min(at)
        }
        None => at,
    };
    if to < from {
        bail!("--since {from} is after the end of the window {to}: nothing to list");
    }
    if let Some(r) = reason {
        let known =
            serde_json::from_value::<lhc_engine::output::Reason>(Value::String(r.to_lowercase()));
        if known.is_err() {
            bail!(
                "--reason {r:?} is not a reason code; the codes are the `reason` values \
                     of launch.decision in schemas/output.schema.json (like not_elected, \
                     cloud_unreachable, pooled_unavailable_in_outage)"
            );
        }
    }
    Ok((from, to))
}
