//! `hitcount bench` on a Redis Cluster: what decides how hitcount scales
//! with masters, measured side by side with one Redis in one run.
//!
//! A small machine cannot run three masters three times faster, so the
//! bench prices each run in Redis CPU instead: for every workload and
//! worker count, the same hits (the same names in the same order) are
//! drained from one Redis (one stream, the default deployment) and from
//! the cluster (`shards` stream shards, each name's hits in its producer
//! shard), once in each of `rounds` rounds, and each node's `INFO cpu`
//! growth is divided by the hits; the goals are judged on the median
//! round. The busiest master's CPU per hit against one Redis' says how much
//! faster one master per core would drain; all masters' together say what
//! cluster routing costs. Counts are checked exactly after every drain, as
//! in the single-Redis bench. Parts: [`super::usage`] (the nodes and their
//! counters), [`super::scaling_report`] (the table).

use std::time::{Duration, Instant};

use super::drain::{drain, drain_warm, fill, sent, usages, with_group, Side, Warm};
use super::scaling_options::ScalingOptions;
use super::scaling_report::{ScalingReport, ScalingRun};
use super::usage::Node;
use super::workers::{self, Target};
use super::BenchError;
use crate::kit::{ClusterOptions, EmbeddedError, RedisCluster, RedisServer, ServerOptions};
use hitcount::edge::workload::Names;
use hitcount::edge::workload::Workload;
use hitcount::model::config::DEFAULT_PRECISIONS;
use hitcount::model::config::{LayoutArgs, RedisArgs, StreamArgs};
use hitcount::model::keys::Keys;
use hitcount::model::slots::{
    balancing_moves, even_owner, known_weight, shard_loads, slot, ShardLoads, SlotMove,
};
use hitcount::store::connect::Conn;

/// How long the idle cost of each node is sampled before the runs.
const IDLE_SAMPLE: Duration = Duration::from_secs(1);

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
        /// The shards' slots placed as `status` would advise for the
        /// workloads' traffic ([`balanced_layout`]).
        balance_shards: bool,
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
    let (cluster, nodes) = match source {
        ClusterSource::Url(args) => (args, None),
        ClusterSource::Local {
            masters,
            replicas,
            balance_shards,
        } => {
            let moves = match balance_shards {
                true => balanced_layout(opts, masters),
                false => Vec::new(),
            };
            let nodes = RedisCluster::start(ClusterOptions {
                masters,
                replicas,
                moves,
                ..ClusterOptions::default()
            })
            .map_err(local)?;
            (RedisArgs::from_url(&nodes.url()), Some(nodes))
        }
    };
    let mut report = run(opts, &single, &cluster).await?;
    if let Some(nodes) = &nodes {
        report.moved_slots = nodes.moved_slots().iter().map(|m| m.slot).collect();
    }
    Ok(report)
}

/// Runs every workload and worker count on one Redis (`single`) and on the
/// cluster, `opts.rounds` times, and returns the figures, judged.
pub async fn run(
    opts: &ScalingOptions,
    single: &RedisArgs,
    cluster: &RedisArgs,
) -> Result<ScalingReport, BenchError> {
    let (masters, replicas) = super::usage::masters(cluster).await?;
    // Without a replica on every master, WAIT would time out each step.
    let wait = if replicas == 0 { Some(0) } else { None };
    let mut cluster_args = opts.worker_args.clone();
    cluster_args.push(format!("--shards={}", opts.shards));
    if let Some(w) = wait {
        cluster_args.push(format!("--wait-replicas={w}"));
    }
    let mut single_args = opts.worker_args.clone();
    single_args.push("--shards=1".into());
    let mut sides = Sides {
        opts,
        single: Place {
            hitcount: &opts.hitcount,
            redis: single,
            args: single_args,
            nodes: vec![super::usage::single(single).await?],
            conn: open(single).await?,
            shards: 1,
            clustered: false,
            what: "one Redis",
        },
        cluster: Place {
            hitcount: &opts.hitcount,
            redis: cluster,
            args: cluster_args,
            nodes: masters,
            conn: open(cluster).await?,
            shards: opts.shards,
            clustered: true,
            what: "the cluster",
        },
    };
    sides.clear().await?;
    let idle = idle_cost(&mut sides.cluster.nodes).await?;
    let mut report = ScalingReport::new(opts, &sides.cluster.nodes, replicas, wait, idle);
    let rounds = opts.rounds.max(1);
    // Round after round of every workload, so that a machine slower for a
    // while weighs on one round of each rather than on one workload.
    for round in 1..=rounds {
        for &workload in &opts.workloads {
            let said = |what: &str| match rounds {
                1 => eprintln!("{}: {what}", workload.label()),
                _ => eprintln!("round {round}/{rounds}: {}: {what}", workload.label()),
            };
            for (workers, (single, cluster)) in sides.workload(workload, &said).await? {
                report.runs.push(ScalingRun {
                    workload,
                    workers,
                    round,
                    single,
                    cluster,
                });
            }
            sides.clear().await?;
        }
    }
    report.judge();
    Ok(report)
}

/// One side of the comparison: its Redis, its workers' flags, its nodes
/// (priced) and a connection, how many stream shards it reads and whether
/// it is a cluster (which names a lone shard's dead letters differently).
struct Place<'a> {
    hitcount: &'a std::path::Path,
    redis: &'a RedisArgs,
    args: Vec<String>,
    nodes: Vec<Node>,
    conn: Conn,
    shards: u32,
    clustered: bool,
    what: &'static str,
}

impl Place<'_> {
    /// The keys of every shard of `stream` on this side.
    fn keys(&self, stream: &str) -> Vec<Keys> {
        shard_keys(stream, self.shards, self.clustered)
    }

    /// The workers of one run: `w` of them on `stream`.
    fn target(&self, stream: &str, w: usize) -> Target {
        Target::new(self.hitcount, self.redis, stream, w, &self.args)
    }
}

/// Both sides of every drain: one Redis and the cluster.
struct Sides<'a> {
    opts: &'a ScalingOptions,
    single: Place<'a>,
    cluster: Place<'a>,
}

impl Sides<'_> {
    /// Deletes the bench's keys on every node.
    async fn clear(&mut self) -> Result<(), BenchError> {
        for place in [&mut self.single, &mut self.cluster] {
            for n in &mut place.nodes {
                n.delete_matching("bench:*").await?;
            }
        }
        Ok(())
    }

    /// `workload` drained once per worker count on one Redis, then on the
    /// cluster: the same hits, cold or warm as the options say.
    async fn workload(
        &mut self,
        workload: Workload,
        said: &dyn Fn(&str),
    ) -> Result<Vec<(usize, (Side, Side))>, BenchError> {
        let opts = self.opts;
        let ranks = sample(workload, opts.entries);
        let cold = run_stream(workload, 0, false);
        let sent = sent(workload, &ranks);
        if !opts.warm {
            for place in [&mut self.single, &mut self.cluster] {
                let keys = place.keys(&cold);
                fill(&mut place.conn, &keys, &ranks).await?;
                for &w in &opts.workers {
                    for k in &keys {
                        let k = with_group(k, &workers::group(w));
                        super::ensure_group(&mut place.conn, &k).await?;
                    }
                }
            }
        }
        let mut out = Vec::new();
        for &w in &opts.workers {
            let mut sides = Vec::with_capacity(2);
            for place in [&mut self.single, &mut self.cluster] {
                let side = if opts.warm {
                    said(&format!("{w} worker(s) on {}, warm", place.what));
                    let warm = Warm {
                        // Every name once: after hours of traffic even the
                        // tail's names have counters.
                        first: (0..workload.names().len()).collect(),
                        then: &ranks,
                        workload,
                    };
                    let stream = run_stream(workload, w, true);
                    let (target, keys) = (place.target(&stream, w), place.keys(&stream));
                    drain_warm(&mut place.conn, &mut place.nodes, &target, &keys, &warm).await?
                } else {
                    said(&format!("{w} worker(s) on {}", place.what));
                    let (target, keys) = (place.target(&cold, w), place.keys(&cold));
                    drain(&mut place.conn, &mut place.nodes, &target, &keys, &sent).await?
                };
                sides.push(side);
            }
            let cluster = sides.pop().expect("two sides");
            let single = sides.pop().expect("two sides");
            out.push((w, (single, cluster)));
        }
        Ok(out)
    }
}

async fn open(redis: &RedisArgs) -> Result<Conn, BenchError> {
    let client = hitcount::store::connect::client(redis)?;
    Ok(client.open(super::RESPONSE_TIMEOUT).await?)
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

/// The stream a run of `w` workers drains: the workload's (filled once for
/// every cold run), or a warm run's own.
fn run_stream(workload: Workload, w: usize, warm: bool) -> String {
    match warm {
        true => format!("bench:{workload:?}:warm{w}:hits"),
        false => format!("bench:{workload:?}:hits"),
    }
    .to_lowercase()
}

/// The slot moves of `--balance-shards` on `masters` masters that split
/// the slots evenly: what `status` would advise ([`shard_loads`],
/// [`balancing_moves`]) once each workload's hits went through: each
/// name's to its producer shard with its probability, and the masters
/// serving its runs' `known:` keys weighed by the new counters per hit (a
/// cold run's names new once per precision, a warm run's none). One
/// dimension per workload, so each evens out.
fn balanced_layout(opts: &ScalingOptions, masters: usize) -> Vec<SlotMove> {
    let n = opts.shards;
    let dims = opts.workloads.len();
    let mut traffic: Vec<(u32, Vec<f64>)> = (0..n).map(|k| (k, vec![0.0; dims])).collect();
    let mut known = Vec::with_capacity(dims);
    for (d, &workload) in opts.workloads.iter().enumerate() {
        let weights = workload.names().weights();
        for (rank, p) in weights.iter().enumerate() {
            traffic[Keys::shard_of_name(&Names::name(rank), n) as usize].1[d] += p;
        }
        let at = |w: usize| {
            let key = workers::known_key(&run_stream(workload, w, opts.warm), w);
            even_owner(masters, slot(key.as_bytes()))
        };
        // Names expected among the hits, each new once per precision.
        let hits = opts.entries as f64;
        let names: f64 = weights.iter().map(|p| 1.0 - (1.0 - p).powf(hits)).sum();
        let per_hit = match opts.warm {
            true => 0.0,
            false => names * DEFAULT_PRECISIONS.len() as f64 / hits,
        };
        let ms = opts.workers.iter().map(|&w| at(w)).collect();
        known.push((ms, known_weight(per_hit)));
    }
    let ShardLoads { slots, base } = shard_loads(&traffic, &known, masters);
    balancing_moves(masters, |s| even_owner(masters, s), &slots, &base)
}

/// `n` name ranks drawn from the workload.
fn sample(workload: Workload, n: u64) -> Vec<usize> {
    let names = workload.names();
    let mut rng = rand::rng();
    (0..n).map(|_| names.sample(&mut rng)).collect()
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
