//! The carry's way into the counters, exactly once, on one Redis and on a
//! Redis Cluster.
//!
//! A window whose cells wait ([`crate::model::carry`]) is committed whole,
//! as every window is, then *not* applied and not acknowledged: its record
//! and its pending entries stay.
//! Some windows later, one script (`carry.lua`) records the sum of their
//! waiting cells (counts and statistics) as a window of its own, the
//! carry, and in the same step
//! marks each window *carried*. Then the carry is applied like any window
//! (chunks marked as they go), the windows' entries are acknowledged, and
//! the carry and the windows are finished.
//!
//! Why nothing counts twice or never: until the carry script runs, a
//! window's waiting cells are only in its own record, and whoever finishes
//! it (its worker after a resync, or another one after the claim time)
//! first *takes* it (`take.lua`, [`Committer::take`]) and then applies
//! them with it. Both scripts run in the record's slot, next to the
//! stream: the carry refuses a window that was taken, and taking refuses a
//! window that was carried (its finisher then applies none of its cells),
//! so they are applied through the window or through the carry, never
//! both, on a cluster too, where a window's applied markers are spread
//! over other slots. A window's
//! entries are acknowledged only once its cells are all applied, so a
//! drained group still means visible counters, and a resync (which finishes
//! this consumer's records before re-reading its pending entries) never
//! reads them again.

use redis::Value;

use super::{Committer, Sealed};
use crate::model::aggregate::{Cell, StatCell};
use crate::model::ids::IdList;
use crate::model::runs;
use crate::store::connect::{Conn, StoreError, StoreResult};
use crate::store::scripts::{CARRY, TAKE};

/// A window recorded, its chunks waiting in the carry, its entries pending.
#[derive(Debug, Clone)]
pub(crate) struct Deferred {
    /// The window id.
    pub window: String,
    /// Its entry ids, to acknowledge after the carry.
    pub ids: IdList,
    /// When its commit was sent: applied as itself, it is applied only
    /// within [`super::APPLY_GUARD`] of that.
    pub committed: std::time::Instant,
    /// Its oldest counted entry's time (unix ms), if any.
    pub oldest_ms: Option<i64>,
}

/// What taking a recorded window found (see [`Committer::take`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Finished already.
    Gone,
    /// The carry of this id took its cells first: apply none of them.
    Carried(String),
    /// Taken: this caller applies its cells.
    Mine,
}

/// What the carry script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CarryOutcome {
    /// Recorded (now or by an earlier try): apply it.
    Recorded,
    /// A window is gone, not this consumer's or partly finished by another
    /// worker: nothing was written; resync and finish them one by one.
    Gone(String),
    /// Another live worker holds this consumer name (its token given).
    Taken(String),
}

impl Committer {
    /// Records `carry` (its `ids` empty: it acknowledges nothing itself) as
    /// the sum of the waiting cells of `windows`; on a cluster in `group`
    /// (see [`super::apply`]), when it is applied with others.
    pub(crate) async fn carry(
        &self,
        conn: &mut Conn,
        carry: &Sealed<'_>,
        windows: &[Deferred],
        group: Option<&str>,
    ) -> StoreResult<CarryOutcome> {
        let k = &self.keys;
        // The cells first, alone, with a TTL (see carry.lua), in pieces of
        // at most PIECE_CELLS cells and about PIECE_BYTES, one HSET each: a
        // single field of hundreds of thousands of cells (12 MB) held Redis
        // 9 ms. The statistics cells likewise, in pieces of their own.
        let record = k.window(carry.window);
        let cell_bytes = |c: &Cell<'_>| c.name.len() + CELL_BYTES;
        let mut pieces = runs(carry.cells, PIECE_CELLS, PIECE_BYTES, cell_bytes);
        if pieces.is_empty() {
            // No cells are still one (empty) piece.
            pieces.push(&[]);
        }
        let stat_bytes =
            |c: &StatCell<'_>| c.name.len() + CELL_BYTES * (super::stats::weight(c) + 2);
        let stats = runs(carry.stats, PIECE_STAT_CELLS, PIECE_BYTES, stat_bytes);
        let mut pipe = redis::pipe();
        pipe.cmd("HSET")
            .arg(&record)
            .arg(PIECES_FIELD)
            .arg(pieces.len())
            .arg(STATS_PIECES_FIELD)
            .arg(stats.len())
            .ignore();
        // The TTL first: a worker that dies between the round trips below
        // leaves its megabytes for [`PIECES_TTL_MS`] at most (a day held
        // them a day). One that stops longer than that before the script
        // finds them gone: the script refuses, and a resync finishes the
        // windows one by one.
        pipe.cmd("PEXPIRE").arg(&record).arg(PIECES_TTL_MS).ignore();
        // A few pieces a round trip: encoded all at once, a carry of a
        // million cells held about twice its 25 MB in the worker.
        let stats_piece = |(i, piece): (usize, &&[StatCell<'_>])| -> StoreResult<_> {
            let blob = super::stats::encode(piece).map_err(|e| StoreError::Unexpected {
                what: "encoding a carry's statistics",
                reply: e,
            })?;
            Ok((piece_field(STATS, i), blob))
        };
        let fields = pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| Ok((piece_field(CELLS, i), super::encode_cells(piece)?)))
            .chain(stats.iter().enumerate().map(stats_piece));
        for (n, field) in fields.enumerate() {
            let (name, blob) = field?;
            pipe.cmd("HSET").arg(&record).arg(name).arg(blob).ignore();
            if (n + 1) % PIECES_AT_ONCE == 0 {
                pipe.query_async::<()>(conn).await?;
                pipe.clear();
            }
        }
        if !pipe.is_empty() {
            pipe.query_async::<()>(conn).await?;
        }
        // The windows' records are marked carried; their applied markers
        // are not touched (see carry.lua).
        let mut cmd = CARRY.evalsha(3 + windows.len());
        cmd.arg(k.windows())
            .arg(&record)
            .arg(k.consumer_registration(&self.consumer));
        for w in windows {
            cmd.arg(k.window(&w.window));
        }
        cmd.arg(&self.consumer)
            .arg(&self.token)
            .arg(self.lifetime_ms)
            .arg(carry.window)
            .arg(carry.chunk)
            .arg(windows.len())
            .arg(group.unwrap_or(""));
        for w in windows {
            cmd.arg(&w.window);
        }
        let reply: Value = cmd.query_async(conn).await?;
        let outcome =
            carry_outcome(&reply).ok_or_else(|| StoreError::unexpected("carry.lua", &reply))?;
        if outcome == CarryOutcome::Recorded {
            // The sum is applied only once a replica holds it and the
            // windows' marks.
            self.replicated(conn).await?;
        }
        Ok(outcome)
    }

    /// Takes a recorded window for finishing it (see `take.lua`): after
    /// this the carry never sums its cells.
    pub(crate) async fn take(&self, conn: &mut Conn, window: &str) -> StoreResult<Taken> {
        let reply: Value = TAKE
            .evalsha(1)
            .arg(self.keys.window(window))
            .query_async(conn)
            .await?;
        match super::status_and_detail(&reply) {
            Some(("gone", _)) => Ok(Taken::Gone),
            Some(("carried", carry)) => Ok(Taken::Carried(carry)),
            Some(("ok", _)) => {
                self.replicated(conn).await?;
                Ok(Taken::Mine)
            }
            _ => Err(StoreError::unexpected("take.lua", &reply)),
        }
    }
}

/// Cells per piece of a carry's recorded cells (about 1 MB of MessagePack,
/// under 1 ms for Redis to store or to send).
pub(crate) const PIECE_CELLS: usize = 50_000;
/// Statistics cells per piece: a statistics cell with a histogram of a
/// few dozen bins takes about ten times a count cell.
pub(crate) const PIECE_STAT_CELLS: usize = 5_000;
/// Bytes a piece of a carry's record holds at most (about, as it encodes):
/// cells with long names reach it long before [`PIECE_CELLS`] (50,000
/// cells of 4 KiB names made pieces of 200 MB, held twice while sent).
const PIECE_BYTES: usize = 1 << 20;
/// What a cell takes in a piece besides its name's bytes (MessagePack of
/// its precision, bucket and delta), and a statistics cell per unit of its
/// weight.
const CELL_BYTES: usize = 16;

/// Lifetime of a carry's pieces until its script makes them a record (it
/// then drops the TTL): ten minutes.
pub(crate) const PIECES_TTL_MS: u64 = 600_000;
/// Pieces written per round trip (about 4 MB).
const PIECES_AT_ONCE: usize = 4;
/// The record field holding how many pieces its cells are in; absent in a
/// window's record, whose cells are one piece.
pub(crate) const PIECES_FIELD: &str = "pieces";
/// The record field holding how many pieces its statistics cells are in
/// (0: none); absent in a window's record, whose statistics are one field.
pub(crate) const STATS_PIECES_FIELD: &str = "stats_pieces";
/// The fields of the cells' pieces.
pub(crate) const CELLS: &str = "cells";
/// The fields of the statistics cells' pieces.
pub(crate) const STATS: &str = "stats";

/// The record field of piece `i` of `what` ([`CELLS`] or [`STATS`]):
/// `cells`, then `cells:1`, `cells:2`...
pub(crate) fn piece_field(what: &str, i: usize) -> String {
    if i == 0 {
        what.to_string()
    } else {
        format!("{what}:{i}")
    }
}

/// The carry script's reply; `None` for any reply it never gives.
fn carry_outcome(reply: &Value) -> Option<CarryOutcome> {
    let (status, detail) = super::status_and_detail(reply)?;
    Some(match status {
        "ok" | "dup" => CarryOutcome::Recorded,
        "gone" => CarryOutcome::Gone(detail),
        "taken" => CarryOutcome::Taken(detail),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_carry_reply_class() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = |a: &str, b: &str| Value::Array(vec![bulk(a), bulk(b)]);
        assert_eq!(
            carry_outcome(&reply("ok", "c")),
            Some(CarryOutcome::Recorded)
        );
        assert_eq!(
            carry_outcome(&reply("dup", "c")),
            Some(CarryOutcome::Recorded)
        );
        assert_eq!(
            carry_outcome(&reply("gone", "w1")),
            Some(CarryOutcome::Gone("w1".into()))
        );
        assert_eq!(
            carry_outcome(&reply("taken", "h")),
            Some(CarryOutcome::Taken("h".into()))
        );
        assert_eq!(carry_outcome(&reply("fenced", "1")), None);
        assert_eq!(carry_outcome(&Value::Nil), None);
    }
}
