//! Redis as an operator may set it up, carelessly or not: a read-only user
//! for `serve` (and one that lacks a permission, or a wrong password), a
//! password in a unix-socket URL, a URL that is no Redis, a full Redis, a
//! Redis allowed to evict, and a Redis restart; each with the real binary.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::bin::{
    counted, free_addr, hitcount, http_get, metric_value, post_hits, run_hitcount, run_ok,
    start_ingest, start_worker, wait_for, Child,
};
use crate::common::*;
use hitcount_lab::kit::ServerOptions;

/// The read-only rules of issue 31's contract, for key prefix `PREFIX`.
fn read_only_rules(prefix: &str) -> String {
    format!(
        "resetchannels ~{prefix}known: ~{prefix}count:* ~{prefix}stats:* -@all +@read \
         +@connection -@dangerous +info"
    )
}

/// `hitcount serve` on `url` with `env`, listening on `listen`.
fn serve(url: &str, listen: &str, env: &[(&str, &str)]) -> Child {
    let mut cmd = hitcount();
    cmd.args(["serve", "--listen", listen])
        .env("REDIS_URL", url)
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Child::spawn("serve", cmd)
}

/// The lines a process wrote to stderr, blank ones left out.
fn lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_as_the_read_only_user_and_redis_refuses_nothing() {
    const PREFIX: &str = "app:";
    let srv = server_with(ServerOptions {
        extra: vec![format!(
            "user viewer on >view-pw {}",
            read_only_rules(PREFIX)
        )],
        ..ServerOptions::default()
    });
    let admin_url = srv.url();
    let mut admin = conn(&admin_url).await;
    // Counters and statistics written the way a deployment writes them.
    let listen = free_addr();
    let mut w = start_worker(&admin_url, "w", &listen, &["--prefix", PREFIX]);
    let at = (unix_now() - 30).to_string();
    let out = run_hitcount(&[
        "hit",
        "page",
        "--count",
        "3",
        "--value",
        "7.5",
        "--at",
        &at,
        "--prefix",
        PREFIX,
        "--redis-url",
        &admin_url,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let count_key = format!("{PREFIX}count:60:page");
    crate::eventually!(30, "the hit counted", {
        let n: u64 = redis::cmd("HLEN")
            .arg(&count_key)
            .query_async(&mut admin)
            .await
            .unwrap();
        n > 0
    });
    assert!(w.terminate(Duration::from_secs(30)).success());

    acl_log_reset(&mut admin).await;
    let viewer = format!("redis://viewer:view-pw@127.0.0.1:{}", srv.port());
    let addr = free_addr();
    let mut s = serve(&viewer, &addr, &[("HITCOUNT_PREFIX", PREFIX)]);
    wait_for("serve answers", Duration::from_secs(30), || {
        s.assert_running();
        http_get(&addr, "/").map(|_| ())
    });
    let bucket = (at.parse::<i64>().unwrap() / 3600) * 3600;
    for path in [
        "/".to_string(),
        "/static/app.js".into(),
        "/api/v1/counters".into(),
        "/api/v1/stats".into(),
        "/api/v1/counters/page?precision=60".into(),
        "/api/v1/stats/page?precision=60".into(),
        format!("/api/v1/top?precision=3600&bucket={bucket}"),
    ] {
        let (status, body) = http_get(&addr, &path).unwrap();
        assert_eq!(status, 200, "{path}: {body}\n{}", s.stderr());
        assert!(!body.contains("unavailable"), "{path}: {body}");
    }
    let (_, counters) = http_get(&addr, "/api/v1/counters").unwrap();
    assert!(counters.contains("\"page\""), "{counters}");
    assert!(
        s.terminate(Duration::from_secs(15)).success(),
        "{}",
        s.stderr()
    );
    let log = acl_log(&mut admin).await;
    assert!(log.is_empty(), "ACL LOG: {log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refused_by_redis_exits_1_with_one_line() {
    let srv = server_with(ServerOptions {
        extra: vec![
            // The read-only line without +info: serve cannot tell a cluster.
            "user noinfo on >pw resetchannels ~known: ~count:* ~stats:* -@all +@read +@connection -@dangerous".into(),
            "user viewer on >right-pw resetchannels ~known: ~count:* ~stats:* -@all +@read +@connection -@dangerous +info".into(),
        ],
        ..ServerOptions::default()
    });
    for (url, cause) in [
        (
            format!("redis://noinfo:pw@127.0.0.1:{}", srv.port()),
            "NOPERM",
        ),
        (
            format!("redis://viewer:WRONGsecret@127.0.0.1:{}", srv.port()),
            "WRONGPASS",
        ),
    ] {
        let addr = free_addr();
        let mut s = serve(&url, &addr, &[]);
        let status = s.wait(Duration::from_secs(20));
        let err = s.stderr();
        assert_eq!(status.and_then(|s| s.code()), Some(1), "{url}: {err}");
        let said = lines(&err);
        assert_eq!(said.len(), 1, "one line: {err}");
        assert!(said[0].contains(cause), "{err}");
        assert!(
            !err.contains("WRONGsecret") && !err.contains("unavailable"),
            "{err}"
        );
        assert!(http_get(&addr, "/").is_none(), "nothing served");
    }
}

/// A redis-server with `requirepass PASSWORD` listening on a unix socket
/// too; the socket's path.
fn unix_server(password: &str) -> (hitcount_lab::kit::RedisServer, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("redis.sock").to_str().unwrap().to_string();
    let srv = server_with(ServerOptions {
        password: Some(password.into()),
        extra: vec![format!("unixsocket {sock}"), "unixsocketperm 700".into()],
        ..ServerOptions::default()
    });
    (srv, dir, sock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_a_unix_socket_url_is_never_printed() {
    const RIGHT: &str = "SECRETright1";
    const WRONG: &str = "SECRETwrong2";
    let (srv, dir, sock) = unix_server(RIGHT);
    let mut outputs = Vec::new();
    for (form, pass) in [
        ("redis+unix", RIGHT),
        ("unix", RIGHT),
        ("redis+unix", WRONG),
        ("unix", WRONG),
    ] {
        let url = format!("{form}://{sock}?pass={pass}");
        for log_format in ["text", "json"] {
            let fmt = ["--log-format", log_format];
            // The long-running commands: their start-up line, and with a
            // wrong password their one-line refusal.
            let listen = free_addr();
            let mut cmd = hitcount();
            cmd.args(["worker", "--listen", &listen])
                .args(fmt)
                .env("REDIS_URL", &url);
            let mut w = Child::spawn("worker", cmd);
            if pass == RIGHT {
                wait_for("worker ready", Duration::from_secs(30), || {
                    w.assert_running();
                    http_get(&listen, "/readyz").filter(|(s, _)| *s == 200)
                });
                w.terminate(Duration::from_secs(30));
            } else {
                assert_eq!(
                    w.wait(Duration::from_secs(20)).and_then(|s| s.code()),
                    Some(1)
                );
            }
            outputs.push((format!("worker {url} {log_format}"), w.stderr()));
            let addr = free_addr();
            let mut s = serve(&url, &addr, &[("HITCOUNT_LOG_FORMAT", log_format)]);
            if pass == RIGHT {
                wait_for("serve answers", Duration::from_secs(30), || {
                    s.assert_running();
                    http_get(&addr, "/api/v1/counters").map(|_| ())
                });
                s.terminate(Duration::from_secs(15));
            } else {
                assert_eq!(
                    s.wait(Duration::from_secs(20)).and_then(|s| s.code()),
                    Some(1)
                );
            }
            outputs.push((format!("serve {url} {log_format}"), s.stderr()));
            for args in [
                &["status"][..],
                &["status", "--json"],
                &["get", "x", "-p", "60"],
                &["hit", "x"],
            ] {
                let out = hitcount()
                    .args(args)
                    .args(fmt)
                    .env("REDIS_URL", &url)
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                if pass == WRONG {
                    assert_eq!(out.status.code(), Some(1), "{args:?}");
                }
                let both = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                outputs.push((format!("{args:?} {url} {log_format}"), both));
            }
        }
    }
    for (what, out) in &outputs {
        assert!(
            !out.contains("SECRET"),
            "{what} printed the password:\n{out}"
        );
    }
    let shown = outputs
        .iter()
        .filter(|(_, o)| o.contains("pass=***"))
        .count();
    assert!(shown > 0, "the URL is shown, redacted");
    drop(srv);
    drop(dir);
}

/// A TCP server that answers every connection as an HTTP server would,
/// until dropped.
struct HttpOnly {
    addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpOnly {
    fn start() -> HttpOnly {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                        let mut buf = [0u8; 1024];
                        let _ = s.read(&mut buf);
                        let _ = s.write_all(
                            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\nBad Request",
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        HttpOnly {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HttpOnly {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_that_is_no_redis_is_one_fatal_line_for_every_command() {
    let http = HttpOnly::start();
    let url = format!("redis://user:SECRETx@{}", http.addr);
    let listen = free_addr();
    let serve_listen = free_addr();
    for args in [
        &["worker", "--listen", &listen][..],
        &["serve", "--listen", &serve_listen],
        &["status"],
        &["get", "x", "-p", "60"],
        &["top", "-p", "3600"],
        &["hit", "x"],
        &["load", "--hits", "1"],
        &["clean", "--once"],
    ] {
        let mut cmd = hitcount();
        cmd.args(args).env("REDIS_URL", &url).stdin(Stdio::null());
        let mut c = Child::spawn(args[0], cmd);
        let status = c.wait(Duration::from_secs(20));
        let err = c.stderr();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(1),
            "{args:?} is fatal: {err}"
        );
        let last = lines(&err).last().copied().unwrap_or("");
        let want = format!("not a Redis server at redis://user:***@{}", http.addr);
        assert!(last.contains(&want), "{args:?}: {err}");
        assert!(
            !err.contains("Unexpected") && !err.contains("SECRET"),
            "{args:?}: {err}"
        );
        let said = lines(&err)
            .iter()
            .filter(|l| l.starts_with("hitcount:"))
            .count();
        assert_eq!(said, 1, "{args:?} ends on one line: {err}");
    }
}

async fn set_config(admin: &mut hitcount::store::connect::Conn, key: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(key)
        .arg(value)
        .query_async(admin)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_is_named_and_nothing_is_lost() {
    let srv = server();
    let url = srv.url();
    let mut admin = conn(&url).await;
    let ts = unix_now() - 30;
    let mut hits = xadd_hits(&mut admin, "full", 200, ts).await;
    // Redis full: every write refused with OOM (reads still answered).
    set_config(&mut admin, "maxmemory", "1").await;
    let listen = free_addr();
    let mut cmd = hitcount();
    cmd.args(["worker", "--listen", &listen, "--log-format", "json"])
        .env("REDIS_URL", &url);
    let mut w = Child::spawn("worker", cmd);
    let readyz = wait_for("/readyz names the cause", Duration::from_secs(30), || {
        w.assert_running();
        http_get(&listen, "/readyz").filter(|(_, b)| b.contains("out of memory"))
    });
    assert!(
        readyz.1.contains("Redis is out of memory (maxmemory)")
            && !readyz.1.contains("not connected"),
        "{readyz:?}"
    );
    let (_, metrics) = http_get(&listen, "/metrics").unwrap();
    assert_eq!(
        metric_value(&metrics, "hitcount_redis_oom"),
        Some(1.0),
        "{metrics}"
    );
    let log = w.stderr();
    assert!(log.contains("Redis is out of memory (maxmemory)"), "{log}");
    assert!(
        !log.contains("Redis unavailable"),
        "no network fault to chase: {log}"
    );

    // Memory back: everything is counted, once.
    set_config(&mut admin, "maxmemory", "0").await;
    let s = settings(&url, "any");
    wait_drained(&mut admin, &keys(&s)).await;
    hits.extend(xadd_hits(&mut admin, "after", 10, ts).await);
    wait_drained(&mut admin, &keys(&s)).await;
    wait_for("the gauge back to 0", Duration::from_secs(30), || {
        let (_, m) = http_get(&listen, "/metrics")?;
        (metric_value(&m, "hitcount_redis_oom") == Some(0.0)).then_some(())
    });
    stopped_and_exact(&mut w, &mut admin, &s, &hits).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_filling_up_under_a_running_worker_is_named() {
    let srv = server();
    let url = srv.url();
    let mut admin = conn(&url).await;
    let listen = free_addr();
    let mut w = start_worker(&url, "w", &listen, &[]);
    // Entries wait while the worker is frozen; then Redis is full.
    w.signal(libc::SIGSTOP);
    let ts = unix_now() - 30;
    let mut hits = Vec::new();
    for i in 0..5 {
        hits.extend(xadd_hits(&mut admin, &format!("n{i}"), 200, ts).await);
    }
    set_config(&mut admin, "maxmemory", "1").await;
    w.signal(libc::SIGCONT);
    wait_for("/readyz names the cause", Duration::from_secs(30), || {
        http_get(&listen, "/readyz")
            .filter(|(_, b)| b.contains("Redis is out of memory (maxmemory)"))
    });
    let log = w.stderr();
    assert!(log.contains("Redis is out of memory (maxmemory)"), "{log}");
    assert!(
        !log.contains("Redis unavailable"),
        "no network fault to chase: {log}"
    );
    let (_, metrics) = http_get(&listen, "/metrics").unwrap();
    assert_eq!(
        metric_value(&metrics, "hitcount_redis_oom"),
        Some(1.0),
        "{metrics}"
    );
    assert!(
        metric_value(&metrics, "hitcount_redis_errors_total{kind=\"oom\"}").unwrap_or(0.0) > 0.0,
        "{metrics}"
    );
    set_config(&mut admin, "maxmemory", "0").await;
    let s = settings(&url, "any");
    wait_drained(&mut admin, &keys(&s)).await;
    stopped_and_exact(&mut w, &mut admin, &s, &hits).await;
}

/// Stops the worker `w` cleanly and checks that Redis holds exactly `hits`,
/// once each, at every precision of `s`.
async fn stopped_and_exact(
    w: &mut Child,
    admin: &mut hitcount::store::connect::Conn,
    s: &hitcount::service::worker::Settings,
    hits: &[(String, i64, i64)],
) {
    assert!(
        w.terminate(Duration::from_secs(30)).success(),
        "{}",
        w.stderr()
    );
    assert_eq!(
        read_all(admin, &keys(s)).await,
        reference(hits, &s.layout.precisions)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_allowed_to_evict_is_said_loudly() {
    let srv = server_with(ServerOptions {
        extra: vec!["maxmemory-policy allkeys-lru".into()],
        ..ServerOptions::default()
    });
    let url = srv.url();
    let listen = free_addr();
    let mut w = start_worker(&url, "w", &listen, &[]);
    let (status, body) = wait_for("/readyz names the policy", Duration::from_secs(30), || {
        http_get(&listen, "/readyz").filter(|(_, b)| b.contains("maxmemory-policy"))
    });
    assert_eq!(status, 200, "counting goes on: {body}");
    assert!(
        body.contains("maxmemory-policy is allkeys-lru") && body.contains("must be noeviction"),
        "{body}"
    );
    let (_, metrics) = http_get(&listen, "/metrics").unwrap();
    assert_eq!(
        metric_value(&metrics, "hitcount_redis_maxmemory_policy_evicts"),
        Some(1.0),
        "{metrics}"
    );
    let log = w.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("maxmemory-policy is allkeys-lru")),
        "{log}"
    );
    assert!(w.terminate(Duration::from_secs(30)).success());

    // serve says it too.
    let addr = free_addr();
    let mut s = serve(&url, &addr, &[]);
    let said = wait_for("serve logs the policy", Duration::from_secs(30), || {
        s.assert_running();
        let err = s.stderr();
        err.contains("maxmemory-policy is allkeys-lru")
            .then_some(err)
    });
    assert!(said.contains("ERROR"), "{said}");
    assert!(s.terminate(Duration::from_secs(15)).success());
}

/// The JSON log lines of `text` (one object each).
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A log line's time, as a UNIX time in milliseconds.
fn log_ms(line: &serde_json::Value) -> i64 {
    let ts = line["timestamp"].as_str().unwrap_or_default();
    chrono_like_ms(ts)
}

/// `2026-11-27T12:25:56.216805Z` as UNIX milliseconds (UTC, no leap seconds).
fn chrono_like_ms(ts: &str) -> i64 {
    let (date, time) = ts.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|p| p.parse().unwrap()).collect();
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms.split(':').map(|p| p.parse().unwrap()).collect();
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms: i64 = format!("{frac:0<3}")[..3].parse().unwrap();
    ((days * 86_400) + t[0] * 3600 + t[1] * 60 + t[2]) * 1000 + ms
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// When the last cleaner pass ended (UNIX ms), 0 before the first.
async fn last_pass_ms(
    c: &mut hitcount::store::connect::Conn,
    k: &hitcount::model::keys::Keys,
) -> i64 {
    let at: Option<i64> = redis::cmd("HGET")
        .arg(k.cleaner_status())
        .arg("at_ms")
        .query_async(c)
        .await
        .unwrap_or(None);
    at.unwrap_or(0)
}

/// Every failed Redis call the process counted, all kinds together.
fn redis_errors(listen: &str) -> f64 {
    let (_, m) = http_get(listen, "/metrics").unwrap();
    m.lines()
        .filter(|l| l.starts_with("hitcount_redis_errors_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The cleaner's pass interval here: long enough that its connection sits
/// idle across the restart and its next pass comes well after Redis is
/// back (more than the 10 s in which a late failure passes as the outage's).
const CLEAN_EVERY_S: i64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_redis_restart_every_task_reports_the_outage_it_saw() {
    let mut srv = server_with(ServerOptions {
        appendonly: true,
        ..ServerOptions::default()
    });
    let url = srv.url();
    let listen = free_addr();
    // Every task of a worker process: the worker, its registration, the
    // lease, the cleaner, the sampler and the memory policy check.
    let mut cmd = hitcount();
    cmd.args(["worker", "--listen", &listen, "--log-format", "json"])
        .args([
            "--clean-interval",
            &CLEAN_EVERY_S.to_string(),
            "--block-ms",
            "200",
        ])
        .env("REDIS_URL", &url);
    let mut w = Child::spawn("worker", cmd);
    wait_for("worker ready", Duration::from_secs(30), || {
        w.assert_running();
        http_get(&listen, "/readyz").filter(|(s, _)| *s == 200)
    });
    let mut c = conn(&url).await;
    let ts = unix_now();
    xadd_hits(&mut c, "before", 10, ts).await;
    let k = keys(&settings(&url, "any"));
    wait_drained(&mut c, &k).await;
    // Redis goes away just after a cleaner pass: the cleaner's connection
    // is idle through the outage and long after it.
    let first = last_pass_ms(&mut c, &k).await;
    crate::eventually!(
        CLEAN_EVERY_S as u64 + 15,
        "a cleaner pass",
        last_pass_ms(&mut c, &k).await > first
    );

    let down_at = now_ms();
    srv.stop();
    tokio::time::sleep(Duration::from_secs(4)).await;
    srv.restart().unwrap();
    let back_at = now_ms();
    let outage_ms = back_at - down_at;
    let mut c = conn(&url).await;
    xadd_hits(&mut c, "after", 10, unix_now()).await;
    wait_drained(&mut c, &k).await;
    // Every task has met the restart by now (the worker, the lease, the
    // registration, the sampler); the cleaner has not used its connection.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let errors_after = redis_errors(&listen);
    crate::eventually!(
        2 * CLEAN_EVERY_S as u64 + 15,
        "a cleaner pass well after Redis is back",
        last_pass_ms(&mut c, &k).await > back_at + 10_000
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        redis_errors(&listen),
        errors_after,
        "no task failed on a connection left from before the restart:\n{}",
        w.stderr()
    );
    w.assert_running();
    let (status, _) = http_get(&listen, "/readyz").unwrap();
    assert_eq!(status, 200);
    assert!(w.terminate(Duration::from_secs(30)).success());

    let log = w.stderr();
    let lines = json_lines(&log);
    let message = |l: &serde_json::Value| l["message"].as_str().unwrap_or_default().to_string();
    let down: Vec<_> = lines
        .iter()
        .filter(|l| message(l).contains("Redis unavailable"))
        .collect();
    let up: Vec<_> = lines
        .iter()
        .filter(|l| message(l).contains("Redis reachable again"))
        .collect();
    assert_eq!(down.len(), 1, "one start of the outage:\n{log}");
    assert_eq!(up.len(), 1, "one end:\n{log}");
    // The task that said Redis was gone says it is back.
    let task = |l: &serde_json::Value| message(l).split(':').next().unwrap_or("").to_string();
    assert_eq!(task(down[0]), task(up[0]), "{log}");
    let down_ms = up[0]["down_ms"].as_i64().expect("down_ms");
    // Slack: the backoff's longest pause (5 s) and a reconnect.
    assert!(
        down_ms <= outage_ms + 6_000,
        "reported {down_ms} ms for an outage of {outage_ms} ms:\n{log}"
    );
    // Once the first reconnect is done, no task fails again.
    let reconnected = log_ms(up[0]);
    let late: Vec<_> = lines
        .iter()
        .filter(|l| matches!(l["level"].as_str(), Some("WARN" | "ERROR")))
        .filter(|l| log_ms(l) > reconnected)
        .collect();
    assert!(
        late.is_empty(),
        "failures after Redis was back: {late:?}\n{log}"
    );
    assert!(reconnected <= back_at + 6_000, "{log}");
}

/// The processes whose parent is `pid`: their ids and command lines.
fn children_cmdlines(pid: i32) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the comm may hold spaces.
        let Some(after) = stat.rsplit_once(") ").map(|(_, a)| a) else {
            continue;
        };
        if after.split(' ').nth(1).and_then(|p| p.parse::<i32>().ok()) != Some(pid) {
            continue;
        }
        let child = path.file_name().and_then(|n| n.to_str()?.parse().ok());
        if let (Some(child), Ok(raw)) = (child, std::fs::read(path.join("cmdline"))) {
            out.push((child, String::from_utf8_lossy(&raw).replace('\0', " ")));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_keeps_the_password_off_its_workers_command_lines() {
    const PASSWORD: &str = "SECRETbench3";
    let srv = server_with(ServerOptions {
        password: Some(PASSWORD.into()),
        ..ServerOptions::default()
    });
    let mut cmd = hitcount();
    cmd.args([
        "bench",
        "--entries",
        "2000",
        "--workers",
        "1",
        "--workload",
        "hot",
    ])
    .env("REDIS_URL", srv.url())
    .stdin(Stdio::null());
    let mut bench = Child::spawn("bench", cmd);
    let seen = wait_for("a bench worker", Duration::from_secs(120), || {
        bench.assert_running();
        let workers: Vec<(i32, String)> = children_cmdlines(bench.pid())
            .into_iter()
            .filter(|(_, c)| c.contains(" worker "))
            .collect();
        (!workers.is_empty()).then_some(workers)
    });
    // Stop it here: bench frozen, then its workers (which a SIGKILLed
    // bench would leave behind), then bench.
    bench.signal(libc::SIGSTOP);
    let children = children_cmdlines(bench.pid());
    for (pid, _) in &children {
        // SAFETY: kill(2) on a child of our own stopped child: it cannot
        // have been reaped, so its pid is not reused.
        unsafe {
            libc::kill(*pid, libc::SIGKILL);
        }
    }
    bench.kill();
    for (_, cmdline) in &seen {
        assert!(
            !cmdline.contains(PASSWORD),
            "ps shows the password: {cmdline}"
        );
    }
}

/// A worker on the ACL line from before `+info` (the rules file without it)
/// still counts and stays up: the policy is not checked, said once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_the_acl_line_without_info_counts_and_stays_up() {
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/redis/hitcount.acl"
    ))
    .unwrap();
    let rules: Vec<&str> = rules
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .filter(|r| *r != "+info")
        .collect();
    assert!(rules.contains(&"-@all"), "{rules:?}");
    let srv = server_with(ServerOptions {
        extra: vec![format!("user old on >old-pw {}", rules.join(" "))],
        ..ServerOptions::default()
    });
    let url = format!("redis://old:old-pw@127.0.0.1:{}", srv.port());
    let listen = free_addr();
    let mut w = start_worker(&url, "w", &listen, &[]);
    let out = run_hitcount(&["hit", "page:old", "--count", "3", "--redis-url", &srv.url()]);
    assert!(out.status.success(), "{out:?}");
    let mut admin = conn(&srv.url()).await;
    wait_for("the hit counted", Duration::from_secs(30), || {
        w.assert_running();
        let counted: i64 = counted_60s(&mut admin);
        (counted == 3).then_some(())
    });
    // Past a few checks of everything else, still up and ready.
    std::thread::sleep(Duration::from_secs(3));
    w.assert_running();
    let (status, body) = http_get(&listen, "/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
    let log = w.stderr();
    assert_eq!(
        log.matches("cannot read Redis' maxmemory-policy").count(),
        1,
        "said once: {log}"
    );
    assert!(w.terminate(Duration::from_secs(30)).success());
}

/// The hits counted for `page:old` at 60 s, summed over its buckets.
fn counted_60s(admin: &mut hitcount::store::connect::Conn) -> i64 {
    let rt = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        rt.block_on(async {
            let all: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
                .arg("count:60:page:old")
                .query_async(admin)
                .await
                .unwrap();
            all.values().sum()
        })
    })
}

/// `ingest` as the user of `deploy/redis/ingest.acl` (appending to the
/// stream, its ids and its producer's batch numbers beside it, nothing
/// else): hits over HTTP with and without ids, one resent, and over
/// StatsD, all counted exactly by a worker, and Redis refused ingest
/// nothing (an empty ACL LOG).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_runs_as_its_own_user_and_redis_refuses_nothing() {
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/redis/ingest.acl"
    ))
    .unwrap();
    let rules = rules.lines().rfind(|l| !l.trim().is_empty()).unwrap();
    let srv = server_with(ServerOptions {
        extra: vec![format!("user ingester on >in-pw {rules}")],
        ..ServerOptions::default()
    });
    let mut admin = conn(&srv.url()).await;
    acl_log_reset(&mut admin).await;
    let url = format!("redis://ingester:in-pw@127.0.0.1:{}", srv.port());
    let statsd = free_addr();
    let (mut ingest, addr) = start_ingest(&url, &["--statsd-listen", &statsd]);
    // StatsD's hits go through the producer: its batch numbers too.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(b"page:a:3|c\npage:a:1|ms", &statsd).unwrap();
    let body = r#"[{"name":"page:a","count":2,"id":"x1"},{"name":"page:a","value":4}]"#;
    for _ in 0..2 {
        let (status, _, answer) = post_hits(&addr, "application/json", &[], body);
        assert_eq!(status, 202, "{answer}\n{}", ingest.stderr());
    }
    assert_eq!(http_get(&addr, "/readyz").unwrap().0, 200);
    let listen = free_addr();
    let mut w = start_worker(&srv.url(), "w", &listen, &[]);
    // x1 once, the hit without an id twice, StatsD's 3 + 1.
    crate::eventually!(30, "the hits counted", {
        counted(&mut admin, "page:a").await == 2 + 1 + 1 + 3 + 1
    });
    assert!(w.terminate(Duration::from_secs(30)).success());
    assert!(
        ingest.terminate(Duration::from_secs(15)).success(),
        "{}",
        ingest.stderr()
    );
    let log = acl_log(&mut admin).await;
    assert!(log.is_empty(), "ACL LOG: {log:?}");
    // The rules give ingest no key of the counters: it cannot write them.
    let mut as_ingest = conn(&url).await;
    let refused: redis::RedisResult<()> = redis::cmd("HSET")
        .arg("count:60:page:a")
        .arg("1")
        .arg("1")
        .query_async(&mut as_ingest)
        .await;
    assert!(refused.is_err());
}

/// The rules with the prefix `app1:` written in as docs/operations.md says
/// (its rewrite of the key patterns, nothing else): a worker that leads,
/// `hit`, `load` and `import` run as that user (and `ingest` as its own),
/// count every hit, and Redis refuses nothing. The producers' batch numbers follow the
/// stream, not the prefix, and the docs' rewrite once left them out: `hit`,
/// `load` and `import` failed with NOPERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_needs_only_the_rewrite_the_docs_give() {
    const PREFIX: &str = "app1:";
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap()
        .replace('\n', " ");
    // Each rewrite as the docs word it: "turns `FROM` into `TO`".
    let mut rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/redis/hitcount.acl"
    ))
    .unwrap()
    .trim()
    .to_string();
    for (from, to) in [
        (
            "~known: ~count:* ~stats:* ~hc:* ~hitcount:leader",
            "~app1:known: ~app1:count:* ~app1:stats:* ~app1:hc:* ~app1:hitcount:leader",
        ),
        ("~{hits}:hc:*", "~app1:{hits}:hc:* ~{hits}:hc:producer:*"),
    ] {
        assert!(docs.contains(&format!("`{from}` into `{to}`")), "{from}");
        assert!(rules.contains(from), "{from}");
        rules = rules.replace(from, to);
    }
    let mut ingest_rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/redis/ingest.acl"
    ))
    .unwrap();
    let (from, to) = (
        "%R~{hits}:hc:hitcount:shards",
        "%R~app1:{hits}:hc:hitcount:shards",
    );
    assert!(docs.contains(&format!("`{from}` into `{to}`")), "{from}");
    assert!(ingest_rules.contains(from), "{from}");
    ingest_rules = ingest_rules.replace(from, to);
    let server = server_with(ServerOptions {
        extra: vec![
            format!("user hitcount on >pw {rules}"),
            format!("user ingest on >pw {}", ingest_rules.trim()),
        ],
        ..ServerOptions::default()
    });
    let admin_url = server.url();
    let url = format!("redis://hitcount:pw@127.0.0.1:{}", server.port());
    let ingest_url = format!("redis://ingest:pw@127.0.0.1:{}", server.port());
    let mut admin = conn(&admin_url).await;
    let prefix = ["--prefix", PREFIX];
    let listen = free_addr();
    let mut worker = start_worker(&url, "p-w1", &listen, &prefix);
    run_ok(&url, &["hit", "page", "--count", "3", "--prefix", PREFIX]);
    run_ok(
        &url,
        &["load", "--hits", "20", "--names", "1", "--prefix", PREFIX],
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let when = hitcount_lab::bench::import::log_time(unix_now(), 0);
    let line = format!("h - - [{when}] \"GET /p HTTP/1.1\" 200 1 \"-\" \"-\"\n");
    std::fs::write(&log, line.repeat(4)).unwrap();
    run_ok(&url, &["import", log.to_str().unwrap(), "--prefix", PREFIX]);
    // ingest has its own user, whose rules name the stream's keys only.
    let (mut ingest, addr) = start_ingest(&ingest_url, &prefix);
    let body = r#"[{"name":"posted","id":"a1"},{"name":"posted","id":"a1"}]"#;
    let (status, _, answer) = post_hits(&addr, "application/json", &[], body);
    assert_eq!(status, 202, "{answer}");

    let total = |c: &mut redis::Connection, name: &str| -> i64 {
        let counts: Vec<i64> = redis::cmd("HVALS")
            .arg(format!("{PREFIX}count:86400:{name}"))
            .query(c)
            .unwrap();
        counts.iter().sum()
    };
    let mut sync = redis::Client::open(admin_url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    wait_for("every hit counted", Duration::from_secs(60), || {
        worker.assert_running();
        let got = ["page", "/p", "posted", "page:0"].map(|n| total(&mut sync, n));
        (got == [3, 4, 1, 20]).then_some(())
    });
    let leader: Option<String> = redis::cmd("GET")
        .arg(format!("{PREFIX}hitcount:leader"))
        .query(&mut sync)
        .unwrap();
    assert!(
        leader.is_some_and(|l| l.starts_with("p-w1/")),
        "the worker leads"
    );
    assert!(ingest.terminate(Duration::from_secs(30)).success());
    assert!(
        worker.terminate(Duration::from_secs(30)).success(),
        "{}",
        worker.stderr()
    );
    assert_nothing_refused(&mut admin, "the user").await;
}

/// Another stream name, with the worker's rules rewritten as the docs word
/// it: a worker and `hit` run as that user, count, and Redis refuses
/// nothing (with only `~s ~{s}:hc:*`, the first comer's check of the
/// stream's shards `s:{k}` was refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_stream_needs_only_the_rewrite_the_docs_give() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap()
        .replace('\n', " ");
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/redis/hitcount.acl"
    ))
    .unwrap();
    let (from, to) = ("~hits ~hits:* ~{hits}:hc:*", "~s ~s:* ~{s}:hc:*");
    assert!(docs.contains(&format!("`{from}` into `{to}`")), "{from}");
    assert!(docs.contains("so add `~hits:dead`"));
    let rules = rules.trim().replace(from, &format!("{to} ~hits:dead"));
    let server = server_with(ServerOptions {
        extra: vec![format!("user hitcount on >pw {rules}")],
        ..ServerOptions::default()
    });
    let url = format!("redis://hitcount:pw@127.0.0.1:{}", server.port());
    let mut admin = conn(&server.url()).await;
    let stream = ["--stream", "s"];
    let listen = free_addr();
    let mut worker = start_worker(&url, "s-w1", &listen, &stream);
    run_ok(&url, &["hit", "page", "--count", "3", "--stream", "s"]);
    let mut sync = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    wait_for("the hits counted", Duration::from_secs(60), || {
        worker.assert_running();
        let counts: Vec<i64> = redis::cmd("HVALS")
            .arg("count:86400:page")
            .query(&mut sync)
            .unwrap();
        (counts.iter().sum::<i64>() == 3).then_some(())
    });
    assert!(
        worker.terminate(Duration::from_secs(30)).success(),
        "{}",
        worker.stderr()
    );
    assert_nothing_refused(&mut admin, "the user").await;
}
