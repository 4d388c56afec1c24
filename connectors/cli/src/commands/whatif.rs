//! `lhc whatif`: replay a log as it happened and with changes, and show what would have
//! been different (see docs/whatif.md). The comparison is `lhc_replay::whatif`'s; this
//! module parses the changes, prints and writes the page.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;

use anyhow::Context;
use lhc_replay::whatif::{thousands, WhatIf};
use lhc_replay::Plan;

use crate::args::{Format, FormatArgs, SourceArgs};
use crate::render::duration;

/// Options of `lhc whatif`.
#[derive(clap::Args)]
#[command(after_long_help = "Examples:\n  \
    lhc whatif lhc-demo/log --without-bad-changes\n  \
    lhc whatif lhc-demo/log --site reuse_machines_without_shutdown_in_outage_allowed=true \\\n      \
    --group pool-z1:reuse_machines_without_shutdown_in_outage=true\n  \
    lhc whatif lhc-demo/log --drop 'peer.probe connector=cc2.z1.sim.example peer=cc1.z1.sim.example'\n  \
    lhc whatif lhc-demo/log --set onprem_outage_s=30\n  \
    lhc whatif lhc-demo/log --patch extra.jsonl    # records of your own, merged by time\n\n\
    (lhc-demo/log is what `lhc demo` writes; any log or JSONL file works the same.)\n\n\
    Observations (health checks, probes, heartbeats, sessions, launch requests) are replayed \
    as recorded; only the engine's decisions change. Nothing is written to the log.")]
pub struct WhatIfArgs {
    /// A JSONL file or an embedded log directory [default: lhc-data/log].
    #[arg(value_name = "PATH", conflicts_with = "kafka")]
    path: Option<PathBuf>,
    /// Use Kafka: bootstrap servers, host:port[,host:port...] (name the site with
    /// --site NAME).
    #[arg(long, value_name = "BROKERS")]
    kafka: Option<String>,
    /// Kafka topic holding the site logs.
    #[arg(long, value_name = "TOPIC", default_value = lhc_log::kafka::DEFAULT_TOPIC)]
    topic: String,
    /// Longest wait for a Kafka broker before giving up with an error.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    kafka_timeout: u64,
    #[command(flatten)]
    kafka_client: crate::args::KafkaClientArgs,
    /// An engine parameter (SPEC §9) from the start, like onprem_outage_s=30 (repeatable).
    #[arg(long = "set", value_name = "PARAM=VALUE")]
    params: Vec<String>,
    /// A site setting from the start, like lhc_enabled=false: every upsert of the site
    /// object in the log carries it (repeatable). Without `=`, with --kafka: the site name
    /// (the message key of its records), as in the other commands.
    #[arg(long, value_name = "KEY=VALUE")]
    site: Vec<String>,
    /// A delivery-group setting from the start, like
    /// pooled:reuse_machines_without_shutdown_in_outage=true: every upsert of the group
    /// carries it (repeatable).
    #[arg(long, value_name = "GROUP:KEY=VALUE")]
    group: Vec<String>,
    /// Extra records (JSONL: config changes, admin commands, lifecycle events, probes...)
    /// merged into the log at their ts; a config.change may leave out its version
    /// (repeatable).
    #[arg(long, value_name = "FILE")]
    patch: Vec<PathBuf>,
    /// Give every --patch record this time instead of its own (RFC 3339 with Z or an
    /// offset, or a local time read in --tz).
    #[arg(long, value_name = "TIME", requires = "patch")]
    at: Option<String>,
    /// Time zone (IANA name, like Europe/Berlin) of an --at given without an offset.
    #[arg(long, value_name = "ZONE", requires = "at")]
    tz: Option<String>,
    /// Remove the records matching TYPE [FIELD=VALUE ...] (a value ending in * matches a
    /// prefix), like 'config.change version=7' (repeatable).
    #[arg(long = "drop", value_name = "FILTER")]
    drops: Vec<String>,
    /// Remove the config ops that introduced every failed import (505), as `lhc forensics
    /// sync` names them: "had the bad change not been made".
    #[arg(long)]
    without_bad_changes: bool,
    /// Check that the "as it happened" side reproduces this digest chain (written by `lhc
    /// replay --digest-every N --chain FILE`, or when the log was recorded): refused if it
    /// does not.
    #[arg(long, value_name = "CHAIN")]
    verify: Option<PathBuf>,
    /// Write a self-contained HTML page of the comparison here.
    #[arg(long, value_name = "FILE.html")]
    out: Option<PathBuf>,
    /// Changed decisions listed on the terminal (all are in --format json; the HTML page
    /// lists the first 2,000).
    #[arg(long, value_name = "N", default_value_t = 20)]
    limit: usize,
    #[command(flatten)]
    format: FormatArgs,
}

impl WhatIfArgs {
    /// The source: `--site NAME` (no `=`) is the Kafka site, as in the other commands.
    fn source(&self) -> anyhow::Result<SourceArgs> {
        let names: Vec<&String> = self.site.iter().filter(|s| !s.contains('=')).collect();
        if names.len() > 1 {
            anyhow::bail!("--site NAME given twice ({}): one site per what-if", {
                let n: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
                n.join(", ")
            });
        }
        let site = names.first().map(|s| s.to_string());
        if site.is_some() && self.kafka.is_none() {
            anyhow::bail!(
                "--site {}: a site setting is KEY=VALUE (like \
                 reuse_machines_without_shutdown_in_outage_allowed=true); a site name \
                 goes with --kafka",
                site.unwrap_or_default()
            );
        }
        Ok(SourceArgs {
            path: self.path.clone(),
            kafka: crate::args::KafkaArgs {
                kafka: self.kafka.clone(),
                topic: self.topic.clone(),
                site,
                kafka_timeout: self.kafka_timeout,
                client: self.kafka_client.clone(),
            },
        })
    }
}

/// Parses the changes; every invalid one is refused here, naming it.
fn plan(args: &WhatIfArgs) -> anyhow::Result<Plan> {
    let mut plan = Plan::default();
    for p in &args.params {
        plan.set_param(p)?;
    }
    for s in args.site.iter().filter(|s| s.contains('=')) {
        plan.set_site(s)?;
    }
    for g in &args.group {
        plan.set_group(g)?;
    }
    let zone = args
        .tz
        .as_deref()
        .map(crate::time::Zone::named)
        .transpose()?;
    let at = args
        .at
        .as_deref()
        .map(|t| crate::time::parse_instant(t, zone.as_ref()))
        .transpose()
        .context("--at")?;
    for path in &args.patch {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading --patch {}", path.display()))?;
        plan.add_patch(&path.display().to_string(), &text, at)?;
    }
    for d in &args.drops {
        plan.drop_records(d)?;
    }
    if plan.is_empty() && !args.without_bad_changes {
        anyhow::bail!(
            "no change given: add --set, --site, --group, --patch, --drop or \
             --without-bad-changes (see lhc whatif --help)"
        );
    }
    Ok(plan)
}

/// Runs `lhc whatif`.
pub fn run(args: WhatIfArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let source_args = args.source()?;
    let plan = plan(&args)?;
    let mut inputs: Vec<&std::path::Path> = args.patch.iter().map(PathBuf::as_path).collect();
    let input = source_args.input_path();
    inputs.extend(input.as_deref());
    inputs.extend(args.verify.as_deref());
    if let Some(path) = &args.out {
        crate::args::refuse_overwrite(path, &inputs)?;
    }
    if let (true, Some(input)) = (args.without_bad_changes, &input) {
        // Read twice: a pipe or a FIFO would give the second read nothing (or wait
        // forever for a writer).
        let kind = std::fs::metadata(input).map(|m| m.file_type());
        if kind.is_ok_and(|k| !k.is_file() && !k.is_dir()) {
            anyhow::bail!(
                "--without-bad-changes reads {} twice, and it is not a regular file or a log \
                 directory (a pipe?): save it to a file first",
                input.display()
            );
        }
    }
    // The page is written to a temporary file beside it first: a path that cannot be
    // written fails now, before the replays, and the page replaces FILE in one rename.
    let page = args
        .out
        .as_deref()
        .map(crate::render::PendingPage::create)
        .transpose()?;
    // Opened here first, so a missing log is refused with the usual message; the spinner
    // counts the records of that first replay.
    let (source, bar) = source_args.open_with_progress("replaying twice", quiet)?;
    let first = Mutex::new(Some(source));
    let open = || -> Result<lhc_replay::Source, lhc_replay::SourceError> {
        if let Some(source) = first.lock().expect("not poisoned").take() {
            return Ok(source);
        }
        source_args.open().map_err(|e| {
            lhc_replay::PathError {
                path: source_args.input_path().unwrap_or_default(),
                source: std::io::Error::other(format!("{e:#}")),
            }
            .into()
        })
    };
    let options = lhc_replay::whatif::WhatIfOptions {
        without_bad_changes: args.without_bad_changes,
        verify: args
            .verify
            .as_ref()
            .map(crate::commands::replay::read_chain)
            .transpose()?,
    };
    let result = lhc_replay::whatif(open, &plan, &options);
    bar.finish_and_clear();
    let whatif = result?;
    if whatif.before.records == 0 {
        anyhow::bail!("{} holds no records", whatif.source);
    }
    if whatif.before.quarantined == whatif.before.records {
        anyhow::bail!(
            "none of the {} record(s) of {} could be applied: every one was quarantined (is \
             it a site log? `lhc lint` or `lhc replay` names why)",
            whatif.before.records,
            whatif.source
        );
    }
    let text = match args.format.get() {
        Format::Table => summary(&whatif, args.limit),
        Format::Json => serde_json::to_string_pretty(&whatif)? + "\n",
        Format::Jsonl => whatif
            .changed
            .iter()
            .map(|c| serde_json::to_string(c).map(|l| l + "\n"))
            .collect::<Result<String, _>>()?,
    };
    if let Some(page) = page {
        page.finish(&crate::render::whatif::page(&whatif), quiet)?;
    }
    // A closed or full stdout is an error to report, not a panic.
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing the what-if to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// Text from the log for the terminal: control characters escaped, so a name cannot move
/// the cursor, recolour the terminal or forge a line.
fn clean(raw: &str) -> std::borrow::Cow<'_, str> {
    if raw.chars().any(char::is_control) {
        raw.chars()
            .flat_map(char::escape_default)
            .collect::<String>()
            .into()
    } else {
        raw.into()
    }
}

/// The terminal summary.
pub fn summary(w: &WhatIf, limit: usize) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "what if — {}", clean(&w.source));
    for c in &w.changes {
        let _ = writeln!(t, "  change  {}", clean(c));
    }
    for n in &w.notes {
        let _ = writeln!(t, "  note    {}", clean(n));
    }
    if w.before.quarantined > 0 {
        let _ = writeln!(
            t,
            "  note    {} record(s) of the log are quarantined on both sides (`lhc lint` lists \
             them)",
            thousands(w.before.quarantined)
        );
    }
    let _ = writeln!(
        t,
        "\nas it happened: {} records, digest {}\nwhat-if:        {} records, digest {}",
        thousands(w.before.records),
        w.before.digest,
        thousands(w.after.records),
        w.after.digest
    );
    if let Some(v) = &w.before.verified {
        let _ = writeln!(
            t,
            "as it happened: reproduces the recorded digest chain ({} link(s) checked{})",
            v.links,
            if v.unreached > 0 {
                format!(", {} past the end of the log", v.unreached)
            } else {
                String::new()
            }
        );
        if v.unverified > 0 {
            let _ = writeln!(
                t,
                "warning: the chain ends before the log does: the last {} record(s) were not \
                 verified (was the chain written from a shorter log?)",
                v.unverified
            );
        }
    }
    let _ = writeln!(t, "\n{}", w.verdict);
    let _ = writeln!(
        t,
        "\n{:<32} {:>12} {:>12}",
        "launches", "as happened", "what-if"
    );
    let row = |t: &mut String, name: &str, b: u64, a: u64| {
        let _ = writeln!(t, "{name:<32} {:>12} {:>12}", thousands(b), thousands(a));
    };
    row(
        &mut t,
        "launches (users)",
        w.before.launches,
        w.after.launches,
    );
    row(&mut t, "  refused", w.before.refused, w.after.refused);
    row(
        &mut t,
        "users affected",
        w.before.users_affected.len() as u64,
        w.after.users_affected.len() as u64,
    );
    row(&mut t, "attempts", w.before.attempts, w.after.attempts);
    for total in &w.totals {
        row(
            &mut t,
            &format!("  {}", total.outcome),
            total.before,
            total.after,
        );
    }
    for z in &w.zones {
        let (b, a) = (&z.before, &z.after);
        let _ = writeln!(
            t,
            "\nzone {:<27} {:>12} {:>12}",
            clean(&z.zone),
            "as happened",
            "what-if"
        );
        row(&mut t, "LHC episodes", b.episodes, a.episodes);
        let span = |t: &mut String, name: &str, b: i64, a: i64| {
            let _ = writeln!(t, "{name:<32} {:>12} {:>12}", duration(b), duration(a));
        };
        span(&mut t, "in LHC mode", b.lhc_s, a.lhc_s);
        span(&mut t, "  brokering", b.brokering_s, a.brokering_s);
        span(&mut t, "  without a broker", b.no_broker_s, a.no_broker_s);
        let _ = writeln!(
            t,
            "{:<32} {:>12} {:>12}",
            "brokers",
            b.brokers.len(),
            a.brokers.len()
        );
        row(&mut t, "election changes (3504)", b.elections, a.elections);
        row(
            &mut t,
            "failed imports (505)",
            b.import_failures,
            a.import_failures,
        );
        row(
            &mut t,
            "decided on a stale snapshot",
            b.decided_on_stale,
            a.decided_on_stale,
        );
        row(&mut t, "attempts brokered", b.brokered, a.brokered);
        row(&mut t, "attempts rejected", b.rejected, a.rejected);
        if b.brokers != a.brokers {
            let names = |v: &[String]| match v.len() {
                0 => "none".to_string(),
                _ => clean(&v.join(", ")).into_owned(),
            };
            let _ = writeln!(
                t,
                "  brokers as happened: {}\n  brokers in what-if:  {}",
                names(&b.brokers),
                names(&a.brokers)
            );
        }
    }
    if !w.changed.is_empty() {
        let _ = writeln!(
            t,
            "\n{} request(s) decided differently{}:",
            thousands(w.changed.len() as u64),
            if w.changed.len() > limit {
                format!(" (first {limit}; --limit, --format json or --out for all)")
            } else {
                String::new()
            }
        );
        for c in w.changed.iter().take(limit) {
            let side = |o: &Option<lhc_replay::whatif::Outcome>| match o {
                None => "(no request)".to_string(),
                Some(o) => format!(
                    "{} via {}{}",
                    o.outcome,
                    o.via,
                    o.machine
                        .as_deref()
                        .map(|m| format!(" on {m}"))
                        .unwrap_or_default()
                ),
            };
            let _ = writeln!(
                t,
                "  {} {:<7} {} {} {} at {}: {} → {}",
                c.ts,
                c.change,
                clean(&c.request),
                clean(&c.user),
                clean(&c.resource),
                clean(&c.connector),
                clean(&side(&c.before)),
                clean(&side(&c.after))
            );
        }
    }
    let _ = writeln!(t, "\nsessions: {}", w.session_policy);
    if !w.flagged_machines.is_empty() {
        let _ = writeln!(
            t,
            "\n{} machine(s) flagged: their recorded sessions follow decisions the what-if \
             changed (sessions are replayed as recorded; see docs/whatif.md)",
            w.flagged_machines.len()
        );
        for m in w.flagged_machines.iter().take(limit) {
            let shown: Vec<&str> = m.requests.iter().take(5).map(String::as_str).collect();
            let more = match m.requests.len() {
                n if n > 5 => format!(" and {} more", n - 5),
                _ => String::new(),
            };
            let _ = writeln!(
                t,
                "  {} ({}{more}): {}",
                clean(&m.machine),
                clean(&shown.join(", ")),
                m.why
            );
        }
        if w.flagged_machines.len() > limit {
            let _ = writeln!(t, "  … {} more", w.flagged_machines.len() - limit);
        }
    }
    t
}
