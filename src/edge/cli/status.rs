//! `hitcount status`: the stream, its groups and consumers, every shard and
//! the process reading it, the leader, the known counters and the last
//! cleaner pass, for a human or (`--json`) for scripts.

use super::Common;
use crate::model::config::LeaderArgs;
use crate::model::keys::Keys;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) common: super::Pick<Common, Uses>,
    #[command(flatten)]
    leader: super::Pick<LeaderArgs, LeaderUses>,
}

/// Of the leader's settings `status` needs only the lease's key.
pub(super) struct LeaderUses;

impl super::Uses for LeaderUses {
    const SHOWN: &'static [&'static str] = &["leader_key"];
}

/// The settings of [`Common`] `status` shows: the stream, its group and shards, and the keys' prefix.
pub(super) struct Uses;

impl super::Uses for Uses {
    const SHOWN: &'static [&'static str] = &[
        "url",
        "cluster",
        "ca",
        "cert",
        "key",
        "prefix",
        "stream",
        "group",
        "dead_stream",
        "shards",
    ];
    const HIDDEN: &'static [&'static str] = &["precisions", "samples"];
}

pub async fn run(mut args: Args) -> anyhow::Result<()> {
    args.common.validate()?;
    args.leader.validate()?;
    let mut conn = super::connect(&args.common.redis).await?;
    super::reach::adopt_recorded_shards(&mut conn, &mut args.common).await?;
    let shards = Keys::all_shards(&args.common.layout, &args.common.stream, conn.is_cluster());
    let leader_key = shards[0].leader(&args.leader.leader_key);
    let mut status = crate::service::status::gather(&mut conn, &shards, &leader_key).await?;
    let (layout, stream) = (&args.common.layout, &args.common.stream);
    status.unread = crate::store::shard_count::stranded(&mut conn, layout, stream).await?;
    if !status.unread.is_empty() {
        tracing::warn!(
            "{} are not read with HITCOUNT_SHARDS={}: they were sent with another shard \
             count; run workers with that count until they drain, or delete them",
            crate::store::shard_count::describe(&status.unread),
            stream.shards.max(1)
        );
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        let mut text = crate::service::status::render(&status, crate::model::clock::unix_ms());
        if !status.unread.is_empty() {
            text.push_str(&format!(
                "unread: {} are not read with {} shard(s): sent with another shard count\n",
                crate::store::shard_count::describe(&status.unread),
                stream.shards.max(1)
            ));
        }
        super::out(&text)?;
    }
    Ok(())
}
