//! `hitcount-lab bench`: the project's measurements of the `hitcount`
//! binary, with its goals and verdicts.
//!
//! On one Redis ([`run`]): the drains of `hitcount bench --json` ([`product`],
//! the binary's own bench, run as a process), then what only the lab
//! measures: the one-worker Zipf drain with hash-table counters, the seeds'
//! algorithm in Rust ([`seeds`]), XADD-to-visible delay and the producer's
//! rate ([`latency`]), a long backlog's peak RSS, a counter hash's memory
//! and the SLOWLOG; [`report`] makes the table. On a Redis Cluster,
//! [`scaling`] prices the same drains ([`drain`], with workers started by
//! [`workers`]) in Redis CPU per master instead ([`usage`],
//! [`scaling_report`], judged in [`scaling_verdict`]), as
//! [`scaling_options`] asks. Apart from those, [`mod@serve`] measures what
//! `hitcount serve` costs Redis with dashboards open, [`mod@ingest`] how
//! many hits one `hitcount ingest` takes over HTTP, and [`import`] how
//! fast `hitcount import` appends an access log. Every key it writes
//! starts with `bench:`. The helpers here speak plain Redis commands: the
//! lab uses only the product's public library and its binary.

pub mod drain;
pub mod import;
pub mod ingest;
pub mod latency;
pub mod listening;
pub mod product;
pub mod report;
pub mod scaling;
pub mod scaling_options;
pub mod scaling_report;
pub mod scaling_verdict;
pub mod seeds;
pub mod serve;
pub mod statsd;
pub mod usage;
pub mod workers;

use std::path::PathBuf;
use std::time::Duration;

use hitcount::edge::workload::Workload;
use hitcount::model::config::RedisArgs;
use hitcount::model::keys::Keys;
use hitcount::store::connect::Conn;
use redis::{RedisError, Value};

pub use report::Report;

/// Reply deadline of the lab's own connections.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// What went wrong in a bench run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Redis failed or replied unexpectedly (transient or fatal: the run stops).
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
    /// Bad settings.
    #[error(transparent)]
    Config(#[from] hitcount::model::config::ConfigError),
    /// A process could not be started or watched.
    #[error("process: {0}")]
    Process(#[from] std::io::Error),
    /// A check failed: counters differ from the hits sent, or a run stalled.
    #[error("check failed: {0}")]
    Check(String),
    /// The test kit could not start a server or cluster.
    #[error(transparent)]
    Kit(#[from] crate::kit::EmbeddedError),
}

/// What to run on one Redis.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `hitcount` binary measured.
    pub hitcount: PathBuf,
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
}

/// Runs everything on one Redis and returns the figures.
pub async fn run(opts: &Options) -> Result<Report, BenchError> {
    let mut conn = open(&opts.redis).await?;
    delete_matching(&mut conn, "bench:*").await?;
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut conn)
        .await?;
    let bin = product::Bench::new(opts);
    let drains = bin
        .run(opts.entries, &opts.workloads, &opts.workers)
        .await?;
    let mut report = Report::new(&mut conn, opts, drains).await?;
    if opts.workloads.contains(&Workload::Zipf) && opts.workers.contains(&1) {
        // Zipf once more with hash-table counters, next to the listpack run.
        let old = workers::set_listpack_entries(&mut conn, workers::HASHTABLE_ENTRIES).await?;
        let run = bin.run(opts.entries, &[Workload::Zipf], &[1]).await;
        workers::set_listpack_entries(&mut conn, &old).await?;
        report.add_hashtable_run(run?);
    }
    for &workload in &opts.workloads {
        let seeds = seeds::run(&mut conn, workload, opts.seeds_sample).await?;
        report.add_seeds(workload, seeds);
        delete_matching(&mut conn, "bench:*").await?;
    }
    let rate = report.latency_rate();
    report.latency = Some(latency::visible_delay(&opts.redis, rate, opts).await?);
    report.producer = Some(latency::producer_rate(&opts.redis, opts.entries).await?);
    delete_matching(&mut conn, "bench:*").await?;
    if opts.rss_backlog > 0 {
        let backlog = bin.run(opts.rss_backlog, &[Workload::Hot], &[1]).await?;
        report.backlog = backlog.runs.into_iter().next().map(|r| r.hitcount);
    }
    report.hash_bytes = workers::hash_memory(&mut conn).await?;
    report.slowlog = usage::slowlog(&mut conn).await?;
    Ok(report)
}

/// A connection to the Redis (or cluster) `redis` names.
pub async fn open(redis: &RedisArgs) -> Result<Conn, BenchError> {
    let client = hitcount::store::connect::client(redis)?;
    Ok(client.open(RESPONSE_TIMEOUT).await?)
}

/// Creates the stream of `k` and its group at the start (XGROUP CREATE …
/// MKSTREAM); one that exists already is left as it is.
pub async fn ensure_group(conn: &mut Conn, k: &Keys) -> Result<(), BenchError> {
    let made: Result<(), RedisError> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&k.stream)
        .arg(&k.group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(conn)
        .await;
    match made {
        Err(e) if e.code() != Some("BUSYGROUP") => Err(e.into()),
        _ => Ok(()),
    }
}

/// A group's state as XINFO GROUPS tells it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupState {
    /// Entries delivered and not acknowledged.
    pub pending: u64,
    /// The last entry delivered (`0-0` before any).
    pub last_delivered_id: String,
    /// Entries not delivered yet, when Redis can tell.
    pub lag: Option<u64>,
}

impl GroupState {
    /// Read everything, nothing pending.
    pub fn drained(&self) -> bool {
        self.pending == 0 && self.lag == Some(0)
    }

    /// Has read at least one entry.
    pub fn started(&self) -> bool {
        self.last_delivered_id != "0-0"
    }
}

/// The group of each of `shards` (its `group`), `None` where the stream
/// or the group does not exist; one command per shard, each to its slot.
pub async fn groups(
    conn: &mut Conn,
    shards: &[Keys],
) -> Result<Vec<Option<GroupState>>, BenchError> {
    let mut out = Vec::with_capacity(shards.len());
    for k in shards {
        let reply: Result<Value, RedisError> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&k.stream)
            .query_async(conn)
            .await;
        let reply = match reply {
            Ok(r) => r,
            Err(e) if e.to_string().contains("no such key") => {
                out.push(None);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        out.push(group_of(&reply, &k.group));
    }
    Ok(out)
}

/// The group named `name` in an XINFO GROUPS reply.
fn group_of(reply: &Value, name: &str) -> Option<GroupState> {
    let Value::Array(groups) = reply else {
        return None;
    };
    groups.iter().find_map(|g| {
        let fields: Vec<(String, Value)> = match g {
            Value::Array(f) => f
                .chunks(2)
                .filter_map(|p| {
                    Some((
                        redis::from_redis_value(p.first()?.clone()).ok()?,
                        p.get(1)?.clone(),
                    ))
                })
                .collect(),
            Value::Map(m) => m
                .iter()
                .filter_map(|(k, v)| Some((redis::from_redis_value(k.clone()).ok()?, v.clone())))
                .collect(),
            _ => return None,
        };
        let get = |f: &str| fields.iter().find(|(k, _)| k == f).map(|(_, v)| v.clone());
        let text = |f: &str| get(f).and_then(|v| redis::from_redis_value::<String>(v).ok());
        (text("name")? == name).then(|| GroupState {
            pending: get("pending")
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or(0),
            last_delivered_id: text("last-delivered-id").unwrap_or_else(|| "0-0".into()),
            lag: get("lag").and_then(|v| redis::from_redis_value(v).ok()),
        })
    })
}

/// Deletes every key matching `pattern` (SCAN + UNLINK) on the node `conn`
/// reaches (SCAN on a cluster connection sees one node only).
pub async fn delete_matching(conn: &mut Conn, pattern: &str) -> Result<(), BenchError> {
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

/// Calls of every command since the last `CONFIG RESETSTAT` (the serve
/// load's commands per second).
pub async fn command_calls(conn: &mut Conn) -> Result<u64, BenchError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let calls = info
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_config|resetstat:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        });
    Ok(calls.sum())
}

/// Resets the command statistics.
pub async fn reset_stats(conn: &mut Conn) -> Result<(), BenchError> {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    Ok(())
}

/// Unix time in milliseconds, this machine's clock.
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The p-th percentile (0..=100) of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
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

    #[test]
    fn a_group_is_found_by_name_in_xinfo() {
        let field = |k: &str, v: Value| [Value::BulkString(k.as_bytes().to_vec()), v];
        let group = |name: &str, pending: i64| {
            Value::Array(
                [
                    field("name", Value::BulkString(name.as_bytes().to_vec())),
                    field("pending", Value::Int(pending)),
                    field("last-delivered-id", Value::BulkString(b"5-0".to_vec())),
                    field("lag", Value::Int(0)),
                ]
                .concat(),
            )
        };
        let reply = Value::Array(vec![group("a", 3), group("b", 0)]);
        let b = group_of(&reply, "b").unwrap();
        assert!(b.drained() && b.started());
        assert!(!group_of(&reply, "a").unwrap().drained());
        assert!(group_of(&reply, "c").is_none());
    }
}
