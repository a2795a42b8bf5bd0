//! The dashboard page of `hitcount serve`: its static paths and headers
//! over raw HTTP, and the page itself in a real headless Chromium (Debian's
//! `chromium`, driven by playwright-core from `tests/browser/`; both
//! installed by `scripts/ensure-deps`) on demo data counted by real workers:
//! no console error and nothing from another origin, the list paged through
//! the API, the filter narrowing it, a shared link drawing the counter's
//! chart with the API's values, a hit sent meanwhile showing without a
//! reload, the CSV export being the API's samples, the hottest names being
//! the API's ranking, local time and dark mode on their switches, a 404
//! page and a message for an unknown name.
//! And `hitcount demo` serving its dashboard at the address it prints.
//!
//! `HITCOUNT_SCREENSHOT=docs/dashboard.png cargo test --test e2e dashboard::`
//! also writes the screenshot docs/api.md shows.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::bin::{
    free_addr, hitcount, http_get, percent_encode, post_hits, run_hitcount, wait_for, Child,
};
use serde_json::Value;

/// The demo's key prefix and stream: the dashboard shows what
/// `hitcount demo` counted.
const PREFIX: &str = "demo:";
const STREAM: &str = "demo:hits";
const DEAD: &str = "demo:hits:dead";

/// Raw `METHOD target` (sent as is, unnormalised): status and head, body.
fn raw(addr: &str, method: &str, target: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// `hitcount serve` of the demo's counters on `url`; its address once it
/// answers.
fn serve(url: &str) -> (Child, String) {
    let addr = free_addr();
    let mut cmd = hitcount();
    cmd.args(["serve", "--redis-url", url, "--listen", &addr])
        .args(["--prefix", PREFIX]);
    let mut child = Child::spawn("serve", cmd);
    wait_for("hitcount serve answers", Duration::from_secs(30), || {
        child.assert_running();
        http_get(&addr, "/api/v1/counters?limit=1").filter(|(s, _)| *s == 200)
    });
    (child, addr)
}

fn api(addr: &str, path: &str) -> Value {
    let (status, body) = http_get(addr, path).unwrap_or_else(|| panic!("no answer to {path}"));
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn static_paths_are_a_fixed_table_with_a_strict_policy() {
    let srv = common::server();
    let (_serve, addr) = serve(&srv.url());

    let (status, head, body) = raw(&addr, "GET", "/");
    assert_eq!(status, 200);
    assert!(body.contains("/static/app.js"), "{body}");
    assert!(
        head.contains("content-type: text/html; charset=utf-8"),
        "{head}"
    );
    assert!(
        head.contains("content-security-policy: default-src 'self'; script-src 'self';"),
        "{head}"
    );
    assert!(!body.contains("<script>"), "no inline script: {body}");
    for (path, kind) in [
        ("/static/app.js", "text/javascript"),
        ("/static/style.css", "text/css"),
        ("/favicon.svg", "image/svg+xml"),
        ("/favicon.ico", "image/svg+xml"),
        ("/static/uplot-1.6.32/uPlot.iife.min.js", "text/javascript"),
        ("/static/uplot-1.6.32/uPlot.min.css", "text/css"),
    ] {
        let (status, head, _) = raw(&addr, "GET", path);
        assert_eq!(status, 200, "{path}");
        assert!(
            head.contains(&format!("content-type: {kind}")),
            "{path}: {head}"
        );
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    }
    let (_, head, _) = raw(&addr, "GET", "/static/uplot-1.6.32/uPlot.iife.min.js");
    assert!(head.contains("immutable"), "{head}");

    // Traversal and other paths outside the table: the 404 page.
    for path in [
        "/static/../../etc/passwd",
        "/../etc/passwd",
        "/static/%2e%2e/%2e%2e/etc/passwd",
        "/static/..%2f..%2fCargo.toml",
        "/assets/app.js",
        "/static/",
        "//etc/passwd",
        "/index.html",
    ] {
        let (status, head, body) = raw(&addr, "GET", path);
        assert_eq!(status, 404, "{path}");
        assert!(head.contains("text/html"), "{path}: {head}");
        assert!(body.contains("404: no such page"), "{path}: {body}");
        assert!(!body.contains("root:"), "{path}: {body}");
    }
    // The API keeps its JSON 404.
    let (status, head, body) = raw(&addr, "GET", "/api/v1/nope");
    assert_eq!(status, 404);
    assert!(head.contains("application/json"), "{head}");
    assert!(body.contains("no such path"), "{body}");

    // Only GET and HEAD; HEAD has no body.
    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let (status, head, _) = raw(&addr, method, "/");
        assert_eq!(status, 405, "{method}");
        assert!(head.contains("allow: get, head"), "{method}: {head}");
    }
    let (status, head, body) = raw(&addr, "HEAD", "/static/app.js");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/javascript"), "{head}");
    assert!(body.is_empty(), "HEAD with a body: {body}");
}

/// Node, the browser and playwright-core, or a panic that says how to get
/// them: a missing browser must not pass as a test that ran.
pub(crate) fn browser_tools() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let node_ok = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        node_ok,
        "node is not installed: run scripts/ensure-deps (it installs nodejs, npm and chromium)"
    );
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: run scripts/ensure-deps (Debian's chromium package)"
    );
    assert!(
        dir.join("node_modules/playwright-core").is_dir(),
        "tests/browser/node_modules is missing: run scripts/ensure-deps (npm ci there)"
    );
    dir
}

/// `node SCRIPT PLAN` in `browser` (the directory [`browser_tools`]
/// gives): the JSON it printed on its last line, or a panic with its log
/// when it failed or said `failure`.
pub(crate) fn run_browser(browser: &Path, script: &str, plan: &Value) -> Value {
    let run = Command::new("node")
        .arg(browser.join(script))
        .arg(plan.to_string())
        .current_dir(browser)
        .stdin(Stdio::null())
        .output()
        .expect("running node");
    let log = String::from_utf8_lossy(&run.stderr);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let out: Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no JSON from {script} ({e}):\n{stdout}\n{log}"));
    assert!(
        run.status.success() && out.get("failure").is_none(),
        "{script} failed: {}\n{log}\n{out:#}",
        out["failure"]
    );
    out
}

/// An hour and a half of history for the ten most popular demo names, one
/// plain-form entry per (name, minute), sent to the stream for the worker:
/// a daily-looking wave so the chart has a shape.
async fn send_history(url: &str, now: i64) -> usize {
    let mut conn = common::conn(url).await;
    let mut pipe = redis::pipe();
    let mut entries = 0;
    for minute in 1..=90i64 {
        for rank in 0..10i64 {
            let wave = 1.0 + 0.5 * ((minute as f64) / 8.0 + rank as f64).sin();
            let count = ((400.0 / (rank + 1) as f64) * wave).round().max(1.0) as i64;
            pipe.cmd("XADD")
                .arg(STREAM)
                .arg("*")
                .arg("name")
                .arg(format!("page:{rank}"))
                .arg("count")
                .arg(count)
                .arg("ts")
                .arg(now - minute * 60)
                .ignore();
            entries += 1;
        }
    }
    pipe.query_async::<()>(&mut conn).await.unwrap();
    entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_real_browser() {
    let browser = browser_tools();
    let srv = common::server();
    let url = srv.url();

    // Demo data: a real `hitcount demo` on this Redis, then its history
    // and the live hit through a real worker of the same layout.
    // 150 names: more than one page of the list (100).
    let demo = run_hitcount(&[
        "demo",
        "--redis-url",
        &url,
        "--hits",
        "3000",
        "--names",
        "150",
    ]);
    let said = String::from_utf8_lossy(&demo.stdout);
    assert!(demo.status.success(), "{said}");
    assert!(said.contains("3000 of 3000 sent: exact"), "{said}");
    let layout = [
        "--prefix",
        PREFIX,
        "--stream",
        STREAM,
        "--dead-stream",
        DEAD,
    ];
    let listen = free_addr();
    let _worker = common::bin::start_worker(&url, "dash-worker", &listen, &layout);
    send_history(&url, common::unix_now()).await;
    let (_serve, addr) = serve(&url);
    let name = "page:1";
    let series = format!("/api/v1/counters/{}?precision=60", percent_encode(name));
    wait_for("the history counted", Duration::from_secs(60), || {
        let samples = api(&addr, &series)["samples"].as_array()?.len();
        (samples >= 90).then_some(())
    });
    let samples = api(&addr, &series)["samples"].clone();
    // A counter whose hits carry no value: the series says it has no
    // statistics, so the page does not ask for them (no 404 to log).
    let plain = "plain:1";
    let mut cmd = common::bin::hitcount();
    cmd.args(["hit", "--redis-url", &url, plain]).args(layout);
    assert!(cmd.status().unwrap().success());
    let plain_series = format!("/api/v1/counters/{}?precision=60", percent_encode(plain));
    wait_for("the plain hit counted", Duration::from_secs(60), || {
        let (status, body) = common::bin::http_get(&addr, &plain_series)?;
        (status == 200).then(|| serde_json::from_str::<Value>(&body).unwrap())
    });
    assert_eq!(api(&addr, &plain_series)["stats"], false);
    assert_eq!(api(&addr, &series)["stats"], true);

    let bin = env!("CARGO_BIN_EXE_hitcount");
    let mut hit = vec![bin, "hit", "--redis-url", &url, name, "--count", "7"];
    hit.extend(layout);
    let screenshot = std::env::var("HITCOUNT_SCREENSHOT").ok().map(|p| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
        }
    });
    let plan = serde_json::json!({
        "base": format!("http://{addr}"),
        "name": name,
        "precision": 60,
        "prefix": "page:1",
        "hit": hit,
        "hitCount": 7,
        "plainName": plain,
        "screenshot": screenshot,
    });
    let out = run_browser(&browser, "dashboard.mjs", &plan);

    // No console error and nothing from another origin.
    assert_eq!(
        out["errorsBeforeRefusals"],
        serde_json::json!([]),
        "{out:#}"
    );
    assert_eq!(out["foreign"], serde_json::json!([]), "{out:#}");
    assert_eq!(out["failed"], serde_json::json!([]), "{out:#}");
    assert_eq!(out["plain"]["statsHidden"], true, "{out:#}");
    assert!(out["plain"]["samples"].as_u64() >= Some(1), "{out:#}");

    // The filter narrows the list to the API's names with that prefix.
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    let listed = |query: &str| -> Vec<String> {
        api(&addr, &format!("/api/v1/counters?{query}"))["counters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    // The list is paged through the API: 100 names, then the next page.
    let all = names(&out["all"]);
    let first = api(&addr, "/api/v1/counters?limit=100");
    assert_eq!(all, listed("limit=100"));
    assert_eq!(out["moreShown"], true, "{out:#}");
    let after = percent_encode(first["next"].as_str().unwrap());
    let mut paged = all.clone();
    paged.extend(listed(&format!("limit=100&after={after}")));
    assert_eq!(names(&out["allPaged"]), paged);
    let filtered = names(&out["filtered"]);
    assert_eq!(filtered, listed("prefix=page%3A1"));
    assert!(filtered.len() < all.len(), "{all:?}");
    assert!(out["filterUrl"]
        .as_str()
        .unwrap()
        .ends_with("/?prefix=page%3A1"));

    // The shared link draws the chart: pixels of the series, the API's values.
    let chart = &out["chart"];
    assert_eq!(chart["title"], name);
    assert!(chart["painted"].as_u64().unwrap() > 1000, "{chart}");
    assert!(chart["series"].as_u64().unwrap() > 200, "{chart}");
    let pairs: Vec<(i64, i64)> = samples
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s[0].as_i64().unwrap(), s[1].as_i64().unwrap()))
        .collect();
    let shown: Vec<(i64, i64)> = chart["xs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(chart["ys"].as_array().unwrap())
        .map(|(x, y)| (x.as_i64().unwrap(), y.as_i64().unwrap()))
        .collect();
    assert_eq!(shown, pairs, "chart vs API");
    assert!(out["chartUrl"]
        .as_str()
        .unwrap()
        .ends_with("/?name=page%3A1&precision=60"));
    assert!(chart["axis"].as_str().unwrap().contains("UTC"), "{chart}");

    // Under the chart, the statistics of its values (the demo's hits carry
    // response times): the API's newest buckets, four significant digits.
    let stats = api(
        &addr,
        &format!("/api/v1/stats/{}?precision=60", percent_encode(name)),
    );
    let buckets = stats["buckets"].as_array().unwrap();
    assert!(!buckets.is_empty(), "{stats}");
    assert_eq!(out["stats"]["visible"], true, "{out:#}");
    let rows = out["stats"]["rows"].as_array().unwrap();
    let newest: Vec<&Value> = buckets.iter().rev().take(5).collect();
    assert_eq!(rows.len(), newest.len(), "{out:#}");
    for (row, b) in rows.iter().zip(newest) {
        let cells: Vec<&str> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let t = b["t"].as_i64().unwrap();
        assert_eq!(cells[0], hitcount::store::counters::format_utc(t), "{row}");
        assert_eq!(cells[1], b["count"].to_string(), "{row}");
        let keys = ["mean", "min", "max", "stddev", "p50", "p90", "p99"];
        for (key, shown) in keys.iter().zip(&cells[2..]) {
            match b[key].as_f64() {
                None => assert_eq!(*shown, "—", "{key} in {row}"),
                Some(v) => {
                    let s: f64 = shown.parse().unwrap();
                    assert!((s - v).abs() <= v.abs() * 5e-4, "{key}: {s} vs {v}");
                }
            }
        }
    }

    // The CSV is the API's samples.
    let mut csv = String::from("unix_seconds,time_utc,count\n");
    for (t, c) in &pairs {
        let iso = hitcount::store::counters::format_utc(*t).replace(' ', "T");
        csv.push_str(&format!("{t},{iso}Z,{c}\n"));
    }
    assert_eq!(out["csv"].as_str().unwrap(), csv);
    assert_eq!(out["csvName"], "hitcount-page_1-60s.csv");

    // Live: the hit of 7 showed without a reload.
    let live = &out["live"];
    assert_eq!(
        live["after"].as_i64(),
        live["before"].as_i64().map(|b| b + 7)
    );
    assert_eq!(live["notReloaded"], true, "{live}");
    assert!(live["redraws"].as_u64().unwrap() >= 1, "{live}");
    assert!(live["seconds"].as_f64().unwrap() < 15.0, "{live}");

    // The hottest names are the API's ranking of the bucket shown.
    let top = &out["topBody"];
    let bucket = top["bucket"].as_i64().unwrap();
    let fresh = api(
        &addr,
        &format!("/api/v1/top?precision=60&bucket={bucket}&limit=20"),
    );
    assert_eq!(top["counters"], fresh["counters"], "{out:#}");
    assert!(!fresh["counters"].as_array().unwrap().is_empty());
    let shown_top: Vec<Value> = fresh["counters"].as_array().unwrap().clone();
    assert_eq!(out["top"], Value::Array(shown_top));
    assert!(out["topUrl"].as_str().unwrap().contains("view=top"));

    // Local time on the switch: axis, address and CSV (+09:00) say so.
    assert_eq!(out["localAxis"], "time (Asia/Tokyo)");
    assert!(out["localUrl"].as_str().unwrap().contains("tz=local"));
    let local = out["localCsv"].as_str().unwrap();
    let mut lines = local.lines();
    assert_eq!(lines.next(), Some("unix_seconds,time_local,count"));
    for line in lines {
        assert!(line.contains("+09:00,"), "{line}");
    }

    // Dark mode: a dark background, light text.
    let rgb = |s: &str| -> u32 {
        s.trim_start_matches("rgb(")
            .trim_end_matches(')')
            .split(',')
            .map(|c| c.trim().parse::<u32>().unwrap())
            .sum()
    };
    assert!(
        rgb(out["dark"]["background"].as_str().unwrap()) < 150,
        "{out:#}"
    );
    assert!(rgb(out["dark"]["color"].as_str().unwrap()) > 600, "{out:#}");

    // Wrong input: the 404 page; an unknown name is said, not thrown.
    assert_eq!(out["notFound"]["status"], 404);
    assert!(out["notFound"]["title"]
        .as_str()
        .unwrap()
        .contains("Not found"));
    assert_eq!(out["unknown"]["error"], true);
    assert_eq!(out["unknown"]["statsHidden"], true, "{out:#}");
    assert_eq!(out["statsAfterRedraw"], true, "{out:#}");
    assert!(out["unknown"]["status"]
        .as_str()
        .unwrap()
        .contains("no counter named “no such counter”"));

    if let Some(path) = screenshot {
        assert!(path.exists(), "no screenshot at {}", path.display());
    }
}

/// `hitcount demo` ends by serving its counters' dashboard at the address
/// it prints: with `--keep-serving` (as on a terminal) until SIGTERM.
#[test]
fn the_demo_serves_its_dashboard_until_stopped() {
    let addr = free_addr();
    let mut cmd = hitcount();
    cmd.args(["demo", "--hits", "500", "--names", "10", "--keep-serving"])
        .args(["--dashboard", &addr]);
    let mut demo = Child::spawn("demo", cmd);
    let link = format!("Dashboard: http://{addr}/?name=page:0&precision=60");
    wait_for(
        "the demo's dashboard address",
        Duration::from_secs(60),
        || {
            demo.assert_running();
            demo.stdout().contains(&link).then_some(())
        },
    );
    assert!(demo.stdout().contains("serving it until Ctrl-C"));
    let (status, page) = http_get(&addr, "/").unwrap();
    assert_eq!((status, page.contains("/static/app.js")), (200, true));
    let day = api(&addr, "/api/v1/counters/page%3A0?precision=86400");
    let total: i64 = day["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[1].as_i64().unwrap())
        .sum();
    assert!(total > 0, "{day}");
    // While it serves, the workers and ingest still run: a page view sent
    // as the printed `curl` line says shows on the dashboard's API.
    let out = demo.stdout();
    let ingest = out
        .split("http://")
        .skip(1)
        .find_map(|rest| Some(rest.split_once("/api/v1/hits")?.0.to_string()))
        .unwrap_or_else(|| panic!("no ingest address in {out}"));
    let (status, _, answer) =
        post_hits(&ingest, "application/json", &[], r#"{"name":"web:/demo"}"#);
    assert_eq!(status, 202, "{answer}");
    wait_for("the page view counted", Duration::from_secs(30), || {
        let day = api(&addr, "/api/v1/counters/web%3A%2Fdemo?precision=86400");
        let total: i64 = day["samples"]
            .as_array()?
            .iter()
            .map(|s| s[1].as_i64().unwrap())
            .sum();
        (total == 101).then_some(())
    });
    assert!(demo.terminate(Duration::from_secs(10)).success());

    // Not on a terminal and without the flag: it prints the address and stops.
    let o = run_hitcount(&[
        "demo",
        "--hits",
        "100",
        "--names",
        "5",
        "--dashboard",
        &addr,
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(out.contains(&format!("Dashboard: http://{addr}/")), "{out}");
    assert!(out.contains("--keep-serving keeps it open"), "{out}");

    // A dashboard address it cannot take fails before the demo runs.
    let o = run_hitcount(&["demo", "--dashboard", "nonsense"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot listen on nonsense (--dashboard)"),
        "{err}"
    );
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}
