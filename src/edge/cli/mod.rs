//! The command line: one file per subcommand, sharing the settings groups of
//! [`crate::model::config`].

use std::io::Write as _;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum};

use crate::model::config::{LayoutArgs, RedisArgs, StreamArgs};

/// Writes one line to stdout, like `println!`, but a closed stdout (the
/// reader quit: `hitcount get NAME | head -1`) returns [`StdoutClosed`] from
/// the enclosing function instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::edge::cli::out(&format!("{}\n", format_args!($($arg)*)))?
    };
}

mod bench;
mod clean;
mod demo;
mod get;
mod hit;
mod import;
mod ingest;
mod load;
mod parse;
mod reach;
mod serve;
mod settings;
mod status;
mod top;
mod worker;
pub(crate) use parse::{
    parse_at_least_one, parse_counter_name, parse_hit_name, parse_unix_seconds, parse_zipf,
    NameArg, MAX_NAMES, MAX_UNIX_SECONDS,
};

pub(crate) use settings::{configured_precision, Group, Pick, Uses};

pub(crate) use reach::{
    check_sending, check_stream, checked_producer, connect, one_line, refused, serving_anyway,
};

/// Count hits at scale on Redis: a stream of hit events in, multi-precision
/// counters (the Redis in Action §5.2 layout) out.
#[derive(Parser, Debug)]
#[command(name = "hitcount", version, about)]
pub struct Cli {
    /// Log format: human-readable text, or JSON lines for log shippers.
    /// The level comes from RUST_LOG (default: info for the worker, warn for
    /// the one-shot commands).
    #[arg(long, env = "HITCOUNT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// Log output formats: `text`, human-readable lines, or `json`, one JSON
/// object per line. (The variants carry no doc comment, so that `--help`
/// lists them on one line.)
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    #[allow(missing_docs)]
    Text,
    #[allow(missing_docs)]
    Json,
}

// Each usage line is written out: clap's own would list every setting a
// deployment's environment sets (`--redis-url <URL>` from REDIS_URL) as if
// the command required it.
#[derive(Subcommand, Debug)]
enum Command {
    /// Run a worker: read the stream as one consumer of the group, count.
    #[command(override_usage = "hitcount worker [OPTIONS]")]
    Worker(worker::Args),
    /// Send one hit event.
    #[command(override_usage = "hitcount hit [OPTIONS] <NAME>")]
    Hit(hit::Args),
    /// Generate load: send many hit events in pipelines.
    #[command(override_usage = "hitcount load [OPTIONS] --hits <HITS>")]
    Load(load::Args),
    /// Import access logs (or NDJSON hits), each line once, resumable.
    #[command(override_usage = "hitcount import [OPTIONS] <FILE>...")]
    Import(import::Args),
    /// Print a counter's samples (or, with --stats, its statistics), oldest first.
    #[command(override_usage = "hitcount get [OPTIONS] --precision <PRECISION> <NAME>")]
    Get(get::Args),
    /// Rank the names of the current bucket by count, or by mean value.
    #[command(override_usage = "hitcount top [OPTIONS]")]
    Top(top::Args),
    /// Run one cleaner pass and one stream trim now, under the leader lease.
    #[command(override_usage = "hitcount clean [OPTIONS] --once")]
    Clean(clean::Args),
    /// Take hits over HTTP from servers and browsers (POST /api/v1/hits, /hitcount.js).
    #[command(override_usage = "hitcount ingest [OPTIONS]")]
    Ingest(ingest::Args),
    /// Serve the dashboard (/) and the read-only JSON query API (/api/v1/).
    #[command(override_usage = "hitcount serve [OPTIONS]")]
    Serve(serve::Args),
    /// Show the stream, its groups, the leader and the last cleaner pass.
    #[command(override_usage = "hitcount status [OPTIONS]")]
    Status(status::Args),
    /// Run the whole flow on a throwaway Redis: workers, load, counters.
    #[command(override_usage = "hitcount demo [OPTIONS]")]
    Demo(demo::Args),
    /// Measure how fast this Redis counts, next to what it can deliver at all.
    #[command(override_usage = "hitcount bench [OPTIONS]")]
    Bench(bench::Args),
}

/// Why a command line was not taken.
#[derive(Debug)]
pub enum Refused {
    /// A usage error (or `--help`, `--version`), for clap to print: exit 2
    /// (0 for help and version).
    Usage(clap::Error),
    /// A setting of the deployment (flag or environment variable) out of its
    /// range: one line, exit 1, as every other configuration error.
    Setting(String),
}

/// Parses the command line `args` (the program's name first). Every
/// argument that takes a value reads `-1` as a value, refused by its range
/// in words, never as an unknown flag.
pub fn parse(args: Vec<std::ffi::OsString>) -> Result<Cli, Refused> {
    let mut cmd = settings::negative_numbers_are_values(Cli::command());
    let text: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    cmd = settings::global_flags_win(cmd, &text);
    let matches =
        cmd.try_get_matches_from_mut(args).map_err(|e| {
            match settings::refused_setting(e, &cmd, &text) {
                Ok(line) => Refused::Setting(line),
                Err(e) => Refused::Usage(e),
            }
        })?;
    // A bench flag that moved to the lab is named, never ignored.
    if let Some(line) = matches.subcommand_matches("bench").and_then(bench::moved) {
        let kind = clap::error::ErrorKind::ArgumentConflict;
        return Err(Refused::Usage(clap::Error::raw(kind, format!("{line}\n"))));
    }
    Cli::from_arg_matches(&matches).map_err(|e| Refused::Usage(e.format(&mut cmd)))
}

/// Settings shared by the commands that read or write counters. The worker
/// takes them all; every other command takes them as a [`Pick`] that
/// shows in its help how to reach Redis and those it uses, accepts the rest
/// of the deployment's layout and stream settings ([`SHARED`]) unshown, and
/// leaves out the worker's own (`--quantile-precisions`, `--dead-maxlen`).
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct Common {
    /// How to reach Redis.
    #[command(flatten)]
    pub redis: RedisArgs,
    /// The counters' keys and precisions.
    #[command(flatten)]
    pub layout: LayoutArgs,
    /// The stream, its group and shards.
    #[command(flatten)]
    pub stream: StreamArgs,
}

/// The settings of [`Common`] every command that flattens it accepts: how
/// to reach Redis and the layout and stream settings a deployment shares
/// (a command checks them against each other even where it uses few).
pub(crate) const SHARED: [&str; 12] = [
    "url",
    "cluster",
    "ca",
    "cert",
    "key",
    "prefix",
    "precisions",
    "samples",
    "stream",
    "group",
    "dead_stream",
    "shards",
];

/// The settings of [`Common`] a command that sends hits (`hit`, `load`)
/// shows: it checks its stream against the workers' with the others.
pub(crate) struct Sends;

impl Uses for Sends {
    const SHOWN: &'static [&'static str] = &["stream", "shards"];
}

impl Group for Common {
    const ALWAYS: &'static [&'static str] = &["url", "cluster", "ca", "cert", "key"];
    const ACCEPTED: &'static [&'static str] = &SHARED;
}

impl Common {
    /// Checks the layout and the stream names (sorting the precisions).
    pub(crate) fn validate(&mut self) -> Result<(), crate::model::config::ConfigError> {
        self.layout.validate()?;
        self.stream.validate()
    }
}

impl Cli {
    /// The log level when RUST_LOG is not set: lifecycle logs for the
    /// long-running worker, only problems for one-shot commands.
    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Worker(_) | Command::Serve(_) | Command::Ingest(_) => "info",
            _ => "warn",
        }
    }
}

/// Sets up logging on stderr; RUST_LOG overrides `default_level`. The
/// Redis client library's own lines (target `redis`) show from ERROR up
/// unless RUST_LOG names that target: hitcount reports an outage itself,
/// once, and the library's WARN lines repeat per retry (about eight per
/// try while a Cluster slot moves).
pub fn init_tracing(format: LogFormat, default_level: &str) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("redis")) {
        filter = filter.add_directive("redis=error".parse().expect("a valid directive"));
    }
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

/// Runs the parsed command. An error that comes from Redis is reported in
/// one line naming the Redis URL (see [`one_line`]).
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    settings::warn_unknown(&settings::unknown_variables(&Cli::command()));
    // Each command with the Redis URL it talks to, when it names one.
    let (url, result) = match cli.command {
        // The worker logs and retries what Redis says; its errors stay as they are.
        Command::Worker(a) => return worker::run(a).await,
        Command::Hit(a) => (Some(a.common.redis.url.clone()), hit::run(a).await),
        Command::Load(a) => (Some(a.common.redis.url.clone()), load::run(a).await),
        Command::Import(a) => (Some(a.common.redis.url.clone()), import::run(a).await),
        Command::Get(a) => (Some(a.common.redis.url.clone()), get::run(a).await),
        Command::Top(a) => (Some(a.common.redis.url.clone()), top::run(a).await),
        Command::Clean(a) => (Some(a.common.redis.url.clone()), clean::run(a).await),
        Command::Status(a) => (Some(a.common.redis.url.clone()), status::run(a).await),
        Command::Serve(a) => (Some(a.redis.url.clone()), serve::run(a).await),
        Command::Ingest(a) => (Some(a.common.redis.url.clone()), ingest::run(a).await),
        Command::Demo(a) => (a.redis_url.clone(), demo::run(a).await),
        Command::Bench(a) => (a.redis_url.clone(), bench::run(a).await),
    };
    result.map_err(|e| one_line(e, url.as_deref()))
}

/// Returned by [`out`] (and `outln!`) when stdout is closed: the command
/// stops, and the process exits quietly with success, as `cat` would.
#[derive(Debug, thiserror::Error)]
#[error("stdout is closed")]
pub struct StdoutClosed;

/// Writes `text` to stdout and flushes; [`StdoutClosed`] when the reader has
/// gone (broken pipe).
pub(crate) fn out(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to stdout")),
    }
}

/// `value` as one line of JSON (`pretty`: indented) for a terminal or a
/// script: besides what JSON escapes, the characters a terminal would obey
/// or hide ([`unprintable`]: C1 controls, those that reorder or break a
/// line) are written `\uXXXX`, so that a hostile name prints as itself and
/// reads back the same.
///
/// [`unprintable`]: crate::model::event::unprintable
pub(crate) fn json_text(value: &impl serde::Serialize, pretty: bool) -> anyhow::Result<String> {
    let text = if pretty {
        serde_json::to_string_pretty(value)?
    } else {
        serde_json::to_string(value)?
    };
    // Inside strings JSON escapes every control character below U+0020, so
    // a line feed is the indentation's; outside strings, JSON holds none
    // of the others.
    let hidden = |c: char| c != '\n' && crate::model::event::unprintable(c);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if !hidden(c) {
            out.push(c);
            continue;
        }
        for unit in c.encode_utf16(&mut [0; 2]) {
            out.push_str(&format!("\\u{unit:04x}"));
        }
    }
    Ok(out)
}

/// A listener on `addr`, which the setting `flags` gave (`--listen /
/// HITCOUNT_LISTEN`): an address that cannot be taken says so, naming them.
pub(crate) async fn listen(addr: &str, flags: &str) -> anyhow::Result<tokio::net::TcpListener> {
    use anyhow::Context as _;
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({flags})"))
}

/// "1 sample", "2 samples".
pub(crate) fn plural(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A measured value for a table: up to 3 decimals, trailing zeros cut,
/// scientific notation when very large or small; `-` for none.
pub(crate) fn number(v: Option<f64>) -> String {
    match v {
        None => "-".to_string(),
        // -0 too.
        Some(0.0) => "0".to_string(),
        // At least 0.001: never rounded to a zero.
        Some(v) if (1e-3..1e12).contains(&v.abs()) => {
            let text = format!("{v:.3}");
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        }
        Some(v) => format!("{v:.3e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The comma-separated default `--help` shows is the one the code uses.
    #[test]
    fn the_precisions_default_flag_is_the_default_precisions() {
        let cli = parse(
            ["hitcount", "get", "x", "-p", "60"]
                .map(Into::into)
                .to_vec(),
        )
        .unwrap();
        let Command::Get(get) = cli.command else {
            panic!("not get");
        };
        assert_eq!(
            get.common.layout.precisions,
            crate::model::config::DEFAULT_PRECISIONS
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        settings::negative_numbers_are_values(Cli::command()).debug_assert();
    }

    /// Each command that takes [`Common`] accepts every shared setting
    /// (shown or not) and no other: one deployment's settings fit them all.
    #[test]
    fn every_command_accepts_the_shared_settings() {
        let cli = Cli::command();
        let common = <Common as clap::Args>::augment_args(clap::Command::new("common"));
        let of_common: Vec<_> = common.get_arguments().map(|a| a.get_id()).collect();
        let mut shared = SHARED.to_vec();
        shared.sort_unstable();
        for name in ["hit", "load", "get", "top", "clean", "status", "ingest"] {
            let sub = cli.find_subcommand(name).unwrap();
            let mut accepted: Vec<&str> = sub
                .get_arguments()
                .map(|a| a.get_id())
                .filter(|id| of_common.contains(id))
                .map(|id| id.as_str())
                .collect();
            accepted.sort_unstable();
            assert_eq!(accepted, shared, "{name}");
        }
    }

    #[test]
    fn pipeline_errors_are_one_line_with_the_first_code() {
        let err = redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert!(
            reach::cause(&err).contains("WRONGPASS"),
            "{}",
            reach::cause(&err)
        );
        let e = one_line(
            anyhow::Error::new(err).context("reading"),
            Some("redis://u:secret@h:1"),
        )
        .to_string();
        assert!(
            e.starts_with("reading: Redis at redis://u:***@h:1: "),
            "{e}"
        );
        assert!(!e.contains('\n') && !e.contains("secret"), "{e}");
    }

    #[test]
    fn flag_values_are_checked() {
        assert_eq!(plural(1u64, "sample", "samples"), "1 sample");
        assert_eq!(plural(2u64, "sample", "samples"), "2 samples");
        assert!(configured_precision(&[1, 60], Some(5), None)
            .unwrap_err()
            .to_string()
            .contains("the configured ones are 1, 60"));
        assert_eq!(configured_precision(&[1, 60], Some(60), None).unwrap(), 60);
        // A flag not given is not blamed: its default is (`top`'s 3600).
        let default = configured_precision(&[5, 60], None, Some(3600))
            .unwrap_err()
            .to_string();
        assert!(
            !default.starts_with("invalid --precision: 3600"),
            "{default}"
        );
        assert!(default.contains("its default, 3600 s, is not"), "{default}");
        assert!(
            default.contains("the configured ones are 5, 60"),
            "{default}"
        );
        let given = configured_precision(&[5, 60], Some(3600), Some(3600))
            .unwrap_err()
            .to_string();
        assert!(given.starts_with("invalid --precision: 3600 s"), "{given}");
        assert_eq!(configured_precision(&[5, 60], None, Some(60)).unwrap(), 60);
        assert_eq!(
            configured_precision(&[5, 60], Some(5), Some(60)).unwrap(),
            5
        );
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(number(None), "-");
        assert_eq!(number(Some(0.0)), "0");
        assert_eq!(number(Some(12.5)), "12.5");
        assert_eq!(number(Some(-3.0)), "-3");
        assert_eq!(number(Some(2.0004)), "2");
        assert_eq!(number(Some(-0.0001)), "-1.000e-4");
        assert_eq!(number(Some(1.5e13)), "1.500e13");
    }
}
