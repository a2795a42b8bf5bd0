//! `hitcount worker` on a real local Redis Cluster (3 masters, 3 replicas):
//! every hit counted exactly once into the seed layout, wherever the
//! cluster puts the counters, with one stream or with shards.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::bin;
use common::cluster::Cluster;
use hitcount::model::config::{LayoutArgs, StreamArgs};
use hitcount::model::keys::Keys;
use hitcount::store::connect::Conn;

const PRECISIONS: [u32; 7] = [1, 5, 60, 300, 3600, 18000, 86400];

/// Workers as a user starts them: default consumer names.
pub(crate) fn start_workers(url: &str, n: usize, extra: &[&str]) -> Vec<bin::Child> {
    (0..n)
        .map(|i| {
            let mut cmd = bin::default_worker(url, "127.0.0.1:0", &["--block-ms", "200"]);
            cmd.args(extra);
            bin::Child::spawn(&format!("worker-{i}"), cmd)
        })
        .collect()
}

/// Appends hits to `stream`, half in each wire form, at times spread over
/// the last hours; returns them for the reference.
async fn send(
    c: &mut Conn,
    stream: &str,
    names: &[String],
    n: usize,
    seed: u64,
) -> Vec<(String, i64, i64)> {
    let now = common::unix_now();
    let mut pipe = redis::pipe();
    let mut sent = Vec::new();
    for i in 0..n {
        let x = (i as u64).wrapping_mul(2654435761).wrapping_add(seed);
        let name = &names[(x % names.len() as u64) as usize];
        let count = (x % 3) as i64 + 1;
        let ts = now - (x % 7200) as i64;
        if i % 2 == 0 {
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("hit")
                .arg(hitcount::model::event::encode(name, count, Some(ts as f64)));
        } else {
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("name")
                .arg(name)
                .arg("count")
                .arg(count)
                .arg("ts")
                .arg(ts);
        }
        pipe.ignore();
        sent.push((name.clone(), count, ts));
    }
    // Acknowledged and replicated: a failover must not lose these.
    pipe.cmd("WAIT").arg(1).arg(5000);
    let (replicas,): (i64,) = pipe.query_async(c).await.unwrap();
    assert!(replicas >= 1, "{stream} replicated");
    sent
}

/// Waits until every shard's group has read and acknowledged everything.
async fn wait_all_drained(c: &mut Conn, shards: &[Keys], workers: &mut [bin::Child]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        for w in workers.iter_mut() {
            w.assert_running();
        }
        let mut all = true;
        for k in shards {
            all &= crate::common::plain::drained(c, k).await.unwrap_or(false);
        }
        if all {
            return;
        }
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> = workers
                .iter()
                .map(|w| format!("--- {}\n{}", w.name(), w.stderr()))
                .collect();
            let mut state = String::new();
            for k in shards {
                let v: redis::Value = redis::cmd("XINFO")
                    .arg("GROUPS")
                    .arg(&k.stream)
                    .query_async(c)
                    .await
                    .unwrap_or(redis::Value::Nil);
                state.push_str(&format!("{}: {v:?}\n", k.stream));
            }
            panic!("not drained within 90 s\n{state}{}", logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every shard is drained, then stops each worker with SIGTERM:
/// each must exit 0 (its window applied, its names and leases released).
pub(crate) async fn drain_and_stop(c: &mut Conn, shards: &[Keys], workers: &mut [bin::Child]) {
    wait_all_drained(c, shards, workers).await;
    for w in workers.iter_mut() {
        assert_eq!(
            w.terminate(Duration::from_secs(25)).code(),
            Some(0),
            "{}",
            w.stderr()
        );
    }
}

/// Every counter's samples and `known:`, as the seeds' reader sees them.
/// Buckets near the oldest kept sample (120 per precision) are left out:
/// a bucket that aged out while the workers drained is partly counted.
pub(crate) async fn assert_exact(c: &mut Conn, sent: &[(String, i64, i64)]) {
    let keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
    let now = common::unix_now();
    let settled = |p: u32, t: i64| t > now - 120 * p as i64 + 60;
    let expected = common::reference(sent, &PRECISIONS);
    let got = common::read_all(c, &keys).await;
    // Every wrong bucket, so that a failure shows what was lost or doubled.
    let mut wrong = Vec::new();
    for ((p, n), buckets) in &expected {
        let mine = got.get(&(*p, n.clone())).cloned().unwrap_or_default();
        let times: BTreeSet<&i64> = buckets.keys().chain(mine.keys()).collect();
        for t in times.into_iter().filter(|t| settled(*p, **t)) {
            if mine.get(t) != buckets.get(t) {
                let (got, sent) = (mine.get(t), buckets.get(t));
                wrong.push(format!("count:{p}:{n} bucket {t}: {got:?}, sent {sent:?}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(40)]
    );
    let extra: BTreeSet<_> = got.keys().filter(|k| !expected.contains_key(k)).collect();
    assert!(extra.is_empty(), "counters nobody sent: {extra:?}");
}

/// Appends observations to `hits`, half plain, half MessagePack.
async fn send_values(c: &mut Conn, stream: &str, obs: &[common::stats::Obs]) {
    let mut pipe = redis::pipe();
    for (i, (name, count, ts, value)) in obs.iter().enumerate() {
        pipe.cmd("XADD").arg(stream).arg("*");
        if i % 2 == 0 {
            let packed =
                hitcount::model::event::encode_value(name, *count, Some(*ts as f64), Some(*value));
            pipe.arg("hit").arg(packed);
        } else {
            pipe.arg("name").arg(name).arg("count").arg(count);
            pipe.arg("ts").arg(ts).arg("value").arg(value.to_string());
        }
        pipe.ignore();
    }
    pipe.query_async::<()>(c).await.unwrap();
}

async fn dead_count(c: &mut Conn, stream: &str) -> usize {
    let v: redis::Value = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(c)
        .await
        .unwrap();
    crate::common::plain::entry_list(&v).len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_count_one_stream_exactly_once_on_a_cluster() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    let mut c = common::conn(&seeds).await;
    let names: Vec<String> = (0..300).map(|i| format!("page:{i}/ü {i}")).collect();
    let mut workers = start_workers(&seeds, 2, &[]);
    let mut sent = send(&mut c, "hits", &names, 6000, 1).await;
    // Bad entries: dead-lettered once, into the stream's slot.
    for _ in 0..3 {
        let _: String = redis::cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("hit")
            .arg("not msgpack")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    sent.extend(send(&mut c, "hits", &names, 4000, 2).await);
    let shards = Keys::all_shards(&LayoutArgs::default(), &StreamArgs::default(), true);
    drain_and_stop(&mut c, &shards, &mut workers).await;
    assert_exact(&mut c, &sent).await;
    assert_eq!(dead_count(&mut c, "hits:dead:{hits}").await, 3);
    // Spread over the cluster indeed: counters on every master.
    let masters: BTreeSet<u16> = names
        .iter()
        .map(|n| cluster.master_of(&format!("count:60:{n}")))
        .collect();
    assert_eq!(masters.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_give_exactly_the_reference_statistics_on_a_cluster() {
    use common::stats as st;
    use hitcount::model::stats::DEFAULT_QUANTILE_PRECISIONS;
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    let mut c = common::conn(&seeds).await;
    let mut workers = start_workers(&seeds, 2, &[]);
    let now = common::unix_now();
    let obs = st::observations(4000, 40, now, 11);
    send_values(&mut c, "hits", &obs).await;
    let shards = Keys::all_shards(&LayoutArgs::default(), &StreamArgs::default(), true);
    drain_and_stop(&mut c, &shards, &mut workers).await;
    let keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
    let (want, raw) = st::reference(
        &obs,
        &PRECISIONS,
        &DEFAULT_QUANTILE_PRECISIONS,
        st::kept(now),
    );
    let got = st::read(&mut c, &keys).await;
    st::assert_equal(&got, &want);
    assert!(st::assert_quantiles(&got, &raw) > 0);
    // Spread over the cluster: statistics hashes on every master.
    let masters: BTreeSet<u16> = want
        .keys()
        .map(|(p, n)| cluster.master_of(&keys.stats(*p, n)))
        .collect();
    assert_eq!(masters.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_share_eight_shards_exactly_once() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    let mut c = common::conn(&seeds).await;
    let stream = StreamArgs {
        shards: 8,
        ..StreamArgs::default()
    };
    let shards = Keys::all_shards(&LayoutArgs::default(), &stream, true);
    let names: Vec<String> = (0..200).map(|i| format!("n{i}")).collect();
    let mut workers = start_workers(&seeds, 3, &["--shards", "8"]);
    // Any shard: a plain producer may write anywhere.
    let mut sent = Vec::new();
    for (i, k) in shards.iter().enumerate() {
        sent.extend(send(&mut c, &k.stream, &names, 800, i as u64).await);
    }
    let _: String = redis::cmd("XADD")
        .arg(&shards[5].stream)
        .arg("*")
        .arg("name")
        .arg("")
        .query_async(&mut c)
        .await
        .unwrap();
    // The Rust producer (`hitcount load`) spreads by name.
    bin::run_ok(
        &seeds,
        &["load", "--hits", "3000", "--names", "50", "--shards", "8"],
    );
    drain_and_stop(&mut c, &shards, &mut workers).await;
    // Each worker reads its share: all 8 shards have a consumer.
    let mut used = 0;
    // Entries ever added, not XLEN: the leader trims what was read.
    for k in &shards {
        let info: std::collections::HashMap<String, redis::Value> = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(&k.stream)
            .query_async(&mut c)
            .await
            .unwrap();
        if !matches!(info.get("entries-added"), Some(redis::Value::Int(0)) | None) {
            used += 1;
        }
    }
    assert!(used >= 6, "load spread over the shards: {used}");
    // `load` hits are not in `sent`: compare the totals of every precision.
    let keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
    let got = common::read_all(&mut c, &keys).await;
    let expected = common::reference(&sent, &PRECISIONS);
    for ((p, n), buckets) in &expected {
        if *p < 3600 {
            continue; // spread over hours: only the coarse ones keep every bucket
        }
        let mine = &got[&(*p, n.clone())];
        assert_eq!(mine, buckets, "count:{p}:{n}");
    }
    let loaded: i64 = got
        .iter()
        .filter(|((p, n), _)| *p == 86400 && !n.starts_with('n'))
        .map(|(_, b)| b.values().sum::<i64>())
        .sum();
    assert_eq!(
        loaded, 3000,
        "every loaded hit counted once at the day precision"
    );
    assert_eq!(dead_count(&mut c, "hits:dead:{5}").await, 1);
}

/// Starts `n` workers, sends `per_shard` hits to every shard, runs `chaos`
/// once some counting is done, and checks every counter is exact.
async fn drain_through<F, Fut>(shards: u32, workers: usize, per_shard: usize, chaos: F)
where
    F: FnOnce(Cluster, Vec<bin::Child>) -> Fut,
    Fut: std::future::Future<Output = (Cluster, Vec<bin::Child>)>,
{
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    let mut c = common::conn(&seeds).await;
    let stream = StreamArgs {
        shards,
        ..StreamArgs::default()
    };
    let keys = Keys::all_shards(&LayoutArgs::default(), &stream, true);
    let names: Vec<String> = (0..400).map(|i| format!("p{i}")).collect();
    let mut sent = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        for part in 0..per_shard / 2000 {
            sent.extend(send(&mut c, &k.stream, &names, 2000, (i * 1000 + part) as u64).await);
        }
    }
    let shards_flag = shards.to_string();
    let workers = start_workers(
        &seeds,
        workers,
        &[
            "--shards",
            &shards_flag,
            "--claim-idle-ms",
            "2000",
            "--window-entries",
            "2000",
        ],
    );
    some_counted(&mut c).await;
    let (cluster, mut workers) = chaos(cluster, workers).await;
    let mut c = common::conn(&cluster.seed_url()).await;
    drain_and_stop(&mut c, &keys, &mut workers).await;
    // Every hit sent is valid: none may be dead-lettered, whatever failed.
    for k in &keys {
        let dead: redis::Value = redis::cmd("XRANGE")
            .arg(&k.dead)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(3)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(
            dead_count(&mut c, &k.dead).await,
            0,
            "valid hits dead-lettered into {}, the first: {dead:?}",
            k.dead
        );
    }
    // Shown only when the test fails: what the workers warned of.
    for w in &workers {
        for line in w.stderr().lines().filter(|l| !l.contains(" INFO ")) {
            eprintln!("{}: {line}", w.name());
        }
    }
    assert_exact(&mut c, &sent).await;
}

/// [`drain_through`] with the master serving `key` SIGKILLed mid-drain.
async fn master_dies_mid_drain(shards: u32, per_shard: usize, key: &'static str) {
    drain_through(shards, 2, per_shard, move |cluster, workers| async move {
        let took = cluster.kill_master_of(key).await;
        eprintln!("failover of {key}'s master took {took:?}");
        (cluster, workers)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_of_known_dies_mid_drain_and_every_hit_counts_once() {
    master_dies_mid_drain(1, 30_000, "known:").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_of_stream_shards_dies_mid_drain_and_every_hit_counts_once() {
    master_dies_mid_drain(4, 8_000, "hits:{1}").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_slots_migrate_mid_drain_and_every_hit_counts_once() {
    drain_through(2, 2, 10_000, |cluster, workers| async move {
        // Slots of busy counters move to another master, half-moved for a
        // while (ASK redirects, TRYAGAIN for scripts spanning both sides).
        for name in ["count:60:p1", "count:3600:p2", "count:86400:p3", "known:"] {
            move_slot_slowly(&cluster, name).await;
        }
        (cluster, workers)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_come_and_go_and_the_shards_follow() {
    drain_through(8, 3, 4_000, |cluster, mut workers| async move {
        let seeds = cluster.seed_url();
        let extra = [
            "--shards",
            "8",
            "--claim-idle-ms",
            "2000",
            "--window-entries",
            "2000",
        ];
        // A SIGKILL, a clean stop, and new workers joining.
        workers[0].kill();
        workers.remove(0);
        tokio::time::sleep(Duration::from_millis(500)).await;
        workers.extend(start_workers(&seeds, 1, &extra));
        assert_eq!(
            workers[0].terminate(Duration::from_secs(25)).code(),
            Some(0)
        );
        workers.remove(0);
        workers.extend(start_workers(&seeds, 2, &extra));
        // Four live workers (C, D and the two new ones) share the eight
        // shards: two each.
        let mut c = common::conn(&seeds).await;
        let stream = StreamArgs {
            shards: 8,
            ..StreamArgs::default()
        };
        let keys = Keys::all_shards(&LayoutArgs::default(), &stream, true);
        let mut seen = String::new();
        eventually!(
            90,
            format!("the shards are shared out; last seen {seen}"),
            {
                let mut owners = std::collections::BTreeMap::<String, usize>::new();
                for k in &keys {
                    let owner: Option<String> = redis::cmd("GET")
                        .arg(k.shard_lease())
                        .query_async(&mut c)
                        .await
                        .unwrap_or(None);
                    if let Some(o) = owner {
                        *owners
                            .entry(o.rsplit_once('/').unwrap().0.to_string())
                            .or_default() += 1;
                    }
                }
                seen.clear();
                seen.push_str(&format!("{owners:?}"));
                owners.len() == 4 && owners.values().all(|&n| n == 2)
            }
        );
        (cluster, workers)
    })
    .await;
}

/// A master left without a replica: each window step waits at most 100 ms
/// for one, counting goes on exactly, and the worker says so (metric,
/// `/readyz` detail) while staying ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_without_a_replica_slows_counting_but_never_stops_it() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    let master = cluster.master_of("hits");
    for replica in cluster.replicas_of(master) {
        cluster.kill(replica);
    }
    let mut c = common::conn(&seeds).await;
    let listen = bin::free_addr();
    let mut worker = bin::Child::spawn(
        "worker",
        bin::default_worker(&seeds, &listen, &["--block-ms", "200"]),
    );
    let names: Vec<String> = (0..50).map(|i| format!("r{i}")).collect();
    let mut sent = Vec::new();
    for part in 0..3 {
        // The stream's master has no replica to confirm the XADDs: no WAIT.
        sent.extend(send_unconfirmed(&mut c, &names).await);
        tokio::time::sleep(Duration::from_millis(100 * part)).await;
    }
    let shards = Keys::all_shards(&LayoutArgs::default(), &StreamArgs::default(), true);
    wait_all_drained(&mut c, &shards, std::slice::from_mut(&mut worker)).await;
    assert_exact(&mut c, &sent).await;
    let (status, body) = bin::http_get(&listen, "/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("confirmed no replica"), "{body}");
    let (_, metrics) = bin::http_get(&listen, "/metrics").unwrap();
    let unconfirmed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hitcount_replication_unconfirmed_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(unconfirmed >= 1.0, "{metrics}");
    assert_eq!(worker.terminate(Duration::from_secs(25)).code(), Some(0));
}

/// One plain hit of each name to `hits`, at the last seconds, without
/// waiting for a replica to hold them.
async fn send_unconfirmed(c: &mut Conn, names: &[String]) -> Vec<(String, i64, i64)> {
    let mut pipe = redis::pipe();
    let mut sent = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let ts = common::unix_now() - (i as i64 % 50);
        pipe.cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("name")
            .arg(n)
            .arg("ts")
            .arg(ts)
            .ignore();
        sent.push((n.clone(), 1, ts));
    }
    pipe.query_async::<()>(c).await.unwrap();
    sent
}

/// A replica merely behind (paused a moment, still attached) is waited
/// for: no step goes on unconfirmed, since a failover before the replica
/// holds a step would lose its writes; every hit counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_behind_is_waited_for_not_skipped() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    // The replica of the master that holds the stream, its commits and
    // (here) some of the counters.
    let replica = cluster.replicas_of(cluster.master_of("hits"))[0];
    let at = cluster.ports().iter().position(|&p| p == replica).unwrap();
    let pid = cluster.pids()[at] as libc::pid_t;
    let mut c = common::conn(&seeds).await;
    let listen = bin::free_addr();
    let mut worker = bin::Child::spawn(
        "worker",
        bin::default_worker(&seeds, &listen, &["--block-ms", "200"]),
    );
    let names: Vec<String> = (0..50).map(|i| format!("b{i}")).collect();
    let mut sent = send(&mut c, "hits", &names, 200, 1).await;
    let shards = Keys::all_shards(&LayoutArgs::default(), &StreamArgs::default(), true);
    wait_all_drained(&mut c, &shards, std::slice::from_mut(&mut worker)).await;
    // Paused, the replica stays attached but confirms nothing for 600 ms,
    // while the worker counts more hits (sent without WAIT: the replica
    // cannot confirm them either).
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    sent.extend(send_unconfirmed(&mut c, &names).await);
    tokio::time::sleep(Duration::from_millis(600)).await;
    unsafe { libc::kill(pid, libc::SIGCONT) };
    wait_all_drained(&mut c, &shards, std::slice::from_mut(&mut worker)).await;
    assert_exact(&mut c, &sent).await;
    let (_, metrics) = bin::http_get(&listen, "/metrics").unwrap();
    let unconfirmed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hitcount_replication_unconfirmed_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert_eq!(unconfirmed, Some(0.0), "{}", worker.stderr());
    assert_eq!(worker.terminate(Duration::from_secs(25)).code(), Some(0));
}

/// A plain connection to one node (not routed through the cluster).
async fn node_conn(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Waits until the workers counted some hits (`known:` has a member).
async fn some_counted(c: &mut Conn) {
    eventually!(60, "some hits counted", {
        let n: i64 = redis::cmd("ZCARD")
            .arg("known:")
            .query_async(c)
            .await
            .unwrap_or(0);
        n > 0
    });
}

/// Moves the slot of `key` live to another master one key per 20 ms, so
/// that it stays half-moved (ASK redirects, TRYAGAIN for scripts spanning
/// both sides) while the slot holds keys; how many keys moved.
async fn move_slot_slowly(cluster: &Cluster, key: &str) -> usize {
    let slot = cluster.slot_of(key);
    let from = cluster.owner_of(slot);
    let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();
    let moved = cluster
        .migrate_slot_paced(slot, to, 1, Duration::from_millis(20))
        .await;
    eprintln!("slot {slot} ({key}): {moved} keys moved {from} -> {to}");
    moved
}

/// The user `name` with the rules of `deploy/redis/FILE` and `more` on
/// every node (ACLs are not shared: masters and replicas, each on a
/// connection of its own); the URL of the masters as that user.
async fn user_on_every_node(cluster: &Cluster, name: &str, file: &str, more: &str) -> String {
    let path = format!("{}/deploy/redis/{file}", env!("CARGO_MANIFEST_DIR"));
    let rules = std::fs::read_to_string(path).unwrap();
    for port in cluster.ports() {
        let mut node = node_conn(port).await;
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg(name)
            .arg("reset")
            .arg("on")
            .arg(">acl-pw");
        for rule in rules.split_whitespace().chain(more.split_whitespace()) {
            cmd.arg(rule);
        }
        let _: () = cmd.query_async(&mut node).await.unwrap();
    }
    cluster
        .masters()
        .iter()
        .map(|p| format!("redis://{name}:acl-pw@127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Least privilege on a cluster: workers over shards run as the user of
/// `deploy/redis/hitcount.acl` while slots move (a counter's, `known:`'s
/// and a shard's, each half-moved for a while: ASK redirects, which need
/// `ASKING`), every hit counts once, and no node's ACL LOG shows a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_on_a_cluster_as_the_least_privileged_user() {
    let cluster = Cluster::start();
    let user_url = user_on_every_node(&cluster, "hitcount", "hitcount.acl", "").await;
    let mut c = common::conn(&cluster.seed_url()).await;
    let stream = StreamArgs {
        shards: 4,
        ..StreamArgs::default()
    };
    let shards = Keys::all_shards(&LayoutArgs::default(), &stream, true);
    let names: Vec<String> = (0..100).map(|i| format!("acl{i}")).collect();
    let mut sent = Vec::new();
    for (i, k) in shards.iter().enumerate() {
        sent.extend(send(&mut c, &k.stream, &names, 1000, i as u64).await);
    }
    let mut workers = start_workers(&user_url, 2, &["--shards", "4"]);
    some_counted(&mut c).await;
    for name in ["count:60:acl1", "known:", "hits:{1}"] {
        move_slot_slowly(&cluster, name).await;
    }
    drain_and_stop(&mut c, &shards, &mut workers).await;
    assert_exact(&mut c, &sent).await;
    for port in cluster.ports() {
        let mut node = node_conn(port).await;
        crate::common::assert_nothing_refused(&mut node, &format!("node {port}")).await;
    }
    // A moving slot is no outage: the worker tries again within a second,
    // saying nothing above debug (it logged "Redis unavailable" and backed
    // off for up to five seconds), nor does the client library (about
    // eight WARN lines a try, "beginning slot refresh").
    for w in &workers {
        let log = w.stderr();
        assert!(!log.contains("Redis unavailable"), "{log}");
        assert!(!log.contains("slot refresh"), "{log}");
    }
}

/// ingest on a cluster as the user of `deploy/redis/ingest.acl`, with what
/// a cluster adds, while the stream's slot moves: the stream moves first
/// (the slot's newest key), then a hundred older keys one at a time, so
/// that hits are sent to a stream on the importing side (ASK redirects,
/// which need `ASKING`): every request is taken (202), the stream holds
/// every hit, and no node's ACL LOG shows a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_runs_as_its_user_while_the_streams_slot_moves() {
    let cluster = Cluster::start();
    // What docs/operations.md says a cluster adds to ingest's rules.
    let user_url = user_on_every_node(&cluster, "ingest", "ingest.acl", "+cluster|slots").await;
    let mut c = common::conn(&cluster.seed_url()).await;
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("{{hits}}:pad:{i}"))
            .arg(i)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let (mut ingest, addr) = bin::start_ingest(&user_url, &[]);
    let post = |addr: &str, body: &str| bin::post_hits(addr, "application/json", &[], body).0;
    assert_eq!(post(&addr, r#"[{"name":"mv"}]"#), 202);
    let during = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            (0..40)
                .map(|_| {
                    std::thread::sleep(Duration::from_millis(40));
                    post(&addr, r#"[{"name":"mv"}]"#)
                })
                .collect::<Vec<u16>>()
        })
    };
    let moved = move_slot_slowly(&cluster, "hits").await;
    let statuses = during.join().unwrap();
    assert!(moved > 100, "{moved} keys moved");
    assert!(statuses.iter().all(|s| *s == 202), "{statuses:?}");
    let entries: u64 = redis::cmd("XLEN")
        .arg("hits")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(entries, 41);
    for port in cluster.ports() {
        let mut node = node_conn(port).await;
        crate::common::assert_nothing_refused(&mut node, &format!("node {port}")).await;
    }
    assert!(ingest.terminate(Duration::from_secs(20)).success());
}

/// A worker paused past its shard leases and the claim time, and every
/// client connection on every master killed mid-drain: nothing is counted
/// twice or lost (the paused worker's windows are fenced when it wakes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_and_killed_connections_count_every_hit_once() {
    drain_through(4, 3, 6_000, |cluster, workers| async move {
        workers[0].signal(libc::SIGSTOP);
        for port in cluster.masters() {
            let mut node = node_conn(port).await;
            let _: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .query_async(&mut node)
                .await
                .unwrap();
        }
        // Past the shard lease (10 s) and the claim time (2 s).
        tokio::time::sleep(Duration::from_secs(12)).await;
        workers[0].signal(libc::SIGCONT);
        (cluster, workers)
    })
    .await;
}

/// The carry on a cluster: workers behind on four shards sum their windows'
/// cells per shard and apply the sums slot by slot. Workers SIGKILLed while
/// windows wait in their carry, or while a sum is being applied, lose and
/// double nothing: a survivor finishes their records (each cell through its
/// window or through the recorded sum, never both, though a window's
/// applied markers are in other slots than its record) and claims their
/// entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_while_carrying_on_a_cluster_count_every_hit_once() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    let mut c = common::conn(&seeds).await;
    let stream = StreamArgs {
        shards: 4,
        ..StreamArgs::default()
    };
    let shards = Keys::all_shards(&LayoutArgs::default(), &stream, true);
    let names: Vec<String> = (0..3000).map(|i| format!("c{i}")).collect();
    let mut sent = Vec::new();
    // Values too: each shard's carries record their statistics, applied
    // after the group's counts, and recovered alike.
    let now = common::unix_now();
    let mut observed = Vec::new();
    for (i, k) in shards.iter().enumerate() {
        for part in 0..5 {
            sent.extend(send(&mut c, &k.stream, &names, 2000, (i * 100 + part) as u64).await);
        }
        let obs = common::stats::observations(3000, 300, now, 40 + i as u64);
        send_values(&mut c, &k.stream, &obs).await;
        observed.extend(obs);
    }
    let args = [
        "--shards",
        "4",
        "--read-count",
        "200",
        "--window-entries",
        "1000",
        "--claim-idle-ms",
        "1000",
    ];
    let killed_after_a_carry = common::kill_after_carries(
        &mut c,
        async |c| {
            let mut drained = true;
            for k in &shards {
                drained &= crate::common::plain::drained(c, k).await.unwrap();
            }
            drained
        },
        |round, listen| {
            let mut cmd = bin::default_worker(&seeds, listen, &["--block-ms", "200"]);
            cmd.args(args);
            bin::Child::spawn(&format!("killed-{round}"), cmd)
        },
    )
    .await;
    assert!(
        killed_after_a_carry > 0,
        "the backlog drained before any kill"
    );

    let mut survivor = start_workers(&seeds, 1, &args);
    wait_all_drained(&mut c, &shards, &mut survivor).await;
    // The stopped workers' records (windows and sums) are all finished.
    eventually!(60, "no window record left", {
        let mut records = 0i64;
        for k in &shards {
            let n: i64 = redis::cmd("ZCARD")
                .arg(k.windows())
                .query_async(&mut c)
                .await
                .unwrap();
            records += n;
        }
        records == 0
    });
    drain_and_stop(&mut c, &shards, &mut survivor).await;
    // The valued hits' counts are checked with their statistics.
    sent.extend(
        observed
            .iter()
            .map(|(n, count, ts, _)| (n.clone(), *count, *ts)),
    );
    assert_exact(&mut c, &sent).await;
    let (want, raw) = common::stats::reference(
        &observed,
        &PRECISIONS,
        &hitcount::model::stats::DEFAULT_QUANTILE_PRECISIONS,
        common::stats::kept(now),
    );
    let keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
    let got = common::stats::read(&mut c, &keys).await;
    common::stats::assert_equal(&got, &want);
    assert!(common::stats::assert_quantiles(&got, &raw) > 0);
    for k in &shards {
        assert_eq!(dead_count(&mut c, &k.dead).await, 0, "{}", k.dead);
    }
}

/// The hits a day counter holds.
async fn day_total(c: &mut Conn, name: &str) -> i64 {
    let v: Vec<i64> = redis::cmd("HVALS")
        .arg(format!("count:86400:{name}"))
        .query_async(c)
        .await
        .unwrap();
    v.iter().sum()
}

/// Sends one hit of `name` to `stream` and returns how long until its day
/// counter (a precision that goes through the carry) holds it.
async fn counted_after(
    c: &mut Conn,
    stream: &str,
    name: &str,
    workers: &mut [bin::Child],
) -> Duration {
    let sent = std::time::Instant::now();
    let _: String = redis::cmd("XADD")
        .arg(stream)
        .arg("*")
        .arg("name")
        .arg(name)
        .arg("count")
        .arg(1)
        .query_async(c)
        .await
        .unwrap();
    while day_total(c, name).await < 1 {
        for w in workers.iter_mut() {
            w.assert_running();
        }
        assert!(
            sent.elapsed() < Duration::from_secs(60),
            "{name} not counted within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sent.elapsed()
}

/// On a cluster with shards a worker's carries wait for their group only
/// while one of its shards is behind: with every shard at its head a hit is
/// counted at once, well before a long `--carry-ms`; with one shard far
/// behind, a hit on another is still counted within the bound stated for a
/// worker behind (`--carry-ms` + a window + the sum's apply), long before
/// that shard is read to its end, and the backlog is counted exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_at_their_heads_count_at_once_and_within_the_bound_while_one_is_behind() {
    let _alone = common::exclusive().await;
    const LONG_CARRY_MS: u64 = 5000;
    const CARRY_MS: u64 = 1000;
    // Enough that shard 0 is still behind when the hit beside it is
    // counted, with dependencies optimized (400,000 were read in 1.25 s).
    const BACKLOG: usize = 1_200_000;
    let cluster = Cluster::start_with(3, 0);
    let url = cluster.seed_url();
    let mut c = common::conn(&url).await;
    let stream = StreamArgs {
        shards: 4,
        ..StreamArgs::default()
    };
    let shards = Keys::all_shards(&LayoutArgs::default(), &stream, true);
    let args = |carry_ms: u64| {
        [
            "--shards",
            "4",
            "--wait-replicas",
            "0",
            "--carry-ms",
            &carry_ms.to_string(),
        ]
        .map(String::from)
    };

    let mut workers = start_workers(&url, 1, &args(LONG_CARRY_MS).each_ref().map(String::as_str));
    counted_after(&mut c, &shards[0].stream, "ready", &mut workers).await;
    for (k, s) in shards.iter().enumerate() {
        let took = counted_after(&mut c, &s.stream, &format!("head{k}"), &mut workers).await;
        assert!(
            took < Duration::from_millis(LONG_CARRY_MS / 2),
            "shard {k}: counted after {took:?} with every shard at its head; \
             a carry there must not wait --carry-ms ({LONG_CARRY_MS} ms)"
        );
    }
    drain_and_stop(&mut c, &shards, &mut workers).await;

    // A backlog on shard 0 only, there before a worker starts.
    let names: Vec<String> = (0..1000).map(|i| format!("b{i}")).collect();
    for part in names.chunks(10).cycle().take(BACKLOG / 1000) {
        let mut pipe = redis::pipe();
        for _ in 0..100 {
            for n in part {
                pipe.cmd("XADD")
                    .arg(&shards[0].stream)
                    .arg("*")
                    .arg("name")
                    .arg(n)
                    .arg("count")
                    .arg(1)
                    .ignore();
            }
        }
        pipe.query_async::<()>(&mut c).await.unwrap();
    }
    let unread = async |c: &mut Conn| {
        use crate::common::plain::{info_fields, info_number, info_text};
        let groups: redis::Value = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&shards[0].stream)
            .query_async(c)
            .await
            .unwrap();
        let redis::Value::Array(groups) = groups else {
            return 0;
        };
        groups
            .iter()
            .map(info_fields)
            .find(|g| info_text(g, "name").as_deref() == Some(shards[0].group.as_str()))
            .and_then(|g| info_number(&g, "lag"))
            .unwrap_or(0)
    };
    let listen = bin::free_addr();
    let mut cmd = bin::default_worker(&url, &listen, &["--block-ms", "200"]);
    cmd.args(args(CARRY_MS));
    let mut workers = vec![bin::Child::spawn("worker-behind", cmd)];
    let reading = std::time::Instant::now();
    while unread(&mut c).await >= BACKLOG as u64 {
        assert!(
            reading.elapsed() < Duration::from_secs(60),
            "shard 0 never read"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = counted_after(&mut c, &shards[1].stream, "beside", &mut workers).await;
    let left = unread(&mut c).await;
    let bound = Duration::from_millis(CARRY_MS + 1000 + 3000);
    assert!(
        took < bound + Duration::from_secs(4),
        "counted after {took:?} beside a shard behind; stated bound {bound:?}"
    );
    assert!(
        left > 0,
        "shard 0 was read to its end before the hit beside it was counted \
         ({took:?}): it must not wait for that"
    );
    wait_all_drained(&mut c, &shards, &mut workers).await;
    // The groups it applied, and their cells, are in its metrics.
    let (status, metrics) = bin::http_get(&listen, "/metrics").expect("metrics");
    assert_eq!(status, 200);
    let value = |series: &str| -> f64 {
        bin::metric_value(&metrics, series).unwrap_or_else(|| panic!("{series} in\n{metrics}"))
    };
    let groups = value("hitcount_carry_groups_total");
    let cells = value("hitcount_carry_cells_total");
    assert!(
        groups >= 1.0 && cells >= groups,
        "{groups} groups, {cells} cells"
    );
    drain_and_stop(&mut c, &shards, &mut workers).await;
    let mut total = 0;
    for n in &names {
        total += day_total(&mut c, n).await;
    }
    assert_eq!(total, BACKLOG as i64, "the backlog counted exactly once");
}
