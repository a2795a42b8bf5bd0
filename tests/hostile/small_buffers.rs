//! A Redis that closes any client whose reply outgrows a small output
//! buffer (`client-output-buffer-limit normal 1mb 1mb 0`) meets a backlog
//! of large, valid hits (names of 3,000 bytes): reads that grow past the
//! buffer are closed by Redis, again after each reconnect. The worker
//! learns to read less, says why once, and counts every hit exactly once
//! (it reconnected about 150 times a second without a word, counting
//! nothing, for as long as it ran). A restart of Redis while the worker
//! waits at the head closes no reply, and leaves its reads as they were.

use std::time::Duration;

use hitcount_lab::kit::ServerOptions;

use crate::common::bin::{worker, Child};
use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_client_output_buffer_makes_reads_smaller_not_endless() {
    let srv = server_with(ServerOptions {
        extra: vec!["client-output-buffer-limit normal 1mb 1mb 0".into()],
        ..ServerOptions::default()
    });
    let url = srv.url();
    let mut c = conn(&url).await;
    let names = (0..20_000).map(|i| format!("big{:03}:{}", i % 50, "x".repeat(3000)));
    let hits = xadd_names(&mut c, names, unix_now(), None).await;
    let w = Child::spawn(
        "w",
        worker(&url, "w", "127.0.0.1:0", &["--block-ms", "200"]),
    );
    let k = keys(&settings(&url, "any"));
    wait_drained_within(&mut c, &k, Duration::from_secs(120)).await;
    w.signal(libc::SIGTERM);
    let log = w.stderr();
    // The check's own reads (every `known:` member, a megabyte) need room.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("normal 0 0 0")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        read_all(&mut c, &k).await,
        reference(&hits, &hitcount::model::config::DEFAULT_PRECISIONS),
        "{log}"
    );
    assert!(log.contains("client-output-buffer-limit"), "{log}");
}

/// Redis restarted while the worker waits at the stream's head closes a
/// read that was answering nothing: reads keep their size, and the worker
/// counts on (each such restart halved them, with a WARN that blamed the
/// output buffer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_the_worker_waits_leaves_its_reads_whole() {
    let mut srv = server();
    let url = srv.url();
    let w = Child::spawn(
        "w",
        worker(&url, "w", "127.0.0.1:0", &["--block-ms", "1000"]),
    );
    let k = keys(&settings(&url, "any"));
    let mut c = conn(&url).await;
    xadd_names(&mut c, ["before".to_string()], unix_now(), None).await;
    wait_drained(&mut c, &k).await;
    // Blocked at the head now, for up to a second at a time.
    tokio::time::sleep(Duration::from_millis(500)).await;
    srv.restart().unwrap();
    let mut c = conn(&url).await;
    let names = (0..100).map(|i| format!("after{}", i % 7));
    let hits = xadd_names(&mut c, names, unix_now(), None).await;
    wait_drained(&mut c, &k).await;
    w.signal(libc::SIGTERM);
    let log = w.stderr();
    // Without persistence the restarted Redis holds only what came after.
    assert_eq!(
        read_all(&mut c, &k).await,
        reference(&hits, &hitcount::model::config::DEFAULT_PRECISIONS),
        "{log}"
    );
    assert!(!log.contains("half as many bytes"), "{log}");
}
