//! A full window on its way into the counters: commit, apply, acknowledge
//! (see [`crate::store::commit`] for why that is exactly once).

use std::time::Instant;

use super::{Cursor, Worker};
use crate::model::aggregate::{Cell, StatCell};
use crate::model::clock::unix_ms;
use crate::model::ids::IdList;
use crate::model::metrics::metrics;
use crate::store::commit::{
    expire_markers, plan, sort_for_cluster, sort_stats_for_cluster, Apply, Deferred, Finished,
    Outcome, Sealed, Sum, APPLY_GUARD, CHUNK_CELLS,
};
use crate::store::connect::{ErrorClass, StoreError, StoreResult};

impl Worker {
    /// Commits, applies and acknowledges the window; finishes the previous one.
    pub(super) async fn flush(&mut self) -> StoreResult<()> {
        let started = Instant::now();
        let window_id = format!("{}-{}", self.incarnation, self.seq);
        self.seq += 1;
        let mut cells: Vec<Cell<'_>> = self.batch.window().cells().collect();
        let mut stats: Vec<StatCell<'_>> = self.batch.window().stat_cells().collect();
        let by_slot = self.link.current().is_some_and(|c| c.is_cluster());
        if by_slot {
            sort_for_cluster(self.committer.keys(), &mut cells);
            sort_stats_for_cluster(self.committer.keys(), &mut stats);
        }
        // Its cells and statistics wait in the carry (recorded now, applied
        // later, summed)?
        let waits = self.may_defer();
        let plan = plan(
            self.committer.keys(),
            &Apply {
                window: &window_id,
                cells: &cells,
                stats: &stats,
                chunk: CHUNK_CELLS,
                by_slot,
            },
        );
        let sum = Sum {
            id: &window_id,
            group: None,
            cells: &cells,
            stats: &stats,
            chunk: CHUNK_CELLS,
        };
        let sealed = Sealed {
            window: &window_id,
            ids: self.batch.ids(),
            cells: &cells,
            stats: &stats,
            rejected: self.batch.rejected(),
            chunk: CHUNK_CELLS,
            chunks: plan.len(),
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
        let finished = self.finished.take().map(|f| f.markers).unwrap_or_default();
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
                self.clear_window();
                // The carry's windows' entries are pending: finish them
                // before re-reading this consumer's pending entries.
                self.carry_now().await?;
                self.cursor = Cursor::Pending("0".into());
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
            // A window whose cells wait applies none and acknowledges
            // nothing yet (it only expires the previous window's markers).
            let mut then = expire_markers(&finished);
            let sums: &[Sum<'_>] = if waits {
                &[]
            } else {
                then.extend(self.committer.acks(self.batch.ids()));
                std::slice::from_ref(&sum)
            };
            match self
                .committer
                .apply(conn, sums, Some(&self.known), then)
                .await
            {
                Ok(mut f) => break f.pop().unwrap_or_default(),
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
                    let oom = matches!(&e, StoreError::Redis(r) if crate::store::memory::is_oom(r));
                    if oom {
                        crate::store::memory::set_out_of_memory(true);
                    }
                    self.apply_outage.failed("applying a window", &e, oom);
                    tokio::time::sleep(self.apply_backoff.pause()).await;
                    self.health.turned();
                }
            }
        };
        if crate::store::memory::out_of_memory() {
            crate::store::memory::set_out_of_memory(false);
        }
        self.apply_outage.recovered("applying a window");
        self.apply_backoff.reset();
        self.batch.count_applied(&failures, started, unix_ms());
        if waits {
            self.deferred.push(Deferred {
                window: window_id,
                ids: IdList::parse(self.batch.ids()).ok_or_else(|| StoreError::Unexpected {
                    what: "reading the stream",
                    reply: "an entry id that is not MS-SEQ".into(),
                })?,
                failures,
            });
            let entries = self.batch.window().hits() as usize;
            self.carry.add(&cells, &stats, entries);
            if let Some(m) = &mut self.group {
                m.holds(&self.carry);
            }
        } else {
            self.finished = Some(Finished {
                markers: self.committer.markers(&[sum], by_slot),
                window: window_id,
                failures,
            });
        }
        drop((cells, stats));
        self.clear_window();
        // At the head or stopping, nothing is left to sum with: apply now.
        if !self.carry.is_empty()
            && (self.at_head() || !self.may_defer() || self.carry_due().await?)
        {
            self.carry_start().await?;
        }
        Ok(())
    }

    pub(super) fn clear_window(&mut self) {
        self.batch.clear();
    }
}
