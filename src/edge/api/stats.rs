//! `GET /api/v1/stats/{name}?precision=&from=&until=`: a name's statistics
//! per bucket, oldest first, as [`crate::model::stats_hash::Row`]s: `t`
//! (the bucket start), `count`, `mean`, `min`, `max`, `stddev` and `p50`,
//! `p90`, `p99` (`null` at a precision that keeps no histogram). A name
//! without statistics at that precision is a 404; malformed fields are
//! left out of the answer (and logged at DEBUG), never a 500.

use serde::Serialize;

use super::{to_json, Api, Failure, Query, Series};
use crate::model::stats_hash::Row;
use crate::store::stats_query;

#[derive(Serialize)]
struct StatsBody<'a> {
    name: &'a str,
    precision: u32,
    buckets: Vec<Row>,
}

/// The answer to `/api/v1/stats/{raw}`.
pub(super) async fn stats(api: &Api, raw: &str, q: &Query) -> Result<String, Failure> {
    let s = Series::parse(api, raw, q, "statistics")?;
    let mut conn = api.conn().await?;
    let key = api.keys.stats(s.precision, &s.name);
    let _turn = api.turns.whole_hash(&mut conn, &key).await?;
    let stats = stats_query::read(&mut conn, &api.keys, s.precision, &s.name, s.from, s.until)
        .await?
        .ok_or_else(|| s.not_found("statistics for"))?;
    if let Some((field, value)) = &stats.skipped_example {
        tracing::debug!(
            name = s.name,
            precision = s.precision,
            skipped = stats.skipped,
            example = format!("{field:?} = {value:?}"),
            "malformed statistics fields left out"
        );
    }
    to_json(&StatsBody {
        name: &s.name,
        precision: s.precision,
        buckets: stats.buckets.iter().map(|(&t, b)| Row::of(t, b)).collect(),
    })
}
