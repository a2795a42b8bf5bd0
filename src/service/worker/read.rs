//! Reading the stream for the worker: its own pending entries first (after
//! a start or any error), then new ones, with reads ahead in flight while
//! a backlog lasts; each read asks for as many entries as fit its byte
//! budget ([`Pace`]).

use std::time::Duration;

use redis::Value;

use super::{Cursor, Worker, AHEAD_WAIT_MS, READS_AHEAD};
use crate::model::clock::unix_ms;
use crate::model::event;
use crate::store::connect::{Conn, StoreError, StoreResult};
use crate::store::stream::{self, EntryRef, READ_BYTES};

/// Entries the first read asks for, before the worker has seen any: 16, so
/// that even a backlog of megabyte entries makes a first reply within
/// [`READ_BYTES`].
const FIRST_READ: usize = 16;
/// The least byte budget of a read, however often Redis closed the
/// connection on one (see [`Pace::shrink`]).
const MIN_READ_BYTES: usize = 64 << 10;
/// How long a shrunk budget stays as it is before it doubles again (up to
/// [`READ_BYTES`]): a restart of Redis or a failover closes reads too, and
/// must not leave a worker's reads small for good; an output buffer
/// limit closes the grown read again, once this often at most.
const REGROW_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// How many entries the next read asks for. A stream entry can take up to
/// Redis' 512 MB, and XREADGROUP has no byte limit, so the count follows
/// the largest entry seen in the last reply: at most what fits
/// [`READ_BYTES`] (it shrinks at once after a large reply), and at most
/// twice the last count (it grows back while entries are small), within
/// 1..=`--read-count`. Reads of this consumer's pending entries also stop at
/// that budget inside Redis (`pending.lua`), and so do claims
/// (`claim.lua`): a restart never re-reads more than that at once. A
/// connection closed while Redis answered a read halves the budget (see
/// [`Pace::shrink`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pace {
    count: usize,
    max: usize,
    bytes: usize,
    /// When the budget doubles back, while under [`READ_BYTES`].
    regrow_at: Option<std::time::Instant>,
}

impl Pace {
    /// Starts at [`FIRST_READ`] entries, for reads of at most `max`.
    pub(super) fn new(max: usize) -> Pace {
        let max = max.max(1);
        Pace {
            count: FIRST_READ.min(max),
            max,
            bytes: READ_BYTES,
            regrow_at: None,
        }
    }

    /// Entries the next read asks for.
    pub(super) fn count(&self) -> usize {
        self.count
    }

    /// About the most bytes a read brings back: [`READ_BYTES`], or less
    /// once Redis closed the connection on a read.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// After the connection closed while Redis answered a read: halves the
    /// byte budget and the count, down to [`MIN_READ_BYTES`]. Redis closes
    /// a client whose reply outgrows its `client-output-buffer-limit` for
    /// normal clients, and a worker that read as much again after each
    /// reconnect never read anything. Returns the new budget, or `None`
    /// at the least one. It doubles back every [`REGROW_AFTER`] without
    /// another.
    pub(super) fn shrink(&mut self) -> Option<usize> {
        if self.bytes <= MIN_READ_BYTES {
            return None;
        }
        self.bytes = (self.bytes / 2).max(MIN_READ_BYTES);
        self.count = (self.count / 2).max(1);
        self.regrow_at = Some(std::time::Instant::now() + REGROW_AFTER);
        Some(self.bytes)
    }

    /// Whether reads ask for all of `--read-count` (entries are small): only
    /// then are reads sent ahead.
    pub(super) fn at_full(&self) -> bool {
        self.count == self.max
    }

    /// Learns from a reply's entries (an empty reply teaches nothing of
    /// their sizes); a shrunk budget doubles back when it is time.
    pub(super) fn observe(&mut self, entries: &[EntryRef<'_>]) {
        if let Some(at) = self.regrow_at.filter(|&t| std::time::Instant::now() >= t) {
            self.bytes = (self.bytes * 2).min(READ_BYTES);
            self.regrow_at = (self.bytes < READ_BYTES).then(|| at + REGROW_AFTER);
        }
        let Some(largest) = entries.iter().map(entry_size).max() else {
            return;
        };
        let fits = (self.bytes / largest.max(1)).max(1);
        self.count = self.count.saturating_mul(2).min(fits).clamp(1, self.max);
    }
}

/// Whether a read failed because its connection closed while Redis
/// answered it, not because the reply was late (a busy Redis, a stopped
/// worker: the connection's own timeout, which closes nothing on Redis'
/// side).
fn closed_answering(e: &StoreError) -> bool {
    matches!(e, StoreError::Redis(r) if crate::store::error::is_broken_link(r) && !r.is_timeout())
}

/// The bytes an entry brought back: its id and its fields.
fn entry_size(e: &EntryRef<'_>) -> usize {
    e.id.len() + event::entry_bytes(e.pairs())
}

impl Worker {
    /// Reads the next entries: this consumer's own pending ones first (after
    /// a start or any error), then new ones; [`Pace::count`] of them at most.
    pub(super) async fn read(&mut self, block: Option<u64>) -> StoreResult<Value> {
        let (count, bytes) = (self.pace.count(), self.pace.bytes());
        let cursor = self.cursor.clone();
        let (keys, consumer) = (self.keys.clone(), self.consumer.clone());
        let conn = self.conn()?;
        let read = match &cursor {
            Cursor::Pending(after) => {
                stream::read_own_pending(conn, &keys, &consumer, count, after, bytes).await
            }
            Cursor::New => stream::read(conn, &keys, &consumer, count, block, ">").await,
        };
        // A read blocked at the head waits for entries, not on its reply:
        // a close then is Redis going away (any large reply it was sending
        // is pending now, and the re-read of pending entries that follows
        // meets it).
        let answering = block.is_none();
        read.map_err(|e| match answering {
            true => self.read_failed(e.into()),
            false => e.into(),
        })
    }

    /// A read (or a claim) failed: when the connection closed while Redis
    /// answered it, the next ones ask for less (see [`Pace::shrink`]).
    pub(super) fn read_failed(&mut self, e: StoreError) -> StoreError {
        let before = self.pace.bytes();
        if let Some(bytes) = closed_answering(&e).then(|| self.pace.shrink()).flatten() {
            tracing::warn!(consumer = %self.consumer, before, bytes,
                regrow_after_s = REGROW_AFTER.as_secs(),
                "the connection closed while Redis answered a read: reads now ask for half as \
                 many bytes until regrow_after_s passes without another (Redis closes a client whose reply outgrows its \
                 client-output-buffer-limit for normal clients, which must allow 4 MiB; \
                 a restart of Redis closes it too)");
        }
        e
    }

    /// The connection, once synced.
    pub(super) fn conn(&mut self) -> StoreResult<&mut Conn> {
        self.link.current().ok_or_else(|| StoreError::Unexpected {
            what: "the worker's connection",
            reply: "not connected".into(),
        })
    }

    /// Sends reads of new entries now, without blocking, on clones of the
    /// connection, until [`READS_AHEAD`] are in flight, so that Redis reads
    /// while this worker aggregates and applies, and while it parses the
    /// previous reply: memory stays bounded by a window and those reads.
    /// Only while reads ask for a full `--read-count` (entries are small,
    /// see [`Pace`]). The entries are simply the next ones this consumer is
    /// delivered (pending to it, so a resync re-reads them).
    pub(super) fn read_ahead(&mut self) {
        while self.ahead.len() < READS_AHEAD && self.pace.at_full() {
            let Some(mut conn) = self.link.current().cloned() else {
                return;
            };
            let (keys, consumer) = (self.keys.clone(), self.consumer.clone());
            let count = self.pace.count();
            self.ahead.push_back((
                count,
                tokio::spawn(async move {
                    stream::read(&mut conn, &keys, &consumer, count, None, ">").await
                }),
            ));
        }
    }

    /// The oldest read ahead that found entries, with the count it asked
    /// for, if any was sent (they are answered in the order they were sent).
    pub(super) async fn take_ahead(&mut self) -> StoreResult<Option<(usize, Value)>> {
        while let Some((count, handle)) = self.ahead.pop_front() {
            let reply = handle
                .await
                .map_err(|e| StoreError::ReadAhead(e.to_string()))?
                .map_err(|e| self.read_failed(e.into()))?;
            if !stream::read_reply_entries(&reply).is_empty() {
                return Ok(Some((count, reply)));
            }
        }
        Ok(None)
    }

    /// Waits (boundedly) for the reads ahead still in flight, so that their
    /// entries are pending before this consumer re-reads its pending ones; a
    /// read that never returns leaves them to be claimed.
    pub(super) async fn settle_ahead(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(AHEAD_WAIT_MS);
        while let Some((_, task)) = self.ahead.pop_front() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            settle(Some(task), left).await;
        }
    }

    /// The entries of a reply of [`Worker::read`].
    pub(super) fn entries<'a>(&self, reply: &'a Value) -> Vec<EntryRef<'a>> {
        match self.cursor {
            Cursor::Pending(_) => stream::entry_list(reply),
            Cursor::New => stream::read_reply_entries(reply),
        }
    }

    /// Decodes entries into the window being filled, judging their times
    /// against Redis' clock (read at most once a second, see
    /// [`crate::store::time`]).
    pub(super) async fn add_entries(&mut self, entries: &[EntryRef<'_>]) -> StoreResult<()> {
        let conn = self.link.current().ok_or_else(|| StoreError::Unexpected {
            what: "the worker's connection",
            reply: "not connected".into(),
        })?;
        let clock_ms = self.clock.now_ms(conn).await?;
        self.batch.add(entries, unix_ms(), clock_ms);
        Ok(())
    }

    pub(super) fn window_full(&self) -> bool {
        self.batch.is_full(&self.settings.worker, self.caught_up)
    }
}

/// Lets a task of the worker's end, whatever its outcome, or stops it
/// after `wait`.
pub(super) async fn settle<T>(task: Option<tokio::task::JoinHandle<T>>, wait: Duration) {
    if let Some(mut task) = task {
        if tokio::time::timeout(wait, &mut task).await.is_err() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(b: &[u8]) -> Value {
        Value::BulkString(b.to_vec())
    }

    /// One entry per size, each of that many bytes with its id ("1-0").
    fn replies(sizes: &[usize]) -> Vec<Vec<Value>> {
        sizes
            .iter()
            .map(|&n| vec![bulk(b"v"), bulk(&vec![b'x'; n - 4])])
            .collect()
    }

    fn entries(fields: &[Vec<Value>]) -> Vec<EntryRef<'_>> {
        fields
            .iter()
            .map(|f| EntryRef {
                id: b"1-0",
                fields: Some(f),
            })
            .collect()
    }

    #[test]
    fn reads_start_small_and_double_while_entries_are_small() {
        let mut pace = Pace::new(1000);
        assert_eq!(pace.count(), FIRST_READ);
        assert!(!pace.at_full());
        let small = replies(&[60; 4]);
        let mut seen = Vec::new();
        for _ in 0..8 {
            pace.observe(&entries(&small));
            seen.push(pace.count());
        }
        assert_eq!(seen, [32, 64, 128, 256, 512, 1000, 1000, 1000]);
        assert!(pace.at_full());
        pace.observe(&[]);
        assert_eq!(pace.count(), 1000, "an empty reply teaches nothing");
    }

    #[test]
    fn a_large_reply_shrinks_the_next_read_to_the_byte_budget() {
        let mut pace = Pace::new(1000);
        for _ in 0..8 {
            pace.observe(&entries(&replies(&[60])));
        }
        // One entry of 128 KiB among small ones: 16 at a time (2 MiB).
        pace.observe(&entries(&replies(&[60, 1 << 17, 60])));
        assert_eq!(pace.count(), 16);
        assert!(!pace.at_full(), "no reads ahead");
        // Larger than the whole budget: one at a time.
        pace.observe(&entries(&replies(&[READ_BYTES * 2])));
        assert_eq!(pace.count(), 1);
        // Then back up, doubling.
        pace.observe(&entries(&replies(&[60])));
        assert_eq!(pace.count(), 2);
        // Never past --read-count, never below one.
        let mut one = Pace::new(1);
        one.observe(&entries(&replies(&[60])));
        assert_eq!((one.count(), one.at_full()), (1, true));
        assert_eq!(Pace::new(0).count(), 1);
    }

    #[test]
    fn a_late_reply_is_no_closed_connection() {
        let io = |kind: std::io::ErrorKind| {
            StoreError::Redis(redis::RedisError::from(std::io::Error::from(kind)))
        };
        assert!(closed_answering(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(closed_answering(&io(std::io::ErrorKind::UnexpectedEof)));
        assert!(!closed_answering(&io(std::io::ErrorKind::TimedOut)));
        let refused = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR",
        ));
        assert!(!closed_answering(&StoreError::Redis(refused)));
    }

    #[test]
    fn a_read_closed_by_redis_halves_the_byte_budget_down_to_a_floor() {
        let mut pace = Pace::new(1000);
        for _ in 0..8 {
            pace.observe(&entries(&replies(&[3000])));
        }
        assert_eq!(pace.count(), 699, "2 MiB of 3,000-byte entries");
        assert_eq!(pace.shrink(), Some(READ_BYTES / 2));
        assert_eq!(pace.count(), 349, "halved at once");
        pace.observe(&entries(&replies(&[3000])));
        assert_eq!(pace.count(), 349, "grows back only to what fits");
        let mut budgets = Vec::new();
        while let Some(b) = pace.shrink() {
            budgets.push(b);
        }
        assert_eq!(budgets, [1 << 19, 1 << 18, 1 << 17, MIN_READ_BYTES]);
        assert_eq!(pace.bytes(), MIN_READ_BYTES);
        // A restart of Redis closes reads too: the budget doubles back
        // after a quiet while, one step at a time.
        pace.observe(&[]);
        assert_eq!(pace.bytes(), MIN_READ_BYTES, "not at once");
        let mut grown = Vec::new();
        while pace.bytes() < READ_BYTES {
            pace.regrow_at = Some(std::time::Instant::now());
            pace.observe(&[]);
            grown.push(pace.bytes());
        }
        assert_eq!(grown, [1 << 17, 1 << 18, 1 << 19, 1 << 20, READ_BYTES]);
        assert_eq!(pace.regrow_at, None);
    }
}
