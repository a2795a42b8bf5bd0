//! `hitcount get NAME --precision P`: a counter's samples, oldest first.

use super::Common;
use crate::model::keys::Keys;
use crate::store::counters;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Counter name.
    name: String,
    /// Precision in seconds (one of the configured precisions).
    #[arg(long, short)]
    precision: u32,
    /// Print JSON: [{"time": unix_seconds, "count": n}, ...].
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) common: Common,
}

pub async fn run(mut args: Args) -> anyhow::Result<()> {
    args.common.validate()?;
    let precisions = &args.common.layout.precisions;
    if !precisions.contains(&args.precision) {
        let list: Vec<String> = precisions.iter().map(u32::to_string).collect();
        anyhow::bail!(
            "invalid --precision: {} s is not a configured precision; the configured ones are {} \
             (--precisions / HITCOUNT_PRECISIONS)",
            args.precision,
            list.join(", ")
        );
    }
    let mut conn = super::connect(&args.common.redis).await?;
    let keys = Keys::new(&args.common.layout, &args.common.stream);
    let counter = counters::read_counter(&mut conn, &keys, args.precision, &args.name).await?;
    if let Some((field, value)) = &counter.corrupt_example {
        tracing::warn!(
            key = keys.count(args.precision, &args.name),
            skipped = counter.corrupt,
            example = format!("{field:?} = {value:?}"),
            "fields that are not integers (not written by hitcount, or damaged) were skipped"
        );
    }
    let samples = counter.samples;
    if args.json {
        outln!("{}", serde_json::to_string(&samples)?);
        return Ok(());
    }
    if samples.is_empty() {
        outln!(
            "no samples for {} at precision {} s",
            args.name,
            args.precision
        );
        return Ok(());
    }
    outln!("{:<21} {:>12}", "time (UTC)", "count");
    for s in &samples {
        outln!("{:<21} {:>12}", counters::format_utc(s.time), s.count);
    }
    Ok(())
}
