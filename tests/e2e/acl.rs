//! Least privilege: hitcount runs end to end as a Redis ACL user that has
//! only the commands and keys of `deploy/redis/hitcount.acl` — the worker
//! with its leader's duties (cleaning, trimming), the producer, `hit`, `import`, `get`,
//! `clean --once` and `status` — and Redis' ACL LOG stays empty (no command
//! or key was refused).

use crate::common;

use std::time::Duration;

use common::bin::{free_addr, http_get, run_hitcount, run_ok, start_worker};
use common::*;
use hitcount_lab::kit::ServerOptions;

const USER: &str = "hitcount";
const PASSWORD: &str = "acl-test-pw";

/// The rules every deployment is told to give hitcount's user.
fn acl_rules() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/redis/hitcount.acl");
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_runs_as_the_least_privileged_user() {
    let rules = acl_rules();
    assert!(rules.contains("-@all"), "the rules must start from nothing");
    let server = server_with(ServerOptions {
        extra: vec![format!("user {USER} on >{PASSWORD} {rules}")],
        ..ServerOptions::default()
    });
    let admin_url = server.url();
    let url = format!("redis://{USER}:{PASSWORD}@127.0.0.1:{}", server.port());
    let mut admin = conn(&admin_url).await;
    // The user really is restricted.
    let mut user = conn(&url).await;
    let denied: redis::RedisResult<String> =
        redis::cmd("GET").arg("other").query_async(&mut user).await;
    assert!(denied.unwrap_err().code() == Some("NOPERM"));
    let denied: redis::RedisResult<()> = redis::cmd("FLUSHALL").query_async(&mut user).await;
    assert!(denied.unwrap_err().code() == Some("NOPERM"));
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query_async(&mut admin)
        .await
        .unwrap();

    // Events through the producer library, as the user.
    let ts = (unix_now() - 30) as f64;
    let producer = producer(&url);
    let mut hits = Vec::new();
    for i in 0..600 {
        let name = format!("page:{}", i % 7);
        producer.hit_at(&name, 1, ts);
        hits.push((name, 1, ts as i64));
    }
    producer.flush().await;

    // A consumer that took entries and vanished: the workers must claim them.
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("hits")
        .arg("hitcount")
        .arg("0")
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("hitcount")
        .arg("gone")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg("hits")
        .arg(">")
        .query_async(&mut admin)
        .await
        .unwrap();
    // An entry that cannot be counted: dead-lettered.
    let _: String = redis::cmd("XADD")
        .arg("hits")
        .arg("*")
        .arg("nom")
        .arg("x")
        .query_async(&mut admin)
        .await
        .unwrap();

    // Old samples only the leader's pass removes.
    let k = keys(&settings(&url, "any"));
    plant_old(&mut admin, &k, "leader").await;

    // One worker in-process, one as the real binary (with its sampler and
    // the leader's duties: it is the only candidate).
    let mut s = settings(&url, "acl-w1");
    s.worker.claim_idle_ms = 1000;
    let workers = Workers::start(vec![s.clone()]);
    let listen = free_addr();
    let mut w2 = start_worker(&url, "acl-w2", &listen, &["--claim-idle-ms", "1000"]);

    // The hit command, as the user.
    let at = ts.to_string();
    run_ok(&url, &["hit", "page:cli", "--count", "5", "--at", &at]);
    hits.push(("page:cli".into(), 5, ts as i64));
    // A hit with a value: its statistics are written as the user too.
    run_ok(&url, &["hit", "page:timed", "--value", "12.5", "--at", &at]);
    hits.push(("page:timed".into(), 1, ts as i64));
    // An access log imported, with its progress, as the user.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let when = hitcount_lab::bench::import::log_time(ts as i64, 0);
    let lines: String = (0..50)
        .map(|i| {
            format!(
                "h - - [{when}] \"GET /acl/{} HTTP/1.1\" 200 1 \"-\" \"-\"\n",
                i % 3
            )
        })
        .collect();
    std::fs::write(&log, lines).unwrap();
    for _ in 0..2 {
        run_ok(&url, &["import", log.to_str().unwrap()]);
    }
    for i in 0..3 {
        hits.push((format!("/acl/{i}"), if i < 2 { 17 } else { 16 }, ts as i64));
    }

    wait_drained(&mut admin, &keys(&s)).await;
    let minute = (ts as i64).div_euclid(60) * 60;
    let stats: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("stats:60:page:timed")
        .query_async(&mut admin)
        .await
        .unwrap();
    for (field, want) in [
        ("count", "1"),
        ("sum", "12.5"),
        ("min", "12.5"),
        ("max", "12.5"),
    ] {
        let got = stats.get(&format!("{minute}:{field}"));
        assert_eq!(got.map(String::as_str), Some(want), "{field} in {stats:?}");
    }
    // The binary leads, cleans and trims as the user.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while old_left(&mut admin, &k).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "old samples not cleaned"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let leader: String = redis::cmd("HGET")
        .arg(k.cleaner_status())
        .arg("leader")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(leader.starts_with("acl-w2/"), "{leader}");
    // Let the binary's sampler take a sample as the user.
    tokio::time::sleep(crate::common::plain::SAMPLE_EVERY + Duration::from_secs(1)).await;
    let (status, metrics) = http_get(&listen, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(
        metrics.contains("hitcount_redis_errors_total{kind=\"response\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hitcount_group_pending_entries 0"),
        "{metrics}"
    );
    assert!(
        w2.terminate(Duration::from_secs(30)).success(),
        "{}",
        w2.stderr()
    );
    workers.stop().await;

    assert_eq!(
        read_all(&mut admin, &keys(&s)).await,
        reference(&hits, &s.layout.precisions)
    );
    let dead: u64 = redis::cmd("XLEN")
        .arg("hits:dead")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(dead, 1);

    // Reading a counter, as the user.
    let out = run_hitcount(&["get", "page:cli", "-p", "60", "--json", "--redis-url", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(samples[0]["count"], 5, "{samples}");
    // Statistics of a counter without any, and of a name never seen (each
    // asks whether the name is listed).
    for name in ["page:cli", "never:seen"] {
        let args = ["get", name, "-p", "60", "--stats", "--json"];
        let out = run_hitcount(&[&args[..], &["--redis-url", &url]].concat());
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The operator's commands, as the user.
    plant_old(&mut admin, &k, "once").await;
    let out = run_hitcount(&["clean", "--once", "--json", "--redis-url", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pass: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pass["samples_removed"], OLD, "{pass}");
    assert_eq!(old_left(&mut admin, &k).await, 0);
    for args in [&["status"][..], &["status", "--json"]] {
        let out = run_hitcount(&[args, &["--redis-url", &url]].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("clean-once@"), "the last pass shows: {text}");
    }

    // Nothing was refused along the way.
    assert_nothing_refused(&mut admin, "the user").await;
    producer.shutdown(Duration::from_secs(1)).await;
}

/// Old samples planted per test step.
const OLD: u64 = 20;

/// `OLD` counters `1:old:TAG:i`, each with one sample a day old.
async fn plant_old(
    c: &mut hitcount::store::connect::Conn,
    k: &hitcount::model::keys::Keys,
    tag: &str,
) {
    let mut pipe = redis::pipe();
    for i in 0..OLD {
        let m = hitcount::model::keys::Keys::member(1, &format!("old:{tag}:{i}"));
        pipe.cmd("HSET")
            .arg(k.count_of_member(&m))
            .arg(unix_now() - 86_400)
            .arg(1);
        pipe.cmd("ZADD").arg(k.known()).arg(0).arg(m);
    }
    let _: () = pipe.query_async(c).await.unwrap();
}

/// Planted counters still known.
async fn old_left(c: &mut hitcount::store::connect::Conn, k: &hitcount::model::keys::Keys) -> u64 {
    redis::cmd("ZLEXCOUNT")
        .arg(k.known())
        .arg("[1:old:")
        .arg("(1:old;")
        .query_async(c)
        .await
        .unwrap()
}
