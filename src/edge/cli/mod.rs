//! The command line: one file per subcommand, sharing the settings groups of
//! [`crate::model::config`].

use std::io::Write as _;

use crate::store::connect::Conn;
use anyhow::anyhow;
use clap::{Parser, Subcommand, ValueEnum};
use redis::RedisError;

use crate::model::config::{redact_url, LayoutArgs, RedisArgs, StreamArgs, WorkerArgs};
use crate::store::connect::ErrorClass;

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
mod load;
mod serve;
mod status;
mod worker;

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
    /// Serve the read-only JSON query API (/api/v1/counters, /api/v1/top).
    Serve(serve::Args),
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

impl Common {
    /// Checks the layout and the stream names (sorting the precisions).
    pub fn validate(&mut self) -> Result<(), crate::model::config::ConfigError> {
        self.layout.validate()?;
        self.stream.validate()
    }
}

impl Cli {
    /// The log level when RUST_LOG is not set: lifecycle logs for the
    /// long-running worker, only problems for one-shot commands.
    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Worker(_) | Command::Serve(_) => "info",
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

/// Runs the parsed command. An error that comes from Redis is reported in
/// one line naming the Redis URL (see [`one_line`]).
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    // The worker logs and retries what Redis says; its errors stay as they are.
    let worker = matches!(cli.command, Command::Worker(_));
    let url = cli.command.redis_url();
    let result = match cli.command {
        Command::Worker(a) => worker::run(a).await,
        Command::Hit(a) => hit::run(a).await,
        Command::Load(a) => load::run(a).await,
        Command::Get(a) => get::run(a).await,
        Command::Demo(a) => demo::run(a).await,
        Command::Clean(a) => clean::run(a).await,
        Command::Status(a) => status::run(a).await,
        Command::Serve(a) => serve::run(a).await,
        Command::Bench(a) => bench::run(a).await,
    };
    match result {
        Err(e) if !worker => Err(one_line(e, url.as_deref())),
        other => other,
    }
}

impl Command {
    /// The Redis URL the command talks to, when it names one.
    fn redis_url(&self) -> Option<String> {
        match self {
            Command::Worker(_) => None,
            Command::Hit(a) => Some(a.common.redis.url.clone()),
            Command::Load(a) => Some(a.common.redis.url.clone()),
            Command::Get(a) => Some(a.common.redis.url.clone()),
            Command::Clean(a) => Some(a.common.redis.url.clone()),
            Command::Status(a) => Some(a.common.redis.url.clone()),
            Command::Serve(a) => Some(a.redis.url.clone()),
            Command::Demo(a) => a.redis_url.clone(),
            Command::Bench(a) => a.redis_url.clone(),
        }
    }
}

/// Returned by [`out`] (and `outln!`) when stdout is closed: the command
/// stops, and the process exits quietly with success, as `cat` would.
#[derive(Debug, thiserror::Error)]
#[error("stdout is closed")]
pub struct StdoutClosed;

/// Writes `text` to stdout and flushes; [`StdoutClosed`] when the reader has
/// gone (broken pipe).
pub fn out(text: &str) -> anyhow::Result<()> {
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

/// What went wrong, in one line: for a reply error (alone or the first of a
/// pipeline) its code and message, plus a hint for the usual causes; else
/// the client's words.
pub fn cause(err: &RedisError) -> String {
    if err.kind() == redis::ErrorKind::AuthenticationFailed {
        return "authentication failed: wrong user name or password (WRONGPASS)".into();
    }
    let Some((_, first)) = err
        .clone()
        .into_server_errors()
        .and_then(|errors| errors.first().cloned())
    else {
        return err.to_string();
    };
    let code = first.code();
    let mut line = match first.details() {
        Some(detail) => format!("{code} {detail}"),
        None => code.to_string(),
    };
    match code {
        "NOAUTH" => {
            line.push_str(" (the Redis URL carries no password: redis://[USER:]PASSWORD@HOST:PORT)")
        }
        "NOPERM" => line.push_str(
            " (the user lacks a command or key hitcount needs: see deploy/redis/hitcount.acl)",
        ),
        _ => {}
    }
    line
}

/// A Redis error as one line naming the Redis URL (password hidden).
pub fn redis_error(url: &str, err: &RedisError) -> anyhow::Error {
    anyhow!("Redis at {}: {}", redact_url(url), cause(err))
}

/// Rewrites an error whose cause is a [`RedisError`] as one line: the
/// contexts above it, then [`redis_error`]. Other errors pass unchanged.
pub fn one_line(err: anyhow::Error, url: Option<&str>) -> anyhow::Error {
    let Some(redis) = err.chain().find_map(|e| e.downcast_ref::<RedisError>()) else {
        return err;
    };
    let raw = redis.to_string();
    let mut parts: Vec<String> = err
        .chain()
        .take_while(|e| !e.is::<RedisError>())
        .map(|e| e.to_string())
        // A wrapper that only repeats the Redis error adds nothing.
        .filter(|m| !m.ends_with(&raw))
        .collect();
    parts.push(match url {
        Some(url) => redis_error(url, redis).to_string(),
        None => format!("Redis: {}", cause(redis)),
    });
    anyhow!(parts.join(": "))
}

/// Opens a connection for a one-shot command and makes sure Redis accepts
/// it (a `PING`, so a missing password shows here): any failure is one line
/// naming the URL. Reaching Redis is tried once, within the connect and
/// reply timeouts of [`crate::store::connect`].
pub async fn connect(redis: &RedisArgs) -> anyhow::Result<Conn> {
    let client = crate::store::connect::client(redis)?;
    let url = redact_url(&redis.url);
    let failed = |e: RedisError| {
        if permanent(&e) {
            anyhow!("Redis at {url} refused the connection: {}", cause(&e))
        } else {
            anyhow!("cannot connect to Redis at {url}: {}", cause(&e))
        }
    };
    let mut conn = client
        .open(crate::store::connect::RESPONSE_TIMEOUT)
        .await
        .map_err(failed)?;
    let _: () = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(failed)?;
    Ok(conn)
}

/// [`connect`] for a command that runs on one Redis node only (for now): a
/// cluster is refused with one line saying so.
pub async fn connect_single(
    redis: &RedisArgs,
    what: &'static str,
) -> anyhow::Result<crate::store::connect::Conn> {
    let conn = connect(redis).await?;
    if conn.is_cluster() {
        return Err(crate::store::connect::StoreError::NotOnCluster(what).into());
    }
    Ok(conn)
}

/// Whether retrying cannot help (the classes every command shares with the
/// worker, see [`crate::store::connect::classify`]).
fn permanent(err: &RedisError) -> bool {
    crate::store::connect::classify(err).0 == ErrorClass::Fatal
}

/// Checks, before a producer starts (it retries every error in the
/// background, forever), that hit events can go to `stream`: Redis accepts
/// the connection and this user may use the key, which is a stream or does
/// not exist yet (`XLEN`), and it may run the producer's script (run with
/// no events on a probe key of its own that expires within a second: it
/// appends nothing). Both are allowed by hitcount's ACL rules.
pub async fn check_stream(redis: &RedisArgs, stream: &str) -> anyhow::Result<()> {
    let mut conn = connect(redis).await?;
    let url = redact_url(&redis.url);
    let probe = async {
        let _: u64 = redis::cmd("XLEN")
            .arg(stream)
            .query_async(&mut conn)
            .await?;
        let keys = crate::model::keys::Keys::new(
            &LayoutArgs::default(),
            &StreamArgs {
                stream: stream.to_string(),
                ..StreamArgs::default()
            },
        );
        let mut produce = crate::store::scripts::PRODUCE.evalsha(2);
        produce
            .arg(stream)
            .arg(keys.producer(&format!("probe-{:016x}", rand::random::<u64>())))
            .arg(1)
            .arg(1)
            .arg(0);
        match produce.query_async::<u64>(&mut conn).await {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                crate::store::scripts::load_all(&mut conn).await?;
                produce.query_async::<u64>(&mut conn).await
            }
            other => other,
        }
    };
    match probe.await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some("WRONGTYPE") => Err(anyhow!(
            "cannot send hits to {stream} on Redis at {url}: that key holds another type than a stream \
             (choose another with --stream / HITCOUNT_STREAM)"
        )),
        Err(e) => Err(anyhow!(
            "cannot send hits to {stream} on Redis at {url}: {}",
            cause(&e)
        )),
    }
}

/// Most distinct names `load` and `demo` draw from (`page:0` ..): the
/// samplers hold a few words per name.
pub const MAX_NAMES: u64 = 10_000_000;
/// Largest Zipf exponent accepted: beyond it every hit goes to `page:0`.
pub const MAX_ZIPF: f64 = 10.0;

/// A count that must be at least 1 (`--hits`, `--rate`...).
pub fn parse_at_least_one(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1".into()),
        Err(_) => Err(format!("`{text}` is not a whole number from 1 up")),
    }
}

/// `--names`: 1..=[`MAX_NAMES`].
pub fn names_parser() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_NAMES)
}

/// `--zipf`: a finite exponent from 0 (uniform) to [`MAX_ZIPF`].
pub fn parse_zipf(text: &str) -> Result<f64, String> {
    let s: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if (0.0..=MAX_ZIPF).contains(&s) {
        Ok(s)
    } else {
        Err(format!("must be a number from 0 to {MAX_ZIPF}"))
    }
}

/// A hit's name as the worker accepts it: 1..=4096 bytes (longer or empty
/// names are dead-lettered).
pub fn parse_hit_name(text: &str) -> Result<String, String> {
    match text.len() {
        0 => Err("a hit's name cannot be empty (the worker would dead-letter it)".into()),
        n if n > crate::model::event::MAX_NAME_BYTES => Err(format!(
            "{n} bytes is longer than the {} bytes a name may have (the worker would dead-letter it)",
            crate::model::event::MAX_NAME_BYTES
        )),
        _ => Ok(text.to_string()),
    }
}

/// A time in unix seconds as the worker accepts it: finite and ≥ 0.
pub fn parse_unix_seconds(text: &str) -> Result<f64, String> {
    let ts: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of unix seconds"))?;
    if ts.is_finite() && ts >= 0.0 {
        Ok(ts)
    } else {
        Err("must be a finite, non-negative number of unix seconds (the worker would dead-letter it)".into())
    }
}

/// "1 sample", "2 samples".
pub fn plural(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Worker settings from the command line groups.
pub fn worker_settings(common: &Common, worker: &WorkerArgs) -> crate::service::worker::Settings {
    crate::service::worker::Settings {
        redis: common.redis.clone(),
        layout: common.layout.clone(),
        stream: common.stream.clone(),
        worker: worker.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The comma-separated default `--help` shows is the one the code uses.
    #[test]
    fn the_precisions_default_flag_is_the_default_precisions() {
        let cli = Cli::try_parse_from(["hitcount", "get", "x", "-p", "60"]).unwrap();
        let Command::Get(get) = cli.command else {
            panic!("not get");
        };
        assert_eq!(
            get.common.layout.precisions,
            crate::model::config::DEFAULT_PRECISIONS
        );
    }

    #[test]
    fn pipeline_errors_are_one_line_with_the_first_code() {
        let err = redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert!(cause(&err).contains("WRONGPASS"), "{}", cause(&err));
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
        assert!(parse_zipf("nan").is_err());
        assert!(parse_zipf("inf").is_err());
        assert!(parse_zipf("-1").is_err());
        assert!(parse_zipf("10.5").is_err());
        assert_eq!(parse_zipf("1.2"), Ok(1.2));
        assert!(parse_hit_name("").is_err());
        assert!(parse_hit_name(&"n".repeat(4097)).is_err());
        assert!(parse_hit_name(&"n".repeat(4096)).is_ok());
        for bad in ["nan", "inf", "-inf", "-1", "x"] {
            assert!(parse_unix_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_unix_seconds("1795433810.5"), Ok(1_795_433_810.5));
        assert_eq!(plural(1u64, "sample", "samples"), "1 sample");
        assert_eq!(plural(2u64, "sample", "samples"), "2 samples");
    }
}
