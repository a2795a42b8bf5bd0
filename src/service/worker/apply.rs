//! A full window on its way into the counters: recorded next to the
//! stream (the commit), then handed to the process' sum, which applies it
//! alone as soon as the workers are at their streams' heads, or summed
//! with the next windows while one is behind (see `sum.rs`, and
//! [`crate::store::commit`] for why that is exactly once).

use std::time::Instant;

use super::{Cursor, Worker};
use crate::model::aggregate::{Cell, StatCell};
use crate::model::ids::IdList;
use crate::model::metrics::metrics;
use crate::model::stats::Summary;
use crate::store::commit::{
    sort_for_cluster, sort_stats_for_cluster, split_heavy, Deferred, Outcome, Sealed, CHUNK_CELLS,
};
use crate::store::connect::{StoreError, StoreResult};

impl Worker {
    /// Commits the window and hands it to the sum.
    pub(super) async fn flush(&mut self) -> StoreResult<()> {
        let started = Instant::now();
        let window_id = format!("{}-{}", self.incarnation, self.seq);
        self.seq += 1;
        let by_slot = self.link.current().is_some_and(|c| c.is_cluster());
        let mut pieces = Vec::new();
        let outcome = {
            let (cells, stats) = recorded(
                self.batch.window().cell_lists(),
                self.committer.keys(),
                by_slot,
                &mut pieces,
            );
            let sealed = Sealed {
                window: &window_id,
                ids: self.batch.ids(),
                cells: &cells,
                stats: &stats,
                rejected: self.batch.rejected(),
                chunk: CHUNK_CELLS,
            };
            let Some(conn) = self.link.current() else {
                return Err(StoreError::Unexpected {
                    what: "committing a window",
                    reply: "not connected".into(),
                });
            };
            self.committer
                .commit(conn, &self.epoch, None, Some(&sealed))
                .await?
        };
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
                // The windows handed in have their entries pending: apply
                // them before re-reading this consumer's pending entries.
                self.sum.flush().await?;
                self.cursor = Cursor::Pending("0".into());
                return Ok(());
            }
        }
        self.batch.count_recorded();
        let ids = IdList::parse(self.batch.ids()).ok_or_else(|| StoreError::Unexpected {
            what: "reading the stream",
            reply: "an entry id that is not MS-SEQ".into(),
        })?;
        self.newest_committed = self.newest_committed.max(ids.newest());
        let deferred = Deferred {
            window: window_id,
            ids,
            committed: started,
            oldest_ms: self.batch.oldest_ms(),
        };
        self.sum
            .add(&self.committer, deferred, self.batch.window_mut())
            .await?;
        self.clear_window();
        Ok(())
    }

    pub(super) fn clear_window(&mut self) {
        self.batch.clear();
    }
}

/// A window's cells and statistics cells ([`crate::model::aggregate::Window::cell_lists`])
/// in the order it records them: as it aggregated them, on a cluster
/// sorted by slot (see [`crate::store::commit::plan::plan`]), statistics
/// cells too heavy for one chunk cut into pieces kept in `pieces` (see
/// [`split_heavy`]), so that whoever applies the record chunks it alike.
pub(super) fn recorded<'w>(
    (mut cells, mut stats): (Vec<Cell<'w>>, Vec<StatCell<'w>>),
    keys: &crate::model::keys::Keys,
    by_slot: bool,
    pieces: &'w mut Vec<Summary>,
) -> (Vec<Cell<'w>>, Vec<StatCell<'w>>) {
    if by_slot {
        sort_for_cluster(keys, &mut cells);
        sort_stats_for_cluster(keys, &mut stats);
    }
    (cells, split_heavy(stats, pieces))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::aggregate::Window;
    use crate::model::config::{LayoutArgs, StreamArgs};
    use crate::model::keys::Keys;
    use crate::store::commit::stats::weight;

    #[test]
    fn a_window_records_no_statistics_cell_heavier_than_a_chunk() {
        let now_ms = 1_700_000_000_000;
        let mut window = Window::new(&[60], 120).with_quantiles(&[60]);
        // 2,000 values over 200 decades: one cell of 2,000 bins.
        for i in 0..2000 {
            let hit = crate::model::event::Hit {
                name: "spread",
                count: 1,
                ts_ms: now_ms,
                value: Some(10f64.powf(f64::from(i) / 10.0 - 100.0)),
            };
            window.add(&hit, now_ms);
        }
        let keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
        for by_slot in [false, true] {
            let mut pieces = Vec::new();
            let (_, stats) = recorded(window.cell_lists(), &keys, by_slot, &mut pieces);
            assert_eq!(stats.len(), 5, "2,000 bins in pieces of 493");
            assert!(stats.iter().all(|s| weight(s) <= CHUNK_CELLS));
        }
    }
}
