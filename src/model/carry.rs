//! What a worker behind on the stream does with its windows' counts: it
//! sums them in the *carry* and applies them together, at most
//! `--carry-ms` later.
//!
//! While a worker works through a backlog, its windows follow one another
//! within a second, and a counter gets the same bucket in window after
//! window: at every coarse precision (60 s and up), and at the fine ones
//! too, since a backlog's entries come from a few seconds of traffic per
//! second of draining. On skewed traffic (Zipf over 100,000 names) each
//! window touches most of those cells again, and each touch is a HINCRBY
//! for Redis' one thread. Summing the count cells of several windows first
//! ([`Carry`]) turns those HINCRBYs into one, and Redis applies the sum
//! while the worker reads and sums the next windows.
//!
//! A window read while behind is recorded (the commit) and its count cells
//! wait; a window read at the stream's head is applied whole, as soon as
//! it closes, so the head's latency is untouched (on a Redis Cluster with
//! stream shards it goes through the carry at once instead, to be applied
//! with the other shards': `service::worker::group`). The carry is applied once
//! its first window waited `--carry-ms` (2 s by default), once it holds
//! `--carry-cells` cells, at once when the worker reaches the stream's head,
//! and when it stops: every hit the worker read is visible at every
//! precision within [`VISIBLE_WITHIN`]. How this stays exactly once is the
//! commit module's business (`store::commit::carry`).

use std::time::{Duration, Instant};

use crate::model::aggregate::{Cell, Window};

/// Entries whose windows a carry holds at most: their ids stay in memory
/// until the carry is applied and acknowledges them, about 2 bytes each
/// ([`crate::model::ids`]; as text they took about 33 bytes each of the
/// worker's peak RSS, which capped the carry at 500,000 entries, fewer
/// than a Zipf carry's 1,000,000 cells take to fill).
pub const MAX_ENTRIES: usize = 2_000_000;
/// The stated bound while a worker is behind: a hit it read is counted at
/// every precision within this time (a window closing while behind, ≤ 1 s,
/// plus `--carry-ms`, at most 2 s by default, plus the carry's own apply,
/// up to about 3 s for 1,000,000 cells on one Redis core).
pub const VISIBLE_WITHIN: Duration = Duration::from_secs(6);

/// The count cells of windows recorded but not applied, summed.
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
        self.cells.merge(cells);
    }

    /// Distinct cells it holds.
    pub fn cells_len(&self) -> usize {
        self.cells.cells_len()
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
