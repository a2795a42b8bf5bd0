//! The command line: one file per subcommand, sharing the settings groups of
//! [`crate::config`].

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{LayoutArgs, RedisArgs, StreamArgs, WorkerArgs};

mod bench;
mod clean;
mod demo;
mod get;
mod hit;
mod load;
mod status;
mod worker;

/// Count hits at scale on Redis: a stream of hit events in, multi-precision
/// counters (the Redis in Action §5.2 layout) out.
#[derive(Parser, Debug)]
#[command(name = "hitcount", version, about)]
pub struct Cli {
    /// Log format: human-readable text, or JSON lines for log shippers.
    /// The level comes from RUST_LOG (default info).
    #[arg(long, env = "HITCOUNT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// Log output formats.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a worker: read the stream as one consumer of the group, count.
    Worker(worker::Args),
    /// Send one hit event.
    Hit(hit::Args),
    /// Generate load: send many hit events in pipelines.
    Load(load::Args),
    /// Print a counter's samples, oldest first.
    Get(get::Args),
    /// Run one cleaner pass and one stream trim now, under the leader lease.
    Clean(clean::Args),
    /// Show the stream, its groups, the leader and the last cleaner pass.
    Status(status::Args),
    /// Run the whole flow on a throwaway Redis: workers, load, counters.
    Demo(demo::Args),
    /// Measure throughput against what Redis can deliver, and print a table.
    Bench(bench::Args),
}

/// Settings shared by the commands that read or write counters.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Common {
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub layout: LayoutArgs,
    #[command(flatten)]
    pub stream: StreamArgs,
}

impl Cli {
    /// The log level when RUST_LOG is not set: lifecycle logs for the
    /// long-running worker, only problems for one-shot commands.
    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Worker(_) => "info",
            _ => "warn",
        }
    }
}

/// Sets up logging on stderr; RUST_LOG overrides `default_level`.
pub fn init_tracing(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A closed stderr (a log pipe gone) must not kill the process: by
        // default the subscriber reports its own write errors with
        // `eprintln!`, which panics then.
        .log_internal_errors(false)
        // Colours only on a terminal: escape codes in files and log
        // shippers are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Worker(a) => worker::run(a).await,
        Command::Hit(a) => hit::run(a).await,
        Command::Load(a) => load::run(a).await,
        Command::Get(a) => get::run(a).await,
        Command::Demo(a) => demo::run(a).await,
        Command::Clean(a) => clean::run(a).await,
        Command::Status(a) => status::run(a).await,
        Command::Bench(a) => bench::run(a).await,
    }
}

/// Worker settings from the command line groups.
pub fn worker_settings(common: &Common, worker: &WorkerArgs) -> crate::worker::Settings {
    crate::worker::Settings {
        redis: common.redis.clone(),
        layout: common.layout.clone(),
        stream: common.stream.clone(),
        worker: worker.clone(),
    }
}
