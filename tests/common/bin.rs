//! Running the real `hitcount` binary (and other programs) as child
//! processes that are killed on drop, and a tiny blocking HTTP GET.

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `hitcount` binary built for this test run.
pub fn hitcount() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hitcount"));
    // Only what the test passes counts: no inherited settings.
    for (k, _) in std::env::vars() {
        if k.starts_with("HITCOUNT_") || k == "REDIS_URL" {
            cmd.env_remove(k);
        }
    }
    cmd.env(
        "RUST_LOG",
        std::env::var("HITCOUNT_TEST_LOG").unwrap_or_else(|_| "info".into()),
    );
    cmd
}

/// A child process whose stderr goes to a file (stdout too, unless it is
/// discarded); killed with SIGKILL and reaped on drop, also when a test
/// panics, so no process outlives its test.
pub struct Child {
    child: Option<std::process::Child>,
    name: String,
    stdout: Option<PathBuf>,
    stderr: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Child {
    /// Spawns `cmd`, its output captured in a temporary directory.
    pub fn spawn(name: &str, mut cmd: Command) -> Child {
        let dir = tempfile::tempdir().unwrap();
        let stdout = dir.path().join("stdout");
        cmd.stdout(File::create(&stdout).unwrap());
        let mut child = Self::start(name, cmd, dir.path().join("stderr"), Some(dir));
        child.stdout = Some(stdout);
        child
    }

    /// Spawns `cmd` with its stderr in `dir/NAME.log`, which outlives the
    /// child (for logs of processes a test replaces); stdout is discarded.
    pub fn spawn_in(name: &str, mut cmd: Command, dir: &Path) -> Child {
        cmd.stdout(Stdio::null());
        Self::start(name, cmd, dir.join(format!("{name}.log")), None)
    }

    fn start(
        name: &str,
        mut cmd: Command,
        stderr: PathBuf,
        dir: Option<tempfile::TempDir>,
    ) -> Child {
        cmd.stdin(Stdio::null())
            .stderr(File::create(&stderr).unwrap());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        Child {
            child: Some(child),
            name: name.into(),
            stdout: None,
            stderr,
            _dir: dir,
        }
    }

    /// The name it was spawned under (a worker's consumer name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its process id, while it has not been reaped.
    pub fn pid(&self) -> libc::pid_t {
        self.child.as_ref().expect("running").id() as libc::pid_t
    }

    /// Everything written to stdout so far (empty when it is discarded).
    pub fn stdout(&self) -> String {
        self.stdout
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Panics (with the stderr) if the process has exited.
    pub fn assert_running(&mut self) {
        let child = self.child.as_mut().expect("not reaped");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{} exited ({status}):\n{}", self.name, self.stderr());
        }
    }

    /// Sends a signal (SIGSTOP, SIGCONT, SIGTERM...).
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child, not yet reaped (so its pid
        // cannot have been reused).
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// SIGSTOP, returning once every thread of the process is stopped: a
    /// thread still running when the signal is sent (on a busy machine it
    /// may wait for a CPU first) can otherwise send a few more commands.
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
        let tasks = format!("/proc/{}/task", self.pid());
        wait_for("every thread stopped", Duration::from_secs(10), || {
            let all = std::fs::read_dir(&tasks).ok()?.flatten().all(|t| {
                // The state follows the command's closing parenthesis.
                std::fs::read_to_string(t.path().join("stat")).is_ok_and(|s| {
                    s.rsplit_once(") ")
                        .is_some_and(|(_, rest)| rest.starts_with(['T', 't']))
                })
            });
            all.then_some(())
        });
    }

    /// SIGKILL and reap, as a crash or an evicted pod. SIGKILL ends stopped
    /// processes too.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits (at most `within`) for the process to exit; its exit status,
    /// `None` on timeout.
    pub fn wait(&mut self, within: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits (at most `within`) for the exit.
    pub fn terminate(&mut self, within: Duration) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait(within).unwrap_or_else(|| {
            panic!(
                "{} did not exit within {within:?} of SIGTERM:\n{}\n{}",
                self.name,
                self.stderr(),
                self.stacks()
            )
        })
    }

    /// Every thread's stack, as gdb reads them (when it is installed): what
    /// a process that does not stop is doing.
    fn stacks(&self) -> String {
        let Some(pid) = self.child.as_ref().map(|c| c.id()) else {
            return String::new();
        };
        let gdb = Command::new("gdb")
            .args([
                "--batch",
                "-p",
                &pid.to_string(),
                "-ex",
                "thread apply all bt 40",
            ])
            .stdin(Stdio::null())
            .output();
        match gdb {
            Ok(out) => format!("its threads:\n{}", String::from_utf8_lossy(&out.stdout)),
            Err(e) => format!("(no stacks: gdb: {e})"),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `GET path` on `addr` over HTTP/1.1: the status and the body. `None` when
/// the connection fails (the server is not up yet).
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((status, body))
}

/// One request written as is (`head` without its blank line, then `body`),
/// on a fresh connection closed after it: the status, the head in lower
/// case and the body. `None` when the connection fails or no answer comes.
pub fn http_raw(addr: &str, head: &str, body: &[u8]) -> Option<(u16, String, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let head = format!(
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, head.to_ascii_lowercase(), body.to_string()))
}

/// `hitcount ingest` on `url` with `extra` flags: the child and its address,
/// once `/readyz` answers 200.
pub fn start_ingest(url: &str, extra: &[&str]) -> (Child, String) {
    start_ingest_on(url, &free_addr(), extra)
}

/// [`start_ingest`] listening on `addr`.
pub fn start_ingest_on(url: &str, addr: &str, extra: &[&str]) -> (Child, String) {
    let mut cmd = hitcount();
    cmd.args(["ingest", "--redis-url", url, "--listen", addr])
        .args(extra);
    let mut child = Child::spawn("ingest", cmd);
    wait_for("ingest ready", Duration::from_secs(60), || {
        child.assert_running();
        http_get(addr, "/readyz").filter(|(status, _)| *status == 200)
    });
    (child, addr.to_string())
}

/// `POST /api/v1/hits` with `content_type`, `more` header lines and `body`:
/// the status, the head (lower case) and the body.
pub fn post_hits(
    addr: &str,
    content_type: &str,
    more: &[&str],
    body: &str,
) -> (u16, String, String) {
    let mut head = format!("POST /api/v1/hits HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}");
    for line in more {
        head = format!("{head}\r\n{line}");
    }
    http_raw(addr, &head, body.as_bytes()).expect("an answer")
}

/// The hits counted for `name`: the sum of its `count:60:` buckets.
pub async fn counted(admin: &mut hitcount::store::connect::Conn, name: &str) -> i64 {
    let values: Vec<i64> = redis::cmd("HVALS")
        .arg(format!("count:60:{name}"))
        .query_async(admin)
        .await
        .unwrap();
    values.iter().sum()
}

/// The value of `series` (a metric name with its labels, as rendered) in
/// Prometheus text; `None` when it is not there.
pub fn metric_value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Cells the worker serving HTTP on `listen` applied through its carry so
/// far (`hitcount_carry_cells_total`; 0 while it does not answer).
pub fn carry_cells(listen: &str) -> u64 {
    http_get(listen, "/metrics")
        .and_then(|(_, body)| metric_value(&body, "hitcount_carry_cells_total"))
        .map_or(0, |v| v as u64)
}

/// Percent-encodes every byte but the unreserved ones (RFC 3986), for a
/// path segment or a query value.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Decodes a chunked body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Polls `f` every 100 ms until it returns `Some`, panicking with `what`
/// after `within`.
pub fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A free address on the loopback interface, as `127.0.0.1:PORT`.
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", hitcount_lab::kit::free_port())
}

/// `hitcount worker` on `url` as `consumer`, serving HTTP on `listen`
/// (`127.0.0.1:0` when the test does not scrape it), with `extra` flags.
pub fn worker(url: &str, consumer: &str, listen: &str, extra: &[&str]) -> Command {
    let mut cmd = hitcount();
    cmd.args(["worker", "--redis-url", url, "--consumer", consumer])
        .args(["--listen", listen])
        .args(extra);
    cmd
}

/// `hitcount worker` on `url` with the default consumer name, as a user
/// starts it: no `--consumer`, no `POD_NAME`.
pub fn default_worker(url: &str, listen: &str, extra: &[&str]) -> Command {
    let mut cmd = hitcount();
    cmd.env_remove("POD_NAME")
        .args(["worker", "--redis-url", url])
        .args(["--listen", listen])
        .args(extra);
    cmd
}

/// Starts `hitcount worker` on `url` as `consumer`, serving HTTP on `listen`,
/// with `extra` flags; returns once `/readyz` answers 200.
pub fn start_worker(url: &str, consumer: &str, listen: &str, extra: &[&str]) -> Child {
    let mut cmd = worker(url, consumer, listen, &["--block-ms", "200"]);
    cmd.args(extra);
    let mut child = Child::spawn(consumer, cmd);
    wait_ready(&mut child, listen);
    child
}

/// Waits until the worker serving on `listen` answers `/readyz` with 200.
pub fn wait_ready(child: &mut Child, listen: &str) {
    let what = format!("{} ready", child.name());
    wait_for(&what, Duration::from_secs(60), || {
        child.assert_running();
        http_get(listen, "/readyz").filter(|(status, _)| *status == 200)
    });
}

/// The output of a finished `hitcount` run.
pub fn run_hitcount(args: &[&str]) -> std::process::Output {
    hitcount()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running hitcount")
}

/// `hitcount ARGS` on the Redis at `url` (`REDIS_URL`), which must succeed
/// (its stderr is the failure message); its output.
pub fn run_ok(url: &str, args: &[&str]) -> std::process::Output {
    let out = hitcount()
        .args(args)
        .env("REDIS_URL", url)
        .stdin(Stdio::null())
        .output()
        .expect("running hitcount");
    assert!(
        out.status.success(),
        "hitcount {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether `program` can be run (found on PATH or at its path).
pub fn installed(program: &Path) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// `hitcount-lab ARGS` (with `--json` among them) that must succeed: the
/// JSON report it printed.
pub fn lab_json(args: &[&str]) -> serde_json::Value {
    let out = lab(args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Runs `hitcount-lab ARGS` (the lab's command line, in-process, on a
/// thread of its own) on the `hitcount` binary under test; its exit status
/// and output as the lab's binary would give them.
pub fn lab(args: &[&str]) -> std::process::Output {
    use std::os::unix::process::ExitStatusExt as _;
    let mut argv: Vec<String> = vec!["hitcount-lab".into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv.extend(["--hitcount".into(), env!("CARGO_BIN_EXE_hitcount").into()]);
    let out = std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .expect("a runtime")
            .block_on(hitcount_lab::cli::run_args(argv))
    })
    .join()
    .expect("the lab's thread");
    std::process::Output {
        status: std::process::ExitStatus::from_raw(out.code << 8),
        stdout: out.stdout.into_bytes(),
        stderr: out.stderr.into_bytes(),
    }
}
