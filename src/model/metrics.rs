//! Prometheus metrics: every metric family hitcount exports, registered in
//! one place.
//!
//! Any module records through the process-wide [`metrics()`] handle, e.g.
//! `metrics().events_read.inc_by(n)`; the HTTP server serves [`render()`] on
//! `/metrics`. The alert rules and dashboards are written against the exact
//! names below, so renaming a family is a breaking change.
//!
//! Conventions: base units (seconds, entries, events), `_total` on counters,
//! `_seconds` on durations, and bounded label values only — never a counter
//! name, a stream ID or raw error text. Label sets known in advance
//! ([`REDIS_ERROR_KINDS`], [`DEAD_LETTER_REASONS`]) are pre-initialised to
//! zero so their series exist before the first event; precisions come from
//! configuration, see [`Metrics::init_precisions`].

use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Content type of [`render()`]'s output (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every value of the `kind` label of `hitcount_redis_errors_total`.
pub const REDIS_ERROR_KINDS: [&str; 8] = [
    "io",
    "timeout",
    "script",
    "response",
    "oom",
    "other",
    "fatal",
    "unexpected",
];

/// Every value of the `reason` label of `hitcount_events_dead_lettered_total`.
pub const DEAD_LETTER_REASONS: [&str; 11] = [
    "missing_name",
    "empty_name",
    "name_too_long",
    "name_not_utf8",
    "bad_count",
    "bad_timestamp",
    "future_timestamp",
    "bad_msgpack",
    "bad_entry_id",
    "apply_error",
    "max_deliveries",
];

/// All of hitcount's metric handles. Obtain it with [`metrics()`].
///
/// Cloning a handle out of it is cheap and records into the same series.
pub struct Metrics {
    registry: Registry,
    /// `hitcount_build_info{version, revision}`: always 1; the labels carry
    /// the crate version and the git revision built from ("unknown" if none).
    pub build_info: IntGauge,
    /// `hitcount_events_read_total`: stream entries read by this worker
    /// (new and claimed), in entries.
    pub events_read: IntCounter,
    /// `hitcount_events_applied_total`: events whose hits were written to
    /// counters and acknowledged, in events.
    pub events_applied: IntCounter,
    /// `hitcount_events_dead_lettered_total{reason}`: events set aside as
    /// unprocessable, by reason (one of [`DEAD_LETTER_REASONS`]).
    pub events_dead_lettered: IntCounterVec,
    /// `hitcount_events_claimed_total`: pending entries claimed from other
    /// (dead or slow) consumers, in entries.
    pub events_claimed: IntCounter,
    /// `hitcount_hits_too_old_total{precision}`: hits not written at a
    /// precision because they are older than its retention; `precision` is
    /// the bucket length in seconds, e.g. "60".
    pub hits_too_old: IntCounterVec,
    /// `hitcount_windows_applied_total`: aggregated windows written to Redis.
    pub windows_applied: IntCounter,
    /// `hitcount_windows_fenced_total`: windows dropped unapplied because
    /// another consumer claimed some of their entries.
    pub windows_fenced: IntCounter,
    /// `hitcount_records_quarantined_total`: bookkeeping records that could
    /// not be read back, moved to the dead-letter stream.
    pub records_quarantined: IntCounter,
    /// `hitcount_window_size_events`: events per applied window.
    pub window_size: Histogram,
    /// `hitcount_apply_duration_seconds`: time to write one window to Redis.
    pub apply_duration: Histogram,
    /// `hitcount_end_to_end_delay_seconds`: from an event's timestamp to the
    /// moment its window was applied.
    pub end_to_end_delay: Histogram,
    /// `hitcount_redis_errors_total{kind}`: failed Redis operations, by kind
    /// (one of [`REDIS_ERROR_KINDS`]).
    pub redis_errors: IntCounterVec,
    /// `hitcount_redis_reconnects_total`: reconnections to Redis.
    pub redis_reconnects: IntCounter,
    /// `hitcount_group_lag_entries`: entries in the stream not yet delivered
    /// to the consumer group.
    pub group_lag: IntGauge,
    /// `hitcount_group_pending_entries`: entries delivered to the group but
    /// not yet acknowledged.
    pub group_pending: IntGauge,
    /// `hitcount_group_backlog_age_seconds`: age of the oldest undelivered
    /// entry (0 when there is none).
    pub group_backlog_age: Gauge,
    /// `hitcount_is_leader`: 1 while this worker holds the cleaner
    /// leadership, else 0.
    pub is_leader: IntGauge,
    /// `hitcount_cleaner_passes_total`: completed cleaner passes.
    pub cleaner_passes: IntCounter,
    /// `hitcount_cleaner_pass_duration_seconds`: duration of a cleaner pass.
    pub cleaner_pass_duration: Histogram,
    /// `hitcount_cleaner_samples_removed_total`: old samples deleted from
    /// counters by the cleaner.
    pub cleaner_samples_removed: IntCounter,
    /// `hitcount_cleaner_counters_removed_total`: counters deleted entirely
    /// (and unregistered) by the cleaner because they emptied.
    pub cleaner_counters_removed: IntCounter,
    /// `hitcount_cleaner_last_pass_timestamp_seconds`: Unix time at which the
    /// last cleaner pass completed.
    pub cleaner_last_pass: Gauge,
    /// `hitcount_stream_trimmed_entries_total`: entries trimmed from the
    /// stream.
    pub stream_trimmed: IntCounter,
    /// `hitcount_producer_buffered_events`: events waiting in the producer's
    /// buffer.
    pub producer_buffered: IntGauge,
    /// `hitcount_producer_dropped_events_total`: events the producer dropped
    /// (buffer full or send failed).
    pub producer_dropped: IntCounter,
    /// `hitcount_producer_sent_events_total`: events the producer appended to
    /// the stream.
    pub producer_sent: IntCounter,
    /// `hitcount_worker_loop_last_turn_timestamp_seconds`: Unix time of the
    /// worker loop's last turn.
    pub loop_last_turn: Gauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process-wide metrics, registered on first use.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// Every registered family in the Prometheus text format 0.0.4
/// (content type [`CONTENT_TYPE`]).
pub fn render() -> String {
    let families = metrics().registry.gather();
    // Encoding only fails on an invalid family, which registration refuses.
    TextEncoder::new()
        .encode_to_string(&families)
        .unwrap_or_else(|e| {
            tracing::debug!(error = %e, "encoding metrics");
            String::new()
        })
}

/// Seconds since the Unix epoch, as a float (for timestamp gauges).
pub fn unix_now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The git revision built from, or "unknown".
pub fn revision() -> &'static str {
    option_env!("HITCOUNT_GIT_REVISION").unwrap_or("unknown")
}

/// Durations from 0.5 ms to 10 s for Redis round trips.
const APPLY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Delays from 10 ms to 10 min.
const DELAY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// Cleaner passes, from 10 ms to 10 min.
const CLEANER_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// 1, 2, 5, 10, … 1e6: log-spaced event counts (1-2-5 per decade).
fn window_size_buckets() -> Vec<f64> {
    let mut b = Vec::with_capacity(19);
    let mut decade = 1.0;
    while decade < 1e6 {
        b.extend([decade, 2.0 * decade, 5.0 * decade]);
        decade *= 10.0;
    }
    b.push(1e6);
    b
}

/// Registers a collector; the names are fixed at compile time, so a failure
/// is a programming error caught by the first test that touches metrics.
fn reg<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    r.register(Box::new(c.clone()))
        .expect("registering a metric family");
    c
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    reg(r, IntCounter::new(name, help).expect("valid counter"))
}

fn counter_vec(r: &Registry, name: &str, help: &str, label: &str, init: &[&str]) -> IntCounterVec {
    let v = reg(
        r,
        IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid counter vec"),
    );
    for value in init {
        v.with_label_values(&[*value]);
    }
    v
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    reg(r, IntGauge::new(name, help).expect("valid gauge"))
}

fn gauge(r: &Registry, name: &str, help: &str) -> Gauge {
    reg(r, Gauge::new(name, help).expect("valid gauge"))
}

fn histogram(r: &Registry, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    let opts = HistogramOpts::new(name, help).buckets(buckets);
    reg(r, Histogram::with_opts(opts).expect("valid histogram"))
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registry::new();
        #[cfg(target_os = "linux")]
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("registering the process collector");

        let info = reg(
            &r,
            IntGaugeVec::new(
                Opts::new(
                    "hitcount_build_info",
                    "Build information; always 1, labelled with version and git revision.",
                ),
                &["version", "revision"],
            )
            .expect("valid gauge vec"),
        );
        let build_info = info.with_label_values(&[env!("CARGO_PKG_VERSION"), revision()]);
        build_info.set(1);

        Metrics {
            build_info,
            events_read: counter(&r, "hitcount_events_read_total", "Stream entries read by this worker."),
            events_applied: counter(
                &r,
                "hitcount_events_applied_total",
                "Events written to counters and acknowledged.",
            ),
            events_dead_lettered: counter_vec(
                &r,
                "hitcount_events_dead_lettered_total",
                "Events set aside as unprocessable, by reason.",
                "reason",
                &DEAD_LETTER_REASONS,
            ),
            events_claimed: counter(
                &r,
                "hitcount_events_claimed_total",
                "Pending entries claimed from other consumers.",
            ),
            hits_too_old: counter_vec(
                &r,
                "hitcount_hits_too_old_total",
                "Hits not written at a precision because older than its retention, by precision in seconds.",
                "precision",
                &[],
            ),
            windows_applied: counter(&r, "hitcount_windows_applied_total", "Windows of hits written to Redis."),
            records_quarantined: counter(
                &r,
                "hitcount_records_quarantined_total",
                "Bookkeeping records that could not be read back, moved to the dead-letter stream.",
            ),
            windows_fenced: counter(
                &r,
                "hitcount_windows_fenced_total",
                "Windows dropped because another consumer claimed their entries.",
            ),
            window_size: histogram(
                &r,
                "hitcount_window_size_events",
                "Events per applied window.",
                window_size_buckets(),
            ),
            apply_duration: histogram(
                &r,
                "hitcount_apply_duration_seconds",
                "Time to write one window to Redis.",
                APPLY_BUCKETS.to_vec(),
            ),
            end_to_end_delay: histogram(
                &r,
                "hitcount_end_to_end_delay_seconds",
                "Delay from an event's timestamp to its window being applied.",
                DELAY_BUCKETS.to_vec(),
            ),
            redis_errors: counter_vec(
                &r,
                "hitcount_redis_errors_total",
                "Failed Redis operations, by kind.",
                "kind",
                &REDIS_ERROR_KINDS,
            ),
            redis_reconnects: counter(&r, "hitcount_redis_reconnects_total", "Reconnections to Redis."),
            group_lag: int_gauge(
                &r,
                "hitcount_group_lag_entries",
                "Stream entries not yet delivered to the consumer group.",
            ),
            group_pending: int_gauge(
                &r,
                "hitcount_group_pending_entries",
                "Entries delivered to the consumer group but not acknowledged.",
            ),
            group_backlog_age: gauge(
                &r,
                "hitcount_group_backlog_age_seconds",
                "Age of the oldest undelivered stream entry.",
            ),
            is_leader: int_gauge(&r, "hitcount_is_leader", "1 while this worker is the cleaner leader."),
            cleaner_passes: counter(&r, "hitcount_cleaner_passes_total", "Completed cleaner passes."),
            cleaner_pass_duration: histogram(
                &r,
                "hitcount_cleaner_pass_duration_seconds",
                "Duration of a cleaner pass.",
                CLEANER_BUCKETS.to_vec(),
            ),
            cleaner_samples_removed: counter(
                &r,
                "hitcount_cleaner_samples_removed_total",
                "Old samples removed from counters by the cleaner.",
            ),
            cleaner_counters_removed: counter(
                &r,
                "hitcount_cleaner_counters_removed_total",
                "Empty counters removed by the cleaner.",
            ),
            cleaner_last_pass: gauge(
                &r,
                "hitcount_cleaner_last_pass_timestamp_seconds",
                "Unix time of the last completed cleaner pass.",
            ),
            stream_trimmed: counter(
                &r,
                "hitcount_stream_trimmed_entries_total",
                "Entries trimmed from the stream.",
            ),
            producer_buffered: int_gauge(
                &r,
                "hitcount_producer_buffered_events",
                "Events waiting in the producer's buffer.",
            ),
            producer_dropped: counter(
                &r,
                "hitcount_producer_dropped_events_total",
                "Events the producer dropped.",
            ),
            producer_sent: counter(
                &r,
                "hitcount_producer_sent_events_total",
                "Events the producer appended to the stream.",
            ),
            loop_last_turn: gauge(
                &r,
                "hitcount_worker_loop_last_turn_timestamp_seconds",
                "Unix time of the worker loop's last turn.",
            ),
            registry: r,
        }
    }

    /// Creates the `hitcount_hits_too_old_total` series of each configured
    /// precision (bucket length in seconds) at 0, so they exist before the
    /// first late hit. Call once at startup with the configured precisions.
    pub fn init_precisions(&self, precisions: impl IntoIterator<Item = u64>) {
        for p in precisions {
            self.hits_too_old.with_label_values(&[&p.to_string()]);
        }
    }

    /// Records one failed Redis operation of `kind`, which should be one of
    /// [`REDIS_ERROR_KINDS`]; any other value is counted as "other" so the
    /// label stays bounded.
    pub fn redis_error(&self, kind: &str) {
        let kind = if REDIS_ERROR_KINDS.contains(&kind) {
            kind
        } else {
            "other"
        };
        self.redis_errors.with_label_values(&[kind]).inc();
    }

    /// Records `n` dead-lettered events for `reason`, which should be one of
    /// [`DEAD_LETTER_REASONS`]; any other value is counted as "apply_error"
    /// so the label stays bounded.
    pub fn dead_lettered(&self, reason: &str, n: u64) {
        let reason = if DEAD_LETTER_REASONS.contains(&reason) {
            reason
        } else {
            "apply_error"
        };
        self.events_dead_lettered
            .with_label_values(&[reason])
            .inc_by(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_rendered() {
        let m = metrics();
        m.init_precisions([1, 60]);
        let out = render();
        for name in [
            "hitcount_build_info",
            "hitcount_events_read_total",
            "hitcount_events_applied_total",
            "hitcount_events_dead_lettered_total",
            "hitcount_events_claimed_total",
            "hitcount_hits_too_old_total",
            "hitcount_windows_applied_total",
            "hitcount_windows_fenced_total",
            "hitcount_window_size_events",
            "hitcount_apply_duration_seconds",
            "hitcount_end_to_end_delay_seconds",
            "hitcount_redis_errors_total",
            "hitcount_redis_reconnects_total",
            "hitcount_group_lag_entries",
            "hitcount_group_pending_entries",
            "hitcount_group_backlog_age_seconds",
            "hitcount_is_leader",
            "hitcount_cleaner_passes_total",
            "hitcount_cleaner_pass_duration_seconds",
            "hitcount_cleaner_samples_removed_total",
            "hitcount_cleaner_counters_removed_total",
            "hitcount_cleaner_last_pass_timestamp_seconds",
            "hitcount_stream_trimmed_entries_total",
            "hitcount_producer_buffered_events",
            "hitcount_producer_dropped_events_total",
            "hitcount_producer_sent_events_total",
            "hitcount_worker_loop_last_turn_timestamp_seconds",
        ] {
            assert!(out.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
        for kind in REDIS_ERROR_KINDS {
            assert!(out.contains(&format!("hitcount_redis_errors_total{{kind=\"{kind}\"}}")));
        }
        for reason in DEAD_LETTER_REASONS {
            assert!(out.contains(&format!(
                "hitcount_events_dead_lettered_total{{reason=\"{reason}\"}}"
            )));
        }
        assert!(out.contains("hitcount_hits_too_old_total{precision=\"60\"} 0"));
        let version = env!("CARGO_PKG_VERSION");
        assert!(out.contains(&format!(
            "hitcount_build_info{{revision=\"{}\",version=\"{version}\"}} 1",
            revision()
        )));
    }

    #[test]
    fn unknown_label_values_fold_into_bounded_ones() {
        let m = metrics();
        let other = m.redis_errors.with_label_values(&["other"]).get();
        m.redis_error("ERR something went wrong at key foo");
        assert_eq!(
            m.redis_errors.with_label_values(&["other"]).get(),
            other + 1
        );
        let apply = m
            .events_dead_lettered
            .with_label_values(&["apply_error"])
            .get();
        m.dead_lettered("bogus", 2);
        assert_eq!(
            m.events_dead_lettered
                .with_label_values(&["apply_error"])
                .get(),
            apply + 2
        );
    }

    #[test]
    fn window_size_buckets_span_one_to_a_million() {
        let b = window_size_buckets();
        assert_eq!(b.first(), Some(&1.0));
        assert_eq!(b.last(), Some(&1e6));
        assert!(b.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn every_decoder_reject_has_its_dead_letter_label() {
        // The label list repeats the decoder's reasons (a metric contract);
        // a new Reject must be added here, not folded into "apply_error".
        for r in crate::model::event::Reject::ALL {
            assert!(DEAD_LETTER_REASONS.contains(&r.reason()), "{}", r.reason());
        }
    }
}
