//! `hitcount bench`: how fast can *this* Redis count? It measures and does
//! not judge.
//!
//! For each workload the stream is prefilled once with synthetic hits and
//! read twice, each time through a consumer group of its own (all created
//! up front, so nothing can be trimmed before a run has read it): by bare
//! consumers that only read and acknowledge ([`ceiling`], the fastest any
//! worker could drain this Redis from this machine), then by the real
//! worker as child processes ([`workers`], whose counters are checked
//! against the hits sent). [`report`] holds the figures and their table.
//! Every key it writes starts with `bench:` and is deleted afterwards.
//!
//! The project's own measurements (goals, verdicts, clusters, the serve
//! load) are the lab's (`hitcount-lab bench`), which runs this command
//! with `--json` for these figures.

pub(crate) mod ceiling;
pub(crate) mod report;
pub(crate) mod workers;

use std::collections::HashMap;

use crate::edge::workload::{synthetic_value, Names, Workload};
use crate::model::config::RedisArgs;
use crate::model::keys::Keys;
use crate::store::connect::{Client, Conn};
use crate::store::scan::delete_matching;
use crate::store::stream::ensure_group;

pub(crate) use report::Report;

/// Entries per prefill pipeline.
const PREFILL_BATCH: usize = 1000;

/// What to run: the flags of `hitcount bench` (their doc comments are its
/// `--help`), and the Redis it measures.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Options {
    /// The Redis to measure (its `bench:*` keys are written and deleted).
    #[arg(skip)]
    pub redis: RedisArgs,
    /// Entries prefilled per workload, at least 1.
    #[arg(long, default_value_t = 100_000, value_parser = crate::edge::cli::parse_at_least_one)]
    pub entries: u64,
    /// Worker counts, comma separated, each 1 to 64; the ceiling runs as
    /// many consumers.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub workers: Vec<usize>,
    /// Workloads, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "hot,zipf,uniform"
    )]
    pub workload: Vec<Workload>,
    /// Extra flag for every worker, repeatable: `--worker-arg=--window-ms=200`.
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    pub worker_args: Vec<String>,
    /// Give every hit of every workload a synthetic response time (what
    /// statistics cost on each); without it, only one extra run of 1,000
    /// hot names with one worker has values.
    #[arg(long)]
    pub values: bool,
}

/// Runs every workload and worker count, then (unless every hit has one)
/// the one-worker hot run with a value on every hit (the cost of
/// statistics), and returns the figures.
pub(crate) async fn run(opts: &Options) -> anyhow::Result<Report> {
    let client = crate::store::connect::client(&opts.redis)?;
    let mut conn = client.open(crate::store::connect::RESPONSE_TIMEOUT).await?;
    delete_matching(&mut conn, "bench:*").await?;
    let report = measure(opts, &client, &mut conn).await;
    // Deleted whatever the outcome: a failed run left hundreds of keys in
    // the Redis it measured.
    if report.is_err() {
        let _ = delete_matching(&mut conn, "bench:*").await;
    }
    report
}

/// [`run`]'s measurements, on a Redis cleared of `bench:*` keys.
async fn measure(opts: &Options, client: &Client, conn: &mut Conn) -> anyhow::Result<Report> {
    let mut report = Report {
        entries: opts.entries,
        worker_args: opts.worker_args.clone(),
        all_valued: opts.values,
        ..Report::default()
    };
    for &workload in &opts.workload {
        let stream = format!("bench:{workload:?}:hits").to_lowercase();
        let sent = prefill(conn, &stream, workload, opts.entries, opts.values).await?;
        for &w in &opts.workers {
            for group in [ceiling::group(w), workers::group(w)] {
                ensure_group(conn, &Keys::named(&stream, &group, ""), None).await?;
            }
        }
        for &w in &opts.workers {
            let ceiling = ceiling::run(client, &stream, w, opts.entries).await?;
            let hitcount = workers::run(conn, opts, &stream, w, &sent).await?;
            report.runs.push(report::Run {
                workload,
                workers: w,
                ceiling,
                hitcount,
            });
        }
        delete_matching(conn, "bench:*").await?;
    }
    if !opts.values && opts.workload.contains(&Workload::Hot) && opts.workers.contains(&1) {
        let stream = "bench:values:hits";
        let sent = prefill(conn, stream, Workload::Hot, opts.entries, true).await?;
        ensure_group(conn, &Keys::named(stream, &workers::group(1), ""), None).await?;
        report.values = Some(workers::run(conn, opts, stream, 1, &sent).await?);
        delete_matching(conn, "bench:*").await?;
    }
    Ok(report)
}

/// The hits of a prefilled stream: per name rank, and in all.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    /// The workload.
    pub workload: Workload,
    /// Hits per name rank.
    pub per_name: Vec<u64>,
    /// Hits in all.
    pub hits: u64,
}

/// Appends `n` hits (MessagePack form, no timestamp: the entry's own time;
/// with a [`synthetic_value`] each if `values`) in pipelines of XADDs.
async fn prefill(
    conn: &mut Conn,
    stream: &str,
    workload: Workload,
    n: u64,
    values: bool,
) -> anyhow::Result<Sent> {
    let names = workload.names();
    let mut per_name = vec![0u64; names.len()];
    let mut rng = rand::rng();
    let mut left = n;
    while left > 0 {
        let batch = left.min(PREFILL_BATCH as u64);
        let mut pipe = redis::pipe();
        for _ in 0..batch {
            let rank = names.sample(&mut rng);
            per_name[rank] += 1;
            let value = values.then(|| synthetic_value(&mut rng, rank));
            let hit = crate::model::event::encode_value(&Names::name(rank), 1, None, value);
            pipe.xadd(stream, "*", &[("hit", hit)]).ignore();
        }
        pipe.query_async::<()>(conn).await?;
        left -= batch;
    }
    Ok(Sent {
        workload,
        per_name,
        hits: n,
    })
}

/// Calls and microseconds per command (lower case, e.g. `hincrby`) since
/// the last `CONFIG RESETSTAT`, scripts' own commands included (a script's
/// time holds theirs), the RESETSTAT itself left out.
pub(crate) async fn command_stats(conn: &mut Conn) -> anyhow::Result<HashMap<String, (u64, u64)>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(parse_commandstats(&info))
}

/// The `calls` and `usec` of each `cmdstat_NAME:` line of `INFO commandstats`.
fn parse_commandstats(info: &str) -> HashMap<String, (u64, u64)> {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
            };
            Some((name.to_string(), (field("calls")?, field("usec")?)))
        })
        .filter(|(name, _)| name != "config|resetstat")
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn commandstats_give_calls_and_time_per_command() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=10,usec=300,usec_per_call=30.00,rejected_calls=0\r\n\
            cmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00\r\n\
            cmdstat_hincrby:calls=40,usec=20,usec_per_call=0.50\r\n";
        let got = super::parse_commandstats(info);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got["evalsha"], (10, 300));
        assert_eq!(got["hincrby"], (40, 20));
    }
}
