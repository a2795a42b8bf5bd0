//! `hitcount hit NAME`: send one event through the producer.

use std::time::Duration;

use super::Common;
use crate::model::keys::Keys;

/// How long `hit` waits for Redis before giving up.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Counter name, e.g. page:home (1 to 4096 bytes).
    #[arg(value_parser = super::NameArg(super::parse_hit_name))]
    name: String,
    /// How many hits this event counts (1 to 1,000,000,000).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..=crate::model::event::MAX_COUNT))]
    count: i64,
    /// Time of the hit in unix seconds (default: when Redis receives it).
    /// At most a day ahead, and recent enough to be kept at some precision
    /// (within samples × the largest precision of the workers' recorded
    /// layout, else of HITCOUNT_SAMPLES and HITCOUNT_PRECISIONS: 120 days
    /// by default).
    #[arg(long, value_parser = super::parse_unix_seconds, allow_hyphen_values = true)]
    at: Option<f64>,
    /// A measured value this hit carries (e.g. a response time in ms):
    /// `--count` observations of it go to the name's statistics
    /// (`stats:PREC:NAME`). A finite number, |value| ≤ 1e100.
    #[arg(long, value_parser = parse_value, allow_hyphen_values = true)]
    value: Option<f64>,
    #[command(flatten)]
    // It checks `--at` against the workers' recorded layout (its own
    // when none is recorded, or this user may not read it).
    pub(super) common: super::Pick<Common, super::Sends>,
}

/// A `--value` as the worker accepts it (see [`crate::model::event`]).
fn parse_value(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v.abs() <= crate::model::event::MAX_ABS_VALUE => Ok(v),
        _ => Err(format!(
            "{text:?} is not a finite number of magnitude at most 1e100 \
             (the worker would dead-letter it as bad_value)"
        )),
    }
}

/// Why the worker would not count a hit at `ts` (unix seconds) when it
/// arrives at `now_ms`, by its rules (see [`crate::model::event`] and
/// [`crate::model::aggregate::Window::add`]): `None` when it counts somewhere.
fn refuse_at(ts: f64, now_ms: i64, precisions: &[u32], samples: u32) -> Option<String> {
    let ts_ms = (ts * 1000.0).floor() as i64;
    let latest_ms = now_ms.saturating_add(crate::model::event::MAX_FUTURE_MS);
    if ts_ms > latest_ms {
        return Some(format!(
            "invalid --at: {ts} is more than a day ahead of now; it must be at most {} \
             (now {}); the worker would dead-letter it",
            latest_ms / 1000,
            now_ms / 1000
        ));
    }
    // Kept at precision P while its bucket starts after now - SAMPLES * P,
    // as the worker keeps it.
    let now_s = now_ms.div_euclid(1000);
    let ts_s = ts_ms.div_euclid(1000);
    let span = |p: u32| i64::from(samples) * i64::from(p);
    if precisions
        .iter()
        .any(|&p| crate::model::aggregate::kept_bucket(ts_s, now_s, p, span(p)).is_some())
    {
        return None;
    }
    let p = *precisions.iter().max()?;
    let horizon = span(p);
    let days = if horizon >= 86_400 {
        format!(" ({:.1} days)", horizon as f64 / 86_400.0)
    } else {
        String::new()
    };
    Some(format!(
        "invalid --at: {ts} is older than every precision keeps (the longest: {samples} samples \
         × {p} s = {horizon} s{days} before now, see --samples and --precisions); the worker \
         would count it nowhere"
    ))
}

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    args.common.validate()?;
    if let Some(ts) = args.at {
        let layout = &args.common.layout;
        // The workers' recorded layout when this user may read it, else
        // this command's own settings.
        let recorded = match super::connect(&args.common.redis).await {
            Ok(mut conn) => {
                let keys = Keys::new(layout, &args.common.stream);
                crate::store::layout_record::recorded(&mut conn, &keys)
                    .await
                    .ok()
                    .flatten()
            }
            Err(_) => None,
        };
        let (precisions, samples) =
            recorded.unwrap_or_else(|| (layout.precisions.clone(), layout.samples));
        let now_ms = crate::model::clock::unix_ms();
        if let Some(why) = refuse_at(ts, now_ms, &precisions, samples) {
            anyhow::bail!(why);
        }
    }
    // A bad password, CA, certificate, missing permission or a key of
    // another type fails here at once, with Redis' or TLS' own words.
    let producer = super::checked_producer(&args.common).await?;
    match (args.at, args.value) {
        (ts, Some(v)) => producer.observe_at(&args.name, args.count, ts, v),
        (Some(ts), None) => producer.hit_at(&args.name, args.count, ts),
        (None, None) => producer.hit_n(&args.name, args.count),
    }
    if tokio::time::timeout(SEND_TIMEOUT, producer.flush())
        .await
        .is_err()
    {
        anyhow::bail!(
            "Redis at {} did not take the hit within {SEND_TIMEOUT:?} of tries: it did not \
             answer in time, or refused it for a while (a warning above says why when it \
             answered; a hash slot being moved answers TRYAGAIN until the move ends)",
            crate::model::config::redact_url(&args.common.redis.url)
        );
    }
    super::refused(&producer, &args.common)?;
    producer.shutdown(Duration::from_secs(1)).await;
    let value = args
        .value
        // `{}` writes 1e100 as 101 digits; `{:?}` as `1e100`, 12.5 as 12.5.
        .map(|v| format!(" value {v:?}"))
        .unwrap_or_default();
    // The stream, or with shards the one the producer chose for the name.
    let shard = Keys::shard_of_name(&args.name, args.common.stream.shards);
    let to = Keys::shard(&args.common.layout, &args.common.stream, shard, false);
    outln!(
        "sent {} x{}{value} to {}",
        crate::model::event::printable(&args.name),
        args.count,
        to.stream
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_value, refuse_at};

    #[test]
    fn values_are_checked_as_the_worker_does() {
        assert_eq!(parse_value("12.5"), Ok(12.5));
        assert_eq!(parse_value("-3"), Ok(-3.0));
        for bad in ["NaN", "inf", "abc", "1e101", ""] {
            assert!(parse_value(bad).unwrap_err().contains("bad_value"), "{bad}");
        }
    }
    use crate::model::config::DEFAULT_PRECISIONS;

    #[test]
    fn at_is_refused_where_the_worker_would_not_count_it() {
        let now_ms = 1_795_000_000_123;
        let now = now_ms as f64 / 1000.0;
        let ok = |ts: f64| refuse_at(ts, now_ms, &DEFAULT_PRECISIONS, 120);
        assert_eq!(ok(now), None);
        assert_eq!(ok(now + 86_000.0), None);
        assert!(ok(now + 86_401.0).unwrap().contains("a day ahead"));
        // 120 days at the 1-day precision, minus the bucket in progress.
        assert_eq!(ok(now - 119.0 * 86_400.0), None);
        assert!(ok(now - 121.0 * 86_400.0).unwrap().contains("nowhere"));
        assert!(ok(0.0).unwrap().contains("nowhere"));
        // Only the configured layout counts.
        let why = refuse_at(now - 7_200.0, now_ms, &[1, 60], 120).unwrap();
        assert!(
            why.contains("120 samples × 60 s = 7200 s before now"),
            "{why}"
        );
        // Kept at a finer precision than the longest: counted there, as
        // the worker counts it (7 s: its bucket starts after now - 7; 10 s:
        // at now - 10, the horizon).
        let now_ms = 1_795_000_000_000;
        let at = (now_ms / 1000 - 1) as f64;
        assert_eq!(refuse_at(at, now_ms, &[7, 10], 1), None);
        assert!(refuse_at(at - 10.0, now_ms, &[7, 10], 1).is_some());
    }
}
