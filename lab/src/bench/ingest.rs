//! `hitcount-lab bench --ingest`: how many hits one `hitcount ingest`
//! process takes over HTTP, and how fast it answers at half that load.
//!
//! It starts `hitcount ingest` (no rate limit, stream `bench:ingest:hits`)
//! as a process on a loopback port and plays clients over keep-alive
//! HTTP/1.1 connections ([`CONNECTIONS`], within the 16 a client address
//! may hold), each phase for `duration`:
//! 1. batches of [`BATCH`] hits, as fast as ingest answers: hits/s;
//! 2. single-hit requests, as fast as ingest answers: requests/s;
//! 3. and 4. the same two at half the goals' rates ([`BATCH_GOAL`] hits/s,
//!    [`SINGLE_GOAL`] requests/s), paced on a fixed schedule (open loop: a
//!    request's latency counts from when it was due, so a stall is not
//!    hidden by the requests it delays): p50 and p99.
//!
//! Every request must be answered 202 and, at the end, the stream must
//! hold exactly the hits acknowledged: each accepted hit appended once.
//! Then StatsD over UDP ([`super::statsd`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

use super::{percentile, BenchError};
use hitcount::model::config::RedisArgs;

/// The stream the measured hits go to.
pub const STREAM: &str = "bench:ingest:hits";
/// Hits per request of the batch phases.
pub const BATCH: usize = 100;
/// The goal of one process in batches of [`BATCH`], hits a second.
pub const BATCH_GOAL: f64 = 50_000.0;
/// The goal of one process in single-hit requests, requests a second.
pub const SINGLE_GOAL: f64 = 5_000.0;
/// The goal of p99 latency at half those rates, ms.
pub const P99_GOAL_MS: f64 = 50.0;
/// Client connections of each phase.
pub const CONNECTIONS: usize = 8;
/// Distinct names the hits spread over.
const NAMES: usize = 1000;

/// What to run.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// The `hitcount` binary whose `ingest` is measured.
    pub hitcount: std::path::PathBuf,
    /// The Redis it appends to.
    pub redis: RedisArgs,
    /// How long each phase runs.
    pub duration: Duration,
}

/// One phase's figures.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Phase {
    /// Requests answered 202.
    pub requests: u64,
    /// Hits they carried.
    pub hits: u64,
    /// Hits a second.
    pub hits_per_sec: f64,
    /// Requests a second.
    pub requests_per_sec: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
}

/// The four phases and the check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IngestReport {
    /// Batches of [`BATCH`], as fast as answered.
    pub batches: Phase,
    /// Single-hit requests, as fast as answered.
    pub singles: Phase,
    /// Batches paced at half of [`BATCH_GOAL`].
    pub batches_half: Phase,
    /// Single-hit requests paced at half of [`SINGLE_GOAL`].
    pub singles_half: Phase,
    /// Entries in the stream at the end: every hit acknowledged, once.
    pub appended: u64,
    /// StatsD over UDP, measured after the HTTP phases.
    pub statsd: super::statsd::StatsdReport,
}

impl IngestReport {
    /// The figures as a table, each next to its goal.
    pub fn table(&self) -> String {
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        let mut out = String::from(
            "phase                          rate                    p50 ms   p99 ms   goal\n",
        );
        let row = |out: &mut String, what: &str, rate: String, p: &Phase, goal: String| {
            out.push_str(&format!(
                "{what:<30} {rate:<22} {:>7.2} {:>8.2}   {goal}\n",
                p.p50_ms, p.p99_ms
            ));
        };
        let b = &self.batches;
        row(
            &mut out,
            &format!("batches of {BATCH}, flat out"),
            format!("{:.0} hits/s", b.hits_per_sec),
            b,
            format!(
                "{BATCH_GOAL:.0} hits/s: {}",
                verdict(b.hits_per_sec >= BATCH_GOAL)
            ),
        );
        let s = &self.singles;
        row(
            &mut out,
            "single hits, flat out",
            format!("{:.0} requests/s", s.requests_per_sec),
            s,
            format!(
                "{SINGLE_GOAL:.0} requests/s: {}",
                verdict(s.requests_per_sec >= SINGLE_GOAL)
            ),
        );
        for (what, p) in [
            ("batches at half the goal", &self.batches_half),
            ("single hits at half the goal", &self.singles_half),
        ] {
            row(
                &mut out,
                what,
                format!("{:.0} requests/s", p.requests_per_sec),
                p,
                format!(
                    "p99 < {P99_GOAL_MS} ms: {}",
                    verdict(p.p99_ms < P99_GOAL_MS)
                ),
            );
        }
        out.push_str(&format!(
            "every acknowledged hit appended once: {} entries\n",
            self.appended
        ));
        out.push_str(&self.statsd.table());
        out
    }
}

/// Runs the four phases against a fresh `hitcount ingest`.
pub async fn run(opts: &IngestOptions) -> Result<IngestReport, BenchError> {
    let mut conn = super::open(&opts.redis).await?;
    let _: () = redis::cmd("DEL").arg(STREAM).query_async(&mut conn).await?;
    let env = [("HITCOUNT_STREAM", STREAM), ("HITCOUNT_INGEST_RATE", "0")];
    let (mut child, addr) = super::listening::start(
        &opts.hitcount,
        "ingest",
        "HITCOUNT_INGEST_LISTEN",
        &opts.redis,
        &env,
    )
    .await?;
    let d = opts.duration;
    let batches = phase(addr, BATCH, None, d).await?;
    let singles = phase(addr, 1, None, d).await?;
    let batches_half = phase(addr, BATCH, Some(BATCH_GOAL / 2.0 / BATCH as f64), d).await?;
    let singles_half = phase(addr, 1, Some(SINGLE_GOAL / 2.0), d).await?;
    let _ = child.kill().await;
    let appended: u64 = redis::cmd("XLEN")
        .arg(STREAM)
        .query_async(&mut conn)
        .await?;
    let _: () = redis::cmd("DEL").arg(STREAM).query_async(&mut conn).await?;
    let sent = [&batches, &singles, &batches_half, &singles_half]
        .iter()
        .map(|p| p.hits)
        .sum::<u64>();
    if appended != sent {
        return Err(BenchError::Check(format!(
            "ingest acknowledged {sent} hits, the stream holds {appended}"
        )));
    }
    let statsd = super::statsd::run(&opts.hitcount, &opts.redis, opts.duration).await?;
    Ok(IngestReport {
        batches,
        singles,
        batches_half,
        singles_half,
        appended,
        statsd,
    })
}

/// One phase: [`CONNECTIONS`] clients sending requests of `hits` hits for
/// `duration`, flat out or at `rate` requests a second in all.
async fn phase(
    addr: SocketAddr,
    hits: usize,
    rate: Option<f64>,
    duration: Duration,
) -> Result<Phase, BenchError> {
    let start = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CONNECTIONS {
        // Each client its share of the rate, its schedule offset by its rank.
        let every = rate.map(|r| Duration::from_secs_f64(CONNECTIONS as f64 / r));
        let offset = every.map_or(Duration::ZERO, |e| e * c as u32 / CONNECTIONS as u32);
        clients.spawn(client(
            addr,
            c,
            hits,
            every,
            start + offset,
            start + duration,
        ));
    }
    let mut latencies = Vec::new();
    while let Some(done) = clients.join_next().await {
        latencies.extend(done.map_err(|e| BenchError::Check(e.to_string()))??);
    }
    let secs = start.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let requests = latencies.len() as u64;
    Ok(Phase {
        requests,
        hits: requests * hits as u64,
        hits_per_sec: (requests * hits as u64) as f64 / secs,
        requests_per_sec: requests as f64 / secs,
        p50_ms: percentile(&latencies, 50.0),
        p99_ms: percentile(&latencies, 99.0),
    })
}

/// One client on one keep-alive connection (opened again when ingest
/// closes it): requests of `hits` hits, each due `every` after the last
/// (`None`: at once), until `until`. Each request's latency in ms.
async fn client(
    addr: SocketAddr,
    c: usize,
    hits: usize,
    every: Option<Duration>,
    first: Instant,
    until: Instant,
) -> Result<Vec<f64>, BenchError> {
    let mut latencies = Vec::new();
    let mut conn: Option<BufReader<TcpStream>> = None;
    let mut due = first;
    let mut n = 0usize;
    while due < until {
        if every.is_some() {
            tokio::time::sleep_until(due.into()).await;
        }
        let body: Vec<String> = (0..hits)
            .map(|i| {
                format!(
                    r#"{{"name":"bench:{}"}}"#,
                    (c * 7919 + n * hits + i) % NAMES
                )
            })
            .collect();
        let body = if hits == 1 {
            body[0].clone()
        } else {
            format!("[{}]", body.join(","))
        };
        let sent_at = if every.is_some() { due } else { Instant::now() };
        let stream = match conn.as_mut() {
            Some(s) => s,
            None => {
                let stream = TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                conn.insert(BufReader::new(stream))
            }
        };
        match post(stream, &body).await {
            Ok(202) => latencies.push(sent_at.elapsed().as_secs_f64() * 1000.0),
            Ok(status) => return Err(BenchError::Check(format!("ingest answered {status}"))),
            // Closed (ingest's 30 s connection deadline, longer than a
            // phase unless --ingest-secs says otherwise): open another and
            // send again. A request taken but not answered would show at
            // the end as entries beyond the hits acknowledged.
            Err(_) => {
                conn = None;
                continue;
            }
        }
        n += 1;
        due = match every {
            Some(e) => due + e,
            None => Instant::now(),
        };
    }
    Ok(latencies)
}

/// One `POST /api/v1/hits` on a keep-alive connection: the status.
async fn post(conn: &mut BufReader<TcpStream>, body: &str) -> std::io::Result<u16> {
    // One write: a request in two small segments waits on the peer's
    // delayed ACK (40 ms) under Nagle.
    let request = format!(
        "POST /api/v1/hits HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.get_mut().write_all(request.as_bytes()).await?;
    let mut status = 0;
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        if conn.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if status == 0 {
            status = l
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
        } else if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut rest = vec![0u8; length];
    conn.read_exact(&mut rest).await?;
    Ok(status)
}
