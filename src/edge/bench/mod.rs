//! `hitcount bench`: how fast hitcount drains a Redis, next to what that
//! Redis can deliver at all and to the seeds' one-pipeline-per-hit way.
//!
//! For each workload the stream is prefilled once and every run reads it
//! through its own consumer group (all created up front, so nothing can be
//! trimmed before a run has read it) and writes counters under its own key
//! prefix. Parts: [`ceiling`] (a bare XREADGROUP + XACK consumer),
//! [`workers`] (the real worker as child processes), [`seeds`] (the seeds'
//! algorithm in Rust), [`latency`] (XADD-to-visible delay and the producer's
//! rate), [`report`] (the table). On a Redis Cluster, [`scaling`] prices
//! the same drains ([`drain`]) in Redis CPU per master instead ([`usage`],
//! [`scaling_report`], judged in [`scaling_verdict`]), as
//! [`scaling_options`] asks. Every key it writes starts with `bench:`.
//! Apart from those, [`mod@serve`] (`--serve`) measures what `hitcount
//! serve` costs Redis with dashboards open.

pub(crate) mod ceiling;
pub(crate) mod drain;
pub(crate) mod latency;
pub(crate) mod report;
pub(crate) mod scaling;
pub(crate) mod scaling_options;
pub(crate) mod scaling_report;
pub(crate) mod scaling_verdict;
pub(crate) mod seeds;
pub(crate) mod serve;
pub mod usage;
pub(crate) mod workers;

use std::time::Duration;

use crate::store::connect::Conn;
use indicatif::{ProgressBar, ProgressStyle};
use redis::RedisError;

use crate::edge::workload::{synthetic_value, Distribution, Names};
use crate::model::config::{ConfigError, LayoutArgs, RedisArgs, StreamArgs};
use crate::model::keys::Keys;

pub(crate) use report::Report;

/// Entries per prefill pipeline.
const PREFILL_BATCH: usize = 1000;

/// What went wrong in a bench run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Redis failed or replied unexpectedly (transient or fatal: the run stops).
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
    /// Bad settings.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A worker process could not be started or watched.
    #[error("worker process: {0}")]
    Process(#[from] std::io::Error),
    /// A check failed: counters differ from the hits sent, or a run stalled.
    #[error("check failed: {0}")]
    Check(String),
}

/// The name distributions benchmarked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Workload {
    /// 1,000 names, each equally likely.
    Hot,
    /// Zipf(1.0) over 100,000 names.
    Zipf,
    /// 100,000 names, each equally likely.
    Uniform,
}

impl Workload {
    /// The name sampler.
    pub(crate) fn names(self) -> Names {
        match self {
            Workload::Hot => Names::new(1000, Distribution::Uniform),
            Workload::Zipf => Names::new(100_000, Distribution::Zipf(1.0)),
            Workload::Uniform => Names::new(100_000, Distribution::Uniform),
        }
    }

    /// Its label in the table.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Workload::Hot => "1,000 hot names",
            Workload::Zipf => "Zipf(1.0), 100k names",
            Workload::Uniform => "uniform, 100k names",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The Redis to measure (its `bench:*` keys are written and deleted).
    pub redis: RedisArgs,
    /// Entries prefilled per workload.
    pub entries: u64,
    /// Worker counts to run, each against the ceiling with as many consumers.
    pub workers: Vec<usize>,
    /// Workloads to run.
    pub workloads: Vec<Workload>,
    /// Hits sent the seeds' way, per workload.
    pub seeds_sample: u64,
    /// How long the steady load of the latency probe lasts.
    pub latency_secs: u64,
    /// Entries of the separate memory check (none when 0).
    pub rss_backlog: u64,
    /// Extra flags for every worker process (e.g. `--window-ms=200`).
    pub worker_args: Vec<String>,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

/// Read size of the ceiling's consumer, the same as the worker's default.
pub(crate) fn read_count() -> usize {
    crate::model::config::WorkerArgs::default().read_count
}

/// Runs everything and returns the figures.
pub(crate) async fn run(opts: &Options) -> Result<Report, BenchError> {
    let client = crate::store::connect::client(&opts.redis)?;
    let mut conn = client.open(crate::store::connect::RESPONSE_TIMEOUT).await?;
    cleanup(&mut conn).await?;
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut conn)
        .await?;
    let per_workload = 2 + 2 * opts.workers.len() as u64;
    let steps = opts.workloads.len() as u64 * per_workload
        + 2
        + u64::from(opts.rss_backlog > 0)
        + u64::from(valued_run(opts))
        + u64::from(opts.workloads.contains(&Workload::Zipf) && opts.workers.contains(&1));
    let bar = progress_bar(steps, opts.progress);
    let mut report = Report::new(&mut conn, opts).await?;

    for &workload in &opts.workloads {
        bar.set_message(format!("{}: prefilling", workload.label()));
        let stream = format!("bench:{workload:?}:hits").to_lowercase();
        let sent = prefill(&mut conn, &stream, workload, opts.entries, false).await?;
        for &w in &opts.workers {
            for group in [ceiling::group(w), workers::group(w)] {
                create_group(&mut conn, &stream, &group).await?;
            }
        }
        // Zipf once more with hash-table counters, next to the listpack run.
        let hashtable = workload == Workload::Zipf && opts.workers.contains(&1);
        if hashtable {
            let group = format!("{}{}", workers::group(1), workers::HASHTABLE_TAG);
            create_group(&mut conn, &stream, &group).await?;
        }
        bar.inc(1);
        for &w in &opts.workers {
            bar.set_message(format!("{}: ceiling, {w} consumer(s)", workload.label()));
            let ceiling = ceiling::run(&client, &stream, w, opts.entries).await?;
            bar.inc(1);
            bar.set_message(format!("{}: hitcount, {w} worker(s)", workload.label()));
            let target = workers::Target::new(&opts.redis, &stream, w, &opts.worker_args);
            let run = workers::run(&mut conn, &target, &sent).await?;
            bar.inc(1);
            report.add_run(workload, w, ceiling, run);
        }
        if hashtable {
            bar.set_message(format!("{}: hash-table counters", workload.label()));
            let run =
                workers::hashtable_run(&mut conn, &opts.redis, &stream, &opts.worker_args, &sent)
                    .await?;
            report.add_hashtable_run(workload, run);
            bar.inc(1);
        }
        bar.set_message(format!("{}: the seeds' way", workload.label()));
        let seeds = seeds::run(&mut conn, workload, opts.seeds_sample).await?;
        report.add_seeds(workload, seeds);
        bar.inc(1);
        delete_matching(&mut conn, "bench:*").await?;
    }

    if valued_run(opts) {
        // The one-worker hot run once more, every hit with a value.
        bar.set_message("1,000 hot names, every hit with a value");
        let stream = "bench:values:hits";
        let sent = prefill(&mut conn, stream, Workload::Hot, opts.entries, true).await?;
        create_group(&mut conn, stream, &workers::group(1)).await?;
        let target = workers::Target::new(&opts.redis, stream, 1, &opts.worker_args);
        report.values = Some(workers::run(&mut conn, &target, &sent).await?);
        bar.inc(1);
        delete_matching(&mut conn, "bench:*").await?;
    }

    let rate = report.latency_rate();
    bar.set_message(format!("XADD-to-visible at {rate:.0} hits/s"));
    report.latency = Some(latency::visible_delay(&opts.redis, rate, opts).await?);
    bar.inc(1);
    bar.set_message("producer rate");
    report.producer = Some(latency::producer_rate(&opts.redis, opts.entries).await?);
    bar.inc(1);
    delete_matching(&mut conn, "bench:*").await?;

    if opts.rss_backlog > 0 {
        bar.set_message(format!("draining a backlog of {}", opts.rss_backlog));
        let stream = "bench:backlog:hits";
        let sent = prefill(&mut conn, stream, Workload::Hot, opts.rss_backlog, false).await?;
        create_group(&mut conn, stream, &workers::group(1)).await?;
        let target = workers::Target::new(&opts.redis, stream, 1, &opts.worker_args);
        report.backlog = Some(workers::run(&mut conn, &target, &sent).await?);
        bar.inc(1);
        delete_matching(&mut conn, "bench:*").await?;
    }
    report.hash_bytes = workers::hash_memory(&mut conn).await?;
    report.slowlog = usage::slowlog(&mut conn).await?;
    bar.finish_and_clear();
    Ok(report)
}

/// Whether the run includes the hot workload with one worker, and so its
/// twin with a value on every hit (the cost of statistics).
fn valued_run(opts: &Options) -> bool {
    opts.workloads.contains(&Workload::Hot) && opts.workers.contains(&1)
}

fn progress_bar(steps: u64, show: bool) -> ProgressBar {
    let bar = if show {
        ProgressBar::new(steps)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// The hits of a prefilled stream: per name rank, and in all.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    /// The workload.
    pub workload: Workload,
    /// Hits per name rank.
    pub per_name: Vec<u64>,
    /// Hits in all.
    pub hits: u64,
}

/// Appends `n` hits (MessagePack form, no timestamp: the entry's own time;
/// with a [`synthetic_value`] each if `values`) in pipelines of XADDs.
pub(crate) async fn prefill(
    conn: &mut Conn,
    stream: &str,
    workload: Workload,
    n: u64,
    values: bool,
) -> Result<Sent, BenchError> {
    let names = workload.names();
    let mut per_name = vec![0u64; names.len()];
    let mut rng = rand::rng();
    let mut left = n;
    while left > 0 {
        let batch = left.min(PREFILL_BATCH as u64);
        let mut pipe = redis::pipe();
        for _ in 0..batch {
            let rank = names.sample(&mut rng);
            per_name[rank] += 1;
            let value = values.then(|| synthetic_value(&mut rng, rank));
            let hit = crate::model::event::encode_value(&Names::name(rank), 1, None, value);
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("hit")
                .arg(hit)
                .ignore();
        }
        pipe.query_async::<()>(conn).await?;
        left -= batch;
    }
    Ok(Sent {
        workload,
        per_name,
        hits: n,
    })
}

async fn create_group(conn: &mut Conn, stream: &str, group: &str) -> Result<(), BenchError> {
    let keys = keys(stream, group, "");
    crate::store::stream::ensure_group(conn, &keys).await?;
    Ok(())
}

/// The keys of a run: its stream and group, its counters under `prefix`.
pub(crate) fn keys(stream: &str, group: &str, prefix: &str) -> Keys {
    let layout = LayoutArgs {
        prefix: prefix.into(),
        ..LayoutArgs::default()
    };
    let stream = StreamArgs {
        stream: stream.into(),
        group: group.into(),
        dead_stream: format!("{stream}:dead"),
        ..StreamArgs::default()
    };
    Keys::new(&layout, &stream)
}

/// Deletes every key matching `pattern` (SCAN + UNLINK) on the node `conn`
/// reaches (SCAN on a cluster connection sees one node only).
pub(crate) async fn delete_matching(conn: &mut Conn, pattern: &str) -> Result<(), BenchError> {
    let mut cursor = 0u64;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(500)
            .query_async(conn)
            .await?;
        if !found.is_empty() {
            // One key per UNLINK: a cluster node refuses keys of several
            // slots in one command.
            let mut pipe = redis::pipe();
            for key in &found {
                pipe.cmd("UNLINK").arg(key).ignore();
            }
            pipe.query_async::<()>(conn).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

async fn cleanup(conn: &mut Conn) -> Result<(), BenchError> {
    delete_matching(conn, "bench:*").await
}

/// Calls of every command since the last `CONFIG RESETSTAT`, scripts' own
/// commands included, minus the RESETSTAT itself.
pub(crate) async fn command_calls(conn: &mut Conn) -> Result<u64, BenchError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| !l.starts_with("config|resetstat:"))
        .filter_map(|l| {
            l.split_once(":calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

/// Resets the command statistics.
pub(crate) async fn reset_stats(conn: &mut Conn) -> Result<(), BenchError> {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    Ok(())
}

/// The p-th percentile (0..=100) of sorted samples.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_nearest_ranks() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&s, 50.0), 51.0);
        assert_eq!(percentile(&s, 99.0), 99.0);
        assert_eq!(percentile(&s, 100.0), 100.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
