//! The fire-and-forget producer: `hit(name)` returns at once; a background
//! task sends events in batches.
//!
//! The caller never blocks and never sees an error: events go into a bounded
//! buffer, a background task appends them to the stream in batches (one
//! script per batch, `produce.lua`, numbered so that a batch retried after a
//! lost reply is not appended twice). While Redis is unreachable the buffer
//! fills up to its bound; beyond it, events are dropped and counted
//! (`hitcount_producer_dropped_events_total`). [`Producer::flush`] waits until
//! everything accepted so far is in Redis; [`Producer::shutdown`] flushes and
//! stops the task.
//!
//! With several stream shards (`HITCOUNT_SHARDS`) a name's hits go to the
//! shard [`Keys::shard_of_name`] picks, so they aggregate in one worker's
//! windows; each shard has its own batch numbers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::model::config::{ConfigError, RedisArgs, StreamArgs};
use crate::model::event;
use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::store::connect::{self, Conn, ErrorClass, Reconnecting, StoreError};
use crate::store::scripts::PRODUCE;

/// Events per batch script: about 1.5 µs of Redis time each, so a batch stays
/// well under a millisecond and far from the 10 ms that would stall others.
const BATCH: usize = 250;
/// Batches sent per round trip.
const BATCHES_PER_TRIP: usize = 32;
/// How long Redis remembers a producer's last batch number (its dedup).
const DEDUP_TTL_SECS: u64 = 86_400;

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerOptions {
    /// Most events held while Redis is slow or away; more are dropped.
    pub max_buffered: u64,
    /// What to do with a batch Redis refuses for a reason no retry can fix
    /// (a refused password or permission, a key of another type, a stream
    /// whose entry IDs are exhausted): `false` (the default) retries it
    /// for ever, as through an outage, since the caller is fire-and-forget;
    /// `true` drops it (counted as dropped) and keeps the cause for
    /// [`Producer::refused`], for a caller that reports it (`hitcount hit`,
    /// `hitcount load`).
    pub give_up_when_refused: bool,
}

impl Default for ProducerOptions {
    fn default() -> Self {
        ProducerOptions {
            max_buffered: 1_000_000,
            give_up_when_refused: false,
        }
    }
}

enum Msg {
    /// A hit event for a shard.
    Hit(u32, Vec<u8>),
    Flush(oneshot::Sender<()>),
}

/// Counters of what the producer did, also exported as metrics.
#[derive(Debug, Default)]
pub struct ProducerStats {
    /// Events accepted into the buffer.
    pub accepted: AtomicU64,
    /// Events appended to the stream.
    pub sent: AtomicU64,
    /// Events dropped because the buffer was full, or because Redis refused
    /// them (with [`ProducerOptions::give_up_when_refused`]).
    pub dropped: AtomicU64,
    buffered: AtomicU64,
    /// Why Redis last refused a batch for good, if it did.
    refused: std::sync::Mutex<Option<String>>,
}

impl ProducerStats {
    /// Counts `sent` and `dropped` events that leave the buffer.
    fn settle(&self, sent: u64, dropped: u64) {
        self.sent.fetch_add(sent, Ordering::Relaxed);
        self.dropped.fetch_add(dropped, Ordering::Relaxed);
        self.buffered.fetch_sub(sent + dropped, Ordering::Relaxed);
        metrics().producer_sent.inc_by(sent);
        metrics().producer_dropped.inc_by(dropped);
    }
}

/// A handle to the producer; cheap to clone, usable from any task or thread.
#[derive(Clone)]
pub struct Producer {
    tx: mpsc::UnboundedSender<Msg>,
    stats: Arc<ProducerStats>,
    max_buffered: u64,
    shards: u32,
    task: Arc<tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Producer {
    /// Starts the background task (on the current tokio runtime). Fails only
    /// on a bad URL or unreadable TLS files; Redis being down is not an error.
    pub fn start(
        redis: &RedisArgs,
        stream: &StreamArgs,
        opts: ProducerOptions,
    ) -> Result<Producer, ConfigError> {
        stream.validate()?;
        let client = connect::client(redis)?;
        // Only the stream keys are used: the dead-letter naming of a
        // cluster does not matter here.
        let shards = Keys::all_shards(&Default::default(), stream, false)
            .into_iter()
            .map(|keys| Shard {
                keys,
                batch_no: 0,
                confirmed: 0,
                events: Vec::new(),
            })
            .collect();
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(ProducerStats::default());
        let sender = Sender {
            link: Reconnecting::new(client, "producer", connect::RESPONSE_TIMEOUT),
            shards,
            id: format!("{:016x}", rand::random::<u64>()),
            stats: stats.clone(),
            give_up_when_refused: opts.give_up_when_refused,
        };
        let task = tokio::spawn(sender.run(rx));
        Ok(Producer {
            tx,
            stats,
            max_buffered: opts.max_buffered,
            shards: stream.shards.max(1),
            task: Arc::new(tokio::sync::Mutex::new(Some(task))),
        })
    }

    /// Counts one hit of `name` now. Never blocks, never fails.
    pub fn hit(&self, name: &str) {
        self.send(name, 1, None, None)
    }

    /// Counts `count` hits of `name` now.
    pub fn hit_n(&self, name: &str, count: i64) {
        self.send(name, count, None, None)
    }

    /// Counts `count` hits of `name` at `ts` (unix seconds).
    pub fn hit_at(&self, name: &str, count: i64, ts: f64) {
        self.send(name, count, Some(ts), None)
    }

    /// Counts one hit of `name` now that measured `value` (e.g. a response
    /// time in ms), kept in its statistics (`stats:PREC:NAME`). The worker
    /// dead-letters a value that is not finite.
    pub fn observe(&self, name: &str, value: f64) {
        self.send(name, 1, None, Some(value))
    }

    /// Counts `count` hits of `name`, each measuring `value`, at `ts` (unix
    /// seconds; `None`: now).
    pub fn observe_at(&self, name: &str, count: i64, ts: Option<f64>, value: f64) {
        self.send(name, count, ts, Some(value))
    }

    fn send(&self, name: &str, count: i64, ts: Option<f64>, value: Option<f64>) {
        let buffered = self.stats.buffered.fetch_add(1, Ordering::Relaxed);
        if buffered >= self.max_buffered {
            return self.stats.settle(0, 1);
        }
        metrics().producer_buffered.inc();
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        if self
            .tx
            .send(Msg::Hit(
                Keys::shard_of_name(name, self.shards),
                event::encode_value(name, count, ts, value),
            ))
            .is_err()
        {
            // The task is gone (after shutdown): the event cannot be sent.
            metrics().producer_buffered.dec();
            self.stats.settle(0, 1);
        }
    }

    /// What the producer did so far.
    pub fn stats(&self) -> &ProducerStats {
        &self.stats
    }

    /// Why Redis refused events for a reason no retry can fix (with
    /// [`ProducerOptions::give_up_when_refused`]; those events were
    /// dropped), in one line with Redis' own words; `None` while it refused
    /// none.
    pub fn refused(&self) -> Option<String> {
        self.stats
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Events waiting to be sent.
    pub fn buffered(&self) -> u64 {
        self.stats.buffered.load(Ordering::Relaxed)
    }

    /// Waits until every event accepted before this call is in Redis (or
    /// dropped). Waits through outages: bound it with a timeout if needed.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Flushes (for at most `deadline`) and stops the background task; the
    /// events left that Redis was not known to hold (it was slow or away
    /// past the deadline): lost, unless a batch in flight went in unseen.
    pub async fn shutdown(self, deadline: Duration) -> u64 {
        let _ = tokio::time::timeout(deadline, self.flush()).await;
        if let Some(task) = self.task.lock().await.take() {
            task.abort();
            let _ = task.await;
        }
        self.buffered()
    }
}

/// One shard's stream, its batch numbers and the events waiting for it.
struct Shard {
    keys: Keys,
    batch_no: u64,
    /// The last batch number known to be appended (its pipeline succeeded).
    confirmed: u64,
    events: Vec<Vec<u8>>,
}

/// The background task's state.
struct Sender {
    link: Reconnecting,
    shards: Vec<Shard>,
    id: String,
    stats: Arc<ProducerStats>,
    give_up_when_refused: bool,
}

impl Sender {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut msgs = Vec::with_capacity(BATCH * BATCHES_PER_TRIP);
        let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
        // Until every handle is dropped.
        while rx.recv_many(&mut msgs, BATCH * BATCHES_PER_TRIP).await > 0 {
            for m in msgs.drain(..) {
                match m {
                    Msg::Hit(k, e) => self.shards[k as usize].events.push(e),
                    Msg::Flush(done) => flushes.push(done),
                }
            }
            let (mut n, mut dropped) = (0, 0);
            for shard in &mut self.shards {
                let len = shard.events.len() as u64;
                let give_up = self.give_up_when_refused;
                match shard.send_retrying(&self.id, &mut self.link, give_up).await {
                    None => n += len,
                    Some(why) => {
                        dropped += len;
                        *self.stats.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                    }
                }
            }
            self.stats.settle(n, dropped);
            metrics().producer_buffered.sub((n + dropped) as i64);
            for f in flushes.drain(..) {
                let _ = f.send(());
            }
        }
    }
}

impl Shard {
    /// Appends every waiting event, retrying until it is in Redis: without
    /// `give_up` it never stops (the caller is fire-and-forget; a refused
    /// password is logged once and retried like an outage); with it, events
    /// Redis refuses for a reason no retry can fix are let go of and the
    /// cause returned, in one line.
    async fn send_retrying(
        &mut self,
        id: &str,
        link: &mut Reconnecting,
        give_up: bool,
    ) -> Option<String> {
        if self.events.is_empty() {
            return None;
        }
        // Number the batches once: retries resend the same numbers.
        let first = self.batch_no + 1;
        self.batch_no += self.events.len().div_ceil(BATCH) as u64;
        let refused = loop {
            let result = link
                .call(async |c| Ok::<_, StoreError>(self.send(c, id, first).await?))
                .await;
            match result {
                Ok(()) => {
                    self.confirmed = self.batch_no;
                    link.succeeded();
                    break None;
                }
                Err(StoreError::Redis(e))
                    if give_up && connect::classify(&e).0 == ErrorClass::Fatal =>
                {
                    // Redis recorded none of these batches as appended (a
                    // failing script does not set its number, and the next
                    // ones refuse to skip it): the next batch numbers
                    // follow the last one confirmed.
                    self.batch_no = self.confirmed;
                    let hint = connect::fatal_hint(&e).unwrap_or_default();
                    break Some(format!("{}; {hint}", connect::first_cause(&e)));
                }
                Err(e) => tokio::time::sleep(link.failed(&e, None).1).await,
            }
        };
        self.events.clear();
        refused
    }

    /// One pipeline (one slot: the shard's) of this shard's batches,
    /// numbered from `first`.
    async fn send(&self, conn: &mut Conn, id: &str, first: u64) -> redis::RedisResult<()> {
        let mut pipe = redis::pipe();
        for (i, events) in self.events.chunks(BATCH).enumerate() {
            let mut cmd = PRODUCE.evalsha(2);
            cmd.arg(&self.keys.stream)
                .arg(self.keys.producer(id))
                .arg(first + i as u64)
                .arg(DEDUP_TTL_SECS)
                .arg(self.confirmed)
                .arg(events);
            pipe.add_command(cmd).ignore();
        }
        // An error of any batch (NOSCRIPT after a Redis restart, say) fails
        // the trip: the caller reconnects, which reloads the scripts, and
        // resends every batch; those already appended are recognised.
        pipe.query_async::<()>(conn).await
    }
}
