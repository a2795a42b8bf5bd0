//! `hitcount demo`: the main job end to end on a throwaway Redis.
//!
//! With no REDIS_URL it starts `redis-server` on a free local port, runs two
//! workers, sends a short Zipf load through the producer, waits until the
//! group has drained the stream, prints a few counters at several precisions
//! with a check of the totals, and stops everything it started. On a given
//! Redis it first deletes what an earlier demo left there (its `demo:` keys),
//! so that the totals it checks are its own.
//!
//! Beside the Rust producer it sends page views over HTTP, through
//! `hitcount ingest`'s HTTP side run in-process (the same request twice,
//! with ids: counted once), and checks them too.
//!
//! It ends by serving the dashboard of its counters (`hitcount serve`'s
//! page and API, in-process) and printing its address: until Ctrl-C when
//! stdout is a terminal (or with `--keep-serving`), with the workers and
//! ingest still running, so that a page view sent with the `curl` it
//! prints shows on the dashboard; else it stops there.
//! The commands it suggests for reading the counters carry the demo's key
//! prefix and Redis URL, and are printed only while they can work: not
//! when the demo is about to stop its throwaway Redis.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::task::JoinHandle;

use crate::edge::api::{self, Api};
use crate::edge::ingest::{self, Ingest};
use crate::edge::server::Limits;
use crate::edge::throwaway::ThrowawayRedis;
use crate::edge::workload::{Distribution, Names};
use crate::model::config::{LayoutArgs, RedisArgs, StreamArgs, WorkerArgs};
use crate::model::keys::Keys;
use crate::model::shutdown::Trigger;
use crate::service::ingest::Appender;
use crate::service::producer::{Producer, ProducerOptions};
use crate::store::connect::Conn;
use crate::store::counters;

/// Where the demo serves its dashboard; any free port when it is taken.
pub(crate) const DEFAULT_DASHBOARD: &str = "127.0.0.1:9185";

/// Most names `demo` counts: its check reads each name's counter.
const MAX_NAMES: u64 = 100_000;

/// The keys of the demo: its stream, dead-letter stream, counters, `known:`
/// and bookkeeping (prefix `demo:`), and the producers' batch numbers, which
/// live next to the stream (`{demo:hits}:hc:producer:*`).
const KEY_PATTERNS: [&str; 2] = ["demo:*", "{demo:hits}:*"];

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Redis to use instead of a throwaway one. Its keys `demo:*` (and the
    /// demo stream's bookkeeping `{demo:hits}:*`) are deleted first, then
    /// written.
    #[arg(long = "redis-url", env = "REDIS_URL", hide_env_values = true)]
    pub(super) redis_url: Option<String>,
    /// Hit events to send (1 to 1,000,000,000).
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    hits: u64,
    /// Distinct names (Zipf 1.0 popularity), 1 to 100,000 (the check at the
    /// end reads every one).
    #[arg(long, default_value_t = 1000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_NAMES))]
    names: usize,
    /// Address of the dashboard served at the end (with the default, any
    /// free port when 9185 is taken).
    #[arg(long, default_value = DEFAULT_DASHBOARD)]
    dashboard: String,
    /// Keep serving the dashboard until Ctrl-C even when stdout is not a
    /// terminal (on a terminal it always does).
    #[arg(long)]
    keep_serving: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    // Taken first: a bad --dashboard fails before the demo runs.
    let listener = listen(&args.dashboard).await?;
    let (server, url) = ThrowawayRedis::unless_given(args.redis_url.as_ref())?;
    outln!("Redis: {}", crate::model::config::redact_url(&url));
    let redis = RedisArgs::from_url(&url);
    let stream = StreamArgs {
        stream: "demo:hits".into(),
        dead_stream: "demo:hits:dead".into(),
        ..StreamArgs::default()
    };
    let mut conn = super::connect(&redis).await?;
    let mut cleared = 0;
    for pattern in KEY_PATTERNS {
        cleared += crate::store::scan::delete_matching(&mut conn, pattern).await?;
    }
    if cleared > 0 {
        outln!(
            "deleted {} left by an earlier demo",
            super::plural(cleared, "demo: key", "demo: keys")
        );
    }
    // Fail at once on a wrong password or missing permission: the workers
    // and the producer would retry them forever. (After the clearing: the
    // check leaves a short-lived probe key of its own.)
    super::check_stream(&redis, &stream.stream).await?;
    let layout = LayoutArgs {
        prefix: "demo:".into(),
        ..LayoutArgs::default()
    };

    let (trigger, shutdown) = crate::model::shutdown::channel();
    let mut workers = Vec::new();
    for i in 1..=2 {
        let settings = crate::service::worker::Settings {
            redis: redis.clone(),
            layout: layout.clone(),
            stream: stream.clone(),
            worker: WorkerArgs {
                consumer: Some(format!("demo-worker-{i}")),
                ..WorkerArgs::default()
            },
        };
        let health = crate::service::health::Health::new(Duration::from_secs(60));
        let worker = crate::service::shards::run(settings, health, shutdown.clone());
        workers.push(tokio::spawn(worker));
    }
    let (ingest_stop, ingest_task, ingest_addr) = start_ingest(&redis, &stream).await?;
    outln!(
        "2 workers started; sending {} hits over {} names (Zipf 1.0)...",
        args.hits,
        args.names
    );

    let producer = Producer::start(&redis, &stream, ProducerOptions::default())?;
    let names = Names::new(args.names, Distribution::Zipf(1.0));
    let started = Instant::now();
    // Every hit carries a synthetic response time, so the statistics fill too.
    let never = crate::model::shutdown::Shutdown::never();
    let sent = super::load::send(&producer, args.hits, &names, None, true, &never).await;
    producer.shutdown(Duration::from_secs(5)).await;
    // The way in for servers and browsers: page views over HTTP, the same
    // request sent twice, as a client that lost the reply would.
    let views: Vec<String> = (0..HTTP_VIEWS)
        .map(|i| format!(r#"{{"name":"{HTTP_NAME}","id":"demo-{i}"}}"#))
        .collect();
    let body = format!("[{}]", views.join(","));
    for _ in 0..2 {
        let answer = post_hits(ingest_addr, &body).await?;
        anyhow::ensure!(
            answer.starts_with("HTTP/1.1 202"),
            "hitcount ingest answered {answer}"
        );
    }

    let keys = Keys::new(&layout, &stream);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !crate::store::group::drained(&mut conn, &keys).await? {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the workers did not drain the stream within 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    outln!(
        "sent and counted {} hits in {:.2} s ({:.0} hits/s end to end)\n",
        sent.hits,
        elapsed.as_secs_f64(),
        sent.hits as f64 / elapsed.as_secs_f64()
    );

    for (rank, precision) in SHOWN {
        // With fewer names than the sample ranks, the least popular there is.
        let rank = rank.min(names.len() - 1);
        let name = Names::name(rank);
        let samples = counters::read(&mut conn, &keys, precision, &name).await?;
        let total: i64 = samples.iter().map(|s| s.count).sum();
        outln!(
            "{name} at {precision} s precision: {}, {} in all (sent {})",
            super::plural(samples.len() as u64, "sample", "samples"),
            super::plural(total.max(0) as u64, "hit", "hits"),
            sent.per_name[rank]
        );
        for s in samples.iter().rev().take(3).rev() {
            outln!("  {}  {:>8}", counters::format_utc(s.time), s.count);
        }
    }
    let verdict = |exact: bool| if exact { "exact" } else { "MISMATCH" };
    let mut counted = 0i64;
    for rank in 0..names.len() {
        let samples = counters::read(&mut conn, &keys, 86400, &Names::name(rank)).await?;
        counted += samples.iter().map(|s| s.count).sum::<i64>();
    }
    outln!(
        "\ntotal at the 1-day precision: {counted} of {} sent: {}",
        sent.hits,
        verdict(counted == sent.hits as i64)
    );
    anyhow::ensure!(
        counted == sent.hits as i64,
        "counted {counted} hits, sent {}",
        sent.hits
    );
    let samples = counters::read(&mut conn, &keys, 86400, HTTP_NAME).await?;
    let over_http: i64 = samples.iter().map(|s| s.count).sum();
    outln!(
        "{HTTP_NAME}: {HTTP_VIEWS} page views sent twice over HTTP (hitcount ingest, \
         POST /api/v1/hits, the same ids), {over_http} counted: {}",
        verdict(over_http == HTTP_VIEWS as i64)
    );
    anyhow::ensure!(
        over_http == HTTP_VIEWS as i64,
        "counted {over_http} page views over HTTP"
    );
    statistics(&mut conn, &keys).await?;
    let keep = args.keep_serving || std::io::stdout().is_terminal();
    // Commands that work as printed, and only while they can: the
    // throwaway Redis goes with the demo.
    if keep || server.is_none() {
        super::out(&read_them(&url, server.is_some(), conn.is_cluster()))?;
    } else {
        outln!(
            "\nThe throwaway Redis stops with the demo, and its counters go with it: \
             hitcount demo --keep-serving keeps both up (and prints how to read them), \
             or run the demo on a Redis of yours (REDIS_URL)."
        );
    }
    if keep {
        outln!(
            "\nCount a page view over HTTP, live on the dashboard (name={HTTP_NAME}, precision 1):\n  \
             curl -H 'Content-Type: application/json' -d '{{\"name\":\"{HTTP_NAME}\"}}' \
             http://{ingest_addr}/api/v1/hits"
        );
    }
    dashboard(listener, &redis, &layout, keep).await?;
    ingest_stop.trigger();
    ingest_task.await??;
    trigger.trigger();
    for w in workers {
        w.await??;
    }
    drop(server);
    Ok(())
}

/// The counters the demo prints a few samples of: (name rank, precision).
/// A rank beyond `--names` shows the last name instead.
const SHOWN: [(usize, u32); 4] = [(0, 1), (0, 60), (1, 300), (2, 86400)];

/// The name the demo's page views over HTTP count under.
const HTTP_NAME: &str = "web:/demo";

/// Page views the demo sends over HTTP.
const HTTP_VIEWS: usize = 100;

/// `hitcount ingest`'s HTTP side in-process on a free loopback port,
/// appending to the demo's stream: its stop, its task and its address.
async fn start_ingest(
    redis: &RedisArgs,
    stream: &StreamArgs,
) -> anyhow::Result<(Trigger, JoinHandle<std::io::Result<()>>, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let appender = Appender::new(crate::store::connect::client(redis)?, stream, 3600);
    let settings = ingest::Settings {
        tokens: Vec::new(),
        origins: Vec::new(),
        browser_prefix: "web:".into(),
        max_body: 1 << 20,
        rate: 0,
    };
    let (stop, mut stopped) = crate::model::shutdown::channel();
    let shutdown = async move { stopped.wait().await };
    let hits = Ingest::new(settings, appender);
    let served = ingest::serve(listener, hits, shutdown, Limits::default());
    Ok((stop, tokio::spawn(served), addr))
}

/// POSTs a JSON `body` of hits to ingest at `addr`: the answer's first line.
async fn post_hits(addr: SocketAddr, body: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "POST /api/v1/hits HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).await?;
    Ok(answer.lines().next().unwrap_or_default().to_string())
}

/// How to read the demo's counters from the command line and any client,
/// as commands that work when pasted: the demo's key prefix, and the Redis
/// (`url`; a password in it is shown as `***`). `throwaway` says they
/// work until the demo stops; on a `cluster` redis-cli follows redirects
/// from the first seed.
fn read_them(url: &str, throwaway: bool, cluster: bool) -> String {
    let shown = crate::model::config::redact_url(url);
    let at = format!("--prefix demo: --redis-url {shown}");
    let seed = shown.split(',').next().unwrap_or_default();
    let follow = if cluster { "-c " } else { "" };
    let cli = format!("redis-cli {follow}-u {seed}");
    let name = Names::name(0);
    let until = if throwaway {
        " (until the demo stops: its Redis goes with it)"
    } else {
        ""
    };
    let mut out = format!("\nRead them{until}:\n");
    for cmd in [
        format!("hitcount get {name} --precision 60 {at}"),
        format!("hitcount get {name} --precision 3600 --stats {at}"),
        format!("hitcount top --by mean {at}"),
        format!("{cli} HGETALL demo:count:60:{name}"),
        format!("{cli} ZRANGE demo:known: 0 -1"),
    ] {
        out.push_str(&format!("  {cmd}\n"));
    }
    out
}

/// The statistics of the hits' values this hour: the most hit name's and
/// the slowest names by mean (the book's "what to optimise first").
async fn statistics(conn: &mut Conn, keys: &Keys) -> anyhow::Result<()> {
    let hour = crate::model::clock::unix_ms().div_euclid(3_600_000) * 3600;
    let name = Names::name(0);
    let stats = crate::store::stats_query::read(conn, keys, 3600, &name, Some(hour), Some(hour))
        .await?
        .and_then(|h| h.buckets.into_iter().next());
    if let Some((t, s)) = stats {
        let row = crate::model::stats_hash::Row::of(t, &s);
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ms"));
        outln!(
            "\n{name} this hour: {} response times, mean {}, p50 {}, p90 {}, p99 {}",
            row.count,
            ms(row.mean),
            ms(row.p50),
            ms(row.p90),
            ms(row.p99)
        );
    }
    let slowest =
        crate::store::query::rank(conn, keys, crate::store::query::By::Mean, 3600, hour, 3).await?;
    outln!("slowest names by mean this hour:");
    for r in slowest {
        let mean = r.mean.unwrap_or(f64::NAN);
        outln!("  {:<12} mean {mean:>7.1} ms over {} hits", r.name, r.count);
    }
    Ok(())
}

/// The dashboard's listener on `addr` (with the default, any free port
/// when it is taken).
async fn listen(addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => Ok(l),
        Err(_) if addr == DEFAULT_DASHBOARD => {
            Ok(tokio::net::TcpListener::bind("127.0.0.1:0").await?)
        }
        Err(e) => Err(e).with_context(|| format!("cannot listen on {addr} (--dashboard)")),
    }
}

/// Serves the dashboard of the demo's counters on `listener` and prints
/// its address; until Ctrl-C or SIGTERM when `keep`, else it stops at once.
async fn dashboard(
    listener: tokio::net::TcpListener,
    redis: &RedisArgs,
    layout: &LayoutArgs,
    keep: bool,
) -> anyhow::Result<()> {
    let bound = listener.local_addr()?;
    let api = Api::new(crate::store::connect::client(redis)?, layout);
    let (trigger, mut stop) = crate::model::shutdown::channel();
    let shutdown = async move { stop.wait().await };
    let serving = tokio::spawn(api::serve(listener, api, shutdown));
    outln!("\nDashboard: http://{bound}/?name=page:0&precision=60");
    if keep {
        outln!("serving it until Ctrl-C");
        crate::model::shutdown::signals().await;
    } else {
        outln!("(stdout is not a terminal, so the demo stops here; --keep-serving keeps it open)");
    }
    // Open requests get the shutdown grace.
    trigger.trigger();
    serving.await??;
    Ok(())
}
