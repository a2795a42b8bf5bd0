//! One cluster node: its `redis-server` child process and directory, how
//! a node describes the cluster (`CLUSTER NODES`), and one-shot admin calls
//! to a single node over a synchronous connection with timeouts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use redis::FromRedisValue;
use tempfile::TempDir;

use super::{ADMIN_TIMEOUT, NODE_TIMEOUT_MS};

/// One `redis-server` process of the cluster.
pub(super) struct Node {
    pub(super) port: u16,
    pub(super) child: Mutex<Option<Child>>,
    pub(super) pid: u32,
    // Last, so the directory goes after the process.
    pub(super) dir: TempDir,
}

/// A node as one node's `CLUSTER NODES` describes it.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub id: String,
    pub port: u16,
    pub flags: Vec<String>,
    /// The master's id, for a replica.
    pub master: Option<String>,
    /// Owned slot ranges, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl NodeView {
    pub fn is_master(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }
    pub fn is_replica(&self) -> bool {
        self.flags.iter().any(|f| f == "slave")
    }
    /// Failed, suspected, or not yet fully known.
    pub fn is_unhealthy(&self) -> bool {
        self.flags
            .iter()
            .any(|f| matches!(f.as_str(), "fail" | "fail?" | "handshake" | "noaddr"))
    }
    pub fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

/// Parses `CLUSTER NODES` (importing/migrating markers `[…]` are skipped).
pub fn parse_nodes(text: &str) -> Vec<NodeView> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let addr = f[1].split(['@', ',']).next()?;
            let port = addr.rsplit(':').next()?.parse().ok()?;
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(NodeView {
                id: f[0].to_string(),
                port,
                flags: f[2].split(',').map(str::to_string).collect(),
                master: (f[3] != "-").then(|| f[3].to_string()),
                slots,
            })
        })
        .collect()
}

pub(super) fn kill_node(node: &Node) {
    // A poisoned lock (a panic elsewhere while held) still holds the child.
    let mut child = node.child.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

pub(super) fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// Spawns `redis-server` in cluster mode on `port` with its bus on `bus`.
pub(super) fn spawn_node(port: u16, bus: u16) -> Result<Node, String> {
    let dir = tempfile::Builder::new()
        .prefix("hitcount-cluster-")
        .tempdir()
        .map_err(|e| format!("creating a temporary directory: {e}"))?;
    let out = std::fs::File::create(dir.path().join("redis.out")).map_err(|e| e.to_string())?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let d = dir.path();
    let child = Command::new(redis_server())
        .args([
            "--port",
            &port.to_string(),
            "--cluster-port",
            &bus.to_string(),
        ])
        .args([
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "no",
            "--cluster-enabled",
            "yes",
        ])
        .args(["--cluster-config-file", &path(&d.join("nodes.conf"))])
        .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--repl-diskless-sync-delay",
            "0",
        ])
        .args(["--dir", &path(d), "--logfile", &path(&d.join("redis.log"))])
        .current_dir(d)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("spawning redis-server: {e}"))?;
    Ok(Node {
        port,
        pid: child.id(),
        child: Mutex::new(Some(child)),
        dir,
    })
}

pub(super) fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `redis-server` from `PATH`, else Debian's `/usr/bin`.
pub(super) fn redis_server() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
        .expect("redis-server not installed (apt-get install redis-server)")
}

/// Runs one command on one node over a fresh connection with timeouts.
pub(super) fn query<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(url(port))?;
    let mut conn = client.get_connection_with_timeout(ADMIN_TIMEOUT)?;
    conn.set_read_timeout(Some(ADMIN_TIMEOUT))?;
    conn.set_write_timeout(Some(ADMIN_TIMEOUT))?;
    cmd.query(&mut conn)
}

/// The text of `A B` (`CLUSTER INFO`, `INFO replication`…) on `port`.
pub(super) fn info_text(port: u16, a: &str, b: &str) -> Result<String, String> {
    query(port, redis::cmd(a).arg(b)).map_err(|e| format!("{a} {b} on {port}: {e}"))
}

pub(super) fn info_field(port: u16, field: &str) -> Option<String> {
    field_of(&info_text(port, "CLUSTER", "INFO").ok()?, field)
}

/// `field:value` out of an INFO-style text.
pub(super) fn field_of(text: &str, field: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim_end().strip_prefix(field)?.strip_prefix(':'))
        .map(str::to_string)
}
