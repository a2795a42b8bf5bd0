//! What live workers do about dead ones: finish the windows they recorded,
//! claim the entries they left pending (fencing them), dead-letter entries
//! delivered too often, and remove consumers that are gone.

use std::time::Instant;

use crate::store::connect::Conn;
use redis::Value;

use crate::model::config::WorkerArgs;
use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::store::commit::{Committer, DEAD_LETTER_FIELD_BYTES};
use crate::store::connect::{StoreError, StoreResult};
use crate::store::scripts::{CLAIM, GC};
use crate::store::stream::{self, EntryRef};

/// Most entries claimed (or dead-lettered) per call: a claimed entry costs
/// Redis about 10 µs (XCLAIM finds it in its stream node, returns it and
/// propagates one XCLAIM for it), so the script stays near 2.5 ms.
pub(crate) const CLAIM_BATCH: usize = 250;

/// Entries just claimed from other consumers, now this consumer's.
#[derive(Debug)]
pub(crate) struct Claimed {
    reply: Value,
    /// Entries claimed or dead-lettered: [`CLAIM_BATCH`] when more may be
    /// waiting.
    taken: usize,
    /// The claim stopped at its byte bound ([`stream::READ_BYTES`]) before
    /// every idle entry it found.
    stopped: bool,
}

impl Claimed {
    fn new(reply: Value, poisoned: u64, stopped: bool) -> Claimed {
        let taken = stream::entry_list(&reply).len() + poisoned as usize;
        Claimed {
            reply,
            taken,
            stopped,
        }
    }

    /// The claimed entries (deleted ones have no fields).
    pub(crate) fn entries(&self) -> Vec<EntryRef<'_>> {
        stream::entry_list(&self.reply)
    }

    /// Whether the batch was full, so that more idle entries may be waiting.
    pub(crate) fn more_waiting(&self) -> bool {
        self.stopped || self.taken >= CLAIM_BATCH
    }
}

/// Finishes windows recorded more than the claim time ago (their worker
/// stopped) and quarantines records that cannot be read back: before
/// [`claim`], since entries of a consumer with an unfinished window are not
/// claimed until it is finished.
pub(crate) async fn finish_stopped(
    conn: &mut Conn,
    committer: &Committer,
    settings: &WorkerArgs,
) -> StoreResult<()> {
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
    Ok(())
}

/// Claims up to [`CLAIM_BATCH`] entries idle longer than the claim time
/// (fencing their owners), dead-lettering those delivered too often.
pub(crate) async fn claim(
    conn: &mut Conn,
    committer: &Committer,
    consumer: &str,
    settings: &WorkerArgs,
    (dead_maxlen, read_bytes): (u64, usize),
) -> StoreResult<Claimed> {
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
        .arg(keys.window(""))
        .arg(read_bytes)
        .arg(DEAD_LETTER_FIELD_BYTES);
    let reply: Value = cmd.query_async(conn).await?;
    let (reply, poisoned, stopped) = claim_reply(reply)?;
    let claimed = Claimed::new(reply, poisoned, stopped);
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
    // Claimed entries are read too (the read counter is the worker's input).
    m.events_read.inc_by(n as u64);
    m.events_dead_lettered
        .with_label_values(&["max_deliveries"])
        .inc_by(poisoned);
    Ok(claimed)
}

/// Splits the claim script's reply `{claimed entries, dead-lettered count,
/// stopped at the byte bound (1/0)}` (the entries always a list, as XCLAIM
/// returns them, possibly empty; a reply without the third is not
/// stopped). Anything else is an error: nothing is taken as claimed.
fn claim_reply(reply: Value) -> StoreResult<(Value, u64, bool)> {
    match reply {
        Value::Array(v) if v.len() == 2 || v.len() == 3 => {
            let mut it = v.into_iter();
            match (it.next(), it.next(), it.next()) {
                (Some(claimed @ Value::Array(_)), Some(Value::Int(n)), stopped)
                    if n >= 0 && matches!(stopped, None | Some(Value::Int(0 | 1))) =>
                {
                    Ok((claimed, n as u64, stopped == Some(Value::Int(1))))
                }
                (a, b, c) => {
                    let back = Value::Array(a.into_iter().chain(b).chain(c).collect());
                    Err(StoreError::unexpected("claim.lua", &back))
                }
            }
        }
        other => Err(StoreError::unexpected("claim.lua", &other)),
    }
}

/// Removes consumers idle for `min_idle_ms` that own no pending entry and
/// whose worker is gone (no live registration), and `leaving` (this
/// worker at shutdown) if it owns none. Returns their names.
pub(crate) async fn remove_gone_consumers(
    conn: &mut Conn,
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
        .arg(keys.consumer_registration(""))
        .query_async(conn)
        .await?;
    if !removed.is_empty() {
        tracing::info!(consumers = ?removed, "removed consumers that are gone from the group");
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Idle consumers that own nothing leave the group unless their worker
    /// is live (its registration stands: Redis 7.0 finds a worker blocked
    /// on an empty stream idle); one that owns entries stays; the leaving
    /// worker goes whatever its registration.
    #[tokio::test]
    async fn gone_consumers_leave_and_live_idle_ones_stay() {
        use crate::testing::{conn, keys, server, settings};
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let keys = keys(&settings(&srv.url(), "gc"));
        crate::store::scripts::load_all(&mut c).await.unwrap();
        crate::store::stream::ensure_group(&mut c, &keys, None)
            .await
            .unwrap();
        for consumer in ["live", "gone", "owner", "leaving"] {
            let _: Value = redis::cmd("XADD")
                .arg(&keys.stream)
                .arg("*")
                .arg("name")
                .arg("a")
                .query_async(&mut c)
                .await
                .unwrap();
            let reply = crate::store::stream::read(&mut c, &keys, consumer, 1, None, ">")
                .await
                .unwrap();
            if consumer != "owner" {
                let ids: Vec<String> = crate::store::stream::read_reply_entries(&reply)
                    .iter()
                    .map(|e| e.id_str().to_string())
                    .collect();
                let _: i64 = redis::Cmd::xack(&keys.stream, &keys.group, &ids)
                    .query_async(&mut c)
                    .await
                    .unwrap();
            }
        }
        for live in ["live", "leaving"] {
            let _: () = redis::cmd("SET")
                .arg(keys.consumer_registration(live))
                .arg("token")
                .query_async(&mut c)
                .await
                .unwrap();
        }
        let removed = remove_gone_consumers(&mut c, &keys, 0, "leaving")
            .await
            .unwrap();
        assert_eq!(removed, ["gone", "leaving"]);
        let left: Value = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(&keys.stream)
            .arg(&keys.group)
            .query_async(&mut c)
            .await
            .unwrap();
        let left = crate::store::group::ConsumerInfo::parse_all(&left);
        let names: Vec<&str> = left.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["live", "owner"]);
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// Two claimed entries as XCLAIM returns them: one with fields, one
    /// deleted from the stream while pending.
    fn claimed_list() -> Value {
        Value::Array(vec![
            Value::Array(vec![
                bulk("1700000000000-0"),
                Value::Array(vec![bulk("name"), bulk("home")]),
            ]),
            Value::Array(vec![bulk("1700000000000-1"), Value::Nil]),
        ])
    }

    /// The error a reply must give: unexpected, naming the script.
    fn assert_refused(reply: Value) {
        let shown = format!("{reply:?}");
        match claim_reply(reply) {
            Err(StoreError::Unexpected { what, reply }) => {
                assert_eq!(what, "claim.lua");
                assert!(!reply.is_empty(), "the reply is shown for {shown}");
            }
            other => panic!("{shown} must be refused, got {other:?}"),
        }
    }

    #[test]
    fn a_claim_reply_gives_the_entries_and_the_dead_lettered_count() {
        let (list, poisoned, stopped) =
            claim_reply(Value::Array(vec![claimed_list(), Value::Int(3)])).unwrap();
        assert_eq!((poisoned, stopped), (3, false));
        let claimed = Claimed::new(list, poisoned, stopped);
        assert!(!claimed.more_waiting(), "5 of {CLAIM_BATCH}");
        let entries = claimed.entries();
        let ids: Vec<_> = entries.iter().map(|e| e.id_str()).collect();
        assert_eq!(ids, ["1700000000000-0", "1700000000000-1"]);
        let pairs: Vec<_> = entries[0].pairs().collect();
        assert_eq!(pairs, [(&b"name"[..], &b"home"[..])]);
        assert!(entries[1].fields.is_none(), "deleted: no fields");
    }

    #[test]
    fn a_claim_of_nothing_is_empty() {
        let (list, poisoned, stopped) =
            claim_reply(Value::Array(vec![Value::Array(vec![]), Value::Int(0)])).unwrap();
        assert_eq!(poisoned, 0);
        assert!(Claimed::new(list, poisoned, stopped).entries().is_empty());
    }

    #[test]
    fn a_full_batch_claimed_or_dead_lettered_means_more_may_wait() {
        let (list, poisoned, stopped) = claim_reply(Value::Array(vec![
            claimed_list(),
            Value::Int(CLAIM_BATCH as i64 - 2),
        ]))
        .unwrap();
        assert!(Claimed::new(list, poisoned, stopped).more_waiting());
    }

    #[test]
    fn a_claim_stopped_at_its_byte_bound_means_more_may_wait() {
        let reply =
            |stopped| Value::Array(vec![claimed_list(), Value::Int(0), Value::Int(stopped)]);
        let (list, poisoned, stopped) = claim_reply(reply(1)).unwrap();
        assert!(stopped);
        assert!(Claimed::new(list, poisoned, stopped).more_waiting());
        let (list, poisoned, stopped) = claim_reply(reply(0)).unwrap();
        assert!(!Claimed::new(list, poisoned, stopped).more_waiting());
    }

    #[test]
    fn dead_lettered_only_is_a_good_reply() {
        let (list, poisoned, _) =
            claim_reply(Value::Array(vec![Value::Array(vec![]), Value::Int(7)])).unwrap();
        assert_eq!(poisoned, 7);
        assert_eq!(list, Value::Array(vec![]));
    }

    #[test]
    fn replies_not_a_pair_are_refused() {
        assert_refused(Value::Nil);
        assert_refused(Value::Okay);
        assert_refused(Value::Int(0));
        assert_refused(bulk("OK"));
        assert_refused(Value::Array(vec![]));
        assert_refused(Value::Array(vec![claimed_list()]));
        assert_refused(Value::Array(vec![
            claimed_list(),
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
        ]));
        // The third says whether the byte bound stopped the claim: 0 or 1.
        assert_refused(Value::Array(vec![
            claimed_list(),
            Value::Int(1),
            Value::Int(2),
        ]));
        assert_refused(Value::Array(vec![
            claimed_list(),
            Value::Int(1),
            Value::Nil,
        ]));
    }

    #[test]
    fn a_count_that_is_not_a_non_negative_integer_is_refused() {
        assert_refused(Value::Array(vec![claimed_list(), Value::Int(-1)]));
        assert_refused(Value::Array(vec![claimed_list(), bulk("3")]));
        assert_refused(Value::Array(vec![claimed_list(), Value::Nil]));
        assert_refused(Value::Array(vec![claimed_list(), Value::Double(3.0)]));
    }

    #[test]
    fn a_claimed_part_that_is_not_a_list_is_refused() {
        // Read as "no entries", these would sit claimed by this consumer,
        // unseen until its next resync.
        assert_refused(Value::Array(vec![Value::Nil, Value::Int(0)]));
        assert_refused(Value::Array(vec![Value::Int(5), Value::Int(0)]));
        assert_refused(Value::Array(vec![bulk("1-0"), Value::Int(0)]));
    }
}
