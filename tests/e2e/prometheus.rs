//! Real Prometheus scraping two real workers: Debian's `prometheus` binary
//! (installed by scripts/ensure-deps) on a free port, scraping every second,
//! queried through its HTTP API.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::bin::{free_addr, http_get, installed, percent_encode, start_worker, wait_for, Child};
use common::prometheus::start_prometheus_with;
use serde_json::Value;

/// Events sent through the producer.
const EVENTS: u64 = 3_000;

/// The instant vector of `query`: (labels, value) per series.
fn query(prom: &str, q: &str) -> Vec<(serde_json::Map<String, Value>, f64)> {
    let Some((200, body)) = http_get(prom, &format!("/api/v1/query?query={}", percent_encode(q)))
    else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).expect("Prometheus API returns JSON");
    assert_eq!(v["status"], "success", "{body}");
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let labels = s["metric"].as_object().unwrap().clone();
            let value = s["value"][1].as_str().unwrap().parse().unwrap();
            (labels, value)
        })
        .collect()
}

/// Starts Prometheus scraping `targets` every second.
fn start_prometheus(dir: &Path, listen: &str, targets: &[&str]) -> Child {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: hitcount\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    start_prometheus_with(dir, listen, &config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_two_workers() {
    assert!(
        installed(Path::new("prometheus")),
        "Debian's prometheus is not installed: run scripts/ensure-deps (apt-get install -y prometheus)"
    );
    let server = common::server();
    let url = server.url();
    let (a, b) = (free_addr(), free_addr());
    let _w1 = start_worker(&url, "prom-w1", &a, &[]);
    let _w2 = start_worker(&url, "prom-w2", &b, &[]);

    let dir = tempfile::tempdir().unwrap();
    let prom_addr = free_addr();
    let _prom = start_prometheus(dir.path(), &prom_addr, &[&a, &b]);

    // Both targets are up.
    let prom = prom_addr.clone();
    let up = tokio::task::spawn_blocking(move || {
        wait_for("up == 1 for both workers", Duration::from_secs(60), || {
            let up = query(&prom, "up{job=\"hitcount\"}");
            (up.len() == 2 && up.iter().all(|(_, v)| *v == 1.0)).then_some(up)
        })
    })
    .await
    .unwrap();
    let mut instances: Vec<_> = up
        .iter()
        .map(|(l, _)| l["instance"].as_str().unwrap().to_string())
        .collect();
    instances.sort();
    let mut expected = vec![a.clone(), b.clone()];
    expected.sort();
    assert_eq!(instances, expected);

    // Load through the producer, and one entry without a name.
    let producer = common::producer(&url);
    for i in 0..EVENTS {
        producer.hit(&format!("page:{}", i % 50));
    }
    producer.flush().await;
    let mut conn = common::conn(&url).await;
    let _: String = redis::cmd("XADD")
        .arg("hits")
        .arg("*")
        .arg("nom")
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();

    let prom = prom_addr.clone();
    tokio::task::spawn_blocking(move || {
        wait_for(
            "every event applied, as Prometheus sees it",
            Duration::from_secs(90),
            || {
                let applied = query(&prom, "sum(hitcount_events_applied_total)");
                (applied.first().map(|(_, v)| *v) == Some(EVENTS as f64)).then_some(())
            },
        );
        wait_for(
            "the bad entry dead-lettered, as Prometheus sees it",
            Duration::from_secs(60),
            || {
                let dead = query(
                    &prom,
                    "sum(hitcount_events_dead_lettered_total{reason=\"missing_name\"})",
                );
                (dead.first().map(|(_, v)| *v) == Some(1.0)).then_some(())
            },
        );
        // Every worker exports its series with the scrape labels; the counters
        // moved from 0 during the test.
        for (q, min_series) in [
            ("hitcount_events_applied_total", 2),
            ("hitcount_events_read_total", 2),
            ("hitcount_windows_applied_total", 2),
            ("hitcount_build_info", 2),
            ("hitcount_group_pending_entries", 2),
            ("hitcount_group_backlog_age_seconds", 2),
            ("hitcount_hits_too_old_total{precision=\"86400\"}", 2),
            ("hitcount_redis_errors_total{kind=\"io\"}", 2),
            ("hitcount_worker_loop_last_turn_timestamp_seconds", 2),
        ] {
            let series = query(&prom, q);
            assert_eq!(series.len(), min_series, "{q}: {series:?}");
            for (labels, _) in &series {
                assert_eq!(labels["job"], "hitcount", "{q}");
                assert!(labels.contains_key("instance"), "{q}");
            }
        }
        let moved = query(&prom, "increase(hitcount_events_read_total[1m]) > 0");
        assert!(!moved.is_empty(), "hitcount_events_read_total never moved");
        let build = query(&prom, "hitcount_build_info");
        assert!(build.iter().all(|(l, v)| *v == 1.0
            && l["version"] == env!("CARGO_PKG_VERSION")
            && l.contains_key("revision")));
        let hist = query(&prom, "sum(hitcount_apply_duration_seconds_count)");
        assert!(hist.first().is_some_and(|(_, v)| *v >= 1.0), "{hist:?}");
    })
    .await
    .unwrap();

    producer.shutdown(Duration::from_secs(1)).await;
}
