//! The figures of `hitcount bench` and their table (Markdown). `--json`
//! prints the [`Report`] itself, the form the lab reads.

use std::fmt::Write;

use super::ceiling::Drained;
use super::workers::WorkerRun;
use crate::edge::workload::Workload;

/// One workload and worker count.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Run {
    /// The workload.
    pub workload: Workload,
    /// Workers, and consumers of the ceiling.
    pub workers: usize,
    /// The bare consumers.
    pub ceiling: Drained,
    /// The real workers.
    pub hitcount: WorkerRun,
}

/// Everything measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Report {
    /// Entries per workload.
    pub entries: u64,
    /// Worker flags beyond the defaults.
    pub worker_args: Vec<String>,
    /// Every hit of every workload had a value (`--values`).
    pub all_valued: bool,
    /// Ceiling and hitcount runs.
    pub runs: Vec<Run>,
    /// The one-worker run of 1,000 hot names with a value on every hit.
    pub values: Option<WorkerRun>,
    /// The nice value given to the throwaway Redis (`None`: left as it was:
    /// a Redis of the user's, or not allowed).
    pub redis_nice: Option<i32>,
}

impl Report {
    /// The Markdown table and the lines under it.
    pub(crate) fn table(&self) -> String {
        let mut out = format!("{} entries per workload", self.entries);
        if self.all_valued {
            out.push_str(", every hit with a value");
        }
        if !self.worker_args.is_empty() {
            let _ = write!(out, "; worker flags: {}", self.worker_args.join(" "));
        }
        out.push_str("\n\n| workload | workers | ceiling (entries/s) | Redis CPU µs per entry, ceiling | hitcount (hits/s) | hitcount / ceiling | Redis CPU µs per hit | cells per hit | Redis commands per hit | worker peak RSS |\n");
        out.push_str("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |\n");
        for r in &self.runs {
            let h = r.hitcount.drained.rate();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.2} | {} | {:.0} % | {:.2} | {:.3} | {:.3} | {:.1} MiB |",
                r.workload.label(),
                r.workers,
                thousands(r.ceiling.rate()),
                r.ceiling.redis_cpu_us(),
                thousands(h),
                100.0 * h / r.ceiling.rate(),
                r.hitcount.drained.redis_cpu_us(),
                r.hitcount.cells_per_hit,
                r.hitcount.commands_per_hit,
                r.hitcount.peak_rss_mib,
            );
        }
        if let Some(v) = &self.values {
            let _ = writeln!(
                out,
                "\n- every hit with a value (1,000 hot names, one worker): {} hits/s, {:.2} µs Redis CPU per hit, {:.3} cells and {:.3} Redis commands per hit, peak RSS {:.1} MiB",
                thousands(v.drained.rate()),
                v.drained.redis_cpu_us(),
                v.cells_per_hit,
                v.commands_per_hit,
                v.peak_rss_mib
            );
        }
        out.push_str(
            "\nRedis CPU per hit by command (a script's time holds the commands it runs, \
             listed too), with calls per hit:\n",
        );
        let named = self.runs.iter().map(|r| {
            let label = format!("{}, {} worker(s)", r.workload.label(), r.workers);
            (label, &r.hitcount)
        });
        let valued = self
            .values
            .iter()
            .map(|v| ("every hit with a value".into(), v));
        for (label, run) in named.chain(valued) {
            let top: Vec<String> = run
                .by_command
                .iter()
                .take(TOP_COMMANDS)
                .map(|c| {
                    format!(
                        "{} {:.2} µs ({:.3})",
                        c.command, c.usec_per_hit, c.calls_per_hit
                    )
                })
                .collect();
            let _ = writeln!(out, "- {label}: {}", top.join(", "));
        }
        if let Some(n) = self.redis_nice {
            let _ = writeln!(
                out,
                "- the throwaway Redis ran at nice {n}, ahead of the workers"
            );
        }
        out
    }
}

/// Commands listed per run in the breakdown under the table.
const TOP_COMMANDS: usize = 6;

/// 123456.7 → "123,457".
pub(crate) fn thousands(x: f64) -> String {
    format!("{:.0}", indicatif::HumanFloatCount(x.round()))
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
