//! The Redis Cluster harness itself (`common::cluster`): a real local
//! cluster starts, serves every slot through a `ClusterConnection`, survives
//! the SIGKILL of a master, moves a slot live, and leaves no process or
//! directory behind.

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use redis::cluster_async::ClusterConnection;
use redis::AsyncCommands;

/// Bounds one call through the cluster connection (the client's own
/// overall timeout is 15 s; this names the call when it fires).
async fn within<T>(what: &str, f: impl std::future::Future<Output = redis::RedisResult<T>>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

async fn get(c: &mut ClusterConnection, key: &str) -> Option<String> {
    within(&format!("GET {key}"), c.get(key)).await
}

#[tokio::test]
async fn three_masters_with_a_replica_each_serve_every_slot() {
    let t0 = Instant::now();
    let cluster = Cluster::start();
    eprintln!("cluster started in {:?}", t0.elapsed());

    let masters = cluster.masters();
    let replicas = cluster.replicas();
    assert_eq!(masters.len(), 3, "{masters:?}");
    assert_eq!(replicas.len(), 3, "{replicas:?}");
    for m in &masters {
        assert_eq!(cluster.replicas_of(*m).len(), 1, "replicas of {m}");
    }
    assert_eq!(cluster.urls().len(), 6);
    let seeds: Vec<String> = masters
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    assert_eq!(cluster.seed_url(), seeds.join(","));

    let mut c = cluster.client_conn().await;
    let keys: Vec<String> = (0..30).map(|i| format!("count:60:name{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let () = within(&format!("SET {k}"), c.set(k, i)).await;
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(get(&mut c, k).await, Some(i.to_string()));
    }
    let owners: BTreeSet<u16> = keys.iter().map(|k| cluster.master_of(k)).collect();
    assert_eq!(
        owners,
        masters.iter().copied().collect(),
        "keys on every master"
    );
    let slots: BTreeSet<u16> = keys.iter().map(|k| cluster.slot_of(k)).collect();
    assert!(slots.len() > 20, "{} distinct slots", slots.len());

    // A pipeline within one slot (hash tag) goes to one node.
    let mut pipe = redis::pipe();
    pipe.hincr("count:{7}:a", "f", 2)
        .hincr("count:{7}:b", "f", 3);
    let (a, b): (i64, i64) = within("pipeline", pipe.query_async(&mut c)).await;
    assert_eq!((a, b), (2, 3));
}

#[tokio::test]
async fn the_key_of_a_killed_master_is_served_by_its_promoted_replica() {
    let cluster = Cluster::start();
    let mut c = cluster.client_conn().await;
    let key = "count:3600:home";
    // WAIT runs on the key's node when it follows the key in a pipeline.
    let (_, acked): ((), i64) = within(
        "SET + WAIT",
        redis::pipe()
            .set(key, 41)
            .cmd("WAIT")
            .arg(1)
            .arg(2000)
            .query_async(&mut c),
    )
    .await;
    assert_eq!(acked, 1, "the replica has the write before the kill");
    let old = cluster.master_of(key);
    let heir = cluster.replicas_of(old);

    let took = cluster.kill_master_of(key).await;
    eprintln!("failover of {old} to {heir:?} took {took:?}");

    assert_eq!(vec![cluster.master_of(key)], heir);
    assert_eq!(cluster.masters().len(), 3);
    assert_eq!(cluster.replicas().len(), 2);
    assert_eq!(cluster.urls().len(), 5);
    let t0 = Instant::now();
    assert_eq!(get(&mut c, key).await.as_deref(), Some("41"));
    let n: i64 = within("INCR", c.incr(key, 1)).await;
    assert_eq!(n, 42);
    eprintln!("the old connection recovered in {:?}", t0.elapsed());
    let mut fresh = cluster.client_conn().await;
    assert_eq!(get(&mut fresh, key).await.as_deref(), Some("42"));
}

#[tokio::test]
async fn a_live_slot_migration_moves_its_keys_to_another_master() {
    let cluster = Cluster::start();
    let mut c = cluster.client_conn().await;
    let keys: Vec<String> = (0..5).map(|i| format!("count:{{w}}:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let () = within("HSET", c.hset(k, "n", i)).await;
    }
    let () = within("ZADD", c.zadd("known:{w}", "x", 1)).await;
    let slot = cluster.slot_of("{w}");
    let from = cluster.owner_of(slot);
    let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();

    let t0 = Instant::now();
    let moved = cluster.migrate_slot(slot, to).await;
    eprintln!("slot {slot} moved {from} -> {to} in {:?}", t0.elapsed());

    assert_eq!(moved, 6);
    assert_eq!(cluster.owner_of(slot), to);
    for (i, k) in keys.iter().enumerate() {
        let n: Option<i64> = within("HGET", c.hget(k, "n")).await;
        assert_eq!(n, Some(i as i64), "{k} after the move");
    }
    let known: Vec<String> = within("ZRANGE", c.zrange("known:{w}", 0, -1)).await;
    assert_eq!(known, ["x"]);
    let n: i64 = within("HINCRBY", c.hincr(&keys[0], "n", 1)).await;
    assert_eq!(n, 1);
    let mut fresh = cluster.client_conn().await;
    let size: usize = within("DBSIZE on the target", async {
        redis::cmd("DBSIZE")
            .query_async(
                &mut redis::Client::open(format!("redis://127.0.0.1:{to}"))?
                    .get_multiplexed_async_connection()
                    .await?,
            )
            .await
    })
    .await;
    assert!(size >= 6, "target holds the moved keys ({size})");
    assert_eq!(get(&mut fresh, "nothing:{w}").await, None);
}

/// Writes keep landing while their slot moves: every increment is counted
/// once, whether it hit the source, was redirected with ASK, or hit the
/// target after the move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_during_a_migration_are_all_counted() {
    // Rounds over every key, at least this many, and on until the slot has
    // moved: the writes overlap the move however fast the machine.
    const ROUNDS: i64 = 5;
    let cluster = Cluster::start();
    let mut c = cluster.client_conn().await;
    let keys: Vec<String> = (0..300).map(|i| format!("count:{{m}}:{i}")).collect();
    for k in &keys {
        let () = within("HSET", c.hset(k, "n", 0)).await;
    }
    let slot = cluster.slot_of("{m}");
    let from = cluster.owner_of(slot);
    let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();

    let done = Arc::new(AtomicUsize::new(0));
    let moved_all = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (mut c, keys, done) = (c.clone(), keys.clone(), done.clone());
        let moved_all = moved_all.clone();
        tokio::spawn(async move {
            let mut round = 0;
            while round < ROUNDS || !moved_all.load(Ordering::Relaxed) {
                for k in &keys {
                    let _: i64 =
                        within(&format!("HINCRBY round {round}"), c.hincr(k, "n", 1)).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                round += 1;
            }
            round
        })
    };
    // Wait until the writer runs, then move the slot 10 keys at a time.
    eventually!(10, "the writer started", done.load(Ordering::Relaxed) > 0);
    let before = done.load(Ordering::Relaxed);
    let moved = cluster
        .migrate_slot_paced(slot, to, 10, Duration::from_millis(10))
        .await;
    let during = done.load(Ordering::Relaxed) - before;
    moved_all.store(true, Ordering::Relaxed);
    let rounds = writer.await.unwrap();
    eprintln!("{during} increments landed while slot {slot} moved {from} -> {to}");
    assert!(during > 0, "no write overlapped the migration");

    assert_eq!(moved, 300);
    for k in &keys {
        let n: i64 = within("HGET", c.hget(k, "n")).await;
        assert_eq!(n, rounds, "{k}");
    }
}

#[test]
fn every_node_is_stopped_and_its_directory_removed_also_on_panic() {
    let cluster = Cluster::start_with(3, 0);
    let (pids, dirs) = (cluster.pids(), cluster.dirs());
    assert_eq!(pids.len(), 3);
    drop(cluster);
    assert_gone(&pids, &dirs);

    let seen = std::sync::Mutex::new(None);
    let caught = std::panic::catch_unwind(|| {
        let cluster = Cluster::start_with(3, 0);
        *seen.lock().unwrap() = Some((cluster.pids(), cluster.dirs()));
        panic!("a test failing while its cluster runs (deliberate)");
    });
    assert!(caught.is_err());
    let (pids, dirs) = seen.into_inner().unwrap().expect("the cluster started");
    assert_gone(&pids, &dirs);
}

fn assert_gone(pids: &[u32], dirs: &[std::path::PathBuf]) {
    for (pid, dir) in pids.iter().zip(dirs) {
        // Reaped children have no /proc entry (a reused pid would be a
        // different program, which the cmdline check tells apart).
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains("redis-server"),
            "pid {pid} still runs"
        );
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
}
