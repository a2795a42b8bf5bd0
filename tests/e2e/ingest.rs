//! `hitcount ingest` end to end, the real binary against a real
//! redis-server and a real worker: every answer of `POST /api/v1/hits`
//! (202 with each refusal's reason, 400, 401, 403, 405, 413, 415, 429, a
//! body trickled, a hostile nesting), the hits counted exactly, requests
//! resent after a lost reply counted once by their ids, and a `kill -9`
//! mid-batch that never doubles an acknowledged request.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::bin::{
    counted, free_addr, http_get, http_raw, metric_value, post_hits as post, start_ingest,
    start_worker,
};
use crate::common::*;

/// Waits until the worker has read every entry of the stream `hits` and
/// applied each (none pending).
async fn drained(admin: &mut hitcount::store::connect::Conn) {
    eventually!(60, "the worker applied every hit", {
        let groups: redis::streams::StreamInfoGroupsReply = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg("hits")
            .query_async(admin)
            .await
            .unwrap();
        groups
            .groups
            .first()
            .is_some_and(|g| g.lag == Some(0) && g.pending == 0 && g.entries_read.unwrap_or(0) > 0)
    });
}

fn metric(addr: &str, series: &str) -> f64 {
    let (_, body) = http_get(addr, "/metrics").unwrap();
    metric_value(&body, series).unwrap_or_else(|| panic!("{series} not in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_says_why_and_what_is_accepted_is_counted_exactly() {
    let srv = server();
    let url = srv.url();
    let mut admin = conn(&url).await;
    let (mut ingest, addr) = start_ingest(
        &url,
        &[
            "--tokens",
            "t-one,t-two",
            "--origins",
            "https://ok.example",
            "--max-body",
            "4096",
        ],
    );
    let auth = "Authorization: Bearer t-two";
    let json = "application/json";

    // A batch: two hits accepted, three refused with the worker's reasons.
    let (status, head, body) = post(
        &addr,
        json,
        &[auth],
        r#"[{"name":"a","count":2},{"name":""},{"name":"a","count":0},
            {"name":"b","value":3.5,"id":"b-1"},{"name":"a","count":2.0}]"#,
    );
    assert_eq!(status, 202, "{body}");
    assert!(head.contains("content-type: application/json"), "{head}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"accepted": 2, "refused": [
            {"index": 1, "reason": "empty_name"},
            {"index": 2, "reason": "bad_count"},
            {"index": 4, "reason": "bad_count"},
        ]})
    );
    // One hit alone, and NDJSON with a line that is no JSON.
    let (status, _, body) = post(
        &addr,
        "application/json; charset=utf-8",
        &[auth],
        r#"{"name":"a"}"#,
    );
    assert_eq!(
        (status, body.as_str()),
        (202, r#"{"accepted":1,"refused":[]}"#)
    );
    let (status, _, body) = post(
        &addr,
        "application/x-ndjson",
        &["Authorization: bearer t-one"],
        "{\"name\":\"c\",\"count\":5}\nnot json\n\n{\"name\":\"c\",\"ts\":-1}\n{\"name\":\"c\"}\n",
    );
    assert_eq!(
        (status, body.as_str()),
        (
            202,
            r#"{"accepted":2,"refused":[{"index":1,"reason":"bad_json"},{"index":2,"reason":"bad_timestamp"}]}"#
        )
    );

    // A body of more refusals than an answer lists: the first 1,000, and
    // how many more.
    let zeros = format!("[{}]", vec!["0"; 1005].join(","));
    let (status, _, body) = post(&addr, json, &[auth], &zeros);
    assert_eq!(status, 202, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    let listed = answer["refused"].as_array().unwrap();
    assert_eq!(
        (
            answer["accepted"].as_u64(),
            listed.len(),
            answer["refused_unlisted"].as_u64()
        ),
        (Some(0), 1000, Some(5)),
        "{body}"
    );
    assert_eq!(
        listed[999],
        serde_json::json!({"index": 999, "reason": "bad_msgpack"})
    );

    // Nothing to read: 400, saying why.
    for bad in [
        "{",
        "5",
        "",
        "[{\"name\":\"a\"}] [",
        "[{\"name\":\"a\"}",
        &format!("{}{}", "[".repeat(2000), "]".repeat(2000)),
    ] {
        let start = Instant::now();
        let (status, _, body) = post(&addr, json, &[auth], bad);
        assert_eq!(status, 400, "{body}");
        assert!(
            body.starts_with(r#"{"error":"body is not a JSON hit"#),
            "{body}"
        );
        assert!(start.elapsed() < Duration::from_secs(2));
    }
    // No token, a wrong one, a token of another scheme: 401.
    for more in [
        &[][..],
        &["Authorization: Bearer t-three"],
        &["Authorization: Basic t-one"],
    ] {
        let (status, head, body) = post(&addr, json, more, r#"{"name":"a"}"#);
        assert_eq!(status, 401, "{body}");
        assert!(head.contains("www-authenticate: bearer"), "{head}");
    }
    // Over the body limit, sent or only announced: 413, naming it.
    let big = format!(r#"[{}{{"name":"a"}}]"#, r#"{"name":"a"},"#.repeat(400));
    let (status, _, body) = post(&addr, json, &[auth], &big);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("4096 bytes"), "{body}");
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(s, "POST /api/v1/hits HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: {json}\r\nContent-Length: 100000000\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.read_to_string(&mut raw);
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    // Another content type, or none: 415.
    for content_type in ["application/xml", "multipart/form-data; boundary=x"] {
        let (status, _, body) = post(&addr, content_type, &[auth], r#"{"name":"a"}"#);
        assert_eq!(status, 415, "{body}");
    }
    let (status, _, _) = http_raw(
        &addr,
        &format!("POST /api/v1/hits HTTP/1.1\r\nHost: x\r\n{auth}"),
        b"{\"name\":\"a\"}",
    )
    .unwrap();
    assert_eq!(status, 415);
    // No body at all (HTTP/1.0 without Content-Length sends none): 400
    // saying so (it was a parser's "EOF while parsing a value").
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /api/v1/hits HTTP/1.0\r\n{auth}\r\nContent-Type: {json}\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.read_to_string(&mut raw);
    assert!(raw.starts_with("HTTP/1.0 400"), "{raw}");
    assert!(raw.contains("it is empty"), "{raw}");
    // A body beginning with a UTF-8 byte order mark is read past it.
    let (status, _, body) = post(
        &addr,
        "application/x-ndjson",
        &[auth],
        "\u{feff}{\"name\":\"bom\"}\n",
    );
    assert_eq!(
        (status, body.as_str()),
        (202, r#"{"accepted":1,"refused":[]}"#)
    );
    // A compressed body: 415 saying so (it was judged as bad JSON: 400).
    let (status, _, body) = post(
        &addr,
        json,
        &[auth, "Content-Encoding: gzip"],
        "\u{1f}\u{8b}\u{8}",
    );
    assert_eq!(status, 415, "{body}");
    assert!(body.contains("Content-Encoding"), "{body}");
    // Another method: 405, saying which are taken.
    let (status, head, _) = http_raw(&addr, "GET /api/v1/hits HTTP/1.1\r\nHost: x", b"").unwrap();
    assert_eq!(status, 405);
    assert!(head.contains("allow: post, options"), "{head}");

    // A page of the configured origin: no token needed, names under web:,
    // CORS headers on the answer.
    let page = "Origin: https://ok.example";
    let (status, head, body) = post(
        &addr,
        "text/plain;charset=UTF-8",
        &[page],
        r#"[{"name":"web:/home","value":120},{"name":"a"}]"#,
    );
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body,
        r#"{"accepted":1,"refused":[{"index":1,"reason":"outside_prefix"}]}"#
    );
    assert!(
        head.contains("access-control-allow-origin: https://ok.example"),
        "{head}"
    );
    // A page of another origin: 403, no CORS header, nothing counted.
    let (status, head, _) = post(
        &addr,
        "text/plain",
        &["Origin: https://evil.example"],
        r#"{"name":"web:/x"}"#,
    );
    assert_eq!(status, 403);
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    // Preflights.
    let preflight = |origin: &str| {
        http_raw(
            &addr,
            &format!("OPTIONS /api/v1/hits HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: POST"),
            b"",
        )
        .unwrap()
    };
    let (status, head, _) = preflight("https://ok.example");
    assert_eq!(status, 204);
    assert!(
        head.contains("access-control-allow-methods: post"),
        "{head}"
    );
    let (status, head, _) = preflight("https://evil.example");
    assert_eq!(status, 403);
    assert!(!head.contains("access-control-allow"), "{head}");
    // An OPTIONS without Origin is no preflight: it is told the methods.
    let (status, head, _) =
        http_raw(&addr, "OPTIONS /api/v1/hits HTTP/1.1\r\nHost: x", b"").unwrap();
    assert_eq!(status, 204);
    assert!(head.contains("allow: post, options"), "{head}");
    assert!(!head.contains("access-control-allow"), "{head}");

    // A body trickled a byte a second is cut at the body deadline, while
    // others are answered meanwhile.
    let trickle = std::thread::spawn({
        let addr = addr.clone();
        move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            write!(s, "POST /api/v1/hits HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t-one\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n").unwrap();
            let start = Instant::now();
            s.set_read_timeout(Some(Duration::from_millis(1000)))
                .unwrap();
            let mut raw = Vec::new();
            while start.elapsed() < Duration::from_secs(30) {
                if s.write_all(b" ").is_err() {
                    break;
                }
                let mut buf = [0u8; 4096];
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => raw.extend_from_slice(&buf[..n]),
                    Err(_) => {}
                }
                if !raw.is_empty() {
                    break;
                }
            }
            (start.elapsed(), String::from_utf8_lossy(&raw).into_owned())
        }
    });
    std::thread::sleep(Duration::from_secs(1));
    let (status, _, _) = post(&addr, json, &[auth], r#"{"name":"a"}"#);
    assert_eq!(status, 202);
    let (took, raw) = trickle.join().unwrap();
    assert!(raw.starts_with("HTTP/1.1 408"), "{raw}");
    assert!(raw.contains("did not arrive within 10 s"), "{raw}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    // Requests the HTTP layer answers itself: 431 for too many headers,
    // 400 for two lengths. Each is counted under its own code.
    let too_many = "X-A: b\r\n".repeat(101);
    for (head, want) in [
        (format!("POST /api/v1/hits HTTP/1.1\r\nHost: x\r\n{too_many}\r\n"), "HTTP/1.1 431"),
        (
            "POST /api/v1/hits HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".into(),
            "HTTP/1.1 400",
        ),
    ] {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut raw = String::new();
        let _ = s.read_to_string(&mut raw);
        assert!(raw.starts_with(want), "{raw}");
    }

    // What was accepted is counted, exactly, by a real worker.
    let listen = free_addr();
    let mut worker = start_worker(&url, "w", &listen, &[]);
    drained(&mut admin).await;
    assert_eq!(counted(&mut admin, "a").await, 2 + 1 + 1);
    assert_eq!(counted(&mut admin, "b").await, 1);
    assert_eq!(counted(&mut admin, "c").await, 5 + 1);
    assert_eq!(counted(&mut admin, "web:/home").await, 1);
    assert_eq!(counted(&mut admin, "bom").await, 1);
    let stats: Vec<String> = redis::cmd("HVALS")
        .arg("stats:60:b")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(stats.contains(&"3.5".to_string()), "{stats:?}");
    assert!(dead_letters(&mut admin).await.is_empty());
    // Metrics: answers by code, hits by outcome and reason.
    for (series, want) in [
        ("hitcount_ingest_hits_accepted_total", 8.0),
        (
            "hitcount_ingest_hits_refused_total{reason=\"bad_count\"}",
            2.0,
        ),
        (
            "hitcount_ingest_hits_refused_total{reason=\"empty_name\"}",
            1.0,
        ),
        (
            "hitcount_ingest_hits_refused_total{reason=\"bad_json\"}",
            1.0,
        ),
        (
            "hitcount_ingest_hits_refused_total{reason=\"outside_prefix\"}",
            1.0,
        ),
        // Every refusal counts, listed or not.
        (
            "hitcount_ingest_hits_refused_total{reason=\"bad_msgpack\"}",
            1005.0,
        ),
        ("hitcount_ingest_requests_total{code=\"202\"}", 7.0),
        ("hitcount_ingest_requests_total{code=\"401\"}", 3.0),
        ("hitcount_ingest_requests_total{code=\"413\"}", 2.0),
        ("hitcount_ingest_requests_total{code=\"415\"}", 4.0),
        // The body trickled, and the HTTP layer's own answers: none a 500.
        ("hitcount_ingest_requests_total{code=\"408\"}", 1.0),
        ("hitcount_ingest_requests_total{code=\"431\"}", 1.0),
        ("hitcount_ingest_requests_total{code=\"400\"}", 8.0),
        ("hitcount_ingest_requests_total{code=\"500\"}", 0.0),
    ] {
        assert_eq!(metric(&addr, series), want, "{series}");
    }
    assert!(worker.terminate(Duration::from_secs(30)).success());
    assert!(
        ingest.terminate(Duration::from_secs(15)).success(),
        "{}",
        ingest.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_its_rate_a_client_waits_and_others_do_not() {
    let srv = server();
    let (_ingest, addr) = start_ingest(&srv.url(), &["--rate", "5"]);
    let statuses: Vec<u16> = (0..8)
        .map(|_| post(&addr, "application/json", &[], r#"{"name":"r"}"#).0)
        .collect();
    assert_eq!(&statuses[..5], [202; 5]);
    let (status, head, body) = post(&addr, "application/json", &[], r#"{"name":"r"}"#);
    assert_eq!(status, 429, "{body}");
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(body.contains("over 5 requests a second"), "{body}");
    // The probes are not held back.
    assert_eq!(http_get(&addr, "/healthz").unwrap().0, 200);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        post(&addr, "application/json", &[], r#"{"name":"r"}"#).0,
        202
    );
}

/// Sends `body` and closes the connection `after` it without reading a
/// byte of the reply: the reply is lost, whatever ingest did (at once:
/// maybe before ingest read the request; after a while: once it answered).
fn post_and_hang_up(addr: &str, body: &str, after: Duration) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /api/v1/hits HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(after);
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_resent_after_a_lost_reply_counts_once_by_its_ids() {
    let srv = server();
    let url = srv.url();
    let mut admin = conn(&url).await;
    let (_ingest, addr) = start_ingest(&url, &[]);
    let body: String = {
        let hits: Vec<String> = (0..50)
            .map(|i| {
                format!(
                    r#"{{"name":"order:{}","count":{},"id":"req-7-{i}"}}"#,
                    i % 5,
                    i + 1
                )
            })
            .collect();
        format!("[{}]", hits.join(","))
    };
    // The reply dropped three times: at once, once ingest surely answered
    // (its hits appended), at once again; then read.
    for after in [0, 500, 0] {
        post_and_hang_up(&addr, &body, Duration::from_millis(after));
    }
    let (status, _, answer) = post(&addr, "application/json", &[], &body);
    assert_eq!(
        (status, answer.as_str()),
        (202, r#"{"accepted":50,"refused":[]}"#)
    );
    // An id given twice in one request counts once too.
    let (status, _, _) = post(
        &addr,
        "application/json",
        &[],
        r#"[{"name":"twice","id":"t"},{"name":"twice","id":"t"},{"name":"twice"}]"#,
    );
    assert_eq!(status, 202);
    let listen = free_addr();
    let _worker = start_worker(&url, "w", &listen, &[]);
    drained(&mut admin).await;
    for k in 0..5 {
        let want: i64 = (0..50).filter(|i| i % 5 == k).map(|i| i + 1).sum();
        assert_eq!(
            counted(&mut admin, &format!("order:{k}")).await,
            want,
            "order:{k}"
        );
    }
    assert_eq!(counted(&mut admin, "twice").await, 2);
    let entries: i64 = redis::cmd("XLEN")
        .arg("hits")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(entries, 50 + 2);
    // The ids are kept for the horizon, in the stream's hash slot.
    let ttl: i64 = redis::cmd("TTL")
        .arg("{hits}:hc:ingest:req-7-0")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!((86_000..=86_400).contains(&ttl), "{ttl}");
    // The answered hang-up appended them: the last send found every id.
    assert!(metric(&addr, "hitcount_ingest_hits_duplicate_total") >= 50.0 + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_mid_batch_never_doubles_an_acknowledged_request() {
    let srv = server();
    let url = srv.url();
    let mut admin = conn(&url).await;
    let (mut ingest, addr) = start_ingest(&url, &["--rate", "0"]);
    // One client, batches of 100 hits without ids, one at a time: at the
    // kill, at most one request is in flight, unacknowledged.
    const BATCH: i64 = 100;
    let body = format!("[{}]", vec![r#"{"name":"k"}"#; BATCH as usize].join(","));
    let mut acknowledged = 0i64;
    let mut failed = 0i64;
    let started = Instant::now();
    let mut killed = false;
    while started.elapsed() < Duration::from_secs(6) {
        if !killed && started.elapsed() > Duration::from_secs(2) {
            ingest.signal(libc::SIGKILL);
            killed = true;
        }
        match http_raw(
            &addr,
            "POST /api/v1/hits HTTP/1.1\r\nHost: x\r\nContent-Type: application/json",
            body.as_bytes(),
        ) {
            Some((202, _, _)) => acknowledged += BATCH,
            _ => {
                failed += 1;
                if failed > 50 {
                    break;
                }
            }
        }
    }
    assert!(killed && failed > 0, "ingest was killed mid-run");
    assert!(acknowledged > 0);
    let _ = ingest.wait(Duration::from_secs(10));
    let listen = free_addr();
    let _worker = start_worker(&url, "w", &listen, &[]);
    drained(&mut admin).await;
    let counted = counted(&mut admin, "k").await;
    assert!(
        (acknowledged..=acknowledged + BATCH).contains(&counted),
        "acknowledged {acknowledged}, counted {counted}"
    );
}

/// The lab's `bench --ingest` runs its four phases against the real
/// binary, every request answered, and checks that the stream holds
/// exactly the hits acknowledged; it leaves no key behind. (The rates it
/// measures are the benchmark's business, not this test's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ingest_benchmark_reports_every_phase_and_cleans_up() {
    let srv = server();
    let url = srv.url();
    let one_second_each = ["--ingest", "--ingest-secs", "1", "--json"];
    let report = crate::common::bin::lab_json(
        &[&["bench", "--redis-url", &url], &one_second_each[..]].concat(),
    );
    let phases = ["batches", "singles", "batches_half", "singles_half"];
    let hits: u64 = phases
        .iter()
        .map(|p| report[p]["hits"].as_u64().unwrap())
        .sum();
    for p in phases {
        assert!(
            report[p]["requests"].as_u64().unwrap() > 0,
            "{p}: {report:#}"
        );
        assert!(
            report[p]["p99_ms"].as_f64().unwrap() > 0.0,
            "{p}: {report:#}"
        );
    }
    assert_eq!(report["batches"]["hits"].as_u64().unwrap() % 100, 0);
    assert_eq!(report["appended"].as_u64().unwrap(), hits, "{report:#}");
    // StatsD: lines sent flat out and at half the goal, each taken counted once.
    let statsd = &report["statsd"];
    let taken = ["flat_out", "half"].map(|p| statsd[p]["taken"].as_u64().unwrap());
    assert!(taken.iter().all(|t| *t > 0), "{statsd:#}");
    assert_eq!(statsd["appended"].as_u64().unwrap(), taken[0] + taken[1]);
    let mut admin = conn(&url).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

/// With stream shards, each name's hits go to the shard the producer
/// picks, each id kept in its shard's hash slot, and workers reading the
/// shards count every hit once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_hits_and_their_ids_land_in_their_shards() {
    let srv = server();
    let url = srv.url();
    let mut admin = conn(&url).await;
    let (_ingest, addr) = start_ingest(&url, &["--shards", "4"]);
    let hits: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"name":"s:{}","id":"i{i}"}}"#, i % 8))
        .collect();
    let body = format!("[{}]", hits.join(","));
    for _ in 0..2 {
        let (status, _, answer) = post(&addr, "application/json", &[], &body);
        assert_eq!(
            (status, answer.as_str()),
            (202, r#"{"accepted":40,"refused":[]}"#)
        );
    }
    let mut total = 0;
    for k in 0..4u32 {
        let stream = format!("hits:{{{k}}}");
        let len: i64 = redis::cmd("XLEN")
            .arg(&stream)
            .query_async(&mut admin)
            .await
            .unwrap();
        total += len;
        let ids: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{stream}:hc:ingest:*"))
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(
            ids.len() as i64,
            len,
            "{stream}: one id key per hit appended"
        );
    }
    assert_eq!(total, 40);
    let listen = free_addr();
    let _worker = start_worker(&url, "w", &listen, &["--shards", "4"]);
    eventually!(60, "every hit counted", {
        let mut n = 0;
        for name in 0..8 {
            n += counted(&mut admin, &format!("s:{name}")).await;
        }
        n == 40
    });
    for name in 0..8 {
        assert_eq!(counted(&mut admin, &format!("s:{name}")).await, 5);
    }
}

/// While Redis is away ingest answers 503 with `Retry-After` and is not
/// ready; once Redis is back it takes hits again on a new connection, and
/// a request resent with its ids counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_away_is_a_503_to_send_again_and_ingest_recovers() {
    let mut srv = server_with(hitcount_lab::kit::ServerOptions::default());
    let url = srv.url();
    let (mut ingest, addr) = start_ingest(&url, &[]);
    let body = r#"[{"name":"away","id":"a1"},{"name":"away","id":"a2","count":2}]"#;
    assert_eq!(post(&addr, "application/json", &[], body).0, 202);
    srv.stop();
    let (status, head, answer) = post(&addr, "application/json", &[], body);
    assert_eq!(status, 503, "{answer}");
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(answer.contains("send again"), "{answer}");
    // Redis may have run the call whose reply was lost: the answer says
    // so, and how to send again without counting twice.
    for words in [
        "may have taken the hits",
        "send again with the same ids, counted once",
    ] {
        assert!(answer.contains(words), "{answer}");
    }
    assert_eq!(post(&addr, "application/json", &[], body).0, 503);
    assert_eq!(http_get(&addr, "/readyz").unwrap().0, 503);
    assert_eq!(http_get(&addr, "/healthz").unwrap().0, 200);
    srv.restart().unwrap();
    crate::common::bin::wait_for("ingest ready again", Duration::from_secs(30), || {
        ingest.assert_running();
        http_get(&addr, "/readyz").filter(|(s, _)| *s == 200)
    });
    // The server kept its data (a restart, not a flush): the ids too.
    assert_eq!(post(&addr, "application/json", &[], body).0, 202);
    let mut admin = conn(&url).await;
    let entries: i64 = redis::cmd("XLEN")
        .arg("hits")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(entries, 2);
    assert!(metric(&addr, "hitcount_ingest_requests_total{code=\"503\"}") >= 1.0);
    // Restarted between two requests, nobody asking /readyz: the first
    // request after it is taken (its connection, broken by the restart,
    // carried nothing: it was a 503 to send again).
    srv.stop();
    srv.restart().unwrap();
    let once = r#"[{"name":"again","id":"b1"}]"#;
    let (status, _, answer) = post(&addr, "application/json", &[], once);
    assert_eq!(status, 202, "{answer}\n{}", ingest.stderr());
    let again: i64 = redis::cmd("EXISTS")
        .arg("{hits}:hc:ingest:b1")
        .query_async(&mut conn(&url).await)
        .await
        .unwrap();
    assert_eq!(again, 1, "its id is recorded: it went in");
    // The outage is in the log, once, and its end.
    assert!(ingest.terminate(Duration::from_secs(15)).success());
    let log = ingest.stderr();
    assert_eq!(
        log.matches("ingest: Redis unavailable; answering 503")
            .count(),
        1,
        "{log}"
    );
    assert!(log.contains("ingest: Redis reachable again"), "{log}");
}

/// Redis reaching its `maxmemory` in the middle of a large body: the 503
/// says Redis is out of memory and how many hits it took before (they
/// are in the stream and in the accepted metric), so that a client knows
/// what sending it again would count twice; ingest says so in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_out_of_memory_mid_request_says_what_it_took() {
    let srv = server();
    let url = srv.url();
    let (mut ingest, addr) = start_ingest(&url, &[]);
    let mut admin = conn(&url).await;
    let body = format!("[{}]", vec![r#"{"name":"oom"}"#; 50_000].join(","));
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut admin)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let set_max = |bytes: u64| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .clone()
    };
    let _: () = set_max(used + 500_000)
        .query_async(&mut admin)
        .await
        .unwrap();
    let (status, head, answer) = post(&addr, "application/json", &[], &body);
    let _: () = set_max(0).query_async(&mut admin).await.unwrap();
    assert_eq!(status, 503, "{answer}");
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(
        answer.contains("Redis is out of memory (maxmemory): send again"),
        "{answer}"
    );
    let json: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let taken = json["accepted"].as_u64().unwrap();
    assert!((1..50_000).contains(&taken), "{answer}");
    let entries: u64 = redis::cmd("XLEN")
        .arg("hits")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(entries, taken, "{answer}");
    assert_eq!(
        metric(&addr, "hitcount_ingest_hits_accepted_total"),
        taken as f64
    );
    // Writes taken again: the whole body goes in.
    assert_eq!(post(&addr, "application/json", &[], &body).0, 202);
    assert_eq!(metric(&addr, "hitcount_redis_oom"), 0.0);
    ingest.assert_running();
    let _ = ingest.terminate(Duration::from_secs(20));
    assert!(
        ingest.stderr().contains("Redis is out of memory"),
        "{}",
        ingest.stderr()
    );
}

/// A page's ids are kept apart from a server's: a page that sends the id a
/// server will use (an order number it guessed) cannot have the server's
/// hit dropped. An id sent again with another hit is not counted, but the
/// answer lists it in `conflicts` and a metric counts it; the same hit
/// sent again is the quiet resend it always was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pages_id_cannot_drop_a_servers_hit_and_a_reused_id_is_told() {
    let srv = server();
    let url = srv.url();
    let mut admin = conn(&url).await;
    let (_ingest, addr) = start_ingest(
        &url,
        &["--tokens", "tok", "--origins", "https://good.example"],
    );
    let page = ("text/plain", "Origin: https://good.example");
    let server = ("application/json", "Authorization: Bearer tok");
    let sale = r#"{"name":"sale:order","count":3,"id":"order-42"}"#;
    let ok = r#"{"accepted":1,"refused":[]}"#;
    let send = |(content_type, header): (&str, &str), body: &str, want: &str| {
        let (status, _, answer) = post(&addr, content_type, &[header], body);
        assert_eq!((status, answer.as_str()), (202, want), "{body}");
    };
    let xlen = |mut admin: hitcount::store::connect::Conn| async move {
        let n: i64 = redis::cmd("XLEN")
            .arg("hits")
            .query_async(&mut admin)
            .await
            .unwrap();
        n
    };
    // The page sends the id first; the server's sale is appended anyway.
    send(page, r#"{"name":"web:/x","id":"order-42"}"#, ok);
    send(server, sale, ok);
    assert_eq!(
        xlen(admin.clone()).await,
        2,
        "the server's sale was dropped"
    );
    // The server's id keeps its documented key; the page's has its own.
    let digest: String = redis::cmd("EVAL")
        .arg("return redis.sha1hex(ARGV[1])")
        .arg(0)
        .arg("order-42")
        .query_async(&mut admin)
        .await
        .unwrap();
    let page_key = format!("{{hits}}:hc:ingest:page:{digest}");
    for key in ["{hits}:hc:ingest:order-42", page_key.as_str()] {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(exists, 1, "{key}");
    }
    // The same sale again (a resend): quiet. Other hits with its id, and
    // with the page's: told, by index, and not counted.
    send(server, sale, ok);
    send(
        server,
        r#"[{"name":""},{"name":"sale:order","count":3,"id":"order-42"},
            {"name":"sale:order","count":5,"id":"order-42"},{"name":"sale:other","id":"order-42"}]"#,
        r#"{"accepted":3,"refused":[{"index":0,"reason":"empty_name"}],"conflicts":[2,3]}"#,
    );
    send(
        page,
        r#"[{"name":"web:/x","id":"order-42"},{"name":"web:/y","id":"order-42"}]"#,
        r#"{"accepted":2,"refused":[],"conflicts":[1]}"#,
    );
    assert_eq!(xlen(admin.clone()).await, 2);
    assert_eq!(metric(&addr, "hitcount_ingest_hits_id_conflict_total"), 3.0);
    assert_eq!(metric(&addr, "hitcount_ingest_hits_duplicate_total"), 6.0);

    // An id a page sent to a version that kept pages' ids with the
    // servers' (its key holds "1"), sent again across the upgrade: once.
    let () = redis::cmd("SET")
        .arg("{hits}:hc:ingest:cart-7")
        .arg("1")
        .arg("EX")
        .arg(600)
        .query_async(&mut admin)
        .await
        .unwrap();
    send(page, r#"{"name":"web:/cart","id":"cart-7"}"#, ok);
    assert_eq!(
        xlen(admin.clone()).await,
        2,
        "counted twice across the upgrade"
    );
    // Only such a key: a server's (a fingerprint) never drops a page's hit.
    send(server, r#"{"name":"sale:cart","id":"cart-8"}"#, ok);
    send(page, r#"{"name":"web:/cart","id":"cart-8"}"#, ok);
    assert_eq!(xlen(admin).await, 4);
}

/// Origins configured in capitals or with their default port are taken as
/// browsers spell them (which leave both out): their pages' hits go in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_origins_match_as_browsers_spell_them() {
    let srv = server();
    let (_ingest, addr) = start_ingest(
        &srv.url(),
        &["--origins", "HTTPS://A.Example:443,http://b.example:80/"],
    );
    for origin in ["https://a.example", "http://b.example"] {
        let (status, head, body) = post(
            &addr,
            "text/plain",
            &[&format!("Origin: {origin}")],
            r#"{"name":"web:/"}"#,
        );
        assert_eq!(
            (status, body.as_str()),
            (202, r#"{"accepted":1,"refused":[]}"#),
            "{origin}"
        );
        assert!(
            head.contains(&format!("access-control-allow-origin: {origin}")),
            "{head}"
        );
    }
    let (status, _, _) = post(
        &addr,
        "text/plain",
        &["Origin: https://b.example"],
        r#"{"name":"web:/"}"#,
    );
    assert_eq!(status, 403, "another scheme is another origin");
}
