//! The leader lease: exactly one worker at a time cleans counters and trims
//! the stream.
//!
//! The lease is a key (`--leader-key`, default `hitcount:leader`) holding the
//! leader's token, unique per worker process. It is taken with
//! `SET key token NX PX lease`, renewed every third of the lease by a script
//! that extends it only while it still holds this token, and released at
//! shutdown by a script that deletes it only if it still holds this token.
//! When the leader dies, the key expires and another worker takes it within
//! about one lease.
//!
//! A leader must stop acting before its lease could have passed to another
//! worker, even if its process was paused (SIGSTOP, a long GC-like stall, a
//! frozen VM). So [`Lease::held`] does not ask Redis: it compares the
//! monotonic clock with a deadline set at each successful renewal to *the
//! time the renewal was sent* + lease - a safety margin. A paused process
//! wakes up with its deadline already passed. On top of that every write of
//! the leader's duties is fenced in Redis: the scripts check the token first
//! (see `clean.lua`, `trim.lua`), so even a write already on its way when the
//! deadline passes does nothing once another worker holds the lease.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::RedisResult;

use crate::model::config::LeaderArgs;
use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::model::shutdown::Shutdown;
use crate::store::connect::{self, Client, Conn, Reconnecting, StoreResult};
use crate::store::scripts::{Lua, ACQUIRE, RENEW};

/// Part of the lease given up as a safety margin: a leader considers its
/// lease over this much before Redis expires it (clock rate differences,
/// the time a write takes to reach Redis).
const MARGIN_DIVISOR: u32 = 5;

/// One worker's claim on the leadership.
#[derive(Debug)]
pub(crate) struct Lease {
    key: String,
    token: String,
    ttl: Duration,
    /// Until when this worker may act as leader; `None` when it is not leader.
    until: Mutex<Option<Instant>>,
    /// The leader lease (shown as `hitcount_is_leader`), not a shard's.
    leader: bool,
}

impl Lease {
    /// A lease for this worker (`owner`, shown in `hitcount status`): not
    /// held until [`Lease::try_acquire`] succeeds.
    pub(crate) fn new(keys: &Keys, settings: &LeaderArgs, owner: &str) -> Lease {
        Lease::of(
            keys.leader(&settings.leader_key),
            owner,
            settings.lease(),
            true,
        )
    }

    /// The lease of one stream shard (see [`crate::service::shards`]),
    /// taken and renewed like the leader's.
    pub(crate) fn shard(keys: &Keys, owner: &str, ttl: Duration) -> Lease {
        Lease::of(keys.shard_lease(), owner, ttl, false)
    }

    fn of(key: String, owner: &str, ttl: Duration, leader: bool) -> Lease {
        Lease {
            key,
            token: format!("{owner}/{:016x}", rand::random::<u64>()),
            ttl,
            until: Mutex::new(None),
            leader,
        }
    }

    /// The lease key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// This worker's token: `owner/random`, unique per process.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// How often the lease is renewed (and, by non-leaders, tried): a third
    /// of it, so one lost renewal does not lose the leadership.
    pub(crate) fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// The deadline last set, passed or not.
    fn until(&self) -> Option<Instant> {
        *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this worker may act as leader now.
    pub(crate) fn held(&self) -> bool {
        self.until().is_some_and(|t| t > Instant::now())
    }

    fn set(&self, until: Option<Instant>) {
        *self.until.lock().unwrap_or_else(|p| p.into_inner()) = until;
        if self.leader {
            metrics().is_leader.set(i64::from(until.is_some()));
        }
    }

    fn valid_from(&self, sent: Instant) -> Instant {
        sent + self.ttl - self.ttl / MARGIN_DIVISOR
    }

    /// Takes the lease if nobody holds it (`SET NX PX`, in `acquire.lua`),
    /// or if its key is no lease (another type, or no expiry: a key no
    /// holder wrote would block it for ever), saying so. Returns whether
    /// this worker holds it now.
    pub(crate) async fn try_acquire(&self, conn: &mut Conn) -> RedisResult<bool> {
        let sent = Instant::now();
        let taken = self.run(&ACQUIRE, conn).await?;
        if taken == 2 {
            tracing::warn!(key = %self.key,
                "took a lease from a key no holder wrote (another type, or no expiry)");
        }
        if taken > 0 {
            self.set(Some(self.valid_from(sent)));
        }
        Ok(taken > 0)
    }

    /// Extends the lease if it still holds this worker's token. Returns
    /// whether this worker is still leader; when not, it stops at once.
    pub(crate) async fn renew(&self, conn: &mut Conn) -> RedisResult<bool> {
        let sent = Instant::now();
        let renewed = self.run(&RENEW, conn).await?;
        self.set((renewed == 1).then(|| self.valid_from(sent)));
        Ok(renewed == 1)
    }

    /// Runs `script` (acquire or renew) on this lease's key, token and TTL.
    async fn run(&self, script: &Lua, conn: &mut Conn) -> RedisResult<i64> {
        let ms = self.ttl.as_millis() as u64;
        let mut cmd = script.evalsha(1);
        cmd.arg(&self.key).arg(&self.token).arg(ms);
        cmd.query_async(conn).await
    }

    /// Stops acting as leader and deletes the lease if it is still this
    /// worker's, so another can take over at once.
    pub(crate) async fn release(&self, conn: &mut Conn) -> RedisResult<bool> {
        self.set(None);
        crate::store::scripts::release_if_held(conn, &self.key, &self.token).await
    }

    /// Keeps trying to lead until `shutdown`: renews while leader, tries to
    /// take the lease otherwise, every [`Lease::renew_every`]; then
    /// releases it, as the duties stop, so that a worker still draining
    /// never holds it idle nor takes it. Redis errors are retried on the
    /// same schedule (the deadline runs out on its own meanwhile); fatal
    /// ones are reported on `shutdown`.
    pub(crate) async fn keep_until(self: Arc<Self>, client: Client, shutdown: Shutdown) {
        let mut done = shutdown.clone();
        // A reply later than a renewal period is as good as none.
        let timeout = self.renew_every().min(connect::RESPONSE_TIMEOUT);
        let mut link = Reconnecting::new(client, "leader lease", timeout);
        while !done.is_triggered() {
            // After a failure, tried again after the backoff when that is
            // sooner than the next renewal.
            let pause = match self.step(&mut link).await {
                Ok(()) => {
                    link.succeeded();
                    self.renew_every()
                }
                Err(e) => link.failed(&e, Some(&shutdown)).1.min(self.renew_every()),
            };
            if self.leader {
                metrics().is_leader.set(i64::from(self.held()));
            }
            connect::sleep(pause, &mut done).await;
        }
        // Done before its first renewal connected (a short `clean --once`):
        // the lease it holds is released all the same.
        if link.current().is_none() && self.held() {
            let _ = tokio::time::timeout(timeout, link.get()).await;
        }
        if let Some(c) = link.current() {
            match self.release(c).await {
                Ok(true) => tracing::info!(token = %self.token, "released the leader lease"),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not release the leader lease; it expires on its own")
                }
            }
        } else if self.held() {
            self.set(None);
            tracing::warn!(lease_ms = self.ttl.as_millis() as u64,
                "could not release the leader lease (no connection to Redis): it expires on its own");
        }
    }

    async fn step(&self, link: &mut Reconnecting) -> StoreResult<()> {
        let c = link.get().await?;
        // Renew while this worker thinks it leads, even past its deadline
        // (after a pause): the script says whether the lease is still ours.
        if self.until().is_some() {
            if !self.renew(c).await? {
                tracing::warn!(token = %self.token, "lost the leader lease: no longer leader");
            }
        } else if self.try_acquire(c).await? {
            tracing::info!(token = %self.token, lease_ms = self.ttl.as_millis() as u64, "became leader");
        }
        Ok(())
    }
}

/// The current leader as Redis sees it: its token and the lease left,
/// `None` for a key that holds no lease (a string without an expiry, or a
/// key of another type, shown as such: the next worker to try takes it
/// over, see `acquire.lua`).
pub(crate) async fn current(
    conn: &mut Conn,
    key: &str,
) -> RedisResult<Option<(String, Option<Duration>)>> {
    let (token, pttl): (RedisResult<Option<String>>, i64) = redis::pipe()
        .ignore_errors()
        .get(key)
        .pttl(key)
        .query_async(conn)
        .await?;
    // PTTL: -1 for a key without an expiry (-2 for none: gone meanwhile).
    let left = (pttl != -1).then(|| Duration::from_millis(pttl.max(0) as u64));
    Ok(match token {
        // Another type holds no lease, expiring or not.
        Err(e) if crate::store::client::wrong_type(&e) => {
            Some(("(a key of another type)".into(), None))
        }
        token => token?.map(|t| (t, left)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_inside_the_lease() {
        let settings = LeaderArgs {
            lease_ms: 1500,
            ..LeaderArgs::default()
        };
        let keys = Keys::new(&Default::default(), &Default::default());
        let lease = Lease::new(&keys, &settings, "w1");
        assert!(!lease.held());
        assert!(lease.token().starts_with("w1/"));
        let sent = Instant::now();
        let until = lease.valid_from(sent);
        assert!(until < sent + settings.lease());
        assert!(until > sent + lease.renew_every() * 2);
        lease.set(Some(sent - Duration::from_millis(1)));
        assert!(!lease.held(), "a passed deadline is not leadership");
    }

    /// A lease key written by something else, without an expiry or of
    /// another type (expiring too), is told apart from a lease.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_key_that_holds_no_lease_is_told_apart() {
        let srv = crate::testing::server();
        let mut c = crate::testing::conn(&srv.url()).await;
        let send = |words: &[&str]| {
            let mut cmd = redis::cmd(words[0]);
            cmd.arg(&words[1..]);
            cmd
        };
        let mut now = async |words: &[&str]| {
            let _: () = send(words).query_async(&mut c).await.unwrap();
            current(&mut c, "lease").await.unwrap()
        };
        assert_eq!(now(&["DEL", "lease"]).await, None);
        let unexpiring = now(&["SET", "lease", "pod-a/1"]).await;
        assert_eq!(unexpiring, Some(("pod-a/1".into(), None)));
        let (token, left) = now(&["PEXPIRE", "lease", "60000"]).await.unwrap();
        assert_eq!(token, "pod-a/1");
        assert!(
            left.is_some_and(|l| l > Duration::from_secs(50)),
            "{left:?}"
        );
        now(&["DEL", "lease"]).await;
        let hash = now(&["HSET", "lease", "f", "v"]).await;
        assert_eq!(hash, Some(("(a key of another type)".into(), None)));
        let expiring_hash = now(&["PEXPIRE", "lease", "60000"]).await;
        assert_eq!(
            expiring_hash,
            Some(("(a key of another type)".into(), None))
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_is_released_even_when_done_before_its_first_renewal() {
        let srv = crate::testing::server();
        let args = crate::model::config::RedisArgs::from_url(&srv.url());
        let client = crate::store::connect::client(&args).unwrap();
        let mut c = client.open(connect::RESPONSE_TIMEOUT).await.unwrap();
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let keys = Keys::new(&Default::default(), &Default::default());
        let lease = Arc::new(Lease::new(&keys, &LeaderArgs::default(), "once"));
        assert!(lease.try_acquire(&mut c).await.unwrap());
        let (trigger, done) = crate::model::shutdown::channel();
        trigger.trigger();
        lease.clone().keep_until(client, done).await;
        let holder: Option<String> = redis::cmd("GET")
            .arg(lease.key())
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(holder, None, "released, not left to expire");
        assert!(!lease.held());
    }
}
