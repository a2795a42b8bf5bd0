//! `hitcount load`: a load generator sending realistic hit events.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::Common;
use crate::edge::workload::{synthetic_value, Distribution, Names};
use crate::service::producer::Producer;

/// Events the generator lets the producer hold before waiting for it.
const MAX_IN_FLIGHT: u64 = 200_000;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of hit events to send (at least 1).
    #[arg(long, value_parser = super::parse_at_least_one)]
    hits: u64,
    /// Number of distinct names (page:0 .. page:N-1), 1 to 10,000,000.
    #[arg(long, default_value_t = 1000, value_parser = super::names_parser())]
    names: usize,
    /// Zipf exponent for name popularity, 0 to 10 (default: uniform).
    #[arg(long, value_parser = super::parse_zipf, allow_negative_numbers = true)]
    zipf: Option<f64>,
    /// Events per second, at least 1 (default: as fast as Redis takes them).
    #[arg(long, value_parser = super::parse_at_least_one)]
    rate: Option<u64>,
    /// Each hit carries a value: a synthetic response time in ms
    /// (1 to 1000 ms: log-uniform from 1 to 100 times a slowness fixed per
    /// name from 1 to 10), kept in the names' statistics.
    #[arg(long)]
    values: bool,
    #[command(flatten)]
    pub(super) common: Common,
}

/// What a load run sent.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Events sent.
    pub hits: u64,
    /// Hits per name rank.
    pub per_name: Vec<u64>,
    /// Wall time.
    pub elapsed: Duration,
}

pub async fn run(mut args: Args) -> anyhow::Result<()> {
    args.common.validate()?;
    let producer = super::checked_producer(&args.common).await?;
    let dist = args.zipf.map_or(Distribution::Uniform, Distribution::Zipf);
    let sent = send(
        &producer,
        args.hits,
        &Names::new(args.names, dist),
        args.rate,
        args.values,
        true,
    )
    .await;
    super::refused(&producer, &args.common)?;
    producer.shutdown(Duration::from_secs(5)).await;
    outln!(
        "sent {} hits over {} names to {}{} in {:.2} s ({:.0} hits/s)",
        sent.hits,
        args.names,
        args.common.stream.stream,
        match args.common.stream.shards {
            0 | 1 => String::new(),
            n => format!(" ({n} shards)"),
        },
        sent.elapsed.as_secs_f64(),
        sent.hits as f64 / sent.elapsed.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// Sends `hits` events through `producer`, at `rate` per second if given
/// (with a [`synthetic_value`] each if `values`), and waits until they
/// are in Redis.
pub async fn send(
    producer: &Producer,
    hits: u64,
    names: &Names,
    rate: Option<u64>,
    values: bool,
    progress: bool,
) -> Sent {
    let bar = if progress {
        ProgressBar::new(hits)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} hits {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut per_name = vec![0u64; names.len()];
    let start = Instant::now();
    let mut rng = rand::rng();
    let tick = Duration::from_millis(10);
    let mut sent = 0u64;
    // Events Redis refuses for good are dropped: stop there.
    while sent < hits && producer.refused().is_none() {
        let quota = match rate {
            Some(r) => {
                let due = (start.elapsed().as_secs_f64() * r as f64) as u64;
                if due <= sent {
                    tokio::time::sleep(tick).await;
                    continue;
                }
                (due - sent).min(hits - sent)
            }
            None => (hits - sent).min(10_000),
        };
        for _ in 0..quota {
            let rank = names.sample(&mut rng);
            per_name[rank] += 1;
            if values {
                producer.observe(&Names::name(rank), synthetic_value(&mut rng, rank));
            } else {
                producer.hit(&Names::name(rank));
            }
        }
        sent += quota;
        bar.set_position(sent);
        while producer.buffered() > MAX_IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::task::yield_now().await;
    }
    producer.flush().await;
    bar.finish_and_clear();
    Sent {
        hits: sent,
        per_name,
        elapsed: start.elapsed(),
    }
}
