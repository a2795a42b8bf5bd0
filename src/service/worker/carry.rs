//! The carry of a worker behind on the stream: windows applied but for
//! their coarse cells, which wait summed ([`crate::model::carry`]) and are
//! applied together, exactly once (see [`crate::store::commit::carry`]).

use super::Worker;
use crate::model::aggregate::Cell;
use crate::store::commit::{markers, plan, Apply, CarryOutcome, Finished, Sealed, CHUNK_CELLS};
use crate::store::connect::{StoreError, StoreResult};

impl Worker {
    /// Whether this window's coarse cells may wait: on one Redis, with the
    /// carry on, while behind and not stopping.
    pub(super) fn may_defer(&self, by_slot: bool) -> bool {
        !by_slot
            && !self.caught_up
            && !self.shutdown.is_triggered()
            && self.settings.worker.carry_age().is_some()
    }

    /// Whether the carry is to be applied now: it waited its age or is full.
    pub(super) fn carry_due(&self) -> bool {
        !self.carry.is_empty()
            && self
                .settings
                .worker
                .carry_age()
                .is_none_or(|age| self.carry.is_due(age, self.settings.worker.carry_cells))
    }

    /// Records the carry, applies it, acknowledges its windows' entries and
    /// finishes the carry and its windows. Any failure leaves the records
    /// as they are for a resync to finish one by one.
    pub(super) async fn carry_now(&mut self) -> StoreResult<()> {
        if self.deferred.is_empty() {
            self.carry.clear();
            return Ok(());
        }
        let window = format!("{}-{}", self.incarnation, self.seq);
        self.seq += 1;
        let mut cells: Vec<Cell<'_>> = self.carry.cells().collect();
        // Members new to `known:` then go in in its own order (cheaper).
        crate::model::known::sort_by_member(&mut cells);
        let step = Apply {
            window: &window,
            cells: &cells,
            stats: &[],
            // The windows' entries are acknowledged after, window by window.
            ids: "",
            chunk: CHUNK_CELLS,
            by_slot: false,
        };
        let plan = plan(self.committer.keys(), &step);
        let sealed = Sealed {
            window: &window,
            ids: "",
            cells: &cells,
            stats: &[],
            rejected: &[],
            chunk: CHUNK_CELLS,
            chunks: plan.len(),
        };
        let Some(conn) = self.link.current() else {
            return Err(StoreError::Unexpected {
                what: "carrying windows' coarse cells",
                reply: "not connected".into(),
            });
        };
        match self.committer.carry(conn, &sealed, &self.deferred).await? {
            CarryOutcome::Recorded => {}
            CarryOutcome::Gone(w) => return Err(StoreError::CarryGone(w)),
            CarryOutcome::Taken(holder) => {
                return Err(StoreError::NameTaken {
                    name: self.consumer.clone(),
                    holder,
                })
            }
        }
        let failures = self
            .committer
            .apply_and_ack(conn, &step, &[], Some(&mut self.known))
            .await?;
        for d in &self.deferred {
            self.committer.ack(conn, &d.ids).await?;
        }
        for d in self.deferred.drain(..) {
            let done = Finished {
                window: d.window,
                failures: d.failures,
                markers: d.markers,
            };
            self.committer.finish(conn, &done).await?;
        }
        if let Some(previous) = self.finished.take() {
            self.committer.finish(conn, &previous).await?;
        }
        self.finished = Some(Finished {
            window,
            failures,
            markers: markers(&plan),
        });
        self.carry.clear();
        Ok(())
    }
}
