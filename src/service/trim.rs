//! Trimming the stream: a consumer group never deletes what it has read, so
//! the leader trims the stream up to the oldest entry any group still needs.
//!
//! `trim.lua` computes that bound atomically from every group (its oldest
//! pending id, and the entry after its last-delivered id) and trims below it
//! with `XTRIM MINID ~ … LIMIT`, so nothing pending in any group and nothing
//! not yet delivered is ever trimmed, and no call evicts more than
//! [`STEP`] entries (whole stream nodes, a millisecond or so). A pass repeats
//! the step until nothing more can go, or [`MAX_STEPS`] times.

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::service::cleaner::CleanError;
use crate::service::leader::Lease;
use crate::store::scripts::TRIM;
use crate::store::stream::bytes;

/// Most entries evicted by one call: 100 stream nodes at the default
/// `stream-node-max-entries` of 100.
pub const STEP: u64 = 10_000;
/// Most calls per pass (a million entries); the next pass goes on.
const MAX_STEPS: u32 = 100;

/// What one trim did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Trimmed {
    /// Entries evicted.
    pub entries: u64,
    /// The oldest id every group still needs (empty when no group exists).
    pub min_id: String,
}

/// Trims `keys.stream` as the holder of `lease`.
pub async fn trim(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    lease: &Lease,
) -> Result<Trimmed, CleanError> {
    let mut out = Trimmed::default();
    for _ in 0..MAX_STEPS {
        if !lease.held() {
            return Err(CleanError::LostLease);
        }
        let reply: Value = TRIM
            .evalsha(2)
            .arg(lease.key())
            .arg(&keys.stream)
            .arg(lease.token())
            .arg(STEP)
            .query_async(conn)
            .await?;
        let Value::Array(v) = reply else {
            return Err(CleanError::LostLease);
        };
        let evicted = match v.first() {
            Some(Value::Int(n)) => (*n).max(0) as u64,
            _ => 0,
        };
        out.min_id = v
            .get(1)
            .and_then(bytes)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        out.entries += evicted;
        metrics().stream_trimmed.inc_by(evicted);
        if evicted == 0 {
            break;
        }
    }
    Ok(out)
}
