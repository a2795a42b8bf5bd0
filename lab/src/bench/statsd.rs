//! `hitcount-lab bench --ingest`'s StatsD part: how many lines a second
//! one `hitcount ingest` takes over UDP, and whether it drops any at half
//! the goal's rate.
//!
//! It starts `hitcount ingest` with StatsD on a loopback port (stream
//! `bench:statsd:hits`) and sends datagrams of [`LINES_PER_PACKET`] counter
//! lines from one socket: first as fast as it can for `duration` (lines/s
//! is what ingest took, `hitcount_statsd_hits_total`, over the time it
//! took them), then paced at half of [`GOAL`] for `duration`, where every
//! line sent must be taken (no drop, socket or queue). At the end the
//! stream must hold exactly the lines taken: each counted once.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::BenchError;
use hitcount::model::config::RedisArgs;

/// The stream the measured hits go to.
pub const STREAM: &str = "bench:statsd:hits";
/// The goal of one process, lines a second over UDP.
pub const GOAL: f64 = 100_000.0;
/// Lines in one datagram (about 900 bytes, under any MTU).
pub const LINES_PER_PACKET: usize = 50;
/// How long the taken count must stay still to call a phase done.
const SETTLED: Duration = Duration::from_secs(1);

/// One phase's figures.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StatsdPhase {
    /// Lines sent.
    pub sent: u64,
    /// Lines ingest took as hits.
    pub taken: u64,
    /// Lines a second ingest took.
    pub lines_per_sec: f64,
    /// Datagrams the socket's buffer dropped (the kernel's count).
    pub socket_drops: u64,
    /// Hits the producer's full buffer dropped.
    pub queue_drops: u64,
}

/// Both phases and the check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StatsdReport {
    /// Flat out.
    pub flat_out: StatsdPhase,
    /// Paced at half of [`GOAL`].
    pub half: StatsdPhase,
    /// Entries in the stream at the end: every line taken, once.
    pub appended: u64,
}

impl StatsdReport {
    /// The figures as table rows.
    pub fn table(&self) -> String {
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        let (f, h) = (&self.flat_out, &self.half);
        format!(
            "StatsD over UDP, flat out      {:.0} lines/s taken of {} sent ({} datagrams dropped by the socket)   {GOAL:.0} lines/s: {}\n\
             StatsD at half the goal        {} of {} lines taken, {} + {} dropped (socket + queue)   no drop: {}\n\
             every StatsD line taken appended once: {} entries\n",
            f.lines_per_sec,
            f.sent,
            f.socket_drops,
            verdict(f.lines_per_sec >= GOAL),
            h.taken,
            h.sent,
            h.socket_drops,
            h.queue_drops,
            verdict(h.taken == h.sent && h.socket_drops + h.queue_drops == 0),
            self.appended,
        )
    }
}

/// Runs both phases against a fresh `hitcount ingest` with StatsD on.
pub async fn run(
    hitcount: &std::path::Path,
    redis: &RedisArgs,
    duration: Duration,
) -> Result<StatsdReport, BenchError> {
    let mut conn = super::open(redis).await?;
    let _: () = redis::cmd("DEL").arg(STREAM).query_async(&mut conn).await?;
    let statsd = SocketAddr::from(([127, 0, 0, 1], crate::kit::free_port()));
    let statsd_text = statsd.to_string();
    let env = [
        ("HITCOUNT_STREAM", STREAM),
        ("HITCOUNT_STATSD_LISTEN", statsd_text.as_str()),
    ];
    let (mut child, http) =
        super::listening::start(hitcount, "ingest", "HITCOUNT_INGEST_LISTEN", redis, &env).await?;
    let flat_out = phase(http, statsd, None, duration).await?;
    let half = phase(http, statsd, Some(GOAL / 2.0), duration).await?;
    let taken = flat_out.taken + half.taken;
    // The producer appends what it was handed; wait for the last batch.
    let deadline = Instant::now() + Duration::from_secs(30);
    let appended = loop {
        let len: u64 = redis::cmd("XLEN")
            .arg(STREAM)
            .query_async(&mut conn)
            .await?;
        if len >= taken || Instant::now() > deadline {
            break len;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = child.kill().await;
    let _: () = redis::cmd("DEL").arg(STREAM).query_async(&mut conn).await?;
    // The producer's batch numbers beside the stream.
    super::delete_matching(&mut conn, &format!("{{{STREAM}}}:*")).await?;
    if appended != taken {
        return Err(BenchError::Check(format!(
            "ingest took {taken} StatsD lines, the stream holds {appended}"
        )));
    }
    Ok(StatsdReport {
        flat_out,
        half,
        appended,
    })
}

/// Sends datagrams for `duration`, flat out or at `rate` lines a second,
/// then waits until ingest took what it will.
async fn phase(
    http: SocketAddr,
    statsd: SocketAddr,
    rate: Option<f64>,
    duration: Duration,
) -> Result<StatsdPhase, BenchError> {
    let before = counters(http).await?;
    let start = Instant::now();
    let sent = tokio::task::spawn_blocking(move || send(statsd, rate, duration))
        .await
        .map_err(|e| BenchError::Check(e.to_string()))??;
    // Taken until the count stays still for [`SETTLED`].
    let (mut last, mut last_change) = (counters(http).await?, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = counters(http).await?;
        if now.0 != last.0 {
            (last, last_change) = (now, Instant::now());
        } else if last_change.elapsed() >= SETTLED {
            break;
        }
    }
    let taken = last.0 - before.0;
    let took = last_change
        .duration_since(start)
        .as_secs_f64()
        .max(duration.as_secs_f64());
    Ok(StatsdPhase {
        sent,
        taken,
        lines_per_sec: taken as f64 / took,
        socket_drops: last.1 - before.1,
        queue_drops: last.2 - before.2,
    })
}

/// Datagrams of counter lines to `statsd` for `duration`, flat out or
/// paced at `rate` lines a second: the lines sent.
fn send(statsd: SocketAddr, rate: Option<f64>, duration: Duration) -> std::io::Result<u64> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    let packet: String = (0..LINES_PER_PACKET)
        .map(|i| format!("bench.statsd.{i}:1|c\n"))
        .collect();
    let every = rate.map(|r| Duration::from_secs_f64(LINES_PER_PACKET as f64 / r));
    let start = Instant::now();
    let mut sent = 0u64;
    let mut due = start;
    while start.elapsed() < duration {
        if let Some(every) = every {
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            due += every;
        }
        // A full socket buffer on our side is no line sent.
        if socket.send_to(packet.as_bytes(), statsd).is_ok() {
            sent += LINES_PER_PACKET as u64;
        }
    }
    Ok(sent)
}

/// ingest's StatsD counters: hits taken, socket drops, queue drops.
async fn counters(http: SocketAddr) -> Result<(u64, u64, u64), BenchError> {
    let mut s = tokio::net::TcpStream::connect(http).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    let value = |series: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .parse::<f64>()
                    .ok()
            })
            .map_or(0, |v| v as u64)
    };
    Ok((
        value("hitcount_statsd_hits_total"),
        value("hitcount_statsd_dropped_total{where=\"socket\"}"),
        value("hitcount_statsd_dropped_total{where=\"queue\"}"),
    ))
}
