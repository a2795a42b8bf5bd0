//! The sum: the windows that this process' shard workers recorded, summed
//! and applied on a task of its own, the one place that decides when.
//!
//! Each shard's worker commits its windows next to its stream and hands
//! them in ([`Share::add`]), cells and all; it goes on reading while the sum
//! holds them. The sum keeps one [`Carry`] per shard (a shard's windows are
//! recorded as a sum next to that shard's stream, so shards are summed
//! apart) and applies every shard's at once, on one connection, when:
//! no shard has more coming soon (none is behind on its stream or has a
//! window open: nothing left to sum with; at the head a window goes in as
//! it closes), or one of them is `--carry-ms` old (held a
//! little longer when one stream's head is near, see [`Carry::hold`]), or
//! they hold `--carry-cells` between them, or a worker asks
//! ([`Share::flush`]: at shutdown, after a fence). One apply runs at a
//! time; a worker handing in a window waits while the next would overflow
//! the queue, which bounds memory by the carries and that queue.
//!
//! How a shard's part goes in, exactly once (see
//! [`crate::store::commit::carry`]): one window as itself, by its own
//! record; several recorded as their sum (`carry.lua`) and applied; on a
//! Redis Cluster the sums of several shards recorded in one *group* and
//! applied together, one script per hash slot for all of them (see
//! [`crate::store::commit::apply`]). Then the windows' entries are
//! acknowledged and the windows and the sum finished. A part that fails
//! is reported to its worker ([`Share::failure`]), which resyncs: the sum
//! forgets that shard's windows ([`Share::forget`]) and the worker finishes
//! them from their records.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::model::aggregate::Window;
use crate::model::carry::Carry;
use crate::model::config::{LayoutArgs, WorkerArgs};
use crate::model::known::KnownCache;
use crate::store::commit::{Committer, Deferred};
use crate::store::connect::{self, Client, Reconnecting, StoreError, StoreResult};

mod apply;
mod redis_tests;

/// Messages waiting for the sum at most: a worker handing in a window
/// waits while the sum applies.
const QUEUE: usize = 4;

/// A shard's failure, set by the sum for its worker to take.
type Failed = Arc<Mutex<Option<StoreError>>>;

/// What a shard's worker tells the sum.
enum What {
    /// A recorded window, its entries pending: its shard's committer, the
    /// window, its cells, where to report a failure.
    Window(Box<(Committer, Deferred, Window, Failed)>),
    /// More of the shard is coming soon, or no longer (see
    /// [`Share::set_coming`]).
    Coming(bool),
    /// Once the apply in flight ended: apply everything now, or drop the
    /// shard's windows (its worker finishes them from their records), or
    /// drop them and let the shard go; then answer.
    Settle(Then, oneshot::Sender<()>),
}

#[derive(PartialEq)]
enum Then {
    Apply,
    Forget,
    Leave,
}

/// The process' sum, shared by its shard workers.
pub(crate) struct Summer {
    tx: mpsc::Sender<(u32, What)>,
}

impl Summer {
    /// Starts the sum's task (it ends once every handle is dropped): it
    /// applies on a connection of its own, with `worker`'s carry settings;
    /// `layout` gives the precisions of the `known:` members it remembers.
    pub(crate) fn start(worker: WorkerArgs, layout: &LayoutArgs, client: Client) -> Arc<Summer> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let window = Window::new(&layout.precisions, layout.samples);
        let known = KnownCache::new(window.precisions(), layout.samples);
        let task = Task {
            rx,
            worker,
            link: Reconnecting::new(client.clone(), "sum", connect::RESPONSE_TIMEOUT),
            client,
            shards: BTreeMap::new(),
            coming: BTreeSet::new(),
            known: Arc::new(Mutex::new(known)),
            spare: Vec::new(),
            incarnation: format!("{:016x}", rand::random::<u64>()),
            seq: 0,
            job: None,
        };
        tokio::spawn(task.run());
        Arc::new(Summer { tx })
    }

    /// Shard `shard`'s worker's handle.
    pub(crate) fn join(self: &Arc<Self>, shard: u32) -> Share {
        Share {
            shard,
            tx: self.tx.clone(),
            failed: Arc::default(),
            coming: false,
        }
    }
}

/// A shard worker's handle on the sum.
pub(crate) struct Share {
    shard: u32,
    tx: mpsc::Sender<(u32, What)>,
    failed: Failed,
    coming: bool,
}

impl Share {
    async fn send(&self, what: What) -> StoreResult<()> {
        self.tx
            .send((self.shard, what))
            .await
            .map_err(|_| StoreError::Unexpected {
                what: "the sum",
                reply: "its task stopped".into(),
            })
    }

    async fn settle(&self, then: Then) -> StoreResult<()> {
        let (reply, done) = oneshot::channel();
        self.send(What::Settle(then, reply)).await?;
        let _ = done.await;
        Ok(())
    }

    /// Why the sum could not apply some of this shard's windows, if it
    /// could not (taken: the worker resyncs, see [`Share::forget`]).
    pub(crate) fn failure(&self) -> StoreResult<()> {
        match self.failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Hands in a recorded window (its cells taken from `window`, left
    /// empty); waits while the sum's queue is full.
    pub(crate) async fn add(
        &mut self,
        committer: &Committer,
        deferred: Deferred,
        window: &mut Window,
    ) -> StoreResult<()> {
        self.failure()?;
        let cells = std::mem::replace(window, window.empty_like());
        let added = (committer.clone(), deferred, cells, self.failed.clone());
        self.send(What::Window(Box::new(added))).await
    }

    /// Whether more of this shard is coming soon (its worker is behind on
    /// its stream, or has a window open): while any shard's is, the sum
    /// waits for more windows.
    pub(crate) async fn set_coming(&mut self, coming: bool) -> StoreResult<()> {
        if coming != self.coming {
            self.send(What::Coming(coming)).await?;
            self.coming = coming;
        }
        Ok(())
    }

    /// Applies every window handed in now and waits until this shard's are
    /// in (or failed).
    pub(crate) async fn flush(&mut self) -> StoreResult<()> {
        self.settle(Then::Apply).await?;
        self.failure()
    }

    /// Before a resync (or, `leave`, when the shard is let go): waits until
    /// none of this shard's windows is being applied, then drops those the
    /// sum holds (the resync finishes them from their records) and any
    /// failure not yet taken.
    pub(crate) async fn forget(&mut self, leave: bool) {
        let then = if leave { Then::Leave } else { Then::Forget };
        let _ = self.settle(then).await;
        let _ = self.failure();
    }
}

/// A shard's windows waiting in the sum, or on their way in.
struct Part {
    committer: Committer,
    carry: Carry,
    deferred: Vec<Deferred>,
    failed: Failed,
}

/// An apply in flight, giving its parts back with their outcome, and
/// where to report its failure if its task ends without one (it
/// panicked).
type Job = (
    tokio::task::JoinHandle<Vec<(Part, StoreResult<()>)>>,
    Vec<Failed>,
);

struct Task {
    rx: mpsc::Receiver<(u32, What)>,
    worker: WorkerArgs,
    /// The sum's own connection (a worker's waits in blocking reads).
    link: Reconnecting,
    client: Client,
    shards: BTreeMap<u32, Part>,
    /// Shards with more coming soon.
    coming: BTreeSet<u32>,
    /// The `known:` members written, shared with the apply in flight.
    known: Arc<Mutex<KnownCache>>,
    /// Applied carries, empty, kept for their allocations.
    spare: Vec<Carry>,
    incarnation: String,
    seq: u64,
    job: Option<Job>,
}

impl Task {
    async fn run(mut self) {
        loop {
            let wake = self.next_due();
            tokio::select! {
                msg = self.rx.recv() => match msg {
                    Some((shard, what)) => self.handle(shard, what).await,
                    None => break,
                },
                parts = async { (&mut self.job.as_mut().expect("a job").0).await }, if self.job.is_some() => {
                    let (_, failed) = self.job.take().expect("a job");
                    self.ended(parts, failed);
                }
                _ = async { tokio::time::sleep_until(wake.expect("a time").into()).await }, if wake.is_some() => {}
            }
            if self.due().await {
                self.start().await;
            }
        }
        self.settle().await;
    }

    async fn handle(&mut self, shard: u32, what: What) {
        match what {
            What::Window(added) => {
                let (committer, deferred, mut window, failed) = *added;
                let part = match self.shards.entry(shard) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
                        let room = self
                            .worker
                            .carry_cells
                            .saturating_add(self.worker.window_cells);
                        let carry = self.spare.pop();
                        let carry = carry.unwrap_or_else(|| Carry::new(&window).with_room(room));
                        e.insert(Part {
                            committer,
                            carry,
                            deferred: Vec::new(),
                            failed,
                        })
                    }
                };
                part.carry.add_window(&mut window);
                part.deferred.push(deferred);
            }
            What::Coming(true) => {
                self.coming.insert(shard);
            }
            What::Coming(false) => {
                self.coming.remove(&shard);
            }
            What::Settle(then, reply) => {
                self.settle().await;
                if then == Then::Apply {
                    if self.shards.contains_key(&shard) {
                        self.start().await;
                        self.settle().await;
                    }
                } else {
                    if let Some(p) = self.shards.remove(&shard) {
                        self.keep(p.carry);
                    }
                    if then == Then::Leave {
                        self.coming.remove(&shard);
                    }
                    // A resync follows an error: a failover may have lost
                    // members the cache remembers.
                    self.forget_members();
                }
                let _ = reply.send(());
            }
        }
    }

    /// Keeps an applied or dropped carry, emptied, for its allocations.
    fn keep(&mut self, mut carry: Carry) {
        carry.clear();
        if self.spare.len() < 2 {
            self.spare.push(carry);
        }
    }

    fn forget_members(&self) {
        self.known.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Waits for the apply in flight, if any.
    async fn settle(&mut self) {
        if let Some((job, failed)) = self.job.take() {
            self.ended(job.await, failed);
        }
    }

    /// The outcome of an apply: failures go to their workers, and the
    /// connection is opened anew for the next.
    fn ended(
        &mut self,
        parts: Result<Vec<(Part, StoreResult<()>)>, tokio::task::JoinError>,
        failed: Vec<Failed>,
    ) {
        let parts = parts.unwrap_or_else(|e| {
            for f in failed {
                *f.lock().unwrap_or_else(|p| p.into_inner()) = Some(StoreError::Unexpected {
                    what: "the sum's task",
                    reply: e.to_string(),
                });
            }
            Vec::new()
        });
        for (part, outcome) in parts {
            if let Err(e) = outcome {
                // A failover may have lost members the cache remembers.
                self.forget_members();
                self.link =
                    Reconnecting::new(self.client.clone(), "sum", connect::RESPONSE_TIMEOUT);
                *part.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
            self.keep(part.carry);
        }
    }

    /// When the oldest carry comes of age (or its hold ends).
    fn next_due(&self) -> Option<Instant> {
        let age = self.worker.carry_age()?;
        self.shards
            .values()
            .filter_map(|s| s.carry.due_at(age))
            .min()
    }

    /// Whether to apply now (see the module's doc).
    async fn due(&mut self) -> bool {
        if self.shards.is_empty() {
            return false;
        }
        let Some(age) = self.worker.carry_age() else {
            return true;
        };
        if self.coming.is_empty() {
            return true;
        }
        let max = self.worker.carry_cells;
        let weight: usize = self.shards.values().map(|s| s.carry.weight()).sum();
        if weight >= max {
            return true;
        }
        // One stream, of age near its head: wait for the head (see
        // `Carry::hold`). Only a saving: a Redis that cannot tell (before
        // 7.0, an ACL without XINFO) applies the carry at its age.
        if let (1, Some(s)) = (self.shards.len(), self.shards.values_mut().next()) {
            if s.carry.asks_hold(age, max) {
                let keys = s.committer.keys().clone();
                let lag = match self.link.get().await {
                    Ok(conn) => crate::store::group::own_group(conn, &keys)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|g| g.lag),
                    Err(_) => None,
                };
                s.carry.hold(lag, age);
            }
        }
        self.shards
            .values()
            .any(|s| s.carry.is_due(age, usize::MAX))
    }

    /// Starts applying every shard's windows (once the apply in flight
    /// ended), on a task of its own.
    async fn start(&mut self) {
        self.settle().await;
        if self.shards.is_empty() {
            return;
        }
        let parts: Vec<Part> = std::mem::take(&mut self.shards).into_values().collect();
        tracing::debug!(
            parts = parts.len(),
            windows = parts.iter().map(|p| p.deferred.len()).sum::<usize>(),
            coming = self.coming.len(),
            "applying the sum"
        );
        let known = self.known.clone();
        let id = format!("s{}-{}", self.incarnation, self.seq);
        self.seq += 1;
        let conn = self.link.get().await.map(|c| c.clone());
        if conn.is_ok() {
            self.link.succeeded();
        }
        let failed = parts.iter().map(|p| p.failed.clone()).collect();
        self.job = Some((tokio::spawn(apply::apply(parts, conn, known, id)), failed));
    }
}
