//! What the crate's own tests need to run against a real Redis: a
//! throwaway `redis-server` or cluster, a connection, a worker's settings,
//! in-process workers run until the stream is drained, and a cleaner
//! holding the leader lease. The one place that starts servers for unit
//! tests, so that only this module changes when the test kit moves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::config::{LayoutArgs, LeaderArgs, StreamArgs};
use crate::model::keys::Keys;
use crate::service::cleaner::Cleaner;
use crate::service::leader::Lease;
use crate::store::connect::Conn;
pub(crate) use hitcount_lab::kit::{ClusterOptions, RedisCluster, RedisServer, ServerOptions};

/// A throwaway server with the SLOWLOG armed at 10 ms.
pub(crate) fn server() -> RedisServer {
    server_with(ServerOptions::default())
}

/// [`server`] with options of its own.
pub(crate) fn server_with(mut opts: ServerOptions) -> RedisServer {
    opts.extra.push("slowlog-log-slower-than 10000".into());
    RedisServer::start(opts).expect("starting redis-server")
}

/// A throwaway cluster of `masters` masters with `replicas` replicas each.
pub(crate) fn cluster(masters: usize, replicas: usize) -> RedisCluster {
    RedisCluster::start(ClusterOptions {
        masters,
        replicas,
        ..ClusterOptions::default()
    })
    .expect("starting a Redis Cluster")
}

/// A synchronous connection to one node, for administration.
fn node_admin(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    client.get_connection_with_timeout(Duration::from_secs(5))
}

/// The port of the master serving `key`'s slot now, as the first node of
/// `ports` that answers sees it.
fn serving(ports: &[u16], key: &str) -> Option<u16> {
    let slot = crate::model::slots::slot(key.as_bytes());
    ports.iter().find_map(|&p| {
        let reply: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut node_admin(p).ok()?)
            .ok()?;
        crate::store::topology::parse(&reply)
            .into_iter()
            .find(|m| m.serves(slot))
            .map(|m| m.port)
    })
}

/// The port of the master serving `key`'s slot.
pub(crate) fn master_of(cluster: &RedisCluster, key: &str) -> u16 {
    serving(&cluster.master_ports(), key).expect("a master serves the key")
}

/// SIGKILLs the master serving `key` and waits (30 s at most) until every
/// other node reports the cluster ok with a replica serving the slot;
/// returns how long that took.
pub(crate) async fn kill_master_of(cluster: &RedisCluster, key: &str) -> Duration {
    let old = master_of(cluster, key);
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut node_admin(old).unwrap())
        .unwrap();
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .expect("INFO server names process_id")
        .trim()
        .to_string();
    let t0 = Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -9 {pid}");
    let others: Vec<u16> = cluster.ports().into_iter().filter(|&p| p != old).collect();
    loop {
        let ok = others.iter().all(|&p| {
            let state: Option<String> = node_admin(p)
                .and_then(|mut n| redis::cmd("CLUSTER").arg("INFO").query(&mut n))
                .ok();
            state.is_some_and(|s| s.contains("cluster_state:ok"))
                && serving(&[p], key).is_some_and(|m| m != old)
        });
        if ok {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no failover of {key:?}'s master {old} within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A cleaner holding the leader lease (10 minutes) on `c`, scripts loaded.
pub(crate) async fn cleaning_leader(c: &mut Conn, keys: &Keys) -> (Cleaner, Arc<Lease>) {
    crate::store::scripts::load_all(c).await.unwrap();
    let lease = Arc::new(Lease::new(
        keys,
        &LeaderArgs {
            lease_ms: 600_000,
            ..Default::default()
        },
        "test",
    ));
    assert!(lease.try_acquire(c).await.unwrap());
    let cleaner = Cleaner::new(keys.clone(), &LayoutArgs::default(), lease.clone());
    (cleaner, lease)
}

// Shared with the integration tests: plain Redis reads, the SLOWLOG
// policy, in-process workers (these files name the crate `hitcount`).
#[allow(dead_code, unreachable_pub)]
#[path = "../tests/common/counts.rs"]
mod counts;
#[allow(dead_code, unreachable_pub)]
#[path = "../tests/common/plain.rs"]
pub(crate) mod plain;
#[allow(dead_code, unreachable_pub)]
#[path = "../tests/common/slowlog.rs"]
mod slowlog;
#[allow(dead_code, unreachable_pub)]
#[path = "../tests/common/stats.rs"]
pub(crate) mod stats;
#[allow(dead_code, unreachable_pub)]
#[path = "../tests/common/workers.rs"]
mod workers;
pub(crate) use counts::*;
pub(crate) use slowlog::*;
pub(crate) use workers::*;

/// [`server_with`], its command thread at a higher CPU priority than the
/// test's own (see `note_priority`).
pub(crate) fn slowlog_server_with(opts: ServerOptions) -> RedisServer {
    let srv = server_with(opts);
    note_priority(srv.raise_priority(-10));
    srv
}

/// Reads up to `count` new entries of the default stream as `consumer` of
/// `group`, leaving them pending; returns their ids.
pub(crate) async fn read_new(
    c: &mut Conn,
    group: &str,
    consumer: &str,
    count: usize,
) -> Vec<String> {
    let mut keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
    keys.group = group.into();
    let reply = crate::store::stream::read(c, &keys, consumer, count, None, ">")
        .await
        .unwrap();
    crate::store::stream::read_reply_entries(&reply)
        .iter()
        .map(|e| e.id_str().to_string())
        .collect()
}

/// [`slowlog_server_with`] default options.
pub(crate) fn slowlog_server() -> RedisServer {
    slowlog_server_with(ServerOptions::default())
}

/// Unix seconds by this machine's clock.
pub(crate) fn unix_now() -> i64 {
    crate::model::clock::unix_ms() / 1000
}
