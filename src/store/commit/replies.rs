//! The replies of a window's apply scripts: each chunk's status (applied
//! now, a replay, or stale) and the cells Redis refused, read fail-closed
//! (a reply of any other shape is an error, never "applied").

use redis::Value;

use super::plan::{Apply, Chunk};
use super::stats;
use crate::model::aggregate::{Cell, StatCell};
use crate::store::connect::{joined, StoreError, StoreResult};
use crate::store::stream;

/// Apply scripts per pipeline: a step of more chunks (a carry) goes in
/// several round trips, so that its commands are never built all at once
/// (64 chunks of 500 cells: a few MiB in flight).
pub(super) const GROUP_CHUNKS: usize = 64;

/// A cell that Redis refused to increment (wrong type, overflow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
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
pub(super) fn parse_failures(
    chunk: &[Cell<'_>],
    stat_cells: &[StatCell<'_>],
    text: &[u8],
) -> Vec<Failure> {
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

/// A group of apply scripts sent on its own task: its replies.
pub(super) type InFlight = tokio::task::JoinHandle<redis::RedisResult<Vec<Value>>>;

/// The statuses of the group of chunks from number `at` on, once its
/// replies are in. EXPIREs are ignored: redis-rs leaves their replies out,
/// so replies line up with the group's chunks from the first.
pub(super) async fn group_statuses(
    chunks: &[Chunk],
    at: usize,
    sent: InFlight,
    step: &Apply<'_>,
) -> StoreResult<Vec<(i64, Vec<Failure>)>> {
    let replies = joined(sent, "an apply pipeline's task").await?;
    let part = &chunks[at..(at + GROUP_CHUNKS).min(chunks.len())];
    chunk_statuses(part, &replies, step)
}

/// Each chunk's status and failures from the replies to its scripts (the
/// first `chunks.len()` of `replies`).
pub(super) fn chunk_statuses(
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
