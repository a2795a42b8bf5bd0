//! Staying connected to Redis: the reconnect loop every task goes through
//! ([`Reconnecting`]), capped exponential backoff with jitter, outages
//! logged once; the client and its connection type live in
//! [`crate::store::client`].
//!
//! Every error is sorted into one of three classes (see [`classify`]): bad
//! input is handled where it arises (dead-lettered), transient errors make the
//! caller back off and reconnect, fatal ones stop the process at start-up with
//! a clear message. An outage is logged once when it starts and once when it
//! ends, never once per try.

use std::time::Duration;

use rand::Rng;

use crate::model::metrics::metrics;
pub(crate) use crate::store::error::{classify, describe, fatal_hint, first_cause, joined};
pub use crate::store::error::{ErrorClass, StoreError, StoreResult};

/// Time allowed for a reply to a non-blocking command. Never "none": a call
/// was seen to hang forever during a failover.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest time to open a connection and load the scripts.
pub(crate) const OPEN_DEADLINE: Duration = Duration::from_secs(10);
/// A connection unused for this long is asked a `PING` before it is handed
/// out again: one Redis closed (a restart, a proxy's idle timeout) is
/// replaced at once instead of failing the task's next call, which would
/// skip a cleaner's pass or report an outage that ended long ago. A task
/// that uses its connection more often than this (the worker) is never
/// slowed.
const IDLE_CHECK: Duration = Duration::from_secs(1);
/// First and longest pause between reconnection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Longest pause after a step refused while a Cluster hash slot moves: a
/// second, since each try makes the client library refresh its slot map
/// (about eight refreshes; every quarter second they flooded the log,
/// before its WARN lines were filtered out, see `edge::cli::init_tracing`).
const SLOT_MOVING_PAUSE: Duration = Duration::from_secs(1);
/// How long steps refused for a moving slot are tried again quietly.
const SLOT_MOVING_QUIET: Duration = Duration::from_secs(30);
/// A proven connection that broke is replaced at once, quietly, at most
/// once in this time: a link that breaks on every try is an outage, logged
/// and backed off (a worker whose every read Redis closed reconnected 150
/// times a second without a word).
const QUICK_AGAIN: Duration = Duration::from_secs(10);

pub use crate::store::client::{client, Client, Conn};

/// A connection opened on first use, with the scripts loaded, and opened
/// again after any error: the one reconnect loop every long-running task
/// (worker, lease, registration, duties, sampler, producer) goes through.
/// Failures are counted and logged once per outage; a fatal one stops the
/// process through the shutdown.
pub(crate) struct Reconnecting {
    client: Client,
    what: &'static str,
    timeout: Duration,
    conn: Option<Conn>,
    /// Whether hitcount's scripts are loaded on each new connection.
    scripts: bool,
    /// When the connection was last handed out.
    used: Option<std::time::Instant>,
    /// Whether the connection served a call since it was opened: a broken
    /// one that did is reconnected at once (see [`Reconnecting::failed`]).
    proven: bool,
    /// When a broken connection was last replaced at once (see
    /// [`QUICK_AGAIN`]).
    quick: Option<std::time::Instant>,
    /// Whether Redis refused this task a write for its memory (`OOM`)
    /// since its last success.
    refused_for_memory: bool,
    /// A write refused while Redis answers (a replica's READONLY, see
    /// [`crate::store::error::writes_refused`]) since the last success.
    refused_writes: bool,
    opened: u64,
    outage: Outage,
    backoff: Backoff,
    /// Since when steps are refused for a moving hash slot, unless a
    /// success came since (see [`SLOT_MOVING_QUIET`]).
    slot_moving: Option<std::time::Instant>,
}

impl Reconnecting {
    /// A connection for the task `what` (named in logs), whose replies may
    /// take up to `timeout`.
    pub(crate) fn new(client: Client, what: &'static str, timeout: Duration) -> Reconnecting {
        Reconnecting {
            client,
            what,
            timeout,
            conn: None,
            scripts: true,
            used: None,
            proven: false,
            quick: None,
            refused_for_memory: false,
            refused_writes: false,
            opened: 0,
            outage: Outage::default(),
            backoff: Backoff::default(),
            slot_moving: None,
        }
    }

    /// The same without loading the scripts: for a task that only reads
    /// (as a read-only user may, without `+script|load`).
    pub(crate) fn reading(mut self) -> Reconnecting {
        self.scripts = false;
        self
    }

    /// The connection, opened now (scripts loaded) if there is none.
    pub(crate) async fn get(&mut self) -> StoreResult<&mut Conn> {
        let idle = self.used.is_some_and(|t| t.elapsed() >= IDLE_CHECK);
        self.used = Some(std::time::Instant::now());
        if let Some(c) = self.conn.as_mut().filter(|_| idle) {
            if !still_open(c).await {
                tracing::debug!("{}: connection closed while idle; reconnecting", self.what);
                self.conn = None;
            }
        }
        let conn = match self.conn.take() {
            Some(c) => c,
            None => {
                // Bounded as a whole: a cluster client retries a node that
                // is down for far longer (its own backoff), and a failover
                // is better met by a fresh connection a moment later.
                let open = async {
                    let mut c = self.client.open(self.timeout).await?;
                    if self.scripts {
                        crate::store::scripts::load_all(&mut c).await?;
                    }
                    Ok::<_, StoreError>(c)
                };
                let c = tokio::time::timeout(OPEN_DEADLINE, open)
                    .await
                    .map_err(|_| StoreError::Unexpected {
                        what: "connecting to Redis",
                        reply: format!("no connection within {OPEN_DEADLINE:?}"),
                    })??;
                self.opened += 1;
                self.proven = false;
                c
            }
        };
        Ok(self.conn.insert(conn))
    }

    /// `call` on the connection, opened first (scripts loaded) if there is
    /// none: its outcome, or the failure to open.
    pub(crate) async fn call<T, E: From<StoreError>>(
        &mut self,
        call: impl AsyncFnOnce(&mut Conn) -> Result<T, E>,
    ) -> Result<T, E> {
        call(self.get().await?).await
    }

    /// The connection if one is open.
    pub(crate) fn current(&mut self) -> Option<&mut Conn> {
        self.conn.as_mut()
    }

    /// How many connections were opened so far: a change tells a caller
    /// that keeps state next to the connection (the worker) to resync.
    pub(crate) fn opened(&self) -> u64 {
        self.opened
    }

    /// Records a success: ends an outage, resets the backoff.
    pub(crate) fn succeeded(&mut self) {
        self.proven = true;
        if std::mem::take(&mut self.refused_for_memory) {
            crate::store::memory::set_out_of_memory(false);
        }
        if std::mem::take(&mut self.refused_writes) {
            crate::store::error::set_writes_refused(None);
        }
        self.outage.recovered(self.what);
        self.backoff.reset();
        self.slot_moving = None;
    }

    /// Handles a failure: counts it and drops the connection; a transient
    /// error is logged once per outage, a fatal one stops the process
    /// through `shutdown` with one line naming the cause (without a
    /// shutdown, as for the producer, which never stops its caller, it is
    /// logged once per outage and retried). Returns its class and the pause
    /// before the next try.
    pub(crate) fn failed(
        &mut self,
        err: &StoreError,
        shutdown: Option<&crate::model::shutdown::Shutdown>,
    ) -> (ErrorClass, Duration) {
        self.conn = None;
        let class = err.record();
        // A connection that served calls and then broke (Redis restarted,
        // a proxy closed it), or under which Redis lost hitcount's stream,
        // group or scripts (`is_deleted_under`), is replaced at once: only
        // if the new one fails too is Redis unavailable.
        let broken = std::mem::take(&mut self.proven)
            && matches!(err, StoreError::Redis(e) if crate::store::error::is_broken_link(e)
                || crate::store::error::is_deleted_under(e))
            && self.quick.is_none_or(|t| t.elapsed() >= QUICK_AGAIN);
        // Remembered until a success clears them, whatever fails between:
        // a refusal, then a dropped connection, then a success must clear
        // the process' flag (and its gauge) all the same.
        let oom = matches!(err, StoreError::Redis(e) if crate::store::memory::is_oom(e));
        if oom {
            self.refused_for_memory = true;
            crate::store::memory::set_out_of_memory(true);
        }
        if let StoreError::Redis(e) = err {
            let code = e.code().unwrap_or("");
            if crate::store::error::WRITE_REFUSALS.contains(&code) {
                self.refused_writes = true;
                crate::store::error::set_writes_refused(Some(code));
            }
        }
        match (class, shutdown) {
            (ErrorClass::Fatal, Some(shutdown)) => {
                let addr = self.client.describe();
                let cause = match err {
                    StoreError::Redis(e) if crate::store::error::is_not_redis(e) => describe(e),
                    StoreError::Redis(e) => {
                        let hint = fatal_hint(e).unwrap_or("");
                        format!(
                            "{}: Redis at {addr} refused: {}; {hint}",
                            self.what,
                            describe(e)
                        )
                    }
                    other => format!("{}: {other} (Redis at {addr})", self.what),
                };
                shutdown.fail(cause);
            }
            _ if broken => {
                self.quick = Some(std::time::Instant::now());
                self.outage.noticed();
                tracing::debug!(error = %err, "{}: connection lost; reconnecting at once", self.what);
                return (class, Duration::ZERO);
            }
            // Not an outage: Redis answers, and the step goes on once the
            // slot's move ends, so it is tried again soon, not after a
            // backoff grown to five seconds.
            // Past SLOT_MOVING_QUIET it is an outage after all (a client
            // that never finds the slot's owner), logged as one.
            _ if matches!(err, StoreError::Redis(e) if crate::store::error::is_slot_moving(e))
                && self
                    .slot_moving
                    .get_or_insert_with(std::time::Instant::now)
                    .elapsed()
                    < SLOT_MOVING_QUIET =>
            {
                tracing::debug!(error = %err, "{}: a hash slot is moving: trying again", self.what);
                return (class, self.backoff.pause().min(SLOT_MOVING_PAUSE));
            }
            _ if err.is_stall() => tracing::warn!(error = %err,
                "{}: this worker stalled (paused, or starved of CPU) past what its windows \
                 allow: resyncing; what another worker finished meanwhile is not counted \
                 again", self.what),
            _ => self.outage.failed(self.what, err, oom),
        }
        (class, self.backoff.pause())
    }

    /// The client, for tasks that open more connections of their own.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }
}

/// Waits `pause`, or until `stop` is triggered if that comes first: the
/// wait between two tries or rounds of every long-running task.
pub(crate) async fn sleep(pause: Duration, stop: &mut crate::model::shutdown::Shutdown) {
    tokio::select! {
        _ = tokio::time::sleep(pause) => {}
        _ = stop.wait() => {}
    }
}

/// Capped exponential backoff with full jitter.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: BACKOFF_MIN }
    }
}

impl Backoff {
    /// The pause before the next try: uniform in [next/2, next], then next
    /// doubles up to the cap.
    pub(crate) fn pause(&mut self) -> Duration {
        let cap = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        let ms = cap.as_millis() as u64;
        Duration::from_millis(rand::rng().random_range(ms / 2..=ms.max(1)))
    }

    /// Back to the shortest pause after a success.
    pub(crate) fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

impl Drop for Outage {
    /// A task that ends in the outage it logged (a shard handed over, the
    /// process stopping) leaves the next task free to log the next one.
    fn drop(&mut self) {
        if self.logged {
            OUTAGES.lock().unwrap_or_else(|p| p.into_inner()).on = false;
        }
    }
}

/// Whether a connection left idle still answers (`PING`; a refusal of the
/// command itself, as by an ACL without `+ping`, is an answer too).
async fn still_open(conn: &mut Conn) -> bool {
    let pong: redis::RedisResult<redis::Value> = redis::cmd("PING").query_async(conn).await;
    match pong {
        Ok(_) => true,
        Err(e) => e.code().is_some() && !crate::store::error::is_broken_link(&e),
    }
}

/// One task's view of an outage: from its first failed call to its next
/// success. The task that logs the start of an outage (one line for the
/// process, however many tasks notice) also logs its end, with the time it
/// saw Redis unavailable; other tasks only count their reconnection.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    since: Option<std::time::Instant>,
    tries: u64,
    /// Whether this task logged the start of the outage.
    logged: bool,
}

/// This process' view of Redis outages, shared by its tasks (worker, leader,
/// sampler, producer): one line is logged when Redis becomes unreachable and
/// one when it is reachable again, however many tasks notice.
struct Outages {
    /// Whether an outage is logged as going on.
    on: bool,
    /// When the last one ended: a task that only notices its broken
    /// connection shortly after (on its next use) is not a new outage.
    ended: Option<std::time::Instant>,
}

/// A task failing within this long after an outage ended is still in it.
const OUTAGE_AFTERSHOCK: Duration = Duration::from_secs(10);

static OUTAGES: std::sync::Mutex<Outages> = std::sync::Mutex::new(Outages {
    on: false,
    ended: None,
});

impl Outage {
    /// Records a failure that is not logged (a broken connection replaced
    /// at once): the outage, if it goes on, started here.
    pub(crate) fn noticed(&mut self) {
        self.tries += 1;
        self.since.get_or_insert_with(std::time::Instant::now);
    }

    /// Records a failed try; logs only the first of an outage in this
    /// process, naming a full Redis (`oom`) as such.
    pub(crate) fn failed(&mut self, what: &str, err: &dyn std::fmt::Display, oom: bool) {
        self.tries += 1;
        tracing::debug!(error = %err, tries = self.tries, "{what}: Redis call failed");
        let now = std::time::Instant::now();
        self.since.get_or_insert(now);
        let mut o = OUTAGES.lock().unwrap_or_else(|p| p.into_inner());
        // A failure just after an outage ended is a task noticing it late;
        // if failures go on past that, it is a new outage and is logged.
        let aftershock = o.ended.is_some_and(|e| e.elapsed() < OUTAGE_AFTERSHOCK);
        if !o.on && !aftershock {
            o.on = true;
            self.logged = true;
            if oom {
                tracing::warn!(error = %err, "{what}: {}: writes are refused; retrying with backoff, nothing is lost",
                    crate::store::memory::OUT_OF_MEMORY);
            } else {
                tracing::warn!(error = %err, "{what}: Redis unavailable, retrying with backoff");
            }
        }
    }

    /// Records a success; the task that logged the outage's start logs its
    /// end, with how long it saw Redis unavailable.
    pub(crate) fn recovered(&mut self, what: &str) {
        if let Some(since) = self.since.take() {
            metrics().redis_reconnects.inc();
            if std::mem::take(&mut self.logged) {
                let mut o = OUTAGES.lock().unwrap_or_else(|p| p.into_inner());
                o.on = false;
                o.ended = Some(std::time::Instant::now());
                tracing::warn!(
                    down_ms = since.elapsed().as_millis() as u64,
                    tries = self.tries,
                    "{what}: Redis reachable again"
                );
            }
        }
        self.tries = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_a_cap_with_jitter() {
        let mut b = Backoff::default();
        let pauses: Vec<_> = (0..20).map(|_| b.pause()).collect();
        assert!(pauses[0] <= BACKOFF_MIN);
        assert!(pauses.iter().all(|p| *p <= BACKOFF_MAX));
        assert!(pauses[19] >= BACKOFF_MAX / 2);
        b.reset();
        assert!(b.pause() <= BACKOFF_MIN);
    }

    /// A link to a Redis nobody listens for: its failures are fed by hand.
    fn unreached() -> Reconnecting {
        let args = crate::model::config::RedisArgs {
            url: "redis://127.0.0.1:1".into(),
            ..Default::default()
        };
        Reconnecting::new(client(&args).unwrap(), "test", RESPONSE_TIMEOUT)
    }

    /// A refusal for memory (or a replica's READONLY), then another error
    /// (the connection dropped), then a success: the process' flags and
    /// the `hitcount_redis_oom` gauge are cleared. The other error used to
    /// make the task forget the refusal, leaving the gauge at 1 for good.
    #[test]
    fn a_success_clears_a_refusal_whatever_failed_in_between() {
        let mut link = unreached();
        let refused = |code: &str| {
            let text = format!("-{code} refused\r\n");
            let e = redis::parse_redis_value(text.as_bytes())
                .and_then(redis::Value::extract_error)
                .unwrap_err();
            StoreError::Redis(e)
        };
        let dropped = StoreError::Redis(redis::RedisError::from((
            redis::ErrorKind::Io,
            "broken pipe",
        )));
        // A slot on the move is no outage: tried again within a second,
        // however often it repeats.
        for _ in 0..10 {
            let (_, pause) = link.failed(&refused("ASK 9842 127.0.0.1:7002"), None);
            assert!(pause <= SLOT_MOVING_PAUSE, "{pause:?}");
        }
        assert!(link.outage.since.is_none(), "no outage seen");
        // One that never ends is an outage, logged as one.
        link.slot_moving = Some(std::time::Instant::now() - SLOT_MOVING_QUIET);
        link.failed(&refused("MOVED 9842 127.0.0.1:7002"), None);
        assert!(link.outage.since.is_some(), "an outage at last");
        link.succeeded();
        assert!(link.slot_moving.is_none());
        let writes_refused = || crate::store::error::writes_refused().is_some();
        for (code, flag) in [
            ("OOM", crate::store::memory::out_of_memory as fn() -> bool),
            ("READONLY", writes_refused),
            ("NOREPLICAS", writes_refused),
            ("MISCONF", writes_refused),
        ] {
            link.failed(&refused(code), None);
            assert!(flag(), "{code}");
            link.failed(&dropped, None);
            assert!(flag(), "{code}: still refused, as far as anyone knows");
            link.succeeded();
            assert!(!flag(), "{code}");
        }
    }

    /// A proven connection that broke is replaced at once, quietly; one
    /// that breaks again soon after its replacement served a call is an
    /// outage, backed off (and logged: see [`Outage::failed`]); a worker
    /// whose every read Redis closed reconnected 150 times a second
    /// without a word.
    #[test]
    fn a_link_that_breaks_again_at_once_is_an_outage() {
        let mut link = unreached();
        let dropped = StoreError::Redis(redis::RedisError::from((
            redis::ErrorKind::Io,
            "connection reset",
        )));
        link.succeeded();
        let (_, pause) = link.failed(&dropped, None);
        assert_eq!(pause, Duration::ZERO, "replaced at once");
        link.succeeded();
        let (_, pause) = link.failed(&dropped, None);
        assert!(pause > Duration::ZERO, "an outage, backed off");
        // Long after the last quick one, a break is replaced at once again.
        link.succeeded();
        link.quick = Some(std::time::Instant::now() - QUICK_AGAIN);
        assert_eq!(link.failed(&dropped, None).1, Duration::ZERO);
    }
}
