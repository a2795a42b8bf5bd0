//! The worker's health as the probes see it: whether its loop turns, is
//! connected, is in the group, is stopping or has met a fatal error, and
//! which stream shards it reads. The worker writes it, `edge::http` serves
//! it; what the loop writes on every turn is lock-free.
//!
//! With several shards, each shard's worker writes through its own view
//! ([`Health::for_shard`]): the process is in the group when every shard it
//! reads has joined (a shard's worker that stops or resyncs says so for its
//! shard alone), and ready while it reads none, standing by.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::model::config::MAX_SHARDS;
use crate::model::metrics::metrics;

/// Health state shared between the worker loop (writer) and the probes
/// (readers). What the loop writes is an atomic; the shards read, which
/// change only when a shard is taken or let go, sit behind a lock.
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
    /// The stream's shards and which of them this process reads.
    shards: Mutex<Shards>,
    /// Set on one shard's view: the process' health and the shard.
    parent: Option<(Arc<Health>, u32)>,
    /// Set once the worker's settings agree with what its deployment
    /// recorded (see [`Health::agreed`]).
    agreed: tokio::sync::watch::Sender<bool>,
}

/// The shards of the stream as one process reads them.
#[derive(Debug, Default)]
struct Shards {
    /// How many the stream has; 0 until the worker knows.
    count: u32,
    /// The shards this process reads.
    reading: BTreeSet<u32>,
    /// The shards whose worker is in the group.
    joined: BTreeSet<u32>,
    /// The shards whose worker's last try failed to reach Redis (or was
    /// refused): only the shards read count (see [`Health::is_connected`]).
    down: BTreeSet<u32>,
}

impl Health {
    /// A new health state: not connected, not in the group, and counted as
    /// having turned just now. The worker is considered stuck (not live) when
    /// its loop has not turned for longer than `stuck_after`.
    pub fn new(stuck_after: Duration) -> Arc<Health> {
        Arc::new(Health::fresh(stuck_after, None))
    }

    /// The worker's settings agree with its deployment's records (shard
    /// count, layout, prefix): what waits for [`Health::agreed`] may go.
    pub(crate) fn set_agreed(&self) {
        self.agreed.send_replace(true);
    }

    /// Waits until [`Health::set_agreed`]: the leader's duties start only
    /// then, so that a worker refused at start never cleans with settings
    /// its deployment does not count with.
    pub(crate) async fn agreed(&self) {
        let _ = self.agreed.subscribe().wait_for(|a| *a).await;
    }

    /// The view of shard `k`'s worker: its turns, connection and fatal
    /// errors count for the process; its joining or leaving the group
    /// counts for its shard alone.
    pub(crate) fn for_shard(self: &Arc<Health>, k: u32) -> Arc<Health> {
        Arc::new(Health::fresh(self.stuck_after, Some((self.clone(), k))))
    }

    fn fresh(stuck_after: Duration, parent: Option<(Arc<Health>, u32)>) -> Health {
        Health {
            start: Instant::now(),
            last_turn_nanos: AtomicU64::new(0),
            stuck_after,
            redis_connected: AtomicBool::new(false),
            in_group: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            fatal: AtomicBool::new(false),
            shards: Mutex::default(),
            parent,
            agreed: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Records a turn of the worker loop; call once per iteration. Also sets
    /// `hitcount_worker_loop_last_turn_timestamp_seconds`.
    pub(crate) fn turned(&self) {
        let nanos = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_turn_nanos.store(nanos, Ordering::Relaxed);
        metrics()
            .loop_last_turn
            .set(crate::model::clock::unix_ms() as f64 / 1000.0);
        if let Some((p, _)) = &self.parent {
            p.turned();
        }
    }

    /// Records whether the Redis connection is currently usable: a shard's
    /// worker for its shard, so that a worker that failed and then stopped
    /// (its shard taken over) leaves no outage behind.
    pub(crate) fn set_redis_connected(&self, up: bool) {
        self.redis_connected.store(up, Ordering::Relaxed);
        if let Some((p, k)) = &self.parent {
            let mut shards = p.shards();
            if up {
                shards.down.remove(k);
            } else {
                shards.down.insert(*k);
            }
        }
    }

    /// Whether Redis is usable: this process' own connection (with several
    /// shards, the one that shares them out), and the connection of every
    /// shard's worker it reads.
    fn is_connected(&self) -> bool {
        let shards = self.shards();
        self.redis_connected.load(Ordering::Relaxed)
            && (shards.count <= 1 || shards.reading.iter().all(|k| !shards.down.contains(k)))
    }

    /// Records an error no retry can fix: neither live nor ready from now on.
    pub(crate) fn set_fatal(&self) {
        self.fatal.store(true, Ordering::Relaxed);
        self.set_stopping();
        if let Some((p, _)) = &self.parent {
            p.set_fatal();
        }
    }

    /// Records that the worker is stopping: not ready from now on.
    pub(crate) fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Records whether this worker has joined the consumer group (on a
    /// shard's view: on its shard).
    pub(crate) fn set_in_group(&self, joined: bool) {
        self.in_group.store(joined, Ordering::Relaxed);
        if let Some((p, k)) = &self.parent {
            let mut shards = p.shards();
            if joined {
                shards.joined.insert(*k);
            } else {
                shards.joined.remove(k);
            }
        }
    }

    fn shards(&self) -> MutexGuard<'_, Shards> {
        self.shards.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// In the group: with several shards, on every shard it reads (so also
    /// while it reads none); else as the worker last said.
    fn is_in_group(&self) -> bool {
        let shards = self.shards();
        if shards.count <= 1 {
            return self.in_group.load(Ordering::Relaxed);
        }
        shards.reading.iter().all(|k| shards.joined.contains(k))
    }

    /// Records which of the stream's `shards` shards this process reads
    /// (with one shard, every worker reads it), for `/readyz` and the
    /// `hitcount_shard_owned` / `hitcount_shards_owned` gauges.
    pub(crate) fn set_reading(&self, shards: u32, owned: &[u32]) {
        let mut set = self.shards();
        set.count = shards;
        set.reading = owned
            .iter()
            .copied()
            .filter(|&k| k < shards.min(MAX_SHARDS))
            .collect();
        drop(set);
        metrics().set_owned(shards, owned);
    }

    /// The shards this process reads, in order.
    fn reading(&self) -> Vec<u32> {
        self.shards().reading.iter().copied().collect()
    }

    /// What `/readyz` says about the shards: which this process reads, or
    /// that it waits to take one over (which is ready: it stands by). `None`
    /// for one stream, read by every worker.
    pub(crate) fn shard_detail(&self) -> Option<String> {
        let shards = self.shards().count;
        if shards <= 1 {
            return None;
        }
        let reading = self.reading();
        Some(if reading.is_empty() {
            format!("reading no shard: waiting to take one over ({shards} shards)")
        } else {
            let list: Vec<String> = reading.iter().map(u32::to_string).collect();
            let s = if reading.len() == 1 { "" } else { "s" };
            format!("reading shard{s} {} of {shards}", list.join(", "))
        })
    }

    /// True while the loop has turned within `stuck_after`.
    #[cfg(test)]
    pub(crate) fn is_live(&self) -> bool {
        self.liveness_problem().is_none()
    }

    /// True when connected to Redis, in the consumer group, and live.
    #[cfg(test)]
    pub(crate) fn is_ready(&self) -> bool {
        self.readiness_problems().is_empty()
    }

    /// Why the worker is not live, if it is not (what `/healthz` answers
    /// 503 with): its loop stuck past `stuck_after`, or a fatal error.
    pub fn liveness_problem(&self) -> Option<String> {
        if self.fatal.load(Ordering::Relaxed) {
            return Some("stopping on a fatal error".to_string());
        }
        let last = Duration::from_nanos(self.last_turn_nanos.load(Ordering::Relaxed));
        let since = self.start.elapsed().saturating_sub(last);
        (since > self.stuck_after).then(|| {
            format!(
                "worker loop stuck: last turn {:.1}s ago (limit {:.1}s)",
                since.as_secs_f64(),
                self.stuck_after.as_secs_f64()
            )
        })
    }

    /// Every readiness condition that fails, empty when ready (what
    /// `/readyz` answers 503 with): Redis not reached or refusing writes,
    /// not in the consumer group, shutting down, not live.
    pub fn readiness_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.stopping.load(Ordering::Relaxed) {
            problems.push("shutting down".to_string());
        }
        if !self.is_connected() {
            // Redis answers, but refuses writes: no network fault to chase.
            let refused = crate::store::error::writes_refused();
            problems.push(if crate::store::memory::out_of_memory() {
                format!("{}: writes refused", crate::store::memory::OUT_OF_MEMORY)
            } else if let Some(why) = refused.and_then(write_refusal) {
                why.to_string()
            } else {
                "redis not connected".to_string()
            });
        }
        if !self.is_in_group() {
            problems.push("not in consumer group".to_string());
        }
        problems.extend(self.liveness_problem());
        problems
    }
}

/// What `/readyz` says of a write refusal (see
/// [`crate::store::error::WRITE_REFUSALS`]).
fn write_refusal(code: &str) -> Option<&'static str> {
    Some(match code {
        "READONLY" => {
            "Redis answers as a read-only replica: writes refused (REDIS_URL must name a master)"
        }
        "NOREPLICAS" => {
            "Redis refuses writes: fewer good replicas than its min-replicas-to-write (NOREPLICAS)"
        }
        "MISCONF" => {
            "Redis refuses writes: its last save to disk failed (MISCONF: see its log and \
             stop-writes-on-bgsave-error)"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_lists_the_shards_read() {
        let _alone = crate::model::metrics::labels::tests::SHARD_GAUGES
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let h = Health::new(Duration::from_secs(60));
        assert_eq!(h.shard_detail(), None, "not known yet");
        h.set_reading(1, &[0]);
        assert_eq!(h.shard_detail(), None, "one stream: every worker reads it");
        h.set_reading(300, &[0, 65, 255, 256]);
        assert_eq!(h.reading(), vec![0, 65, 255]);
        h.set_reading(8, &[3]);
        assert_eq!(h.shard_detail().unwrap(), "reading shard 3 of 8");
        h.set_reading(8, &[1, 5]);
        assert_eq!(h.shard_detail().unwrap(), "reading shards 1, 5 of 8");
        h.set_reading(8, &[]);
        assert_eq!(
            h.shard_detail().unwrap(),
            "reading no shard: waiting to take one over (8 shards)"
        );
    }

    #[test]
    fn the_process_is_in_the_group_on_every_shard_it_reads() {
        let _alone = crate::model::metrics::labels::tests::SHARD_GAUGES
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let h = Health::new(Duration::from_secs(60));
        h.set_redis_connected(true);
        h.set_reading(4, &[]);
        assert!(h.is_ready(), "standing by is ready");
        let (one, two) = (h.for_shard(1), h.for_shard(2));
        h.set_reading(4, &[1, 2]);
        one.set_in_group(true);
        assert!(!h.is_ready(), "shard 2 not joined yet");
        two.set_in_group(true);
        assert!(h.is_ready());
        // Shard 2 handed over: its worker leaves the group, the process
        // keeps reading shard 1 and stays ready once it lets 2 go.
        two.set_in_group(false);
        assert!(!h.is_ready());
        h.set_reading(4, &[1]);
        assert!(h.is_ready());
        one.set_redis_connected(false);
        assert!(!h.is_ready(), "a shard's outage is the process'");
        one.set_redis_connected(true);
        assert!(h.is_ready(), "and its recovery");
        // A shard's worker that failed, then stopped (its lease lost in a
        // failover, the shard taken over elsewhere) leaves no outage: the
        // process' other shards never failed, and said nothing.
        h.set_reading(4, &[1, 2]);
        two.set_in_group(true);
        two.set_redis_connected(false);
        assert!(!h.is_ready());
        h.set_reading(4, &[1]);
        assert!(h.is_ready(), "{:?}", h.readiness_problems());
        // The connection that shares the shards out counts too.
        h.set_redis_connected(false);
        assert!(!h.is_ready());
        h.set_redis_connected(true);
        one.set_fatal();
        assert!(h.liveness_problem().is_some());
    }
}
