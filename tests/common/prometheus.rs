//! A real Prometheus (Debian's `prometheus`) on a free port, and its HTTP
//! API asked for PromQL: what the tests of scraping and of remote read
//! share, on one Redis or on a cluster.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::bin::{free_addr, http_get, installed, percent_encode, wait_for, Child};

/// Starts Prometheus with `config` (YAML) in `dir`, serving its API on
/// `listen`, and waits until it is ready.
pub fn start_prometheus_with(dir: &Path, listen: &str, config: &str) -> Child {
    assert!(
        installed(Path::new("prometheus")),
        "Debian's prometheus is not installed: run scripts/ensure-deps (apt-get install -y prometheus)"
    );
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = std::process::Command::new("prometheus");
    cmd.arg(format!("--config.file={}", path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={listen}"))
        .arg("--log.level=warn");
    let mut prom = Child::spawn("prometheus", cmd);
    wait_for("prometheus ready", Duration::from_secs(60), || {
        prom.assert_running();
        http_get(listen, "/-/ready").filter(|(s, _)| *s == 200)
    });
    prom
}

/// Starts Prometheus reading `serve` (its address) remotely, recent data
/// included, evaluating every second, with `extra` YAML appended to its
/// configuration (rule files), in `dir`; its API's address.
pub fn prometheus_reading(dir: &Path, serve: &str, extra: &str) -> (Child, String) {
    let listen = free_addr();
    let config = format!(
        "global:\n  evaluation_interval: 1s\n\
         remote_read:\n  - url: http://{serve}/api/v1/read\n    read_recent: true\n{extra}"
    );
    (start_prometheus_with(dir, &listen, &config), listen)
}

/// The answer of Prometheus' API `path` to `params`: `data` and the
/// warnings.
pub fn api(prom: &str, path: &str, params: &[(&str, &str)]) -> (Value, Vec<String>) {
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect();
    let (status, body) =
        http_get(prom, &format!("{path}?{}", query.join("&"))).expect("Prometheus answers");
    assert_eq!(status, 200, "{params:?}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{body}");
    let warnings = v["warnings"]
        .as_array()
        .map(|w| w.iter().map(|w| w.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    (v["data"].clone(), warnings)
}

/// The answer of Prometheus' query API `path` to `params`: `data.result`
/// and the warnings.
pub fn ask(prom: &str, path: &str, params: &[(&str, &str)]) -> (Value, Vec<String>) {
    let (data, warnings) = api(prom, path, params);
    (data["result"].clone(), warnings)
}

/// The instant vector of `q` at `t` (unix s), by its `name` label (or
/// `precision`, or the metric name), asserting no warning.
pub fn at(prom: &str, q: &str, t: i64) -> BTreeMap<String, f64> {
    let (result, warnings) = ask(
        prom,
        "/api/v1/query",
        &[("query", q), ("time", &t.to_string())],
    );
    assert!(warnings.is_empty(), "{q}: {warnings:?}");
    let mut out = BTreeMap::new();
    for s in result.as_array().unwrap() {
        let m = &s["metric"];
        let key = ["name", "precision", "__name__"]
            .iter()
            .find_map(|k| m[k].as_str())
            .unwrap_or("")
            .to_string();
        let value = s["value"][1].as_str().unwrap().parse().unwrap();
        assert!(
            out.insert(key, value).is_none(),
            "{q}: two series alike: {result}"
        );
    }
    out
}

/// The one value of `q` at `t`.
pub fn one(prom: &str, q: &str, t: i64) -> f64 {
    let got = at(prom, q, t);
    assert_eq!(got.len(), 1, "{q} at {t}: {got:?}");
    got.into_values().next().unwrap()
}
