//! The test harness: a real redis-server per test on a free port, workers run
//! in-process or as the real binary, and the reference algorithm of the seeds.
#![allow(dead_code)]

pub mod bin;
pub mod cluster;
pub mod stats;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hitcount::model::config::{LayoutArgs, RedisArgs, StreamArgs, WorkerArgs};
use hitcount::model::keys::Keys;
use hitcount::model::shutdown::{self, Trigger};
use hitcount::service::worker::Settings;
use hitcount::store::connect::Conn;
use hitcount_lab::kit::{RedisServer, ServerOptions};

/// A cleaner holding the leader lease (10 minutes) on `c`, scripts loaded.
pub async fn cleaning_leader(
    c: &mut Conn,
    keys: &Keys,
) -> (
    hitcount::service::cleaner::Cleaner,
    Arc<hitcount::service::leader::Lease>,
) {
    hitcount::store::scripts::load_all(c).await.unwrap();
    let lease = Arc::new(hitcount::service::leader::Lease::new(
        keys,
        &hitcount::model::config::LeaderArgs {
            lease_ms: 600_000,
            ..Default::default()
        },
        "test",
    ));
    assert!(lease.try_acquire(c).await.unwrap());
    let cleaner = hitcount::service::cleaner::Cleaner::new(
        keys.clone(),
        &LayoutArgs::default(),
        lease.clone(),
    );
    (cleaner, lease)
}

/// A throwaway server with the SLOWLOG armed at 10 ms.
pub fn server() -> RedisServer {
    server_with(ServerOptions::default())
}

pub fn server_with(mut opts: ServerOptions) -> RedisServer {
    opts.extra.push("slowlog-log-slower-than 10000".into());
    RedisServer::start(opts).expect("starting redis-server")
}

/// A server for SLOWLOG checks: its command thread runs at a higher CPU
/// priority than the test's own (debug-built) workers and producer, which
/// share this machine's two cores with it. SLOWLOG counts wall time, so
/// without this a Redis merely waiting for a core behind the test's client
/// would show time that is not the command's. Needs root (as CI runs);
/// elsewhere the server keeps the default priority and says so.
pub fn slowlog_server_with(opts: ServerOptions) -> RedisServer {
    let srv = server_with(opts);
    if !srv.raise_priority(-10) {
        eprintln!("note: could not raise redis-server's priority (not root); SLOWLOG may show CPU contention");
    }
    srv
}

/// [`slowlog_server_with`] default options.
pub fn slowlog_server() -> RedisServer {
    slowlog_server_with(ServerOptions::default())
}

/// A connection as hitcount opens them (one node, or a cluster when the
/// server is one).
pub async fn conn(url: &str) -> Conn {
    let client = hitcount::store::connect::client(&RedisArgs::from_url(url)).unwrap();
    client.open(Duration::from_secs(10)).await.unwrap()
}

/// Settings for a worker on `url` with fast claims for tests.
pub fn settings(url: &str, consumer: &str) -> Settings {
    Settings {
        redis: RedisArgs::from_url(url),
        layout: LayoutArgs::default(),
        stream: StreamArgs::default(),
        worker: WorkerArgs {
            consumer: Some(consumer.into()),
            block_ms: 200,
            ..WorkerArgs::default()
        },
    }
}

pub fn keys(s: &Settings) -> Keys {
    Keys::new(&s.layout, &s.stream)
}

/// In-process workers that stop when dropped.
pub struct Workers {
    trigger: Trigger,
    handles: Vec<tokio::task::JoinHandle<Result<(), hitcount::model::config::ConfigError>>>,
}

impl Workers {
    pub fn start(all: Vec<Settings>) -> Workers {
        let (trigger, shutdown) = shutdown::channel();
        let handles = all
            .into_iter()
            .map(|s| {
                let health = hitcount::service::health::Health::new(Duration::from_secs(60));
                tokio::spawn(hitcount::service::shards::run(s, health, shutdown.clone()))
            })
            .collect();
        Workers { trigger, handles }
    }

    pub async fn stop(self) {
        self.trigger.trigger();
        for h in self.handles {
            h.await.unwrap().unwrap();
        }
    }
}

/// Waits until the group has read and acknowledged the whole stream.
pub async fn wait_drained(conn: &mut Conn, keys: &Keys) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !hitcount::store::group::drained(conn, keys).await.unwrap() {
        assert!(Instant::now() < deadline, "stream not drained within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The seeds' update_counter, as increments: (precision, name) -> bucket -> count.
pub type Counts = BTreeMap<(u32, String), BTreeMap<i64, i64>>;

pub fn reference(hits: &[(String, i64, i64)], precisions: &[u32]) -> Counts {
    let mut out = Counts::new();
    for (name, count, ts) in hits {
        for &p in precisions {
            let bucket = ts.div_euclid(p as i64) * p as i64;
            *out.entry((p, name.clone()))
                .or_default()
                .entry(bucket)
                .or_default() += count;
        }
    }
    out
}

/// Every member of a ZSET, in order (`known:`, the window records' list).
pub async fn zset_members(conn: &mut Conn, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap()
}

/// Every counter in Redis under the layout, read as the seeds read them.
pub async fn read_all(conn: &mut Conn, keys: &Keys) -> Counts {
    let members = zset_members(conn, &keys.known()).await;
    let mut out = Counts::new();
    for m in members {
        let (p, name) = m.split_once(':').unwrap();
        let p: u32 = p.parse().unwrap();
        let samples = hitcount::store::counters::read(conn, keys, p, name)
            .await
            .unwrap();
        out.insert(
            (p, name.to_string()),
            samples.iter().map(|s| (s.time, s.count)).collect(),
        );
    }
    out
}

/// Empties the SLOWLOG.
pub async fn slowlog_reset(conn: &mut Conn) {
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async::<()>(conn)
        .await
        .unwrap();
}

/// SLOWLOG entries (commands over the 10 ms threshold armed by [`server`]),
/// each as its duration in µs and the command's first five words.
pub async fn slowlog(conn: &mut Conn) -> Vec<String> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query_async(conn)
        .await
        .unwrap();
    entries
        .iter()
        .map(|e| match e {
            redis::Value::Array(e) if e.len() > 3 => match &e[3] {
                redis::Value::Array(cmd) => {
                    format!("{:?} µs {:?}", e[2], &cmd[..cmd.len().min(5)])
                }
                other => format!("{e:?} {other:?}"),
            },
            other => format!("{other:?}"),
        })
        .collect()
}

/// The SLOWLOG policy of every test that checks it. This VM stalls now and
/// then for up to ~25 ms by itself (`redis-cli --intrinsic-latency` on an
/// idle machine), and SLOWLOG times wall clock, so a stall can land in any
/// single command. A command too big is slow on every run, a stall is not:
/// `scenario` runs up to `attempts` times, each on a fresh server it starts
/// itself, returning that server's [`slowlog`], and must come out empty
/// once. Every failed attempt's entries are printed.
pub async fn slowlog_clean_in_one_of<F, Fut>(attempts: usize, mut scenario: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    for attempt in 1..=attempts {
        let slow = scenario().await;
        if slow.is_empty() {
            return;
        }
        eprintln!("SLOWLOG attempt {attempt} of {attempts}: commands over 10 ms: {slow:#?}");
    }
    panic!("the SLOWLOG was not empty in any of {attempts} runs (entries above)");
}

/// How many fresh runs a SLOWLOG check gets (see [`slowlog_clean_in_one_of`]).
pub const SLOWLOG_ATTEMPTS: usize = 3;

pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub fn health() -> Arc<hitcount::service::health::Health> {
    hitcount::service::health::Health::new(Duration::from_secs(60))
}

/// Consumers of the group `hitcount` on `hits`, by name.
pub async fn consumers(conn: &mut Conn) -> Vec<String> {
    let v: redis::Value = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg("hits")
        .arg("hitcount")
        .query_async(conn)
        .await
        .unwrap();
    hitcount::store::group::ConsumerInfo::parse_all(&v)
        .into_iter()
        .map(|c| c.name)
        .collect()
}

/// Entries pending in the group (XPENDING summary count).
pub async fn pending(conn: &mut Conn) -> i64 {
    let v: redis::Value = redis::cmd("XPENDING")
        .arg("hits")
        .arg("hitcount")
        .query_async(conn)
        .await
        .unwrap();
    match v {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::Int(n)) => *n,
            _ => 0,
        },
        _ => 0,
    }
}

/// The dead-letter stream's entries as field maps (last value wins).
/// A producer with default settings on `url`'s stream `hits`.
pub fn producer(url: &str) -> hitcount::service::producer::Producer {
    hitcount::service::producer::Producer::start(
        &RedisArgs::from_url(url),
        &StreamArgs::default(),
        hitcount::service::producer::ProducerOptions::default(),
    )
    .unwrap()
}

/// Kills every normal client connection but this one (`CLIENT KILL` skips
/// the caller); returns how many.
pub async fn kill_clients(conn: &mut Conn) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(conn)
        .await
        .unwrap()
}

/// The dead-letter stream's entries as field maps, oldest first.
pub async fn dead_letters(conn: &mut Conn) -> Vec<BTreeMap<String, String>> {
    let v: redis::Value = redis::cmd("XRANGE")
        .arg("hits:dead")
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .unwrap();
    hitcount::store::stream::entry_list(&v)
        .iter()
        .map(|e| {
            e.pairs()
                .map(|(f, v)| {
                    (
                        String::from_utf8_lossy(f).into_owned(),
                        String::from_utf8_lossy(v).into_owned(),
                    )
                })
                .collect()
        })
        .collect()
}

/// Appends `n` hits of `name` at `ts` in the MessagePack form; returns them
/// for the reference.
pub async fn xadd_hits(c: &mut Conn, name: &str, n: usize, ts: i64) -> Vec<(String, i64, i64)> {
    let mut pipe = redis::pipe();
    for _ in 0..n {
        pipe.cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("hit")
            .arg(hitcount::model::event::encode(name, 1, Some(ts as f64)))
            .ignore();
    }
    pipe.query_async::<()>(c).await.unwrap();
    vec![(name.to_string(), 1, ts); n]
}

/// Reads up to `count` new entries of `hits` as `consumer` of `group`,
/// leaving them pending; returns their ids.
pub async fn read_new(c: &mut Conn, group: &str, consumer: &str, count: usize) -> Vec<String> {
    let reply: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(group)
        .arg(consumer)
        .arg("COUNT")
        .arg(count)
        .arg("STREAMS")
        .arg("hits")
        .arg(">")
        .query_async(c)
        .await
        .unwrap();
    hitcount::store::stream::read_reply_entries(&reply)
        .iter()
        .map(|e| e.id_str().to_string())
        .collect()
}

/// Pending entries of one consumer.
pub async fn pending_of(c: &mut Conn, consumer: &str) -> usize {
    let v: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg("hits")
        .arg("hitcount")
        .arg("-")
        .arg("+")
        .arg(100_000)
        .arg(consumer)
        .query_async(c)
        .await
        .unwrap_or_default();
    v.len()
}

/// Held by the tests that measure wall time (SLOWLOG, visibility and
/// failover bounds) or load the machine (chaos, millions of entries): the
/// tests of a binary run side by side, two at a time on two cores, and no two
/// of these may overlap, or one would measure the other. The others run
/// beside them, as they ran beside each other when each file was a binary.
pub static EXCLUSIVE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits for [`EXCLUSIVE`] and holds it until the guard drops: first thing
/// in such a test, `let _alone = exclusive().await;`.
pub async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    EXCLUSIVE.lock().await
}

/// The exit code of a worker asked to stop, waiting at most 25 s.
pub fn exit_code(w: &mut bin::Child) -> Option<i32> {
    w.wait(Duration::from_secs(25)).and_then(|s| s.code())
}

/// Polls `check` every 50 ms until it holds, failing after `secs`.
#[macro_export]
macro_rules! eventually {
    ($secs:expr, $what:expr, $check:expr) => {{
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs($secs);
        loop {
            if $check {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not within {} s: {}",
                $secs,
                $what
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }};
}

/// Calls of `command` (lower case) in an `INFO commandstats` reply.
pub fn command_calls(commandstats: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    commandstats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Starts a worker (`start(round)`) up to three times while `drained` says
/// the backlog is not, and SIGKILLs each some tens of ms after `carries`
/// grew (a carry was recorded): the kill lands while the sum is applied or
/// with the next windows waiting. Both look through `conn`. Returns how
/// many were killed.
pub async fn kill_after_carries<C>(
    conn: &mut C,
    mut drained: impl AsyncFnMut(&mut C) -> bool,
    mut carries: impl AsyncFnMut(&mut C) -> u64,
    mut start: impl FnMut(u64) -> bin::Child,
) -> usize {
    let mut killed = 0;
    for round in 0..3u64 {
        if drained(conn).await {
            break;
        }
        let before = carries(conn).await;
        let mut w = start(round);
        let deadline = Instant::now() + Duration::from_secs(60);
        while carries(conn).await == before {
            w.assert_running();
            assert!(Instant::now() < deadline, "no carry recorded in 60 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(round * 40)).await;
        w.kill();
        killed += 1;
    }
    killed
}
