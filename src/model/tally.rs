//! Counts worth a warning, reported at most once in a while: a flood of
//! like events (hits whose entry IDs are ahead of Redis' clock, pending
//! entries found deleted, StatsD drops) is one log line a minute with the
//! totals since the last, not a line an event. Shared by a whole process
//! (a `static`): every shard's worker adds to the same tally.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `N` counts reported together, at most once every `every`.
#[derive(Debug)]
pub(crate) struct Tally<const N: usize> {
    every: Duration,
    /// When the last report was, and the counts since.
    seen: Mutex<(Option<Instant>, [u64; N])>,
}

impl<const N: usize> Tally<N> {
    /// A tally reported at most once every `every`.
    pub(crate) const fn new(every: Duration) -> Tally<N> {
        Tally {
            every,
            seen: Mutex::new((None, [0; N])),
        }
    }

    /// Adds `counts`; the totals since the last report, when they are not
    /// all zero and a report is due now (they then start again from zero).
    pub(crate) fn add(&self, counts: [u64; N]) -> Option<[u64; N]> {
        self.report(counts, false)
    }

    /// The totals not reported yet, when not all zero, due or not (a
    /// process that stops reports what it saw).
    pub(crate) fn flush(&self) -> Option<[u64; N]> {
        self.report([0; N], true)
    }

    fn report(&self, counts: [u64; N], anyway: bool) -> Option<[u64; N]> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for (total, n) in seen.1.iter_mut().zip(counts) {
            *total = total.saturating_add(n);
        }
        let due = anyway || seen.0.is_none_or(|t| t.elapsed() >= self.every);
        if !due || seen.1.iter().all(|&n| n == 0) {
            return None;
        }
        let totals = seen.1;
        *seen = (Some(Instant::now()), [0; N]);
        Some(totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_reported_at_once_then_totals_once_a_while() {
        let tally: Tally<2> = Tally::new(Duration::from_secs(3600));
        assert_eq!(tally.add([0, 0]), None, "nothing to say");
        assert_eq!(tally.add([1, 0]), Some([1, 0]));
        assert_eq!(tally.add([2, 3]), None, "not due");
        assert_eq!(tally.add([0, 1]), None);
        assert_eq!(tally.flush(), Some([2, 4]), "at a stop, due or not");
        assert_eq!(tally.flush(), None);
        let often: Tally<1> = Tally::new(Duration::ZERO);
        assert_eq!(often.add([5]), Some([5]));
        assert_eq!(often.add([0]), None, "zero is not reported");
        assert_eq!(often.add([7]), Some([7]));
    }
}
