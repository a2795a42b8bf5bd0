//! The core, end to end against a real redis-server: counts equal the seeds'
//! reference in both event forms, bad entries are dead-lettered while good
//! ones count, the dead-letter stream stays at its cap, workers share a group exactly, a fenced worker's window is
//! dropped, too-old hits skip fine precisions, and the producer rides out an
//! outage.

use crate::common;

use std::time::Duration;

use common::*;
use hitcount::model::config::{RedisArgs, StreamArgs};
use hitcount::service::producer::{Producer, ProducerOptions};

const PRECISIONS: [u32; 7] = hitcount::model::config::DEFAULT_PRECISIONS;

/// Hits as (name, count, unix seconds as float).
type Hits = Vec<(String, i64, f64)>;

async fn xadd_msgpack(
    c: &mut hitcount::store::connect::Conn,
    name: &str,
    count: i64,
    ts: Option<f64>,
) -> String {
    redis::cmd("XADD")
        .arg("hits")
        .arg("*")
        .arg("hit")
        .arg(hitcount::model::event::encode(name, count, ts))
        .query_async(c)
        .await
        .unwrap()
}

async fn xadd_plain(c: &mut hitcount::store::connect::Conn, fields: &[(&str, String)]) -> String {
    let mut cmd = redis::cmd("XADD");
    cmd.arg("hits").arg("*");
    for (f, v) in fields {
        cmd.arg(*f).arg(v);
    }
    cmd.query_async(c).await.unwrap()
}

fn id_secs(id: &str) -> f64 {
    crate::common::plain::id_ms(id) as f64 / 1000.0
}

fn rust_reference(hits: &Hits) -> Counts {
    let as_int: Vec<(String, i64, i64)> = hits
        .iter()
        .map(|(n, c, t)| (n.clone(), *c, t.floor() as i64))
        .collect();
    reference(&as_int, &PRECISIONS)
}

/// Deterministic hits of the last 100 s (inside every precision's window),
/// with bucket edges, sent half in each form; some without ts.
async fn send_recent_hits(c: &mut hitcount::store::connect::Conn) -> Hits {
    let now = unix_now();
    let mut hits = Hits::new();
    let minute = now - now % 60;
    let mut times: Vec<f64> = (0..400)
        .map(|i| (now - 100 + (i * 37) % 100) as f64)
        .collect();
    times.extend([
        minute as f64,
        minute as f64 - 1.0,
        minute as f64 - 0.25,
        (now - now % 5) as f64,
        now as f64 - 30.5,
    ]);
    for (i, ts) in times.into_iter().enumerate() {
        let name = format!("page:{}", i % 7);
        let count = 1 + (i as i64 % 3);
        match i % 4 {
            0 => {
                xadd_msgpack(c, &name, count, Some(ts)).await;
            }
            1 => {
                xadd_plain(
                    c,
                    &[
                        ("name", name.clone()),
                        ("count", count.to_string()),
                        ("ts", ts.to_string()),
                    ],
                )
                .await;
            }
            2 => {
                let id = xadd_msgpack(c, &name, count, None).await;
                hits.push((name, count, id_secs(&id)));
                continue;
            }
            _ => {
                let id =
                    xadd_plain(c, &[("name", name.clone()), ("count", count.to_string())]).await;
                hits.push((name, count, id_secs(&id)));
                continue;
            }
        }
        hits.push((name, count, ts));
    }
    hits
}

/// Debian's interpreter, which carries Debian's python3-redis: the one
/// `scripts/ensure-deps` checks and installs (not whichever python3 comes
/// first on PATH).
fn python3() -> &'static str {
    const PYTHON: &str = "/usr/bin/python3";
    assert!(
        std::path::Path::new(PYTHON).exists(),
        "{PYTHON} is missing: run scripts/ensure-deps (it installs python3 and python3-redis)"
    );
    PYTHON
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_equal_the_seeds_reference_in_both_forms() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let hits = send_recent_hits(&mut c).await;
    let s = settings(&srv.url(), "w1");
    let workers = Workers::start(vec![s.clone()]);
    wait_drained(&mut c, &keys(&s)).await;
    workers.stop().await;

    assert_eq!(read_all(&mut c, &keys(&s)).await, rust_reference(&hits));

    // The seeds' own Python get_counter reads the same counts as their
    // update_counter writes for the same hits (into database 1).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hits.json");
    std::fs::write(&file, serde_json::to_string(&hits).unwrap()).unwrap();
    let out = std::process::Command::new(python3())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/reference/seeds.py"
        ))
        .arg(srv.url())
        .arg(format!("{}/1", srv.url()))
        .arg(&file)
        .output()
        .expect("running /usr/bin/python3 (run scripts/ensure-deps)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}(a missing redis module: run scripts/ensure-deps)",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "ok 49");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_hits_skip_fine_precisions_and_count_at_coarse_ones() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let now = unix_now();
    let day = now - now % 86400;
    // The last day boundary: both sides, hours old, are outside the 1 s to
    // 5 min windows (120 samples) and inside the hourly and daily ones.
    let mut hits = Hits::new();
    for (ts, name) in [
        (day as f64, "edge"),
        (day as f64 - 1.0, "edge"),
        (day as f64 - 0.5, "edge"),
        (now as f64 - 10.0, "edge"),
    ] {
        xadd_msgpack(&mut c, name, 2, Some(ts)).await;
        hits.push((name.into(), 2, ts));
    }
    let s = settings(&srv.url(), "w1");
    let workers = Workers::start(vec![s.clone()]);
    wait_drained(&mut c, &keys(&s)).await;
    workers.stop().await;

    let mut expected = rust_reference(&hits);
    for ((p, _), buckets) in expected.iter_mut() {
        buckets.retain(|b, _| *b > now - 120 * *p as i64);
    }
    expected.retain(|_, b| !b.is_empty());
    let got = read_all(&mut c, &keys(&s)).await;
    assert_eq!(got, expected);
    let daily = &got[&(86400, "edge".to_string())];
    assert_eq!(daily.values().sum::<i64>(), 8);
    if now - day > 600 {
        assert_eq!(
            got[&(5, "edge".to_string())].values().sum::<i64>(),
            2,
            "only the recent hit at 5 s"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_entries_are_dead_lettered_and_good_ones_in_the_batch_count() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let now = unix_now() as f64;
    xadd_plain(&mut c, &[("name", "good".into()), ("ts", now.to_string())]).await;
    let long = "x".repeat(4097);
    let bad: Vec<(Vec<(&str, String)>, &str)> = vec![
        (vec![("count", "3".into())], "missing_name"),
        (vec![("name", "".into())], "empty_name"),
        (vec![("name", long)], "name_too_long"),
        (
            vec![("name", "n".into()), ("count", "1.5".into())],
            "bad_count",
        ),
        (
            vec![("name", "n".into()), ("count", "-2".into())],
            "bad_count",
        ),
        (
            vec![("name", "n".into()), ("ts", "nan".into())],
            "bad_timestamp",
        ),
        (
            vec![
                ("name", "n".into()),
                ("ts", (now + 3.0 * 86400.0).to_string()),
            ],
            "future_timestamp",
        ),
        (vec![("hit", "\u{c1}garbage".into())], "bad_msgpack"),
    ];
    let mut bad_ids = Vec::new();
    for (fields, reason) in &bad {
        bad_ids.push((xadd_plain(&mut c, fields).await, *reason));
    }
    let _: String = redis::cmd("XADD")
        .arg("hits")
        .arg("*")
        .arg("name")
        .arg(&b"\xff\xfe"[..])
        .query_async(&mut c)
        .await
        .unwrap();
    xadd_msgpack(&mut c, "good", 4, Some(now)).await;
    xadd_msgpack(&mut c, &"k".repeat(1024), 1, Some(now)).await; // 1 KiB names are fine

    let s = settings(&srv.url(), "w1");
    let workers = Workers::start(vec![s.clone()]);
    wait_drained(&mut c, &keys(&s)).await;
    workers.stop().await;

    let got = read_all(&mut c, &keys(&s)).await;
    assert_eq!(got[&(60, "good".to_string())].values().sum::<i64>(), 5);
    assert!(got.contains_key(&(60, "k".repeat(1024))));
    let dead: redis::Value = redis::cmd("XRANGE")
        .arg("hits:dead")
        .arg("-")
        .arg("+")
        .query_async(&mut c)
        .await
        .unwrap();
    let dead = crate::common::plain::entry_list(&dead);
    assert_eq!(dead.len(), bad.len() + 1);
    for (entry, (id, reason)) in dead.iter().zip(&bad_ids) {
        let pairs: Vec<(String, String)> = entry
            .pairs()
            .map(|(f, v)| {
                (
                    String::from_utf8_lossy(f).into(),
                    String::from_utf8_lossy(v).into(),
                )
            })
            .collect();
        assert_eq!(pairs[0], ("reason".into(), reason.to_string()), "{pairs:?}");
        assert_eq!(pairs[1], ("id".into(), id.clone()));
        assert!(pairs.len() > 2, "original fields kept: {pairs:?}");
    }
    let last: Vec<_> = dead[bad.len()].pairs().map(|(_, v)| v.to_vec()).collect();
    assert_eq!(last[0], b"name_not_utf8");
    assert_eq!(last[2], b"\xff\xfe", "original bytes kept");
}

/// The dead-letter stream is capped with `XADD MAXLEN ~ cap`, which only
/// evicts whole stream nodes (radix-tree leaves of at most
/// `stream-node-max-entries` entries, fewer when `stream-node-max-bytes`
/// closes them first) and never goes below the cap. After each XADD the
/// stream therefore holds at least `cap` entries and fewer than `cap` plus
/// the oldest node: at most `cap + stream-node-max-entries - 1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_stream_stays_at_its_cap_and_keeps_the_newest() {
    const CAP: u64 = 100;
    const BAD: usize = 3000;
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let (_, node): (String, u64) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("stream-node-max-entries")
        .query_async(&mut c)
        .await
        .unwrap();
    let bound = CAP + node - 1;
    let now = unix_now();
    let mut bad_ids = Vec::new();
    for chunk in 0..BAD / 100 {
        let mut pipe = redis::pipe();
        for i in 0..100 {
            pipe.cmd("XADD")
                .arg("hits")
                .arg("*")
                .arg("name")
                .arg("")
                .arg("n")
                .arg(chunk * 100 + i);
        }
        pipe.cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("name")
            .arg("good")
            .arg("ts")
            .arg(now);
        let mut ids: Vec<String> = pipe.query_async(&mut c).await.unwrap();
        ids.pop();
        bad_ids.extend(ids);
    }
    let mut s = settings(&srv.url(), "w1");
    s.stream.dead_maxlen = CAP;
    let k = keys(&s);
    let workers = Workers::start(vec![s.clone()]);
    // Watched all along, not only at the end.
    let mut longest = 0;
    while !crate::common::plain::drained(&mut c, &k).await.unwrap() {
        let len: u64 = redis::cmd("XLEN")
            .arg("hits:dead")
            .query_async(&mut c)
            .await
            .unwrap();
        longest = longest.max(len);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    workers.stop().await;
    let dead = dead_letters(&mut c).await;
    let len = dead.len() as u64;
    println!("dead letters: {len} at the end, {longest} at most, cap {CAP}, node {node}");
    assert!(longest <= bound, "{longest} > {bound}");
    assert!((CAP..=bound).contains(&len), "{len} not in {CAP}..={bound}");
    // Exactly the newest bad entries, oldest first.
    let kept: Vec<&str> = dead.iter().map(|d| d["id"].as_str()).collect();
    assert_eq!(kept, bad_ids[bad_ids.len() - dead.len()..].to_vec());
    assert!(dead.iter().all(|d| d["reason"] == "empty_name"));
    let good = read_all(&mut c, &k).await;
    assert_eq!(good[&(1, "good".to_string())][&now], (BAD / 100) as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_the_group_and_totals_are_exact() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let a = settings(&srv.url(), "a");
    let b = settings(&srv.url(), "b");
    let workers = Workers::start(vec![a.clone(), b]);
    let producer = producer(&srv.url());
    let now = unix_now() as f64;
    let mut hits = Hits::new();
    for i in 0..20_000i64 {
        let name = format!("p{}", i % 50);
        producer.hit_at(&name, 1, now);
        hits.push((name, 1, now));
        if i % 1000 == 0 {
            tokio::task::yield_now().await;
        }
    }
    producer.shutdown(Duration::from_secs(10)).await;
    wait_drained(&mut c, &keys(&a)).await;
    // Both consumers took part.
    let consumers: redis::Value = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg("hits")
        .arg("hitcount")
        .query_async(&mut c)
        .await
        .unwrap();
    workers.stop().await;
    let redis::Value::Array(list) = consumers else {
        panic!()
    };
    assert_eq!(list.len(), 2, "both workers joined the group");
    assert_eq!(read_all(&mut c, &keys(&a)).await, rust_reference(&hits));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_producer_buffers_while_redis_is_down_and_sends_once_after() {
    let mut srv = server();
    let url = srv.url();
    let producer = producer(&url);
    for _ in 0..1000 {
        producer.hit("before");
    }
    producer.flush().await;
    srv.stop();
    for _ in 0..500 {
        producer.hit("during");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(producer.buffered() > 0, "held while Redis is down");
    srv.restart().unwrap();
    tokio::time::timeout(Duration::from_secs(20), producer.flush())
        .await
        .expect("flushed after Redis came back");
    let stats = producer.stats();
    assert_eq!(stats.dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
    let mut c = conn(&url).await;
    let len: u64 = redis::cmd("XLEN")
        .arg("hits")
        .query_async(&mut c)
        .await
        .unwrap();
    // Without persistence the restarted server starts empty: exactly the 500
    // sent during the outage arrive, once each.
    assert_eq!(len, 500);
    producer.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_producer_drops_and_counts_beyond_its_bound() {
    let url = format!("redis://127.0.0.1:{}", hitcount_lab::kit::free_port());
    let producer = Producer::start(
        &RedisArgs::from_url(&url),
        &StreamArgs::default(),
        ProducerOptions {
            max_buffered: 100,
            ..ProducerOptions::default()
        },
    )
    .unwrap();
    for _ in 0..150 {
        producer.hit("x");
    }
    assert_eq!(
        producer
            .stats()
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed),
        50
    );
    assert_eq!(producer.buffered(), 100);
    producer.shutdown(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_refusing_its_increment_is_dead_lettered_in_a_later_window_too() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let now = unix_now() as f64;
    // count:60:bad holds a string: HINCRBY on it fails with WRONGTYPE.
    let _: () = redis::cmd("SET")
        .arg("count:60:bad")
        .arg("x")
        .query_async(&mut c)
        .await
        .unwrap();
    xadd_msgpack(&mut c, "good", 1, Some(now)).await;
    xadd_msgpack(&mut c, "bad", 2, Some(now)).await;
    // One entry per read and per window: the second window's apply step
    // also carries the first window's marker EXPIRE.
    let mut s = settings(&srv.url(), "w1");
    s.worker.read_count = 1;
    s.worker.window_entries = 1;
    let workers = Workers::start(vec![s.clone()]);
    wait_drained(&mut c, &keys(&s)).await;
    workers.stop().await;

    let got = read_all(&mut c, &keys(&s)).await;
    assert_eq!(got[&(60, "good".to_string())].values().sum::<i64>(), 1);
    assert_eq!(got[&(1, "bad".to_string())].values().sum::<i64>(), 2);
    let dead: redis::Value = redis::cmd("XRANGE")
        .arg("hits:dead")
        .arg("-")
        .arg("+")
        .query_async(&mut c)
        .await
        .unwrap();
    let dead = crate::common::plain::entry_list(&dead);
    assert_eq!(dead.len(), 1, "one failed cell, dead-lettered once");
    let pairs: std::collections::HashMap<String, String> = dead[0]
        .pairs()
        .map(|(f, v)| {
            (
                String::from_utf8_lossy(f).into(),
                String::from_utf8_lossy(v).into(),
            )
        })
        .collect();
    assert_eq!(pairs["reason"], "apply_error");
    assert_eq!(pairs["precision"], "60");
    assert_eq!(pairs["name"], "bad");
    assert_eq!(pairs["count"], "2");
    assert!(pairs["error"].contains("WRONGTYPE"), "{pairs:?}");
}
