//! Recorded windows read back: for recovery (a stopped worker's windows
//! are finished by another), and quarantine of records that cannot be read
//! (moved to the dead-letter stream, see `quarantine.lua`).

use redis::Value;

use super::carry::{piece_field, Taken, CELLS, PIECES_FIELD, STATS, STATS_PIECES_FIELD};
use super::{stats, Committer, Finished, Sum, APPLY_GUARD};
use crate::model::aggregate::Cell;
use crate::model::metrics::metrics;
use crate::store::connect::{Conn, StoreError, StoreResult};
use crate::store::scripts::QUARANTINE;

/// A recorded window as read back for recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The window id.
    pub window: String,
    /// The consumer that committed it.
    pub owner: String,
    /// Commit time on the Redis clock, unix ms.
    pub created_ms: i64,
    /// Cells per apply script, as committed.
    pub chunk: usize,
    /// A carry applied with others on a cluster: its group (see
    /// [`super::apply`]).
    pub group: Option<String>,
}

/// A window record that cannot be read back, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Corrupt {
    /// The window id.
    pub window: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Committer {
    /// Windows recorded and not yet finished, oldest first; those that
    /// cannot be read back; and the Redis clock's current time in ms.
    pub(crate) async fn records(
        &self,
        conn: &mut Conn,
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
            pipe.add_command(self.record_fields(id));
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

    /// The fields [`parse_record`] reads of `window`'s record.
    fn record_fields(&self, window: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.keys.window(window))
            .arg("owner")
            .arg("created")
            .arg("chunk")
            .arg("group");
        cmd
    }

    /// `window`'s record: `Ok(None)` when it is finished, `Err` when it
    /// cannot be read back (the next pass quarantines it).
    async fn record(
        &self,
        conn: &mut Conn,
        window: &str,
    ) -> StoreResult<Result<Option<Record>, String>> {
        let row: Vec<Option<Vec<u8>>> = self.record_fields(window).query_async(conn).await?;
        Ok(parse_record(window, &row))
    }

    /// Moves a record that cannot be read back to the dead-letter stream
    /// (see `quarantine.lua` for what becomes of its entries), logs it once
    /// and counts it. Returns whether this call moved it.
    pub(crate) async fn quarantine(&self, conn: &mut Conn, bad: &Corrupt) -> StoreResult<bool> {
        let applied: i64 = if conn.is_cluster() {
            // The cells that would name the slots do not decode: look in
            // every slot (rare; one EXISTS per slot, all in flight).
            let mut cmd = redis::cmd("EXISTS");
            for s in 0..crate::model::slots::SLOTS {
                cmd.arg(
                    self.keys
                        .applied_marker_tagged(&bad.window, crate::model::slots::tag_for_slot(s)),
                );
            }
            cmd.query_async(conn).await?
        } else {
            redis::cmd("HLEN")
                .arg(self.keys.applied_marker(&bad.window))
                .query_async(conn)
                .await?
        };
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

    /// Finishes a recorded window on behalf of whoever committed it: takes
    /// it (see [`Committer::take`]), applies its chunks (markers make this a
    /// no-op for chunks already applied; none when a carry took its
    /// cells: that carry is finished first, if it is still recorded),
    /// acknowledges its ids, dead-letters failures and deletes the record.
    /// Returns false when the record was already gone.
    /// `seen` is when the record was loaded: past [`APPLY_GUARD`] it is left
    /// to a later pass, with an error.
    pub(crate) async fn recover(
        &self,
        conn: &mut Conn,
        record: &Record,
        seen: std::time::Instant,
    ) -> StoreResult<bool> {
        match self.take(conn, &record.window).await? {
            Taken::Gone => return Ok(false),
            Taken::Carried(carry) => {
                // Its cells are the carry's, a record of its own: they are
                // in the counters once that record is finished. Until then
                // its entries stay pending (acknowledged, they would say
                // counted), so the carry goes first. A carry that cannot be
                // read back goes to the dead-letter stream, cells and all
                // (the quarantine): nothing of the window is left to apply.
                if let Ok(Some(carry)) = self.record(conn, &carry).await? {
                    Box::pin(self.recover(conn, &carry, seen)).await?;
                }
                // Only its entries are left to acknowledge. None of its
                // chunks was applied: it has no marker to shorten.
                let ids: Option<String> = redis::cmd("HGET")
                    .arg(self.keys.window(&record.window))
                    .arg("ids")
                    .query_async(conn)
                    .await?;
                let Some(ids) = ids else {
                    return self.ids_missing(conn, record).await;
                };
                conn.query_each(self.acks(&ids)).await?;
                let done = Finished {
                    window: record.window.clone(),
                    failures: Vec::new(),
                    markers: Vec::new(),
                };
                self.finish(conn, &done).await?;
                tracing::info!(window = %record.window, owner = %record.owner,
                    "finished a window whose cells a stopped worker's carry holds");
                return Ok(true);
            }
            Taken::Mine => {}
        }
        let key = self.keys.window(&record.window);
        type Fields = (Option<String>, Option<usize>, Option<usize>);
        let (ids, pieces, stats_pieces): Fields = redis::cmd("HMGET")
            .arg(&key)
            .arg("ids")
            .arg(PIECES_FIELD)
            .arg(STATS_PIECES_FIELD)
            .query_async(conn)
            .await?;
        // A carry's cells come in pieces: one HGET each (a reply of ~1 MB);
        // a window's are one piece, its statistics one field.
        let mut fields = redis::pipe();
        let pieces = pieces.unwrap_or(1);
        for i in 0..pieces {
            fields.cmd("HGET").arg(&key).arg(piece_field(CELLS, i));
        }
        for i in 0..stats_pieces.unwrap_or(1) {
            fields.cmd("HGET").arg(&key).arg(piece_field(STATS, i));
        }
        let mut blobs: Vec<Option<Vec<u8>>> = fields.query_async(conn).await?;
        let stats_blobs = blobs.split_off(pieces.min(blobs.len()));
        if blobs.first().is_none_or(Option::is_none) {
            return Ok(false);
        }
        let Some(ids) = ids else {
            return self.ids_missing(conn, record).await;
        };
        let decoded = blobs
            .into_iter()
            .try_fold(Vec::new(), |mut all, piece| {
                let piece = piece.ok_or_else(|| "a piece of its cells is missing".to_string())?;
                all.extend(decode_cells(&piece)?);
                Ok::<_, String>(all)
            })
            .and_then(|c| {
                let mut owned = stats::OwnedStats::default();
                for piece in stats_blobs {
                    // A window without statistics has no field at all.
                    if piece.is_none() && stats_pieces.is_some() {
                        return Err("a piece of its statistics is missing".to_string());
                    }
                    owned.0.extend(stats::decode(piece.as_deref())?.0);
                }
                Ok((c, owned))
            });
        let (owned, owned_stats) = match decoded {
            Ok(both) => both,
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
        let stat_cells = owned_stats.cells();
        if seen.elapsed() > APPLY_GUARD {
            // Left as it is, not reported done: a resync that went on would
            // re-read the record's entries, still pending, and count them
            // again beside it.
            return Err(StoreError::Guard(APPLY_GUARD));
        }
        let sum = Sum {
            id: &record.window,
            group: record.group.as_deref(),
            cells: &cells,
            stats: &stat_cells,
            chunk: record.chunk,
        };
        let acks = self.acks(&ids);
        let failures = self.apply(conn, &[sum], None, acks).await?.remove(0);
        // A carry of a group leaves the group's markers to their TTL (other
        // sums of the group may need them): only its statistics' own.
        let own = Sum {
            group: None,
            cells: if sum.group.is_some() { &[] } else { &cells },
            ..sum
        };
        let finished = Finished {
            window: record.window.clone(),
            failures,
            markers: self.markers(&[own], conn.is_cluster()),
        };
        self.finish(conn, &finished).await?;
        tracing::info!(window = %record.window, owner = %record.owner,
            group = record.group.as_deref(),
            first = ids.split(' ').next().unwrap_or(""),
            last = ids.rsplit(' ').next().unwrap_or(""),
            "finished a window left by a stopped worker");
        Ok(true)
    }

    /// A record taken for recovery has no entry ids: it cannot be finished,
    /// so it goes to the dead-letter stream like any record that cannot be
    /// read back. Returns false: nothing was finished.
    async fn ids_missing(&self, conn: &mut Conn, record: &Record) -> StoreResult<bool> {
        let bad = Corrupt {
            window: record.window.clone(),
            reason: "field ids is missing".into(),
        };
        self.quarantine(conn, &bad).await?;
        Ok(false)
    }
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
    let chunk = number(2, "chunk")?;
    if chunk < 1 {
        return Err(format!("field chunk must be at least 1, not {chunk}"));
    }
    Ok(Some(Record {
        window: window.to_string(),
        owner: field(0, "owner")?,
        created_ms: number(1, "created")?,
        chunk: chunk as usize,
        group: row
            .get(3)
            .and_then(|g| g.as_deref())
            .map(|g| String::from_utf8_lossy(g).into_owned()),
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

    #[test]
    fn records_that_cannot_be_read_back_are_named() {
        let row = |v: [Option<&str>; 4]| -> Vec<Option<Vec<u8>>> {
            v.iter().map(|f| f.map(|s| s.as_bytes().to_vec())).collect()
        };
        let good = parse_record("w", &row([Some("c1"), Some("5"), Some("500"), Some("g")]));
        let good = good.unwrap().unwrap();
        assert_eq!((good.chunk, good.group.as_deref()), (500, Some("g")));
        assert_eq!(parse_record("w", &row([None, None, None, None])), Ok(None));
        let missing = parse_record("w", &row([Some("c1"), None, Some("500"), None]));
        assert!(missing.unwrap_err().contains("created"));
        let nan = parse_record("w", &row([Some("c1"), Some("5"), Some("x"), None]));
        assert!(nan.unwrap_err().contains("chunk"));
        let zero = parse_record("w", &row([Some("c1"), Some("5"), Some("0"), None]));
        assert!(zero.is_err());
        assert!(decode_cells(b"\xc1garbage").is_err());
        let blob = rmp_serde::to_vec(&vec![(60u32, "a", 0i64, 2i64)]).unwrap();
        assert_eq!(
            decode_cells(&blob).unwrap(),
            vec![(60, "a".to_string(), 0, 2)]
        );
    }
}
