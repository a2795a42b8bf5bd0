//! A throwaway `redis-server` for `hitcount demo` and `hitcount bench` when
//! REDIS_URL is unset: no persistence, loopback only, a free port.
//!
//! Its configuration and files live in a directory of its own under
//! [`std::env::temp_dir`]; dropping the [`ThrowawayRedis`] kills the process
//! and removes the directory. Std only: the tests' fuller launcher (TLS,
//! passwords, restarts, clusters) is the lab's, not the product's.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

/// How long the server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts on a port another process took first are retried this often.
const START_ATTEMPTS: usize = 5;

/// Makes directory names unique within this process.
static SERIAL: AtomicU32 = AtomicU32::new(0);

/// A running throwaway `redis-server`.
#[derive(Debug)]
pub(crate) struct ThrowawayRedis {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl ThrowawayRedis {
    /// Starts `redis-server` and waits until it answers PING.
    pub(crate) fn start() -> anyhow::Result<ThrowawayRedis> {
        let binary = find_redis_server().ok_or_else(|| {
            anyhow::anyhow!(
                "redis-server not found on PATH, in /usr/sbin or in /usr/bin: install it \
                 (e.g. `apt-get install -y redis-server`), or set REDIS_URL to use an existing server"
            )
        })?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "hitcount-redis-{}-{nanos}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir)?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match launch(&binary, &dir) {
                Ok((child, port)) => return Ok(ThrowawayRedis { child, port, dir }),
                Err(e) => last = Some(e),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(last.unwrap_or_else(|| anyhow::anyhow!("redis-server did not start")))
    }

    /// The Redis `url` names, or without one a throwaway server, started
    /// (it runs while the returned server lives); and the URL to use.
    pub(crate) fn unless_given(
        url: Option<&String>,
    ) -> anyhow::Result<(Option<ThrowawayRedis>, String)> {
        if let Some(url) = url {
            return Ok((None, url.clone()));
        }
        let server = ThrowawayRedis::start().context("starting a throwaway redis-server")?;
        let url = server.url();
        Ok((Some(server), url))
    }

    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ThrowawayRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One try on a fresh port: the child and its port once it answers.
fn launch(binary: &PathBuf, dir: &PathBuf) -> anyhow::Result<(Child, u16)> {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    let conf = format!(
        "port {port}\nbind 127.0.0.1\ndir \"{}\"\nsave \"\"\nappendonly no\n",
        dir.display()
    );
    let path = dir.join("redis.conf");
    std::fs::write(&path, conf)?;
    let mut child = Command::new(binary)
        .arg(&path)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("redis-server exited while starting ({status})");
        }
        if answers(port) {
            return Ok((child, port));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("redis-server did not answer within {READY_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a Redis on `port` answers PING with PONG.
fn answers(port: u16) -> bool {
    let ping = || -> redis::RedisResult<String> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
        conn.set_read_timeout(Some(Duration::from_secs(1)))?;
        redis::cmd("PING").query(&mut conn)
    };
    ping().is_ok_and(|reply| reply == "PONG")
}

/// `redis-server` on PATH, else in /usr/sbin or /usr/bin (Debian's).
fn find_redis_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throwaway_server_answers_and_leaves_nothing_behind() {
        let server = ThrowawayRedis::start().unwrap();
        let dir = server.dir.clone();
        let pid = server.pid();
        assert!(answers(server.port));
        assert!(dir.join("redis.conf").exists());
        drop(server);
        assert!(!dir.exists());
        assert!(!PathBuf::from(format!("/proc/{pid}")).exists());
    }
}
