//! `lhc kafka`: setting up a Kafka cluster for lhc (`init`: topics with the settings the
//! design needs, and a check of the ones that exist).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use lhc_log::admin::{InitRequest, TopicOutcome};
use lhc_log::KafkaOptions;

use crate::args::KafkaClientArgs;

/// `lhc kafka ...`
#[derive(clap::Subcommand)]
pub enum KafkaCommand {
    /// Create the site-log and output topics (never expiring, never compacted,
    /// min.insync.replicas 2 with 3 replicas), or check existing ones and warn about
    /// settings that would delete history or weaken durability. Safe to run again. Exit
    /// status 1 when a topic's settings delete records (retention, compaction).
    Init(InitArgs),
    /// Run librdkafka's mock cluster (a real Kafka protocol endpoint in this process) with
    /// the topics lhc uses, to try Kafka mode without a broker; prints the bootstrap
    /// servers and runs until interrupted. Its records live in memory only.
    Mock(MockArgs),
}

/// `lhc kafka mock`
#[derive(clap::Args)]
pub struct MockArgs {
    /// Brokers in the cluster.
    #[arg(long, value_name = "N", default_value_t = 1)]
    brokers: i32,
    /// Topics to create, NAME or NAME:PARTITIONS (repeatable).
    #[arg(long = "topic", value_name = "NAME[:PARTITIONS]", default_values = ["lhc.events", "lhc.outputs"])]
    topics: Vec<String>,
}

/// `lhc kafka init`
#[derive(clap::Args)]
pub struct InitArgs {
    /// Bootstrap servers, host:port[,host:port...].
    #[arg(long, value_name = "BROKERS")]
    kafka: String,
    /// The site-log topic (every site's records; key = site).
    #[arg(long, value_name = "TOPIC", default_value = lhc_log::kafka::DEFAULT_TOPIC)]
    topic: String,
    /// The output topic nodes publish their outputs to (key = connector).
    #[arg(long, value_name = "TOPIC", default_value = "lhc.outputs")]
    output_topic: String,
    /// Partitions of a created topic: a site lives in one, so one per site you expect (sites
    /// share partitions when there are fewer). Never add partitions later: a site's records
    /// would move to another one.
    #[arg(long, value_name = "N", default_value_t = 1)]
    partitions: i32,
    /// Replicas of a created topic [default: 3, or the number of brokers if fewer].
    #[arg(long, value_name = "R")]
    replication: Option<i32>,
    /// Longest wait for the brokers.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    kafka_timeout: u64,
    #[command(flatten)]
    client: KafkaClientArgs,
    /// Output: a table, or JSON (one object per topic, one per line).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// How `init` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// For people.
    Text,
    /// One JSON object per topic.
    Json,
}

/// Runs a `lhc kafka` command.
pub fn run(command: KafkaCommand, quiet: bool) -> anyhow::Result<ExitCode> {
    match command {
        KafkaCommand::Init(args) => init(args, quiet),
        KafkaCommand::Mock(args) => mock(args, quiet),
    }
}

fn mock(args: MockArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    if !(1..=16).contains(&args.brokers) {
        bail!("--brokers {}: 1 to 16", args.brokers);
    }
    let cluster = lhc_log::MockKafka::new(args.brokers)?;
    for topic in &args.topics {
        let (name, partitions) = match topic.split_once(':') {
            Some((name, n)) => match n.parse::<i32>() {
                Ok(n) if n >= 1 => (name, n),
                _ => bail!("--topic {topic}: PARTITIONS is a number, at least 1"),
            },
            None => (topic.as_str(), 1),
        };
        cluster.create_topic(name, partitions)?;
    }
    // The address first and alone on stdout, so scripts can read it.
    println!("{}", cluster.bootstrap_servers());
    use std::io::Write;
    std::io::stdout().flush()?;
    if !quiet {
        eprintln!(
            "mock cluster up with topics {}; try: lhc log import docs/examples/site-outage.jsonl \
             --kafka {} --site demo (Ctrl-C stops it; nothing is kept)",
            args.topics.join(", "),
            cluster.bootstrap_servers()
        );
    }
    loop {
        std::thread::park();
    }
}

fn init(args: InitArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    if args.partitions < 1 {
        bail!("--partitions {}: at least 1", args.partitions);
    }
    if args.replication.is_some_and(|r| r < 1) {
        bail!("--replication: at least 1");
    }
    if args.topic == args.output_topic {
        bail!(
            "--topic and --output-topic are both {}: outputs need a topic of their own",
            args.topic
        );
    }
    let mut options = KafkaOptions::new(&args.kafka, "-");
    options.timeout = Duration::from_secs(args.kafka_timeout.max(1));
    args.client.apply(&mut options)?;
    let request = InitRequest {
        topics: vec![args.topic.clone(), args.output_topic.clone()],
        partitions: args.partitions,
        replication: args.replication,
    };
    let outcomes = lhc_log::admin::init(&options, &request)?;
    for outcome in &outcomes {
        match args.format {
            Format::Json => println!("{}", serde_json::to_string(outcome)?),
            Format::Text => print_text(outcome),
        }
    }
    let warnings: usize = outcomes.iter().map(|o| o.warnings.len()).sum();
    for warning in outcomes.iter().flat_map(|o| &o.warnings) {
        eprintln!("warning: {warning}");
    }
    if !quiet && warnings == 0 {
        eprintln!(
            "the topics are ready: lhc's producers append with acks=all and idempotence; \
             point nodes and commands at them with --kafka {}",
            args.kafka
        );
    }
    Ok(if outcomes.iter().any(|o| o.deletes_history) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_text(outcome: &TopicOutcome) {
    let state = if outcome.created { "created" } else { "exists" };
    println!(
        "{}: {state}, {} partition(s), {} replica(s)",
        outcome.topic, outcome.partitions, outcome.replication
    );
    for (key, value) in &outcome.settings {
        println!("  {key} = {value}");
    }
}
