//! Leader election between real `hitcount worker` processes: exactly one
//! leader among three, failover within a lease plus a renewal after the
//! leader is SIGKILLed, and a leader stopped (SIGSTOP) past its lease that
//! resumes sends no fenced write at all — it stops acting by its own clock,
//! before the fence in Redis would have to refuse it.
//!
//! The tests of this file run one at a time, and never beside another test
//! that takes `common::exclusive()`: the failover bound is about wall time,
//! and three tests with three workers each on two cores would measure the
//! machine, not hitcount.

use crate::common;

use std::time::{Duration, Instant};

use common::bin::{free_addr, http_get, start_worker, wait_for, Child};
use common::*;
use hitcount::store::connect::Conn;

/// A short lease, renewed (and tried by the others) every third of it.
const LEASE_MS: u64 = 1500;
const RENEW: Duration = Duration::from_millis(LEASE_MS / 3);
const LEASE_KEY: &str = "hitcount:leader";

use common::exclusive;

/// A worker process and the address of its /metrics.
struct Worker {
    child: Child,
    listen: String,
}

impl Worker {
    fn metric(&self, name: &str) -> Option<f64> {
        let (status, body) = http_get(&self.listen, "/metrics")?;
        assert_eq!(status, 200);
        common::bin::metric_value(&body, name)
    }

    /// `hitcount_is_leader` (panics when it cannot be scraped).
    fn is_leader(&self) -> bool {
        let v = self
            .metric("hitcount_is_leader")
            .unwrap_or_else(|| panic!("{}: no hitcount_is_leader", self.child.name()));
        v == 1.0
    }
}

/// Three workers with a short lease and a pass every second.
fn three_workers(url: &str) -> Vec<Worker> {
    let lease = LEASE_MS.to_string();
    (1..=3)
        .map(|i| {
            let listen = free_addr();
            let child = start_worker(
                url,
                &format!("w{i}"),
                &listen,
                &["--lease-ms", &lease, "--clean-interval", "1"],
            );
            Worker { child, listen }
        })
        .collect()
}

/// The lease's token, if the key exists.
async fn token(c: &mut Conn) -> Option<String> {
    redis::cmd("GET")
        .arg(LEASE_KEY)
        .query_async(c)
        .await
        .unwrap()
}

/// The index of the worker whose consumer name the token carries.
fn holder(workers: &[Worker], token: &str) -> usize {
    let owner = token.split_once('/').expect("token is owner/random").0;
    workers
        .iter()
        .position(|w| w.child.name() == owner)
        .unwrap_or_else(|| panic!("token {token} names no worker"))
}

/// Waits until the lease is held by a worker in `among` other than the one
/// holding `not` and that worker's metric says so; returns its index.
async fn wait_leader(
    c: &mut Conn,
    workers: &[Worker],
    among: &[usize],
    not: Option<&str>,
) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = token(c).await.filter(|t| Some(t.as_str()) != not) {
            let i = holder(workers, &t);
            if among.iter().all(|&j| workers[j].is_leader() == (j == i)) {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no single leader within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_among_three_across_renewals() {
    let _serial = exclusive().await;
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let workers = three_workers(&srv.url());
    let all = [0, 1, 2];
    let leader = wait_leader(&mut c, &workers, &all, None).await;
    let held = token(&mut c).await.unwrap();
    // Six renewals: the same token, never expiring, one worker saying 1.
    let until = Instant::now() + RENEW * 6;
    let mut looks = 0;
    while Instant::now() < until {
        let (t, pttl): (Option<String>, i64) = redis::pipe()
            .cmd("GET")
            .arg(LEASE_KEY)
            .cmd("PTTL")
            .arg(LEASE_KEY)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(t.as_deref(), Some(held.as_str()), "the lease moved");
        assert!(pttl > 0 && pttl <= LEASE_MS as i64, "PTTL {pttl}");
        let flags: Vec<bool> = workers.iter().map(Worker::is_leader).collect();
        assert_eq!(
            flags,
            all.map(|i| i == leader).to_vec(),
            "hitcount_is_leader of w1..w3"
        );
        looks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(looks >= 10, "looked {looks} times");
    println!(
        "leader {} held {held} across 6 renewals",
        workers[leader].child.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_worker_takes_over_within_a_lease_and_a_renewal_of_a_kill() {
    let _serial = exclusive().await;
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let mut workers = three_workers(&srv.url());
    let old = wait_leader(&mut c, &workers, &[0, 1, 2], None).await;
    let old_token = token(&mut c).await.unwrap();
    // Kill it just after a renewal would be the best case; anywhere in the
    // period is fair: the bound covers the worst case.
    workers[old].child.kill();
    let killed = Instant::now();
    let bound = Duration::from_millis(LEASE_MS) + RENEW + Duration::from_secs(1);
    let new_token = loop {
        if let Some(t) = token(&mut c).await.filter(|t| *t != old_token) {
            break t;
        }
        assert!(
            killed.elapsed() <= bound,
            "no new leader {bound:?} after the kill"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let failover = killed.elapsed();
    let others: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let new = holder(&workers, &new_token);
    assert!(others.contains(&new));
    println!(
        "failover: {} ms from SIGKILL of {} to {} holding the lease (lease {LEASE_MS} ms, renewal every {} ms)",
        failover.as_millis(),
        workers[old].child.name(),
        workers[new].child.name(),
        RENEW.as_millis()
    );
    assert!(failover <= bound, "failover took {failover:?} > {bound:?}");
    // And its metric follows at its next turn.
    assert_eq!(wait_leader(&mut c, &workers, &others, None).await, new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_past_its_lease_does_nothing_after_it_resumes() {
    let _serial = exclusive().await;
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let workers = three_workers(&url);
    let stale = wait_leader(&mut c, &workers, &[0, 1, 2], None).await;
    let stale_token = token(&mut c).await.unwrap();
    // Let it run a pass or two (with nothing to clean), then freeze it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        workers[stale].metric("hitcount_cleaner_samples_removed_total"),
        Some(0.0)
    );
    workers[stale].child.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    let others: Vec<usize> = (0..3).filter(|&i| i != stale).collect();
    let new = wait_leader(&mut c, &workers, &others, Some(&stale_token)).await;
    let new_token = token(&mut c).await.unwrap();
    // Past the lease for sure, and the new leader has renewed since.
    tokio::time::sleep(RENEW * 2).await;
    assert!(stopped.elapsed() > Duration::from_millis(LEASE_MS));

    // Every command Redis runs from now on, in order.
    let mut monitor = monitor(&srv);
    // Old samples appear all the time from just before the resume on: a
    // worker acting as leader at any moment of the window has something to
    // clean, so a pass run on the old lease would send `clean.lua` with the
    // old token (which the fence in Redis would then refuse).
    let k = keys(&settings(&url, "test"));
    let old_ts = unix_now() - 100_000;
    let planted = 40usize;
    let resumed_at = planted / 4;
    let mut stopped_for = Duration::ZERO;
    for i in 0..planted {
        if i == resumed_at {
            stopped_for = stopped.elapsed();
            workers[stale].child.signal(libc::SIGCONT);
        }
        let m = format!("1:planted{i}");
        let _: () = redis::pipe()
            .cmd("HSET")
            .arg(k.count_of_member(&m))
            .arg(old_ts)
            .arg(1)
            .cmd("ZADD")
            .arg(k.known())
            .arg(0)
            .arg(&m)
            .query_async(&mut c)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The new leader removes them all.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let known: u64 = redis::cmd("ZCARD")
            .arg(k.known())
            .query_async(&mut c)
            .await
            .unwrap();
        if known == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{known} planted counters left");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Another renewal period for the resumed worker to show its hand.
    tokio::time::sleep(RENEW * 3).await;
    monitor.kill();
    let seen = monitor.stdout();

    // The resumed worker tried to renew, was told no, and stood down.
    // EVALSHA names the lease renewal by its script's SHA1.
    let renew = redis::Script::new(include_str!("../../src/store/scripts/renew.lua"));
    let renew_sha = renew.get_hash();
    let stale_cmds: Vec<&str> = seen
        .lines()
        .filter(|l| l.contains(&stale_token) && !l.contains("[0 lua]"))
        .collect();
    assert!(
        stale_cmds.iter().any(|l| l.contains(renew_sha)),
        "the resumed worker's renewal is in the MONITOR output:\n{seen}"
    );
    // Trying to take the lease again is the acquisition script.
    let acquire = redis::Script::new(include_str!("../../src/store/scripts/acquire.lua"));
    let acquire_sha = acquire.get_hash();
    for l in &stale_cmds {
        let lease_only = l.contains(renew_sha) || l.contains(acquire_sha);
        assert!(lease_only, "the resumed worker acted as leader: {l}");
    }
    let status: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(k.cleaner_status())
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        status["leader"], new_token,
        "the last pass is the new leader's"
    );
    assert_eq!(token(&mut c).await.as_ref(), Some(&new_token));
    let stale_w = &workers[stale];
    wait_for(
        "the resumed worker reports 0",
        Duration::from_secs(10),
        || (!stale_w.is_leader()).then_some(()),
    );
    assert_eq!(
        stale_w.metric("hitcount_cleaner_samples_removed_total"),
        Some(0.0)
    );
    assert_eq!(
        workers[new].metric("hitcount_cleaner_samples_removed_total"),
        Some(planted as f64),
        "the new leader removed every planted sample"
    );
    let log = stale_w.child.stderr();
    assert!(
        log.contains("lost the leader lease: no longer leader"),
        "{log}"
    );
    // A pass the SIGSTOP caught in its middle may find the lease lost once
    // resumed (it began on a valid lease); none may begin after the stop.
    for line in log
        .lines()
        .filter(|l| l.contains("lost during a cleaner pass"))
    {
        let pass_ms: u128 = line
            .split("pass_ms=")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no pass_ms in: {line}"));
        assert!(
            pass_ms + 100 >= stopped_for.as_millis(),
            "a pass began on the old lease ({pass_ms} ms long, stopped for {stopped_for:?}):\n{log}"
        );
    }
}

/// `redis-cli MONITOR` on `srv`, its output in a file; returns once it
/// runs.
fn monitor(srv: &hitcount_lab::kit::RedisServer) -> Child {
    let mut cmd = std::process::Command::new("redis-cli");
    cmd.args(["-p", &srv.port().to_string(), "MONITOR"]);
    let mut m = Child::spawn("redis-cli MONITOR", cmd);
    wait_for("MONITOR running", Duration::from_secs(10), || {
        m.assert_running();
        m.stdout().starts_with("OK").then_some(())
    });
    m
}
