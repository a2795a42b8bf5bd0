//! `hitcount-lab bench`: the project's measurements of the `hitcount`
//! binary (see [`crate::bench`]) and their table, or `--json`.
//!
//! The binary measured is `hitcount` next to this one (the same
//! `target/<profile>/` directory: `cargo build --release --workspace` builds
//! both), or the one `--hitcount` names.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::bench::import::ImportOptions;
use crate::bench::scaling::ClusterSource;
use crate::bench::scaling_options::ScalingOptions;
use crate::bench::serve::ServeOptions;
use crate::bench::Options;
use crate::kit::{RedisServer, ServerOptions};
use hitcount::edge::workload::Workload;
use hitcount::model::config::RedisArgs;

/// hitcount's lab: measure the `hitcount` binary against a throwaway Redis,
/// a local cluster or the Redis REDIS_URL names.
#[derive(clap::Parser, Debug)]
#[command(name = "hitcount-lab", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Measure hitcount: throughput against the ceiling and the seeds' way,
    /// latency, memory; or scaling on a cluster; or the serve load; or an import.
    Bench(Args),
}

/// What a run printed and its exit status: 0, 1 for a failed run, 2 for a
/// command line clap refused (0 for `--help`).
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The exit status.
    pub code: i32,
    /// What goes to stdout: the table or the JSON.
    pub stdout: String,
    /// What goes to stderr: the error, if any.
    pub stderr: String,
}

/// Parses `args` (the program's name first) and runs the command: the
/// binary's whole work, so that tests run it in-process.
pub async fn run_args<I, T>(args: I) -> Outcome
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let outcome = |code, stdout: String, stderr: String| Outcome {
        code,
        stdout,
        stderr,
    };
    let cli = match <Cli as clap::Parser>::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            return outcome(e.exit_code(), String::new(), e.render().to_string())
        }
        Err(e) => return outcome(e.exit_code(), e.render().to_string(), String::new()),
    };
    let result = match cli.command {
        Command::Bench(args) => bench(args).await,
    };
    match result {
        Ok(text) => outcome(0, text, String::new()),
        Err(e) => outcome(1, String::new(), format!("hitcount-lab: {e:#}\n")),
    }
}

/// The `hitcount` binary: `--hitcount`, else next to this executable.
fn hitcount_binary(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = given {
        anyhow::ensure!(
            path.is_file(),
            "--hitcount {}: no such file",
            path.display()
        );
        return Ok(path);
    }
    let me = std::env::current_exe().context("finding this executable")?;
    let next = me.with_file_name("hitcount");
    anyhow::ensure!(
        next.is_file(),
        "no `hitcount` binary next to {}: build it first (`cargo build --release --workspace` \
         builds both into target/release/; `cargo run -p hitcount-lab` builds only the lab), \
         or name one with --hitcount PATH",
        me.display()
    );
    Ok(next)
}

#[derive(clap::Args, Debug)]
struct Args {
    /// The `hitcount` binary to measure. Default: the one next to this
    /// executable (same target directory).
    #[arg(long, value_name = "PATH")]
    hitcount: Option<PathBuf>,
    /// Redis to measure (its `bench:*` keys are written, then deleted).
    /// Default: a throwaway redis-server with the SLOWLOG at 10 ms.
    #[arg(long = "redis-url", env = "REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// Entries prefilled per workload, at least 1 (the default run takes
    /// about a minute).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    entries: u64,
    /// Worker counts, comma separated, each 1 to 64; the ceiling runs as
    /// many consumers.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    workers: Vec<usize>,
    /// Workloads, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "hot,zipf,uniform"
    )]
    workload: Vec<Workload>,
    /// Hits sent the seeds' way (one pipeline per hit) per workload, at
    /// least 1.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    seeds_sample: u64,
    /// Seconds of steady load while probing the XADD-to-visible delay, 1 to
    /// 3600.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=3600))]
    latency_secs: u64,
    /// Also drain a backlog of this many entries with one worker and report
    /// its peak RSS (5000000 takes a few minutes), 0..=100000000.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    rss_backlog: u64,
    /// Extra flag for every worker, repeatable: `--worker-arg=--window-ms=200`.
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    /// Print the figures as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Measure how hitcount scales on a Redis Cluster (see `bench::scaling`):
    /// start a throwaway local cluster of this many masters (3 when no
    /// number is given) and price each drain in Redis CPU per hit on every
    /// master, next to one throwaway Redis. A REDIS_URL naming a cluster
    /// does the same on that cluster.
    #[arg(long, value_name = "MASTERS", conflicts_with = "serve", num_args = 0..=1, default_missing_value = "3", value_parser = clap::value_parser!(u16).range(1..=64))]
    cluster: Option<u16>,
    /// Replicas of each master of the throwaway cluster; with none, the
    /// workers run with `--wait-replicas 0`.
    #[arg(long, default_value_t = 0, requires = "cluster", value_parser = clap::value_parser!(u16).range(0..=4))]
    cluster_replicas: u16,
    /// Stream shards on a cluster (default 16: tags 0..15 spread 6/6/4
    /// over three even masters, fewer spread worse); only with a cluster.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    shards: Option<u32>,
    /// With --cluster: place the throwaway cluster's shard slots as
    /// `status` would advise for the workloads' traffic (docs/cluster.md,
    /// "Balancing"): a name's hits go to one shard, so skewed traffic loads shards
    /// unevenly, and the master serving known: takes every new counter's
    /// ZADD; single slots are served from another master than the even
    /// split says so that every master's share of each workload evens out.
    #[arg(long, requires = "cluster")]
    balance_shards: bool,
    /// With --cluster: price the steady state instead of a cold start: the
    /// workers first count one hit of every name of the workload (names
    /// known in Redis and in their caches), are paused while the measured hits are
    /// filled, and are priced from their resumption.
    #[arg(long, conflicts_with = "serve")]
    warm: bool,
    /// With a cluster: drain every workload and worker count this many
    /// times, 1 to 9 (default 3), one Redis and the cluster side by side
    /// each time, and judge the goals on the median round: one drain on a
    /// shared machine misses or meets them by chance.
    #[arg(long, conflicts_with = "serve", value_parser = clap::value_parser!(u16).range(1..=9))]
    rounds: Option<u16>,
    /// Instead of the above: what `hitcount serve` costs Redis with
    /// dashboards open (Redis CPU, latency of `top`).
    #[arg(long)]
    serve: bool,
    /// Instead of the above: how many hits one `hitcount ingest` takes over
    /// HTTP, in batches of 100 and one by one, and its latency at half the
    /// goals' rates.
    #[arg(long, conflicts_with_all = ["serve", "cluster"])]
    ingest: bool,
    /// With --ingest: seconds each of its four phases runs, 1 to 25.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=25))]
    ingest_secs: u64,
    /// With --serve: counter names written, at least 1.
    #[arg(long, default_value_t = 100_000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000_000))]
    serve_counters: usize,
    /// With --serve: dashboards open at once, 1 to 1000.
    #[arg(long, default_value_t = 10, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    serve_pages: usize,
    /// With --serve: seconds between a page's refreshes, 1 to 600.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    serve_refresh_secs: u64,
    /// With --serve: seconds the pages stay open, 1 to 3600.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    serve_secs: u64,
    /// Instead of the above: how fast `hitcount import` appends a
    /// generated access log to the stream (plain, gzipped, with request
    /// times), against its goal of 200,000 lines/s.
    #[arg(long, conflicts_with_all = ["serve", "cluster", "ingest"])]
    import: bool,
    /// With --import: lines of the log, 1 to 100,000,000.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    import_lines: u64,
}

/// A report as JSON with `json`, else as its `table`.
fn shown(report: &impl serde::Serialize, table: String, json: bool) -> anyhow::Result<String> {
    Ok(if json {
        format!("{}\n", serde_json::to_string_pretty(report)?)
    } else {
        table
    })
}

async fn bench(args: Args) -> anyhow::Result<String> {
    let hitcount = hitcount_binary(args.hitcount.clone())?;
    anyhow::ensure!(
        args.entries > 0 && !args.workers.contains(&0),
        "--entries and every --workers count must be at least 1"
    );
    let cluster_only =
        "--warm prices a cluster run: add --cluster (or a REDIS_URL naming a cluster)";
    anyhow::ensure!(
        !args.warm || args.cluster.is_some() || args.redis_url.is_some(),
        cluster_only
    );
    // `--serve`, `--ingest` and `--import` measure one Redis only (a cluster is refused below).
    if !args.serve && !args.ingest && !args.import {
        if let Some(source) = cluster_source(&args).await? {
            return scaling(args, source, hitcount).await;
        }
    }
    anyhow::ensure!(!args.warm, cluster_only);
    let server = match &args.redis_url {
        Some(_) => None,
        None => Some(
            RedisServer::start(ServerOptions {
                extra: vec!["slowlog-log-slower-than 10000".into()],
                ..ServerOptions::default()
            })
            .context("starting a throwaway redis-server")?,
        ),
    };
    let url = match (&args.redis_url, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(server)) => server.url(),
        (None, None) => anyhow::bail!("no Redis to measure"),
    };
    if args.redis_url.is_some() {
        crate::bench::open(&RedisArgs::from_url(&url)).await?;
    }
    if args.ingest {
        let opts = crate::bench::ingest::IngestOptions {
            hitcount: hitcount.clone(),
            redis: RedisArgs::from_url(&url),
            duration: Duration::from_secs(args.ingest_secs),
        };
        let report = crate::bench::ingest::run(&opts).await?;
        drop(server);
        return shown(&report, report.table(), args.json);
    }
    if args.import {
        let opts = ImportOptions {
            hitcount: hitcount.clone(),
            redis: RedisArgs::from_url(&url),
            lines: args.import_lines,
        };
        let report = crate::bench::import::run(&opts).await?;
        drop(server);
        return shown(&report, report.table(), args.json);
    }
    if args.serve {
        let opts = ServeOptions {
            hitcount: hitcount.clone(),
            redis: RedisArgs::from_url(&url),
            counters: args.serve_counters,
            pages: args.serve_pages,
            refresh: Duration::from_secs(args.serve_refresh_secs),
            duration: Duration::from_secs(args.serve_secs),
        };
        let report = crate::bench::serve::run(&opts).await?;
        drop(server);
        return shown(&report, report.table(), args.json);
    }
    let opts = Options {
        hitcount,
        redis: RedisArgs::from_url(&url),
        entries: args.entries,
        workers: args.workers,
        workloads: args.workload,
        seeds_sample: args.seeds_sample,
        latency_secs: args.latency_secs,
        rss_backlog: args.rss_backlog,
        worker_args: args.worker_args,
    };
    // Like the tests' SLOWLOG checks: the throwaway Redis' commands go
    // ahead of the workers', so SLOWLOG shows what a command costs.
    let nice = server
        .as_ref()
        .and_then(|s| s.raise_priority(REDIS_NICE).then_some(REDIS_NICE));
    let mut report = crate::bench::run(&opts).await?;
    report.redis_nice = nice;
    drop(server);
    shown(&report, report.table(), args.json)
}

/// Stream shards of a measured cluster unless `--shards` says otherwise.
const DEFAULT_CLUSTER_SHARDS: u32 = 16;

/// Rounds of a cluster run unless `--rounds` says otherwise.
const DEFAULT_CLUSTER_ROUNDS: usize = 3;

/// The nice value of the throwaway Redis' command thread, when root.
const REDIS_NICE: i32 = -10;

/// The cluster to measure, if any: a throwaway one with `--cluster`, or the
/// one REDIS_URL names.
async fn cluster_source(args: &Args) -> anyhow::Result<Option<ClusterSource>> {
    let given = match &args.redis_url {
        Some(url) => {
            let redis = RedisArgs::from_url(url);
            crate::bench::open(&redis)
                .await?
                .is_cluster()
                .then_some(redis)
        }
        None => None,
    };
    Ok(match (args.cluster, given) {
        (_, Some(_)) if args.balance_shards => anyhow::bail!(
            "--balance-shards shapes the throwaway cluster --cluster starts, but REDIS_URL names a cluster, whose slots bench does not move: unset REDIS_URL, or move them yourself (docs/cluster.md, \"Balancing\")"
        ),
        (_, Some(redis)) => Some(ClusterSource::Url(redis)),
        (Some(_), None) if args.redis_url.is_some() => anyhow::bail!(
            "--cluster starts a local cluster, but REDIS_URL names one Redis: unset it, or name a cluster"
        ),
        (Some(masters), None) => Some(ClusterSource::Local {
            masters: masters.into(),
            replicas: args.cluster_replicas.into(),
            balance_shards: args.balance_shards,
        }),
        (None, None) if args.shards.is_some() => anyhow::bail!(
            "--shards sets a cluster's stream shards, but there is no cluster: add --cluster, or name one in REDIS_URL"
        ),
        (None, None) if args.rounds.is_some() => anyhow::bail!(
            "--rounds repeats a cluster run, but there is no cluster: add --cluster, or name one in REDIS_URL"
        ),
        (None, None) => None,
    })
}

async fn scaling(args: Args, source: ClusterSource, hitcount: PathBuf) -> anyhow::Result<String> {
    let opts = ScalingOptions {
        hitcount,
        entries: args.entries,
        workers: args.workers,
        workloads: args.workload,
        shards: args.shards.unwrap_or(DEFAULT_CLUSTER_SHARDS),
        worker_args: args.worker_args,
        warm: args.warm,
        rounds: args.rounds.map_or(DEFAULT_CLUSTER_ROUNDS, usize::from),
    };
    let report = crate::bench::scaling::measure(source, &opts).await?;
    shown(&report, report.table(), args.json)
}
