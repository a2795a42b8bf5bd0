//! The cleaner: one pass over every counter, removing samples too old to
//! keep — the seeds' `clean_counters`, with their bugs fixed and sized for
//! large deployments.
//!
//! The seeds' semantics are kept:
//! - A counter of precision `PREC` is cleaned on every pass when `PREC` is
//!   at most the interval between passes (60 s by default), else on every
//!   `PREC / interval`-th pass (integer division), so a daily counter is not
//!   scanned every minute ([`Cleaner::due`]). Passes are numbered from 0 by
//!   each leader, so a new leader's first pass (and `clean --once`) cleans
//!   everything.
//! - A sample is removed when its bucket starts at or before
//!   `now - SAMPLES * PREC`: the same horizon below which workers skip hits
//!   ([`crate::model::aggregate::Window::add`]).
//! - A counter whose hash ends up empty leaves `known:` only if the hash is
//!   still empty at that moment, checked atomically (`clean.lua`), so a
//!   worker's concurrent write is never orphaned. A member whose hash is
//!   missing altogether is removed the same way (the seeds left it forever).
//!   On a cluster, where `known:` and the hashes live in different hash
//!   slots, the member is removed and then the hash re-checked instead
//!   ([`crate::service::forget`]).
//!
//! What is new, after seed 003's lesson that one big delete stalls Redis:
//! - `known:` is paged by name (`ZRANGEBYLEX (last + LIMIT`; every score is
//!   0), so counters added or removed during a pass never make it skip or
//!   repeat one, as index-based paging would.
//! - Each page's counters are read in two pipelined round trips (HLEN, then
//!   HKEYS of the small ones; a big hash is paged with HSCAN instead); on a
//!   cluster each command goes on its own, all of them in flight at once.
//!   Statistics hashes hold many more fields (a few dozen per bucket), so
//!   "big" starts higher for them and their HKEYS go in as many round trips
//!   as keep each one's replies within `READ_FIELDS` fields.
//! - Fields are deleted by `clean.lua` calls of at most [`CHUNK`](crate::service::purge::CHUNK) fields and
//!   counters each, every call fenced ([`crate::service::fence`]: the
//!   leader's token on one Redis, an epoch per pass on a cluster), all of a
//!   page's calls in one round trip ([`crate::service::purge`]).
//!
//! Statistics (`stats:PREC:NAME`, listed in `stats:known:`) are kept the
//! same way, in the same pass, by the same code: a [`Family`] names the
//! ZSET, the hashes and how a field names its bucket. A statistics bucket
//! `B` is old by the same horizon, and then every field `B:…` goes (count,
//! sum, sumsq, min, max and the histogram's `B:h:…`).
//!
//! No single command holds Redis for more than about a millisecond, however
//! large `known:` or one counter grows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::connect::Conn;
use redis::{AsyncCommands, RedisError, Value};

use crate::model::config::LayoutArgs;
use crate::model::keys::{Family, Keys};
use crate::model::metrics::metrics;
use crate::service::fence::Fence;
use crate::service::leader::Lease;
use crate::service::purge::{self, Plan};
use crate::store::connect::StoreError;

pub(crate) use crate::service::pass_report::PassReport;

/// Counters read from `known:` per round trip.
const PAGE: usize = 500;
/// A counter with more fields than this is paged with HSCAN instead of
/// HKEYS (512 is also where Redis leaves the compact listpack encoding).
const BIG_HASH: usize = 512;
/// The same for statistics, whose buckets hold 5 fields plus their
/// histogram's: HKEYS of 7,800 fields was measured at 1 ms, while paging
/// them takes some 80 round trips.
const BIG_STATS_HASH: usize = 8192;
/// Most fields the HKEYS replies of one round trip hold: a page of counters
/// just under [`BIG_HASH`] each.
const READ_FIELDS: usize = PAGE * BIG_HASH;
/// HSCAN COUNT when paging a big hash: HSCAN COUNT 1000 on a hash of a
/// million fields was measured at 5 ms on a 2-core VM, so 100.
const SCAN_COUNT: usize = 100;
/// The seeds' pass rhythm: a pass a minute, a counter of precision P due
/// every P/60 passes (see [`Cleaner::every`] for other intervals).
const PASS_SECONDS: u32 = 60;

/// Why a pass stopped early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CleanError {
    /// Redis failed (transient: the next pass starts over; or fatal).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The lease ran out or another worker holds it: this worker must not
    /// write any more.
    #[error("the leader lease was lost during the pass")]
    LostLease,
}

impl From<RedisError> for CleanError {
    fn from(e: RedisError) -> Self {
        CleanError::Store(StoreError::Redis(e))
    }
}

/// The cleaner of one leader: counts its passes.
pub(crate) struct Cleaner {
    keys: Keys,
    samples: i64,
    lease: Arc<Lease>,
    passes: u64,
    /// Seconds between two passes' starts.
    interval: u32,
}

/// A counter or statistics hash due this pass: its member, its key and
/// the bucket at or before which its fields are old.
struct Due {
    member: String,
    key: String,
    cutoff: i64,
}

/// One pass under way: the connection, the fence it writes under and what
/// it did so far.
struct Pass<'a> {
    cleaner: &'a Cleaner,
    conn: &'a mut Conn,
    fence: Fence,
    report: PassReport,
}

impl Cleaner {
    /// A cleaner writing under `lease`.
    pub(crate) fn new(keys: Keys, layout: &LayoutArgs, lease: Arc<Lease>) -> Cleaner {
        Cleaner {
            keys,
            samples: i64::from(layout.samples),
            lease,
            passes: 0,
            interval: PASS_SECONDS,
        }
    }

    /// A cleaner whose passes start `interval` apart (`--clean-interval`;
    /// a minute unless told).
    pub(crate) fn every(mut self, interval: std::time::Duration) -> Cleaner {
        self.interval = u32::try_from(interval.as_secs()).unwrap_or(u32::MAX).max(1);
        self
    }

    /// Whether a counter of precision `prec` is cleaned on pass `pass` of
    /// passes `interval` seconds apart: about once per `prec` seconds, and
    /// on every pass when passes come further apart than that.
    pub(crate) fn due(prec: u32, pass: u64, interval: u32) -> bool {
        let every = u64::from((prec / interval.max(1)).max(1));
        pass.is_multiple_of(every)
    }

    /// One pass over every counter at wall-clock time `now` (unix seconds).
    pub(crate) async fn pass(
        &mut self,
        conn: &mut Conn,
        now: i64,
    ) -> Result<PassReport, CleanError> {
        let started = Instant::now();
        let number = self.passes;
        self.passes += 1;
        let fence = Fence::take(conn, &self.keys, &self.lease)
            .await?
            .ok_or(CleanError::LostLease)?;
        let mut pass = Pass {
            cleaner: self,
            conn,
            fence,
            report: PassReport {
                pass: number,
                ..PassReport::default()
            },
        };
        for family in Family::ALL {
            pass.clean_family(family, now).await?;
        }
        let mut report = pass.report;
        report.duration_ms = started.elapsed().as_millis() as u64;
        let m = metrics();
        m.cleaner_passes.inc();
        m.cleaner_pass_duration
            .observe(started.elapsed().as_secs_f64());
        Ok(report)
    }

    fn check(&self) -> Result<(), CleanError> {
        self.lease.held().then_some(()).ok_or(CleanError::LostLease)
    }
}

impl Pass<'_> {
    /// The pass over one family: its ZSET page by page, each page's due
    /// hashes cleaned.
    async fn clean_family(&mut self, family: Family, now: i64) -> Result<(), CleanError> {
        let keys = &self.cleaner.keys;
        if self.fence.is_epoch() {
            // Members a dead leader removed without re-checking them.
            let back = crate::service::forget::recover(self.conn, keys, family, &self.fence)
                .await?
                .ok_or(CleanError::LostLease)?;
            if back > 0 {
                tracing::info!(
                    members = back,
                    zset = keys.known_of(family),
                    "re-added hashes a previous pass left out of their ZSET"
                );
            }
        }
        let rescored =
            crate::service::rescore::rescore(self.conn, &keys.known_of(family), PAGE).await?;
        if rescored > 0 {
            tracing::warn!(
                members = rescored,
                zset = keys.known_of(family),
                "members with a score other than 0 (written by something else) set back to 0: \
                 they hid others from every reader that pages by name"
            );
        }
        let mut min = b"-".to_vec();
        loop {
            self.cleaner.check()?;
            let known = keys.known_of(family);
            let page = self
                .conn
                .zrangebylex_limit(known, &min, "+", 0, PAGE as isize);
            let members: Vec<Vec<u8>> = page.await?;
            let Some(last) = members.last() else { break };
            min = [b"(".as_slice(), last].concat();
            let due: Vec<Due> = members
                .iter()
                .filter_map(|m| {
                    let m = std::str::from_utf8(m).ok()?;
                    let prec: u32 = m.split_once(':')?.0.parse().ok()?;
                    (prec > 0 && Cleaner::due(prec, self.report.pass, self.cleaner.interval)).then(
                        || Due {
                            member: m.to_string(),
                            key: keys.hash_of_member(family, m),
                            cutoff: now - self.cleaner.samples * i64::from(prec),
                        },
                    )
                })
                .collect();
            self.clean_page(family, &due).await?;
            if members.len() < PAGE {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Reads one page of due hashes (lengths, then the fields of the small
    /// ones: two round trips), deletes their old buckets in a third, then
    /// pages through the big ones.
    async fn clean_page(&mut self, family: Family, due: &[Due]) -> Result<(), CleanError> {
        if due.is_empty() {
            return Ok(());
        }
        self.report.add(family, due.len() as u64, 0, 0);
        let lens: Vec<Option<usize>> = each(self.conn, "HLEN", due.iter().map(|d| &d.key)).await?;
        let foreign: Vec<&str> = (0..due.len())
            .filter(|&i| lens[i].is_none())
            .map(|i| due[i].key.as_str())
            .collect();
        if let [first, ..] = foreign.as_slice() {
            let example = crate::model::event::printable(first);
            tracing::warn!(keys = foreign.len(), example = %example,
                "left alone: keys named as hitcount's that are no hash (written by something else)");
        }
        let big = match family {
            Family::Counts => BIG_HASH,
            Family::Stats => BIG_STATS_HASH,
        };
        let small: Vec<usize> = (0..due.len())
            .filter(|&i| lens[i].is_some_and(|n| n <= big))
            .collect();
        let lens: Vec<usize> = lens.iter().map(|n| n.unwrap_or(0)).collect();
        let mut plans = Vec::new();
        for part in within_budget(&small, &lens, READ_FIELDS) {
            let fields: Vec<Option<Vec<Vec<u8>>>> =
                each(self.conn, "HKEYS", part.iter().map(|&i| &due[i].key)).await?;
            // A hash that became something else since its HLEN is left alone.
            let read = part.iter().zip(fields).filter_map(|(i, f)| Some((i, f?)));
            for (&i, fields) in read {
                let fields = fields.iter().map(Vec::as_slice);
                let (old, kept) = split_old(family, fields, due[i].cutoff);
                plans.extend(plan(&due[i], old, !kept));
            }
        }
        self.apply(family, &plans, None).await?;
        for i in (0..due.len()).filter(|&i| lens[i] > big) {
            self.clean_big(family, &due[i]).await?;
        }
        Ok(())
    }

    /// Pages through a big hash with HSCAN, deleting each page's old fields
    /// in the same round trip as reading the next page.
    async fn clean_big(&mut self, family: Family, hash: &Due) -> Result<(), CleanError> {
        let hscan = |cursor: u64| {
            let mut scan = redis::cmd("HSCAN");
            scan.arg(&hash.key).arg(cursor).arg("COUNT").arg(SCAN_COUNT);
            scan
        };
        let (mut cursor, mut pairs): (u64, Vec<Vec<u8>>) = hscan(0).query_async(self.conn).await?;
        let mut kept_any = false;
        loop {
            let fields = pairs.iter().step_by(2).map(Vec::as_slice);
            let (old, kept) = split_old(family, fields, hash.cutoff);
            kept_any |= kept;
            let plan = plan(hash, old, cursor == 0 && !kept_any);
            // The next page is read in the deletions' round trip.
            let next = (cursor != 0).then(|| hscan(cursor));
            let reply = self.apply(family, plan.as_slice(), next).await?;
            if cursor == 0 {
                return Ok(());
            }
            (cursor, pairs) =
                redis::from_redis_value(reply.unwrap_or(Value::Nil)).map_err(RedisError::from)?;
        }
    }

    /// Runs the plans' fenced deletions (see [`crate::service::purge`]),
    /// followed by `then` (whose reply is returned), and counts them.
    async fn apply(
        &mut self,
        family: Family,
        plans: &[Plan],
        then: Option<redis::Cmd>,
    ) -> Result<Option<Value>, CleanError> {
        self.cleaner.check()?;
        let keys = &self.cleaner.keys;
        let out = purge::run(self.conn, keys, family, &self.fence, plans, then).await?;
        self.report.add(family, 0, out.removed, out.forgotten);
        let m = metrics();
        let (removed, forgotten) = match family {
            Family::Counts => (&m.cleaner_samples_removed, &m.cleaner_counters_removed),
            Family::Stats => (&m.cleaner_stats_fields_removed, &m.cleaner_stats_removed),
        };
        removed.inc_by(out.removed);
        forgotten.inc_by(out.forgotten);
        if out.lost {
            return Err(CleanError::LostLease);
        }
        Ok(out.then)
    }
}

/// Sends `command KEY` for each of `keys` (one pipeline on one Redis, all
/// in flight at once on a cluster) and reads the replies as `T`s: `None`
/// for a key that holds no hash (not hitcount's, so left alone).
async fn each<'a, T: redis::FromRedisValue>(
    conn: &mut Conn,
    command: &str,
    keys: impl Iterator<Item = &'a String>,
) -> Result<Vec<Option<T>>, CleanError> {
    let replies = conn.each_key_apart(command, keys).await?;
    let read = |reply| match crate::store::client::unless_wrong_type(reply)? {
        Some(v) => Ok(Some(redis::from_redis_value(v)?)),
        None => Ok(None),
    };
    Ok(replies
        .into_iter()
        .map(read)
        .collect::<redis::RedisResult<_>>()?)
}

/// `hashes` (indexes into `lens`, their lengths) in runs whose lengths add
/// up to at most `budget` (a longer hash alone), in order.
fn within_budget<'a>(hashes: &'a [usize], lens: &[usize], budget: usize) -> Vec<&'a [usize]> {
    crate::model::runs(hashes, usize::MAX, budget, |&i| lens[i])
}

/// The deletion of `hash`'s `old` fields, and of its member if `forget`
/// (no other field is left); none when there is nothing to do.
fn plan(hash: &Due, old: Vec<Vec<u8>>, forget: bool) -> Option<Plan> {
    (!old.is_empty() || forget).then(|| Plan {
        member: hash.member.clone(),
        key: hash.key.clone(),
        old,
        forget,
    })
}

/// Splits fields of a `family` hash into those whose bucket is at or before
/// `cutoff` (to delete) and whether any other field is kept (a younger
/// bucket's, or a field that names no bucket at all, which is never
/// touched).
fn split_old<'a>(
    family: Family,
    fields: impl Iterator<Item = &'a [u8]>,
    cutoff: i64,
) -> (Vec<Vec<u8>>, bool) {
    let (old, kept): (Vec<&[u8]>, Vec<&[u8]>) =
        fields.partition(|f| family.bucket_of(f).is_some_and(|t| t <= cutoff));
    (
        old.into_iter().map(<[u8]>::to_vec).collect(),
        !kept.is_empty(),
    )
}

/// The pause after a pass that took `took`, for passes every `interval`
/// (the seeds': the rest of the interval, at least 1 s).
pub(crate) fn pause_after(took: Duration, interval: Duration) -> Duration {
    interval.saturating_sub(took).max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_counters_are_cleaned_every_prec_over_60_passes() {
        for pass in 0..10 {
            assert!(Cleaner::due(1, pass, 60));
            assert!(Cleaner::due(60, pass, 60));
            assert!(Cleaner::due(119, pass, 60), "119/60 = 1: every pass");
        }
        let due: Vec<u64> = (0..12).filter(|&p| Cleaner::due(300, p, 60)).collect();
        assert_eq!(due, vec![0, 5, 10]);
        assert!(Cleaner::due(86400, 0, 60));
        assert!(!Cleaner::due(86400, 1439, 60));
        assert!(Cleaner::due(86400, 1440, 60));
    }

    /// With passes an hour apart, day counters are cleaned every 24 passes
    /// (a day), not every 1,440 (60 days), and every finer counter on every
    /// pass; with passes 10 s apart, minute counters every 6th.
    #[test]
    fn counters_are_cleaned_about_once_per_precision_whatever_the_interval() {
        let due = |prec, interval| -> Vec<u64> {
            (0..50)
                .filter(|&p| Cleaner::due(prec, p, interval))
                .collect()
        };
        assert_eq!(due(86400, 3600), vec![0, 24, 48]);
        assert_eq!(due(3600, 3600).len(), 50);
        assert_eq!(due(300, 3600).len(), 50);
        assert_eq!(due(60, 10), (0..50).step_by(6).collect::<Vec<_>>());
        assert_eq!(due(1, 86400).len(), 50);
        let cleaner = |secs| {
            let (keys, layout) = (Keys::named("s", "g", ""), LayoutArgs::default());
            let lease = Arc::new(Lease::new(&keys, &Default::default(), "c"));
            Cleaner::new(keys, &layout, lease).every(std::time::Duration::from_secs(secs))
        };
        assert_eq!(cleaner(3600).interval, 3600);
        assert_eq!(cleaner(0).interval, 1);
    }

    #[test]
    fn old_means_at_or_before_the_cutoff() {
        let fields: Vec<&[u8]> = vec![b"100", b"101", b"99", b"junk", b"99:count"];
        let (old, kept) = split_old(Family::Counts, fields.into_iter(), 100);
        assert_eq!(old, vec![b"100".to_vec(), b"99".to_vec()]);
        assert!(kept);
        let (old, kept) = split_old(Family::Counts, [b"5".as_slice()].into_iter(), 100);
        assert_eq!(old.len(), 1);
        assert!(!kept);
        // Statistics: every field of an old bucket, histogram too.
        let fields: Vec<&[u8]> = vec![b"100:count", b"100:h:n3", b"99:sum", b"101:sum", b"100"];
        let (old, kept) = split_old(Family::Stats, fields.into_iter(), 100);
        assert_eq!(
            old,
            vec![
                b"100:count".to_vec(),
                b"100:h:n3".to_vec(),
                b"99:sum".to_vec()
            ]
        );
        assert!(kept);
        let (_, kept) = split_old(Family::Stats, [b"7:max".as_slice()].into_iter(), 100);
        assert!(!kept);
    }

    #[test]
    fn hkeys_replies_are_read_within_a_budget() {
        let lens = [3, 5, 2, 9, 1, 1];
        let all = [0, 1, 2, 3, 4, 5];
        let runs = within_budget(&all, &lens, 8);
        assert_eq!(runs, [&[0, 1][..], &[2], &[3], &[4, 5]]);
        assert_eq!(within_budget(&[2, 4], &lens, 100), [&[2, 4][..]]);
        assert!(within_budget(&[], &lens, 8).is_empty());
        // A page of counters below the big-hash size is one round trip.
        let lens = vec![BIG_HASH; PAGE];
        let all: Vec<usize> = (0..PAGE).collect();
        assert_eq!(within_budget(&all, &lens, READ_FIELDS).len(), 1);
    }

    #[test]
    fn pause_is_the_rest_of_the_interval_at_least_a_second() {
        let i = Duration::from_secs(60);
        assert_eq!(
            pause_after(Duration::from_secs(10), i),
            Duration::from_secs(50)
        );
        assert_eq!(
            pause_after(Duration::from_secs(90), i),
            Duration::from_secs(1)
        );
    }
}

// A real Redis comes from the test kit, built with the `cli` feature.
#[cfg(all(test, feature = "cli"))]
mod cluster_tests;
#[cfg(all(test, feature = "cli"))]
mod redis_tests;
