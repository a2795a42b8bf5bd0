//! How a worker reads, windows, recovers and stops ([`WorkerArgs`]), and
//! its consumer name.

use std::time::Duration;

use clap::Args;

use super::{invalid, plain_name, ConfigError, Whole, ADVANCED};

/// Longest wait for replicas' confirmation of one step, in ms: a master left
/// without a replica slows each window by about this much, never stops it.
pub(crate) const WAIT_TIMEOUT_MS: u64 = 100;

// Each whole-number setting and its accepted values, read by its parser and
// by [`WorkerArgs::validate`] (for settings given in code) alike.
/// Accepted `--read-count`: bigger reads hold Redis over 10 ms.
const READ_COUNT: Whole = Whole::new("--read-count / HITCOUNT_READ_COUNT", 1, 5000);
/// Accepted `--block-ms`: Redis reads a BLOCK of 0 as "for ever".
const BLOCK_MS: Whole = Whole::new("--block-ms / HITCOUNT_BLOCK_MS", 1, 300_000);
/// The shortest wait of an idle read, whatever `--shutdown-timeout` (see
/// [`WorkerArgs::block_ms`]).
const MIN_BLOCK_MS: u64 = 250;
/// Accepted `--window-entries`.
const WINDOW_ENTRIES: Whole =
    Whole::new("--window-entries / HITCOUNT_WINDOW_ENTRIES", 1, 10_000_000);
/// Accepted `--window-cells`.
const WINDOW_CELLS: Whole = Whole::new("--window-cells / HITCOUNT_WINDOW_CELLS", 1, 10_000_000);
/// Accepted `--window-ms`.
const WINDOW_MS: Whole = Whole::new("--window-ms / HITCOUNT_WINDOW_MS", 1, 60_000);
/// Accepted `--carry-ms`; 0 turns the carry off.
const CARRY_MS: Whole = Whole::new("--carry-ms / HITCOUNT_CARRY_MS", 0, 3_600_000);
/// Accepted `--carry-cells`; 0 turns the carry off.
const CARRY_CELLS: Whole = Whole::new("--carry-cells / HITCOUNT_CARRY_CELLS", 0, 100_000_000);
/// Accepted `--claim-idle-ms`: under 1 s, live workers would steal each other's entries.
const CLAIM_IDLE_MS: Whole =
    Whole::new("--claim-idle-ms / HITCOUNT_CLAIM_IDLE_MS", 1000, 86_400_000);
/// Accepted `--max-deliveries`.
const MAX_DELIVERIES: Whole = Whole::new("--max-deliveries / HITCOUNT_MAX_DELIVERIES", 1, 1000);
/// Accepted `--consumer-idle-ms`: up to 30 days.
const CONSUMER_IDLE_MS: Whole = Whole::new(
    "--consumer-idle-ms / HITCOUNT_CONSUMER_IDLE_MS",
    1000,
    2_592_000_000,
);
/// Accepted `--shutdown-timeout`, in seconds.
const SHUTDOWN_TIMEOUT: Whole =
    Whole::new("--shutdown-timeout / HITCOUNT_SHUTDOWN_TIMEOUT", 0, 3600);
/// Accepted `--wait-replicas`.
const WAIT_REPLICAS: Whole = Whole::new("--wait-replicas / HITCOUNT_WAIT_REPLICAS", 0, 16);

/// How a worker reads, windows, recovers and stops.
#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// Consumer name in the group; default: the pod name (POD_NAME), else
    /// HOST-PID-RANDOM, unique to this process. A second worker started
    /// under the name of a live one is refused.
    #[arg(long, env = "HITCOUNT_CONSUMER")]
    pub consumer: Option<String>,
    /// Entries per XREADGROUP (COUNT), 1..=5000. Redis spends about 1.4 µs
    /// per entry read, so 1000 keeps every read near 1.5 ms.
    #[arg(long, env = "HITCOUNT_READ_COUNT", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 1000, value_parser = READ_COUNT.parser::<usize>())]
    pub read_count: usize,
    /// Longest wait for new entries in one read (XREADGROUP BLOCK), in ms,
    /// 1..=300000 (Redis reads 0 as "for ever"), a window's wait to close
    /// included; at most a quarter of --shutdown-timeout (250 ms at least),
    /// so that a worker waiting on an idle stream stops within it.
    #[arg(long, env = "HITCOUNT_BLOCK_MS", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 2000, value_parser = BLOCK_MS.parser::<u64>())]
    pub block_ms: u64,
    /// A window is applied once it holds this many entries (1..=10000000). Each window
    /// costs one HINCRBY per (precision, name, bucket) it touches, so on
    /// 1,000 hot names a 100,000-entry window costs ~0.07 HINCRBY per hit
    /// (the layout's floor is 7 per name per window). Windows reach it only
    /// while the worker is behind (reads come back full of entries older
    /// than `--window-ms`); at the stream's head `--window-ms` closes them
    /// first. About 2 MB of entry ids per window.
    #[arg(long, env = "HITCOUNT_WINDOW_ENTRIES", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 100_000, value_parser = WINDOW_ENTRIES.parser::<usize>())]
    pub window_entries: usize,
    /// ...or this many distinct (precision, name, bucket) cells (1..=10000000): many names
    /// (Zipf over 100,000) make cells, not entries, the bound. Larger cell
    /// windows barely cut HINCRBYs per hit there (most names of the tail
    /// appear once per window anyway) and cost ~0.5 KiB of worker memory per
    /// cell while applying, so 40,000 keeps a worker near 40 MiB. A cell of
    /// statistics (hits with a value) counts 3, plus 1 per 4 histogram entries.
    #[arg(long, env = "HITCOUNT_WINDOW_CELLS", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 40_000, value_parser = WINDOW_CELLS.parser::<usize>())]
    pub window_cells: usize,
    /// ...or once its oldest entry was read this many ms ago, when the
    /// worker is at the stream's head (its last read came back short, or
    /// its entries are younger than this): the bound on how late counters
    /// are, plus one apply. While the worker is behind the window may grow
    /// to ten times this age. 1..=60000.
    #[arg(long, env = "HITCOUNT_WINDOW_MS", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 100, value_parser = WINDOW_MS.parser::<u64>())]
    pub window_ms: u64,
    // Default 2 s: sums of that age cost Redis far fewer HINCRBYs on skewed
    // traffic (see crate::model::carry). 3 s drained a 1 M-entry Zipf backlog
    // with a third less Redis CPU (one sum instead of two) but took a 5 M-entry
    // backlog of hot names from 50 to 77 MiB of peak RSS.
    /// While behind, a window's count cells wait this long (ms), summed
    /// with the next windows', before they are applied (fewer HINCRBYs); a
    /// sum that comes of age when the rest of the stream would be read
    /// within as long again waits for the head, at most that long more; at
    /// the stream's head and at shutdown they are applied at once.
    /// 0..=3600000; 0 applies every window whole. A wait longer than a quarter of
    /// --claim-idle-ms is cut to that quarter, with a warning at start.
    #[arg(long, env = "HITCOUNT_CARRY_MS", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 2000, value_parser = CARRY_MS.parser::<u64>())]
    pub carry_ms: u64,
    // Default 1,000,000: about 100 bytes each in the worker while they wait,
    // applied a few dozen chunks at a time. On a 1 M-entry Zipf backlog
    // (`hitcount bench`) fewer, larger sums cost Redis less per hit, at about
    // the same peak RSS: the carry's entries went from text to 2 bytes an id
    // (crate::model::ids), which let it hold enough of them to fill 1,000,000
    // cells (500,000 entries capped it before).
    /// The carry is applied once it sums this many distinct cells, a
    /// statistics cell weighing three times what it weighs in a window
    /// (more cells: fewer HINCRBYs on many names, more worker memory),
    /// 0..=100000000; 0 applies every window whole. With stream shards a
    /// process' shards go in together once they hold this many between
    /// them.
    #[arg(long, env = "HITCOUNT_CARRY_CELLS", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 1_000_000, value_parser = CARRY_CELLS.parser::<usize>())]
    pub carry_cells: usize,
    /// Entries pending longer than this (ms) on another consumer are
    /// claimed, 1000..=86400000 (under 1 s live workers would steal each
    /// other's entries).
    #[arg(long, env = "HITCOUNT_CLAIM_IDLE_MS", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 30_000, value_parser = CLAIM_IDLE_MS.parser::<u64>())]
    pub claim_idle_ms: u64,
    /// An entry delivered more than this many times without being applied is
    /// dead-lettered, 1..=1000.
    #[arg(long, env = "HITCOUNT_MAX_DELIVERIES", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 5, value_parser = MAX_DELIVERIES.parser::<u32>())]
    pub max_deliveries: u32,
    /// Consumers idle this long (ms) that own no pending entry leave the
    /// group, 1000..=2592000000 (30 days).
    #[arg(long, env = "HITCOUNT_CONSUMER_IDLE_MS", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 3_600_000, value_parser = CONSUMER_IDLE_MS.parser::<u64>())]
    pub consumer_idle_ms: u64,
    /// Seconds to finish the window in flight after SIGTERM before exiting
    /// anyway (Kubernetes' grace period is 30 s), 0..=3600; 0 exits at once,
    /// leaving the window's entries pending for another worker to claim
    /// (what is not applied by then, a sum being applied too, likewise).
    /// Whatever Redis does, the process exits 2 s after it (status 1).
    #[arg(long = "shutdown-timeout", env = "HITCOUNT_SHUTDOWN_TIMEOUT",
          default_value_t = 20, value_parser = SHUTDOWN_TIMEOUT.parser::<u64>())]
    pub shutdown_timeout_secs: u64,
    // Default one, so a master's failover loses no step whose next one ran.
    /// On a Redis Cluster, replicas that must confirm each step of a window
    /// (its commit, each apply) before the next runs (WAIT 100 ms, repeated
    /// up to 2 s while an attached replica is behind; a master with none
    /// attached is not waited for longer), 0..=16; 0 does not wait.
    /// Unused on one Redis.
    #[arg(long, env = "HITCOUNT_WAIT_REPLICAS", help_heading = ADVANCED, hide_short_help = true,
          default_value_t = 1, value_parser = WAIT_REPLICAS.parser::<u32>())]
    pub wait_replicas: u32,
}

impl WorkerArgs {
    /// How long cells may wait in the carry: `--carry-ms`, at most a
    /// quarter of `--claim-idle-ms` (other workers finish windows recorded
    /// longer ago than that, which would end the carry); `None` when off
    /// (`--carry-ms` or `--carry-cells` 0).
    pub(crate) fn carry_age(&self) -> Option<Duration> {
        let ms = self.carry_ms.min(self.claim_idle_ms / 4);
        (ms > 0 && self.carry_cells > 0).then(|| Duration::from_millis(ms))
    }

    /// How long a read waits for new entries when idle: `--block-ms`, at
    /// most a quarter of `--shutdown-timeout` and at least [`MIN_BLOCK_MS`]
    /// (a read under way holds up the stop that SIGTERM asks for).
    pub(crate) fn block_ms(&self) -> u64 {
        self.block_ms.min(self.block_cap_ms())
    }

    fn block_cap_ms(&self) -> u64 {
        (self.shutdown_timeout_secs * 250).max(MIN_BLOCK_MS)
    }

    /// When `--block-ms` is longer than [`Self::block_ms`] lets a read wait,
    /// what to warn of at start.
    pub(crate) fn block_cut(&self) -> Option<String> {
        let cap = self.block_cap_ms();
        (self.block_ms > cap).then(|| {
            format!(
                "--block-ms / HITCOUNT_BLOCK_MS is {} ms, more than a quarter of \
                 --shutdown-timeout ({} s): reads wait at most {cap} ms, so that the worker \
                 stops within its shutdown timeout",
                self.block_ms, self.shutdown_timeout_secs
            )
        })
    }

    /// The consumer name: the flag (`HITCOUNT_CONSUMER`), else the pod's name
    /// (`POD_NAME`), else a name unique to this process: host name, process
    /// id and a random suffix. Two live workers must never share a name (the
    /// exactly-once fence is per consumer), so the default never repeats; a
    /// stable name is still better where there is one, since a restarted pod
    /// then resumes its own pending entries at once.
    pub(crate) fn consumer_name(&self) -> String {
        self.consumer_name_with(pod_name())
    }

    /// [`Self::consumer_name`] with `pod` as the pod's name.
    fn consumer_name_with(&self, pod: Option<String>) -> String {
        [self.consumer.clone(), pod]
            .into_iter()
            .flatten()
            .find(|name| !name.is_empty())
            .unwrap_or_else(unique_consumer_name)
    }

    /// Checks the settings: each whole number in its range (the command
    /// line's parser refuses the rest already; a struct built in code has
    /// not met it) and the consumer name, from `--consumer` or, when that is
    /// not set, from `POD_NAME` (named as such when it is the one refused).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_with(pod_name().as_deref())
    }

    /// [`Self::validate`] with `pod` as the pod's name.
    fn validate_with(&self, pod: Option<&str>) -> Result<(), ConfigError> {
        READ_COUNT.check(self.read_count)?;
        BLOCK_MS.check(self.block_ms)?;
        WINDOW_ENTRIES.check(self.window_entries)?;
        WINDOW_CELLS.check(self.window_cells)?;
        WINDOW_MS.check(self.window_ms)?;
        CARRY_MS.check(self.carry_ms)?;
        CARRY_CELLS.check(self.carry_cells)?;
        CLAIM_IDLE_MS.check(self.claim_idle_ms)?;
        MAX_DELIVERIES.check(self.max_deliveries)?;
        CONSUMER_IDLE_MS.check(self.consumer_idle_ms)?;
        SHUTDOWN_TIMEOUT.check(self.shutdown_timeout_secs)?;
        WAIT_REPLICAS.check(self.wait_replicas)?;
        match (self.consumer.as_deref(), pod) {
            (Some(""), _) => Err(invalid(
                "--consumer / HITCOUNT_CONSUMER",
                "must not be empty: leave it unset for a name of the pod's or the process'",
            )),
            (Some(consumer), _) => plain_name("--consumer / HITCOUNT_CONSUMER", consumer),
            // An empty POD_NAME is as good as none: the process' own name.
            (None, Some(pod)) if !pod.is_empty() => plain_name(
                "POD_NAME (the consumer name, as --consumer / HITCOUNT_CONSUMER is not set)",
                pod,
            ),
            (None, _) => Ok(()),
        }
    }

    /// When `--carry-ms` is longer than [`Self::carry_age`] lets cells wait
    /// (a quarter of `--claim-idle-ms`), what to warn of at start.
    pub(crate) fn carry_cut(&self) -> Option<String> {
        let quarter = self.claim_idle_ms / 4;
        (self.carry_cells > 0 && self.carry_ms > quarter).then(|| {
            format!(
                "--carry-ms / HITCOUNT_CARRY_MS is {} ms, more than a quarter of \
                 --claim-idle-ms ({} ms): cells wait at most {quarter} ms (other workers \
                 finish windows recorded longer ago than that)",
                self.carry_ms, self.claim_idle_ms
            )
        })
    }

    /// `shutdown_timeout_secs` as a duration.
    pub(crate) fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout_secs)
    }
}

/// The pod's name (`POD_NAME`), the consumer name when `--consumer` is not
/// set; `None` when unset or not UTF-8.
fn pod_name() -> Option<String> {
    std::env::var("POD_NAME").ok()
}

/// `HOST-PID-RANDOM`: a consumer name no other process uses.
fn unique_consumer_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "hitcount".to_string());
    format!(
        "{host}-{}-{:06x}",
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_defaults_match_default() {
        crate::model::config::tests::assert_clap_defaults::<WorkerArgs>();
    }

    #[test]
    fn consumer_flag_wins() {
        let w = WorkerArgs {
            consumer: Some("pod-1".into()),
            ..WorkerArgs::default()
        };
        assert_eq!(w.consumer_name(), "pod-1");
    }

    /// A consumer name taken from POD_NAME meets the rule of
    /// `--consumer`'s, and a refusal names POD_NAME, not the flag that was
    /// never set; `--consumer` wins over it, and an empty one is none.
    #[test]
    fn a_consumer_name_from_pod_name_is_checked_and_named() {
        let unset = WorkerArgs::default();
        let err = unset.validate_with(Some("pod\nx")).unwrap_err().to_string();
        assert!(err.starts_with("invalid POD_NAME "), "{err}");
        assert!(err.contains("control characters"), "{err}");
        assert!(unset.validate_with(Some(" pod")).is_err());
        unset.validate_with(Some("pod-1")).unwrap();
        unset.validate_with(Some("")).unwrap();
        assert_eq!(unset.consumer_name_with(Some("pod-1".into())), "pod-1");
        assert_ne!(unset.consumer_name_with(Some(String::new())), "");
        let flag = WorkerArgs {
            consumer: Some("w1".into()),
            ..WorkerArgs::default()
        };
        flag.validate_with(Some("pod\nx")).unwrap();
        assert_eq!(flag.consumer_name_with(Some("pod\nx".into())), "w1");
        let bad_flag = WorkerArgs {
            consumer: Some("w1\n".into()),
            ..WorkerArgs::default()
        };
        let err = bad_flag.validate_with(None).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid --consumer / HITCOUNT_CONSUMER: "),
            "{err}"
        );
    }

    #[test]
    fn default_consumer_names_never_repeat() {
        // Without a name (and no POD_NAME in the test environment), two
        // workers of one process, or of one host, get different names.
        if std::env::var_os("POD_NAME").is_none() {
            let a = WorkerArgs::default().consumer_name();
            let b = WorkerArgs::default().consumer_name();
            assert_ne!(a, b);
            assert!(a.contains(&format!("-{}-", std::process::id())), "{a}");
        }
    }

    #[test]
    fn settings_given_in_code_meet_the_parsers_ranges() {
        WorkerArgs::default().validate().unwrap();
        for (w, setting) in [
            (
                WorkerArgs {
                    read_count: 5001,
                    ..WorkerArgs::default()
                },
                "HITCOUNT_READ_COUNT",
            ),
            (
                WorkerArgs {
                    carry_ms: 3_600_001,
                    ..WorkerArgs::default()
                },
                "HITCOUNT_CARRY_MS",
            ),
            (
                WorkerArgs {
                    wait_replicas: 17,
                    ..WorkerArgs::default()
                },
                "HITCOUNT_WAIT_REPLICAS",
            ),
            (
                WorkerArgs {
                    claim_idle_ms: 999,
                    ..WorkerArgs::default()
                },
                "HITCOUNT_CLAIM_IDLE_MS",
            ),
        ] {
            let err = w.validate().unwrap_err().to_string();
            assert!(err.contains(setting) && err.contains("is not in"), "{err}");
        }
    }

    #[test]
    fn block_ms_zero_is_refused() {
        let w = WorkerArgs {
            block_ms: 0,
            ..WorkerArgs::default()
        };
        let err = w.validate().unwrap_err().to_string();
        assert!(err.contains("HITCOUNT_BLOCK_MS"), "{err}");
    }

    #[test]
    fn an_idle_read_waits_at_most_a_quarter_of_the_shutdown_timeout() {
        let w = |block_ms, shutdown_timeout_secs| WorkerArgs {
            block_ms,
            shutdown_timeout_secs,
            ..WorkerArgs::default()
        };
        // The defaults: 2 s, under a quarter of 20 s.
        assert_eq!(WorkerArgs::default().block_ms(), 2000);
        assert_eq!(WorkerArgs::default().block_cut(), None);
        assert_eq!(w(300_000, 20).block_ms(), 5000);
        assert_eq!(w(300_000, 2).block_ms(), 500);
        assert_eq!(w(5000, 20).block_cut(), None);
        // No shutdown timeout: still a wait, not a busy loop.
        assert_eq!(w(2000, 0).block_ms(), MIN_BLOCK_MS);
        let cut = w(60_000, 2).block_cut().unwrap();
        assert!(cut.contains("reads wait at most 500 ms"), "{cut}");
    }
}
