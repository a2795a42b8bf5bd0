//! The drains of the product's own bench: `hitcount bench --json` run as a
//! process on the lab's Redis, its figures read back. The ceiling (bare
//! XREADGROUP + XACK consumers) and the real workers' drains are measured
//! there, once, for operators and the lab alike.

use std::path::PathBuf;
use std::process::Stdio;

use hitcount::edge::workload::Workload;
use hitcount::model::config::RedisArgs;

use super::{BenchError, Options};

/// What bare consumers or workers drained.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Drained {
    /// Entries read and acknowledged.
    pub entries: u64,
    /// Seconds from the first read to the last acknowledgement.
    pub secs: f64,
    /// Redis' own CPU time over those seconds (`INFO cpu`).
    pub redis_cpu_secs: f64,
}

impl Drained {
    /// Entries per second.
    pub fn rate(&self) -> f64 {
        self.entries as f64 / self.secs.max(1e-9)
    }

    /// Redis CPU per entry, µs.
    pub fn redis_cpu_us(&self) -> f64 {
        self.redis_cpu_secs * 1e6 / (self.entries as f64).max(1.0)
    }
}

/// One drain by the real workers, as `hitcount bench` checked it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WorkerRun {
    /// Entries drained and the time it took.
    pub drained: Drained,
    /// Redis commands per hit, scripts' own commands included.
    pub commands_per_hit: f64,
    /// Counter cells (HINCRBYs) per hit.
    pub cells_per_hit: f64,
    /// The largest peak RSS of the worker processes, MiB.
    pub peak_rss_mib: f64,
    /// Hits counted at the 86400 s precision (equal to the hits sent).
    pub counted: i64,
}

/// One workload and worker count of `hitcount bench`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Run {
    /// The workload.
    pub workload: Workload,
    /// Workers, and consumers of the ceiling.
    pub workers: usize,
    /// The bare consumers.
    pub ceiling: Drained,
    /// The real workers.
    pub hitcount: WorkerRun,
}

/// The part of `hitcount bench --json` the lab reads.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Drains {
    /// Ceiling and hitcount runs.
    pub runs: Vec<Run>,
    /// The one-worker hot run with a value on every hit, when run.
    pub values: Option<WorkerRun>,
}

/// How to run the product's bench on one Redis.
#[derive(Debug, Clone)]
pub struct Bench {
    hitcount: PathBuf,
    redis: RedisArgs,
    worker_args: Vec<String>,
}

impl Bench {
    /// The binary, the Redis and the worker flags of `opts`.
    pub fn new(opts: &Options) -> Bench {
        Bench {
            hitcount: opts.hitcount.clone(),
            redis: opts.redis.clone(),
            worker_args: opts.worker_args.clone(),
        }
    }

    /// `hitcount bench --json` over `workloads` × `workers`, `entries` each.
    pub async fn run(
        &self,
        entries: u64,
        workloads: &[Workload],
        workers: &[usize],
    ) -> Result<Drains, BenchError> {
        let list = |v: Vec<String>| v.join(",");
        let mut cmd = tokio::process::Command::new(&self.hitcount);
        // The URL (password included) goes in the environment, never on a
        // command line `ps` shows.
        cmd.arg("bench")
            .arg("--json")
            .arg(format!("--entries={entries}"))
            .arg(format!(
                "--workload={}",
                list(workloads.iter().map(|w| label(*w)).collect())
            ))
            .arg(format!(
                "--workers={}",
                list(workers.iter().map(usize::to_string).collect())
            ))
            .args(self.worker_args.iter().map(|a| format!("--worker-arg={a}")))
            .env("REDIS_URL", &self.redis.url)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let out = cmd.output().await?;
        if !out.status.success() {
            return Err(BenchError::Check(format!(
                "`hitcount bench` failed ({})",
                out.status
            )));
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| BenchError::Check(format!("reading `hitcount bench --json`: {e}")))
    }
}

/// A workload as `--workload` takes it.
fn label(w: Workload) -> String {
    serde_json::to_value(w)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
