//! `hitcount demo`: the main job end to end on a throwaway Redis.
//!
//! With no REDIS_URL it starts `redis-server` on a free local port, runs two
//! workers, sends a short Zipf load through the producer, waits until the
//! group has drained the stream, prints a few counters at several precisions
//! with a check of the totals, and stops everything it started.

use std::time::{Duration, Instant};

use anyhow::Context;

use crate::config::{LayoutArgs, RedisArgs, StreamArgs, WorkerArgs};
use crate::counters;
use crate::embedded::{RedisServer, ServerOptions};
use crate::keys::Keys;
use crate::producer::{Producer, ProducerOptions};
use crate::workload::{Distribution, Names};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Redis to use instead of a throwaway one (its keys `demo:*` are written).
    #[arg(long = "redis-url", env = "REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// Hit events to send.
    #[arg(long, default_value_t = 200_000)]
    hits: u64,
    /// Distinct names (Zipf 1.0 popularity).
    #[arg(long, default_value_t = 1000)]
    names: usize,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let server = match &args.redis_url {
        Some(_) => None,
        None => Some(
            RedisServer::start(ServerOptions::default())
                .context("starting a throwaway redis-server")?,
        ),
    };
    let url = args
        .redis_url
        .clone()
        .unwrap_or_else(|| server.as_ref().expect("started").url());
    println!("Redis: {}", crate::config::redact_url(&url));
    let redis = RedisArgs::from_url(&url);
    let stream = StreamArgs {
        stream: "demo:hits".into(),
        dead_stream: "demo:hits:dead".into(),
        ..StreamArgs::default()
    };
    let layout = LayoutArgs {
        prefix: "demo:".into(),
        ..LayoutArgs::default()
    };

    let (trigger, shutdown) = crate::shutdown::channel();
    let mut workers = Vec::new();
    for i in 1..=2 {
        let settings = crate::worker::Settings {
            redis: redis.clone(),
            layout: layout.clone(),
            stream: stream.clone(),
            worker: WorkerArgs {
                consumer: Some(format!("demo-worker-{i}")),
                ..WorkerArgs::default()
            },
        };
        let health = crate::http::Health::new(Duration::from_secs(60));
        workers.push(tokio::spawn(crate::worker::run(
            settings,
            health,
            shutdown.clone(),
        )));
    }
    println!(
        "2 workers started; sending {} hits over {} names (Zipf 1.0)...",
        args.hits, args.names
    );

    let producer = Producer::start(&redis, &stream, ProducerOptions::default())?;
    let names = Names::new(args.names, Distribution::Zipf(1.0));
    let started = Instant::now();
    let sent = super::load::send(&producer, args.hits, &names, None, true).await;
    producer.shutdown(Duration::from_secs(5)).await;

    let client = crate::connect::client(&redis)?;
    let mut conn = crate::connect::open(&client, crate::connect::RESPONSE_TIMEOUT).await?;
    let keys = Keys::new(&layout, &stream);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !crate::stream::drained(&mut conn, &keys).await? {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the workers did not drain the stream within 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    trigger.trigger();
    for w in workers {
        w.await??;
    }
    println!(
        "sent and counted {} hits in {:.2} s ({:.0} hits/s end to end)\n",
        sent.hits,
        elapsed.as_secs_f64(),
        sent.hits as f64 / elapsed.as_secs_f64()
    );

    for (rank, precision) in [(0usize, 1u32), (0, 60), (1, 300), (2, 86400)] {
        let name = Names::name(rank);
        let samples = counters::read(&mut conn, &keys, precision, &name).await?;
        let total: i64 = samples.iter().map(|s| s.count).sum();
        println!(
            "{name} at {precision} s precision: {} samples, {total} hits in all (sent {})",
            samples.len(),
            sent.per_name[rank]
        );
        for s in samples.iter().rev().take(3).rev() {
            println!("  {}  {:>8}", counters::format_utc(s.time), s.count);
        }
    }
    let mut counted = 0i64;
    for rank in 0..names.len() {
        let samples = counters::read(&mut conn, &keys, 86400, &Names::name(rank)).await?;
        counted += samples.iter().map(|s| s.count).sum::<i64>();
    }
    println!(
        "\ntotal at the 1-day precision: {counted} of {} sent: {}",
        sent.hits,
        if counted == sent.hits as i64 {
            "exact"
        } else {
            "MISMATCH"
        }
    );
    anyhow::ensure!(
        counted == sent.hits as i64,
        "counted {counted} hits, sent {}",
        sent.hits
    );
    println!("Read them from any client: HGETALL demo:count:60:page:0, ZRANGE demo:known: 0 -1");
    drop(server);
    Ok(())
}
