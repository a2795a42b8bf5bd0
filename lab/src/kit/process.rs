//! The operating-system side of the throwaway server: finding the
//! `redis-server` binary, picking a free port, asking the port whether the
//! server answers, signalling and waiting for the process, and reading what
//! it logged.
//!
//! Everything here is synchronous and speaks RESP over a plain
//! [`TcpStream`], so [`RedisServer`](super::RedisServer) needs no async
//! runtime.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use super::{LOG_FILE, OUTPUT_FILE};

/// Ports handed out: below Linux's default ephemeral range (32768 and up),
/// where the kernel picks the local port of every outgoing connection. A
/// port the kernel chose for `bind(0)` could be taken a moment later by
/// any test's client connection; one from here only by a listener.
const PORTS: std::ops::Range<u16> = 12_000..32_000;

/// Returns a port on 127.0.0.1 that was free a moment ago and that no
/// earlier call of this process returned (until the range wraps): the next
/// one of [`PORTS`] that binds, from a start that differs per process.
///
/// Another process may take it before it is used;
/// [`RedisServer::start`](super::RedisServer::start) retries with a fresh
/// port when that happens.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(PORTS.end - PORTS.start);
    let seed = std::process::id().wrapping_mul(7919)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    // The first call starts the cursor somewhere in the range.
    let _ = NEXT.compare_exchange(u32::MAX, seed % span, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let port = PORTS.start + (NEXT.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 must succeed")
}

/// Looks for an executable `redis-server` on `PATH`, then in `/usr/sbin` and
/// `/usr/bin`.
pub(super) fn find_redis_server() -> Option<PathBuf> {
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

/// Whether `port` on 127.0.0.1 answers: `+PONG` (or `-NOAUTH` when a
/// password is required) to a RESP `PING`; for TLS, whether it accepts
/// connections.
pub(super) fn answers(port: u16, tls: bool) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    if tls {
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

/// The last lines of the log and of the output in `dir` written since the
/// given offsets.
pub(super) fn log_tail(dir: &Path, log_offset: u64, out_offset: u64) -> String {
    let mut tail = String::new();
    for (name, offset) in [(OUTPUT_FILE, out_offset), (LOG_FILE, log_offset)] {
        let text = read_from(&dir.join(name), offset);
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

/// Reads a file from `offset` on, lossily; empty when it cannot be read.
pub(super) fn read_from(path: &Path, offset: u64) -> String {
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
pub(super) fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our
        // own child, which has not been reaped yet.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Sets the nice value of the thread (or process) `pid`: on Linux,
/// `PRIO_PROCESS` with a thread id sets that thread's. Returns whether it
/// was set.
pub(super) fn raise_priority(pid: u32, nice: i32) -> bool {
    // SAFETY: setpriority(2) has no memory-safety preconditions.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::id_t::from(pid), nice) == 0 }
}

/// Waits up to `timeout` for `child` to exit.
pub(super) fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
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
    fn free_port_is_bindable_and_never_repeats() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        for &port in &ports {
            assert!(PORTS.contains(&port), "{port} outside the range");
        }
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "a port handed out twice");
        TcpListener::bind((Ipv4Addr::LOCALHOST, ports[0])).expect("port is free");
    }
}
