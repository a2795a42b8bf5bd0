//! What live workers do about dead ones: finish the windows they recorded,
//! claim the entries they left pending (fencing them), dead-letter entries
//! delivered too often, and remove consumers that are gone.

use std::time::Instant;

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::model::config::WorkerArgs;
use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::store::commit::Committer;
use crate::store::connect::{StoreError, StoreResult};
use crate::store::scripts::{CLAIM, GC};
use crate::store::stream::{self, EntryRef};

/// Most entries claimed per call: keeps the claim script near a millisecond.
const CLAIM_BATCH: usize = 1000;

/// Entries just claimed from other consumers, now this consumer's.
#[derive(Debug)]
pub struct Claimed {
    reply: Value,
}

impl Claimed {
    /// The claimed entries (deleted ones have no fields).
    pub fn entries(&self) -> Vec<EntryRef<'_>> {
        stream::entry_list(&self.reply)
    }
}

/// Finishes windows recorded more than the claim time ago (their worker
/// stopped), quarantines records that cannot be read back, then claims
/// entries idle longer than the claim time. Entries of a consumer with an
/// unfinished window are not claimed until it is finished.
pub async fn claim(
    conn: &mut MultiplexedConnection,
    committer: &Committer,
    consumer: &str,
    settings: &WorkerArgs,
    dead_maxlen: u64,
) -> StoreResult<Claimed> {
    let seen = Instant::now();
    let (records, corrupt, now_ms) = committer.records(conn).await?;
    for bad in &corrupt {
        committer.quarantine(conn, bad).await?;
    }
    for r in &records {
        if now_ms - r.created_ms > settings.claim_idle_ms as i64 {
            committer.recover(conn, r, seen).await?;
        }
    }
    let keys = committer.keys();
    let mut cmd = CLAIM.evalsha(5);
    cmd.arg(&keys.stream)
        .arg(keys.epochs())
        .arg(&keys.dead)
        .arg(keys.last_errors())
        .arg(keys.windows())
        .arg(&keys.group)
        .arg(consumer)
        .arg(settings.claim_idle_ms)
        .arg(CLAIM_BATCH)
        .arg(settings.max_deliveries)
        .arg(dead_maxlen)
        .arg(keys.window(""));
    let reply: Value = cmd.query_async(conn).await?;
    let (reply, poisoned) = match reply {
        Value::Array(v) if v.len() == 2 => {
            let mut it = v.into_iter();
            match (it.next(), it.next()) {
                (Some(claimed), Some(Value::Int(n))) if n >= 0 => (claimed, n as u64),
                (a, b) => {
                    let back = Value::Array(a.into_iter().chain(b).collect());
                    return Err(StoreError::unexpected("claim.lua", &back));
                }
            }
        }
        other => return Err(StoreError::unexpected("claim.lua", &other)),
    };
    let claimed = Claimed { reply };
    let n = claimed.entries().len();
    if n > 0 || poisoned > 0 {
        let entries = claimed.entries();
        tracing::info!(
            claimed = n,
            first = entries.first().map_or("", |e| e.id_str()),
            last = entries.last().map_or("", |e| e.id_str()),
            dead_lettered = poisoned,
            "claimed entries left idle by other consumers"
        );
    }
    let m = metrics();
    m.events_claimed.inc_by(n as u64);
    m.events_dead_lettered
        .with_label_values(&["max_deliveries"])
        .inc_by(poisoned);
    Ok(claimed)
}

/// Removes consumers idle for `min_idle_ms` that own no pending entry, and
/// `leaving` (this worker at shutdown) if it owns none. Returns their names.
pub async fn remove_gone_consumers(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    min_idle_ms: u64,
    leaving: &str,
) -> StoreResult<Vec<String>> {
    let removed: Vec<String> = GC
        .evalsha(2)
        .arg(&keys.stream)
        .arg(keys.last_errors())
        .arg(&keys.group)
        .arg(min_idle_ms)
        .arg(leaving)
        .query_async(conn)
        .await?;
    if !removed.is_empty() {
        tracing::info!(consumers = ?removed, "removed consumers that are gone from the group");
    }
    Ok(removed)
}
