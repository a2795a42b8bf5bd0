//! Steps 2 and 3 of a window: its cells applied in chunks, each at most
//! once (`apply.lua` marks the chunk in the same script), and its entries
//! acknowledged: one pipeline on one Redis.
//!
//! On a Redis Cluster a script may only touch one hash slot, so a chunk
//! holds the cells of one slot (cells come sorted by slot, see
//! [`sort_for_cluster`]) and its marker is a key in that slot (tagged with
//! [`crate::model::slots::tag_for_slot`]). The `known:` ZADDs, in a slot of
//! their own, are sent after the chunk is applied (for a replayed chunk
//! too: the worker may have died in between); every command goes on its
//! own, all in flight at once.

use std::ops::Range;

use redis::{Cmd, Value};

use super::{Committer, ACK_IDS, MARKER_TTL_AFTER_FINISH, MARKER_TTL_SECS};
use crate::model::aggregate::Cell;
use crate::model::keys::Keys;
use crate::model::known::KnownCache;
use crate::model::slots::{slot, tag_for_slot};
use crate::store::connect::{Conn, StoreError, StoreResult};
use crate::store::scripts::APPLY;
use crate::store::stream;

/// Members per `ZADD known:` sent on its own (about 1 µs each).
const ZADD_MEMBERS: usize = 1000;

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

/// One window's apply step: what the apply scripts and XACKs need.
#[derive(Debug, Clone, Copy)]
pub struct Apply<'a> {
    /// The window id.
    pub window: &'a str,
    /// Its cells, in the order recorded (see [`plan`] for the chunks).
    pub cells: &'a [Cell<'a>],
    /// Its entry ids, space separated.
    pub ids: &'a str,
    /// Cells per apply script, as recorded with the window.
    pub chunk: usize,
    /// Chunks hold one Cluster hash slot each (on a cluster).
    pub by_slot: bool,
}

/// One apply script's share of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Its cells, as indices into the window's.
    pub cells: Range<usize>,
    /// The marker key that records it as applied.
    pub marker: String,
}

/// Sorts a window's cells for a cluster: by the hash slot of their counter,
/// keeping each counter's cells together and in order (stable).
pub fn sort_for_cluster(keys: &Keys, cells: &mut [Cell<'_>]) {
    cells.sort_by_cached_key(|c| slot(keys.count(c.precision, c.name).as_bytes()));
}

/// The chunks of a window: runs of at most `step.chunk` cells, also cut
/// where the counter's slot changes when `step.by_slot`. A function of the
/// recorded cells alone, so that a recovering worker chunks alike.
pub fn plan(keys: &Keys, step: &Apply<'_>) -> Vec<Chunk> {
    let size = step.chunk.max(1);
    if !step.by_slot {
        let marker = keys.applied_marker(step.window);
        return (0..step.cells.len())
            .step_by(size)
            .map(|start| Chunk {
                cells: start..(start + size).min(step.cells.len()),
                marker: marker.clone(),
            })
            .collect();
    }
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut current: Option<(u16, usize)> = None;
    for (i, c) in step.cells.iter().enumerate() {
        let s = slot(keys.count(c.precision, c.name).as_bytes());
        match current {
            Some((cs, start)) if cs == s && i - start < size => {}
            _ => {
                chunks.push(Chunk {
                    cells: i..i,
                    marker: keys.applied_marker_tagged(step.window, tag_for_slot(s)),
                });
                current = Some((s, i));
            }
        }
        chunks.last_mut().expect("pushed").cells.end = i + 1;
    }
    chunks
}

/// The distinct marker keys of a plan, to expire once the window is done.
pub fn markers(chunks: &[Chunk]) -> Vec<String> {
    let mut m: Vec<String> = chunks.iter().map(|c| c.marker.clone()).collect();
    m.sort_unstable();
    m.dedup();
    m
}

/// The apply scripts of a plan. With `known` (a cache and the current unix
/// second), the ZADDs of members it trusts are left out (see
/// [`crate::model::known`]). Returns the scripts and the indices of the
/// cells whose member is to be added (by the scripts on one Redis; on a
/// cluster by ZADDs sent after them).
fn apply_commands(
    keys: &Keys,
    step: &Apply<'_>,
    chunks: &[Chunk],
    known: Option<(&KnownCache, i64)>,
) -> (Vec<Cmd>, Vec<usize>) {
    let known_key = keys.known();
    let prefix = keys.count_of_member("").len();
    let mut cmds = Vec::with_capacity(chunks.len());
    let mut zadded = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let cells = &step.cells[chunk.cells.clone()];
        let base = chunk.cells.start;
        let first_zadd = zadded.len();
        let mut deadline = i64::MAX;
        let mut prev: Option<(u32, &str)> = None;
        for (j, c) in cells.iter().enumerate() {
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
        let mut cmd = APPLY.evalsha(2 + cells.len());
        // On a cluster the script may not touch known: (another slot): it
        // gets its own marker there and no member to add.
        let zset = if step.by_slot {
            &chunk.marker
        } else {
            &known_key
        };
        cmd.arg(&chunk.marker).arg(zset);
        for c in cells {
            cmd.arg(keys.count(c.precision, c.name));
        }
        let deadline = if deadline == i64::MAX { 0 } else { deadline };
        cmd.arg(i).arg(MARKER_TTL_SECS).arg(deadline).arg(prefix);
        for c in cells {
            cmd.arg(c.bucket).arg(c.delta);
        }
        if !step.by_slot {
            for &z in &zadded[first_zadd..] {
                cmd.arg(z - base + 1);
            }
        }
        cmds.push(cmd);
    }
    (cmds, zadded)
}

/// The commands that shorten finished windows' markers to their final TTL.
pub(super) fn expire_markers(markers: &[String]) -> Vec<Cmd> {
    markers
        .iter()
        .map(|m| {
            let mut c = redis::cmd("EXPIRE");
            c.arg(m).arg(MARKER_TTL_AFTER_FINISH);
            c
        })
        .collect()
}

/// Builds the pipeline of steps 2 and 3 on one Redis without sending it:
/// the EXPIREs of `finished`'s markers (replies ignored), one apply script
/// per chunk, then XACKs of at most [`ACK_IDS`] ids. Pure, so that
/// benchmarks and tests can build it without a connection.
pub fn apply_pipeline(
    keys: &Keys,
    step: &Apply<'_>,
    finished: &[String],
    known: Option<(&KnownCache, i64)>,
) -> (redis::Pipeline, Vec<usize>) {
    let chunks = plan(keys, step);
    let (cmds, zadded) = apply_commands(keys, step, &chunks, known);
    let mut pipe = redis::pipe();
    for c in expire_markers(finished) {
        pipe.add_command(c).ignore();
    }
    for c in cmds {
        pipe.add_command(c);
    }
    stream::ack_into(&mut pipe, keys, step.ids, ACK_IDS);
    (pipe, zadded)
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
    /// Steps 2 and 3: apply every chunk (at most once each), then
    /// acknowledge the ids. Returns the cells that failed to apply. Safe to
    /// repeat after any error. `finished` are the markers of the window the
    /// last commit finished, which may now expire soon. With `known`, ZADDs
    /// of members it trusts are left out and the members added are
    /// remembered; a chunk that finds it stale clears it and the step runs
    /// again with every ZADD (chunks already applied only replay).
    pub async fn apply_and_ack(
        &self,
        conn: &mut Conn,
        step: &Apply<'_>,
        finished: &[String],
        mut known: Option<&mut KnownCache>,
    ) -> StoreResult<Vec<Failure>> {
        let chunks = plan(&self.keys, step);
        loop {
            let now_s = crate::model::clock::unix_ms().div_euclid(1000);
            let trusted = known.as_deref().map(|k| (k, now_s));
            let (statuses, zadded) = if step.by_slot {
                let (cmds, zadded) = apply_commands(&self.keys, step, &chunks, trusted);
                let mut all = expire_markers(finished);
                let skip = all.len();
                all.extend(cmds);
                let replies = conn.query_each(all).await?;
                let statuses = chunk_statuses(&chunks, &replies[skip..], step)?;
                self.add_members(conn, step, &chunks, &statuses, &zadded)
                    .await?;
                self.replicated(conn).await?;
                // Acknowledged once counted, as on one Redis: a drained
                // group means visible counters.
                let mut acks = redis::pipe();
                stream::ack_into(&mut acks, &self.keys, step.ids, ACK_IDS);
                acks.query_async::<()>(conn).await?;
                (statuses, zadded)
            } else {
                let (pipe, zadded) = apply_pipeline(&self.keys, step, finished, trusted);
                let replies: Vec<Value> = pipe.query_async(conn).await?;
                // EXPIREs are ignored: redis-rs leaves their replies out, so
                // replies line up with the chunks from the first.
                (chunk_statuses(&chunks, &replies, step)?, zadded)
            };
            let mut failures = Vec::new();
            let mut stale = false;
            for (chunk, (status, chunk_failures)) in chunks.iter().zip(statuses) {
                if status < 0 {
                    stale = true;
                    continue;
                }
                if let (1, Some(k)) = (status, known.as_deref_mut()) {
                    for &z in zadded.iter().filter(|z| chunk.cells.contains(z)) {
                        let c = &step.cells[z];
                        k.wrote(c.precision, c.name, c.bucket);
                    }
                }
                failures.extend(chunk_failures);
            }
            match known.as_deref_mut() {
                Some(k) if stale => k.clear(),
                _ => return Ok(failures),
            }
        }
    }

    /// On a cluster, the `known:` members of the chunks just applied: those
    /// `zadded` names for chunks applied now, every member for replayed
    /// ones, none of the cells that failed; in commands of at most
    /// [`ZADD_MEMBERS`]. ZADD is idempotent, so a repeat is harmless.
    async fn add_members(
        &self,
        conn: &mut Conn,
        step: &Apply<'_>,
        chunks: &[Chunk],
        statuses: &[(i64, Vec<Failure>)],
        zadded: &[usize],
    ) -> StoreResult<()> {
        let mut members: Vec<String> = Vec::new();
        for (chunk, (status, failures)) in chunks.iter().zip(statuses) {
            let failed = |c: &Cell<'_>| {
                failures
                    .iter()
                    .any(|f| f.precision == c.precision && f.name == c.name)
            };
            let mut prev: Option<(u32, &str)> = None;
            for i in chunk.cells.clone() {
                let c = &step.cells[i];
                let first = prev != Some((c.precision, c.name));
                prev = Some((c.precision, c.name));
                let wanted = match status {
                    1 => zadded.binary_search(&i).is_ok(),
                    0 => first,
                    _ => false,
                };
                if wanted && !failed(c) {
                    members.push(Keys::member(c.precision, c.name));
                }
            }
        }
        let known = self.keys.known();
        let cmds = members
            .chunks(ZADD_MEMBERS)
            .map(|part| {
                let mut c = redis::cmd("ZADD");
                c.arg(&known);
                for m in part {
                    c.arg(0).arg(m);
                }
                c
            })
            .collect();
        conn.query_each(cmds).await?;
        Ok(())
    }

    /// The marker keys of a window's apply step, to expire once finished.
    pub fn markers_of(&self, step: &Apply<'_>) -> Vec<String> {
        markers(&plan(&self.keys, step))
    }
}

/// Each chunk's status and failures from the replies to its scripts (the
/// first `chunks.len()` of `replies`).
fn chunk_statuses(
    chunks: &[Chunk],
    replies: &[Value],
    step: &Apply<'_>,
) -> StoreResult<Vec<(i64, Vec<Failure>)>> {
    if replies.len() < chunks.len() {
        return Err(StoreError::Unexpected {
            what: "the apply step",
            reply: format!("{} replies for {} chunks", replies.len(), chunks.len()),
        });
    }
    chunks
        .iter()
        .zip(replies)
        .map(|(chunk, reply)| {
            let (status, text) = chunk_reply(reply)?;
            Ok((
                status,
                parse_failures(&step.cells[chunk.cells.clone()], text),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
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
}
