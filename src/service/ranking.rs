//! The ranking of a bucket (`/api/v1/top`, by count or by mean), computed
//! by reading every name of a precision ([`crate::store::query::rank`]), so
//! never once per request, and never while a request waits if it can be
//! helped:
//!
//! - one result per (order, precision, bucket) is kept; within [`FRESH_FOR`] of
//!   its computation it is served as is;
//! - older, but within [`STALE_LIMIT`], it is still served at once while
//!   one background scan computes the next (stale while revalidating);
//! - a request in the last [`FRESH_FOR`] of the current bucket also starts
//!   the next bucket's scan for when it begins, so the first request of a
//!   new bucket finds it ready;
//! - only a ranking never computed, or older than [`STALE_LIMIT`] (nobody
//!   asked for that long), makes a request wait for its scan; concurrent
//!   requests for it share one scan.
//!
//! A scan reads every name, so what anyone may ask must not decide how
//! often Redis does that: one scan runs at a time, and scans start at most
//! [`SCAN_BURST`] at once and [`SCANS_PER_MINUTE`] a minute (a token
//! bucket), counted apart for the current buckets (and the next) and for
//! older ones, so that asking old bucket after old bucket, which anyone
//! may, never spends the scans of the rankings a page shows now. A request
//! that would start a scan beyond that is
//! refused ([`RankError::Busy`], the API's 429 with `Retry-After`); a
//! background scan waits for the one running (rankings asked together, a
//! page's current bucket and the one before, are all revalidated), and
//! beyond the budget is skipped, the last ranking served a while longer
//! (never past [`STALE_LIMIT`]).
//!
//! So `top` is at most [`FRESH_FOR`] plus one scan stale while it is asked
//! for and scans are to be had, and never more than [`STALE_LIMIT`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::RedisError;
use tokio::sync::OnceCell;

use crate::model::keys::Keys;
use crate::store::connect::Conn;
use crate::store::query::{self, By, Ranked};

/// How long a computed ranking is served without a new scan.
pub(crate) const FRESH_FOR: Duration = Duration::from_secs(5);
/// The oldest ranking served while a new one is computed in the background.
pub(crate) const STALE_LIMIT: Duration = Duration::from_secs(30);
/// Most names a ranking keeps (the largest `limit` a request may ask).
pub(crate) const KEEP: usize = 1000;
/// Scans that may start back to back (the token bucket's depth): a page
/// opening asks the current bucket and, when it is empty, the one before.
pub(crate) const SCAN_BURST: u32 = 3;
/// Scans started a minute at most, whatever is asked: an open page's top
/// revalidates every [`FRESH_FOR`] (12 a minute), with room for a second
/// page at another precision.
pub(crate) const SCANS_PER_MINUTE: u32 = 20;

/// Why no ranking.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RankError {
    /// A scan is running or the scans of the last minute are spent: ask
    /// again after the duration.
    #[error("a ranking scan is running or the scans of this minute are spent: retry in {} s", .0.as_secs())]
    Busy(Duration),
    /// Redis failed the scan.
    #[error(transparent)]
    Redis(#[from] RedisError),
}

/// A computed ranking, highest first, ties by name.
pub(crate) type Ranking = Arc<Vec<Ranked>>;

/// Which ranking: (order, precision, bucket).
type Which = (By, u32, i64);

/// What is known of one (precision, bucket).
#[derive(Default)]
struct Entry {
    /// The last ranking computed and when.
    last: Option<(Instant, Ranking)>,
    /// The first computation, awaited by requests that find nothing.
    first: Arc<OnceCell<(Instant, Ranking)>>,
    /// A background scan is running.
    refreshing: bool,
}

struct Inner {
    keys: Keys,
    entries: Mutex<HashMap<Which, Entry>>,
    /// Held by the one scan that runs at a time, whatever the keys, so a
    /// burst of distinct buckets queues no work on Redis.
    scans: tokio::sync::Mutex<()>,
    /// The scans of the current (and next) buckets, and of older ones.
    budgets: Mutex<[Budget; 2]>,
}

/// The token bucket of scans: [`SCAN_BURST`] deep, refilled at
/// [`SCANS_PER_MINUTE`].
struct Budget {
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn full() -> Budget {
        Budget {
            tokens: f64::from(SCAN_BURST),
            at: Instant::now(),
        }
    }

    /// Takes one token, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let per_sec = f64::from(SCANS_PER_MINUTE) / 60.0;
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * per_sec;
        self.tokens = (self.tokens + earned).min(f64::from(SCAN_BURST));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / per_sec))
        }
    }
}

/// Rankings by (order, precision, bucket), shared by every request; cheap to clone.
#[derive(Clone)]
pub(crate) struct Rankings(Arc<Inner>);

impl Rankings {
    /// An empty cache for the counters named by `keys`.
    pub(crate) fn new(keys: Keys) -> Rankings {
        Rankings(Arc::new(Inner {
            keys,
            entries: Mutex::new(HashMap::new()),
            scans: tokio::sync::Mutex::new(()),
            budgets: Mutex::new([Budget::full(), Budget::full()]),
        }))
    }

    /// The ranking by `by` of `bucket` at `precision` (see the module for
    /// how fresh it is). `now` is the current unix second, `conn` reads
    /// Redis (cloned for background scans).
    /// The last ranking of `(by, precision, bucket)` while it may still be
    /// served (younger than [`STALE_LIMIT`]), without asking Redis: what a
    /// request gets when Redis cannot be reached to refresh it.
    pub(crate) fn last(&self, by: By, precision: u32, bucket: i64) -> Option<Ranking> {
        let entries = self.lock();
        let (at, ranking) = entries.get(&(by, precision, bucket))?.last.clone()?;
        (at.elapsed() < STALE_LIMIT).then_some(ranking)
    }

    pub(crate) async fn get(
        &self,
        conn: &mut Conn,
        by: By,
        precision: u32,
        bucket: i64,
        now: i64,
    ) -> Result<Ranking, RankError> {
        let which = (by, precision, bucket);
        let first = {
            let mut entries = self.lock();
            // Near the end of the bucket, the next one's scan starts for
            // when it begins, unless one is known or running.
            let soon = |next: &i64| now < *next && *next - now <= FRESH_FOR.as_secs() as i64;
            if let Some(next) = bucket.checked_add(i64::from(precision)).filter(soon) {
                let entry = entries.entry((by, precision, next)).or_default();
                if entry.last.is_none() {
                    let wait = Duration::from_secs((next - now) as u64);
                    self.refresh(entry, conn, (by, precision, next), wait);
                }
            }
            // Kept: a ranking young enough to serve, a scan running, or a
            // first computation some request awaits.
            entries.retain(|_, e| match &e.last {
                Some((at, _)) => e.refreshing || at.elapsed() < STALE_LIMIT,
                None => e.refreshing || Arc::strong_count(&e.first) > 1,
            });
            let entry = entries.entry(which).or_default();
            if let Some((at, ranking)) = entry.last.clone() {
                if at.elapsed() >= FRESH_FOR {
                    self.refresh(entry, conn, which, Duration::ZERO);
                }
                return Ok(ranking);
            }
            entry.first.clone()
        };
        let (at, ranking) = first
            .get_or_try_init(|| self.scan(conn.clone(), which, false))
            .await?
            .clone();
        let mut entries = self.lock();
        let entry = entries.entry(which).or_default();
        if entry.last.as_ref().is_none_or(|(t, _)| *t < at) {
            entry.last = Some((at, ranking.clone()));
        }
        Ok(ranking)
    }

    /// A background scan of `which` after `wait`, unless `entry` (its
    /// entry) has one running already.
    fn refresh(&self, entry: &mut Entry, conn: &Conn, which: Which, wait: Duration) {
        if std::mem::replace(&mut entry.refreshing, true) {
            return;
        }
        let (this, conn) = (self.clone(), conn.clone());
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let result = this.scan(conn, which, true).await;
            let mut entries = this.lock();
            let entry = entries.entry(which).or_default();
            entry.refreshing = false;
            let (by, precision, bucket) = which;
            match result {
                Ok(fresh) => entry.last = Some(fresh),
                Err(e) => tracing::debug!(error = %e, ?by, precision, bucket,
                    "a background ranking scan failed: the next request tries again"),
            }
        });
    }

    /// One ranking scan, if one may start now (see the module): in the
    /// `background`, once the scan running ends; for a request, only if
    /// none runs.
    async fn scan(
        &self,
        mut conn: Conn,
        which: Which,
        background: bool,
    ) -> Result<(Instant, Ranking), RankError> {
        let _scan = match background {
            true => self.0.scans.lock().await,
            false => {
                (self.0.scans.try_lock()).map_err(|_| RankError::Busy(Duration::from_secs(1)))?
            }
        };
        let (by, precision, bucket) = which;
        let now = crate::model::clock::unix_ms().div_euclid(1000);
        let older = bucket < now - now.rem_euclid(i64::from(precision));
        let taken = self.0.budgets.lock().unwrap_or_else(|e| e.into_inner())[usize::from(older)]
            .take(Instant::now());
        // Whole seconds, rounded up, for Retry-After.
        taken
            .map_err(|wait| RankError::Busy(Duration::from_secs_f64(wait.as_secs_f64().ceil())))?;
        let ranking = query::rank(&mut conn, &self.0.keys, by, precision, bucket, KEEP).await?;
        Ok((Instant::now(), Arc::new(ranking)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Which, Entry>> {
        self.0.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_allows_a_burst_then_its_rate() {
        let mut b = Budget::full();
        let t0 = b.at;
        for _ in 0..SCAN_BURST {
            assert_eq!(b.take(t0), Ok(()));
        }
        let wait = b.take(t0).unwrap_err();
        // One token every 60 / SCANS_PER_MINUTE s.
        assert_eq!(wait, Duration::from_secs(60 / u64::from(SCANS_PER_MINUTE)));
        assert!(b.take(t0 + wait / 2).is_err());
        assert_eq!(b.take(t0 + wait + Duration::from_millis(10)), Ok(()));
        // Idle for long, it holds no more than a burst.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..SCAN_BURST {
            assert_eq!(b.take(later), Ok(()));
        }
        assert!(b.take(later).is_err());
    }
}
