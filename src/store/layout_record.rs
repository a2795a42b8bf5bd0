//! The counter layout a stream's workers count with, recorded in Redis by
//! the first of them, so that no worker counts with another.
//!
//! Each hit is counted by the one worker that reads it, at that worker's
//! precisions: two workers of one group with different `--precisions`
//! split the counts between them (a rolling change of the setting counted
//! each hit at the precisions of whichever worker read it). A leader with
//! fewer `--samples` than the others cleans samples they still trust to
//! be kept, and a bucket's histogram covers only the hits of workers that
//! keep one at its precision. So the first worker records its precisions,
//! samples and quantile precisions (`SET NX`, [`crate::model::keys::Keys::layout`], next to the
//! shard count) and every later worker, and `hitcount clean`, must agree.
//! Changing them means stopping every worker and deleting the record.

use redis::RedisResult;

use crate::model::config::{LayoutArgs, StreamArgs};
use crate::store::client::unless_wrong_type;
use crate::store::connect::Conn;
use crate::store::shard_count::unsharded;

/// A layout recorded for the stream that is not this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Other {
    /// The key it is recorded in.
    pub key: String,
    /// What it holds, as text (escaped when it is no text).
    pub recorded: String,
}

impl Other {
    /// Why a worker (or `clean`) with `layout` must not run.
    pub(crate) fn refusal(&self, layout: &LayoutArgs) -> String {
        format!(
            "HITCOUNT_PRECISIONS, HITCOUNT_SAMPLES and HITCOUNT_QUANTILE_PRECISIONS give \
             `{}`, but this stream's workers count with `{}` (recorded in {}): workers with \
             different layouts would split the counts between them; give every worker the \
             same settings, or, to change them, stop every worker, then delete {}",
            describe(layout),
            self.recorded,
            self.key,
            self.key
        )
    }
}

/// A layout as it is recorded: the settings that decide where a hit is
/// counted and what is kept of it.
pub(crate) fn describe(layout: &LayoutArgs) -> String {
    let list = |ps: &[u32]| ps.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    format!(
        "precisions={} samples={} quantile_precisions={}",
        list(&layout.precisions),
        layout.samples,
        list(&layout.quantile_precisions())
    )
}

/// The key the layout of `stream` is recorded in.
pub(crate) fn key(layout: &LayoutArgs, stream: &StreamArgs, clustered: bool) -> String {
    unsharded(layout, stream, clustered).layout()
}

/// Records `layout` as the stream's unless one is recorded: `None` when
/// the recorded one is this one (recorded now or before), else what is
/// recorded.
pub(crate) async fn record(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
) -> RedisResult<Option<Other>> {
    let key = key(layout, stream, conn.is_cluster());
    let reply = redis::cmd("SET")
        .arg(&key)
        .arg(describe(layout))
        .arg("NX")
        .arg("GET")
        .query_async(conn)
        .await;
    Ok(judged(key, layout, unless_wrong_type(reply)?))
}

/// What is recorded, judged against `layout`, without writing (nothing
/// recorded agrees: the first worker records its own).
pub(crate) async fn read(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
) -> RedisResult<Option<Other>> {
    let key = key(layout, stream, conn.is_cluster());
    let reply = redis::cmd("GET").arg(&key).query_async(conn).await;
    Ok(judged(key, layout, unless_wrong_type(reply)?))
}

/// A reply of GET (`None`: a key of another type) judged against `layout`.
fn judged(key: String, layout: &LayoutArgs, reply: Option<redis::Value>) -> Option<Other> {
    let recorded = match reply {
        None => "a value of another type than a string".to_string(),
        Some(redis::Value::Nil) => return None,
        Some(redis::Value::BulkString(bytes)) if bytes == describe(layout).as_bytes() => {
            return None
        }
        Some(redis::Value::BulkString(bytes)) => {
            String::from_utf8_lossy(&bytes).escape_debug().to_string()
        }
        Some(other) => format!("{other:?}"),
    };
    Some(Other { key, recorded })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_is_recorded_as_its_three_settings() {
        let layout = LayoutArgs::default();
        assert_eq!(
            describe(&layout),
            "precisions=1,5,60,300,3600,18000,86400 samples=120 quantile_precisions=60,3600,86400"
        );
        let other = LayoutArgs {
            precisions: vec![1, 7, 60],
            samples: 5,
            ..LayoutArgs::default()
        };
        assert_eq!(
            describe(&other),
            "precisions=1,7,60 samples=5 quantile_precisions=60"
        );
    }
}
