//! The ranking of a bucket (`/api/v1/top`), computed by reading every name
//! of a precision ([`crate::store::query::rank`]), so never once per
//! request: one result per (precision, bucket) is kept for [`FRESH_FOR`]
//! after it was computed, only one computation per key runs at a time (the
//! others wait for it and share its result), and at most [`SCANS`]
//! computations run at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::RedisResult;
use tokio::sync::{OnceCell, Semaphore};

use crate::model::keys::Keys;
use crate::store::connect::Conn;
use crate::store::query;

/// How long a computed ranking is served: `top` is at most this stale
/// (plus the time its scan took).
pub const FRESH_FOR: Duration = Duration::from_secs(5);
/// Most names a ranking keeps (the largest `limit` a request may ask).
pub const KEEP: usize = 1000;
/// Ranking scans running at once, whatever the keys.
pub const SCANS: usize = 2;

/// A computed ranking: (name, count), highest first, ties by name.
pub type Ranking = Arc<Vec<(String, i64)>>;

type Slot = Arc<OnceCell<(Instant, Ranking)>>;

/// Rankings by (precision, bucket), shared by every request.
pub struct Rankings {
    keys: Keys,
    slots: Mutex<HashMap<(u32, i64), Slot>>,
    scans: Semaphore,
}

impl Rankings {
    /// An empty cache for the counters named by `keys`.
    pub fn new(keys: Keys) -> Rankings {
        Rankings {
            keys,
            slots: Mutex::new(HashMap::new()),
            scans: Semaphore::new(SCANS),
        }
    }

    /// The ranking of `bucket` at `precision`, from the cache when fresh,
    /// else computed on `conn` (or awaited, when another request is
    /// computing it).
    pub async fn get(&self, conn: &mut Conn, precision: u32, bucket: i64) -> RedisResult<Ranking> {
        let slot = self.slot(precision, bucket);
        let (_, ranking) = slot
            .get_or_try_init(|| async {
                let _scan = self.scans.acquire().await.expect("never closed");
                let ranking = query::rank(conn, &self.keys, precision, bucket, KEEP).await?;
                Ok::<_, redis::RedisError>((Instant::now(), Arc::new(ranking)))
            })
            .await?;
        Ok(ranking.clone())
    }

    /// The slot of a key: the cached one unless stale; stale slots are
    /// dropped on the way.
    fn slot(&self, precision: u32, bucket: i64) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|_, s| s.get().is_none_or(|(at, _)| at.elapsed() < FRESH_FOR));
        slots.entry((precision, bucket)).or_default().clone()
    }
}
