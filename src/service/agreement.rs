//! What every worker must agree on, recorded in Redis by the first: the
//! stream's shard count ([`crate::store::shard_count`]) and the counters'
//! layout ([`crate::store::layout_record`]). Checked when a worker starts
//! and again while it runs (`service::worker`'s maintenance): a Redis
//! restarted empty, or a record deleted under running workers, lets a
//! producer or a worker record another, and the workers then read streams
//! producers no longer write, or count with another layout, silently.

use crate::model::config::{LayoutArgs, StreamArgs};
use crate::model::keys::Keys;
use crate::store::connect::{Conn, StoreResult};
use crate::store::layout_record;
use crate::store::shard_count::{self, Recorded};

/// Records the shard count and the layout unless recorded, or says why a
/// worker with these settings must not count: another count or layout is
/// recorded, or no count is and this one would leave entries unread.
pub(crate) async fn refusal(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
) -> StoreResult<Option<String>> {
    let wanted = stream.shards.max(1);
    let refusal = match shard_count::record(conn, layout, stream).await? {
        Recorded::Agreed => None,
        Recorded::Other { recorded, key } => Some(format!(
            "HITCOUNT_SHARDS is {wanted}, but this stream's workers read it as {recorded} \
             shard(s) (recorded in {key}): give every worker and producer the same \
             count; to change it, drain the stream with the old count, stop every \
             worker, then delete {key}"
        )),
        Recorded::Damaged { key, value } => Some(shard_count::damaged(&key, &value)),
        Recorded::Strands { key, stranded } => Some(format!(
            "HITCOUNT_SHARDS is {wanted}, which leaves {} unread (no shard count is \
             recorded in {key} yet): give every worker and producer the count those \
             hits were sent with, or delete those streams",
            shard_count::describe(&stranded)
        )),
    };
    let counters = Keys::new(layout, stream);
    Ok(match refusal {
        None => layout_record::record(conn, &counters, layout)
            .await?
            .map(|other| other.refusal(layout)),
        refused => refused,
    })
}

/// Warns about entries in streams the shard count leaves unread (sent with
/// another count): once, when a worker starts.
pub(crate) async fn warn_unread(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
) -> StoreResult<()> {
    let stranded = shard_count::stranded(conn, layout, stream).await?;
    if !stranded.is_empty() {
        let wanted = stream.shards.max(1);
        let warning = shard_count::unread_warning(&stranded, wanted);
        tracing::warn!(shards = wanted, "{warning}");
    }
    Ok(())
}

/// Other consumer groups of the stream (`shards`) read by workers of this
/// prefix, their shard count recorded under it: each group gets every
/// entry, so both count every hit into the same counters. What to say of
/// them, if any: a starting worker stops, a running one warns.
pub(crate) async fn other_groups(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
    shards: &[Keys],
) -> StoreResult<Option<String>> {
    let mut found: Vec<(String, String)> = Vec::new();
    for keys in shards {
        let reply = redis::Cmd::xinfo_groups(&keys.stream)
            .query_async::<redis::Value>(conn)
            .await;
        // No stream yet, or a key of another type: no group to meet.
        let Ok(reply) = reply else { continue };
        for group in crate::store::group::GroupInfo::parse_all(&reply) {
            if group.name == stream.group || found.iter().any(|(g, _)| *g == group.name) {
                continue;
            }
            let theirs = StreamArgs {
                group: group.name.clone(),
                ..stream.clone()
            };
            let record = Keys::new(layout, &theirs).shard_count();
            let recorded: bool = redis::Cmd::exists(&record).query_async(conn).await?;
            if recorded {
                found.push((group.name, record));
            }
        }
    }
    Ok((!found.is_empty()).then(|| {
        let (groups, records): (Vec<String>, Vec<String>) = found
            .into_iter()
            .map(|(g, r)| (format!("{g:?}"), r))
            .unzip();
        format!(
            "consumer group(s) {} of stream {} are read by workers of HITCOUNT_PREFIX '{}' \
             (recorded in {}), and this worker's group is {:?}: each group gets every hit, \
             so both would count it into the same counters; give every worker of a \
             deployment the same HITCOUNT_GROUP, or another HITCOUNT_PREFIX to count \
             apart; a group gone for good is removed with XGROUP DESTROY and its record \
             deleted",
            groups.join(", "),
            stream.stream,
            layout.prefix,
            records.join(", "),
            stream.group
        )
    }))
}

/// How a consumer not registered under this prefix shows as another
/// prefix' live worker: it read within this many ms when a worker starts,
/// and again within [`AGAIN_MS`] on a second look that long after (a
/// consumer that read once and died, or a foreign one, has not read since:
/// its idle time then exceeds the gap).
const LIVE_READ_MS: u64 = crate::model::keys::REGISTRATION_LIFETIME_MS / 2;
/// The gap between the two looks of a starting worker, and the idle time a
/// running worker's look allows.
const AGAIN_MS: u64 = 2000;

/// Why a worker named `own` must not start: consumers of the stream's
/// group (every shard) that are not registered under this prefix and read
/// on two looks [`AGAIN_MS`] apart, if any. They are workers started with
/// another `HITCOUNT_PREFIX`, whose state and counters are under theirs:
/// they count apart and nobody here fences them.
pub(crate) async fn strangers_at_start(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
    own: &str,
) -> StoreResult<Option<String>> {
    let shards = Keys::all_shards(layout, stream, conn.is_cluster());
    let first = strangers(conn, &shards, own, LIVE_READ_MS).await?;
    if first.is_empty() {
        return Ok(None);
    }
    tokio::time::sleep(std::time::Duration::from_millis(AGAIN_MS)).await;
    let again = strangers(conn, &shards, own, AGAIN_MS).await?;
    let both: Vec<String> = again.into_iter().filter(|c| first.contains(c)).collect();
    Ok((!both.is_empty()).then(|| stranger_words(layout, stream, &both)))
}

/// What a running worker of shard `keys` warns about: consumers of that
/// shard not registered under this prefix that read within [`AGAIN_MS`]
/// (see [`strangers_at_start`]; each shard's worker looks at its own).
pub(crate) async fn strangers_now(
    conn: &mut Conn,
    (layout, stream): (&LayoutArgs, &StreamArgs),
    keys: &Keys,
    own: &str,
) -> StoreResult<Option<String>> {
    let now = strangers(conn, std::slice::from_ref(keys), own, AGAIN_MS).await?;
    Ok((!now.is_empty()).then(|| stranger_words(layout, stream, &now)))
}

/// Consumers of the group on `shards` but `own` that read within
/// `within_ms` and have no registration under this prefix.
async fn strangers(
    conn: &mut Conn,
    shards: &[Keys],
    own: &str,
    within_ms: u64,
) -> StoreResult<Vec<String>> {
    let mut strangers = Vec::new();
    for keys in shards {
        let reply: redis::Value = match redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(&keys.stream)
            .arg(&keys.group)
            .query_async(conn)
            .await
        {
            Ok(reply) => reply,
            // No stream or group yet, or a key of another type: nobody
            // reads it (the worker meets the second in its own step).
            Err(_) => continue,
        };
        for c in crate::store::group::ConsumerInfo::parse_all(&reply) {
            if c.name == own || c.idle_ms >= within_ms || strangers.contains(&c.name) {
                continue;
            }
            let registration = keys.consumer_registration(&c.name);
            let registered: bool = redis::Cmd::exists(registration).query_async(conn).await?;
            if !registered {
                strangers.push(c.name);
            }
        }
    }
    Ok(strangers)
}

/// What to say of `strangers` (names quoted: they come from Redis).
fn stranger_words(layout: &LayoutArgs, stream: &StreamArgs, strangers: &[String]) -> String {
    let names: Vec<String> = strangers.iter().map(|n| format!("{n:?}")).collect();
    format!(
        "consumer(s) {} read group {} of stream {} but are not registered under \
         HITCOUNT_PREFIX '{}': workers started with another prefix count these hits \
         under theirs, and no worker here fences them; give every worker of a \
         stream the same HITCOUNT_PREFIX",
        names.join(", "),
        stream.group,
        stream.stream,
        layout.prefix
    )
}
