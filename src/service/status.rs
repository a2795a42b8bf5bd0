//! What `hitcount status` shows, read from Redis: the stream and its groups
//! (lag, pending, consumers), the leader and its lease, the number of known
//! counters and the leader's last cleaner pass. Rendered for a human or as
//! JSON for scripts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use redis::RedisResult;

use crate::model::keys::Keys;
use crate::store::connect::Conn;
use crate::store::counters::format_utc;
use crate::store::group;

/// Everything `hitcount status` shows.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Status {
    /// The stream's key.
    pub stream: String,
    /// Entries in the stream (0 when it does not exist).
    pub length: u64,
    /// The id of the last entry ever added.
    pub last_generated_id: Option<String>,
    /// The oldest entry still in the stream.
    pub first_entry_id: Option<String>,
    /// Every consumer group of the stream.
    pub groups: Vec<Group>,
    /// The current leader, if any.
    pub leader: Option<Leader>,
    /// Members of `known:`.
    pub known_counters: u64,
    /// The leader's last pass as it recorded it (field → value); numbers
    /// are JSON numbers.
    #[serde(serialize_with = "numbers_as_numbers")]
    pub last_pass: BTreeMap<String, String>,
}

/// Serializes a string map, writing values that are integers as numbers,
/// so scripts reading `--json` need not parse them.
fn numbers_as_numbers<S: serde::Serializer>(
    map: &BTreeMap<String, String>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut out = ser.serialize_map(Some(map.len()))?;
    for (k, v) in map {
        match v.parse::<i64>() {
            Ok(n) => out.serialize_entry(k, &n)?,
            Err(_) => out.serialize_entry(k, v)?,
        }
    }
    out.end()
}

/// One consumer group.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Group {
    /// Its name.
    pub name: String,
    /// Entries not yet delivered, as Redis estimates it (`XINFO GROUPS`
    /// lag; an estimate that can be wrong after a restart, `None` when
    /// Redis cannot tell).
    pub lag: Option<u64>,
    /// Whether an entry after the last-delivered one exists.
    pub behind: bool,
    /// Age in seconds of the oldest undelivered entry (0 when none): how far
    /// behind the group is, read from the entry's own id, so it is exact.
    pub backlog_age_secs: f64,
    /// Entries delivered and not yet acknowledged.
    pub pending: u64,
    /// The last entry delivered to a consumer.
    pub last_delivered_id: String,
    /// Its consumers.
    pub consumers: Vec<Consumer>,
}

/// One consumer of a group.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Consumer {
    /// Its name.
    pub name: String,
    /// Entries it holds unacknowledged.
    pub pending: u64,
    /// Time since it last read, in ms.
    pub idle_ms: u64,
}

/// The holder of the leader lease.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Leader {
    /// Its token: `consumer/random`.
    pub token: String,
    /// Time left on its lease, in ms.
    pub lease_left_ms: u64,
}

/// Reads the status from Redis; `leader_key` is the full lease key.
pub async fn gather(conn: &mut Conn, keys: &Keys, leader_key: &str) -> RedisResult<Status> {
    // Two commands, not one pipeline: on a cluster the keys may sit in two
    // hash slots, and a pipeline may not span them.
    let known: u64 = redis::cmd("ZCARD")
        .arg(keys.known())
        .query_async(conn)
        .await?;
    let last_pass: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(keys.cleaner_status())
        .query_async(conn)
        .await?;
    let leader = crate::service::leader::current(conn, leader_key)
        .await?
        .map(|(token, left)| Leader {
            token,
            lease_left_ms: left.as_millis() as u64,
        });
    let mut status = Status {
        stream: keys.stream.clone(),
        leader,
        known_counters: known,
        last_pass,
        ..Status::default()
    };
    let Some((info, groups)) = group::stream_and_groups(conn, keys).await? else {
        return Ok(status);
    };
    status.length = info.length;
    status.last_generated_id = info.last_generated_id;
    status.first_entry_id = info.first_entry_id;
    for g in groups {
        let now_ms = crate::model::clock::unix_ms();
        let (consumers, age) = group::consumers_and_backlog(conn, keys, &g, now_ms).await?;
        status.groups.push(Group {
            lag: g.lag,
            behind: age.is_some(),
            backlog_age_secs: age.unwrap_or(0.0),
            pending: g.pending,
            last_delivered_id: g.last_delivered_id,
            consumers: consumers
                .into_iter()
                .map(|c| Consumer {
                    name: c.name,
                    pending: c.pending,
                    idle_ms: c.idle_ms,
                })
                .collect(),
            name: g.name,
        });
    }
    Ok(status)
}

/// The status for a human.
pub fn render(s: &Status, now_ms: i64) -> String {
    let mut out = String::new();
    let last_id = s.last_generated_id.as_deref().unwrap_or("none");
    let first_id = s.first_entry_id.as_deref().unwrap_or("none");
    let _ = writeln!(
        out,
        "stream {}: {} entries (oldest {first_id}, last {last_id})",
        s.stream, s.length
    );
    if s.groups.is_empty() {
        let _ = writeln!(out, "  no consumer group");
    }
    for g in &s.groups {
        let lag = g.lag.map_or("unknown".to_string(), |l| l.to_string());
        let _ = writeln!(
            out,
            "group {}: lag {lag} (estimate), backlog age {:.1} s, pending {}, last delivered {}",
            g.name, g.backlog_age_secs, g.pending, g.last_delivered_id
        );
        for c in &g.consumers {
            let _ = writeln!(
                out,
                "  consumer {}: pending {}, idle {:.1} s",
                c.name,
                c.pending,
                c.idle_ms as f64 / 1000.0
            );
        }
    }
    match &s.leader {
        Some(l) => {
            let _ = writeln!(
                out,
                "leader: {} (lease left {:.1} s)",
                l.token,
                l.lease_left_ms as f64 / 1000.0
            );
        }
        None => {
            let _ = writeln!(out, "leader: none");
        }
    }
    let _ = writeln!(out, "known counters: {}", s.known_counters);
    let p = &s.last_pass;
    match p.get("at_ms").and_then(|v| v.parse::<i64>().ok()) {
        Some(at) => {
            let get = |k: &str| p.get(k).map(String::as_str).unwrap_or("?");
            let _ = writeln!(
                out,
                "last cleaner pass: {} UTC ({:.0} s ago) by {}: took {} ms, {} counters scanned, \
                 {} samples removed, {} counters removed, {} stream entries trimmed",
                format_utc(at.div_euclid(1000)),
                (now_ms - at).max(0) as f64 / 1000.0,
                get("leader"),
                get("duration_ms"),
                get("counters_scanned"),
                get("samples_removed"),
                get("counters_removed"),
                get("trimmed"),
            );
        }
        None => {
            let _ = writeln!(out, "last cleaner pass: none recorded");
        }
    }
    out
}
