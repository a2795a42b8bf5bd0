//! `POST /api/v1/read`: Prometheus' remote read over the counters and
//! their statistics, so that a Prometheus server configured with
//! `remote_read` (and `read_recent: true`) runs PromQL, recording rules
//! and alerts over them. The body is a snappy (block format) compressed
//! protobuf `ReadRequest` ([`prompb`]); the answer a `ReadResponse` of
//! samples, `Content-Type: application/x-protobuf`, `Content-Encoding:
//! snappy`, one result per query in order.
//!
//! The series (`hitcount_hits`, `hitcount_value_*`, `hitcount_value`,
//! labelled `name`, `precision` and `quantile`), the matchers and what a
//! read costs Redis are documented once, for users, in docs/prometheus.md.
//! In short: one sample per bucket at its start, a 0 in every empty bucket
//! the precision keeps within the range ([`series`], so that Prometheus'
//! lookback never carries a count into an empty bucket); names listed from
//! `known:` and `stats:known:` only in the range of the name matchers'
//! literal prefix ([`select`], regexes read as PromQL's, [`re2`]); then
//! each hash read whole in HSCAN pages
//! ([`crate::store::hashes`]). Read commands
//! only, so `serve`'s read-only user runs it, with a key prefix and on a
//! Redis Cluster alike.
//!
//! # Limits
//!
//! A body over [`MAX_BODY`] bytes (or [`MAX_DECODED`] once decompressed)
//! is a 413; one that does not decode a 400 with the reason, and so is one
//! of more than [`MAX_MATCHERS`] queries or label matchers, or with a regex
//! too big to compile within `select::REGEX_BYTES`. A read whose
//! queries match more than [`select::MAX_SERIES`] series in all, or list
//! more than [`select::MAX_LISTED`] names, is refused with a 400 before
//! any hash is read (names are listed no further than the limits), and so
//! is one that would answer more than [`MAX_SAMPLES`] samples. Prometheus shows such a refusal to its user as a warning
//! beside an empty result. Errors are one line of plain text.

pub(crate) mod prompb;
mod re2;
pub(crate) mod select;
pub(crate) mod series;

use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_ENCODING};
use hyper::{Method, Request, StatusCode};
use prost::Message as _;

use super::{Api, Failure};
use crate::edge::body::{self, BodyError};
use crate::edge::server::{self, Resp};
use crate::model::keys::Family;
use prompb::{QueryResult, ReadRequest, ReadResponse};
use select::{Budget, Selected, Selector};
use series::Span;

/// Its path.
pub(crate) const PATH: &str = "/api/v1/read";
/// Largest request body, compressed: a ReadRequest is a few hundred bytes
/// per query.
pub(crate) const MAX_BODY: usize = 1024 * 1024;
/// Largest request once decompressed.
pub(crate) const MAX_DECODED: usize = 8 * 1024 * 1024;
/// Most label matchers one read may hold, all its queries together
/// (Prometheus sends one query a read, with a few).
pub(crate) const MAX_MATCHERS: usize = 64;
/// Most hash fields one read may read, all its hashes together (a read
/// holds about 100 bytes a field while it parses them): a counter holds a
/// field a bucket, statistics a few dozen, histograms included.
pub(crate) const MAX_FIELDS: u64 = 10_000_000;
/// Most samples one read may answer (about 60 MB before compression).
pub(crate) const MAX_SAMPLES: u64 = 5_000_000;
/// Time allowed for the body to arrive once the headers have.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// The answer to a request for [`PATH`].
pub(super) async fn answer(api: &Api, req: Request<Incoming>) -> Resp {
    if req.method() != Method::POST {
        let resp = text(StatusCode::METHOD_NOT_ALLOWED, "only POST");
        return server::with_header(resp, ALLOW, "POST");
    }
    match read(api, req).await {
        Ok(body) => {
            let resp = server::respond(StatusCode::OK, "application/x-protobuf", body);
            server::with_header(resp, CONTENT_ENCODING, "snappy")
        }
        Err(failure) => {
            let (status, why) = failure.status(api).await;
            text(status, &why)
        }
    }
}

/// The request read, answered, and the answer encoded.
async fn read(api: &Api, req: Request<Incoming>) -> Result<Vec<u8>, Failure> {
    // Without a budget: a read's body is small, and serve's connections few.
    let (body, _) = body::read_body(req.into_body(), MAX_BODY, BODY_DEADLINE, None)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => Failure::TooLarge(format!(
                "the body is over {MAX_BODY} bytes (the limit of one read)"
            )),
            BodyError::Unreadable(why) => Failure::BadRequest(why),
            BodyError::TooSlow(why) => Failure::TooSlow(why),
            BodyError::Busy => Failure::TooSlow("other bodies held the read budget".into()),
        })?;
    let request = decode(&body)?;
    // None listed means SAMPLES, the only type answered here.
    let types = &request.accepted_response_types;
    if !types.is_empty() && !types.contains(&0) {
        return Err(Failure::BadRequest(format!(
            "none of the accepted response types {types:?} is served: only SAMPLES (0) is"
        )));
    }
    let matchers: usize = request.queries.iter().map(|q| q.matchers.len()).sum();
    if matchers > MAX_MATCHERS || request.queries.len() > MAX_MATCHERS {
        return Err(Failure::BadRequest(format!(
            "{} queries with {matchers} label matchers: one read may hold at most \
             {MAX_MATCHERS} of each",
            request.queries.len()
        )));
    }
    let _compiled = api.turns.matchers(matchers as u32).await?;
    let now = crate::model::clock::unix_ms().div_euclid(1000);
    let mut conn = api.conn().await?;
    // Every query's series first, so that a read over the limit reads no
    // hash at all.
    let mut budget = Budget::new();
    let mut queries = Vec::with_capacity(request.queries.len());
    for q in &request.queries {
        let span = Span {
            start_ms: q.start_timestamp_ms,
            end_ms: q.end_timestamp_ms,
            now,
            samples: api.samples,
        };
        let mut selector = Selector::new(&q.matchers, &api.precisions, &api.quantile_precisions)?;
        selector.keep_precisions(|p| !span.ends_before_kept(p));
        queries.push((span, selector));
    }
    let selectors: Vec<&Selector> = queries.iter().map(|(_, s)| s).collect();
    select::refuse_long_listings(&mut conn, &api.keys, &selectors, &budget).await?;
    let mut selected: Vec<(Span, Vec<Selected>)> = Vec::new();
    for (span, selector) in queries {
        let series = select::select(&mut conn, &api.keys, &selector, &mut budget).await?;
        selected.push((span, series));
    }
    let samples: u64 = selected
        .iter()
        .flat_map(|(span, series)| series.iter().map(move |s| (span, s)))
        .map(|(span, s)| span.kept_count(s.precision) * s.metrics.len() as u64)
        .sum();
    if samples > MAX_SAMPLES {
        return Err(Failure::BadRequest(format!(
            "about {samples} samples match, more than {MAX_SAMPLES} (the limit of one read): \
             narrow the time range or the matchers"
        )));
    }
    // A read that waits longer is answered 429, not cut off by the
    // connection's lifetime. (The semaphore is never closed.)
    let _turn = api.turns.samples(samples).await?;
    // What the hashes hold, whatever the range asks: a hash of a million
    // buckets is read whole for a minute of them. Large reads take turns
    // with the API's reads of large hashes.
    let hashes: Vec<String> = selected
        .iter()
        .flat_map(|(_, series)| series.iter())
        .map(|s| match s.family {
            Family::Counts => api.keys.count(s.precision, &s.name),
            Family::Stats => api.keys.stats(s.precision, &s.name),
        })
        .collect();
    let fields = crate::store::hashes::len_all(&mut conn, &hashes).await?;
    if fields > MAX_FIELDS {
        return Err(Failure::BadRequest(format!(
            "the matching hashes hold {fields} fields, more than {MAX_FIELDS} (the limit of \
             one read, whatever its time range): narrow the matchers"
        )));
    }
    let _fields = api.turns.fields(fields).await?;
    let mut results = Vec::with_capacity(selected.len());
    for (span, series) in &selected {
        let timeseries = series::read(&mut conn, &api.keys, series, span).await?;
        results.push(QueryResult { timeseries });
    }
    let encoded = ReadResponse { results }.encode_to_vec();
    snap::raw::Encoder::new()
        .compress_vec(&encoded)
        .map_err(|e| Failure::BadRequest(format!("the answer does not compress: {e}")))
}

/// The `ReadRequest` in a snappy block.
fn decode(body: &[u8]) -> Result<ReadRequest, Failure> {
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        Failure::BadRequest(format!("{what}: {e}").replace('\n', " "))
    };
    let len = match snap::raw::decompress_len(body) {
        // A length beyond what snappy allows is over the limit too.
        Err(snap::Error::TooBig { given, .. }) => given as usize,
        len => len.map_err(|e| bad("not a snappy block", &e))?,
    };
    if len > MAX_DECODED {
        return Err(Failure::TooLarge(format!(
            "the body decompresses to {len} bytes, over {MAX_DECODED} (the limit of one read)"
        )));
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| bad("not a snappy block", &e))?;
    ReadRequest::decode(raw.as_slice()).map_err(|e| bad("not a protobuf ReadRequest", &e))
}

/// A refusal in one line of plain text, which Prometheus shows its user.
fn text(status: StatusCode, why: &str) -> Resp {
    server::respond(status, "text/plain; charset=utf-8", format!("{why}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(body: &[u8]) -> String {
        match decode(body) {
            Err(Failure::BadRequest(why)) => format!("400 {why}"),
            Err(Failure::TooLarge(why)) => format!("413 {why}"),
            Ok(r) => format!("ok {r:?}"),
            Err(_) => "other".into(),
        }
    }

    #[test]
    fn a_request_reads_back_and_bad_bodies_say_why() {
        let request = ReadRequest {
            queries: vec![prompb::Query {
                start_timestamp_ms: 1,
                end_timestamp_ms: 2,
                matchers: vec![prompb::LabelMatcher {
                    r#type: prompb::MatchType::Re as i32,
                    name: "name".into(),
                    value: "page:.*".into(),
                }],
            }],
            accepted_response_types: vec![0],
        };
        let body = snap::raw::Encoder::new()
            .compress_vec(&request.encode_to_vec())
            .unwrap();
        assert_eq!(decode(&body).ok(), Some(request));
        assert!(
            failure(b"").starts_with("400 not a snappy block"),
            "{}",
            failure(b"")
        );
        // A block announcing 100 MiB (its length is a varint up front).
        let huge = [0x80, 0x80, 0x80, 0x32, 0x00];
        assert!(failure(&huge).starts_with("413 "), "{}", failure(&huge));
        // And one announcing 4 GiB, more than snappy itself allows.
        let beyond = [0x80, 0x80, 0x80, 0x80, 0x10, 0x00];
        assert!(failure(&beyond).starts_with("413 "), "{}", failure(&beyond));
        let junk = snap::raw::Encoder::new()
            .compress_vec(b"\xff\xff\xff")
            .unwrap();
        assert!(
            failure(&junk).starts_with("400 not a protobuf"),
            "{}",
            failure(&junk)
        );
    }
}
