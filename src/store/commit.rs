//! A window's way into the counters, exactly once.
//!
//! 1. **Commit** (one script next to the stream, `commit.lua`): check this
//!    consumer's fencing epoch, record the window (its entry ids and its
//!    aggregated cells), dead-letter its rejected entries. A claim by another
//!    worker bumps the epoch first, so a stalled worker's window is refused.
//! 2. **Apply** (`apply.lua`, in chunks of [`CHUNK_CELLS`] cells, recorded
//!    with the window): each chunk is marked applied in the same script, so a
//!    replay does nothing. ZADDs to `known:` that [`crate::model::known`] proves
//!    needless are left out.
//! 3. **Acknowledge** the window's entries with XACK, in bounded commands.
//! 4. **Finish**: folded into the next commit, dead-letter what failed to
//!    apply and delete the record.
//!
//! Steps 2 and 3 go in one pipeline: two round trips per window. A worker that
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

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::model::aggregate::Cell;
use crate::model::keys::Keys;
use crate::model::known::KnownCache;
use crate::model::metrics::metrics;
use crate::store::connect::{StoreError, StoreResult};
use crate::store::scripts::{APPLY, COMMIT, QUARANTINE};
use crate::store::stream;

/// Cells per apply script. Measured inside scripts on 100,000-name
/// workloads: ~2.6 µs per HINCRBY creating a hash, ~1 µs per ZADD member into
/// a `known:` of ~700k members, a few µs of Lua: 500 cells keep a chunk near
/// 3 ms in that worst case, leaving room under the 10 ms SLOWLOG bound on a
/// busy machine. Recorded with each window: recovery chunks alike.
pub const CHUNK_CELLS: usize = 500;
/// Ids per XACK command (~0.4 µs each: about 1 ms).
pub const ACK_IDS: usize = 2500;
/// Lifetime of an applied-chunk marker while its window is unfinished: a
/// safety net for windows nobody finishes (their owner died and no worker ran
/// for a day), not a bound on normal operation.
pub const MARKER_TTL_SECS: u64 = 86_400;
/// Lifetime of a marker once its window is finished, in seconds.
pub const MARKER_TTL_AFTER_FINISH: u64 = 600;
/// A worker applies a window's chunks only within this time of having seen
/// its record exist (at commit or when loading it for recovery).
pub const APPLY_GUARD: std::time::Duration =
    std::time::Duration::from_secs(MARKER_TTL_AFTER_FINISH / 2);

/// An entry that could not be decoded, on its way to the dead-letter stream.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// The entry ID.
    pub id: String,
    /// Why (a stable snake_case reason, also the metric label).
    pub reason: &'static str,
    /// The entry's original fields.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A cell that Redis refused to increment (wrong type, overflow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Redis' error text.
    pub error: String,
    /// The cell.
    pub precision: u32,
    /// Counter name.
    pub name: String,
    /// Bucket start, unix seconds.
    pub bucket: i64,
    /// The increment that was not applied.
    pub delta: i64,
}

/// A window applied and acknowledged, waiting for its record to be deleted.
#[derive(Debug, Clone, Default)]
pub struct Finished {
    /// The window id.
    pub window: String,
    /// Cells that failed to apply, to dead-letter.
    pub failures: Vec<Failure>,
}

/// A window ready to commit, borrowed from the worker's buffers.
#[derive(Debug)]
pub struct Sealed<'a> {
    /// Unique window id.
    pub window: &'a str,
    /// Entry ids, space separated.
    pub ids: &'a str,
    /// Aggregated increments.
    pub cells: &'a [Cell<'a>],
    /// Entries to dead-letter.
    pub rejected: &'a [Rejected],
    /// Cells per apply script (recorded, so that recovery chunks alike).
    pub chunk: usize,
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
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

/// A recorded window as read back for recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The window id.
    pub window: String,
    /// The consumer that committed it.
    pub owner: String,
    /// Commit time on the Redis clock, unix ms.
    pub created_ms: i64,
    /// Its entry ids, space separated.
    pub ids: String,
    /// Cells per apply script, as committed.
    pub chunk: usize,
}

/// A window record that cannot be read back, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupt {
    /// The window id.
    pub window: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Runs the commit protocol for one consumer.
#[derive(Debug, Clone)]
pub struct Committer {
    keys: Keys,
    consumer: String,
    dead_maxlen: u64,
    /// This worker's registration token for its consumer name.
    token: String,
    /// How long a registration lives without renewal.
    lifetime_ms: u64,
}

/// One window's apply step: what the apply scripts and XACKs need.
#[derive(Debug, Clone, Copy)]
pub struct Apply<'a> {
    /// The window id.
    pub window: &'a str,
    /// Its cells, in the order recorded (chunk `i` is cells
    /// `i * chunk .. (i + 1) * chunk`).
    pub cells: &'a [Cell<'a>],
    /// Its entry ids, space separated.
    pub ids: &'a str,
    /// Cells per apply script, as recorded with the window.
    pub chunk: usize,
}

/// Builds the pipeline of steps 2 and 3 without sending it: one apply
/// script per chunk of `step.chunk` cells, then XACKs of at most
/// [`ACK_IDS`] ids; first, when `finished` names a window, the EXPIRE that
/// shortens its marker (its reply is ignored). With `known` (a cache and the
/// current unix second), the ZADDs of members it trusts are left out
/// (see [`crate::model::known`]). Returns the pipeline and the indices of the cells
/// whose member each chunk adds. Pure, so that benchmarks and tests can
/// build it without a connection.
pub fn apply_pipeline(
    keys: &Keys,
    step: &Apply<'_>,
    finished: Option<&str>,
    known: Option<(&KnownCache, i64)>,
) -> (redis::Pipeline, Vec<usize>) {
    let marker = keys.applied_marker(step.window);
    let known_key = keys.known();
    let prefix = keys.count_of_member("").len();
    let mut pipe = redis::pipe();
    let mut zadded = Vec::new();
    if let Some(done) = finished {
        expire_marker_into(keys, &mut pipe, done);
    }
    for (i, chunk) in step.cells.chunks(step.chunk.max(1)).enumerate() {
        let base = i * step.chunk.max(1);
        let first_zadd = zadded.len();
        let mut deadline = i64::MAX;
        let mut prev: Option<(u32, &str)> = None;
        for (j, c) in chunk.iter().enumerate() {
            // Cells come grouped by counter: one member per group.
            if prev == Some((c.precision, c.name)) {
                continue;
            }
            prev = Some((c.precision, c.name));
            match known.and_then(|(k, now)| k.trusted_until(c.precision, c.name, now)) {
                Some(until) => deadline = deadline.min(until),
                None => zadded.push(base + j),
            }
        }
        let mut cmd = APPLY.evalsha(2 + chunk.len());
        cmd.arg(&marker).arg(&known_key);
        for c in chunk {
            cmd.arg(keys.count(c.precision, c.name));
        }
        let deadline = if deadline == i64::MAX { 0 } else { deadline };
        cmd.arg(i).arg(MARKER_TTL_SECS).arg(deadline).arg(prefix);
        for c in chunk {
            cmd.arg(c.bucket).arg(c.delta);
        }
        for &z in &zadded[first_zadd..] {
            cmd.arg(z - base + 1);
        }
        pipe.add_command(cmd);
    }
    stream::ack_into(&mut pipe, keys, step.ids, ACK_IDS);
    (pipe, zadded)
}

fn expire_marker_into(keys: &Keys, pipe: &mut redis::Pipeline, window: &str) {
    pipe.cmd("EXPIRE")
        .arg(keys.applied_marker(window))
        .arg(MARKER_TTL_AFTER_FINISH)
        .ignore();
}

/// An apply script's reply: `{status, failures}` (1 applied now, 0 a
/// replay, -1 stale). Anything else is an error: fail closed, never "applied".
fn chunk_reply(reply: &Value) -> StoreResult<(i64, &[u8])> {
    if let Value::Array(v) = reply {
        if let [Value::Int(status @ -1..=1), text] = v.as_slice() {
            if let Some(text) = stream::bytes(text) {
                return Ok((*status, text));
            }
        }
    }
    Err(StoreError::unexpected("apply.lua", reply))
}

/// The failures of one chunk from its `cell_number<TAB>error` lines.
fn parse_failures(chunk: &[Cell<'_>], text: &[u8]) -> Vec<Failure> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|line| {
            let (idx, err) = line.split_once('\t')?;
            let c = chunk.get(idx.parse::<usize>().ok()?.checked_sub(1)?)?;
            Some(Failure {
                error: err.to_string(),
                precision: c.precision,
                name: c.name.to_string(),
                bucket: c.bucket,
                delta: c.delta,
            })
        })
        .collect()
}

impl Committer {
    /// A committer for `consumer`, with a registration token of its own
    /// (see [`Committer::with_registration`]).
    pub fn new(keys: Keys, consumer: String, dead_maxlen: u64) -> Self {
        Committer {
            keys,
            consumer,
            dead_maxlen,
            token: format!("{:016x}", rand::random::<u64>()),
            lifetime_ms: 15_000,
        }
    }

    /// Commits under this registration token: a commit is refused once
    /// another live worker holds the consumer name.
    pub fn with_registration(mut self, token: &str, lifetime_ms: u64) -> Self {
        self.token = token.to_string();
        self.lifetime_ms = lifetime_ms;
        self
    }

    /// The keys in use.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// This consumer's current epoch ("0" before any claim).
    pub async fn epoch(&self, conn: &mut MultiplexedConnection) -> StoreResult<String> {
        let e: Option<String> = redis::cmd("HGET")
            .arg(self.keys.epochs())
            .arg(&self.consumer)
            .query_async(conn)
            .await?;
        Ok(e.unwrap_or_else(|| "0".into()))
    }

    /// Step 1 (and 4 of the previous window): one script, one round trip.
    pub async fn commit(
        &self,
        conn: &mut MultiplexedConnection,
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
            .arg(window_key)
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
        match window {
            Some(w) => {
                let cells: Vec<(u32, &str, i64, i64)> = w
                    .cells
                    .iter()
                    .map(|c| (c.precision, c.name, c.bucket, c.delta))
                    .collect();
                let blob = rmp_serde::to_vec(&cells).map_err(|e| StoreError::Unexpected {
                    what: "encoding a window's cells",
                    reply: e.to_string(),
                })?;
                cmd.arg(w.window)
                    .arg(w.ids)
                    .arg(blob)
                    .arg(w.chunk)
                    .arg(w.cells.len().div_ceil(w.chunk.max(1)));
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
        let reply: Value = cmd.query_async(conn).await?;
        commit_outcome(&reply).ok_or_else(|| StoreError::unexpected("commit.lua", &reply))
    }

    /// Steps 2 and 3 in one pipeline: apply every chunk (at most once each),
    /// then acknowledge the ids. Returns the cells that failed to apply.
    /// Safe to repeat after any error. `finished` names a window finished by
    /// the last commit, whose marker may now expire soon. With `known`, ZADDs
    /// of members it trusts are left out and the members added are
    /// remembered; a chunk that finds it stale clears it and the step runs
    /// again with every ZADD (chunks already applied only replay).
    pub async fn apply_and_ack(
        &self,
        conn: &mut MultiplexedConnection,
        step: &Apply<'_>,
        finished: Option<&str>,
        mut known: Option<&mut KnownCache>,
    ) -> StoreResult<Vec<Failure>> {
        loop {
            let now_s = crate::model::clock::unix_ms().div_euclid(1000);
            let (pipe, zadded) = apply_pipeline(
                &self.keys,
                step,
                finished,
                known.as_deref().map(|k| (k, now_s)),
            );
            let replies: Vec<Value> = pipe.query_async(conn).await?;
            // The marker's EXPIRE is ignored: redis-rs leaves its reply out, so
            // replies line up with the chunks from the first.
            let chunk = step.chunk.max(1);
            let chunks = step.cells.len().div_ceil(chunk);
            if replies.len() < chunks {
                return Err(StoreError::Unexpected {
                    what: "the apply pipeline",
                    reply: format!("{} replies for {chunks} chunks", replies.len()),
                });
            }
            let mut failures = Vec::new();
            let mut stale = false;
            for (i, (cells, reply)) in step.cells.chunks(chunk).zip(&replies).enumerate() {
                let (status, text) = chunk_reply(reply)?;
                if status < 0 {
                    stale = true;
                    continue;
                }
                if let (1, Some(k)) = (status, known.as_deref_mut()) {
                    let range = i * chunk..i * chunk + cells.len();
                    for &z in zadded.iter().filter(|z| range.contains(z)) {
                        let c = &step.cells[z];
                        k.wrote(c.precision, c.name, c.bucket);
                    }
                }
                failures.extend(parse_failures(cells, text));
            }
            match known.as_deref_mut() {
                Some(k) if stale => k.clear(),
                _ => return Ok(failures),
            }
        }
    }

    /// Shortens the marker of a finished window to its final TTL.
    pub fn expire_marker_into(&self, pipe: &mut redis::Pipeline, window: &str) {
        expire_marker_into(&self.keys, pipe, window);
    }

    /// Finishes a window alone (when no next window comes to carry it).
    pub async fn finish(
        &self,
        conn: &mut MultiplexedConnection,
        finished: &Finished,
    ) -> StoreResult<()> {
        self.commit(conn, "", Some(finished), None).await?;
        let mut pipe = redis::pipe();
        self.expire_marker_into(&mut pipe, &finished.window);
        Ok(pipe.query_async::<()>(conn).await?)
    }

    /// Windows recorded and not yet finished, oldest first; those that
    /// cannot be read back; and the Redis clock's current time in ms.
    pub async fn records(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> StoreResult<(Vec<Record>, Vec<Corrupt>, i64)> {
        let (ids, (secs, micros)): (Vec<String>, (i64, i64)) = redis::pipe()
            .cmd("ZRANGE")
            .arg(self.keys.windows())
            .arg(0)
            .arg(-1)
            .cmd("TIME")
            .query_async(conn)
            .await?;
        let now_ms = secs * 1000 + micros / 1000;
        if ids.is_empty() {
            return Ok((Vec::new(), Vec::new(), now_ms));
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET")
                .arg(self.keys.window(id))
                .arg("owner")
                .arg("created")
                .arg("ids")
                .arg("chunk");
        }
        let rows: Vec<Vec<Option<Vec<u8>>>> = pipe.query_async(conn).await?;
        let (mut records, mut corrupt) = (Vec::new(), Vec::new());
        for (window, row) in ids.into_iter().zip(rows) {
            match parse_record(&window, &row) {
                Ok(Some(r)) => records.push(r),
                // Finished meanwhile: its index entry goes with the next finish.
                Ok(None) => {}
                Err(reason) => corrupt.push(Corrupt { window, reason }),
            }
        }
        Ok((records, corrupt, now_ms))
    }

    /// Moves a record that cannot be read back to the dead-letter stream
    /// (see `quarantine.lua` for what becomes of its entries), logs it once
    /// and counts it. Returns whether this call moved it.
    pub async fn quarantine(
        &self,
        conn: &mut MultiplexedConnection,
        bad: &Corrupt,
    ) -> StoreResult<bool> {
        let applied: i64 = redis::cmd("HLEN")
            .arg(self.keys.applied_marker(&bad.window))
            .query_async(conn)
            .await?;
        let record = self.keys.window(&bad.window);
        let reply: Value = QUARANTINE
            .evalsha(4)
            .arg(&record)
            .arg(self.keys.windows())
            .arg(&self.keys.dead)
            .arg(&self.keys.stream)
            .arg(&bad.window)
            .arg(&bad.reason)
            .arg(self.dead_maxlen)
            .arg(&self.keys.group)
            .arg(applied)
            .query_async(conn)
            .await?;
        let (moved, acked) = match &reply {
            Value::Array(v) => match v.as_slice() {
                [Value::Int(m @ 0..=1), Value::Int(a)] => (*m == 1, *a),
                _ => return Err(StoreError::unexpected("quarantine.lua", &reply)),
            },
            _ => return Err(StoreError::unexpected("quarantine.lua", &reply)),
        };
        if moved {
            metrics().records_quarantined.inc();
            tracing::error!(key = %record, reason = %bad.reason, applied_chunks = applied,
                acknowledged = acked, dead_stream = %self.keys.dead,
                "a window record could not be read back: moved to the dead-letter stream");
        }
        Ok(moved)
    }

    /// Finishes a recorded window on behalf of whoever committed it: applies
    /// its chunks (markers make this a no-op for chunks already applied),
    /// acknowledges its ids, dead-letters failures and deletes the record.
    /// Returns false when the record was already gone.
    /// `seen` is when the record was loaded: past [`APPLY_GUARD`] it is left
    /// to a later pass.
    pub async fn recover(
        &self,
        conn: &mut MultiplexedConnection,
        record: &Record,
        seen: std::time::Instant,
    ) -> StoreResult<bool> {
        let blob: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(self.keys.window(&record.window))
            .arg("cells")
            .query_async(conn)
            .await?;
        let Some(blob) = blob else { return Ok(false) };
        let owned = match decode_cells(&blob) {
            Ok(cells) => cells,
            Err(reason) => {
                let bad = Corrupt {
                    window: record.window.clone(),
                    reason,
                };
                self.quarantine(conn, &bad).await?;
                return Ok(false);
            }
        };
        let cells: Vec<Cell<'_>> = owned
            .iter()
            .map(|(precision, name, bucket, delta)| Cell {
                precision: *precision,
                name,
                bucket: *bucket,
                delta: *delta,
            })
            .collect();
        if seen.elapsed() > APPLY_GUARD {
            return Ok(false);
        }
        let failures = self
            .apply_and_ack(
                conn,
                &Apply {
                    window: &record.window,
                    cells: &cells,
                    ids: &record.ids,
                    chunk: record.chunk,
                },
                None,
                None,
            )
            .await?;
        let finished = Finished {
            window: record.window.clone(),
            failures,
        };
        self.finish(conn, &finished).await?;
        tracing::info!(window = %record.window, owner = %record.owner,
            first = record.ids.split(' ').next().unwrap_or(""),
            last = record.ids.rsplit(' ').next().unwrap_or(""),
            "finished a window left by a stopped worker");
        Ok(true)
    }
}

/// The commit script's reply: `{status, epoch or holder}`; `None` for any
/// reply it never gives.
fn commit_outcome(reply: &Value) -> Option<Outcome> {
    let Value::Array(v) = reply else { return None };
    let [status, detail] = v.as_slice() else {
        return None;
    };
    let status = std::str::from_utf8(stream::bytes(status)?).ok()?;
    let detail = String::from_utf8(stream::bytes(detail)?.to_vec()).ok()?;
    Some(match status {
        "ok" => Outcome::Committed,
        "dup" => Outcome::Duplicate,
        "fenced" => Outcome::Fenced(detail),
        "taken" => Outcome::Taken(detail),
        "none" => Outcome::Nothing,
        _ => return None,
    })
}

/// A record's fields as read by [`Committer::records`]: `Ok(None)` when the
/// record is gone (every field missing), `Err` with the reason when some are
/// missing or do not parse.
fn parse_record(window: &str, row: &[Option<Vec<u8>>]) -> Result<Option<Record>, String> {
    if row.iter().all(Option::is_none) {
        return Ok(None);
    }
    let field = |i: usize, name: &str| -> Result<String, String> {
        let raw = row
            .get(i)
            .and_then(|f| f.as_deref())
            .ok_or_else(|| format!("field {name} is missing"))?;
        String::from_utf8(raw.to_vec()).map_err(|_| format!("field {name} is not UTF-8"))
    };
    let number = |i: usize, name: &str| -> Result<i64, String> {
        let text = field(i, name)?;
        text.parse::<i64>()
            .map_err(|_| format!("field {name} is not a number: {text:?}"))
    };
    let chunk = number(3, "chunk")?;
    if chunk < 1 {
        return Err(format!("field chunk must be at least 1, not {chunk}"));
    }
    Ok(Some(Record {
        window: window.to_string(),
        owner: field(0, "owner")?,
        created_ms: number(1, "created")?,
        ids: field(2, "ids")?,
        chunk: chunk as usize,
    }))
}

/// A record's cells, as committed (MessagePack of (precision, name, bucket,
/// delta) tuples), or why they do not decode.
fn decode_cells(blob: &[u8]) -> Result<Vec<(u32, String, i64, i64)>, String> {
    rmp_serde::from_slice(blob).map_err(|e| format!("cells do not decode: {e}"))
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
    fn every_apply_reply_class() {
        let reply = |s: i64, t: &str| Value::Array(vec![Value::Int(s), bulk(t)]);
        assert_eq!(chunk_reply(&reply(1, "")).unwrap(), (1, &b""[..]));
        assert_eq!(chunk_reply(&reply(0, "")).unwrap(), (0, &b""[..]));
        assert_eq!(chunk_reply(&reply(-1, "")).unwrap(), (-1, &b""[..]));
        assert_eq!(
            chunk_reply(&reply(1, "2\tWRONGTYPE")).unwrap().1,
            b"2\tWRONGTYPE"
        );
        // Never taken as applied: an unknown status, a bare number, nil.
        assert!(chunk_reply(&reply(2, "")).is_err());
        assert!(chunk_reply(&Value::Int(1)).is_err());
        assert!(chunk_reply(&Value::Nil).is_err());
        assert!(chunk_reply(&Value::Array(vec![Value::Int(1)])).is_err());
    }

    #[test]
    fn failures_name_their_cells() {
        let cells = [
            Cell {
                precision: 1,
                name: "a",
                bucket: 10,
                delta: 2,
            },
            Cell {
                precision: 5,
                name: "b",
                bucket: 10,
                delta: 3,
            },
        ];
        let f = parse_failures(&cells, b"2\tWRONGTYPE bad\nnonsense\n9\tout of range");
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].precision, f[0].name.as_str(), f[0].delta),
            (5, "b", 3)
        );
    }

    #[test]
    fn records_that_cannot_be_read_back_are_named() {
        let row = |v: [Option<&str>; 4]| -> Vec<Option<Vec<u8>>> {
            v.iter().map(|f| f.map(|s| s.as_bytes().to_vec())).collect()
        };
        let good = parse_record(
            "w",
            &row([Some("c1"), Some("5"), Some("1-0 2-0"), Some("500")]),
        );
        assert_eq!(good.unwrap().unwrap().chunk, 500);
        assert_eq!(parse_record("w", &row([None, None, None, None])), Ok(None));
        let missing = parse_record("w", &row([Some("c1"), None, Some("1-0"), Some("500")]));
        assert!(missing.unwrap_err().contains("created"));
        let nan = parse_record("w", &row([Some("c1"), Some("5"), Some("1-0"), Some("x")]));
        assert!(nan.unwrap_err().contains("chunk"));
        let zero = parse_record("w", &row([Some("c1"), Some("5"), Some("1-0"), Some("0")]));
        assert!(zero.is_err());
        assert!(decode_cells(b"\xc1garbage").is_err());
        let blob = rmp_serde::to_vec(&vec![(60u32, "a", 0i64, 2i64)]).unwrap();
        assert_eq!(
            decode_cells(&blob).unwrap(),
            vec![(60, "a".to_string(), 0, 2)]
        );
    }
}
