//! A worker's memory of the `known:` members its apply scripts added, so
//! that later scripts skip the ZADDs that cannot matter.
//!
//! # Why a skipped ZADD is safe
//! `known:` must list every counter whose hash holds data (the cleaner walks
//! only `known:`, readers enumerate it). Nothing but the cleaner removes a
//! member, and it does so only when the member's hash is empty at that very
//! moment (`clean.lua`, atomically); it deletes only samples whose bucket
//! starts at or before `now - SAMPLES × PREC` on the leader's clock. So:
//!
//! 1. An apply script that ran `HINCRBY count:P:N b` and `ZADD known: P:N`
//!    leaves `P:N` in `known:` at least while field `b` exists, that is
//!    until a cleaner pass with `now ≥ b + SAMPLES × P` deletes it.
//! 2. The cache remembers, per member, the newest such `b` (only from a
//!    script whose reply said it ran now, not a replay).
//! 3. A later script may skip `ZADD P:N` only while the Redis clock is
//!    before `b + SAMPLES × P - CLOCK_MARGIN_SECS`: the worker decides on its
//!    own clock, and the script checks the earliest such deadline of its
//!    skipped members against `TIME` before writing anything, returning
//!    "stale" instead (then the worker forgets everything and applies again
//!    with every ZADD). With the Redis and leader clocks within
//!    [`CLOCK_MARGIN_SECS`] of each other, no cleaner pass that ran before
//!    the script can have deleted `b`: the hash is not empty, the member is
//!    still there, and the script's HINCRBY keeps it non-empty. A delay of
//!    the script in flight (a stopped worker, a slow network) is covered by
//!    the script's own check, not by the margin.
//! 4. The cache is cleared whenever the worker resyncs: a Redis restart or
//!    failover may have lost the writes it remembers.
//!
//! Assumed, as by the counters themselves: no eviction policy that drops
//! counter hashes, and nobody deletes `known:` or counter hashes by hand
//! while workers run (restart the workers after doing so).
//!
//! The cache holds at most [`CAPACITY`] names (about 110 bytes each with
//! seven precisions) and starts over when full.

use std::collections::HashMap;

/// Allowed difference between the Redis clock and any leader's clock, in
/// seconds: a member is not trusted to be in `known:` within this time of
/// its cleaner horizon.
pub const CLOCK_MARGIN_SECS: i64 = 60;
/// Names remembered at most; the cache starts over past it (~7 MiB). The
/// names worth remembering are those seen window after window, far fewer.
pub const CAPACITY: usize = 65_536;
/// "No bucket written with a ZADD" at this precision.
const NONE: i64 = i64::MIN;

/// Per name, the newest bucket written together with a ZADD of its member,
/// per precision.
#[derive(Debug, Clone)]
pub struct KnownCache {
    precisions: Vec<u32>,
    /// `SAMPLES × P - CLOCK_MARGIN_SECS`, per precision.
    trust: Vec<i64>,
    names: HashMap<Box<str>, Box<[i64]>>,
}

impl KnownCache {
    /// An empty cache for this layout.
    pub fn new(precisions: &[u32], samples: u32) -> KnownCache {
        KnownCache {
            precisions: precisions.to_vec(),
            trust: precisions
                .iter()
                .map(|&p| i64::from(samples) * i64::from(p) - CLOCK_MARGIN_SECS)
                .collect(),
            names: HashMap::new(),
        }
    }

    /// Until when (unix seconds, exclusive) `P:name` is surely in `known:`,
    /// or `None` when a ZADD is needed at `now_s` (unix seconds).
    pub fn trusted_until(&self, precision: u32, name: &str, now_s: i64) -> Option<i64> {
        let p = self.precisions.iter().position(|&x| x == precision)?;
        let b = *self.names.get(name)?.get(p)?;
        if b == NONE {
            return None;
        }
        let until = b.saturating_add(self.trust[p]);
        (now_s < until).then_some(until)
    }

    /// Records that a script ran `HINCRBY` of `bucket` and `ZADD P:name`.
    pub fn wrote(&mut self, precision: u32, name: &str, bucket: i64) {
        let Some(p) = self.precisions.iter().position(|&x| x == precision) else {
            return;
        };
        if !self.names.contains_key(name) {
            if self.names.len() >= CAPACITY {
                self.names.clear();
            }
            let empty = vec![NONE; self.precisions.len()].into_boxed_slice();
            self.names.insert(name.into(), empty);
        }
        let slot = &mut self.names.get_mut(name).expect("inserted")[p];
        *slot = (*slot).max(bucket);
    }

    /// Forgets everything (after a resync, or a script found it stale).
    pub fn clear(&mut self) {
        self.names.clear();
    }

    /// Names remembered.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusts_a_member_until_its_bucket_nears_the_cleaner_horizon() {
        let mut c = KnownCache::new(&[1, 60], 120);
        let now = 1_000_000;
        assert_eq!(c.trusted_until(1, "a", now), None, "never written");
        c.wrote(1, "a", now);
        // The cleaner deletes bucket `now` at `now + 120`; trusted 60 s less.
        assert_eq!(c.trusted_until(1, "a", now), Some(now + 60));
        assert_eq!(c.trusted_until(1, "a", now + 59), Some(now + 60));
        assert_eq!(c.trusted_until(1, "a", now + 60), None);
        assert_eq!(c.trusted_until(60, "a", now), None, "other precision");
        assert_eq!(c.trusted_until(1, "b", now), None, "other name");
        // An older bucket never lowers what is remembered.
        c.wrote(1, "a", now - 30);
        assert_eq!(c.trusted_until(1, "a", now), Some(now + 60));
        c.wrote(1, "a", now + 30);
        assert_eq!(c.trusted_until(1, "a", now + 60), Some(now + 90));
        let b = 999_960;
        c.wrote(60, "a", b);
        assert_eq!(c.trusted_until(60, "a", now), Some(b + 7200 - 60));
        c.clear();
        assert_eq!(c.trusted_until(1, "a", now), None);
        assert!(c.is_empty());
    }

    #[test]
    fn a_margin_as_wide_as_the_horizon_trusts_nothing() {
        let mut c = KnownCache::new(&[1], 60);
        c.wrote(1, "a", 100);
        assert_eq!(c.trusted_until(1, "a", 99), Some(100));
        assert_eq!(c.trusted_until(1, "a", 100), None);
        c.wrote(7, "a", 100); // unknown precision: ignored
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn starts_over_when_full() {
        let mut c = KnownCache::new(&[1], 120);
        for i in 0..CAPACITY {
            c.wrote(1, &i.to_string(), 500);
        }
        assert_eq!(c.len(), CAPACITY);
        c.wrote(1, "one more", 500);
        assert_eq!(c.len(), 1);
        assert_eq!(c.trusted_until(1, "0", 500), None);
        assert_eq!(c.trusted_until(1, "one more", 500), Some(560));
    }
}
