//! `hitcount get NAME --precision P`: a counter's samples, oldest first.

use super::Common;
use crate::counters;
use crate::keys::Keys;

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
    common: Common,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = crate::connect::client(&args.common.redis)?;
    let mut conn = crate::connect::open(&client, crate::connect::RESPONSE_TIMEOUT).await?;
    let keys = Keys::new(&args.common.layout, &args.common.stream);
    let samples = counters::read(&mut conn, &keys, args.precision, &args.name).await?;
    if args.json {
        println!("{}", serde_json::to_string(&samples)?);
        return Ok(());
    }
    if samples.is_empty() {
        println!(
            "no samples for {} at precision {} s",
            args.name, args.precision
        );
        return Ok(());
    }
    println!("{:<21} {:>12}", "time (UTC)", "count");
    for s in &samples {
        println!("{:<21} {:>12}", counters::format_utc(s.time), s.count);
    }
    Ok(())
}
