//! How windows and sums are cut into chunks and the chunks packed into
//! apply scripts: runs of count cells, then of statistics cells, within
//! [`CHUNK_CELLS`] weight each, and on a Redis Cluster within one hash slot
//! each (cells sorted by slot first, see [`sort_for_cluster`]), with the
//! marker key and field that record each chunk as applied; then the chunks
//! of every sum applied together, slot by slot, into scripts.

use std::ops::Range;

use super::{stats, CHUNK_CELLS};
use crate::model::aggregate::{Cell, StatCell};
use crate::model::keys::Keys;
use crate::model::slots::{slot, tag_for_slot};

/// What a window's (or a sum's) apply step is cut from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Apply<'a> {
    /// The window id.
    pub window: &'a str,
    /// Its cells, in the order recorded (see [`plan`] for the chunks).
    pub cells: &'a [Cell<'a>],
    /// Its statistics cells, in the order recorded (after the cells).
    pub stats: &'a [StatCell<'a>],
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

/// A recorded window or carry, to apply.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sum<'a> {
    /// Its window id.
    pub id: &'a str,
    /// On a cluster, the group of carries it was recorded in: its counts
    /// are marked in the group's markers, its statistics in its own.
    pub group: Option<&'a str>,
    /// Its cells as recorded (on a cluster sorted by slot, see
    /// [`super::sort_for_cluster`]).
    pub cells: &'a [Cell<'a>],
    /// Its statistics cells as recorded.
    pub stats: &'a [StatCell<'a>],
    /// Cells per chunk, as recorded.
    pub chunk: usize,
}

/// One chunk of one sum, within a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Part {
    /// Which sum.
    pub(super) sum: usize,
    /// Its field in its marker.
    pub(super) field: String,
    /// Its cells, as indices into the sum's.
    pub(super) cells: Range<usize>,
    /// Its statistics cells, as indices into the sum's.
    pub(super) stats: Range<usize>,
    /// Its marker, as an index into the script's.
    pub(super) marker: usize,
}

/// One `apply.lua` call: the chunks it applies in one slot and their
/// markers there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Script {
    pub(super) markers: Vec<String>,
    pub(super) parts: Vec<Part>,
}

/// The plans a sum is applied by, each with whether its chunks' fields
/// are prefixed with the sum's id: one of counts and statistics under its
/// own markers, or in a group one of counts under the group's and one of
/// statistics under its own.
fn steps<'a>(s: &Sum<'a>, by_slot: bool) -> Vec<(Apply<'a>, bool)> {
    let step = |window, cells, stats| Apply {
        window,
        cells,
        stats,
        chunk: s.chunk,
        by_slot,
    };
    match s.group {
        Some(group) => vec![
            (step(group, s.cells, &[]), true),
            (step(s.id, &[], s.stats), false),
        ],
        None => vec![(step(s.id, s.cells, s.stats), false)],
    }
}

/// The scripts of `sums`: each sum's chunks, gathered slot by slot, and
/// within a slot packed whole into scripts of at most [`CHUNK_CELLS`]
/// weight (a chunk weighs at most that, or holds one heavier statistics
/// cell alone).
pub(super) fn scripts(keys: &Keys, sums: &[Sum<'_>], by_slot: bool) -> Vec<Script> {
    let mut all: Vec<(u16, usize, String, Part)> = Vec::new();
    for (i, s) in sums.iter().enumerate() {
        for (step, prefixed) in steps(s, by_slot) {
            for (c, chunk) in plan(keys, &step).into_iter().enumerate() {
                let at = if !by_slot {
                    0
                } else if let Some(first) = step.cells.get(chunk.cells.start) {
                    slot(keys.count(first.precision, first.name).as_bytes())
                } else {
                    let first = &step.stats[chunk.stats.start];
                    slot(keys.stats(first.precision, first.name).as_bytes())
                };
                let weight = chunk.cells.len()
                    + step.stats[chunk.stats.clone()]
                        .iter()
                        .map(stats::weight)
                        .sum::<usize>();
                let field = if prefixed {
                    format!("{}:{c}", s.id)
                } else {
                    c.to_string()
                };
                let part = Part {
                    sum: i,
                    field,
                    cells: chunk.cells,
                    stats: chunk.stats,
                    marker: 0,
                };
                all.push((at, weight, chunk.marker, part));
            }
        }
    }
    all.sort_by_key(|a| a.0);
    let mut out: Vec<Script> = Vec::new();
    let mut open: Option<(u16, usize)> = None;
    for (at, weight, marker, mut part) in all {
        let script = match (&mut open, out.last_mut()) {
            (Some((s, w)), Some(script)) if *s == at && *w + weight <= CHUNK_CELLS => {
                *w += weight;
                script
            }
            _ => {
                open = Some((at, weight));
                out.push(Script {
                    markers: Vec::new(),
                    parts: Vec::new(),
                });
                out.last_mut().expect("just pushed")
            }
        };
        part.marker = match script.markers.iter().position(|m| *m == marker) {
            Some(k) => k,
            None => {
                script.markers.push(marker);
                script.markers.len() - 1
            }
        };
        script.parts.push(part);
    }
    out
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

#[cfg(test)]
mod packing_tests {
    use super::*;
    use crate::model::config::{LayoutArgs, StreamArgs};

    fn keys() -> Keys {
        Keys::new(&LayoutArgs::default(), &StreamArgs::default())
    }

    fn cells<'a>(names: &'a [String]) -> Vec<Cell<'a>> {
        let mut v: Vec<Cell<'a>> = names
            .iter()
            .flat_map(|n| {
                [1u32, 60].map(|p| Cell {
                    precision: p,
                    name: n.as_str(),
                    bucket: 0,
                    delta: 1,
                })
            })
            .collect();
        super::super::sort_for_cluster(&keys(), &mut v);
        v
    }

    /// The scripts of two sums recorded in groups `ga` and `gb`, checked:
    /// every chunk of every sum once, under its own group's marker in its
    /// own slot, with the chunk numbers it has applied alone; one slot per
    /// script. Returns how many scripts.
    fn checked_scripts(ga: &str, gb: &str) -> usize {
        let k = keys();
        let a: Vec<String> = (0..300).map(|i| format!("a{i}")).collect();
        let b: Vec<String> = (0..300).map(|i| format!("b{i}")).collect();
        let (ca, cb) = (cells(&a), cells(&b));
        let sums = [
            Sum {
                id: "s1",
                group: Some(ga),
                cells: &ca,
                stats: &[],
                chunk: CHUNK_CELLS,
            },
            Sum {
                id: "s2",
                group: Some(gb),
                cells: &cb,
                stats: &[],
                chunk: CHUNK_CELLS,
            },
        ];
        let together = scripts(&k, &sums, true);
        let alone: usize = sums.iter().map(|s| scripts(&k, &[*s], true).len()).sum();
        assert!(together.len() < alone, "{} vs {alone}", together.len());
        for (i, s) in sums.iter().enumerate() {
            let own = scripts(&k, &[*s], true);
            let mut parts: Vec<(String, String, Range<usize>)> = together
                .iter()
                .flat_map(|sc| {
                    sc.parts.iter().filter(|p| p.sum == i).map(|p| {
                        (
                            sc.markers[p.marker].clone(),
                            p.field.clone(),
                            p.cells.clone(),
                        )
                    })
                })
                .collect();
            parts.sort_by_key(|p| p.1.rsplit(':').next().unwrap().parse::<usize>().unwrap());
            let want: Vec<(String, String, Range<usize>)> = own
                .iter()
                .flat_map(|sc| {
                    assert_eq!(sc.markers.len(), 1, "a sum alone has one group");
                    sc.parts.iter().map(|p| {
                        (
                            sc.markers[p.marker].clone(),
                            p.field.clone(),
                            p.cells.clone(),
                        )
                    })
                })
                .collect();
            assert_eq!(parts, want);
        }
        for sc in &together {
            let n: usize = sc.parts.iter().map(|p| p.cells.len()).sum();
            assert!(n <= CHUNK_CELLS);
            let slots: std::collections::BTreeSet<u16> = sc
                .parts
                .iter()
                .flat_map(|p| {
                    let s = &sums[p.sum];
                    s.cells[p.cells.clone()]
                        .iter()
                        .map(|c| slot(k.count(c.precision, c.name).as_bytes()))
                })
                .collect();
            assert_eq!(slots.len(), 1, "one slot per script");
            let mut distinct = sc.markers.clone();
            distinct.dedup();
            assert_eq!(distinct, sc.markers, "each marker once");
            for m in &sc.markers {
                assert_eq!(
                    slot(m.as_bytes()),
                    *slots.iter().next().unwrap(),
                    "the markers in that slot"
                );
            }
        }
        together.len()
    }

    #[test]
    fn one_script_per_slot_holds_every_sum_of_the_group_there() {
        checked_scripts("g", "g");
    }

    #[test]
    fn sums_of_two_groups_applied_together_share_their_scripts() {
        assert_eq!(checked_scripts("g", "h"), checked_scripts("g", "g"));
    }
}
