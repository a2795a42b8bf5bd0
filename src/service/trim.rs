//! Trimming the stream: a consumer group never deletes what it has read, so
//! the leader trims the stream up to the oldest entry any group still needs.
//!
//! `trim.lua` computes that bound atomically from every group (its oldest
//! pending id, and the entry after its last-delivered id) and trims below it
//! with `XTRIM MINID ~ … LIMIT`, so nothing pending in any group and nothing
//! not yet delivered is ever trimmed, and no call evicts more than
//! [`STEP`] entries (whole stream nodes, a millisecond or so). A pass repeats
//! the step until nothing more can go, or [`MAX_STEPS`] times.
//!
//! With shards the leader trims every shard's stream ([`trim_all`]), each
//! on its own: on a cluster each shard is in its own hash slot, and the
//! script is fenced there by an epoch ([`crate::service::fence`]) instead
//! of the lease, which lives in another slot.

use crate::store::connect::Conn;
use redis::Value;

use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::service::cleaner::CleanError;
use crate::service::fence::Fence;
use crate::service::leader::Lease;
use crate::store::scripts::TRIM;
use crate::store::stream::text;

/// Most entries evicted by one call: 100 stream nodes at the default
/// `stream-node-max-entries` of 100.
pub(crate) const STEP: u64 = 10_000;
/// Most calls per pass (a million entries); the next pass goes on.
const MAX_STEPS: u32 = 100;

/// What one trim did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Trimmed {
    /// Entries evicted (`trimmed` in the recorded pass and its JSON).
    #[serde(rename = "trimmed")]
    pub entries: u64,
    /// The oldest id every group still needs (empty when no group exists).
    pub min_id: String,
}

/// Trims every shard's stream as the holder of `lease`: the entries
/// evicted in all, and the oldest id any shard's groups still need.
pub(crate) async fn trim_all(
    conn: &mut Conn,
    shards: &[Keys],
    lease: &Lease,
) -> Result<Trimmed, CleanError> {
    let Some(first) = shards.first() else {
        return Ok(Trimmed::default());
    };
    let fence = Fence::take(conn, first, lease)
        .await?
        .ok_or(CleanError::LostLease)?;
    let mut all = Trimmed::default();
    for keys in shards {
        let mut min_id = String::new();
        for _ in 0..MAX_STEPS {
            if !lease.held() {
                return Err(CleanError::LostLease);
            }
            let reply: Value = TRIM
                .evalsha(2)
                .arg(fence.key(keys, &keys.stream))
                .arg(&keys.stream)
                .arg(fence.arg())
                .arg(STEP)
                .query_async(conn)
                .await?;
            let evicted;
            (evicted, min_id) = step_reply(&reply)?;
            all.entries += evicted;
            metrics().stream_trimmed.inc_by(evicted);
            if evicted == 0 {
                break;
            }
        }
        if older(&min_id, &all.min_id) {
            all.min_id = min_id;
        }
    }
    Ok(all)
}

/// Trims `keys.stream` as the holder of `lease`.
#[cfg(test)]
pub(crate) async fn trim(
    conn: &mut Conn,
    keys: &Keys,
    lease: &Lease,
) -> Result<Trimmed, CleanError> {
    trim_all(conn, std::slice::from_ref(keys), lease).await
}

/// Whether stream id `a` is older than `b`, an empty id (no group) being
/// older than none: the ids compare as (ms, seq) numbers.
fn older(a: &str, b: &str) -> bool {
    use crate::store::stream::parse_id;
    match (parse_id(a), parse_id(b)) {
        (Some(a), Some(b)) => a < b,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Reads one trim step's reply `{entries evicted, minimum id kept}`: `-1`
/// (or any reply that is not a list) means the lease is not held. An
/// unreadable count reads as 0, which ends the pass; an unreadable id as ''.
fn step_reply(reply: &Value) -> Result<(u64, String), CleanError> {
    let Value::Array(v) = reply else {
        return Err(CleanError::LostLease);
    };
    let evicted = v.first().map_or(0, crate::service::purge::as_u64);
    let min_id = v.get(1).and_then(text).unwrap_or_default();
    Ok((evicted, min_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_step_gives_the_entries_evicted_and_the_minimum_id_kept() {
        let reply = Value::Array(vec![Value::Int(10_000), bulk("1700000000123-4")]);
        assert_eq!(
            step_reply(&reply).unwrap(),
            (10_000, "1700000000123-4".to_string())
        );
        // The id may come back as a simple string (RESP3).
        let reply = Value::Array(vec![Value::Int(0), Value::SimpleString("9-1".into())]);
        assert_eq!(step_reply(&reply).unwrap(), (0, "9-1".to_string()));
    }

    #[test]
    fn no_group_or_no_stream_trims_nothing_and_has_no_minimum() {
        let reply = Value::Array(vec![Value::Int(0), bulk("")]);
        assert_eq!(step_reply(&reply).unwrap(), (0, String::new()));
    }

    #[test]
    fn the_oldest_id_of_the_shards_is_kept() {
        assert!(older("9-1", "10-0"));
        assert!(older("10-0", "10-1"));
        assert!(!older("10-1", "10-1"));
        assert!(older("5-0", ""), "any id beats none yet");
        assert!(!older("", "5-0"), "a shard without groups needs nothing");
    }

    #[test]
    fn minus_one_means_the_lease_is_lost() {
        assert!(matches!(
            step_reply(&Value::Int(-1)),
            Err(CleanError::LostLease)
        ));
    }

    #[test]
    fn a_reply_that_is_not_a_list_stops_the_trim_as_a_lost_lease() {
        for reply in [Value::Nil, Value::Okay, Value::Int(5), bulk("OK")] {
            assert!(
                matches!(step_reply(&reply), Err(CleanError::LostLease)),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn an_unreadable_count_reads_as_nothing_evicted() {
        // 0 ends the pass: nothing is assumed trimmed.
        for first in [Value::Int(-3), bulk("12"), Value::Nil] {
            let reply = Value::Array(vec![first.clone(), bulk("5-0")]);
            assert_eq!(
                step_reply(&reply).unwrap(),
                (0, "5-0".to_string()),
                "{first:?}"
            );
        }
        assert_eq!(
            step_reply(&Value::Array(vec![])).unwrap(),
            (0, String::new())
        );
        assert_eq!(
            step_reply(&Value::Array(vec![Value::Int(7), Value::Int(5)])).unwrap(),
            (7, String::new())
        );
    }
}

// A real Redis comes from the test kit, built with the `cli` feature.
#[cfg(all(test, feature = "cli"))]
mod redis_tests;
