//! The figures of one bench run and their table (Markdown, so it can go into
//! docs/performance.md as printed).

use std::fmt::Write;

use hitcount::store::connect::Conn;

use super::latency::{Delay, ProducerRate};
use super::product::{Drained, Drains, WorkerRun};
use super::seeds::{SeedsRun, SEEDS_PYTHON_REFERENCE_RATE};
use super::{BenchError, Options};
use hitcount::edge::workload::Workload;

/// Where the figures come from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// CPU model from /proc/cpuinfo.
    pub cpu: String,
    /// Redis version.
    pub redis: String,
}

impl Machine {
    /// This machine's CPUs and the version of the Redis behind `conn`.
    pub async fn detect(conn: &mut Conn) -> Result<Machine, BenchError> {
        let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
        let redis = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_string();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_else(|| "?".into());
        Ok(Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            redis,
        })
    }
}

/// One workload and worker count.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    /// The workload.
    pub workload: Workload,
    /// Workers, and consumers of the ceiling.
    pub workers: usize,
    /// The bare consumers.
    pub ceiling: Drained,
    /// The real workers.
    pub hitcount: WorkerRun,
    /// How Redis encoded the counter hashes: `listpack` (its default
    /// `hash-max-listpack-entries`) or `hashtable` (set low for the run).
    pub hashes: &'static str,
}

impl Run {
    /// A run of the product bench, its counter hashes encoded as `hashes`.
    fn of(run: super::product::Run, hashes: &'static str) -> Run {
        Run {
            workload: run.workload,
            workers: run.workers,
            ceiling: run.ceiling,
            hitcount: run.hitcount,
            hashes,
        }
    }
}

/// Everything measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// Entries per workload.
    pub entries: u64,
    /// Worker flags beyond the defaults.
    pub worker_args: Vec<String>,
    /// Ceiling and hitcount runs.
    pub runs: Vec<Run>,
    /// The seeds' way per workload.
    pub seeds: Vec<(Workload, SeedsRun)>,
    /// XADD-to-visible delay.
    pub latency: Option<Delay>,
    /// The producer library's rate.
    pub producer: Option<ProducerRate>,
    /// The memory check on a long backlog.
    pub backlog: Option<WorkerRun>,
    /// The one-worker run of 1,000 hot names with a value on every hit.
    pub values: Option<WorkerRun>,
    /// SLOWLOG entries (over 10 ms on the bench's own server) after the run.
    pub slowlog: Vec<String>,
    /// The nice value the bench gave its own Redis' command thread (`None`:
    /// left as it was: a Redis of the user's, or not root). SLOWLOG counts
    /// wall time: at the default priority on a machine whose cores the
    /// workers share it also counts time Redis waited for a core.
    pub redis_nice: Option<i32>,
    /// Bytes of a counter hash of 120 samples per encoding (`MEMORY USAGE`).
    pub hash_bytes: Vec<(String, u64)>,
}

impl Report {
    /// A report for this machine and Redis, of the product bench's
    /// `drains` (listpack counters: Redis' default).
    pub async fn new(
        conn: &mut Conn,
        opts: &Options,
        drains: Drains,
    ) -> Result<Report, BenchError> {
        let runs = drains
            .runs
            .into_iter()
            .map(|r| Run::of(r, "listpack"))
            .collect();
        Ok(Report {
            machine: Machine::detect(conn).await?,
            entries: opts.entries,
            worker_args: opts.worker_args.clone(),
            runs,
            seeds: Vec::new(),
            latency: None,
            producer: None,
            backlog: None,
            values: drains.values,
            slowlog: Vec::new(),
            redis_nice: None,
            hash_bytes: Vec::new(),
        })
    }

    /// Adds the one-worker run with hash-table counters (the product
    /// bench's run with `hash-max-listpack-entries` set low), against the
    /// ceiling of its listpack run.
    pub fn add_hashtable_run(&mut self, drains: Drains) {
        for run in drains.runs {
            let ceiling = self
                .runs
                .iter()
                .find(|r| r.workload == run.workload && r.workers == run.workers)
                .map(|r| r.ceiling);
            let mut run = Run::of(run, "hashtable");
            if let Some(ceiling) = ceiling {
                run.ceiling = ceiling;
            }
            self.runs.push(run);
        }
    }

    /// Adds the seeds' way of a workload.
    pub fn add_seeds(&mut self, workload: Workload, run: SeedsRun) {
        self.seeds.push((workload, run));
    }

    /// The rate of the latency probe's steady load: half the first
    /// workload's one-worker hitcount rate (or its first run's).
    pub fn latency_rate(&self) -> f64 {
        let first = self
            .runs
            .iter()
            .find(|r| r.workers == 1)
            .or(self.runs.first());
        first.map_or(10_000.0, |r| r.hitcount.drained.rate() / 2.0)
    }

    /// SLOWLOG entries in all (the summary lines hold `×N`).
    pub fn slowlog_entries(&self) -> usize {
        self.slowlog
            .iter()
            .filter_map(|l| {
                l.split_once('×')?
                    .1
                    .split(' ')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .sum()
    }

    fn seeds_rate(&self, workload: Workload) -> Option<f64> {
        self.seeds
            .iter()
            .find(|(w, _)| *w == workload)
            .map(|(_, s)| s.rate())
    }

    /// The Markdown table and the lines under it.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let _ = writeln!(
            out,
            "{} entries per workload; {} CPUs ({}); Redis {}{}\n",
            self.entries,
            m.cpus,
            m.cpu,
            m.redis,
            if self.worker_args.is_empty() {
                String::new()
            } else {
                format!("; worker flags: {}", self.worker_args.join(" "))
            }
        );
        out.push_str("| workload | W | counter hashes | ceiling (entries/s) | Redis CPU µs per entry, ceiling | hitcount (hits/s) | hitcount / ceiling | Redis CPU µs per hit | cells per hit | Redis commands per hit | seeds' way in Rust (hits/s) | hitcount / seeds' Rust | worker peak RSS |\n");
        out.push_str(
            "| --- | --: | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |\n",
        );
        for r in &self.runs {
            let h = r.hitcount.drained.rate();
            let seeds = self.seeds_rate(r.workload);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.2} | {} | {:.0} % | {:.2} | {:.3} | {:.3} | {} | {} | {:.1} MiB |",
                r.workload.label(),
                r.workers,
                r.hashes,
                thousands(r.ceiling.rate()),
                r.ceiling.redis_cpu_us(),
                thousands(h),
                100.0 * h / r.ceiling.rate(),
                r.hitcount.drained.redis_cpu_us(),
                r.hitcount.cells_per_hit,
                r.hitcount.commands_per_hit,
                seeds.map_or("–".into(), thousands),
                seeds.map_or("–".into(), |s| format!("{:.0}×", h / s)),
                r.hitcount.peak_rss_mib,
            );
        }
        out.push('\n');
        if let Some(d) = &self.latency {
            let _ = writeln!(
                out,
                "- XADD-to-visible at {} hits/s (half the one-worker rate), {} probes: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
                thousands(d.rate), d.probes, d.p50_ms, d.p99_ms, d.max_ms
            );
        }
        if let Some(p) = &self.producer {
            let _ = writeln!(
                out,
                "- producer, one process, {} hits: `hit()` {} calls/s, delivered {} hits/s, dropped {}, in the stream {}",
                p.hits, thousands(p.calls_per_sec), thousands(p.delivered_per_sec), p.dropped, p.in_stream
            );
        }
        let plain = self
            .runs
            .iter()
            .find(|r| r.workload == Workload::Hot && r.workers == 1 && r.hashes == "listpack");
        if let (Some(v), Some(p)) = (&self.values, plain) {
            let p = &p.hitcount;
            let _ = writeln!(
                out,
                "- every hit with a value (1,000 hot names, one worker, statistics at every precision, \
                 histograms at 60/3600/86400 s): {} hits/s, {:.2} µs Redis CPU per hit, {:.3} Redis \
                 commands per hit; the same hits without a value: {} hits/s, {:.2} µs, {:.3}",
                thousands(v.drained.rate()),
                v.drained.redis_cpu_us(),
                v.commands_per_hit,
                thousands(p.drained.rate()),
                p.drained.redis_cpu_us(),
                p.commands_per_hit
            );
        }
        if let Some(b) = &self.backlog {
            let _ = writeln!(
                out,
                "- backlog of {} entries (1,000 hot names), one worker: {} hits/s, peak RSS {:.1} MiB, counted exactly",
                b.drained.entries,
                thousands(b.drained.rate()),
                b.peak_rss_mib
            );
        }
        if !self.hash_bytes.is_empty() {
            let sizes: Vec<String> = self
                .hash_bytes
                .iter()
                .map(|(encoding, bytes)| {
                    format!("{} bytes as {encoding}", thousands(*bytes as f64))
                })
                .collect();
            let _ = writeln!(
                out,
                "- memory per counter hash of 120 samples (MEMORY USAGE): {}",
                sizes.join(", ")
            );
        }
        let _ = writeln!(
            out,
            "- SLOWLOG (10 ms) entries after the run: {}{}; {}",
            self.slowlog_entries(),
            if self.slowlog.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.slowlog.join("; "))
            },
            match self.redis_nice {
                Some(n) => format!("Redis' command thread ran at nice {n}, ahead of the workers"),
                None => "Redis ran at its own priority (SLOWLOG counts wall time: on cores \
                         shared with the workers, time waiting for a core too)"
                    .into(),
            }
        );
        let _ = writeln!(
            out,
            "- not measured in this run, for reference only: the seeds' Python code reached about {} hits/s \
             when measured once, separately, on a 2-CPU machine",
            thousands(SEEDS_PYTHON_REFERENCE_RATE)
        );
        out
    }
}

/// 123456.7 → "123,457".
pub fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let groups: Vec<&str> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .filter_map(|g| std::str::from_utf8(g).ok())
        .collect();
    let sign = if n < 0 { "-" } else { "" };
    format!("{sign}{}", groups.join(","))
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_groups_digits() {
        assert_eq!(super::thousands(1234567.4), "1,234,567");
        assert_eq!(super::thousands(999.0), "999");
        assert_eq!(super::thousands(-1000.0), "-1,000");
    }
}
