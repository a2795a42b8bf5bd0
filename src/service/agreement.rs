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
