//! How one family is built: a constructor per metric type that registers
//! it (names are fixed, so a failure is a programming error), and the
//! histograms' bucket layouts.

use prometheus::core::{Atomic, GenericGauge, GenericGaugeVec};
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
};

/// Durations from 0.5 ms to 10 s for Redis round trips.
pub(super) const APPLY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Delays from 10 ms to 10 min.
pub(super) const DELAY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// Cleaner passes, from 10 ms to 10 min.
pub(super) const CLEANER_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// 1, 2, 5, 10, … 1e6: log-spaced event counts (1-2-5 per decade).
pub(super) fn window_size_buckets() -> Vec<f64> {
    let decades = (0..6).map(|e| 10f64.powi(e));
    decades
        .flat_map(|d| [d, 2.0 * d, 5.0 * d])
        .chain([1e6])
        .collect()
}

/// Registers a collector; the names are fixed at compile time, so a failure
/// is a programming error caught by the first test that touches metrics.
pub(super) fn reg<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    r.register(Box::new(c.clone()))
        .expect("registering a metric family");
    c
}

pub(super) fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    reg(r, IntCounter::new(name, help).expect("valid counter"))
}

pub(super) fn counter_vec(
    r: &Registry,
    name: &str,
    help: &str,
    label: &str,
    init: &[&str],
) -> IntCounterVec {
    let v = reg(
        r,
        IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid counter vec"),
    );
    for value in init {
        v.with_label_values(&[*value]);
    }
    v
}

/// A gauge: whole-number (`IntGauge`) or not (`Gauge`), as its field says.
pub(super) fn gauge<P: Atomic + 'static>(r: &Registry, name: &str, help: &str) -> GenericGauge<P> {
    reg(r, GenericGauge::new(name, help).expect("valid gauge"))
}

/// A gauge with labels, whole-number or not.
pub(super) fn gauge_vec<P: Atomic + 'static>(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> GenericGaugeVec<P> {
    let opts = Opts::new(name, help);
    reg(
        r,
        GenericGaugeVec::new(opts, labels).expect("valid gauge vec"),
    )
}

pub(super) fn histogram(r: &Registry, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    let opts = HistogramOpts::new(name, help).buckets(buckets);
    reg(r, Histogram::with_opts(opts).expect("valid histogram"))
}

/// The git revision built from, or "unknown".
pub(super) fn revision() -> &'static str {
    option_env!("HITCOUNT_GIT_REVISION").unwrap_or("unknown")
}

/// `hitcount_build_info{version, revision}`, registered and set to 1.
pub(super) fn build_info(r: &Registry) {
    let info: IntGaugeVec = gauge_vec(
        r,
        "hitcount_build_info",
        "Build information; always 1, labelled with version and git revision.",
        &["version", "revision"],
    );
    info.with_label_values(&[env!("CARGO_PKG_VERSION"), revision()])
        .set(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_size_buckets_span_one_to_a_million() {
        let b = window_size_buckets();
        assert_eq!(b.first(), Some(&1.0));
        assert_eq!(b.last(), Some(&1e6));
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            b,
            [
                1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4,
                1e5, 2e5, 5e5, 1e6
            ]
        );
    }
}
