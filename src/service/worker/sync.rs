//! Keeping the worker consistent with Redis: resync after any error
//! (reconnect, finish its own recorded windows, re-read its pending
//! entries), maintenance between windows (claims, recovery, gone
//! consumers), failures, and the drain at shutdown.

use std::time::{Duration, Instant};

use super::{Cursor, Worker, LAST_ERROR_TIMEOUT};
use crate::service::{agreement, recovery};
use crate::store::connect::{ErrorClass, StoreError, StoreResult};
use crate::store::stream;

/// Most claim batches between two windows (see [`recovery::CLAIM_BATCH`]).
const CLAIMS_PER_WINDOW: usize = 4;

impl Worker {
    /// Reconnects and restores a consistent state after any error.
    pub(super) async fn sync(&mut self) -> StoreResult<()> {
        self.health.set_in_group(false);
        self.settle_ahead().await;
        self.clear_window();
        // The windows handed in to the sum have their records: recovered
        // below, with every waiting cell (the sum forgets the members it
        // remembers too: a restart or failover may have lost them).
        self.sum.forget(false).await;
        // One try per turn: a failure goes through `failed` (backoff), and
        // the loop keeps turning, so a Redis outage leaves the worker live
        // (restarting it would not help) but not ready.
        let stop = self.shutdown.clone();
        let conn = self.link.get().await?;
        self.health.set_redis_connected(true);
        if !self.registered {
            if !self.registration.acquire(conn, stop).await? {
                // Stopped before the name's last holder let go of it:
                // nothing of this worker's to sync, read or drain.
                return Ok(());
            }
            self.registered = true;
        }
        let made = stream::ensure_group(conn, &self.keys, self.newest_committed).await?;
        match (made, self.newest_committed) {
            (Some(Some((ms, seq))), _) => {
                tracing::warn!(consumer = %self.consumer, group = %self.keys.group,
                    after = %format!("{ms}-{seq}"),
                    "the consumer group was gone (destroyed?) and is made again after the \
                     newest entry this worker committed, not from the stream's start: what \
                     it counted is not counted again, but hits other workers counted after \
                     that entry may be, and a window another worker had open is lost");
            }
            (Some(None), Some((ms, seq))) => {
                tracing::warn!(consumer = %self.consumer, group = %self.keys.group,
                    committed = %format!("{ms}-{seq}"),
                    "the stream was deleted and made again since this worker's last commit \
                     (its ids are older than the newest entry the worker committed): the \
                     consumer group is made again from the new stream's start");
            }
            _ => {}
        }
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
    pub(super) async fn maintain(&mut self) -> StoreResult<()> {
        let w = self.settings.worker.clone();
        let claim_every = Duration::from_millis((w.claim_idle_ms / 4).clamp(250, 5000));
        if self.claim_again || self.last_claim.elapsed() >= claim_every {
            self.last_claim = Instant::now();
            self.claim_again = false;
            let dead_maxlen = self.settings.stream.dead_maxlen;
            let (committer, consumer) = (self.committer.clone(), self.consumer.clone());
            recovery::finish_stopped(self.conn()?, &committer, &w).await?;
            // Still the stream's shard count and layout (a Redis restarted
            // empty lets a producer record another; see `agreement`).
            let (layout, stream) = (self.settings.layout.clone(), self.settings.stream.clone());
            if let Some(refusal) = agreement::refusal(self.conn()?, &layout, &stream).await? {
                self.shutdown.fail(refusal);
                return Ok(());
            }
            // A dead worker's entries come back a few batches a window
            // while batches come back full, each a script of its own.
            for _ in 0..CLAIMS_PER_WINDOW {
                let bounds = (dead_maxlen, self.pace.bytes());
                let conn = self.conn()?;
                let claimed = recovery::claim(conn, &committer, &consumer, &w, bounds).await;
                let claimed = claimed.map_err(|e| self.read_failed(e))?;
                let entries = claimed.entries();
                if !entries.is_empty() {
                    self.add_entries(&entries).await?;
                }
                self.claim_again = claimed.more_waiting();
                if !self.claim_again {
                    break;
                }
            }
        }
        // Often enough that a consumer is removed soon after its idle bound,
        // at most once a minute (XINFO CONSUMERS walks every consumer).
        let gc_every = Duration::from_millis((w.consumer_idle_ms / 2).clamp(1000, 60_000));
        if self.last_gc.elapsed() >= gc_every {
            self.last_gc = Instant::now();
            let (keys, consumer) = (self.keys.clone(), self.consumer.clone());
            let conn = self.link.current().ok_or_else(|| {
                crate::store::connect::StoreError::Unexpected {
                    what: "the worker's connection",
                    reply: "not connected".into(),
                }
            })?;
            recovery::remove_gone_consumers(conn, &keys, w.consumer_idle_ms, "").await?;
            let (layout, stream) = (&self.settings.layout, &self.settings.stream);
            if let Some(strangers) =
                agreement::strangers_now(conn, (layout, stream), &keys, &consumer).await?
            {
                tracing::warn!("{strangers}");
            }
            let own = std::slice::from_ref(&keys);
            if let Some(groups) = agreement::other_groups(conn, layout, stream, own).await? {
                tracing::warn!("{groups}");
            }
        }
        Ok(())
    }

    /// Handles an error of a turn: count it, drop the window, resync later;
    /// an error no retry can fix stops the process.
    pub(super) async fn failed(&mut self, e: StoreError) {
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
    pub(super) async fn drain(&mut self) -> StoreResult<bool> {
        self.settle_ahead().await;
        if self.link.current().is_none() || self.shutdown.failed() || !self.registered {
            return Ok(false);
        }
        if !self.batch.is_empty() {
            self.flush().await?;
        }
        self.sum.flush().await?;
        self.cursor = Cursor::Pending("0".into());
        while let Cursor::Pending(_) = self.cursor {
            let reply = self.read(None).await?;
            let entries = self.entries(&reply);
            self.pace.observe(&entries);
            if entries.is_empty() {
                break;
            }
            if let Some(last) = entries.last() {
                self.cursor = Cursor::Pending(last.id_str().to_string());
            }
            self.add_entries(&entries).await?;
            self.flush().await?;
        }
        self.sum.flush().await?;
        let (keys, consumer) = (self.keys.clone(), self.consumer.clone());
        let conn = self.conn()?;
        recovery::remove_gone_consumers(conn, &keys, u64::MAX, &consumer).await?;
        self.health.set_in_group(false);
        Ok(true)
    }
}
