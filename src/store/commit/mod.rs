//! A window's way into the counters, exactly once.
//!
//! 1. **Commit** (one script next to the stream, `commit.lua`): check this
//!    consumer's fencing epoch, record the window (its entry ids, its
//!    aggregated cells and statistics cells), dead-letter its rejected
//!    entries. A claim by another
//!    worker bumps the epoch first, so a stalled worker's window is refused.
//! 2. **Apply** (`apply.lua`, the one script that writes counters and
//!    statistics, in chunks of [`CHUNK_CELLS`] cells, recorded with the
//!    window): each chunk is marked applied in the same script, so a
//!    replay does nothing. Statistics (sums, histograms: not idempotent) go
//!    through the same marked chunks, after the counts ([`stats`]). Then
//!    the `known:` members, by ZADDs, leaving out those that
//!    [`crate::model::known`] proves needless. A carry (the sum of several
//!    windows, [`carry`]) is applied the same way.
//! 3. **Acknowledge** the window's entries with XACK, in bounded commands,
//!    with the last ZADDs.
//! 4. **Finish**: dead-letter what failed to apply and delete the record
//!    (the commit script, called without a window).
//!
//! A worker that
//! dies between 1 and 4 leaves a record; any worker finishes it once it is
//! older than the claim time (idempotent: markers, XACK, delete-if-exists).
//! Entries of a consumer with an unfinished record are never claimed (the
//! record may hold them), so an entry is never in a record and claimed too.
//!
//! Markers live while their record does (a day's TTL as a safety net); once a
//! window is finished its marker is given [`MARKER_TTL_AFTER_FINISH`]. Any
//! worker applies a chunk only within [`APPLY_GUARD`] of having seen the
//! record exist, half that TTL, so no replay can outlive the marker.
//!
//! Only the commit touches the stream's keys and only the apply touches the
//! counters, so on Redis Cluster each step stays within one hash slot.
//!
//! This module commits and finishes ([`Committer::commit`],
//! [`Committer::finish`]); [`apply`] builds and runs steps 2 and 3;
//! [`records`] reads recorded windows back, finishes them for stopped
//! workers and quarantines those that cannot be read; [`dead`] says what
//! the dead letter of a rejected entry keeps.

use redis::Value;

use crate::model::aggregate::{Cell, StatCell};
use crate::model::config::WAIT_TIMEOUT_MS;
use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::store::connect::{Conn, StoreError, StoreResult};
use crate::store::scripts::COMMIT;
use crate::store::stream;

pub(crate) mod apply;
pub(crate) mod carry;
pub(crate) mod dead;
pub(crate) mod plan;
pub(crate) mod records;
pub(crate) mod replies;
pub(crate) mod stats;

pub(crate) use apply::{Failure, Sum};
pub(crate) use carry::{CarryOutcome, Deferred};
pub(crate) use dead::{Rejected, DEAD_LETTER_FIELD_BYTES};
pub(crate) use plan::sort_for_cluster;
pub(crate) use stats::{sort_stats_for_cluster, split_heavy};

/// Cells per apply script. Measured inside scripts on 100,000-name
/// workloads: ~2.6 µs per HINCRBY creating a hash, ~1 µs per ZADD member into
/// a `known:` of ~700k members, a few µs of Lua: 500 cells keep a chunk near
/// 3 ms in that worst case, leaving room under the 10 ms SLOWLOG bound on a
/// busy machine. Recorded with each window: recovery chunks alike.
pub(crate) const CHUNK_CELLS: usize = 500;
/// Ids per XACK command (~0.4 µs each: about 1 ms).
pub(crate) const ACK_IDS: usize = 2500;
/// Longest a step waits for a replica that is attached but has not yet
/// confirmed it (it lags behind); a master with no replica attached is
/// waited for [`WAIT_TIMEOUT_MS`] only.
pub(crate) const LAGGING_REPLICA_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Lifetime of an applied-chunk marker while its window is unfinished: a
/// safety net for windows nobody finishes (their owner died and no worker ran
/// for a day), not a bound on normal operation.
pub(crate) const MARKER_TTL_SECS: u64 = 86_400;
/// Lifetime of a marker once its window is finished, in seconds.
pub(crate) const MARKER_TTL_AFTER_FINISH: u64 = 600;
/// A worker applies a window's chunks only within this time of having seen
/// its record exist (at commit or when loading it for recovery).
pub(crate) const APPLY_GUARD: std::time::Duration =
    std::time::Duration::from_secs(MARKER_TTL_AFTER_FINISH / 2);

/// A window applied and acknowledged, waiting for its record to be deleted.
#[derive(Debug, Clone, Default)]
pub(crate) struct Finished {
    /// The window id.
    pub window: String,
    /// Cells that failed to apply, to dead-letter.
    pub failures: Vec<Failure>,
    /// Its applied markers, to expire soon now (see [`Committer::markers`]).
    pub markers: Vec<String>,
}

/// A window ready to commit, borrowed from the worker's buffers.
#[derive(Debug)]
pub(crate) struct Sealed<'a> {
    /// Unique window id.
    pub window: &'a str,
    /// Entry ids, space separated.
    pub ids: &'a str,
    /// Aggregated increments.
    pub cells: &'a [Cell<'a>],
    /// Aggregated statistics (hits with a value).
    pub stats: &'a [StatCell<'a>],
    /// Entries to dead-letter.
    pub rejected: &'a [Rejected],
    /// Cells per apply script (recorded, so that recovery chunks alike).
    pub chunk: usize,
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The window is recorded: apply and acknowledge it.
    Committed,
    /// The window was already recorded (a replay after a lost reply).
    Duplicate,
    /// Another worker claimed entries from this consumer: the window is
    /// dropped; its epoch is now the one given.
    Fenced(String),
    /// Another live worker registered this consumer name (its token given):
    /// this one must stop.
    Taken(String),
    /// Nothing to commit (only a finish).
    Nothing,
}

/// When a step of a window was last left unconfirmed by the replicas asked
/// for (see [`Committer::with_wait`]), in this process.
static UNCONFIRMED: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

/// How long an unconfirmed step is shown on `/readyz` (and how often it is
/// logged at most).
pub(crate) const UNCONFIRMED_SHOWN: std::time::Duration = std::time::Duration::from_secs(60);

/// How long ago a step of a window was last left unconfirmed by replicas,
/// if within [`UNCONFIRMED_SHOWN`]: a master without a replica (for
/// `/readyz`'s detail).
pub(crate) fn unconfirmed_recently() -> Option<std::time::Duration> {
    let last = *UNCONFIRMED.lock().unwrap_or_else(|p| p.into_inner());
    last.map(|t| t.elapsed())
        .filter(|ago| *ago < UNCONFIRMED_SHOWN)
}

/// Runs the commit protocol for one consumer.
#[derive(Debug, Clone)]
pub(crate) struct Committer {
    keys: Keys,
    consumer: String,
    dead_maxlen: u64,
    /// This worker's registration token for its consumer name.
    token: String,
    /// How long a registration lives without renewal.
    lifetime_ms: u64,
    /// On a cluster, (replicas, ms) to WAIT for after each step.
    wait: Option<(u32, u64)>,
}

impl Committer {
    /// A committer for `consumer`, with a registration token of its own
    /// (see [`Committer::with_registration`]).
    pub(crate) fn new(keys: Keys, consumer: String, dead_maxlen: u64) -> Self {
        Committer {
            keys,
            consumer,
            dead_maxlen,
            token: format!("{:016x}", rand::random::<u64>()),
            lifetime_ms: crate::model::keys::REGISTRATION_LIFETIME_MS,
            wait: None,
        }
    }

    /// On a Redis Cluster, waits for `replicas` replicas to confirm each
    /// step (the commit, each apply script and `known:` ZADD) before the
    /// next one runs: [`WAIT_TIMEOUT_MS`] at a time, on again while every
    /// master has a replica attached (one behind), up to
    /// [`LAGGING_REPLICA_WAIT`]: a failover of any master then loses no
    /// step a later step relied on. A step no replica confirmed in time is
    /// counted and logged, and counting goes on.
    pub(crate) fn with_wait(mut self, replicas: u32) -> Self {
        self.wait = (replicas > 0).then_some((replicas, WAIT_TIMEOUT_MS));
        self
    }

    /// On a cluster, waits for the replicas asked by [`Committer::with_wait`]
    /// to hold every write this connection sent so far: one `WAIT` per
    /// master, all at once (a WAIT holds up the commands behind it on its
    /// connection, so it goes after a step's writes, never between them),
    /// again while the replicas are attached but behind (see
    /// [`Committer::with_wait`]). A master whose replicas did not confirm
    /// in time is counted and logged, and counting goes on.
    async fn replicated(&self, conn: &mut Conn) -> StoreResult<()> {
        let Some((replicas, ms)) = self.wait.filter(|_| conn.is_cluster()) else {
            return Ok(());
        };
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(ms);
        let mut acked: i64 = wait.query_async(conn).await?;
        // Short: a replica behind (a busy machine), or a master without one.
        // Only the second may go on unconfirmed: a replica that is there
        // is waited for, up to LAGGING_REPLICA_WAIT, since a failover before
        // it holds this step could lose the step's writes for good.
        let started = std::time::Instant::now();
        while acked < i64::from(replicas)
            && started.elapsed() < LAGGING_REPLICA_WAIT
            && conn.fewest_replicas().await? >= replicas
        {
            acked = wait.query_async(conn).await?;
        }
        if acked < i64::from(replicas) {
            metrics().replication_unconfirmed.inc();
            let now = std::time::Instant::now();
            let previous = UNCONFIRMED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .replace(now);
            if previous.is_none_or(|t| t.elapsed() >= UNCONFIRMED_SHOWN) {
                tracing::warn!(
                    replicas,
                    acked,
                    wait_ms = ms,
                    "a master did not get a window's writes confirmed by a replica in time \
                     (none attached, or one more than 2 s behind): counting goes on, but a failover of that master now \
                     may lose or repeat a step of the window (logged at most once a minute)"
                );
            }
        }
        Ok(())
    }

    /// Commits under this registration token: a commit is refused once
    /// another live worker holds the consumer name.
    pub(crate) fn with_registration(mut self, token: &str, lifetime_ms: u64) -> Self {
        self.token = token.to_string();
        self.lifetime_ms = lifetime_ms;
        self
    }

    /// The keys in use.
    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The consumer it commits for.
    pub(crate) fn consumer(&self) -> &str {
        &self.consumer
    }

    /// This consumer's current epoch ("0" before any claim).
    pub(crate) async fn epoch(&self, conn: &mut Conn) -> StoreResult<String> {
        let e: Option<String> = redis::cmd("HGET")
            .arg(self.keys.epochs())
            .arg(&self.consumer)
            .query_async(conn)
            .await?;
        Ok(e.unwrap_or_else(|| "0".into()))
    }

    /// Step 1 (and 4 of the previous window): one script, one round trip.
    pub(crate) async fn commit(
        &self,
        conn: &mut Conn,
        epoch: &str,
        finish: Option<&Finished>,
        window: Option<&Sealed<'_>>,
    ) -> StoreResult<Outcome> {
        let k = &self.keys;
        let finish_key = finish.map_or_else(|| k.windows(), |f| k.window(&f.window));
        let window_key = window.map_or_else(|| k.windows(), |w| k.window(w.window));
        let mut cmd = COMMIT.evalsha(7);
        cmd.arg(&k.stream)
            .arg(k.epochs())
            .arg(k.windows())
            .arg(&k.dead)
            .arg(finish_key)
            .arg(&window_key)
            .arg(k.consumer_registration(&self.consumer));
        cmd.arg(&self.consumer)
            .arg(epoch)
            .arg(self.dead_maxlen)
            .arg(&self.token)
            .arg(self.lifetime_ms);
        match finish {
            Some(f) => {
                cmd.arg(&f.window).arg(f.failures.len());
                for x in &f.failures {
                    cmd.arg(&x.error)
                        .arg(x.precision)
                        .arg(&x.name)
                        .arg(x.bucket)
                        .arg(x.delta)
                        .arg(&f.window);
                }
            }
            None => {
                cmd.arg("").arg(0);
            }
        }
        // The window's fields first, alone, with a TTL (see commit.lua): a
        // megabyte of script arguments costs Redis more than the same
        // written by a plain HSET. One round trip with the script.
        let mut pipe = redis::pipe();
        match window {
            Some(w) => {
                let stats = stats::encode(w.stats).map_err(|e| StoreError::Unexpected {
                    what: "encoding a window's statistics",
                    reply: e,
                })?;
                pipe.cmd("HSET")
                    .arg(&window_key)
                    .arg("ids")
                    .arg(w.ids)
                    .arg("cells")
                    .arg(encode_cells(w.cells)?)
                    .ignore();
                if !stats.is_empty() {
                    pipe.cmd("HSET")
                        .arg(&window_key)
                        .arg("stats")
                        .arg(stats)
                        .ignore();
                }
                pipe.cmd("PEXPIRE")
                    .arg(&window_key)
                    .arg(MARKER_TTL_SECS * 1000)
                    .ignore();
                cmd.arg(w.window).arg(w.chunk);
                cmd.arg(w.rejected.len());
                for r in w.rejected {
                    cmd.arg(&r.id).arg(r.reason).arg(r.fields.len());
                    for (f, v) in &r.fields {
                        cmd.arg(f).arg(v);
                    }
                }
            }
            None => {
                cmd.arg("");
            }
        }
        pipe.add_command(cmd);
        let (reply,): (Value,) = pipe.query_async(conn).await?;
        if matches!(commit_outcome(&reply), Some(Outcome::Committed)) {
            self.replicated(conn).await?;
        }
        commit_outcome(&reply).ok_or_else(|| StoreError::unexpected("commit.lua", &reply))
    }

    /// Finishes a window alone (when no next window comes to carry it).
    pub(crate) async fn finish(&self, conn: &mut Conn, finished: &Finished) -> StoreResult<()> {
        self.commit(conn, "", Some(finished), None).await?;
        conn.query_each(apply::expire_markers(&finished.markers))
            .await?;
        Ok(())
    }
}

/// A `{status, detail}` reply of the commit and carry scripts, both UTF-8.
fn status_and_detail(reply: &Value) -> Option<(&str, String)> {
    let Value::Array(v) = reply else { return None };
    let [status, detail] = v.as_slice() else {
        return None;
    };
    let status = std::str::from_utf8(stream::bytes(status)?).ok()?;
    let detail = String::from_utf8(stream::bytes(detail)?.to_vec()).ok()?;
    Some((status, detail))
}

/// A window's cells as recorded: MessagePack of (precision, name, bucket,
/// delta) tuples, written straight from the cells (a carry may hold
/// hundreds of thousands: no copy of them on the way).
fn encode_cells(cells: &[Cell<'_>]) -> StoreResult<Vec<u8>> {
    let failed = |e: &dyn std::fmt::Display| StoreError::Unexpected {
        what: "encoding a window's cells",
        reply: e.to_string(),
    };
    let mut out = Vec::with_capacity(cells.len() * 24);
    rmp::encode::write_array_len(&mut out, cells.len() as u32).map_err(|e| failed(&e))?;
    for c in cells {
        rmp::encode::write_array_len(&mut out, 4).map_err(|e| failed(&e))?;
        rmp::encode::write_uint(&mut out, u64::from(c.precision)).map_err(|e| failed(&e))?;
        rmp::encode::write_str(&mut out, c.name).map_err(|e| failed(&e))?;
        rmp::encode::write_sint(&mut out, c.bucket).map_err(|e| failed(&e))?;
        rmp::encode::write_sint(&mut out, c.delta).map_err(|e| failed(&e))?;
    }
    Ok(out)
}

/// The commit script's reply: `{status, epoch or holder}`; `None` for any
/// reply it never gives.
fn commit_outcome(reply: &Value) -> Option<Outcome> {
    let (status, detail) = status_and_detail(reply)?;
    Some(match status {
        "ok" => Outcome::Committed,
        "dup" => Outcome::Duplicate,
        "fenced" => Outcome::Fenced(detail),
        "taken" => Outcome::Taken(detail),
        "none" => Outcome::Nothing,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn every_commit_reply_class() {
        let reply = |a: &str, b: &str| Value::Array(vec![bulk(a), bulk(b)]);
        assert_eq!(commit_outcome(&reply("ok", "3")), Some(Outcome::Committed));
        assert_eq!(commit_outcome(&reply("dup", "3")), Some(Outcome::Duplicate));
        assert_eq!(commit_outcome(&reply("none", "3")), Some(Outcome::Nothing));
        assert_eq!(
            commit_outcome(&reply("fenced", "4")),
            Some(Outcome::Fenced("4".into()))
        );
        assert_eq!(
            commit_outcome(&reply("taken", "h/1/x")),
            Some(Outcome::Taken("h/1/x".into()))
        );
        // Fail closed: anything else is not an outcome.
        assert_eq!(commit_outcome(&reply("applied", "3")), None);
        assert_eq!(commit_outcome(&Value::Int(1)), None);
        assert_eq!(commit_outcome(&Value::Array(vec![bulk("ok")])), None);
        assert_eq!(commit_outcome(&Value::Nil), None);
    }

    #[test]
    fn recorded_cells_decode_as_tuples() {
        let cells = [
            Cell {
                precision: 86400,
                name: "page:é",
                bucket: 1_700_000_000,
                delta: -3,
            },
            Cell {
                precision: 1,
                name: "",
                bucket: 0,
                delta: i64::MAX,
            },
        ];
        let blob = encode_cells(&cells).unwrap();
        let back: Vec<(u32, String, i64, i64)> = rmp_serde::from_slice(&blob).unwrap();
        let want: Vec<(u32, String, i64, i64)> = cells
            .iter()
            .map(|c| (c.precision, c.name.to_string(), c.bucket, c.delta))
            .collect();
        assert_eq!(back, want);
    }
}

// A real Redis comes from the test kit, built with the `cli` feature.
#[cfg(all(test, feature = "cli"))]
mod redis_tests;
