//! `GET /api/v1/top?precision=&bucket=&limit=&by=`: the names of one kept
//! bucket ([`super::params::top_bucket`]) ranked by hits or, `by=mean`, by
//! the mean value of their hits, from the serve process' cached ranking
//! ([`crate::service::ranking`]): at most one scan at a time, a bounded
//! number a minute, beyond that a 429.

use serde::Serialize;

use super::params::top_bucket;
use super::{to_json, Api, Failure, Query, DEFAULT_LIMIT, MAX_LIMIT, TOP_DEFAULT_PRECISION};
use crate::store::query::{By, Ranked};

/// The answer to `/api/v1/top`, and `hitcount top --json` (which always
/// names `by`).
#[derive(Serialize)]
pub(crate) struct TopBody<'a> {
    precision: u32,
    bucket: i64,
    /// Only with `by=mean`, so the answer by count stays as it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<&'static str>,
    counters: Vec<TopEntry<'a>>,
}

impl<'a> TopBody<'a> {
    /// The first `limit` names of `ranking`.
    pub(crate) fn new(
        precision: u32,
        bucket: i64,
        by: Option<&'static str>,
        ranking: &'a [Ranked],
        limit: usize,
    ) -> TopBody<'a> {
        let entry = |r: &'a Ranked| TopEntry {
            name: &r.name,
            mean: r.mean,
            count: r.count,
        };
        TopBody {
            precision,
            bucket,
            by,
            counters: ranking.iter().take(limit).map(entry).collect(),
        }
    }
}

#[derive(Serialize)]
struct TopEntry<'a> {
    name: &'a str,
    /// With `by=mean`: the mean value observed in the bucket.
    #[serde(skip_serializing_if = "Option::is_none")]
    mean: Option<f64>,
    /// Hits, or with `by=mean` the observations behind the mean.
    count: i64,
}

/// The answer to `/api/v1/top`.
pub(super) async fn top(api: &Api, q: &Query) -> Result<String, Failure> {
    let precision = q.precision(Some(TOP_DEFAULT_PRECISION), &api.precisions)?;
    let limit = q.limit(DEFAULT_LIMIT, MAX_LIMIT)?;
    let by: By = q.get("by").map(str::parse).transpose()?.unwrap_or_default();
    let now = crate::model::clock::unix_ms().div_euclid(1000);
    let bucket = top_bucket(q.int("bucket")?, precision, api.samples, now)?;
    // Redis out of reach: the last ranking still serves, as it does while
    // a scan computes the next.
    let ranking = match api.conn().await {
        Ok(mut conn) => {
            api.rankings
                .get(&mut conn, by, precision, bucket, now)
                .await?
        }
        Err(e) => api.rankings.last(by, precision, bucket).ok_or(e)?,
    };
    let by = (by == By::Mean).then_some("mean");
    to_json(&TopBody::new(precision, bucket, by, &ranking, limit))
}
