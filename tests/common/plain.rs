//! What the tests read from and do to Redis with plain commands (XINFO,
//! XRANGE, XREADGROUP, XGROUP), parsed here: the tests check the product
//! from outside, so they do not borrow its own parsers.

use std::collections::BTreeMap;

use hitcount::model::keys::Keys;
use hitcount::store::connect::Conn;
use redis::streams::StreamReadOptions;
use redis::{AsyncCommands, RedisResult, Value};

/// How often a worker samples its group for the lag and backlog metrics
/// (the documented refresh period of those gauges).
pub const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Milliseconds since the Unix epoch, by this machine's clock.
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The milliseconds part of a stream entry id (`<ms>-<seq>`).
pub fn id_ms(id: &str) -> i64 {
    id.split_once('-').map_or(id, |(ms, _)| ms).parse().unwrap()
}

/// The bytes of a string reply.
pub fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// One stream entry of a reply: its id and its field/value pairs (none for
/// an entry deleted while pending).
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: Vec<u8>,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Entry {
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|(f, v)| (f.as_slice(), v.as_slice()))
    }

    pub fn id_str(&self) -> &str {
        std::str::from_utf8(&self.id).unwrap_or("")
    }
}

/// The entries of an XRANGE reply (`[[id, [field, value, ...]], ...]`).
pub fn entry_list(list: &Value) -> Vec<Entry> {
    let rows: Vec<(Vec<u8>, Vec<Vec<u8>>)> =
        redis::from_redis_value_ref(list).expect("a list of stream entries");
    rows.into_iter()
        .map(|(id, flat)| Entry {
            id,
            fields: flat
                .chunks_exact(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect(),
        })
        .collect()
}

/// The entries of an XREADGROUP reply (`[[stream, [entry, ...]], ...]`, a
/// map under RESP3, or nil).
pub fn read_reply_entries(reply: &Value) -> Vec<Entry> {
    match reply {
        Value::Array(streams) => streams
            .iter()
            .filter_map(|s| match s {
                Value::Array(kv) => kv.get(1).map(entry_list),
                _ => None,
            })
            .flatten()
            .collect(),
        Value::Map(m) => m.iter().flat_map(|(_, es)| entry_list(es)).collect(),
        _ => Vec::new(),
    }
}

/// The fields of an XINFO reply (a flat array under RESP2, a map under
/// RESP3), by name.
pub fn info_fields(reply: &Value) -> BTreeMap<String, Value> {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Array(items) => items.chunks_exact(2).map(|kv| (&kv[0], &kv[1])).collect(),
        Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        _ => Vec::new(),
    };
    pairs
        .into_iter()
        .filter_map(|(k, v)| Some((String::from_utf8_lossy(bytes(k)?).into_owned(), v.clone())))
        .collect()
}

/// A field of [`info_fields`] as text (numbers too).
pub fn info_text(fields: &BTreeMap<String, Value>, name: &str) -> Option<String> {
    match fields.get(name)? {
        Value::Int(n) => Some(n.to_string()),
        v => bytes(v).map(|b| String::from_utf8_lossy(b).into_owned()),
    }
}

/// A field of [`info_fields`] as a number.
pub fn info_number(fields: &BTreeMap<String, Value>, name: &str) -> Option<u64> {
    info_text(fields, name)?.parse().ok()
}

/// `XINFO STREAM`'s fields, and every group's of `XINFO GROUPS`.
pub async fn stream_and_groups(
    conn: &mut Conn,
    stream: &str,
) -> RedisResult<(BTreeMap<String, Value>, Vec<BTreeMap<String, Value>>)> {
    let info: Value = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(stream)
        .query_async(conn)
        .await?;
    let groups: Value = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query_async(conn)
        .await?;
    let groups = match groups {
        Value::Array(gs) => gs.iter().map(info_fields).collect(),
        _ => Vec::new(),
    };
    Ok((info_fields(&info), groups))
}

/// Whether the group has read and acknowledged the whole stream: nothing
/// pending and its last-delivered id is the stream's last id. False while
/// the stream does not exist.
pub async fn drained(conn: &mut Conn, keys: &Keys) -> RedisResult<bool> {
    let exists: bool = redis::cmd("EXISTS")
        .arg(&keys.stream)
        .query_async(conn)
        .await?;
    if !exists {
        return Ok(false);
    }
    let (stream, groups) = stream_and_groups(conn, &keys.stream).await?;
    let last = info_text(&stream, "last-generated-id");
    Ok(groups.iter().any(|g| {
        info_text(g, "name").as_deref() == Some(keys.group.as_str())
            && info_number(g, "pending") == Some(0)
            && info_text(g, "last-delivered-id") == last
    }))
}

/// Creates the group at the stream's start (and the stream), as a worker
/// does; an existing group is kept.
pub async fn ensure_group(conn: &mut Conn, keys: &Keys) -> RedisResult<()> {
    match conn
        .xgroup_create_mkstream::<_, _, _, ()>(&keys.stream, &keys.group, "0")
        .await
    {
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        other => other,
    }
}

/// XREADGROUP of up to `count` new entries for `consumer`, left pending.
pub async fn read_new_entries(
    conn: &mut Conn,
    keys: &Keys,
    consumer: &str,
    count: usize,
) -> RedisResult<Value> {
    let opts = StreamReadOptions::default()
        .group(&keys.group, consumer)
        .count(count);
    conn.xread_options(&[&keys.stream], &[">"], &opts).await
}
