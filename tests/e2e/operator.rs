//! The operator's commands through the real binary: `hitcount clean --once`
//! removes old samples and refuses, naming the holder, while a worker holds
//! the lease; `hitcount status` shows the stream, each group's lag and
//! pending count, consumers and their idle times, the leader and its lease
//! left, the known counters and the last pass, as text and as JSON.

use crate::common;

use std::time::Duration;

use common::bin::{free_addr, run_hitcount, start_worker};
use common::*;
use hitcount::model::keys::Keys;
use hitcount::store::connect::Conn;

/// Counters `1:NAME` with one sample `ts` each.
async fn plant(c: &mut Conn, k: &Keys, names: &[String], ts: i64) {
    let mut pipe = redis::pipe();
    for name in names {
        let m = Keys::member(1, name);
        pipe.cmd("HSET").arg(k.count_of_member(&m)).arg(ts).arg(1);
        pipe.cmd("ZADD").arg(k.known()).arg(0).arg(&m);
    }
    let _: () = pipe.query_async(c).await.unwrap();
}

async fn known(c: &mut Conn, k: &Keys) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(k.known())
        .arg(0)
        .arg(-1)
        .query_async(c)
        .await
        .unwrap()
}

fn text(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_once_and_status_through_the_binary() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let k = keys(&settings(&url, "any"));
    let now = unix_now();
    let old: Vec<String> = (0..30).map(|i| format!("old{i}")).collect();
    let young: Vec<String> = (0..5).map(|i| format!("young{i}")).collect();
    plant(&mut c, &k, &old, now - 100_000).await;
    plant(&mut c, &k, &young, now).await;

    // Nobody leads: one pass now, exit 0.
    let out = run_hitcount(&["clean", "--once", "--json", "--redis-url", &url]);
    let pass: serde_json::Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(pass["samples_removed"], 30, "{pass}");
    assert_eq!(pass["counters_removed"], 30, "{pass}");
    assert!(
        pass["leader"].as_str().unwrap().starts_with("clean-once@"),
        "{pass}"
    );
    let left = known(&mut c, &k).await;
    assert_eq!(
        left,
        young.iter().map(|n| format!("1:{n}")).collect::<Vec<_>>()
    );
    let lease: Option<String> = redis::cmd("GET")
        .arg("hitcount:leader")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(lease, None, "clean --once releases the lease");
    // The text form, on a fresh batch of old samples.
    plant(&mut c, &k, &old[..3], now - 100_000).await;
    let out = text(&run_hitcount(&["clean", "--once", "--redis-url", &url]));
    assert!(out.contains("3 samples removed"), "{out}");

    // Hits for a worker to count; a second group that lags behind with
    // three entries read and not acknowledged.
    let mut pipe = redis::pipe();
    for i in 0..50 {
        pipe.cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("name")
            .arg("page:a")
            .arg("count")
            .arg(1)
            .arg("ts")
            .arg(now - i % 3);
    }
    let _: () = pipe.query_async(&mut c).await.unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("hits")
        .arg("lagging")
        .arg("0")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("lagging")
        .arg("slowpoke")
        .arg("COUNT")
        .arg(3)
        .arg("STREAMS")
        .arg("hits")
        .arg(">")
        .query_async(&mut c)
        .await
        .unwrap();
    // A worker that leads: it runs a pass at once, then one an hour.
    let listen = free_addr();
    let mut w = start_worker(
        &url,
        "op-w1",
        &listen,
        &["--lease-ms", "3000", "--clean-interval", "3600"],
    );
    wait_drained(&mut c, &k).await;
    let token = bin_leader(&mut c).await;
    assert!(token.starts_with("op-w1/"), "{token}");
    let status: std::collections::HashMap<String, String> = wait_status(&mut c, &k, &token).await;
    assert_eq!(status["leader"], token);

    // While it leads, clean --once says it waits, and gives up after
    // --wait, or as soon as it sees the leader renew its lease (every
    // second here), naming it.
    let out = run_hitcount(&["clean", "--once", "--wait", "1", "--redis-url", &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "clean --once ran beside a leader");
    assert!(err.contains(&token), "the holder is named: {err}");
    assert!(err.contains("hitcount:leader"), "{err}");
    assert!(
        err.contains("whose worker cleans on its own: waiting up to 1 s for it (--wait)"),
        "it says it waits before it does: {err}"
    );
    assert!(
        err.contains("a live worker that renews it") || err.contains("not released within 1 s"),
        "{err}"
    );

    // The status, for a human: 7 precisions of page:a plus the young ones.
    let counters = 7 + young.len();
    let out = text(&run_hitcount(&["status", "--redis-url", &url]));
    println!("{out}");
    for want in [
        "stream hits: 50 entries".to_string(),
        "group hitcount: lag 0".to_string(),
        "group lagging: lag 47".to_string(),
        "pending 3".to_string(),
        "consumer op-w1: pending 0, idle".to_string(),
        "consumer slowpoke: pending 3, idle".to_string(),
        format!("leader: {token} (lease left"),
        format!("known counters: {counters}"),
        format!("by {token}: took"),
    ] {
        assert!(out.contains(&want), "missing {want:?} in:\n{out}");
    }
    assert!(out.contains("last cleaner pass: "), "{out}");
    assert!(!out.contains("known statistics"), "no values sent: {out}");

    // And for scripts.
    let out = text(&run_hitcount(&["status", "--json", "--redis-url", &url]));
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["stream"], "hits");
    assert_eq!(s["length"], 50);
    assert_eq!(s["known_counters"], counters);
    assert_eq!(s["known_stats"], 0);
    let group = |name: &str| {
        s["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap_or_else(|| panic!("no group {name}: {s}"))
            .clone()
    };
    let (main, lagging) = (group("hitcount"), group("lagging"));
    assert_eq!((&main["lag"], &main["pending"]), (&0.into(), &0.into()));
    assert_eq!(
        (&lagging["lag"], &lagging["pending"]),
        (&47.into(), &3.into())
    );
    assert_eq!(lagging["consumers"][0]["name"], "slowpoke");
    assert_eq!(lagging["consumers"][0]["pending"], 3);
    assert!(lagging["consumers"][0]["idle_ms"].is_u64());
    assert_eq!(main["consumers"][0]["name"], "op-w1");
    assert_eq!(s["leader"]["token"], token);
    let left = s["leader"]["lease_left_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 3000, "{left}");
    assert_eq!(s["last_pass"]["leader"], token);
    for field in ["at_ms", "duration_ms", "samples_removed", "trimmed"] {
        assert!(s["last_pass"][field].is_i64(), "{field} is a number: {s}");
    }

    // The leader releases the lease on SIGTERM: clean --once runs at once.
    assert!(
        w.terminate(Duration::from_secs(30)).success(),
        "{}",
        w.stderr()
    );
    let out = text(&run_hitcount(&[
        "clean",
        "--once",
        "--wait",
        "1",
        "--redis-url",
        &url,
    ]));
    assert!(out.contains("0 samples removed"), "{out}");
}

/// The lease's token, waiting for a holder.
async fn bin_leader(c: &mut Conn) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let t: Option<String> = redis::cmd("GET")
            .arg("hitcount:leader")
            .query_async(c)
            .await
            .unwrap();
        if let Some(t) = t {
            return t;
        }
        assert!(std::time::Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The recorded last pass, once `token` has recorded one.
async fn wait_status(
    c: &mut Conn,
    k: &Keys,
    token: &str,
) -> std::collections::HashMap<String, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let h: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(k.cleaner_status())
            .query_async(c)
            .await
            .unwrap();
        if h.get("leader").map(String::as_str) == Some(token) {
            return h;
        }
        assert!(std::time::Instant::now() < deadline, "no pass by {token}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
