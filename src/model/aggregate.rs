//! A window of hits turned into counter increments.
//!
//! A worker reads a batch of stream entries, [`Window::add`]s each decoded
//! [`Hit`], then writes every [`Cell`] (one per distinct precision, name and
//! bucket) to Redis as `HINCRBY count:PREC:NAME BUCKET DELTA` (plus
//! `ZADD known: 0 PREC:NAME`), and [`Window::clear`]s it for the next batch.
//! Summing in memory first turns thousands of hits on a hot name into one
//! increment per precision.
//!
//! Buckets follow *Redis in Action* §5.2: the bucket of a hit at precision
//! `P` seconds is `floor(ts_s / P) * P` in unix seconds, with
//! `ts_s = floor(ts_ms / 1000)` (Euclidean division, so floors hold for any
//! sign). Only `samples` buckets per counter are kept by the cleaner, so a hit
//! whose bucket is already past that horizon is skipped at that precision.
//!
//! Cost of [`Window::add`]: one hash lookup of the name (an allocation only
//! the first time a name appears in the window), then per precision a walk of
//! that (name, precision)'s bucket list, which is kept sorted newest first:
//! O(1) for hits in time order, which stream order nearly is.
//!
//! A hit with a `value` also adds `count` observations of it to a
//! [`Summary`] of its cell (count, sum, sum of squares, min, max, and the
//! quantile histogram at the precisions given to
//! [`Window::with_quantiles`]), kept in a side table keyed by cell, so
//! count-only cells stay as they are and a hit without value pays one
//! branch more. [`Window::cell_lists`] lists them for `stats:PREC:NAME`.
//!
//! Arithmetic saturates: deltas and the count sum are `i64` and cannot
//! overflow in practice (counts ≤ [`MAX_COUNT`](crate::model::event::MAX_COUNT) = 10^9
//! times a few million hits is < 2^63), but a saturated value is still better
//! than a wrap or a panic in a long-running worker.

use std::collections::HashMap;

use crate::model::event::Hit;
use crate::model::stats::{HistBucket, Summary};

/// What a statistics cell weighs against `--window-cells`, before its
/// histogram entries (one each): measured on a Zipf backlog with a value on
/// every hit, a statistics cell costs about three counter cells of worker
/// memory while applying (its summary, record and script arguments). With
/// 3, such a backlog drains in windows that keep the worker near 48 MiB
/// (117 MiB when statistics cells weighed nothing).
pub(crate) const STAT_CELL_WINDOW_WEIGHT: usize = 3;
/// Histogram entries that weigh one cell against `--window-cells`: an
/// entry shares its histogram's allocation and is two short script
/// arguments.
pub(crate) const HIST_ENTRIES_PER_CELL: usize = 4;
/// Bytes of a name that weigh one more cell against `--window-cells`, at
/// each precision: a cell carries its name into its key, its `known:`
/// member, its record and its script arguments, so a cell of a 4 KiB name
/// cost the worker about 13 KiB (10,000 distinct 4 KiB names drained with
/// a peak RSS over 900 MiB when names weighed nothing). Names under this
/// length weigh nothing more.
pub(crate) const NAME_BYTES_PER_CELL: usize = 128;
/// "No cell" link in the bucket lists.
const NONE: usize = usize::MAX;
/// Scratch marker for "skipped at this precision"; no real bucket is this low
/// since bucket ≥ `i64::MIN / 1000 - P`.
const SKIP: i64 = i64::MIN;

/// One counter increment: add `delta` to field `bucket` of HASH
/// `count:{precision}:{name}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Cell<'a> {
    /// Precision in seconds (e.g. 60).
    pub precision: u32,
    /// Counter name, as in the hits.
    pub name: &'a str,
    /// Bucket start in unix seconds: `floor(ts_s / precision) * precision`.
    pub bucket: i64,
    /// Sum of the counts of this window's hits in this bucket (saturating).
    pub delta: i64,
}

/// The statistics of one cell: what field prefix `bucket` of HASH
/// `stats:{precision}:{name}` gets (see [`crate::model::stats`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StatCell<'a> {
    /// Precision in seconds.
    pub precision: u32,
    /// Counter name.
    pub name: &'a str,
    /// Bucket start in unix seconds, as for the [`Cell`] of the same hits.
    pub bucket: i64,
    /// The window's observations in this cell (histogram only at quantile
    /// precisions).
    pub summary: &'a Summary,
}

/// A stored bucket of one (name, precision) list.
#[derive(Debug, Clone, Copy)]
struct Slot {
    bucket: i64,
    delta: i64,
    /// Next (older) bucket of the same list, or [`NONE`].
    next: usize,
}

/// In-memory sums of a window of hits, per (precision, name, bucket).
///
/// Reuse one `Window` per worker: [`Window::clear`] keeps its allocations.
#[derive(Debug, Clone, Default)]
pub(crate) struct Window {
    /// Distinct precisions in seconds, in the order given.
    precisions: Vec<u32>,
    /// `samples * precision` per precision, seconds (the cleaner's horizon).
    spans: Vec<i64>,
    #[cfg(test)]
    samples: u32,
    /// Name → dense id; the only per-name allocation.
    names: HashMap<Box<str>, usize>,
    /// `heads[id * precisions.len() + p]` = newest slot of that list.
    heads: Vec<usize>,
    slots: Vec<Slot>,
    /// Hits skipped as too old, per precision.
    skipped: Vec<u64>,
    hits: u64,
    /// The sum of the hits' counts, which the tests check.
    #[cfg(test)]
    count_sum: i64,
    /// Per-precision bucket of the hit being added ([`SKIP`] = skipped).
    scratch: Vec<i64>,
    /// Per precision: whether its statistics keep a quantile histogram.
    quantiles: Vec<bool>,
    /// Slot index → the statistics of that cell's values (only cells that
    /// got a hit with a value).
    stats: HashMap<usize, Summary>,
    /// The statistics cells' weight in quarters of a cell:
    /// [`STAT_CELL_WINDOW_WEIGHT`] cells each plus a quarter per histogram
    /// entry, kept as they are added.
    stats_weight: usize,
    /// The names' extra weight in cells: per name, [`NAME_BYTES_PER_CELL`]
    /// of its bytes weigh one cell at each precision.
    name_weight: usize,
}

impl Window {
    /// A window for these precisions (seconds; duplicates are dropped, order
    /// kept) keeping `samples` buckets per counter (the service default is
    /// precisions 1, 5, 60, 300, 3600, 18000, 86400 and 120 samples).
    ///
    /// # Panics
    /// If a precision is 0: buckets are undefined for it (a config error).
    pub(crate) fn new(precisions: &[u32], samples: u32) -> Self {
        assert!(
            precisions.iter().all(|&p| p > 0),
            "precisions must be positive: {precisions:?}"
        );
        let mut distinct = Vec::with_capacity(precisions.len());
        for &p in precisions {
            if !distinct.contains(&p) {
                distinct.push(p);
            }
        }
        let spans = distinct
            .iter()
            .map(|&p| i64::from(samples).saturating_mul(i64::from(p)))
            .collect();
        Window {
            skipped: vec![0; distinct.len()],
            scratch: vec![SKIP; distinct.len()],
            quantiles: vec![false; distinct.len()],
            precisions: distinct,
            spans,
            #[cfg(test)]
            samples,
            ..Window::default()
        }
    }

    /// Keeps a quantile histogram in the statistics of these precisions
    /// (`HITCOUNT_QUANTILE_PRECISIONS`; others of the list are ignored).
    pub(crate) fn with_quantiles(mut self, precisions: &[u32]) -> Self {
        for (q, p) in self.quantiles.iter_mut().zip(&self.precisions) {
            *q = precisions.contains(p);
        }
        self
    }

    /// An empty window counting as this one does (precisions, samples,
    /// quantiles), with allocations of its own.
    pub(crate) fn empty_like(&self) -> Window {
        let n = self.precisions.len();
        Window {
            precisions: self.precisions.clone(),
            spans: self.spans.clone(),
            #[cfg(test)]
            samples: self.samples,
            skipped: vec![0; n],
            scratch: vec![SKIP; n],
            quantiles: self.quantiles.clone(),
            ..Window::default()
        }
    }

    /// The distinct precisions (seconds) this window counts at.
    pub(crate) fn precisions(&self) -> &[u32] {
        &self.precisions
    }

    /// Adds one hit. `now_ms` = wall clock, unix ms.
    ///
    /// At precision `P` the hit's bucket is skipped (not counted, and counted
    /// in [`Window::skipped`]) when it is at or before
    /// `now_s - samples * P` (`now_s = now_ms.div_euclid(1000)`): the cleaner
    /// would delete it at once. It is still counted at the precisions whose
    /// horizon holds it. A hit skipped at every precision does not intern
    /// its name but still counts in [`Window::hits`] and in the tests'
    /// sum of counts.
    pub(crate) fn add(&mut self, hit: &Hit<'_>, now_ms: i64) {
        self.hits += 1;
        #[cfg(test)]
        {
            self.count_sum = self.count_sum.saturating_add(hit.count);
        }
        let now_s = now_ms.div_euclid(1000);
        let ts_s = hit.ts_ms.div_euclid(1000);
        let mut kept = false;
        for (p, &prec) in self.precisions.iter().enumerate() {
            match kept_bucket(ts_s, now_s, prec, self.spans[p]) {
                None => {
                    self.skipped[p] += 1;
                    self.scratch[p] = SKIP;
                }
                Some(bucket) => {
                    self.scratch[p] = bucket;
                    kept = true;
                }
            }
        }
        if !kept {
            return;
        }
        let np = self.precisions.len();
        let id = self.intern(hit.name);
        // One logarithm per hit with a value, whatever the number of precisions.
        let hist = hit
            .value
            .filter(|_| self.quantiles.contains(&true))
            .and_then(HistBucket::of);
        for p in 0..np {
            let bucket = self.scratch[p];
            if bucket == SKIP {
                continue;
            }
            let slot = self.bump(id * np + p, bucket, hit.count);
            let Some(value) = hit.value else {
                continue;
            };
            let b = hist.filter(|_| self.quantiles[p]);
            self.observe_at(slot, |summary| summary.observe_in(value, hit.count, b));
        }
    }

    /// Updates the statistics of the cell in `slot` with `f`, keeping
    /// their weight.
    fn observe_at(&mut self, slot: usize, f: impl FnOnce(&mut Summary)) {
        let mut added = 0;
        let summary = self.stats.entry(slot).or_insert_with(|| {
            added = STAT_CELL_WINDOW_WEIGHT * HIST_ENTRIES_PER_CELL;
            Summary::default()
        });
        let entries = summary.histogram.len();
        f(summary);
        added += summary.histogram.len() - entries;
        self.stats_weight += added;
    }

    /// Dense id of `name`, allocating it only the first time.
    fn intern(&mut self, name: &str) -> usize {
        if let Some(&id) = self.names.get(name) {
            return id;
        }
        let id = self.names.len();
        self.names.insert(name.into(), id);
        self.name_weight += name.len() / NAME_BYTES_PER_CELL * self.precisions.len();
        self.heads
            .extend(std::iter::repeat_n(NONE, self.precisions.len()));
        id
    }

    /// Adds `delta` to `bucket` in list `list`, keeping it newest first;
    /// returns the slot's index.
    fn bump(&mut self, list: usize, bucket: i64, delta: i64) -> usize {
        let (mut prev, mut cur) = (NONE, self.heads[list]);
        while cur != NONE {
            let slot = &mut self.slots[cur];
            if slot.bucket == bucket {
                slot.delta = slot.delta.saturating_add(delta);
                return cur;
            }
            if slot.bucket < bucket {
                break;
            }
            prev = cur;
            cur = slot.next;
        }
        let new = self.slots.len();
        self.slots.push(Slot {
            bucket,
            delta,
            next: cur,
        });
        if prev == NONE {
            self.heads[list] = new;
        } else {
            self.slots[prev].next = new;
        }
        new
    }

    /// Adds cells already aggregated elsewhere (another window's), summing
    /// each with this window's cell of the same precision, name and bucket.
    /// A cell of a precision this window does not count at is ignored.
    /// Cells grouped by name (as [`Window::cell_lists`] lists them) look each
    /// name up once.
    pub(crate) fn merge(&mut self, cells: &[Cell<'_>]) {
        let mut last = None;
        for cell in cells {
            if let Some(list) = self.list_of(cell.precision, cell.name, &mut last) {
                self.bump(list, cell.bucket, cell.delta);
            }
        }
    }

    /// Adds statistics cells aggregated elsewhere, as [`Window::merge`]
    /// adds count cells (merge the same window's counts first: a
    /// statistics cell belongs to the count cell of the same hits).
    pub(crate) fn merge_stats(&mut self, stats: &[StatCell<'_>]) {
        let mut last = None;
        for cell in stats {
            if let Some(list) = self.list_of(cell.precision, cell.name, &mut last) {
                let slot = self.bump(list, cell.bucket, 0);
                self.observe_at(slot, |summary| summary.merge(cell.summary));
            }
        }
    }

    /// Adds another window's cells and statistics cells (see
    /// [`Window::merge`] and [`Window::merge_stats`]), growing its slots to
    /// at most `room` (or what they need beyond it) instead of doubling
    /// them: a sum of a bounded number of cells never uses a doubled
    /// list's second half, 24 bytes a slot (25 MB in a carry of a million
    /// cells).
    pub(crate) fn merge_window(&mut self, other: &Window, room: usize) {
        let need = self.slots.len() + other.slots.len();
        if need > self.slots.capacity() {
            let grown = (self.slots.capacity() * 2).min(room).max(need);
            self.slots.reserve_exact(grown - self.slots.len());
        }
        let (cells, stats) = other.cell_lists();
        self.merge(&cells);
        self.merge_stats(&stats);
    }

    /// The list of (`name`, `precision`), `None` for a precision this
    /// window does not count at; `last` remembers the name looked up last,
    /// so cells grouped by name look each name up once.
    fn list_of<'n>(
        &mut self,
        precision: u32,
        name: &'n str,
        last: &mut Option<(&'n str, usize)>,
    ) -> Option<usize> {
        let p = self.precisions.iter().position(|&x| x == precision)?;
        let id = match *last {
            Some((n, id)) if n == name => id,
            _ => self.intern(name),
        };
        *last = Some((name, id));
        Some(id * self.precisions.len() + p)
    }

    /// Hits (events) added since [`Window::new`] or [`Window::clear`],
    /// skipped ones included.
    pub(crate) fn hits(&self) -> u64 {
        self.hits
    }

    /// Sum of the counts of the hits added (saturating), skipped ones included.
    #[cfg(test)]
    pub(crate) fn count_sum(&self) -> i64 {
        self.count_sum
    }

    /// Distinct (precision, name, bucket) cells, i.e. `HINCRBY`s to send.
    #[cfg(any(test, feature = "bench"))]
    pub(crate) fn cells_len(&self) -> usize {
        self.slots.len()
    }

    /// Distinct names with at least one cell.
    #[cfg(test)]
    pub(crate) fn names_len(&self) -> usize {
        self.names.len()
    }

    /// Every distinct cell with its summed delta, in no particular order
    /// (grouped by name, then precision, newest bucket first).
    #[cfg(any(test, feature = "bench"))]
    pub(crate) fn cells(&self) -> impl Iterator<Item = Cell<'_>> {
        walk(&self.names, &self.precisions, &self.heads, &self.slots).map(|(_, c)| c)
    }

    /// Cells with statistics (from hits with a value), in the order of
    /// [`Window::cells`]: grouped by name, then precision.
    #[cfg(test)]
    pub(crate) fn stat_cells(&self) -> impl Iterator<Item = StatCell<'_>> {
        self.cell_lists().1.into_iter()
    }

    /// Every distinct cell with its summed delta, in no particular order
    /// (grouped by name, then precision, newest bucket first), and those
    /// with statistics (hits with a value) in the same order.
    pub(crate) fn cell_lists(&self) -> (Vec<Cell<'_>>, Vec<StatCell<'_>>) {
        lists(
            (&self.names, &self.precisions),
            (&self.heads, &self.slots),
            &self.stats,
        )
    }

    /// [`Window::cell_lists`], its slots let go once listed: what is left
    /// is only to be cleared ([`Window::clear`]). A carry of a million
    /// cells is applied from its lists, and its slots (24 bytes a cell)
    /// would hold nothing more meanwhile.
    pub(crate) fn release_into_lists(&mut self) -> (Vec<Cell<'_>>, Vec<StatCell<'_>>) {
        let slots = std::mem::take(&mut self.slots);
        let heads = std::mem::take(&mut self.heads);
        lists(
            (&self.names, &self.precisions),
            (&heads, &slots),
            &self.stats,
        )
    }

    /// What the window weighs against `--window-cells`: a cell 1, a
    /// statistics cell [`STAT_CELL_WINDOW_WEIGHT`] plus one per
    /// [`HIST_ENTRIES_PER_CELL`] histogram entries, a long name one more per
    /// [`NAME_BYTES_PER_CELL`] of its bytes at each precision (about what
    /// each costs in worker memory).
    pub(crate) fn weight(&self) -> usize {
        self.weight_with(1, 1)
    }

    /// [`Window::weight`] with its statistics cells' share multiplied by
    /// `stats` and its long names' by `names` (see [`crate::model::carry`]).
    pub(crate) fn weight_with(&self, stats: usize, names: usize) -> usize {
        self.slots.len()
            + stats * self.stats_weight / HIST_ENTRIES_PER_CELL
            + names * self.name_weight
    }

    /// `(precision, hits skipped as too old)` for every precision, zeros
    /// included, in precision order.
    pub(crate) fn skipped(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.precisions
            .iter()
            .copied()
            .zip(self.skipped.iter().copied())
    }

    /// Empties the window, keeping its allocations (except the interned
    /// names, which are freed) for the next batch.
    pub(crate) fn clear(&mut self) {
        self.names.clear();
        self.heads.clear();
        self.slots.clear();
        self.stats.clear();
        self.stats_weight = 0;
        self.name_weight = 0;
        self.skipped.fill(0);
        self.hits = 0;
        #[cfg(test)]
        {
            self.count_sum = 0;
        }
    }

    /// True when no hit was added since [`Window::new`] or [`Window::clear`].
    /// A window whose hits were all skipped is not empty: its skips still
    /// need reporting.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.hits == 0
    }
}

/// A window's cells (from its `names`, `precisions`, `heads` and `slots`)
/// and those with statistics, each list allocated at its size: collected
/// as they came, a million cells took up to twice their 40 MB.
fn lists<'a>(
    (names, precisions): (&'a HashMap<Box<str>, usize>, &'a [u32]),
    (heads, slots): (&[usize], &[Slot]),
    stats: &'a HashMap<usize, Summary>,
) -> (Vec<Cell<'a>>, Vec<StatCell<'a>>) {
    let mut cells = Vec::with_capacity(slots.len());
    cells.extend(walk(names, precisions, heads, slots).map(|(_, c)| c));
    let mut stat_cells = Vec::with_capacity(stats.len());
    if stats.is_empty() {
        return (cells, stat_cells);
    }
    stat_cells.extend(
        walk(names, precisions, heads, slots).filter_map(|(slot, c)| {
            stats.get(&slot).map(|summary| StatCell {
                precision: c.precision,
                name: c.name,
                bucket: c.bucket,
                summary,
            })
        }),
    );
    (cells, stat_cells)
}

/// Every cell of a window's lists with its slot index.
fn walk<'a, 'b>(
    names: &'a HashMap<Box<str>, usize>,
    precisions: &'a [u32],
    heads: &'b [usize],
    slots: &'b [Slot],
) -> impl Iterator<Item = (usize, Cell<'a>)> + use<'a, 'b> {
    let np = precisions.len();
    names.iter().flat_map(move |(name, &id)| {
        precisions
            .iter()
            .enumerate()
            .flat_map(move |(p, &precision)| {
                // None once its lists were released: no cell.
                let mut cur = heads.get(id * np + p).copied().unwrap_or(NONE);
                std::iter::from_fn(move || {
                    let at = cur;
                    let slot = slots.get(at)?;
                    cur = slot.next;
                    let cell = Cell {
                        precision,
                        name,
                        bucket: slot.bucket,
                        delta: slot.delta,
                    };
                    Some((at, cell))
                })
            })
    })
}

/// The bucket of a hit at `ts_s` at precision `prec`, unless it starts at
/// or before `now_s - span` (`span` = samples × `prec`, the cleaner's
/// horizon: it would be deleted at once, so it is never written). Unix
/// seconds.
pub(crate) fn kept_bucket(ts_s: i64, now_s: i64, prec: u32, span: i64) -> Option<i64> {
    let prec = i64::from(prec);
    let bucket = ts_s.div_euclid(prec) * prec;
    (bucket > now_s.saturating_sub(span)).then_some(bucket)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const DEFAULT: [u32; 7] = [1, 5, 60, 300, 3600, 18000, 86400];
    /// A wall clock for the tests: 2023-11-14T22:13:20Z.
    const NOW_MS: i64 = 1_700_000_000_000;

    fn hit(name: &str, count: i64, ts_ms: i64) -> Hit<'_> {
        Hit {
            name,
            count,
            ts_ms,
            value: None,
        }
    }

    fn cells(w: &Window) -> BTreeMap<(u32, String, i64), i64> {
        let mut out = BTreeMap::new();
        for c in w.cells() {
            assert!(out
                .insert((c.precision, c.name.to_owned(), c.bucket), c.delta)
                .is_none());
        }
        assert_eq!(out.len(), w.cells_len());
        out
    }

    #[test]
    fn one_hit_all_precisions() {
        let mut w = Window::new(&DEFAULT, 120);
        w.add(&hit("a", 3, NOW_MS - 1), NOW_MS);
        let ts_s = NOW_MS / 1000 - 1;
        let expect: BTreeMap<_, _> = DEFAULT
            .iter()
            .map(|&p| {
                (
                    (
                        p,
                        "a".to_owned(),
                        ts_s.div_euclid(i64::from(p)) * i64::from(p),
                    ),
                    3,
                )
            })
            .collect();
        assert_eq!(cells(&w), expect);
        assert_eq!(
            (w.hits(), w.count_sum(), w.names_len(), w.cells_len()),
            (1, 3, 1, 7)
        );
        assert!(w.skipped().all(|(_, n)| n == 0));
        // 86400 buckets start at midnight UTC.
        assert!(w
            .cells()
            .any(|c| c.precision == 86400 && c.bucket == 1_699_920_000));
    }

    #[test]
    fn bucket_boundaries() {
        let mut w = Window::new(&[60], 120);
        let start_ms = 1_700_000_040_000; // multiple of 60 s
        w.add(&hit("a", 1, start_ms), NOW_MS);
        w.add(&hit("a", 10, start_ms - 1), NOW_MS);
        w.add(&hit("a", 100, start_ms + 59_999), NOW_MS);
        let got = cells(&w);
        assert_eq!(got[&(60, "a".into(), 1_700_000_040)], 101);
        assert_eq!(got[&(60, "a".into(), 1_699_999_980)], 10);
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn floor_is_euclidean() {
        // Hits before the epoch still floor down (no truncation toward zero).
        let mut w = Window::new(&[1, 60], u32::MAX);
        w.add(&hit("a", 1, -1), 0);
        w.add(&hit("a", 1, -1001), 0);
        let got = cells(&w);
        assert_eq!(got[&(1, "a".into(), -1)], 1);
        assert_eq!(got[&(1, "a".into(), -2)], 1);
        assert_eq!(got[&(60, "a".into(), -60)], 2);
        // And in the positive range floor = truncation.
        let mut w = Window::new(&[86400], 120);
        w.add(&hit("a", 1, 86_400_000 * 2 - 1), 86_400_000 * 3);
        assert_eq!(cells(&w)[&(86400, "a".into(), 86_400)], 1);
    }

    #[test]
    fn too_old_is_skipped_per_precision() {
        // samples = 120: at P = 1 the horizon is 120 s, at P = 60 it is 2 h.
        let now_s = NOW_MS / 1000;
        let mut w = Window::new(&[1, 60], 120);
        let edge = now_s - 120; // bucket at P = 1 exactly at the horizon: skipped
        w.add(&hit("old", 1, edge * 1000 + 999), NOW_MS + 999);
        w.add(&hit("kept", 1, (edge + 1) * 1000), NOW_MS);
        let got = cells(&w);
        assert!(!got.contains_key(&(1, "old".into(), edge)));
        assert_eq!(got[&(1, "kept".into(), edge + 1)], 1);
        assert!(got.keys().any(|k| k.0 == 60 && k.1 == "old"));
        assert_eq!(w.skipped().collect::<Vec<_>>(), [(1, 1), (60, 0)]);

        // At P = 60 the same rule, with bucket starts.
        let mut w = Window::new(&[60], 120);
        let horizon = now_s - 120 * 60;
        let b = horizon.div_euclid(60) * 60; // the bucket at or before the horizon
        assert_eq!(b, horizon - horizon.rem_euclid(60));
        w.add(&hit("a", 1, b * 1000), (b + 120 * 60) * 1000);
        w.add(&hit("a", 2, (b + 60) * 1000), (b + 120 * 60) * 1000);
        assert_eq!(cells(&w), BTreeMap::from([((60, "a".into(), b + 60), 2)]));
        assert_eq!(w.skipped().collect::<Vec<_>>(), [(60, 1)]);
    }

    #[test]
    fn hit_skipped_everywhere_interns_nothing() {
        let mut w = Window::new(&[1, 5], 2);
        w.add(&hit("gone", 4, 0), NOW_MS);
        assert_eq!(
            (w.hits(), w.count_sum(), w.names_len(), w.cells_len()),
            (1, 4, 0, 0)
        );
        assert!(!w.is_empty());
        assert_eq!(w.skipped().collect::<Vec<_>>(), [(1, 1), (5, 1)]);
    }

    #[test]
    fn sums_and_orders() {
        let mut w = Window::new(&[1, 5], 1000);
        // Out of order inside one (name, precision) list.
        for (ts_s, c) in [(100, 1), (103, 2), (101, 4), (100, 8), (99, 16), (105, 32)] {
            w.add(&hit("a", c, ts_s * 1000 + 500), 200_000);
            w.add(&hit("b", 1, ts_s * 1000), 200_000);
        }
        let got = cells(&w);
        assert_eq!(got[&(1, "a".into(), 100)], 9);
        assert_eq!(got[&(1, "a".into(), 99)], 16);
        assert_eq!(got[&(5, "a".into(), 100)], 15);
        assert_eq!(got[&(5, "a".into(), 95)], 16);
        assert_eq!(got[&(5, "a".into(), 105)], 32);
        assert_eq!(got[&(5, "b".into(), 100)], 4);
        assert_eq!(w.names_len(), 2);
        assert_eq!(w.count_sum(), 63 + 6);
        assert_eq!(w.hits(), 12);
        // Each list is newest first.
        let a1: Vec<i64> = w
            .cells()
            .filter(|c| c.name == "a" && c.precision == 1)
            .map(|c| c.bucket)
            .collect();
        assert_eq!(a1, [105, 103, 101, 100, 99]);
    }

    #[test]
    fn merged_cells_sum_with_the_same_cells() {
        let mut a = Window::new(&[1, 60], 120);
        a.add(&hit("x", 2, NOW_MS), NOW_MS);
        a.add(&hit("y", 1, NOW_MS - 61_000), NOW_MS);
        let mut carry = Window::new(&[1, 60], 120);
        carry.merge(&a.cells().collect::<Vec<_>>());
        // Names interleaved, and a precision the carry does not count at.
        let x: Vec<Cell<'_>> = a
            .cells()
            .filter(|c| c.precision == 60 && c.name == "x")
            .collect();
        let y: Vec<Cell<'_>> = a
            .cells()
            .filter(|c| c.precision == 60 && c.name == "y")
            .collect();
        let z = Cell {
            precision: 7,
            name: "z",
            bucket: 0,
            delta: 1,
        };
        carry.merge(&[x[0], y[0], z, x[0]]);
        let got = cells(&carry);
        let (s, m) = (NOW_MS / 1000, (NOW_MS / 1000).div_euclid(60) * 60);
        assert_eq!(got[&(60, "x".into(), m)], 6);
        assert_eq!(got[&(60, "y".into(), m - 60)], 2);
        assert_eq!(got[&(1, "x".into(), s)], 2);
        assert_eq!(got[&(1, "y".into(), s - 61)], 1);
        assert_eq!(got.len(), 4, "no unknown precision");
        assert_eq!(carry.hits(), 0, "merging adds cells, not hits");
    }

    #[test]
    fn saturates() {
        let mut w = Window::new(&[1], 10);
        w.add(&hit("a", i64::MAX, 0), 0);
        w.add(&hit("a", i64::MAX, 0), 0);
        assert_eq!(w.count_sum(), i64::MAX);
        assert_eq!(w.cells().next().unwrap().delta, i64::MAX);
    }

    #[test]
    fn clear_and_reuse() {
        let mut w = Window::new(&DEFAULT, 120);
        assert!(w.is_empty());
        w.add(&hit("a", 1, NOW_MS), NOW_MS);
        w.add(&hit("a", 1, 0), NOW_MS);
        w.clear();
        assert!(w.is_empty());
        assert_eq!(
            (w.hits(), w.count_sum(), w.names_len(), w.cells_len()),
            (0, 0, 0, 0)
        );
        assert_eq!(w.cells().count(), 0);
        assert!(w.skipped().all(|(_, n)| n == 0));
        w.add(&hit("b", 2, NOW_MS), NOW_MS);
        assert_eq!(w.names_len(), 1);
        assert!(w.cells().all(|c| c.name == "b" && c.delta == 2));
    }

    #[test]
    fn a_sum_grows_to_its_room_and_lets_its_slots_go_once_listed() {
        let mut w = Window::new(&[1], 120);
        for i in 0..100 {
            w.add(&valued(&format!("n{i}"), 1, NOW_MS, 5.0), NOW_MS);
        }
        let mut sum = w.empty_like();
        sum.merge_window(&w, 150);
        assert_eq!(
            sum.slots.capacity(),
            100,
            "the first window's cells, not more"
        );
        let mut next = w.empty_like();
        for i in 100..160 {
            next.add(&hit(&format!("n{i}"), 1, NOW_MS), NOW_MS);
        }
        sum.merge_window(&next, 150);
        assert_eq!(sum.slots.capacity(), 160, "past its room, what it needs");
        sum.merge_window(&w, 150);
        assert_eq!(sum.cells_len(), 160, "the same cells summed: no new slot");

        let owned = |(cells, stats): (Vec<Cell<'_>>, Vec<StatCell<'_>>)| {
            let cells: BTreeMap<String, i64> = cells
                .iter()
                .map(|c| (c.name.to_string(), c.delta))
                .collect();
            let stats: Vec<(String, i64)> = stats
                .iter()
                .map(|c| (c.name.to_string(), c.summary.count))
                .collect();
            (cells, stats)
        };
        let (listed, valued) = owned(sum.cell_lists());
        assert_eq!((listed.len(), listed["n7"], listed["n107"]), (160, 2, 1));
        assert_eq!(valued.len(), 100);
        assert_eq!(owned(sum.release_into_lists()), (listed, valued));
        assert_eq!(
            (sum.slots.capacity(), sum.cells().count()),
            (0, 0),
            "released"
        );
        sum.clear();
        sum.merge_window(&next, 150);
        assert_eq!(sum.cells().count(), 60, "cleared, it sums again");
    }

    fn valued(name: &str, count: i64, ts_ms: i64, value: f64) -> Hit<'_> {
        Hit {
            value: Some(value),
            ..hit(name, count, ts_ms)
        }
    }

    #[test]
    fn values_make_statistics_beside_the_counts() {
        let mut w = Window::new(&[1, 60], 120).with_quantiles(&[60, 3600]);
        w.add(&valued("a", 2, NOW_MS, 10.0), NOW_MS);
        w.add(&valued("a", 1, NOW_MS + 1000, -4.5), NOW_MS);
        w.add(&hit("a", 5, NOW_MS), NOW_MS);
        w.add(&hit("plain", 1, NOW_MS), NOW_MS);
        // Counts take every hit; statistics only the valued ones.
        let counts = cells(&w);
        assert_eq!(counts[&(60, "a".into(), 1_699_999_980)], 8);
        assert_eq!(w.stats.len(), 3);
        // 5 counter cells, 3 statistics cells, 2 histogram entries (at 60 s).
        assert_eq!(w.cells_len(), 5);
        // The two entries weigh half a cell, rounded down.
        assert_eq!(w.weight(), 5 + 3 * STAT_CELL_WINDOW_WEIGHT);
        let stats: BTreeMap<_, _> = w
            .stat_cells()
            .map(|s| {
                (
                    (s.precision, s.name.to_owned(), s.bucket),
                    s.summary.clone(),
                )
            })
            .collect();
        assert_eq!(stats.len(), 3);
        let minute = &stats[&(60, "a".into(), 1_699_999_980)];
        let mut want = Summary::default();
        want.observe(10.0, 2, true);
        want.observe(-4.5, 1, true);
        assert_eq!(*minute, want);
        let second = &stats[&(1, "a".into(), NOW_MS / 1000)];
        assert_eq!((second.count, second.sum, second.min), (2, 20.0, 10.0));
        assert!(second.histogram.is_empty(), "no histogram at 1 s");
        // Every stat cell has its count cell; plain names have none.
        assert!(stats.keys().all(|k| counts.contains_key(k)));
        assert!(w.stat_cells().all(|s| s.name == "a"));
        w.clear();
        assert_eq!((w.stats.len(), w.stat_cells().count()), (0, 0));
        assert_eq!(w.weight(), 0);
    }

    #[test]
    fn merged_statistics_equal_those_of_one_window_of_all_the_hits() {
        let qs = [60];
        let (mut a, mut b) = (
            Window::new(&[1, 60], 120).with_quantiles(&qs),
            Window::new(&[1, 60], 120).with_quantiles(&qs),
        );
        let mut whole = Window::new(&[1, 60], 120).with_quantiles(&qs);
        let hits = [
            valued("a", 2, NOW_MS, 10.0),
            valued("a", 1, NOW_MS + 1000, -4.5),
            hit("a", 5, NOW_MS),
            valued("b", 1, NOW_MS, 0.25),
            valued("a", 3, NOW_MS, 1000.0),
            valued("b", 1, NOW_MS - 61_000, 7.0),
        ];
        for (i, h) in hits.iter().enumerate() {
            let w = if i % 2 == 0 { &mut a } else { &mut b };
            w.add(h, NOW_MS);
            whole.add(h, NOW_MS);
        }
        // The carry's way: each window's counts, then its statistics.
        let mut carry = Window::new(&[1, 60], 120);
        for w in [&a, &b] {
            carry.merge(&w.cells().collect::<Vec<_>>());
            carry.merge_stats(&w.stat_cells().collect::<Vec<_>>());
        }
        let summaries = |w: &Window| -> BTreeMap<(u32, String, i64), Summary> {
            w.stat_cells()
                .map(|s| {
                    (
                        (s.precision, s.name.to_owned(), s.bucket),
                        s.summary.clone(),
                    )
                })
                .collect()
        };
        // Exactly: these sums are exact in binary.
        assert_eq!(summaries(&carry), summaries(&whole));
        assert_eq!(cells(&carry), cells(&whole));
        assert_eq!(carry.weight(), whole.weight());
    }

    #[test]
    fn values_of_too_old_hits_are_skipped_with_them() {
        let mut w = Window::new(&[1, 60], 120);
        w.add(&valued("a", 1, NOW_MS - 600_000, 3.0), NOW_MS);
        assert_eq!(
            w.stat_cells().map(|s| s.precision).collect::<Vec<_>>(),
            [60]
        );
    }

    #[test]
    fn precisions_deduped() {
        let w = Window::new(&[60, 1, 60], 5);
        assert_eq!(w.precisions(), [60, 1]);
        assert_eq!(w.samples, 5);
    }

    #[test]
    #[should_panic(expected = "precisions must be positive")]
    fn zero_precision_panics() {
        let _ = Window::new(&[1, 0], 120);
    }
}
