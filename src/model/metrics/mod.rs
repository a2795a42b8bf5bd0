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
//!
//! This file holds the families ([`Metrics`]), their registration and
//! [`render()`]; `labels` holds the label sets known in advance and the
//! recording helpers that keep labels bounded; `register` holds the
//! constructors that register one family each and the histograms' buckets.

use std::sync::LazyLock;

use prometheus::{
    Gauge, GaugeVec, Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
    TextEncoder,
};

pub(crate) mod labels;
mod register;

pub(crate) use labels::{
    DEAD_LETTER_REASONS, INGEST_CODES, INGEST_REFUSAL_REASONS, REDIS_ERROR_KINDS,
    STATSD_IGNORED_TYPES, STATSD_REFUSAL_REASONS,
};

use register::{
    counter, counter_vec, gauge, gauge_vec, histogram, window_size_buckets, APPLY_BUCKETS,
    CLEANER_BUCKETS, DELAY_BUCKETS,
};

/// Content type of [`render()`]'s output (Prometheus text format 0.0.4).
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Help of `hitcount_redis_maxmemory_policy_evicts`.
const EVICTS: &str = "1 when Redis' maxmemory-policy is not noeviction: it may drop counters.";

/// Declares [`Metrics`] and its constructor from one table: each family's
/// field, type, and the `register` call that creates and registers it, so a
/// family is written once.
macro_rules! families {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = $make:ident($($arg:expr),* $(,)?);)*) => {
        /// All of hitcount's metric handles. Obtain it with [`metrics()`].
        ///
        /// Cloning a handle out of it is cheap and records into the same series.
        pub(crate) struct Metrics {
            registry: Registry,
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Metrics {
            fn new() -> Metrics {
                let r = Registry::new();
                #[cfg(target_os = "linux")]
                r.register(Box::new(
                    prometheus::process_collector::ProcessCollector::for_self(),
                ))
                .expect("registering the process collector");

                // Set once, never changed: the registry keeps it.
                register::build_info(&r);

                Metrics {
                    $($field: $make(&r, $($arg),*),)*
                    registry: r,
                }
            }
        }
    };
}

families! {
    /// `hitcount_events_read_total`: stream entries read by this worker
    /// (new and claimed), in entries.
    events_read: IntCounter =
        counter("hitcount_events_read_total", "Stream entries read by this worker.");
    /// `hitcount_events_applied_total`: events whose hits were counted (at
    /// every precision that keeps them: [`Metrics::hits_too_old`] counts
    /// the others) and acknowledged, in events.
    events_applied: IntCounter = counter(
        "hitcount_events_applied_total",
        "Events counted, at every precision that keeps them, and acknowledged.",
    );
    /// `hitcount_events_dead_lettered_total{reason}`: events set aside as
    /// unprocessable, by reason (one of [`DEAD_LETTER_REASONS`]).
    events_dead_lettered: IntCounterVec = counter_vec(
        "hitcount_events_dead_lettered_total",
        "Events set aside as unprocessable, by reason.",
        "reason",
        &DEAD_LETTER_REASONS,
    );
    /// `hitcount_events_claimed_total`: pending entries claimed from other
    /// (dead or slow) consumers, in entries.
    events_claimed: IntCounter =
        counter("hitcount_events_claimed_total", "Pending entries claimed from other consumers.");
    /// `hitcount_events_gone_total`: pending entries found deleted from
    /// the stream (by another client's XTRIM, XDEL or MAXLEN) before they
    /// were counted: their hits are lost.
    events_gone: IntCounter = counter(
        "hitcount_events_gone_total",
        "Pending entries deleted from the stream by another client before they were counted.",
    );
    /// `hitcount_hits_too_old_total{precision}`: hits not written at a
    /// precision because they are older than its retention; `precision` is
    /// the bucket length in seconds, e.g. "60".
    hits_too_old: IntCounterVec = counter_vec(
        "hitcount_hits_too_old_total",
        "Hits not written at a precision because older than its retention, by precision in seconds.",
        "precision",
        &[],
    );
    /// `hitcount_hits_future_id_total`: hits without `ts` whose entry ID was
    /// more than a minute ahead of Redis' clock (an `XADD` with an explicit
    /// ID ahead moves every later ID there), counted at Redis' clock when
    /// the worker read them instead.
    hits_future_id: IntCounter = counter(
        "hitcount_hits_future_id_total",
        "Hits without ts whose entry ID was more than a minute ahead of Redis' clock, counted at Redis' clock instead.",
    );
    /// `hitcount_windows_applied_total`: aggregated windows written to Redis.
    windows_applied: IntCounter =
        counter("hitcount_windows_applied_total", "Windows of hits written to Redis.");
    /// `hitcount_windows_fenced_total`: windows dropped unapplied because
    /// another consumer claimed some of their entries.
    windows_fenced: IntCounter = counter(
        "hitcount_windows_fenced_total",
        "Windows dropped because another consumer claimed their entries.",
    );
    /// `hitcount_carry_cells_total`: summed cells applied through the
    /// carry (each stands for that cell in several windows).
    carry_cells: IntCounter = counter(
        "hitcount_carry_cells_total",
        "Summed cells applied through the carry, while behind.",
    );
    /// `hitcount_carry_groups_total`: groups of shard carries applied
    /// together on a Redis Cluster (each pays a script per hash slot it
    /// touches: the more cells per group, the cheaper per hit).
    carry_groups: IntCounter = counter(
        "hitcount_carry_groups_total",
        "Groups of shard carries applied together on a Redis Cluster.",
    );
    /// `hitcount_replication_unconfirmed_total`: writes of a window on a
    /// Redis Cluster that no replica confirmed within the wait (a master
    /// without a replica): counting goes on, less safe against a failover.
    replication_unconfirmed: IntCounter = counter(
        "hitcount_replication_unconfirmed_total",
        "Writes of a window on a Redis Cluster that no replica confirmed in time.",
    );
    /// `hitcount_records_quarantined_total`: bookkeeping records that could
    /// not be read back, moved to the dead-letter stream.
    records_quarantined: IntCounter = counter(
        "hitcount_records_quarantined_total",
        "Bookkeeping records that could not be read back, moved to the dead-letter stream.",
    );
    /// `hitcount_window_size_events`: events per applied window.
    window_size: Histogram = histogram(
        "hitcount_window_size_events",
        "Events per applied window.",
        window_size_buckets(),
    );
    /// `hitcount_apply_duration_seconds`: time to write one window (or one
    /// sum of windows) to Redis.
    apply_duration: Histogram = histogram(
        "hitcount_apply_duration_seconds",
        "Time to write one window, or one sum of windows, to Redis.",
        APPLY_BUCKETS.to_vec(),
    );
    /// `hitcount_end_to_end_delay_seconds`: from an event's timestamp to the
    /// moment its window was applied.
    end_to_end_delay: Histogram = histogram(
        "hitcount_end_to_end_delay_seconds",
        "Delay from an event's timestamp to its window being applied.",
        DELAY_BUCKETS.to_vec(),
    );
    /// `hitcount_redis_errors_total{kind}`: failed Redis operations, by kind
    /// (one of [`REDIS_ERROR_KINDS`]).
    redis_errors: IntCounterVec = counter_vec(
        "hitcount_redis_errors_total",
        "Failed Redis operations, by kind.",
        "kind",
        &REDIS_ERROR_KINDS,
    );
    /// `hitcount_redis_reconnects_total`: reconnections to Redis.
    redis_reconnects: IntCounter =
        counter("hitcount_redis_reconnects_total", "Reconnections to Redis.");
    /// `hitcount_redis_oom`: 1 while Redis refuses writes for its maxmemory.
    redis_oom: IntGauge = gauge("hitcount_redis_oom", "1 while Redis refuses writes (OOM).");
    /// `hitcount_redis_maxmemory_policy_evicts`: 1 unless it is noeviction.
    redis_policy_evicts: IntGauge = gauge("hitcount_redis_maxmemory_policy_evicts", EVICTS);
    /// `hitcount_group_lag_entries`: entries in the stream not yet delivered
    /// to the consumer group; with shards, the sum over every shard.
    group_lag: IntGauge = gauge(
        "hitcount_group_lag_entries",
        "Stream entries not yet delivered to the consumer group.",
    );
    /// `hitcount_group_pending_entries`: entries delivered to the group but
    /// not yet acknowledged; with shards, the sum over every shard.
    group_pending: IntGauge = gauge(
        "hitcount_group_pending_entries",
        "Entries delivered to the consumer group but not acknowledged.",
    );
    /// `hitcount_group_backlog_age_seconds`: age of the oldest undelivered
    /// entry (0 when there is none); with shards, the oldest of any shard.
    group_backlog_age: Gauge =
        gauge("hitcount_group_backlog_age_seconds", "Age of the oldest undelivered stream entry.");
    /// `hitcount_shard_lag_entries{shard}`: one shard's entries not yet
    /// delivered to the group; `shard` is `0..HITCOUNT_SHARDS` (≤ 256).
    shard_lag: IntGaugeVec = gauge_vec(
        "hitcount_shard_lag_entries",
        "Entries of a stream shard not yet delivered to the consumer group, by shard.",
        &["shard"],
    );
    /// `hitcount_shard_pending_entries{shard}`: one shard's entries
    /// delivered to the group and not yet acknowledged.
    shard_pending: IntGaugeVec = gauge_vec(
        "hitcount_shard_pending_entries",
        "Entries of a stream shard delivered to the group but not acknowledged, by shard.",
        &["shard"],
    );
    /// `hitcount_shard_backlog_age_seconds{shard}`: age of one shard's
    /// oldest undelivered entry (0 when there is none).
    shard_backlog_age: GaugeVec = gauge_vec(
        "hitcount_shard_backlog_age_seconds",
        "Age of a stream shard's oldest undelivered entry, by shard.",
        &["shard"],
    );
    /// `hitcount_shard_owned{shard}`: 1 while this process reads the shard
    /// (holds its lease; with one shard, every worker reads it), else 0.
    shard_owned: IntGaugeVec = gauge_vec(
        "hitcount_shard_owned",
        "1 while this process reads the stream shard, by shard.",
        &["shard"],
    );
    /// `hitcount_shards_owned`: how many shards this process reads.
    shards_owned: IntGauge = gauge("hitcount_shards_owned", "Stream shards this process reads.");
    /// `hitcount_is_leader`: 1 while this worker holds the cleaner
    /// leadership, else 0.
    is_leader: IntGauge = gauge("hitcount_is_leader", "1 while this worker is the cleaner leader.");
    /// `hitcount_cleaner_passes_total`: completed cleaner passes.
    cleaner_passes: IntCounter =
        counter("hitcount_cleaner_passes_total", "Completed cleaner passes.");
    /// `hitcount_cleaner_pass_duration_seconds`: duration of a cleaner pass.
    cleaner_pass_duration: Histogram = histogram(
        "hitcount_cleaner_pass_duration_seconds",
        "Duration of a cleaner pass.",
        CLEANER_BUCKETS.to_vec(),
    );
    /// `hitcount_cleaner_samples_removed_total`: old samples deleted from
    /// counters by the cleaner.
    cleaner_samples_removed: IntCounter = counter(
        "hitcount_cleaner_samples_removed_total",
        "Old samples removed from counters by the cleaner.",
    );
    /// `hitcount_cleaner_counters_removed_total`: counters deleted entirely
    /// (and unregistered) by the cleaner because they emptied.
    cleaner_counters_removed: IntCounter = counter(
        "hitcount_cleaner_counters_removed_total",
        "Empty counters removed by the cleaner.",
    );
    /// `hitcount_cleaner_stats_fields_removed_total`: fields of old
    /// statistics buckets deleted by the cleaner.
    cleaner_stats_fields_removed: IntCounter = counter(
        "hitcount_cleaner_stats_fields_removed_total",
        "Fields of old statistics buckets removed by the cleaner.",
    );
    /// `hitcount_cleaner_stats_removed_total`: statistics hashes that
    /// emptied and left `stats:known:`.
    cleaner_stats_removed: IntCounter = counter(
        "hitcount_cleaner_stats_removed_total",
        "Empty statistics hashes removed by the cleaner.",
    );
    /// `hitcount_cleaner_members_readded_total`: `known:` or `stats:known:`
    /// members a cluster's cleaner removed and put back because their hash
    /// had been written again meanwhile (the race its re-check closes).
    cleaner_members_readded: IntCounter = counter(
        "hitcount_cleaner_members_readded_total",
        "known: or stats:known: members put back by a cluster cleaner's re-check.",
    );
    /// `hitcount_cleaner_last_pass_timestamp_seconds`: Unix time at which the
    /// last cleaner pass completed.
    cleaner_last_pass: Gauge = gauge(
        "hitcount_cleaner_last_pass_timestamp_seconds",
        "Unix time of the last completed cleaner pass.",
    );
    /// `hitcount_stream_trimmed_entries_total`: entries trimmed from the
    /// stream.
    stream_trimmed: IntCounter =
        counter("hitcount_stream_trimmed_entries_total", "Entries trimmed from the stream.");
    /// `hitcount_producer_buffered_events`: events waiting in the producer's
    /// buffer.
    producer_buffered: IntGauge =
        gauge("hitcount_producer_buffered_events", "Events waiting in the producer's buffer.");
    /// `hitcount_producer_dropped_events_total`: events the producer dropped
    /// (buffer full or send failed).
    producer_dropped: IntCounter =
        counter("hitcount_producer_dropped_events_total", "Events the producer dropped.");
    /// `hitcount_producer_sent_events_total`: events the producer appended to
    /// the stream.
    producer_sent: IntCounter = counter(
        "hitcount_producer_sent_events_total",
        "Events the producer appended to the stream.",
    );
    /// `hitcount_ingest_requests_total{code}`: requests `ingest` answered,
    /// by HTTP status code (one of [`INGEST_CODES`]).
    ingest_requests: IntCounterVec = counter_vec(
        "hitcount_ingest_requests_total",
        "Requests ingest answered, by HTTP status code.",
        "code",
        &INGEST_CODES,
    );
    /// `hitcount_ingest_hits_accepted_total`: hits `ingest` accepted (Redis
    /// holds them), those whose id was seen before included.
    ingest_accepted: IntCounter = counter(
        "hitcount_ingest_hits_accepted_total",
        "Hits ingest accepted: Redis holds them.",
    );
    /// `hitcount_ingest_hits_duplicate_total`: accepted hits whose id was
    /// seen within the horizon, so not appended again.
    ingest_duplicates: IntCounter = counter(
        "hitcount_ingest_hits_duplicate_total",
        "Accepted hits whose id was seen within the horizon: not appended again.",
    );
    /// `hitcount_ingest_hits_id_conflict_total`: duplicates whose id was
    /// seen with another hit (name, count, ts or value): an id reused,
    /// told to the client (`conflicts`), not counted.
    ingest_conflicts: IntCounter = counter(
        "hitcount_ingest_hits_id_conflict_total",
        "Duplicate hits whose id was seen with another hit: not appended.",
    );
    /// `hitcount_ingest_hits_refused_total{reason}`: hits `ingest` refused,
    /// by reason (one of [`INGEST_REFUSAL_REASONS`]).
    ingest_refused: IntCounterVec = counter_vec(
        "hitcount_ingest_hits_refused_total",
        "Hits ingest refused, by reason.",
        "reason",
        &INGEST_REFUSAL_REASONS,
    );
    /// `hitcount_ingest_request_duration_seconds`: from a request's headers
    /// to its answer, body and Redis included.
    ingest_duration: Histogram = histogram(
        "hitcount_ingest_request_duration_seconds",
        "Time from a request's headers to ingest's answer, in seconds.",
        APPLY_BUCKETS.to_vec(),
    );
    /// `hitcount_statsd_hits_total`: hits read from StatsD lines and handed
    /// to the producer.
    statsd_hits: IntCounter = counter(
        "hitcount_statsd_hits_total",
        "Hits read from StatsD lines and handed to the producer.",
    );
    /// `hitcount_statsd_lines_ignored_total{type}`: StatsD lines of a type
    /// hitcount does not count (`g`, `s`, `other`).
    statsd_ignored: IntCounterVec = counter_vec(
        "hitcount_statsd_lines_ignored_total",
        "StatsD lines of a type hitcount does not count, by type.",
        "type",
        &STATSD_IGNORED_TYPES,
    );
    /// `hitcount_statsd_lines_refused_total{reason}`: StatsD lines that are
    /// not a hit, by reason (one of [`STATSD_REFUSAL_REASONS`]).
    statsd_refused: IntCounterVec = counter_vec(
        "hitcount_statsd_lines_refused_total",
        "StatsD lines refused, by reason.",
        "reason",
        &STATSD_REFUSAL_REASONS,
    );
    /// `hitcount_statsd_dropped_total{where}`: StatsD datagrams the socket's
    /// buffer dropped (`socket`, by the kernel's count), hits the
    /// producer's full buffer dropped (`queue`) and hits still in it when
    /// ingest stopped, Redis away (`stopped`).
    statsd_dropped: IntCounterVec = counter_vec(
        "hitcount_statsd_dropped_total",
        "StatsD datagrams dropped by the socket's buffer (where=socket), hits by the producer's full buffer (where=queue) and hits left in it at a stop (where=stopped).",
        "where",
        &["socket", "queue", "stopped"],
    );
    /// `hitcount_worker_loop_last_turn_timestamp_seconds`: Unix time of the
    /// worker loop's last turn.
    loop_last_turn: Gauge = gauge(
        "hitcount_worker_loop_last_turn_timestamp_seconds",
        "Unix time of the worker loop's last turn.",
    );
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process-wide metrics, registered on first use.
pub(crate) fn metrics() -> &'static Metrics {
    &METRICS
}

/// Every registered family in the Prometheus text format 0.0.4
/// (content type [`CONTENT_TYPE`]).
pub(crate) fn render() -> String {
    let families = metrics().registry.gather();
    // Encoding only fails on an invalid family, which registration refuses.
    TextEncoder::new()
        .encode_to_string(&families)
        .unwrap_or_else(|e| {
            tracing::debug!(error = %e, "encoding metrics");
            String::new()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_rendered() {
        let m = metrics();
        m.init_precisions([1, 60]);
        m.init_shards(2);
        let out = render();
        for name in [
            "hitcount_build_info",
            "hitcount_events_read_total",
            "hitcount_events_applied_total",
            "hitcount_events_dead_lettered_total",
            "hitcount_events_claimed_total",
            "hitcount_events_gone_total",
            "hitcount_hits_too_old_total",
            "hitcount_hits_future_id_total",
            "hitcount_windows_applied_total",
            "hitcount_windows_fenced_total",
            "hitcount_carry_cells_total",
            "hitcount_carry_groups_total",
            "hitcount_replication_unconfirmed_total",
            "hitcount_window_size_events",
            "hitcount_apply_duration_seconds",
            "hitcount_end_to_end_delay_seconds",
            "hitcount_redis_errors_total",
            "hitcount_redis_reconnects_total",
            "hitcount_redis_oom",
            "hitcount_redis_maxmemory_policy_evicts",
            "hitcount_group_lag_entries",
            "hitcount_group_pending_entries",
            "hitcount_group_backlog_age_seconds",
            "hitcount_shard_lag_entries",
            "hitcount_shard_pending_entries",
            "hitcount_shard_backlog_age_seconds",
            "hitcount_shard_owned",
            "hitcount_shards_owned",
            "hitcount_is_leader",
            "hitcount_cleaner_passes_total",
            "hitcount_cleaner_pass_duration_seconds",
            "hitcount_cleaner_samples_removed_total",
            "hitcount_cleaner_counters_removed_total",
            "hitcount_cleaner_stats_fields_removed_total",
            "hitcount_cleaner_stats_removed_total",
            "hitcount_cleaner_members_readded_total",
            "hitcount_cleaner_last_pass_timestamp_seconds",
            "hitcount_stream_trimmed_entries_total",
            "hitcount_producer_buffered_events",
            "hitcount_producer_dropped_events_total",
            "hitcount_producer_sent_events_total",
            "hitcount_worker_loop_last_turn_timestamp_seconds",
            "hitcount_ingest_requests_total",
            "hitcount_ingest_hits_accepted_total",
            "hitcount_ingest_hits_duplicate_total",
            "hitcount_ingest_hits_id_conflict_total",
            "hitcount_ingest_hits_refused_total",
            "hitcount_ingest_request_duration_seconds",
            "hitcount_statsd_hits_total",
            "hitcount_statsd_lines_ignored_total",
            "hitcount_statsd_lines_refused_total",
            "hitcount_statsd_dropped_total",
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
            register::revision()
        )));
    }

    /// The deployment checks' list of exported metrics (which the Grafana
    /// dashboard and the alert rules may use) is exactly what the binary
    /// exports: a metric added or renamed in the code fails here, not in a
    /// dashboard.
    #[test]
    fn the_deploy_checks_know_every_exported_metric() {
        let script = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check-deploy"),
        )
        .unwrap();
        let start = script.find("METRICS=\"").expect("a METRICS list") + "METRICS=\"".len();
        let end = start + script[start..].find('"').unwrap();
        let listed: std::collections::BTreeSet<&str> =
            script[start..end].split_whitespace().collect();
        // Every family, including labelled ones that have no sample yet.
        metrics().init_precisions([60]);
        metrics().init_shards(1);
        let exported: std::collections::BTreeSet<String> = render()
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with("hitcount_"))
            .map(str::to_string)
            .collect();
        let exported: std::collections::BTreeSet<&str> =
            exported.iter().map(String::as_str).collect();
        assert_eq!(
            listed, exported,
            "scripts/check-deploy METRICS vs the binary"
        );
    }
}
