//! `hitcount hit NAME`: send one event through the producer.

use std::time::Duration;

use anyhow::Context;

use super::Common;
use crate::producer::{Producer, ProducerOptions};

/// How long `hit` waits for Redis before giving up.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Counter name, e.g. page:home.
    name: String,
    /// How many hits this event counts (1 to 1,000,000,000).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..=crate::event::MAX_COUNT))]
    count: i64,
    /// Time of the hit in unix seconds (default: when Redis receives it).
    #[arg(long)]
    at: Option<f64>,
    #[command(flatten)]
    common: Common,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    // The producer never reports errors (it retries in the background); a
    // one-shot command connects first so a bad password, CA or certificate
    // fails at once with Redis' or TLS' own words.
    let client = crate::connect::client(&args.common.redis)?;
    crate::connect::open(&client, crate::connect::RESPONSE_TIMEOUT)
        .await
        .with_context(|| {
            format!(
                "cannot connect to Redis at {}",
                crate::config::redact_url(&args.common.redis.url)
            )
        })?;
    let producer = Producer::start(
        &args.common.redis,
        &args.common.stream,
        ProducerOptions::default(),
    )?;
    match args.at {
        Some(ts) => producer.hit_at(&args.name, args.count, ts),
        None => producer.hit_n(&args.name, args.count),
    }
    if tokio::time::timeout(SEND_TIMEOUT, producer.flush())
        .await
        .is_err()
    {
        anyhow::bail!(
            "could not reach Redis at {} within {SEND_TIMEOUT:?}",
            crate::config::redact_url(&args.common.redis.url)
        );
    }
    producer.shutdown(Duration::from_secs(1)).await;
    println!(
        "sent {} x{} to {}",
        args.name, args.count, args.common.stream.stream
    );
    Ok(())
}
