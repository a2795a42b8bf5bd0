//! Each client's rate of requests to `ingest`: a token bucket per client
//! (an IPv4 address, or an IPv6 /64: `server::client`), `rate` requests a
//! second with a burst of as many, so one busy
//! or hostile client is answered 429 (with the seconds to wait) while the
//! others go on.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Addresses remembered before the full buckets (clients quiet for a
/// second or more) are forgotten: bounds the memory a scan of many
/// addresses can take.
const MAX_CLIENTS: usize = 100_000;

/// The token buckets of every client seen lately.
pub(super) struct Rate {
    /// Requests a second per client; 0: no limit.
    per_second: u32,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Rate {
    /// `per_second` requests a second for each client address (0: no limit).
    pub(super) fn new(per_second: u32) -> Rate {
        Rate {
            per_second,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request of `client` at `now`: `Ok`, or how long until it
    /// may send the next.
    pub(super) fn take(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        if self.per_second == 0 {
            return Ok(());
        }
        let rate = f64::from(self.per_second);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_CLIENTS && !buckets.contains_key(&client) {
            buckets.retain(|_, b| now.duration_since(b.at).as_secs_f64() * rate + b.tokens < rate);
        }
        let bucket = buckets.entry(client).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        let refilled = bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate;
        bucket.tokens = refilled.min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let rate = Rate::new(10);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(rate.take(a, t0), Ok(()));
        }
        let wait = rate.take(a, t0).unwrap_err();
        assert!(
            wait > Duration::from_millis(99) && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        // Another client is not held back.
        assert_eq!(rate.take(b, t0), Ok(()));
        // A tenth of a second buys one more request.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(rate.take(a, t1), Ok(()));
        assert!(rate.take(a, t1).is_err());
        // Quiet for long, a client has its burst again, not more.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..10 {
            assert_eq!(rate.take(a, t2), Ok(()));
        }
        assert!(rate.take(a, t2).is_err());
        // No limit.
        let free = Rate::new(0);
        for _ in 0..10_000 {
            assert_eq!(free.take(a, t0), Ok(()));
        }
    }
}
