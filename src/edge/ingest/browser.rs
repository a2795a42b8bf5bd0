//! What `ingest` gives browsers: CORS for the configured origins only
//! (`HITCOUNT_INGEST_ORIGINS`: a preflight's answer, and the headers of
//! every answer to a page), and `/hitcount.js`, the script that counts a
//! page view.
//!
//! The script (`hitcount.js`, under 1 KB) sends one hit when the page has
//! loaded: `{"name": PREFIX + location.pathname, "value": load time in ms}`
//! (the value only when the browser measured it), by
//! `navigator.sendBeacon` (a `text/plain` body, so no preflight) to
//! `/api/v1/hits` on the origin it was loaded from. It sets no cookie,
//! reads none, and talks to nothing else. It runs under a strict CSP
//! either from its own origin (`script-src` naming ingest's origin) or
//! with a `nonce` on its tag; `connect-src` must name ingest's origin.

use hyper::header::{
    HeaderName, HeaderValue, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_MAX_AGE, CACHE_CONTROL, VARY,
};
use hyper::StatusCode;

use crate::edge::server::{self, Resp};

/// The script's source; `PREFIX` stands for the browser prefix, a JSON
/// string.
const SCRIPT: &str = include_str!("hitcount.js");

/// How long browsers and proxies may keep the script: a day (a changed
/// prefix reaches every page within it).
const SCRIPT_CACHE: &str = "public, max-age=86400";

/// How long a browser may keep a preflight's answer: a day.
const PREFLIGHT_MAX_AGE: &str = "86400";

/// The origins pages may send hits from, and the script they load.
pub(super) struct Browsers {
    origins: Vec<String>,
    script: String,
}

impl Browsers {
    /// For `origins` (exact, e.g. `https://example.com`), names under
    /// `prefix`.
    pub(super) fn new(origins: &[String], prefix: &str) -> Browsers {
        let quoted = serde_json::to_string(prefix).expect("a string is JSON");
        Browsers {
            origins: origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_owned())
                .collect(),
            script: SCRIPT.replacen("PREFIX", &quoted, 1),
        }
    }

    /// Whether a page of `origin` may send hits.
    pub(super) fn allows(&self, origin: &str) -> bool {
        self.origins.iter().any(|o| o == origin)
    }

    /// `/hitcount.js`: the script, cacheable for a day.
    pub(super) fn script(&self) -> Resp {
        let resp = server::respond(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            self.script.clone(),
        );
        let resp = server::with_header(resp, CACHE_CONTROL, SCRIPT_CACHE);
        // Pages that isolate themselves (COEP) may load it from ingest's origin.
        let corp = HeaderName::from_static("cross-origin-resource-policy");
        server::with_header(resp, corp, "cross-origin")
    }

    /// The answer to a preflight (`OPTIONS`) from `origin`: 204 with what
    /// it may send when allowed, else 403 without any CORS header.
    pub(super) fn preflight(&self, origin: &str) -> Resp {
        if !self.allows(origin) {
            return super::error(StatusCode::FORBIDDEN, "this origin may not send hits");
        }
        let mut resp = server::respond(StatusCode::NO_CONTENT, super::JSON, "");
        for (name, value) in [
            (ACCESS_CONTROL_ALLOW_METHODS, "POST"),
            (ACCESS_CONTROL_ALLOW_HEADERS, "content-type"),
            (ACCESS_CONTROL_MAX_AGE, PREFLIGHT_MAX_AGE),
        ] {
            resp = server::with_header(resp, name, value);
        }
        allow(resp, origin)
    }
}

/// `resp` readable by a page of `origin` (which was allowed).
pub(super) fn allow(mut resp: Resp, origin: &str) -> Resp {
    if let Ok(value) = HeaderValue::from_str(origin) {
        resp.headers_mut()
            .insert(ACCESS_CONTROL_ALLOW_ORIGIN, value);
    }
    server::with_header(resp, VARY, "origin")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_is_small_and_carries_the_prefix() {
        let b = Browsers::new(&["https://a.example/".into()], "web:\"x");
        assert!(b.script.len() < 1024, "{} bytes", b.script.len());
        assert!(
            b.script.contains(r#"name: "web:\"x" + location.pathname"#),
            "{}",
            b.script
        );
        assert!(!b.script.contains("PREFIX"));
        assert!(!b.script.contains("cookie"));
        assert!(b.allows("https://a.example"));
        assert!(!b.allows("https://a.example.evil"));
        assert!(!b.allows("http://a.example"));
        let resp = b.script();
        assert_eq!(resp.headers()[CACHE_CONTROL], SCRIPT_CACHE);
        assert_eq!(
            resp.headers()[hyper::header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
    }

    #[test]
    fn preflights() {
        let b = Browsers::new(&["https://a.example".into()], "web:");
        let ok = b.preflight("https://a.example");
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
        assert_eq!(
            ok.headers()[ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://a.example"
        );
        assert_eq!(ok.headers()[ACCESS_CONTROL_ALLOW_METHODS], "POST");
        for refused in ["https://b.example", "null"] {
            let resp = b.preflight(refused);
            assert_eq!(resp.status(), StatusCode::FORBIDDEN);
            assert!(!resp.headers().contains_key(ACCESS_CONTROL_ALLOW_ORIGIN));
        }
    }
}
