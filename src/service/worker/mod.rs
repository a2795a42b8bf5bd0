//! The worker loop: read entries, aggregate a window, commit it, apply it,
//! acknowledge it; recover what stopped workers left behind.
//!
//! One worker is one consumer of the group, on one connection. While it
//! works through a backlog it keeps one read of new entries in flight (sent
//! as soon as a full read comes back, on a clone of the connection), so Redis
//! reads the next entries while the worker aggregates and applies: memory
//! stays bounded by one window and one read. Any Redis error drops the window in flight (its
//! entries stay pending) and *resyncs*: reconnect with backoff, reload the
//! scripts, read this consumer's epoch, finish its own recorded windows, then
//! re-read its pending entries before new ones. See [`crate::store::commit`] for why
//! this counts every hit exactly once.

pub mod batch;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

use crate::model::aggregate::Cell;
use crate::model::clock::unix_ms;
use crate::model::config::{LayoutArgs, RedisArgs, StreamArgs, WorkerArgs};
use crate::model::keys::Keys;
use crate::model::known::KnownCache;
use crate::model::metrics::metrics;
use crate::model::shutdown::Shutdown;
use crate::service::health::Health;
use crate::service::recovery;
use crate::service::registration::Registration;
use crate::service::worker::batch::Batch;
use crate::store::commit::{Apply, Committer, Finished, Outcome, Sealed, APPLY_GUARD, CHUNK_CELLS};
use crate::store::connect::{
    self, Backoff, Conn, ErrorClass, Outage, Reconnecting, StoreError, StoreResult,
};
use crate::store::stream::{self, EntryRef};

/// How long a resync waits for a read ahead still in flight (whose entries
/// it must see as pending), in ms.
const AHEAD_WAIT_MS: u64 = 2000;

/// How long recording this worker's last error may take before it is given
/// up (the connection may be the thing that failed).
const LAST_ERROR_TIMEOUT: Duration = Duration::from_millis(500);

/// Everything a worker needs.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// How to reach Redis.
    pub redis: RedisArgs,
    /// The counter layout.
    pub layout: LayoutArgs,
    /// Stream, group and dead-letter stream.
    pub stream: StreamArgs,
    /// Reading, windows, recovery, shutdown.
    pub worker: WorkerArgs,
}

/// Where the next read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cursor {
    /// This consumer's own pending entries after this id.
    Pending(String),
    /// New entries (`>`).
    New,
}

/// One consumer of the group.
pub struct Worker {
    settings: Settings,
    /// The connection, reopened after any error.
    link: Reconnecting,
    /// `link.opened()` when this worker last synced: a new connection
    /// means a resync.
    synced: Option<u64>,
    keys: Keys,
    committer: Committer,
    consumer: String,
    /// This process' registration of `consumer`, taken at the first sync.
    registration: Arc<Registration>,
    registered: bool,
    epoch: String,
    cursor: Cursor,
    incarnation: String,
    seq: u64,
    batch: Batch,
    known: KnownCache,
    /// The last read of new entries came back short, or its newest entry is
    /// younger than `--window-ms`: the worker is at the stream's head, so
    /// windows close on `--window-ms`.
    caught_up: bool,
    /// The next read of new entries, sent while this one is processed.
    ahead: Option<tokio::task::JoinHandle<Result<Value, RedisError>>>,
    finished: Option<Finished>,
    health: Arc<Health>,
    /// Retries of a window's apply step on the same connection.
    apply_outage: Outage,
    apply_backoff: Backoff,
    last_claim: Instant,
    last_gc: Instant,
    shutdown: Shutdown,
}

impl Worker {
    /// A worker with validated settings; connects on its first turn.
    pub fn new(
        mut settings: Settings,
        health: Arc<Health>,
        shutdown: Shutdown,
    ) -> Result<Worker, crate::model::config::ConfigError> {
        settings.layout.validate()?;
        settings.stream.validate()?;
        settings.worker.validate()?;
        let client = connect::client(&settings.redis)?;
        let keys = Keys::new(&settings.layout, &settings.stream);
        let consumer = settings.worker.consumer_name();
        let registration = Arc::new(Registration::new(&keys, &consumer));
        let committer = Committer::new(keys.clone(), consumer.clone(), settings.stream.dead_maxlen)
            .with_registration(registration.token(), registration.lifetime_ms());
        let batch = Batch::new(&settings.layout.precisions, settings.layout.samples);
        let known = KnownCache::new(batch.window().precisions(), settings.layout.samples);
        let now = Instant::now();
        Ok(Worker {
            link: Reconnecting::new(
                client,
                "worker",
                Duration::from_millis(settings.worker.block_ms) + connect::RESPONSE_TIMEOUT,
            ),
            synced: None,
            committer,
            consumer,
            registration,
            registered: false,
            epoch: "0".into(),
            cursor: Cursor::Pending("0".into()),
            incarnation: format!("{:016x}", rand::random::<u64>()),
            seq: 0,
            batch,
            known,
            caught_up: true,
            ahead: None,
            finished: None,
            health,
            apply_outage: Outage::default(),
            apply_backoff: Backoff::default(),
            last_claim: now,
            last_gc: now,
            shutdown,
            keys,
            settings,
        })
    }

    /// This worker's consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Runs until shutdown, then drains: applies the window in flight and
    /// this consumer's pending entries, leaves the group and releases its
    /// consumer name, all within the shutdown deadline. An error no retry can
    /// fix is reported on the shutdown (see [`Shutdown::fail`]) and stops it.
    pub async fn run(mut self) {
        tracing::info!(consumer = %self.consumer, stream = %self.keys.stream, group = %self.keys.group,
            redis = %crate::model::config::redact_url(&self.settings.redis.url), "worker starting");
        let (done_trigger, done) = crate::model::shutdown::channel();
        let keeper = tokio::spawn(self.registration.clone().keep(
            self.link.client().clone(),
            self.shutdown.clone(),
            done,
        ));
        while !self.shutdown.is_triggered() {
            self.health.turned();
            if let Err(e) = self.turn().await {
                self.failed(e).await;
            }
        }
        self.health.set_stopping();
        let deadline = self.settings.worker.shutdown_timeout();
        let drained = match tokio::time::timeout(deadline, self.drain()).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unexpected {
                what: "shutdown",
                reply: format!("deadline of {deadline:?} passed"),
            }),
        };
        done_trigger.trigger();
        let _ = keeper.await;
        let released = self.release_name().await;
        match (drained, released) {
            (Ok(true), Ok(true)) => {
                tracing::info!(consumer = %self.consumer, "worker stopped cleanly: window applied, group left, consumer name released")
            }
            (Ok(false), _) if self.shutdown.failed() => tracing::warn!(consumer = %self.consumer,
                "worker stopped on a fatal error: its pending entries stay for other workers \
                 to claim after --claim-idle-ms"),
            (Ok(false), _) => tracing::warn!(consumer = %self.consumer,
                "worker stopped without reaching Redis: its window in flight was dropped \
                 (its entries stay pending and are claimed by other workers after \
                 --claim-idle-ms); its consumer name lapses on its own"),
            (Err(e), _) => tracing::warn!(consumer = %self.consumer, error = %e,
                "worker stopped before finishing: its pending entries will be claimed by \
                 other workers after --claim-idle-ms"),
            (Ok(true), Err(e)) => tracing::warn!(consumer = %self.consumer, error = %e,
                "worker stopped; window applied and group left, but its consumer name \
                 could not be released: it lapses on its own"),
            (Ok(true), Ok(false)) => tracing::info!(consumer = %self.consumer,
                "worker stopped cleanly: window applied, group left"),
        }
    }

    /// Releases the consumer name, if this worker registered it.
    async fn release_name(&mut self) -> StoreResult<bool> {
        if !self.registered {
            return Ok(false);
        }
        let Some(conn) = self.link.current() else {
            return Err(StoreError::Unexpected {
                what: "releasing the consumer name",
                reply: "no connection to Redis".into(),
            });
        };
        let released =
            tokio::time::timeout(connect::RESPONSE_TIMEOUT, self.registration.release(conn))
                .await
                .map_err(|_| StoreError::Unexpected {
                    what: "releasing the consumer name",
                    reply: "timed out".into(),
                })??;
        Ok(released)
    }

    /// One step: resync if needed, claim if due, read, maybe apply.
    async fn turn(&mut self) -> StoreResult<()> {
        if self.link.current().is_none() || self.synced != Some(self.link.opened()) {
            self.sync().await?;
        }
        // Claim only once this consumer's own pending entries are read: a
        // claimed entry becomes one of them, so claiming during that scan
        // would put it in the window twice (once claimed, once re-read).
        if self.cursor == Cursor::New && self.batch.is_empty() {
            self.maintain().await?;
        }
        let block = match (&self.cursor, self.batch.opened()) {
            (Cursor::Pending(_), _) => None,
            (Cursor::New, None) => Some(self.settings.worker.block_ms),
            (Cursor::New, Some(t)) => {
                let left = Duration::from_millis(self.settings.worker.window_ms)
                    .saturating_sub(t.elapsed());
                Some((left.as_millis() as u64).max(1))
            }
        };
        // A read ahead serves only reads of new entries: after a fence its
        // entries are pending, and the scan of pending entries reads them.
        let ahead = if self.cursor == Cursor::New {
            self.take_ahead().await?
        } else {
            self.settle_ahead().await;
            None
        };
        let reply = match ahead {
            Some(reply) => reply,
            None => self.read(block).await?,
        };
        self.link.succeeded();
        let entries = self.entries(&reply);
        if self.cursor == Cursor::New {
            // A full read means more is waiting: read ahead. Windows grow
            // past `--window-ms` only when the entries are old too (a real
            // backlog), not in a burst at the head, where latency matters.
            let full = entries.len() >= self.settings.worker.read_count;
            let newest_age_ms = entries
                .last()
                .and_then(|e| crate::model::event::entry_id_ms(e.id))
                .map(|ms| unix_ms() - ms);
            let window_ms = self.settings.worker.window_ms as i64;
            self.caught_up = !full || newest_age_ms.is_none_or(|age| age < window_ms);
            if full {
                self.read_ahead();
            }
        }
        if entries.is_empty() {
            if self.cursor != Cursor::New {
                self.cursor = Cursor::New;
            } else if !self.batch.is_empty() {
                self.flush().await?;
            } else if let Some(done) = self.finished.take() {
                let committer = self.committer.clone();
                committer.finish(self.conn()?, &done).await?;
            }
            return Ok(());
        }
        metrics().events_read.inc_by(entries.len() as u64);
        if let (Cursor::Pending(_), Some(last)) = (&self.cursor, entries.last()) {
            self.cursor = Cursor::Pending(last.id_str().to_string());
        }
        self.add_entries(&entries);
        if self.window_full() {
            self.flush().await?;
        }
        Ok(())
    }

    /// Reads the next entries: this consumer's own pending ones first (after
    /// a start or any error), then new ones.
    async fn read(&mut self, block: Option<u64>) -> StoreResult<Value> {
        let count = self.settings.worker.read_count;
        let cursor = self.cursor.clone();
        let (keys, consumer) = (self.keys.clone(), self.consumer.clone());
        let conn = self.conn()?;
        Ok(match &cursor {
            Cursor::Pending(after) => {
                stream::read_own_pending(conn, &keys, &consumer, count, after).await?
            }
            Cursor::New => stream::read(conn, &keys, &consumer, count, block, ">").await?,
        })
    }

    /// The connection, once synced.
    fn conn(&mut self) -> StoreResult<&mut Conn> {
        self.link.current().ok_or_else(|| StoreError::Unexpected {
            what: "the worker's connection",
            reply: "not connected".into(),
        })
    }

    /// Sends the next read of new entries now, without blocking, on a clone
    /// of the connection, so that Redis reads while this worker aggregates
    /// and applies: at most one read ahead, so memory stays bounded by a
    /// window and one read. The entries are simply the next ones this
    /// consumer is delivered (pending to it, so a resync re-reads them).
    fn read_ahead(&mut self) {
        let Some(mut conn) = self.link.current().cloned() else {
            return;
        };
        let (keys, consumer) = (self.keys.clone(), self.consumer.clone());
        let count = self.settings.worker.read_count;
        self.ahead = Some(tokio::spawn(async move {
            stream::read(&mut conn, &keys, &consumer, count, None, ">").await
        }));
    }

    /// The read ahead, if one was sent and found entries.
    async fn take_ahead(&mut self) -> StoreResult<Option<Value>> {
        let Some(handle) = self.ahead.take() else {
            return Ok(None);
        };
        let reply = handle
            .await
            .map_err(|e| StoreError::ReadAhead(e.to_string()))??;
        Ok((!stream::read_reply_entries(&reply).is_empty()).then_some(reply))
    }

    /// Waits (boundedly) for a read ahead still in flight, so that its
    /// entries are pending before this consumer re-reads its pending ones; a
    /// read that never returns leaves them to be claimed.
    async fn settle_ahead(&mut self) {
        if let Some(mut handle) = self.ahead.take() {
            let wait = Duration::from_millis(AHEAD_WAIT_MS);
            if tokio::time::timeout(wait, &mut handle).await.is_err() {
                handle.abort();
            }
        }
    }

    /// The entries of a reply of [`Worker::read`].
    fn entries<'a>(&self, reply: &'a Value) -> Vec<EntryRef<'a>> {
        match self.cursor {
            Cursor::Pending(_) => stream::entry_list(reply),
            Cursor::New => stream::read_reply_entries(reply),
        }
    }

    /// Decodes entries into the window being filled.
    fn add_entries(&mut self, entries: &[EntryRef<'_>]) {
        self.batch.add(entries, unix_ms());
    }

    fn window_full(&self) -> bool {
        self.batch.is_full(&self.settings.worker, self.caught_up)
    }

    /// Commits, applies and acknowledges the window; finishes the previous one.
    async fn flush(&mut self) -> StoreResult<()> {
        let started = Instant::now();
        let window_id = format!("{}-{}", self.incarnation, self.seq);
        self.seq += 1;
        let cells: Vec<Cell<'_>> = self.batch.window().cells().collect();
        let sealed = Sealed {
            window: &window_id,
            ids: self.batch.ids(),
            cells: &cells,
            rejected: self.batch.rejected(),
            chunk: CHUNK_CELLS,
        };
        let Some(conn) = self.link.current() else {
            return Err(StoreError::Unexpected {
                what: "committing a window",
                reply: "not connected".into(),
            });
        };
        let outcome = self
            .committer
            .commit(conn, &self.epoch, self.finished.as_ref(), Some(&sealed))
            .await?;
        let finished = self.finished.take().map(|f| f.window);
        match outcome {
            Outcome::Committed | Outcome::Duplicate | Outcome::Nothing => {}
            Outcome::Taken(holder) => {
                return Err(StoreError::NameTaken {
                    name: self.consumer.clone(),
                    holder,
                });
            }
            Outcome::Fenced(epoch) => {
                tracing::warn!(consumer = %self.consumer, "entries were claimed by another worker: window dropped, re-reading own pending entries");
                metrics().windows_fenced.inc();
                self.epoch = epoch;
                self.cursor = Cursor::Pending("0".into());
                self.clear_window();
                return Ok(());
            }
        }
        let committed_at = Instant::now();
        let failures = loop {
            // Replays are safe only while the markers surely live: past the
            // guard, leave the window to recovery (which reloads it).
            if committed_at.elapsed() > APPLY_GUARD {
                return Err(StoreError::Guard(APPLY_GUARD));
            }
            let Some(conn) = self.link.current() else {
                return Err(StoreError::Unexpected {
                    what: "applying a window",
                    reply: "not connected".into(),
                });
            };
            let step = Apply {
                window: &window_id,
                cells: &cells,
                ids: self.batch.ids(),
                chunk: CHUNK_CELLS,
            };
            match self
                .committer
                .apply_and_ack(conn, &step, finished.as_deref(), Some(&mut self.known))
                .await
            {
                Ok(f) => break f,
                Err(e) => {
                    // Resync (reconnect, then recovery finishes the record)
                    // unless the same connection may simply try again.
                    if e.class() == ErrorClass::Fatal
                        || e.needs_resync()
                        || self.shutdown.is_triggered()
                    {
                        return Err(e);
                    }
                    e.record();
                    self.apply_outage.failed("applying a window", &e);
                    tokio::time::sleep(self.apply_backoff.pause()).await;
                    self.health.turned();
                }
            }
        };
        self.apply_outage.recovered("applying a window");
        self.apply_backoff.reset();
        self.batch.count_applied(&failures, started, unix_ms());
        self.finished = Some(Finished {
            window: window_id,
            failures,
        });
        self.clear_window();
        Ok(())
    }

    fn clear_window(&mut self) {
        self.batch.clear();
    }

    /// Reconnects and restores a consistent state after any error.
    async fn sync(&mut self) -> StoreResult<()> {
        self.health.set_in_group(false);
        self.settle_ahead().await;
        self.clear_window();
        self.finished = None; // its record is ours: recovered below
                              // A restart or failover may have lost the members it remembers.
        self.known.clear();
        // One try per turn: a failure goes through `failed` (backoff), and
        // the loop keeps turning, so a Redis outage leaves the worker live
        // (restarting it would not help) but not ready.
        let conn = self.link.get().await?;
        self.health.set_redis_connected(true);
        if !self.registered {
            self.registration.acquire(conn).await?;
            self.registered = true;
        }
        stream::ensure_group(conn, &self.keys).await?;
        // The epoch is read before the pending entries: a claim after this
        // read bumps it, so no window can hold entries claimed since.
        self.epoch = self.committer.epoch(conn).await?;
        let seen = Instant::now();
        let (records, corrupt, _) = self.committer.records(conn).await?;
        for bad in &corrupt {
            self.committer.quarantine(conn, bad).await?;
        }
        for r in records.iter().filter(|r| r.owner == self.consumer) {
            self.committer.recover(conn, r, seen).await?;
        }
        self.cursor = Cursor::Pending("0".into());
        self.synced = Some(self.link.opened());
        self.link.succeeded();
        self.health.set_in_group(true);
        Ok(())
    }

    /// Claims, recovery of stopped workers' windows, consumer clean-up: on
    /// their own schedules, between windows.
    async fn maintain(&mut self) -> StoreResult<()> {
        let w = self.settings.worker.clone();
        let claim_every = Duration::from_millis((w.claim_idle_ms / 4).clamp(250, 5000));
        if self.last_claim.elapsed() >= claim_every {
            self.last_claim = Instant::now();
            let dead_maxlen = self.settings.stream.dead_maxlen;
            let (committer, consumer) = (self.committer.clone(), self.consumer.clone());
            let conn = self.conn()?;
            let claimed = recovery::claim(conn, &committer, &consumer, &w, dead_maxlen).await?;
            let entries = claimed.entries();
            if !entries.is_empty() {
                self.add_entries(&entries);
            }
        }
        // Often enough that a consumer is removed soon after its idle bound,
        // at most once a minute (XINFO CONSUMERS walks every consumer).
        let gc_every = Duration::from_millis((w.consumer_idle_ms / 2).clamp(1000, 60_000));
        if self.last_gc.elapsed() >= gc_every {
            self.last_gc = Instant::now();
            let keys = self.keys.clone();
            let conn = self.conn()?;
            recovery::remove_gone_consumers(conn, &keys, w.consumer_idle_ms, "").await?;
        }
        Ok(())
    }

    /// Handles an error of a turn: count it, drop the window, resync later;
    /// an error no retry can fix stops the process.
    async fn failed(&mut self, e: StoreError) {
        self.health.set_redis_connected(false);
        if e.class() == ErrorClass::Transient {
            if let StoreError::Unexpected { .. } = e {
                tracing::error!(error = %e, "unexpected reply from Redis: nothing taken as done; resyncing");
            }
            if let Some(conn) = self.link.current() {
                // Best effort, and short: the connection may be what failed.
                // It tells whoever dead-letters this consumer's entries why.
                let mut cmd = redis::cmd("HSET");
                cmd.arg(self.keys.last_errors())
                    .arg(&self.consumer)
                    .arg(e.to_string());
                let _ = tokio::time::timeout(LAST_ERROR_TIMEOUT, cmd.query_async::<()>(conn)).await;
            }
        }
        let (class, pause) = self.link.failed(&e, Some(&self.shutdown));
        if class == ErrorClass::Fatal {
            self.health.set_fatal();
            return;
        }
        let mut stop = self.shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.wait() => {}
        }
    }

    /// After shutdown: apply what is in flight, then this consumer's pending
    /// entries, finish, and leave the group when nothing is left.
    /// Returns false when there was no connection to drain on.
    async fn drain(&mut self) -> StoreResult<bool> {
        self.settle_ahead().await;
        if self.link.current().is_none() || self.shutdown.failed() {
            return Ok(false);
        }
        if !self.batch.is_empty() {
            self.flush().await?;
        }
        self.cursor = Cursor::Pending("0".into());
        while let Cursor::Pending(_) = self.cursor {
            let reply = self.read(None).await?;
            let entries = self.entries(&reply);
            if entries.is_empty() {
                break;
            }
            if let Some(last) = entries.last() {
                self.cursor = Cursor::Pending(last.id_str().to_string());
            }
            self.add_entries(&entries);
            self.flush().await?;
        }
        let (committer, keys, consumer) = (
            self.committer.clone(),
            self.keys.clone(),
            self.consumer.clone(),
        );
        let finished = self.finished.take();
        let conn = self.conn()?;
        if let Some(done) = finished {
            committer.finish(conn, &done).await?;
        }
        recovery::remove_gone_consumers(conn, &keys, u64::MAX, &consumer).await?;
        self.health.set_in_group(false);
        Ok(true)
    }
}

/// Runs a worker until `shutdown`.
pub async fn run(
    settings: Settings,
    health: Arc<Health>,
    shutdown: Shutdown,
) -> Result<(), crate::model::config::ConfigError> {
    Worker::new(settings, health, shutdown)?.run().await;
    Ok(())
}
