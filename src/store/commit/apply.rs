//! Steps 2 and 3 of a window: its cells applied in chunks, each at most
//! once (`apply.lua` marks the chunk in the same script), and its entries
//! acknowledged, in one pipeline.

use redis::Value;

use super::{Committer, ACK_IDS, MARKER_TTL_AFTER_FINISH, MARKER_TTL_SECS};
use crate::model::aggregate::Cell;
use crate::model::keys::Keys;
use crate::model::known::KnownCache;
use crate::store::connect::{Conn, StoreError, StoreResult};
use crate::store::scripts::APPLY;
use crate::store::stream;

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
    /// Steps 2 and 3 in one pipeline: apply every chunk (at most once each),
    /// then acknowledge the ids. Returns the cells that failed to apply.
    /// Safe to repeat after any error. `finished` names a window finished by
    /// the last commit, whose marker may now expire soon. With `known`, ZADDs
    /// of members it trusts are left out and the members added are
    /// remembered; a chunk that finds it stale clears it and the step runs
    /// again with every ZADD (chunks already applied only replay).
    pub async fn apply_and_ack(
        &self,
        conn: &mut Conn,
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
