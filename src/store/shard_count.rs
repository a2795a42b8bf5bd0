//! The shard count a stream is read and written with, recorded in Redis
//! by whoever comes first (a worker, or `hitcount hit` / `load`), and the
//! entries that a count leaves unread.
//!
//! Producers put a name's hits in the shard stream its hash picks
//! (`STREAM:{k}`, or `STREAM` itself with one shard), and workers read the
//! streams their count names: with two counts, hits land where no worker
//! reads, silently. So the first to come records its count (`SET NX`, in
//! [`Keys::shard_count`], in the unsharded stream name's hash slot), and
//! everyone else with another count is refused. A stream whose keys hold
//! undelivered entries that the first count would leave unread (a
//! deployment from before the record, or the record deleted) is not
//! recorded over: that first comer is refused, naming them.

use redis::{RedisResult, Value};

use crate::model::config::{LayoutArgs, StreamArgs};
use crate::model::keys::Keys;
use crate::store::client::unless_wrong_type;
use crate::store::connect::Conn;
use crate::store::group;

/// A stream that the shard count in use leaves unread, with entries in it
/// its group has not read or not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Stranded {
    /// The stream's key (`hits:{3}`, or `hits`).
    pub stream: String,
    /// Entries not yet delivered to the group, or delivered and not
    /// acknowledged (every entry when the group does not exist).
    pub entries: u64,
}

/// What [`record`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// This count is the stream's: recorded now, or before.
    Agreed,
    /// Another count is recorded, in `key`.
    Other {
        /// The recorded count.
        recorded: u32,
        /// The key it is in.
        key: String,
    },
    /// `key` holds a value that is no count (written by something else):
    /// where hits go is unknown until someone who knows sets it right.
    Damaged {
        /// The key a count is recorded in.
        key: String,
        /// What it holds, said for a reader: a string quoted, or the
        /// key's other type.
        value: String,
    },
    /// No count is recorded, and this one would leave these entries unread.
    Strands {
        /// The key a count is recorded in.
        key: String,
        /// Where the entries are.
        stranded: Vec<Stranded>,
    },
}

/// The key the shard count of `stream` is recorded in: one for every
/// shard, in the unsharded stream name's hash slot, scoped by group.
pub(crate) fn key(layout: &LayoutArgs, stream: &StreamArgs, clustered: bool) -> String {
    unsharded(layout, stream, clustered).shard_count()
}

/// The keys of `stream` as if unsharded: the keys every shard shares live
/// in its stream name's hash slot.
pub(crate) fn unsharded(layout: &LayoutArgs, stream: &StreamArgs, clustered: bool) -> Keys {
    let base = StreamArgs {
        shards: 1,
        ..stream.clone()
    };
    Keys::shard(layout, &base, 0, clustered)
}

/// The shard count recorded in `key`, if any: `Err` saying what it holds when
/// it is no count in 1..=256 as hitcount writes it (see
/// [`Recorded::Damaged`]).
async fn recorded(conn: &mut Conn, key: &str) -> RedisResult<Option<Result<u32, String>>> {
    let reply = redis::cmd("GET").arg(key).query_async(conn).await;
    // A key of another type holds no count either.
    let Some(value) = unless_wrong_type(reply)? else {
        return Ok(Some(Err("a value of another type than a string".into())));
    };
    let value: Option<Vec<u8>> = redis::from_redis_value(value)?;
    Ok(value.map(count))
}

/// A recorded value as a count; `Err` with the value as text when it is
/// none in 1..=256.
fn count(value: Vec<u8>) -> Result<u32, String> {
    std::str::from_utf8(&value)
        .ok()
        // As written: `+4` or `04` is something else's.
        .and_then(|v| v.parse().ok().filter(|n: &u32| n.to_string() == v))
        .filter(|n| (1..=crate::model::config::MAX_SHARDS).contains(n))
        .ok_or_else(|| format!("{:?}", String::from_utf8_lossy(&value)))
}

/// Why nobody may send or read with a damaged record ([`Recorded::Damaged`]).
pub(crate) fn damaged(key: &str, what: &str) -> String {
    format!(
        "{key} holds {what}, which is no shard count (1 to {}): something else wrote it, \
         so where producers send hits is unknown; set it to the count they use \
         (SET {key} N) or delete it",
        crate::model::config::MAX_SHARDS
    )
}

/// Records `stream.shards` as the stream's count unless one is recorded,
/// or says why it is not this one (see the module doc).
pub(crate) async fn record(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
) -> RedisResult<Recorded> {
    let key = key(layout, stream, conn.is_cluster());
    if let Some(value) = recorded(conn, &key).await? {
        return Ok(judged(key, stream, value));
    }
    let stranded = stranded(conn, layout, stream).await?;
    if !stranded.is_empty() {
        return Ok(Recorded::Strands { key, stranded });
    }
    // Another may record first meanwhile: then its count is the one.
    let before: Option<Vec<u8>> = redis::cmd("SET")
        .arg(&key)
        .arg(stream.shards.max(1))
        .arg("NX")
        .arg("GET")
        .query_async(conn)
        .await?;
    // The record as another wrote it meanwhile, if one did.
    Ok(before.map_or(Recorded::Agreed, |b| judged(key, stream, count(b))))
}

/// What is recorded, judged against `stream.shards`, without writing:
/// with nothing recorded, [`Recorded::Agreed`] (the first worker records
/// its count).
pub(crate) async fn read(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
) -> RedisResult<Recorded> {
    let key = key(layout, stream, conn.is_cluster());
    let value = recorded(conn, &key).await?;
    Ok(value.map_or(Recorded::Agreed, |v| judged(key, stream, v)))
}

/// A recorded value (in `key`) judged against `stream.shards`.
fn judged(key: String, stream: &StreamArgs, value: Result<u32, String>) -> Recorded {
    match value {
        Ok(recorded) if recorded == stream.shards.max(1) => Recorded::Agreed,
        Ok(recorded) => Recorded::Other { recorded, key },
        Err(value) => Recorded::Damaged { key, value },
    }
}

/// The streams that `stream.shards` leaves unread and that hold entries
/// the group has yet to read or acknowledge ([`Keys::unread_streams`]):
/// one `EXISTS` per candidate in one round trip (a pipeline; on a cluster
/// each on its own, all in flight), and a few more only for those that
/// exist. Only commands hitcount's ACL grants (no `TYPE`); a key of
/// another type is passed over.
pub(crate) async fn stranded(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
) -> RedisResult<Vec<Stranded>> {
    let candidates = Keys::unread_streams(layout, stream);
    let exists = conn
        .each_key("EXISTS", candidates.iter().map(|k| &k.stream))
        .await?;
    let mut streams = Vec::new();
    let mut lengths = Vec::new();
    for (k, e) in candidates.into_iter().zip(&exists) {
        if !matches!(e, Value::Int(n) if *n > 0) {
            continue;
        }
        let length = redis::cmd("XLEN").arg(&k.stream).query_async(conn).await;
        if let Some(n) = unless_wrong_type(length)? {
            lengths.push(redis::from_redis_value::<u64>(n)?);
            streams.push(k);
        }
    }
    if streams.is_empty() {
        return Ok(Vec::new());
    }
    let groups = group::own_groups(conn, &streams, crate::model::clock::unix_ms()).await?;
    Ok(streams
        .into_iter()
        .zip(lengths.into_iter().zip(groups))
        .filter_map(|(k, (length, g))| {
            let entries = match g {
                None => length,
                // The lag is unknown only when entries wait: count them all.
                Some((g, _)) => g.lag.unwrap_or(length).saturating_add(g.pending),
            };
            (entries > 0).then_some(Stranded {
                stream: k.stream,
                entries,
            })
        })
        .collect())
}

/// The warning about `stranded` entries that `count` shards leave unread,
/// with the way to count them the shard-count rule allows: workers with
/// another count are refused while this one is recorded.
pub(crate) fn unread_warning(stranded: &[Stranded], count: u32) -> String {
    format!(
        "{} are not read with HITCOUNT_SHARDS={count}: they were sent with another shard \
         count. To count them, drain the stream with this count, delete the recorded count \
         ({{STREAM}}:hc:GROUP:shards), run workers with theirs until those drain, then do the \
         same back (docs/cluster.md, \"The shard-count rule\"); or delete them",
        describe(stranded)
    )
}

/// The stranded entries in a few words: `1005 entries in fr`, or `12
/// entries in 3 streams (hits:{0}, hits:{1}, hits:{2})` (at most four
/// names, then `…`).
pub(crate) fn describe(stranded: &[Stranded]) -> String {
    let entries: u64 = stranded.iter().map(|s| s.entries).sum();
    match stranded {
        [one] => format!("{entries} entries in {}", one.stream),
        _ => {
            let mut names: Vec<&str> = stranded.iter().take(4).map(|s| s.stream.as_str()).collect();
            if stranded.len() > 4 {
                names.push("…");
            }
            format!(
                "{entries} entries in {} streams ({})",
                stranded.len(),
                names.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stranded_entries_are_told_in_a_few_words() {
        let s = |stream: &str, entries| Stranded {
            stream: stream.into(),
            entries,
        };
        assert_eq!(describe(&[s("fr", 1005)]), "1005 entries in fr");
        let many: Vec<Stranded> = (0..6).map(|k| s(&format!("h:{{{k}}}"), 2)).collect();
        assert_eq!(
            describe(&many),
            "12 entries in 6 streams (h:{0}, h:{1}, h:{2}, h:{3}, …)"
        );
    }
}
