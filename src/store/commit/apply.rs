//! Steps 2 and 3 of a window: its cells applied in chunks, each at most
//! once (`apply.lua` marks the chunk in the same script), and its entries
//! acknowledged: one pipeline on one Redis. The window's statistics cells
//! (see [`super::stats`]) follow its count cells in the same chunks, each
//! weighing more.
//!
//! On a Redis Cluster a script may only touch one hash slot, so a chunk
//! holds the cells of one slot (cells come sorted by slot, see
//! [`sort_for_cluster`]) and its marker is a key in that slot (tagged with
//! [`crate::model::slots::tag_for_slot`]). The `known:` and `stats:known:`
//! ZADDs, in slots of their own, are sent after the chunk is applied (for a replayed chunk
//! too: the worker may have died in between); every command goes on its
//! own, all in flight at once.

use redis::{Cmd, Value};

pub use super::plan::Apply;
use super::plan::{plan, Chunk};
use super::{stats, Committer, ACK_IDS, MARKER_TTL_AFTER_FINISH, MARKER_TTL_SECS};
use crate::model::aggregate::{Cell, StatCell};
use crate::model::keys::Keys;
use crate::model::known::KnownCache;
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
    let stats_known = keys.stats_known();
    let prefix = keys.count_of_member("").len();
    let stats_prefix = keys.stats_of_member("").len();
    let mut cmds = Vec::with_capacity(chunks.len());
    let mut zadded = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let cells = &step.cells[chunk.cells.clone()];
        let stat_cells = &step.stats[chunk.stats.clone()];
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
        let mut cmd = APPLY.evalsha(3 + cells.len() + stat_cells.len());
        // On a cluster the script may not touch known: or stats:known:
        // (other slots): it gets its own marker there and no member to add.
        let (zset, stats_zset, stats_skip) = if step.by_slot {
            (&chunk.marker, &chunk.marker, 0)
        } else {
            (&known_key, &stats_known, stats_prefix)
        };
        cmd.arg(&chunk.marker).arg(zset).arg(stats_zset);
        for c in cells {
            cmd.arg(keys.count(c.precision, c.name));
        }
        for s in stat_cells {
            cmd.arg(keys.stats(s.precision, s.name));
        }
        let deadline = if deadline == i64::MAX { 0 } else { deadline };
        cmd.arg(i).arg(MARKER_TTL_SECS).arg(deadline).arg(prefix);
        cmd.arg(cells.len()).arg(stats_skip);
        for c in cells {
            cmd.arg(c.bucket).arg(c.delta);
        }
        let members = if step.by_slot {
            &[][..]
        } else {
            &zadded[first_zadd..]
        };
        cmd.arg(members.len());
        for &z in members {
            cmd.arg(z - base + 1);
        }
        stats::push_args(&mut cmd, stat_cells);
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

/// The failures of one chunk from its `cell_number<TAB>error` lines (and
/// `s<number><TAB>error` of its statistics cells).
fn parse_failures(chunk: &[Cell<'_>], stat_cells: &[StatCell<'_>], text: &[u8]) -> Vec<Failure> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|line| {
            let (idx, err) = line.split_once('\t')?;
            if let Some(number) = idx.strip_prefix('s') {
                return stats::failure(stat_cells, number, err);
            }
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
                    .any(|f| f.precision == c.precision && f.name == c.name && !stats::is_stats(f))
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
        let mut stat_members = Vec::new();
        for (chunk, (status, failures)) in chunks.iter().zip(statuses) {
            if *status >= 0 {
                stats::members(
                    &step.stats[chunk.stats.clone()],
                    failures,
                    &mut stat_members,
                );
            }
        }
        let mut cmds = zadds(&self.keys.known(), &members);
        cmds.extend(zadds(&self.keys.stats_known(), &stat_members));
        conn.query_each(cmds).await?;
        Ok(())
    }

    /// The marker keys of a window's apply step, to expire once finished.
    pub fn markers_of(&self, step: &Apply<'_>) -> Vec<String> {
        super::plan::markers(&plan(&self.keys, step))
    }
}

/// `ZADD zset 0 member ...` of `members`, at most [`ZADD_MEMBERS`] each.
fn zadds(zset: &str, members: &[String]) -> Vec<Cmd> {
    members
        .chunks(ZADD_MEMBERS)
        .map(|part| {
            let mut c = redis::cmd("ZADD");
            c.arg(zset);
            for m in part {
                c.arg(0).arg(m);
            }
            c
        })
        .collect()
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
            let cells = &step.cells[chunk.cells.clone()];
            let stat_cells = &step.stats[chunk.stats.clone()];
            Ok((status, parse_failures(cells, stat_cells, text)))
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
        let f = parse_failures(
            &cells,
            &[],
            b"2\tWRONGTYPE bad\nnonsense\n9\tout of range\ns1\tx",
        );
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].precision, f[0].name.as_str(), f[0].delta),
            (5, "b", 3)
        );
    }
}
