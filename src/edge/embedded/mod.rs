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
//! use hitcount::edge::embedded::{RedisServer, ServerOptions};
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

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

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

/// Name of the client certificate [`make_test_certs`] writes.
pub const CLIENT_CERT_FILE: &str = "client.crt";

/// Name of the client key [`make_test_certs`] writes.
pub const CLIENT_KEY_FILE: &str = "client.key";

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

/// Certificate files for a TLS [`RedisServer`], as made by
/// [`make_test_certs`].
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// The CA certificate that signs server and client certificates (PEM).
    pub ca: PathBuf,
    /// Require clients to present a certificate signed by `ca`
    /// (`tls-auth-clients yes`).
    pub require_client_cert: bool,
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

    /// Whether the port answers: `+PONG` (or `-NOAUTH` when a password is
    /// required) to a RESP `PING`; for TLS, whether it accepts connections.
    fn answers(&self) -> bool {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            return false;
        };
        if self.opts.tls.is_some() {
            return true;
        }
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        if stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
            return false;
        }
        match read_line(&mut stream) {
            Some(reply) => reply.starts_with("+PONG") || reply.starts_with("-NOAUTH"),
            // -LOADING and anything else: not yet.
            None => false,
        }
    }

    /// The last lines of the log and of the output written since the given
    /// offsets.
    fn log_tail(&self, log_offset: u64, out_offset: u64) -> String {
        let mut tail = String::new();
        for (name, offset) in [(OUTPUT_FILE, out_offset), (LOG_FILE, log_offset)] {
            let text = read_from(&self.dir().join(name), offset);
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            for line in &lines[lines.len().saturating_sub(20)..] {
                let _ = writeln!(tail, "{line}");
            }
        }
        if tail.is_empty() {
            tail.push_str("(empty log)\n");
        }
        tail
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Returns a port on 127.0.0.1 that was free a moment ago: binds port 0,
/// reads the port the kernel chose, and releases it.
///
/// Another process may take it before it is used; [`RedisServer::start`]
/// retries with a fresh port when that happens.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 must succeed")
}

/// Creates throwaway TLS material in `dir` with the `openssl` CLI: a CA
/// (`ca.crt`, `ca.key`), a server certificate for `127.0.0.1` and `localhost`
/// signed by it (`server.crt`, `server.key`), and a client certificate
/// ([`CLIENT_CERT_FILE`], [`CLIENT_KEY_FILE`]), all ECDSA P-256, PEM, valid
/// for ten years.
///
/// The returned [`TlsFiles`] point at the CA and the server's files, with
/// `require_client_cert` off; set it to make the server demand the client
/// certificate.
pub fn make_test_certs(dir: &Path) -> Result<TlsFiles, EmbeddedError> {
    fs::create_dir_all(dir).map_err(|e| EmbeddedError::io(format!("creating {dir:?}"), e))?;
    let cnf = dir.join("openssl.cnf");
    fs::write(&cnf, OPENSSL_CNF).map_err(|e| EmbeddedError::io(format!("writing {cnf:?}"), e))?;
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let days = ["-days", "3650"];
    let cfg = ["-config", "openssl.cnf"];

    let mut ca = vec!["req", "-x509", "-new", "-nodes", "-extensions", "v3_ca"];
    ca.extend(cfg);
    ca.extend(ec);
    ca.extend(days);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    ca.extend(["-subj", "/CN=hitcount test CA"]);
    openssl(dir, "creating the CA", &ca)?;

    for (name, cn, ext) in [
        ("server", "/CN=localhost", "server_ext"),
        ("client", "/CN=hitcount test client", "client_ext"),
    ] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        let mut req = vec!["req", "-new", "-nodes"];
        req.extend(cfg);
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", cn]);
        openssl(dir, "creating a certificate request", &req)?;
        let mut sign = vec!["x509", "-req", "-in", &csr, "-CA", "ca.crt"];
        sign.extend(["-CAkey", "ca.key", "-CAcreateserial", "-out", &crt]);
        sign.extend(days);
        sign.extend(["-extfile", "openssl.cnf", "-extensions", ext]);
        openssl(dir, "signing a certificate", &sign)?;
    }
    Ok(TlsFiles {
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
        ca: dir.join("ca.crt"),
        require_client_cert: false,
    })
}

const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = hitcount test

[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// Runs `openssl args…` in `dir`.
fn openssl(dir: &Path, step: &'static str, args: &[&str]) -> Result<(), EmbeddedError> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| EmbeddedError::Certs {
            step,
            message: match e.kind() {
                io::ErrorKind::NotFound => "the openssl CLI is not installed: install Debian's \
                     openssl (e.g. `apt-get install -y openssl`, or run scripts/ensure-deps)"
                    .to_string(),
                _ => format!("cannot run openssl: {e}"),
            },
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(EmbeddedError::Certs {
            step,
            message: format!(
                "openssl {} ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        })
    }
}

/// Renders `redis.conf` for a server in `dir` on `port`.
fn render_config(dir: &Path, port: u16, opts: &ServerOptions) -> String {
    let path = |p: &Path| quote(&p.to_string_lossy());
    let mut conf = String::new();
    let mut line = |l: String| {
        conf.push_str(&l);
        conf.push('\n');
    };
    line("# Written by hitcount's embedded launcher: a throwaway server.".into());
    line(format!("dir {}", path(dir)));
    line("bind 127.0.0.1".into());
    line("daemonize no".into());
    line("save \"\"".into());
    line(format!("logfile {}", path(&dir.join(LOG_FILE))));
    line("loglevel notice".into());
    line("always-show-logo no".into());
    match &opts.tls {
        None => line(format!("port {port}")),
        Some(tls) => {
            line("port 0".into());
            line(format!("tls-port {port}"));
            line(format!("tls-cert-file {}", path(&tls.cert)));
            line(format!("tls-key-file {}", path(&tls.key)));
            line(format!("tls-ca-cert-file {}", path(&tls.ca)));
            let auth = if tls.require_client_cert { "yes" } else { "no" };
            line(format!("tls-auth-clients {auth}"));
        }
    }
    if opts.appendonly {
        line("appendonly yes".into());
        line("appendfsync everysec".into());
    }
    if let Some(pw) = &opts.password {
        line(format!("requirepass {}", quote(pw)));
    }
    for extra in &opts.extra {
        line(extra.clone());
    }
    conf
}

/// Quotes a value for `redis.conf`: double quotes, with `\`, `"` and control
/// characters escaped.
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Looks for an executable `redis-server` on `PATH`, then in `/usr/sbin` and
/// `/usr/bin`.
fn find_redis_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| {
            fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
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

/// Reads a file from `offset` on, lossily; empty when it cannot be read.
fn read_from(path: &Path, offset: u64) -> String {
    use std::io::{Seek, SeekFrom};
    let mut buf = Vec::new();
    if let Ok(mut file) = File::open(path) {
        if file.seek(SeekFrom::Start(offset)).is_ok() {
            let _ = file.read_to_end(&mut buf);
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// Reads one `\r\n`-terminated line.
fn read_line(stream: &mut TcpStream) -> Option<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            _ => return None,
        }
        if line.len() > 4096 {
            return None;
        }
    }
    Some(String::from_utf8_lossy(&line).into_owned())
}

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our
        // own child, which has not been reaped yet.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Waits up to `timeout` for `child` to exit.
fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_config_values() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a \"b\" \\c\n"), "\"a \\\"b\\\" \\\\c\\x0a\"");
    }

    #[test]
    fn percent_encodes_passwords() {
        assert_eq!(percent_encode("s3cret-_.~"), "s3cret-_.~");
        assert_eq!(percent_encode("p@ss word/:"), "p%40ss%20word%2F%3A");
    }

    #[test]
    fn renders_tls_config_without_plain_port() {
        let opts = ServerOptions {
            tls: Some(TlsFiles {
                cert: "/c/server.crt".into(),
                key: "/c/server.key".into(),
                ca: "/c/ca.crt".into(),
                require_client_cert: true,
            }),
            extra: vec!["maxclients 100".into()],
            ..ServerOptions::default()
        };
        let conf = render_config(Path::new("/d"), 7000, &opts);
        assert!(conf.contains("\nport 0\n"));
        assert!(conf.contains("\ntls-port 7000\n"));
        assert!(conf.contains("\ntls-auth-clients yes\n"));
        assert!(conf.ends_with("maxclients 100\n"));
    }

    #[test]
    fn free_port_is_bindable() {
        let port = free_port();
        assert_ne!(port, 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("port is free");
    }
}
