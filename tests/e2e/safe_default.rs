//! Safe by default, tried as a user would: the real binary, default
//! settings, a real redis-server. A live consumer name is never shared, a
//! record that cannot be read back is moved aside, errors no retry can fix
//! stop the worker with one clear line, shutdown goes in its stated order,
//! and bad settings are refused before anything starts.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::bin::{self, free_addr, http_get, wait_ready};
use common::*;
use hitcount::store::connect::Conn;
use hitcount_lab::kit::ServerOptions;

const PRECISIONS: [u32; 7] = hitcount::model::config::DEFAULT_PRECISIONS;

/// Hits of a few names at the current second, through the producer.
async fn send(url: &str, names: &[&str], n: usize) -> Vec<(String, i64, i64)> {
    let producer = producer(url);
    let ts = unix_now();
    let mut hits = Vec::new();
    for i in 0..n {
        let name = names[i % names.len()];
        producer.hit_at(name, 1, ts as f64);
        hits.push((name.to_string(), 1, ts));
    }
    producer.flush().await;
    hits
}

/// A metric's value summed over the given workers' `/metrics`.
fn metric(addrs: &[&str], name: &str) -> f64 {
    addrs
        .iter()
        .filter_map(|a| http_get(a, "/metrics"))
        .flat_map(|(_, body)| {
            body.lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// `n` workers with default names, as a user starts them on one host, each
/// ready; with their HTTP addresses.
fn default_workers(url: &str, n: usize, extra: &[&str]) -> (Vec<bin::Child>, Vec<String>) {
    let addrs: Vec<String> = (0..n).map(|_| free_addr()).collect();
    let mut workers = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let mut cmd = bin::default_worker(url, addr, &["--block-ms", "200"]);
        cmd.args(extra);
        let mut w = bin::Child::spawn(&format!("default-{i}"), cmd);
        wait_ready(&mut w, addr);
        workers.push(w);
    }
    (workers, addrs)
}

/// Waits for a child to exit, returning its code.
fn exit_within(child: &mut bin::Child, secs: u64) -> Option<i32> {
    child
        .wait(Duration::from_secs(secs))
        .and_then(|status| status.code())
}

async fn exists(c: &mut Conn, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(c)
        .await
        .unwrap()
        == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_worker_under_a_live_name_is_refused_and_a_restart_resumes() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let k = keys(&settings(&url, "any"));
    let first_addr = free_addr();
    let mut first = bin::start_worker(&url, "web-0", &first_addr, &[]);

    // Same name, started while the first lives: status 1, one clear line.
    let started = Instant::now();
    let mut dup = bin::Child::spawn(
        "dup",
        bin::worker(&url, "web-0", "127.0.0.1:0", &["--block-ms", "200"]),
    );
    assert_eq!(exit_within(&mut dup, 20), Some(1), "{}", dup.stderr());
    let err = dup.stderr();
    assert!(
        err.contains("\"web-0\"") && err.contains("HITCOUNT_CONSUMER"),
        "the line names the name and what to do: {err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "refused at once"
    );

    // The first keeps counting, exactly.
    first.assert_running();
    let mut hits = send(&url, &["a", "b", "c"], 3000).await;
    wait_drained(&mut c, &k).await;
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));

    // Killed, its registration lives on for one lifetime; a restart under
    // the same name waits for it to lapse, then resumes.
    first.kill();
    hits.extend(send(&url, &["a", "d"], 500).await);
    let again_addr = free_addr();
    let mut again = bin::Child::spawn(
        "web-0 again",
        bin::worker(&url, "web-0", &again_addr, &["--block-ms", "200"]),
    );
    wait_ready(&mut again, &again_addr);
    wait_drained(&mut c, &k).await;
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
    again.terminate(Duration::from_secs(25));
    assert!(
        !exists(&mut c, &k.consumer_registration("web-0")).await,
        "the name is released at a clean stop"
    );
}

/// A worker restarted under the name of one killed a moment ago waits for
/// the dead one's registration to lapse; stopped meanwhile (a rollout, a
/// drain), it stops at once, saying so, and leaves that registration to
/// lapse on its own. It waited for the name first, up to 15 s past its
/// SIGTERM, then took it only to let it go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_waiting_for_its_name_stops_at_once() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let k = keys(&settings(&url, "any"));
    let mut first = bin::start_worker(&url, "web-1", &free_addr(), &[]);
    first.kill();
    let mut again = bin::Child::spawn(
        "web-1 again",
        bin::worker(&url, "web-1", "127.0.0.1:0", &["--shutdown-timeout", "60"]),
    );
    bin::wait_for("waiting for its name", Duration::from_secs(30), || {
        again.assert_running();
        again
            .stderr()
            .contains("waiting for it to lapse")
            .then_some(())
    });
    let status = again.terminate(Duration::from_secs(60));
    let log = again.stderr();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("worker stopped while waiting for its consumer name"),
        "{log}"
    );
    assert!(
        exists(&mut c, &k.consumer_registration("web-1")).await,
        "the dead worker's registration is left to lapse, not waited for: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_names_are_unique_per_process_on_one_host() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let k = keys(&settings(&url, "any"));
    let (mut workers, _) = default_workers(&url, 3, &[]);
    let hits = send(&url, &["x", "y"], 5000).await;
    wait_drained(&mut c, &k).await;
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
    let names = consumers(&mut c).await;
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        3,
        "three consumers, one per process: {names:?}"
    );
    for w in &mut workers {
        assert_eq!(w.terminate(Duration::from_secs(25)).code(), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_window_record_is_quarantined_while_counting_stays_exact() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let k = keys(&settings(&url, "any"));
    let mut hits = send(&url, &["p1", "p2", "p3"], 900).await;
    // A worker that read 300 entries, recorded a window whose cells do not
    // decode, and died; a record with fields missing; and one whose cells
    // decode but whose entry ids are missing (read only once it is taken
    // for recovery): its cells must not be counted.
    crate::common::plain::ensure_group(&mut c, &k)
        .await
        .unwrap();
    let reply = crate::common::plain::read_new_entries(&mut c, &k, "ghost", 300)
        .await
        .unwrap();
    let ids: Vec<String> = crate::common::plain::read_reply_entries(&reply)
        .iter()
        .map(|e| e.id_str().to_string())
        .collect();
    assert_eq!(ids.len(), 300);
    let old_ms = (unix_now() - 120) * 1000;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(k.window("bad-cells"))
        .arg("owner")
        .arg("ghost")
        .arg("created")
        .arg(old_ms)
        .arg("ids")
        .arg(ids.join(" "))
        .arg("chunk")
        .arg(500)
        .arg("cells")
        .arg(&b"\xc1 not msgpack"[..])
        .cmd("ZADD")
        .arg(k.windows())
        .arg(old_ms)
        .arg("bad-cells")
        .cmd("HSET")
        .arg(k.window("bad-fields"))
        .arg("owner")
        .arg("ghost2")
        .cmd("ZADD")
        .arg(k.windows())
        .arg(old_ms)
        .arg("bad-fields")
        .cmd("HSET")
        .arg(k.window("bad-ids"))
        .arg("owner")
        .arg("ghost3")
        .arg("created")
        .arg(old_ms)
        .arg("chunk")
        .arg(500)
        .arg("cells")
        .arg(rmp_serde::to_vec(&vec![(60u32, "p1", unix_now() / 60 * 60, 5i64)]).unwrap())
        .cmd("ZADD")
        .arg(k.windows())
        .arg(old_ms)
        .arg("bad-ids")
        .query_async(&mut c)
        .await
        .unwrap();

    let (mut workers, addrs) = default_workers(&url, 2, &["--claim-idle-ms", "1000"]);
    hits.extend(send(&url, &["p1", "p4"], 600).await);
    wait_drained(&mut c, &k).await;
    // The ghost's entries were never counted (no chunk applied): they stay
    // pending, are claimed and counted once.
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
    let windows = zset_members(&mut c, &k.windows()).await;
    assert!(
        !windows.iter().any(|w| w.starts_with("bad-")),
        "the bad records left the index: {windows:?}"
    );
    let dead = dead_letters(&mut c).await;
    let quarantined: Vec<_> = dead
        .iter()
        .filter(|d| d.get("reason").map(String::as_str) == Some("corrupt_record"))
        .collect();
    assert_eq!(quarantined.len(), 3, "{dead:?}");
    let cells = quarantined
        .iter()
        .find(|d| d.get("window").map(String::as_str) == Some("bad-cells"))
        .expect("the record with bad cells");
    assert_eq!(cells["key"], k.window("bad-cells"));
    assert!(cells["error"].contains("cells do not decode"), "{cells:?}");
    assert!(cells.contains_key("raw:cells") && cells.contains_key("raw:ids"));
    let fields = quarantined
        .iter()
        .find(|d| d.get("window").map(String::as_str) == Some("bad-fields"))
        .expect("the record with missing fields");
    assert!(fields["error"].contains("missing"), "{fields:?}");
    let no_ids = quarantined
        .iter()
        .find(|d| d.get("window").map(String::as_str) == Some("bad-ids"))
        .expect("the record without entry ids");
    assert!(no_ids["error"].contains("ids is missing"), "{no_ids:?}");
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    assert_eq!(
        metric(&addr_refs, "hitcount_records_quarantined_total"),
        3.0
    );
    for w in &mut workers {
        assert_eq!(w.terminate(Duration::from_secs(25)).code(), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_a_needed_command_stops_the_worker_naming_noperm() {
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/redis/hitcount.acl"
    ))
    .unwrap();
    let srv = server_with(ServerOptions {
        extra: vec![format!("user limited on >pw {} -xreadgroup", rules.trim())],
        ..ServerOptions::default()
    });
    let url = format!("redis://limited:pw@127.0.0.1:{}", srv.port());
    let addr = free_addr();
    let started = Instant::now();
    let mut w = bin::Child::spawn("limited", bin::default_worker(&url, &addr, &[]));
    assert_eq!(exit_within(&mut w, 20), Some(1), "{}", w.stderr());
    assert!(started.elapsed() < Duration::from_secs(10), "within 10 s");
    let err = w.stderr();
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.contains("NOPERM") && last.to_lowercase().contains("xreadgroup"),
        "the last line names NOPERM and the command: {err}"
    );
    assert!(!last.contains(":pw@"), "no password in the line: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_stops_the_worker_naming_the_setting() {
    let srv = server_with(ServerOptions {
        extra: vec!["requirepass right-one".into()],
        ..ServerOptions::default()
    });
    for url in [
        format!("redis://:wrong-one@127.0.0.1:{}", srv.port()),
        format!("redis://127.0.0.1:{}", srv.port()),
    ] {
        let started = Instant::now();
        let mut w = bin::Child::spawn("nopass", bin::default_worker(&url, "127.0.0.1:0", &[]));
        assert_eq!(exit_within(&mut w, 20), Some(1), "{}", w.stderr());
        assert!(started.elapsed() < Duration::from_secs(10), "within 10 s");
        let err = w.stderr();
        let last = err.lines().last().unwrap_or("");
        assert!(
            last.contains("REDIS_URL") && last.contains("password"),
            "the last line names the setting: {err}"
        );
        assert!(
            !last.contains("wrong-one"),
            "no password in the line: {last}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_readiness_off_first_and_releases_lease_and_name_before_http_stops() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let k = keys(&settings(&url, "any"));
    let addr = free_addr();
    let mut w = bin::start_worker(&url, "solo", &addr, &["--window-ms", "5000"]);
    let lease = format!("{}hitcount:leader", k.prefix());
    eventually!(20, "leader", exists(&mut c, &lease).await);
    let mut hits = send(&url, &["t"], 200).await;
    eventually!(20, "window open", pending_of(&mut c, "solo").await == 200);
    // Writes wait while Redis is paused: the window in flight cannot finish
    // yet, so the stages of the shutdown can be watched one by one.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .arg("WRITE")
        .query_async(&mut c)
        .await
        .unwrap();
    w.signal(libc::SIGTERM);
    eventually!(
        5,
        "not ready while stopping",
        http_get(&addr, "/readyz")
            .is_some_and(|(status, body)| status == 503 && body.contains("shutting down"))
    );
    assert!(
        exists(&mut c, &lease).await,
        "the lease is held until the window is done"
    );
    assert_eq!(exit_within(&mut w, 25), Some(0), "{}", w.stderr());
    assert!(http_get(&addr, "/readyz").is_none(), "HTTP stopped last");
    assert!(!exists(&mut c, &lease).await, "lease released");
    assert!(
        !exists(&mut c, &k.consumer_registration("solo")).await,
        "name released"
    );
    assert_eq!(pending(&mut c).await, 0);
    let err = w.stderr();
    assert!(err.contains("worker stopped cleanly"), "{err}");
    assert!(err.contains("released the leader lease"), "{err}");

    // A restart finds nothing lost and nothing doubled.
    let mut again = bin::start_worker(&url, "solo", &free_addr(), &[]);
    hits.extend(send(&url, &["t", "u"], 300).await);
    wait_drained(&mut c, &k).await;
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
    again.terminate(Duration::from_secs(25));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_log_pipe_does_not_kill_the_worker() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let k = keys(&settings(&url, "any"));
    let addr = free_addr();
    let mut cmd = bin::default_worker(&url, &addr, &["--block-ms", "200"]);
    cmd.env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    drop(child.stderr.take()); // the log shipper went away
    eventually!(
        30,
        "ready",
        http_get(&addr, "/readyz").is_some_and(|(s, _)| s == 200)
    );
    let hits = send(&url, &["log"], 500).await;
    wait_drained(&mut c, &k).await;
    assert_eq!(read_all(&mut c, &k).await, reference(&hits, &PRECISIONS));
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(25);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the worker did not stop");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "no panic on the closed pipe");
    assert!(
        consumers(&mut c).await.is_empty(),
        "it left the group: it lived"
    );
}

#[test]
fn bad_settings_are_refused_before_anything_starts() {
    let srv = server();
    let url = srv.url();
    let cases: [(&[&str], &str); 6] = [
        (&["--block-ms", "0"], "HITCOUNT_BLOCK_MS"),
        (&["--dead-stream", "hits"], "HITCOUNT_DEAD_STREAM"),
        (&["--stream", ""], "HITCOUNT_STREAM"),
        (&["--group", ""], "HITCOUNT_GROUP"),
        (&["--dead-stream", ""], "HITCOUNT_DEAD_STREAM"),
        (&["--lease-ms", "10"], "HITCOUNT_LEASE_MS"),
    ];
    for (args, setting) in cases {
        let mut cmd = bin::default_worker(&url, &free_addr(), args);
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(setting), "{args:?} names {setting}: {err}");
        assert!(
            !err.contains("serving") && !err.contains("worker starting"),
            "{args:?}: nothing started before the check: {err}"
        );
    }
}

#[test]
fn every_command_refuses_empty_or_looping_stream_names() {
    let srv = server();
    let url = srv.url();
    let cases: [&[&str]; 5] = [
        &["hit", "x", "--stream", ""],
        &["load", "--hits", "1", "--group", ""],
        &["get", "x", "--precision", "60", "--dead-stream", "hits"],
        &["status", "--stream", ""],
        &["clean", "--once", "--dead-stream", ""],
    ];
    for args in cases {
        let out = bin::hitcount()
            .args(args)
            .args(["--redis-url", &url])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("HITCOUNT_STREAM")
                || err.contains("HITCOUNT_GROUP")
                || err.contains("HITCOUNT_DEAD_STREAM"),
            "{args:?} names the setting: {err}"
        );
    }
}

/// Workers with different shard counts would leave shards unread: the
/// first worker records its count, and one started with another is
/// refused with one line naming the setting (as is the default count after
/// a sharded start), while the same count starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_another_shard_count_is_refused() {
    let server = server();
    let url = server.url();
    let (mut first, addrs) = default_workers(&url, 1, &["--shards", "4"]);
    wait_ready(&mut first[0], &addrs[0]);
    for other in [&["--shards", "8"][..], &[][..]] {
        let mut cmd = bin::default_worker(&url, "127.0.0.1:0", other);
        cmd.stderr(Stdio::piped());
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{other:?}: {err}");
        let last = err.trim().lines().last().unwrap_or("");
        assert!(
            last.starts_with("hitcount: HITCOUNT_SHARDS is") && last.contains("same"),
            "the last line says why and what to do: {err}"
        );
    }
    let (mut same, addrs) = default_workers(&url, 1, &["--shards", "4"]);
    wait_ready(&mut same[0], &addrs[0]);
    assert_eq!(exit_within(&mut same[0], 0), None, "the same count runs");
}
