//! Carrying out the cleaner's deletions: a page's plans (old fields of
//! counters or statistics hashes, and whether each may leave `known:` or
//! `stats:known:` if emptied) as fenced `clean.lua` calls of at most
//! [`CHUNK`] fields and [`CHUNK`] hashes each.
//!
//! - **One Redis**: every call of a page in one pipeline (one round trip),
//!   each removing its emptied counters from `known:` atomically, as the
//!   seeds' cleaner meant to.
//! - **A cluster**: a call touches the hashes of one hash slot only (and the
//!   fence key of that slot); the calls of a page are all in flight at
//!   once; the counters they report emptied then leave `known:` through
//!   [`crate::service::forget`].

use std::collections::BTreeMap;

use redis::{Cmd, Value};

use crate::model::keys::{Family, Keys};
use crate::model::slots::slot;
use crate::service::fence::Fence;
use crate::service::forget;
use crate::store::connect::{Conn, StoreResult};
use crate::store::scripts::CLEAN;

/// Fields (and counters) per `clean.lua` call: well under a millisecond of
/// HDEL work even in a hash of a million fields.
pub(crate) const CHUNK: usize = 200;

/// One counter's fields to delete, and whether it may be empty afterwards.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Its member of `known:` (or `stats:known:`), `PREC:NAME`.
    pub member: String,
    /// Its hash, `count:PREC:NAME` (or `stats:PREC:NAME`).
    pub key: String,
    /// Fields to delete.
    pub old: Vec<Vec<u8>>,
    /// Whether no other field was seen: it leaves `known:` if its hash is
    /// empty after the deletion.
    pub forget: bool,
}

/// What carrying out a page's plans did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Fields deleted.
    pub removed: u64,
    /// Counters that left `known:`.
    pub forgotten: u64,
    /// A call was fenced out: the lease is lost, stop.
    pub lost: bool,
    /// The reply to the command sent after the deletions.
    pub then: Option<Value>,
}

/// Runs `plans`' deletions (hashes of `family`) under `fence`, followed by
/// `then` (whose reply is returned): on one Redis all in one round trip.
pub(crate) async fn run(
    conn: &mut Conn,
    keys: &Keys,
    family: Family,
    fence: &Fence,
    plans: &[Plan],
    then: Option<Cmd>,
) -> StoreResult<Outcome> {
    if !fence.is_epoch() {
        let known = keys.known_of(family);
        let mut cmds = batches(plans.iter(), [fence.key(keys, &known), known], fence.arg());
        let calls = cmds.len();
        cmds.extend(then);
        // One node: one pipeline.
        let mut replies = conn.query_each(cmds).await?;
        let then = (replies.len() > calls).then(|| replies.pop()).flatten();
        let mut out = tally(&replies).0;
        out.then = then;
        return Ok(out);
    }
    // A cluster: the calls of each hash slot on their own.
    let mut by_slot: BTreeMap<u16, Vec<&Plan>> = BTreeMap::new();
    for p in plans {
        by_slot.entry(slot(p.key.as_bytes())).or_default().push(p);
    }
    let mut cmds = Vec::new();
    for group in by_slot.values() {
        let fence_key = fence.key(keys, &group[0].key);
        let head = [fence_key.clone(), fence_key];
        cmds.extend(batches(group.iter().copied(), head, fence.arg()));
    }
    let replies = conn.query_each(cmds).await?;
    let (mut out, emptied) = tally(&replies);
    if !out.lost && !emptied.is_empty() {
        match forget::forget(conn, keys, family, fence, &emptied).await? {
            Some(n) => out.forgotten += n,
            None => out.lost = true,
        }
    }
    if let (Some(cmd), false) = (then, out.lost) {
        out.then = Some(cmd.query_async(conn).await?);
    }
    Ok(out)
}

/// The `clean.lua` calls for `plans`, each within the [`CHUNK`] bounds, with
/// `head` (the fence key, then `known:`) as their first keys and `fence` as
/// their first argument.
fn batches<'a>(
    plans: impl Iterator<Item = &'a Plan>,
    head: [String; 2],
    fence: String,
) -> Vec<Cmd> {
    // Each plan's fields in parts of at most CHUNK (one empty part when it
    // has none), its forget flag on the last part only.
    let parts = plans.flat_map(|plan| {
        let mut parts: Vec<&[Vec<u8>]> = plan.old.chunks(CHUNK).collect();
        if parts.is_empty() {
            parts.push(&[]);
        }
        let last = parts.len() - 1;
        parts
            .into_iter()
            .enumerate()
            .map(move |(i, part)| (plan, part, plan.forget && i == last))
    });
    let mut calls: Vec<Call> = Vec::new();
    for (plan, part, forget) in parts {
        match calls.last() {
            Some((hashes, _, fields)) if fields + part.len() <= CHUNK && hashes.len() < CHUNK => {}
            _ => calls.push(Default::default()),
        }
        let (hashes, args, fields) = calls.last_mut().expect("a call is open");
        hashes.push(&plan.key);
        args.push(plan.member.clone().into_bytes());
        args.push(if forget { b"1".to_vec() } else { b"0".to_vec() });
        args.push(part.len().to_string().into_bytes());
        args.extend(part.iter().cloned());
        *fields += part.len().max(1);
    }
    let calls = calls.into_iter().map(|(hashes, args, _)| {
        let mut cmd = CLEAN.evalsha(2 + hashes.len());
        cmd.arg(&head).arg(hashes).arg(&fence).arg(args);
        cmd
    });
    calls.collect()
}

/// One `clean.lua` call being filled: its hashes, then per hash its
/// arguments, and how many fields they hold.
type Call<'a> = (Vec<&'a String>, Vec<Vec<u8>>, usize);

/// Sums the replies of `clean.lua` calls: `{deleted, forgotten}` (one
/// Redis) or `{deleted, {emptied members}}` (a cluster); anything else (-1)
/// means fenced out. Returns the tally and the emptied members.
fn tally(replies: &[Value]) -> (Outcome, Vec<String>) {
    let mut out = Outcome::default();
    let mut emptied = Vec::new();
    for r in replies {
        match r {
            Value::Array(v) if v.len() == 2 => {
                out.removed += as_u64(&v[0]);
                match &v[1] {
                    Value::Array(members) => {
                        emptied.extend(members.iter().filter_map(crate::store::stream::text))
                    }
                    n => out.forgotten += as_u64(n),
                }
            }
            _ => out.lost = true,
        }
    }
    (out, emptied)
}

/// An integer reply as a count: 0 when negative or not an integer.
pub(crate) fn as_u64(v: &Value) -> u64 {
    match v {
        Value::Int(i) => (*i).max(0) as u64,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(key: &str, fields: usize, forget: bool) -> Plan {
        Plan {
            member: key.trim_start_matches("count:").to_string(),
            key: key.to_string(),
            old: (0..fields).map(|i| i.to_string().into_bytes()).collect(),
            forget,
        }
    }

    #[test]
    fn calls_stay_within_the_chunk_bounds() {
        let plans = [
            plan("count:1:a", 450, true),
            plan("count:1:b", 0, true),
            plan("count:1:c", 10, false),
        ];
        let cmds = batches(plans.iter(), ["lease".into(), "known:".into()], "t".into());
        // 450 fields: 200 + 200 + 50 (with b and c in the last call).
        assert_eq!(cmds.len(), 3);
        for c in &cmds {
            let n = c.args_iter().count();
            assert!(n <= 3 + 2 + CHUNK + 4 * CHUNK, "{n}");
        }
    }

    #[test]
    fn replies_of_one_redis_and_of_a_cluster_are_tallied() {
        let replies = vec![
            Value::Array(vec![Value::Int(5), Value::Int(1)]),
            Value::Array(vec![
                Value::Int(3),
                Value::Array(vec![Value::BulkString(b"1:x".to_vec())]),
            ]),
        ];
        let (out, emptied) = tally(&replies);
        assert_eq!((out.removed, out.forgotten, out.lost), (8, 1, false));
        assert_eq!(emptied, vec!["1:x".to_string()]);
        assert!(tally(&[Value::Int(-1)]).0.lost);
    }
}
