//! The worker's health as the probes see it: whether its loop turns, is
//! connected, is in the group, is stopping or has met a fatal error. The
//! worker writes it, `edge::http` serves it; lock-free.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::metrics::{self, metrics};

/// Health state shared between the worker loop (writer) and the probes
/// (readers). Lock-free: every field is an atomic.
#[derive(Debug)]
pub struct Health {
    /// Reference point for `last_turn_nanos`.
    start: Instant,
    /// Nanoseconds after `start` of the loop's last turn.
    last_turn_nanos: AtomicU64,
    stuck_after: Duration,
    redis_connected: AtomicBool,
    in_group: AtomicBool,
    /// Set once shutdown began: never ready again.
    stopping: AtomicBool,
    /// Set on an error no retry can fix: never live again.
    fatal: AtomicBool,
}

impl Health {
    /// A new health state: not connected, not in the group, and counted as
    /// having turned just now. The worker is considered stuck (not live) when
    /// its loop has not turned for longer than `stuck_after`.
    pub fn new(stuck_after: Duration) -> Arc<Health> {
        Arc::new(Health {
            start: Instant::now(),
            last_turn_nanos: AtomicU64::new(0),
            stuck_after,
            redis_connected: AtomicBool::new(false),
            in_group: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            fatal: AtomicBool::new(false),
        })
    }

    /// Records a turn of the worker loop; call once per iteration. Also sets
    /// `hitcount_worker_loop_last_turn_timestamp_seconds`.
    pub fn turned(&self) {
        let nanos = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_turn_nanos.store(nanos, Ordering::Relaxed);
        metrics().loop_last_turn.set(metrics::unix_now_seconds());
    }

    /// Records whether the Redis connection is currently usable.
    pub fn set_redis_connected(&self, up: bool) {
        self.redis_connected.store(up, Ordering::Relaxed);
    }

    /// Records an error no retry can fix: neither live nor ready from now on.
    pub fn set_fatal(&self) {
        self.fatal.store(true, Ordering::Relaxed);
        self.set_stopping();
    }

    /// Records that the worker is stopping: not ready from now on.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Whether the worker is stopping.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Records whether this worker has joined the consumer group.
    pub fn set_in_group(&self, joined: bool) {
        self.in_group.store(joined, Ordering::Relaxed);
    }

    /// Time since the loop last turned.
    fn since_last_turn(&self) -> Duration {
        let last = Duration::from_nanos(self.last_turn_nanos.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }

    /// True while the loop has turned within `stuck_after`.
    pub fn is_live(&self) -> bool {
        !self.fatal.load(Ordering::Relaxed) && self.since_last_turn() <= self.stuck_after
    }

    /// True when connected to Redis, in the consumer group, and live.
    pub fn is_ready(&self) -> bool {
        self.redis_connected.load(Ordering::Relaxed)
            && self.in_group.load(Ordering::Relaxed)
            && !self.is_stopping()
            && self.is_live()
    }

    /// Why the worker is not live, if it is not.
    pub fn liveness_problem(&self) -> Option<String> {
        if self.fatal.load(Ordering::Relaxed) {
            return Some("stopping on a fatal error".to_string());
        }
        let since = self.since_last_turn();
        (since > self.stuck_after).then(|| {
            format!(
                "worker loop stuck: last turn {:.1}s ago (limit {:.1}s)",
                since.as_secs_f64(),
                self.stuck_after.as_secs_f64()
            )
        })
    }

    /// Every readiness condition that fails, empty when ready.
    pub fn readiness_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.is_stopping() {
            problems.push("shutting down".to_string());
        }
        if !self.redis_connected.load(Ordering::Relaxed) {
            problems.push("redis not connected".to_string());
        }
        if !self.in_group.load(Ordering::Relaxed) {
            problems.push("not in consumer group".to_string());
        }
        problems.extend(self.liveness_problem());
        problems
    }
}
