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
    cmd.env("RUST_LOG", "info");
    cmd
}

/// A child process whose stdout and stderr go to files; killed and reaped
/// on drop.
pub struct Child {
    child: std::process::Child,
    name: String,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Child {
    /// Spawns `cmd`, its output captured in a temporary directory.
    pub fn spawn(name: &str, mut cmd: Command) -> Child {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr");
        cmd.stdin(Stdio::null())
            .stdout(File::create(dir.path().join("stdout")).unwrap())
            .stderr(File::create(&stderr).unwrap());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        Child {
            child,
            name: name.into(),
            stderr,
            _dir: dir,
        }
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Panics (with the stderr) if the process has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("{} exited ({status}):\n{}", self.name, self.stderr());
        }
    }

    /// Sends SIGTERM and waits (at most `within`) for the exit.
    pub fn terminate(&mut self, within: Duration) -> ExitStatus {
        let pid = self.child.id() as libc::pid_t;
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {within:?} of SIGTERM:\n{}",
                self.name,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    format!("127.0.0.1:{}", hitcount::embedded::free_port())
}

/// Starts `hitcount worker` on `url` as `consumer`, serving HTTP on `listen`,
/// with `extra` flags; returns once `/readyz` answers 200.
pub fn start_worker(url: &str, consumer: &str, listen: &str, extra: &[&str]) -> Child {
    let mut cmd = hitcount();
    cmd.args(["worker", "--redis-url", url, "--consumer", consumer])
        .args(["--listen", listen, "--block-ms", "200"])
        .args(extra);
    let mut child = Child::spawn(consumer, cmd);
    wait_for(
        &format!("{consumer} ready"),
        Duration::from_secs(60),
        || {
            child.assert_running();
            http_get(listen, "/readyz").filter(|(status, _)| *status == 200)
        },
    );
    child
}

/// The output of a finished `hitcount` run.
pub fn run_hitcount(args: &[&str]) -> std::process::Output {
    hitcount()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running hitcount")
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
