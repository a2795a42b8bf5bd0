//! How a window's apply step is cut into scripts: runs of count cells,
//! then of statistics cells, within [`CHUNK_CELLS`](super::CHUNK_CELLS)
//! weight each, and on a Redis Cluster within one hash slot each (cells
//! sorted by slot first, see [`sort_for_cluster`]), with the marker key
//! that records each chunk as applied.

use std::ops::Range;

use super::stats;
use crate::model::aggregate::{Cell, StatCell};
use crate::model::keys::Keys;
use crate::model::slots::{slot, tag_for_slot};

/// One window's apply step: what the apply scripts and XACKs need.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Apply<'a> {
    /// The window id.
    pub window: &'a str,
    /// Its cells, in the order recorded (see [`plan`] for the chunks).
    pub cells: &'a [Cell<'a>],
    /// Its statistics cells, in the order recorded (after the cells).
    pub stats: &'a [StatCell<'a>],
    /// Its entry ids, space separated.
    pub ids: &'a str,
    /// Cells per apply script, as recorded with the window.
    pub chunk: usize,
    /// Chunks hold one Cluster hash slot each (on a cluster).
    pub by_slot: bool,
}

/// One apply script's share of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Its cells, as indices into the window's.
    pub cells: Range<usize>,
    /// Its statistics cells, as indices into the window's.
    pub stats: Range<usize>,
    /// The marker key that records it as applied.
    pub marker: String,
}

/// Sorts a window's cells for a cluster: by the hash slot of their counter,
/// keeping each counter's cells together and in order (stable).
pub(crate) fn sort_for_cluster(keys: &Keys, cells: &mut [Cell<'_>]) {
    cells.sort_by_cached_key(|c| slot(keys.count(c.precision, c.name).as_bytes()));
}

/// The chunks of a window: runs of cells, then of statistics cells, of at
/// most `step.chunk` weight (a cell weighs 1, a statistics cell
/// [`stats::weight`]; one heavier than that goes alone), also cut where the
/// key's slot changes when `step.by_slot`. A function of the recorded cells
/// alone, so that a recovering worker chunks alike.
pub(crate) fn plan(keys: &Keys, step: &Apply<'_>) -> Vec<Chunk> {
    let size = step.chunk.max(1);
    let n = step.cells.len();
    let marker = (!step.by_slot).then(|| keys.applied_marker(step.window));
    let mut chunks: Vec<Chunk> = Vec::new();
    // The open chunk's slot (0 on one Redis) and weight.
    let mut open: Option<(u16, usize)> = None;
    let weights = std::iter::repeat_n(1, n).chain(step.stats.iter().map(stats::weight));
    for (i, weight) in weights.enumerate() {
        let s = match (step.by_slot, step.stats.get(i.wrapping_sub(n))) {
            (false, _) => 0,
            (true, None) => slot(
                keys.count(step.cells[i].precision, step.cells[i].name)
                    .as_bytes(),
            ),
            (true, Some(st)) => slot(keys.stats(st.precision, st.name).as_bytes()),
        };
        match &mut open {
            Some((cs, w)) if *cs == s && *w + weight <= size => *w += weight,
            _ => {
                let (c, st) = (i.min(n), i.saturating_sub(n));
                chunks.push(Chunk {
                    cells: c..c,
                    stats: st..st,
                    marker: marker.clone().unwrap_or_else(|| {
                        keys.applied_marker_tagged(step.window, tag_for_slot(s))
                    }),
                });
                open = Some((s, weight));
            }
        }
        let chunk = chunks.last_mut().expect("pushed");
        if i < n {
            chunk.cells.end = i + 1;
        } else {
            chunk.stats.end = i - n + 1;
        }
    }
    chunks
}

/// The distinct marker keys of a plan, to expire once the window is done.
pub(crate) fn markers(chunks: &[Chunk]) -> Vec<String> {
    let mut m: Vec<String> = chunks.iter().map(|c| c.marker.clone()).collect();
    m.sort_unstable();
    m.dedup();
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::{LayoutArgs, StreamArgs};
    use crate::model::stats::Summary;

    fn cells(n: usize) -> Vec<Cell<'static>> {
        (0..n)
            .map(|i| Cell {
                precision: 60,
                name: ["a", "b", "c"][i % 3],
                bucket: i as i64,
                delta: 1,
            })
            .collect()
    }

    #[test]
    fn statistics_follow_the_counts_by_weight() {
        let keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
        let mut with_hist = Summary::default();
        for v in [1.0, 2.0, 4.0] {
            with_hist.observe(v, 1, true);
        }
        let plain = Summary::default();
        let counts = cells(5);
        let stats: Vec<StatCell<'_>> = (0..4)
            .map(|i| StatCell {
                precision: 60,
                name: "a",
                bucket: i,
                summary: if i == 0 { &with_hist } else { &plain },
            })
            .collect();
        let step = |stats, chunk, by_slot| Apply {
            window: "w",
            cells: &counts,
            stats,
            ids: "",
            chunk,
            by_slot,
        };
        // Without statistics: runs of `chunk` cells, as always.
        let p = plan(&keys, &step(&[], 2, false));
        let ranges: Vec<_> = p
            .iter()
            .map(|c| (c.cells.clone(), c.stats.clone()))
            .collect();
        assert_eq!(ranges, [(0..2, 0..0), (2..4, 0..0), (4..5, 0..0)]);
        // Weights: 1 per cell, 7 (+3 histogram fields) per statistics cell:
        // two plain ones fit in 15.
        let w = stats::STAT_CELL_WEIGHT;
        let p = plan(&keys, &step(&stats, 5 + w + 3, false));
        let ranges: Vec<_> = p
            .iter()
            .map(|c| (c.cells.clone(), c.stats.clone()))
            .collect();
        assert_eq!(ranges, [(0..5, 0..1), (5..5, 1..3), (5..5, 3..4)]);
        assert!(p.iter().all(|c| c.marker == keys.applied_marker("w")));
        // A statistics cell heavier than a chunk goes alone.
        let p = plan(&keys, &step(&stats, 1, false));
        assert_eq!(p.len(), 5 + 4);
        assert!(p[5..]
            .iter()
            .all(|c| c.stats.len() == 1 && c.cells.is_empty()));
        // On a cluster each chunk holds one slot: its marker is in it.
        let p = plan(&keys, &step(&stats, 1000, true));
        for c in &p {
            for s in &stats[c.stats.clone()] {
                let key = keys.stats(s.precision, s.name);
                assert_eq!(slot(c.marker.as_bytes()), slot(key.as_bytes()));
            }
        }
        assert_eq!(p.iter().map(|c| c.stats.len()).sum::<usize>(), 4);
    }
}
