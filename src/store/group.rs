//! The consumer group's state as Redis reports it (`XINFO STREAM`, `XINFO
//! GROUPS`, `XINFO CONSUMERS`), parsed in one place into typed values: what
//! `hitcount status` shows, what the sampler exports, what "drained" means.
//! Replies come as flat `[key, value, …]` arrays (RESP2) or maps (RESP3);
//! both parse alike, and a field missing or of another type reads as
//! absent, never as a panic.

use redis::{FromRedisValue, RedisResult, Value};

use crate::model::keys::Keys;
use crate::store::connect::Conn;
use crate::store::stream::{entry_list, items, text as string, unless_no_stream};

/// The stream, as `XINFO STREAM` reports it (the fields hitcount uses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StreamInfo {
    /// Entries in the stream.
    pub length: u64,
    /// The id of the last entry ever added.
    pub last_generated_id: Option<String>,
    /// The oldest entry still in the stream.
    pub first_entry_id: Option<String>,
    /// Entries ever appended, trimmed ones included (Redis 7).
    pub entries_added: Option<u64>,
}

/// One consumer group, as `XINFO GROUPS` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GroupInfo {
    /// Its name.
    pub name: String,
    /// Entries delivered and not yet acknowledged.
    pub pending: u64,
    /// The last entry delivered to a consumer (`0-0` before any).
    pub last_delivered_id: String,
    /// Entries not yet delivered, when Redis can tell (an estimate that can
    /// stay wrong after a restart: see [`consistent_lag`]).
    pub lag: Option<u64>,
}

/// One consumer of a group, as `XINFO CONSUMERS` reports it (and as
/// `hitcount status` shows it).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct ConsumerInfo {
    /// Its name.
    pub name: String,
    /// Entries it holds unacknowledged.
    pub pending: u64,
    /// Time since it last tried to read, in ms.
    pub idle_ms: u64,
}

impl StreamInfo {
    /// Parses an `XINFO STREAM` reply.
    pub(crate) fn parse(reply: &Value) -> StreamInfo {
        let f = fields(reply);
        StreamInfo {
            length: number(&f, "length").unwrap_or(0),
            last_generated_id: text(&f, "last-generated-id"),
            entries_added: number(&f, "entries-added"),
            // `[id, [field, value, …]]`.
            first_entry_id: field(&f, "first-entry").and_then(|e| string(items(e).first()?)),
        }
    }
}

impl GroupInfo {
    /// Parses an `XINFO GROUPS` reply: every group.
    pub(crate) fn parse_all(reply: &Value) -> Vec<GroupInfo> {
        each_entry(reply, |f| GroupInfo {
            name: text(f, "name").unwrap_or_default(),
            pending: number(f, "pending").unwrap_or(0),
            last_delivered_id: text(f, "last-delivered-id").unwrap_or_else(|| "0-0".into()),
            lag: number(f, "lag"),
        })
    }
}

impl ConsumerInfo {
    /// Parses an `XINFO CONSUMERS` reply: every consumer.
    pub(crate) fn parse_all(reply: &Value) -> Vec<ConsumerInfo> {
        each_entry(reply, |f| ConsumerInfo {
            name: text(f, "name").unwrap_or_default(),
            pending: number(f, "pending").unwrap_or(0),
            idle_ms: number(f, "idle").unwrap_or(0),
        })
    }
}

/// The stream and its groups, in one round trip; `None` when the stream
/// does not exist.
pub(crate) async fn stream_and_groups(
    conn: &mut Conn,
    keys: &Keys,
) -> RedisResult<Option<(StreamInfo, Vec<GroupInfo>)>> {
    let exists: bool = redis::Cmd::exists(&keys.stream).query_async(conn).await?;
    if !exists {
        return Ok(None);
    }
    let (stream, groups): (Value, Value) = redis::pipe()
        .xinfo_stream(&keys.stream)
        .xinfo_groups(&keys.stream)
        .query_async(conn)
        .await?;
    Ok(Some((
        StreamInfo::parse(&stream),
        GroupInfo::parse_all(&groups),
    )))
}

/// This deployment's group (`keys.group`), `None` when the stream or the
/// group does not exist yet.
pub(crate) async fn own_group(conn: &mut Conn, keys: &Keys) -> RedisResult<Option<GroupInfo>> {
    let reply = redis::Cmd::xinfo_groups(&keys.stream)
        .query_async(conn)
        .await;
    // No stream yet: no group either (the worker creates both).
    let Some(reply) = unless_no_stream::<Value>(reply)? else {
        return Ok(None);
    };
    let mut groups = GroupInfo::parse_all(&reply).into_iter();
    Ok(groups.find(|g| g.name == keys.group))
}

/// A group's consumers, its lag made consistent with the stream's `length`
/// ([`consistent_lag`]) and the age in seconds of its oldest undelivered
/// entry (`None` when there is none), in one round trip.
pub(crate) async fn consumers_and_backlog(
    conn: &mut Conn,
    keys: &Keys,
    group: &GroupInfo,
    length: u64,
) -> RedisResult<(Vec<ConsumerInfo>, Option<u64>, Option<f64>)> {
    let (consumers, next): (Value, Value) = redis::pipe()
        .xinfo_consumers(&keys.stream, &group.name)
        .add_command(next_undelivered(keys, &group.last_delivered_id))
        .query_async(conn)
        .await?;
    let age = backlog_age_secs(&next, crate::model::clock::unix_ms());
    let lag = consistent_lag(group.lag, length, age.is_some());
    Ok((ConsumerInfo::parse_all(&consumers), lag, age))
}

/// The group's lag as far as the stream's positions allow, from Redis'
/// `lag` (`reported`), the stream's `length` and whether an entry after the
/// group's last-delivered id exists (`undelivered`): 0 when none does,
/// whatever `reported` says (after a restart from its AOF, Redis 7.0 may
/// keep a stale `entries-read` and report a lag of thousands for a group
/// whose last-delivered id is the stream's last one, for good); else
/// `reported` held within 1..=`length` (at least the entry seen, at most
/// every entry there is); `None` when Redis cannot tell and entries wait.
/// Autoscaling acts on the lag, so a lag the positions contradict is never
/// passed on.
pub(crate) fn consistent_lag(reported: Option<u64>, length: u64, undelivered: bool) -> Option<u64> {
    if !undelivered {
        return Some(0);
    }
    reported.map(|lag| lag.min(length).max(1))
}

/// Whether the group has read and acknowledged everything in the stream:
/// nothing pending and its last-delivered id is the stream's last id. (The
/// `lag` field is an estimate that can stay wrong after a restart, so it is
/// not used.)
pub(crate) async fn drained(conn: &mut Conn, keys: &Keys) -> RedisResult<bool> {
    let Some((stream, groups)) = stream_and_groups(conn, keys).await? else {
        return Ok(false);
    };
    Ok(groups
        .iter()
        .find(|g| g.name == keys.group)
        .is_some_and(|g| is_drained(&stream, g)))
}

/// The rule of [`drained`], pure.
pub(crate) fn is_drained(stream: &StreamInfo, group: &GroupInfo) -> bool {
    group.pending == 0 && stream.last_generated_id.as_deref() == Some(&group.last_delivered_id)
}

/// Every shard's own group (`keys.group`, its lag made consistent with
/// the stream's positions: [`consistent_lag`]) with the age in seconds of
/// its oldest undelivered entry, in shard order; `None` for a shard whose
/// stream or group does not exist yet. Three round trips however many
/// shards: each command names one shard's stream and goes to its slot
/// ([`Conn::query_each`]), never in a pipeline across slots.
pub(crate) async fn own_groups(
    conn: &mut Conn,
    shards: &[Keys],
    now_ms: i64,
) -> RedisResult<Vec<Option<(GroupInfo, Option<f64>)>>> {
    let exists = conn
        .each_key("EXISTS", shards.iter().map(|k| &k.stream))
        .await?;
    let present: Vec<usize> = (0..shards.len())
        .filter(|&i| matches!(exists.get(i), Some(Value::Int(n)) if *n > 0))
        .collect();
    // Each present shard's groups and length, in one round trip: the
    // length bounds the lag (see [`consistent_lag`]).
    let xinfo = present
        .iter()
        .flat_map(|&i| {
            let stream = &shards[i].stream;
            [redis::Cmd::xinfo_groups(stream), redis::Cmd::xlen(stream)]
        })
        .collect();
    let replies = conn.query_each(xinfo).await?;
    let found: Vec<(usize, GroupInfo, u64)> = present
        .into_iter()
        .zip(replies.chunks(2))
        .filter_map(|(i, r)| {
            let g = GroupInfo::parse_all(&r[0])
                .into_iter()
                .find(|g| g.name == shards[i].group)?;
            let length = u64::from_redis_value_ref(&r[1]).unwrap_or(0);
            Some((i, g, length))
        })
        .collect();
    let reads = found
        .iter()
        .map(|(i, g, _)| next_undelivered(&shards[*i], &g.last_delivered_id))
        .collect();
    let next = conn.query_each(reads).await?;
    let mut out = vec![None; shards.len()];
    for ((i, mut g, length), next) in found.into_iter().zip(&next) {
        let age = backlog_age_secs(next, now_ms);
        g.lag = consistent_lag(g.lag, length, age.is_some());
        out[i] = Some((g, age));
    }
    Ok(out)
}

/// The read of the first entry after a group's last-delivered id: the
/// oldest entry the group has not yet received. After the last possible id
/// (a stream that took an explicit `MAX-MAX` id) none can come: Redis
/// refuses `(MAX-MAX` as a start, so the range asked is empty instead.
fn next_undelivered(keys: &Keys, last_delivered: &str) -> redis::Cmd {
    if last_delivered == LAST_POSSIBLE_ID {
        return redis::Cmd::xrange_count(&keys.stream, "+", "-", 1);
    }
    redis::Cmd::xrange_count(&keys.stream, format!("({last_delivered}"), "+", 1)
}

/// The last id a stream can hold: once it took it, it takes no more entries.
const LAST_POSSIBLE_ID: &str = "18446744073709551615-18446744073709551615";

/// How long, in seconds, the entry of a [`next_undelivered`] reply has
/// waited (its id carries the ms it was appended); `None` when there is
/// none. Sturdier than XINFO's lag estimate, and closer to what users feel.
pub(crate) fn backlog_age_secs(next: &Value, now_ms: i64) -> Option<f64> {
    let entries = entry_list(next);
    let first = entries.first()?;
    let ms = crate::model::event::entry_id_ms(first.id).unwrap_or(now_ms);
    Some((now_ms - ms).max(0) as f64 / 1000.0)
}

/// Each entry of an array reply (one per group or consumer), read from its
/// fields by `read`.
fn each_entry<T>(reply: &Value, read: impl Fn(&[(String, &Value)]) -> T) -> Vec<T> {
    items(reply).iter().map(|e| read(&fields(e))).collect()
}

/// A flat `[key, value, key, value…]` (or map) reply as pairs.
fn fields(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Array(items) => items
            .chunks_exact(2)
            .filter_map(|kv| Some((string(&kv[0])?, &kv[1])))
            .collect(),
        Value::Map(m) => m
            .iter()
            .filter_map(|(k, v)| Some((string(k)?, v)))
            .collect(),
        _ => Vec::new(),
    }
}

/// A field as text (numbers written out).
fn text(fields: &[(String, &Value)], key: &str) -> Option<String> {
    match field(fields, key)? {
        Value::Int(i) => Some(i.to_string()),
        other => string(other),
    }
}

/// A field's value.
fn field<'a>(fields: &[(String, &'a Value)], key: &str) -> Option<&'a Value> {
    fields.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// A field as a non-negative number.
fn number(fields: &[(String, &Value)], key: &str) -> Option<u64> {
    text(fields, key)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn group_reply(name: &str, pending: i64, last: &str, lag: Value) -> Value {
        Value::Array(vec![
            bulk("name"),
            bulk(name),
            bulk("consumers"),
            Value::Int(2),
            bulk("pending"),
            Value::Int(pending),
            bulk("last-delivered-id"),
            bulk(last),
            bulk("entries-read"),
            Value::Int(10),
            bulk("lag"),
            lag,
        ])
    }

    #[test]
    fn groups_parse_with_and_without_a_known_lag() {
        let reply = Value::Array(vec![
            group_reply("hitcount", 3, "5-1", Value::Int(7)),
            group_reply("other", 0, "0-0", Value::Nil),
        ]);
        let groups = GroupInfo::parse_all(&reply);
        assert_eq!(
            groups,
            vec![
                GroupInfo {
                    name: "hitcount".into(),
                    pending: 3,
                    last_delivered_id: "5-1".into(),
                    lag: Some(7),
                },
                GroupInfo {
                    name: "other".into(),
                    pending: 0,
                    last_delivered_id: "0-0".into(),
                    lag: None,
                },
            ]
        );
    }

    #[test]
    fn a_lag_the_positions_contradict_is_not_passed_on() {
        // Nothing after the last-delivered id: 0, whatever Redis says (a
        // stale entries-read after a restart from the AOF).
        assert_eq!(consistent_lag(Some(153_919), 200_000, false), Some(0));
        assert_eq!(consistent_lag(None, 5, false), Some(0));
        // Entries wait: at least one, at most the stream's length.
        assert_eq!(consistent_lag(Some(7), 100, true), Some(7));
        assert_eq!(consistent_lag(Some(900), 100, true), Some(100));
        assert_eq!(consistent_lag(Some(0), 100, true), Some(1));
        assert_eq!(consistent_lag(None, 100, true), None);
    }

    #[test]
    fn resp3_maps_parse_like_arrays() {
        let map = Value::Map(vec![
            (bulk("name"), bulk("g")),
            (bulk("pending"), Value::Int(4)),
            (bulk("last-delivered-id"), bulk("9-0")),
        ]);
        let g = &GroupInfo::parse_all(&Value::Array(vec![map]))[0];
        assert_eq!((g.name.as_str(), g.pending, g.lag), ("g", 4, None));
    }

    #[test]
    fn odd_replies_read_as_absent_never_panic() {
        assert!(GroupInfo::parse_all(&Value::Nil).is_empty());
        assert!(GroupInfo::parse_all(&Value::Int(3)).is_empty());
        let half = Value::Array(vec![Value::Array(vec![bulk("name")])]);
        let g = &GroupInfo::parse_all(&half)[0];
        assert_eq!((g.name.as_str(), g.last_delivered_id.as_str()), ("", "0-0"));
        let negative = Value::Array(vec![group_reply("g", -1, "1-0", Value::Int(-5))]);
        let g = &GroupInfo::parse_all(&negative)[0];
        assert_eq!((g.pending, g.lag), (0, None));
        assert_eq!(StreamInfo::parse(&Value::Nil), StreamInfo::default());
    }

    #[test]
    fn the_stream_and_its_first_entry() {
        let reply = Value::Array(vec![
            bulk("length"),
            Value::Int(12),
            bulk("last-generated-id"),
            bulk("20-3"),
            bulk("first-entry"),
            Value::Array(vec![
                bulk("10-0"),
                Value::Array(vec![bulk("hit"), bulk("x")]),
            ]),
        ]);
        assert_eq!(
            StreamInfo::parse(&reply),
            StreamInfo {
                length: 12,
                last_generated_id: Some("20-3".into()),
                first_entry_id: Some("10-0".into()),
                entries_added: None,
            }
        );
    }

    #[test]
    fn consumers_parse() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("name"),
            bulk("w1"),
            bulk("pending"),
            Value::Int(5),
            bulk("idle"),
            Value::Int(1200),
            bulk("inactive"),
            Value::Int(1300),
        ])]);
        assert_eq!(
            ConsumerInfo::parse_all(&reply),
            vec![ConsumerInfo {
                name: "w1".into(),
                pending: 5,
                idle_ms: 1200
            }]
        );
    }

    #[test]
    fn drained_means_nothing_pending_and_the_last_id_delivered() {
        let stream = StreamInfo {
            length: 3,
            last_generated_id: Some("30-0".into()),
            ..StreamInfo::default()
        };
        let g = |pending, last: &str| GroupInfo {
            name: "g".into(),
            pending,
            last_delivered_id: last.into(),
            lag: None,
        };
        assert!(is_drained(&stream, &g(0, "30-0")));
        assert!(!is_drained(&stream, &g(1, "30-0")), "pending");
        assert!(!is_drained(&stream, &g(0, "29-0")), "undelivered");
        let empty = StreamInfo::default();
        assert!(!is_drained(&empty, &g(0, "0-0")), "no last id: unknown");
    }

    #[test]
    fn backlog_age_comes_from_the_entry_id() {
        let next = Value::Array(vec![Value::Array(vec![
            bulk("1000-0"),
            Value::Array(vec![bulk("hit"), bulk("x")]),
        ])]);
        assert_eq!(backlog_age_secs(&next, 3500), Some(2.5));
        assert_eq!(backlog_age_secs(&Value::Array(vec![]), 3500), None);
        assert_eq!(
            backlog_age_secs(&next, 500),
            Some(0.0),
            "clock behind: not negative"
        );
    }
}
