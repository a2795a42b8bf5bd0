//! `hitcount status`: the stream, its groups and consumers, the leader, the
//! known counters and the last cleaner pass, for a human or (`--json`) for
//! scripts.

use super::Common;
use crate::config::LeaderArgs;
use crate::keys::Keys;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    leader: LeaderArgs,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = crate::connect::client(&args.common.redis)?;
    let mut conn = crate::connect::open(&client, crate::connect::RESPONSE_TIMEOUT).await?;
    let keys = Keys::new(&args.common.layout, &args.common.stream);
    let status =
        crate::status::gather(&mut conn, &keys, &keys.leader(&args.leader.leader_key)).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!(
            "{}",
            crate::status::render(&status, crate::worker::unix_ms())
        );
    }
    Ok(())
}
