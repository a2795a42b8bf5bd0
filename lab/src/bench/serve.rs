//! `hitcount bench --serve`: what `hitcount serve` costs Redis while
//! dashboards are open on a large Redis.
//!
//! It writes `counters` names (`page:0`…) under the prefix `bench:serve:`:
//! every name at every default precision in `known:`, and each name's 1 min
//! hash with its last [`FIELDS`] buckets (the charted names with
//! [`CHARTED_FIELDS`]). It serves them with `hitcount serve`, started as a
//! process on a loopback port, and plays `pages` open dashboards over HTTP, as the
//! page asks: on open, one page of names; then every `refresh`, the
//! charted counter's series and the hottest names (`top` at 1 min). Redis'
//! CPU is `INFO cpu` (`used_cpu_sys + used_cpu_user`) before and after,
//! over the whole run, next to the same reading over an idle while first.
//! The latency of `top` is measured alone first on empty caches (each
//! bucket a full ranking scan), then as the pages see it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::{percentile, BenchError};
use hitcount::edge::workload::Names;
use hitcount::model::config::{LayoutArgs, RedisArgs};
use hitcount::model::keys::Keys;
use hitcount::store::connect::Conn;

/// Key prefix of everything this part writes.
pub const PREFIX: &str = "bench:serve:";
/// Buckets in each name's 1 min hash.
pub const FIELDS: i64 = 10;
/// Buckets in the charted names' 1 min hashes: a full two hours.
pub const CHARTED_FIELDS: i64 = 120;
/// Names written per pipeline.
const SEED_BATCH: usize = 1000;
/// Idle reading before the pages open.
const IDLE: Duration = Duration::from_secs(5);
/// Ranking scans timed alone, each of another bucket.
const COLD_SCANS: i64 = 3;
/// Names the page asks of `top`.
const TOP_LIMIT: usize = 20;
/// The latency goal of a request, ms: each kind reports how many missed it.
pub const GOAL_MS: f64 = 50.0;

/// What to run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The `hitcount` binary whose `serve` is measured.
    pub hitcount: std::path::PathBuf,
    /// The Redis to measure.
    pub redis: RedisArgs,
    /// Counter names written.
    pub counters: usize,
    /// Dashboards open at once.
    pub pages: usize,
    /// How often each page reads its chart and the hottest names again.
    pub refresh: Duration,
    /// How long the pages stay open.
    pub duration: Duration,
}

/// Latencies of one kind of request, in milliseconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Latency {
    /// Requests.
    pub requests: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Requests slower than [`GOAL_MS`].
    pub over_goal: usize,
}

impl Latency {
    fn of(mut ms: Vec<f64>) -> Latency {
        ms.sort_by(f64::total_cmp);
        Latency {
            requests: ms.len(),
            p50_ms: percentile(&ms, 50.0),
            p99_ms: percentile(&ms, 99.0),
            max_ms: ms.last().copied().unwrap_or(f64::NAN),
            over_goal: ms.iter().filter(|&&m| m > GOAL_MS).count(),
        }
    }
}

/// The figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServeReport {
    /// Where they come from.
    pub machine: super::report::Machine,
    /// Counter names.
    pub counters: usize,
    /// Open pages.
    pub pages: usize,
    /// Their refresh interval, seconds.
    pub refresh_secs: f64,
    /// How long they were open, seconds.
    pub seconds: f64,
    /// Redis CPU while idle, % of one core.
    pub idle_cpu_percent: f64,
    /// Redis CPU while the pages were open, % of one core.
    pub cpu_percent: f64,
    /// Redis commands per second while the pages were open.
    pub commands_per_sec: f64,
    /// `top` alone on an empty cache: a full ranking scan.
    pub top_cold: Latency,
    /// `top` as the pages saw it.
    pub top: Latency,
    /// The charted series as the pages saw it.
    pub series: Latency,
    /// A page of names, once per page.
    pub list: Latency,
}

impl ServeReport {
    /// The figures as Markdown lines.
    pub fn table(&self) -> String {
        let row = |what: &str, l: &Latency| {
            format!(
                "| {what} | {} | {:.1} | {:.1} | {:.1} | {} |\n",
                l.requests, l.p50_ms, l.p99_ms, l.max_ms, l.over_goal
            )
        };
        format!(
            "{} pages refreshing every {:.0} s over {} counters for {:.0} s; {} CPUs ({}); Redis {}\n\n\
             - Redis CPU: {:.2} % of one core with the pages open ({:.2} % idle), {:.0} commands/s\n\n\
             | request | n | p50 ms | p99 ms | max ms | over {GOAL_MS} ms |\n\
             | --- | --: | --: | --: | --: | --: |\n{}{}{}{}",
            self.pages,
            self.refresh_secs,
            self.counters,
            self.seconds,
            self.machine.cpus,
            self.machine.cpu,
            self.machine.redis,
            self.cpu_percent,
            self.idle_cpu_percent,
            self.commands_per_sec,
            row("`top` on an empty cache (full scan)", &self.top_cold),
            row("`top` as the pages saw it", &self.top),
            row("a counter's series (1 min)", &self.series),
            row("a page of 100 names", &self.list),
        )
    }
}

/// Runs the serve benchmark; deletes what it wrote.
pub async fn run(opts: &ServeOptions) -> Result<ServeReport, BenchError> {
    let client = hitcount::store::connect::client(&opts.redis)?;
    let mut conn = client.open(super::RESPONSE_TIMEOUT).await?;
    super::delete_matching(&mut conn, &format!("{PREFIX}*")).await?;
    let machine = super::report::Machine::detect(&mut conn).await?;
    let layout = LayoutArgs {
        prefix: PREFIX.into(),
        ..LayoutArgs::default()
    };
    let keys = Keys::named("bench:serve:hits", "bench", PREFIX);
    let now = super::unix_ms().div_euclid(1000);
    seed(&mut conn, &keys, &layout.precisions, opts, now).await?;

    let (mut server, addr) = start_serve(opts).await?;

    let idle_start = cpu_seconds(&mut conn).await?;
    tokio::time::sleep(IDLE).await;
    let idle = (cpu_seconds(&mut conn).await? - idle_start) / IDLE.as_secs_f64();

    let mut cold = Vec::new();
    let current = now.div_euclid(60) * 60;
    for k in 1..=COLD_SCANS {
        let path = format!(
            "/api/v1/top?precision=60&limit={TOP_LIMIT}&bucket={}",
            current - 60 * k
        );
        cold.push(get(addr, &path).await?);
    }

    super::reset_stats(&mut conn).await?;
    let cpu_start = cpu_seconds(&mut conn).await?;
    let started = Instant::now();
    let deadline = started + opts.duration;
    let mut pages = tokio::task::JoinSet::new();
    for i in 0..opts.pages {
        let stagger = opts.refresh.mul_f64(i as f64 / opts.pages.max(1) as f64);
        pages.spawn(page(addr, i, stagger, opts.refresh, deadline));
    }
    let (mut list, mut series, mut top) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(done) = pages.join_next().await {
        let seen = done.map_err(|e| BenchError::Check(format!("a page failed: {e}")))??;
        list.extend(seen.list);
        series.extend(seen.series);
        top.extend(seen.top);
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(&mut conn).await? - cpu_start;
    let commands = super::command_calls(&mut conn).await?;
    if let Some(status) = server.try_wait()? {
        return Err(BenchError::Check(format!(
            "`hitcount serve` exited during the run ({status})"
        )));
    }
    server.kill().await?;
    super::delete_matching(&mut conn, &format!("{PREFIX}*")).await?;

    Ok(ServeReport {
        machine,
        counters: opts.counters,
        pages: opts.pages,
        refresh_secs: opts.refresh.as_secs_f64(),
        seconds,
        idle_cpu_percent: idle * 100.0,
        cpu_percent: cpu / seconds * 100.0,
        commands_per_sec: commands as f64 / seconds,
        top_cold: Latency::of(cold),
        top: Latency::of(top),
        series: Latency::of(series),
        list: Latency::of(list),
    })
}

/// Starts `hitcount serve` on a free loopback port, serving the counters
/// under [`PREFIX`], and waits until it answers.
async fn start_serve(
    opts: &ServeOptions,
) -> Result<(tokio::process::Child, SocketAddr), BenchError> {
    let env = [("HITCOUNT_PREFIX", PREFIX)];
    super::listening::start(
        &opts.hitcount,
        "serve",
        "HITCOUNT_SERVE_LISTEN",
        &opts.redis,
        &env,
    )
    .await
}

/// Writes the names: `known:` members at every precision, 1 min hashes
/// with counts falling with the rank (the first `pages` names charted).
async fn seed(
    conn: &mut Conn,
    keys: &Keys,
    precisions: &[u32],
    opts: &ServeOptions,
    now: i64,
) -> Result<(), BenchError> {
    let current = now.div_euclid(60) * 60;
    for start in (0..opts.counters).step_by(SEED_BATCH) {
        let end = (start + SEED_BATCH).min(opts.counters);
        let mut pipe = redis::pipe();
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(keys.known());
        for rank in start..end {
            let name = Names::name(rank);
            for &p in precisions {
                zadd.arg(0).arg(Keys::member(p, &name));
            }
            let fields = if rank < opts.pages {
                CHARTED_FIELDS
            } else {
                FIELDS
            };
            let mut hset = redis::cmd("HSET");
            hset.arg(keys.count(60, &name));
            for k in 0..fields {
                let count = (1_000_000 / (rank as i64 + 1) / (k + 1)).max(1);
                hset.arg(current - 60 * k).arg(count);
            }
            pipe.add_command(hset).ignore();
        }
        pipe.add_command(zadd).ignore();
        pipe.query_async::<()>(conn).await?;
    }
    Ok(())
}

/// What one page saw: request latencies in ms.
#[derive(Default)]
struct Seen {
    list: Vec<f64>,
    series: Vec<f64>,
    top: Vec<f64>,
}

/// One open dashboard charting `page:i`: a page of names on open, then its
/// series and the hottest names every `refresh` until `deadline`.
async fn page(
    addr: SocketAddr,
    i: usize,
    stagger: Duration,
    refresh: Duration,
    deadline: Instant,
) -> Result<Seen, BenchError> {
    tokio::time::sleep(stagger).await;
    let series = format!("/api/v1/counters/page%3A{i}?precision=60");
    let top = format!("/api/v1/top?precision=60&limit={TOP_LIMIT}");
    let mut seen = Seen::default();
    seen.list
        .push(get(addr, "/api/v1/counters?limit=100").await?);
    let mut next = Instant::now();
    loop {
        seen.series.push(get(addr, &series).await?);
        seen.top.push(get(addr, &top).await?);
        next += refresh;
        if next >= deadline {
            return Ok(seen);
        }
        tokio::time::sleep_until(next.into()).await;
    }
}

/// `GET path` on a new connection, as a browser's first request: its
/// time in ms; an error unless the answer is a 200.
async fn get(addr: SocketAddr, path: &str) -> Result<f64, BenchError> {
    // The API bounds its ranking scans with a 429 and Retry-After; a page
    // waits as asked and asks again, and so does this one. The latency is
    // the answered request's.
    for _ in 0..BUSY_RETRIES {
        match get_once(addr, path).await? {
            Answer::Ok(ms) => return Ok(ms),
            Answer::Busy(wait) => tokio::time::sleep(wait).await,
        }
    }
    Err(BenchError::Check(format!(
        "GET {path}: still 429 after {BUSY_RETRIES} tries"
    )))
}

/// Tries of a request answered 429 (each after its Retry-After).
const BUSY_RETRIES: usize = 10;

enum Answer {
    /// 200, in this many milliseconds.
    Ok(f64),
    /// 429: ask again after this long.
    Busy(Duration),
}

async fn get_once(addr: SocketAddr, path: &str) -> Result<Answer, BenchError> {
    let failed = |why: String| BenchError::Check(format!("GET {path}: {why}"));
    let started = Instant::now();
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes())
        .await
        .map_err(|e| failed(e.to_string()))?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let head = String::from_utf8_lossy(&answer[..answer.len().min(400)]).into_owned();
    if head.starts_with("HTTP/1.1 429 ") {
        let secs = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("retry-after")
                    .then(|| v.trim().parse::<u64>().ok())?
            })
            .unwrap_or(1);
        return Ok(Answer::Busy(Duration::from_secs(secs.clamp(1, 60))));
    }
    if !head.starts_with("HTTP/1.1 200 ") {
        return Err(failed(head.chars().take(200).collect()));
    }
    Ok(Answer::Ok(started.elapsed().as_secs_f64() * 1000.0))
}

/// Redis' CPU time so far, seconds (`used_cpu_sys + used_cpu_user`).
async fn cpu_seconds(conn: &mut Conn) -> Result<f64, BenchError> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    Ok(cpu_of(&info))
}

fn cpu_of(info: &str) -> f64 {
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_sys_plus_user_of_the_whole_process() {
        let info = "# CPU\r\nused_cpu_sys:1.50\r\nused_cpu_user:2.25\r\n\
                    used_cpu_sys_children:9.0\r\nused_cpu_sys_main_thread:1.0\r\n";
        assert_eq!(cpu_of(info), 3.75);
    }

    #[test]
    fn latencies_summarise_sorted() {
        let l = Latency::of(vec![3.0, 1.0, 2.0]);
        assert_eq!(
            (l.requests, l.p50_ms, l.max_ms, l.over_goal),
            (3, 2.0, 3.0, 0)
        );
        assert_eq!(Latency::of(vec![1.0, GOAL_MS + 1.0]).over_goal, 1);
    }
}
