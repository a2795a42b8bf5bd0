//! `hitcount bench` on a Redis Cluster: what decides how hitcount scales
//! with masters, measured side by side with one Redis in one run.
//!
//! A small machine cannot run three masters three times faster, so the
//! bench prices each run in Redis CPU instead: for every workload and
//! worker count, the same hits (the same names in the same order) are
//! drained once from one Redis (one stream, the default deployment) and
//! once from the cluster (`shards` stream shards, each name's hits in its
//! producer shard), and each node's `INFO cpu` growth is divided by the
//! hits. The busiest master's CPU per hit against one Redis' says how much
//! faster one master per core would drain; all masters' together say what
//! cluster routing costs. Counts are checked exactly after every drain, as
//! in the single-Redis bench. Parts: [`super::usage`] (the nodes and their
//! counters), [`super::scaling_report`] (the table).

use std::time::{Duration, Instant};

use super::scaling_report::{ScalingReport, ScalingRun, Side};
use super::usage::{Node, Usage};
use super::workers::{self, Target};
use super::{BenchError, Sent, Workload};
use crate::edge::embedded::{
    ClusterOptions, EmbeddedError, RedisCluster, RedisServer, ServerOptions,
};
use crate::edge::workload::Names;
use crate::model::config::{LayoutArgs, RedisArgs, StreamArgs};
use crate::model::keys::Keys;
use crate::model::slots::slot;
use crate::store::connect::Conn;
use crate::store::group;

/// Entries per prefill pipeline (one shard's, so one slot's, per pipeline).
const PREFILL_BATCH: usize = 1000;
/// Names whose day counters are read per round when checking.
const CHECK_BATCH: usize = 5000;
/// Pause between checks that every shard is drained: rare enough that the
/// bench's own XINFO/XRANGE cost nothing next to the workers'.
const POLL: Duration = Duration::from_millis(100);
/// How long the idle cost of each node is sampled before the runs.
const IDLE_SAMPLE: Duration = Duration::from_secs(1);

/// What to run.
#[derive(Debug, Clone)]
pub struct ScalingOptions {
    /// Hits per workload.
    pub entries: u64,
    /// Worker counts.
    pub workers: Vec<usize>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Stream shards on the cluster.
    pub shards: u32,
    /// Extra flags for every worker.
    pub worker_args: Vec<String>,
}

/// The cluster to measure.
#[derive(Debug, Clone)]
pub enum ClusterSource {
    /// An existing cluster (`REDIS_URL`); its `bench:*` keys are written,
    /// then deleted.
    Url(RedisArgs),
    /// A throwaway local cluster ([`RedisCluster`]).
    Local {
        /// Masters.
        masters: usize,
        /// Replicas of each master.
        replicas: usize,
    },
}

/// Starts what is needed (one throwaway redis-server for the comparison,
/// always on this machine; the cluster unless one is given), runs
/// [`run`] and stops them.
pub async fn measure(
    source: ClusterSource,
    opts: &ScalingOptions,
) -> Result<ScalingReport, BenchError> {
    let local = |e: EmbeddedError| BenchError::Check(format!("starting a throwaway Redis: {e}"));
    let server = RedisServer::start(ServerOptions::default()).map_err(local)?;
    let single = RedisArgs::from_url(&server.url());
    let (cluster, _nodes) = match source {
        ClusterSource::Url(args) => (args, None),
        ClusterSource::Local { masters, replicas } => {
            let nodes = RedisCluster::start(ClusterOptions {
                masters,
                replicas,
                ..ClusterOptions::default()
            })
            .map_err(local)?;
            (RedisArgs::from_url(&nodes.url()), Some(nodes))
        }
    };
    run(opts, &single, &cluster).await
}

/// Runs every workload and worker count on one Redis (`single`) and on the
/// cluster, and returns the figures.
pub async fn run(
    opts: &ScalingOptions,
    single: &RedisArgs,
    cluster: &RedisArgs,
) -> Result<ScalingReport, BenchError> {
    let mut one = vec![super::usage::single(single).await?];
    let (mut masters, replicas) = super::usage::masters(cluster).await?;
    let mut single_conn = open(single).await?;
    let mut cluster_conn = open(cluster).await?;
    for n in one.iter_mut().chain(masters.iter_mut()) {
        n.delete_matching("bench:*").await?;
    }
    // Without a replica on every master, WAIT would time out each step.
    let wait = if replicas == 0 { Some(0) } else { None };
    let mut cluster_args = opts.worker_args.clone();
    cluster_args.push(format!("--shards={}", opts.shards));
    if let Some(w) = wait {
        cluster_args.push(format!("--wait-replicas={w}"));
    }
    let mut single_args = opts.worker_args.clone();
    single_args.push("--shards=1".into());

    let idle = idle_cost(&mut masters).await?;
    let mut report = ScalingReport::new(opts, &masters, replicas, wait, idle);
    for &workload in &opts.workloads {
        let stream = format!("bench:{workload:?}:hits").to_lowercase();
        let ranks = sample(workload, opts.entries);
        let sent = sent(workload, &ranks);
        let single_keys = shard_keys(&stream, 1, false);
        let cluster_keys = shard_keys(&stream, opts.shards, true);
        fill(&mut single_conn, &single_keys, &ranks).await?;
        fill(&mut cluster_conn, &cluster_keys, &ranks).await?;
        for &w in &opts.workers {
            for (conn, shards) in [
                (&mut single_conn, &single_keys),
                (&mut cluster_conn, &cluster_keys),
            ] {
                for k in shards {
                    let k = with_group(k, &workers::group(w));
                    crate::store::stream::ensure_group(conn, &k).await?;
                }
            }
        }
        for &w in &opts.workers {
            eprintln!("{}: {w} worker(s) on one Redis", workload.label());
            let target = Target::new(single, &stream, w, &single_args);
            let single = drain(&mut single_conn, &mut one, &target, &single_keys, &sent).await?;
            eprintln!("{}: {w} worker(s) on the cluster", workload.label());
            let target = Target::new(cluster, &stream, w, &cluster_args);
            let cluster = drain(
                &mut cluster_conn,
                &mut masters,
                &target,
                &cluster_keys,
                &sent,
            )
            .await?;
            report.runs.push(ScalingRun {
                workload,
                workers: w,
                single,
                cluster,
            });
        }
        for n in one.iter_mut().chain(masters.iter_mut()) {
            n.delete_matching("bench:*").await?;
        }
    }
    Ok(report)
}

async fn open(redis: &RedisArgs) -> Result<Conn, BenchError> {
    let client = crate::store::connect::client(redis)?;
    Ok(client.open(crate::store::connect::RESPONSE_TIMEOUT).await?)
}

/// Each node's CPU per second while nothing but the cluster itself runs
/// (cron, the cluster bus), µs/s.
async fn idle_cost(nodes: &mut [Node]) -> Result<Vec<f64>, BenchError> {
    let before = usages(nodes).await?;
    let started = Instant::now();
    tokio::time::sleep(IDLE_SAMPLE).await;
    let after = usages(nodes).await?;
    let secs = started.elapsed().as_secs_f64();
    Ok(after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.since(b).cpu_us / secs)
        .collect())
}

async fn usages(nodes: &mut [Node]) -> Result<Vec<Usage>, BenchError> {
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes.iter_mut() {
        out.push(n.usage().await?);
    }
    Ok(out)
}

/// `n` name ranks drawn from the workload.
fn sample(workload: Workload, n: u64) -> Vec<usize> {
    let names = workload.names();
    let mut rng = rand::rng();
    (0..n).map(|_| names.sample(&mut rng)).collect()
}

fn sent(workload: Workload, ranks: &[usize]) -> Sent {
    let mut per_name = vec![0u64; workload.names().len()];
    for &r in ranks {
        per_name[r] += 1;
    }
    Sent {
        workload,
        per_name,
        hits: ranks.len() as u64,
    }
}

/// The keys of every shard of `stream` (group and prefix still to set).
fn shard_keys(stream: &str, shards: u32, clustered: bool) -> Vec<Keys> {
    let args = StreamArgs {
        stream: stream.into(),
        dead_stream: format!("{stream}:dead"),
        shards,
        ..StreamArgs::default()
    };
    Keys::all_shards(&LayoutArgs::default(), &args, clustered)
}

/// `k` read through `group`.
fn with_group(k: &Keys, group: &str) -> Keys {
    let mut k = k.clone();
    k.group = group.to_string();
    k
}

/// Appends one hit per rank, each to its name's shard (the producer's
/// choice, [`Keys::shard_of_name`]), in pipelines of one shard each.
async fn fill(conn: &mut Conn, shards: &[Keys], ranks: &[usize]) -> Result<(), BenchError> {
    let n = shards.len() as u32;
    let mut per_shard: Vec<Vec<Vec<u8>>> = vec![Vec::new(); shards.len()];
    for &r in ranks {
        let name = Names::name(r);
        let shard = Keys::shard_of_name(&name, n) as usize;
        per_shard[shard].push(crate::model::event::encode(&name, 1, None));
    }
    for (k, hits) in shards.iter().zip(&per_shard) {
        for batch in hits.chunks(PREFILL_BATCH) {
            let mut pipe = redis::pipe();
            for hit in batch {
                pipe.cmd("XADD")
                    .arg(&k.stream)
                    .arg("*")
                    .arg("hit")
                    .arg(hit)
                    .ignore();
            }
            pipe.query_async::<()>(conn).await?;
        }
    }
    Ok(())
}

/// Drains every shard with the target's workers, prices it on `nodes` and
/// checks the day counters against `sent`.
async fn drain(
    conn: &mut Conn,
    nodes: &mut [Node],
    target: &Target,
    shards: &[Keys],
    sent: &Sent,
) -> Result<Side, BenchError> {
    let shards: Vec<Keys> = shards
        .iter()
        .map(|k| with_group(k, &target.keys().group))
        .collect();
    let before = usages(nodes).await?;
    let mut children = target.spawn()?;
    let deadline = Instant::now() + Duration::from_secs(120 + sent.hits / 5000);
    // The clock starts at the first read of any shard, not at start-up.
    while !any_read(conn, &shards).await? {
        workers::check_alive(&mut children, deadline)?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    while !all_drained(conn, &shards).await? {
        workers::check_alive(&mut children, deadline)?;
        tokio::time::sleep(POLL).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let after = usages(nodes).await?;
    workers::stop(children).await;
    let counted = day_total(conn, target.keys(), &sent.per_name).await?;
    if counted != sent.hits as i64 {
        return Err(BenchError::Check(format!(
            "{} on {} shard(s): counted {counted} hits at the 86400 s precision, sent {}",
            sent.workload.label(),
            shards.len(),
            sent.hits
        )));
    }
    let used: Vec<Usage> = after.iter().zip(&before).map(|(a, b)| a.since(b)).collect();
    let held = nodes
        .iter()
        .map(|n| {
            shards
                .iter()
                .filter(|k| n.serves(slot(k.stream.as_bytes())))
                .count()
        })
        .collect();
    let known = slot(target.keys().known().as_bytes());
    Ok(Side {
        known_on: nodes.iter().position(|n| n.serves(known)).unwrap_or(0),
        hits: sent.hits,
        secs,
        nodes: nodes.iter().map(|n| n.addr.clone()).collect(),
        shards: held,
        used,
    })
}

async fn any_read(conn: &mut Conn, shards: &[Keys]) -> Result<bool, BenchError> {
    let groups = group::own_groups(conn, shards, 0).await?;
    Ok(groups
        .iter()
        .flatten()
        .any(|(g, _)| g.last_delivered_id != "0-0"))
}

/// Every shard's group has read everything and has nothing pending (on a
/// cluster, entries are acknowledged once their window is counted).
async fn all_drained(conn: &mut Conn, shards: &[Keys]) -> Result<bool, BenchError> {
    let groups = group::own_groups(conn, shards, 0).await?;
    Ok(groups
        .iter()
        .all(|g| matches!(g, Some((g, None)) if g.pending == 0)))
}

/// The sum of every day counter of the names sent, one command per name
/// (each its own slot on a cluster).
async fn day_total(conn: &mut Conn, k: &Keys, per_name: &[u64]) -> Result<i64, BenchError> {
    let ranks: Vec<usize> = (0..per_name.len()).filter(|&r| per_name[r] > 0).collect();
    let mut total = 0i64;
    for batch in ranks.chunks(CHECK_BATCH) {
        let cmds = batch
            .iter()
            .map(|&r| {
                let mut c = redis::cmd("HVALS");
                c.arg(k.count(86400, &Names::name(r)));
                c
            })
            .collect();
        for reply in conn.query_each(cmds).await? {
            let values: Vec<i64> = redis::from_redis_value(reply)
                .map_err(|e| BenchError::Check(format!("a day counter: {e}")))?;
            total += values.iter().sum::<i64>();
        }
    }
    Ok(total)
}
