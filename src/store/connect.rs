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
pub use crate::store::error::{
    classify, describe, fatal_hint, first_cause, joined, record, ErrorClass, StoreError,
    StoreResult,
};

/// Time allowed for a reply to a non-blocking command. Never "none": a call
/// was seen to hang forever during a failover.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest time to open a connection and load the scripts.
pub const OPEN_DEADLINE: Duration = Duration::from_secs(10);
/// First and longest pause between reconnection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

pub use crate::store::client::{client, Client, Conn};

/// A connection opened on first use, with the scripts loaded, and opened
/// again after any error: the one reconnect loop every long-running task
/// (worker, lease, registration, duties, sampler, producer) goes through.
/// Failures are counted and logged once per outage; a fatal one stops the
/// process through the shutdown.
pub struct Reconnecting {
    client: Client,
    what: &'static str,
    timeout: Duration,
    conn: Option<Conn>,
    opened: u64,
    outage: Outage,
    backoff: Backoff,
}

impl Reconnecting {
    /// A connection for the task `what` (named in logs), whose replies may
    /// take up to `timeout`.
    pub fn new(client: Client, what: &'static str, timeout: Duration) -> Reconnecting {
        Reconnecting {
            client,
            what,
            timeout,
            conn: None,
            opened: 0,
            outage: Outage::default(),
            backoff: Backoff::default(),
        }
    }

    /// The connection, opened now (scripts loaded) if there is none.
    pub async fn get(&mut self) -> StoreResult<&mut Conn> {
        let conn = match self.conn.take() {
            Some(c) => c,
            None => {
                // Bounded as a whole: a cluster client retries a node that
                // is down for far longer (its own backoff), and a failover
                // is better met by a fresh connection a moment later.
                let open = async {
                    let mut c = self.client.open(self.timeout).await?;
                    crate::store::scripts::load_all(&mut c).await?;
                    Ok::<_, StoreError>(c)
                };
                let c = tokio::time::timeout(OPEN_DEADLINE, open)
                    .await
                    .map_err(|_| StoreError::Unexpected {
                        what: "connecting to Redis",
                        reply: format!("no connection within {OPEN_DEADLINE:?}"),
                    })??;
                self.opened += 1;
                c
            }
        };
        Ok(self.conn.insert(conn))
    }

    /// The connection if one is open.
    pub fn current(&mut self) -> Option<&mut Conn> {
        self.conn.as_mut()
    }

    /// How many connections were opened so far: a change tells a caller
    /// that keeps state next to the connection (the worker) to resync.
    pub fn opened(&self) -> u64 {
        self.opened
    }

    /// Records a success: ends an outage, resets the backoff.
    pub fn succeeded(&mut self) {
        self.outage.recovered(self.what);
        self.backoff.reset();
    }

    /// Handles a failure: counts it and drops the connection; a transient
    /// error is logged once per outage, a fatal one stops the process
    /// through `shutdown` with one line naming the cause (without a
    /// shutdown, as for the producer, which never stops its caller, it is
    /// logged once per outage and retried). Returns its class and the pause
    /// before the next try.
    pub fn failed(
        &mut self,
        err: &StoreError,
        shutdown: Option<&crate::model::shutdown::Shutdown>,
    ) -> (ErrorClass, Duration) {
        self.conn = None;
        let class = err.record();
        match (class, shutdown) {
            (ErrorClass::Fatal, Some(shutdown)) => {
                let addr = self.client.describe();
                let cause = match err {
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
            _ => self.outage.failed(self.what, err),
        }
        (class, self.backoff.pause())
    }

    /// The client, for tasks that open more connections of their own.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// Capped exponential backoff with full jitter.
#[derive(Debug)]
pub struct Backoff {
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
    pub fn pause(&mut self) -> Duration {
        let cap = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        let ms = cap.as_millis() as u64;
        Duration::from_millis(rand::rng().random_range(ms / 2..=ms.max(1)))
    }

    /// Back to the shortest pause after a success.
    pub fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

/// Tracks one outage so it is logged once at its start and once at its end.
#[derive(Debug, Default)]
pub struct Outage {
    since: Option<std::time::Instant>,
    tries: u64,
}

/// This process' view of Redis outages, shared by its tasks (worker, leader,
/// sampler, producer): one line is logged when Redis becomes unreachable and
/// one when it is reachable again, however many tasks notice.
struct Outages {
    /// When the current outage began, if one is going on.
    since: Option<std::time::Instant>,
    /// When the last one ended: a task that only notices its broken
    /// connection shortly after (on its next use) is not a new outage.
    ended: Option<std::time::Instant>,
}

/// A task failing within this long after an outage ended is still in it.
const OUTAGE_AFTERSHOCK: Duration = Duration::from_secs(10);

static OUTAGES: std::sync::Mutex<Outages> = std::sync::Mutex::new(Outages {
    since: None,
    ended: None,
});

impl Outage {
    /// Records a failed try; logs only the first of an outage in this process.
    pub fn failed(&mut self, what: &str, err: &dyn std::fmt::Display) {
        self.tries += 1;
        tracing::debug!(error = %err, tries = self.tries, "{what}: Redis call failed");
        let now = std::time::Instant::now();
        self.since.get_or_insert(now);
        let mut o = OUTAGES.lock().unwrap_or_else(|p| p.into_inner());
        // A failure just after an outage ended is a task noticing it late;
        // if failures go on past that, it is a new outage and is logged.
        let aftershock = o.ended.is_some_and(|e| e.elapsed() < OUTAGE_AFTERSHOCK);
        if o.since.is_none() && !aftershock {
            o.since = Some(now);
            tracing::warn!(error = %err, "{what}: Redis unavailable, retrying with backoff");
        }
    }

    /// Records a success; the first task to reach Redis again logs the end
    /// of the outage.
    pub fn recovered(&mut self, what: &str) {
        if self.since.take().is_some() {
            metrics().redis_reconnects.inc();
            let mut o = OUTAGES.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(since) = o.since.take() {
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
}
