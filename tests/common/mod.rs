//! The test harness: a real redis-server per test on a free port, workers run
//! in-process or as the real binary, and the reference algorithm of the seeds.
#![allow(dead_code)]

pub mod bin;
pub mod cluster;
pub mod counts;
pub mod plain;
pub mod prometheus;
pub mod slowlog;
pub mod stats;
pub mod workers;

#[allow(unused_imports)]
pub use counts::*;
#[allow(unused_imports)]
pub use slowlog::*;
#[allow(unused_imports)]
pub use workers::*;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hitcount::model::config::{RedisArgs, StreamArgs};
use hitcount::store::connect::Conn;
use hitcount_lab::kit::{RedisServer, ServerOptions};

/// The ACL LOG of the server `admin` is connected to: every command a
/// user was denied since the last [`acl_log_reset`].
pub async fn acl_log(admin: &mut Conn) -> Vec<redis::Value> {
    redis::cmd("ACL")
        .arg("LOG")
        .query_async(admin)
        .await
        .unwrap()
}

/// Empties the ACL LOG.
pub async fn acl_log_reset(admin: &mut Conn) {
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query_async(admin)
        .await
        .unwrap();
}

/// A throwaway server with the SLOWLOG armed at 10 ms.
pub fn server() -> RedisServer {
    server_with(ServerOptions::default())
}

pub fn server_with(mut opts: ServerOptions) -> RedisServer {
    opts.extra.push("slowlog-log-slower-than 10000".into());
    RedisServer::start(opts).expect("starting redis-server")
}

/// A server for SLOWLOG checks: its command thread at a higher CPU
/// priority than the test's own (see [`note_priority`]).
pub fn slowlog_server_with(opts: ServerOptions) -> RedisServer {
    let srv = server_with(opts);
    note_priority(srv.raise_priority(-10));
    srv
}

/// [`slowlog_server_with`] default options.
pub fn slowlog_server() -> RedisServer {
    slowlog_server_with(ServerOptions::default())
}

/// A plain blocking connection to the node at `url`, for a test's own
/// commands.
pub fn sync_conn(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

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
    match v {
        redis::Value::Array(cs) => cs
            .iter()
            .filter_map(|c| plain::info_text(&plain::info_fields(c), "name"))
            .collect(),
        _ => Vec::new(),
    }
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
    plain::entry_list(&v)
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
    plain::read_reply_entries(&reply)
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

/// Starts a worker (`start(round, listen)`, serving HTTP on `listen`) up
/// to three times while `drained` (looking through `conn`) says the
/// backlog is not, and SIGKILLs each some tens of ms after it applied its
/// first carry (its `hitcount_carry_cells_total` grew): the kill lands
/// while its next sum is recorded or applied, or with windows waiting.
/// Stops once the backlog is drained (the last worker is then killed
/// too). Returns how many were killed after a carry.
pub async fn kill_after_carries<C>(
    conn: &mut C,
    mut drained: impl AsyncFnMut(&mut C) -> bool,
    mut start: impl FnMut(u64, &str) -> bin::Child,
) -> usize {
    let mut killed = 0;
    for round in 0..3u64 {
        if drained(conn).await {
            break;
        }
        let listen = bin::free_addr();
        let mut w = start(round, &listen);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut looked = Instant::now();
        while bin::carry_cells(&listen) == 0 {
            w.assert_running();
            // A worker that only finishes the records of the one killed
            // before (it had read every entry left) applies no carry of
            // its own: nothing is left to kill it in.
            if looked.elapsed() >= Duration::from_millis(100) {
                if drained(conn).await {
                    return killed;
                }
                looked = Instant::now();
            }
            if Instant::now() >= deadline {
                panic!(
                    "no carry applied in 60 s; the worker's log:\n{}",
                    w.stderr()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(round * 40)).await;
        w.kill();
        killed += 1;
    }
    killed
}
