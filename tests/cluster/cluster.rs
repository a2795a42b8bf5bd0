//! hitcount on a real local Redis Cluster (3 masters, 3 replicas), as far as
//! it goes today: `REDIS_URL` with several nodes or one (auto-detected),
//! `hit`, `load`, `get`, `status` (with which master serves which stream
//! shards) and `serve` through the cluster with the seed layout (the worker: `cluster_worker.rs`);
//! `demo` counts exactly there, and
//! `HITCOUNT_CLUSTER=off` with several nodes, or one of several masters, is
//! refused.

use crate::common;

use std::process::Stdio;

use common::bin;
use common::cluster::Cluster;
use redis::AsyncCommands;

/// The rules of serve's read-only user, as docs/operations.md gives them.
const READ_ONLY: &str =
    "resetchannels ~known: ~count:* ~stats:* -@all +@read +@connection -@dangerous +info";
/// What docs/operations.md says a cluster adds to them.
const ON_A_CLUSTER: &str = "+cluster|slots";

fn run(url: &str, args: &[&str]) -> std::process::Output {
    bin::hitcount()
        .args(args)
        .env("REDIS_URL", url)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout {}\nstderr {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hit_load_get_and_status_work_on_a_cluster_with_the_seed_layout() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    assert!(seeds.contains(','), "several nodes: {seeds}");
    let one_node = cluster.urls()[0].clone();
    let now = (common::unix_now() - 5).to_string();

    // Several nodes in REDIS_URL, and one node found to be a cluster.
    for url in [&seeds, &one_node] {
        let out = run(url, &["hit", "page:home", "--count", "3", "--at", &now]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = run(&seeds, &["load", "--hits", "500", "--names", "20"]);
    assert!(out.status.success(), "{}", text(&out));

    // What a plain cluster client sees: the stream with every hit.
    let mut c = cluster.client_conn().await;
    let len: i64 = c.xlen("hits").await.unwrap();
    assert_eq!(len, 502);
    // And what `status` shows through the cluster.
    let out = run(&seeds, &["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["stream"], "hits", "{}", text(&out));
    assert_eq!(status["length"], 502, "{}", text(&out));
    // With stream shards, which master serves which, and the one slot to
    // move: 18 shards fall 6/7/5 on the harness' even masters. (`hits` is
    // recorded as one shard by the producers above, and status adopts a
    // recorded count: a stream with none plans 18; shard k's slot is that
    // of its tag `{k}`, whatever the stream's name.)
    let out = run(&seeds, &["status", "--shards", "18", "--stream", "planned"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("shards per master: 6/7/5\n"),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains("    slot 5649 (shard 2) from 127.0.0.1:"),
        "{}",
        text(&out)
    );
    let out = run(
        &seeds,
        &["status", "--shards", "18", "--stream", "planned", "--json"],
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let masters = status["masters"].as_array().unwrap();
    let counts: Vec<usize> = masters
        .iter()
        .map(|m| m["shards"].as_array().unwrap().len())
        .collect();
    assert_eq!(counts, [6, 7, 5], "{}", text(&out));
    let moves = status["evening_moves"].as_array().unwrap();
    assert_eq!(moves.len(), 1, "{}", text(&out));
    assert_eq!(moves[0]["slot"], 5649, "{}", text(&out));
    assert_eq!(moves[0]["shard"], 2, "{}", text(&out));
    assert_eq!(moves[0]["from"], masters[1]["master"], "{}", text(&out));
    assert_eq!(moves[0]["to"], masters[2]["master"], "{}", text(&out));

    // The counters as the seeds lay them out, wherever the cluster put
    // them: written here by hand (no worker runs on a cluster yet), read
    // back by `get` through the cluster.
    let bucket = (common::unix_now() / 60) * 60;
    for name in ["page:home", "page:a/b", "page:ünï"] {
        let key = format!("count:60:{name}");
        let _: () = c.hset(&key, bucket, 7).await.unwrap();
        let out = run(&seeds, &["get", name, "--precision", "60", "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        let samples: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(samples[0]["time"], bucket, "{}", text(&out));
        assert_eq!(samples[0]["count"], 7, "{}", text(&out));
    }
    let slots: std::collections::BTreeSet<u16> =
        ["count:60:page:home", "count:60:page:a/b", "hits"]
            .iter()
            .map(|k| cluster.slot_of(k))
            .collect();
    assert!(slots.len() > 1, "the keys really are spread over slots");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_on_a_cluster_and_cluster_off_is_refused() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    // `hitcount demo` with REDIS_URL naming a cluster: counts exactly, and a
    // second run first deletes what the first left on every master.
    for round in 0..2 {
        let out = run(&seeds, &["demo", "--hits", "3000", "--names", "40"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            stdout.contains("3000 of 3000 sent: exact"),
            "{}",
            text(&out)
        );
        assert_eq!(
            stdout.contains("left by an earlier demo"),
            round == 1,
            "{}",
            text(&out)
        );
    }
    // Several nodes with cluster mode off is a contradiction, said as such.
    let out = bin::hitcount()
        .args(["get", "x", "--precision", "60"])
        .env("REDIS_URL", &seeds)
        .env("HITCOUNT_CLUSTER", "off")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("HITCOUNT_CLUSTER"),
        "{}",
        text(&out)
    );
    // One node of the cluster with cluster mode off: every key of the other
    // masters would answer MOVED, for good. `hit` says so and sends nothing;
    // a worker stops with the same line instead of retrying forever.
    let node = cluster.urls()[0].clone();
    let out = bin::hitcount()
        .args(["hit", "page:off"])
        .env("REDIS_URL", &node)
        .env("HITCOUNT_CLUSTER", "off")
        .env("HITCOUNT_STREAM", "off-hits")
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("HITCOUNT_CLUSTER=off, but this node is one of the 3 masters")
            && said.contains("at auto, the default, or set it to on"),
        "{said}"
    );
    let stderr = worker_that_stops(&node, &[("HITCOUNT_CLUSTER", "off")]);
    assert!(stderr.contains("HITCOUNT_CLUSTER=off, but"), "{stderr}");
    // serve as its documented read-only user, who may not run CLUSTER
    // INFO: refused too, with or without what a cluster adds (it was let
    // start, then answered 503 for the other masters' counters).
    let mut first = common::conn(&node).await;
    for (user, extra) in [("ro-off", ""), ("ro-off-slots", ON_A_CLUSTER)] {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg(user)
            .arg("reset")
            .arg("on")
            .arg(">pw");
        for rule in READ_ONLY.split_whitespace().chain(extra.split_whitespace()) {
            cmd.arg(rule);
        }
        let _: () = cmd.query_async(&mut first).await.unwrap();
        let url = node.replacen("redis://", &format!("redis://{user}:pw@"), 1);
        let out = bin::hitcount()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("REDIS_URL", &url)
            .env("HITCOUNT_CLUSTER", "off")
            .output()
            .unwrap();
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{user}: {said}");
        assert!(said.contains("HITCOUNT_CLUSTER=off, but"), "{user}: {said}");
    }
    // A password the nodes refuse, given with several seed nodes (the
    // cluster client wraps the refusal in an error of its own): the worker
    // stops with the hint, as on one Redis, instead of retrying for good.
    let bad: Vec<String> = cluster
        .urls()
        .iter()
        .take(2)
        .map(|u| u.replacen("redis://", "redis://:wrong@", 1))
        .collect();
    let stderr = worker_that_stops(&bad.join(","), &[]);
    assert!(
        stderr.contains("AuthenticationFailed")
            && stderr.contains("check the user and password in REDIS_URL"),
        "{stderr}"
    );
    // A `{` in the prefix would put a shard's bookkeeping keys in another
    // slot than its stream: the worker refuses to start, and so `hit` and
    // `load` refuse to send what no worker would count.
    let braced = [
        ("HITCOUNT_PREFIX", "{p}:"),
        ("HITCOUNT_STREAM", "braced-hits"),
    ];
    let stderr = worker_that_stops(&seeds, &braced);
    assert!(
        stderr.contains("remove the `{…}` from HITCOUNT_PREFIX"),
        "{stderr}"
    );
    for args in [&["hit", "page:braced"][..], &["load", "--hits", "10"]] {
        let out = bin::hitcount()
            .args(args)
            .env("REDIS_URL", &seeds)
            .envs(braced)
            .output()
            .unwrap();
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(
            said.contains("remove the `{…}` from HITCOUNT_PREFIX")
                && said.contains("no worker starts with these settings"),
            "{said}"
        );
    }
    let mut conn = cluster.client().get_async_connection().await.unwrap();
    let sent: u64 = conn.xlen("off-hits").await.unwrap();
    assert_eq!(sent, 0, "nothing was sent with cluster mode off");
    let sent: u64 = conn.xlen("braced-hits").await.unwrap();
    assert_eq!(sent, 0, "nothing was sent with a braced prefix");
}

/// Starts a worker on `url` that must stop by itself within 30 s with
/// status 1; returns its stderr.
fn worker_that_stops(url: &str, env: &[(&str, &str)]) -> String {
    let mut worker = bin::hitcount()
        .args(["worker", "--listen", "127.0.0.1:0"])
        .env("REDIS_URL", url)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = worker.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = worker.kill();
            let _ = worker.wait();
            panic!("a worker on {url} with {env:?} kept running");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut worker.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    stderr
}

/// serve's read-only user `reader` exactly as docs/operations.md gives it,
/// with what it says a cluster adds, on every node, their ACL LOGs
/// emptied; the URL of the masters as that user.
pub(crate) async fn read_only_user(cluster: &Cluster) -> String {
    let operations =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .unwrap();
    assert!(
        operations.contains(READ_ONLY),
        "docs/operations.md gives {READ_ONLY}"
    );
    assert!(
        operations.contains(&format!("On a Redis Cluster, add `{ON_A_CLUSTER}`")),
        "docs/operations.md says what a cluster adds"
    );
    for port in cluster.ports() {
        let mut node = common::conn(&format!("redis://127.0.0.1:{port}")).await;
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg("reader")
            .arg("reset")
            .arg("on")
            .arg(">read-pw");
        for rule in READ_ONLY.split_whitespace().chain([ON_A_CLUSTER]) {
            cmd.arg(rule);
        }
        let _: () = cmd.query_async(&mut node).await.unwrap();
        common::acl_log_reset(&mut node).await;
    }
    cluster
        .masters()
        .iter()
        .map(|p| format!("redis://reader:read-pw@127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `hitcount serve` on a cluster: names by page, exact samples and `top`
/// (equal to a brute-force ranking) over counters spread across the slots;
/// the same for statistics: a name's buckets, and `top` by mean from the
/// API and the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_counters_spread_over_the_cluster() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    let mut c = cluster.client_conn().await;
    // A bucket `top --bucket` takes: the start of one still kept.
    let bucket = common::unix_now() / 3600 * 3600;
    let mut expected = Vec::new();
    let mut by_mean = Vec::new();
    for i in 0..150 {
        let name = format!("p/{i:03}");
        let count = (i * 37) % 11 + 1;
        let _: () = c
            .hset(format!("count:3600:{name}"), bucket, count)
            .await
            .unwrap();
        let _: () = c.zadd("known:", format!("3600:{name}"), 0).await.unwrap();
        // Statistics: `count` observations of exactly `mean` (ties too).
        let mean = ((i * 53) % 40) as f64 + 0.5;
        let stats = format!("stats:3600:{name}");
        let fields = [
            (format!("{bucket}:count"), count.to_string()),
            (format!("{bucket}:sum"), (mean * count as f64).to_string()),
            (
                format!("{bucket}:sumsq"),
                (mean * mean * count as f64).to_string(),
            ),
            (format!("{bucket}:min"), mean.to_string()),
            (format!("{bucket}:max"), mean.to_string()),
        ];
        let _: () = c.hset_multiple(&stats, &fields).await.unwrap();
        let _: () = c
            .zadd("stats:known:", format!("3600:{name}"), 0)
            .await
            .unwrap();
        by_mean.push((name.clone(), mean, count as i64));
        expected.push((name, count as i64));
    }
    expected.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    by_mean.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));

    let reader = read_only_user(&cluster).await;
    let (_serve, addr) = serve(&reader);
    let get = |path: &str| -> serde_json::Value {
        let (status, body) = bin::http_get(&addr, path).expect("serve answers");
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    let page = get("/api/v1/counters?prefix=p%2F&limit=1000");
    assert_eq!(page["counters"].as_array().unwrap().len(), 150);
    let one = get("/api/v1/counters/p%2F007?precision=3600");
    assert_eq!(
        one["samples"],
        serde_json::json!([[bucket, expected.iter().find(|e| e.0 == "p/007").unwrap().1]])
    );
    let top = get(&format!(
        "/api/v1/top?precision=3600&bucket={bucket}&limit=20"
    ));
    let got: Vec<(String, i64)> = top["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, expected[..20].to_vec());

    let want: Vec<serde_json::Value> = by_mean[..20]
        .iter()
        .map(|(n, m, c)| serde_json::json!({"name": n, "mean": m, "count": c}))
        .collect();
    let want = serde_json::json!({
        "precision": 3600, "bucket": bucket, "by": "mean", "counters": want,
    });
    let top = get(&format!(
        "/api/v1/top?by=mean&precision=3600&bucket={bucket}&limit=20"
    ));
    assert_eq!(top, want);
    let cli = run(
        &seeds,
        &[
            "top",
            "--by",
            "mean",
            "--bucket",
            &bucket.to_string(),
            "--limit",
            "20",
            "--json",
        ],
    );
    assert!(cli.status.success(), "{}", text(&cli));
    let cli: serde_json::Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(cli, want);
    let one = get("/api/v1/stats/p%2F007?precision=3600");
    let (_, mean, count) = by_mean.iter().find(|e| e.0 == "p/007").unwrap();
    assert_eq!(
        one["buckets"],
        serde_json::json!([{"t": bucket, "count": count, "mean": mean, "min": mean,
            "max": mean, "stddev": 0.0, "p50": null, "p90": null, "p99": null}])
    );
    let page = get("/api/v1/stats?prefix=p%2F&limit=1000");
    assert_eq!(page["counters"].as_array().unwrap().len(), 150);
    let (status, _) = bin::http_get(&addr, "/").expect("serve answers");
    assert_eq!(status, 200);
    assert_nothing_refused(&cluster).await;
}

/// `hitcount serve` on the cluster `url` names, once it answers; its
/// address.
pub(crate) fn serve(url: &str) -> (bin::Child, String) {
    let addr = bin::free_addr();
    let mut serve = bin::Child::spawn("serve", {
        let mut cmd = bin::hitcount();
        cmd.args(["serve", "--redis-url", url, "--listen", &addr]);
        cmd
    });
    bin::wait_for("serve answers", std::time::Duration::from_secs(30), || {
        serve.assert_running();
        bin::http_get(&addr, "/api/v1/nope")
    });
    (serve, addr)
}

/// Redis refused serve nothing, on any node: every ACL LOG is empty.
pub(crate) async fn assert_nothing_refused(cluster: &Cluster) {
    for port in cluster.ports() {
        let mut node = common::conn(&format!("redis://127.0.0.1:{port}")).await;
        let log = common::acl_log(&mut node).await;
        assert!(log.is_empty(), "node {port} refused serve: {log:?}");
    }
}
