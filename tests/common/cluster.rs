//! A real local Redis Cluster per test: `redis-server` child processes on
//! free loopback ports, each in its own temporary directory, killed and
//! reaped when the [`Cluster`] is dropped (also when the test panics).
//!
//! The cluster is built by hand rather than with `redis-cli --cluster
//! create`: every node gets an explicit `cluster-port` (a free port, since a
//! free port + 10000 may be past 65535 or taken), and replica `j` of master
//! `i` is always the same node, so tests can reason about who replicates
//! whom. Administration speaks to single nodes over short-lived synchronous
//! connections with timeouts; the waits that take seconds (failover, slot
//! migration) are `async` so a test's own tasks keep running meanwhile.
//!
//! `node` holds one process and the single-node admin calls; `ops` the
//! failover and the slot migration.

mod node;
mod ops;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hitcount_lab::kit::free_port;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::FromRedisValue;

use node::{field_of, info_field, info_text, kill_node, query, spawn_node, url, Node};
pub use node::{parse_nodes, NodeView};

/// `cluster-node-timeout` of every node (ms), as in the research notes.
pub const NODE_TIMEOUT_MS: u64 = 2000;
/// How long a start, a failover or a migration may take before we panic.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one node may take to answer PING after its spawn.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of every administrative connection and command.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Whole-cluster start attempts when a chosen port turns out to be taken.
const START_ATTEMPTS: usize = 3;
/// Keys moved per MIGRATE.
const MIGRATE_BATCH: usize = 100;
const POLL: Duration = Duration::from_millis(20);
const SLOTS: u16 = 16384;

/// A Redis Cluster of child processes; dropped, it kills them all.
pub struct Cluster {
    nodes: Vec<Node>,
    masters: usize,
    replicas: usize,
}

impl Cluster {
    /// 3 masters with one replica each.
    pub fn start() -> Cluster {
        Cluster::start_with(3, 1)
    }

    /// `masters` masters with `replicas` replicas each; returns once every
    /// node reports `cluster_state:ok` with all slots and knows every node
    /// in its role, and every replica's link to its master is up.
    pub fn start_with(masters: usize, replicas: usize) -> Cluster {
        assert!(masters >= 1, "a cluster needs a master");
        for attempt in 1..=START_ATTEMPTS {
            match Cluster::try_start(masters, replicas) {
                Ok(cluster) => return cluster,
                Err(e) if attempt < START_ATTEMPTS && e.contains("Address already in use") => {
                    eprintln!("cluster start attempt {attempt}: a port was taken, retrying")
                }
                Err(e) => panic!(
                    "starting a Redis Cluster ({masters} masters x {replicas} replicas) \
                     failed on attempt {attempt}: {e}"
                ),
            }
        }
        unreachable!()
    }

    fn try_start(masters: usize, replicas: usize) -> Result<Cluster, String> {
        let count = masters * (1 + replicas);
        let mut ports = BTreeSet::new();
        while ports.len() < 2 * count {
            ports.insert(free_port());
        }
        let ports: Vec<u16> = ports.into_iter().collect();
        let mut cluster = Cluster {
            nodes: Vec::with_capacity(count),
            masters,
            replicas,
        };
        for pair in ports.chunks(2) {
            cluster.nodes.push(spawn_node(pair[0], pair[1])?);
        }
        // From here on, dropping `cluster` on an error kills what started.
        let fail = |c: &Cluster, what: String| format!("{what}\n{}", c.diagnostics());
        for node in &cluster.nodes {
            cluster.wait_answers(node).map_err(|e| fail(&cluster, e))?;
        }
        cluster.form(&ports).map_err(|e| fail(&cluster, e))?;
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while let Err(why) = cluster.converged() {
            if Instant::now() > deadline {
                return Err(fail(
                    &cluster,
                    format!("not converged within {CONVERGE_TIMEOUT:?}: {why}"),
                ));
            }
            std::thread::sleep(POLL);
        }
        Ok(cluster)
    }

    /// Assigns slots, introduces the nodes, attaches the replicas.
    fn form(&self, ports: &[u16]) -> Result<(), String> {
        let m = self.masters;
        for (i, node) in self.nodes.iter().enumerate() {
            // Distinct epochs up front spare the collision resolution.
            let _: () = query(
                node.port,
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(i + 1),
            )
            .map_err(|e| format!("SET-CONFIG-EPOCH on {}: {e}", node.port))?;
            if i < m {
                let (first, last) = (i * SLOTS as usize / m, (i + 1) * SLOTS as usize / m - 1);
                let _: () = query(
                    node.port,
                    redis::cmd("CLUSTER")
                        .arg("ADDSLOTSRANGE")
                        .arg(first)
                        .arg(last),
                )
                .map_err(|e| format!("ADDSLOTSRANGE on {}: {e}", node.port))?;
            }
        }
        let first = self.nodes[0].port;
        for (i, node) in self.nodes.iter().enumerate().skip(1) {
            let cmd = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port)
                .arg(ports[2 * i + 1])
                .clone();
            let _: () = query(first, &cmd).map_err(|e| format!("MEET {}: {e}", node.port))?;
        }
        self.poll_sync("every node knows every node", || {
            self.nodes.iter().all(|n| {
                info_field(n.port, "cluster_known_nodes").as_deref()
                    == Some(self.nodes.len().to_string().as_str())
            })
        })?;
        for (i, node) in self.nodes.iter().enumerate().skip(m) {
            let master = self.nodes[(i - m) / self.replicas].port;
            let id: String = query(master, redis::cmd("CLUSTER").arg("MYID"))
                .map_err(|e| format!("MYID on {master}: {e}"))?;
            let _: () = query(node.port, redis::cmd("CLUSTER").arg("REPLICATE").arg(&id))
                .map_err(|e| format!("REPLICATE {} to {master}: {e}", node.port))?;
        }
        Ok(())
    }

    /// `Ok` when every node is `ok` with all slots, sees `masters` healthy
    /// masters and all replicas, and every replica is in sync.
    fn converged(&self) -> Result<(), String> {
        let n = self.nodes.len().to_string();
        for node in &self.nodes {
            let p = node.port;
            let info = info_text(p, "CLUSTER", "INFO")?;
            for (field, want) in [
                ("cluster_state", "ok"),
                ("cluster_slots_ok", "16384"),
                ("cluster_known_nodes", n.as_str()),
            ] {
                let got = field_of(&info, field);
                if got.as_deref() != Some(want) {
                    return Err(format!("node {p}: {field} is {got:?}, want {want}"));
                }
            }
            let view = self.view_from(p)?;
            let masters = view.iter().filter(|v| v.is_master() && !v.slots.is_empty());
            let replicas = view.iter().filter(|v| v.is_replica() && v.master.is_some());
            let (m, r) = (masters.count(), replicas.count());
            if m != self.masters || r != self.masters * self.replicas {
                return Err(format!(
                    "node {p} sees {m} masters with slots, {r} replicas"
                ));
            }
            if view.iter().any(NodeView::is_unhealthy) {
                return Err(format!("node {p} sees an unhealthy node"));
            }
        }
        for node in self.nodes.iter().skip(self.masters) {
            let repl = info_text(node.port, "INFO", "replication")?;
            if field_of(&repl, "master_link_status").as_deref() != Some("up") {
                return Err(format!("replica {} not in sync yet", node.port));
            }
        }
        Ok(())
    }

    /// `redis://127.0.0.1:PORT` of every node still running.
    pub fn urls(&self) -> Vec<String> {
        self.running().map(|n| url(n.port)).collect()
    }

    /// The current masters' URLs, comma-joined (`REDIS_URL` for the product).
    pub fn seed_url(&self) -> String {
        let urls: Vec<String> = self.masters().into_iter().map(url).collect();
        urls.join(",")
    }

    /// Every port the cluster was started on, running or not.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The process ids of every node (killed ones included).
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.pid).collect()
    }

    /// Every node's temporary directory (config, log, `nodes.conf`).
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.nodes
            .iter()
            .map(|n| n.dir.path().to_path_buf())
            .collect()
    }

    /// A cluster client with timeouts on everything: 1 s to connect, 2 s
    /// per response, 15 s per call including retries (more than a
    /// failover takes, ~4 s with a 2 s node timeout).
    pub fn client(&self) -> ClusterClient {
        ClusterClient::builder(self.urls())
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(2))
            .overall_response_timeout(Some(Duration::from_secs(15)))
            .build()
            .expect("building a cluster client")
    }

    /// A fresh multiplexed cluster connection from [`Cluster::client`].
    pub async fn client_conn(&self) -> ClusterConnection {
        self.client()
            .get_async_connection()
            .await
            .unwrap_or_else(|e| panic!("connecting to the cluster: {e}\n{}", self.diagnostics()))
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.ask(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    /// The port of the master serving `key` now.
    pub fn master_of(&self, key: &str) -> u16 {
        self.owner_of(self.slot_of(key))
    }

    /// The port of the master serving `slot` now.
    pub fn owner_of(&self, slot: u16) -> u16 {
        self.view()
            .iter()
            .find(|v| v.is_master() && !v.is_unhealthy() && v.owns(slot))
            .unwrap_or_else(|| panic!("no healthy master serves slot {slot}"))
            .port
    }

    /// Ports of the healthy masters that serve slots, in port order.
    pub fn masters(&self) -> Vec<u16> {
        self.ports_where(|v| v.is_master() && !v.slots.is_empty())
    }

    /// Ports of the healthy replicas, in port order.
    pub fn replicas(&self) -> Vec<u16> {
        self.ports_where(NodeView::is_replica)
    }

    /// Ports of the healthy replicas of the master on `port`.
    pub fn replicas_of(&self, port: u16) -> Vec<u16> {
        let view = self.view();
        let id = view.iter().find(|v| v.port == port).map(|v| v.id.clone());
        self.ports_where(|v| v.is_replica() && v.master == id)
    }

    /// `CLUSTER NODES` as the first running node that answers sees it.
    pub fn view(&self) -> Vec<NodeView> {
        self.running()
            .find_map(|n| self.view_from(n.port).ok())
            .unwrap_or_else(|| panic!("no node answers CLUSTER NODES\n{}", self.diagnostics()))
    }

    /// The log (and stdout/stderr) of the node on `port`.
    pub fn log(&self, port: u16) -> String {
        let node = self
            .nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node's port");
        let read = |name: &str| std::fs::read_to_string(node.dir.path().join(name));
        format!(
            "{}{}",
            read("redis.out").unwrap_or_default(),
            read("redis.log").unwrap_or_default()
        )
    }

    /// Every node's pid, liveness, `CLUSTER NODES` and log tail: what a
    /// panic message needs.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let running = n.child.lock().unwrap().is_some();
            let nodes = info_text(n.port, "CLUSTER", "NODES").unwrap_or_else(|e| e);
            let log = self.log(n.port);
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            out += &format!(
                "--- node {} (pid {}, {}) CLUSTER NODES:\n{}\n--- log tail:\n{}\n",
                n.port,
                n.pid,
                if running { "running" } else { "killed" },
                nodes.trim_end(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        out
    }

    fn running(&self) -> impl Iterator<Item = &Node> {
        self.nodes
            .iter()
            .filter(|n| n.child.lock().unwrap().is_some())
    }

    fn ports_where(&self, keep: impl Fn(&NodeView) -> bool) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .view()
            .iter()
            .filter(|v| !v.is_unhealthy() && keep(v))
            .map(|v| v.port)
            .collect();
        ports.sort_unstable();
        ports
    }

    fn view_from(&self, port: u16) -> Result<Vec<NodeView>, String> {
        info_text(port, "CLUSTER", "NODES").map(|t| parse_nodes(&t))
    }

    /// Runs `cmd` on the first running node that answers; panics otherwise.
    fn ask<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        self.running()
            .find_map(|n| query(n.port, cmd).ok())
            .unwrap_or_else(|| panic!("no node answers {cmd:?}\n{}", self.diagnostics()))
    }

    fn ask_node<T: FromRedisValue>(&self, port: u16, cmd: &redis::Cmd) -> T {
        query(port, cmd)
            .unwrap_or_else(|e| panic!("{cmd:?} on {port}: {e}\n{}", self.diagnostics()))
    }

    fn wait_answers(&self, node: &Node) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = node
                .child
                .lock()
                .unwrap()
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!(
                    "node {} exited while starting ({status})",
                    node.port
                ));
            }
            // Our process, not whoever else may hold the port by now.
            let pid = info_text(node.port, "INFO", "server")
                .ok()
                .and_then(|t| field_of(&t, "process_id"));
            if pid == Some(node.pid.to_string()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "node {} did not answer within {READY_TIMEOUT:?}",
                    node.port
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    fn poll_sync(&self, what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while !done() {
            if Instant::now() > deadline {
                return Err(format!("not within {CONVERGE_TIMEOUT:?}: {what}"));
            }
            std::thread::sleep(POLL);
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &self.nodes {
            kill_node(node);
        }
    }
}
