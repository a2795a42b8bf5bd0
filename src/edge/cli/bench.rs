//! `hitcount bench`: how fast this Redis counts (see [`crate::edge::bench`])
//! and the table, or `--json`.
//!
//! The flags of the project's own measurements (clusters, rounds, the serve
//! load, the seeds' way, latency, a long backlog) moved to the lab; they
//! are still accepted, unshown, and refused with one line naming the lab's
//! command (exit 2), never ignored.

use crate::edge::bench::Options;
use crate::edge::throwaway::ThrowawayRedis;
use crate::model::config::RedisArgs;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Redis to measure (its `bench:*` keys are written, then deleted).
    /// Default: a throwaway redis-server.
    #[arg(long = "redis-url", env = "REDIS_URL", hide_env_values = true)]
    pub(super) redis_url: Option<String>,
    #[command(flatten)]
    opts: Options,
    /// Print the figures as JSON instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    moved: Moved,
}

/// The flags that moved to the lab (`hitcount-lab bench`), with the ranges
/// they had, so that a value out of range is still refused by name.
#[derive(clap::Args, Debug)]
struct Moved {
    #[arg(long, hide = true, value_parser = super::parse_at_least_one)]
    seeds_sample: Option<u64>,
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..=3600))]
    latency_secs: Option<u64>,
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    rss_backlog: Option<u64>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "3", value_parser = clap::value_parser!(u16).range(1..=64))]
    cluster: Option<u16>,
    #[arg(long, hide = true, value_parser = clap::value_parser!(u16).range(0..=4))]
    cluster_replicas: Option<u16>,
    #[arg(long, hide = true, value_parser = clap::value_parser!(u32).range(1..=256))]
    shards: Option<u32>,
    #[arg(long, hide = true)]
    balance_shards: bool,
    #[arg(long, hide = true)]
    warm: bool,
    #[arg(long, hide = true, value_parser = clap::value_parser!(u16).range(1..=9))]
    rounds: Option<u16>,
    #[arg(long, hide = true)]
    serve: bool,
    #[arg(long, hide = true)]
    serve_counters: Option<u64>,
    #[arg(long, hide = true)]
    serve_pages: Option<u64>,
    #[arg(long, hide = true)]
    serve_refresh_secs: Option<u64>,
    #[arg(long, hide = true)]
    serve_secs: Option<u64>,
}

/// The line refusing the first flag given (in `matches` of `bench`) that
/// moved to the lab, if any.
pub(super) fn moved(matches: &clap::ArgMatches) -> Option<String> {
    let moved = <Moved as clap::Args>::augment_args(clap::Command::new("moved"));
    let flag = moved.get_arguments().find(|a| {
        matches.value_source(a.get_id().as_str()) == Some(clap::parser::ValueSource::CommandLine)
    })?;
    let flag = format!("--{}", flag.get_long()?);
    Some(format!(
        "`hitcount bench {flag}` moved to the project's lab: in a clone of hitcount, run `cargo build --release --workspace && target/release/hitcount-lab bench {flag} …`"
    ))
}

/// The nice value of the throwaway Redis, so that its command thread goes
/// ahead of the workers on a machine whose cores they share.
const REDIS_NICE: i32 = -10;

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    let (server, url) = ThrowawayRedis::unless_given(args.redis_url.as_ref())?;
    args.opts.redis = RedisArgs::from_url(&url);
    // A cluster was measured here once; the lab measures it now, and the
    // refusal says so.
    if server.is_none() && super::connect(&args.opts.redis).await?.is_cluster() {
        anyhow::bail!(
            "hitcount bench measures one Redis, and REDIS_URL names a cluster: the \
             project's lab measures clusters: in a clone of hitcount, `cargo build \
             --release --workspace && target/release/hitcount-lab bench` with this \
             REDIS_URL"
        );
    }
    let nice = server
        .as_ref()
        .and_then(|s| renice(s.pid(), REDIS_NICE).then_some(REDIS_NICE));
    // SIGTERM or Ctrl-C ends the run: leaving the select drops the run,
    // whose worker processes are killed when dropped, and the throwaway
    // Redis goes with `server`; a signal's default action would leave
    // both running.
    let mut report = tokio::select! {
        report = crate::edge::bench::run(&args.opts) => report?,
        () = crate::model::shutdown::signals() => {
            let left = match server {
                // Dropped as the arm ends: the throwaway Redis stops.
                Some(_server) => " and its throwaway Redis",
                None => "; the next bench deletes the bench:* keys it left",
            };
            anyhow::bail!("interrupted: stopped the bench's workers{left}");
        }
    };
    report.redis_nice = nice;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        super::out(&report.table())?;
    }
    drop(server);
    Ok(())
}

/// Sets the nice value of process `pid` with renice(1) (allowed to root
/// only for a negative value); whether it took.
fn renice(pid: u32, nice: i32) -> bool {
    std::process::Command::new("renice")
        .args(["-n", &nice.to_string(), "-p", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
