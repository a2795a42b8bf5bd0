//! The samples of the selected series: a hash's buckets within the query's
//! range, one sample each at the bucket's start (ms), and an explicit 0 for
//! every bucket kept but empty (for hits, and the count and sum of
//! statistics), so that Prometheus' lookback never carries a count into a
//! bucket that had none.

use std::collections::BTreeMap;

use super::prompb::{Sample, TimeSeries};
use super::select::{Metric, Selected};
use crate::model::keys::{Family, Keys};
use crate::model::stats::Summary;
use crate::model::stats_hash::{Row, StatsHash};
use crate::store::client::Conn;
use crate::store::counters::{self, Counter};
use crate::store::stats_query;

/// What a query asks of time, and what the precisions keep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    /// The query's range, unix ms, both ends included.
    pub start_ms: i64,
    pub end_ms: i64,
    /// Now, unix seconds.
    pub now: i64,
    /// Buckets kept per counter (`--samples`).
    pub samples: u32,
}

impl Span {
    /// The starts (unix s) of the buckets of `precision` within the range,
    /// kept (after `now - samples × precision`) and begun (by `now`).
    pub(crate) fn kept(&self, precision: u32) -> impl Iterator<Item = i64> {
        let (from, to) = self.kept_bounds(precision);
        (from..=to).step_by(precision.max(1) as usize)
    }

    /// How many [`Span::kept`] gives, without counting them one by one.
    pub(crate) fn kept_count(&self, precision: u32) -> u64 {
        let (from, to) = self.kept_bounds(precision);
        u64::try_from((to - from).div_euclid(i64::from(precision.max(1))) + 1).unwrap_or(0)
    }

    /// Whether the range ends before the oldest bucket `precision` keeps
    /// (a range of a day ago at 60 s, which keeps two hours): none of its
    /// buckets is kept. (A range ahead of now may hold buckets of hits
    /// timed ahead.)
    pub(crate) fn ends_before_kept(&self, precision: u32) -> bool {
        self.end_ms.div_euclid(1000) < self.oldest_kept(precision)
    }

    /// The start of the oldest bucket `precision` keeps now.
    fn oldest_kept(&self, precision: u32) -> i64 {
        let p = i64::from(precision.max(1));
        (self.now - i64::from(self.samples) * p).div_euclid(p) * p + p
    }

    /// The first and last of [`Span::kept`] (the first past the last when
    /// there are none).
    fn kept_bounds(&self, precision: u32) -> (i64, i64) {
        let p = i64::from(precision.max(1));
        let oldest = self.oldest_kept(precision);
        let from = oldest.max(ceil_div(ceil_div(self.start_ms, 1000), p) * p);
        let to = self.end_ms.div_euclid(1000).min(self.now).div_euclid(p) * p;
        (from, to)
    }

    /// Whether bucket `t` (unix s) starts within the range.
    fn within(&self, t: i64) -> bool {
        (self.start_ms..=self.end_ms).contains(&t.saturating_mul(1000))
    }

    /// The samples of one series: `values` of the buckets in range, over
    /// `fill` in every bucket kept in range.
    fn samples(
        &self,
        precision: u32,
        fill: f64,
        values: impl Iterator<Item = (i64, f64)>,
    ) -> Vec<Sample> {
        let mut by_time: BTreeMap<i64, f64> = BTreeMap::new();
        by_time.extend(self.kept(precision).map(|t| (t, fill)));
        by_time.extend(values.filter(|&(t, _)| self.within(t)));
        by_time
            .into_iter()
            .map(|(t, value)| Sample {
                value,
                timestamp: t * 1000,
            })
            .collect()
    }
}

/// `a / b` rounded up, for every `a` (`i64::MIN` too: a range may start
/// there).
fn ceil_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0)
}

/// Samples of every series of `selected` that has any in `span`: one
/// read of each hash ([`counters::read_each`], [`stats_query::read_each`]).
pub(crate) async fn read(
    conn: &mut Conn,
    keys: &Keys,
    selected: &[Selected],
    span: &Span,
) -> redis::RedisResult<Vec<TimeSeries>> {
    let of = |family: Family| -> Vec<&Selected> {
        selected.iter().filter(|s| s.family == family).collect()
    };
    let (hits, stats) = (of(Family::Counts), of(Family::Stats));
    let hashes_of = |s: &[&'_ Selected]| -> Vec<(u32, String)> {
        s.iter().map(|s| (s.precision, s.name.clone())).collect()
    };
    let (hit_hashes, stat_hashes) = (hashes_of(&hits), hashes_of(&stats));
    let counters = counters::read_each(conn, keys, &hit_hashes).await?;
    let hashes = stats_query::read_each(conn, keys, &stat_hashes).await?;
    // Each hash dropped once its series are built (by value). A key of
    // another type (something else wrote it) gives no series; a name
    // listed without a hash (no hits kept), zeros.
    let mut out: Vec<TimeSeries> = hits
        .iter()
        .zip(counters)
        .filter_map(|(s, c)| Some(hits_series(s, &c?, span)))
        .collect();
    for (s, hash) in stats.iter().zip(hashes) {
        let Some(hash) = &hash else { continue };
        out.extend(s.metrics.iter().map(|&m| stats_series(s, m, hash, span)));
    }
    out.retain(|ts| !ts.samples.is_empty());
    Ok(out)
}

/// Prometheus' staleness marker: the series has no value from this
/// sample on (a NaN of its own bit pattern, which queries skip).
const STALE_NAN: f64 = f64::from_bits(0x7ff0_0000_0000_0002);

fn hits_series(s: &Selected, counter: &Counter, span: &Span) -> TimeSeries {
    let values = counter.samples.iter().map(|x| (x.time, x.count as f64));
    TimeSeries {
        labels: Metric::Hits.labels(&s.name, s.precision),
        samples: span.samples(s.precision, 0.0, values),
    }
}

fn stats_series(s: &Selected, metric: Metric, hash: &StatsHash, span: &Span) -> TimeSeries {
    // The numbers `hitcount get --stats` prints ([`Row`]), and the sum.
    let value = |t: i64, summary: &Summary| -> Option<f64> {
        let row = Row::of(t, summary);
        match metric {
            Metric::Count => Some(row.count as f64),
            Metric::Sum => Some(summary.sum),
            Metric::Min => Some(row.min),
            Metric::Max => Some(row.max),
            Metric::Quantile(i) => [row.p50, row.p90, row.p99][i],
            Metric::Hits => None,
        }
    };
    let values = hash
        .buckets
        .iter()
        .filter_map(|(&t, summary)| Some((t, value(t, summary)?)));
    // An empty bucket counts 0 values, of sum 0; it has no min, max or
    // quantile: a staleness marker there, so that Prometheus' lookback
    // does not carry the bucket before into it.
    let fill = match metric {
        Metric::Count | Metric::Sum => 0.0,
        _ => STALE_NAN,
    };
    TimeSeries {
        labels: metric.labels(&s.name, s.precision),
        samples: span.samples(s.precision, fill, values),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Selected keys of another type (something else wrote them) give no
    /// series; a counter with data gives its samples over zeros, and one
    /// listed without a hash (no hits kept) zeros alone.
    #[tokio::test]
    async fn a_key_of_another_type_gives_no_series() {
        use crate::testing::{conn, keys, server, settings};
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let keys = keys(&settings(&srv.url(), "rr"));
        let now = crate::testing::unix_now();
        let bucket = now / 60 * 60;
        let _: () = redis::pipe()
            .hset(keys.count(60, "real"), bucket, 3)
            .ignore()
            .set(keys.count(60, "text"), "hello")
            .ignore()
            .set(keys.stats(60, "text"), "hello")
            .ignore()
            .query_async(&mut c)
            .await
            .unwrap();
        let pick = |family, name: &str, metrics| Selected {
            family,
            precision: 60,
            name: name.into(),
            metrics,
        };
        let selected = [
            pick(Family::Counts, "real", vec![Metric::Hits]),
            pick(Family::Counts, "text", vec![Metric::Hits]),
            pick(Family::Counts, "gone", vec![Metric::Hits]),
            pick(Family::Stats, "text", vec![Metric::Count, Metric::Sum]),
            pick(Family::Stats, "gone", vec![Metric::Count]),
        ];
        let span = Span {
            start_ms: (now - 600) * 1000,
            end_ms: now * 1000,
            now,
            samples: 120,
        };
        let got = read(&mut c, &keys, &selected, &span).await.unwrap();
        let names: Vec<&str> = got
            .iter()
            .map(|ts| {
                ts.labels
                    .iter()
                    .find(|l| l.name == "name")
                    .unwrap()
                    .value
                    .as_str()
            })
            .collect();
        // `gone`: hits, and the statistics' count and sum, all zeros.
        assert_eq!(names, ["real", "gone", "gone"], "{got:?}");
        let last = got[0].samples.last().unwrap();
        assert_eq!((last.timestamp, last.value), (bucket * 1000, 3.0));
        assert!(got[1].samples.iter().all(|s| s.value == 0.0));
    }

    #[test]
    fn a_range_before_what_a_precision_keeps_is_told_one_ahead_of_now_is_not() {
        let now = 1_000_020;
        let span = |start_s: i64, end_s: i64| Span {
            start_ms: start_s * 1000,
            end_ms: end_s * 1000,
            now,
            samples: 120,
        };
        // 60 s keeps 120 buckets: the oldest starts at 992,880.
        assert!(span(0, 992_879).ends_before_kept(60));
        assert!(!span(0, 992_880).ends_before_kept(60));
        assert!(
            !span(now + 3600, now + 7200).ends_before_kept(60),
            "hits timed ahead"
        );
        assert!(!span(0, 992_879).ends_before_kept(86_400));
    }

    #[test]
    fn zeros_fill_the_kept_buckets_in_range_only() {
        let span = Span {
            start_ms: 1_000_001,
            end_ms: 1_500_000,
            now: 1_320,
            samples: 3,
        };
        // Kept: after 1320 - 3 × 60 = 1140, begun by 1320; in range: from
        // 1000.001 s.
        assert_eq!(span.kept(60).collect::<Vec<_>>(), vec![1_200, 1_260, 1_320]);
        assert_eq!(span.kept_count(60), 3);
        let got = span.samples(
            60,
            0.0,
            [(1_260, 5.0), (960, 9.0), (1_080, 2.0)].into_iter(),
        );
        let got: Vec<(i64, f64)> = got.iter().map(|s| (s.timestamp, s.value)).collect();
        assert_eq!(
            got,
            vec![
                (1_080_000, 2.0),
                (1_200_000, 0.0),
                (1_260_000, 5.0),
                (1_320_000, 0.0)
            ],
            "a bucket older than those kept is served while it is there, none before the range"
        );
        // Statistics without a value there: staleness markers, bit for bit.
        let stale = span.samples(60, STALE_NAN, [(1_260, 5.0)].into_iter());
        let got: Vec<(i64, u64)> = stale
            .iter()
            .map(|s| (s.timestamp, s.value.to_bits()))
            .collect();
        let marker = 0x7ff0_0000_0000_0002;
        assert_eq!(
            got,
            vec![
                (1_200_000, marker),
                (1_260_000, 5f64.to_bits()),
                (1_320_000, marker)
            ]
        );
        // The range's end bounds it too; a range in the future has none.
        let early = Span {
            end_ms: 1_230_000,
            ..span
        };
        assert_eq!(early.kept(60).collect::<Vec<_>>(), vec![1_200]);
        let later = Span {
            start_ms: 2_000_000,
            end_ms: 3_000_000,
            ..span
        };
        assert_eq!((later.kept(60).count(), later.kept_count(60)), (0, 0));
        // The widest range there is, and one that ends before it starts.
        let all = Span {
            start_ms: i64::MIN,
            end_ms: i64::MAX,
            ..span
        };
        assert_eq!(all.kept(60).collect::<Vec<_>>(), vec![1_200, 1_260, 1_320]);
        assert_eq!(
            all.samples(60, 0.0, [(i64::MIN / 1000, 1.0)].into_iter())
                .len(),
            4
        );
        let backwards = Span {
            start_ms: 1_500_000,
            end_ms: 1_000_000,
            ..span
        };
        assert_eq!(
            (backwards.kept(60).count(), backwards.kept_count(60)),
            (0, 0)
        );
    }
}
