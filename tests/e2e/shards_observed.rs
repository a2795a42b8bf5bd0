//! Watching a sharded stream, on one Redis and on a real local Redis
//! Cluster (the sampler's reading of every shard is tested beside it, in
//! `service::sampler`): each worker's owner gauges and `/readyz` name
//! the shards it reads (or that it waits to take one over), and
//! `hitcount status` shows every shard with its reader, as a table and as
//! JSON.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::bin::{self, http_get, metric_value, wait_for};
use common::cluster::Cluster;
use hitcount::model::config::{LayoutArgs, StreamArgs};
use hitcount::model::keys::Keys;

const SHARDS: u32 = 4;

fn shard_keys(clustered: bool) -> Vec<Keys> {
    let stream = StreamArgs {
        shards: SHARDS,
        ..StreamArgs::default()
    };
    Keys::all_shards(&LayoutArgs::default(), &stream, clustered)
}

/// The shards a worker serving on `listen` reports as read, per its gauges.
fn owned(listen: &str) -> Option<(BTreeSet<u32>, String)> {
    let (status, metrics) = http_get(listen, "/metrics")?;
    if status != 200 {
        return None;
    }
    let mut set = BTreeSet::new();
    for k in 0..SHARDS {
        let v = metric_value(&metrics, &format!("hitcount_shard_owned{{shard=\"{k}\"}}"))?;
        if v == 1.0 {
            set.insert(k);
        }
    }
    let n = metric_value(&metrics, "hitcount_shards_owned")?;
    (n as usize == set.len()).then_some((set, metrics))
}

/// Two workers share four shards; a third holds none and stands by. Checks
/// the owner gauges, `/readyz`, `status`, and the sampled per-shard gauges
/// while one reader is paused.
async fn shards_are_observed(url: &str) {
    let names = ["obs-a", "obs-b"];
    let listens: Vec<String> = names.iter().map(|_| bin::free_addr()).collect();
    let mut workers: Vec<bin::Child> = names
        .iter()
        .zip(&listens)
        .map(|(n, l)| bin::start_worker(url, n, l, &["--shards", "4"]))
        .collect();
    // Each reads its share (2 of 4), together every shard once.
    let sets: Vec<BTreeSet<u32>> = wait_for("two shards each", Duration::from_secs(30), || {
        for w in workers.iter_mut() {
            w.assert_running();
        }
        let sets: Vec<_> = listens
            .iter()
            .map(|l| owned(l).map(|(s, _)| s))
            .collect::<Option<_>>()?;
        sets.iter().all(|s| s.len() == 2).then_some(sets)
    });
    let union: BTreeSet<u32> = sets.iter().flatten().copied().collect();
    assert_eq!(union, (0..SHARDS).collect(), "{sets:?}");
    // `/readyz` names them, once each shard's worker has joined its group.
    for (l, set) in listens.iter().zip(&sets) {
        let list: Vec<String> = set.iter().map(u32::to_string).collect();
        let want = format!("ok: reading shards {} of 4\n", list.join(", "));
        wait_for(&want, Duration::from_secs(20), || {
            http_get(l, "/readyz").filter(|r| *r == (200, want.clone()))
        });
    }
    // A third worker finds no free shard: ready, standing by.
    let spare = bin::free_addr();
    let mut third = bin::start_worker(url, "obs-c", &spare, &["--shards", "4"]);
    let (status, body) = http_get(&spare, "/readyz").unwrap();
    assert_eq!(
        (status, body.as_str()),
        (
            200,
            "ok: reading no shard: waiting to take one over (4 shards)\n"
        )
    );
    let (set, _) = owned(&spare).unwrap();
    assert!(set.is_empty(), "{set:?}");

    // An entry in every shard: each reader counts it (and so becomes a
    // consumer of its shard's group: Redis 7.0 adds one on its first entry).
    let mut c = common::conn(url).await;
    let keys = shard_keys(c.is_cluster());
    for k in &keys {
        let _: String = redis::cmd("XADD")
            .arg(&k.stream)
            .arg("*")
            .arg("name")
            .arg("first")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    // `status --json`: every shard, its length, its reader among its
    // consumers, nothing left behind.
    let status = || {
        let out = bin::run_hitcount(&["status", "--json", "--shards", "4", "--redis-url", url]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let reader = |sh: &serde_json::Value| -> String {
        let owner = sh["owner"]["token"].as_str().unwrap_or_default();
        owner.split('/').next().unwrap().to_string()
    };
    let s = wait_for(
        "every reader a consumer of its shard",
        Duration::from_secs(20),
        || {
            let s = status();
            s["shards"]
                .as_array()
                .unwrap()
                .iter()
                .all(|sh| {
                    let me = reader(sh);
                    sh["consumers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|c| c["name"] == me.as_str())
                })
                .then_some(s)
        },
    );
    assert_eq!(
        (&s["stream"], &s["length"]),
        (&"hits".into(), &4.into()),
        "{s}"
    );
    let shards = s["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 4, "{s}");
    let mut readers = BTreeMap::new();
    for (k, sh) in shards.iter().enumerate() {
        assert_eq!(sh["shard"], k, "{s}");
        assert_eq!(sh["stream"], format!("hits:{{{k}}}"), "{s}");
        assert_eq!(sh["length"], 1, "{s}");
        readers.insert(k as u32, reader(sh));
    }
    for (name, set) in names.iter().zip(&sets) {
        for k in set {
            assert_eq!(readers[k], *name, "{s}");
        }
    }
    assert_eq!(s["groups"][0]["name"], "hitcount", "{s}");
    // And as a table: one line per shard, with its reader.
    let out = bin::run_hitcount(&["status", "--shards", "4", "--redis-url", url]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("stream hits: 4 entries in 4 shards"),
        "{text}"
    );
    for (k, reader) in &readers {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("hits:{{{k}}}")))
            .unwrap_or_else(|| panic!("no line of shard {k}:\n{text}"));
        assert!(line.contains(&format!("{reader}/")), "{line}");
    }

    // obs-a paused: its shards' new entries wait, and obs-b's sampler sees
    // them per shard and summed. Its leases are stretched meanwhile so that
    // nobody takes its shards over and drains them before a sample.
    workers[0].stop();
    for &k in &sets[0] {
        let _: () = redis::cmd("PEXPIRE")
            .arg(keys[k as usize].shard_lease())
            .arg(120_000)
            .query_async(&mut c)
            .await
            .unwrap();
        for _ in 0..3 {
            let _: String = redis::cmd("XADD")
                .arg(&keys[k as usize].stream)
                .arg("*")
                .arg("name")
                .arg("late")
                .query_async(&mut c)
                .await
                .unwrap();
        }
    }
    // A paused process may have one blocked read outstanding per shard
    // (its reads ahead never block), which Redis serves with the first new
    // entry: that one is pending, the next two still in the stream, so
    // every paused shard has a backlog with an age. None can be
    // acknowledged while it is stopped: all three wait, lag or pending.
    let gauge = |m: &str, name: &str, k: u32| {
        metric_value(m, &format!("hitcount_shard_{name}{{shard=\"{k}\"}}")).unwrap()
    };
    // On a timeout, say what obs-b last saw and what Redis says of each
    // shard's group. The sampler reads every 5 s; a loaded machine (the
    // whole suite at once) has been seen to need more than four of them.
    let mut last = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let m = loop {
        if let Some((_, m)) = owned(&listens[1]) {
            let waiting = |k| gauge(&m, "lag_entries", k) + gauge(&m, "pending_entries", k);
            if sets[0].iter().all(|&k| waiting(k) >= 3.0) {
                break m;
            }
            last = m;
        }
        if std::time::Instant::now() > deadline {
            let mut groups = Vec::new();
            for k in &keys {
                let v: redis::Value = redis::cmd("XINFO")
                    .arg("GROUPS")
                    .arg(&k.stream)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                groups.push(format!("{}: {v:?}", k.stream));
            }
            let seen: Vec<&str> = last
                .lines()
                .filter(|l| l.starts_with("hitcount_shard"))
                .collect();
            panic!(
                "obs-a's shards {:?} not seen behind in 60 s by obs-b:\n{}\n{}",
                sets[0],
                seen.join("\n"),
                groups.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (mut lag, mut pending, mut oldest) = (0.0, 0.0, 0.0f64);
    for k in 0..SHARDS {
        let (l, p, age) = (
            gauge(&m, "lag_entries", k),
            gauge(&m, "pending_entries", k),
            gauge(&m, "backlog_age_seconds", k),
        );
        if sets[0].contains(&k) {
            assert!(age > 0.0, "shard {k} behind:\n{m}");
        } else {
            assert_eq!((l, p, age), (0.0, 0.0, 0.0), "shard {k} drained:\n{m}");
        }
        (lag, pending, oldest) = (lag + l, pending + p, oldest.max(age));
    }
    // The unlabelled gauges sum the shards (the oldest backlog of any).
    assert_eq!(
        metric_value(&m, "hitcount_group_lag_entries"),
        Some(lag),
        "{m}"
    );
    assert_eq!(
        metric_value(&m, "hitcount_group_pending_entries"),
        Some(pending),
        "{m}"
    );
    assert_eq!(
        metric_value(&m, "hitcount_group_backlog_age_seconds"),
        Some(oldest),
        "{m}"
    );
    workers[0].kill();
    for w in workers[1..].iter_mut().chain([&mut third]) {
        assert!(
            w.terminate(Duration::from_secs(25)).success(),
            "{}",
            w.stderr()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_report_their_shards_on_one_redis() {
    let server = common::server();
    shards_are_observed(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_report_their_shards_on_a_cluster() {
    let cluster = Cluster::start();
    shards_are_observed(&cluster.seed_url()).await;
}
