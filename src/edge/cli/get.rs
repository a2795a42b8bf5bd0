//! `hitcount get NAME --precision P`: a counter's samples, oldest first;
//! with `--stats`, its statistics per bucket instead (count, mean, min,
//! max, standard deviation and, where a histogram is kept, p50/p90/p99).

use super::{number, Common};
use crate::model::keys::Keys;
use crate::model::stats_hash::Row;
use crate::store::connect::Conn;
use crate::store::{counters, stats_query};

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Counter name (1 to 4096 bytes).
    #[arg(value_parser = super::NameArg(super::parse_counter_name))]
    name: String,
    /// Precision in seconds (one of the configured precisions).
    #[arg(long, short, value_parser = crate::model::config::ranged::<u32>(1..=crate::model::config::MAX_PRECISION.into()))]
    precision: u32,
    /// Print the statistics of the values sent with the hits (the `value`
    /// field) instead of the counts: per bucket count, mean, min, max,
    /// stddev, p50, p90, p99.
    #[arg(long)]
    stats: bool,
    /// Print JSON: [{"time": unix_seconds, "count": n}, ...]; with --stats
    /// [{"t": unix_seconds, "count", "mean", "min", "max", "stddev", "p50",
    /// "p90", "p99"}, ...] (a quantile is null without a histogram).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) common: super::Pick<Common, Uses>,
}

/// The settings of [`Common`] `get` shows: the counters' keys and precisions.
pub(super) struct Uses;

impl super::Uses for Uses {
    const SHOWN: &'static [&'static str] = &["prefix", "precisions"];
}

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    args.common.validate()?;
    super::configured_precision(&args.common.layout.precisions, Some(args.precision), None)?;
    let mut conn = super::connect(&args.common.redis).await?;
    let keys = Keys::new(&args.common.layout, &args.common.stream);
    if args.stats {
        return stats(&args, &mut conn, &keys).await;
    }
    let counter = counters::read_counter(&mut conn, &keys, args.precision, &args.name).await?;
    let key = keys.count(args.precision, &args.name);
    let skipped = (counter.corrupt, &counter.corrupt_example);
    let what = "fields that are not integers, or no bucket's start";
    warn_of(&mut conn, &key, counter.samples.is_empty(), skipped, what).await?;
    let samples = counter.samples;
    if args.json {
        outln!("{}", super::json_text(&samples, false)?);
        return Ok(());
    }
    if samples.is_empty() {
        return nothing(&args, "samples");
    }
    outln!("{:<21} {:>12}", "time (UTC)", "count");
    for s in &samples {
        outln!("{:<21} {:>12}", counters::format_utc(s.time), s.count);
    }
    Ok(())
}

/// `get --stats`: one row per bucket, oldest first.
async fn stats(args: &Args, conn: &mut Conn, keys: &Keys) -> anyhow::Result<()> {
    let read = stats_query::read(conn, keys, args.precision, &args.name, None, None).await?;
    let hash = read.unwrap_or_default();
    let key = keys.stats(args.precision, &args.name);
    let skipped = (hash.skipped, &hash.skipped_example);
    let what = "malformed statistics fields";
    warn_of(conn, &key, hash.buckets.is_empty(), skipped, what).await?;
    let rows: Vec<Row> = hash.buckets.iter().map(|(&t, s)| Row::of(t, s)).collect();
    if args.json {
        outln!("{}", super::json_text(&rows, false)?);
        return Ok(());
    }
    if rows.is_empty() {
        return nothing(args, "statistics");
    }
    // The time, the count, then seven figures, each right-aligned.
    let line = |time: &str, count: String, figures: [String; 7]| {
        let figures = figures.map(|f| format!("{f:>12}")).join(" ");
        format!("{time:<21} {count:>10} {figures}")
    };
    let heads = ["mean", "min", "max", "stddev", "p50", "p90", "p99"];
    outln!(
        "{}",
        line("time (UTC)", "count".into(), heads.map(String::from))
    );
    for r in &rows {
        let figures = [
            r.mean,
            Some(r.min),
            Some(r.max),
            r.stddev,
            r.p50,
            r.p90,
            r.p99,
        ];
        let time = counters::format_utc(r.t);
        outln!("{}", line(&time, r.count.to_string(), figures.map(number)));
    }
    Ok(())
}

/// Warns of the `skipped` malformed fields of `key` (a count and the first:
/// `what` they are, written by something else or damaged); and, when `key`
/// read as `empty`, if it is a key of another type (written by something
/// else): it reads as no samples, and is left alone. One `HLEN`, which the
/// worker's ACL grants (not `TYPE`).
async fn warn_of(
    conn: &mut Conn,
    key: &str,
    empty: bool,
    (skipped, example): (usize, &Option<(String, String)>),
    what: &str,
) -> anyhow::Result<()> {
    if let Some((field, value)) = example {
        tracing::warn!(
            key,
            skipped,
            example = format!("{field:?} = {value:?}"),
            "{what} (not written by hitcount, or damaged) were skipped"
        );
    }
    if !empty {
        return Ok(());
    }
    let len = redis::Cmd::hlen(key).query_async(conn).await;
    if crate::store::client::unless_wrong_type(len)?.is_none() {
        tracing::warn!(
            key,
            "a key of another type (not written by hitcount): read as empty, and left alone"
        );
    }
    Ok(())
}

/// The line printed when there is no `what` to show.
fn nothing(args: &Args, what: &str) -> anyhow::Result<()> {
    outln!(
        "no {what} for {} at precision {} s",
        crate::model::event::printable(&args.name),
        args.precision
    );
    Ok(())
}
