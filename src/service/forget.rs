//! Removing emptied counters from `known:` on a cluster, without a
//! cross-slot script or WATCH, so that a counter with data never stays
//! missing from `known:`. Statistics hashes leave `stats:known:` the same
//! way, each [`Family`] with its own ZSET and journal.
//!
//! On one Redis `clean.lua` checks "the hash is empty" and removes the
//! member in one atomic step. On a cluster `known:` lives in another hash
//! slot than the hashes, so the steps are apart:
//! 1. `clean.lua` (in the hash's slot) deletes old samples and reports the
//!    members whose hashes are empty now;
//! 2. `forget.lua` (in `known:`'s slot, fenced) removes them from `known:`
//!    and notes each removed one in a journal ([`Keys::forgetting_of`]);
//! 3. [`recheck`]: `EXISTS count:…` of each removed member; the ones that
//!    exist again are added back (`ZADD known: 0 …`); then they leave the
//!    journal.
//!
//! (For statistics read `stats:`, `stats:known:` and its own journal; the
//! writer's order is the same: the hash first, then the ZADD.)
//!
//! Why no interleaving orphans a counter: a worker writes a counter with
//! `HINCRBY` and, once that has completed, `ZADD known:`
//! ([`crate::store::commit`]). If its ZADD runs after step 2's ZREM, the
//! member is there. If before, its HINCRBY ran before too, so step 3 (after
//! step 2) finds the hash and adds the member back. A leader that dies (or
//! is paused) between steps 2 and 3 leaves the member in the journal, and
//! every leader's pass starts with [`recover`]: it re-checks what the
//! journal holds (after moving the fence of `known:`'s slot to its own
//! epoch, so a stale leader cannot remove anything more). A member is thus
//! missing from `known:` while its hash has data at most until the re-check
//! (a round trip), or the next leader's first pass after a crash.
//!
//! A worker that skips the ZADD of a member it trusts to be in `known:`
//! ([`crate::model::known`]) is safe too: it trusts a member only while a
//! bucket it wrote is younger than the cleaner's horizon, so the hash is
//! not empty in step 1.

use redis::{AsyncCommands, Value};

use crate::model::keys::{Family, Keys};
use crate::service::fence::Fence;
use crate::store::connect::{Conn, StoreError, StoreResult};
use crate::store::scripts::FORGET;
use crate::store::stream::text;

/// Members per `forget.lua` call, per `ZADD` and per `SREM` (each about a
/// microsecond): well under a millisecond of work.
pub(crate) const MEMBERS: usize = 200;
/// SSCAN COUNT when reading the journal.
const SCAN_COUNT: usize = 100;

/// Removes `members` (whose hashes were seen empty) from `family`'s ZSET
/// (`known:`, `stats:known:`), then re-checks them. Returns how many stay
/// removed, or `None` when fenced out (the lease was lost).
pub(crate) async fn forget(
    conn: &mut Conn,
    keys: &Keys,
    family: Family,
    fence: &Fence,
    members: &[String],
) -> StoreResult<Option<u64>> {
    let mut forgotten = 0;
    for part in members.chunks(MEMBERS) {
        let Some(removed) = remove(conn, keys, family, fence, part).await? else {
            return Ok(None);
        };
        let back = recheck(conn, keys, family, &removed).await?;
        forgotten += (removed.len() - back) as u64;
    }
    Ok(Some(forgotten))
}

/// One `forget.lua` call: the members removed, or `None` when fenced out.
async fn remove(
    conn: &mut Conn,
    keys: &Keys,
    family: Family,
    fence: &Fence,
    members: &[String],
) -> StoreResult<Option<Vec<String>>> {
    let known = keys.known_of(family);
    let mut cmd = FORGET.evalsha(3);
    cmd.arg(fence.key(keys, &known))
        .arg(&known)
        .arg(keys.forgetting_of(family))
        .arg(fence.arg())
        .arg(members);
    let reply: Value = cmd.query_async(conn).await?;
    match reply {
        Value::Array(v) => Ok(Some(v.iter().filter_map(text).collect())),
        Value::Int(-1) => Ok(None),
        other => Err(StoreError::unexpected("forget.lua", &other)),
    }
}

/// Step 3 for members removed from `family`'s ZSET: those whose hash
/// exists again go back, then all leave the journal. Returns how many went
/// back.
pub(crate) async fn recheck(
    conn: &mut Conn,
    keys: &Keys,
    family: Family,
    members: &[String],
) -> StoreResult<usize> {
    if members.is_empty() {
        return Ok(0);
    }
    let hashes = members.iter().map(|m| keys.hash_of_member(family, m));
    let exists = conn.each_key("EXISTS", hashes).await?;
    let back: Vec<&String> = members
        .iter()
        .zip(&exists)
        .filter(|(_, e)| !matches!(e, Value::Int(0)))
        .map(|(m, _)| m)
        .collect();
    if !back.is_empty() {
        let scored: Vec<(u8, &String)> = back.iter().map(|m| (0, *m)).collect();
        let _: i64 = conn.zadd_multiple(keys.known_of(family), &scored).await?;
        crate::model::metrics::metrics()
            .cleaner_members_readded
            .inc_by(back.len() as u64);
    }
    let _: i64 = conn.srem(keys.forgetting_of(family), members).await?;
    Ok(back.len())
}

/// The start of a leader's pass over `family` on a cluster: moves the
/// fence of its ZSET's slot to this pass' epoch, then re-checks every
/// member the journal still holds (left by a leader that died between
/// removal and re-check). Returns how many members went back, or `None`
/// when fenced out.
pub(crate) async fn recover(
    conn: &mut Conn,
    keys: &Keys,
    family: Family,
    fence: &Fence,
) -> StoreResult<Option<usize>> {
    if remove(conn, keys, family, fence, &[]).await?.is_none() {
        return Ok(None);
    }
    let mut back = 0;
    let mut cursor = 0u64;
    loop {
        let (next, page): (u64, Vec<Vec<u8>>) = redis::cmd("SSCAN")
            .arg(keys.forgetting_of(family))
            .arg(cursor)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(conn)
            .await?;
        let page: Vec<String> = page
            .into_iter()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .collect();
        back += recheck(conn, keys, family, &page).await?;
        if next == 0 {
            return Ok(Some(back));
        }
        cursor = next;
    }
}
