//! Statistics of measured values: what one bucket of `stats:PREC:NAME`
//! holds, the fixed logarithmic scale of its quantile histogram, and the
//! summary (mean, standard deviation, quantiles) derived from it.
//!
//! # The fields of a bucket `B` (the bucket start, as for counts)
//! `B:count`, `B:sum`, `B:sumsq`, `B:min`, `B:max`, and, at the precisions
//! in `HITCOUNT_QUANTILE_PRECISIONS`, one field per histogram bucket holding
//! the number of observations that fell in it:
//! - `B:h:I` for a value `v > 0` with `I = ceil(16 × log2(v))`: bucket `I`
//!   holds `2^((I-1)/16) < v ≤ 2^(I/16)` (Prometheus native histograms,
//!   schema 4, use the same boundaries);
//! - `B:h:z` for `v = 0`;
//! - `B:h:nI` for `v < 0`, with `I` the index of `|v|`.
//!
//! A quantile read from the histogram is the bucket's representative value
//! `2 × 2^(I/16) / (1 + 2^(1/16))` (negated for `nI`, 0 for `z`), within
//! [`RELATIVE_ACCURACY`] (2.17 %) of the exact quantile, the observation of
//! rank `ceil(q × count)` (1-based) in sorted order.

use std::collections::BTreeMap;

/// Histogram buckets per doubling of the value (schema 4).
pub(crate) const PER_DOUBLING: f64 = 16.0;
/// Largest relative error of a quantile read from the histogram:
/// `(γ - 1) / (γ + 1)` with `γ = 2^(1/16)`.
pub const RELATIVE_ACCURACY: f64 = 0.0217;
/// Default of `HITCOUNT_QUANTILE_PRECISIONS`.
pub const DEFAULT_QUANTILE_PRECISIONS: [u32; 3] = [60, 3600, 86400];
/// What a statistics cell weighs against the cells of a window or an apply
/// script, before its histogram entries (one each): the read and the write
/// of its fields, its sums formatted in Lua, and its arguments.
pub(crate) const STAT_CELL_WEIGHT: usize = 7;
/// The quantiles `get --stats` and the API report.
pub const REPORTED_QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// One bucket of the histogram scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HistBucket {
    /// `v < 0`, with the index of `|v|`. Ordered before the others, the
    /// largest magnitude first (see [`HistBucket::sort_key`]).
    Negative(i32),
    /// `v = 0`.
    Zero,
    /// `v > 0`, bucket `I = ceil(16 × log2(v))`.
    Positive(i32),
}

/// The index of a positive finite value on the scale.
fn index(v: f64) -> i32 {
    debug_assert!(v > 0.0 && v.is_finite());
    let i = (v.log2() * PER_DOUBLING).ceil();
    // log2 rounding can put an exact boundary one bucket off: fix it
    // against the bucket's own bounds, where they are doubles (among the
    // subnormals `2^(i/16)` rounds to a neighbour: 5e-324, 2^-1074, went
    // one bucket below its own).
    let mut i = i as i32;
    let exact = |b: f64| b >= f64::MIN_POSITIVE;
    let (below, top) = (upper(i - 1), upper(i));
    if exact(below) && v <= below {
        i -= 1;
    } else if exact(top) && v > top {
        i += 1;
    }
    i
}

/// Upper bound of positive bucket `i`: `2^(i/16)`.
fn upper(i: i32) -> f64 {
    (f64::from(i) / PER_DOUBLING).exp2()
}

impl HistBucket {
    /// The bucket of a finite value; `None` for NaN or ±inf.
    pub fn of(v: f64) -> Option<HistBucket> {
        if !v.is_finite() {
            None
        } else if v > 0.0 {
            Some(HistBucket::Positive(index(v)))
        } else if v < 0.0 {
            Some(HistBucket::Negative(index(-v)))
        } else {
            Some(HistBucket::Zero)
        }
    }

    /// The field suffix after `B:h:`: `I`, `z` or `nI`.
    pub fn suffix(self) -> String {
        match self {
            HistBucket::Positive(i) => i.to_string(),
            HistBucket::Zero => "z".to_string(),
            HistBucket::Negative(i) => format!("n{i}"),
        }
    }

    /// Parses a suffix written by [`HistBucket::suffix`].
    pub fn parse(suffix: &str) -> Option<HistBucket> {
        match suffix {
            "z" => Some(HistBucket::Zero),
            s => match s.strip_prefix('n') {
                Some(n) => n.parse().ok().map(HistBucket::Negative),
                None => s.parse().ok().map(HistBucket::Positive),
            },
        }
    }

    /// The value a quantile in this bucket is reported as.
    pub(crate) fn representative(self) -> f64 {
        let mid = |i: i32| 2.0 * upper(i) / (1.0 + upper(1));
        match self {
            HistBucket::Positive(i) => mid(i),
            HistBucket::Zero => 0.0,
            HistBucket::Negative(i) => -mid(i),
        }
    }

    /// Orders buckets by the values they hold.
    fn sort_key(self) -> (i8, i64) {
        match self {
            HistBucket::Negative(i) => (0, -i64::from(i)),
            HistBucket::Zero => (1, 0),
            HistBucket::Positive(i) => (2, i64::from(i)),
        }
    }
}

/// Count, sum, sum of squares, min and max of a set of observations, and
/// its histogram where kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// How many observations.
    pub count: i64,
    /// Their sum.
    pub sum: f64,
    /// The sum of their squares (for the standard deviation).
    pub sumsq: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
    /// Empty where no histogram is kept.
    pub histogram: BTreeMap<HistBucket, i64>,
}

impl Summary {
    /// Adds `count` observations of `value` (finite), with the histogram
    /// when `quantiles` is true.
    pub fn observe(&mut self, value: f64, count: i64, quantiles: bool) {
        let bucket = quantiles.then(|| HistBucket::of(value)).flatten();
        self.observe_in(value, count, bucket);
    }

    /// [`Summary::observe`] with the value's histogram bucket already
    /// found (`None`: no histogram), so that a hit counted at several
    /// precisions takes one logarithm. Counts saturate.
    pub(crate) fn observe_in(&mut self, value: f64, count: i64, bucket: Option<HistBucket>) {
        self.widen(value, value);
        self.count = self.count.saturating_add(count);
        let c = count as f64;
        self.sum += c * value;
        self.sumsq += c * value * value;
        if let Some(b) = bucket {
            let n = self.histogram.entry(b).or_insert(0);
            *n = n.saturating_add(count);
        }
    }

    /// Widens the extremes to take in `min` and `max`, which are the
    /// extremes while nothing is observed.
    fn widen(&mut self, min: f64, max: f64) {
        let empty = self.count == 0;
        self.min = if empty { min } else { self.min.min(min) };
        self.max = if empty { max } else { self.max.max(max) };
    }

    /// Adds the observations of `other` (another window's of the same
    /// cell): the same summary as observing them here, up to the rounding
    /// of the float sums.
    pub(crate) fn merge(&mut self, other: &Summary) {
        if other.count == 0 {
            return;
        }
        self.widen(other.min, other.max);
        self.count = self.count.saturating_add(other.count);
        self.sum += other.sum;
        self.sumsq += other.sumsq;
        for (b, n) in &other.histogram {
            let here = self.histogram.entry(*b).or_insert(0);
            *here = here.saturating_add(*n);
        }
    }

    /// The mean, or `None` without observations; rounding cannot take it
    /// out of [min, max] (three times 0.1 sum to 0.30000000000000004).
    pub fn mean(&self) -> Option<f64> {
        let mean = || self.sum / self.count as f64;
        (self.count > 0).then(|| mean().min(self.max).max(self.min))
    }

    /// The population standard deviation, or `None` without observations.
    /// `sumsq/n - mean²` loses to rounding what the two terms share: a
    /// variance below 0 reads as 0, and a deviation above half the range,
    /// which no set of values has, as half the range (identical values
    /// have 0).
    pub fn stddev(&self) -> Option<f64> {
        (self.count > 0).then(|| {
            let mean = self.sum / self.count as f64;
            let var = self.sumsq / self.count as f64 - mean * mean;
            var.max(0.0).sqrt().min((self.max - self.min) / 2.0)
        })
    }

    /// The `q` quantile (0 < q ≤ 1) from the histogram: the representative
    /// value of the bucket holding the observation of rank `ceil(q × n)`,
    /// clamped to [min, max]. `None` without a histogram, and when the
    /// histogram holds another number of observations than `count` (a
    /// bucket written partly while its precision kept no histogram: its
    /// quantiles would be those of some observations only).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self
            .histogram
            .values()
            .fold(0i64, |n, &c| n.saturating_add(c));
        if n <= 0 || (self.count > 0 && n != self.count) {
            return None;
        }
        let rank = ((q * n as f64).ceil() as i64).clamp(1, n);
        let mut buckets: Vec<(HistBucket, i64)> =
            self.histogram.iter().map(|(b, c)| (*b, *c)).collect();
        buckets.sort_by_key(|(b, _)| b.sort_key());
        let mut seen = 0;
        for (b, c) in buckets {
            seen = c.saturating_add(seen);
            if seen >= rank {
                let v = b.representative();
                // Not `clamp`, which panics on min > max (damaged data).
                return Some(if self.count > 0 {
                    v.min(self.max).max(self.min)
                } else {
                    v
                });
            }
        }
        None
    }
}

/// The exact `q` quantile of sorted observations, as [`Summary::quantile`]
/// defines it (rank `ceil(q × n)`, 1-based). For tests and references.
pub fn exact_quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_the_schema_4_boundaries() {
        assert_eq!(HistBucket::of(1.0), Some(HistBucket::Positive(0)));
        assert_eq!(HistBucket::of(2.0), Some(HistBucket::Positive(16)));
        assert_eq!(HistBucket::of(2.0001), Some(HistBucket::Positive(17)));
        assert_eq!(HistBucket::of(0.5), Some(HistBucket::Positive(-16)));
        assert_eq!(HistBucket::of(0.0), Some(HistBucket::Zero));
        assert_eq!(HistBucket::of(-2.0), Some(HistBucket::Negative(16)));
        assert_eq!(HistBucket::of(f64::NAN), None);
        assert_eq!(HistBucket::of(f64::INFINITY), None);
        for i in -400..400 {
            let b = upper(i);
            assert_eq!(HistBucket::of(b), Some(HistBucket::Positive(i)), "{b}");
            let above = b * (1.0 + 1e-12);
            assert_eq!(HistBucket::of(above), Some(HistBucket::Positive(i + 1)));
        }
        assert!(HistBucket::of(f64::MAX).is_some());
        assert!(HistBucket::of(f64::MIN_POSITIVE / 4.0).is_some());
    }

    /// A summary built from damaged data (a minimum above the maximum,
    /// bins that overflow a sum) answers, never panics.
    #[test]
    fn a_damaged_summary_never_panics() {
        let mut s = Summary {
            // As many as the bins' saturated sum: a histogram of them all.
            count: i64::MAX,
            sum: 3.0,
            sumsq: 9.0,
            min: 5.0,
            max: 1.0,
            histogram: BTreeMap::from([(HistBucket::Positive(30), i64::MAX)]),
        };
        s.histogram.insert(HistBucket::Positive(31), i64::MAX);
        assert!(s.quantile(0.5).is_some());
        assert!(s.mean().is_some() && s.stddev().is_some());
    }

    #[test]
    fn suffixes_round_trip() {
        for b in [
            HistBucket::Positive(-3),
            HistBucket::Positive(42),
            HistBucket::Zero,
            HistBucket::Negative(-7),
            HistBucket::Negative(5),
        ] {
            assert_eq!(HistBucket::parse(&b.suffix()), Some(b));
        }
        assert_eq!(HistBucket::parse("x"), None);
    }

    #[test]
    fn quantiles_are_within_the_stated_accuracy() {
        // A deterministic spread over six decades, negatives and zeros too.
        let mut values = Vec::new();
        let mut x: u64 = 7;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            values.push(10f64.powf(u * 6.0 - 2.0));
        }
        values.extend([0.0, 0.0, -3.5, -1000.0]);
        let mut s = Summary::default();
        for v in &values {
            s.observe(*v, 1, true);
        }
        values.sort_by(f64::total_cmp);
        for q in [0.001, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let exact = exact_quantile(&values, q).unwrap();
            let got = s.quantile(q).unwrap();
            let err = ((got - exact) / exact).abs();
            assert!(err <= RELATIVE_ACCURACY, "q={q}: {got} vs {exact}");
        }
        let lowest = s.quantile(1e-9).unwrap();
        assert!(lowest >= -1000.0 && (lowest + 1000.0).abs() <= 1000.0 * RELATIVE_ACCURACY);
    }

    /// Subnormal values take the documented `ceil(16 × log2(v))`: the
    /// bucket bounds there are no exact doubles.
    #[test]
    fn subnormal_values_take_the_documented_bucket() {
        assert_eq!(HistBucket::of(5e-324), Some(HistBucket::Positive(-17184)));
        for v in [1e-310, 3e-320, f64::MIN_POSITIVE / 3.0] {
            let documented = (16.0 * v.log2()).ceil() as i32;
            assert_eq!(
                HistBucket::of(v),
                Some(HistBucket::Positive(documented)),
                "{v}"
            );
        }
        // The smallest normal double is a bucket's exact upper bound.
        let i = -16_352; // 16 × -1022
        assert_eq!(
            HistBucket::of(f64::MIN_POSITIVE),
            Some(HistBucket::Positive(i))
        );
    }

    #[test]
    fn a_histogram_of_some_observations_only_gives_no_quantile() {
        let mut s = Summary::default();
        s.observe(1.0, 3, false);
        s.observe(1000.0, 1, true);
        assert_eq!((s.count, s.quantile(0.5)), (4, None));
        s.observe(1.0, 3, true);
        s.count = 3;
        assert_eq!(s.quantile(0.5), None, "more in the histogram than counted");
        s.count = 4;
        assert_eq!(s.quantile(0.5), Some(1.0));
    }

    #[test]
    fn summary_adds_counts_sums_and_extremes() {
        let mut s = Summary::default();
        s.observe(2.0, 3, false);
        s.observe(-1.0, 1, false);
        assert_eq!(
            (s.count, s.sum, s.sumsq, s.min, s.max),
            (4, 5.0, 13.0, -1.0, 2.0)
        );
        assert_eq!(s.mean(), Some(1.25));
        let sd = s.stddev().unwrap();
        assert!((sd - (13.0f64 / 4.0 - 1.5625).sqrt()).abs() < 1e-12);
        assert!(s.histogram.is_empty());
        assert_eq!(s.quantile(0.5), None);
        assert_eq!(Summary::default().mean(), None);
        assert_eq!(Summary::default().stddev(), None);
    }

    /// What rounding does to `sum / n` and `sumsq / n - mean²` never
    /// leaves what values can have.
    #[test]
    fn rounding_stays_within_the_values() {
        let summary = |values: &[f64]| {
            let mut s = Summary::default();
            for v in values {
                s.observe(*v, 1, false);
            }
            s
        };
        let same = summary(&[123.456; 10]);
        assert_eq!((same.mean(), same.stddev()), (Some(123.456), Some(0.0)));
        let tenths = summary(&[0.1; 3]);
        assert_eq!(tenths.mean(), Some(0.1));
        let small = summary(&[1e-9, 3e-9, 5e-9]);
        let sd = small.stddev().unwrap();
        assert!(
            (sd / (8.0f64 / 3.0).sqrt() / 1e-9 - 1.0).abs() < 1e-6,
            "{sd}"
        );
    }
}
