//! `lhc query PATH --at TS [what]`: the site as it was at an instant, from a replay up to it.

use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Subcommand;
use lhc_engine::engine::snake;
use lhc_engine::{Output, Ts};
use serde_json::{json, Value};

use crate::args::SourceArgs;
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
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// What to show [default: connectors].
    #[command(subcommand)]
    what: Option<What>,
}

/// What `lhc query` shows.
#[derive(Subcommand, Clone)]
pub enum What {
    /// Each connector: state and since when, elected broker and candidates, snapshot
    /// version, registrations (the default).
    Connectors,
    /// Each VDA seen: who it is registered with and its sessions.
    Registrations,
    /// Every session the VDAs reported (optionally one user's).
    Sessions {
        /// Only this user's sessions.
        #[arg(long)]
        user: Option<String>,
    },
    /// One machine: its state at the instant and every output about it up to then.
    Machine {
        /// Machine id.
        name: String,
    },
    /// Launch decisions in a window ending at the instant.
    Launches {
        /// Start of the window [default: one hour before --at].
        #[arg(long, value_name = "TS")]
        from: Option<String>,
    },
    /// The LHC database content of a connector besides its configuration (R-DATA).
    LhcData {
        /// Connector FQDN.
        connector: String,
    },
    /// The state digest at the instant (compare with `lhc replay --digest` of a cut log).
    Digest,
}

/// Runs `lhc query`.
pub fn run(args: QueryArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let zone = args.tz.as_deref().map(Zone::named).transpose()?;
    let at = parse_instant(&args.at, zone.as_ref())?;
    let cut = args
        .source
        .replay_with(quiet, |source| lhc_replay::cut_at(source, at))?;
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
    let engine = &cut.engine;
    let what = args.what.clone().unwrap_or(What::Connectors);
    let value = match &what {
        What::Connectors => {
            let list: Vec<Value> = engine
                .connectors()
                .iter()
                .map(|(name, c)| {
                    json!({
                        "connector": name,
                        "zone": c.zone(),
                        "state": snake(&c.state()),
                        "since": c.state_since(),
                        "elected": c.elected(),
                        "candidates": c.candidates(),
                        "brokering": c.brokering(),
                        "snapshot_version": c.snapshot(),
                        "registrations": c.registrations().len(),
                        "forced_outage": c.forced(),
                    })
                })
                .collect();
            json!({ "at": at, "connectors": list })
        }
        What::Registrations => {
            let list: Vec<_> = engine
                .machines()
                .sorted()
                .into_iter()
                .map(|(name, m)| m.summary(name))
                .collect();
            json!({ "at": at, "machines": list })
        }
        What::Sessions { user } => {
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
        What::Machine { name } => {
            let now = engine.machines().get(name.as_str()).map(|m| {
                json!({
                    "registered_with": m.registrar().name(),
                    "sessions": m.sessions(),
                })
            });
            let history: Vec<Value> = cut
                .outputs
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
                .map(|(offset, o)| json!({ "offset": offset, "output": o }))
                .collect();
            if now.is_none() && history.is_empty() {
                anyhow::bail!("no machine {name:?} in the log up to {at}");
            }
            json!({ "at": at, "machine": name, "now": now, "history": history })
        }
        What::Launches { from } => {
            let from = match from {
                Some(f) => parse_instant(f, zone.as_ref())?,
                None => Ts(at.millis() - 3_600_000),
            };
            let list: Vec<Value> = cut
                .outputs
                .iter()
                .filter_map(|(offset, o)| match o {
                    Output::LaunchDecision(d) if d.ts >= from && d.ts <= at => {
                        Some(json!({ "offset": offset, "decision": d }))
                    }
                    _ => None,
                })
                .collect();
            json!({ "from": from, "to": at, "launches": list })
        }
        What::LhcData { connector } => {
            let data = engine
                .lhc_data(connector)
                .with_context(|| format!("no connector {connector:?} in the log up to {at}"))?;
            json!({ "at": at, "connector": connector, "data": data })
        }
        What::Digest => json!({ "at": at, "digest": engine.digest() }),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_table(&what, &value);
    }
    Ok(ExitCode::SUCCESS)
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Aligned columns for the list answers; JSON for the others.
fn print_table(what: &What, value: &Value) {
    let (rows, columns): (&Value, &[&str]) = match what {
        What::Connectors => (
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
        What::Registrations => (
            &value["machines"],
            &["machine", "registered_with", "sessions"],
        ),
        What::Sessions { .. } => (&value["sessions"], &["machine", "session", "user", "state"]),
        What::Digest => {
            println!("{}", text(&value["digest"]));
            return;
        }
        What::Launches { .. } => {
            for l in value["launches"].as_array().into_iter().flatten() {
                let d = &l["decision"];
                println!(
                    "{}  {:<28} {:<10} {:<9} {:<5} {:<24} {}",
                    text(&d["ts"]),
                    text(&d["request"]),
                    text(&d["outcome"]),
                    text(&d["via"]),
                    text(&d["session"]),
                    text(&d["machine"]),
                    text(&d["reason"])
                );
            }
            return;
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
