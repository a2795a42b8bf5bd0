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

/// Histogram bins one piece of a statistics cell holds at most: a piece
/// weighs no more than a chunk ([`super::CHUNK_CELLS`]).
const BINS_PER_PIECE: usize = super::CHUNK_CELLS - STAT_CELL_WEIGHT;

/// Cuts the statistics cells too heavy for one apply chunk (a histogram of
/// thousands of bins, from values spread over many orders of magnitude)
/// into pieces of at most [`BINS_PER_PIECE`] bins, each in its cell's
/// place and applied as a cell of its own: the first with the cell's
/// count and sums, the others with none, and every piece with its min and
/// max (compare-and-set leaves those as they are). One cell of 28,000 bins
/// held Redis 27 to 60 ms in one script; its pieces hold it about a chunk's
/// worth each. A reader between two pieces sees a histogram short of its
/// count, which gives no quantiles ([`crate::model::stats`]). A function of
/// the cells alone, so that whoever records or applies them cuts alike;
/// the pieces' summaries go into `store`.
pub(crate) fn split_heavy<'w>(
    stats: Vec<StatCell<'w>>,
    store: &'w mut Vec<Summary>,
) -> Vec<StatCell<'w>> {
    let heavy = |s: &StatCell<'_>| s.summary.histogram.len() > BINS_PER_PIECE;
    if !stats.iter().any(heavy) {
        return stats;
    }
    for s in stats.iter().filter(|s| heavy(s)) {
        let m = s.summary;
        let bins: Vec<(&HistBucket, &i64)> = m.histogram.iter().collect();
        for (k, part) in bins.chunks(BINS_PER_PIECE).enumerate() {
            let first = k == 0;
            store.push(Summary {
                count: if first { m.count } else { 0 },
                sum: if first { m.sum } else { 0.0 },
                sumsq: if first { m.sumsq } else { 0.0 },
                min: m.min,
                max: m.max,
                histogram: part.iter().map(|(b, n)| (**b, **n)).collect(),
            });
        }
    }
    let store: &'w Vec<Summary> = store;
    let mut pieces = store.iter();
    let mut out = Vec::with_capacity(stats.len() + store.len());
    for s in stats {
        if !heavy(&s) {
            out.push(s);
            continue;
        }
        let n = s.summary.histogram.len().div_ceil(BINS_PER_PIECE);
        out.extend(
            pieces
                .by_ref()
                .take(n)
                .map(|summary| StatCell { summary, ..s }),
        );
    }
    out
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
    fn a_heavy_cell_is_cut_in_its_place_into_pieces_that_add_up_to_it() {
        // 1,200 values over 120 decades: 1,200 bins.
        let spread: Vec<(f64, i64)> = (0..1200)
            .map(|i| (10f64.powf(f64::from(i) / 10.0 - 60.0), 1))
            .collect();
        let (light, heavy) = (summary(&[(1.0, 2), (3.0, 1)], true), summary(&spread, true));
        assert_eq!(heavy.histogram.len(), 1200);
        let cell = |name, summary| StatCell {
            precision: 60,
            name,
            bucket: 600,
            summary,
        };
        let cells = vec![cell("a", &light), cell("b", &heavy), cell("c", &light)];
        let mut store = Vec::new();
        let out = split_heavy(cells.clone(), &mut store);
        let names: Vec<&str> = out.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            ["a", "b", "b", "b", "c"],
            "pieces in the cell's place"
        );
        assert_eq!(
            (out[0], out[4]),
            (cells[0], cells[2]),
            "light cells untouched"
        );
        let pieces = &out[1..4];
        assert!(pieces
            .iter()
            .all(|p| weight(p) <= super::super::CHUNK_CELLS && p.bucket == 600));
        let first = pieces[0].summary;
        assert_eq!(
            (first.count, first.sum, first.sumsq),
            (heavy.count, heavy.sum, heavy.sumsq)
        );
        for p in &pieces[1..] {
            assert_eq!(
                (p.summary.count, p.summary.sum, p.summary.sumsq),
                (0, 0.0, 0.0)
            );
        }
        for p in pieces {
            assert_eq!((p.summary.min, p.summary.max), (heavy.min, heavy.max));
        }
        let bins: BTreeMap<HistBucket, i64> = pieces
            .iter()
            .flat_map(|p| p.summary.histogram.clone())
            .collect();
        assert_eq!(bins, heavy.histogram, "every bin once");
        // Nothing heavy: the same cells, nothing stored.
        let mut none = Vec::new();
        assert_eq!(split_heavy(vec![cells[0]], &mut none), vec![cells[0]]);
        assert!(none.is_empty());
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
