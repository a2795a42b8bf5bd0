//! Reading a statistics hash `stats:PREC:NAME` (its fields are described in
//! [`crate::model::stats`]): the fields parsed into one [`Summary`] per
//! bucket, skipping whatever is malformed; the numbers reported for a
//! bucket ([`Row`]); a bucket's mean from its `count` and `sum` (for the
//! ranking); and which bucket a field belongs to (for the cleaner). Pure:
//! the data may have been written by anything, so nothing here panics on it.

use std::collections::BTreeMap;

use crate::model::stats::{HistBucket, Summary, REPORTED_QUANTILES};

/// The bucket start `B` of a field `B:…` of a statistics hash; `None` for a
/// field of another shape, which the cleaner never touches.
pub(crate) fn bucket_of_field(field: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(field).ok()?;
    text.split_once(':')?.0.parse().ok()
}

/// A statistics hash as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsHash {
    /// Per bucket start, its summary: only buckets whose `count`, `sum`,
    /// `sumsq`, `min` and `max` are all well-formed, with `count > 0` and
    /// `min ≤ max`.
    pub buckets: BTreeMap<i64, Summary>,
    /// Fields skipped: malformed ones, and every field of a bucket left out.
    pub skipped: usize,
    /// The first field skipped, as (field, value), for a warning.
    pub skipped_example: Option<(String, String)>,
}

/// One bucket's fields while they are gathered.
#[derive(Default)]
struct Partial {
    count: Option<i64>,
    sum: Option<f64>,
    sumsq: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    histogram: BTreeMap<HistBucket, i64>,
    /// Its fields read, so a bucket left out counts them all as skipped.
    fields: Vec<(String, String)>,
}

impl Partial {
    /// Reads one field (`rest` is the part after `B:`); false when it is
    /// malformed.
    fn take(&mut self, rest: &str, value: &str) -> bool {
        let slot = match rest {
            "count" => return set(&mut self.count, integer(value)),
            "sum" => &mut self.sum,
            "sumsq" => &mut self.sumsq,
            "min" => &mut self.min,
            "max" => &mut self.max,
            _ => {
                let bucket = rest.strip_prefix("h:").and_then(HistBucket::parse);
                return match (bucket, integer(value)) {
                    (Some(b), Some(n)) if n >= 0 => {
                        self.histogram.insert(b, n);
                        true
                    }
                    _ => false,
                };
            }
        };
        set(slot, decimal(value))
    }

    fn finish(self) -> Result<Summary, Vec<(String, String)>> {
        match (self.count, self.sum, self.sumsq, self.min, self.max) {
            (Some(count), Some(sum), Some(sumsq), Some(min), Some(max))
                if count > 0 && min <= max =>
            {
                Ok(Summary {
                    count,
                    sum,
                    sumsq,
                    min,
                    max,
                    histogram: self.histogram,
                })
            }
            _ => Err(self.fields),
        }
    }
}

fn set<T>(slot: &mut Option<T>, value: Option<T>) -> bool {
    let ok = value.is_some();
    *slot = value;
    ok
}

/// A finite decimal (hitcount writes `3.5`, `-0.25`, `100`, `1e-18`;
/// `HINCRBYFLOAT`, as older workers did, `0.00000000000000001`; anything
/// Rust reads as a finite f64 is accepted).
fn decimal(value: &str) -> Option<f64> {
    value.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

/// An integer, or a decimal with no fraction (`5`, `5.0` or `5e0`).
fn integer(value: &str) -> Option<i64> {
    value.trim().parse::<i64>().ok().or_else(|| {
        decimal(value)
            .filter(|v| v.fract() == 0.0 && v.abs() < 9.0e15)
            .map(|v| v as i64)
    })
}

/// Parses every field of a statistics hash.
pub(crate) fn parse(fields: impl IntoIterator<Item = (String, String)>) -> StatsHash {
    let mut out = StatsHash::default();
    let skip = |out: &mut StatsHash, field: String, value: String| {
        out.skipped += 1;
        out.skipped_example.get_or_insert((field, value));
    };
    let mut partial: BTreeMap<i64, Partial> = BTreeMap::new();
    for (field, value) in fields {
        let parsed = field
            .split_once(':')
            .and_then(|(b, rest)| Some((b.parse::<i64>().ok()?, rest)));
        let Some((bucket, rest)) = parsed else {
            skip(&mut out, field, value);
            continue;
        };
        let p = partial.entry(bucket).or_default();
        if p.take(rest, &value) {
            p.fields.push((field, value));
        } else {
            skip(&mut out, field, value);
        }
    }
    for (bucket, p) in partial {
        match p.finish() {
            Ok(summary) => _ = out.buckets.insert(bucket, summary),
            Err(fields) => fields.into_iter().for_each(|(f, v)| skip(&mut out, f, v)),
        }
    }
    out
}

/// A bucket's observations and mean from its `count`, `sum`, `min` and
/// `max` fields (as `HMGET` returns them), or `None` when `count` or `sum`
/// is missing or malformed or the count is not positive, or when `min` is
/// above `max` (a damaged bucket, which `get --stats` leaves out too). The
/// mean is kept within `[min, max]` when both are there, as the bucket's
/// summary keeps it (`sum / count` may round just outside: three 0.1s).
pub(crate) fn mean_of([count, sum, min, max]: [Option<&str>; 4]) -> Option<(i64, f64)> {
    let count = integer(count?).filter(|&c| c > 0)?;
    let mean = decimal(sum?)? / count as f64;
    match (min.and_then(decimal), max.and_then(decimal)) {
        (Some(min), Some(max)) if min <= max => Some((count, mean.min(max).max(min))),
        (Some(_), Some(_)) => None,
        _ => Some((count, mean)),
    }
}

/// The numbers reported for one bucket (`get --stats`, the API): `null`
/// where there is nothing to report (a quantile without a histogram).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Row {
    /// The bucket start, unix seconds.
    pub t: i64,
    /// Observations in the bucket.
    pub count: i64,
    /// Their mean (`null` without any).
    pub mean: Option<f64>,
    /// The smallest observed value.
    pub min: f64,
    /// The largest observed value.
    pub max: f64,
    /// The population standard deviation.
    pub stddev: Option<f64>,
    /// The median, from the histogram (`null` where none is kept).
    pub p50: Option<f64>,
    /// The 90th percentile, likewise.
    pub p90: Option<f64>,
    /// The 99th percentile, likewise.
    pub p99: Option<f64>,
}

impl Row {
    /// The row of bucket `t`.
    pub(crate) fn of(t: i64, s: &Summary) -> Row {
        let [p50, p90, p99] = REPORTED_QUANTILES.map(|q| s.quantile(q));
        Row {
            t,
            count: s.count,
            mean: s.mean(),
            min: s.min,
            max: s.max,
            stddev: s.stddev(),
            p50,
            p90,
            p99,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(f, v)| (f.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_bucket_reads_back_as_its_summary() {
        let mut want = Summary::default();
        for v in [1.5, 2.0, 0.0, -4.0] {
            want.observe(v, 2, true);
        }
        let mut raw = vec![
            ("60:count", "8".to_string()),
            ("60:sum", want.sum.to_string()),
            ("60:sumsq", want.sumsq.to_string()),
            ("60:min", "-4".to_string()),
            ("60:max", "2".to_string()),
        ];
        let hist: Vec<(String, String)> = want
            .histogram
            .iter()
            .map(|(b, n)| (format!("60:h:{}", b.suffix()), n.to_string()))
            .collect();
        raw.extend(hist.iter().map(|(f, v)| (f.as_str(), v.clone())));
        let got = parse(raw.into_iter().map(|(f, v)| (f.to_string(), v)));
        assert_eq!(got.skipped, 0);
        assert_eq!(got.buckets.get(&60), Some(&want));
        let row = Row::of(60, &got.buckets[&60]);
        assert_eq!(
            (row.count, row.mean, row.min, row.max),
            (8, Some(-0.125), -4.0, 2.0)
        );
        assert_eq!(row.p50, Some(0.0), "rank 4 of 8 is a zero");
        let p99 = row.p99.unwrap();
        assert!((p99 - 2.0).abs() <= 2.0 * crate::model::stats::RELATIVE_ACCURACY);
    }

    #[test]
    fn malformed_fields_and_incomplete_buckets_are_skipped() {
        let got = parse(fields(&[
            ("0:count", "2"),
            ("0:sum", "3"),
            ("0:sumsq", "5"),
            ("0:min", "1"),
            ("0:max", "2"),
            ("0:h:oops", "1"),
            ("0:h:3", "-1"),
            ("0:color", "red"),
            ("junk", "1"),
            ("x:count", "1"),
            // No sumsq: the whole bucket goes.
            ("60:count", "1"),
            ("60:sum", "1"),
            ("60:min", "1"),
            ("60:max", "1"),
            ("120:count", "1"),
            ("120:sum", "inf"),
            ("120:sumsq", "1"),
            ("120:min", "1"),
            ("120:max", "1"),
            ("180:count", "0"),
            ("180:sum", "0"),
            ("180:sumsq", "0"),
            ("180:min", "0"),
            ("180:max", "0"),
            // A minimum above the maximum (a quantile used to panic on it).
            ("240:count", "1"),
            ("240:sum", "3"),
            ("240:sumsq", "9"),
            ("240:min", "5"),
            ("240:max", "1"),
            ("240:h:30", "1"),
        ]));
        assert_eq!(got.buckets.keys().copied().collect::<Vec<_>>(), [0]);
        assert!(got.buckets[&0].histogram.is_empty());
        assert_eq!(got.skipped, 5 + 4 + 5 + 5 + 6);
        assert_eq!(
            got.skipped_example,
            Some(("0:h:oops".to_string(), "1".to_string()))
        );
        let row = Row::of(0, &got.buckets[&0]);
        assert_eq!((row.p50, row.p90, row.p99), (None, None, None));
        assert_eq!(row.stddev, Some(0.5));
    }

    #[test]
    fn a_mean_needs_count_and_sum_and_stays_within_min_and_max() {
        let mean = |c, s| mean_of([c, s, None, None]);
        assert_eq!(mean(Some("4"), Some("10")), Some((4, 2.5)));
        assert_eq!(mean(Some("4.0"), Some("-2")), Some((4, -0.5)));
        assert_eq!(mean(None, Some("10")), None);
        assert_eq!(mean(Some("4"), None), None);
        assert_eq!(mean(Some("0"), Some("0")), None);
        assert_eq!(mean(Some("2"), Some("nan")), None);
        assert_eq!(mean(Some("x"), Some("1")), None);
        // Within min and max when both are there and in order.
        let within = |min, max| mean_of([Some("2"), Some("1"), min, max]);
        assert_eq!(within(Some("0.6"), Some("0.9")), Some((2, 0.6)));
        assert_eq!(within(Some("0.1"), Some("0.4")), Some((2, 0.4)));
        assert_eq!(within(None, Some("0.4")), Some((2, 0.5)));
        // A minimum above the maximum: a damaged bucket, left out as
        // `get --stats` leaves it out.
        assert_eq!(within(Some("0.9"), Some("0.6")), None);
        // Three 0.1s: their sum divided by three is 0.10000000000000002.
        let sum = (0.1f64 + 0.1 + 0.1).to_string();
        assert!(sum.parse::<f64>().unwrap() / 3.0 > 0.1);
        assert_eq!(
            mean_of([Some("3"), Some(&sum), Some("0.1"), Some("0.1")]),
            Some((3, 0.1))
        );
    }

    #[test]
    fn fields_belong_to_the_bucket_before_the_colon() {
        assert_eq!(bucket_of_field(b"1700000000:count"), Some(1_700_000_000));
        assert_eq!(bucket_of_field(b"-60:h:n3"), Some(-60));
        assert_eq!(bucket_of_field(b"60"), None);
        assert_eq!(bucket_of_field(b"x:count"), None);
        assert_eq!(bucket_of_field(b"\xff:count"), None);
    }
}
