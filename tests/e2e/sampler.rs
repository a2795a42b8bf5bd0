//! The group sampler against a real Redis: lag, pending and backlog age.

use crate::common;

use common::*;
use hitcount::service::sampler::{sample, Sample};

#[tokio::test]
async fn samples_lag_pending_and_backlog_age() {
    let server = server();
    let mut c = conn(&server.url()).await;
    let s = settings(&server.url(), "sampler");
    let keys = keys(&s);
    assert_eq!(sample(&mut c, &keys).await.unwrap(), None, "no stream yet");

    // Five entries stamped 40, 30, 20, 10 and 0 seconds ago.
    let now_ms = hitcount::model::clock::unix_ms();
    for age in [40, 30, 20, 10, 0] {
        let _: String = redis::cmd("XADD")
            .arg(&keys.stream)
            .arg(format!("{}-0", now_ms - age * 1000))
            .arg("name")
            .arg("a")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    hitcount::store::stream::ensure_group(&mut c, &keys)
        .await
        .unwrap();
    let Sample {
        lag,
        pending,
        backlog_age,
    } = sample(&mut c, &keys).await.unwrap().unwrap();
    assert_eq!((lag, pending), (Some(5), 0));
    assert!((40.0..100.0).contains(&backlog_age), "{backlog_age}");

    // Two delivered, not acknowledged: the backlog starts at the third.
    let _: redis::Value = hitcount::store::stream::read(&mut c, &keys, "c1", 2, None, ">")
        .await
        .unwrap();
    let got = sample(&mut c, &keys).await.unwrap().unwrap();
    assert_eq!((got.lag, got.pending), (Some(3), 2));
    assert!(
        (20.0..80.0).contains(&got.backlog_age),
        "{}",
        got.backlog_age
    );

    // Everything delivered: no backlog.
    let _: redis::Value = hitcount::store::stream::read(&mut c, &keys, "c1", 10, None, ">")
        .await
        .unwrap();
    let got = sample(&mut c, &keys).await.unwrap().unwrap();
    assert_eq!((got.lag, got.pending, got.backlog_age), (Some(0), 5, 0.0));
}
