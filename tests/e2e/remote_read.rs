//! Prometheus' remote read on `hitcount serve`: the real `prometheus`
//! (Debian's, started on a free port with `remote_read` to a real `serve`
//! and no scrape job) answers PromQL over counters and statistics, seeded
//! or counted by a real worker behind a key prefix, exactly (sample by
//! sample, summed by precision, the statistics of `hitcount get --stats`,
//! awkward names whole); a read over the series or listing limits reaches
//! its user as a warning, having read no hash; bad bodies get a 400 or a
//! 413 that says why, odd but well-formed ones an answer; and it all works
//! as the read-only user of the docs with an empty ACL LOG.

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::bin::{free_addr, http_get, run_hitcount, start_worker};
use common::prometheus::{ask, at, one, prometheus_reading};
use common::*;
use hitcount::model::config::{LayoutArgs, StreamArgs};
use hitcount::model::keys::Keys;
use hitcount_lab::kit::ServerOptions;

use crate::serve::{get, observations, seed, seed_stats, serve, READ_ONLY};

const AWKWARD: &str = "page:a/b c'é\"ü";

/// PromQL's double-quoted form of `s`.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `hitcount_hits` of `name` at precision 60 from `from` to `to` (unix s,
/// bucket starts), step 60, equals `stored` (the hash) sample by sample,
/// with a zero in every empty bucket.
fn assert_samples(prom: &str, name: &str, from: i64, to: i64, stored: &BTreeMap<i64, i64>) {
    let q = format!("hitcount_hits{{name={},precision=\"60\"}}", quoted(name));
    let (range, warnings) = ask(
        prom,
        "/api/v1/query_range",
        &[
            ("query", &q),
            ("start", &from.to_string()),
            ("end", &to.to_string()),
            ("step", "60"),
        ],
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    let want: Vec<(i64, f64)> = (from..=to)
        .step_by(60)
        .map(|t| (t, stored.get(&t).copied().unwrap_or(0) as f64))
        .collect();
    let got: Vec<(i64, f64)> = range[0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_i64().unwrap(),
                p[1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want, "{name}");
}

/// Every statistics series of `name` at precision 60 equals `rows` (those
/// `hitcount get --stats --json` prints, as the API gives them) bucket by
/// bucket: count, min, max and the three quantiles exactly, the sum as
/// the mean times the count.
fn assert_statistics(prom: &str, name: &str, rows: &serde_json::Value) {
    let rows = rows.as_array().unwrap();
    assert!(!rows.is_empty(), "statistics of {name}");
    for row in rows {
        let t = row["t"].as_i64().unwrap() + 30;
        let stat = |family: &str, extra: &str| {
            let q = format!("{family}{{name={},precision=\"60\"{extra}}}", quoted(name));
            one(prom, &q, t)
        };
        let field = |k: &str| row[k].as_f64().unwrap();
        assert_eq!(stat("hitcount_value_count", ""), field("count"), "{row}");
        assert_eq!(stat("hitcount_value_min", ""), field("min"), "{row}");
        assert_eq!(stat("hitcount_value_max", ""), field("max"), "{row}");
        for (q, p) in [("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99")] {
            let got = stat("hitcount_value", &format!(",quantile=\"{q}\""));
            assert_eq!(got, field(p), "quantile {q}: {row}");
        }
        let sum = stat("hitcount_value_sum", "");
        let mean_times_count = field("mean") * field("count");
        assert!(
            (sum - mean_times_count).abs() <= 1e-9 * sum.abs(),
            "{sum} vs {mean_times_count}: {row}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promql_over_counters_and_statistics_is_exact() {
    let server = server();
    let url = server.url();
    let mut c = conn(&url).await;
    let now = unix_now();
    let (b0, h0) = (now - now % 60, now - now % 3600);
    let home = [(b0 - 600, 7), (b0 - 300, 5), (b0 - 60, 2)];
    seed(&mut c, 60, "page:home", &home).await;
    seed(&mut c, 60, "page:about", &[(b0 - 300, 11)]).await;
    seed(&mut c, 60, AWKWARD, &[(b0 - 600, 3)]).await;
    seed(&mut c, 60, "other", &[(b0 - 300, 100)]).await;
    seed(&mut c, 3600, "page:home", &[(h0, 14)]).await;
    seed_stats(&mut c, 60, "slow", &[(b0 - 300, observations(3, 50))], true).await;

    let (_serve, addr) = serve(&url, &[]);
    let dir = tempfile::tempdir().unwrap();
    let (_prom, prom) = prometheus_reading(dir.path(), &addr, "");

    // A bucket's hits at its start and through it; an empty bucket is 0,
    // not the last count carried by Prometheus' lookback.
    let home_60 = "hitcount_hits{name=\"page:home\",precision=\"60\"}";
    assert_eq!(one(&prom, home_60, b0 - 600), 7.0);
    assert_eq!(one(&prom, home_60, b0 - 600 + 59), 7.0);
    assert_eq!(one(&prom, home_60, b0 - 240 + 30), 0.0);
    let (series, _) = ask(
        &prom,
        "/api/v1/query",
        &[("query", home_60), ("time", &b0.to_string())],
    );
    let labels: Vec<&String> = series[0]["metric"].as_object().unwrap().keys().collect();
    assert_eq!(labels, ["__name__", "name", "precision"]);
    // Sample by sample, the hash with a zero in every empty bucket.
    let stored: BTreeMap<i64, i64> = redis::cmd("HGETALL")
        .arg("count:60:page:home")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_samples(&prom, "page:home", b0 - 600, b0, &stored);

    // An hour's hits, exactly; by precision over a prefix.
    let hour = format!("sum_over_time({home_60}[1h])");
    assert_eq!(one(&prom, &hour, now), 14.0);
    let by_precision = at(
        &prom,
        "sum by (precision) (sum_over_time(hitcount_hits{name=~\"page:.*\"}[1h]))",
        now,
    );
    let want = BTreeMap::from([("3600".to_string(), 14.0), ("60".to_string(), 28.0)]);
    assert_eq!(by_precision, want);
    // A regex with a literal prefix, `!=`, and an awkward name whole.
    let a = at(
        &prom,
        "hitcount_hits{name=~\"page:a.*\",precision=\"60\"}",
        b0 - 600,
    );
    let want = BTreeMap::from([(AWKWARD.to_string(), 3.0), ("page:about".to_string(), 0.0)]);
    assert_eq!(a, want);
    let others = at(
        &prom,
        "hitcount_hits{precision=\"60\",name!=\"page:home\"}",
        now,
    );
    let names: Vec<&str> = others.keys().map(String::as_str).collect();
    assert_eq!(names, ["other", "page:a/b c'é\"ü", "page:about"]);
    let q = format!("hitcount_hits{{name={},precision=\"60\"}}", quoted(AWKWARD));
    assert_eq!(one(&prom, &q, b0 - 600), 3.0);
    assert!(at(&prom, "hitcount_hits{precision=\"5\"}", now).is_empty());
    assert!(at(&prom, "hitcount_hits{job=\"x\"}", now).is_empty());
    // PromQL's `\d` is ASCII: an Arabic-Indic digit is no digit to it.
    seed(&mut c, 60, "d:7", &[(b0 - 60, 1)]).await;
    seed(&mut c, 60, "d:١", &[(b0 - 60, 1)]).await;
    for (re, want) in [
        ("d:\\\\d", "d:7"),
        ("d:\\\\D", "d:١"),
        ("\\\\Qd:7\\\\E", "d:7"),
    ] {
        let q = format!("hitcount_hits{{name=~\"{re}\",precision=\"60\"}}");
        let got = at(&prom, &q, b0 - 60);
        assert_eq!(got.keys().collect::<Vec<_>>(), [want], "{q}");
    }

    // Statistics: the numbers of /api/v1/stats (those of `get --stats`).
    let a = get(&addr, "/api/v1/stats/slow?precision=60");
    assert_eq!(a.status, 200, "{}", a.body);
    let rows = a.json()["buckets"].clone();
    assert_eq!(rows[0]["t"], b0 - 300);
    assert_statistics(&prom, "slow", &rows);
    let t = b0 - 300 + 30;
    let (series, _) = ask(
        &prom,
        "/api/v1/query",
        &[
            ("query", "count({__name__=~\"hitcount_.*\",name=\"slow\"})"),
            ("time", &t.to_string()),
        ],
    );
    assert_eq!(
        series[0]["value"][1], "7",
        "count, sum, min, max, three quantiles"
    );
    let count_60 = "hitcount_value_count{name=\"slow\",precision=\"60\"}";
    assert_eq!(one(&prom, count_60, b0 - 240 + 30), 0.0, "zero-filled");
    // No min, max or quantile in an empty bucket: not the bucket before
    // carried on by the lookback (serve marks them stale).
    for q in [
        "hitcount_value_min{name=\"slow\"}",
        "hitcount_value_max{name=\"slow\"}",
        "hitcount_value{name=\"slow\",quantile=\"0.5\"}",
    ] {
        assert!(at(&prom, q, b0 - 240 + 30).is_empty(), "{q}");
        assert!(!at(&prom, q, b0 - 300 + 30).is_empty(), "{q}");
    }
}

/// Hits and values a real worker counted behind a key prefix, read by
/// Prometheus through `serve` with the same prefix: each name's samples
/// equal its hash (awkward names whole), an hour's hits by precision over
/// `page:` equal the hits sent, and the statistics equal `hitcount get
/// --stats` bucket by bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_worker_counted_reads_back_exactly_behind_a_prefix() {
    let server = server();
    let url = server.url();
    let prefix = ["--prefix", "app2:"];
    let _worker = start_worker(&url, "rr-worker", &free_addr(), &prefix);
    let now = unix_now();
    let b0 = now - now % 60;
    // Over the last 20 whole minutes, every third one left empty.
    let names = ["page:home", AWKWARD, "page:日本 ☕", "other"];
    let producer = producer(&url);
    let mut page_hits = 0;
    for i in 0..400i64 {
        let (name, count, minute) = (names[i as usize % 4], i % 3 + 1, (i * 7) % 20);
        if minute % 3 != 2 {
            producer.hit_at(name, count, (b0 - 60 * (minute + 1) + i % 60) as f64);
            page_hits += if name.starts_with("page:") { count } else { 0 };
        }
    }
    for i in 0..90i64 {
        let value = 0.5 * 1.13f64.powi(i as i32 % 50) - f64::from(i as i32 % 7 == 0);
        let ts = (b0 - 60 * (i % 3 + 1) + i % 60) as f64;
        producer.observe_at("api:slow", 1 + i % 2, Some(ts), value);
    }
    producer.flush().await;
    let mut c = conn(&url).await;
    let keys = Keys::new(
        &LayoutArgs {
            prefix: "app2:".into(),
            ..LayoutArgs::default()
        },
        &StreamArgs::default(),
    );
    wait_drained(&mut c, &keys).await;
    let stored = read_all(&mut c, &keys).await;

    let (_serve, addr) = serve(&url, &prefix);
    let dir = tempfile::tempdir().unwrap();
    let (_prom, prom) = prometheus_reading(dir.path(), &addr, "");
    for name in names {
        assert_samples(&prom, name, b0 - 1260, b0, &stored[&(60, name.to_string())]);
    }
    let q =
        "sum by (precision) (sum_over_time(hitcount_hits{name=~\"page:.*\",precision=\"60\"}[1h]))";
    let want = BTreeMap::from([("60".to_string(), page_hits as f64)]);
    assert_eq!(at(&prom, q, now), want);

    let o = run_hitcount(&[
        "get",
        "api:slow",
        "-p",
        "60",
        "--stats",
        "--json",
        "--prefix",
        "app2:",
        "--redis-url",
        &url,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 3, "{rows}");
    assert_statistics(&prom, "api:slow", &rows);
}

/// `ZADD PREFIX known:` of `n` names `nNNNNN` at precision 60, 10,000 a
/// command in one pipeline, and one bucket of hits for `n00001`.
async fn many_names(c: &mut hitcount::store::connect::Conn, prefix: &str, n: usize, bucket: i64) {
    let mut pipe = redis::pipe();
    for from in (0..n).step_by(10_000) {
        let zadd = pipe.cmd("ZADD").arg(format!("{prefix}known:"));
        for i in from..n.min(from + 10_000) {
            zadd.arg(0).arg(format!("60:n{i:05}"));
        }
    }
    let _: () = pipe.query_async(c).await.unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("{prefix}count:60:n00001"))
        .arg(bucket)
        .arg(4)
        .query_async(c)
        .await
        .unwrap();
}

/// HGETALLs Redis has run so far.
async fn hgetall_calls(c: &mut hitcount::store::connect::Conn) -> u64 {
    calls(c, "hgetall").await
}

/// How many times Redis ran `command` so far.
async fn calls(c: &mut hitcount::store::connect::Conn, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    command_calls(&stats, command)
}

/// `q` at `t` answers nothing, with a warning that contains `why`, and
/// Redis ran no HGETALL for it.
async fn assert_refused(
    prom: &str,
    c: &mut hitcount::store::connect::Conn,
    q: &str,
    t: i64,
    why: &str,
) {
    let before = hgetall_calls(c).await;
    let (result, warnings) = ask(
        prom,
        "/api/v1/query",
        &[("query", q), ("time", &t.to_string())],
    );
    assert_eq!(result, serde_json::json!([]), "{q}");
    assert!(
        warnings.iter().any(|w| w.contains(why)),
        "{q}: {warnings:?}"
    );
    assert_eq!(hgetall_calls(c).await, before, "{q}: no hash read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_over_the_series_limit_is_a_warning_and_reads_no_hash() {
    let server = server();
    let url = server.url();
    let mut c = conn(&url).await;
    let now = unix_now();
    many_names(&mut c, "app1:", 10_001, now - now % 60).await;
    let (_serve, addr) = serve(&url, &["--prefix", "app1:"]);
    let dir = tempfile::tempdir().unwrap();
    let (_prom, prom) = prometheus_reading(dir.path(), &addr, "");

    assert_refused(
        &prom,
        &mut c,
        "hitcount_hits{precision=\"60\"}",
        now,
        "more than 10000 series match",
    )
    .await;
    // A range older than any bucket the precision keeps (two hours at
    // 60 s) selects nothing: no name listed, no hash read, no warning.
    let (listed, lens) = (
        calls(&mut c, "zrangebylex").await,
        calls(&mut c, "hlen").await,
    );
    let q = "hitcount_hits{precision=\"60\"} offset 1d";
    let (result, warnings) = ask(
        &prom,
        "/api/v1/query",
        &[("query", q), ("time", &now.to_string())],
    );
    assert_eq!(
        (result, warnings),
        (serde_json::json!([]), Vec::<String>::new())
    );
    assert_eq!(calls(&mut c, "zrangebylex").await, listed, "no name listed");
    assert_eq!(calls(&mut c, "hlen").await, lens, "no hash read");
    // Under the limit the same names are read, behind the prefix.
    assert_eq!(one(&prom, "hitcount_hits{name=\"n00001\"}", now), 4.0);
    let ten = at(&prom, "hitcount_hits{name=~\"n0000.\"}", now);
    assert_eq!(ten.len(), 10, "{ten:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_listing_over_a_million_names_is_a_warning_and_reads_no_hash() {
    let server = server();
    let url = server.url();
    let mut c = conn(&url).await;
    let now = unix_now();
    many_names(&mut c, "", 1_000_001, now - now % 60).await;
    let (_serve, addr) = serve(&url, &[]);
    let dir = tempfile::tempdir().unwrap();
    let (_prom, prom) = prometheus_reading(dir.path(), &addr, "");

    // A regex without a literal prefix would list every name, though it
    // matches none of them: refused by counting them, before one is listed
    // (listing them cost Redis 7,000 ZRANGEBYLEX and over a second).
    let t0 = std::time::Instant::now();
    let why = "more than 1000000 names listed";
    let listed = calls(&mut c, "zrangebylex").await;
    assert_refused(&prom, &mut c, "hitcount_hits{name=~\".*z\"}", now, why).await;
    eprintln!("refused after {:?}", t0.elapsed());
    assert_eq!(calls(&mut c, "zrangebylex").await, listed, "no name listed");
    assert!(calls(&mut c, "zlexcount").await > 0, "the names counted");
    // The same names behind a literal prefix; a name listed without hits
    // is all zeros.
    let two = at(&prom, "hitcount_hits{name=~\"n0000[01]\"}", now);
    let want = BTreeMap::from([("n00000".to_string(), 0.0), ("n00001".to_string(), 4.0)]);
    assert_eq!(two, want);
}

/// `POST /api/v1/read` with `body` (or only a `Content-Length` of
/// `announced` bytes): the status, the head in lower case and the body.
fn post(addr: &str, body: &[u8], announced: Option<usize>) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let len = announced.unwrap_or(body.len());
    let head = format!(
        "POST /api/v1/read HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
         Content-Encoding: snappy\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    );
    let _ = s.write_all(head.as_bytes());
    if announced.is_none() {
        let _ = s.write_all(body);
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_refused_saying_why() {
    let server = server();
    let mut c = conn(&server.url()).await;
    let now = unix_now();
    seed(&mut c, 60, "x", &[(now - now % 60, 1)]).await;
    let (_serve, addr) = serve(&server.url(), &[]);
    // A body that never all arrives: 408 once its 10 s are up.
    let slow = std::thread::spawn({
        let addr = addr.clone();
        move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            write!(
                s,
                "POST /api/v1/read HTTP/1.1\r\nHost: x\r\nContent-Length: 85\r\n\r\n0123456789"
            )
            .unwrap();
            let mut raw = String::new();
            let _ = s.read_to_string(&mut raw);
            raw
        }
    });
    // Not snappy: an empty body, a varint that never ends.
    for body in [&b""[..], b"\xff\xff\xff\xff\xff\xff"] {
        let (status, head, text) = post(&addr, body, None);
        assert_eq!(status, 400, "{text}");
        assert!(head.contains("content-type: text/plain"), "{head}");
        assert!(text.starts_with("not a snappy block"), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
    }
    // A snappy block (one literal of 3 bytes) that is no protobuf.
    let (status, _, text) = post(&addr, b"\x03\x08\xff\xff\xff", None);
    assert_eq!(
        (status, text.starts_with("not a protobuf ReadRequest")),
        (400, true),
        "{text}"
    );
    // Well-formed requests with odd contents, written field by field: a
    // query from the first millisecond there is to the last, a matcher of
    // an unknown type, a name that is not UTF-8.
    let query = |fields: &[u8]| {
        let mut q = vec![0x0a, fields.len() as u8];
        q.extend_from_slice(fields);
        snap::raw::Encoder::new().compress_vec(&q).unwrap()
    };
    let matcher = |kind: u8, value: &[u8]| {
        let mut m = vec![0x08, kind, 0x12, 4];
        m.extend_from_slice(b"name");
        m.extend_from_slice(&[0x1a, value.len() as u8]);
        m.extend_from_slice(value);
        let mut f = vec![0x1a, m.len() as u8];
        f.extend(m);
        f
    };
    let (min, max) = (
        [&[0x08][..], &[0x80; 9], &[0x01]].concat(),
        [&[0x10][..], &[0xff; 8], &[0x7f]].concat(),
    );
    let widest = query(&[min.clone(), max.clone(), matcher(0, b"x")].concat());
    let (status, head, text) = post(&addr, &widest, None);
    assert_eq!(status, 200, "{text}");
    assert!(head.contains("content-encoding: snappy"), "{head}");
    assert!(text.len() > 20, "the series of x, its samples");
    let (status, _, text) = post(
        &addr,
        &query(&[min.clone(), max.clone(), matcher(7, b"x")].concat()),
        None,
    );
    assert_eq!((status, text.trim()), (400, "unknown matcher type 7"));
    // Response types: SAMPLES (0) listed or none listed is answered; only
    // the streamed chunks (1), or an unknown type, is refused saying so.
    let typed = |types: &[u8]| {
        let mut q = vec![0x0a, 0];
        q.extend([min.clone(), max.clone(), matcher(0, b"x")].concat());
        q[1] = (q.len() - 2) as u8;
        q.extend([0x12, types.len() as u8]);
        q.extend_from_slice(types);
        snap::raw::Encoder::new().compress_vec(&q).unwrap()
    };
    for (types, want) in [(&[1u8, 0][..], 200), (&[1], 400), (&[7], 400)] {
        let (status, _, text) = post(&addr, &typed(types), None);
        assert_eq!(status, want, "{types:?}: {text}");
        if want == 400 {
            assert!(text.contains("only SAMPLES (0) is"), "{text}");
        }
    }
    let (status, _, text) = post(
        &addr,
        &query(&[min, max, matcher(0, b"\xff")].concat()),
        None,
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.starts_with("not a protobuf ReadRequest"), "{text}");
    // Over 1 MiB announced: refused before it is sent.
    let (status, _, text) = post(&addr, b"", Some(2 << 20));
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("1048576"), "{text}");
    // A block announcing 100 MiB once decompressed.
    let (status, _, text) = post(&addr, b"\x80\x80\x80\x32\x00", None);
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("8388608"), "{text}");
    // Only POST here; every other path stays GET and HEAD only.
    let (status, body) = http_get(&addr, "/api/v1/read").unwrap();
    assert_eq!(status, 405, "{body}");
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(s, "POST /api/v1/counters HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    assert!(raw.starts_with("HTTP/1.1 405"), "{raw}");
    assert!(
        raw.to_ascii_lowercase().contains("allow: get, head"),
        "{raw}"
    );
    assert_eq!(
        get(&addr, "/api/v1/counters").status,
        200,
        "serve still answers"
    );
    let raw = slow.join().unwrap();
    assert!(raw.starts_with("HTTP/1.1 408"), "{raw}");
    assert!(raw.contains("did not arrive within 10 s"), "{raw}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_reads_through_the_read_only_user() {
    let server = server_with(ServerOptions {
        extra: vec![format!("user reader on >read-pw {READ_ONLY}")],
        ..ServerOptions::default()
    });
    let mut admin = conn(&server.url()).await;
    let now = unix_now();
    let b0 = now - now % 60;
    seed(&mut admin, 60, "page:home", &[(b0 - 120, 9)]).await;
    seed_stats(
        &mut admin,
        60,
        "slow",
        &[(b0 - 120, observations(5, 20))],
        true,
    )
    .await;
    acl_log_reset(&mut admin).await;

    let url = format!("redis://reader:read-pw@127.0.0.1:{}", server.port());
    let (_serve, addr) = serve(&url, &[]);
    let dir = tempfile::tempdir().unwrap();
    let (_prom, prom) = prometheus_reading(dir.path(), &addr, "");
    let t = b0 - 120 + 30;
    assert_eq!(one(&prom, "hitcount_hits{name=\"page:home\"}", t), 9.0);
    assert_eq!(
        one(
            &prom,
            "hitcount_value_count{name=\"slow\",precision=\"60\"}",
            t
        ),
        observations(5, 20).iter().map(|o| o.1).sum::<i64>() as f64
    );
    let p99 = get(&addr, "/api/v1/stats/slow?precision=60").json()["buckets"][0]["p99"].clone();
    let q = "hitcount_value{name=\"slow\",precision=\"60\",quantile=\"0.99\"}";
    assert_eq!(one(&prom, q, t), p99.as_f64().unwrap());
    let sum = at(
        &prom,
        "sum by (precision) (sum_over_time(hitcount_hits[1h]))",
        now,
    );
    assert_eq!(sum, BTreeMap::from([("60".to_string(), 9.0)]));

    let log = acl_log(&mut admin).await;
    assert!(log.is_empty(), "ACL LOG: {log:?}");
}
