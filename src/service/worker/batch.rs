//! The window a worker is filling: the entries read since the last apply,
//! their hits aggregated, the ones to dead-letter, and when to close it.

use std::time::{Duration, Instant};

use crate::model::aggregate::Window;
use crate::model::config::WorkerArgs;
use crate::model::event;
use crate::model::metrics::metrics;
use crate::model::tally::Tally;
use crate::store::commit::{Deferred, Failure, Rejected};
use crate::store::stream::EntryRef;

/// A window closes early once it holds this many rejected entries, so the
/// commit script's dead-letter XADDs stay short.
const MAX_REJECTED_PER_WINDOW: usize = 500;
/// While the worker is behind (reads come back full of entries older than
/// `--window-ms`), a window may stay open this many times `--window-ms`, so
/// it can reach its size limits.
const BACKLOG_AGE_FACTOR: u32 = 10;
/// At most one warning in this long about each [`Tally`]: hits whose
/// entry IDs are far ahead of Redis' clock may be every hit of a stream,
/// for good.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Hits counted at Redis' clock: their entry IDs are ahead of it.
static FUTURE_IDS: Tally<1> = Tally::new(WARN_EVERY);
/// Pending entries found deleted from the stream.
static GONE: Tally<1> = Tally::new(WARN_EVERY);

/// Entries read and not yet applied.
#[derive(Debug)]
pub(crate) struct Batch {
    window: Window,
    /// Entry ids, space separated: what the window acknowledges.
    ids: String,
    rejected: Vec<Rejected>,
    opened: Option<Instant>,
    /// Oldest entry id time in the window (unix ms), for the delay metric.
    oldest_ms: i64,
    /// Hits in the window counted at Redis' clock: their entry IDs are
    /// more than a minute ahead of it.
    future_ids: u64,
    /// Pending entries read back deleted from the stream (trimmed or
    /// deleted by someone else before they were counted), and the first.
    gone: (u64, Option<String>),
}

impl Batch {
    /// An empty batch for the layout's precisions and samples.
    pub(crate) fn new(precisions: &[u32], samples: u32) -> Batch {
        Batch {
            window: Window::new(precisions, samples),
            ids: String::new(),
            rejected: Vec::new(),
            opened: None,
            oldest_ms: i64::MAX,
            future_ids: 0,
            gone: (0, None),
        }
    }

    /// Keeps quantile histograms in the statistics of these precisions
    /// (see [`Window::with_quantiles`]).
    pub(crate) fn with_quantiles(mut self, precisions: &[u32]) -> Batch {
        self.window = self.window.with_quantiles(precisions);
        self
    }

    /// Decodes entries into the window, or the rejected list; `now_ms` is
    /// the local clock (what is too old to keep), `clock_ms` Redis' clock
    /// (what is too far ahead, see [`event::decode_at`]). Entries deleted
    /// while pending are only acknowledged, and reported once recorded
    /// ([`Batch::count_recorded`]).
    pub(crate) fn add(&mut self, entries: &[EntryRef<'_>], now_ms: i64, clock_ms: i64) {
        if self.opened.is_none() {
            self.opened = Some(Instant::now());
        }
        let mut future_ids = 0u64;
        let mut first_future = None;
        for e in entries {
            if !self.ids.is_empty() {
                self.ids.push(' ');
            }
            self.ids.push_str(e.id_str());
            if e.fields.is_none() {
                self.gone.0 += 1;
                self.gone.1.get_or_insert_with(|| e.id_str().to_string());
                continue;
            }
            // The size first, from lengths alone: a large entry is neither
            // decoded nor copied (its dead letter keeps 4 KiB of it).
            let bytes = event::entry_bytes(e.pairs());
            match event::check_size(bytes)
                .and_then(|()| event::decode_at(e.id, e.pairs(), clock_ms))
            {
                Ok((hit, from)) => {
                    self.window.add(&hit, now_ms);
                    let ms = if from == event::HitTime::Clock {
                        future_ids += 1;
                        first_future.get_or_insert(e.id_str());
                        Some(clock_ms)
                    } else {
                        event::entry_id_ms(e.id)
                    };
                    if let Some(ms) = ms {
                        self.oldest_ms = self.oldest_ms.min(ms);
                    }
                }
                Err(reject) => {
                    self.rejected
                        .push(Rejected::new(e.id_str(), reject.reason(), e.pairs(), bytes))
                }
            }
        }
        if let Some(id) = first_future {
            self.future_ids += future_ids;
            warn_future_ids(future_ids, id, clock_ms);
        }
    }

    /// Whether no entry was read into it.
    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// When its first entry was read.
    pub(crate) fn opened(&self) -> Option<Instant> {
        self.opened
    }

    /// Whether to apply it now: at its size limits, or once open
    /// `--window-ms` at the stream's head (`caught_up`), or ten times that
    /// while the worker is behind.
    pub(crate) fn is_full(&self, w: &WorkerArgs, caught_up: bool) -> bool {
        self.window.hits() as usize >= w.window_entries
            || self.window.weight() >= w.window_cells
            || self.rejected.len() >= MAX_REJECTED_PER_WINDOW
            || self.opened.is_some_and(|t| {
                let age = Duration::from_millis(w.window_ms);
                let elapsed = t.elapsed();
                elapsed >= age && (caught_up || elapsed >= age * BACKLOG_AGE_FACTOR)
            })
    }

    /// The aggregated hits.
    pub(crate) fn window(&self) -> &Window {
        &self.window
    }

    /// The aggregated hits, for the sum to take (see `sum.rs`).
    pub(crate) fn window_mut(&mut self) -> &mut Window {
        &mut self.window
    }

    /// Entry ids, space separated.
    pub(crate) fn ids(&self) -> &str {
        &self.ids
    }

    /// Entries to dead-letter.
    pub(crate) fn rejected(&self) -> &[Rejected] {
        &self.rejected
    }

    /// Counts a recorded window in the metrics (once per window, never per
    /// event); its apply is counted by [`count_applied`].
    pub(crate) fn count_recorded(&self) {
        let m = metrics();
        m.windows_applied.inc();
        m.window_size.observe(self.window.hits() as f64);
        m.events_applied.inc_by(self.window.hits());
        m.hits_future_id.inc_by(self.future_ids);
        for (precision, n) in self.window.skipped() {
            m.hits_too_old
                .with_label_values(&[&precision.to_string()])
                .inc_by(n);
        }
        for r in &self.rejected {
            m.events_dead_lettered.with_label_values(&[r.reason]).inc();
        }
        if let (n @ 1.., Some(first)) = (self.gone.0, &self.gone.1) {
            m.events_gone.inc_by(n);
            if let Some([entries]) = GONE.add([n]) {
                tracing::warn!(entries, first_id = %first,
                    "pending entries were deleted from the stream before they were counted \
                     (an XTRIM, XDEL or MAXLEN by another client): their hits are lost \
                     (logged at most once a minute)");
            }
        }
    }

    /// The time of its oldest counted entry (unix ms), if any.
    pub(crate) fn oldest_ms(&self) -> Option<i64> {
        (self.oldest_ms != i64::MAX).then_some(self.oldest_ms)
    }

    /// Empties it, keeping its allocations.
    pub(crate) fn clear(&mut self) {
        self.window.clear();
        self.ids.clear();
        self.rejected.clear();
        self.opened = None;
        self.oldest_ms = i64::MAX;
        self.future_ids = 0;
        self.gone = (0, None);
    }
}

/// Counts the windows of a carry applied and acknowledged at `now_ms` in
/// the metrics: the time its apply took from `began` (a window's commit
/// when it is applied as itself, else the sum's own step), and how late
/// each window's oldest entry is.
pub(crate) fn count_applied(windows: &[Deferred], began: Instant, now_ms: i64) {
    let m = metrics();
    m.apply_duration.observe(began.elapsed().as_secs_f64());
    for oldest in windows.iter().filter_map(|w| w.oldest_ms) {
        m.end_to_end_delay
            .observe((now_ms - oldest).max(0) as f64 / 1000.0);
    }
}

/// Counts the cells a sum failed to apply (dead-lettered when it is
/// finished) in the metrics, with a warning.
pub(crate) fn count_failures(failures: &[Failure]) {
    if let Some(first) = failures.first() {
        tracing::warn!(cells = failures.len(), first = %first.error, "some counters refused their increments; dead-lettered");
        metrics()
            .events_dead_lettered
            .with_label_values(&["apply_error"])
            .inc_by(failures.len() as u64);
    }
}

/// Warns, at most once a minute, about hits that took Redis' clock
/// because their entry IDs are more than a minute ahead of it (counted with
/// their window, [`Batch::count_recorded`]).
fn warn_future_ids(n: u64, first_id: &str, clock_ms: i64) {
    let Some([hits]) = FUTURE_IDS.add([n]) else {
        return;
    };
    tracing::warn!(
        hits,
        entry_id = first_id,
        redis_clock_ms = clock_ms,
        "stream entry IDs more than a minute ahead of Redis' clock (an XADD with an explicit \
         ID?): their hits are counted at Redis' clock instead; every later ID stays that \
         high until the stream is recreated"
    );
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    /// Entry id time of the entries below, unix ms.
    const T0: i64 = 1_700_000_000_000;
    /// The wall clock of the tests: a second after `T0`, so no hit is too old.
    const NOW: i64 = T0 + 1_000;
    /// Two precisions: every accepted hit of a new name makes two cells.
    const PRECISIONS: [u32; 2] = [1, 60];

    /// Metrics are process-wide: the tests that count windows run one at a
    /// time, so each sees only its own increments.
    static METRICS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn bulk(s: &[u8]) -> Value {
        Value::BulkString(s.to_vec())
    }

    /// Field/value pairs as XREADGROUP returns them (bulk strings).
    fn fields(pairs: &[(&str, &[u8])]) -> Vec<Value> {
        pairs
            .iter()
            .flat_map(|(k, v)| [bulk(k.as_bytes()), bulk(v)])
            .collect()
    }

    fn entry<'a>(id: &'a str, fields: &'a [Value]) -> EntryRef<'a> {
        EntryRef {
            id: id.as_bytes(),
            fields: Some(fields),
        }
    }

    /// An entry deleted from the stream while pending: no fields.
    fn deleted(id: &str) -> EntryRef<'_> {
        EntryRef {
            id: id.as_bytes(),
            fields: None,
        }
    }

    /// The batch's window as the worker records it.
    fn deferred(b: &Batch) -> Deferred {
        Deferred {
            window: "w".into(),
            ids: crate::model::ids::IdList::parse(b.ids()).unwrap(),
            committed: Instant::now(),
            oldest_ms: b.oldest_ms(),
        }
    }

    fn batch() -> Batch {
        Batch::new(&PRECISIONS, 120)
    }

    fn settings(entries: usize, cells: usize, window_ms: u64) -> WorkerArgs {
        WorkerArgs {
            window_entries: entries,
            window_cells: cells,
            window_ms,
            ..WorkerArgs::default()
        }
    }

    /// Large limits: only the one a test sets can close the window.
    fn roomy() -> WorkerArgs {
        settings(1_000_000, 1_000_000, 60_000)
    }

    /// Backdates the window's opening by `ms`, as if it had been open that
    /// long (no sleeping).
    fn open_since(b: &mut Batch, ms: u64) {
        let t = Instant::now()
            .checked_sub(Duration::from_millis(ms))
            .expect("the monotonic clock is older than the test's offset");
        b.opened = Some(t);
    }

    #[test]
    fn a_new_batch_is_empty_unopened_and_not_full() {
        let b = batch();
        assert!(b.is_empty());
        assert!(b.opened().is_none());
        assert_eq!(b.ids(), "");
        assert!(b.rejected().is_empty());
        assert!(b.window().is_empty());
        assert!(!b.is_full(&settings(1, 1, 0), true));
        assert!(!b.is_full(&settings(1, 1, 0), false));
    }

    #[test]
    fn plain_field_entries_are_counted_in_the_window() {
        let f = fields(&[("name", b"home"), ("count", b"3")]);
        let mut b = batch();
        b.add(&[entry("1700000000000-0", &f)], NOW, NOW);
        assert!(!b.is_empty());
        assert!(b.opened().is_some());
        assert_eq!(b.window().hits(), 1);
        assert_eq!(b.window().count_sum(), 3);
        let mut cells: Vec<_> = b
            .window()
            .cells()
            .map(|c| (c.precision, c.name.to_string(), c.bucket, c.delta))
            .collect();
        cells.sort();
        assert_eq!(
            cells,
            vec![
                (1, "home".to_string(), 1_700_000_000, 3),
                (60, "home".to_string(), 1_699_999_980, 3),
            ]
        );
        assert!(b.rejected().is_empty());
    }

    #[test]
    fn msgpack_entries_are_counted_in_the_window() {
        let packed = event::encode("cart", 2, Some(1_700_000_000.5));
        let f = fields(&[("hit", &packed)]);
        let mut b = batch();
        b.add(&[entry("1700000000000-0", &f)], NOW, NOW);
        assert_eq!(b.window().hits(), 1);
        assert_eq!(b.window().count_sum(), 2);
        assert_eq!(b.window().cells_len(), PRECISIONS.len());
        assert!(b.window().cells().all(|c| c.name == "cart" && c.delta == 2));
        assert!(b.rejected().is_empty());
    }

    #[test]
    fn simple_string_values_read_like_bulk_strings() {
        // RESP3 servers and scripts may answer simple strings.
        let f = vec![
            Value::SimpleString("name".into()),
            Value::SimpleString("home".into()),
        ];
        let mut b = batch();
        b.add(&[entry("1700000000000-0", &f)], NOW, NOW);
        assert_eq!(b.window().hits(), 1);
        assert!(b.window().cells().all(|c| c.name == "home"));
    }

    #[test]
    fn the_same_name_in_one_bucket_adds_up_in_one_cell_per_precision() {
        let f = fields(&[("name", b"home")]);
        let mut b = batch();
        b.add(
            &[entry("1700000000000-0", &f), entry("1700000000000-1", &f)],
            NOW,
            NOW,
        );
        b.add(&[entry("1700000000100-0", &f)], NOW, NOW);
        assert_eq!(b.window().hits(), 3);
        assert_eq!(b.window().cells_len(), PRECISIONS.len());
        assert!(b.window().cells().all(|c| c.delta == 3));
    }

    #[test]
    fn ids_are_collected_space_separated_in_read_order_across_reads() {
        let f = fields(&[("name", b"home")]);
        let bad = fields(&[("count", b"1")]);
        let mut b = batch();
        b.add(&[entry("1-0", &f), deleted("2-0")], NOW, NOW);
        b.add(&[entry("3-0", &bad)], NOW, NOW);
        b.add(&[entry("10-0", &f)], NOW, NOW);
        // Accepted, deleted and rejected entries are all acknowledged.
        assert_eq!(b.ids(), "1-0 2-0 3-0 10-0");
    }

    #[test]
    fn deleted_entries_are_only_acknowledged() {
        let mut b = batch();
        b.add(&[deleted("1700000000000-0")], NOW, NOW);
        assert!(!b.is_empty(), "its id still has to be acknowledged");
        assert_eq!(b.ids(), "1700000000000-0");
        assert!(b.window().is_empty());
        assert!(b.rejected().is_empty());
        assert_eq!(b.oldest_ms, i64::MAX, "no hit: no delay to report");
    }

    #[test]
    fn invalid_entries_are_rejected_with_their_reason_and_fields() {
        let no_name = fields(&[("count", b"2"), ("extra", b"x")]);
        let bad_count = fields(&[("name", b"home"), ("count", b"0")]);
        let bad_packed = fields(&[("hit", b"\xc1")]);
        let good = fields(&[("name", b"home")]);
        let mut b = batch();
        b.add(
            &[
                entry("1700000000000-0", &no_name),
                entry("1700000000000-1", &bad_count),
                entry("not-an-id", &good),
                entry("1700000000000-2", &bad_packed),
                entry("1700000000000-3", &good),
            ],
            NOW,
            NOW,
        );
        let got: Vec<_> = b
            .rejected()
            .iter()
            .map(|r| (r.id.as_str(), r.reason))
            .collect();
        assert_eq!(
            got,
            vec![
                ("1700000000000-0", "missing_name"),
                ("1700000000000-1", "bad_count"),
                ("not-an-id", "bad_entry_id"),
                ("1700000000000-2", "bad_msgpack"),
            ]
        );
        // The original fields go to the dead-letter stream unchanged.
        assert_eq!(
            b.rejected()[0].fields,
            vec![
                (b"count".to_vec(), b"2".to_vec()),
                (b"extra".to_vec(), b"x".to_vec()),
            ]
        );
        assert_eq!(b.window().hits(), 1, "only the valid entry is counted");
        assert_eq!(b.oldest_ms, T0, "from the valid entry only");
    }

    #[test]
    fn an_entry_over_64_kib_is_too_large_even_with_a_valid_name() {
        let blob = vec![b'x'; event::MAX_ENTRY_BYTES];
        let big = fields(&[("name", b"home"), ("blob", &blob)]);
        let at_limit = fields(&[("name", b"home"), ("b", &blob[..blob.len() - 9])]);
        let mut b = batch();
        b.add(
            &[
                entry("1700000000000-0", &big),
                entry("1700000000000-1", &at_limit),
            ],
            NOW,
            NOW,
        );
        assert_eq!(b.window().hits(), 1, "the entry of exactly 64 KiB counts");
        let r = &b.rejected()[0];
        assert_eq!((r.id.as_str(), r.reason), ("1700000000000-0", "too_large"));
        let last = r.fields.last().unwrap();
        assert_eq!(last.0, b"original_bytes");
        assert_eq!(
            last.1,
            (event::MAX_ENTRY_BYTES + 12).to_string().into_bytes()
        );
    }

    #[test]
    fn the_oldest_id_time_comes_from_the_counted_entries() {
        let f = fields(&[("name", b"home")]);
        let mut b = batch();
        b.add(&[entry("1700000000500-0", &f)], NOW, NOW);
        b.add(
            &[entry("1700000000200-7", &f), entry("1700000000900-0", &f)],
            NOW,
            NOW,
        );
        assert_eq!(b.oldest_ms, T0 + 200);
    }

    #[test]
    fn the_window_opens_at_its_first_read_only() {
        let f = fields(&[("name", b"home")]);
        let mut b = batch();
        b.add(&[entry("1700000000000-0", &f)], NOW, NOW);
        let first = b.opened().expect("opened by the first read");
        b.add(&[entry("1700000000001-0", &f)], NOW, NOW);
        assert_eq!(b.opened(), Some(first));
    }

    #[test]
    fn full_at_the_entry_limit() {
        let f = fields(&[("name", b"home")]);
        let w = settings(2, 1_000_000, 60_000);
        let mut b = batch();
        b.add(&[entry("1700000000000-0", &f)], NOW, NOW);
        assert!(!b.is_full(&w, true));
        assert!(!b.is_full(&w, false));
        b.add(&[entry("1700000000000-1", &f)], NOW, NOW);
        assert!(b.is_full(&w, true));
        assert!(b.is_full(&w, false), "size limits hold behind too");
    }

    #[test]
    fn only_counted_hits_reach_the_entry_limit() {
        // Deleted and rejected entries are acknowledged but are no hits.
        let bad = fields(&[("count", b"1")]);
        let w = settings(2, 1_000_000, 60_000);
        let mut b = batch();
        b.add(
            &[deleted("1-0"), entry("2-0", &bad), deleted("3-0")],
            NOW,
            NOW,
        );
        assert!(!b.is_full(&w, true));
    }

    #[test]
    fn full_at_the_cell_limit() {
        let a = fields(&[("name", b"a")]);
        let c = fields(&[("name", b"c")]);
        // Two precisions: a name makes two cells.
        let w = settings(1_000_000, 4, 60_000);
        let mut b = batch();
        b.add(
            &[entry("1700000000000-0", &a), entry("1700000000000-1", &a)],
            NOW,
            NOW,
        );
        assert_eq!(b.window().cells_len(), 2);
        assert!(!b.is_full(&w, true));
        b.add(&[entry("1700000000000-2", &c)], NOW, NOW);
        assert_eq!(b.window().cells_len(), 4);
        assert!(b.is_full(&w, true));
        assert!(b.is_full(&w, false));
    }

    #[test]
    fn statistics_weigh_against_the_cell_limit() {
        let a = fields(&[("name", b"a"), ("value", b"5")]);
        // Two precisions: one valued hit makes two cells and two statistics
        // cells (no histogram at these precisions).
        let weight = 2 + 2 * crate::model::aggregate::STAT_CELL_WINDOW_WEIGHT;
        let mut b = batch();
        b.add(&[entry("1700000000000-0", &a)], NOW, NOW);
        assert_eq!(b.window().cells_len(), 2);
        assert!(!b.is_full(&settings(1_000_000, weight + 1, 60_000), true));
        assert!(b.is_full(&settings(1_000_000, weight, 60_000), true));
    }

    #[test]
    fn full_at_the_rejected_limit() {
        let bad = fields(&[("count", b"1")]);
        let ids: Vec<String> = (0..MAX_REJECTED_PER_WINDOW)
            .map(|i| format!("{i}-0"))
            .collect();
        let entries: Vec<_> = ids.iter().map(|id| entry(id, &bad)).collect();
        let w = roomy();
        let mut b = batch();
        b.add(&entries[..MAX_REJECTED_PER_WINDOW - 1], NOW, NOW);
        assert!(!b.is_full(&w, true));
        b.add(&entries[MAX_REJECTED_PER_WINDOW - 1..], NOW, NOW);
        assert_eq!(b.rejected().len(), MAX_REJECTED_PER_WINDOW);
        assert!(b.is_full(&w, true));
        assert!(b.is_full(&w, false));
    }

    #[test]
    fn at_the_head_full_once_open_window_ms() {
        let f = fields(&[("name", b"home")]);
        let w = settings(1_000_000, 1_000_000, 1_000);
        let mut b = batch();
        b.add(&[entry("1700000000000-0", &f)], NOW, NOW);
        assert!(!b.is_full(&w, true), "just opened");
        open_since(&mut b, 1_000);
        assert!(b.is_full(&w, true));
    }

    #[test]
    fn behind_full_only_once_open_ten_times_window_ms() {
        let f = fields(&[("name", b"home")]);
        let w = settings(1_000_000, 1_000_000, 1_000);
        let mut b = batch();
        b.add(&[entry("1700000000000-0", &f)], NOW, NOW);
        open_since(&mut b, 1_000);
        assert!(!b.is_full(&w, false));
        open_since(&mut b, 9_900);
        assert!(!b.is_full(&w, false));
        open_since(&mut b, 10_000);
        assert!(b.is_full(&w, false));
        assert!(b.is_full(&w, true));
    }

    #[test]
    fn clear_empties_it_for_the_next_window() {
        let f = fields(&[("name", b"home")]);
        let bad = fields(&[("count", b"1")]);
        let w = settings(1, 1, 0);
        let mut b = batch();
        b.add(
            &[entry("1700000000000-0", &f), entry("1700000000000-1", &bad)],
            NOW,
            NOW,
        );
        assert!(b.is_full(&w, true));
        b.clear();
        assert!(b.is_empty());
        assert!(b.opened().is_none());
        assert_eq!(b.ids(), "");
        assert!(b.rejected().is_empty());
        assert!(b.window().is_empty());
        assert_eq!(b.window().cells_len(), 0);
        assert_eq!(b.oldest_ms, i64::MAX);
        assert!(
            !b.is_full(&w, true),
            "an unopened empty window never closes"
        );
        // And it fills again from scratch.
        b.add(&[entry("1700000000500-0", &f)], NOW, NOW);
        assert_eq!(b.ids(), "1700000000500-0");
        assert_eq!(b.window().hits(), 1);
        assert_eq!(b.oldest_ms, T0 + 500);
    }

    #[test]
    fn a_window_is_counted_once_recorded_and_once_applied() {
        let _one_at_a_time = METRICS.lock().unwrap_or_else(|p| p.into_inner());
        let m = metrics();
        let windows = m.windows_applied.get();
        let applied = m.events_applied.get();
        let (sizes, size_sum) = (
            m.window_size.get_sample_count(),
            m.window_size.get_sample_sum(),
        );
        let durations = m.apply_duration.get_sample_count();
        let (delays, delay_sum) = (
            m.end_to_end_delay.get_sample_count(),
            m.end_to_end_delay.get_sample_sum(),
        );
        let missing = m
            .events_dead_lettered
            .with_label_values(&["missing_name"])
            .get();
        let bad_count = m
            .events_dead_lettered
            .with_label_values(&["bad_count"])
            .get();

        let f = fields(&[("name", b"home"), ("count", b"5")]);
        let no_name = fields(&[("count", b"1")]);
        let zero = fields(&[("name", b"home"), ("count", b"0")]);
        let mut b = batch();
        b.add(
            &[
                entry("1700000000000-0", &f),
                entry("1700000000250-0", &f),
                entry("1700000000300-0", &no_name),
                entry("1700000000300-1", &no_name),
                entry("1700000000400-0", &zero),
                deleted("1700000000500-0"),
            ],
            NOW,
            NOW,
        );
        b.count_recorded();
        count_applied(&[deferred(&b)], Instant::now(), T0 + 2_500);

        assert_eq!(m.windows_applied.get(), windows + 1);
        assert_eq!(
            m.events_applied.get(),
            applied + 2,
            "events, not their counts"
        );
        assert_eq!(m.window_size.get_sample_count(), sizes + 1);
        assert_eq!(m.window_size.get_sample_sum(), size_sum + 2.0);
        assert_eq!(m.apply_duration.get_sample_count(), durations + 1);
        assert_eq!(m.end_to_end_delay.get_sample_count(), delays + 1);
        // From the oldest counted entry's id time.
        assert_eq!(m.end_to_end_delay.get_sample_sum(), delay_sum + 2.5);
        assert_eq!(
            m.events_dead_lettered
                .with_label_values(&["missing_name"])
                .get(),
            missing + 2
        );
        assert_eq!(
            m.events_dead_lettered
                .with_label_values(&["bad_count"])
                .get(),
            bad_count + 1
        );
    }

    #[test]
    fn cells_a_sum_failed_to_apply_are_counted_as_apply_errors() {
        let _one_at_a_time = METRICS.lock().unwrap_or_else(|p| p.into_inner());
        let m = metrics();
        let errors = || {
            m.events_dead_lettered
                .with_label_values(&["apply_error"])
                .get()
        };
        let before = errors();
        count_failures(&[]);
        assert_eq!(errors(), before, "nothing failed");
        let failure = |name: &str| Failure {
            error: "WRONGTYPE".into(),
            precision: 60,
            name: name.into(),
            bucket: 0,
            delta: 2,
        };
        count_failures(&[failure("x"), failure("y")]);
        assert_eq!(errors(), before + 2, "one per cell");
    }

    #[test]
    fn too_old_hits_are_counted_per_precision_and_a_window_without_hits_has_no_delay() {
        let _one_at_a_time = METRICS.lock().unwrap_or_else(|p| p.into_inner());
        let m = metrics();
        // Precision 7 s appears in no other test.
        let too_old = |p: &str| m.hits_too_old.with_label_values(&[p]).get();
        let (one, seven) = (too_old("1"), too_old("7"));
        let delays = m.end_to_end_delay.get_sample_count();

        // Two samples: at one 1 s and 7 s buckets, a hit 100 s old is too old
        // at both precisions. It is still counted as a hit.
        let f = fields(&[("name", b"home")]);
        let mut b = Batch::new(&[1, 7], 2);
        b.add(&[entry("1700000000000-0", &f)], T0 + 100_000, T0 + 100_000);
        assert_eq!(b.window().hits(), 1);
        assert_eq!(b.window().cells_len(), 0);
        b.count_recorded();
        count_applied(&[deferred(&b)], Instant::now(), T0 + 100_000);
        assert_eq!(too_old("1"), one + 1);
        assert_eq!(too_old("7"), seven + 1);
        let after_old = m.end_to_end_delay.get_sample_count();
        assert_eq!(after_old, delays + 1);

        // A window of deleted entries only has no delay to report.
        let mut gone = batch();
        gone.add(&[deleted("1700000000000-1")], NOW, NOW);
        gone.count_recorded();
        count_applied(&[deferred(&gone)], Instant::now(), NOW);
        assert_eq!(m.end_to_end_delay.get_sample_count(), after_old);
    }
}
