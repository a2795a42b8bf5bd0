//! The pure floor: what a hit is and what it becomes, with no Redis in
//! sight. The event and its two wire forms (and StatsD lines as hits), aggregation into cells, every
//! key name, every setting with its default, the metrics, the shutdown
//! signal and the clock. Everything above builds on these; nothing here
//! names a Redis type (a test checks it).

#[cfg(feature = "cli")]
pub(crate) mod access_log;
pub(crate) mod aggregate;
pub(crate) mod carry;
pub(crate) mod clock;
pub mod config;
pub mod event;
pub(crate) mod ids;
pub mod keys;
pub(crate) mod known;
pub(crate) mod metrics;
pub mod shutdown;
pub mod slots;
pub mod stats;
pub mod stats_hash;
#[cfg(feature = "cli")]
pub(crate) mod statsd;
pub(crate) mod tally;

/// `items` in runs, in order, of at most `most` items whose `size` adds up
/// to at most `budget` (an item bigger than that alone): how batches of
/// scripts, pieces of a record and reads of hashes stay bounded.
pub(crate) fn runs<T>(
    items: &[T],
    most: usize,
    budget: usize,
    size: impl Fn(&T) -> usize,
) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut from, mut sum) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let n = size(item);
        if i > from && (i - from == most || sum + n > budget) {
            out.push(&items[from..i]);
            (from, sum) = (i, 0);
        }
        sum += n;
    }
    if from < items.len() {
        out.push(&items[from..]);
    }
    out
}
