//! How `hitcount ingest` appends the hits a request brought: to the shard
//! [`Keys::shard_of_name`] picks for each name (as the Rust producer
//! does), one `ingest.lua` call per chunk of a shard's hits, each hit that
//! carries an `id` at most once within the de-duplication horizon. The
//! request is answered only when this returns: Redis holds its hits.
//!
//! The ids of pages (requests with an `Origin`, which carry no token) are
//! kept apart from the others' ([`Keys::ingest_page_id`]): a page cannot
//! claim the id a server will send. An id seen again with a different hit
//! is not appended either, and is reported ([`Appended::conflicts`]).
//!
//! A call is never retried once Redis may have run it (its reply lost):
//! the client is told Redis was unavailable and resends; the hits it gave
//! ids are then appended once, the others may be counted twice, which is
//! what ids are for. A `NOSCRIPT` (Redis restarted) is retried at once
//! after loading the scripts: the call did not run.

use std::time::Duration;

use redis::RedisError;

use crate::model::config::{LayoutArgs, StreamArgs};
use crate::model::event::json::JsonHit;
use crate::model::keys::Keys;
use crate::store::connect::{Client, Conn};
use crate::store::scripts::{load_all, INGEST};

/// Hits per script call: as the producer's batches, about 1.5 µs of Redis
/// time each, so one call stays well under a millisecond.
const CHUNK: usize = 250;
/// Time allowed for one Redis reply.
const REDIS_TIMEOUT: Duration = Duration::from_secs(5);

/// What Redis did with a request's hits.
#[derive(Debug, Default)]
pub(crate) struct Appended {
    /// The hits appended (the others' ids were seen within the horizon).
    pub appended: u64,
    /// The positions (in the hits given) of those whose id was seen with
    /// another hit (name, count, ts or value): not appended, and not the
    /// resend of a hit appended before.
    pub conflicts: Vec<usize>,
}

/// Whose ids a request's hits carry: a server's (a request without an
/// `Origin`) or a page's, kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ids {
    Server,
    Page,
}

/// A request's hits that Redis failed partway through.
pub(crate) struct Failed {
    /// Hits Redis took before (a call of them answered), those whose id it
    /// had seen included: none when it failed at the first call.
    pub taken: u64,
    /// What Redis did with those.
    pub done: Appended,
    /// What failed.
    pub error: RedisError,
}

/// Appends hits to the stream's shards on one shared connection.
pub(crate) struct Appender {
    client: Client,
    conn: tokio::sync::Mutex<Option<Conn>>,
    shards: Vec<Keys>,
    /// How long an id is remembered, in seconds.
    horizon_secs: u64,
}

impl Appender {
    /// An appender to `stream`'s shards (connected on first use, again
    /// after a connection error), remembering ids for `horizon_secs`.
    pub(crate) fn new(client: Client, stream: &StreamArgs, horizon_secs: u64) -> Appender {
        Appender {
            client,
            conn: tokio::sync::Mutex::new(None),
            shards: Keys::all_shards(&LayoutArgs::default(), stream, false),
            horizon_secs,
        }
    }

    /// The shared connection, opened now (scripts loaded) if there is
    /// none; whether it served calls before.
    async fn conn(&self) -> Result<(Conn, bool), RedisError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok((c.clone(), true));
        }
        let mut c = self.client.open(REDIS_TIMEOUT).await?;
        load_all(&mut c).await?;
        Ok((slot.insert(c).clone(), false))
    }

    /// Connects (loading the scripts) and pings: what `ingest` checks at
    /// start and its readiness probe asks.
    pub(crate) async fn check(&self) -> Result<(), RedisError> {
        let result = async {
            let (mut conn, _) = self.conn().await?;
            redis::cmd("PING").query_async::<()>(&mut conn).await
        }
        .await;
        self.failed_if(&result).await;
        result
    }

    /// Appends `hits`, whose ids are `ids`' (hits whose id was seen within
    /// the horizon are not appended again). Hits of one shard keep their
    /// order. A failure says what Redis took before it.
    pub(crate) async fn append(&self, hits: &[&JsonHit], ids: Ids) -> Result<Appended, Failed> {
        let mut by_shard: Vec<Vec<(usize, &JsonHit)>> = vec![Vec::new(); self.shards.len()];
        for (at, hit) in hits.iter().enumerate() {
            let k = Keys::shard_of_name(&hit.name, self.shards.len() as u32);
            by_shard[k as usize].push((at, hit));
        }
        let (mut taken, mut done) = (0, Appended::default());
        for (keys, hits) in self.shards.iter().zip(&by_shard) {
            for chunk in hits.chunks(CHUNK) {
                let result = self.call(keys, chunk, ids).await;
                self.failed_if(&result).await;
                match result {
                    Ok((n, conflicts)) => {
                        taken += chunk.len() as u64;
                        done.appended += n;
                        // Positions in the call, from 1.
                        let at = conflicts
                            .iter()
                            .filter_map(|&p| chunk.get(p.checked_sub(1)?));
                        done.conflicts.extend(at.map(|(at, _)| *at));
                    }
                    Err(error) => return Err(Failed { taken, done, error }),
                }
            }
        }
        done.conflicts.sort_unstable();
        Ok(done)
    }

    /// One chunk of one shard, retried once after a `NOSCRIPT`, and once on
    /// a new connection when the one it had served before was closed
    /// under it (a Redis restarted between two requests: the chunk was
    /// never sent). Answers the number appended and the positions in
    /// `hits` (from 1) of the conflicts.
    async fn call(
        &self,
        keys: &Keys,
        hits: &[(usize, &JsonHit)],
        ids: Ids,
    ) -> Result<(u64, Vec<usize>), RedisError> {
        let mut cmd_keys = vec![keys.stream.clone()];
        let mut args: Vec<Vec<u8>> = vec![self.horizon_secs.to_string().into_bytes()];
        for (_, hit) in hits {
            let (slot, earlier) = match (&hit.id, ids) {
                (Some(id), Ids::Server) => {
                    cmd_keys.push(keys.ingest_id(id));
                    (cmd_keys.len(), 0)
                }
                (Some(id), Ids::Page) => {
                    let digest = sha1_smol::Sha1::from(id.as_bytes()).digest();
                    cmd_keys.push(keys.ingest_page_id(&digest.to_string()));
                    // Where a version before page ids had their own keys
                    // kept it (see ingest.lua).
                    cmd_keys.push(keys.ingest_id(id));
                    (cmd_keys.len() - 1, cmd_keys.len())
                }
                (None, _) => (0, 0),
            };
            args.push(slot.to_string().into_bytes());
            args.push(earlier.to_string().into_bytes());
            args.push(hit.event());
        }
        let mut cmd = INGEST.evalsha(cmd_keys.len());
        cmd.arg(&cmd_keys).arg(&args);
        let (mut conn, used) = self.conn().await?;
        match cmd.query_async(&mut conn).await {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                load_all(&mut conn).await?;
                cmd.query_async(&mut conn).await
            }
            Err(e) if used && crate::store::error::never_sent(&e) => {
                *self.conn.lock().await = None;
                let (mut conn, _) = self.conn().await?;
                cmd.query_async(&mut conn).await
            }
            result => result,
        }
    }

    /// Forgets the connection after an error that was not Redis' answer
    /// (it may be broken), so the next call connects again.
    async fn failed_if<T>(&self, result: &Result<T, RedisError>) {
        if result.as_ref().is_err_and(|e| e.code().is_none()) {
            *self.conn.lock().await = None;
        }
    }
}
