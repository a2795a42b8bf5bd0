//! The carry: the windows a worker recorded, applied on a task of their
//! own while the worker goes on with the next: one window as itself, or
//! (while behind) several summed ([`crate::model::carry`]) and applied
//! together, exactly once (see [`crate::store::commit::carry`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::apply::recorded;
use super::batch::{count_applied, count_failures};
use super::group::{Grouper, Submission};
use super::Worker;
use crate::model::carry::Carry;
use crate::model::clock::unix_ms;
use crate::model::ids::IdList;
use crate::model::known::KnownCache;
use crate::store::commit::{
    CarryOutcome, Committer, Deferred, Failure, Finished, Sealed, Sum, APPLY_GUARD, CHUNK_CELLS,
};
use crate::store::connect::{joined, Conn, StoreError, StoreResult};

impl Worker {
    /// Whether the carry may wait for more windows: with the carry on,
    /// while behind and not stopping; on a cluster with shards also at the
    /// head, so that the windows of the process' shards are applied
    /// together (at once: see `flush`).
    pub(super) fn may_defer(&self) -> bool {
        (!self.caught_up || self.group.is_some())
            && !self.shutdown.is_triggered()
            && self.settings.worker.carry_age().is_some()
    }

    /// Whether this worker is at the head with nothing to wait for: its
    /// stream read to the end and, on a cluster with shards, none of the
    /// process' other shards behind (see [`crate::service::worker::group`]).
    pub(super) fn at_head(&self) -> bool {
        self.caught_up
            && self
                .group
                .as_ref()
                .is_none_or(|m| m.grouper().behind() == 0)
    }

    /// Whether this worker's carry waits for the group of other shards of
    /// the process that are behind (on a cluster with shards only).
    pub(super) fn waits_for_group(&self) -> bool {
        self.group.is_some() && !self.at_head()
    }

    /// Whether the carry is to be applied now: it waited its age or is full
    /// (on a cluster with shards: the carries of this process' shards hold
    /// `--carry-cells` between them), or they are being gathered.
    pub(super) async fn carry_due(&mut self) -> StoreResult<bool> {
        // Of age near the head: wait for it (see `Carry::hold`). Not on a
        // cluster with shards, whose carries wait for their group anyway.
        let max = self.settings.worker.carry_cells;
        if let Some(age) = self.settings.worker.carry_age() {
            if self.group.is_none() && self.carry.asks_hold(age, max) {
                let keys = self.keys.clone();
                // Only a saving: a Redis that cannot tell (a Redis before
                // 7.0, an ACL without XINFO) applies the carry at its age.
                let lag = crate::store::group::own_group(self.conn()?, &keys)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|g| g.lag);
                self.carry.hold(lag, age);
            }
        }
        Ok(self.carry_due_now())
    }

    fn carry_due_now(&self) -> bool {
        let max = self.settings.worker.carry_cells;
        let grouper = self.group.as_ref().map(|m| m.grouper());
        !self.carry.is_empty()
            && (self.settings.worker.carry_age().is_none_or(|age| {
                self.carry
                    .is_due(age, if grouper.is_some() { usize::MAX } else { max })
            }) || grouper.is_some_and(|g| g.gathering() || g.cells() >= max))
    }

    /// Applies the carry and waits until it is done.
    pub(super) async fn carry_now(&mut self) -> StoreResult<()> {
        self.carry_start().await?;
        self.carry_wait().await
    }

    /// Starts applying the carry on a task of its own, once the one before
    /// is done, and empties it: the worker goes on with the next windows
    /// while Redis applies the sum.
    pub(super) async fn carry_start(&mut self) -> StoreResult<()> {
        self.carry_wait().await?;
        if self.deferred.is_empty() {
            self.carry.clear();
            if let Some(m) = &mut self.group {
                m.emptied();
            }
            return Ok(());
        }
        let conn = self.carry_link.get().await?.clone();
        let by_slot = conn.is_cluster();
        let window = format!("{}-{}", self.incarnation, self.seq);
        self.seq += 1;
        let empty = match self.spare_carry.take() {
            Some(spare) => spare,
            None => super::new_carry(self.batch.window(), &self.settings.worker),
        };
        let job = Job {
            committer: self.committer.clone(),
            conn,
            carry: std::mem::replace(&mut self.carry, empty),
            deferred: std::mem::take(&mut self.deferred),
            window,
            consumer: self.consumer.clone(),
            known: self.known.clone(),
            by_slot,
            grouper: self.group.as_ref().map(|m| m.grouper().clone()),
        };
        if let Some(m) = &mut self.group {
            m.handed_in();
        }
        self.carrying = Some(tokio::spawn(job.run()));
        Ok(())
    }

    /// Waits for the carry being applied, if any; its error is this
    /// worker's (a resync then finishes the records one by one).
    pub(super) async fn carry_wait(&mut self) -> StoreResult<()> {
        if let Some(task) = self.carrying.take() {
            let carry = joined(task, "the carry's task").await?;
            self.spare_carry = Some(carry);
        }
        Ok(())
    }

    /// Before a resync: lets the carry being applied end (or stops it after
    /// [`SETTLE`]), whatever its outcome: the resync finishes what it left.
    pub(super) async fn settle_carry(&mut self) {
        super::read::settle(self.carrying.take(), SETTLE).await;
    }
}

/// How long a resync lets a carry being applied end.
const SETTLE: Duration = Duration::from_secs(10);

/// A carry on its way into the counters, owned by its task.
struct Job {
    committer: Committer,
    conn: Conn,
    carry: Carry,
    deferred: Vec<Deferred>,
    window: String,
    consumer: String,
    known: Arc<Mutex<KnownCache>>,
    /// On a Redis Cluster: applied in chunks of one hash slot each.
    by_slot: bool,
    /// Applied with the carries of the process' other shards.
    grouper: Option<Arc<Grouper>>,
}

impl Job {
    /// Applies the carry: one window as itself, several as their sum
    /// (recorded first, see [`Job::record_and_apply`]); then acknowledges
    /// the windows' entries and finishes the windows and the sum. Any
    /// failure leaves the records as they are for a resync to finish one
    /// by one. Gives the carry back, empty, for its allocations.
    async fn run(mut self) -> StoreResult<Carry> {
        let one = self.carry.is_one_window() && self.grouper.is_none();
        let began = match self.deferred.first() {
            Some(w) if one => w.committed,
            _ => Instant::now(),
        };
        let (failures, markers) = if one {
            self.apply_window().await?
        } else {
            self.record_and_apply().await?
        };
        count_failures(&failures);
        let conn = &mut self.conn;
        let lists: Vec<&IdList> = self.deferred.iter().map(|d| &d.ids).collect();
        self.committer.ack_lists(conn, &lists).await?;
        count_applied(&self.deferred, began, unix_ms());
        let mut done = Finished {
            window: self.window.clone(),
            failures,
            markers,
        };
        for d in self.deferred.drain(..) {
            if one {
                // The sum is the window itself.
                done.window = d.window;
                continue;
            }
            let carried = Finished {
                window: d.window,
                failures: Vec::new(),
                // None of its chunks was applied, nor marked (see carry.lua).
                markers: Vec::new(),
            };
            self.committer.finish(conn, &carried).await?;
        }
        self.committer.finish(conn, &done).await?;
        self.carry.clear();
        Ok(self.carry)
    }

    /// Applies a carry of one window as that window, by its own record:
    /// its failures and markers. Only within [`APPLY_GUARD`] of its commit,
    /// while its markers surely live; past that, recovery applies it.
    async fn apply_window(&mut self) -> StoreResult<(Vec<Failure>, Vec<String>)> {
        let window = &self.deferred[0];
        if window.committed.elapsed() > APPLY_GUARD {
            return Err(StoreError::Guard(APPLY_GUARD));
        }
        let mut pieces = Vec::new();
        let (cells, stats) = recorded(
            self.carry.window().cell_lists(),
            self.committer.keys(),
            self.by_slot,
            &mut pieces,
        );
        let sum = Sum {
            id: &window.window,
            group: None,
            cells: &cells,
            stats: &stats,
            chunk: CHUNK_CELLS,
        };
        apply_alone(
            &self.committer,
            &mut self.conn,
            &self.known,
            sum,
            self.by_slot,
        )
        .await
    }

    /// Records the carry and applies it, alone or (with a grouper, in its
    /// open group) with the carries of the process' other shards: its
    /// failures and the markers to expire once it is finished.
    async fn record_and_apply(&mut self) -> StoreResult<(Vec<Failure>, Vec<String>)> {
        let group = self.grouper.clone().map(|g| {
            let id = g.open_group();
            (g, id)
        });
        let coming = Coming(group.as_ref().map(|(g, _)| g.clone()));
        let (grouper, id) = {
            // Alone, the carry is applied from its lists: its slots go.
            let lists = match group {
                Some(_) => self.carry.window().cell_lists(),
                None => self.carry.release_into_lists(),
            };
            let mut pieces = Vec::new();
            let keys = self.committer.keys();
            let (mut cells, stats) = recorded(lists, keys, self.by_slot, &mut pieces);
            if !self.by_slot {
                // Members new to `known:` then go in in its own order (cheaper).
                crate::model::known::sort_by_member(&mut cells);
            }
            let sealed = Sealed {
                window: &self.window,
                ids: "",
                cells: &cells,
                stats: &stats,
                rejected: &[],
                chunk: CHUNK_CELLS,
            };
            let conn = &mut self.conn;
            let in_group = group.as_ref().map(|(_, id)| id.as_str());
            match self
                .committer
                .carry(conn, &sealed, &self.deferred, in_group)
                .await?
            {
                CarryOutcome::Recorded => {}
                CarryOutcome::Gone(w) => return Err(StoreError::CarryGone(w)),
                CarryOutcome::Taken(holder) => {
                    return Err(StoreError::NameTaken {
                        name: self.consumer.clone(),
                        holder,
                    })
                }
            }
            match group {
                Some(group) => group,
                None => {
                    let sum = Sum {
                        id: &self.window,
                        group: None,
                        cells: &cells,
                        stats: &stats,
                        chunk: CHUNK_CELLS,
                    };
                    let applied =
                        apply_alone(&self.committer, conn, &self.known, sum, self.by_slot).await?;
                    crate::model::metrics::metrics()
                        .carry_cells
                        .inc_by(cells.len() as u64);
                    return Ok(applied);
                }
            }
        };
        let submission = Submission {
            id: self.window.clone(),
            group: id,
            carry: std::mem::replace(
                &mut self.carry,
                Carry::new(&crate::model::aggregate::Window::new(&[], 0)),
            ),
            committer: self.committer.clone(),
            conn: self.conn.clone(),
        };
        // Handed in now (the send comes before any await).
        coming.disarm();
        let applied = grouper.apply(submission).await?;
        self.carry = applied.carry;
        // The group's markers go with the last of its carries finished.
        let failures = applied.result?;
        let markers = applied.finish.map(|f| f.finished()).unwrap_or_default();
        Ok((failures, markers))
    }
}

/// Applies one sum alone (not in a group): its failures and the markers to
/// expire once it is finished.
async fn apply_alone(
    committer: &Committer,
    conn: &mut Conn,
    known: &Mutex<KnownCache>,
    sum: Sum<'_>,
    by_slot: bool,
) -> StoreResult<(Vec<Failure>, Vec<String>)> {
    let mut failures = committer
        .apply(conn, &[sum], Some(known), Vec::new())
        .await?;
    let markers = committer.markers(&[sum], by_slot);
    Ok((failures.pop().unwrap_or_default(), markers))
}

/// A carry the grouper counts as coming until it is handed in: if its task
/// ends before that (an error, or stopped by a resync), it never will.
struct Coming(Option<Arc<Grouper>>);

impl Coming {
    /// The carry reached the grouper: it counts it from now on.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Coming {
    fn drop(&mut self) {
        if let Some(grouper) = self.0.take() {
            grouper.abandon();
        }
    }
}
