//! Reading statistics: one `stats:PREC:NAME` hash as a summary per bucket
//! ([`crate::model::stats_hash`]), read in pages ([`hashes`]; the hash holds about
//! `samples` buckets of a few dozen fields each), and one ZSCORE of
//! `stats:known:` when it is empty. Names with statistics are listed by
//! [`crate::store::query::list`] and ranked by mean by
//! [`crate::store::query::rank`], as counters are.

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::model::keys::{Family, Keys};
use crate::model::stats_hash::{self, StatsHash};
use crate::store::client::Conn;
use crate::store::hashes::{self, Fields};
use crate::store::query;

/// Whether [`read`] finds statistics of `name` at `precision` (a hash, or a
/// `stats:known:` member): one EXISTS, and one ZSCORE when there is none.
pub async fn exists<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    precision: u32,
    name: &str,
) -> RedisResult<bool> {
    let n: u32 = redis::Cmd::exists(keys.stats(precision, name))
        .query_async(conn)
        .await?;
    Ok(n > 0 || query::is_listed(conn, keys, Family::Stats, precision, name).await?)
}

/// The statistics of `name` at `precision`, buckets oldest first, those
/// with `from ≤ bucket ≤ until` only; `None` when there are none at all
/// (no hash, no `stats:known:` member; a key that is no hash is read as an
/// empty one). Fields that are not UTF-8 or not
/// well-formed are skipped and counted in [`StatsHash::skipped`], never an
/// error.
pub async fn read<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    precision: u32,
    name: &str,
    from: Option<i64>,
    until: Option<i64>,
) -> RedisResult<Option<StatsHash>> {
    let raw = hashes::whole(conn, &keys.stats(precision, name)).await?;
    if raw.is_empty() && !query::is_listed(conn, keys, Family::Stats, precision, name).await? {
        return Ok(None);
    }
    let mut stats = parse(raw);
    stats.buckets.retain(|&t, _| query::within(t, from, until));
    Ok(Some(stats))
}

/// The statistics hashes of `(precision, name)` each, every bucket, as
/// [`read`] parses one (empty where there is none, `None` for a key of
/// another type). Cost: see [`hashes::whole_each`].
pub(crate) async fn read_each(
    conn: &mut Conn,
    keys: &Keys,
    hashes: &[(u32, String)],
) -> RedisResult<Vec<Option<StatsHash>>> {
    let names: Vec<String> = hashes
        .iter()
        .map(|(p, name)| keys.stats(*p, name))
        .collect();
    hashes::whole_each(conn, &names, |_, f| parse(f)).await
}

fn parse(raw: Fields) -> StatsHash {
    // Bytes that are not UTF-8 get replacement characters, then fail to
    // parse and are skipped.
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    stats_hash::parse(raw.into_iter().map(|(f, v)| (text(f), text(v))))
}
