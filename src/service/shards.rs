//! Which shards of the stream this process reads, and one
//! [`Worker`] per shard it reads.
//!
//! With one shard (the default) every worker process reads the one stream,
//! as a consumer of its group. With several (`HITCOUNT_SHARDS`), the
//! processes share them: each marks itself live about once a second
//! (`members.lua`), counts the live ones W and reads about shards/W of them,
//! each under a lease ([`Lease::shard`]: `SET NX PX`, renewed while held).
//! A process over its share stops the extra shards' workers (they finish
//! their window and pending entries) and then releases their leases; one
//! under its share takes free shards, trying them in an order of its own
//! (rendezvous hashing), so processes seldom race for the same shard. When a
//! process dies its leases lapse within [`SHARD_LEASE`] and others take its
//! shards; its pending entries are claimed as on one stream. More processes
//! than shards is harmless: the extra ones hold none and wait.
//!
//! Reading a shard is only ever a consumer of its group doing what it does
//! on one stream, so exactly once never rests on the leases: two processes
//! reading one shard for a moment (a lease lost during a pause) are two
//! consumers of one group.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::model::config::ConfigError;
use crate::model::keys::Keys;
use crate::model::shutdown::{Shutdown, Trigger};
use crate::service::agreement;
use crate::service::health::Health;
use crate::service::leader::Lease;
use crate::service::registration::Registration;
use crate::service::worker::sum::Summer;
use crate::service::worker::{Settings, Worker};
use crate::store::connect::{self, Client, Conn, Reconnecting, StoreResult};
use crate::store::scripts::MEMBERS;
use crate::store::shard_count;

/// How long a shard's lease lives without renewal: the longest a dead
/// process' shards wait for another reader.
pub(crate) const SHARD_LEASE: Duration = Duration::from_secs(10);

/// How often leases are renewed, live workers counted and shards balanced.
const TICK: Duration = Duration::from_secs(1);

/// How long a starting process waits after it first marks itself live,
/// before it takes shards: processes started together then count each
/// other and each takes its share, instead of the first taking them all
/// and handing them over mid-drain (on a cluster each handover applies
/// the process' sum early).
const SETTLE: Duration = Duration::from_millis(500);

/// Runs this process' workers until `shutdown`: waits for Redis to learn
/// whether it is a cluster, then reads the one stream, or its share of the
/// shards. Settings errors are returned before anything starts; a fatal
/// Redis error (a permission refused, a key of another type) stops
/// `shutdown` with its cause, and this returns `Ok`: the cause is
/// [`crate::model::shutdown::Trigger::fatal`] of its trigger. The leader's
/// duties (cleaning old samples, trimming the stream) are not run here:
/// `hitcount worker` processes run them.
///
/// Memory: on glibc, the `hitcount` binary fixes the allocator's mmap
/// threshold at 128 KiB before it starts anything, so that the large
/// buffers of a carry go back to the system once freed; a program running
/// workers in-process may do the same (`mallopt(M_MMAP_THRESHOLD, 131072)`,
/// or `MALLOC_MMAP_THRESHOLD_=131072` in its environment). With glibc's
/// default a worker draining a backlog of 100,000 names peaked at up to
/// half as much memory again.
pub async fn run(
    mut settings: Settings,
    health: Arc<Health>,
    shutdown: Shutdown,
) -> Result<(), ConfigError> {
    settings.layout.validate()?;
    settings.stream.validate()?;
    settings.worker.validate()?;
    // One name for every shard's consumer (the default is random).
    settings.worker.consumer = Some(settings.worker.consumer_name());
    let client = connect::client(&settings.redis)?;
    let Some(clustered) = first_contact(&settings, &client, &health, &shutdown).await else {
        return Ok(());
    };
    let shards = Keys::all_shards(&settings.layout, &settings.stream, clustered);
    if let Some(problem) = clustered
        .then(|| Keys::cluster_problem(&settings.layout, &settings.stream))
        .flatten()
    {
        shutdown.fail(problem);
        return Ok(());
    }
    health.set_agreed();
    // One sum for every shard this process reads: their windows are
    // applied together, and due together (see `service::worker::sum`).
    let summer = Summer::start(settings.worker.clone(), &settings.layout, client.clone());
    if let [only] = shards.as_slice() {
        health.set_reading(1, &[0]);
        let share = summer.join(0);
        Worker::new(settings, only.clone(), client, health, shutdown, share)
            .run()
            .await;
        return Ok(());
    }
    let unsharded = shard_count::unsharded(&settings.layout, &settings.stream, clustered);
    // One live process per consumer name over every shard, as on one
    // stream: two under one name would count as one live member (shares
    // computed wrong) and show as one owner (see `registration`).
    let consumer = settings.worker.consumer_name();
    let registration = Arc::new(Registration::new(&unsharded, &consumer));
    if !register(&registration, &client, &health, &shutdown).await {
        return Ok(());
    }
    let (done_trigger, done) = crate::model::shutdown::channel();
    let keeper = tokio::spawn(
        registration
            .clone()
            .keep(client.clone(), shutdown.clone(), done),
    );
    let members = unsharded.members();
    let release = client.clone();
    let balancer = Balancer {
        consumer,
        settings,
        shards,
        client,
        health,
        shutdown,
        members,
        owned: BTreeMap::new(),
        summer,
        announced: false,
    };
    balancer.run().await;
    done_trigger.trigger();
    let _ = keeper.await;
    if let Ok(mut conn) = release.open(connect::RESPONSE_TIMEOUT).await {
        let _ = registration.release(&mut conn).await;
    }
    Ok(())
}

/// Registers the process' consumer name for every shard it will read,
/// retrying while Redis is unavailable; `false` at shutdown, or when a live
/// process holds the name (then `shutdown` says so).
async fn register(
    registration: &Registration,
    client: &Client,
    health: &Health,
    shutdown: &Shutdown,
) -> bool {
    let mut link = Reconnecting::new(
        client.clone(),
        "consumer registration",
        connect::RESPONSE_TIMEOUT,
    );
    let mut stop = shutdown.clone();
    while !shutdown.is_triggered() {
        health.turned();
        match link
            .call(async |conn| registration.acquire(conn, stop.clone()).await)
            .await
        {
            // Not taken when shutdown came while it waited.
            Ok(taken) => return taken,
            Err(e) => {
                let (class, pause) = link.failed(&e, Some(shutdown));
                if class == connect::ErrorClass::Fatal {
                    return false;
                }
                connect::sleep(pause, &mut stop).await;
            }
        }
    }
    false
}

/// Once Redis answers: whether it is a cluster, after recording this
/// deployment's shard count or checking it against the recorded one
/// (`None` at shutdown first, or when refused: then `shutdown` says why).
async fn first_contact(
    settings: &Settings,
    client: &Client,
    health: &Health,
    shutdown: &Shutdown,
) -> Option<bool> {
    let mut link = Reconnecting::new(client.clone(), "worker", connect::RESPONSE_TIMEOUT);
    let mut stop = shutdown.clone();
    while !shutdown.is_triggered() {
        // Each try is a turn: a Redis down at start fails readiness, never
        // liveness (restarting the worker would not bring Redis back).
        health.turned();
        let checked = link
            .call(async |conn| {
                let (layout, stream) = (&settings.layout, &settings.stream);
                let own = settings.worker.consumer_name();
                if let Some(why) = agreement::strangers_at_start(conn, layout, stream, &own).await?
                {
                    let why = format!("{why} (this worker does not start)");
                    return Ok((conn.is_cluster(), Some(why)));
                }
                let shards = Keys::all_shards(layout, stream, conn.is_cluster());
                if let Some(why) = agreement::other_groups(conn, layout, stream, &shards).await? {
                    let why = format!("{why} (this worker does not start)");
                    return Ok((conn.is_cluster(), Some(why)));
                }
                let refusal = agreement::refusal(conn, layout, stream).await?;
                if refusal.is_none() {
                    agreement::warn_unread(conn, &settings.layout, &settings.stream).await?;
                }
                Ok((conn.is_cluster(), refusal))
            })
            .await;
        match checked {
            Ok((clustered, None)) => {
                // Clears what a failure here set (a full Redis' flag).
                link.succeeded();
                return Some(clustered);
            }
            Ok((_, Some(refusal))) => {
                shutdown.fail(refusal);
                return None;
            }
            Err(e) => connect::sleep(link.failed(&e, Some(shutdown)).1, &mut stop).await,
        }
    }
    None
}

/// A shard this process reads (or is stopping).
struct Owned {
    lease: Lease,
    stop: Trigger,
    task: JoinHandle<()>,
    /// Asked to stop: its lease is released once its worker is done.
    leaving: bool,
    /// Its lease was lost: renewed no more while its worker stops.
    lost: bool,
}

/// Shares the shards among the live processes.
struct Balancer {
    settings: Settings,
    shards: Vec<Keys>,
    client: Client,
    health: Arc<Health>,
    shutdown: Shutdown,
    consumer: String,
    /// The key listing live processes.
    members: String,
    owned: BTreeMap<u32, Owned>,
    /// The sum of this process' shards' windows.
    summer: Arc<Summer>,
    /// Marked live once, and waited [`SETTLE`].
    announced: bool,
}

impl Balancer {
    async fn run(mut self) {
        tracing::info!(consumer = %self.consumer, shards = self.shards.len(),
            "sharing the stream's shards with the other live workers");
        let mut link = Reconnecting::new(
            self.client.clone(),
            "shard leases",
            connect::RESPONSE_TIMEOUT,
        );
        let mut stop = self.shutdown.clone();
        while !self.shutdown.is_triggered() {
            let pause = match self.step(&mut link).await {
                Ok(()) => {
                    link.succeeded();
                    self.health.set_redis_connected(true);
                    // Holding no shard, this process only waits to take
                    // one over: live, and ready for it.
                    if self.owned.is_empty() {
                        self.health.turned();
                        self.health.set_in_group(true);
                    }
                    TICK
                }
                Err(e) => {
                    self.health.set_redis_connected(false);
                    link.failed(&e, Some(&self.shutdown)).1.min(TICK)
                }
            };
            self.report();
            connect::sleep(pause, &mut stop).await;
        }
        // Every shard's worker stops with the process: wait for them, then
        // let the shards go at once.
        for (_, o) in std::mem::take(&mut self.owned) {
            o.stop.trigger();
            let _ = o.task.await;
            if let Some(c) = link.current() {
                let _ = o.lease.release(c).await;
            }
        }
        self.report();
        if let Some(c) = link.current() {
            let _ = self.live(c, Duration::ZERO).await;
        }
    }

    /// Tells the probes and the owner gauges which shards this process
    /// holds (the leases it holds, its workers finishing included).
    fn report(&self) {
        let owned: Vec<u32> = self.owned.keys().copied().collect();
        self.health.set_reading(self.shards.len() as u32, &owned);
    }

    /// One round: mark this process live, renew leases, let go of shards
    /// over its share (and of those whose worker is done), take free ones
    /// under it.
    async fn step(&mut self, link: &mut Reconnecting) -> StoreResult<()> {
        let conn = link.get().await?;
        let mut live = self.live(conn, SHARD_LEASE).await?;
        if !self.announced {
            // Processes started together (a rollout) see each other
            // before taking shards, and share them from the start.
            tokio::time::sleep(SETTLE).await;
            live = self.live(conn, SHARD_LEASE).await?;
            self.announced = true;
        }
        let share = self.shards.len().div_ceil(live.max(1) as usize);
        let done: Vec<(u32, Owned)> = self
            .owned
            .extract_if(.., |_, o| o.task.is_finished())
            .collect();
        for (k, o) in done {
            o.lease.release(conn).await?;
            tracing::info!(shard = k, "let go of a shard");
        }
        for (&k, o) in self.owned.iter_mut().filter(|(_, o)| !o.lost) {
            if !o.lease.renew(conn).await? {
                tracing::warn!(shard = k, "lost the lease of a shard: stopping its worker");
                o.stop.trigger();
                (o.lost, o.leaving) = (true, true);
            }
        }
        // Over its share, the shards it prefers least go first; under it,
        // free ones are tried in its order of preference.
        let mut reading = self.owned.values().filter(|o| !o.leaving).count();
        for k in self.preference().into_iter().rev() {
            if let Some(o) = (self.owned.get_mut(&k)).filter(|o| reading > share && !o.leaving) {
                o.leaving = true;
                o.stop.trigger();
                reading -= 1;
            }
        }
        let free: Vec<u32> = (self.preference().into_iter())
            .filter(|k| !self.owned.contains_key(k))
            .collect();
        for k in free {
            // A process stopping takes no shard: it would stop its worker
            // at once and hold the lease while it does.
            if reading >= share || self.shutdown.is_triggered() {
                break;
            }
            let lease = Lease::shard(&self.shards[k as usize], &self.consumer, SHARD_LEASE);
            if !lease.try_acquire(conn).await? {
                continue;
            }
            if self.shutdown.is_triggered() {
                lease.release(conn).await?;
                break;
            }
            self.start(k, lease);
            reading += 1;
        }
        Ok(())
    }

    /// Marks this process live for `lifetime` (zero: leaving) and returns
    /// how many are live.
    async fn live(&self, conn: &mut Conn, lifetime: Duration) -> StoreResult<i64> {
        Ok(MEMBERS
            .evalsha(1)
            .arg(&self.members)
            .arg(&self.consumer)
            .arg(lifetime.as_millis() as u64)
            .query_async(conn)
            .await?)
    }

    /// Every shard, in this process' order of preference.
    fn preference(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.shards.len() as u32).collect();
        order.sort_by_key(|k| Keys::shard_of_name(&format!("{}/{k}", self.consumer), u32::MAX));
        order
    }

    /// Starts the worker of shard `k`, whose lease this process now holds.
    fn start(&mut self, k: u32, lease: Lease) {
        tracing::info!(shard = k, stream = %self.shards[k as usize].stream, "took a shard");
        let (stop, shutdown) = self.shutdown.child();
        let worker = Worker::new(
            self.settings.clone(),
            self.shards[k as usize].clone(),
            self.client.clone(),
            self.health.for_shard(k),
            shutdown,
            self.summer.join(k),
        );
        let task = tokio::spawn(worker.run());
        self.owned.insert(
            k,
            Owned {
                lease,
                stop,
                task,
                leaving: false,
                lost: false,
            },
        );
    }
}
