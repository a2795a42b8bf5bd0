//! The label values known in advance ([`REDIS_ERROR_KINDS`],
//! [`DEAD_LETTER_REASONS`], the configured precisions, the stream's shards):
//! their series are created at zero, and any other value is folded into a
//! bounded one (a shard number past [`MAX_SHARDS`] is not recorded).

use super::Metrics;
use crate::model::config::MAX_SHARDS;

/// Every value of the `kind` label of `hitcount_redis_errors_total`.
pub(crate) const REDIS_ERROR_KINDS: [&str; 8] = [
    "io",
    "timeout",
    "script",
    "response",
    "oom",
    "other",
    "fatal",
    "unexpected",
];

/// The labels of [`crate::model::event::Reject`]'s variants, in their
/// order (its `reason()` reads them here): why a hit is refused, by the
/// worker and by `ingest` alike.
const REJECT_REASONS: [&str; 12] = [
    "missing_name",
    "empty_name",
    "name_too_long",
    "name_not_utf8",
    "bad_count",
    "bad_timestamp",
    "future_timestamp",
    "bad_msgpack",
    "bad_entry_id",
    "bad_value",
    "mixed_forms",
    "too_large",
];

/// Every value of the `reason` label of `hitcount_events_dead_lettered_total`:
/// first [`REJECT_REASONS`], then the worker's own two.
pub(crate) const DEAD_LETTER_REASONS: [&str; 14] =
    then(REJECT_REASONS, ["apply_error", "max_deliveries"]);

/// Every value of the `reason` label of `hitcount_ingest_hits_refused_total`:
/// first [`REJECT_REASONS`] (the worker's reasons for the same hit), then
/// the JSON form's two and `ingest`'s one.
pub(crate) const INGEST_REFUSAL_REASONS: [&str; 15] =
    then(REJECT_REASONS, ["bad_id", "bad_json", "outside_prefix"]);

/// `a` then `b`, as one array of `N` = `A + B` labels (checked when built).
const fn then<const A: usize, const B: usize, const N: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; N] {
    assert!(A + B == N, "the lengths add up");
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < A { a[i] } else { b[i - A] };
        i += 1;
    }
    out
}

/// Every value of the `reason` label of `hitcount_statsd_lines_refused_total`:
/// a line's own four, then the worker's reasons a StatsD hit can meet.
pub(crate) const STATSD_REFUSAL_REASONS: [&str; 9] = [
    "bad_format",
    "line_too_long",
    "cut_off",
    "bad_rate",
    "bad_value",
    "empty_name",
    "name_too_long",
    "name_not_utf8",
    "bad_count",
];

/// Every value of the `type` label of `hitcount_statsd_lines_ignored_total`.
pub(crate) const STATSD_IGNORED_TYPES: [&str; 3] = ["g", "s", "other"];

/// Every value of the `code` label of `hitcount_ingest_requests_total`:
/// the HTTP status codes `ingest` answers with (431 and some 400s from the
/// HTTP layer itself, for a request it could not read), so that none a
/// client caused is counted as a 500.
pub(crate) const INGEST_CODES: [&str; 15] = [
    "200", "202", "204", "400", "401", "403", "404", "405", "408", "413", "415", "429", "431",
    "500", "503",
];

impl Metrics {
    /// Creates the `hitcount_hits_too_old_total` series of each configured
    /// precision (bucket length in seconds) at 0, so they exist before the
    /// first late hit. Call once at startup with the configured precisions.
    pub(crate) fn init_precisions(&self, precisions: impl IntoIterator<Item = u64>) {
        for p in precisions {
            self.hits_too_old.with_label_values(&[&p.to_string()]);
        }
    }

    /// Creates the per-shard series of every shard `0..shards` (at 0 unless
    /// already set), so that a shard nobody reads shows as
    /// `hitcount_shard_owned 0` rather than as no series at all. Call once
    /// at startup with the configured number of shards.
    pub(crate) fn init_shards(&self, shards: u32) {
        for k in 0..shards.min(MAX_SHARDS) {
            let label = [k.to_string()];
            self.shard_owned.with_label_values(&label);
            self.shard_lag.with_label_values(&label);
            self.shard_pending.with_label_values(&label);
            self.shard_backlog_age.with_label_values(&label);
        }
    }

    /// Records which of the `shards` shards this process reads:
    /// `hitcount_shard_owned{shard}` 1 for each of `owned`, 0 for the
    /// others, and their number in `hitcount_shards_owned`.
    pub(crate) fn set_owned(&self, shards: u32, owned: &[u32]) {
        let shards = shards.min(MAX_SHARDS);
        for k in 0..shards {
            self.shard_owned
                .with_label_values(&[&k.to_string()])
                .set(i64::from(owned.contains(&k)));
        }
        let n = owned.iter().filter(|&&k| k < shards).count();
        self.shards_owned.set(n as i64);
    }

    /// Records one shard's sample: its lag (left as it was when Redis does
    /// not know it), pending entries and backlog age in seconds.
    pub(crate) fn shard_sample(
        &self,
        shard: u32,
        lag: Option<i64>,
        pending: i64,
        backlog_age: f64,
    ) {
        if shard >= MAX_SHARDS {
            return;
        }
        let label = [shard.to_string()];
        if let Some(lag) = lag {
            self.shard_lag.with_label_values(&label).set(lag);
        }
        self.shard_pending.with_label_values(&label).set(pending);
        self.shard_backlog_age
            .with_label_values(&label)
            .set(backlog_age);
    }

    /// Records one answer of `ingest` with HTTP status `code`; a code not in
    /// [`INGEST_CODES`] is counted as "500", so the label stays bounded.
    pub(crate) fn ingest_answer(&self, code: u16) {
        let code = code.to_string();
        let code = known_or(&code, &INGEST_CODES, "500");
        self.ingest_requests.with_label_values(&[code]).inc();
    }

    /// Records one StatsD line refused for `reason`, one of
    /// [`STATSD_REFUSAL_REASONS`] (any other is counted as "bad_format").
    pub(crate) fn statsd_refusal(&self, reason: &str) {
        let reason = known_or(reason, &STATSD_REFUSAL_REASONS, "bad_format");
        self.statsd_refused.with_label_values(&[reason]).inc();
    }

    /// Records `n` hits `ingest` refused for `reason`, one of
    /// [`INGEST_REFUSAL_REASONS`] (any other is counted as "bad_json").
    pub(crate) fn ingest_refusals(&self, reason: &str, n: u64) {
        let reason = known_or(reason, &INGEST_REFUSAL_REASONS, "bad_json");
        self.ingest_refused.with_label_values(&[reason]).inc_by(n);
    }
}

/// `value` if it is one of `known`, else `other`: a label kept bounded.
fn known_or<'a>(value: &'a str, known: &[&str], other: &'a str) -> &'a str {
    if known.contains(&value) {
        value
    } else {
        other
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::metrics::metrics;

    /// Held by the tests that set the process' shard gauges (one registry
    /// for the whole test binary), so that one's shards do not show in
    /// another's render.
    pub(crate) static SHARD_GAUGES: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Records one failed Redis operation of `kind`, which should be one of
    /// [`REDIS_ERROR_KINDS`]; any other value is counted as "other" so the
    /// label stays bounded.
    fn redis_error(m: &Metrics, kind: &str) {
        let kind = if REDIS_ERROR_KINDS.contains(&kind) {
            kind
        } else {
            "other"
        };
        m.redis_errors.with_label_values(&[kind]).inc();
    }

    /// Records `n` dead-lettered events for `reason`, which should be one of
    /// [`DEAD_LETTER_REASONS`]; any other value is counted as "apply_error"
    /// so the label stays bounded.
    fn dead_lettered(m: &Metrics, reason: &str, n: u64) {
        let reason = if DEAD_LETTER_REASONS.contains(&reason) {
            reason
        } else {
            "apply_error"
        };
        m.events_dead_lettered
            .with_label_values(&[reason])
            .inc_by(n);
    }

    #[test]
    fn ingest_labels_are_bounded() {
        let m = metrics();
        let count = |code: &str| m.ingest_requests.with_label_values(&[code]).get();
        let (before_202, before_500) = (count("202"), count("500"));
        m.ingest_answer(202);
        m.ingest_answer(418);
        assert_eq!(
            (count("202"), count("500")),
            (before_202 + 1, before_500 + 1)
        );
        // Every reason a JSON hit can be refused for has its series.
        use crate::model::event::json::Refusal;
        let of_json = [Refusal::BadId.reason(), Refusal::BadJson.reason()];
        assert_eq!(INGEST_REFUSAL_REASONS[..12], DEAD_LETTER_REASONS[..12]);
        assert_eq!(&INGEST_REFUSAL_REASONS[12..14], of_json);
        assert!(INGEST_REFUSAL_REASONS.contains(&"outside_prefix"));
    }

    #[test]
    fn unknown_label_values_fold_into_bounded_ones() {
        let m = metrics();
        let other = m.redis_errors.with_label_values(&["other"]).get();
        redis_error(m, "ERR something went wrong at key foo");
        assert_eq!(
            m.redis_errors.with_label_values(&["other"]).get(),
            other + 1
        );
        let apply = m
            .events_dead_lettered
            .with_label_values(&["apply_error"])
            .get();
        dead_lettered(m, "bogus", 2);
        assert_eq!(
            m.events_dead_lettered
                .with_label_values(&["apply_error"])
                .get(),
            apply + 2
        );
    }

    #[test]
    fn shard_labels_stay_within_the_shards() {
        let _alone = SHARD_GAUGES.lock().unwrap_or_else(|p| p.into_inner());
        let m = metrics();
        m.set_owned(3, &[0, 2, 7]);
        assert_eq!(m.shards_owned.get(), 2);
        assert_eq!(m.shard_owned.with_label_values(&["1"]).get(), 0);
        assert_eq!(m.shard_owned.with_label_values(&["2"]).get(), 1);
        m.init_shards(3);
        assert_eq!(
            m.shard_owned.with_label_values(&["2"]).get(),
            1,
            "init keeps"
        );
        m.shard_sample(MAX_SHARDS, Some(1), 1, 1.0);
        let out = crate::model::metrics::render();
        assert!(!out.contains(&format!("shard=\"{MAX_SHARDS}\"")));
        assert!(!out.contains("hitcount_shard_owned{shard=\"7\"}"));
    }
}
