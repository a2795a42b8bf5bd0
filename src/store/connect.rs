//! Connecting to Redis: URLs, TLS files, timeouts, and reconnecting with
//! capped exponential backoff and jitter.
//!
//! Every error is sorted into one of three classes (see [`classify`]): bad
//! input is handled where it arises (dead-lettered), transient errors make the
//! caller back off and reconnect, fatal ones stop the process at start-up with
//! a clear message. An outage is logged once when it starts and once when it
//! ends, never once per try.

use std::time::Duration;

use rand::Rng;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};

use crate::model::config::{redact_url, ConfigError, RedisArgs};
use crate::model::metrics::metrics;

/// Time allowed to open a connection (TCP, TLS, AUTH).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed for a reply to a non-blocking command. Never "none": a call
/// was seen to hang forever during a failover.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// First and longest pause between reconnection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Builds a client from the settings, reading TLS files when given.
pub fn client(args: &RedisArgs) -> Result<Client, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        setting: "--redis-url / REDIS_URL",
        reason,
    };
    if args.url.starts_with("rediss://") {
        install_crypto_provider();
    }
    let tls_files = args.ca.is_some() || args.cert.is_some();
    if !tls_files {
        return Client::open(args.url.as_str()).map_err(|e| invalid(format!("{e}")));
    }
    if !args.url.starts_with("rediss://") {
        return Err(invalid(format!(
            "TLS files are set but {} is not a rediss:// URL",
            redact_url(&args.url)
        )));
    }
    let read = |what: &'static str, path: &std::path::PathBuf| {
        std::fs::read(path).map_err(|source| ConfigError::TlsFile {
            what,
            path: path.clone(),
            source,
        })
    };
    let root_cert = args.ca.as_ref().map(|p| read("CA", p)).transpose()?;
    let client_tls = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read("client certificate", cert)?,
            client_key: read("client key", key)?,
        }),
        _ => None,
    };
    Client::build_with_tls(
        args.url.as_str(),
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(|e| invalid(format!("{e}")))
}

/// Makes ring rustls' process-wide crypto provider unless one is set already.
/// redis-rs builds its TLS configuration from the process default and
/// panics without one; rustls is compiled here with ring only.
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Fails only if another thread installed one meanwhile: fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// Opens a multiplexed connection whose replies may take up to
/// `response_timeout` (give blocking reads more than their BLOCK).
pub async fn open(
    client: &Client,
    response_timeout: Duration,
) -> Result<MultiplexedConnection, RedisError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(response_timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// What to do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The connection or the server is (maybe briefly) unavailable, or a
    /// reply was not what the code expects: back off, reconnect, retry.
    /// Includes OOM, LOADING, BUSY, TRYAGAIN, failover and timeouts.
    Transient,
    /// Retrying cannot help until an operator changes something (a password,
    /// an ACL, a setting, the Redis version): the process stops with one line
    /// naming the cause and the setting to fix.
    Fatal,
}

/// Sorts an error into its class and a bounded metric label.
pub fn classify(err: &RedisError) -> (ErrorClass, &'static str) {
    if fatal_hint(err).is_some() {
        return (ErrorClass::Fatal, "fatal");
    }
    if err.is_timeout() {
        return (ErrorClass::Transient, "timeout");
    }
    if err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error() {
        return (ErrorClass::Transient, "io");
    }
    match err.code() {
        Some("OOM") => (ErrorClass::Transient, "oom"),
        Some("NOSCRIPT") => (ErrorClass::Transient, "script"),
        Some(
            "LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "READONLY" | "CLUSTERDOWN" | "MOVED"
            | "ASK",
        ) => (ErrorClass::Transient, "other"),
        _ => (ErrorClass::Transient, "response"),
    }
}

/// For an error no retry can fix, what an operator should change.
pub fn fatal_hint(err: &RedisError) -> Option<&'static str> {
    let text = err.to_string();
    let detail = err.detail().unwrap_or("");
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH"))
        || text.contains("WRONGPASS")
        || text.contains("NOAUTH")
    {
        return Some("check the user and password in REDIS_URL (--redis-url)");
    }
    if err.code() == Some("NOPERM") || text.contains("NOPERM") {
        return Some(
            "grant the Redis user the command named (see the README's ACL line), or use another user in REDIS_URL",
        );
    }
    if err.kind() == redis::ErrorKind::InvalidClientConfig {
        return Some("check REDIS_URL (--redis-url) and the TLS settings");
    }
    if err.code() == Some("WRONGTYPE") || text.starts_with("WRONGTYPE") {
        return Some(
            "a key hitcount uses holds another type: check HITCOUNT_STREAM, HITCOUNT_DEAD_STREAM and HITCOUNT_PREFIX",
        );
    }
    let lower = detail.to_ascii_lowercase();
    if lower.contains("unknown command") || text.contains("unknown command") {
        return Some("hitcount needs Redis 7.0 or newer with scripting and streams");
    }
    if lower.contains("error compiling script") || lower.contains("scripting is disabled") {
        return Some(
            "Redis refused hitcount's Lua scripts: it needs Redis 7.0 or newer with EVAL allowed",
        );
    }
    None
}

/// Counts an error in `hitcount_redis_errors_total` and returns its class.
pub fn record(err: &RedisError) -> ErrorClass {
    let (class, kind) = classify(err);
    metrics().redis_errors.with_label_values(&[kind]).inc();
    class
}

/// A Redis error as one line that keeps Redis' own error code in front
/// (`NOPERM this user has no permissions to run the 'xreadgroup' command`).
pub fn describe(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => err.to_string(),
    }
}

/// Handles a failed try of a background task (`what`): counts it; a fatal
/// error stops the process through `shutdown` with one line naming the cause
/// and what to change; a transient one is logged once per outage. Returns
/// the class.
pub fn task_failed(
    what: &str,
    err: &RedisError,
    outage: &mut Outage,
    shutdown: &crate::model::shutdown::Shutdown,
    client: &Client,
) -> ErrorClass {
    let class = record(err);
    match class {
        ErrorClass::Fatal => {
            let hint = fatal_hint(err).unwrap_or("");
            shutdown.fail(format!(
                "{what}: Redis at {} refused: {}; {hint}",
                client.get_connection_info().addr(),
                describe(err)
            ));
        }
        ErrorClass::Transient => outage.failed(what, err),
    }
    class
}

/// An error of the Redis access layer: Redis' own, or a reply the code does
/// not expect, or a record it cannot read back. Each carries its class.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis (or the connection to it) failed.
    #[error("{0}")]
    Redis(#[from] RedisError),
    /// A reply of a script or command is not one the code knows: nothing is
    /// taken as done, the caller keeps its state and retries later.
    #[error("unexpected reply to {what}: {reply}")]
    Unexpected {
        /// The command or script.
        what: &'static str,
        /// The reply, abridged.
        reply: String,
    },
    /// A window's apply step ran past the time its markers surely live: it is
    /// left to recovery, which reloads the record.
    #[error("window apply took longer than the guard ({0:?})")]
    Guard(std::time::Duration),
    /// A read ahead task ended without a reply.
    #[error("the read ahead task failed: {0}")]
    ReadAhead(String),
    /// Another live worker holds this consumer name.
    #[error(
        "consumer name {name:?} is in use by another live worker ({holder}); give each worker \
         its own HITCOUNT_CONSUMER (--consumer), or leave it unset for a unique default"
    )]
    NameTaken {
        /// The consumer name.
        name: String,
        /// The holder's registration token (`host/pid/random`).
        holder: String,
    },
}

impl StoreError {
    /// What to do about it.
    pub fn class(&self) -> ErrorClass {
        match self {
            StoreError::Redis(e) => classify(e).0,
            StoreError::NameTaken { .. } => ErrorClass::Fatal,
            StoreError::Unexpected { .. } | StoreError::Guard(_) | StoreError::ReadAhead(_) => {
                ErrorClass::Transient
            }
        }
    }

    /// Counts it in `hitcount_redis_errors_total` and returns its class.
    pub fn record(&self) -> ErrorClass {
        match self {
            StoreError::Redis(e) => record(e),
            StoreError::Unexpected { .. } => {
                metrics()
                    .redis_errors
                    .with_label_values(&["unexpected"])
                    .inc();
                ErrorClass::Transient
            }
            other => other.class(),
        }
    }

    /// Whether the connection must be rebuilt (and the worker resync).
    pub fn needs_resync(&self) -> bool {
        match self {
            StoreError::Redis(e) => {
                e.is_io_error() || e.is_connection_dropped() || e.code() == Some("NOSCRIPT")
            }
            _ => true,
        }
    }

    /// One line for an operator: the cause and, for a fatal error, what to
    /// change.
    pub fn explain(&self, url: &str) -> String {
        let hint = match self {
            StoreError::Redis(e) => fatal_hint(e),
            _ => None,
        };
        let what = match self {
            StoreError::Redis(e) => describe(e),
            other => other.to_string(),
        };
        match hint {
            Some(h) => format!("Redis at {} refused: {what}; {h}", redact_url(url)),
            None => format!("{what} (Redis at {})", redact_url(url)),
        }
    }

    /// Shortens a reply for an error message.
    pub fn unexpected(what: &'static str, reply: &redis::Value) -> StoreError {
        let mut text = format!("{reply:?}");
        if text.len() > 200 {
            let mut cut = 200;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        StoreError::Unexpected { what, reply: text }
    }
}

/// A result of the Redis access layer.
pub type StoreResult<T> = Result<T, StoreError>;

/// Capped exponential backoff with full jitter.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: BACKOFF_MIN }
    }
}

impl Backoff {
    /// The pause before the next try: uniform in [next/2, next], then next
    /// doubles up to the cap.
    pub fn pause(&mut self) -> Duration {
        let cap = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        let ms = cap.as_millis() as u64;
        Duration::from_millis(rand::rng().random_range(ms / 2..=ms.max(1)))
    }

    /// Back to the shortest pause after a success.
    pub fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

/// Tracks one outage so it is logged once at its start and once at its end.
#[derive(Debug, Default)]
pub struct Outage {
    since: Option<std::time::Instant>,
    tries: u64,
}

/// This process' view of Redis outages, shared by its tasks (worker, leader,
/// sampler, producer): one line is logged when Redis becomes unreachable and
/// one when it is reachable again, however many tasks notice.
struct Outages {
    /// When the current outage began, if one is going on.
    since: Option<std::time::Instant>,
    /// When the last one ended: a task that only notices its broken
    /// connection shortly after (on its next use) is not a new outage.
    ended: Option<std::time::Instant>,
}

/// A task failing within this long after an outage ended is still in it.
const OUTAGE_AFTERSHOCK: Duration = Duration::from_secs(10);

static OUTAGES: std::sync::Mutex<Outages> = std::sync::Mutex::new(Outages {
    since: None,
    ended: None,
});

impl Outage {
    /// Records a failed try; logs only the first of an outage in this process.
    pub fn failed(&mut self, what: &str, err: &dyn std::fmt::Display) {
        self.tries += 1;
        let now = std::time::Instant::now();
        self.since.get_or_insert(now);
        let mut o = OUTAGES.lock().unwrap_or_else(|p| p.into_inner());
        // A failure just after an outage ended is a task noticing it late;
        // if failures go on past that, it is a new outage and is logged.
        let aftershock = o.ended.is_some_and(|e| e.elapsed() < OUTAGE_AFTERSHOCK);
        if o.since.is_none() && !aftershock {
            o.since = Some(now);
            tracing::warn!(error = %err, "{what}: Redis unavailable, retrying with backoff");
        }
    }

    /// Records a success; the first task to reach Redis again logs the end
    /// of the outage.
    pub fn recovered(&mut self, what: &str) {
        if self.since.take().is_some() {
            metrics().redis_reconnects.inc();
            let mut o = OUTAGES.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(since) = o.since.take() {
                o.ended = Some(std::time::Instant::now());
                tracing::warn!(
                    down_ms = since.elapsed().as_millis() as u64,
                    tries = self.tries,
                    "{what}: Redis reachable again"
                );
            }
        }
        self.tries = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_a_cap_with_jitter() {
        let mut b = Backoff::default();
        let pauses: Vec<_> = (0..20).map(|_| b.pause()).collect();
        assert!(pauses[0] <= BACKOFF_MIN);
        assert!(pauses.iter().all(|p| *p <= BACKOFF_MAX));
        assert!(pauses[19] >= BACKOFF_MAX / 2);
        b.reset();
        assert!(b.pause() <= BACKOFF_MIN);
    }

    #[test]
    fn tls_files_need_rediss() {
        let args = RedisArgs {
            ca: Some("ca.pem".into()),
            ..RedisArgs::from_url("redis://127.0.0.1:1")
        };
        let err = client(&args).unwrap_err().to_string();
        assert!(err.contains("rediss://"), "{err}");
    }
}
