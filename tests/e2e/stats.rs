//! Statistics of hit values (issue 15, the write path): values from every
//! producer form land in `stats:PREC:NAME` exactly as the reference sums
//! them, bad values are dead-lettered with `bad_value`, the key layout is
//! the contract, and a replayed or recovered window adds its statistics
//! once.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::stats::{self as st, kept, observations, Obs};
use common::*;
use hitcount::model::config::{LayoutArgs, DEFAULT_PRECISIONS};
use hitcount::model::stats::DEFAULT_QUANTILE_PRECISIONS;
use hitcount::store::connect::Conn;

/// XADDs one entry with these fields to `hits`; returns its id.
async fn xadd(c: &mut Conn, fields: &[(&str, &[u8])]) -> String {
    let mut cmd = redis::cmd("XADD");
    cmd.arg("hits").arg("*");
    for (f, v) in fields {
        cmd.arg(*f).arg(*v);
    }
    cmd.query_async(c).await.unwrap()
}

/// Counts what the stream holds with one in-process worker of `s`, until
/// the group is drained; stops it.
async fn count_all(c: &mut Conn, s: &hitcount::service::worker::Settings) {
    let workers = Workers::start(vec![s.clone()]);
    wait_drained(c, &keys(s)).await;
    workers.stop().await;
}

/// A MessagePack `hit` map with an integer `value` (the Rust producer
/// writes floats).
fn packed_int_value(name: &str, count: i64, ts: i64, value: i64) -> Vec<u8> {
    let mut out = Vec::new();
    rmp::encode::write_map_len(&mut out, 4).unwrap();
    for (k, v) in [("count", count), ("ts", ts), ("value", value)] {
        rmp::encode::write_str(&mut out, k).unwrap();
        rmp::encode::write_sint(&mut out, v).unwrap();
    }
    rmp::encode::write_str(&mut out, "name").unwrap();
    rmp::encode::write_str(&mut out, name).unwrap();
    out
}

/// Sends observations round-robin in the three forms: plain fields,
/// MessagePack (integer values as MessagePack ints) and the Rust producer.
async fn send_all(c: &mut Conn, url: &str, obs: &[Obs]) {
    let producer = producer(url);
    let mut pipe = redis::pipe();
    for (i, (name, count, ts, value)) in obs.iter().enumerate() {
        match i % 3 {
            0 => {
                pipe.cmd("XADD").arg("hits").arg("*").arg("name").arg(name);
                if *count != 1 {
                    pipe.arg("count").arg(count);
                }
                pipe.arg("ts").arg(ts).arg("value").arg(value.to_string());
            }
            1 if value.fract() == 0.0 => {
                let packed = packed_int_value(name, *count, *ts, *value as i64);
                pipe.cmd("XADD").arg("hits").arg("*").arg("hit").arg(packed);
            }
            1 => {
                let packed = hitcount::model::event::encode_value(
                    name,
                    *count,
                    Some(*ts as f64),
                    Some(*value),
                );
                pipe.cmd("XADD").arg("hits").arg("*").arg("hit").arg(packed);
            }
            _ => producer.observe_at(name, *count, Some(*ts as f64), *value),
        }
        pipe.ignore();
    }
    pipe.query_async::<()>(c).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), producer.flush())
        .await
        .unwrap();
    producer.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_from_every_producer_give_exactly_the_reference_statistics() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let s = settings(&url, "w1");
    let k = keys(&s);
    let workers = Workers::start(vec![s.clone()]);
    let now = unix_now();
    let obs = observations(3000, 3, now, 7);
    send_all(&mut c, &url, &obs).await;
    // Plain hits beside them: counted, no statistics.
    for _ in 0..20 {
        xadd(&mut c, &[("name", b"plain")]).await;
    }
    wait_drained(&mut c, &k).await;
    workers.stop().await;

    let (want, raw) = st::reference(
        &obs,
        &DEFAULT_PRECISIONS,
        &DEFAULT_QUANTILE_PRECISIONS,
        kept(now),
    );
    let got = st::read(&mut c, &k).await;
    st::assert_equal(&got, &want);
    assert!(got.keys().all(|(_, n)| n != "plain"));
    // Histograms at the quantile precisions only.
    for ((p, _), buckets) in &got {
        let quantiles = DEFAULT_QUANTILE_PRECISIONS.contains(p);
        assert!(
            buckets
                .values()
                .all(|s| s.histogram.is_empty() != quantiles),
            "{p}"
        );
    }
    let checked = st::assert_quantiles(&got, &raw);
    assert!(checked >= 3 * 3 * 3, "quantiles checked: {checked}");
    // Every stats hash is in stats:known: and nothing else is.
    let all: Vec<String> = redis::cmd("KEYS")
        .arg("stats:*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(all.len(), got.len() + 1, "{all:?}");
    // Counts took every hit, valued or not.
    let counts = read_all(&mut c, &k).await;
    for ((p, name), buckets) in &want {
        let counted = &counts[&(*p, name.clone())];
        for (b, s) in buckets {
            assert_eq!(counted[b], s.count, "count:{p}:{name} {b}");
        }
    }
    assert_eq!(
        counts[&(86400, "plain".to_string())].values().sum::<i64>(),
        20
    );
}

/// One name's values of both signs over 400 decades: thousands of
/// histogram bins in each of its cells, each cut into pieces of an apply
/// chunk (no script holds Redis for the whole cell), counted exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_spread_over_every_magnitude_give_exactly_the_reference_statistics() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let s = settings(&url, "w1");
    let now = unix_now();
    let obs = st::spread_observations(3000, "api:spread", now);
    // By the Rust producer: `send_all` writes a whole value as a
    // MessagePack integer, which holds none of these.
    let producer = producer(&url);
    for (name, count, ts, value) in &obs {
        producer.observe_at(name, *count, Some(*ts as f64), *value);
    }
    producer.shutdown(Duration::from_secs(30)).await;
    count_all(&mut c, &s).await;
    let (want, raw) = st::reference(
        &obs,
        &DEFAULT_PRECISIONS,
        &DEFAULT_QUANTILE_PRECISIONS,
        kept(now),
    );
    let got = st::read(&mut c, &keys(&s)).await;
    st::assert_equal(&got, &want);
    let bins = got[&(86400, "api:spread".to_string())]
        .values()
        .map(|b| b.histogram.len())
        .max();
    assert!(bins > Some(2000), "a heavy cell: {bins:?} bins");
    assert!(st::assert_quantiles(&got, &raw) >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_are_dead_lettered_and_the_rest_of_the_batch_counted() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let s = settings(&url, "w1");
    let k = keys(&s);
    let mut msgpack_text = Vec::new();
    rmp::encode::write_map_len(&mut msgpack_text, 2).unwrap();
    rmp::encode::write_str(&mut msgpack_text, "name").unwrap();
    rmp::encode::write_str(&mut msgpack_text, "bad").unwrap();
    rmp::encode::write_str(&mut msgpack_text, "value").unwrap();
    rmp::encode::write_str(&mut msgpack_text, "12").unwrap();
    let nan = hitcount::model::event::encode_value("bad", 1, None, Some(f64::NAN));
    let mut bad_ids = Vec::new();
    // One batch: written before any worker reads.
    for bad in ["NaN", "inf", "-inf", "abc", "1e400"] {
        bad_ids.push(xadd(&mut c, &[("name", b"bad"), ("value", bad.as_bytes())]).await);
        let good: [(&str, &[u8]); 3] = [("name", b"good"), ("value", b"5"), ("count", b"2")];
        xadd(&mut c, &good).await;
    }
    for packed in [msgpack_text, nan] {
        bad_ids.push(xadd(&mut c, &[("hit", &packed)]).await);
    }
    count_all(&mut c, &s).await;
    let dead = dead_letters(&mut c).await;
    let dead_ids: Vec<&str> = dead.iter().map(|d| d["id"].as_str()).collect();
    assert_eq!(dead_ids, bad_ids);
    assert!(dead.iter().all(|d| d["reason"] == "bad_value"), "{dead:?}");
    let got = st::read(&mut c, &k).await;
    assert!(got.keys().all(|(_, n)| n == "good"));
    let day = got[&(86400, "good".to_string())]
        .values()
        .next()
        .unwrap()
        .clone();
    assert_eq!((day.count, day.sum, day.min, day.max), (10, 50.0, 5.0, 5.0));
    let counts = read_all(&mut c, &k).await;
    assert!(
        !counts.contains_key(&(86400, "bad".to_string())),
        "nothing of them counted"
    );
    assert_eq!(
        counts[&(86400, "good".to_string())].values().sum::<i64>(),
        10
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_keys_and_fields_are_the_contract() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let mut s = settings(&url, "w1");
    s.layout = LayoutArgs {
        prefix: "app1:".into(),
        ..LayoutArgs::default()
    };
    let ts = unix_now() - 5;
    let ts_text = ts.to_string();
    let fields: [(&str, &[u8]); 4] = [
        ("name", b"p"),
        ("count", b"2"),
        ("ts", ts_text.as_bytes()),
        ("value", b"12.5"),
    ];
    xadd(&mut c, &fields).await;
    for v in [0.0, -2.0] {
        let packed = hitcount::model::event::encode_value("p", 1, Some(ts as f64), Some(v));
        xadd(&mut c, &[("hit", &packed)]).await;
    }
    // Values far from 1: the sums keep every digit a double has.
    for (name, v) in [("tiny", 1e-18), ("tiny", 1e-18), ("small", 1e-9)] {
        let packed = hitcount::model::event::encode_value(name, 1, Some(ts as f64), Some(v));
        xadd(&mut c, &[("hit", &packed)]).await;
    }
    for v in [b"3e-9", b"5e-9"] {
        xadd(
            &mut c,
            &[("name", b"small"), ("ts", ts_text.as_bytes()), ("value", v)],
        )
        .await;
    }
    count_all(&mut c, &s).await;
    let minute = ts / 60 * 60;
    let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg("app1:stats:60:p")
        .query_async(&mut c)
        .await
        .unwrap();
    let b = |f: &str| format!("{minute}:{f}");
    let want: BTreeMap<String, String> = [
        (b("count"), "4"),
        (b("sum"), "23"),
        (b("sumsq"), "316.5"),
        (b("min"), "-2"),
        (b("max"), "12.5"),
        // 12.5 is in bucket ceil(16 × log2 12.5) = 59; -2 in n16.
        (b("h:59"), "2"),
        (b("h:z"), "1"),
        (b("h:n16"), "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    assert_eq!(fields, want);
    // No histogram at a precision outside HITCOUNT_QUANTILE_PRECISIONS.
    let second: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg("app1:stats:1:p")
        .query_async(&mut c)
        .await
        .unwrap();
    let fields: Vec<&str> = second
        .keys()
        .map(|f| f.split_once(':').unwrap().1)
        .collect();
    assert_eq!(fields, ["count", "max", "min", "sum", "sumsq"]);
    let known: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("app1:stats:known:")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut c)
        .await
        .unwrap();
    let mut expected: Vec<(String, f64)> = DEFAULT_PRECISIONS
        .iter()
        .flat_map(|p| ["p", "small", "tiny"].map(|name| (format!("{p}:{name}"), 0.0)))
        .collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(known, expected);

    let minute_of = |name: &str| {
        let key = format!("app1:stats:60:{name}");
        let mut c = c.clone();
        async move {
            let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(key)
                .query_async(&mut c)
                .await
                .unwrap();
            fields
        }
    };
    let tiny = minute_of("tiny").await;
    assert_eq!(tiny[&b("sum")], "2e-18");
    assert_eq!(tiny[&b("sumsq")].parse::<f64>(), Ok(2.0 * 1e-18 * 1e-18));
    // What a reader makes of them: mean within [min, max], the deviation
    // of identical values 0, that of small ones exact.
    let read = |name: &str| {
        let out = bin::run_ok(
            &url,
            &[
                "get", name, "-p", "60", "--stats", "--json", "--prefix", "app1:",
            ],
        );
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let row = rows.into_iter().find(|r| r["t"] == minute).unwrap();
        let field = |f: &str| row[f].as_f64().unwrap();
        (field("mean"), field("stddev"))
    };
    assert_eq!(read("tiny"), (1e-18, 0.0));
    let (mean, sd) = read("small");
    assert!((mean / 3e-9 - 1.0).abs() < 1e-12, "{mean}");
    assert!(
        (sd / ((8.0f64 / 3.0).sqrt() * 1e-9) - 1.0).abs() < 1e-6,
        "{sd}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hit_and_load_send_values_from_the_command_line() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    bin::run_ok(&url, &["hit", "one", "--value", "12.5", "--count", "2"]);
    bin::run_ok(&url, &["load", "--hits", "60", "--names", "3", "--values"]);
    let refused = bin::hitcount()
        .args(["hit", "one", "--value", "NaN"])
        .env("REDIS_URL", &url)
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "a NaN value is refused before sending"
    );
    let s = settings(&url, "w1");
    count_all(&mut c, &s).await;
    let got = st::read(&mut c, &keys(&s)).await;
    let day = |name: &str| -> Vec<hitcount::model::stats::Summary> {
        got[&(86400, name.to_string())].values().cloned().collect()
    };
    let one = &day("one")[0];
    assert_eq!(
        (one.count, one.sum, one.min, one.max),
        (2, 25.0, 12.5, 12.5)
    );
    let loaded: Vec<_> = got
        .iter()
        .filter(|((p, n), _)| *p == 86400 && n.starts_with("page:"))
        .flat_map(|(_, b)| b.values())
        .collect();
    assert_eq!(loaded.iter().map(|s| s.count).sum::<i64>(), 60);
    assert!(loaded.iter().all(|s| s.min >= 1.0 && s.max <= 1000.0));

    // `status` counts the statistics hashes, for people and for scripts.
    let listed: u64 = redis::cmd("ZCARD")
        .arg("stats:known:")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(listed > 0);
    let status = common::bin::run_hitcount(&["status", "--redis-url", &url]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains(&format!("known statistics: {listed}\n")),
        "{text}"
    );
    let status = common::bin::run_hitcount(&["status", "--json", "--redis-url", &url]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["known_stats"], listed, "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statistics_key_redis_refuses_is_dead_lettered_and_the_rest_applied() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let _: () = redis::cmd("SET")
        .arg("stats:86400:x")
        .arg("not a hash")
        .query_async(&mut c)
        .await
        .unwrap();
    xadd(
        &mut c,
        &[("name", b"x"), ("value", b"3.5"), ("count", b"2")],
    )
    .await;
    let s = settings(&url, "w1");
    count_all(&mut c, &s).await;
    let dead = dead_letters(&mut c).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let d = &dead[0];
    assert_eq!(
        (d["reason"].as_str(), d["precision"].as_str()),
        ("apply_error", "86400")
    );
    assert!(d["error"].starts_with("statistics: WRONGTYPE"), "{d:?}");
    assert_eq!((d["name"].as_str(), d["count"].as_str()), ("x", "2"));
    // The counts and the other precisions' statistics are applied; the
    // refused key is not listed in stats:known:.
    let counts = read_all(&mut c, &keys(&s)).await;
    assert_eq!(counts[&(86400, "x".to_string())].values().sum::<i64>(), 2);
    let got = st::read(&mut c, &keys(&s)).await;
    assert!(!got.contains_key(&(86400, "x".to_string())));
    let minute = got[&(60, "x".to_string())].values().next().unwrap();
    assert_eq!((minute.count, minute.sum), (2, 7.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statistics_field_that_holds_no_number_fails_its_cell_whole() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let id = xadd(&mut c, &[("name", b"y"), ("value", b"4")]).await;
    let hour = (crate::common::plain::id_ms(&id) / 1000).div_euclid(3600) * 3600;
    // A damaged hash: its sum of squares is text, the rest well-formed.
    let _: () = redis::cmd("HSET")
        .arg("stats:3600:y")
        .arg(format!("{hour}:count"))
        .arg(1)
        .arg(format!("{hour}:sum"))
        .arg(1)
        .arg(format!("{hour}:sumsq"))
        .arg("damaged")
        .query_async(&mut c)
        .await
        .unwrap();
    let s = settings(&url, "w1");
    count_all(&mut c, &s).await;
    let dead = dead_letters(&mut c).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "apply_error");
    assert_eq!(dead[0]["precision"], "3600");
    assert!(dead[0]["error"].contains("holds damaged"), "{:?}", dead[0]);
    // Nothing of the cell was written: count and sum as they were.
    let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("stats:3600:y")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(fields.len(), 3, "{fields:?}");
    assert_eq!(fields[&format!("{hour}:count")], "1");
    assert_eq!(fields[&format!("{hour}:sum")], "1");
    // The other precisions' statistics of the same hit are applied.
    let got = st::read(&mut c, &keys(&s)).await;
    let minute = got[&(60, "y".to_string())].values().next().unwrap();
    assert_eq!((minute.count, minute.sum), (1, 4.0));
}

/// Integer fields are summed exactly however large: the script sums small
/// ones itself (in Lua's doubles) and leaves those past 2^53 to HINCRBY,
/// which also refuses to overflow 64 bits (the cell is dead-lettered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_integers_stay_exact_past_two_to_the_53() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let id = xadd(&mut c, &[("name", b"z"), ("value", b"4")]).await;
    let ms = crate::common::plain::id_ms(&id);
    let (hour, minute) = (
        (ms / 1000).div_euclid(3600) * 3600,
        (ms / 1000).div_euclid(60) * 60,
    );
    let bin = hitcount::model::stats::HistBucket::of(4.0)
        .unwrap()
        .suffix();
    let big = "9007199254740993"; // 2^53 + 1: not a double
    let _: () = redis::cmd("HSET")
        .arg("stats:3600:z")
        .arg(format!("{hour}:count"))
        .arg(big)
        .arg(format!("{hour}:h:{bin}"))
        .arg(big)
        .arg(format!("{hour}:h:1"))
        .arg(7)
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("stats:60:z")
        .arg(format!("{minute}:count"))
        .arg(i64::MAX)
        .query_async(&mut c)
        .await
        .unwrap();
    let s = settings(&url, "w1");
    count_all(&mut c, &s).await;
    let hour_fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("stats:3600:z")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(hour_fields[&format!("{hour}:count")], "9007199254740994");
    assert_eq!(hour_fields[&format!("{hour}:h:{bin}")], "9007199254740994");
    assert_eq!(
        hour_fields[&format!("{hour}:h:1")],
        "7",
        "a bin it did not see"
    );
    assert_eq!(hour_fields[&format!("{hour}:min")], "4");
    // The minute's count would overflow: its cell is dead-lettered.
    let dead = dead_letters(&mut c).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "apply_error");
    assert_eq!(dead[0]["precision"], "60");
    assert!(dead[0]["error"].contains("overflow"), "{:?}", dead[0]);
}
