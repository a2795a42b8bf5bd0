//! Which cells of a window wait to be merged with the next windows' before
//! they are applied, and for how long: the *carry*.
//!
//! While a worker works through a backlog, its windows follow one another
//! within a second, and a counter of a coarse precision (60 s and up) gets
//! the same bucket in window after window. On skewed traffic (Zipf over
//! 100,000 names) each window touches most of those cells again, and each
//! touch is a HINCRBY for Redis' one thread. Summing the coarse cells of
//! several windows first ([`Carry`]) turns those HINCRBYs into one.
//!
//! The fine precisions (under [`COARSE_PRECISION`]) are applied with their
//! window, so they are visible as soon as today; the coarse ones of a
//! window wait at most `--carry-ms` (2 s by default), are applied at once
//! when the worker reaches the stream's head or stops, and are visible
//! within [`COARSE_VISIBLE_WITHIN`] of their window's apply. How this stays
//! exactly once is the commit module's business (`store::commit::carry`).

use std::time::{Duration, Instant};

use crate::model::aggregate::{Cell, Window};

/// The finest precision, in seconds, whose cells may wait in the carry:
/// its bucket lasts many windows.
pub const COARSE_PRECISION: u32 = 60;
/// Entries whose windows a carry holds at most: their ids stay in memory
/// (about 16 bytes each) until the carry is applied and acknowledges them.
pub const MAX_ENTRIES: usize = 1_000_000;
/// The stated bound: a hit counted at a fine precision is counted at every
/// coarse one within this time (`--carry-ms`, at most 2 s by default, plus
/// a window closing while behind, ≤ 1 s, plus the carry's own apply).
pub const COARSE_VISIBLE_WITHIN: Duration = Duration::from_secs(5);

/// Puts a window's fine cells first and its coarse ones after, each
/// counter's cells kept together and in order; returns where the cells
/// that wait start: the first chunk boundary (a multiple of `chunk`) at or
/// after the last fine cell, so that the chunks applied now are exactly the
/// first chunks of the whole window's (the coarse cells that share the
/// last fine chunk are applied with it).
pub fn split(cells: &mut [Cell<'_>], chunk: usize) -> usize {
    cells.sort_by_key(|c| c.precision >= COARSE_PRECISION);
    let fine = cells.partition_point(|c| c.precision < COARSE_PRECISION);
    let chunk = chunk.max(1);
    (fine.div_ceil(chunk) * chunk).min(cells.len())
}

/// The coarse cells of windows applied but for them, summed.
#[derive(Debug)]
pub struct Carry {
    cells: Window,
    opened: Option<Instant>,
    entries: usize,
}

impl Carry {
    /// An empty carry for the layout's precisions.
    pub fn new(precisions: &[u32], samples: u32) -> Carry {
        Carry {
            cells: Window::new(precisions, samples),
            opened: None,
            entries: 0,
        }
    }

    /// Adds a window's waiting cells; `entries` is its entry count.
    pub fn add(&mut self, cells: &[Cell<'_>], entries: usize) {
        self.opened.get_or_insert_with(Instant::now);
        self.entries += entries;
        for c in cells {
            self.cells.merge(c);
        }
    }

    /// Whether no window waits.
    pub fn is_empty(&self) -> bool {
        self.opened.is_none()
    }

    /// Whether to apply it now: its first window waited `age`, or it holds
    /// `max_cells` cells or [`MAX_ENTRIES`] entries.
    pub fn is_due(&self, age: Duration, max_cells: usize) -> bool {
        self.opened.is_some_and(|t| t.elapsed() >= age)
            || self.cells.cells_len() >= max_cells
            || self.entries >= MAX_ENTRIES
    }

    /// The summed cells, grouped by counter.
    pub fn cells(&self) -> impl Iterator<Item = Cell<'_>> {
        self.cells.cells()
    }

    /// Empties it, keeping its allocations.
    pub fn clear(&mut self) {
        self.cells.clear();
        self.opened = None;
        self.entries = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(precision: u32, name: &str) -> Cell<'_> {
        Cell {
            precision,
            name,
            bucket: 0,
            delta: 1,
        }
    }

    #[test]
    fn fine_cells_come_first_and_the_wait_starts_at_a_chunk_boundary() {
        let mut cells = vec![
            cell(1, "a"),
            cell(60, "a"),
            cell(86400, "a"),
            cell(1, "b"),
            cell(5, "b"),
            cell(300, "b"),
        ];
        let at = split(&mut cells, 2);
        let order: Vec<(u32, &str)> = cells.iter().map(|c| (c.precision, c.name)).collect();
        assert_eq!(
            order,
            [
                (1, "a"),
                (1, "b"),
                (5, "b"),
                (60, "a"),
                (86400, "a"),
                (300, "b")
            ]
        );
        assert_eq!(at, 4, "3 fine cells: the second chunk of 2 is applied now");
        assert_eq!(split(&mut cells, 500), 6, "never past the end");
        let mut coarse = vec![cell(60, "a"), cell(3600, "a")];
        assert_eq!(split(&mut coarse, 500), 0);
        let mut fine = vec![cell(1, "a"), cell(5, "a")];
        assert_eq!(split(&mut fine, 1), 2);
    }

    #[test]
    fn a_carry_is_due_at_its_age_or_when_full() {
        let mut c = Carry::new(&[60], 120);
        assert!(c.is_empty() && !c.is_due(Duration::ZERO, 10));
        c.add(&[cell(60, "a"), cell(60, "a")], 2);
        assert!(!c.is_empty());
        assert!(c.is_due(Duration::ZERO, 10));
        assert!(!c.is_due(Duration::from_secs(3600), 10));
        assert_eq!(c.cells().map(|x| x.delta).collect::<Vec<_>>(), [2]);
        c.add(&[], MAX_ENTRIES);
        assert!(c.is_due(Duration::from_secs(3600), 10), "full of entries");
        c.clear();
        assert!(c.is_empty() && !c.is_due(Duration::ZERO, 10));
    }
}
