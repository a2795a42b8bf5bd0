//! Reading the stream for the worker: its own pending entries first (after
//! a start or any error), then new ones, with reads ahead in flight while
//! a backlog lasts.

use std::time::Duration;

use redis::Value;

use super::{Cursor, Worker, AHEAD_WAIT_MS, READS_AHEAD};
use crate::model::clock::unix_ms;
use crate::store::connect::{Conn, StoreError, StoreResult};
use crate::store::stream::{self, EntryRef};

impl Worker {
    /// Reads the next entries: this consumer's own pending ones first (after
    /// a start or any error), then new ones.
    pub(super) async fn read(&mut self, block: Option<u64>) -> StoreResult<Value> {
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
    pub(super) fn conn(&mut self) -> StoreResult<&mut Conn> {
        self.link.current().ok_or_else(|| StoreError::Unexpected {
            what: "the worker's connection",
            reply: "not connected".into(),
        })
    }

    /// Sends reads of new entries now, without blocking, on clones of the
    /// connection, until [`READS_AHEAD`] are in flight, so that Redis reads
    /// while this worker aggregates and applies, and while it parses the
    /// previous reply: memory stays bounded by a window and those reads. The
    /// entries are simply the next ones this consumer is delivered (pending
    /// to it, so a resync re-reads them).
    pub(super) fn read_ahead(&mut self) {
        while self.ahead.len() < READS_AHEAD {
            let Some(mut conn) = self.link.current().cloned() else {
                return;
            };
            let (keys, consumer) = (self.keys.clone(), self.consumer.clone());
            let count = self.settings.worker.read_count;
            self.ahead.push_back(tokio::spawn(async move {
                stream::read(&mut conn, &keys, &consumer, count, None, ">").await
            }));
        }
    }

    /// The oldest read ahead that found entries, if any was sent (they are
    /// answered in the order they were sent).
    pub(super) async fn take_ahead(&mut self) -> StoreResult<Option<Value>> {
        while let Some(handle) = self.ahead.pop_front() {
            let reply = handle
                .await
                .map_err(|e| StoreError::ReadAhead(e.to_string()))??;
            if !stream::read_reply_entries(&reply).is_empty() {
                return Ok(Some(reply));
            }
        }
        Ok(None)
    }

    /// Waits (boundedly) for the reads ahead still in flight, so that their
    /// entries are pending before this consumer re-reads its pending ones; a
    /// read that never returns leaves them to be claimed.
    pub(super) async fn settle_ahead(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(AHEAD_WAIT_MS);
        while let Some(task) = self.ahead.pop_front() {
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
