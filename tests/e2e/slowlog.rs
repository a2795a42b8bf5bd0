//! No command or script hitcount sends holds Redis for 10 ms or more, under
//! load: SLOWLOG (threshold 10 ms, armed by `common::server`) stays empty.
//!
//! Takes `common::exclusive()` so that no other test that measures or loads
//! the machine competes for the CPU while it measures: SLOWLOG counts wall
//! time, and a descheduled Redis on a busy machine would show time that is
//! not hitcount's. Machine stalls are told from big commands by
//! `common::slowlog_clean_in_one_of`.

use crate::common;

use std::time::Duration;

use common::*;
use hitcount::edge::workload::{Distribution, Names};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowlog_stays_empty_through_hot_and_wide_load() {
    let _alone = exclusive().await;
    slowlog_clean_in_one_of(SLOWLOG_ATTEMPTS, hot_and_wide_load).await;
}

/// 120,000 hits over hot and many names through two workers; returns the
/// SLOWLOG as it stood when they stopped, before this test's own reads
/// (`read_all` runs `ZRANGE known: 0 -1` over 700,000 members, which is
/// the test's command, not hitcount's), then checks every count.
async fn hot_and_wide_load() -> Vec<String> {
    let srv = slowlog_server();
    let mut c = conn(&srv.url()).await;
    let a = settings(&srv.url(), "a");
    let b = settings(&srv.url(), "b");
    let workers = Workers::start(vec![a.clone(), b]);
    let producer = producer(&srv.url());
    let now = unix_now();
    let mut hits = Vec::new();
    // Hot names make big windows; many names make many cells per window.
    let mut rng = rand::rng();
    for (n, names) in [
        (60_000, Names::new(1000, Distribution::Uniform)),
        (60_000, Names::new(100_000, Distribution::Zipf(1.0))),
    ] {
        for i in 0..n {
            let name = Names::name(names.sample(&mut rng));
            producer.hit_at(&name, 1, now as f64);
            hits.push((name, 1, now));
            if i % 5000 == 0 {
                tokio::task::yield_now().await;
            }
        }
    }
    producer.shutdown(Duration::from_secs(30)).await;
    wait_drained(&mut c, &keys(&a)).await;
    workers.stop().await;
    let slow = slowlog(&mut c).await;
    let got = read_all(&mut c, &keys(&a)).await;
    assert_eq!(
        got,
        reference(&hits, &hitcount::model::config::DEFAULT_PRECISIONS)
    );
    slow
}
