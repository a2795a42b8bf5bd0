//! What deploy/ ships for the counters, run in the real `prometheus`
//! reading a real `serve` remotely: the example alert on a silent counter
//! fires when a worker's hits stop and resolves when they resume (its
//! durations scaled down, minutes to seconds), and every query of the
//! counters' Grafana dashboard, its variables substituted, answers
//! without a warning and with data for the test's counters.

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::bin::{free_addr, start_worker};
use common::prometheus::{api, ask, prometheus_reading};
use common::*;
use serde_json::Value;

use crate::serve::{observations, seed, seed_stats, serve};

fn deploy_file(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The state of alert `name` in Prometheus: `pending`, `firing` or none.
fn alert_state(prom: &str, name: &str) -> Option<String> {
    let (data, _) = api(prom, "/api/v1/alerts", &[]);
    data["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["alertname"] == name)
        .map(|a| a["state"].as_str().unwrap().to_string())
}

/// Waits until alert `name` is in `state` (`None`: gone), at most `within`;
/// how long it took.
async fn await_state(prom: &str, name: &str, state: Option<&str>, within: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let now = alert_state(prom, name);
        if now.as_deref() == state {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "{name} still {now:?}, not {state:?}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// counters.yml with its durations scaled from minutes to seconds (and
/// hours to minutes), reading the 1 s precision instead of the 60 s one.
fn scaled_counter_rules() -> String {
    let shipped = deploy_file("deploy/prometheus/counters.yml");
    let minutes = regex::Regex::new(r"\b(\d+)m\b").unwrap();
    let hours = regex::Regex::new(r"\b(\d+)h\b").unwrap();
    let scaled = minutes.replace_all(&shipped, "${1}s");
    let scaled = hours
        .replace_all(&scaled, "${1}m")
        .replace("precision=\"60\"", "precision=\"1\"");
    for part in ["name=\"page:checkout\"}[10s]", "[1m] offset 10s", "for: 1s"] {
        assert!(scaled.contains(part), "no {part} in\n{scaled}");
    }
    scaled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_silent_counter_alert_fires_when_hits_stop_and_resolves_when_they_resume() {
    const ALERT: &str = "HitcountCounterSilent";
    let server = server();
    let url = server.url();
    let _worker = start_worker(&url, "rr-alert", &free_addr(), &[]);
    let (_serve, addr) = serve(&url, &[]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counters.yml"), scaled_counter_rules()).unwrap();
    let (_prom, prom) = prometheus_reading(dir.path(), &addr, "rule_files: [counters.yml]\n");

    // Hits ten times a second while `on`, from a task of their own.
    let producer = Arc::new(producer(&url));
    let on = Arc::new(AtomicBool::new(true));
    let sender = {
        let (producer, on) = (producer.clone(), on.clone());
        tokio::spawn(async move {
            loop {
                if on.load(Ordering::Relaxed) {
                    producer.hit("page:checkout");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    // Traffic for longer than the (scaled) 10 minutes: quiet throughout.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(15) {
        assert_eq!(alert_state(&prom, ALERT), None, "with traffic");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Silence: firing once no hit came for the (scaled) 10 minutes.
    on.store(false, Ordering::Relaxed);
    producer.flush().await;
    let fired = await_state(&prom, ALERT, Some("firing"), Duration::from_secs(60)).await;
    assert!(fired >= Duration::from_secs(9), "fired after {fired:?}");
    let (alerts, _) = api(&prom, "/api/v1/alerts", &[]);
    let labels = &alerts["alerts"][0]["labels"];
    assert_eq!(
        (labels["name"].as_str(), labels["severity"].as_str()),
        (Some("page:checkout"), Some("warning")),
        "{alerts}"
    );
    // Hits again: resolved.
    on.store(true, Ordering::Relaxed);
    await_state(&prom, ALERT, None, Duration::from_secs(30)).await;
    sender.abort();
    eprintln!("fired {fired:?} after the last hit");
}

/// `s` with every character a regular expression gives a meaning escaped,
/// as Grafana's `${var:regex}` writes it.
fn regex_escaped(s: &str) -> String {
    regex::escape(s)
}

/// `expr` with the dashboard's variables and Grafana's `$__range`
/// replaced; no `$` may be left.
fn substituted(expr: &str, vars: &[(&str, &str)]) -> String {
    let mut out = expr.to_string();
    for (name, value) in vars {
        out = out
            .replace(&format!("${{{name}:regex}}"), &regex_escaped(value))
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    assert!(!out.contains('$'), "a variable left in {out}");
    out
}

/// Whether a query answer holds any sample other than 0: rows of an
/// instant vector (`value`) or of a range (`values`).
fn has_data(result: &Value) -> bool {
    result.as_array().unwrap().iter().any(|s| {
        let points = match s.get("values") {
            Some(v) => v.as_array().unwrap().clone(),
            None => vec![s["value"].clone()],
        };
        points.iter().any(|p| p[1] != "0")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_of_the_counters_dashboard_answers_with_data() {
    let server = server();
    let url = server.url();
    let mut c = conn(&url).await;
    let now = unix_now();
    let b0 = now - now % 60;
    seed(&mut c, 60, "page:home", &[(b0 - 600, 7), (b0 - 120, 5)]).await;
    seed(&mut c, 60, "page:about", &[(b0 - 300, 3)]).await;
    seed(&mut c, 60, "other", &[(b0 - 300, 100)]).await;
    let values = [
        (b0 - 300, observations(2, 40)),
        (b0 - 120, observations(3, 9)),
    ];
    seed_stats(&mut c, 60, "page:home", &values, true).await;
    let (_serve, addr) = serve(&url, &[]);
    let dir = tempfile::tempdir().unwrap();
    let (_prom, prom) = prometheus_reading(dir.path(), &addr, "");

    let dash: Value = serde_json::from_str(&deploy_file("deploy/grafana/hitcount-counters.json"))
        .expect("the dashboard is JSON");
    let vars = [
        ("precision", "60"),
        ("prefix", "page:"),
        ("name", "page:home"),
        ("__range", "3600s"),
    ];
    let (start, end) = ((now - 3600).to_string(), now.to_string());

    // Variables: the precision offered, the names Grafana lists the way it
    // does for `label_values(SELECTOR, LABEL)` (the series API).
    let templating = dash["templating"]["list"].as_array().unwrap();
    let by_name = |n: &str| templating.iter().find(|v| v["name"] == n).unwrap();
    let precisions = by_name("precision")["query"].as_str().unwrap();
    assert!(precisions.split(',').any(|p| p == "60"), "{precisions}");
    let definition = by_name("name")["query"]["query"].as_str().unwrap();
    let inner = definition
        .strip_prefix("label_values(")
        .and_then(|d| d.strip_suffix(", name)"))
        .unwrap_or_else(|| panic!("not label_values(…, name): {definition}"));
    let selector = substituted(inner, &vars);
    let (series, warnings) = api(
        &prom,
        "/api/v1/series",
        &[("match[]", &selector), ("start", &start), ("end", &end)],
    );
    assert!(warnings.is_empty(), "{selector}: {warnings:?}");
    let names: BTreeSet<&str> = series
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["page:about", "page:home"]),
        "{selector}"
    );

    // Every panel's every query.
    let mut ran = 0;
    for panel in dash["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        let step = substituted(panel["interval"].as_str().unwrap_or("60s"), &vars);
        for target in panel["targets"].as_array().unwrap() {
            let expr = substituted(target["expr"].as_str().unwrap(), &vars);
            let (result, warnings) = if target["instant"] == true {
                ask(&prom, "/api/v1/query", &[("query", &expr), ("time", &end)])
            } else {
                let params = [
                    ("query", expr.as_str()),
                    ("start", &start),
                    ("end", &end),
                    ("step", &step),
                ];
                ask(&prom, "/api/v1/query_range", &params)
            };
            assert!(warnings.is_empty(), "{title}: {expr}: {warnings:?}");
            assert!(has_data(&result), "{title}: {expr}: no data: {result}");
            for s in result.as_array().unwrap() {
                if let Some(name) = s["metric"]["name"].as_str() {
                    assert!(names.contains(name), "{title}: {expr}: {name}");
                }
            }
            ran += 1;
        }
    }
    assert_eq!(ran, 8, "every query of the five panels");
}
