//! The carry: while a worker is behind, its windows' cells (counts and
//! statistics) wait, summed, before they are applied. These tests pin the bound on how
//! long they wait (with a generous margin: that the bound exists and holds,
//! not a speed), that a drained group still means visible counters at
//! every precision, and that a clean stop leaves nothing unapplied.

use crate::common;

use std::time::{Duration, Instant};

use common::bin::{carry_cells, free_addr, start_worker};
use common::*;
use hitcount::store::connect::Conn;
use hitcount_lab::kit::ServerOptions;

/// How long the test lets cells wait (`--carry-ms`).
const CARRY_MS: u64 = 500;
/// What the worker promises for it: the carry's age and as much again that
/// a carry may wait for the head, plus a window that closes at ten times
/// `--window-ms` while behind (1 s), plus its apply.
const PROMISED: Duration = Duration::from_millis(2 * CARRY_MS + 1000 + 500);
/// Room for a loaded machine on top of the promise.
const MARGIN: Duration = Duration::from_secs(2);

async fn total(c: &mut Conn, key: &str) -> i64 {
    let v: Vec<i64> = redis::cmd("HVALS").arg(key).query_async(c).await.unwrap();
    v.iter().sum()
}

/// Entries the group has delivered so far (`entries-read` of XINFO GROUPS).
async fn entries_read(c: &mut Conn) -> i64 {
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("hits")
        .query_async(c)
        .await
        .unwrap();
    match groups.first().and_then(|g| g.get("entries-read")) {
        Some(redis::Value::Int(n)) => *n,
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_precision_trails_what_was_read_by_a_bounded_time() {
    let _alone = exclusive().await;
    let srv = server();
    let mut c = conn(&srv.url()).await;
    // A backlog: every fifth hit on the probe name, the rest over 5,000
    // names.
    // Long enough to drain (about 2 s) that carries come of age far from
    // the head, not only near it, where they wait for it (`Carry::hold`).
    let now = unix_now();
    let entries = 300_000usize;
    let names = (0..entries).map(|n| match n % 5 {
        0 => "probe".to_string(),
        _ => format!("n{}", n % 5000),
    });
    xadd_names(&mut c, names, now, None).await;
    let probes = (entries / 5) as i64;
    // Entries older than --window-ms: the worker is behind from its first read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut s = settings(&srv.url(), "behind");
    s.worker.carry_ms = CARRY_MS;
    s.worker.read_count = 10;
    s.worker.window_entries = 2000;
    let k = keys(&s);
    let (fine, coarse) = (k.count(1, "probe"), k.count(86400, "probe"));
    let workers = Workers::start(vec![s]);

    // Until drained: when, the probes delivered to the worker (the n-th
    // entry is a probe when n % 5 == 0), and the probes counted at 1 s and
    // at 1 day.
    let mut samples: Vec<(Instant, i64, [i64; 2])> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let drained = crate::common::plain::drained(&mut c, &k).await.unwrap();
        let t = Instant::now();
        let read = (entries_read(&mut c).await + 4) / 5;
        let f = total(&mut c, &fine).await;
        let d = total(&mut c, &coarse).await;
        samples.push((t, read, [f, d]));
        if drained {
            // A drained group means every precision holds every hit.
            assert_eq!((f, d), (probes, probes), "drained, yet not all visible");
            break;
        }
        assert!(Instant::now() < deadline, "not drained in 120 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Every probe the worker was handed is counted at 1 s and at 1 day
    // within the bound.
    let precisions = [(0, "1 s"), (1, "1 day")];
    for &(t, read, _) in &samples {
        for (p, what) in precisions {
            let reached = samples
                .iter()
                .find(|s| s.0 >= t && s.2[p] >= read)
                .map(|s| s.0 - t)
                .expect("every count is reached once drained");
            assert!(
                reached <= PROMISED + MARGIN,
                "the {what} counter reached {read} {reached:?} after the worker read it"
            );
        }
    }
    // And the cells did wait: mid-drain both counters lagged what was read
    // by more than a window (2,000 entries, 400 probes) and the reads ahead,
    // and they were applied before the drain ended (a carry due by age, not
    // only at the head).
    let window = 2000 / 5 + 10;
    for (p, what) in precisions {
        assert!(
            samples.iter().any(|s| s.2[p] + window < s.1),
            "the {what} cells never waited: {} samples",
            samples.len()
        );
        assert!(
            samples.iter().any(|s| s.2[p] > 0 && s.2[p] < probes),
            "the {what} cells were applied only once caught up"
        );
    }

    // A clean stop leaves no window record and nothing pending.
    workers.stop().await;
    let records: i64 = redis::cmd("ZCARD")
        .arg(k.windows())
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(records, 0, "a window record outlived a clean stop");
    assert_eq!(pending(&mut c).await, 0);
}

/// What a backlog sent: every hit for the counts' reference, and those
/// with a value for the statistics'.
struct Backlog {
    hits: Vec<(String, i64, i64)>,
    observed: Vec<common::stats::Obs>,
}

impl Backlog {
    /// Counters and statistics hold exactly what was sent.
    async fn assert_counted(&self, c: &mut Conn, s: &hitcount::service::worker::Settings) {
        let k = keys(s);
        let precisions = &s.layout.precisions;
        assert_eq!(read_all(c, &k).await, reference(&self.hits, precisions));
        let quantiles = hitcount::model::stats::DEFAULT_QUANTILE_PRECISIONS;
        let (want, raw) =
            common::stats::reference(&self.observed, precisions, &quantiles, |_, _| true);
        let got = common::stats::read(c, &k).await;
        common::stats::assert_equal(&got, &want);
        assert!(common::stats::assert_quantiles(&got, &raw) > 0);
    }
}

/// `n` hits over `names` names, 30 s old, every third with a value, sent
/// through the producer library, then left to age past `--window-ms` so
/// that a worker starting now is behind from its first read.
async fn backlog(url: &str, n: usize, names: usize) -> Backlog {
    let ts = unix_now() - 30;
    let producer = producer(url);
    let (mut hits, mut observed) = (Vec::with_capacity(n), Vec::new());
    for i in 0..n {
        let name = format!("n{}", (i * 7919) % names);
        if i % 3 == 0 {
            let value = (i % 1000) as f64 * 0.25 + 0.5;
            producer.observe_at(&name, 1, Some(ts as f64), value);
            observed.push((name.clone(), 1, ts, value));
        } else {
            producer.hit_at(&name, 1, ts as f64);
        }
        hits.push((name, 1, ts));
    }
    producer.flush().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    Backlog { hits, observed }
}

/// The carry's commands are among those the least-privileged user of
/// `deploy/redis/hitcount.acl` may run: a backlog drained as that user is
/// counted exactly, through the carry, with no refusal in the ACL LOG.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_carry_runs_as_the_least_privileged_user() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/redis/hitcount.acl");
    let rules = std::fs::read_to_string(path).unwrap().trim().to_string();
    let srv = server_with(ServerOptions {
        extra: vec![format!("user carrier on >carry-pw {rules}")],
        ..ServerOptions::default()
    });
    let url = format!("redis://carrier:carry-pw@127.0.0.1:{}", srv.port());
    let mut admin = conn(&srv.url()).await;
    // A backlog over 2,000 names: windows whose cells wait.
    let sent = backlog(&url, 20_000, 2000).await;
    let s = settings(&url, "carrier");
    let k = keys(&s);
    let listen = free_addr();
    let args = ["--read-count", "200", "--window-entries", "2000"];
    let mut worker = start_worker(&url, "carrier", &listen, &args);
    wait_drained(&mut admin, &k).await;
    let carried = carry_cells(&listen);
    worker.terminate(Duration::from_secs(30));

    sent.assert_counted(&mut admin, &s).await;
    assert_nothing_refused(&mut admin, "the user").await;
    assert!(carried > 0, "no carry was applied");
}

/// Workers SIGKILLed while windows wait in their carry, or while a sum is
/// being applied, lose and double nothing: a survivor finishes their
/// records (each cell through its window or through the recorded
/// sum, never both) and claims their entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_while_carrying_count_every_hit_once() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    // 10,000 names: a sum holds up to 70,000 cells, recorded in two pieces
    // (`PIECE_CELLS`), which the survivor reads back. 300,000 entries: a
    // worker reads them for longer than twice a carry's age (250 ms here),
    // so each round's first carry comes of age far from
    // the head and does not wait for it (`Carry::hold`): the kills land
    // mid-drain. Every third hit has a value: the sums' statistics,
    // recorded in pieces of their own, are read back too.
    let sent = backlog(&url, 300_000, 10_000).await;
    let s = settings(&url, "any");
    let k = keys(&s);
    // The 1 s counters keep an hour, not the default two minutes: the hits
    // are 30 s old, and a drain slowed by a busy machine (up to 180 s
    // below) would otherwise read the last of them past that precision's
    // horizon, where they are rightly skipped (seen once: 22,640 hits
    // short at 1 s only, every other precision exact).
    let args = [
        "--read-count",
        "200",
        "--window-entries",
        "2000",
        "--claim-idle-ms",
        "1000",
        "--samples",
        "3600",
    ];
    let killed_after_a_carry = kill_after_carries(
        &mut c,
        async |c| crate::common::plain::drained(c, &k).await.unwrap(),
        |round, listen| start_worker(&url, &format!("killed-{round}"), listen, &args),
    )
    .await;
    assert!(
        killed_after_a_carry > 0,
        "the backlog drained before any kill"
    );

    // Alone it drains the rest in about 15 s; beside the whole suite on a
    // busy 2-core machine it was seen to take over 60.
    let listen = free_addr();
    let mut survivor = start_worker(&url, "survivor", &listen, &args);
    wait_drained_within(&mut c, &k, Duration::from_secs(180)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let records: i64 = redis::cmd("ZCARD")
            .arg(k.windows())
            .query_async(&mut c)
            .await
            .unwrap();
        if records == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{records} window records left");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every entry it counted it read, claimed ones included.
    let (_, metrics) = crate::common::bin::http_get(&listen, "/metrics").unwrap();
    let value = |series| crate::common::bin::metric_value(&metrics, series).unwrap();
    let (read, claimed) = (
        value("hitcount_events_read_total"),
        value("hitcount_events_claimed_total"),
    );
    assert!(claimed > 0.0, "{metrics}");
    assert!(read >= value("hitcount_events_applied_total"), "{metrics}");
    survivor.signal(libc::SIGTERM);
    assert!(survivor.wait(Duration::from_secs(30)).is_some());
    sent.assert_counted(&mut c, &s).await;
    let dead: u64 = redis::cmd("XLEN")
        .arg(&k.dead)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(dead, 0, "nothing here is to be dead-lettered");
}

/// A backlog of hits with values goes in through the carry as one of
/// plain hits does: each statistics cell (count, sum, sum of squares, min,
/// max and histogram bins) is written once per sum, not once per window,
/// and the statistics equal the reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_are_summed_in_the_carry_like_counts() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let s = settings(&url, "w");
    // Windows of 2,000 entries: the backlog is fifteen of them, and each
    // has values for nearly every one of the 100 names.
    let sent = backlog(&url, 30_000, 100).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut c)
        .await
        .unwrap();
    let listen = free_addr();
    // Sums applied only at the head (or full): one or two for the drain
    // however slow the machine.
    let args = [
        "--window-entries",
        "2000",
        "--carry-ms",
        "60000",
        "--claim-idle-ms",
        "240000",
    ];
    let mut worker = start_worker(&url, "w", &listen, &args);
    wait_drained(&mut c, &keys(&s)).await;
    let carried = carry_cells(&listen);
    worker.terminate(Duration::from_secs(30));
    sent.assert_counted(&mut c, &s).await;

    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    // Every write of a statistics cell reads its fields first (one HMGET),
    // as every apply reads its markers (one HMGET each).
    let reads = command_calls(&info, "hmget");
    let quantiles = hitcount::model::stats::DEFAULT_QUANTILE_PRECISIONS;
    let (want, _) =
        common::stats::reference(&sent.observed, &s.layout.precisions, &quantiles, |_, _| {
            true
        });
    let cells: u64 = want.values().map(|b| b.len() as u64).sum();
    assert!(carried > 0, "the backlog went in without a carry");
    // Window by window, fifteen writes of every cell; summed, one per sum.
    assert!(
        reads <= cells * 5,
        "{reads} HMGETs for {cells} statistics cells: not summed across windows"
    );
}

/// The members a carry added to `known:` are remembered like a window's:
/// the same counters written again at the head cost no ZADD. (A worker that
/// forgot them would ZADD every member of every sum again: on Zipf traffic
/// most of a drain's ZADDs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_a_carry_added_are_not_added_again() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let s = settings(&srv.url(), "w");
    let keys = keys(&s);
    let now = unix_now();
    let mut hits = Vec::new();
    // A backlog older than a window: read behind, so its windows' cells
    // wait in the carry and go in as one sum.
    for i in 0..100 {
        hits.extend(xadd_hits(&mut c, &format!("n{i}"), 200, now).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Windows of 2,000 entries: the backlog is ten of them.
    let listen = free_addr();
    let mut worker = start_worker(&srv.url(), "w", &listen, &["--window-entries", "2000"]);
    wait_drained(&mut c, &keys).await;
    assert!(
        carry_cells(&listen) > 0,
        "the backlog went in without a carry"
    );
    // Every command from here on, scripts' own included, in the SLOWLOG.
    for (setting, value) in [("slowlog-max-len", 100_000), ("slowlog-log-slower-than", 0)] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(setting)
            .arg(value)
            .query_async::<()>(&mut c)
            .await
            .unwrap();
    }
    slowlog_reset(&mut c).await;
    for i in 0..100 {
        hits.extend(xadd_hits(&mut c, &format!("n{i}"), 1, now).await);
    }
    wait_drained(&mut c, &keys).await;
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let args = |e: &redis::Value| -> Vec<String> {
        match e {
            redis::Value::Array(f) => match f.get(3) {
                Some(redis::Value::Array(a)) => a
                    .iter()
                    .filter_map(crate::common::plain::bytes)
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .collect(),
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    };
    let commands: Vec<Vec<String>> = log.iter().map(args).collect();
    let named = |name: &str| {
        commands
            .iter()
            .filter(|a| a.first().is_some_and(|c| c.eq_ignore_ascii_case(name)))
            .count()
    };
    assert!(named("hincrby") > 0, "the second hits were not applied");
    let known = keys.known();
    let again: Vec<_> = commands
        .iter()
        .filter(|a| {
            a.first().is_some_and(|c| c.eq_ignore_ascii_case("zadd")) && a.get(1) == Some(&known)
        })
        .collect();
    assert!(
        again.is_empty(),
        "members the carry added were added again: {again:?}"
    );
    worker.terminate(Duration::from_secs(30));
    assert_eq!(
        read_all(&mut c, &keys).await,
        reference(&hits, &hitcount::model::config::DEFAULT_PRECISIONS)
    );
}

/// A backlog read in less than the carry's age goes in as one sum, the
/// window that closed when the worker reached the head included: the sum
/// waits for a window still open rather than go in without it (it once
/// went in as soon as the last read came back short, and that window
/// after it, alone: twice the cells per hit on hot names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_read_at_once_goes_in_as_one_sum_its_last_window_included() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let sent = backlog(&url, 30_000, 300).await;
    let mut s = settings(&url, "one-sum");
    // Several windows; the age never decides.
    s.worker.window_entries = 4_000;
    s.worker.carry_ms = 60_000;
    let workers = Workers::start(vec![s.clone()]);
    wait_drained(&mut c, &keys(&s)).await;
    workers.stop().await;
    sent.assert_counted(&mut c, &s).await;
    let markers: Vec<String> = redis::cmd("KEYS")
        .arg("hc:applied:*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(markers.len(), 1, "one sum's markers: {markers:?}");
}
