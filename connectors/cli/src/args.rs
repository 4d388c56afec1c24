//! Which log a command works on: an embedded directory (default) or a Kafka topic.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use lhc_log::{EmbeddedLog, EmbeddedOptions, FsyncPolicy, KafkaLog, KafkaOptions, Log};

/// Kafka location options (`--kafka BROKERS --topic T --site S`).
#[derive(clap::Args, Clone, Debug)]
pub struct KafkaArgs {
    /// Use Kafka: bootstrap servers, host:port[,host:port...].
    #[arg(long, value_name = "BROKERS")]
    pub kafka: Option<String>,
    /// Kafka topic holding the site logs.
    #[arg(long, value_name = "TOPIC", default_value = lhc_log::kafka::DEFAULT_TOPIC)]
    pub topic: String,
    /// Site name: the Kafka message key that selects the site's records. Required with --kafka.
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    /// Longest wait for a Kafka broker before giving up with an error.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub kafka_timeout: u64,
    #[command(flatten)]
    pub client: KafkaClientArgs,
}

/// librdkafka settings for secured clusters, the way kcat takes them (`-X`, `-F`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KafkaClientArgs {
    /// A librdkafka setting KEY=VALUE (repeatable), like kcat's -X:
    /// security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, ssl.ca.location=FILE...
    /// Wins over --kafka-config-file. See docs/kafka.md.
    #[arg(long = "kafka-config", value_name = "KEY=VALUE")]
    pub kafka_config: Vec<String>,
    /// librdkafka settings from a Java properties file (KEY=VALUE lines, # comments), like
    /// the client files Confluent Cloud, Amazon MSK and Redpanda hand out.
    #[arg(long, value_name = "FILE")]
    pub kafka_config_file: Option<PathBuf>,
}

impl KafkaClientArgs {
    /// The settings, file first then flags (a later value of a key wins), each checked for
    /// form; librdkafka checks the rest in [`KafkaOptions::check`].
    pub fn settings(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut settings: Vec<(String, String)> = Vec::new();
        let mut put = |key: String, value: String| {
            settings.retain(|(k, _)| *k != key);
            settings.push((key, value));
        };
        if let Some(path) = &self.kafka_config_file {
            let file = std::fs::File::open(path)
                .with_context(|| format!("--kafka-config-file {}", path.display()))?;
            // A client properties file is a few lines: anything else (a device, a FIFO, a
            // huge file) is refused rather than read without end.
            const MAX: u64 = 1 << 20;
            let meta = file
                .metadata()
                .with_context(|| format!("--kafka-config-file {}", path.display()))?;
            if !meta.is_file() || meta.len() > MAX {
                bail!(
                    "--kafka-config-file {}: not a regular file of at most {MAX} bytes",
                    path.display()
                );
            }
            let read = java_properties::read(std::io::BufReader::new(file))
                .with_context(|| format!("--kafka-config-file {}", path.display()))?;
            // A HashMap: sorted, so messages and the order settings are applied in never
            // depend on hashing.
            let mut read: Vec<(String, String)> = read.into_iter().collect();
            read.sort();
            for (key, value) in read {
                put(key.trim().to_string(), value.trim().to_string());
            }
        }
        for setting in &self.kafka_config {
            let Some((key, value)) = setting.split_once('=') else {
                bail!(
                    "--kafka-config {setting:?}: expected KEY=VALUE, like \
                     security.protocol=SASL_SSL"
                );
            };
            if key.trim().is_empty() {
                bail!("--kafka-config {setting:?}: the key is empty");
            }
            put(key.trim().to_string(), value.to_string());
        }
        Ok(settings)
    }

    /// Adds the settings to `options` and has librdkafka check them.
    pub fn apply(&self, options: &mut KafkaOptions) -> anyhow::Result<()> {
        options.extra = self.settings()?;
        options.check()?;
        Ok(())
    }
}

impl KafkaArgs {
    /// The Kafka options, when --kafka is given.
    pub fn options(&self) -> anyhow::Result<Option<KafkaOptions>> {
        let Some(brokers) = &self.kafka else {
            return Ok(None);
        };
        let Some(site) = &self.site else {
            bail!("--kafka needs --site: the site name is the message key of its records");
        };
        let mut options = KafkaOptions::new(brokers, site);
        options.topic = self.topic.clone();
        options.timeout = Duration::from_secs(self.kafka_timeout.max(1));
        self.client.apply(&mut options)?;
        Ok(Some(options))
    }

    /// The Kafka options for a whole topic (`--all-sites`): no site needed.
    pub fn topic_options(&self) -> anyhow::Result<KafkaOptions> {
        let Some(brokers) = &self.kafka else {
            bail!("--all-sites needs --kafka: the sites are the keys of a Kafka topic");
        };
        let mut options = KafkaOptions::new(brokers, "");
        options.topic = self.topic.clone();
        options.timeout = Duration::from_secs(self.kafka_timeout.max(1));
        self.client.apply(&mut options)?;
        Ok(options)
    }
}

/// Many sites on one cluster: `--all-sites` folds every site of the topic, each on a
/// thread of its own.
#[derive(clap::Args, Clone, Debug)]
pub struct FleetArgs {
    /// With --kafka: every site of the topic (its message keys), each folded on a thread of
    /// its own, answered site by site in name order. Instead of --site.
    #[arg(long, requires = "kafka", conflicts_with = "site")]
    pub all_sites: bool,
    /// With --all-sites: sites folded at once [default: the machine's cores]. `lhc replay`
    /// of one site: threads decoding its records, which are still applied one by one in log
    /// order, so the outputs and digests are the same for any N (more than 64 counts as 64)
    /// [default: 1]. Other commands take it only with --all-sites.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

/// Prints `--all-sites` answers in site order: for people, each site's `text` under a
/// `== site NAME` heading; JSON, one object keyed by site; JSON lines, each of a site's
/// `items` with the site named first.
pub fn print_sites<T: serde::Serialize, I: serde::Serialize>(
    sites: &[(String, T)],
    format: Format,
    text: impl Fn(&T) -> String,
    items: impl Fn(&T) -> &[I],
) -> anyhow::Result<()> {
    match format {
        Format::Table => {
            for (site, answer) in sites {
                println!("== site {site}");
                print!("{}", text(answer));
            }
        }
        Format::Json => {
            let all: std::collections::BTreeMap<&str, &T> =
                sites.iter().map(|(s, a)| (s.as_str(), a)).collect();
            println!("{}", serde_json::to_string_pretty(&all)?);
        }
        Format::Jsonl => {
            for (site, answer) in sites {
                for item in items(answer) {
                    println!("{}", site_line(site, item)?);
                }
            }
        }
    }
    Ok(())
}

/// A JSON line of `--all-sites` output: `item` with the site named first.
fn site_line(site: &str, item: &impl serde::Serialize) -> anyhow::Result<String> {
    let mut object = serde_json::Map::new();
    object.insert("site".into(), site.into());
    match serde_json::to_value(item)? {
        serde_json::Value::Object(fields) => object.extend(fields),
        other => {
            object.insert("value".into(), other);
        }
    }
    Ok(serde_json::to_string(&object)?)
}

impl FleetArgs {
    /// Refuses `--threads` without `--all-sites`, for the commands that do not decode one
    /// site's log on several threads (so the option is never silently ignored).
    pub fn refuse_threads_without_sites(&self) -> anyhow::Result<()> {
        if self.threads.is_some() && !self.all_sites {
            anyhow::bail!(
                "--threads needs --all-sites here (sites folded at once); only `lhc replay` \
                 takes it for one site"
            );
        }
        Ok(())
    }

    /// Threads decoding one site's log (`lhc replay` without --all-sites).
    pub fn decoders(&self) -> usize {
        self.threads.map_or(1, usize::from)
    }

    /// Sites folded at once.
    pub fn threads(&self) -> usize {
        self.threads.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            usize::from,
        )
    }
}

/// Log location options shared by every command that reads or writes a log.
#[derive(clap::Args, Clone, Debug)]
pub struct LogArgs {
    /// The embedded log directory, named like every other command names its log
    /// [default: lhc-data/log]; or --kafka.
    #[arg(value_name = "LOG", conflicts_with_all = ["log", "kafka"])]
    pub source: Option<PathBuf>,
    /// Embedded log directory, as an option (same as the LOG argument).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "lhc-data/log",
        conflicts_with = "kafka"
    )]
    pub log: PathBuf,
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// When embedded appends reach the disk: always (before the command returns), never,
    /// or a period like 100ms.
    #[arg(long, value_name = "POLICY", default_value = "always")]
    pub fsync: FsyncPolicy,
}

impl LogArgs {
    /// The embedded log directory: the LOG argument, else --log.
    pub fn dir(&self) -> &PathBuf {
        self.source.as_ref().unwrap_or(&self.log)
    }

    fn kafka_options(&self) -> anyhow::Result<Option<KafkaOptions>> {
        self.kafka.options()
    }

    /// Opens the log for appending (creating an embedded log if needed).
    pub fn open_for_append(&self) -> anyhow::Result<Box<dyn Log>> {
        if let Some(options) = self.kafka_options()? {
            return Ok(Box::new(KafkaLog::open(options)?));
        }
        let options = EmbeddedOptions {
            fsync: self.fsync,
            ..EmbeddedOptions::default()
        };
        let log = EmbeddedLog::open(self.dir(), options)
            .with_context(|| format!("opening the log in {}", self.dir().display()))?;
        if let Some(r) = log.recovery() {
            eprintln!(
                "warning: cut a torn tail from {}: {} bytes at offset {} ({}); the bytes cut \
                 are kept in {}",
                r.segment.display(),
                r.bytes_dropped,
                r.offset,
                r.detail,
                r.kept.display()
            );
        }
        if let Some(lost) = log.lost() {
            eprintln!(
                "warning: records lost from {}: it ends at offset {}, but its index or commit \
                 mark named a record at offset {}; records {}..={} (at least) were written and are gone (the \
                 file was cut, an older copy put in its place, or a crash lost writes not yet \
                 on disk). Appends go on at offset \
                 {}; the loss is kept in {} and `lhc log check` names it. Restore the log from a \
                 copy if you have one",
                lost.segment.display(),
                lost.first,
                lost.last_listed,
                lost.first,
                lost.last_listed,
                lost.first,
                self.dir().join(lhc_log::embedded::LOST_FILE).display()
            );
        }
        self.keep_checkpoint_evidence(&log)?;
        Ok(Box::new(log))
    }

    /// A checkpoint covering more records than the log holds is evidence that records are
    /// gone (the log was cut or restored without them): kept in the log's `LOST` file before
    /// this writer appends at their offsets, where the checkpoint would soon look merely
    /// stale, and reported.
    fn keep_checkpoint_evidence(&self, log: &EmbeddedLog) -> anyhow::Result<()> {
        let dir = self.dir();
        let end = log.end_offset()?;
        let Some((covers, checkpoint)) = lhc_replay::checkpoint::beyond(dir, log, end)? else {
            return Ok(());
        };
        let last = lhc_log::embedded::list_segments(dir)?
            .last()
            .copied()
            .unwrap_or(0);
        let lost = lhc_log::LostRecords {
            segment: dir.join(format!("{last:020}.log")),
            first: end,
            last_listed: covers - 1,
        };
        if lhc_log::embedded::keep_lost_unless_covered(dir, &lost)? {
            eprintln!(
                "warning: records lost from {}: it ends at offset {end}, but checkpoint {} \
                 covers {covers} records; records {end}..={} were written and are gone. Appends \
                 go on at offset {end}; the loss is kept in {} and `lhc log check` names it. \
                 Restore the log from a copy if you have one",
                dir.display(),
                checkpoint.display(),
                covers - 1,
                dir.join(lhc_log::embedded::LOST_FILE).display()
            );
        }
        Ok(())
    }

    /// Opens an existing log for reading, changing nothing.
    pub fn open_for_read(&self) -> anyhow::Result<Box<dyn Log>> {
        if let Some(options) = self.kafka_options()? {
            return Ok(Box::new(KafkaLog::open(options)?));
        }
        let dir = self.dir();
        if dir.is_file() {
            // A JSONL file where a log directory is expected: the advice to import into it
            // would ask for a directory over the file (found by hostile testing).
            anyhow::bail!(
                "{} is a file, not an embedded log directory: `lhc log` commands work on log \
                 directories; import the file into one with `lhc log import {} --log DIR`, or \
                 read it as it is with `lhc replay`, `lhc lint` or `lhc query`",
                dir.display(),
                dir.display()
            );
        }
        let log = EmbeddedLog::open_read_only(dir).map_err(|e| {
            // "Create one" only where there is nothing: not over a damaged log.
            let nothing = match std::fs::read_dir(dir) {
                Ok(mut entries) => entries.next().is_none(),
                Err(_) => true,
            };
            let context = if nothing {
                format!(
                    "no log at {} (create one with `lhc log import FILE.jsonl {}`)",
                    dir.display(),
                    dir.display()
                )
            } else {
                format!("cannot read the log at {}", dir.display())
            };
            anyhow::Error::new(e).context(context)
        })?;
        Ok(Box::new(log))
    }

    /// The log as it stands, if it holds a log yet (an embedded directory that does not
    /// exist, or has no segment, holds none), for checks before appending.
    pub fn existing(&self) -> anyhow::Result<Option<Box<dyn Log>>> {
        if self.kafka.kafka.is_none() {
            let fresh = !self.dir().is_dir()
                || lhc_log::embedded::list_segments(self.dir())
                    .map(|s| s.is_empty())
                    .unwrap_or(false);
            if fresh {
                return Ok(None);
            }
        }
        self.open_for_read().map(Some)
    }

    /// Refuses to add to a log that already holds records unless `append` is set, and
    /// returns the offset the first new record will get and the time order to keep.
    pub fn prepare_append(
        &self,
        append: bool,
    ) -> anyhow::Result<(u64, lhc_log::validate::TimeOrder)> {
        let Some(log) = self.existing()? else {
            return Ok((0, Default::default()));
        };
        let (start, end) = (log.start_offset()?, log.end_offset()?);
        // Counted by reading: a Kafka partition may hold other sites' records too.
        let order = lhc_log::validate::TimeOrder::after_log(&*log)?;
        if order.records() > 0 && !append {
            bail!(
                "{} already holds {} record(s) (offsets {start}..{}); pass --append to add \
                 after them, or name an empty or new log with --log",
                log.describe(),
                order.records(),
                end - 1
            );
        }
        Ok((end, order))
    }

    /// The embedded directory, unless Kafka is selected.
    pub fn embedded_dir(&self) -> Option<&PathBuf> {
        self.kafka.kafka.is_none().then_some(self.dir())
    }
}

/// Where a replay reads: a JSONL file or embedded log directory, or Kafka.
#[derive(clap::Args, Clone, Debug)]
pub struct SourceArgs {
    /// A JSONL file or an embedded log directory [default: lhc-data/log].
    #[arg(value_name = "PATH", conflicts_with = "kafka")]
    pub path: Option<PathBuf>,
    #[command(flatten)]
    pub kafka: KafkaArgs,
}

impl SourceArgs {
    /// Opens the source with a spinner counting records on stderr (hidden with --quiet);
    /// finish the returned bar when done.
    pub fn open_with_progress(
        &self,
        what: &str,
        quiet: bool,
    ) -> anyhow::Result<(lhc_replay::Source, indicatif::ProgressBar)> {
        let bar = crate::progress::bar(None, what, quiet);
        let tick = bar.clone();
        let source = self.open()?.with_progress(move |n| tick.set_position(n));
        Ok((source, bar))
    }

    /// The embedded log directory this names, if it names one (checkpoints live there).
    pub fn embedded_dir(&self) -> Option<PathBuf> {
        if self.kafka.kafka.is_some() {
            return None;
        }
        let path = self
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from("lhc-data/log"));
        path.is_dir().then_some(path)
    }

    /// Replays the source through `compute` (a report, a cut, a lint) with the spinner.
    pub fn replay_with<T>(
        &self,
        quiet: bool,
        compute: impl FnOnce(&mut lhc_replay::Source) -> Result<T, lhc_replay::SourceError>,
    ) -> anyhow::Result<T> {
        self.replay_as(quiet, true, compute)
    }

    /// [`SourceArgs::replay_with`] for `lhc lint`: a source whose every record is
    /// quarantined is an answer (the quarantines listed), not an error.
    pub fn lint_with<T>(
        &self,
        quiet: bool,
        compute: impl FnOnce(&mut lhc_replay::Source) -> Result<T, lhc_replay::SourceError>,
    ) -> anyhow::Result<T> {
        self.replay_as(quiet, false, compute)
    }

    /// Opens the source with a spinner and replays it through `compute`
    /// ([`finish_replay_as`]).
    fn replay_as<T>(
        &self,
        quiet: bool,
        refuse_all_quarantined: bool,
        compute: impl FnOnce(&mut lhc_replay::Source) -> Result<T, lhc_replay::SourceError>,
    ) -> anyhow::Result<T> {
        let (source, bar) = self.open_with_progress("replaying", quiet)?;
        finish_replay_as(source, bar, quiet, refuse_all_quarantined, compute)
    }

    /// [`SourceArgs::replay_with`] from offset `from` of an embedded log (a checkpoint's
    /// next offset), counting `quarantined` records before it.
    pub fn replay_from_with<T>(
        &self,
        quiet: bool,
        from: u64,
        quarantined: u64,
        compute: impl FnOnce(&mut lhc_replay::Source) -> Result<T, lhc_replay::SourceError>,
    ) -> anyhow::Result<T> {
        let dir = self
            .embedded_dir()
            .context("checkpoints belong to embedded logs")?;
        let log = lhc_log::EmbeddedLog::open_read_only(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?;
        replay_log_with(quiet, Box::new(log), from, quarantined, compute)
    }
}

/// Replays `log` from offset `from` through `compute` with the spinner, `quarantined`
/// records before `from` counted (a replay from a checkpoint).
pub fn replay_log_with<T>(
    quiet: bool,
    log: Box<dyn Log>,
    from: u64,
    quarantined: u64,
    compute: impl FnOnce(&mut lhc_replay::Source) -> Result<T, lhc_replay::SourceError>,
) -> anyhow::Result<T> {
    let (source, bar) = source_at(quiet, log, from, quarantined)?;
    finish_replay(source, bar, quiet, compute)
}

/// A source over `log` from offset `from` with the `quarantined` records before it counted,
/// and its spinner.
fn source_at(
    quiet: bool,
    log: Box<dyn Log>,
    from: u64,
    quarantined: u64,
) -> anyhow::Result<(lhc_replay::Source, indicatif::ProgressBar)> {
    let what = if from == 0 {
        "replaying"
    } else {
        "replaying from a checkpoint"
    };
    let bar = crate::progress::bar(None, what, quiet);
    let tick = bar.clone();
    let name = log.describe();
    let mut source = lhc_replay::Source::from_log_at(log, from)
        .with_context(|| format!("cannot read {name} from offset {from}"))?
        .with_progress(move |n| tick.set_position(n))
        .with_loss_warnings(warn_loss);
    source.count_earlier_quarantines(quarantined);
    Ok((source, bar))
}

/// A replay of `log` from offset `from` whose reading and decoding started already, up to
/// the first record after `until` ([`lhc_replay::Source::start_until`]), with its spinner.
pub struct Started {
    source: lhc_replay::Source,
    bar: indicatif::ProgressBar,
    /// The offset it starts from.
    pub from: u64,
}

/// Starts reading and decoding `log` from offset `from` (a checkpoint's next offset, with
/// the `quarantined` records before it counted) up to the first record after `until`, on
/// a thread of its own: a query decodes the records after a checkpoint while the
/// checkpoint is rebuilt. [`finish_started`] replays them.
pub fn start_replay(
    quiet: bool,
    log: Box<dyn Log>,
    from: u64,
    quarantined: u64,
    until: lhc_engine::Ts,
) -> anyhow::Result<Started> {
    let (source, bar) = source_at(quiet, log, from, quarantined)?;
    Ok(Started {
        source: source.start_until(until),
        bar,
        from,
    })
}

impl Started {
    /// Stops it without using it (the checkpoint it was started for is not used): its
    /// read-ahead is freed and its spinner cleared, not left claiming a replay from a
    /// checkpoint.
    pub fn abandon(self) {
        self.bar.finish_and_clear();
    }
}

/// Replays a [`Started`] replay through `compute`, which must stop at the first record
/// after the instant it was started for (a cut at that instant does).
pub fn finish_started<T>(
    started: Started,
    quiet: bool,
    compute: impl FnOnce(&mut lhc_replay::Source) -> Result<T, lhc_replay::SourceError>,
) -> anyhow::Result<T> {
    finish_replay(started.source, started.bar, quiet, compute)
}

/// The end of every replay with a spinner: `compute`, then a refusal of an answer computed
/// from no record, and a note of the records quarantined.
fn finish_replay<T>(
    source: lhc_replay::Source,
    bar: indicatif::ProgressBar,
    quiet: bool,
    compute: impl FnOnce(&mut lhc_replay::Source) -> Result<T, lhc_replay::SourceError>,
) -> anyhow::Result<T> {
    finish_replay_as(source, bar, quiet, true, compute)
}

/// [`finish_replay`]; `refuse_all_quarantined: false` for `lhc lint`, whose answer is the
/// list of what was quarantined (it said "`lhc lint` names why" instead of naming it).
fn finish_replay_as<T>(
    mut source: lhc_replay::Source,
    bar: indicatif::ProgressBar,
    quiet: bool,
    refuse_all_quarantined: bool,
    compute: impl FnOnce(&mut lhc_replay::Source) -> Result<T, lhc_replay::SourceError>,
) -> anyhow::Result<T> {
    let result =
        compute(&mut source).with_context(|| format!("replaying {}", source.describe()))?;
    bar.finish_and_clear();
    // An answer computed from nothing is not an answer: say so instead.
    let (records, quarantined) = (source.records(), source.quarantined());
    if records == 0 {
        bail!("{} holds no records", source.describe());
    }
    if quarantined == records && refuse_all_quarantined {
        bail!(
            "none of the {records} record(s) of {} could be applied: every one was \
             quarantined (is it a site log? `lhc lint` or `lhc replay` names why)",
            source.describe()
        );
    }
    // (lint lists them itself.)
    if quarantined > 0 && !quiet && refuse_all_quarantined {
        eprintln!(
            "note: {quarantined} of {records} record(s) of {} were quarantined and changed \
             nothing (`lhc lint` lists them)",
            source.describe()
        );
    }
    Ok(result)
}

impl SourceArgs {
    /// Runs `work` on every site of the Kafka topic (`--all-sites`), `fleet.threads()` at
    /// once, with a progress bar of sites; the results in site-name order. A site that
    /// cannot be read is an error naming it.
    pub fn replay_sites_with<T: Send>(
        &self,
        fleet: &FleetArgs,
        quiet: bool,
        work: impl Fn(&str, &mut lhc_replay::Source) -> Result<T, lhc_replay::SourceError> + Sync,
    ) -> anyhow::Result<Vec<(String, T)>> {
        let options = self.kafka.topic_options()?;
        let sites = lhc_replay::fleet::discover(&options)
            .with_context(|| format!("finding the sites of topic {}", options.topic))?;
        if sites.sites.is_empty() {
            bail!(
                "topic {} on {} holds no site's records",
                options.topic,
                options.brokers
            );
        }
        if !quiet {
            eprintln!(
                "{} site(s) in topic {}; folding {} at once",
                sites.sites.len(),
                options.topic,
                fleet.threads().min(sites.sites.len())
            );
        }
        if sites.unkeyed > 0 {
            eprintln!(
                "warning: {} record(s) of topic {} have no key (or one that is not UTF-8 \
                 text), so belong to no site: skipped",
                sites.unkeyed, options.topic
            );
        }
        for site in &sites.split {
            eprintln!(
                "warning: site {site} has records in more than one partition (partitions were \
                 added after it started): only the partition Kafka's partitioner gives it now \
                 is read"
            );
        }
        for (site, found, expected) in &sites.misplaced {
            eprintln!(
                "warning: site {site}'s records are in partition {found}, but Kafka's \
                 partitioner gives it partition {expected} (they were written with another \
                 partitioner, like kcat's default): none of them is read; write with lhc, or \
                 kcat -X topic.partitioner=murmur2_random"
            );
        }
        let bar = crate::progress::bar(Some(sites.sites.len() as u64), "sites", quiet);
        let results =
            lhc_replay::fleet::each_site(&options, &sites, fleet.threads(), work, |_| bar.inc(1));
        bar.finish_and_clear();
        results
            .into_iter()
            .map(|(site, result)| {
                result
                    .map(|t| (site.clone(), t))
                    .with_context(|| format!("replaying site {site} of topic {}", options.topic))
            })
            .collect()
    }

    /// Opens the source at its first record.
    pub fn open(&self) -> anyhow::Result<lhc_replay::Source> {
        let spec = match self.kafka.options()? {
            Some(options) => lhc_replay::SourceSpec::Kafka(options),
            None => lhc_replay::SourceSpec::Path(
                self.path
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("lhc-data/log")),
            ),
        };
        let source = lhc_replay::Source::open(&spec).with_context(|| match &spec {
            lhc_replay::SourceSpec::Path(p) => format!(
                "cannot read {} (a JSONL file or an embedded log directory)",
                p.display()
            ),
            lhc_replay::SourceSpec::Kafka(o) => {
                format!("cannot read site {} from kafka {}", o.site, o.brokers)
            }
        })?;
        Ok(source.with_loss_warnings(warn_loss))
    }
}

/// Says on stderr (even with --quiet: an answer from a log that lost records is not the
/// whole story) what records the log's own files show were lost.
fn warn_loss(loss: &str) {
    eprintln!("warning: {loss}");
}

/// How a command prints its answer on stdout.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// For people: tables and summaries.
    #[default]
    Table,
    /// One JSON document.
    Json,
    /// One JSON value per line (a row, an episode, a finding), for jq and scripts.
    Jsonl,
}

/// The `--format` option every printing command shares.
#[derive(clap::Args, Clone, Debug)]
pub struct FormatArgs {
    /// Output format on stdout; diagnostics always go to stderr.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Same as --format json (kept for scripts written before --format).
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
}

impl FormatArgs {
    /// The format asked for.
    pub fn get(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            self.format
        }
    }
}

/// The absolute path `p` names, through its existing parent directory when `p` itself does
/// not exist yet (an output about to be created); `None` when even that cannot be told.
pub fn resolve(p: &std::path::Path) -> Option<PathBuf> {
    if let Ok(c) = p.canonicalize() {
        return Some(c);
    }
    let parent = match p.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.canonicalize().ok()?,
        _ => std::env::current_dir().ok()?,
    };
    Some(parent.join(p.file_name()?))
}

/// Whether `a` and `b` are the same file under two names (a hard link): compared by device
/// and inode, false when either does not exist.
pub fn same_inode(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Refuses to write `output` where it would destroy an input: the same file as an input
/// file, or a file inside an input log directory. A report written over the log it reads
/// would leave neither.
pub fn refuse_overwrite(
    output: &std::path::Path,
    inputs: &[&std::path::Path],
) -> anyhow::Result<()> {
    let Some(out) = resolve(output) else {
        return Ok(());
    };
    let same_file = |a: &std::path::Path, b: &std::path::Path| {
        std::fs::metadata(a).is_ok_and(|m| m.is_file()) && same_inode(a, b)
    };
    for input in inputs {
        // By name first (the clearer message), then by inode.
        let by_name = input
            .canonicalize()
            .is_ok_and(|i| out == i || (i.is_dir() && out.starts_with(&i)));
        let linked = !by_name
            && (same_file(output, input)
                || (input.is_dir()
                    && std::fs::read_dir(input).is_ok_and(|entries| {
                        entries.flatten().any(|e| same_file(output, &e.path()))
                    })));
        if linked {
            bail!(
                "{} is a link to {} (or a file of it): writing there would destroy what is \
                 being read; choose another path",
                output.display(),
                input.display()
            );
        }
        let Ok(input) = input.canonicalize() else {
            continue;
        };
        if out == input || (input.is_dir() && out.starts_with(&input)) {
            bail!(
                "{} is {}: writing there would destroy what is being read; choose another path",
                output.display(),
                if out == input {
                    "the input itself".to_string()
                } else {
                    format!("inside the log {}", input.display())
                }
            );
        }
    }
    Ok(())
}

impl SourceArgs {
    /// The path read, unless Kafka is selected.
    pub fn input_path(&self) -> Option<PathBuf> {
        if self.kafka.kafka.is_some() {
            return None;
        }
        Some(
            self.path
                .clone()
                .unwrap_or_else(|| PathBuf::from("lhc-data/log")),
        )
    }
}
