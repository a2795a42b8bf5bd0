//! `hitcount ingest` from a real headless Chromium (driven by
//! playwright-core from `tests/browser/ingest.mjs`): pages served by the
//! test carry the script tag under a strict Content Security Policy, by a
//! nonce or by ingest's own origin; each page view, with its load time as
//! the value, is counted exactly once by a real worker, with no cookie and
//! no request to a third origin; a page of an origin not configured is
//! refused and counts nothing.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use serde_json::Value;

use crate::common::bin::{
    counted, free_addr, http_get, http_raw, metric_value, start_ingest_on, start_worker,
};
use crate::common::stats::summary;
use crate::common::*;
use crate::dashboard::{browser_tools, run_browser};

/// The nonce of the page that allows the script by its nonce.
const NONCE: &str = "n0nce-7c1f";

/// Serves the test's pages on a free port of 127.0.0.1 (its address
/// returned), for as long as the test runs: `/nonce` allows the script by
/// its nonce, `/self` and `/other` by ingest's origin; every CSP forbids
/// everything else.
fn serve_pages(ingest: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let ingest = format!("http://{ingest}");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head);
            let path = head.split(' ').nth(1).unwrap_or("/").to_string();
            let (script_src, tag) = match path.as_str() {
                "/nonce" => (
                    format!("'nonce-{NONCE}'"),
                    format!(
                        r#"<script nonce="{NONCE}" src="{ingest}/hitcount.js" async></script>"#
                    ),
                ),
                "/self" | "/other" => (
                    ingest.clone(),
                    format!(r#"<script src="{ingest}/hitcount.js" async></script>"#),
                ),
                // The browser asks for an icon: there is none, said
                // without an error.
                "/favicon.ico" => {
                    let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
                    continue;
                }
                _ => {
                    let _ = s.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    continue;
                }
            };
            let body = format!(
                "<!doctype html><html><head><title>t</title>{tag}</head><body><p>{path}</p></body></html>"
            );
            let csp = format!(
                "default-src 'none'; script-src {script_src}; connect-src {ingest}; img-src 'self'"
            );
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                 Content-Security-Policy: {csp}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_views_from_a_real_browser_count_once_with_their_load_time() {
    let browser = browser_tools();
    let srv = server();
    let url = srv.url();
    let mut admin = conn(&url).await;
    // The pages' origin is known only once they are served, and the pages
    // name ingest's address: take ingest's port first.
    let ingest_addr = free_addr();
    let pages = serve_pages(&ingest_addr);
    let port = pages.rsplit(':').next().unwrap();
    let origin = format!("http://127.0.0.1:{port}");
    let (mut ingest, addr) = start_ingest_on(&url, &ingest_addr, &["--origins", &origin]);

    // The script itself: small, JavaScript, cached long, no cookie.
    let (status, head, script) =
        http_raw(&addr, "GET /hitcount.js HTTP/1.1\r\nHost: x", b"").unwrap();
    assert_eq!(status, 200);
    assert!(script.len() < 1024, "{} bytes", script.len());
    assert!(head.contains("content-type: text/javascript"), "{head}");
    assert!(
        head.contains("cache-control: public, max-age=86400"),
        "{head}"
    );
    assert!(!head.contains("set-cookie"), "{head}");

    let plan = serde_json::json!({
        "ingest": format!("http://{addr}"),
        "pages": [
            format!("{origin}/nonce"),
            format!("{origin}/self"),
            // Another origin: the same server by another name.
            format!("http://localhost:{port}/other"),
        ],
    });
    let out = run_browser(&browser, "ingest.mjs", &plan);
    let mut values = Vec::new();
    for (i, page) in out["pages"].as_array().unwrap().iter().enumerate() {
        let beacon = &page["beacons"][0];
        assert_eq!(page["sent"], 1, "one beacon per page view: {page:#}");
        assert_eq!(page["foreign"], serde_json::json!([]), "{page:#}");
        assert_eq!(page["cookies"], 0, "{page:#}");
        assert!(
            beacon["contentType"]
                .as_str()
                .unwrap()
                .starts_with("text/plain"),
            "{page:#}"
        );
        let hit: Value = serde_json::from_str(beacon["body"].as_str().unwrap()).unwrap();
        let value = hit["value"]
            .as_f64()
            .unwrap_or_else(|| panic!("a load time: {hit}"));
        assert!(value > 0.0 && value < 30_000.0, "{hit}");
        if i < 2 {
            // Under the strict CSP: no violation, no error; accepted.
            assert_eq!(page["errors"], serde_json::json!([]), "{page:#}");
            assert_eq!(beacon["status"], 202, "{page:#}");
            values.push((hit["name"].as_str().unwrap().to_string(), value));
        } else {
            assert_eq!(hit["name"], "web:/other");
        }
    }
    assert_eq!(
        values.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["web:/nonce", "web:/self"]
    );

    // Counted once each, with its load time; the other origin not at all.
    let listen = free_addr();
    let _worker = start_worker(&url, "w", &listen, &[]);
    eventually!(60, "both page views counted", {
        counted(&mut admin, "web:/nonce").await + counted(&mut admin, "web:/self").await == 2
    });
    std::thread::sleep(Duration::from_secs(1));
    for (name, value) in &values {
        assert_eq!(counted(&mut admin, name).await, 1, "{name}");
        let stats = summary(&mut admin, name).await;
        assert_eq!(stats, (1.0, *value, *value, *value), "{name}");
    }
    assert_eq!(counted(&mut admin, "web:/other").await, 0);
    let (_, metrics) = http_get(&addr, "/metrics").unwrap();
    let refused = metric_value(&metrics, "hitcount_ingest_requests_total{code=\"403\"}");
    assert_eq!(refused, Some(1.0), "the other origin's beacon refused");
    assert!(ingest.terminate(Duration::from_secs(15)).success());
}
