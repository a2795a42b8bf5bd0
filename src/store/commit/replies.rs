//! What an apply script's reply says: each chunk's status (applied now, a
//! replay, or stale), the cells Redis refused (wrong type, overflow), read
//! fail-closed (a reply of any other shape is an error, never "applied"),
//! and the `known:` members to add after it.

use std::ops::Range;

use redis::{Cmd, Value};

use super::plan::Script;
use super::stats;
use crate::model::aggregate::{Cell, StatCell};
use crate::model::keys::Keys;
use crate::store::connect::{StoreError, StoreResult};
use crate::store::stream;

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

/// Members per `ZADD known:` (about 1 µs each).
const ZADD_MEMBERS: usize = 1000;

/// Each part's status (1 applied now, 0 a replay, -1 stale: the script
/// wrote nothing) and failure text, from its script's reply; fail closed:
/// a reply of any other shape is an error, never "applied".
pub(super) fn part_statuses<'r>(
    script: &Script,
    reply: &'r Value,
) -> StoreResult<Vec<(i64, &'r [u8])>> {
    let bad = || StoreError::unexpected("apply.lua", reply);
    let Value::Array(v) = reply else {
        return Err(bad());
    };
    if let [Value::Int(-1), _] = v.as_slice() {
        return Ok(vec![(-1, &b""[..]); script.parts.len()]);
    }
    if v.len() != 2 * script.parts.len() {
        return Err(bad());
    }
    v.chunks(2)
        .map(|pair| match pair {
            [Value::Int(s @ 0..=1), text] => Ok((*s, stream::bytes(text).ok_or_else(bad)?)),
            _ => Err(bad()),
        })
        .collect()
}

/// The `known:` members to add once the script of the cells `range` (of
/// `cells`) replied `status`: for cells applied now (1) those the worker
/// left to add (`zadded`, by index), for a replay (0) every counter's (the
/// worker may have died before adding them), none of the cells that failed.
pub(super) fn members_after(
    cells: &[Cell<'_>],
    range: Range<usize>,
    status: i64,
    failures: &[Failure],
    zadded: impl Fn(usize) -> bool,
    out: &mut Vec<String>,
) {
    let failed = |c: &Cell<'_>| {
        failures
            .iter()
            .any(|f| f.precision == c.precision && f.name == c.name && !stats::is_stats(f))
    };
    let mut prev: Option<(u32, &str)> = None;
    for i in range {
        let c = &cells[i];
        let first = prev != Some((c.precision, c.name));
        prev = Some((c.precision, c.name));
        let wanted = match status {
            1 => zadded(i),
            0 => first,
            _ => false,
        };
        if wanted && !failed(c) {
            out.push(Keys::member(c.precision, c.name));
        }
    }
}

/// `ZADD zset 0 member ...` of `members`, at most [`ZADD_MEMBERS`] each.
pub(super) fn zadds(zset: &str, members: &[String]) -> Vec<Cmd> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::commit::plan::Part;

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

    #[test]
    fn every_reply_class_of_a_group_script() {
        let script = Script {
            markers: vec!["m".into()],
            parts: vec![
                Part {
                    sum: 0,
                    field: "0".into(),
                    cells: 0..1,
                    stats: 0..0,
                    marker: 0,
                },
                Part {
                    sum: 1,
                    field: "s:3".into(),
                    cells: 0..2,
                    stats: 0..0,
                    marker: 0,
                },
            ],
        };
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let ok = Value::Array(vec![Value::Int(1), bulk(""), Value::Int(0), bulk("1\tx")]);
        assert_eq!(
            part_statuses(&script, &ok).unwrap(),
            vec![(1, &b""[..]), (0, &b"1\tx"[..])]
        );
        let stale = Value::Array(vec![Value::Int(-1), bulk("")]);
        assert_eq!(
            part_statuses(&script, &stale).unwrap(),
            vec![(-1, &b""[..]); 2]
        );
        // Fail closed: too few parts, an unknown status, not an array.
        assert!(part_statuses(&script, &Value::Array(vec![Value::Int(1), bulk("")])).is_err());
        let odd = Value::Array(vec![Value::Int(2), bulk(""), Value::Int(1), bulk("")]);
        assert!(part_statuses(&script, &odd).is_err());
        assert!(part_statuses(&script, &Value::Nil).is_err());
    }
}
