//! Chaos: a real redis-server with AOF, three `hitcount worker` processes
//! started with default settings (no consumer name: each takes the unique
//! default, as users' workers on one host do) and an in-process producer
//! sending a known set of hits, while a seeded driver SIGKILLs workers
//! (replacing them with a new process, like a new pod), SIGSTOPs them past the claim time then SIGCONTs them, kills every
//! client connection (`CLIENT KILL TYPE normal`) and restarts Redis once.
//! A third of the hits carry a value. At the end every counter at every
//! precision must equal the reference exactly, so must the statistics of the
//! values (sums to a relative 1e-9, histograms exactly), the dead-letter
//! stream must hold exactly the injected bad entries, and nothing may be
//! pending.
//!
//! Short by default (30,000 hits, about 40 s); `HITCOUNT_CHAOS_LONG=1` sends
//! 300,000. `HITCOUNT_CHAOS_SEED=<n>` replays a run (the seed is printed).
//! `HITCOUNT_CHAOS_WORKER_ARGS="--window-entries 200000 --window-ms 1000"`
//! passes more flags to every worker (larger windows, say).

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use hitcount_lab::kit::ServerOptions;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PRECISIONS: [u32; 7] = hitcount::model::config::DEFAULT_PRECISIONS;
/// Claim time of the workers: short, so stopped and killed workers' entries
/// move on quickly.
const CLAIM_IDLE_MS: u64 = 2000;
/// Hits per step of the driver loop, and the pause between steps.
const STEP_HITS: usize = 500;
const STEP_PAUSE: Duration = Duration::from_millis(400);
/// Distinct counter names.
const NAMES: usize = 300;
/// One bad entry every this many hits.
const BAD_EVERY: usize = 2500;

struct Pool {
    url: String,
    dir: tempfile::TempDir,
    slots: Vec<bin::Child>,
    generation: usize,
    /// Slot stopped with SIGSTOP and when to continue it.
    stopped: Option<(usize, Instant)>,
}

impl Pool {
    fn spawn(&mut self, slot: usize) -> bin::Child {
        self.generation += 1;
        let name = format!("w{slot}-g{}", self.generation);
        let claim = CLAIM_IDLE_MS.to_string();
        let level = std::env::var("HITCOUNT_CHAOS_LOG").unwrap_or_else(|_| "warn".into());
        let extra = std::env::var("HITCOUNT_CHAOS_WORKER_ARGS").unwrap_or_default();
        // Samples far beyond the run's length: no hit is too old to write and
        // the cleaner removes none, so every precision's expected counts are
        // exact however long the run (the long one outlasts the 120 s that
        // the 1 s precision keeps by default).
        let mut args = vec![
            "--claim-idle-ms",
            &claim,
            "--block-ms",
            "200",
            "--samples",
            "100000",
        ];
        args.extend(extra.split_whitespace());
        // Default settings, as users start workers: no consumer name given,
        // several workers on one host.
        let mut cmd = bin::default_worker(&self.url, "127.0.0.1:0", &args);
        cmd.env("RUST_LOG", level);
        bin::Child::spawn_in(&name, cmd, self.dir.path())
    }

    fn logs_tail_all(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            out.push_str(&format!("--- {:?}\n{text}\n", entry.file_name()));
        }
        out
    }

    fn logs_tail(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            out.push_str(&format!("--- {:?}\n{tail}\n", entry.file_name()));
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_every_hit_counts_exactly_once() {
    let _alone = exclusive().await;
    let long = std::env::var("HITCOUNT_CHAOS_LONG").is_ok_and(|v| v == "1");
    let total: usize = if long { 300_000 } else { 30_000 };
    let seed: u64 = std::env::var("HITCOUNT_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("chaos: seed={seed} hits={total} (replay with HITCOUNT_CHAOS_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);

    let mut srv = server_with(ServerOptions {
        appendonly: true,
        ..ServerOptions::default()
    });
    let url = srv.url();
    let mut c = conn(&url).await;
    let mut pool = Pool {
        url: url.clone(),
        dir: tempfile::tempdir().unwrap(),
        slots: Vec::new(),
        generation: 0,
        stopped: None,
    };
    for slot in 0..3 {
        let w = pool.spawn(slot);
        pool.slots.push(w);
    }
    let producer = producer(&url);

    let steps = total / STEP_HITS;
    let restart_at = steps / 2;
    let (mut kills, mut stops, mut conn_kills, mut restarts) = (0, 0, 0, 0);
    let mut hits: Vec<(String, i64, i64)> = Vec::with_capacity(total);
    let mut observed: Vec<common::stats::Obs> = Vec::new();
    let mut bad_ids = BTreeSet::new();
    for step in 0..steps {
        // Hits: recent timestamps (this second), deterministic names.
        let ts = unix_now();
        for _ in 0..STEP_HITS {
            let name = format!("c{}", rng.random_range(0..NAMES));
            if hits.len().is_multiple_of(3) {
                // Response times over four decades, some whole numbers.
                let mut value = 10f64.powf(rng.random_range(-1.0..3.0));
                if hits.len().is_multiple_of(2) {
                    value = value.round();
                }
                producer.observe_at(&name, 1, Some(ts as f64), value);
                observed.push((name.clone(), 1, ts, value));
            } else {
                producer.hit_at(&name, 1, ts as f64);
            }
            hits.push((name, 1, ts));
            if hits.len().is_multiple_of(BAD_EVERY) {
                let id: String = redis::cmd("XADD")
                    .arg("hits")
                    .arg("*")
                    .arg("name")
                    .arg("")
                    .arg("chaos")
                    .arg(hits.len())
                    .query_async(&mut c)
                    .await
                    .unwrap();
                bad_ids.insert(id);
            }
        }
        // Continue a stopped worker once well past the claim time.
        if let Some((slot, until)) = pool.stopped {
            if Instant::now() >= until {
                println!(
                    "{} cont {}",
                    crate::common::plain::unix_ms(),
                    pool.slots[slot].name()
                );
                pool.slots[slot].signal(libc::SIGCONT);
                pool.stopped = None;
            }
        }
        if step == restart_at {
            // Flush first: whatever the producer has in flight when Redis
            // goes down is retried after, deduplicated by its batch number.
            println!("{} restart", crate::common::plain::unix_ms());
            srv.restart().expect("restarting redis");
            println!("{} restarted", crate::common::plain::unix_ms());
            restarts += 1;
            c = conn(&url).await;
        } else {
            match rng.random_range(0..10) {
                0 | 1 => {
                    let slot = rng.random_range(0..pool.slots.len());
                    if pool.stopped.is_some_and(|(s, _)| s == slot) {
                        pool.stopped = None;
                    }
                    println!(
                        "{} kill {}",
                        crate::common::plain::unix_ms(),
                        pool.slots[slot].name()
                    );
                    pool.slots[slot].kill();
                    pool.slots[slot] = pool.spawn(slot);
                    kills += 1;
                }
                2 if pool.stopped.is_none() => {
                    let slot = rng.random_range(0..pool.slots.len());
                    println!(
                        "{} stop {}",
                        crate::common::plain::unix_ms(),
                        pool.slots[slot].name()
                    );
                    pool.slots[slot].signal(libc::SIGSTOP);
                    let pause = CLAIM_IDLE_MS + rng.random_range(500..3000);
                    pool.stopped = Some((slot, Instant::now() + Duration::from_millis(pause)));
                    stops += 1;
                }
                3 | 4 => {
                    println!("{} client kill", crate::common::plain::unix_ms());
                    // Kills every normal client but this one (SKIPME yes).
                    kill_clients(&mut c).await;
                    conn_kills += 1;
                }
                _ => {}
            }
        }
        tokio::time::sleep(STEP_PAUSE).await;
    }
    if let Some((slot, _)) = pool.stopped.take() {
        pool.slots[slot].signal(libc::SIGCONT);
    }

    // Let everything settle: the producer delivers, the workers drain.
    tokio::time::timeout(Duration::from_secs(60), producer.flush())
        .await
        .expect("producer flushed within 60 s");
    let sent = producer
        .stats()
        .sent
        .load(std::sync::atomic::Ordering::Relaxed);
    producer.shutdown(Duration::from_secs(5)).await;
    let keys = keys(&settings(&url, "check"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !crate::common::plain::drained(&mut c, &keys).await.unwrap() {
        assert!(
            Instant::now() < deadline,
            "not drained within 120 s (seed {seed}); logs:\n{}",
            pool.logs_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let expected = reference(&hits, &PRECISIONS);
    let got = read_all(&mut c, &keys).await;
    let (mut counted, mut lost, mut doubled) = (0i64, 0i64, 0i64);
    for ((p, name), buckets) in &expected {
        if *p != 1 {
            continue;
        }
        let have = got.get(&(1, name.clone()));
        for (bucket, want) in buckets {
            let g = have.and_then(|h| h.get(bucket)).copied().unwrap_or(0);
            counted += g;
            lost += (want - g).max(0);
            doubled += (g - want).max(0);
        }
    }
    let dead = dead_letters(&mut c).await;
    // The leader trims what every group has read, so count what was ever
    // appended (XINFO STREAM entries-added), not what is left.
    let info: redis::Value = redis::cmd("XINFO")
        .arg("STREAM")
        .arg("hits")
        .query_async(&mut c)
        .await
        .unwrap();
    let info = crate::common::plain::info_fields(&info);
    let added =
        crate::common::plain::info_number(&info, "entries-added").expect("entries-added") as usize;
    assert_eq!(added, total + bad_ids.len(), "each hit appended once");
    let dead_ids: BTreeSet<String> = dead.iter().filter_map(|d| d.get("id").cloned()).collect();
    println!(
        "chaos: sent={sent} counted={counted} lost={lost} doubled={doubled} dead_lettered={} \
         kills={kills} stops={stops} conn_kills={conn_kills} redis_restarts={restarts} seed={seed}",
        dead.len()
    );
    assert_eq!(sent as usize, total, "every hit reached the stream");
    if lost != 0 || doubled != 0 {
        for ((p, name), buckets) in &expected {
            for (bucket, want) in buckets {
                let g = got
                    .get(&(*p, name.clone()))
                    .and_then(|h| h.get(bucket))
                    .copied()
                    .unwrap_or(0);
                if g != *want && *p == 1 {
                    println!("cell {p}:{name} @{bucket}: want {want} got {g}");
                }
            }
        }
        println!("{}", pool.logs_tail_all());
    }
    assert_eq!(lost, 0, "seed {seed}");
    assert_eq!(doubled, 0, "seed {seed}");
    assert!(
        got == expected,
        "every counter at every precision equals the reference (seed {seed})"
    );
    // The statistics of the values, as exactly (no bucket is too old: see
    // the samples of the workers).
    let quantiles = hitcount::model::stats::DEFAULT_QUANTILE_PRECISIONS;
    let (want, raw) = common::stats::reference(&observed, &PRECISIONS, &quantiles, |_, _| true);
    let stats = common::stats::read(&mut c, &keys).await;
    common::stats::assert_equal(&stats, &want);
    assert!(common::stats::assert_quantiles(&stats, &raw) > 0);
    println!(
        "chaos: {} values in {} statistics buckets equal the reference (seed {seed})",
        observed.len(),
        want.values().map(|b| b.len()).sum::<usize>()
    );
    assert_eq!(dead.len(), bad_ids.len(), "dead letters: {dead:?}");
    assert_eq!(dead_ids, bad_ids, "exactly the injected bad entries");
    assert!(dead.iter().all(|d| d["reason"] == "empty_name"));
    assert_eq!(pending(&mut c).await, 0);
    assert_eq!(restarts, 1);

    // Every worker still alive stops cleanly on SIGTERM.
    for w in &mut pool.slots {
        w.signal(libc::SIGTERM);
    }
    for w in &mut pool.slots {
        assert_eq!(
            w.wait(Duration::from_secs(30)).and_then(|s| s.code()),
            Some(0),
            "{} exits 0 on SIGTERM",
            w.name()
        );
    }
}
