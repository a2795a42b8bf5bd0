//! Redis' clock, learned cheaply: one `TIME` at most every [`REFRESH`],
//! the local monotonic clock in between. Entry IDs are stamped by Redis'
//! clock, so a hit's time is judged against that clock (see
//! [`crate::model::event::decode_at`]), never against the worker's own,
//! which may be set differently.

use std::time::{Duration, Instant};

use redis::RedisResult;

use crate::store::connect::Conn;

/// How long a reading of Redis' clock is extrapolated before `TIME` is
/// asked again: one round trip a second per worker, never one per read or
/// per hit. The clock only judges times a day off, so a drift of a second
/// does not matter.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

/// Redis' clock as last read, and when (by the local monotonic clock).
#[derive(Debug, Default, Clone)]
pub(crate) struct RedisClock {
    read: Option<(i64, Instant)>,
}

impl RedisClock {
    /// Redis' clock now, in unix ms: extrapolated from the last reading
    /// while it is younger than [`REFRESH`], else read again with `TIME`.
    pub(crate) async fn now_ms(&mut self, conn: &mut Conn) -> RedisResult<i64> {
        if let Some((ms, at)) = self.read {
            let elapsed = at.elapsed();
            if elapsed < REFRESH {
                return Ok(ms.saturating_add(elapsed.as_millis() as i64));
            }
        }
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await?;
        let ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
        self.read = Some((ms, Instant::now()));
        Ok(ms)
    }
}
