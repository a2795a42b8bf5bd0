//! `hitcount worker`: one consumer of the group, with its HTTP endpoints and
//! the group sampler.

use std::time::Duration;

use anyhow::Context;

use super::Common;
use crate::config::WorkerArgs;
use crate::keys::Keys;
use crate::metrics::metrics;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    worker: WorkerArgs,
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
    let worker = crate::worker::Worker::new(settings, health, shutdown.clone())?;
    metrics().init_precisions(args.common.layout.precisions.iter().map(|&p| u64::from(p)));
    let sampler = tokio::spawn(crate::sampler::run(
        crate::connect::client(&args.common.redis)?,
        Keys::new(&args.common.layout, &args.common.stream),
        shutdown,
    ));
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
    let _ = http.await;
    Ok(())
}
