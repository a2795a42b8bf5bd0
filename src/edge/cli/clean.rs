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
use crate::store::connect::Conn;
use crate::store::counters::format_utc;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Run a single pass and exit (the only mode: workers clean on their own
    /// while one of them leads).
    #[arg(long, required = true)]
    once: bool,
    /// Seconds to wait for the lease while a worker holds it (0 to 3600):
    /// for a leader that died or stopped to let it lapse. A live leader,
    /// seen renewing it (within a third of the lease), is reported at once.
    #[arg(long, default_value_t = 30, value_parser = crate::model::config::ranged::<u64>(0..=3600))]
    wait: u64,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) common: super::Pick<Common, Uses>,
    #[command(flatten)]
    leader: super::Pick<LeaderArgs, LeaderUses>,
}

/// Of the leader's settings `clean` needs the lease (key and length), and
/// the cleaner's interval to say when a live leader passes next.
pub(super) struct LeaderUses;

impl super::Uses for LeaderUses {
    const SHOWN: &'static [&'static str] = &["leader_key", "lease_ms", "clean_interval_secs"];
}

/// The settings of [`Common`] `clean` shows: it cleans the counters and trims the stream.
pub(super) struct Uses;

impl super::Uses for Uses {
    const SHOWN: &'static [&'static str] = &super::SHARED;
}

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    let _ = args.once;
    args.common.validate()?;
    args.leader.validate()?;
    let client = crate::store::connect::client(&args.common.redis)?;
    let mut conn = super::connect(&args.common.redis).await?;
    crate::store::scripts::load_all(&mut conn).await?;
    let shards = super::reach::shards_read(&mut conn, &mut args.common).await?;
    let keys = shards[0].clone();
    // Cleaning with fewer samples than the workers keep would delete
    // samples they still write to (see `store::layout_record`).
    let layout = &args.common.layout;
    let recorded = crate::store::layout_record::read_for_cleaning(&mut conn, &keys, layout);
    if let Some(other) = recorded.await? {
        bail!("{}; nothing was cleaned", other.refusal(layout));
    }
    let owner = format!("clean-once@{}", std::process::id());
    let lease = Arc::new(Lease::new(&keys, &args.leader, &owner));
    // Said at once: a leader renews its lease every third of it and
    // cleans on its own, so waiting for a live one to let go is waiting
    // for nothing. The wait is for a leader that died or stopped.
    let held = crate::service::leader::current(&mut conn, lease.key()).await?;
    if let (Some((holder, Some(left))), true) = (held, args.wait > 0) {
        tracing::warn!(
            "the leader lease {} is held by {holder} ({:.1} s left), whose worker cleans on \
             its own: waiting up to {} s for it (--wait) to lapse, unless it is seen renewed",
            lease.key(),
            left.as_secs_f64(),
            args.wait
        );
    }
    match acquire(&mut conn, &lease, Duration::from_secs(args.wait)).await? {
        Acquired::Yes => {}
        Acquired::Renewed(holder) => bail!(
            "the leader lease {} is held by {holder}, a live worker that renews it and cleans \
             on its own: {}",
            lease.key(),
            next_pass(&mut conn, &keys, &holder, args.leader.clean_interval()).await?
        ),
        Acquired::TimedOut(holder) => bail!(
            "the leader lease {} is held by {} and was not released within {} s; \
             the leader cleans on its own (see hitcount status), or try again with a longer --wait",
            lease.key(),
            holder.as_deref().unwrap_or("nobody"),
            args.wait
        ),
    }
    // Keep the lease while the pass runs, renewing as a worker would.
    let (trigger, shutdown) = crate::model::shutdown::channel();
    let keeper = tokio::spawn(lease.clone().keep_until(client, shutdown));
    let mut cleaner = Cleaner::new(keys.clone(), &args.common.layout, lease.clone());
    let now = crate::model::clock::unix_ms() / 1000;
    let result = crate::service::duties::once(&mut cleaner, &mut conn, &shards, &lease, now).await;
    trigger.trigger();
    let _ = keeper.await;
    let last = match result {
        Ok(last) => last,
        Err(CleanError::LostLease) => bail!("the leader lease was lost during the pass"),
        // A Redis error stays the cause, for the one-line report naming the URL.
        Err(CleanError::Store(e)) => return Err(e).context("cleaner pass failed"),
    };
    if args.json {
        outln!("{}", super::json_text(&last, false)?);
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

/// How often the lease is tried, and its holder's time left read.
const POLL: Duration = Duration::from_millis(100);
/// Time left that grows by more than this between two reads (Redis' own
/// clock, so the poll's timing does not enter) means a renewal.
const RENEWAL_SLACK: Duration = Duration::from_millis(5);

/// What came of waiting for the lease.
enum Acquired {
    /// Taken.
    Yes,
    /// Its holder (named) renewed it, or another took it, meanwhile: a live
    /// leader, which will not let go.
    Renewed(String),
    /// Not taken within the wait (nor seen renewed); its holder when last read.
    TimedOut(Option<String>),
}

/// Takes the lease within `wait`, stopping as soon as its holder is seen
/// renewing it (within a third of the lease when it lives).
async fn acquire(conn: &mut Conn, lease: &Lease, wait: Duration) -> redis::RedisResult<Acquired> {
    let give_up = std::time::Instant::now() + wait;
    let mut seen: Option<(String, Option<Duration>)> = None;
    loop {
        if lease.try_acquire(conn).await? {
            return Ok(Acquired::Yes);
        }
        let now = crate::service::leader::current(conn, lease.key()).await?;
        if let (Some((was, was_left)), Some((holder, left))) = (&seen, &now) {
            let renewed = matches!((was_left, left), (Some(w), Some(l)) if *l > *w + RENEWAL_SLACK);
            if was != holder || renewed {
                return Ok(Acquired::Renewed(holder.clone()));
            }
        }
        if std::time::Instant::now() >= give_up {
            return Ok(Acquired::TimedOut(now.map(|(holder, _)| holder)));
        }
        seen = now;
        tokio::time::sleep(POLL).await;
    }
}

/// When the leader `holder` cleans next, from the last pass recorded
/// (`Keys::cleaner_status`) and the cleaner's `interval`.
async fn next_pass(
    conn: &mut Conn,
    keys: &Keys,
    holder: &str,
    interval: Duration,
) -> redis::RedisResult<String> {
    let last: std::collections::HashMap<String, String> =
        crate::service::duties::last_recorded(conn, keys).await?;
    let number = |field: &str| last.get(field).and_then(|v| v.parse::<i64>().ok());
    let now_ms = crate::model::clock::unix_ms();
    Ok(next_pass_text(
        number("at_ms"),
        number("duration_ms").unwrap_or(0),
        last.get("leader").is_some_and(|l| l == holder),
        interval,
        now_ms,
    ))
}

/// The sentence of [`next_pass`], pure: `at_ms` is when the last recorded
/// pass ended, `by_holder` whether the holder ran it.
fn next_pass_text(
    at_ms: Option<i64>,
    took_ms: i64,
    by_holder: bool,
    interval: Duration,
    now_ms: i64,
) -> String {
    let every = interval.as_secs();
    let Some(at_ms) = at_ms.filter(|_| by_holder) else {
        return format!(
            "it has recorded no pass yet (its first runs as it takes the lease, then one every \
             {every} s, --clean-interval); see hitcount status"
        );
    };
    // Passes start an interval apart (or 1 s after one that took longer).
    let interval_ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
    let next_ms = (at_ms - took_ms)
        .saturating_add(interval_ms)
        .max(at_ms.saturating_add(1000));
    let utc = |ms: i64| format_utc(ms.div_euclid(1000));
    let due = if next_ms > now_ms {
        format!(
            "the next is due at {} UTC, in {:.0} s",
            utc(next_ms),
            (next_ms - now_ms) as f64 / 1000.0
        )
    } else {
        "the next is due now".to_string()
    };
    format!(
        "its last pass ended at {} UTC, {due} (every {every} s, --clean-interval); \
         see hitcount status",
        utc(at_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_pass_is_an_interval_after_the_last_started() {
        let minute = Duration::from_secs(60);
        let at = 1_795_000_000_000;
        let text = next_pass_text(Some(at), 2000, true, minute, at + 8000);
        assert!(
            text.contains(&format!("ended at {} UTC", format_utc(at / 1000))),
            "{text}"
        );
        assert!(text.contains("in 50 s"), "{text}");
        assert!(text.contains("every 60 s"), "{text}");
        // A pass longer than the interval: the next starts 1 s after it.
        let text = next_pass_text(Some(at), 90_000, true, minute, at);
        assert!(text.contains("in 1 s"), "{text}");
        assert!(next_pass_text(Some(at), 0, true, minute, at + 61_000).contains("due now"));
        // A pass recorded by another leader says nothing of this one's.
        for text in [
            next_pass_text(Some(at), 0, false, minute, at),
            next_pass_text(None, 0, true, minute, at),
        ] {
            assert!(text.contains("no pass yet"), "{text}");
        }
    }
}
