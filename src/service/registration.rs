//! A worker's registration of its consumer name: one live process per name.
//!
//! The exactly-once fence is per consumer: two processes under one name
//! would read each other's pending entries and count them twice. So a worker
//! registers its name in Redis for as long as it lives (a key holding its
//! token, renewed like the leader lease by `register.lua`), and every commit
//! checks that token (`commit.lua`). A second worker started under the name
//! of a live one is refused at start-up; a worker restarted under its own
//! name (a StatefulSet pod) waits at most one registration lifetime for its
//! old registration to lapse, then resumes its pending entries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::model::keys::Keys;
use crate::model::shutdown::Shutdown;
use crate::store::connect::{
    self, Client, Conn, ErrorClass, Reconnecting, StoreError, StoreResult,
};
use crate::store::scripts::REGISTER;

/// How long a registration lives without renewal: the longest a restarted
/// worker waits for its own old registration to lapse.
pub(crate) const LIFETIME: Duration =
    Duration::from_millis(crate::model::keys::REGISTRATION_LIFETIME_MS);
/// How often a live worker renews it. Often, so that a duplicate started
/// next to it sees the renewal and is refused within about this long.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How often a starting worker looks at a registration held by another.
const POLL: Duration = Duration::from_millis(100);

/// One worker's registration of its consumer name.
#[derive(Debug)]
pub(crate) struct Registration {
    key: String,
    name: String,
    token: String,
    acquired: tokio::sync::watch::Sender<bool>,
}

impl Registration {
    /// A registration of `consumer` with a token unique to this process
    /// (`host/pid/random`, shown to a refused duplicate).
    pub(crate) fn new(keys: &Keys, consumer: &str) -> Registration {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        Registration {
            key: keys.consumer_registration(consumer),
            name: consumer.to_string(),
            token: format!(
                "{host}/{}/{:016x}",
                std::process::id(),
                rand::random::<u64>()
            ),
            acquired: tokio::sync::watch::channel(false).0,
        }
    }

    /// This worker's token.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// The registration's lifetime in ms.
    pub(crate) fn lifetime_ms(&self) -> u64 {
        LIFETIME.as_millis() as u64
    }

    /// Takes the name or keeps it: `Ok(None)` when it is this worker's,
    /// `Ok(Some(holder))` when another holds it.
    async fn step(&self, conn: &mut Conn) -> StoreResult<Option<String>> {
        let reply: Value = REGISTER
            .evalsha(1)
            .arg(&self.key)
            .arg(&self.token)
            .arg(self.lifetime_ms())
            .query_async(conn)
            .await?;
        register_reply(&reply).ok_or_else(|| StoreError::unexpected("register.lua", &reply))
    }

    /// Registers at start-up. When another worker holds the name, waits up
    /// to one lifetime for its registration to lapse (a restarted worker's
    /// own old one), and refuses with [`StoreError::NameTaken`] as soon as
    /// the holder renews it (a live worker). Returns false when `stop` is
    /// asked for while it waits: the name is not taken.
    pub(crate) async fn acquire(&self, conn: &mut Conn, mut stop: Shutdown) -> StoreResult<bool> {
        let give_up = Instant::now() + LIFETIME + RENEW_EVERY;
        let mut last: Option<(String, i64)> = None;
        loop {
            let Some(holder) = self.step(conn).await? else {
                self.acquired.send_replace(true);
                return Ok(true);
            };
            let pttl: i64 = redis::cmd("PTTL").arg(&self.key).query_async(conn).await?;
            let renewed = last
                .as_ref()
                .is_some_and(|(h, prev)| *h != holder || pttl > *prev + 50);
            if renewed || Instant::now() >= give_up {
                return Err(self.taken(holder));
            }
            if last.is_none() {
                tracing::info!(consumer = %self.name, holder = %holder, ttl_ms = pttl,
                    "consumer name registered by another worker: waiting for it to lapse (an \
                     earlier one that stopped without releasing it, such as this process' previous \
                     worker of a shard; a live one is refused as soon as it renews)");
            }
            last = Some((holder, pttl));
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = stop.wait() => return Ok(false),
            }
        }
    }

    /// The error that says `holder` has this consumer name.
    fn taken(&self, holder: String) -> StoreError {
        StoreError::NameTaken {
            name: self.name.clone(),
            holder,
        }
    }

    /// Renews the registration every [`RENEW_EVERY`] once [`Self::acquire`]
    /// took it, until `done`. When another worker has taken the name (this
    /// one was paused past the lifetime), reports a fatal error on
    /// `shutdown`. Transient errors are retried on the same schedule: the
    /// commit fence keeps the count exact meanwhile.
    pub(crate) async fn keep(
        self: Arc<Self>,
        client: Client,
        shutdown: Shutdown,
        mut done: Shutdown,
    ) {
        let mut acquired = self.acquired.subscribe();
        tokio::select! {
            _ = acquired.wait_for(|a| *a) => {}
            _ = done.wait() => return,
        }
        let mut link = Reconnecting::new(client, "consumer registration", LIFETIME / 3);
        while !done.is_triggered() {
            let result = link.call(async |c| self.step(c).await).await;
            let pause = match result {
                Ok(None) => {
                    link.succeeded();
                    RENEW_EVERY
                }
                // Another worker took the name (this one was paused past the
                // lifetime): stop at once, the commit fence refuses us anyway.
                Ok(Some(holder)) => {
                    shutdown.fail(self.taken(holder).to_string());
                    return;
                }
                // The commit fence keeps the count exact meanwhile.
                Err(e) => match link.failed(&e, Some(&shutdown)) {
                    (ErrorClass::Fatal, _) => return,
                    (_, backoff) => backoff.min(RENEW_EVERY),
                },
            };
            connect::sleep(pause, &mut done).await;
        }
    }

    /// Gives the name up if this worker still holds it, so a successor under
    /// the same name starts at once. Returns whether it was released.
    pub(crate) async fn release(&self, conn: &mut Conn) -> StoreResult<bool> {
        Ok(crate::store::scripts::release_if_held(conn, &self.key, &self.token).await?)
    }
}

/// `register.lua`'s reply: `{1, token}` or `{0, holder}`.
fn register_reply(reply: &Value) -> Option<Option<String>> {
    let Value::Array(v) = reply else { return None };
    match v.as_slice() {
        [Value::Int(1), _] => Some(None),
        [Value::Int(0), holder] => Some(Some(crate::store::stream::text(holder)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_replies() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let mine = Value::Array(vec![Value::Int(1), bulk("me")]);
        assert_eq!(register_reply(&mine), Some(None));
        let theirs = Value::Array(vec![Value::Int(0), bulk("h/1/x")]);
        assert_eq!(register_reply(&theirs), Some(Some("h/1/x".into())));
        assert_eq!(register_reply(&Value::Int(1)), None);
        assert_eq!(
            register_reply(&Value::Array(vec![Value::Int(2), bulk("x")])),
            None
        );
    }

    #[test]
    fn a_duplicate_sees_renewals_well_within_a_lifetime() {
        assert!(RENEW_EVERY * 3 <= LIFETIME / 3);
    }
}
