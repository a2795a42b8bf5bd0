//! `hitcount serve`: the read-only JSON query API and the dashboard page
//! ([`crate::edge::api`]) until SIGTERM/Ctrl-C. Reads Redis with the
//! settings every command shares; never writes.

use anyhow::Context as _;

use crate::edge::api::{self, Api};
use crate::model::config::{LayoutArgs, RedisArgs, StreamArgs};
use crate::model::keys::Keys;

/// Default address of the query API.
pub const DEFAULT_SERVE_LISTEN: &str = "0.0.0.0:9185";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// HTTP address of the dashboard (/) and the query API (/api/v1/...).
    #[arg(long, env = "HITCOUNT_SERVE_LISTEN", default_value = DEFAULT_SERVE_LISTEN)]
    listen: String,
    #[command(flatten)]
    pub(super) redis: RedisArgs,
    #[command(flatten)]
    layout: LayoutArgs,
}

pub async fn run(mut args: Args) -> anyhow::Result<()> {
    args.layout.validate()?;
    let client = crate::store::connect::client(&args.redis)?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {} (HITCOUNT_SERVE_LISTEN)", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, "serving the dashboard on / and the query API on /api/v1/");
    let keys = Keys::new(&args.layout, &StreamArgs::default());
    let api = Api::new(client, keys, args.layout.precisions.clone()).keeping(args.layout.samples);
    api::serve(
        listener,
        api,
        crate::model::shutdown::signals(),
        crate::edge::server::Limits::default(),
    )
    .await?;
    Ok(())
}
