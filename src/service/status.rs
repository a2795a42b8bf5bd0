//! What `hitcount status` shows, read from Redis: the stream and its groups
//! (lag, pending, consumers), every stream shard (length, lag, pending,
//! consumers, the process that reads it), the leader and its lease, the
//! number of known counters and the leader's last cleaner pass. On a Redis
//! Cluster with stream shards it also shows which master serves which
//! shards and the slots to move to even them out
//! ([`crate::service::shard_spread`]). Only the gathering and the data live
//! here: the `status` subcommand turns them into text (or JSON, through
//! their `Serialize`).
//!
//! With one shard the stream's fields are that stream's; with several they
//! sum up the shards (`length`) and `groups` holds the deployment's group
//! over all of them. Each shard is read on its own: on a cluster its
//! commands go to its slot, never in a pipeline across slots.

use std::collections::BTreeMap;

use redis::{AsyncCommands, RedisResult};

use crate::model::keys::Keys;
use crate::service::shard_spread::{spread, MasterShards, ShardMove};
use crate::store::connect::Conn;
use crate::store::group::{self, ConsumerInfo as Consumer};
use crate::store::shard_count::Stranded;

/// Everything `hitcount status` shows.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Status {
    /// The stream's key.
    pub stream: String,
    /// Whether the stream (any of its shards) exists: a mistyped one does not.
    pub exists: bool,
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
    /// Members of `stats:known:`: statistics hashes (hits with a value).
    pub known_stats: u64,
    /// The leader's last pass as it recorded it (field → value); numbers
    /// are JSON numbers; null in JSON when none is recorded.
    #[serde(serialize_with = "numbers_as_numbers")]
    pub last_pass: BTreeMap<String, String>,
    /// Every shard of the stream, in order (one with an unsharded stream).
    pub shards: Vec<Shard>,
    /// On a Redis Cluster with several shards: each master, the shards it
    /// serves and their share of the traffic, in the order of its lowest
    /// slot (empty otherwise).
    pub masters: Vec<MasterShards>,
    /// Slot moves that balance the masters' work: their shards' traffic,
    /// and `known:`'s ZADDs (empty when none would help).
    pub evening_moves: Vec<ShardMove>,
    /// Streams of this name that the shard count in use leaves unread,
    /// holding entries the group has yet to read or acknowledge: hits sent
    /// with another count, which no worker will count (empty when none).
    pub unread: Vec<Stranded>,
}

/// One shard of the stream and the deployment's group on it.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Shard {
    /// Its number, `0..HITCOUNT_SHARDS`.
    pub shard: u32,
    /// Its stream's key (`hits:{3}`; the stream itself when unsharded).
    pub stream: String,
    /// Entries in it (0 when it does not exist).
    pub length: u64,
    /// The group's lag on it (Redis' estimate, held to what the positions
    /// allow; `None` when unknown or when the group does not exist yet).
    pub lag: Option<u64>,
    /// Age in seconds of its oldest undelivered entry (0 when none).
    pub backlog_age_secs: f64,
    /// Entries delivered and not yet acknowledged.
    pub pending: u64,
    /// The group's consumers on it.
    pub consumers: Vec<Consumer>,
    /// The lease of the process that reads it (with several shards; `None`
    /// when nobody holds it, and always with one, which every worker reads).
    pub owner: Option<Leader>,
}

/// Serializes a string map, writing values that are integers as numbers,
/// so scripts reading `--json` need not parse them.
fn numbers_as_numbers<S: serde::Serializer>(
    map: &BTreeMap<String, String>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    let value = |v: &str| {
        v.parse::<i64>()
            .map_or(serde_json::Value::from(v), Into::into)
    };
    if map.is_empty() {
        // No pass recorded yet: null, not an object of another shape.
        return ser.serialize_none();
    }
    ser.collect_map(map.iter().map(|(k, v)| (k, value(v))))
}

/// One consumer group.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Group {
    /// Its name.
    pub name: String,
    /// Entries not yet delivered, as Redis estimates it (`XINFO GROUPS`
    /// lag), held to what the stream's positions allow: 0 when no entry
    /// follows the last-delivered one, at most the stream's length
    /// ([`group::consistent_lag`]); `None` when Redis cannot tell.
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

/// The holder of the leader lease.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Leader {
    /// Its token: `consumer/random`.
    pub token: String,
    /// Time left on its lease, in ms; `None` (JSON null) for a key that
    /// holds no lease (no expiry, or another type), which the next worker
    /// to try takes over.
    pub lease_left_ms: Option<u64>,
}

/// Reads the status from Redis: `shards` are the keys of every shard (one
/// for an unsharded stream), `leader_key` is the full lease key.
pub(crate) async fn gather(
    conn: &mut Conn,
    shards: &[Keys],
    leader_key: &str,
) -> RedisResult<Status> {
    let Some(keys) = shards.first() else {
        return Ok(Status::default());
    };
    // Two commands, not one pipeline: on a cluster the keys may sit in two
    // hash slots, and a pipeline may not span them.
    let mut status = Status {
        stream: keys.stream.clone(),
        known_counters: conn.zcard(keys.known()).await?,
        known_stats: conn.zcard(keys.stats_known()).await?,
        last_pass: crate::service::duties::last_recorded(conn, keys).await?,
        leader: lease(conn, leader_key).await?,
        ..Status::default()
    };
    let mut added = Vec::with_capacity(shards.len());
    let mut grouped = false;
    for k in shards {
        let (s, entries_added, has_group) = shard(conn, k).await?;
        status.exists |= entries_added.is_some();
        grouped |= has_group;
        status.shards.push(s);
        added.push(entries_added.unwrap_or(0));
    }
    if shards.len() > 1 {
        if conn.is_cluster() {
            let masters = crate::store::topology::masters(conn).await?;
            (status.masters, status.evening_moves) =
                spread(&masters, &added, &keys.known(), status.known_counters);
        }
        status.stream = base_stream(&keys.stream);
        status.length = status.shards.iter().map(|s| s.length).sum();
        // No shard has the group yet (no worker started): none, as on one
        // stream, not one made up of lags nobody measured.
        if status.exists && grouped {
            status.groups = vec![over_shards(&keys.group, &status.shards)];
        }
        return Ok(status);
    }
    let Some((info, groups)) = group::stream_and_groups(conn, keys).await? else {
        return Ok(status);
    };
    status.length = info.length;
    status.last_generated_id = info.last_generated_id;
    status.first_entry_id = info.first_entry_id;
    for g in groups {
        let (consumers, lag, age) =
            group::consumers_and_backlog(conn, keys, &g, info.length).await?;
        status.groups.push(Group {
            lag,
            behind: age.is_some(),
            backlog_age_secs: age.unwrap_or(0.0),
            pending: g.pending,
            last_delivered_id: g.last_delivered_id,
            consumers,
            name: g.name,
        });
    }
    Ok(status)
}

/// A lease's holder and the time it has left.
async fn lease(conn: &mut Conn, key: &str) -> RedisResult<Option<Leader>> {
    Ok(crate::service::leader::current(conn, key)
        .await?
        .map(|(token, left)| Leader {
            token,
            lease_left_ms: left.map(|l| l.as_millis() as u64),
        }))
}

/// A shard's status, the entries ever added to it (0 when unknown; `None`
/// when its stream does not exist), and whether it has the group.
async fn shard(conn: &mut Conn, k: &Keys) -> RedisResult<(Shard, Option<u64>, bool)> {
    let mut out = Shard {
        shard: k.shard,
        stream: k.stream.clone(),
        ..Shard::default()
    };
    if k.shards > 1 {
        out.owner = lease(conn, &k.shard_lease()).await?;
    }
    let Some((info, groups)) = group::stream_and_groups(conn, k).await? else {
        return Ok((out, None, false));
    };
    out.length = info.length;
    let group = groups.into_iter().find(|g| g.name == k.group);
    let has_group = group.is_some();
    if let Some(g) = group {
        let (consumers, lag, age) = group::consumers_and_backlog(conn, k, &g, info.length).await?;
        out.lag = lag;
        out.pending = g.pending;
        out.backlog_age_secs = age.unwrap_or(0.0);
        out.consumers = consumers;
    }
    Ok((out, Some(info.entries_added.unwrap_or(0)), has_group))
}

/// The configured stream's name from shard 0's (`hits:{0}` → `hits`).
fn base_stream(shard0: &str) -> String {
    shard0.strip_suffix(":{0}").unwrap_or(shard0).to_string()
}

/// The group over every shard, pure: lag and pending summed (the lag
/// unknown when any shard's is), the oldest backlog, each consumer once
/// (its pending summed, its shortest idle time).
pub(crate) fn over_shards(name: &str, shards: &[Shard]) -> Group {
    let mut consumers: BTreeMap<&str, Consumer> = BTreeMap::new();
    for c in shards.iter().flat_map(|s| &s.consumers) {
        let e = consumers.entry(&c.name).or_insert_with(|| Consumer {
            name: c.name.clone(),
            pending: 0,
            idle_ms: u64::MAX,
        });
        e.pending += c.pending;
        e.idle_ms = e.idle_ms.min(c.idle_ms);
    }
    let age = shards
        .iter()
        .map(|s| s.backlog_age_secs)
        .fold(0.0, f64::max);
    Group {
        name: name.to_string(),
        lag: shards.iter().map(|s| s.lag).sum(),
        behind: age > 0.0 || shards.iter().any(|s| s.lag.is_some_and(|l| l > 0)),
        backlog_age_secs: age,
        pending: shards.iter().map(|s| s.pending).sum(),
        last_delivered_id: String::new(),
        consumers: consumers.into_values().collect(),
    }
}

/// A shard's line for tests of what status gathers and how it is shown.
#[cfg(test)]
pub(crate) fn test_shard(
    k: u32,
    lag: Option<u64>,
    pending: u64,
    age: f64,
    consumers: &[(&str, u64, u64)],
) -> Shard {
    Shard {
        shard: k,
        stream: format!("hits:{{{k}}}"),
        length: 10,
        lag,
        backlog_age_secs: age,
        pending,
        consumers: consumers
            .iter()
            .map(|&(name, pending, idle_ms)| Consumer {
                name: name.into(),
                pending,
                idle_ms,
            })
            .collect(),
        owner: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_shard as shard;

    #[test]
    fn the_group_over_shards_sums_and_merges() {
        let shards = [
            shard(0, Some(3), 1, 0.0, &[("a", 1, 500), ("b", 0, 90)]),
            shard(1, Some(4), 2, 2.5, &[("a", 2, 100)]),
        ];
        let g = over_shards("hitcount", &shards);
        assert_eq!((g.lag, g.pending, g.backlog_age_secs), (Some(7), 3, 2.5));
        assert!(g.behind);
        let a = &g.consumers[0];
        assert_eq!((a.name.as_str(), a.pending, a.idle_ms), ("a", 3, 100));
        let unknown = [shard(0, None, 0, 0.0, &[]), shard(1, Some(0), 0, 0.0, &[])];
        let g = over_shards("hitcount", &unknown);
        assert_eq!((g.lag, g.behind), (None, false));
        assert_eq!(base_stream("hits:{0}"), "hits");
    }
}
