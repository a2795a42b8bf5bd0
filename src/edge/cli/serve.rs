//! `hitcount serve`: the read-only JSON query API and the dashboard page
//! ([`crate::edge::api`]) until SIGTERM/Ctrl-C. Reads Redis with the
//! settings every command shares; never writes.

use crate::edge::api::{self, Api};
use crate::model::config::{LayoutArgs, RedisArgs};

/// Default address of the query API.
pub(crate) const DEFAULT_SERVE_LISTEN: &str = "0.0.0.0:9185";

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// HTTP address of the dashboard (/) and the query API (/api/v1/...).
    #[arg(long, env = "HITCOUNT_SERVE_LISTEN", default_value = DEFAULT_SERVE_LISTEN)]
    listen: String,
    #[command(flatten)]
    pub(super) redis: RedisArgs,
    #[command(flatten)]
    layout: LayoutArgs,
}

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    // A refused permission names this command's own Redis user.
    super::reach::acl_for("serve");
    args.layout.validate()?;
    let client = crate::store::connect::client(&args.redis)?;
    let listener = super::listen(&args.listen, "--listen / HITCOUNT_SERVE_LISTEN").await?;
    let api = Api::new(client.clone(), &args.layout);
    // Redis as this user, once, before serving (a permission the ACL
    // lacks: INFO, a key pattern).
    super::serving_anyway(api.check().await)?;
    tracing::info!(address = %listener.local_addr()?, "serving the dashboard on / and the query API on /api/v1/");
    let (watch_stop, watch_shutdown) = crate::model::shutdown::channel();
    let watch = tokio::spawn(crate::service::memory_watch::run(client, watch_shutdown));
    let served = api::serve(listener, api, crate::model::shutdown::signals()).await;
    watch_stop.trigger();
    let _ = watch.await;
    Ok(served?)
}
