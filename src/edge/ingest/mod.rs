//! `hitcount ingest`'s HTTP side, on the hardened loop of
//! [`crate::edge::server`]: the way in for HTTP clients and browsers.
//!
//! - `POST /api/v1/hits`: one JSON hit, a JSON array of them
//!   (`application/json`, or `text/plain` as `navigator.sendBeacon` sends
//!   it) or NDJSON (`application/x-ndjson`), read by
//!   [`crate::model::event::json`]: each hit judged as the worker would.
//!   202 once Redis holds the accepted hits, with `{"accepted": N,
//!   "refused": [{"index": I, "reason": R}]}` (the first
//!   [`judge::LISTED_REFUSALS`] refusals; `"refused_unlisted": K` counts the
//!   rest; `"conflicts"` the hits whose id came with another hit before, a
//!   page's ids apart from a server's); 400 when nothing could be
//!   read (with `{"error": …}`, as every other refusal), 401 without a
//!   valid bearer token (when tokens are set; pages are governed by
//!   origins instead), 403 for a page of an origin not configured, 413
//!   over the body limit, 415 for another content type, 429 over the
//!   client's rate (with `Retry-After`), 503 when Redis cannot be reached
//!   (the client resends; ids make that harmless). A request with an
//!   `Origin` header is a page's: its hits' names must start with the
//!   browser prefix, else they are refused as `outside_prefix`;
//! - `OPTIONS /api/v1/hits`: CORS preflight, and `GET /hitcount.js`, the
//!   page-view script ([`browser`]);
//! - `/metrics`, `/healthz`, `/readyz` (Redis answers a PING);
//! - and, on `HITCOUNT_STATSD_LISTEN`, StatsD over UDP and TCP ([`statsd`]).

mod browser;
mod failed;
mod judge;
mod rate;
pub(crate) mod statsd;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::header::{
    ALLOW, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, ORIGIN, RETRY_AFTER, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, StatusCode};
use tokio::net::TcpListener;

use crate::edge::body::{self, BodyError, ReadBudget};
use crate::edge::server::{self, BodyRead, Limits, Peer, Resp};
use crate::model::event::json::{JsonHit, Layout};
use crate::model::metrics::{self, metrics};
use crate::service::ingest::{Appender, Ids};
use browser::Browsers;
use judge::Judged;
use rate::Rate;

const JSON: &str = "application/json; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";
/// Time allowed for a request's body to arrive in full: a body trickled
/// slower holds its connection no longer.
const BODY_DEADLINE: Duration = Duration::from_secs(10);
/// Time allowed for the readiness probe's PING.
const PING_DEADLINE: Duration = Duration::from_secs(2);
/// Bytes of bodies judged at once, at least (a larger `max_body` is the
/// budget then): judging a body and appending its hits holds about ten
/// times its size (its hits read), so requests beyond this wait for their
/// turn instead of growing ingest's memory with their number.
const JUDGED_BYTES: usize = 4 << 20;
/// Longest a read body waits for its turn within [`JUDGED_BYTES`], well
/// within a connection's 30 s.
const TURN_WAIT: Duration = Duration::from_secs(10);
/// Bytes of bodies read at once (beyond each one's first 64 KiB), read or
/// waiting for their turn to be judged, at least (a larger `max_body` is
/// the budget then): so that 256 connections trickling 1 MiB bodies in
/// hold at most this and 16 MiB, not 256 MiB (see [`ReadBudget`]).
const READ_BYTES: usize = 32 << 20;

/// What `ingest` is told by its settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Bearer tokens a server's request must carry one of; none: any.
    pub(crate) tokens: Vec<String>,
    /// Origins whose pages may send hits.
    pub(crate) origins: Vec<String>,
    /// What a page's hit names must start with.
    pub(crate) browser_prefix: String,
    /// Largest body, in bytes.
    pub(crate) max_body: usize,
    /// Requests a second per client address; 0: no limit.
    pub(crate) rate: u32,
}

/// Everything a request needs.
pub(crate) struct Ingest {
    settings: Settings,
    appender: Appender,
    browsers: Browsers,
    rate: Rate,
    /// Permits of [`JUDGED_BYTES`]: one per byte of a body being judged.
    judging: Arc<tokio::sync::Semaphore>,
    /// Permits of [`READ_BYTES`]: bodies being read or waiting their turn.
    reading: ReadBudget,
    stopping: AtomicBool,
}

impl Ingest {
    pub(crate) fn new(settings: Settings, appender: Appender) -> Arc<Ingest> {
        Arc::new(Ingest {
            browsers: Browsers::new(&settings.origins, &settings.browser_prefix),
            rate: Rate::new(settings.rate),
            judging: Arc::new(tokio::sync::Semaphore::new(
                settings.max_body.max(JUDGED_BYTES),
            )),
            reading: ReadBudget::new(settings.max_body.max(READ_BYTES)),
            settings,
            appender,
            stopping: AtomicBool::new(false),
        })
    }

    /// Connects and pings Redis, as the readiness probe does.
    pub(crate) async fn check(&self) -> Result<(), redis::RedisError> {
        self.appender.check().await
    }
}

/// Serves `ingest` on `listener` until `shutdown` completes; then
/// `/readyz` says so and open requests get `limits.shutdown_grace`.
pub(crate) async fn serve(
    listener: TcpListener,
    ingest: Arc<Ingest>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> std::io::Result<()> {
    let stopping = ingest.clone();
    let shutdown = async move {
        shutdown.await;
        stopping.stopping.store(true, Ordering::Relaxed);
    };
    server::run(listener, limits, shutdown, move |req| {
        let ingest = ingest.clone();
        async move {
            let start = Instant::now();
            let resp = route(req, &ingest).await;
            let m = metrics();
            m.ingest_duration.observe(start.elapsed().as_secs_f64());
            m.ingest_answer(resp.status().as_u16());
            resp
        }
    })
    .await
}

/// Routes one request.
async fn route(req: Request<Incoming>, ingest: &Ingest) -> Resp {
    let path = req.uri().path();
    if path == "/api/v1/hits" {
        let resp = match (req.method(), header(&req, ORIGIN)) {
            (&Method::POST, _) => return hits(req, ingest).await,
            (&Method::OPTIONS, Some(origin)) => return ingest.browsers.preflight(origin),
            // Without an `Origin` it is no preflight, only a question.
            (&Method::OPTIONS, None) => server::respond(StatusCode::NO_CONTENT, JSON, ""),
            _ => error(StatusCode::METHOD_NOT_ALLOWED, "only POST (and OPTIONS)"),
        };
        // Which methods the hits' path takes.
        return server::with_header(resp, ALLOW, "POST, OPTIONS");
    }
    if !matches!(path, "/hitcount.js" | "/metrics" | "/healthz" | "/readyz") {
        return error(StatusCode::NOT_FOUND, "not found");
    }
    if !server::allowed(req.method()) {
        return server::method_not_allowed(JSON, r#"{"error":"only GET and HEAD"}"#);
    }
    match path {
        "/hitcount.js" => ingest.browsers.script(),
        "/metrics" => server::respond(StatusCode::OK, metrics::CONTENT_TYPE, metrics::render()),
        "/healthz" => server::respond(StatusCode::OK, TEXT, "ok\n"),
        _ => match readiness_problem(ingest).await {
            None => server::respond(StatusCode::OK, TEXT, "ok\n"),
            Some(problem) => server::respond(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!("not ready: {problem}\n"),
            ),
        },
    }
}

/// Why ingest is not ready (`/readyz`): stopping, or Redis does not answer
/// a PING within [`PING_DEADLINE`].
async fn readiness_problem(ingest: &Ingest) -> Option<String> {
    if ingest.stopping.load(Ordering::Relaxed) {
        return Some("stopping".into());
    }
    match tokio::time::timeout(PING_DEADLINE, ingest.check()).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("Redis: {}", crate::store::connect::first_cause(&e))),
        Err(_) => Some(format!("Redis did not answer within {PING_DEADLINE:?}")),
    }
}

/// `POST /api/v1/hits`: checks in order rate, origin or token, content
/// type, body; then the hits.
async fn hits(req: Request<Incoming>, ingest: &Ingest) -> Resp {
    let settings = &ingest.settings;
    if let Some(Peer(client)) = req.extensions().get::<Peer>().copied() {
        if let Err(wait) = ingest.rate.take(client, Instant::now()) {
            let why = format!("over {} requests a second from this address", settings.rate);
            let mut resp = error(StatusCode::TOO_MANY_REQUESTS, &why);
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            resp.headers_mut().insert(RETRY_AFTER, secs.into());
            return resp;
        }
    }
    let origin = header(&req, ORIGIN).map(str::to_owned);
    match &origin {
        Some(o) if !ingest.browsers.allows(o) => {
            return error(StatusCode::FORBIDDEN, "this origin may not send hits");
        }
        Some(_) => {}
        None if !authorized(&req, &settings.tokens) => {
            let resp = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
            return server::with_header(resp, WWW_AUTHENTICATE, "Bearer");
        }
        None => {}
    }
    // A compressed body would be judged as bad JSON: say what is wrong.
    let encoded = req
        .headers()
        .get(CONTENT_ENCODING)
        .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
    let unsupported = |why| error(StatusCode::UNSUPPORTED_MEDIA_TYPE, why);
    let resp = match layout(header(&req, CONTENT_TYPE)) {
        _ if encoded => unsupported("Content-Encoding is not taken: send the body uncompressed"),
        Some(layout) => read(req, layout, origin.is_some(), ingest).await,
        None => unsupported("send application/json, application/x-ndjson or text/plain"),
    };
    match &origin {
        Some(o) => browser::allow(resp, o),
        None => resp,
    }
}

/// The body read, its hits judged and the accepted ones appended.
async fn read(req: Request<Incoming>, layout: Layout, page: bool, ingest: &Ingest) -> Resp {
    let max = ingest.settings.max_body;
    let reading = Some(&ingest.reading);
    let (body, read) = match body::read_body(req.into_body(), max, BODY_DEADLINE, reading).await {
        Ok(read) => read,
        Err(BodyError::TooLarge) => {
            let why = format!("the body is over {max} bytes (HITCOUNT_INGEST_MAX_BODY)");
            return error(StatusCode::PAYLOAD_TOO_LARGE, &why);
        }
        Err(BodyError::Unreadable(why)) => return error(StatusCode::BAD_REQUEST, &why),
        Err(BodyError::TooSlow(why)) => return error(StatusCode::REQUEST_TIMEOUT, &why),
        Err(BodyError::Busy) => return send_again("busy reading other bodies: send again"),
    };
    // Within the budget (a read body takes no permit while it trickles in).
    let bytes = body.len().clamp(1, max.max(JUDGED_BYTES)) as u32;
    // A body that waits longer is answered 503 (send again), not cut off
    // by the connection's lifetime. (The semaphore is never closed.)
    let turn = ingest.judging.clone().acquire_many_owned(bytes);
    let Ok(Ok(turn)) = tokio::time::timeout(TURN_WAIT, turn).await else {
        return send_again("busy judging other bodies: send again");
    };
    // Its bytes now count against the judging's budget.
    drop(read);
    // A UTF-8 byte order mark (some Windows tools write one) is no JSON.
    let body = match body.starts_with(b"\xEF\xBB\xBF") {
        true => body.slice(3..),
        false => body,
    };
    let mut resp = if body.trim_ascii().is_empty() && layout == Layout::Json {
        let why = "body is not a JSON hit or array of hits: it is empty (without \
                   Content-Length or chunks a request sends none)";
        error(StatusCode::BAD_REQUEST, why)
    } else {
        let prefix = page.then(|| ingest.settings.browser_prefix.clone());
        // The turn is held until the judging ends, even if this request is
        // dropped meanwhile, and then until the hits are appended.
        let (_turn, judged) = judge::judge(body, layout, prefix, turn).await;
        match judged {
            Ok(judged) => append(judged, page, ingest).await,
            Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        }
    };
    resp.extensions_mut().insert(BodyRead);
    resp
}

/// Appends a judged body's accepted hits (a page's ids apart from the
/// servers'); the answer.
async fn append(mut judged: Judged, page: bool, ingest: &Ingest) -> Resp {
    // Counted once the body is known to be read.
    for (reason, n) in judged.reasons {
        metrics().ingest_refusals(reason, n);
    }
    let accepted: Vec<&JsonHit> = judged.accepted.iter().collect();
    if !accepted.is_empty() {
        let ids = if page { Ids::Page } else { Ids::Server };
        let (taken, done, failed) = match ingest.appender.append(&accepted, ids).await {
            Ok(done) => (accepted.len() as u64, done, None),
            Err(f) => (f.taken, f.done, Some(f.error)),
        };
        let m = metrics();
        m.ingest_accepted.inc_by(taken);
        m.ingest_duplicates.inc_by(taken - done.appended);
        m.ingest_conflicts.inc_by(done.conflicts.len() as u64);
        match failed {
            Some(e) => return failed::redis_failed(&e, taken, accepted.len()),
            None => failed::took_hits(),
        }
        judged.answer.conflicts(&done.conflicts, &judged.at);
    }
    let body = serde_json::to_string(&judged.answer).expect("the answer is JSON");
    server::respond(StatusCode::ACCEPTED, JSON, body)
}

/// 503 with `Retry-After: 1`: the client sends the request again.
fn send_again(why: &str) -> Resp {
    let resp = error(StatusCode::SERVICE_UNAVAILABLE, why);
    server::with_header(resp, RETRY_AFTER, "1")
}

/// How a content type lays out hits; `None` for one not taken.
fn layout(content_type: Option<&str>) -> Option<Layout> {
    let media = content_type?.split(';').next()?.trim().to_ascii_lowercase();
    match media.as_str() {
        "application/json" | "text/plain" => Some(Layout::Json),
        "application/x-ndjson" => Some(Layout::Ndjson),
        _ => None,
    }
}

/// Whether the request carries one of `tokens` as its bearer token (any
/// request does when there are none).
fn authorized(req: &Request<Incoming>, tokens: &[String]) -> bool {
    if tokens.is_empty() {
        return true;
    }
    // The scheme's name is case-insensitive (RFC 9110).
    let given = header(req, AUTHORIZATION)
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token);
    given.is_some_and(|given| {
        tokens
            .iter()
            .any(|t| same(t.as_bytes(), given.trim().as_bytes()))
    })
}

/// Byte equality in a time that depends on the lengths only, so a token
/// cannot be guessed a byte at a time from the answers' timing.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn header(req: &Request<Incoming>, name: hyper::header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// A refusal: `{"error": why}`.
fn error(status: StatusCode, why: &str) -> Resp {
    let body = serde_json::json!({ "error": why }).to_string();
    server::respond(status, JSON, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(layout(Some("application/json")), Some(Layout::Json));
        assert_eq!(
            layout(Some("Application/JSON; charset=utf-8")),
            Some(Layout::Json)
        );
        assert_eq!(layout(Some("text/plain;charset=UTF-8")), Some(Layout::Json));
        assert_eq!(layout(Some("application/x-ndjson")), Some(Layout::Ndjson));
        for bad in [
            None,
            Some(""),
            Some("application/xml"),
            Some("multipart/form-data"),
        ] {
            assert_eq!(layout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
