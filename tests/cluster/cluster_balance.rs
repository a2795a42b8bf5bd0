//! `hitcount status` on a real local Redis Cluster balances the masters'
//! work as an operator meets it: skewed traffic loads 16 stream shards
//! unequally, the master serving `known:` also takes every new counter's
//! ZADD, and the slot moves `status` lists, made with Redis' own commands,
//! leave nothing more to move and no master busier than before.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::bin;
use common::cluster::Cluster;
use hitcount::model::slots::MEMBER_COST;
use serde_json::Value;

/// `hitcount ARGS` with `REDIS_URL` set, as a user runs it: it succeeds,
/// and its stdout is returned.
fn run(url: &str, args: &[&str]) -> Vec<u8> {
    let out = bin::hitcount()
        .args(args)
        .env("REDIS_URL", url)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn status(url: &str) -> Value {
    serde_json::from_slice(&run(url, &["status", "--shards", "16", "--json"])).unwrap()
}

/// Each master's work as the advice weighs it: its shards' share of the
/// traffic, plus `known:`'s ZADDs on the master serving it.
fn work(s: &Value, known_master: &str, entries: f64) -> Vec<f64> {
    let members = s["known_counters"].as_f64().unwrap();
    s["masters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let share = m["traffic_share"].as_f64().unwrap();
            match m["master"].as_str() == Some(known_master) {
                true => share + MEMBER_COST * members / entries,
                false => share,
            }
        })
        .collect()
}

fn busiest(work: &[f64]) -> f64 {
    work.iter().copied().fold(0.0, f64::max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_moves_balance_skewed_traffic_and_known() {
    let cluster = Cluster::start_with(3, 0);
    let url = cluster.seed_url();
    // Zipf(1.0) over 1,000 names: a name's hits all go to its shard, so
    // the shards carry unequal shares.
    let hits = 20_000;
    let n = hits.to_string();
    let load = [
        "load", "--shards", "16", "--hits", &n, "--names", "1000", "--zipf", "1.0",
    ];
    run(&url, &load);
    // A worker counts them, so `known:` holds every name's counters.
    let mut worker = bin::Child::spawn(
        "worker",
        bin::default_worker(
            &url,
            "127.0.0.1:0",
            &["--shards", "16", "--block-ms", "200"],
        ),
    );
    let before = bin::wait_for("the hits counted", Duration::from_secs(60), || {
        worker.assert_running();
        let s = status(&url);
        let g = &s["groups"][0];
        (g["lag"] == 0 && g["pending"] == 0 && s["known_counters"].as_u64() > Some(0)).then_some(s)
    });
    worker.terminate(Duration::from_secs(10));

    // Every entry added is some master's traffic.
    let shares: f64 = before["masters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["traffic_share"].as_f64().unwrap())
        .sum();
    assert!((shares - 1.0).abs() < 1e-9, "{before}");
    let known_master = format!("127.0.0.1:{}", cluster.master_of("known:"));
    let entries = hits as f64;
    let moves = before["evening_moves"].as_array().unwrap().clone();
    assert!(
        !moves.is_empty(),
        "16 shards as created are not balanced: {before}"
    );

    // The moves, made live with Redis' own commands.
    for m in &moves {
        let to: u16 = m["to"]
            .as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        cluster
            .migrate_slot(m["slot"].as_u64().unwrap() as u16, to)
            .await;
    }
    let after = status(&url);
    assert_eq!(after["length"], hits, "no entry lost in the moves: {after}");
    assert_eq!(after["evening_moves"], Value::Array(vec![]), "{after}");
    let (b, a) = (
        busiest(&work(&before, &known_master, entries)),
        busiest(&work(&after, &known_master, entries)),
    );
    assert!(
        a < b,
        "the busiest master's work went from {b} to {a}: {after}"
    );
    // A third each at best; single slots of unequal shards come close.
    assert!(a < 0.5, "{after}");
}
