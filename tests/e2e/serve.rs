//! `hitcount serve`, the read-only JSON query API, run as the real binary
//! against a real redis-server: exact samples for awkward names, paging
//! without loss or repeats, `top` against a brute-force ranking, every
//! refusal, and the whole API as a Redis user that may only read.

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::bin::{free_addr, hitcount, percent_encode as enc, run_hitcount, wait_for, Child};
use common::*;
use hitcount::model::stats::{exact_quantile, HistBucket, RELATIVE_ACCURACY, REPORTED_QUANTILES};
use hitcount::store::connect::Conn;
use hitcount_lab::kit::ServerOptions;
use serde_json::{json, Value};

/// The rules of a read-only user, as docs/operations.md gives them.
pub(crate) const READ_ONLY: &str =
    "resetchannels ~known: ~count:* ~stats:* -@all +@read +@connection -@dangerous +info";

pub(crate) struct Answer {
    pub(crate) status: u16,
    head: String,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    fn has(&self, header: &str) -> bool {
        self.head
            .to_ascii_lowercase()
            .contains(&header.to_ascii_lowercase())
    }
}

/// One HTTP/1.1 request; the status, the head and the body (never chunked
/// here: the API answers with a length).
fn request(addr: &str, method: &str, path: &str) -> Option<Answer> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    // A server that refuses a request before reading all of it (431) may
    // close while it is still being sent: the write then fails, and the
    // answer is read all the same, as far as it came.
    let _ = write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some(Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    })
}

pub(crate) fn get(addr: &str, path: &str) -> Answer {
    let a = request(addr, "GET", path).unwrap_or_else(|| panic!("no answer to {path}"));
    // The headers every answer carries.
    for h in [
        "content-type: application/json; charset=utf-8",
        "cache-control: no-store",
        "x-content-type-options: nosniff",
        "content-security-policy: default-src 'none'",
    ] {
        assert!(a.has(h), "{path}: no `{h}` in\n{}", a.head);
    }
    a
}

/// Starts `hitcount serve` on `url` and waits until it answers.
pub(crate) fn serve(url: &str, extra: &[&str]) -> (Child, String) {
    let addr = free_addr();
    let mut cmd = hitcount();
    cmd.args(["serve", "--redis-url", url, "--listen", &addr])
        .args(extra);
    let mut child = Child::spawn("serve", cmd);
    wait_for("serve answers", Duration::from_secs(30), || {
        child.assert_running();
        request(&addr, "GET", "/api/v1/nope")
    });
    (child, addr)
}

/// `serve` flags for tests that rank buckets of years ago: enough samples
/// kept that `top` ranks them (it refuses buckets older than they keep).
const OLD_BUCKETS: &[&str] = &["--samples", "1000000000"];

/// Writes a counter directly in the seeds' layout.
pub(crate) async fn seed(c: &mut Conn, precision: u32, name: &str, samples: &[(i64, i64)]) {
    let mut pipe = redis::pipe();
    pipe.cmd("ZADD")
        .arg("known:")
        .arg(0)
        .arg(format!("{precision}:{name}"));
    for (t, n) in samples {
        pipe.cmd("HSET")
            .arg(format!("count:{precision}:{name}"))
            .arg(t)
            .arg(n);
    }
    let _: () = pipe.query_async(c).await.unwrap();
}

const AWKWARD: [&str; 6] = [
    "page:home",
    "a/b/c",
    "with space",
    "café ☕",
    "x:y/z é%20+",
    "日本語:ページ",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_of_awkward_names_are_exact() {
    let server = server();
    let mut c = conn(&server.url()).await;
    let mut expected = BTreeMap::new();
    for (i, name) in AWKWARD.iter().enumerate() {
        let i = i as i64;
        let samples = [
            (1_700_000_040, 3 + i),
            (1_700_000_100, 1),
            (1_700_000_160, 20 * i),
        ];
        seed(&mut c, 60, name, &samples).await;
        seed(&mut c, 1, name, &[(1_700_000_001, 7)]).await;
        expected.insert(name.to_string(), samples);
    }
    // Known but emptied by the cleaner: no samples, yet it exists.
    seed(&mut c, 60, "emptied", &[]).await;
    let (_serve, addr) = serve(&server.url(), &[]);

    for (name, samples) in &expected {
        let a = get(
            &addr,
            &format!("/api/v1/counters/{}?precision=60", enc(name)),
        );
        assert_eq!(a.status, 200, "{name}: {}", a.body);
        let want: Vec<Value> = samples.iter().map(|(t, n)| json!([t, n])).collect();
        assert_eq!(
            a.json(),
            json!({"name": name, "precision": 60, "samples": want, "stats": false})
        );
        let a = get(
            &addr,
            &format!(
                "/api/v1/counters/{}?precision=60&from=1700000100&until=1700000100",
                enc(name)
            ),
        );
        assert_eq!(a.json()["samples"], json!([[1_700_000_100, 1]]), "{name}");
        let a = get(
            &addr,
            &format!("/api/v1/counters/{}?precision=1", enc(name)),
        );
        assert_eq!(a.json()["samples"], json!([[1_700_000_001, 7]]), "{name}");
    }
    let a = get(&addr, "/api/v1/counters/emptied?precision=60");
    assert_eq!((a.status, a.json()["samples"].clone()), (200, json!([])));
    // ':' and a raw '/' in the path are part of the name too.
    let a = get(&addr, "/api/v1/counters/a/b/c?precision=60");
    assert_eq!(a.json()["name"], "a/b/c");

    // The listing: names (not members), each with its precisions.
    let a = get(&addr, "/api/v1/counters");
    let body = a.json();
    assert_eq!(body["next"], Value::Null);
    let names: Vec<&str> = body["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let mut want: Vec<&str> = AWKWARD.to_vec();
    want.push("emptied");
    want.sort_unstable();
    assert_eq!(names, want);
    assert_eq!(body["counters"][0]["precisions"], json!([1, 60]), "{body}");
    let a = get(&addr, &format!("/api/v1/counters?prefix={}", enc("café")));
    assert_eq!(
        a.json()["counters"],
        json!([{"name": "café ☕", "precisions": [1, 60]}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_loses_and_repeats_nothing() {
    let server = server();
    let mut c = conn(&server.url()).await;
    // 2,500 names; precisions vary by name, and some names exist only at
    // a coarse precision, so the per-precision lists differ.
    let mut want: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut pipe = redis::pipe();
    for i in 0..2500 {
        let name = match i % 5 {
            0 => format!("p/{i:05} é"),
            1 => format!("p:{i:05}"),
            _ => format!("q {i:05}"),
        };
        let precisions: Vec<u32> = match i % 4 {
            0 => vec![1, 60, 86400],
            1 => vec![60],
            2 => vec![86400],
            _ => vec![1, 5, 60, 300, 3600, 18000, 86400],
        };
        for p in &precisions {
            pipe.cmd("ZADD")
                .arg("known:")
                .arg(0)
                .arg(format!("{p}:{name}"));
        }
        want.insert(name, precisions);
    }
    let _: () = pipe.query_async(&mut c).await.unwrap();
    let (_serve, addr) = serve(&server.url(), &[]);

    for (limit, prefix) in [(1000, ""), (333, ""), (7, "p"), (100, "q ")] {
        let mut got: Vec<(String, Vec<u32>)> = Vec::new();
        let mut after: Option<String> = None;
        let mut pages = 0;
        loop {
            let mut path = format!("/api/v1/counters?limit={limit}&prefix={}", enc(prefix));
            if let Some(a) = &after {
                path.push_str(&format!("&after={}", enc(a)));
            }
            let body = get(&addr, &path).json();
            let page = body["counters"].as_array().unwrap();
            assert!(page.len() <= limit);
            for c in page {
                let precisions = c["precisions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_u64().unwrap() as u32)
                    .collect();
                got.push((c["name"].as_str().unwrap().to_string(), precisions));
            }
            pages += 1;
            match &body["next"] {
                Value::Null => break,
                Value::String(n) => {
                    assert_eq!(page.len(), limit, "only a full page has a next");
                    after = Some(n.clone());
                }
                other => panic!("next: {other}"),
            }
        }
        let expected: Vec<(String, Vec<u32>)> = want
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(n, p)| (n.clone(), p.clone()))
            .collect();
        assert_eq!(got.len(), expected.len(), "limit {limit} prefix {prefix:?}");
        assert_eq!(got, expected, "limit {limit} prefix {prefix:?}");
        assert_eq!(
            pages,
            expected.len().div_ceil(limit).max(1),
            "limit {limit}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_is_the_brute_force_ranking() {
    let server = server();
    let mut c = conn(&server.url()).await;
    let bucket = 1_700_000_100 / 300 * 300;
    let mut counts: Vec<(String, i64)> = Vec::new();
    let mut pipe = redis::pipe();
    // 2,300 names over several ZRANGEBYLEX pages, many ties, some without
    // this bucket.
    for i in 0..2300_i64 {
        let name = format!("{} n{i}", AWKWARD[i as usize % AWKWARD.len()]);
        pipe.cmd("ZADD")
            .arg("known:")
            .arg(0)
            .arg(format!("300:{name}"));
        pipe.cmd("HSET")
            .arg(format!("count:300:{name}"))
            .arg(bucket - 300)
            .arg(1_000_000);
        if i % 10 != 0 {
            let n = (i * 7919) % 97;
            pipe.cmd("HSET")
                .arg(format!("count:300:{name}"))
                .arg(bucket)
                .arg(n);
            counts.push((name, n));
        }
    }
    let _: () = pipe.query_async(&mut c).await.unwrap();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let (_serve, addr) = serve(&server.url(), OLD_BUCKETS);

    for limit in [1, 50, 1000] {
        // The bucket's start names it (any other time is refused).
        let a = get(
            &addr,
            &format!("/api/v1/top?precision=300&bucket={bucket}&limit={limit}"),
        );
        assert_eq!(a.status, 200, "{}", a.body);
        let want: Vec<Value> = counts
            .iter()
            .take(limit)
            .map(|(n, c)| json!({"name": n, "count": c}))
            .collect();
        assert_eq!(
            a.json(),
            json!({"precision": 300, "bucket": bucket, "counters": want})
        );
    }
    // The default bucket is the current one.
    let a = get(&addr, "/api/v1/top?precision=3600");
    let now = unix_now();
    let b = a.json()["bucket"].as_i64().unwrap();
    assert!(
        b % 3600 == 0 && b <= now && now - b < 3600 + 5,
        "{}",
        a.body
    );
    assert_eq!(a.json()["counters"], json!([]));
}

/// `top` never makes a request wait for a scan once a ranking is known:
/// past 5 s it answers with the last ranking (at most 30 s old) while one
/// background scan computes the next, which the following requests get.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_answers_from_the_last_ranking_while_the_next_is_computed() {
    let server = server();
    let mut c = conn(&server.url()).await;
    let bucket = 1_700_000_000 / 3600 * 3600;
    seed(&mut c, 3600, "a", &[(bucket, 5)]).await;
    seed(&mut c, 3600, "b", &[(bucket, 3)]).await;
    let (_serve, addr) = serve(&server.url(), OLD_BUCKETS);
    let path = format!("/api/v1/top?precision=3600&bucket={bucket}");
    let names = |a: &Answer| -> Vec<String> {
        a.json()["counters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&get(&addr, &path)), ["a", "b"]);
    seed(&mut c, 3600, "b", &[(bucket, 9)]).await;
    // Within 5 s: the same ranking.
    assert_eq!(names(&get(&addr, &path)), ["a", "b"]);
    tokio::time::sleep(Duration::from_millis(5200)).await;
    // Stale now: answered at once from the last ranking...
    assert_eq!(
        names(&get(&addr, &path)),
        ["a", "b"],
        "served while revalidating"
    );
    // ...and the next requests get the new one.
    eventually!(10, "the background scan lands", {
        names(&get(&addr, &path)) == ["b", "a"]
    });
}

/// Rankings asked one right after the other (the dashboard asks the
/// current bucket, then the one before while the current is empty) are
/// all revalidated: the second's background scan waits for the first's
/// (one scan runs at a time). It was dropped, so the second stayed stale,
/// then expired and was refused (429) while the first's scan ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rankings_asked_together_are_all_revalidated() {
    let server = server();
    let mut c = conn(&server.url()).await;
    let now = 1_700_000_000 / 3600 * 3600;
    let buckets = [now, now - 3600];
    // Enough names that a scan takes a while: the second request comes
    // while the first one's background scan runs.
    let mut pipe = redis::pipe();
    for i in 0..20_000 {
        pipe.cmd("ZADD")
            .arg("known:")
            .arg(0)
            .arg(format!("3600:n{i:05}"))
            .ignore();
        for b in buckets {
            pipe.cmd("HSET")
                .arg(format!("count:3600:n{i:05}"))
                .arg(b)
                .arg(1)
                .ignore();
        }
    }
    pipe.query_async::<()>(&mut c).await.unwrap();
    for b in buckets {
        seed(&mut c, 3600, "a", &[(b, 5)]).await;
        seed(&mut c, 3600, "b", &[(b, 3)]).await;
    }
    let (_serve, addr) = serve(&server.url(), OLD_BUCKETS);
    let path = |b: i64| format!("/api/v1/top?precision=3600&bucket={b}&limit=2");
    let names = |b: i64| -> Vec<String> {
        let a = get(&addr, &path(b));
        assert_eq!(a.status, 200, "{}", a.body);
        let counters = a.json()["counters"].as_array().unwrap().clone();
        counters
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    for b in buckets {
        assert_eq!(names(b), ["a", "b"]);
    }
    for b in buckets {
        seed(&mut c, 3600, "b", &[(b, 9)]).await;
    }
    tokio::time::sleep(Duration::from_millis(5200)).await;
    // Both stale: each answered from its last ranking, each revalidated.
    for b in buckets {
        assert_eq!(names(b), ["a", "b"], "served while revalidating");
    }
    // Asked once more only after both scans had time to run: a dropped
    // scan is not simply asked again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        names(buckets[1]),
        ["b", "a"],
        "the second was revalidated too"
    );
    assert_eq!(names(buckets[0]), ["b", "a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_json_and_says_why() {
    let server = server();
    let mut c = conn(&server.url()).await;
    seed(&mut c, 60, "page:home", &[(60, 1)]).await;
    let (_serve, addr) = serve(&server.url(), &[]);
    let cases: &[(&str, u16, &str)] = &[
        (
            "/api/v1/counters/page:home?precision=7",
            400,
            "precision must be one of 1,5,60",
        ),
        ("/api/v1/counters/page:home", 400, "precision is required"),
        (
            "/api/v1/counters/page:home?precision=x",
            400,
            "precision must be one of",
        ),
        (
            "/api/v1/counters/page:home?precision=60&from=x",
            400,
            "from must be a whole number",
        ),
        (
            "/api/v1/counters/page:home?precision=60&from=99999999999999999999",
            400,
            "from must be a whole number from -9223372036854775808 to 9223372036854775807",
        ),
        (
            "/api/v1/counters/page:home?precision=60&until=1.5",
            400,
            "until must be",
        ),
        (
            "/api/v1/counters/bad%zz?precision=60",
            400,
            "percent-encoding",
        ),
        (
            "/api/v1/counters/bad%?precision=60",
            400,
            "percent-encoding",
        ),
        ("/api/v1/counters/bad%FF%FE?precision=60", 400, "UTF-8"),
        ("/api/v1/counters?prefix=%C3", 400, "UTF-8"),
        (
            "/api/v1/counters?limit=0",
            400,
            "limit must be a whole number from 1 to 1000",
        ),
        ("/api/v1/counters?limit=1001", 400, "from 1 to 1000"),
        ("/api/v1/counters?limit=-1", 400, "from 1 to 1000"),
        ("/api/v1/counters?limit=ten", 400, "from 1 to 1000"),
        ("/api/v1/top?precision=7", 400, "precision must be one of"),
        (
            "/api/v1/top?bucket=17",
            400,
            "the oldest bucket kept starts at",
        ),
        ("/api/v1/top?precision=60&bucket=60", 400, "older than"),
        (
            "/api/v1/top?precision=60&bucket=now",
            400,
            "bucket must be a whole number",
        ),
        ("/api/v1/top?precision=60&limit=5000", 400, "from 1 to 1000"),
        ("/api/v1/counters/nothing?precision=60", 404, "no counter"),
        ("/api/v1/counters/page:home?precision=1", 404, "no counter"),
        ("/api/v1/counters/?precision=60", 404, "no such counter"),
        (
            "/api/v1/top?precision=3600&by=median",
            400,
            "by must be `count` or `mean`, not `median`",
        ),
        (
            "/api/v1/top?precision=5&by=mean&bucket=-5",
            400,
            "older than",
        ),
        ("/api/v1/stats/page:home", 400, "precision is required"),
        (
            "/api/v1/stats/page:home?precision=7",
            400,
            "precision must be one of",
        ),
        (
            "/api/v1/stats/page:home?precision=60&from=x",
            400,
            "from must be a whole number",
        ),
        ("/api/v1/stats/bad%zz?precision=60", 400, "percent-encoding"),
        (
            "/api/v1/stats/page:home?precision=60",
            404,
            "no statistics for \"page:home\" at precision 60",
        ),
        ("/api/v1/stats/?precision=60", 404, "no such statistics"),
        ("/api/v1/stats?limit=0", 400, "from 1 to 1000"),
        ("/api/v1/nope", 404, "no such path"),
        ("/api/v2/counters", 404, "no such path"),
        ("/api/", 404, "no such path"),
    ];
    for (path, status, why) in cases {
        let a = get(&addr, path);
        assert_eq!(a.status, *status, "{path}: {}", a.body);
        let msg = a.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(msg.contains(why), "{path}: {msg:?} lacks {why:?}");
    }
    // An unknown parameter is ignored.
    assert_eq!(
        get(&addr, "/api/v1/counters/page:home?precision=60&x=1").status,
        200
    );
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let a = request(&addr, method, "/api/v1/counters").unwrap();
        assert_eq!(a.status, 405, "{method}");
        assert!(a.has("allow: GET, HEAD"), "{}", a.head);
        assert!(a.has("content-security-policy: default-src 'none'"));
        assert!(a.json()["error"].is_string());
    }
    let head = request(&addr, "HEAD", "/api/v1/counters").unwrap();
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    // Headers that do not fit the buffer are refused, as on /metrics.
    let long = format!("/api/v1/counters?prefix={}", "a".repeat(20_000));
    assert_eq!(request(&addr, "GET", &long).map(|a| a.status), Some(431));
}

#[test]
fn redis_out_of_reach_is_a_503() {
    // A port nothing listens on.
    let dead = format!("redis://{}", free_addr());
    let (_serve, addr) = serve(&dead, &[]);
    for path in [
        "/api/v1/counters",
        "/api/v1/counters/x?precision=60",
        "/api/v1/top?precision=60",
    ] {
        let a = get(&addr, path);
        assert_eq!(a.status, 503, "{path}: {}", a.body);
        assert_eq!(a.json(), json!({"error": "Redis is unavailable"}));
    }
    // Bad input is still told before Redis is needed.
    assert_eq!(get(&addr, "/api/v1/counters?limit=0").status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_as_a_user_that_may_only_read() {
    let operations =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .unwrap();
    assert!(
        operations.contains(READ_ONLY),
        "docs/operations.md gives the read-only rules"
    );
    let server = server_with(ServerOptions {
        extra: vec![
            format!("user reader on >read-pw {READ_ONLY}"),
            // The same without `+info`: serve cannot start.
            format!(
                "user noinfo on >read-pw {}",
                READ_ONLY.replace(" +info", "")
            ),
        ],
        ..ServerOptions::default()
    });
    let mut admin = conn(&server.url()).await;
    for name in AWKWARD {
        seed(&mut admin, 60, name, &[(60, 2), (120, 5)]).await;
    }
    let slow = vec![(120, observations(3, 50))];
    seed_stats(&mut admin, 60, "slow", &slow, true).await;
    // Counted at a precision serve is not given: it says so at start.
    seed(&mut admin, 7, "odd", &[(63, 1)]).await;
    let url = format!("redis://reader:read-pw@127.0.0.1:{}", server.port());
    // The user really cannot write.
    let mut reader = conn(&url).await;
    let denied: redis::RedisResult<()> = redis::cmd("HSET")
        .arg("count:60:x")
        .arg(1)
        .arg(1)
        .query_async(&mut reader)
        .await;
    assert_eq!(denied.unwrap_err().code(), Some("NOPERM"));
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query_async(&mut admin)
        .await
        .unwrap();

    let (serving, addr) = serve(&url, OLD_BUCKETS);
    let log = serving.stderr();
    assert!(
        log.contains("precisions this serve does not read") && log.contains("unread=[7]"),
        "{log}"
    );
    let a = get(&addr, "/api/v1/counters?limit=2");
    assert_eq!(a.status, 200, "{}", a.body);
    for name in AWKWARD {
        let a = get(
            &addr,
            &format!("/api/v1/counters/{}?precision=60", enc(name)),
        );
        assert_eq!(a.json()["samples"], json!([[60, 2], [120, 5]]), "{name}");
    }
    assert_eq!(get(&addr, "/api/v1/counters/none?precision=60").status, 404);
    let a = get(&addr, "/api/v1/top?precision=60&bucket=120&limit=3");
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["counters"].as_array().unwrap().len(), 3);
    // Statistics too.
    let a = get(&addr, "/api/v1/stats/slow?precision=60");
    assert_eq!(a.status, 200, "{}", a.body);
    assert_rows_match(&a.json()["buckets"], &slow, true);
    let a = get(&addr, "/api/v1/top?precision=60&bucket=120&by=mean");
    assert_eq!(a.json()["counters"][0]["name"], "slow", "{}", a.body);
    assert_eq!(get(&addr, "/api/v1/stats?limit=5").status, 200);
    // Prometheus' remote read: names counted, listed, their hashes read.
    let dir = tempfile::tempdir().unwrap();
    let (_prom, prom) = crate::common::prometheus::prometheus_reading(dir.path(), &addr, "");
    let q = "hitcount_hits{name=~\".+\",precision=\"60\"}";
    let read = crate::common::prometheus::at(&prom, q, 150);
    let want: std::collections::BTreeMap<String, f64> =
        AWKWARD.iter().map(|n| (n.to_string(), 5.0)).collect();
    assert_eq!(read, want);

    assert_nothing_refused(&mut admin, "serve's user").await;
    // A user short of a rule: the hint names serve's own rules, not the
    // worker's.
    let url = format!("redis://noinfo:read-pw@127.0.0.1:{}", server.port());
    let listen = crate::common::bin::free_addr();
    let out = run_hitcount(&["serve", "--listen", &listen, "--redis-url", &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("NOPERM")
            && err.contains("the read-only user of `hitcount serve` in docs/operations.md"),
        "{err}"
    );
}

#[test]
fn a_bad_listen_address_exits_1_saying_so() {
    for listen in ["nonsense", "127.0.0.1:99999"] {
        let out = run_hitcount(&[
            "serve",
            "--listen",
            listen,
            "--redis-url",
            "redis://127.0.0.1:1",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].contains(&format!(
                "cannot listen on {listen} (--listen / HITCOUNT_SERVE_LISTEN)"
            )),
            "{err}"
        );
    }
}

/// `hitcount-lab bench --serve` plays the open pages against `hitcount
/// serve` (a process) and
/// reports every request it made, then deletes what it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serve_benchmark_reports_every_request_and_cleans_up() {
    let srv = server();
    let url = srv.url();
    let report = crate::common::bin::lab_json(&[
        "bench",
        "--redis-url",
        &url,
        "--serve",
        "--serve-counters",
        "3000",
        "--serve-pages",
        "3",
        "--serve-refresh-secs",
        "1",
        "--serve-secs",
        "3",
        "--json",
    ]);
    assert_eq!(report["counters"], 3000);
    // Each page: one list on open, then a series and a top per refresh.
    assert_eq!(report["list"]["requests"], 3);
    assert_eq!(report["series"]["requests"], 9, "{report:#}");
    assert_eq!(report["top"]["requests"], 9, "{report:#}");
    assert_eq!(report["top_cold"]["requests"], 3);
    let cpu = report["cpu_percent"].as_f64().unwrap();
    assert!(cpu > 0.0 && cpu < 100.0, "{report:#}");
    assert!(report["commands_per_sec"].as_f64().unwrap() > 0.0);
    let mut c = conn(&url).await;
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("bench:*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A bucket's observations: (value, how many times).
pub(crate) type Observations = Vec<(f64, i64)>;

/// `n` deterministic observations spread over 0.5 ms .. 5 s (log-uniform),
/// some repeated, and in some buckets a zero and a negative value.
pub(crate) fn observations(seed: u64, n: usize) -> Observations {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::new();
    for i in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        let v = 0.5 * 10f64.powf(u * 4.0);
        out.push((v, 1 + (i % 3) as i64));
    }
    if seed.is_multiple_of(2) {
        out.extend([(0.0, 2), (-3.25, 1)]);
    }
    out
}

/// Writes statistics as a writer would: HINCRBY of the count (and the
/// histogram, when `histogram`), HINCRBYFLOAT of the sums (so Redis rounds
/// them as it does), HSET of min and max, and the `stats:known:` member.
pub(crate) async fn seed_stats(
    c: &mut Conn,
    precision: u32,
    name: &str,
    buckets: &[(i64, Observations)],
    histogram: bool,
) {
    let key = format!("stats:{precision}:{name}");
    let mut pipe = redis::pipe();
    for (b, obs) in buckets {
        for &(v, n) in obs {
            pipe.cmd("HINCRBY")
                .arg(&key)
                .arg(format!("{b}:count"))
                .arg(n);
            pipe.cmd("HINCRBYFLOAT")
                .arg(&key)
                .arg(format!("{b}:sum"))
                .arg(n as f64 * v);
            pipe.cmd("HINCRBYFLOAT")
                .arg(&key)
                .arg(format!("{b}:sumsq"))
                .arg(n as f64 * v * v);
            if histogram {
                let h = HistBucket::of(v).unwrap().suffix();
                pipe.cmd("HINCRBY")
                    .arg(&key)
                    .arg(format!("{b}:h:{h}"))
                    .arg(n);
            }
        }
        let min = obs.iter().map(|o| o.0).fold(f64::INFINITY, f64::min);
        let max = obs.iter().map(|o| o.0).fold(f64::NEG_INFINITY, f64::max);
        pipe.cmd("HSET")
            .arg(&key)
            .arg(format!("{b}:min"))
            .arg(min.to_string())
            .arg(format!("{b}:max"))
            .arg(max.to_string());
    }
    pipe.cmd("ZADD")
        .arg("stats:known:")
        .arg(0)
        .arg(format!("{precision}:{name}"));
    let _: () = pipe.query_async(c).await.unwrap();
}

fn close(got: f64, want: f64, relative: f64) -> bool {
    (got - want).abs() <= relative * want.abs().max(f64::MIN_POSITIVE)
}

/// Checks rows of `get --stats --json` or `/api/v1/stats` against the
/// observations they were written from.
fn assert_rows_match(rows: &Value, want: &[(i64, Observations)], histogram: bool) {
    let rows = rows.as_array().expect("an array of buckets");
    assert_eq!(rows.len(), want.len(), "{rows:?}");
    for (row, (b, obs)) in rows.iter().zip(want) {
        let f = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k} in {row}"));
        assert_eq!(row["t"], *b);
        let mut all: Vec<f64> = Vec::new();
        for &(v, n) in obs {
            all.extend(std::iter::repeat_n(v, n as usize));
        }
        all.sort_by(f64::total_cmp);
        let n = all.len() as f64;
        let mean = all.iter().sum::<f64>() / n;
        let var = all.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        assert_eq!(row["count"], all.len() as i64, "{row}");
        assert!(close(f("mean"), mean, 1e-9), "mean {row} vs {mean}");
        assert!(
            close(f("stddev"), var.sqrt(), 1e-9),
            "stddev {row} vs {}",
            var.sqrt()
        );
        assert_eq!((f("min"), f("max")), (all[0], all[all.len() - 1]));
        for (q, k) in REPORTED_QUANTILES.iter().zip(["p50", "p90", "p99"]) {
            if histogram {
                let exact = exact_quantile(&all, *q).unwrap();
                assert!(
                    close(f(k), exact, RELATIVE_ACCURACY),
                    "{k} {} vs exact {exact}",
                    row[k]
                );
            } else {
                assert!(row[k].is_null(), "{k} without a histogram: {row}");
            }
        }
    }
}

/// `get --stats` and `/api/v1/stats/{name}` give the reference statistics:
/// counts exact, mean and stddev to 1e-9, quantiles within the stated
/// accuracy where a histogram is kept and null where not; the table has
/// its columns; malformed fields are skipped with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_equal_the_reference_in_get_and_the_api() {
    let server = server();
    let url = server.url();
    let mut c = conn(&url).await;
    let name = "café ☕/slow page";
    let minute: Vec<(i64, Observations)> = (0..3)
        .map(|k| {
            (
                1_700_000_040 + 60 * k,
                observations(k as u64, 200 + 50 * k as usize),
            )
        })
        .collect();
    let five: Vec<(i64, Observations)> = vec![(1_700_000_100, observations(7, 300))];
    seed_stats(&mut c, 60, name, &minute, true).await;
    seed_stats(&mut c, 300, name, &five, false).await;
    // Foreign fields, and a bucket without its sum: skipped, not fatal.
    let _: () = redis::cmd("HSET")
        .arg(format!("stats:60:{name}"))
        .arg("junk")
        .arg("1")
        .arg("1700000400:count")
        .arg("3")
        .arg("1700000040:h:zz")
        .arg("1")
        .query_async(&mut c)
        .await
        .unwrap();
    let (_serve, addr) = serve(&url, &[]);

    for (precision, want, histogram) in [(60, &minute, true), (300, &five, false)] {
        let p = precision.to_string();
        let o = run_hitcount(&[
            "get",
            name,
            "-p",
            &p,
            "--stats",
            "--json",
            "--redis-url",
            &url,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_rows_match(&rows, want, histogram);
        if precision == 60 {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("malformed statistics fields") && err.contains("skipped=3"),
                "{err}"
            );
        }
        let a = get(&addr, &format!("/api/v1/stats/{}?precision={p}", enc(name)));
        assert_eq!(a.status, 200, "{}", a.body);
        let body = a.json();
        assert_eq!(
            (body["name"].as_str(), body["precision"].as_u64()),
            (Some(name), Some(precision))
        );
        assert_eq!(body["buckets"], rows, "the API and get agree");
        assert_rows_match(&body["buckets"], want, histogram);
    }
    // A time range selects buckets.
    let a = get(
        &addr,
        &format!(
            "/api/v1/stats/{}?precision=60&from=1700000100&until=1700000100",
            enc(name)
        ),
    );
    assert_rows_match(&a.json()["buckets"], &minute[1..2], true);
    // Names with statistics are listed as counters are.
    let a = get(&addr, "/api/v1/stats");
    assert_eq!(
        a.json(),
        json!({"counters": [{"name": name, "precisions": [60, 300]}], "next": null})
    );

    // The table: a header with every column, one line per bucket, "-" for
    // quantiles without a histogram.
    let table = |p: &str| {
        let o = run_hitcount(&["get", name, "-p", p, "--stats", "--redis-url", &url]);
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    let t = table("60");
    let lines: Vec<&str> = t.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["time", "(UTC)", "count", "mean", "min", "max", "stddev", "p50", "p90", "p99"]
    );
    assert_eq!(lines.len(), 4, "{t}");
    assert!(lines[1].starts_with("2023-11-14 22:14:00"), "{t}");
    let t = table("300");
    let cells: Vec<&str> = t.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(cells.len(), 10, "{t}");
    assert_eq!(&cells[7..], ["-", "-", "-"], "{t}");
    assert!(table("3600").contains("no statistics for"));
    let o = run_hitcount(&[
        "get",
        name,
        "-p",
        "3600",
        "--stats",
        "--json",
        "--redis-url",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "[]");
}

/// `top --by mean` and `/api/v1/top?by=mean` equal a brute-force ranking of
/// the reference data, over more names than one page of the scan; by
/// count, both give today's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_by_mean_is_the_brute_force_ranking() {
    let server = server();
    let url = server.url();
    let mut c = conn(&url).await;
    // A bucket `top --bucket` takes: the start of one still kept.
    let bucket = unix_now() / 3600 * 3600;
    let mut want: Vec<(String, f64, i64)> = Vec::new();
    let mut pipe = redis::pipe();
    for i in 0..1100_i64 {
        let name = format!("{} n{i}", AWKWARD[i as usize % AWKWARD.len()]);
        let key = format!("stats:3600:{name}");
        pipe.cmd("ZADD")
            .arg("stats:known:")
            .arg(0)
            .arg(format!("3600:{name}"));
        pipe.cmd("ZADD")
            .arg("known:")
            .arg(0)
            .arg(format!("3600:{name}"));
        pipe.cmd("HSET")
            .arg(format!("count:3600:{name}"))
            .arg(bucket)
            .arg(i % 13 + 1);
        // An older bucket with a huge mean: not this bucket's.
        pipe.cmd("HSET")
            .arg(&key)
            .arg(format!("{}:count", bucket - 3600))
            .arg(1)
            .arg(format!("{}:sum", bucket - 3600))
            .arg(1e9);
        match i % 20 {
            0 => continue, // no statistics in this bucket
            1 => {
                // Malformed: left out.
                pipe.cmd("HSET")
                    .arg(&key)
                    .arg(format!("{bucket}:count"))
                    .arg(2)
                    .arg(format!("{bucket}:sum"))
                    .arg("lots");
                continue;
            }
            _ => {}
        }
        // Values around m (exact in binary), so means tie exactly.
        let m = ((i * 7919) % 500) as f64 + 0.25;
        let obs = [(m - 0.5, 1), (m + 0.5, 1), (m, 2 + i % 3)];
        let count: i64 = obs.iter().map(|o| o.1).sum();
        for (v, n) in obs {
            pipe.cmd("HINCRBY")
                .arg(&key)
                .arg(format!("{bucket}:count"))
                .arg(n);
            pipe.cmd("HINCRBYFLOAT")
                .arg(&key)
                .arg(format!("{bucket}:sum"))
                .arg(v * n as f64);
        }
        want.push((name, m, count));
    }
    // Three 0.1s as a worker writes them, min and max too: their sum over
    // three is 0.10000000000000002, and the mean is kept within min and
    // max, as `/api/v1/stats` keeps it.
    let tenths = "three tenths";
    pipe.cmd("ZADD")
        .arg("stats:known:")
        .arg(0)
        .arg(format!("3600:{tenths}"));
    let sum = (0.1f64 + 0.1 + 0.1).to_string();
    let fields = [
        ("count", "3"),
        ("sum", &sum),
        ("sumsq", "0.03"),
        ("min", "0.1"),
        ("max", "0.1"),
    ];
    pipe.cmd("HSET").arg(format!("stats:3600:{tenths}")).arg(
        fields
            .iter()
            .map(|(f, v)| (format!("{bucket}:{f}"), *v))
            .collect::<Vec<_>>(),
    );
    want.push((tenths.into(), 0.1, 3));
    let _: () = pipe.query_async(&mut c).await.unwrap();
    want.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let (_serve, addr) = serve(&url, OLD_BUCKETS);

    for limit in [1, 10, 1000] {
        let expected: Vec<Value> = want
            .iter()
            .take(limit)
            .map(|(n, m, c)| json!({"name": n, "mean": m, "count": c}))
            .collect();
        let expected =
            json!({"precision": 3600, "bucket": bucket, "by": "mean", "counters": expected});
        let a = get(
            &addr,
            &format!("/api/v1/top?by=mean&precision=3600&bucket={bucket}&limit={limit}"),
        );
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.json(), expected);
        let o = run_hitcount(&[
            "top",
            "--by",
            "mean",
            "--bucket",
            &bucket.to_string(),
            "--limit",
            &limit.to_string(),
            "--json",
            "--redis-url",
            &url,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let cli: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(cli, expected, "top --by mean --json");
    }
    // By count (the default): the API as before, and the CLI agrees.
    let a = get(
        &addr,
        &format!("/api/v1/top?precision=3600&bucket={bucket}&limit=20"),
    );
    let api = a.json();
    assert!(api.get("by").is_none(), "{api}");
    let mut by_count: Vec<(String, i64)> = (0..1100_i64)
        .map(|i| {
            (
                format!("{} n{i}", AWKWARD[i as usize % AWKWARD.len()]),
                i % 13 + 1,
            )
        })
        .collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let expected: Vec<Value> = by_count
        .iter()
        .take(20)
        .map(|(n, c)| json!({"name": n, "count": c}))
        .collect();
    assert_eq!(api["counters"], json!(expected));
    let o = run_hitcount(&[
        "top",
        "--bucket",
        &bucket.to_string(),
        "--limit",
        "20",
        "--json",
        "--redis-url",
        &url,
    ]);
    let mut cli: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(cli["by"], "count");
    cli.as_object_mut().unwrap().remove("by");
    assert_eq!(cli, api);
    // The table.
    let o = run_hitcount(&[
        "top",
        "--by",
        "mean",
        "--bucket",
        &bucket.to_string(),
        "--limit",
        "3",
        "--redis-url",
        &url,
    ]);
    let t = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 5, "{t}");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["rank", "mean", "count", "name"]
    );
    let first = &want[0];
    assert!(
        lines[2].trim_start().starts_with("1 ") && lines[2].ends_with(&first.0),
        "{t}"
    );
    assert!(lines[2].contains(&first.1.to_string()), "{t}");
}

/// Bad input to `top` and `get --stats` fails with one clear line.
#[test]
fn top_and_get_stats_refuse_bad_input() {
    let server = server();
    let url = server.url();
    let cases: &[(&[&str], &str)] = &[
        (
            &["top", "--by", "median"],
            "by must be `count` or `mean`, not `median`",
        ),
        (
            &["top", "--precision", "7"],
            "7 s is not a configured precision",
        ),
        (&["top", "--limit", "0"], "--limit"),
        (&["top", "--limit", "1001"], "--limit"),
        (&["top", "--bucket", "soon"], "--bucket"),
        (
            &["get", "x", "-p", "7", "--stats"],
            "7 s is not a configured precision",
        ),
    ];
    for (args, why) in cases {
        let o = run_hitcount(&[args, &["--redis-url", url.as_str()][..]].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // Nothing ranked yet: said, not an error.
    let o = run_hitcount(&["top", "--by", "mean", "--redis-url", &url]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("no statistics in the 3600 s bucket"));
}

/// Redis gone, and the shared connection dropped by another request's
/// failure: `top` still answers from its last ranking (young enough to
/// serve), as it does while a scan computes the next; other paths are 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_answers_from_its_last_ranking_while_redis_is_gone() {
    let mut server = server();
    let mut c = conn(&server.url()).await;
    let bucket = unix_now() / 3600 * 3600;
    let _: () = redis::pipe()
        .hset("count:3600:a", bucket, 5)
        .ignore()
        .zadd("known:", "3600:a", 0)
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    let (_serve, addr) = serve(&server.url(), &[]);
    let path = format!("/api/v1/top?precision=3600&bucket={bucket}");
    let ranked = get(&addr, &path);
    assert_eq!(ranked.status, 200, "{}", ranked.body);
    server.stop();
    let other = request(&addr, "GET", "/api/v1/counters").unwrap();
    assert_eq!(other.status, 503, "{}", other.body);
    let again = get(&addr, &path);
    assert_eq!((again.status, again.json()), (200, ranked.json()));
}
