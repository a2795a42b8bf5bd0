//! The worker loop: read entries, aggregate a window, commit it, hand it
//! to the process' sum, which applies and acknowledges it; recover what
//! stopped workers left behind.
//!
//! One worker is one consumer of the group, on one connection. While it
//! works through a backlog it keeps [`READS_AHEAD`] reads of new entries in
//! flight (sent as soon as a full read comes back, on clones of the
//! connection), so Redis reads the next entries while the worker aggregates
//! and applies: memory stays bounded by one window, the sum and those
//! reads. Each window goes to the sum (`sum.rs`), applied on a task of
//! its own: alone at the head, summed with the next windows while behind.
//! Any Redis error drops the window in flight (its entries stay pending)
//! and *resyncs*: reconnect
//! with backoff, reload the scripts, read this consumer's epoch, finish its
//! own recorded windows, then re-read its pending entries before new ones.
//! See [`crate::store::commit`] for why this counts every hit exactly once.

mod apply;
pub(crate) mod batch;
mod read;
pub(crate) mod sum;
mod sync;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

use crate::model::clock::unix_ms;
use crate::model::config::{LayoutArgs, RedisArgs, StreamArgs, WorkerArgs};
use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::model::shutdown::Shutdown;
use crate::service::health::Health;
use crate::service::registration::Registration;
use crate::service::worker::batch::Batch;
use crate::store::commit::Committer;
use crate::store::connect::{self, Client, Reconnecting, StoreError, StoreResult};
use crate::store::time::RedisClock;

/// How long a resync waits for a read ahead still in flight (whose entries
/// it must see as pending), in ms.
const AHEAD_WAIT_MS: u64 = 2000;

/// Reads of new entries in flight at most while the worker is behind: two,
/// so that Redis answers the next while the worker parses one (measured on
/// a 1 M-entry Zipf backlog: 33–36 % of the bare consumer with one, 36–37 %
/// with two, no better with four).
const READS_AHEAD: usize = 2;

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
pub(crate) struct Worker {
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
    /// Redis' clock, which judges the entries' times.
    clock: RedisClock,
    /// The newest entry of a window this worker committed: where its group
    /// is made again if it finds it gone.
    newest_committed: Option<(u64, u64)>,
    /// Its place in the process' sum, which applies its recorded windows.
    sum: sum::Share,
    /// The last read of new entries came back short, or its newest entry is
    /// younger than `--window-ms`: the worker is at the stream's head, so
    /// windows close on `--window-ms`.
    caught_up: bool,
    /// How many entries the next read asks for (see [`read::Pace`]).
    pace: read::Pace,
    /// The next reads of new entries, sent while this one is processed,
    /// each with the count it asked for.
    ahead: VecDeque<(usize, tokio::task::JoinHandle<Result<Value, RedisError>>)>,
    health: Arc<Health>,
    last_claim: Instant,
    /// The last claim came back full: claim again between the next windows.
    claim_again: bool,
    last_gc: Instant,
    shutdown: Shutdown,
}

impl Worker {
    /// The consumer of one stream shard (`keys`) with validated settings
    /// (see [`crate::service::shards`], which starts them), its windows
    /// applied by the process' `sum`; connects on its first turn.
    pub(crate) fn new(
        settings: Settings,
        keys: Keys,
        client: Client,
        health: Arc<Health>,
        shutdown: Shutdown,
        sum: sum::Share,
    ) -> Worker {
        let consumer = settings.worker.consumer_name();
        let registration = Arc::new(Registration::new(&keys, &consumer));
        let committer = Committer::new(keys.clone(), consumer.clone(), settings.stream.dead_maxlen)
            .with_registration(registration.token(), registration.lifetime_ms())
            .with_wait(settings.worker.wait_replicas);
        let batch = Batch::new(&settings.layout.precisions, settings.layout.samples)
            .with_quantiles(&settings.layout.quantile_precisions());
        let now = Instant::now();
        Worker {
            link: Reconnecting::new(
                client,
                "worker",
                Duration::from_millis(settings.worker.block_ms()) + connect::RESPONSE_TIMEOUT,
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
            clock: RedisClock::default(),
            newest_committed: None,
            sum,
            caught_up: true,
            pace: read::Pace::new(settings.worker.read_count),
            ahead: VecDeque::new(),
            health,
            last_claim: now,
            claim_again: false,
            last_gc: now,
            shutdown,
            keys,
            settings,
        }
    }

    /// Runs until shutdown, then drains: applies the window in flight and
    /// this consumer's pending entries, leaves the group and releases its
    /// consumer name, all within the shutdown deadline. An error no retry can
    /// fix is reported on the shutdown (see [`Shutdown::fail`]) and stops it.
    pub(crate) async fn run(mut self) {
        tracing::info!(consumer = %self.consumer, stream = %self.keys.stream, group = %self.keys.group,
            redis = %crate::model::config::redact_url(&self.settings.redis.url), "worker starting");
        let (done_trigger, done) = crate::model::shutdown::channel();
        let keeper = tokio::spawn(self.registration.clone().keep(
            self.link.client().clone(),
            self.shutdown.clone(),
            done,
        ));
        let deadline = self.settings.worker.shutdown_timeout();
        // A turn may wait on the sum (handing in a window while it applies
        // the last): past the deadline after a shutdown began it is dropped,
        // as a crash would, and nothing is drained after it (its window may
        // be recorded and not yet handed in: recovery finishes it).
        let mut cut = false;
        while !self.shutdown.is_triggered() {
            self.health.turned();
            let mut stop = self.shutdown.clone();
            let past_deadline = async move {
                stop.wait().await;
                tokio::time::sleep(deadline).await;
            };
            tokio::select! {
                turned = self.turn() => if let Err(e) = turned {
                    self.failed(e).await;
                },
                () = past_deadline => {
                    cut = true;
                    break;
                }
            }
        }
        let until = tokio::time::Instant::now() + deadline;
        let drained = match cut {
            true => Err(()),
            false => (tokio::time::timeout_at(until, self.drain()).await).map_err(|_| ()),
        };
        // An apply of the sum in flight is waited for within the deadline
        // only: past it, its windows are left to recovery, as a crash's are.
        let _ = tokio::time::timeout_at(until, self.sum.forget(true)).await;
        done_trigger.trigger();
        let _ = keeper.await;
        let released = self.release_name().await;
        match (drained, released) {
            (Ok(Ok(true)), Ok(true)) => {
                tracing::info!(consumer = %self.consumer, "worker stopped cleanly: window applied, group left, consumer name released")
            }
            (Ok(Ok(false)), _) if !self.registered && self.link.current().is_some() => {
                tracing::info!(consumer = %self.consumer,
                "worker stopped while waiting for its consumer name (registered by an earlier \
                 worker that stopped without releasing it): it read nothing; the name's \
                 pending entries stay for the next worker of that name, or for others to claim \
                 after --claim-idle-ms")
            }
            (Ok(Ok(false)), _) if self.shutdown.failed() => {
                tracing::warn!(consumer = %self.consumer,
                "worker stopped on a fatal error: its pending entries stay under its \
                 consumer name, for a live worker of that name to read, or for others to \
                 claim after --claim-idle-ms")
            }
            (Ok(Ok(false)), _) => tracing::warn!(consumer = %self.consumer,
                "worker stopped without reaching Redis: its window in flight was dropped \
                 (its entries stay pending and are claimed by other workers after \
                 --claim-idle-ms); its consumer name lapses on its own"),
            (Ok(Err(e)), _) => tracing::warn!(consumer = %self.consumer, error = %e,
                "worker stopped before finishing: its pending entries will be claimed by \
                 other workers after --claim-idle-ms"),
            (Err(_), _) => {
                tracing::warn!(consumer = %self.consumer, shutdown_timeout_s = deadline.as_secs(),
                "worker stopped before finishing, at --shutdown-timeout: its pending entries \
                 will be claimed by other workers after --claim-idle-ms")
            }
            (Ok(Ok(true)), Err(e)) => tracing::warn!(consumer = %self.consumer, error = %e,
                "worker stopped; window applied and group left, but its consumer name \
                 could not be released: it lapses on its own"),
            (Ok(Ok(true)), Ok(false)) => tracing::info!(consumer = %self.consumer,
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

    /// One step (see [`Worker::step`]); then tells the sum whether more of
    /// this shard is coming soon: while the worker is behind, or a window
    /// is open (it closes within `--window-ms` at the head), the sum waits
    /// for it rather than apply what it holds without it.
    async fn turn(&mut self) -> StoreResult<()> {
        self.step().await?;
        let coming = !self.caught_up || !self.batch.is_empty();
        self.sum.set_coming(coming).await
    }

    /// Resync if needed, claim if due, read, maybe commit a window.
    async fn step(&mut self) -> StoreResult<()> {
        if self.link.current().is_none() || self.synced != Some(self.link.opened()) {
            self.sync().await?;
            if !self.registered {
                return Ok(());
            }
        }
        // Claim only once this consumer's own pending entries are read: a
        // claimed entry becomes one of them, so claiming during that scan
        // would put it in the window twice (once claimed, once re-read).
        if self.cursor == Cursor::New && self.batch.is_empty() {
            self.maintain().await?;
        }
        // Windows the sum could not apply: resync.
        self.sum.failure()?;
        // A read waits at most --block-ms (cut to a quarter of the shutdown
        // timeout), an open window's rest too: a read is not cut by a
        // SIGTERM, and a 60 s window held one past the grace period.
        let window = Duration::from_millis(self.settings.worker.window_ms);
        let block = match (&self.cursor, self.batch.opened()) {
            (Cursor::Pending(_), _) => None,
            (Cursor::New, None) => Some(self.settings.worker.block_ms()),
            (Cursor::New, Some(t)) => {
                let left = window.saturating_sub(t.elapsed()).as_millis() as u64;
                Some(left.min(self.settings.worker.block_ms()).max(1))
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
        let (asked, reply) = match ahead {
            Some(ahead) => ahead,
            None => (self.pace.count(), self.read(block).await?),
        };
        self.link.succeeded();
        let entries = self.entries(&reply);
        self.pace.observe(&entries);
        if self.cursor == Cursor::New {
            // A full read means more is waiting: read ahead. Windows grow
            // past `--window-ms` only when the entries are old too (a real
            // backlog), not in a burst at the head, where latency matters.
            let full = entries.len() >= asked;
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
            } else if self.batch.opened().is_some_and(|t| t.elapsed() >= window) {
                self.flush().await?;
            }
            return Ok(());
        }
        metrics().events_read.inc_by(entries.len() as u64);
        if let (Cursor::Pending(_), Some(last)) = (&self.cursor, entries.last()) {
            self.cursor = Cursor::Pending(last.id_str().to_string());
        }
        self.add_entries(&entries).await?;
        if self.window_full() {
            self.flush().await?;
        }
        Ok(())
    }
}
