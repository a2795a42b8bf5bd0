//! `hitcount bench`: measure hitcount against what this Redis can deliver
//! (see [`crate::edge::bench`]) and print the table.

use anyhow::Context;

use std::time::Duration;

use crate::edge::bench::scaling::ClusterSource;
use crate::edge::bench::scaling_options::ScalingOptions;
use crate::edge::bench::serve::ServeOptions;
use crate::edge::bench::{Options, Workload};
use crate::edge::embedded::{RedisServer, ServerOptions};
use crate::model::config::RedisArgs;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Redis to measure (its `bench:*` keys are written, then deleted).
    /// Default: a throwaway redis-server with the SLOWLOG at 10 ms.
    #[arg(long = "redis-url", env = "REDIS_URL", hide_env_values = true)]
    pub(super) redis_url: Option<String>,
    /// Entries prefilled per workload, at least 1 (the default run takes
    /// about a minute).
    #[arg(long, default_value_t = 100_000, value_parser = super::parse_at_least_one)]
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
    #[arg(long, default_value_t = 20_000, value_parser = super::parse_at_least_one)]
    seeds_sample: u64,
    /// Seconds of steady load while probing the XADD-to-visible delay, 1 to
    /// 3600.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=3600))]
    latency_secs: u64,
    /// Also drain a backlog of this many entries with one worker and report
    /// its peak RSS (5000000 takes a few minutes), 0..=100000000.
    #[arg(long, default_value_t = 0, value_parser = crate::model::config::ranged::<u64>(0..=100_000_000))]
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
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
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
    // `--serve` measures one Redis only (a cluster is refused below).
    if !args.serve {
        if let Some(source) = cluster_source(&args).await? {
            return scaling(args, source).await;
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
        super::connect_single(&RedisArgs::from_url(&url), "hitcount bench").await?;
    }
    if args.serve {
        let opts = ServeOptions {
            redis: RedisArgs::from_url(&url),
            counters: args.serve_counters,
            pages: args.serve_pages,
            refresh: Duration::from_secs(args.serve_refresh_secs),
            duration: Duration::from_secs(args.serve_secs),
        };
        let report = crate::edge::bench::serve::run(&opts).await?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            super::out(&report.table())?;
        }
        drop(server);
        return Ok(());
    }
    let opts = Options {
        redis: RedisArgs::from_url(&url),
        entries: args.entries,
        workers: args.workers,
        workloads: args.workload,
        seeds_sample: args.seeds_sample,
        latency_secs: args.latency_secs,
        rss_backlog: args.rss_backlog,
        worker_args: args.worker_args,
        progress: !args.json,
    };
    // Like the tests' SLOWLOG checks: the throwaway Redis' commands go
    // ahead of the workers', so SLOWLOG shows what a command costs.
    let nice = server
        .as_ref()
        .and_then(|s| s.raise_priority(REDIS_NICE).then_some(REDIS_NICE));
    let mut report = crate::edge::bench::run(&opts).await?;
    report.redis_nice = nice;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        super::out(&report.table())?;
    }
    drop(server);
    Ok(())
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
            super::connect(&redis).await?.is_cluster().then_some(redis)
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

async fn scaling(args: Args, source: ClusterSource) -> anyhow::Result<()> {
    let opts = ScalingOptions {
        entries: args.entries,
        workers: args.workers,
        workloads: args.workload,
        shards: args.shards.unwrap_or(DEFAULT_CLUSTER_SHARDS),
        worker_args: args.worker_args,
        warm: args.warm,
        rounds: args.rounds.map_or(DEFAULT_CLUSTER_ROUNDS, usize::from),
    };
    let report = crate::edge::bench::scaling::measure(source, &opts).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        super::out(&report.table())?;
    }
    Ok(())
}
