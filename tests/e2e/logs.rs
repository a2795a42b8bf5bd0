//! Logs and secrets: JSON lines with `--log-format json`, text by default,
//! and the Redis password never printed, logged or served over HTTP.

use crate::common;

use std::time::Duration;

use common::bin::{free_addr, hitcount, http_get, start_worker, wait_for, Child};
use hitcount_lab::kit::ServerOptions;

const SECRET: &str = "secretpw";

/// Every line of `stderr` is a JSON object with a level and a message.
fn assert_json_lines(stderr: &str) -> Vec<serde_json::Value> {
    assert!(!stderr.trim().is_empty(), "no log lines");
    stderr
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
            assert!(v["level"].is_string(), "no level: {line}");
            assert!(v["message"].is_string(), "no message: {line}");
            v
        })
        .collect()
}

#[test]
fn json_logs_and_no_password_anywhere() {
    let server = common::server_with(ServerOptions {
        password: Some(SECRET.into()),
        ..ServerOptions::default()
    });
    let url = format!("redis://:{SECRET}@127.0.0.1:{}", server.port());
    let listen = free_addr();
    let mut worker = start_worker(&url, "logs-w1", &listen, &["--log-format", "json"]);
    let out = common::bin::run_hitcount(&["hit", "page:a", "--redis-url", &url]);
    assert!(out.status.success());
    let mut bodies = String::new();
    for path in [
        "/metrics",
        "/healthz",
        "/readyz",
        "/",
        "/config",
        "/debug/vars",
    ] {
        let (_, body) = http_get(&listen, path).unwrap();
        bodies.push_str(&body);
    }
    assert!(bodies.contains("hitcount_events_read_total"));
    assert!(worker.terminate(Duration::from_secs(30)).success());
    let stderr = worker.stderr();
    let lines = assert_json_lines(&stderr);
    assert!(
        lines.iter().any(|l| l["message"] == "worker starting"
            && l["redis"].as_str() == Some(&*format!("redis://:***@127.0.0.1:{}", server.port()))),
        "{stderr}"
    );
    for (what, text) in [("stderr", &stderr), ("HTTP bodies", &bodies)] {
        assert!(!text.contains(SECRET), "password in {what}:\n{text}");
    }
}

#[test]
fn text_logs_by_default_and_no_password_when_refused() {
    let server = common::server_with(ServerOptions {
        password: Some(SECRET.into()),
        ..ServerOptions::default()
    });
    // Redis unreachable: the worker keeps retrying, logging the outage once,
    // live but not ready.
    let down = format!(
        "redis://:{SECRET}@127.0.0.1:{}",
        hitcount_lab::kit::free_port()
    );
    let listen = free_addr();
    let mut cmd = hitcount();
    cmd.args([
        "worker",
        "--redis-url",
        &down,
        "--consumer",
        "logs-w2",
        "--listen",
        &listen,
    ]);
    let mut worker = Child::spawn("worker", cmd);
    wait_for("the outage logged", Duration::from_secs(30), || {
        worker.assert_running();
        let e = worker.stderr();
        e.contains("Redis unavailable").then_some(())
    });
    let (status, ready) = http_get(&listen, "/readyz").unwrap();
    assert_eq!(status, 503, "{ready}");
    let (status, _) = http_get(&listen, "/healthz").unwrap();
    assert_eq!(status, 200, "an outage must not fail liveness");
    let (_, metrics) = http_get(&listen, "/metrics").unwrap();
    assert!(worker.terminate(Duration::from_secs(30)).success());
    let outage = worker.stderr();

    // A wrong password: no retry can fix it, so the worker stops with
    // status 1 and one line naming the setting.
    let wrong = format!("{SECRET}-wrong");
    let url = format!("redis://:{wrong}@127.0.0.1:{}", server.port());
    let mut cmd = hitcount();
    cmd.args([
        "worker",
        "--redis-url",
        &url,
        "--consumer",
        "logs-w3",
        "--listen",
        "127.0.0.1:0",
    ]);
    let mut refused = Child::spawn("refused", cmd);
    let status = refused.wait(Duration::from_secs(20)).expect("stopped");
    assert_eq!(status.code(), Some(1), "{}", refused.stderr());
    let stderr = refused.stderr();
    assert!(
        stderr.contains(" ERROR ") && stderr.contains("authentication failed"),
        "{stderr}"
    );
    assert!(stderr.contains("REDIS_URL"), "{stderr}");
    for text in [&outage, &stderr] {
        assert!(text.lines().all(|l| !l.starts_with('{')), "{text}");
        assert!(!text.contains('\x1b'), "colour codes in a file:\n{text}");
    }
    for text in [&outage, &stderr, &ready, &metrics] {
        assert!(!text.contains(SECRET), "password printed:\n{text}");
    }
}

#[test]
fn json_errors_at_startup_are_json_too() {
    let out = common::bin::run_hitcount(&[
        "--log-format",
        "json",
        "worker",
        "--redis-url",
        "redis://:secretpw@127.0.0.1:1",
        "--listen",
        "not-an-address",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = assert_json_lines(&stderr);
    assert!(lines.iter().any(|l| l["level"] == "ERROR"), "{stderr}");
    assert!(!stderr.contains(SECRET), "{stderr}");
}
