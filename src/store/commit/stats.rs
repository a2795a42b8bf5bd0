//! A window's statistics (from hits with a value) on their way into
//! `stats:PREC:NAME`: how they are recorded with the window (so recovery
//! applies them too), how much of an apply script a statistics cell takes,
//! and its arguments to `apply.lua` (which writes them under the chunk's
//! marker, with the counts).
//!
//! Numbers go to Redis as the shortest text that reads back as the same
//! `f64` (plain or with an exponent: [`decimal`]), which Lua's `tonumber`
//! reads back exactly, so min and max are exact.

use std::collections::BTreeMap;

use redis::Cmd;

use super::Failure;
use crate::model::aggregate::StatCell;
use crate::model::keys::Keys;
use crate::model::slots::slot;
use crate::model::stats::{HistBucket, Summary};

/// Share of an apply script's [`CHUNK_CELLS`](super::CHUNK_CELLS) budget
/// one statistics cell takes before its histogram: the read of its fields,
/// the sums formatted in Lua, one HSET of count, sums, min and max.
pub(crate) use crate::model::stats::STAT_CELL_WEIGHT;

/// A statistics cell as recorded with its window (MessagePack tuple):
/// precision, name, bucket, count, sum, sum of squares, min, max, and the
/// histogram as (field suffix, count) pairs.
type Recorded<S> = (u32, S, i64, i64, f64, f64, f64, f64, Vec<(String, i64)>);

/// A window's statistics cells read back from its record, owning what the
/// [`StatCell`]s borrow.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OwnedStats(pub Vec<(u32, String, i64, Summary)>);

impl OwnedStats {
    /// The cells, borrowing from this.
    pub(crate) fn cells(&self) -> Vec<StatCell<'_>> {
        self.0
            .iter()
            .map(|(precision, name, bucket, summary)| StatCell {
                precision: *precision,
                name,
                bucket: *bucket,
                summary,
            })
            .collect()
    }
}

/// How much of an apply script's budget a statistics cell takes: one
/// `HINCRBY` per histogram field on top of [`STAT_CELL_WEIGHT`].
pub(crate) fn weight(cell: &StatCell<'_>) -> usize {
    STAT_CELL_WEIGHT + cell.summary.histogram.len()
}

/// Sorts a window's statistics cells for a cluster: by the hash slot of
/// their `stats:` key, each key's cells together and in order (stable).
pub(crate) fn sort_stats_for_cluster(keys: &Keys, stats: &mut [StatCell<'_>]) {
    stats.sort_by_cached_key(|s| slot(keys.stats(s.precision, s.name).as_bytes()));
}

/// The record's `stats` field: empty when the window has none (a window
/// of plain hits records nothing more than before).
pub(crate) fn encode(stats: &[StatCell<'_>]) -> Result<Vec<u8>, String> {
    if stats.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<Recorded<&str>> = stats
        .iter()
        .map(|s| {
            let m = s.summary;
            let hist = m.histogram.iter().map(|(b, n)| (b.suffix(), *n)).collect();
            let (p, name, b) = (s.precision, s.name, s.bucket);
            (p, name, b, m.count, m.sum, m.sumsq, m.min, m.max, hist)
        })
        .collect();
    rmp_serde::to_vec(&rows).map_err(|e| e.to_string())
}

/// A record's `stats` field read back (missing or empty: none), or why it
/// does not decode.
pub(crate) fn decode(blob: Option<&[u8]>) -> Result<OwnedStats, String> {
    let Some(blob) = blob.filter(|b| !b.is_empty()) else {
        return Ok(OwnedStats::default());
    };
    let rows: Vec<Recorded<String>> =
        rmp_serde::from_slice(blob).map_err(|e| format!("stats do not decode: {e}"))?;
    let mut out = Vec::with_capacity(rows.len());
    for (p, name, bucket, count, sum, sumsq, min, max, hist) in rows {
        let mut histogram = BTreeMap::new();
        for (suffix, n) in hist {
            let b = HistBucket::parse(&suffix)
                .ok_or_else(|| format!("stats hold a bad histogram field {suffix:?}"))?;
            histogram.insert(b, n);
        }
        let summary = Summary {
            count,
            sum,
            sumsq,
            min,
            max,
            histogram,
        };
        out.push((p, name, bucket, summary));
    }
    Ok(OwnedStats(out))
}

/// Appends the `apply.lua` arguments of `stats` (see the script): per cell
/// bucket, count, sum, sumsq, min, max, H, then H (field `B:h:SUFFIX`,
/// count) pairs: the whole field name, which the script would otherwise
/// build per bin.
/// The shortest text that reads back as `v`: Rust's shortest round-trip
/// digits, written plain (`12.5`) or with an exponent (`1e100`, `1e-7`),
/// whichever is shorter (a subnormal plain is over 300 characters).
fn decimal(v: f64) -> String {
    let (plain, exp) = (v.to_string(), format!("{v:e}"));
    if exp.len() < plain.len() {
        exp
    } else {
        plain
    }
}

pub(crate) fn push_args(cmd: &mut Cmd, stats: &[StatCell<'_>]) {
    for s in stats {
        let m = s.summary;
        cmd.arg(s.bucket)
            .arg(m.count)
            .arg(decimal(m.sum))
            .arg(decimal(m.sumsq))
            .arg(decimal(m.min))
            .arg(decimal(m.max))
            .arg(m.histogram.len());
        for (b, n) in &m.histogram {
            cmd.arg(format!("{}:h:{}", s.bucket, b.suffix())).arg(*n);
        }
    }
}

/// Prefix of the error of a statistics cell's [`Failure`].
const STATS_ERROR: &str = "statistics: ";

/// Whether a failure is a statistics cell's.
pub(crate) fn is_stats(f: &Failure) -> bool {
    f.error.starts_with(STATS_ERROR)
}

/// A failure line `s<number>` of a chunk's statistics cells, as a
/// [`Failure`] to dead-letter (its `delta` is the observation count).
pub(crate) fn failure(stats: &[StatCell<'_>], number: &str, error: &str) -> Option<Failure> {
    let s = stats.get(number.parse::<usize>().ok()?.checked_sub(1)?)?;
    Some(Failure {
        error: format!("{STATS_ERROR}{error}"),
        precision: s.precision,
        name: s.name.to_string(),
        bucket: s.bucket,
        delta: s.summary.count,
    })
}

/// On a cluster, the `stats:known:` members of a chunk's statistics cells
/// (each key once, those that failed left out), for ZADDs sent after it.
pub(crate) fn members(stats: &[StatCell<'_>], failures: &[Failure], out: &mut Vec<String>) {
    let mut prev: Option<(u32, &str)> = None;
    for s in stats {
        if prev == Some((s.precision, s.name)) {
            continue;
        }
        let failed = failures
            .iter()
            .any(|f| f.precision == s.precision && f.name == s.name && is_stats(f));
        if !failed {
            prev = Some((s.precision, s.name));
            out.push(Keys::member(s.precision, s.name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(values: &[(f64, i64)], quantiles: bool) -> Summary {
        let mut s = Summary::default();
        for &(v, c) in values {
            s.observe(v, c, quantiles);
        }
        s
    }

    #[test]
    fn numbers_go_as_the_shortest_text_that_reads_back() {
        for (v, text) in [
            (12.5, "12.5"),
            (-0.25, "-0.25"),
            (100.0, "100"),
            (1e100, "1e100"),
            (1e-7, "1e-7"),
            (1e22, "1e22"),
            (123456.0, "123456"),
        ] {
            assert_eq!(decimal(v), text);
        }
        for v in [5e-324, f64::MAX, 0.1 + 0.2, -1.2345678901234567e-200] {
            assert_eq!(decimal(v).parse::<f64>(), Ok(v));
            assert!(decimal(v).len() <= 25, "{}", decimal(v));
        }
    }

    #[test]
    fn recorded_statistics_read_back_exactly() {
        let a = summary(&[(0.1, 3), (-2.5, 1), (0.0, 2), (1e-7, 1)], true);
        let b = summary(&[(1e15 + 0.5, 1)], false);
        let cells = [
            StatCell {
                precision: 60,
                name: "page:a",
                bucket: 1_700_000_040,
                summary: &a,
            },
            StatCell {
                precision: 1,
                name: "é",
                bucket: -1,
                summary: &b,
            },
        ];
        let blob = encode(&cells).unwrap();
        let back = decode(Some(&blob)).unwrap();
        assert_eq!(back.cells(), cells);
        assert_eq!(encode(&[]).unwrap(), b"");
        assert_eq!(decode(None).unwrap(), OwnedStats::default());
        assert_eq!(decode(Some(b"")).unwrap(), OwnedStats::default());
        assert!(decode(Some(b"\xc1")).is_err());
        assert_eq!(weight(&cells[0]), STAT_CELL_WEIGHT + a.histogram.len());
    }

    #[test]
    fn numbers_go_to_redis_losslessly_and_shortest() {
        let s = summary(&[(0.1, 1), (1e-7, 1), (123456789.125, 2)], true);
        let cell = StatCell {
            precision: 60,
            name: "a",
            bucket: 0,
            summary: &s,
        };
        let mut cmd = redis::cmd("X");
        push_args(&mut cmd, &[cell]);
        let args: Vec<String> = cmd
            .args_iter()
            .skip(1)
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8(b.to_vec()).unwrap(),
                _ => unreachable!("no cursor here"),
            })
            .collect();
        assert_eq!(args[0..2], ["0", "4"]);
        for (text, v) in args[2..6].iter().zip([s.sum, s.sumsq, s.min, s.max]) {
            assert_eq!(*text, decimal(v));
            assert_eq!(text.parse::<f64>().unwrap(), v);
        }
        assert_eq!(args[4], "1e-7");
        assert_eq!(args[5], "123456789.125");
        assert_eq!(args[6], s.histogram.len().to_string());
        let (first, n) = s.histogram.iter().next().unwrap();
        assert_eq!(
            args[7..9],
            [format!("0:h:{}", first.suffix()), n.to_string()]
        );
        assert_eq!(args.len(), 7 + 2 * s.histogram.len());
    }

    #[test]
    fn statistics_failures_name_their_cells() {
        let s = summary(&[(2.0, 5)], false);
        let cells = [StatCell {
            precision: 5,
            name: "b",
            bucket: 10,
            summary: &s,
        }];
        let f = failure(&cells, "1", "WRONGTYPE").unwrap();
        assert_eq!(
            (f.precision, f.name.as_str(), f.bucket, f.delta),
            (5, "b", 10, 5)
        );
        assert!(is_stats(&f));
        assert!(failure(&cells, "2", "x").is_none());
        assert!(failure(&cells, "0", "x").is_none());
        let mut out = Vec::new();
        members(&cells, &[], &mut out);
        assert_eq!(out, ["5:b"]);
        out.clear();
        members(&cells, &[f], &mut out);
        assert!(out.is_empty());
    }
}
