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
//!   requests share one scan, and at most [`SCANS`] scans run at once.
//!
//! So `top` is at most [`FRESH_FOR`] plus one scan stale while it is asked
//! for, and never more than [`STALE_LIMIT`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::RedisResult;
use tokio::sync::{OnceCell, Semaphore};

use crate::model::keys::Keys;
use crate::store::connect::Conn;
use crate::store::query::{self, By, Ranked};

/// How long a computed ranking is served without a new scan.
pub const FRESH_FOR: Duration = Duration::from_secs(5);
/// The oldest ranking served while a new one is computed in the background.
pub const STALE_LIMIT: Duration = Duration::from_secs(30);
/// Most names a ranking keeps (the largest `limit` a request may ask).
pub const KEEP: usize = 1000;
/// Ranking scans running at once, whatever the keys.
pub const SCANS: usize = 2;

/// A computed ranking, highest first, ties by name.
pub type Ranking = Arc<Vec<Ranked>>;

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
    scans: Semaphore,
}

/// Rankings by (order, precision, bucket), shared by every request; cheap to clone.
#[derive(Clone)]
pub struct Rankings(Arc<Inner>);

impl Rankings {
    /// An empty cache for the counters named by `keys`.
    pub fn new(keys: Keys) -> Rankings {
        Rankings(Arc::new(Inner {
            keys,
            entries: Mutex::new(HashMap::new()),
            scans: Semaphore::new(SCANS),
        }))
    }

    /// The ranking by `by` of `bucket` at `precision` (see the module for
    /// how fresh it is). `now` is the current unix second, `conn` reads
    /// Redis (cloned for background scans).
    pub async fn get(
        &self,
        conn: &mut Conn,
        by: By,
        precision: u32,
        bucket: i64,
        now: i64,
    ) -> RedisResult<Ranking> {
        let which = (by, precision, bucket);
        let next = bucket + i64::from(precision);
        if now < next && next - now <= FRESH_FOR.as_secs() as i64 {
            self.prepare(conn, (by, precision, next), next - now);
        }
        let first = {
            let mut entries = self.lock();
            // Kept: a ranking young enough to serve, a scan running, or a
            // first computation some request awaits.
            entries.retain(|_, e| match &e.last {
                Some((at, _)) => e.refreshing || at.elapsed() < STALE_LIMIT,
                None => e.refreshing || Arc::strong_count(&e.first) > 1,
            });
            let entry = entries.entry(which).or_default();
            if let Some((at, ranking)) = entry.last.clone() {
                if at.elapsed() >= FRESH_FOR && !entry.refreshing {
                    entry.refreshing = true;
                    self.refresh(conn.clone(), which, Duration::ZERO);
                }
                return Ok(ranking);
            }
            entry.first.clone()
        };
        let (at, ranking) = first
            .get_or_try_init(|| self.scan(conn.clone(), which))
            .await?
            .clone();
        let mut entries = self.lock();
        let entry = entries.entry(which).or_default();
        if entry.last.as_ref().is_none_or(|(t, _)| *t < at) {
            entry.last = Some((at, ranking.clone()));
        }
        Ok(ranking)
    }

    /// Starts the scan of a bucket that begins in `in_secs`, unless one is
    /// known or running.
    fn prepare(&self, conn: &Conn, which: Which, in_secs: i64) {
        let mut entries = self.lock();
        let entry = entries.entry(which).or_default();
        if entry.last.is_none() && !entry.refreshing {
            entry.refreshing = true;
            let wait = Duration::from_secs(in_secs.max(0) as u64);
            self.refresh(conn.clone(), which, wait);
        }
    }

    /// A background scan of `which` after `wait`; its entry is marked
    /// refreshing by the caller and unmarked here.
    fn refresh(&self, conn: Conn, which: Which, wait: Duration) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let result = this.scan(conn, which).await;
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

    /// One ranking scan, within the limit of scans at once.
    async fn scan(&self, mut conn: Conn, which: Which) -> RedisResult<(Instant, Ranking)> {
        let _scan = self.0.scans.acquire().await.expect("never closed");
        let (by, precision, bucket) = which;
        let ranking = query::rank(&mut conn, &self.0.keys, by, precision, bucket, KEEP).await?;
        Ok((Instant::now(), Arc::new(ranking)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Which, Entry>> {
        self.0.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
