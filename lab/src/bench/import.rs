//! `hitcount-lab bench --import`: how fast `hitcount import` puts an access
//! log into the stream.
//!
//! It writes a `combined` log of `lines` requests (a minute of a busy
//! site's traffic per 6,000 lines, ending now; 1,000 paths of Zipf(1.0)
//! popularity, half with a query string) to a temporary file, then times
//! `hitcount import` on it as a process, plain, gzipped, and as
//! `combined-time` (every line with a request time: one entry per line,
//! nothing summed), each into a stream of its own under `bench:import:`.
//! What counts is lines per second from start to exit; the entries it
//! appended are checked against the lines (an import that appended
//! nothing would be fast). Nothing counts the stream: workers are
//! measured elsewhere.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::Rng as _;

use super::BenchError;
use hitcount::edge::workload::{Distribution, Names};
use hitcount::model::config::RedisArgs;

/// Key prefix of everything this part writes.
pub const PREFIX: &str = "bench:import:";
/// The goal: log lines into the stream per second.
pub const GOAL_LINES_PER_SEC: f64 = 200_000.0;
/// Requests per second of the generated log's traffic.
const LINES_PER_SEC: u64 = 100;
/// Distinct paths.
const PATHS: usize = 1000;

/// What to run.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The `hitcount` binary whose `import` is measured.
    pub hitcount: PathBuf,
    /// The Redis to import into.
    pub redis: RedisArgs,
    /// Lines of the generated log.
    pub lines: u64,
}

/// One timed import.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    /// What was imported.
    pub what: String,
    /// Lines read.
    pub lines: u64,
    /// Stream entries appended.
    pub entries: u64,
    /// From start to exit.
    pub seconds: f64,
    /// Lines per second.
    pub lines_per_sec: f64,
}

/// The runs and the goal.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImportReport {
    /// Bytes of the plain log.
    pub bytes: u64,
    /// Each run.
    pub runs: Vec<Run>,
    /// Commands the SLOWLOG took over the runs (emptied first): a batch's
    /// script over its threshold (10 ms on the throwaway server).
    pub slowlog: u64,
}

impl ImportReport {
    /// A Markdown table.
    pub fn table(&self) -> String {
        let rows: String = self
            .runs
            .iter()
            .map(|r| {
                format!(
                    "| {} | {} | {} | {:.2} | {:.0} | {} |\n",
                    r.what,
                    r.lines,
                    r.entries,
                    r.seconds,
                    r.lines_per_sec,
                    if r.lines_per_sec >= GOAL_LINES_PER_SEC {
                        "met"
                    } else {
                        "missed"
                    }
                )
            })
            .collect();
        format!(
            "`hitcount import` of a {:.0} MB access log, goal {GOAL_LINES_PER_SEC} lines/s\n\n\
             | log | lines | stream entries | s | lines/s | goal |\n\
             | --- | --: | --: | --: | --: | --- |\n{rows}\nSLOWLOG entries during the imports: {}\n",
            self.bytes as f64 / 1e6,
            self.slowlog
        )
    }
}

/// Writes the log, runs the imports; deletes what it wrote.
pub async fn run(opts: &ImportOptions) -> Result<ImportReport, BenchError> {
    let client = hitcount::store::connect::client(&opts.redis)?;
    let mut conn = client.open(super::RESPONSE_TIMEOUT).await?;
    super::delete_matching(&mut conn, &format!("{PREFIX}*")).await?;
    let dir = tempfile::tempdir()?;
    let plain = dir.path().join("access.log");
    let timed = dir.path().join("timed.log");
    let gz = dir.path().join("access.log.gz");
    write_logs(opts.lines, &plain, &timed)?;
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut conn)
        .await?;
    let status = std::process::Command::new("gzip")
        .args(["-1", "-k"])
        .arg(&plain)
        .status()?;
    if !status.success() {
        return Err(BenchError::Check("gzip failed".into()));
    }
    let runs = [
        ("combined", &plain, "combined"),
        ("combined, gzipped", &gz, "combined"),
        ("combined-time (no summing)", &timed, "combined-time"),
    ];
    let mut out = Vec::new();
    for (i, (what, path, format)) in runs.into_iter().enumerate() {
        let stream = format!("{PREFIX}hits{i}");
        let start = Instant::now();
        let done = tokio::process::Command::new(&opts.hitcount)
            .args(["import", "--format", format, "--stream", &stream])
            .arg("--dead-stream")
            .arg(format!("{stream}:dead"))
            .arg(path)
            .env("REDIS_URL", &opts.redis.url)
            .output()
            .await?;
        let seconds = start.elapsed().as_secs_f64();
        if !done.status.success() {
            let err = String::from_utf8_lossy(&done.stderr).into_owned();
            return Err(BenchError::Check(format!("hitcount import: {err}")));
        }
        let entries: u64 = redis::cmd("XLEN")
            .arg(&stream)
            .query_async(&mut conn)
            .await?;
        let text = String::from_utf8_lossy(&done.stdout);
        let expected = format!("{} lines read, {} counted", opts.lines, opts.lines);
        if entries == 0 || !text.contains(&expected) {
            return Err(BenchError::Check(format!(
                "{what}: {entries} entries; {text}"
            )));
        }
        out.push(Run {
            what: what.into(),
            lines: opts.lines,
            entries,
            seconds,
            lines_per_sec: opts.lines as f64 / seconds,
        });
    }
    let slowlog: u64 = redis::cmd("SLOWLOG")
        .arg("LEN")
        .query_async(&mut conn)
        .await?;
    super::delete_matching(&mut conn, &format!("{PREFIX}*")).await?;
    super::delete_matching(&mut conn, &format!("{{{PREFIX}*")).await?;
    Ok(ImportReport {
        slowlog,
        bytes: std::fs::metadata(&plain)?.len(),
        runs: out,
    })
}

/// The generated logs: `lines` requests ending now, and the same with a
/// request time each.
fn write_logs(lines: u64, plain: &Path, timed: &Path) -> std::io::Result<()> {
    let mut a = std::io::BufWriter::new(std::fs::File::create(plain)?);
    let mut b = std::io::BufWriter::new(std::fs::File::create(timed)?);
    let names = Names::new(PATHS, Distribution::Zipf(1.0));
    let mut rng = rand::rng();
    let start = hitcount_now() - (lines / LINES_PER_SEC) as i64;
    for i in 0..lines {
        let t = start + (i / LINES_PER_SEC) as i64;
        let path = format!("/{}", Names::name(names.sample(&mut rng)));
        let query = if i % 2 == 0 {
            format!("?session={i}")
        } else {
            String::new()
        };
        let line = format!(
            "192.0.2.{} - - [{}] \"GET {path}{query} HTTP/1.1\" 200 {} \"https://example.org/\" \
             \"Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\"",
            i % 250,
            log_time(t, 0),
            rng.random_range(200..20_000)
        );
        writeln!(a, "{line}")?;
        writeln!(b, "{line} {}.{:03}", i % 3, rng.random_range(0..1000))?;
    }
    a.flush()?;
    b.flush()
}

fn hitcount_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The time of an access log line, `dd/Mon/yyyy:HH:MM:SS ±hhmm`, for
/// unix seconds `t` written in a time zone `offset_min` minutes ahead of
/// UTC.
pub fn log_time(t: i64, offset_min: i64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // `YYYY-MM-DD HH:MM:SS`
    let local = hitcount::store::counters::format_utc(t + offset_min * 60);
    let month: usize = local[5..7].parse().unwrap_or(1);
    let sign = if offset_min < 0 { '-' } else { '+' };
    let off = offset_min.abs();
    format!(
        "{}/{}/{}:{} {sign}{:02}{:02}",
        &local[8..10],
        MONTHS[month - 1],
        &local[..4],
        &local[11..],
        off / 60,
        off % 60
    )
}
