//! `hitcount serve`'s read-only JSON API and the dashboard page on it
//! ([`assets`]: every path outside `/api/`), on the hardened loop of
//! [`crate::edge::server`]:
//!
//! - `GET /api/v1/counters?prefix=&after=&limit=`: names in name order,
//!   each with its precisions, paged ([`crate::store::query::list`]);
//! - `GET /api/v1/counters/{name}?precision=&from=&until=`: a counter's
//!   samples ([`crate::store::query::samples`]), and whether the name has
//!   statistics at that precision (`stats`), so a page asks for them only
//!   then;
//! - `GET /api/v1/top?precision=&bucket=&limit=&by=`: a bucket's ranking
//!   by count (the default) or, `by=mean`, by the mean of its statistics
//!   (the slowest names), from [`crate::service::ranking`] (at most 5 s
//!   stale). As `hitcount top`: any configured precision, 3600 unless
//!   given; `bucket` the start of a bucket kept ([`params::top_bucket`]),
//!   the current one unless given. Scans are bounded: beyond, a 429 with
//!   `Retry-After`;
//! - `GET /api/v1/stats?prefix=&after=&limit=`: the names with statistics,
//!   as `/api/v1/counters` lists counters;
//! - `GET /api/v1/stats/{name}?precision=&from=&until=`: a name's
//!   statistics per bucket ([`stats`]).
//!
//! Bad input is a 400 (or 404) with `{"error": "…"}`, never a 500; a
//! ranking scan refused is a 429; Redis out of reach is a 503. Every answer is JSON, never cached or sniffed, and
//! forbids any active content.

pub(crate) mod assets;
pub(crate) mod params;
pub(crate) mod remote_read;
pub(crate) mod stats;
pub(crate) mod top;
mod turn;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_SECURITY_POLICY, RETRY_AFTER};
use hyper::{Request, StatusCode};
use redis::RedisError;
use serde::Serialize;
use tokio::net::TcpListener;

use crate::edge::server::{self, Limits, Resp};
use crate::model::config::{LayoutArgs, StreamArgs};
use crate::model::keys::{Family, Keys};
use crate::service::ranking::{RankError, Rankings, KEEP};
use crate::store::connect::{Client, Conn, ErrorClass};
use crate::store::query;
use params::{decode, Query};
use turn::Turns;

const JSON: &str = "application/json; charset=utf-8";
/// Names per page of `/api/v1/counters` and `/api/v1/top` unless `limit`.
pub(crate) const DEFAULT_LIMIT: usize = 100;
/// Largest `limit`.
pub(crate) const MAX_LIMIT: usize = KEEP;
/// Precision of `/api/v1/top` unless `precision` (`hitcount top`'s default).
pub(crate) const TOP_DEFAULT_PRECISION: u32 = 3600;
/// Time allowed for one Redis reply.
const REDIS_TIMEOUT: Duration = Duration::from_secs(5);

/// What the API reads and how.
pub(crate) struct Api {
    client: Client,
    conn: tokio::sync::Mutex<Option<Conn>>,
    keys: Keys,
    precisions: Vec<u32>,
    /// Samples kept per counter: how far back `top` may ask.
    samples: u32,
    /// The precisions whose statistics keep a quantile histogram.
    quantile_precisions: Vec<u32>,
    rankings: Rankings,
    /// What the requests under way may read at once.
    turns: Turns,
}

impl Api {
    /// The API over the counters of `layout` (its precisions sorted; older
    /// buckets than its `--samples` keep are not ranked), read through
    /// `client` (connected on first use, again after a connection error).
    pub(crate) fn new(client: Client, layout: &LayoutArgs) -> Api {
        let keys = Keys::new(layout, &StreamArgs::default());
        Api {
            client,
            conn: tokio::sync::Mutex::new(None),
            rankings: Rankings::new(keys.clone()),
            keys,
            precisions: layout.precisions.clone(),
            samples: layout.samples.max(1),
            quantile_precisions: layout.quantile_precisions(),
            turns: Turns::new(),
        }
    }

    async fn conn(&self) -> Result<Conn, RedisError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = self.client.open(REDIS_TIMEOUT).await?;
        Ok(slot.insert(c).clone())
    }

    /// Connects and reads what every page of the API reads (the first name
    /// of each family, at every precision): at start, so that a wrong
    /// password, a URL that is no Redis or a permission the user lacks
    /// stops `serve` with one line instead of failing every request; and
    /// warns when `known:` holds counters at precisions it does not read.
    pub(crate) async fn check(&self) -> Result<(), RedisError> {
        let mut conn = self.conn().await?;
        for family in [Family::Counts, Family::Stats] {
            query::list(&mut conn, &self.keys, family, &self.precisions, "", None, 1).await?;
        }
        // Counters at precisions this serve does not read: its settings
        // are not the workers' (a Redis before 6.2 cannot tell).
        if let Ok(found) = query::sampled_precisions(&mut conn, &self.keys).await {
            let unread: Vec<u32> = (found.into_iter())
                .filter(|p| !self.precisions.contains(p))
                .collect();
            if !unread.is_empty() {
                tracing::warn!(?unread, configured = ?self.precisions,
                    "known: lists counters at precisions this serve does not read: give it the \
                     workers' HITCOUNT_PRECISIONS (and HITCOUNT_SAMPLES, HITCOUNT_PREFIX)");
            }
        }
        Ok(())
    }
}

/// Serves the API on `listener` within the default [`Limits`] until
/// `shutdown`.
pub(crate) async fn serve(
    listener: TcpListener,
    api: Api,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let api = Arc::new(api);
    server::run(listener, Limits::default(), shutdown, move |req| {
        let api = api.clone();
        async move { handle(&api, req).await }
    })
    .await
}

/// Why a request got no answer.
#[derive(Debug)]
enum Failure {
    BadRequest(String),
    /// A body over the limits (413).
    TooLarge(String),
    /// A body that did not arrive in time (408).
    TooSlow(String),
    NotFound(String),
    /// Ask again after `retry` (429).
    Busy {
        why: String,
        retry: Duration,
    },
    Redis(RedisError),
}

impl Failure {
    /// The status of the answer and its one-line reason; a failure of
    /// Redis' is logged, and after one that was not Redis' answer the
    /// connection (it may be broken) is forgotten, so the next request
    /// connects again.
    async fn status(self, api: &Api) -> (StatusCode, String) {
        let e = match self {
            Failure::BadRequest(why) => return (StatusCode::BAD_REQUEST, why),
            Failure::TooLarge(why) => return (StatusCode::PAYLOAD_TOO_LARGE, why),
            Failure::TooSlow(why) => return (StatusCode::REQUEST_TIMEOUT, why),
            Failure::NotFound(why) => return (StatusCode::NOT_FOUND, why),
            Failure::Busy { why, .. } => return (StatusCode::TOO_MANY_REQUESTS, why),
            Failure::Redis(e) => e,
        };
        if e.code().is_none() {
            *api.conn.lock().await = None;
        }
        if crate::store::connect::classify(&e).0 == ErrorClass::Fatal {
            // Redis answers but refuses (an ACL changed since the start):
            // not an outage, and no retry helps.
            tracing::error!(error = %crate::store::connect::describe(&e),
                hint = crate::store::connect::fatal_hint(&e).unwrap_or(""),
                "query API: Redis refused the query");
            let why = "Redis refused the query (see the server's log)";
            return (StatusCode::INTERNAL_SERVER_ERROR, why.into());
        }
        tracing::warn!(error = %e, "query API: Redis failed");
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "Redis is unavailable".into(),
        )
    }
}

impl From<RankError> for Failure {
    fn from(e: RankError) -> Failure {
        match e {
            RankError::Busy(wait) => {
                let secs = wait.as_secs().max(1);
                let why = format!(
                    "too many rankings asked: one scan at a time, {} a minute; retry in {secs} s",
                    crate::service::ranking::SCANS_PER_MINUTE
                );
                Failure::Busy { why, retry: wait }
            }
            RankError::Redis(e) => Failure::Redis(e),
        }
    }
}

impl From<RedisError> for Failure {
    fn from(e: RedisError) -> Failure {
        Failure::Redis(e)
    }
}

impl From<String> for Failure {
    fn from(reason: String) -> Failure {
        Failure::BadRequest(reason)
    }
}

enum Route<'a> {
    List(Family),
    Counter(&'a str),
    Stats(&'a str),
    Top,
}

fn route(path: &str) -> Option<Route<'_>> {
    match path.strip_prefix("/api/v1/")? {
        "counters" => Some(Route::List(Family::Counts)),
        "stats" => Some(Route::List(Family::Stats)),
        "top" => Some(Route::Top),
        rest => match rest.split_once('/')? {
            ("counters", name) => Some(Route::Counter(name)),
            ("stats", name) => Some(Route::Stats(name)),
            _ => None,
        },
    }
}

async fn handle(api: &Api, req: Request<Incoming>) -> Resp {
    let path = req.uri().path();
    if path == remote_read::PATH {
        return forbid_content(remote_read::answer(api, req).await);
    }
    if !path.starts_with("/api/") {
        return assets::answer(req.method(), path);
    }
    let Some(route) = route(path) else {
        return error(StatusCode::NOT_FOUND, "no such path");
    };
    if !server::allowed(req.method()) {
        return forbid_content(server::method_not_allowed(JSON, body("only GET and HEAD")));
    }
    let answer = async {
        let query = Query::parse(req.uri().query())?;
        match route {
            Route::List(family) => list(api, family, &query).await,
            Route::Counter(raw) => counter(api, raw, &query).await,
            Route::Stats(raw) => stats::stats(api, raw, &query).await,
            Route::Top => top::top(api, &query).await,
        }
    };
    let failure = match answer.await {
        Ok(json) => return json_response(StatusCode::OK, json),
        Err(failure) => failure,
    };
    let retry = match &failure {
        Failure::Busy { retry, .. } => Some(retry.as_secs().max(1)),
        _ => None,
    };
    let (status, why) = failure.status(api).await;
    let mut resp = error(status, &why);
    if let Some(secs) = retry {
        resp.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

async fn list(api: &Api, family: Family, q: &Query) -> Result<String, Failure> {
    let limit = q.limit(DEFAULT_LIMIT, MAX_LIMIT)?;
    let mut conn = api.conn().await?;
    let page = query::list(
        &mut conn,
        &api.keys,
        family,
        &api.precisions,
        q.get("prefix").unwrap_or(""),
        q.get("after"),
        limit,
    )
    .await?;
    to_json(&page)
}

#[derive(Serialize)]
struct CounterBody<'a> {
    name: &'a str,
    precision: u32,
    samples: Vec<(i64, i64)>,
    /// Whether `/api/v1/stats/{name}` has buckets at this precision.
    stats: bool,
}

/// The checked input of `/counters/{name}` and `/stats/{name}`: the name,
/// the precision and the time range.
struct Series {
    name: String,
    precision: u32,
    from: Option<i64>,
    until: Option<i64>,
}

impl Series {
    fn parse(api: &Api, raw: &str, q: &Query, what: &str) -> Result<Series, Failure> {
        let name = decode(raw, false)?;
        let precision = q.precision(None, &api.precisions)?;
        let (from, until) = (q.int("from")?, q.int("until")?);
        if name.is_empty() {
            return Err(Failure::NotFound(format!("no such {what}")));
        }
        Ok(Series {
            name,
            precision,
            from,
            until,
        })
    }

    /// The 404 of a name without data: "no counter \"x\" at precision 60".
    fn not_found(&self, what: &str) -> Failure {
        let (name, precision) = (&self.name, self.precision);
        Failure::NotFound(format!("no {what} {name:?} at precision {precision}"))
    }
}

async fn counter(api: &Api, raw: &str, q: &Query) -> Result<String, Failure> {
    let s = Series::parse(api, raw, q, "counter")?;
    let mut conn = api.conn().await?;
    let key = api.keys.count(s.precision, &s.name);
    let turn = api.turns.whole_hash(&mut conn, &key).await?;
    let samples = query::samples(&mut conn, &api.keys, s.precision, &s.name, s.from, s.until)
        .await?
        .ok_or_else(|| s.not_found("counter"))?;
    drop(turn);
    let stats =
        crate::store::stats_query::exists(&mut conn, &api.keys, s.precision, &s.name).await?;
    to_json(&CounterBody {
        name: &s.name,
        precision: s.precision,
        samples: samples.iter().map(|s| (s.time, s.count)).collect(),
        stats,
    })
}

fn to_json(value: &impl Serialize) -> Result<String, Failure> {
    Ok(serde_json::to_string(value).expect("plain data serializes"))
}

fn body(why: &str) -> String {
    serde_json::json!({ "error": why }).to_string()
}

fn error(status: StatusCode, why: &str) -> Resp {
    json_response(status, body(why))
}

fn json_response(status: StatusCode, json: String) -> Resp {
    forbid_content(server::respond(status, JSON, json))
}

/// The API serves data only: nothing in an answer may load or run.
fn forbid_content(resp: Resp) -> Resp {
    server::with_header(resp, CONTENT_SECURITY_POLICY, "default-src 'none'")
}
