//! The carries of one process' stream shards on a Redis Cluster, applied
//! together: one script per hash slot for all of them instead of one per
//! shard and slot (see [`crate::store::commit::apply`], which also says why
//! this stays exactly once whatever the grouping).
//!
//! Each shard's worker records its carry on its own shard as always, in the
//! group that is open ([`Grouper::open_group`]), then hands it to the
//! grouper ([`Grouper::apply`]) and waits. The first carry handed in opens
//! a gathering: every other shard worker of the process then finds its own
//! carry due ([`Grouper::gathering`]) and hands it in too, for at most
//! [`GATHER`] (no longer than until every carry held is in: idle shards
//! are not waited for); then the group is closed and applied, and each worker goes
//! on to acknowledge and finish its windows. The carries are due together
//! when they hold `--carry-cells` cells between them ([`Grouper::cells`]),
//! not when one holds its share: a group then holds that many cells,
//! which is what spreads the cost of its scripts (one per hash slot,
//! whatever they hold) over the most hits. A worker at its stream's head
//! hands its carry in at once only when none of the process' shards is
//! behind ([`Grouper::behind`]). The group's markers are
//! shortened once every one of its carries is finished ([`Finish`]); until
//! then (or for ever, if one is left to recovery) they keep their day.

use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::model::aggregate::{Cell, StatCell};
use crate::model::carry::Carry;
use crate::model::known::KnownCache;
use crate::model::metrics::metrics;
use crate::store::commit::{Committer, Failure, Sum, CHUNK_CELLS};
use crate::store::connect::{Conn, StoreError, StoreResult};

/// How long the carries of a group are gathered at most after the first.
pub(crate) const GATHER: Duration = Duration::from_millis(200);

/// A recorded carry handed in to be applied with its group.
pub(crate) struct Submission {
    /// The carry's id.
    pub id: String,
    /// The group it was recorded in.
    pub group: String,
    /// Its cells (given back with the outcome).
    pub carry: Carry,
    /// Its shard's committer (any of the group's applies the counters).
    pub committer: Committer,
    /// A connection to apply it on.
    pub conn: Conn,
}

/// What became of a submitted carry.
pub(crate) struct Applied {
    /// The carry, given back for its allocations.
    pub carry: Carry,
    /// Its cells that failed to apply, or why the group could not be.
    pub result: StoreResult<Vec<Failure>>,
    /// Shared by the group's carries, once applied.
    pub finish: Option<Arc<Finish>>,
}

/// The markers of an applied group, shortened by the last of its carries
/// to be finished.
pub(crate) struct Finish {
    remaining: AtomicUsize,
    markers: Vec<String>,
}

impl Finish {
    /// One carry of the group is finished: the group's markers, to expire
    /// now, when it was the last.
    pub(crate) fn finished(&self) -> Vec<String> {
        if self.remaining.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.markers.clone()
        } else {
            Vec::new()
        }
    }
}

/// State shared with the grouper's task.
struct Shared {
    incarnation: String,
    /// Number of the group carries recorded now belong to.
    open: AtomicU64,
    /// A group is being gathered: every carry is due.
    gathering: AtomicBool,
    /// Carries that the shard workers hold or have handed in, not yet in a
    /// closed group: the gathering waits for these, not for idle shards.
    pending: AtomicIsize,
    /// Weight of the carries the shard workers hold (not yet handed in):
    /// their cells, a statistics cell counting as several.
    cells: AtomicUsize,
    /// Shard workers behind on their stream: while one is, the others'
    /// carries wait to be applied with its (see [`Grouper::behind`]).
    behind: AtomicUsize,
}

/// The process' grouper, shared by its shard workers.
pub(crate) struct Grouper {
    tx: mpsc::UnboundedSender<(Submission, oneshot::Sender<Applied>)>,
    shared: Arc<Shared>,
}

/// A shard worker's place in the grouper: whether it holds a carry, and
/// how many cells.
pub(crate) struct Member {
    grouper: Arc<Grouper>,
    holding: bool,
    cells: usize,
    behind: bool,
}

impl Drop for Member {
    fn drop(&mut self) {
        self.emptied();
        self.set_behind(false);
    }
}

impl Member {
    /// The grouper.
    pub(crate) fn grouper(&self) -> &Arc<Grouper> {
        &self.grouper
    }

    /// The worker's carry is empty (cleared, or applied alone).
    pub(crate) fn emptied(&mut self) {
        self.count(0);
        self.set_holding(false);
    }

    /// The worker's carry is now `carry`: a gathering waits for it unless
    /// it is empty.
    pub(crate) fn holds(&mut self, carry: &Carry) {
        self.count(carry.weight());
        self.set_holding(!carry.is_empty());
    }

    fn set_holding(&mut self, holding: bool) {
        if holding != self.holding {
            self.holding = holding;
            let delta = if holding { 1 } else { -1 };
            self.grouper
                .shared
                .pending
                .fetch_add(delta, Ordering::SeqCst);
        }
    }

    /// The worker's carry went to be applied: the grouper counts it until
    /// its group closes (or [`Grouper::abandon`]); its cells are no longer
    /// held.
    pub(crate) fn handed_in(&mut self) {
        self.count(0);
        self.holding = false;
    }

    /// Whether the worker is behind on its stream.
    pub(crate) fn set_behind(&mut self, behind: bool) {
        if behind != self.behind {
            self.behind = behind;
            let shared = &self.grouper.shared.behind;
            if behind {
                shared.fetch_add(1, Ordering::SeqCst);
            } else {
                shared.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    fn count(&mut self, cells: usize) {
        let shared = &self.grouper.shared.cells;
        if cells >= self.cells {
            shared.fetch_add(cells - self.cells, Ordering::SeqCst);
        } else {
            shared.fetch_sub(self.cells - cells, Ordering::SeqCst);
        }
        self.cells = cells;
    }
}

impl Grouper {
    /// Starts the grouper's task (it ends once every handle is dropped).
    /// `known` remembers the `known:` members of the groups it applied.
    pub(crate) fn start(known: KnownCache) -> Arc<Grouper> {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            incarnation: format!("{:016x}", rand::random::<u64>()),
            open: AtomicU64::new(0),
            gathering: AtomicBool::new(false),
            pending: AtomicIsize::new(0),
            cells: AtomicUsize::new(0),
            behind: AtomicUsize::new(0),
        });
        tokio::spawn(run(rx, shared.clone(), Mutex::new(known)));
        Arc::new(Grouper { tx, shared })
    }

    /// A shard worker's place.
    pub(crate) fn join(self: &Arc<Self>) -> Member {
        Member {
            grouper: self.clone(),
            holding: false,
            cells: 0,
            behind: false,
        }
    }

    /// How many of the process' shard workers are behind on their stream.
    /// While one is, a worker at its own stream's head does not apply its
    /// carry at once: that would make every carry of the process due, and
    /// a backlog drained over many shards would be applied in as many small
    /// groups as its shards reach their heads, each paying a script per
    /// hash slot. It waits for the group like a worker behind does (its
    /// age, the cells held, or a gathering): within the stated bound while
    /// behind.
    pub(crate) fn behind(&self) -> usize {
        self.shared.behind.load(Ordering::SeqCst)
    }

    /// Weight of the carries the process' shard workers hold between
    /// them (see [`Carry::weight`]).
    pub(crate) fn cells(&self) -> usize {
        self.shared.cells.load(Ordering::SeqCst)
    }

    /// A carry counted as coming never will (its task ended before it was
    /// handed in: its recording failed, or a resync stopped it).
    pub(crate) fn abandon(&self) {
        self.shared.pending.fetch_sub(1, Ordering::SeqCst);
    }

    /// The id of the group a carry recorded now belongs to.
    pub(crate) fn open_group(&self) -> String {
        let n = self.shared.open.load(Ordering::SeqCst);
        format!("g{}-{n}", self.shared.incarnation)
    }

    /// Whether a group is being gathered: a shard worker with a carry
    /// should hand it in now.
    pub(crate) fn gathering(&self) -> bool {
        self.shared.gathering.load(Ordering::SeqCst)
    }

    /// Applies a recorded carry with its group; waits until it is.
    pub(crate) async fn apply(&self, submission: Submission) -> StoreResult<Applied> {
        let gone = || StoreError::Unexpected {
            what: "the group of carries",
            reply: "the grouper stopped".into(),
        };
        let (reply, applied) = oneshot::channel();
        self.tx.send((submission, reply)).map_err(|_| gone())?;
        applied.await.map_err(|_| gone())
    }
}

/// The grouper's task: gathers and applies groups, one at a time.
async fn run(
    mut rx: mpsc::UnboundedReceiver<(Submission, oneshot::Sender<Applied>)>,
    shared: Arc<Shared>,
    known: Mutex<KnownCache>,
) {
    while let Some(first) = rx.recv().await {
        shared.gathering.store(true, Ordering::SeqCst);
        let mut batch = vec![first];
        let until = tokio::time::Instant::now() + GATHER;
        while (batch.len() as isize) < shared.pending.load(Ordering::SeqCst) {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(s)) => batch.push(s),
                _ => break,
            }
        }
        // Carries recorded from now on belong to the next group.
        shared.open.fetch_add(1, Ordering::SeqCst);
        shared
            .pending
            .fetch_sub(batch.len() as isize, Ordering::SeqCst);
        shared.gathering.store(false, Ordering::SeqCst);
        apply_group(batch, &known).await;
    }
}

/// Applies the carries of a group and answers each.
async fn apply_group(
    batch: Vec<(Submission, oneshot::Sender<Applied>)>,
    known: &Mutex<KnownCache>,
) {
    let committer = batch[0].0.committer.clone();
    let mut conn = batch[0].0.conn.clone();
    let outcome = {
        // The cells in the order their carries recorded them.
        let keys = committer.keys();
        let mut pieces = vec![Vec::new(); batch.len()];
        let cells: Vec<(Vec<Cell<'_>>, Vec<StatCell<'_>>)> = batch
            .iter()
            .zip(&mut pieces)
            .map(|((s, _), p)| super::apply::recorded(s.carry.window().cell_lists(), keys, true, p))
            .collect();
        let sums: Vec<Sum<'_>> = batch
            .iter()
            .zip(&cells)
            .map(|((s, _), (c, st))| Sum {
                id: &s.id,
                group: Some(&s.group),
                cells: c,
                stats: st,
                chunk: CHUNK_CELLS,
            })
            .collect();
        let markers = committer.markers(&sums, true);
        let n: usize = cells.iter().map(|(c, _)| c.len()).sum();
        tracing::debug!(
            carries = sums.len(),
            cells = n,
            markers = markers.len(),
            "applying a group of carries"
        );
        let applied = committer
            .apply(&mut conn, &sums, Some(known), Vec::new())
            .await;
        if applied.is_ok() {
            metrics().carry_cells.inc_by(n as u64);
            metrics().carry_groups.inc();
        }
        applied.map(|failures| (failures, markers))
    };
    match outcome {
        Ok((failures, markers)) => {
            let finish = Arc::new(Finish {
                remaining: AtomicUsize::new(batch.len()),
                markers,
            });
            for ((s, reply), failures) in batch.into_iter().zip(failures) {
                let _ = reply.send(Applied {
                    carry: s.carry,
                    result: Ok(failures),
                    finish: Some(finish.clone()),
                });
            }
        }
        Err(e) => {
            // A failover may have lost what it remembers.
            known.lock().unwrap_or_else(|p| p.into_inner()).clear();
            let text = e.to_string();
            let mut first = Some(e);
            for (s, reply) in batch {
                let error = first.take().unwrap_or_else(|| StoreError::Unexpected {
                    what: "applying a group of carries",
                    reply: text.clone(),
                });
                let _ = reply.send(Applied {
                    carry: s.carry,
                    result: Err(error),
                    finish: None,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carry(names: &[&str]) -> Carry {
        let mut c = Carry::new(&crate::model::aggregate::Window::new(&[60], 120));
        let cells: Vec<Cell<'_>> = names
            .iter()
            .map(|n| Cell {
                precision: 60,
                name: n,
                bucket: 0,
                delta: 1,
            })
            .collect();
        c.add(&cells, &[], names.len());
        c
    }

    #[tokio::test]
    async fn members_count_the_cells_they_hold_and_whether_they_are_behind() {
        let grouper = Grouper::start(KnownCache::new(&[60], 120));
        let (mut a, mut b) = (grouper.join(), grouper.join());
        a.holds(&carry(&["x", "y"]));
        b.holds(&carry(&["x", "y", "z"]));
        assert_eq!(grouper.cells(), 5);
        assert_eq!(grouper.shared.pending.load(Ordering::SeqCst), 2);
        // A carry that grew is counted once, at its new size.
        a.holds(&carry(&["x", "y", "z", "w"]));
        assert_eq!(grouper.cells(), 7);
        a.handed_in();
        assert_eq!(grouper.cells(), 3, "a carry handed in is no longer held");
        b.emptied();
        assert_eq!(grouper.cells(), 0);
        assert_eq!(
            grouper.shared.pending.load(Ordering::SeqCst),
            1,
            "the carry handed in counts until its group closes"
        );

        a.set_behind(true);
        a.set_behind(true);
        b.set_behind(true);
        assert_eq!(grouper.behind(), 2);
        b.set_behind(false);
        assert_eq!(grouper.behind(), 1);
        b.holds(&carry(&["x"]));
        drop(a);
        drop(b);
        assert_eq!(grouper.behind(), 0, "a member gone is not behind");
        assert_eq!(grouper.cells(), 0, "nor holds cells");
    }
}
