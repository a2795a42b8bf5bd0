//! Every setting of hitcount: its flag, its environment variable, its default
//! and its validation.
//!
//! The environment variable names are a contract (deployments set them), so
//! they are spelled out here once and documented in the README. Each group of
//! settings is a `clap::Args` struct that the subcommands flatten, so a
//! setting means the same thing for `worker`, `get`, `clean` or `status`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Default Redis URL when `REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// The seeds' precisions: 1 s, 5 s, 1 min, 5 min, 1 h, 5 h, 1 day.
pub const DEFAULT_PRECISIONS: [u32; 7] = [1, 5, 60, 300, 3600, 18000, 86400];
/// [`DEFAULT_PRECISIONS`] as `--precisions` takes and `--help` shows them
/// (a test checks that the two agree).
pub const DEFAULT_PRECISIONS_FLAG: &str = "1,5,60,300,3600,18000,86400";

/// Errors in the configuration: fatal, reported at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A setting has a value hitcount cannot work with.
    #[error("invalid {setting}: {reason}")]
    Invalid {
        /// The flag and environment variable, e.g. `--precisions / HITCOUNT_PRECISIONS`.
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A TLS file could not be read.
    #[error("cannot read {what} file {path}: {source}")]
    TlsFile {
        /// Which file (CA, certificate, key).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// How to reach Redis.
#[derive(Args, Debug, Clone)]
pub struct RedisArgs {
    /// Redis URL: redis://[user:password@]host:port[/db] or rediss:// for TLS.
    /// The password is never logged.
    #[arg(long = "redis-url", env = "REDIS_URL", default_value = DEFAULT_REDIS_URL, hide_env_values = true)]
    pub url: String,
    /// PEM file of the CA that signed the server's certificate (rediss:// only;
    /// default: the system's roots).
    #[arg(long = "redis-ca", env = "HITCOUNT_REDIS_CA")]
    pub ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --redis-key).
    #[arg(long = "redis-cert", env = "HITCOUNT_REDIS_CERT", requires = "key")]
    pub cert: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long = "redis-key", env = "HITCOUNT_REDIS_KEY", requires = "cert")]
    pub key: Option<PathBuf>,
}

impl Default for RedisArgs {
    fn default() -> Self {
        RedisArgs::from_url(DEFAULT_REDIS_URL)
    }
}

impl RedisArgs {
    /// Settings for a plain URL, no TLS files.
    pub fn from_url(url: &str) -> Self {
        RedisArgs {
            url: url.to_string(),
            ca: None,
            cert: None,
            key: None,
        }
    }
}

/// The counter layout: where counters live and at which precisions.
#[derive(Args, Debug, Clone)]
pub struct LayoutArgs {
    /// Prefix of every counter key (`known:`, `count:*`) and of hitcount's
    /// own bookkeeping keys, e.g. `app1:`. Empty by default.
    #[arg(long, env = "HITCOUNT_PREFIX", default_value = "")]
    pub prefix: String,
    /// Precisions in seconds, comma separated.
    #[arg(long, env = "HITCOUNT_PRECISIONS", value_delimiter = ',', default_value = DEFAULT_PRECISIONS_FLAG)]
    pub precisions: Vec<u32>,
    /// Samples kept per counter: a sample whose bucket starts at or before
    /// now - SAMPLES * PRECISION is cleaned (and never written).
    #[arg(long, env = "HITCOUNT_SAMPLES", default_value_t = 120)]
    pub samples: u32,
}

impl Default for LayoutArgs {
    fn default() -> Self {
        LayoutArgs {
            prefix: String::new(),
            precisions: DEFAULT_PRECISIONS.to_vec(),
            samples: 120,
        }
    }
}

impl LayoutArgs {
    /// Checks the precisions and samples; sorts and dedups the precisions.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        let invalid = |reason: &str| ConfigError::Invalid {
            setting: "--precisions / HITCOUNT_PRECISIONS",
            reason: reason.to_string(),
        };
        if self.precisions.is_empty() {
            return Err(invalid("at least one precision is needed"));
        }
        if self.precisions.contains(&0) {
            return Err(invalid("a precision of 0 seconds is meaningless"));
        }
        self.precisions.sort_unstable();
        self.precisions.dedup();
        if self.samples == 0 {
            return Err(ConfigError::Invalid {
                setting: "--samples / HITCOUNT_SAMPLES",
                reason: "at least one sample must be kept".into(),
            });
        }
        Ok(())
    }
}

/// The stream, its consumer group and the dead-letter stream.
#[derive(Args, Debug, Clone)]
pub struct StreamArgs {
    /// Key of the stream the apps write hit events to.
    #[arg(long, env = "HITCOUNT_STREAM", default_value = "hits")]
    pub stream: String,
    /// Consumer group the workers share.
    #[arg(long, env = "HITCOUNT_GROUP", default_value = "hitcount")]
    pub group: String,
    /// Stream that receives entries that cannot be counted, with the reason.
    #[arg(
        long = "dead-stream",
        env = "HITCOUNT_DEAD_STREAM",
        default_value = "hits:dead"
    )]
    pub dead_stream: String,
    /// Approximate cap on the dead-letter stream's length (XADD MAXLEN ~).
    #[arg(
        long = "dead-maxlen",
        env = "HITCOUNT_DEAD_MAXLEN",
        default_value_t = 100_000
    )]
    pub dead_maxlen: u64,
}

impl Default for StreamArgs {
    fn default() -> Self {
        StreamArgs {
            stream: "hits".into(),
            group: "hitcount".into(),
            dead_stream: "hits:dead".into(),
            dead_maxlen: 100_000,
        }
    }
}

impl StreamArgs {
    /// Refuses empty names and a dead-letter stream equal to the stream
    /// (each dead letter would be read back and dead-lettered again, for ever).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let names = [
            ("--stream / HITCOUNT_STREAM", &self.stream),
            ("--group / HITCOUNT_GROUP", &self.group),
            ("--dead-stream / HITCOUNT_DEAD_STREAM", &self.dead_stream),
        ];
        for (setting, value) in names {
            if value.is_empty() {
                return Err(ConfigError::Invalid {
                    setting,
                    reason: "must not be empty".into(),
                });
            }
        }
        if self.dead_stream == self.stream {
            return Err(ConfigError::Invalid {
                setting: "--dead-stream / HITCOUNT_DEAD_STREAM",
                reason: format!(
                    "must differ from the stream ({}): dead letters would be read back and \
                     dead-lettered again for ever",
                    self.stream
                ),
            });
        }
        Ok(())
    }
}

/// The leader lease and the leader's duties (cleaning counters, trimming the
/// stream).
#[derive(Args, Debug, Clone)]
pub struct LeaderArgs {
    /// Key of the leader lease. The key prefix (HITCOUNT_PREFIX) is put in
    /// front of it, as for every other key: `app1:hitcount:leader`.
    #[arg(
        long = "leader-key",
        env = "HITCOUNT_LEADER_KEY",
        default_value = "hitcount:leader"
    )]
    pub leader_key: String,
    /// Length of the lease in ms. The leader renews it every third of this;
    /// if the leader dies, another worker takes over within about this long.
    #[arg(long = "lease-ms", env = "HITCOUNT_LEASE_MS", default_value_t = 15_000)]
    pub lease_ms: u64,
    /// Seconds between the starts of two cleaner passes (the seeds clean once
    /// a minute); a pass longer than this is followed by a 1 s pause.
    #[arg(
        long = "clean-interval",
        env = "HITCOUNT_CLEAN_INTERVAL",
        default_value_t = 60
    )]
    pub clean_interval_secs: u64,
}

impl Default for LeaderArgs {
    fn default() -> Self {
        LeaderArgs {
            leader_key: "hitcount:leader".into(),
            lease_ms: 15_000,
            clean_interval_secs: 60,
        }
    }
}

impl LeaderArgs {
    /// Shortest lease: a renewal (every third) must fit in a round trip with
    /// room to spare, even on a busy machine.
    pub const MIN_LEASE_MS: u64 = 300;

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_ms < Self::MIN_LEASE_MS {
            return Err(ConfigError::Invalid {
                setting: "--lease-ms / HITCOUNT_LEASE_MS",
                reason: format!("must be at least {} ms", Self::MIN_LEASE_MS),
            });
        }
        if self.clean_interval_secs == 0 {
            return Err(ConfigError::Invalid {
                setting: "--clean-interval / HITCOUNT_CLEAN_INTERVAL",
                reason: "must be at least 1 s".into(),
            });
        }
        if self.leader_key.is_empty() {
            return Err(ConfigError::Invalid {
                setting: "--leader-key / HITCOUNT_LEADER_KEY",
                reason: "must not be empty".into(),
            });
        }
        Ok(())
    }

    /// The lease length.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The time between two cleaner passes.
    pub fn clean_interval(&self) -> Duration {
        Duration::from_secs(self.clean_interval_secs)
    }
}

/// How a worker reads, windows, recovers and stops.
#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// Consumer name in the group; default: the pod name (POD_NAME), else
    /// HOST-PID-RANDOM, unique to this process. A second worker started
    /// under the name of a live one is refused.
    #[arg(long, env = "HITCOUNT_CONSUMER")]
    pub consumer: Option<String>,
    /// Entries per XREADGROUP (COUNT). Redis spends about 1.4 µs per entry
    /// read, so 1000 keeps every read near 1.5 ms.
    #[arg(
        long = "read-count",
        env = "HITCOUNT_READ_COUNT",
        default_value_t = 1000
    )]
    pub read_count: usize,
    /// Longest wait for new entries when idle (XREADGROUP BLOCK), in ms.
    #[arg(long = "block-ms", env = "HITCOUNT_BLOCK_MS", default_value_t = 2000)]
    pub block_ms: u64,
    /// A window is applied once it holds this many entries. Each window
    /// costs one HINCRBY per (precision, name, bucket) it touches, so on
    /// 1,000 hot names a 100,000-entry window costs ~0.07 HINCRBY per hit
    /// (the layout's floor is 7 per name per window). Windows reach it only
    /// while the worker is behind (reads come back full of entries older
    /// than `--window-ms`); at the stream's head `--window-ms` closes them
    /// first. About 2 MB of entry ids per window.
    #[arg(
        long = "window-entries",
        env = "HITCOUNT_WINDOW_ENTRIES",
        default_value_t = 100_000
    )]
    pub window_entries: usize,
    /// ...or this many distinct (precision, name, bucket) cells: many names
    /// (Zipf over 100,000) make cells, not entries, the bound. Larger cell
    /// windows barely cut HINCRBYs per hit there (most names of the tail
    /// appear once per window anyway) and cost ~0.5 KiB of worker memory per
    /// cell while applying, so 40,000 keeps a worker near 40 MiB.
    #[arg(
        long = "window-cells",
        env = "HITCOUNT_WINDOW_CELLS",
        default_value_t = 40_000
    )]
    pub window_cells: usize,
    /// ...or once its oldest entry was read this many ms ago, when the
    /// worker is at the stream's head (its last read came back short, or
    /// its entries are younger than this): the bound on how late counters
    /// are, plus one apply. While the worker is behind the window may grow
    /// to ten times this age.
    #[arg(long = "window-ms", env = "HITCOUNT_WINDOW_MS", default_value_t = 100)]
    pub window_ms: u64,
    /// Entries pending longer than this (ms) on another consumer are claimed.
    #[arg(
        long = "claim-idle-ms",
        env = "HITCOUNT_CLAIM_IDLE_MS",
        default_value_t = 30_000
    )]
    pub claim_idle_ms: u64,
    /// An entry delivered more than this many times without being applied is
    /// dead-lettered.
    #[arg(
        long = "max-deliveries",
        env = "HITCOUNT_MAX_DELIVERIES",
        default_value_t = 5
    )]
    pub max_deliveries: u32,
    /// Consumers idle this long (ms) that own no pending entry leave the group.
    #[arg(
        long = "consumer-idle-ms",
        env = "HITCOUNT_CONSUMER_IDLE_MS",
        default_value_t = 3_600_000
    )]
    pub consumer_idle_ms: u64,
    /// Seconds to finish the window in flight after SIGTERM before exiting
    /// anyway (Kubernetes' grace period is 30 s).
    #[arg(
        long = "shutdown-timeout",
        env = "HITCOUNT_SHUTDOWN_TIMEOUT",
        default_value_t = 20
    )]
    pub shutdown_timeout_secs: u64,
}

impl Default for WorkerArgs {
    fn default() -> Self {
        WorkerArgs {
            consumer: None,
            read_count: 1000,
            block_ms: 2000,
            window_entries: 100_000,
            window_cells: 40_000,
            window_ms: 100,
            claim_idle_ms: 30_000,
            max_deliveries: 5,
            consumer_idle_ms: 3_600_000,
            shutdown_timeout_secs: 20,
        }
    }
}

impl WorkerArgs {
    /// The consumer name: the flag (`HITCOUNT_CONSUMER`), else the pod's name
    /// (`POD_NAME`), else a name unique to this process: host name, process
    /// id and a random suffix. Two live workers must never share a name (the
    /// exactly-once fence is per consumer), so the default never repeats; a
    /// stable name is still better where there is one, since a restarted pod
    /// then resumes its own pending entries at once.
    pub fn consumer_name(&self) -> String {
        if let Some(c) = self.consumer.as_ref().filter(|c| !c.is_empty()) {
            return c.clone();
        }
        if let Ok(pod) = std::env::var("POD_NAME") {
            if !pod.is_empty() {
                return pod;
            }
        }
        unique_consumer_name()
    }

    /// Checks the settings against each other.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.read_count == 0 || self.read_count > 5000 {
            return Err(ConfigError::Invalid {
                setting: "--read-count / HITCOUNT_READ_COUNT",
                reason: "must be 1..=5000 (bigger reads hold Redis over 10 ms)".into(),
            });
        }
        if self.window_entries == 0 || self.window_cells == 0 {
            return Err(ConfigError::Invalid {
                setting: "--window-entries / --window-cells",
                reason: "must be at least 1".into(),
            });
        }
        if self.claim_idle_ms < 1000 {
            return Err(ConfigError::Invalid {
                setting: "--claim-idle-ms / HITCOUNT_CLAIM_IDLE_MS",
                reason: "under 1 s, live workers would steal each other's entries".into(),
            });
        }
        if self.block_ms == 0 {
            return Err(ConfigError::Invalid {
                setting: "--block-ms / HITCOUNT_BLOCK_MS",
                reason: "must be at least 1 ms (0 would make Redis block for ever)".into(),
            });
        }
        if self
            .consumer
            .as_ref()
            .is_some_and(|c| c.trim() != c || c.contains(char::is_control))
        {
            return Err(ConfigError::Invalid {
                setting: "--consumer / HITCOUNT_CONSUMER",
                reason: "must not have leading or trailing spaces or control characters".into(),
            });
        }
        if self.max_deliveries == 0 {
            return Err(ConfigError::Invalid {
                setting: "--max-deliveries / HITCOUNT_MAX_DELIVERIES",
                reason: "must be at least 1".into(),
            });
        }
        Ok(())
    }

    /// `shutdown_timeout_secs` as a duration.
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout_secs)
    }
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

/// Removes the password from a Redis URL so it can be printed.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let redacted = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_string()
            };
            format!("{}://{}{}", &url[..scheme_end], redacted, &rest[at..])
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("rediss://:secret@h:1"), "rediss://:***@h:1");
        assert_eq!(redact_url("redis://secret@h:1"), "redis://***@h:1");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(redact_url("redis://u:p@ss@h:1"), "redis://u:***@h:1");
    }

    #[test]
    fn precisions_are_validated() {
        let mut l = LayoutArgs {
            precisions: vec![60, 1, 60],
            ..LayoutArgs::default()
        };
        l.validate().unwrap();
        assert_eq!(l.precisions, vec![1, 60]);
        l.precisions = vec![0];
        assert!(l.validate().is_err());
        l.precisions = vec![];
        assert!(l.validate().is_err());
    }

    #[test]
    fn consumer_flag_wins() {
        let w = WorkerArgs {
            consumer: Some("pod-1".into()),
            ..WorkerArgs::default()
        };
        assert_eq!(w.consumer_name(), "pod-1");
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
    fn block_ms_zero_is_refused() {
        let w = WorkerArgs {
            block_ms: 0,
            ..WorkerArgs::default()
        };
        let err = w.validate().unwrap_err().to_string();
        assert!(err.contains("HITCOUNT_BLOCK_MS"), "{err}");
    }

    #[test]
    fn stream_names_are_validated() {
        assert!(StreamArgs::default().validate().is_ok());
        let same = StreamArgs {
            dead_stream: "hits".into(),
            ..StreamArgs::default()
        };
        assert!(same
            .validate()
            .unwrap_err()
            .to_string()
            .contains("HITCOUNT_DEAD_STREAM"));
        for empty in [
            StreamArgs {
                stream: String::new(),
                ..StreamArgs::default()
            },
            StreamArgs {
                group: String::new(),
                ..StreamArgs::default()
            },
            StreamArgs {
                dead_stream: String::new(),
                ..StreamArgs::default()
            },
        ] {
            assert!(empty
                .validate()
                .unwrap_err()
                .to_string()
                .contains("must not be empty"));
        }
    }
}
