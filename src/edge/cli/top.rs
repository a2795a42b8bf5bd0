//! `hitcount top`: the names of one bucket ranked by count (the hits, as
//! `/api/v1/top`) or, `--by mean`, by the mean of the values sent with the
//! hits: the slowest pages of the current hour answer *Redis in Action*'s
//! question of what to optimise first. Reads every name of the precision
//! once ([`crate::store::query::rank`]); the API caches the same ranking.

use super::{number, Common};
use crate::edge::api::params::top_bucket;
use crate::edge::api::top::TopBody;
use crate::model::event::printable;
use crate::model::keys::Keys;
use crate::store::counters::format_utc;
use crate::store::query::{self, By};

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// What to rank by: `count` (hits in the bucket) or `mean` (the mean
    /// value sent with them, highest first).
    #[arg(long, default_value = "count", value_parser = str::parse::<By>)]
    by: By,
    /// Precision in seconds (one of the configured precisions); default:
    /// 3600.
    #[arg(long, short)]
    precision: Option<u32>,
    /// The bucket's start in unix seconds (default: the current bucket): a
    /// multiple of the precision, not after now and not older than the
    /// precision keeps (SAMPLES × PRECISION seconds).
    #[arg(long, value_parser = crate::model::config::ranged::<i64>(0..=(super::MAX_UNIX_SECONDS as i128)))]
    bucket: Option<i64>,
    /// How many names to print, 1 to 1000.
    #[arg(long, default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=crate::edge::api::MAX_LIMIT as u64))]
    limit: u64,
    /// Print JSON: {"precision", "bucket", "by", "counters": [{"name",
    /// "count"}, ...]} (each with "mean" too, by mean).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) common: super::Pick<Common, Uses>,
}

/// The settings of [`Common`] `top` shows: the counters' keys, precisions and how long they are kept.
pub(super) struct Uses;

impl super::Uses for Uses {
    const SHOWN: &'static [&'static str] = &["prefix", "precisions", "samples"];
}

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    args.common.validate()?;
    let precision = super::configured_precision(
        &args.common.layout.precisions,
        args.precision,
        Some(crate::edge::api::TOP_DEFAULT_PRECISION),
    )?;
    let now = crate::model::clock::unix_ms().div_euclid(1000);
    let bucket = top_bucket(args.bucket, precision, args.common.layout.samples, now)
        .map_err(|why| anyhow::anyhow!("invalid --bucket: {why}"))?;
    let mut conn = super::connect(&args.common.redis).await?;
    let keys = Keys::new(&args.common.layout, &args.common.stream);
    let limit = args.limit as usize;
    let ranking = query::rank(&mut conn, &keys, args.by, precision, bucket, limit).await?;
    // The ranking's name, and what it ranks.
    let (by, what) = match args.by {
        By::Count => ("count", "hits"),
        By::Mean => ("mean", "statistics"),
    };
    if args.json {
        // The fields of `/api/v1/top`'s answer, in its order, with `by`.
        let body = TopBody::new(precision, bucket, Some(by), &ranking, ranking.len());
        outln!("{}", super::json_text(&body, false)?);
        return Ok(());
    }
    let when = format!("the {precision} s bucket from {} UTC", format_utc(bucket));
    if ranking.is_empty() {
        outln!("no {what} in {when}");
        return Ok(());
    }
    outln!("top by {by}, {when}");
    // By mean, the mean before the count.
    let figures = |mean: Option<String>, count: &str| match mean {
        None => format!("{count:>12}"),
        Some(mean) => format!("{mean:>12}  {count:>10}"),
    };
    let means = (args.by == By::Mean).then(|| "mean".to_string());
    outln!("{:>5}  {}  name", "rank", figures(means, "count"));
    for (i, r) in ranking.iter().enumerate() {
        let figures = figures(r.mean.map(|m| number(Some(m))), &r.count.to_string());
        outln!("{:>5}  {figures}  {}", i + 1, printable(&r.name));
    }
    Ok(())
}
