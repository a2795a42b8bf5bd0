//! One priced drain of the scaling bench ([`super::scaling`]): the
//! workers drain every shard of a stream, each node's `INFO cpu` and
//! `INFO commandstats` growth over the drain is recorded, and the day
//! counters are checked against the hits sent. A cold drain prices a fresh
//! Redis where every name is new; a warm one the steady state.

use std::time::{Duration, Instant};

use super::usage::{Node, Usage};
use super::workers::{self, Target};
use super::BenchError;
use hitcount::edge::workload::Names;
use hitcount::edge::workload::Workload;
use hitcount::model::keys::Keys;
use hitcount::model::slots::slot;
use hitcount::store::connect::Conn;

/// The hits of a filled stream: per name rank, and in all.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The workload.
    pub workload: Workload,
    /// Hits per name rank.
    pub per_name: Vec<u64>,
    /// Hits in all.
    pub hits: u64,
}

/// Entries per prefill pipeline (one shard's, so one slot's, per pipeline).
const PREFILL_BATCH: usize = 1000;
/// Names whose day counters are read per round when checking.
const CHECK_BATCH: usize = 5000;
/// Pause between checks that every shard is drained: rare enough that the
/// bench's own XINFO/XRANGE cost nothing next to the workers', short next
/// to a drain of a few seconds (the ceiling it is compared with is timed
/// to its last acknowledgement).
const POLL: Duration = Duration::from_millis(20);

/// One drain, priced on each node that served it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Side {
    /// Hits drained (and counted exactly).
    pub hits: u64,
    /// Seconds from the first read to drained, on this machine.
    pub secs: f64,
    /// `host:port` of each node.
    pub nodes: Vec<String>,
    /// Stream shards in each node's slots.
    pub shards: Vec<usize>,
    /// Each node's growth over the drain.
    pub used: Vec<Usage>,
    /// The node holding the `known:` ZSET (one key: every ZADD goes there).
    pub known_on: usize,
}

impl Side {
    /// Each node's CPU µs per hit.
    pub fn cpu_per_hit(&self) -> Vec<f64> {
        let hits = self.hits.max(1) as f64;
        self.used.iter().map(|u| u.cpu_us / hits).collect()
    }

    /// All nodes' CPU µs per hit.
    pub fn total_per_hit(&self) -> f64 {
        self.cpu_per_hit().iter().sum()
    }

    /// The busiest node's CPU µs per hit.
    pub fn busiest_per_hit(&self) -> f64 {
        self.cpu_per_hit().into_iter().fold(0.0, f64::max)
    }

    /// Commands per hit, all nodes (scripts' own commands included).
    pub fn calls_per_hit(&self) -> f64 {
        self.used.iter().map(|u| u.calls as f64).sum::<f64>() / self.hits.max(1) as f64
    }
}

pub(super) async fn usages(nodes: &mut [Node]) -> Result<Vec<Usage>, BenchError> {
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes.iter_mut() {
        out.push(n.usage().await?);
    }
    Ok(out)
}

pub(super) fn sent(workload: Workload, ranks: &[usize]) -> Sent {
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

/// `k` read through `group`.
pub(super) fn with_group(k: &Keys, group: &str) -> Keys {
    let mut k = k.clone();
    k.group = group.to_string();
    k
}

/// Appends one hit per rank, each to its name's shard (the producer's
/// choice, [`Keys::shard_of_name`]), in pipelines of one shard each.
pub(super) async fn fill(
    conn: &mut Conn,
    shards: &[Keys],
    ranks: &[usize],
) -> Result<(), BenchError> {
    let n = shards.len() as u32;
    let mut per_shard: Vec<Vec<Vec<u8>>> = vec![Vec::new(); shards.len()];
    for &r in ranks {
        let name = Names::name(r);
        let shard = Keys::shard_of_name(&name, n) as usize;
        per_shard[shard].push(hitcount::model::event::encode(&name, 1, None));
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
pub(super) async fn drain(
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
    wait_drained(conn, &shards, &mut children, deadline).await?;
    let secs = started.elapsed().as_secs_f64();
    let after = usages(nodes).await?;
    workers::stop(children).await;
    priced(conn, nodes, target, &shards, sent, secs, (before, after)).await
}

/// Until every shard is drained, while the workers live.
async fn wait_drained(
    conn: &mut Conn,
    shards: &[Keys],
    children: &mut [tokio::process::Child],
    deadline: Instant,
) -> Result<(), BenchError> {
    while !all_drained(conn, shards).await? {
        workers::check_alive(children, deadline)?;
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// What [`drain_warm`] drains: `first` while the workers warm up, then
/// `then`, priced.
pub(super) struct Warm<'a> {
    pub first: Vec<usize>,
    pub then: &'a [usize],
    pub workload: Workload,
}

/// The steady state of a deployment that has run for a while: every name
/// already has its counters and `known:` members, and the workers remember
/// them. The workers first count `warm.first` (every name of the workload
/// once) as it is filled, then are paused (SIGSTOP) while `warm.then` is
/// filled, and are priced from their resumption (SIGCONT) until it is
/// drained. A cold run ([`drain`]) instead prices a fresh Redis where every
/// name is new: each of its `PREC:NAME` members costs one ZADD, all on the
/// master that holds `known:`.
pub(super) async fn drain_warm(
    conn: &mut Conn,
    nodes: &mut [Node],
    target: &Target,
    shards: &[Keys],
    warm: &Warm<'_>,
) -> Result<Side, BenchError> {
    let shards: Vec<Keys> = shards
        .iter()
        .map(|k| with_group(k, &target.keys().group))
        .collect();
    for k in &shards {
        super::ensure_group(conn, k).await?;
    }
    let both: Vec<usize> = warm.first.iter().chain(warm.then).copied().collect();
    let sent = sent(warm.workload, &both);
    let mut children = target.spawn()?;
    let deadline = Instant::now() + Duration::from_secs(120 + sent.hits / 2500);
    fill(conn, &shards, &warm.first).await?;
    wait_drained(conn, &shards, &mut children, deadline).await?;
    workers::signal(&children, libc::SIGSTOP);
    fill(conn, &shards, warm.then).await?;
    let before = usages(nodes).await?;
    let started = Instant::now();
    workers::signal(&children, libc::SIGCONT);
    wait_drained(conn, &shards, &mut children, deadline).await?;
    let secs = started.elapsed().as_secs_f64();
    let after = usages(nodes).await?;
    workers::stop(children).await;
    let mut side = priced(conn, nodes, target, &shards, &sent, secs, (before, after)).await?;
    side.hits = warm.then.len() as u64;
    Ok(side)
}

/// Checks the day counters against `sent` and prices the drain from the
/// nodes' usage `before` and `after` it.
async fn priced(
    conn: &mut Conn,
    nodes: &[Node],
    target: &Target,
    shards: &[Keys],
    sent: &Sent,
    secs: f64,
    (before, after): (Vec<Usage>, Vec<Usage>),
) -> Result<Side, BenchError> {
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
    let groups = super::groups(conn, shards).await?;
    Ok(groups.iter().flatten().any(super::GroupState::started))
}

/// Every shard's group has read everything and has nothing pending (on a
/// cluster, entries are acknowledged once their window is counted).
async fn all_drained(conn: &mut Conn, shards: &[Keys]) -> Result<bool, BenchError> {
    let groups = super::groups(conn, shards).await?;
    Ok(groups
        .iter()
        .all(|g| g.as_ref().is_some_and(super::GroupState::drained)))
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
