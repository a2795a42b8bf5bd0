//! What one `hitcount bench --cluster` runs: the workloads, worker counts,
//! shards and rounds. Its own module because both the runner
//! ([`super::scaling`]) and the report that echoes them
//! ([`super::scaling_report`]) read them, and neither may import the other.

use hitcount::edge::workload::Workload;

/// What to run.
#[derive(Debug, Clone)]
pub struct ScalingOptions {
    /// The `hitcount` binary whose workers run.
    pub hitcount: std::path::PathBuf,
    /// Hits per workload.
    pub entries: u64,
    /// Worker counts.
    pub workers: Vec<usize>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Stream shards on the cluster.
    pub shards: u32,
    /// Extra flags for every worker.
    pub worker_args: Vec<String>,
    /// Steady state instead of a cold start: see [`super::drain::drain_warm`].
    pub warm: bool,
    /// Times every workload and worker count is drained, one Redis and the
    /// cluster side by side each time; the goals are judged on the median
    /// ([`super::scaling_verdict::Verdict`]). At least 1.
    pub rounds: usize,
}
