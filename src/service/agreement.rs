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

/// How recently a consumer must have read to count as a live worker's:
/// half a registration's lifetime (a live worker renews its own, and one
/// paused longer than the lifetime has not read for that long either).
const LIVE_READ_MS: u64 = crate::model::keys::REGISTRATION_LIFETIME_MS / 2;

/// Why a worker named `own` must not start beside the consumers that read
/// the stream's group (every shard) within [`LIVE_READ_MS`] with no
/// registration under this prefix, if any: workers started with another
/// `HITCOUNT_PREFIX`, whose state and counters are under theirs, so they
/// count apart and nobody here fences them. A running worker warns with it.
pub(crate) async fn strangers(
    conn: &mut Conn,
    layout: &LayoutArgs,
    stream: &StreamArgs,
    own: &str,
) -> StoreResult<Option<String>> {
    let mut strangers = Vec::new();
    for keys in Keys::all_shards(layout, stream, conn.is_cluster()) {
        let reply: redis::Value = match redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(&keys.stream)
            .arg(&keys.group)
            .query_async(conn)
            .await
        {
            Ok(reply) => reply,
            // No stream or group yet: nobody reads it.
            Err(e) if matches!(e.code(), Some("ERR" | "NOGROUP")) => continue,
            Err(e) => return Err(e.into()),
        };
        for c in crate::store::group::ConsumerInfo::parse_all(&reply) {
            if c.name == own || c.idle_ms >= LIVE_READ_MS || strangers.contains(&c.name) {
                continue;
            }
            let registration = keys.consumer_registration(&c.name);
            let registered: bool = redis::Cmd::exists(registration).query_async(conn).await?;
            if !registered {
                strangers.push(c.name);
            }
        }
    }
    Ok((!strangers.is_empty()).then(|| {
        format!(
            "consumer(s) {} read group {} of stream {} but are not registered under \
             HITCOUNT_PREFIX '{}': workers started with another prefix count these hits \
             under theirs, and no worker here fences them; give every worker of a \
             stream the same HITCOUNT_PREFIX",
            strangers.join(", "),
            stream.group,
            stream.stream,
            layout.prefix
        )
    }))
}
