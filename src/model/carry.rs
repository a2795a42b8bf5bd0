//! What a worker behind on the stream does with its windows' counts and
//! statistics: it sums them in the *carry* and applies them together, at
//! most `--carry-ms` later.
//!
//! While a worker works through a backlog, its windows follow one another
//! within a second, and a counter gets the same bucket in window after
//! window: at every coarse precision (60 s and up), and at the fine ones
//! too, since a backlog's entries come from a few seconds of traffic per
//! second of draining. On skewed traffic (Zipf over 100,000 names) each
//! window touches most of those cells again, and each touch is a HINCRBY
//! for Redis' one thread. Summing the count cells of several windows first
//! ([`Carry`]) turns those HINCRBYs into one, and Redis applies the sum
//! while the worker reads and sums the next windows. Statistics cells
//! (hits with a value) are summed alike, histogram bins included: a hot
//! name's `B:count`, `B:sum`, `B:sumsq`, `B:min`, `B:max` and each bin it
//! saw are written once per carry, not once per window.
//!
//! A window read while behind is recorded (the commit) and its cells
//! wait; a window read at the stream's head is applied whole, as soon as
//! it closes, so the head's latency is untouched (on a Redis Cluster with
//! stream shards it goes through the carry at once instead, to be applied
//! with the other shards': `service::worker::group`). The carry is applied once
//! its first window waited `--carry-ms` (2 s by default), once it holds
//! `--carry-cells` cells, at once when the worker reaches the stream's head,
//! and when it stops: every hit the worker read is visible at every
//! precision within 8 s by default: a window closing while behind, ≤ 1 s,
//! plus `--carry-ms` and as much again that a carry may wait for the head,
//! at most 4 s, plus the carry's own apply, up to about 3 s for 1,000,000
//! cells on one Redis core.
//!
//! A carry that comes of age while the worker is about to reach the head
//! waits for it, up to its age again ([`Carry::hold`]): the entries left
//! would otherwise make a last sum of their own, and on skewed traffic a
//! sum of a fifth of the entries touches more than half as many cells as
//! the whole (the popular names are in both). How this stays exactly once is the
//! commit module's business (`store::commit::carry`).

use std::time::{Duration, Instant};

use crate::model::aggregate::{Cell, StatCell, Window};

/// Entries whose windows a carry holds at most: their ids stay in memory
/// until the carry is applied and acknowledges them, about 2 bytes each
/// ([`crate::model::ids`]; as text they took about 33 bytes each of the
/// worker's peak RSS, which capped the carry at 500,000 entries, fewer
/// than a Zipf carry's 1,000,000 cells take to fill).
pub(crate) const MAX_ENTRIES: usize = 2_000_000;
/// How much longer than its age a carry may wait for the head: its age
/// divided by this. 1, its whole age again: with half of it, a 1 M-entry
/// Zipf backlog read at under 333,000 entries/s came of age with more
/// than a second of reading left and made a last sum of its own, 1.0
/// cells per hit against 0.63 with one sum (see docs/design.md, "The carry").
pub(crate) const HOLD_FRACTION: u32 = 1;

/// How many times more a statistics cell weighs in a carry than in a
/// window. A carry's cells live longer (two carries are in memory while one
/// is applied) and a statistics cell with its summary, histogram, record
/// and script arguments costs the worker's memory about three times what
/// it weighs in a window: measured on 1 M-entry backlogs with a value on
/// every hit, the worker's peak RSS rose by about 200 bytes per unit of
/// carry weight (Zipf over 100k names) against about 100 without values.
pub(crate) const STATS_WEIGHT_FACTOR: usize = 3;

/// The count and statistics cells of windows recorded but not applied,
/// summed.
#[derive(Debug)]
pub(crate) struct Carry {
    cells: Window,
    opened: Option<Instant>,
    entries: usize,
    hold: Hold,
}

/// Whether a carry of age waits for the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Not asked yet.
    Open,
    /// Asked: it does not wait.
    No,
    /// Asked: it waits until then, or until the worker reaches the head.
    Until(Instant),
}

impl Carry {
    /// An empty carry for the layout's precisions.
    pub(crate) fn new(precisions: &[u32], samples: u32) -> Carry {
        Carry {
            cells: Window::new(precisions, samples),
            opened: None,
            entries: 0,
            hold: Hold::Open,
        }
    }

    /// Adds a window's waiting cells and statistics cells; `entries` is
    /// its entry count.
    pub(crate) fn add(&mut self, cells: &[Cell<'_>], stats: &[StatCell<'_>], entries: usize) {
        self.opened.get_or_insert_with(Instant::now);
        self.entries += entries;
        self.cells.merge(cells);
        self.cells.merge_stats(stats);
    }

    /// What it weighs against `--carry-cells`: a cell 1, a statistics cell
    /// [`STATS_WEIGHT_FACTOR`] times its weight in a window
    /// ([`Window::weight`]).
    pub(crate) fn weight(&self) -> usize {
        self.cells.weight_with_stats_times(STATS_WEIGHT_FACTOR)
    }

    /// Whether no window waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.opened.is_none()
    }

    /// Whether to apply it now: its first window waited `age` (and the
    /// hold, if it was given one), or it weighs `max_cells` cells (a
    /// statistics cell weighs as several: [`Window::weight`]) or holds
    /// [`MAX_ENTRIES`] entries.
    pub(crate) fn is_due(&self, age: Duration, max_cells: usize) -> bool {
        let held = matches!(self.hold, Hold::Until(t) if Instant::now() < t);
        (self.is_of_age(age) && !held) || self.is_full(max_cells)
    }

    /// Whether it is of age, not full, and not yet asked whether to wait
    /// for the head: the worker then looks how far the head is and calls
    /// [`Carry::hold`].
    pub(crate) fn asks_hold(&self, age: Duration, max_cells: usize) -> bool {
        self.hold == Hold::Open && self.is_of_age(age) && !self.is_full(max_cells)
    }

    /// Decides, once per carry, whether it waits for the head: it does when
    /// `lag` entries (not yet read; `None` when Redis cannot tell) take the
    /// worker at most `age / HOLD_FRACTION` at the rate it read this carry's
    /// entries; it then waits at most that much more. Returns
    /// whether it waits.
    pub(crate) fn hold(&mut self, lag: Option<u64>, age: Duration) -> bool {
        let Some(opened) = self.opened else {
            return false;
        };
        let extra = age / HOLD_FRACTION;
        let near =
            lag.is_some_and(|lag| reaches_within(lag, self.entries, opened.elapsed(), extra));
        self.hold = if near {
            Hold::Until(opened + age + extra)
        } else {
            Hold::No
        };
        near
    }

    fn is_of_age(&self, age: Duration) -> bool {
        self.opened.is_some_and(|t| t.elapsed() >= age)
    }

    fn is_full(&self, max_cells: usize) -> bool {
        self.weight() >= max_cells || self.entries >= MAX_ENTRIES
    }

    /// The summed cells, grouped by counter.
    pub(crate) fn cells(&self) -> impl Iterator<Item = Cell<'_>> {
        self.cells.cells()
    }

    /// The summed statistics cells, grouped by counter.
    pub(crate) fn stat_cells(&self) -> impl Iterator<Item = StatCell<'_>> {
        self.cells.stat_cells()
    }

    /// Empties it, keeping its allocations.
    pub(crate) fn clear(&mut self) {
        self.cells.clear();
        self.opened = None;
        self.entries = 0;
        self.hold = Hold::Open;
    }
}

/// Whether a worker that read `read` entries in `took` reads `lag` more
/// within `within` at that rate.
fn reaches_within(lag: u64, read: usize, took: Duration, within: Duration) -> bool {
    // lag / (read / took) <= within, without dividing.
    (lag as u128) * took.as_micros() <= (read as u128) * within.as_micros()
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
        c.add(&[cell(60, "a"), cell(60, "a")], &[], 2);
        assert!(!c.is_empty());
        assert!(c.is_due(Duration::ZERO, 10));
        assert!(!c.is_due(Duration::from_secs(3600), 10));
        assert_eq!(c.cells().map(|x| x.delta).collect::<Vec<_>>(), [2]);
        c.add(&[], &[], MAX_ENTRIES);
        assert!(c.is_due(Duration::from_secs(3600), 10), "full of entries");
        c.clear();
        assert!(c.is_empty() && !c.is_due(Duration::ZERO, 10));
    }

    #[test]
    fn a_statistics_cell_weighs_more_in_a_carry_than_in_a_window() {
        let mut w = Window::new(&[60], 120);
        let hit = crate::model::event::Hit {
            name: "a",
            count: 1,
            ts_ms: 0,
            value: Some(2.5),
        };
        w.add(&hit, 0);
        let cells: Vec<_> = w.cells().collect();
        let stats: Vec<_> = w.stat_cells().collect();
        let mut c = Carry::new(&[60], 120);
        c.add(&cells, &stats, 1);
        // One count cell, and a statistics cell weighing 3 in a window.
        assert_eq!(
            w.weight(),
            1 + crate::model::aggregate::STAT_CELL_WINDOW_WEIGHT
        );
        assert_eq!(
            c.weight(),
            1 + STATS_WEIGHT_FACTOR * crate::model::aggregate::STAT_CELL_WINDOW_WEIGHT
        );
        assert!(
            c.is_due(Duration::from_secs(3600), c.weight()),
            "full at its weight"
        );
    }

    #[test]
    fn the_head_is_near_when_the_lag_is_read_within_the_time_left() {
        let s = Duration::from_secs(1);
        // 100,000 entries read in 1 s: 50,000 more take 0.5 s.
        assert!(reaches_within(50_000, 100_000, s, s / 2));
        assert!(!reaches_within(50_001, 100_000, s, s / 2));
        assert!(reaches_within(0, 0, s, Duration::ZERO));
        assert!(!reaches_within(1, 0, s, s), "nothing read: no rate");
    }

    #[test]
    fn a_carry_of_age_waits_for_a_near_head_once_and_at_most_its_age_again() {
        let age = Duration::from_millis(200);
        let mut c = Carry::new(&[60], 120);
        c.add(&[cell(60, "a")], &[], 1_000_000);
        assert!(!c.asks_hold(age, 10), "not of age yet");
        std::thread::sleep(age);
        assert!(c.is_due(age, 10) && c.asks_hold(age, 10));
        // Far from the head (Redis cannot tell: the same): due at its age.
        assert!(!c.hold(None, age));
        assert!(c.is_due(age, 10) && !c.asks_hold(age, 10), "asked once");
        c.clear();
        c.add(&[cell(60, "a")], &[], 1_000_000);
        std::thread::sleep(age);
        assert!(!c.hold(Some(100_000_000), age), "far");
        c.clear();

        // Near: not due until its age again, unless full.
        c.add(&[cell(60, "a")], &[], 1_000);
        std::thread::sleep(age);
        assert!(c.hold(Some(10), age));
        assert!(!c.is_due(age, 10) && !c.asks_hold(age, 10));
        assert!(c.is_due(age, 1), "full: due all the same");
        std::thread::sleep(age / HOLD_FRACTION);
        assert!(c.is_due(age, 10), "the hold is bounded");
        c.clear();
        assert!(c.hold == Hold::Open, "a new carry is asked again");
    }
}
