//! Claiming a dead worker's entries stays a small step for Redis however
//! long the other pending lists are, and takes them back at a window's pace,
//! not one batch per claim period.
//!
//! A live worker behind on a backlog keeps up to millions of entries pending
//! while it sums them. Another worker's claim must not walk them (a filtered
//! XPENDING walks a whole list when none of it is idle, ~10 ms a million
//! entries), and a dead worker's entries must come back within seconds of
//! being idle, not over minutes.
//!
//! Takes `common::exclusive()`, like `slowlog.rs`: SLOWLOG counts wall time,
//! so no other test that measures or loads the machine may compete for the
//! CPU while it measures.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use hitcount::store::connect::Conn;

/// Entries pending to a live consumer that is behind (not idle).
const BUSY: usize = 1_000_000;
/// Entries a dead consumer left, made idle for an hour.
const DEAD_NAMES: usize = 5;
const DEAD_PER_NAME: usize = 1000;
/// A dead worker's 5,000 idle entries are counted within this of the
/// worker's start: its first claim comes after a quarter of the claim time
/// (5 s at the default 30 s), then a few batches go every window. One batch
/// per claim period (1,000 entries every 5 s) takes 25 s.
const COUNTED_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_stay_small_beside_a_long_pending_list_and_recover_a_dead_worker_promptly() {
    let _alone = exclusive().await;
    slowlog_clean_in_one_of(SLOWLOG_ATTEMPTS, dead_beside_busy).await;
}

/// Reads `n` new entries as `consumer`, 100,000 at a time, leaving them
/// pending; returns their ids.
async fn read_as(c: &mut Conn, consumer: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    while ids.len() < n {
        let got = read_new(c, "hitcount", consumer, (n - ids.len()).min(100_000)).await;
        assert!(
            !got.is_empty(),
            "the stream ran out after {} entries",
            ids.len()
        );
        ids.extend(got);
    }
    ids
}

/// The day counters of the dead consumer's names, summed.
async fn dead_counted(c: &mut Conn, keys: &hitcount::model::keys::Keys) -> i64 {
    let day = *hitcount::model::config::DEFAULT_PRECISIONS
        .iter()
        .max()
        .unwrap();
    let mut sum = 0;
    for i in 0..DEAD_NAMES {
        let samples = hitcount::store::counters::read(c, keys, day, &format!("dead{i}"))
            .await
            .unwrap();
        sum += samples.iter().map(|s| s.count).sum::<i64>();
    }
    sum
}

/// A live consumer holds a million pending entries that are not idle; a dead
/// one holds 5,000 newer ones idle for an hour (XCLAIM's IDLE sets that). A
/// worker with default settings must count the dead one's entries within
/// [`COUNTED_WITHIN`]; returns the SLOWLOG as it stood then.
async fn dead_beside_busy() -> Vec<String> {
    let srv = slowlog_server();
    let mut c = conn(&srv.url()).await;
    let s = settings(&srv.url(), "worker");
    let keys = keys(&s);
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("hits")
        .arg("hitcount")
        .arg("0")
        .arg("MKSTREAM")
        .query_async::<()>(&mut c)
        .await
        .unwrap();
    let now = unix_now();
    for _ in 0..BUSY / 10_000 {
        xadd_hits(&mut c, "busy", 10_000, now).await;
    }
    read_as(&mut c, "busy", BUSY).await;
    for i in 0..DEAD_NAMES {
        xadd_hits(&mut c, &format!("dead{i}"), DEAD_PER_NAME, now).await;
    }
    let dead = read_as(&mut c, "dead", DEAD_NAMES * DEAD_PER_NAME).await;
    for ids in dead.chunks(1000) {
        redis::cmd("XCLAIM")
            .arg("hits")
            .arg("hitcount")
            .arg("dead")
            .arg(0)
            .arg(ids)
            .arg("IDLE")
            .arg(3_600_000)
            .arg("JUSTID")
            .query_async::<()>(&mut c)
            .await
            .unwrap();
    }
    slowlog_reset(&mut c).await;

    let started = Instant::now();
    let workers = Workers::start(vec![s]);
    let want = (DEAD_NAMES * DEAD_PER_NAME) as i64;
    loop {
        let got = dead_counted(&mut c, &keys).await;
        if got == want {
            break;
        }
        assert!(
            started.elapsed() < COUNTED_WITHIN,
            "{got} of the dead worker's {want} entries counted after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    workers.stop().await;
    let slow = slowlog(&mut c).await;
    assert_eq!(dead_counted(&mut c, &keys).await, want, "counted once");
    assert_eq!(
        pending_of(&mut c, "dead").await,
        0,
        "the dead consumer keeps nothing"
    );
    slow
}
