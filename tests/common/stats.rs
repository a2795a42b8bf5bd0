//! The reference for statistics of hit values: observations summed per
//! (precision, name, bucket) with `model::stats::Summary`, what Redis holds
//! in `stats:PREC:NAME` read back into the same shape, and the comparison
//! the tests share (count exact, sum and sum of squares to a relative
//! 1e-9, min and max exact, histogram fields exactly equal; quantiles
//! within the stated accuracy of the exact ones).

use std::collections::{BTreeMap, BTreeSet};

use hitcount::model::keys::Keys;
use hitcount::model::stats::{exact_quantile, HistBucket, Summary, RELATIVE_ACCURACY};
use hitcount::store::connect::Conn;

/// One hit with a value: name, count, unix seconds, value.
pub type Obs = (String, i64, i64, f64);

/// (precision, name) → bucket → summary.
pub type Stats = BTreeMap<(u32, String), BTreeMap<i64, Summary>>;

/// The observations of every (precision, name, bucket), each value
/// repeated `count` times, sorted.
pub type Raw = BTreeMap<(u32, String, i64), Vec<f64>>;

/// `n` deterministic observations of `names` names: values over five
/// decades (integers, floats, a few zeros and negatives), counts 1 to 3,
/// mostly within the last 20 s, some an hour and two days late (kept only
/// at the precisions whose horizon holds them).
pub fn observations(n: usize, names: u64, now: i64, seed: u64) -> Vec<Obs> {
    let mut x = seed;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 11
    };
    (0..n)
        .map(|i| {
            let r = next();
            let name = format!("api:/{} é", r % names);
            let count = if r % 5 == 0 { (r % 3) as i64 + 1 } else { 1 };
            let age = match (r >> 8) % 10 {
                0 => 3600 + (r % 100) as i64,
                1 => 172_800 + (r % 100) as i64,
                _ => (r % 20) as i64,
            };
            let u = next() as f64 / (1u64 << 53) as f64;
            let value = match i % 50 {
                0 => 0.0,
                1 => -(u * 100.0),
                2..=9 => (u * 1000.0).round(),
                _ => 10f64.powf(u * 5.0 - 1.0),
            };
            (name, count, now - age, value)
        })
        .collect()
}

/// `n` observations of one name, `name`, of both signs from 1e-300 to
/// 1e100 (every value a producer may send spans about 400 decades), within
/// the last 10 s: thousands of histogram bins in each of its buckets at the
/// quantile precisions.
pub fn spread_observations(n: i64, name: &str, now: i64) -> Vec<Obs> {
    (0..n)
        .map(|i| {
            let tenths = (i * 7919 % 4000 - 3000) as f64;
            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
            (
                name.to_string(),
                1,
                now - i % 10,
                sign * 10f64.powf(tenths / 10.0),
            )
        })
        .collect()
}

/// Kept by the worker at precision `p`: the bucket is after the horizon
/// of 120 samples (with the margins of [`observations`]).
pub fn kept(now: i64) -> impl Fn(u32, i64) -> bool {
    move |p, bucket| bucket > now - 120 * i64::from(p)
}

/// The statistics the worker must write for `obs`: at every precision
/// whose bucket `keep(precision, bucket)` accepts (the worker skips
/// buckets past the cleaner's horizon), histograms at `quantiles`.
pub fn reference(
    obs: &[Obs],
    precisions: &[u32],
    quantiles: &[u32],
    keep: impl Fn(u32, i64) -> bool,
) -> (Stats, Raw) {
    let (mut stats, mut raw) = (Stats::new(), Raw::new());
    for (name, count, ts, value) in obs {
        for &p in precisions {
            let bucket = ts.div_euclid(p as i64) * p as i64;
            if !keep(p, bucket) {
                continue;
            }
            stats
                .entry((p, name.clone()))
                .or_default()
                .entry(bucket)
                .or_default()
                .observe(*value, *count, quantiles.contains(&p));
            let r = raw.entry((p, name.clone(), bucket)).or_default();
            r.extend(std::iter::repeat_n(*value, *count as usize));
        }
    }
    for v in raw.values_mut() {
        v.sort_by(f64::total_cmp);
    }
    (stats, raw)
}

/// Every statistics hash listed in `stats:known:`, parsed. Panics on a
/// member whose score is not 0 or a field outside the contract.
pub async fn read(conn: &mut Conn, keys: &Keys) -> Stats {
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(keys.stats_known())
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await
        .unwrap();
    let hashes = super::counts::each_concurrently(conn, members, |mut conn, (m, score)| {
        let key = keys.stats_of_member(&m);
        async move {
            assert_eq!(score, 0.0, "stats:known: member {m} has score 0");
            let fields: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            (m, fields)
        }
    })
    .await;
    let mut out = Stats::new();
    for (m, fields) in hashes {
        let (p, name) = m.split_once(':').unwrap();
        let buckets = out
            .entry((p.parse().unwrap(), name.to_string()))
            .or_default();
        for (field, value) in fields {
            let (bucket, what) = field.split_once(':').unwrap();
            let s: &mut Summary = buckets.entry(bucket.parse().unwrap()).or_default();
            let num = || value.parse::<f64>().unwrap();
            match what {
                "count" => s.count = value.parse().unwrap(),
                "sum" => s.sum = num(),
                "sumsq" => s.sumsq = num(),
                "min" => s.min = num(),
                "max" => s.max = num(),
                h => {
                    let suffix = h.strip_prefix("h:").expect("a contract field");
                    let b = HistBucket::parse(suffix).expect("a histogram field");
                    s.histogram.insert(b, value.parse().unwrap());
                }
            }
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// `got` equals `want`: the same hashes and buckets, counts, min, max and
/// histograms exactly, sums and sums of squares to a relative 1e-9.
pub fn assert_equal(got: &Stats, want: &Stats) {
    let (g, w): (BTreeSet<_>, BTreeSet<_>) = (got.keys().collect(), want.keys().collect());
    assert_eq!(g, w, "the same statistics hashes");
    for (key, buckets) in want {
        let mine = &got[key];
        assert_eq!(
            mine.keys().collect::<Vec<_>>(),
            buckets.keys().collect::<Vec<_>>(),
            "buckets of stats:{}:{}",
            key.0,
            key.1
        );
        for (b, w) in buckets {
            let g = &mine[b];
            let at = format!(
                "stats:{}:{} bucket {b}: got {g:?}, want {w:?}",
                key.0, key.1
            );
            assert_eq!(g.count, w.count, "{at}");
            assert!(close(g.sum, w.sum) && close(g.sumsq, w.sumsq), "{at}");
            assert_eq!((g.min, g.max), (w.min, w.max), "{at}");
            assert_eq!(g.histogram, w.histogram, "{at}");
        }
    }
}

/// p50, p90, p99 read from every stored histogram are within
/// [`RELATIVE_ACCURACY`] of the exact quantiles of the raw data; returns
/// how many were checked.
pub fn assert_quantiles(got: &Stats, raw: &Raw) -> usize {
    let mut checked = 0;
    for ((p, name), buckets) in got {
        for (b, s) in buckets {
            if s.histogram.is_empty() {
                continue;
            }
            let data = &raw[&(*p, name.clone(), *b)];
            for q in hitcount::model::stats::REPORTED_QUANTILES {
                let exact = exact_quantile(data, q).unwrap();
                let read = s.quantile(q).unwrap();
                assert!(
                    (read - exact).abs() <= RELATIVE_ACCURACY * exact.abs(),
                    "stats:{p}:{name} bucket {b} q={q}: {read} vs exact {exact}"
                );
                checked += 1;
            }
        }
    }
    checked
}

/// The statistics hash `stats:60:NAME` summed over its buckets: count,
/// sum, min, max.
pub async fn summary(admin: &mut Conn, name: &str) -> (f64, f64, f64, f64) {
    let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(format!("stats:60:{name}"))
        .query_async(admin)
        .await
        .unwrap();
    let of = |what: &str| {
        fields
            .iter()
            .filter(|(f, _)| f.ends_with(&format!(":{what}")))
            .map(|(_, v)| v.parse::<f64>().unwrap())
            .collect::<Vec<_>>()
    };
    let min = of("min").into_iter().fold(f64::INFINITY, f64::min);
    let max = of("max").into_iter().fold(f64::NEG_INFINITY, f64::max);
    (of("count").iter().sum(), of("sum").iter().sum(), min, max)
}
