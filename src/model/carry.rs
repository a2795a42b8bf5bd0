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
//! Every window goes through the carry once it is recorded (the commit):
//! the first is taken whole, so that a carry of one window is that window
//! and is applied as it (at the stream's head each window is, as soon as
//! it closes, so the head's latency is untouched; on a Redis Cluster with
//! stream shards the carry goes in with the other shards' instead:
//! `service::worker::group`); while behind the next windows are summed
//! into it. The carry is applied once
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

/// How many times more a long name weighs in a carry than in a window
/// ([`crate::model::aggregate::NAME_BYTES_PER_CELL`]): a carry's unit of
/// weight is about 100 bytes of the worker's memory, a window's about 500,
/// and a name's bytes cost alike in both.
pub(crate) const NAME_WEIGHT_FACTOR: usize = 5;

/// The count and statistics cells of windows recorded but not applied,
/// summed.
#[derive(Debug)]
pub(crate) struct Carry {
    /// The sum of its windows' cells, once it holds more than one.
    cells: Window,
    /// Its first window as it was recorded, while it holds one (then
    /// `one_window`); kept apart from `cells` so that the windows the
    /// worker aggregates into stay window-sized, not sum-sized.
    first: Window,
    one_window: bool,
    opened: Option<Instant>,
    entries: usize,
    hold: Hold,
    /// How many cells its sum grows to before it is applied (see
    /// [`Carry::with_room`]).
    room: usize,
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
    /// An empty carry for windows like `window` (precisions, samples,
    /// quantiles).
    pub(crate) fn new(window: &Window) -> Carry {
        Carry {
            cells: window.empty_like(),
            first: window.empty_like(),
            one_window: false,
            opened: None,
            entries: 0,
            hold: Hold::Open,
            room: usize::MAX,
        }
    }

    /// A carry applied once it holds about `cells` cells (`--carry-cells`
    /// and one window more): its sum's memory is sized for that many
    /// (see [`Window::merge_window`]), not doubled past them.
    pub(crate) fn with_room(mut self, cells: usize) -> Carry {
        self.room = cells;
        self
    }

    /// Adds a recorded window, leaving it empty. The first is taken whole
    /// (the window gets an empty one of this carry's in exchange), so that
    /// a carry of one window holds its cells in the order they were
    /// recorded and is applied as that window ([`Carry::is_one_window`]);
    /// with the next, they are summed.
    pub(crate) fn add_window(&mut self, window: &mut Window) {
        let entries = window.hits() as usize;
        if self.is_empty() {
            std::mem::swap(&mut self.first, window);
            self.opened = Some(Instant::now());
            self.entries = entries;
            self.one_window = true;
        } else {
            self.fold_first();
            self.cells.merge_window(window, self.room);
            self.entries += entries;
            window.clear();
        }
    }

    /// Its first window joins the sum, once a second comes. Its
    /// allocations go: kept, every carry would hold a window's worth of
    /// them besides its sum, and so would the worker's windows they are
    /// exchanged with (see [`Carry::add_window`]).
    fn fold_first(&mut self) {
        if self.one_window {
            self.one_window = false;
            self.cells.merge_window(&self.first, self.room);
            self.first = self.first.empty_like();
        }
    }

    /// Whether it holds one window, its cells in the order that window
    /// recorded them: applied as that window, it needs no record of its own.
    pub(crate) fn is_one_window(&self) -> bool {
        self.one_window
    }

    /// Adds cells and statistics cells, summed, as of `entries` entries
    /// (the tests' way to fill a carry).
    #[cfg(test)]
    pub(crate) fn add(&mut self, cells: &[Cell<'_>], stats: &[StatCell<'_>], entries: usize) {
        self.opened.get_or_insert_with(Instant::now);
        self.fold_first();
        self.entries += entries;
        self.cells.merge(cells);
        self.cells.merge_stats(stats);
    }

    /// What it weighs against `--carry-cells`: a cell 1, a statistics cell
    /// [`STATS_WEIGHT_FACTOR`] times its weight in a window
    /// ([`Window::weight`]).
    pub(crate) fn weight(&self) -> usize {
        self.window()
            .weight_with(STATS_WEIGHT_FACTOR, NAME_WEIGHT_FACTOR)
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

    /// When it is due by its age: `age` after it opened, or when its hold
    /// ends; `None` when empty.
    pub(crate) fn due_at(&self, age: Duration) -> Option<Instant> {
        let of_age = self.opened? + age;
        Some(match self.hold {
            Hold::Until(t) => t.max(of_age),
            _ => of_age,
        })
    }

    fn is_of_age(&self, age: Duration) -> bool {
        self.opened.is_some_and(|t| t.elapsed() >= age)
    }

    fn is_full(&self, max_cells: usize) -> bool {
        self.weight() >= max_cells || self.entries >= MAX_ENTRIES
    }

    /// Its cells as one window: its one window's as recorded, or the sum
    /// of its windows', grouped by counter.
    pub(crate) fn window(&self) -> &Window {
        if self.one_window {
            &self.first
        } else {
            &self.cells
        }
    }

    /// Its cells and statistics cells as [`Carry::window`] lists them,
    /// its sum's slots let go ([`Window::release_into_lists`]): it is only
    /// to be cleared afterwards.
    pub(crate) fn release_into_lists(&mut self) -> (Vec<Cell<'_>>, Vec<StatCell<'_>>) {
        if self.one_window {
            self.first.release_into_lists()
        } else {
            self.cells.release_into_lists()
        }
    }

    /// Empties it, keeping its allocations.
    pub(crate) fn clear(&mut self) {
        self.cells.clear();
        self.first.clear();
        self.opened = None;
        self.entries = 0;
        self.hold = Hold::Open;
        self.one_window = false;
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
        let mut c = Carry::new(&Window::new(&[60], 120));
        assert!(c.is_empty() && !c.is_due(Duration::ZERO, 10));
        c.add(&[cell(60, "a"), cell(60, "a")], &[], 2);
        assert!(!c.is_empty());
        assert!(c.is_due(Duration::ZERO, 10));
        assert!(!c.is_due(Duration::from_secs(3600), 10));
        assert_eq!(c.window().cells().map(|x| x.delta).collect::<Vec<_>>(), [2]);
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
        let mut c = Carry::new(&Window::new(&[60], 120));
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

    /// 10,000 distinct 4 KiB names once took the worker past 900 MiB: a
    /// long name weighs more, in a window and more again in a carry, so
    /// both are applied before their memory grows with the names.
    #[test]
    fn a_long_name_weighs_more_in_a_carry_than_in_a_window() {
        use crate::model::aggregate::NAME_BYTES_PER_CELL;
        let long = "n".repeat(4096);
        let mut w = Window::new(&[1, 60], 120);
        for name in ["short", long.as_str()] {
            let hit = crate::model::event::Hit {
                name,
                count: 1,
                ts_ms: 0,
                value: None,
            };
            w.add(&hit, 0);
        }
        let extra = 4096 / NAME_BYTES_PER_CELL * 2;
        assert_eq!(
            w.weight(),
            4 + extra,
            "two cells a name, the long one 64 more"
        );
        let mut c = Carry::new(&Window::new(&[1, 60], 120));
        c.add_window(&mut w);
        assert_eq!(c.weight(), 4 + NAME_WEIGHT_FACTOR * extra);
        assert!(c.is_due(Duration::from_secs(3600), c.weight()));
        w.clear();
        assert_eq!(w.weight(), 0);
    }

    #[test]
    fn the_first_window_is_taken_whole_and_the_next_are_summed_into_it() {
        let hit = |name, ts_ms, value| crate::model::event::Hit {
            name,
            count: 1,
            ts_ms,
            value,
        };
        let mut w = Window::new(&[1, 60], 120).with_quantiles(&[60]);
        for (i, name) in ["z", "a", "m", "a"].into_iter().enumerate() {
            w.add(&hit(name, 1000 * i as i64, Some(1.5)), 0);
        }
        let recorded: Vec<(u32, String, i64, i64)> = w
            .cells()
            .map(|c| (c.precision, c.name.to_string(), c.bucket, c.delta))
            .collect();
        let mut c = Carry::new(&w);
        c.add_window(&mut w);
        assert!(c.is_one_window() && !c.is_empty());
        assert_eq!(w.hits(), 0, "the window is left empty");
        let held: Vec<(u32, String, i64, i64)> = c
            .window()
            .cells()
            .map(|c| (c.precision, c.name.to_string(), c.bucket, c.delta))
            .collect();
        assert_eq!(held, recorded, "in the order it was recorded");
        assert_eq!(c.window().stat_cells().count(), 7);

        // The window given back counts as before, quantiles included.
        w.add(&hit("z", 0, Some(2.5)), 0);
        let stats: Vec<_> = w.stat_cells().collect();
        assert_eq!(stats.len(), 2);
        assert!(stats
            .iter()
            .any(|s| s.precision == 60 && !s.summary.histogram.is_empty()));
        assert!(stats
            .iter()
            .any(|s| s.precision == 1 && s.summary.histogram.is_empty()));
        c.add_window(&mut w);
        assert!(!c.is_one_window(), "two windows are a sum");
        assert_eq!(w.hits(), 0);
        let z_at_0: Vec<i64> = c
            .window()
            .cells()
            .filter(|x| x.name == "z" && x.precision == 1 && x.bucket == 0)
            .map(|x| x.delta)
            .collect();
        assert_eq!(z_at_0, [2], "summed with the first window's cell");
        assert_eq!(c.entries, 5);
        c.clear();
        assert!(!c.is_one_window() && c.is_empty());
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
        let mut c = Carry::new(&Window::new(&[60], 120));
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
