//! Delay and the producer's rate.
//!
//! **XADD-to-visible**: one worker runs under a steady load sent through the
//! producer library at a given rate. A probe XADDs a hit of a name of its
//! own, then polls (every 2 ms) until that name's day counter exists; the
//! delay is from just before the XADD to the poll that sees it. One probe at
//! a time, 20 ms apart.
//!
//! **Producer rate**: one process calls `Producer::hit` as fast as it can;
//! calls/s is the caller's side (never waits on Redis), delivered/s is until
//! `flush` returns (everything in the stream).

use std::time::{Duration, Instant};

use super::{percentile, workers, BenchError, Options};
use hitcount::edge::workload::Names;
use hitcount::edge::workload::Workload;
use hitcount::model::config::RedisArgs;
use hitcount::model::keys::Keys;
use hitcount::service::producer::{Producer, ProducerOptions};

/// The delay figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Delay {
    /// Steady load, hits/s.
    pub rate: f64,
    /// Probes measured.
    pub probes: usize,
    /// Median delay, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
}

/// Runs the steady load and the probe for `opts.latency_secs`.
pub async fn visible_delay(
    redis: &RedisArgs,
    rate: f64,
    opts: &Options,
) -> Result<Delay, BenchError> {
    let stream = "bench:latency:hits";
    let target = workers::Target::new(&opts.hitcount, redis, stream, 1, &opts.worker_args);
    let k = target.keys().clone();
    let client = hitcount::store::connect::client(redis)?;
    let mut conn = client.open(super::RESPONSE_TIMEOUT).await?;
    super::ensure_group(&mut conn, &k).await?;
    let children = target.spawn()?;
    let producer = Producer::start(redis, &stream_args(stream), ProducerOptions::default())?;
    let load = tokio::spawn({
        let producer = producer.clone();
        let secs = opts.latency_secs as f64 + 1.0;
        async move {
            let names: Vec<String> = (0..1000).map(Names::name).collect();
            let sampler = Workload::Hot.names();
            let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::from_os_rng();
            let start = Instant::now();
            let mut sent = 0u64;
            while start.elapsed().as_secs_f64() < secs {
                let due = (start.elapsed().as_secs_f64() * rate) as u64;
                for _ in sent..due {
                    producer.hit(&names[sampler.sample(&mut rng)]);
                }
                sent = sent.max(due);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    // Let the worker start and the load settle before probing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut delays = Vec::new();
    let until = Instant::now() + Duration::from_secs(opts.latency_secs);
    let mut n = 0u64;
    while Instant::now() < until {
        let name = format!("probe:{n}");
        n += 1;
        let counter = k.count(86400, &name);
        let t0 = Instant::now();
        let _: String = redis::cmd("XADD")
            .arg(stream)
            .arg("*")
            .arg("hit")
            .arg(hitcount::model::event::encode(&name, 1, None))
            .query_async(&mut conn)
            .await?;
        loop {
            let exists: bool = redis::cmd("EXISTS")
                .arg(&counter)
                .query_async(&mut conn)
                .await?;
            if exists {
                break;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                return Err(BenchError::Check(format!(
                    "probe {name} not counted in 30 s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        delays.push(t0.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = load.await;
    producer.shutdown(Duration::from_secs(5)).await;
    workers::stop(children).await;
    delays.sort_by(f64::total_cmp);
    Ok(Delay {
        rate,
        probes: delays.len(),
        p50_ms: percentile(&delays, 50.0),
        p99_ms: percentile(&delays, 99.0),
        max_ms: delays.last().copied().unwrap_or(f64::NAN),
    })
}

/// The producer's rates.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProducerRate {
    /// Hits sent.
    pub hits: u64,
    /// `hit()` calls per second on the caller's side.
    pub calls_per_sec: f64,
    /// Hits per second until all were in the stream.
    pub delivered_per_sec: f64,
    /// Hits dropped (must be 0).
    pub dropped: u64,
    /// Entries found in the stream afterwards.
    pub in_stream: u64,
}

/// Sends `hits` hits over 1,000 names from this process as fast as `hit()`
/// can be called.
pub async fn producer_rate(redis: &RedisArgs, hits: u64) -> Result<ProducerRate, BenchError> {
    let stream = "bench:producer:hits";
    let opts = ProducerOptions {
        max_buffered: hits + 1,
        ..ProducerOptions::default()
    };
    let producer = Producer::start(redis, &stream_args(stream), opts)?;
    let names: Vec<String> = (0..1000).map(Names::name).collect();
    let started = Instant::now();
    for i in 0..hits as usize {
        producer.hit(&names[i % names.len()]);
    }
    let calls = started.elapsed().as_secs_f64();
    producer.flush().await;
    let delivered = started.elapsed().as_secs_f64();
    let dropped = producer
        .stats()
        .dropped
        .load(std::sync::atomic::Ordering::Relaxed);
    producer.shutdown(Duration::from_secs(5)).await;
    let client = hitcount::store::connect::client(redis)?;
    let mut conn = client.open(super::RESPONSE_TIMEOUT).await?;
    let in_stream: u64 = redis::cmd("XLEN")
        .arg(stream)
        .query_async(&mut conn)
        .await?;
    Ok(ProducerRate {
        hits,
        calls_per_sec: hits as f64 / calls.max(1e-9),
        delivered_per_sec: hits as f64 / delivered.max(1e-9),
        dropped,
        in_stream,
    })
}

fn stream_args(stream: &str) -> hitcount::model::config::StreamArgs {
    let k = Keys::named(stream, "unused", "");
    hitcount::model::config::StreamArgs {
        stream: k.stream,
        dead_stream: k.dead,
        ..Default::default()
    }
}
