//! The stream side of the worker: joining the group, reading entries, and
//! walking raw replies without redis-rs' typed stream parsing (which costs
//! about half again as much client CPU).

use crate::store::connect::Conn;
use redis::{RedisResult, Value};

use crate::model::keys::Keys;

/// About the most bytes one read of entries should bring back: 2 MiB (ids,
/// field names and values). The worker's reads ask for as many entries as
/// fit (see `service::worker::read`), and its reads of its own pending
/// entries and its claims stop there inside Redis. A reply is held twice
/// while redis-rs parses it, and up to two more are in flight while a full
/// `--read-count` fits, so this keeps a worker's reads within a few times
/// this however large the entries are. Hits take a few dozen bytes: a full
/// `--read-count` of them is far below it; entries of 4 KiB (long names)
/// are read 500 at a time, with no read ahead (at 16 MiB their reads held
/// some 50 MB of a worker's reply buffers).
pub(crate) const READ_BYTES: usize = 2 << 20;

/// One stream entry inside a reply, borrowed from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryRef<'a> {
    /// The entry ID, `<ms>-<seq>`.
    pub id: &'a [u8],
    /// Field/value pairs, flattened; `None` when the entry was deleted from
    /// the stream while pending.
    pub fields: Option<&'a [Value]>,
}

impl<'a> EntryRef<'a> {
    /// The entry's field/value pairs (empty for a deleted entry); values that
    /// are not strings are skipped.
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.fields
            .unwrap_or(&[])
            .chunks_exact(2)
            .filter_map(|kv| Some((bytes(&kv[0])?, bytes(&kv[1])?)))
    }

    /// The ID as text.
    pub(crate) fn id_str(&self) -> &'a str {
        std::str::from_utf8(self.id).unwrap_or("")
    }
}

/// The bytes of a string reply.
pub(crate) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// A bulk or simple string reply as text (bytes that are not UTF-8 get
/// replacement characters).
pub(crate) fn text(v: &Value) -> Option<String> {
    bytes(v).map(|b| String::from_utf8_lossy(b).into_owned())
}

/// The items of an array reply (none for anything else).
pub(crate) fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) => items,
        _ => &[],
    }
}

/// Entries of an XREADGROUP reply (`[[stream, [entry...]]...]`, a map of
/// stream to entries in RESP3, or nil).
pub(crate) fn read_reply_entries(reply: &Value) -> Vec<EntryRef<'_>> {
    let lists: Vec<&Value> = match reply {
        Value::Map(m) => m.iter().map(|(_, entries)| entries).collect(),
        _ => items(reply)
            .iter()
            .filter_map(|s| items(s).get(1))
            .collect(),
    };
    lists.into_iter().flat_map(entry_list).collect()
}

/// Entries of a `[[id, [field, value, ...]] ...]` list (XRANGE, XCLAIM).
pub(crate) fn entry_list(list: &Value) -> Vec<EntryRef<'_>> {
    items(list)
        .iter()
        .filter_map(|item| {
            let e = items(item);
            let id = bytes(e.first()?)?;
            let fields = match e.get(1) {
                Some(Value::Array(f)) => Some(f.as_slice()),
                _ => None,
            };
            Some(EntryRef { id, fields })
        })
        .collect()
}

/// Creates the stream and the group when absent; where it made the group
/// start when it did (`Some(None)`: at the stream's start). The group starts at the beginning of the stream (hits sent before
/// the first worker ran count too), or after `after`: the newest entry a
/// worker that finds its group gone has committed, so that what it counted
/// is not counted again. Not after an `after` the stream never reached
/// (its last generated id is older, or it is gone): that stream was deleted
/// and made again since, none of its entries was counted, and a group made
/// after `after` would receive none of them until its ids passed `after`
/// (for good, when `after` was the last possible id).
pub(crate) async fn ensure_group(
    conn: &mut Conn,
    keys: &Keys,
    after: Option<(u64, u64)>,
) -> RedisResult<Option<Option<(u64, u64)>>> {
    let after = match after {
        Some(after) => last_generated(conn, keys)
            .await?
            .filter(|last| *last >= after)
            .map(|_| after),
        None => None,
    };
    let start = after.map_or_else(|| "0".to_string(), |(ms, seq)| format!("{ms}-{seq}"));
    let created: RedisResult<()> =
        redis::Cmd::xgroup_create_mkstream(&keys.stream, &keys.group, start)
            .query_async(conn)
            .await;
    match created {
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(None),
        other => other.map(|()| Some(after)),
    }
}

/// The stream's last generated id (`XINFO STREAM`); `None` when there is
/// no stream.
async fn last_generated(conn: &mut Conn, keys: &Keys) -> RedisResult<Option<(u64, u64)>> {
    let info = redis::Cmd::xinfo_stream(&keys.stream)
        .query_async(conn)
        .await;
    let info: Option<redis::streams::StreamInfoStreamReply> = unless_no_stream(info)?;
    Ok(info.and_then(|info| parse_id(&info.last_generated_id)))
}

/// A reply of `XINFO` on the stream, `None` when there is no stream yet
/// (Redis answers `ERR no such key`).
pub(crate) fn unless_no_stream<T>(reply: RedisResult<T>) -> RedisResult<Option<T>> {
    match reply {
        Err(e) if e.code() == Some("ERR") && e.to_string().contains("no such key") => Ok(None),
        reply => reply.map(Some),
    }
}

/// A stream id `MS-SEQ` as its two numbers, which order ids as Redis does.
pub(crate) fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// Reads up to `count` new entries (`from` = `>`) for `consumer`, waiting up
/// to `block_ms` for some. (With an id instead of `>`, XREADGROUP re-reads
/// the consumer's pending entries but counts a delivery for each: use
/// [`read_own_pending`] for that.)
pub(crate) async fn read(
    conn: &mut Conn,
    keys: &Keys,
    consumer: &str,
    count: usize,
    block_ms: Option<u64>,
    from: &str,
) -> RedisResult<Value> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(&keys.group)
        .arg(consumer)
        .arg("COUNT")
        .arg(count);
    if let Some(ms) = block_ms {
        cmd.arg("BLOCK").arg(ms);
    }
    cmd.arg("STREAMS").arg(&keys.stream).arg(from);
    cmd.query_async(conn).await
}

/// Reads up to `count` of `consumer`'s own pending entries after `after`
/// ("0": from the start) without counting a delivery, and no more once
/// those read take `max_bytes` (ids and fields; the first entry is always
/// read): a restart re-reads large entries a few at a time. The reply is an
/// entry list (see [`entry_list`]).
pub(crate) async fn read_own_pending(
    conn: &mut Conn,
    keys: &Keys,
    consumer: &str,
    count: usize,
    after: &str,
    max_bytes: usize,
) -> RedisResult<Value> {
    crate::store::scripts::PENDING
        .evalsha(1)
        .arg(&keys.stream)
        .arg(&keys.group)
        .arg(consumer)
        .arg(after)
        .arg(count)
        .arg(max_bytes)
        .query_async(conn)
        .await
}

/// Acknowledges ids (space separated) in commands of at most `per_command`
/// ids, added to `pipe`. XACK costs Redis about 0.4 µs per id.
pub(crate) fn ack_into(pipe: &mut redis::Pipeline, keys: &Keys, ids: &str, per_command: usize) {
    for c in acks(keys, ids, per_command) {
        pipe.add_command(c);
    }
}

/// The XACK commands of ids (space separated), at most `per_command` ids
/// each.
pub(crate) fn acks(keys: &Keys, ids: &str, per_command: usize) -> Vec<redis::Cmd> {
    ack_commands(keys, ids.split(' ').filter(|s| !s.is_empty()), per_command)
}

/// Acknowledges `ids` in commands of at most `per_command` ids, added to
/// `pipe`.
pub(crate) fn ack_each_into<S: redis::ToRedisArgs>(
    pipe: &mut redis::Pipeline,
    keys: &Keys,
    ids: impl IntoIterator<Item = S>,
    per_command: usize,
) {
    for c in ack_commands(keys, ids, per_command) {
        pipe.add_command(c);
    }
}

/// The XACK commands of `ids`, at most `per_command` ids each.
fn ack_commands<S: redis::ToRedisArgs>(
    keys: &Keys,
    ids: impl IntoIterator<Item = S>,
    per_command: usize,
) -> Vec<redis::Cmd> {
    let ids: Vec<S> = ids.into_iter().collect();
    ids.chunks(per_command)
        .map(|part| {
            let mut c = redis::cmd("XACK");
            c.arg(&keys.stream).arg(&keys.group).arg(part);
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn walks_an_xreadgroup_reply() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("hits"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk("1-0"),
                    Value::Array(vec![bulk("name"), bulk("a")]),
                ]),
                Value::Array(vec![bulk("2-0"), Value::Nil]),
            ]),
        ])]);
        let entries = read_reply_entries(&reply);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].id, b"1-0");
        let pairs: Vec<_> = entries[0].pairs().collect();
        assert_eq!(pairs, vec![(&b"name"[..], &b"a"[..])]);
        assert!(entries[1].fields.is_none());
        assert_eq!(entries[1].pairs().count(), 0);
        assert!(read_reply_entries(&Value::Nil).is_empty());
    }

    #[test]
    fn acks_in_bounded_commands() {
        let keys = Keys::new(&Default::default(), &Default::default());
        let mut pipe = redis::pipe();
        ack_into(&mut pipe, &keys, "1-0 2-0 3-0 4-0 5-0", 2);
        assert_eq!(pipe.cmd_iter().count(), 3);
    }
}
