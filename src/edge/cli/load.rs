//! `hitcount load`: a load generator sending realistic hit events.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::Common;
use crate::edge::workload::{synthetic_value, Distribution, Names};
use crate::model::shutdown::Shutdown;
use crate::service::producer::Producer;

/// Events the generator lets the producer hold before waiting for it.
const MAX_IN_FLIGHT: u64 = 200_000;
/// How long a run waits for its last events to reach Redis (an interrupted
/// run too) before it reports what did.
const FLUSH_DEADLINE: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Number of hit events to send (at least 1).
    #[arg(long, value_parser = super::parse_at_least_one)]
    hits: u64,
    /// Number of distinct names (page:0 .. page:N-1), 1 to 10,000,000.
    #[arg(long, default_value_t = 1000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=super::MAX_NAMES))]
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
    pub(super) common: super::Pick<Common, super::Sends>,
}

/// What a load run sent.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    /// Events sent.
    pub hits: u64,
    /// Hits per name rank.
    pub per_name: Vec<u64>,
    /// Wall time.
    pub elapsed: Duration,
    /// Whether `stop` ended it before every hit was generated.
    pub interrupted: bool,
}

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    args.common.validate()?;
    let producer = super::checked_producer(&args.common).await?;
    let dist = args.zipf.map_or(Distribution::Uniform, Distribution::Zipf);
    // Ctrl-C (or SIGTERM) stops the sending, not the process: what was
    // generated is flushed and the run says what reached Redis.
    let (trigger, stop) = crate::model::shutdown::channel();
    let signals = tokio::spawn(async move {
        crate::model::shutdown::signals().await;
        trigger.trigger();
    });
    let names = Names::new(args.names, dist);
    let sent = send(&producer, args.hits, &names, args.rate, args.values, &stop).await;
    signals.abort();
    let _ = tokio::time::timeout(FLUSH_DEADLINE, producer.flush()).await;
    super::refused(&producer, &args.common)?;
    let stats = producer.stats();
    let (appended, dropped) = (stats.sent.load(Relaxed), stats.dropped.load(Relaxed));
    producer.shutdown(Duration::ZERO).await;
    let shards = match args.common.stream.shards {
        0 | 1 => String::new(),
        n => format!(" ({n} shards)"),
    };
    if sent.interrupted {
        // Hits handed to the producer and neither appended nor dropped
        // were on their way when Redis stopped answering.
        let unconfirmed = sent.hits.saturating_sub(appended + dropped);
        outln!(
            "interrupted: sent {appended} of {} hits ({}) over {} names to {}{shards} in {:.2} s{}",
            args.hits,
            super::plural(appended, "entry", "entries"),
            args.names,
            args.common.stream.stream,
            sent.elapsed.as_secs_f64(),
            if unconfirmed > 0 {
                format!(
                    "; {unconfirmed} more not confirmed: Redis did not answer within {} s",
                    FLUSH_DEADLINE.as_secs()
                )
            } else {
                String::new()
            }
        );
        return Ok(());
    }
    outln!(
        "sent {} hits over {} names to {}{shards} in {:.2} s ({:.0} hits/s)",
        sent.hits,
        args.names,
        args.common.stream.stream,
        sent.elapsed.as_secs_f64(),
        sent.hits as f64 / sent.elapsed.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// A progress bar of `len` drawn by `template` on stderr, only on a
/// terminal (`load`'s hits, `import`'s bytes).
pub(super) fn progress(len: u64, template: &str) -> indicatif::ProgressBar {
    let style = indicatif::ProgressStyle::with_template(template)
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    indicatif::ProgressBar::new(len).with_style(style)
}

/// Sends `hits` events through `producer`, at `rate` per second if given
/// (with a [`synthetic_value`] each if `values`), and waits until they
/// are in Redis. Once `stop` is triggered it generates no more and returns
/// what it generated, `interrupted`.
pub(crate) async fn send(
    producer: &Producer,
    hits: u64,
    names: &Names,
    rate: Option<u64>,
    values: bool,
    stop: &Shutdown,
) -> Sent {
    let bar = progress(hits, "{bar:40} {pos}/{len} hits {per_sec} eta {eta}");
    let mut per_name = vec![0u64; names.len()];
    let start = Instant::now();
    let mut rng = rand::rng();
    let tick = Duration::from_millis(10);
    let mut sent = 0u64;
    let mut stop = stop.clone();
    // Events Redis refuses for good are dropped: stop there.
    while sent < hits && producer.refused().is_none() && !stop.is_triggered() {
        let quota = match rate {
            Some(r) => {
                let due = (start.elapsed().as_secs_f64() * r as f64) as u64;
                if due <= sent {
                    tokio::select! {
                        _ = tokio::time::sleep(tick) => {}
                        _ = stop.wait() => {}
                    }
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
        // (Stopped too: with Redis away the buffer does not drain.)
        while producer.buffered() > MAX_IN_FLIGHT && !stop.is_triggered() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::task::yield_now().await;
    }
    let interrupted = sent < hits;
    if !interrupted {
        producer.flush().await;
    }
    bar.finish_and_clear();
    Sent {
        hits: sent,
        per_name,
        elapsed: start.elapsed(),
        interrupted,
    }
}
