//! `hitcount worker`: one consumer of the group, with its HTTP endpoints.

use std::time::Duration;

use anyhow::Context;

use super::Common;
use crate::config::WorkerArgs;

/// A worker is unhealthy when its loop has not turned for this long (a
/// turn waits at most BLOCK plus a reply timeout).
const STUCK_AFTER: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    worker: WorkerArgs,
    /// Address of the HTTP server: /metrics, /healthz, /readyz.
    #[arg(long, env = "HITCOUNT_LISTEN", default_value = "0.0.0.0:9184")]
    listen: String,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let settings = super::worker_settings(&args.common, &args.worker);
    let (trigger, shutdown) = crate::shutdown::channel();
    let health = crate::http::Health::new(STUCK_AFTER);
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {} (HITCOUNT_LISTEN)", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    let mut http_stop = shutdown.clone();
    let http = tokio::spawn(crate::http::serve(listener, health.clone(), async move {
        http_stop.wait().await
    }));
    let worker = crate::worker::Worker::new(settings, health, shutdown)?;
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
    let _ = http.await;
    Ok(())
}
