//! A throwaway `redis-server` for the demo, the benchmark and the tests.
//!
//! [`RedisServer::start`] writes a `redis.conf` into a fresh temporary
//! directory, starts Debian's `redis-server` (Redis 7.0) on a free local port
//! and waits until it answers. Dropping the [`RedisServer`] stops the process
//! and removes the directory, so a test never leaks a server, even when it
//! panics.
//!
//! The readiness check speaks RESP over a plain [`std::net::TcpStream`], so
//! this module needs no async runtime and can be used from synchronous tests,
//! `#[tokio::test]`s and benchmarks alike.
//!
//! ```no_run
//! use hitcount_lab::kit::{RedisServer, ServerOptions};
//!
//! let server = RedisServer::start(ServerOptions {
//!     appendonly: true,
//!     ..ServerOptions::default()
//! })?;
//! let client = redis::Client::open(server.url())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! For TLS, [`make_test_certs`] creates a throwaway CA with a server and a
//! client certificate signed by it.
//!
//! This file holds the server itself and its options and errors; the
//! submodules hold the rest: `config` renders `redis.conf`, `process` finds
//! the binary, picks ports, signals and waits, and reads the logs, `tls`
//! makes the test certificates, and `cluster` forms a throwaway Redis
//! Cluster out of such servers ([`RedisCluster`]).

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

mod cluster;
mod config;
mod process;
mod tls;

pub use cluster::{ClusterOptions, RedisCluster};

pub use process::free_port;
pub use tls::{make_test_certs, TlsFiles, CLIENT_CERT_FILE, CLIENT_KEY_FILE};

use config::{percent_encode, render_config};
use process::{
    answers, find_redis_server, log_tail, raise_priority, read_from, signal, wait_timeout,
};

/// How long [`RedisServer::start`] and [`RedisServer::restart`] wait for the
/// server to answer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`RedisServer::stop`] waits for a graceful exit before it kills.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many fresh ports [`RedisServer::start`] tries when the chosen one
/// turns out to be taken.
const START_ATTEMPTS: usize = 8;

/// Name of the server's configuration file inside [`RedisServer::dir`].
pub const CONFIG_FILE: &str = "redis.conf";

/// Name of the server's log file inside [`RedisServer::dir`].
pub const LOG_FILE: &str = "redis.log";

/// Name of the file inside [`RedisServer::dir`] that receives the server's
/// stdout and stderr (early configuration errors land here).
pub const OUTPUT_FILE: &str = "redis.out";

/// The log line Redis prints once data is loaded and it accepts clients.
const READY_LINE: &str = "Ready to accept connections";

/// How a [`RedisServer`] is configured beyond the essentials.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Enable the append-only file, with `appendfsync everysec`.
    pub appendonly: bool,
    /// Require this password (`requirepass`); [`RedisServer::url`] carries it.
    pub password: Option<String>,
    /// Serve TLS only: the plain port is disabled and the free port becomes
    /// the `tls-port`.
    pub tls: Option<TlsFiles>,
    /// Raw `redis.conf` lines appended after the generated ones, e.g.
    /// `"slowlog-log-slower-than 10000"` or `"user app on >pw ~* +@all"`.
    pub extra: Vec<String>,
}

/// Why a throwaway Redis could not be provided.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// No `redis-server` binary on `PATH`, in `/usr/sbin` or in `/usr/bin`.
    #[error(
        "redis-server not found on PATH, in /usr/sbin or in /usr/bin: install Debian's \
         redis-server (e.g. `apt-get install -y redis-server`, or run scripts/ensure-deps), \
         or set REDIS_URL to use an existing server"
    )]
    NotInstalled,
    /// The `redis-server` process could not be spawned.
    #[error("could not spawn redis-server: {0}")]
    Spawn(#[source] io::Error),
    /// The server did not answer within [`READY_TIMEOUT`].
    #[error("redis-server did not become ready within {READY_TIMEOUT:?}; log tail:\n{log_tail}")]
    NotReady {
        /// The last lines of the server's log and output.
        log_tail: String,
    },
    /// The server exited while starting, e.g. on a bad configuration line.
    #[error("redis-server exited while starting ({status}); log tail:\n{log_tail}")]
    Exited {
        /// The exit status of the process.
        status: ExitStatus,
        /// The last lines of the server's log and output.
        log_tail: String,
    },
    /// A file-system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A throwaway cluster could not be formed (its nodes are stopped).
    #[error("forming a local Redis Cluster failed: {0}")]
    Cluster(String),
    /// Creating test certificates with the `openssl` CLI failed.
    #[error("making test certificates failed at {step}: {message}")]
    Certs {
        /// The step that failed.
        step: &'static str,
        /// What went wrong, including openssl's stderr.
        message: String,
    },
}

impl EmbeddedError {
    fn io(context: impl Into<String>, source: io::Error) -> Self {
        EmbeddedError::Io {
            context: context.into(),
            source,
        }
    }
}

/// A `redis-server` child process with its own fresh temporary directory.
///
/// Dropping it stops the process (gracefully, or with `SIGKILL` after a
/// timeout) and removes the directory.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    pid: u32,
    port: u16,
    binary: PathBuf,
    opts: ServerOptions,
    // Declared last so the directory is removed after the process is gone.
    dir: TempDir,
}

impl RedisServer {
    /// Starts a server on a free local port and waits until it answers `PING`
    /// (at most [`READY_TIMEOUT`]).
    ///
    /// The configuration (`dir`, `port`, `bind 127.0.0.1`, `save ""`,
    /// `daemonize no`, `logfile`, then `opts`) is written to
    /// [`CONFIG_FILE`] in a fresh temporary directory. If the port is taken
    /// meanwhile, another free port is tried.
    pub fn start(opts: ServerOptions) -> Result<RedisServer, EmbeddedError> {
        let binary = find_redis_server().ok_or(EmbeddedError::NotInstalled)?;
        let dir = tempfile::Builder::new()
            .prefix("hitcount-redis-")
            .tempdir()
            .map_err(|e| EmbeddedError::io("creating a temporary directory", e))?;
        let mut server = RedisServer {
            child: None,
            pid: 0,
            port: 0,
            binary,
            opts,
            dir,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            server.port = free_port();
            server.write_config()?;
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(e) if attempt < START_ATTEMPTS && is_address_in_use(&e) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The URL to connect with: `redis://` or, for TLS, `rediss://`, on
    /// `127.0.0.1`, carrying the password when one is set.
    ///
    /// A `rediss://` server uses the throwaway CA: connect with
    /// `redis::Client::build_with_tls` and the CA certificate.
    pub fn url(&self) -> String {
        let scheme = if self.opts.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let auth = match &self.opts.password {
            Some(pw) => format!(":{}@", percent_encode(pw)),
            None => String::new(),
        };
        format!("{scheme}://{auth}127.0.0.1:{}", self.port)
    }

    /// The port the server listens on (the TLS port for a TLS server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory: configuration, log, and data (AOF) files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id of the current (or, once stopped, the last) process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Gives Redis' main thread, which executes every command, the nice
    /// value `nice` (negative: ahead of other processes). SLOWLOG counts
    /// wall time, so on a machine whose few cores Redis shares with the
    /// workers it otherwise also counts time Redis waited for a core.
    /// Needs root for a negative value; returns whether it was set.
    pub fn raise_priority(&self, nice: i32) -> bool {
        raise_priority(self.pid, nice)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the server gracefully with `SIGTERM` (Redis then flushes the
    /// AOF and exits, like `SHUTDOWN`) and waits for it to exit; kills it if
    /// it takes longer than ten seconds. Does nothing when not running.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if matches!(child.try_wait(), Ok(None)) {
                signal(child.id(), libc::SIGTERM);
                if wait_timeout(&mut child, STOP_TIMEOUT).is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }

    /// Kills the server with `SIGKILL`, as a crash would, and waits for it.
    /// Does nothing when not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if it runs, then starts it again on the same port
    /// and directory (so AOF data survives) and waits until it is ready.
    pub fn restart(&mut self) -> Result<(), EmbeddedError> {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match self.launch() {
                Err(e) if is_address_in_use(&e) && Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    /// Writes [`CONFIG_FILE`] for the current port.
    fn write_config(&self) -> Result<(), EmbeddedError> {
        let conf = render_config(self.dir(), self.port, &self.opts);
        let path = self.dir().join(CONFIG_FILE);
        fs::write(&path, conf).map_err(|e| EmbeddedError::io(format!("writing {path:?}"), e))
    }

    /// Spawns the process from [`CONFIG_FILE`] and waits until it is ready;
    /// on failure the process is gone.
    fn launch(&mut self) -> Result<(), EmbeddedError> {
        let dir = self.dir().to_path_buf();
        let log_offset = fs::metadata(dir.join(LOG_FILE)).map_or(0, |m| m.len());
        let out_offset = fs::metadata(dir.join(OUTPUT_FILE)).map_or(0, |m| m.len());
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(OUTPUT_FILE))
            .map_err(|e| EmbeddedError::io("opening the server's output file", e))?;
        let err = out
            .try_clone()
            .map_err(|e| EmbeddedError::io("opening the server's output file", e))?;
        let child = Command::new(&self.binary)
            .arg(dir.join(CONFIG_FILE))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => EmbeddedError::NotInstalled,
                _ => EmbeddedError::Spawn(e),
            })?;
        self.pid = child.id();
        self.child = Some(child);
        let result = self.wait_ready(log_offset, out_offset);
        if result.is_err() {
            self.kill();
        }
        result
    }

    /// Waits until the log (from `log_offset` on) says the server is ready
    /// and the port answers.
    fn wait_ready(&mut self, log_offset: u64, out_offset: u64) -> Result<(), EmbeddedError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let log_path = self.dir().join(LOG_FILE);
        loop {
            let child = self.child.as_mut().expect("launch sets the child");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(EmbeddedError::Exited {
                    status,
                    log_tail: self.log_tail(log_offset, out_offset),
                });
            }
            if read_from(&log_path, log_offset).contains(READY_LINE) && self.answers() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(EmbeddedError::NotReady {
                    log_tail: self.log_tail(log_offset, out_offset),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the port answers (see [`process::answers`]).
    fn answers(&self) -> bool {
        answers(self.port, self.opts.tls.is_some())
    }

    /// The last lines of the log and of the output written since the given
    /// offsets.
    fn log_tail(&self, log_offset: u64, out_offset: u64) -> String {
        log_tail(self.dir(), log_offset, out_offset)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a start failed because the port was taken.
fn is_address_in_use(err: &EmbeddedError) -> bool {
    match err {
        EmbeddedError::Exited { log_tail, .. } | EmbeddedError::NotReady { log_tail } => {
            log_tail.contains("Address already in use")
        }
        _ => false,
    }
}
