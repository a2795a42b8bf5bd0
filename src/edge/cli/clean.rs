//! `hitcount clean --once`: one cleaner pass and one trim of every shard's
//! stream now, under the leader lease (so it never races a leader), for
//! operators and tests; on one Redis or a cluster alike.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use super::Common;
use crate::model::config::LeaderArgs;
use crate::model::keys::Keys;
use crate::service::cleaner::{CleanError, Cleaner};
use crate::service::leader::Lease;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run a single pass and exit (the only mode: workers clean on their own
    /// while one of them leads).
    #[arg(long, required = true)]
    once: bool,
    /// Seconds to wait for the lease while a worker holds it (0 to 3600).
    #[arg(long, default_value_t = 30, value_parser = crate::model::config::ranged::<u64>(0, 3600))]
    wait: u64,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) common: super::Pick<Common, Uses>,
    #[command(flatten)]
    leader: super::Pick<LeaderArgs, LeaderUses>,
}

/// Of the leader's settings `clean` needs the lease (key and length), not
/// the cleaner's interval: it runs one pass.
pub(super) struct LeaderUses;

impl super::Uses for LeaderUses {
    const SHOWN: &'static [&'static str] = &["leader_key", "lease_ms"];
}

/// The settings of [`Common`] `clean` shows: it cleans the counters and trims the stream.
pub(super) struct Uses;

impl super::Uses for Uses {
    const SHOWN: &'static [&'static str] = &[
        "url",
        "cluster",
        "ca",
        "cert",
        "key",
        "prefix",
        "precisions",
        "samples",
        "stream",
        "group",
        "dead_stream",
        "shards",
    ];
    const HIDDEN: &'static [&'static str] = &[];
}

pub async fn run(mut args: Args) -> anyhow::Result<()> {
    let _ = args.once;
    args.common.validate()?;
    args.leader.validate()?;
    let client = crate::store::connect::client(&args.common.redis)?;
    let mut conn = super::connect(&args.common.redis).await?;
    crate::store::scripts::load_all(&mut conn).await?;
    super::reach::adopt_recorded_shards(&mut conn, &mut args.common).await?;
    let shards = Keys::all_shards(&args.common.layout, &args.common.stream, conn.is_cluster());
    let keys = shards[0].clone();
    let owner = format!("clean-once@{}", std::process::id());
    let lease = Arc::new(Lease::new(&keys, &args.leader, &owner));
    // Said before waiting: a live leader renews its lease every second, so
    // the wait may well run out.
    if let Some((holder, _)) = crate::service::leader::current(&mut conn, lease.key()).await? {
        if args.wait > 0 {
            tracing::warn!(
                "the leader lease {} is held by {holder}, whose worker cleans on its own: \
                 waiting up to {} s for it (--wait)",
                lease.key(),
                args.wait
            );
        }
    }
    if !lease
        .acquire_within(&mut conn, Duration::from_secs(args.wait))
        .await?
    {
        let holder = crate::service::leader::current(&mut conn, lease.key()).await?;
        bail!(
            "the leader lease {} is held by {} and was not released within {} s; \
             the leader cleans on its own (see hitcount status), or try again with a longer --wait",
            lease.key(),
            holder.map_or("nobody".into(), |(t, _)| t),
            args.wait
        );
    }
    // Keep the lease while the pass runs, renewing as a worker would.
    let (trigger, shutdown) = crate::model::shutdown::channel();
    let keeper = tokio::spawn(lease.clone().keep(client, shutdown));
    let mut cleaner = Cleaner::new(keys.clone(), &args.common.layout, lease.clone());
    let now = crate::model::clock::unix_ms() / 1000;
    let result = crate::service::duties::once(&mut cleaner, &mut conn, &shards, &lease, now).await;
    trigger.trigger();
    let _ = keeper.await;
    let last = match result {
        Ok(last) => last,
        Err(CleanError::LostLease) => bail!("the leader lease was lost during the pass"),
        Err(CleanError::Store(crate::store::connect::StoreError::Redis(e))) => {
            return Err(e).context("cleaner pass failed")
        }
        Err(CleanError::Store(e)) => return Err(e).context("cleaner pass failed"),
    };
    if args.json {
        outln!("{}", serde_json::to_string(&last)?);
    } else {
        let p = &last.pass;
        outln!(
            "cleaned {} counters in {} ms: {} samples removed, {} counters removed; {} stream entries trimmed",
            p.counters_scanned, p.duration_ms, p.samples_removed, p.counters_removed, last.trimmed.entries
        );
        if p.stats_scanned > 0 {
            outln!(
                "statistics: {} hashes cleaned, {} fields removed, {} hashes removed",
                p.stats_scanned,
                p.stats_fields_removed,
                p.stats_removed
            );
        }
    }
    Ok(())
}
