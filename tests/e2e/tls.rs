//! TLS to Redis: `rediss://` with a CA file, with a client certificate when
//! the server demands one, and a clear failure on the wrong CA.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::bin::run_hitcount;
use common::*;
use hitcount::model::config::{RedisArgs, StreamArgs};
use hitcount::service::producer::{Producer, ProducerOptions};
use hitcount_lab::kit::{
    make_test_certs, RedisServer, ServerOptions, CLIENT_CERT_FILE, CLIENT_KEY_FILE,
};

/// Redis settings for the TLS server: its CA, and the client certificate
/// when `mutual`.
fn tls_args(server: &RedisServer, certs: &Path, mutual: bool) -> RedisArgs {
    RedisArgs {
        ca: Some(certs.join("ca.crt")),
        cert: mutual.then(|| certs.join(CLIENT_CERT_FILE)),
        key: mutual.then(|| certs.join(CLIENT_KEY_FILE)),
        ..RedisArgs::from_url(&server.url())
    }
}

/// A worker and the producer through TLS; the counters are exact.
async fn count_through_tls(redis: RedisArgs) {
    let mut admin = hitcount::store::connect::client(&redis)
        .unwrap()
        .open(Duration::from_secs(10))
        .await
        .expect("a TLS connection with the test CA");
    let mut s = settings(&redis.url, "tls-w1");
    s.redis = redis.clone();
    let workers = Workers::start(vec![s.clone()]);
    let producer =
        Producer::start(&redis, &StreamArgs::default(), ProducerOptions::default()).unwrap();
    let ts = unix_now() - 10;
    let mut hits = Vec::new();
    for i in 0..2_000 {
        let name = format!("tls:{}", i % 13);
        producer.hit_at(&name, 2, ts as f64);
        hits.push((name, 2, ts));
    }
    producer.flush().await;
    assert_eq!(
        producer
            .stats()
            .sent
            .load(std::sync::atomic::Ordering::Relaxed),
        2_000
    );
    wait_drained(&mut admin, &keys(&s)).await;
    workers.stop().await;
    assert_eq!(
        read_all(&mut admin, &keys(&s)).await,
        reference(&hits, &s.layout.precisions)
    );
    producer.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_producer_count_exactly_over_tls() {
    let certs = tempfile::tempdir().unwrap();
    let tls = make_test_certs(certs.path()).unwrap();
    let server = server_with(ServerOptions {
        tls: Some(tls),
        ..ServerOptions::default()
    });
    assert!(server.url().starts_with("rediss://"));
    count_through_tls(tls_args(&server, certs.path(), false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_client_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let mut tls = make_test_certs(certs.path()).unwrap();
    tls.require_client_cert = true;
    let server = server_with(ServerOptions {
        tls: Some(tls),
        ..ServerOptions::default()
    });
    count_through_tls(tls_args(&server, certs.path(), true)).await;

    // The binary takes the same files from its flags; without the client
    // certificate the server refuses it.
    let url = server.url();
    let ca = certs.path().join("ca.crt");
    let cert = certs.path().join(CLIENT_CERT_FILE);
    let key = certs.path().join(CLIENT_KEY_FILE);
    let out = run_hitcount(&[
        "hit",
        "mtls",
        "--redis-url",
        &url,
        "--redis-ca",
        ca.to_str().unwrap(),
        "--redis-cert",
        cert.to_str().unwrap(),
        "--redis-key",
        key.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_hitcount(&[
        "hit",
        "mtls",
        "--redis-url",
        &url,
        "--redis-ca",
        ca.to_str().unwrap(),
    ]);
    assert!(
        !out.status.success(),
        "a client without certificate was let in"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot connect to Redis at rediss://"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_ca_fails_with_a_clear_error() {
    let certs = tempfile::tempdir().unwrap();
    let tls = make_test_certs(certs.path()).unwrap();
    let other = tempfile::tempdir().unwrap();
    let other_ca = make_test_certs(other.path()).unwrap().ca;
    let server = server_with(ServerOptions {
        tls: Some(tls),
        ..ServerOptions::default()
    });
    let out = run_hitcount(&[
        "hit",
        "x",
        "--redis-url",
        &server.url(),
        "--redis-ca",
        other_ca.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot connect to Redis at rediss://127.0.0.1"),
        "{stderr}"
    );
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");
    // A worker and serve stop too (status 1, one line), instead of waiting
    // for a Redis that is there and refuses them.
    let (url, ca) = (server.url(), other_ca.to_str().unwrap().to_string());
    let listen = common::bin::free_addr();
    let ca_arg = ["--redis-ca", ca.as_str()];
    let mut worker = common::bin::Child::spawn(
        "worker",
        common::bin::worker(&url, "tls-w", &listen, &ca_arg),
    );
    let mut serve_cmd = common::bin::hitcount();
    serve_cmd
        .args(["serve", "--listen", &common::bin::free_addr()])
        .args(["--redis-url", &url])
        .args(ca_arg);
    let mut serve = common::bin::Child::spawn("serve", serve_cmd);
    for child in [&mut worker, &mut serve] {
        let status = child.wait(Duration::from_secs(25));
        let log = child.stderr();
        assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
        assert!(log.contains("invalid peer certificate"), "{log}");
        assert!(log.contains("HITCOUNT_REDIS_CA"), "{log}");
    }
    // Nothing reached the stream.
    let ok = run_hitcount(&[
        "get",
        "x",
        "-p",
        "1",
        "--json",
        "--redis-url",
        &server.url(),
        "--redis-ca",
        certs.path().join("ca.crt").to_str().unwrap(),
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "[]");
}

#[test]
fn missing_ca_file_is_a_configuration_error() {
    let hit_with_ca = |ca: &str| {
        let args = ["hit", "x", "--redis-url", "rediss://127.0.0.1:1"];
        let out = run_hitcount(&[&args[..], &["--redis-ca", ca]].concat());
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = hit_with_ca("/nonexistent/ca.crt");
    assert!(
        stderr.contains("cannot read CA file /nonexistent/ca.crt"),
        "{stderr}"
    );
    // Said once, not again by the error's chain.
    assert_eq!(stderr.matches("No such file").count(), 1, "{stderr}");
    // A key given as the CA: refused naming it, not skipped (rustls would
    // then blame Redis' certificate).
    let certs = tempfile::tempdir().unwrap();
    make_test_certs(certs.path()).unwrap();
    let key = certs.path().join(CLIENT_KEY_FILE);
    let stderr = hit_with_ca(key.to_str().unwrap());
    assert!(
        stderr.contains(&format!("cannot read CA file {}", key.display()))
            && stderr.contains("holds no PEM block ending in \"CERTIFICATE-----\""),
        "{stderr}"
    );
}
