//! `hitcount worker`: one consumer of the group, with its HTTP endpoints and
//! the group sampler, and a candidate for the leadership: while it holds the
//! lease it also cleans counters and trims the stream.

use std::sync::Arc;
use std::time::Duration;

use super::Common;
use crate::edge::http::Limits;
use crate::model::config::{LeaderArgs, WorkerArgs, ADVANCED};
use crate::model::metrics::metrics;
use crate::service::cleaner::Cleaner;
use crate::service::leader::Lease;

/// Default address of the worker's HTTP server (`--listen`): every
/// interface, so Prometheus and the kubelet's probes reach it; the
/// manifests in deploy/ name this port `metrics`.
pub(crate) const DEFAULT_LISTEN: &str = "0.0.0.0:9184";
/// Default seconds without a turn of the loop before /healthz fails
/// (`--stuck-after`): a turn takes at most `--block-ms` (2 s) plus the 10 s
/// reply timeout, so 60 s is five such turns missed.
pub(crate) const DEFAULT_STUCK_AFTER_SECS: u64 = 60;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    leader: LeaderArgs,
    /// Address of the HTTP server: /metrics, /healthz, /readyz.
    #[arg(long, env = "HITCOUNT_LISTEN", default_value = DEFAULT_LISTEN)]
    listen: String,
    /// Seconds without a turn of the worker loop after which /healthz fails
    /// (the loop turns at least every --block-ms plus a 10 s reply timeout,
    /// also while Redis is down), 1..=86400.
    #[arg(
        long = "stuck-after",
        env = "HITCOUNT_STUCK_AFTER",
        help_heading = ADVANCED,
        hide_short_help = true,
        default_value_t = DEFAULT_STUCK_AFTER_SECS,
        value_parser = crate::model::config::ranged::<u64>(1..=86_400)
    )]
    stuck_after_secs: u64,
}

impl Args {
    /// The liveness bound, checked against the longest a turn may take.
    fn stuck_after(&self) -> anyhow::Result<Duration> {
        let bound = Duration::from_secs(self.stuck_after_secs);
        let longest_turn =
            Duration::from_millis(self.worker.block_ms()) + crate::store::connect::RESPONSE_TIMEOUT;
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

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    // Every setting is checked before anything starts.
    let stuck_after = args.stuck_after()?;
    let mut settings = crate::service::worker::Settings {
        redis: args.common.redis.clone(),
        layout: args.common.layout.clone(),
        stream: args.common.stream.clone(),
        worker: args.worker.clone(),
    };
    settings.layout.validate()?;
    settings.stream.validate()?;
    settings.worker.validate()?;
    // One name for the process: its shards' consumers and its leader token.
    let consumer = settings.worker.consumer_name();
    settings.worker.consumer = Some(consumer.clone());
    args.leader.validate()?;
    for cut in [settings.worker.carry_cut(), settings.worker.block_cut()]
        .into_iter()
        .flatten()
    {
        tracing::warn!("{cut}");
    }
    let client = crate::store::connect::client(&args.common.redis)?;
    let (trigger, shutdown) = crate::model::shutdown::channel();
    let health = crate::service::health::Health::new(stuck_after);
    let listener = super::listen(&args.listen, "--listen / HITCOUNT_LISTEN").await?;
    tracing::info!(address = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    let (http_trigger, mut http_stop) = crate::model::shutdown::channel();
    let http_stopped = async move { http_stop.wait().await };
    let http = crate::edge::http::serve(listener, health.clone(), http_stopped, Limits::default());
    let http = tokio::spawn(http);
    metrics().init_precisions(args.common.layout.precisions.iter().map(|&p| u64::from(p)));
    let mut tasks = crate::service::supervisor::Supervised::default();
    let (layout, stream) = (args.common.layout.clone(), args.common.stream.clone());
    let sampler = crate::service::sampler::run(client.clone(), layout, stream, shutdown.clone());
    tasks.spawn("group sampler", sampler);
    let memory = crate::service::memory_watch::run(client.clone(), shutdown.clone());
    tasks.spawn("memory policy check", memory);
    // The lease keeper and the leader's duties, until `shutdown` (the
    // keeper then releases the lease: a draining worker neither holds nor
    // takes it).
    let keys = crate::model::keys::Keys::new(&settings.layout, &settings.stream);
    let lease = Arc::new(Lease::new(&keys, &args.leader, &consumer));
    let cleaner = Cleaner::new(keys.clone(), &settings.layout, lease.clone())
        .every(args.leader.clean_interval());
    let keeper = lease.clone().keep_until(client.clone(), shutdown.clone());
    // Not before the worker's settings agree with its deployment's: a
    // worker refused at start never leads (it would clean with its own).
    let (agreed, mut stop) = (health.clone(), shutdown.clone());
    tasks.spawn("leader lease", async move {
        tokio::select! {
            () = agreed.agreed() => keeper.await,
            _ = stop.wait() => {}
        }
    });
    tasks.spawn(
        "leader duties",
        crate::service::duties::run(
            client.clone(),
            settings.layout.clone(),
            settings.stream.clone(),
            cleaner,
            args.leader.clone(),
            lease,
            shutdown.clone(),
        ),
    );
    let deadline = settings.worker.shutdown_timeout() + OVERRUN;
    let signals = tokio::spawn({
        let trigger = trigger.clone();
        let health = health.clone();
        async move {
            crate::model::shutdown::signals().await;
            health.set_stopping();
            tracing::info!("shutdown requested: finishing the window in flight");
            trigger.trigger();
            // A Redis that stalls (a reply that never comes, a CLIENT PAUSE)
            // must not hold the process past its grace period: exiting is
            // what a crash is, which every hit survives.
            tokio::time::sleep(deadline).await;
            tracing::error!(
                "still stopping {} s after the signal (--shutdown-timeout plus {} s): exiting \
                 now; this worker's pending entries go to other workers after --claim-idle-ms",
                deadline.as_secs(),
                OVERRUN.as_secs()
            );
            std::process::exit(1);
        }
    });
    let worker = crate::service::shards::run(settings.clone(), health.clone(), shutdown.clone());
    let worker_task = tokio::spawn(worker);
    // A background task that ends before shutdown (a panic, say) must not
    // leave the process half alive: it stops everything with its cause.
    let watch = tokio::spawn(tasks.watch(shutdown.clone()));
    match worker_task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => shutdown.fail(e.to_string()),
        Err(e) => shutdown.fail(format!("the worker loop failed: {e}")),
    }
    health.set_stopping();
    trigger.trigger();
    signals.abort();
    if let Ok(tasks) = watch.await {
        tasks.join().await;
    }
    http_trigger.trigger();
    let _ = http.await;
    match trigger.fatal() {
        Some(cause) => Err(anyhow::anyhow!(cause)),
        None => Ok(()),
    }
}

/// How long past `--shutdown-timeout` a stopping worker may take (to leave
/// the group, release its name and lease) before it exits anyway.
const OVERRUN: Duration = Duration::from_secs(2);
