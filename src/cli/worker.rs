//! `hitcount worker`: one consumer of the group, with its HTTP endpoints,
//! and a candidate for the leadership: while it holds the lease it also
//! cleans counters and trims the stream.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::Common;
use crate::config::{LeaderArgs, WorkerArgs};

/// A worker is unhealthy when its loop has not turned for this long (a
/// turn waits at most BLOCK plus a reply timeout).
const STUCK_AFTER: Duration = Duration::from_secs(60);

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
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let settings = super::worker_settings(&args.common, &args.worker);
    args.leader.validate()?;
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
    let worker = crate::worker::Worker::new(settings.clone(), health, shutdown.clone())?;
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
