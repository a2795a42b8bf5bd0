//! The dashboard page of `hitcount serve`: the files of `assets/` (the
//! page, its script and style, the favicon, the 404 page and the vendored
//! uPlot), compiled into the binary with `include_bytes!` and served from a
//! fixed table of URL paths. A request path is only ever compared with that
//! table, never joined to a directory, so no path can reach another file
//! (`/static/../../etc/passwd` is simply not in the table: 404).
//!
//! Every page answer carries a Content-Security-Policy that allows only
//! this origin and no inline script or style, so the page can load nothing
//! from elsewhere; the vendored files live under a versioned path and are
//! cached for a year, the others are revalidated on every load.

use hyper::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY};
use hyper::{Method, StatusCode};

use crate::edge::server::{self, Resp};

/// The page's policy: its own origin only, no inline code, no frames.
pub(crate) const PAGE_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One file served at one URL path.
#[derive(Debug)]
pub(crate) struct Asset {
    /// The URL path it answers.
    pub url: &'static str,
    /// Its path under `assets/`: its extension gives its `Content-Type`,
    /// and the vendored files (`vendor/`, a versioned path) are kept for a
    /// year, the others asked again on every load.
    pub file: &'static str,
    /// Its bytes, compiled in.
    pub body: &'static [u8],
}

macro_rules! asset {
    ($url:literal, $file:literal) => {
        Asset {
            url: $url,
            file: $file,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/", $file)),
        }
    };
}

/// Every file of `assets/` and its URL (a unit test checks that the table
/// covers the folder: a file added there must be added here).
pub(crate) const ASSETS: &[Asset] = &[
    asset!("/", "index.html"),
    asset!("/static/app.js", "app.js"),
    asset!("/static/style.css", "style.css"),
    asset!("/favicon.svg", "favicon.svg"),
    // Asked by browsers that ignore the page's icon link.
    asset!("/favicon.ico", "favicon.svg"),
    asset!("/404", "404.html"),
    asset!(
        "/static/uplot-1.6.32/uPlot.iife.min.js",
        "vendor/uplot-1.6.32/uPlot.iife.min.js"
    ),
    asset!(
        "/static/uplot-1.6.32/uPlot.min.css",
        "vendor/uplot-1.6.32/uPlot.min.css"
    ),
    asset!(
        "/static/uplot-1.6.32/LICENSE",
        "vendor/uplot-1.6.32/LICENSE"
    ),
];

impl Asset {
    /// Its `Content-Type`, by its file's extension.
    fn content_type(&self) -> &'static str {
        match std::path::Path::new(self.file).extension() {
            Some(ext) if ext == "html" => "text/html; charset=utf-8",
            Some(ext) if ext == "js" => "text/javascript; charset=utf-8",
            Some(ext) if ext == "css" => "text/css; charset=utf-8",
            Some(ext) if ext == "svg" => "image/svg+xml",
            _ => "text/plain; charset=utf-8",
        }
    }
}

/// The file at URL `path`, if any.
pub(crate) fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.url == path)
}

/// The answer to `method path` outside the API: the file, the 404 page, or
/// 405 for a method other than GET and HEAD.
pub(crate) fn answer(method: &Method, path: &str) -> Resp {
    if !server::allowed(method) {
        let text = "text/plain; charset=utf-8";
        return secure(server::method_not_allowed(text, "only GET and HEAD\n"));
    }
    let (status, asset) = match find(path) {
        Some(a) if a.url != "/404" => (StatusCode::OK, a),
        _ => (StatusCode::NOT_FOUND, find("/404").expect("in the table")),
    };
    let resp = server::respond(status, asset.content_type(), asset.body);
    let caching = match status {
        StatusCode::OK if asset.file.starts_with("vendor/") => {
            "public, max-age=31536000, immutable"
        }
        StatusCode::OK => "no-cache",
        _ => "no-store",
    };
    secure(server::with_header(resp, CACHE_CONTROL, caching))
}

/// `resp` with the page's policy, and no referrer sent from it.
fn secure(resp: Resp) -> Resp {
    let resp = server::with_header(resp, CONTENT_SECURITY_POLICY, PAGE_CSP);
    server::with_header(resp, REFERRER_POLICY, "no-referrer")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                files(&path, out);
            } else {
                out.push(path);
            }
        }
    }

    #[test]
    fn the_table_covers_every_file_of_the_assets_folder() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
        let mut found = Vec::new();
        files(&root, &mut found);
        let mut missing = Vec::new();
        for f in found {
            let rel = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if !ASSETS.iter().any(|a| a.file == rel) {
                missing.push(rel);
            }
        }
        assert!(missing.is_empty(), "assets/ files not served: {missing:?}");
        for a in ASSETS {
            assert!(a.url.starts_with('/') && !a.url.contains(".."), "{}", a.url);
            assert!(!a.body.is_empty(), "{} is empty", a.file);
        }
    }

    #[test]
    fn each_file_has_its_content_type() {
        for (url, content_type) in [
            ("/", "text/html; charset=utf-8"),
            ("/404", "text/html; charset=utf-8"),
            ("/static/app.js", "text/javascript; charset=utf-8"),
            ("/static/style.css", "text/css; charset=utf-8"),
            ("/favicon.svg", "image/svg+xml"),
            ("/favicon.ico", "image/svg+xml"),
            (
                "/static/uplot-1.6.32/uPlot.iife.min.js",
                "text/javascript; charset=utf-8",
            ),
            (
                "/static/uplot-1.6.32/uPlot.min.css",
                "text/css; charset=utf-8",
            ),
            ("/static/uplot-1.6.32/LICENSE", "text/plain; charset=utf-8"),
        ] {
            assert_eq!(find(url).unwrap().content_type(), content_type, "{url}");
        }
        let resp = answer(&Method::GET, "/static/uplot-1.6.32/LICENSE");
        assert!(resp.headers()[CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable"));
    }

    #[test]
    fn only_the_table_is_served() {
        for path in [
            "/static/../../etc/passwd",
            "/../etc/passwd",
            "/static/",
            "/static",
            "/static/app.js/",
            "/static/%2e%2e/404.html",
            "/index.html",
            "/assets/app.js",
            "/src/lib.rs",
        ] {
            let resp = answer(&Method::GET, path);
            assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
            assert_eq!(resp.headers()[CACHE_CONTROL], "no-store", "{path}");
        }
        let resp = answer(&Method::GET, "/404");
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        let resp = answer(&Method::HEAD, "/static/app.js");
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[CACHE_CONTROL], "no-cache");
        let resp = answer(&Method::GET, "/static/uplot-1.6.32/uPlot.iife.min.js");
        assert!(resp.headers()[CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable"));
        let resp = answer(&Method::POST, "/");
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()[CONTENT_SECURITY_POLICY], PAGE_CSP);
    }

    #[test]
    fn the_page_loads_only_what_the_table_serves() {
        let page = std::str::from_utf8(find("/").unwrap().body).unwrap();
        for link in page.split(['"', '\'']).filter(|s| s.starts_with('/')) {
            let link = link.split('?').next().unwrap();
            assert!(find(link).is_some(), "index.html links {link}, not served");
        }
        assert!(!page.contains("<script>"), "no inline script");
        assert!(!page.contains("style="), "no inline style");
    }
}
