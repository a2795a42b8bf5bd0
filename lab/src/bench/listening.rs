//! A `hitcount` command that serves HTTP (`serve`, `ingest`) started as a
//! process for a measurement, on a free loopback port, and waited for until
//! it listens.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::BenchError;
use hitcount::model::config::RedisArgs;

/// Starts `hitcount SUB` on `redis` with `env`, listening on a free
/// loopback port (told by the variable `listen`), quiet but for warnings,
/// and waits until it listens: the child and its address.
pub(crate) async fn start(
    hitcount: &std::path::Path,
    sub: &str,
    listen: &str,
    redis: &RedisArgs,
    env: &[(&str, &str)],
) -> Result<(tokio::process::Child, SocketAddr), BenchError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], crate::kit::free_port()));
    let mut child = tokio::process::Command::new(hitcount)
        .arg(sub)
        .env("REDIS_URL", &redis.url)
        .env(listen, addr.to_string())
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    listening(&mut child, addr, &format!("hitcount {sub}")).await?;
    Ok((child, addr))
}

/// Waits until `child` (the command `what`) listens on `addr`, at most
/// [`SERVE_READY`]; an error if it exits or does not listen by then.
async fn listening(
    child: &mut tokio::process::Child,
    addr: SocketAddr,
    what: &str,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + SERVE_READY;
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(BenchError::Check(format!(
                "`{what}` exited at start ({status})"
            )));
        }
        if TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Check(format!(
                "`{what}` did not listen on {addr} within {SERVE_READY:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long `hitcount serve` (or `ingest`) may take to listen.
const SERVE_READY: Duration = Duration::from_secs(10);
