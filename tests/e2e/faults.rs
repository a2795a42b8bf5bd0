//! One test per failure the service promises to survive: a dead worker's
//! pending entries, poison entries, connection kills and restarts, an outage
//! logged once, an AOF restart, counters that refuse increments, out of
//! memory, a worker stopped past the claim time, and SIGTERM / Ctrl-C.

use crate::common;

use std::time::Duration;

use common::*;
use hitcount::store::connect::Conn;
use hitcount_lab::kit::ServerOptions;

const PRECISIONS: [u32; 7] = hitcount::model::config::DEFAULT_PRECISIONS;

async fn hget(c: &mut Conn, key: &str, field: i64) -> Option<i64> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(c)
        .await
        .unwrap()
}

/// A `hitcount worker` process logging at WARN into `dir`.
fn warn_worker(url: &str, name: &str, extra: &[&str], dir: &std::path::Path) -> bin::Child {
    let mut cmd = bin::worker(url, name, "127.0.0.1:0", extra);
    cmd.env("RUST_LOG", "warn");
    bin::Child::spawn_in(name, cmd, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_pending_entries_are_claimed_and_gone_consumers_leave() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let hits = xadd_hits(&mut c, "orphan", 100, unix_now()).await;
    // A worker reads the entries and dies without applying them.
    let mut s = settings(&srv.url(), "live");
    s.worker.claim_idle_ms = 1000;
    s.worker.consumer_idle_ms = 2000;
    let k = keys(&s);
    crate::common::plain::ensure_group(&mut c, &k)
        .await
        .unwrap();
    let reply = crate::common::plain::read_new_entries(&mut c, &k, "dead-pod", 1000)
        .await
        .unwrap();
    assert_eq!(crate::common::plain::read_reply_entries(&reply).len(), 100);

    let workers = Workers::start(vec![s.clone()]);
    wait_drained(&mut c, &k).await;
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
    // The dead consumer owns nothing now and is removed after its idle time.
    eventually!(
        30,
        "dead-pod removed from the group",
        consumers(&mut c).await == vec!["live".to_string()]
    );
    workers.stop().await;
    assert!(consumers(&mut c).await.is_empty(), "left on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_delivered_too_often_is_dead_lettered_with_its_count_and_error() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let mut s = settings(&srv.url(), "live");
    s.worker.claim_idle_ms = 1000;
    s.worker.max_deliveries = 5;
    let k = keys(&s);
    let poison = xadd_hits(&mut c, "poison", 1, unix_now()).await;
    assert_eq!(poison.len(), 1);
    crate::common::plain::ensure_group(&mut c, &k)
        .await
        .unwrap();
    let reply = crate::common::plain::read_new_entries(&mut c, &k, "crashy", 10)
        .await
        .unwrap();
    let id = crate::common::plain::read_reply_entries(&reply)[0]
        .id_str()
        .to_string();
    // Four more deliveries to a worker that crashes on it every time.
    for _ in 0..4 {
        let _: redis::Value = redis::cmd("XCLAIM")
            .arg("hits")
            .arg("hitcount")
            .arg("crashy")
            .arg(0)
            .arg(&id)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("HSET")
        .arg(k.last_errors())
        .arg("crashy")
        .arg("boom")
        .query_async(&mut c)
        .await
        .unwrap();
    let good = xadd_hits(&mut c, "good", 3, unix_now()).await;

    let workers = Workers::start(vec![s]);
    eventually!(
        20,
        "poison dead-lettered",
        pending(&mut c).await == 0 && !dead_letters(&mut c).await.is_empty()
    );
    wait_drained(&mut c, &k).await;
    workers.stop().await;
    let dead = dead_letters(&mut c).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let d = &dead[0];
    assert_eq!(d["reason"], "max_deliveries");
    assert_eq!(d["id"], id);
    assert_eq!(d["deliveries"], "5");
    assert_eq!(d["consumer"], "crashy");
    assert_eq!(d["error"], "boom");
    assert!(d.contains_key("hit"), "original fields kept: {d:?}");
    let got = read_all(&mut c, &k).await;
    assert_eq!(got, reference(&good, &PRECISIONS), "poison not counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_and_producer_ride_out_connection_kills_and_a_restart() {
    let mut srv = server_with(ServerOptions {
        appendonly: true,
        ..ServerOptions::default()
    });
    let url = srv.url();
    let mut c = conn(&url).await;
    let a = settings(&url, "a");
    let workers = Workers::start(vec![a.clone(), settings(&url, "b")]);
    let producer = producer(&url);
    let mut hits = Vec::new();
    for round in 0..10 {
        let ts = unix_now();
        for i in 0..1000 {
            let name = format!("k{}", i % 37);
            producer.hit_at(&name, 1, ts as f64);
            hits.push((name, 1, ts));
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        if round == 5 {
            srv.restart().unwrap();
            c = conn(&url).await;
        } else {
            kill_clients(&mut c).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::timeout(Duration::from_secs(30), producer.flush())
        .await
        .expect("producer flushed");
    producer.shutdown(Duration::from_secs(1)).await;
    let k = keys(&a);
    wait_drained(&mut c, &k).await;
    workers.stop().await;
    let len: usize = redis::cmd("XLEN")
        .arg("hits")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(len, hits.len(), "each hit appended once");
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
    assert_eq!(pending(&mut c).await, 0);
    assert!(dead_letters(&mut c).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_logged_once_not_once_per_try() {
    let mut srv = server();
    let url = srv.url();
    let dir = tempfile::tempdir().unwrap();
    let w = warn_worker(&url, "w", &["--block-ms", "200"], dir.path());
    let mut c = conn(&url).await;
    let ts = unix_now();
    xadd_hits(&mut c, "before", 10, ts).await;
    let k = keys(&settings(&url, "w"));
    eventually!(
        20,
        "counted before the outage",
        hget(&mut c, &k.count(1, "before"), ts).await == Some(10)
    );
    srv.stop();
    // Backoff starts at 50 ms: a few seconds are many tries.
    tokio::time::sleep(Duration::from_secs(3)).await;
    srv.restart().unwrap();
    let mut c = conn(&url).await;
    let ts = unix_now();
    xadd_hits(&mut c, "after", 10, ts).await;
    eventually!(
        30,
        "counted after the outage",
        hget(&mut c, &k.count(1, "after"), ts).await == Some(10)
    );
    let log = w.stderr();
    assert_eq!(
        log.matches("Redis unavailable").count(),
        1,
        "one line when the outage starts:\n{log}"
    );
    assert_eq!(
        log.matches("Redis reachable again").count(),
        1,
        "one line when it ends:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_are_exact_after_redis_restarts_from_its_aof() {
    let mut srv = server_with(ServerOptions {
        appendonly: true,
        ..ServerOptions::default()
    });
    let url = srv.url();
    let s = settings(&url, "a");
    let k = keys(&s);
    let workers = Workers::start(vec![s]);
    let mut c = conn(&url).await;
    let mut hits = xadd_hits(&mut c, "aof", 3000, unix_now()).await;
    // A graceful restart (SIGTERM flushes the AOF) while the worker counts.
    srv.restart().unwrap();
    let mut c = conn(&url).await;
    hits.extend(xadd_hits(&mut c, "aof", 3000, unix_now()).await);
    wait_drained(&mut c, &k).await;
    let expected = reference(&hits, &PRECISIONS);
    assert_eq!(read_all(&mut c, &k).await, expected);
    // A crash (SIGKILL) after everything was acknowledged more than the
    // fsync interval (1 s) ago: nothing is lost, nothing recounted.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    srv.kill();
    srv.restart().unwrap();
    let mut c = conn(&url).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    wait_drained(&mut c, &k).await;
    workers.stop().await;
    assert_eq!(read_all(&mut c, &k).await, expected);
    assert_eq!(pending(&mut c).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_of_the_wrong_type_or_overflowing_fails_alone() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let s = settings(&srv.url(), "w");
    let k = keys(&s);
    let ts = unix_now();
    let _: () = redis::cmd("SET")
        .arg(k.count(60, "x"))
        .arg("someone's string")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(k.count(1, "big"))
        .arg(ts)
        .arg(i64::MAX)
        .query_async(&mut c)
        .await
        .unwrap();
    let mut hits = xadd_hits(&mut c, "ok", 5, ts).await;
    xadd_hits(&mut c, "x", 2, ts).await;
    xadd_hits(&mut c, "big", 1, ts).await;
    let workers = Workers::start(vec![s]);
    wait_drained(&mut c, &k).await;
    eventually!(10, "both failures dead-lettered", {
        dead_letters(&mut c).await.len() == 2
    });
    // The worker keeps going.
    hits.extend(xadd_hits(&mut c, "ok", 5, ts).await);
    wait_drained(&mut c, &k).await;
    workers.stop().await;

    let got = read_all(&mut c, &k).await;
    for (key, buckets) in reference(&hits, &PRECISIONS) {
        assert_eq!(got[&key], buckets, "{key:?} counted");
    }
    for p in PRECISIONS {
        let x = if p == 60 { None } else { Some(2) };
        let b = if p == 1 { Some(i64::MAX) } else { Some(1) };
        let bucket = ts.div_euclid(p as i64) * p as i64;
        if p != 60 {
            assert_eq!(hget(&mut c, &k.count(p, "x"), bucket).await, x, "x@{p}");
        }
        assert_eq!(hget(&mut c, &k.count(p, "big"), bucket).await, b, "big@{p}");
    }
    let mut dead = dead_letters(&mut c).await;
    dead.sort_by(|a, b| a["name"].cmp(&b["name"]));
    assert_eq!(dead[0]["reason"], "apply_error");
    assert_eq!(dead[0]["name"], "big");
    assert_eq!(dead[0]["precision"], "1");
    assert_eq!(dead[0]["count"], "1");
    assert!(dead[0]["error"].contains("overflow"), "{dead:?}");
    assert_eq!(dead[1]["name"], "x");
    assert_eq!(dead[1]["precision"], "60");
    assert_eq!(dead[1]["count"], "2");
    assert!(dead[1]["error"].contains("WRONGTYPE"), "{dead:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_stalls_the_worker_then_everything_counts_once() {
    let srv = server_with(ServerOptions {
        extra: vec!["maxmemory-policy noeviction".into()],
        ..ServerOptions::default()
    });
    let mut c = conn(&srv.url()).await;
    let s = settings(&srv.url(), "w");
    let k = keys(&s);
    let ts = unix_now();
    let _: () = redis::cmd("SET")
        .arg(k.count(60, "x"))
        .arg("wrong type")
        .query_async(&mut c)
        .await
        .unwrap();
    let mut hits = xadd_hits(&mut c, "mem", 500, ts).await;
    hits.extend(xadd_hits(&mut c, "x", 1, ts).await);
    // Every write that may grow memory is refused from now on.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query_async(&mut c)
        .await
        .unwrap();
    let workers = Workers::start(vec![s]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(hget(&mut c, &k.count(1, "mem"), ts).await, None);
    assert!(
        dead_letters(&mut c).await.is_empty(),
        "nothing dead-lettered under OOM"
    );
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query_async(&mut c)
        .await
        .unwrap();
    wait_drained(&mut c, &k).await;
    eventually!(10, "the wrong-type cell dead-lettered", {
        dead_letters(&mut c).await.len() == 1
    });
    workers.stop().await;
    let got = read_all(&mut c, &k).await;
    for (key, buckets) in reference(&hits, &PRECISIONS) {
        if key != (60, "x".to_string()) {
            assert_eq!(got[&key], buckets, "{key:?} counted once");
        }
    }
    let dead = dead_letters(&mut c).await;
    assert_eq!(dead[0]["reason"], "apply_error", "{dead:?}");
    assert_eq!(dead[0]["name"], "x");
    assert_eq!(pending(&mut c).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_past_the_claim_time_never_double_counts() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let dir = tempfile::tempdir().unwrap();
    // A long window: the worker holds what it read when it is stopped.
    let mut slow = warn_worker(
        &url,
        "slow",
        &["--window-ms", "3000", "--claim-idle-ms", "1000"],
        dir.path(),
    );
    let hits = xadd_hits(&mut c, "s", 200, unix_now()).await;
    eventually!(
        20,
        "slow read the entries",
        pending_of(&mut c, "slow").await == 200
    );
    slow.signal(libc::SIGSTOP);
    let mut live = settings(&url, "live");
    live.worker.claim_idle_ms = 1000;
    let k = keys(&live);
    let workers = Workers::start(vec![live]);
    wait_drained(&mut c, &k).await;
    let expected = reference(&hits, &PRECISIONS);
    assert_eq!(read_all(&mut c, &k).await, expected);
    // Resumed, the slow worker closes its window: its commit is fenced.
    slow.signal(libc::SIGCONT);
    tokio::time::sleep(Duration::from_secs(4)).await;
    slow.signal(libc::SIGTERM);
    assert_eq!(exit_code(&mut slow), Some(0), "{}", slow.stderr());
    workers.stop().await;
    assert_eq!(read_all(&mut c, &k).await, expected, "counted once");
    assert_eq!(pending(&mut c).await, 0);
    let log = slow.stderr();
    assert!(log.contains("claimed by another worker"), "{log}");
}

/// `--shutdown-timeout 0` exits at once: the window open at SIGTERM is
/// dropped, its entries stay pending, the log says so in words (it said
/// "unexpected reply to shutdown"), and another worker counts them once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_shutdown_time_leaves_the_open_window_to_other_workers() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--window-ms", "60000", "--shutdown-timeout", "0"];
    let mut w = bin::Child::spawn_in(
        "at-once",
        bin::worker(&url, "at-once", "127.0.0.1:0", &args),
        dir.path(),
    );
    let hits = xadd_hits(&mut c, "now", 100, unix_now()).await;
    eventually!(
        20,
        "window open",
        pending_of(&mut c, "at-once").await == 100
    );
    w.signal(libc::SIGTERM);
    assert_eq!(exit_code(&mut w), Some(0), "{}", w.stderr());
    let log = w.stderr();
    assert!(
        log.contains("stopped before finishing, at --shutdown-timeout"),
        "{log}"
    );
    assert!(!log.contains("unexpected reply"), "{log}");
    assert_eq!(pending(&mut c).await, 100, "left pending");
    let mut live = settings(&url, "live");
    live.worker.claim_idle_ms = 1000;
    let k = keys(&live);
    let workers = Workers::start(vec![live]);
    // Recovery applies what the sum did not, window by window when the
    // stop came before their sum was recorded: once, with the suite and
    // other load beside it, that took over 60 s (pending fell from 60,000
    // to 5,984 meanwhile; alone it takes about 10 s).
    wait_drained_within(&mut c, &k, Duration::from_secs(180)).await;
    workers.stop().await;
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
}

/// A SIGTERM while the sum of a backlog is being applied: the worker stops
/// at its `--shutdown-timeout` (0: at once), not 2 s later by the watchdog
/// (status 1, as it did: it waited for the whole apply); what it left is
/// finished by another worker, every hit counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stops_at_its_timeout_while_a_sum_is_applied() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let dir = tempfile::tempdir().unwrap();
    // Many names with values: a sum that takes Redis seconds to apply.
    let names = (0..60_000).map(|i| format!("n{}", i % 30_000));
    let hits = xadd_names(&mut c, names, unix_now(), Some(1.5)).await;
    // One sum of it all, applied once the backlog is read; no time to stop.
    let args = ["--shutdown-timeout", "0", "--carry-cells", "100000000"];
    let mut w = bin::Child::spawn_in(
        "applying",
        bin::worker(&url, "applying", "127.0.0.1:0", &args),
        dir.path(),
    );
    let k = keys(&settings(&url, "any"));
    eventually!(60, "the sum being applied", {
        let known: i64 = redis::cmd("ZCARD")
            .arg(k.known())
            .query_async(&mut c)
            .await
            .unwrap();
        known > 0
    });
    w.signal(libc::SIGTERM);
    let log = |w: &mut bin::Child| w.stderr();
    assert_eq!(exit_code(&mut w), Some(0), "{}", log(&mut w));
    let text = log(&mut w);
    assert!(!text.contains("exiting now"), "{text}");
    let mut live = settings(&url, "live");
    live.worker.claim_idle_ms = 1000;
    let workers = Workers::start(vec![live]);
    // Recovery applies what the sum did not, window by window when the
    // stop came before their sum was recorded: once, with the suite and
    // other load beside it, that took over 60 s (pending fell from 60,000
    // to 5,984 meanwhile; alone it takes about 10 s).
    wait_drained_within(&mut c, &k, Duration::from_secs(180)).await;
    workers.stop().await;
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_ctrl_c_finish_the_window_in_flight_and_leave_the_group() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let k = keys(&settings(&url, "any"));
    let mut hits = Vec::new();
    for (sig, name) in [(libc::SIGTERM, "term"), (libc::SIGINT, "int")] {
        let mut w = bin::Child::spawn_in(
            name,
            bin::worker(&url, name, "127.0.0.1:0", &["--window-ms", "5000"]),
            dir.path(),
        );
        hits.extend(xadd_hits(&mut c, name, 100, unix_now()).await);
        eventually!(20, "window open", pending_of(&mut c, name).await == 100);
        w.signal(sig);
        assert_eq!(exit_code(&mut w), Some(0), "{}", w.stderr());
        assert_eq!(pending(&mut c).await, 0, "nothing pending");
        assert!(
            !consumers(&mut c).await.contains(&name.to_string()),
            "{name} left the group"
        );
        assert!(
            w.stderr().contains("worker stopped cleanly"),
            "{}",
            w.stderr()
        );
    }
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
}

/// A worker waiting for new entries on an idle stream with a `--block-ms`
/// far beyond its `--shutdown-timeout` stops within that timeout after
/// SIGTERM (its reads wait at most a quarter of it), says so at start,
/// and leaves the group.
#[test]
fn an_idle_worker_with_a_long_block_stops_within_its_shutdown_timeout() {
    let srv = server();
    let url = srv.url();
    let listen = bin::free_addr();
    let args = [
        "--block-ms",
        "300000",
        "--stuck-after",
        "400",
        "--shutdown-timeout",
        "2",
    ];
    let mut w = bin::Child::spawn("idle", bin::worker(&url, "idle", &listen, &args));
    bin::wait_ready(&mut w, &listen);
    // Idle: its loop is in a read of new entries.
    std::thread::sleep(Duration::from_secs(2));
    w.assert_running();
    // 300 s would go by with the read uncut; 25 s leaves a loaded machine room.
    assert_eq!(w.terminate(Duration::from_secs(25)).code(), Some(0));
    let log = w.stderr();
    assert!(log.contains("reads wait at most 500 ms"), "{log}");
    assert!(log.contains("worker stopped cleanly"), "{log}");
}

/// A worker stopping while Redis stalls (`CLIENT PAUSE … WRITE`: its
/// read, its scripts and the release of its name wait for replies) exits
/// once `--shutdown-timeout` and 2 s more have passed, saying so: it took
/// over 16 s with a timeout of 3, past a Kubernetes grace period. Its
/// entries stay pending for other workers.
#[test]
fn a_worker_stopping_while_redis_stalls_exits_within_its_timeout() {
    let srv = server();
    let url = srv.url();
    let listen = bin::free_addr();
    let args = ["--shutdown-timeout", "2"];
    let mut w = bin::Child::spawn("stalled", bin::worker(&url, "stalled", &listen, &args));
    bin::wait_ready(&mut w, &listen);
    let mut r = sync_conn(&url);
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .query(&mut r)
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let started = std::time::Instant::now();
    let status = w.terminate(Duration::from_secs(30));
    let took = started.elapsed();
    let () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut r).unwrap();
    let log = w.stderr();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("exiting now"), "{log}");
    // 4 s by the settings; the rest is room for a loaded machine, well
    // short of what the stalled replies took.
    assert!(took < Duration::from_secs(10), "{took:?}: {log}");
}

/// A worker pointed at a read-only replica is not ready, and `/readyz`
/// says why (it said "redis not connected", sending an operator after the
/// network); it stays live, since the replica may be promoted.
#[test]
fn a_worker_on_a_replica_says_so_on_readyz() {
    let master = server();
    let replica = server_with(ServerOptions {
        extra: vec![format!("replicaof 127.0.0.1 {}", master.port())],
        ..ServerOptions::default()
    });
    let listen = bin::free_addr();
    let mut w = bin::Child::spawn(
        "replica",
        bin::worker(&replica.url(), "replica", &listen, &[]),
    );
    let said = bin::wait_for("readyz naming the replica", Duration::from_secs(60), || {
        w.assert_running();
        bin::http_get(&listen, "/readyz")
            .filter(|(status, body)| *status == 503 && body.contains("read-only replica"))
    });
    assert!(said.1.contains("REDIS_URL must name a master"), "{said:?}");
    assert_eq!(bin::http_get(&listen, "/healthz").unwrap().0, 200);
    assert_eq!(
        w.terminate(Duration::from_secs(30)).code(),
        Some(0),
        "{}",
        w.stderr()
    );
}

/// A master that refuses writes for want of replicas (`min-replicas-to-write`)
/// makes the worker not ready, saying why (it said "redis not connected");
/// once the setting is lifted, the worker is ready and counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_short_of_replicas_is_named_on_readyz() {
    let srv = server_with(ServerOptions {
        extra: vec!["min-replicas-to-write 1".into()],
        ..ServerOptions::default()
    });
    let url = srv.url();
    let listen = bin::free_addr();
    let mut w = bin::Child::spawn("lonely", bin::worker(&url, "lonely", &listen, &[]));
    let said = bin::wait_for("readyz naming the refusal", Duration::from_secs(60), || {
        w.assert_running();
        bin::http_get(&listen, "/readyz")
            .filter(|(status, body)| *status == 503 && body.contains("NOREPLICAS"))
    });
    assert!(said.1.contains("min-replicas-to-write"), "{said:?}");
    let mut c = conn(&url).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg("0")
        .query_async(&mut c)
        .await
        .unwrap();
    let hits = xadd_hits(&mut c, "lonely", 10, unix_now()).await;
    let k = keys(&settings(&url, "any"));
    wait_drained(&mut c, &k).await;
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
    bin::wait_for("ready", Duration::from_secs(30), || {
        bin::http_get(&listen, "/readyz").filter(|(status, _)| *status == 200)
    });
    assert_eq!(
        w.terminate(Duration::from_secs(30)).code(),
        Some(0),
        "{}",
        w.stderr()
    );
}

/// A worker started while Redis is down turns its loop with each try to
/// reach it: past `--stuck-after` it is still live (a restart would not
/// bring Redis back), and not ready.
#[test]
fn a_worker_started_with_redis_down_stays_live_and_not_ready() {
    // A port nothing listens on: taken, then given back.
    let url = format!("redis://{}", bin::free_addr());
    let listen = bin::free_addr();
    let args = ["--block-ms", "200", "--stuck-after", "11"];
    let mut w = bin::Child::spawn("down", bin::worker(&url, "down", &listen, &args));
    bin::wait_for("the worker's HTTP server", Duration::from_secs(30), || {
        w.assert_running();
        bin::http_get(&listen, "/healthz")
    });
    // Past the liveness bound (11 s), with tries every 5 s at most.
    std::thread::sleep(Duration::from_secs(14));
    w.assert_running();
    let (live, body) = bin::http_get(&listen, "/healthz").unwrap();
    assert_eq!(live, 200, "{body}");
    assert_eq!(bin::http_get(&listen, "/readyz").unwrap().0, 503);
    assert_eq!(
        w.terminate(Duration::from_secs(25)).code(),
        Some(0),
        "{}",
        w.stderr()
    );
}
