//! `hitcount worker`: one consumer of the group, with its HTTP endpoints and
//! the group sampler, and a candidate for the leadership: while it holds the
//! lease it also cleans counters and trims the stream.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::Common;
use crate::config::{LeaderArgs, WorkerArgs};
use crate::keys::Keys;
use crate::metrics::metrics;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    leader: LeaderArgs,
    /// Address of the HTTP server: /metrics, /healthz, /readyz.
    #[arg(long, env = "HITCOUNT_LISTEN", default_value = "0.0.0.0:9184")]
    listen: String,
    /// Seconds without a turn of the worker loop after which /healthz fails
    /// (the loop turns at least every --block-ms plus a 10 s reply timeout,
    /// also while Redis is down).
    #[arg(
        long = "stuck-after",
        env = "HITCOUNT_STUCK_AFTER",
        default_value_t = 60
    )]
    stuck_after_secs: u64,
}

impl Args {
    /// The liveness bound, checked against the longest a turn may take.
    fn stuck_after(&self) -> anyhow::Result<Duration> {
        let bound = Duration::from_secs(self.stuck_after_secs);
        let longest_turn =
            Duration::from_millis(self.worker.block_ms) + crate::connect::RESPONSE_TIMEOUT;
        anyhow::ensure!(
            bound > longest_turn,
            "invalid --stuck-after / HITCOUNT_STUCK_AFTER: {}s must exceed the longest turn \
             of the loop ({}s: --block-ms plus the reply timeout)",
            self.stuck_after_secs,
            longest_turn.as_secs_f64()
        );
        Ok(bound)
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let stuck_after = args.stuck_after()?;
    let settings = super::worker_settings(&args.common, &args.worker);
    args.leader.validate()?;
    let (trigger, shutdown) = crate::shutdown::channel();
    let health = crate::http::Health::new(stuck_after);
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {} (HITCOUNT_LISTEN)", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    let mut http_stop = shutdown.clone();
    let http = tokio::spawn(crate::http::serve(listener, health.clone(), async move {
        http_stop.wait().await
    }));
    let worker = crate::worker::Worker::new(settings.clone(), health, shutdown.clone())?;
    metrics().init_precisions(args.common.layout.precisions.iter().map(|&p| u64::from(p)));
    let sampler = tokio::spawn(crate::sampler::run(
        crate::connect::client(&args.common.redis)?,
        Keys::new(&args.common.layout, &args.common.stream),
        shutdown.clone(),
    ));
    let leader = spawn_leader(&settings, &args.leader, worker.consumer(), &shutdown)?;
    let signals = tokio::spawn({
        let trigger = trigger.clone();
        async move {
            crate::shutdown::signals().await;
            tracing::info!("shutdown requested: finishing the window in flight");
            trigger.trigger();
        }
    });
    worker.run().await;
    trigger.trigger();
    signals.abort();
    let _ = sampler.await;
    for task in leader {
        let _ = task.await;
    }
    let _ = http.await;
    Ok(())
}

/// Starts the lease keeper and the leader's duties; both stop on `shutdown`
/// (the keeper releasing the lease).
fn spawn_leader(
    settings: &crate::worker::Settings,
    leader: &LeaderArgs,
    consumer: &str,
    shutdown: &crate::shutdown::Shutdown,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let client = crate::connect::client(&settings.redis)?;
    let keys = crate::keys::Keys::new(&settings.layout, &settings.stream);
    let lease = Arc::new(crate::leader::Lease::new(&keys, leader, consumer));
    let cleaner = crate::cleaner::Cleaner::new(keys.clone(), &settings.layout, lease.clone());
    Ok(vec![
        tokio::spawn(lease.clone().keep(client.clone(), shutdown.clone())),
        tokio::spawn(crate::duties::run(
            client,
            keys,
            cleaner,
            leader.clone(),
            lease,
            shutdown.clone(),
        )),
    ])
}
