//! A throwaway local Redis Cluster for `hitcount bench --cluster` (and any
//! caller that wants one): `masters` masters, each with `replicas`
//! replicas, every node a [`RedisServer`] on free loopback ports.
//!
//! [`RedisCluster::start`] starts the nodes in cluster mode, splits the
//! 16384 hash slots evenly over the masters (master i serves slots
//! `i·16384/M ..= (i+1)·16384/M − 1`, so node order says who serves what;
//! with [`ClusterOptions::moves`], single slots are given to other
//! masters, as an operator would move them), introduces the nodes to each other, attaches replica j of master i, and
//! returns once every node agrees the cluster is whole. It forms the
//! cluster by hand rather than with `redis-cli --cluster create`, so each
//! node's bus port is a free port of its own (the default, port + 10000,
//! may be past 65535 or taken). Dropping it stops every node and removes
//! their directories.
//!
//! Administration is synchronous, over short-lived connections with
//! timeouts, like the rest of this module.

use std::time::{Duration, Instant};

use redis::FromRedisValue;

use super::{free_port, is_address_in_use, EmbeddedError, RedisServer, ServerOptions};
use hitcount::model::slots::{even_owner, SlotMove};

/// Hash slots of a Redis Cluster.
const SLOTS: usize = 16384;
/// `cluster-node-timeout` of every node, ms: a failed master is replaced in
/// about twice this (Redis' default, 15 s, is for real networks).
const NODE_TIMEOUT_MS: u64 = 2000;
/// How long forming the cluster may take.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of every administrative connection and reply.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Fresh bus ports tried per node when the chosen one is taken.
const BUS_ATTEMPTS: usize = 4;
/// Pause between checks while the cluster forms.
const POLL: Duration = Duration::from_millis(20);

/// The shape of a [`RedisCluster`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Masters, each serving an even share of the slots; at least 1.
    pub masters: usize,
    /// Replicas of each master (0: none, so no failover).
    pub replicas: usize,
    /// Raw `redis.conf` lines for every node, after the cluster's own.
    pub extra: Vec<String>,
    /// Slots served by another master than the even split says (say, the
    /// stream shards' as [`hitcount::model::slots::balancing_moves`] places
    /// them), masters by index, applied in order.
    pub moves: Vec<SlotMove>,
}

impl Default for ClusterOptions {
    /// Three masters without replicas: the smallest cluster whose slots
    /// spread over more than two masters.
    fn default() -> Self {
        ClusterOptions {
            masters: 3,
            replicas: 0,
            extra: Vec::new(),
            moves: Vec::new(),
        }
    }
}

/// A local Redis Cluster of child processes; dropped, it stops them all.
#[derive(Debug)]
pub struct RedisCluster {
    /// Masters first (in slot order), then the replicas of master 0, 1, ….
    nodes: Vec<RedisServer>,
    masters: usize,
    moves: Vec<SlotMove>,
}

impl RedisCluster {
    /// Starts and forms the cluster; see the module documentation.
    pub fn start(opts: ClusterOptions) -> Result<RedisCluster, EmbeddedError> {
        if opts.masters == 0 || opts.masters > SLOTS {
            return Err(EmbeddedError::Cluster(format!(
                "{} masters: a cluster has 1 to {SLOTS}",
                opts.masters
            )));
        }
        let count = opts.masters * (1 + opts.replicas);
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            nodes.push(start_node(&opts.extra)?);
        }
        let m = opts.masters;
        let cluster = RedisCluster {
            nodes,
            masters: m,
            moves: opts.moves,
        };
        cluster.form(opts.replicas)?;
        Ok(cluster)
    }

    /// `redis://127.0.0.1:PORT` of every master, comma-joined: a
    /// `REDIS_URL` for hitcount.
    pub fn url(&self) -> String {
        self.master_ports()
            .iter()
            .map(|p| node_url(*p))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The masters' ports, in slot order.
    pub fn master_ports(&self) -> Vec<u16> {
        self.nodes[..self.masters]
            .iter()
            .map(RedisServer::port)
            .collect()
    }

    /// The slots served by another master than the even split says (see
    /// [`ClusterOptions::moves`]).
    pub fn moved_slots(&self) -> &[SlotMove] {
        &self.moves
    }

    /// Every node's port: the masters, then their replicas.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// Gives every node's main thread the nice value `nice`, as
    /// [`RedisServer::raise_priority`] does for one; returns whether all
    /// were set.
    pub fn raise_priority(&self, nice: i32) -> bool {
        let mut all = true;
        for node in &self.nodes {
            all &= node.raise_priority(nice);
        }
        all
    }

    /// Assigns slots and epochs, introduces every node, attaches the
    /// replicas and waits until the cluster is whole.
    fn form(&self, replicas: usize) -> Result<(), EmbeddedError> {
        let m = self.masters;
        for (i, node) in self.nodes.iter().enumerate() {
            // Distinct epochs up front spare Redis the collision rounds.
            admin::<()>(
                node,
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(i + 1),
            )?;
            if i < m {
                let mut add = redis::cmd("CLUSTER");
                add.arg("ADDSLOTSRANGE");
                for (first, last) in slot_ranges(m, &self.moves, i) {
                    add.arg(first).arg(last);
                }
                admin::<()>(node, &add)?;
            }
        }
        let first = &self.nodes[0];
        for node in &self.nodes[1..] {
            let bus = bus_port(node)?;
            let mut meet = redis::cmd("CLUSTER");
            meet.arg("MEET").arg("127.0.0.1").arg(node.port()).arg(bus);
            admin::<()>(first, &meet)?;
        }
        let all = self.nodes.len().to_string();
        self.wait("every node to know every node", |n| {
            Ok(cluster_field(n, "cluster_known_nodes")?.as_deref() == Some(all.as_str()))
        })?;
        for (i, node) in self.nodes.iter().enumerate().skip(m) {
            let master = &self.nodes[(i - m) / replicas];
            let id: String = admin(master, redis::cmd("CLUSTER").arg("MYID"))?;
            admin::<()>(node, redis::cmd("CLUSTER").arg("REPLICATE").arg(&id))?;
        }
        self.wait("every node to serve all slots", |n| {
            Ok(cluster_field(n, "cluster_state")?.as_deref() == Some("ok")
                && cluster_field(n, "cluster_slots_ok")?.as_deref() == Some("16384"))
        })?;
        let masters = self.masters;
        self.wait("every replica to sync with its master", |n| {
            if self.nodes[..masters].iter().any(|mn| mn.port() == n.port()) {
                return Ok(true);
            }
            let repl: String = admin(n, redis::cmd("INFO").arg("replication"))?;
            Ok(field(&repl, "master_link_status").as_deref() == Some("up"))
        })
    }

    /// Polls `done` on every node until all say yes, at most
    /// [`FORM_TIMEOUT`].
    fn wait(
        &self,
        what: &str,
        done: impl Fn(&RedisServer) -> Result<bool, EmbeddedError>,
    ) -> Result<(), EmbeddedError> {
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            let mut all = true;
            for node in &self.nodes {
                all &= done(node)?;
            }
            if all {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(EmbeddedError::Cluster(format!(
                    "waited {FORM_TIMEOUT:?} for {what}"
                )));
            }
            std::thread::sleep(POLL);
        }
    }
}

/// The slot ranges (inclusive) master `i` of `masters` serves: its share
/// of the even split, less the slots `moves` give away, plus those they
/// give it.
fn slot_ranges(masters: usize, moves: &[SlotMove], i: usize) -> Vec<(u16, u16)> {
    let serves = |slot: u16| {
        moves
            .iter()
            .rev()
            .find(|m| m.slot == slot)
            .map_or(even_owner(masters, slot), |m| m.to)
            == i
    };
    let mut ranges: Vec<(u16, u16)> = Vec::new();
    for slot in 0..SLOTS as u16 {
        if !serves(slot) {
            continue;
        }
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == slot => *last = slot,
            _ => ranges.push((slot, slot)),
        }
    }
    ranges
}

/// Starts one cluster node, with a fresh bus port when its first is taken.
fn start_node(extra: &[String]) -> Result<RedisServer, EmbeddedError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut lines = vec![
            "cluster-enabled yes".to_string(),
            "cluster-config-file nodes.conf".to_string(),
            format!("cluster-node-timeout {NODE_TIMEOUT_MS}"),
            format!("cluster-port {}", free_port()),
            // Replicas sync at once instead of waiting for more of them.
            "repl-diskless-sync-delay 0".to_string(),
        ];
        lines.extend(extra.iter().cloned());
        match RedisServer::start(ServerOptions {
            extra: lines,
            ..ServerOptions::default()
        }) {
            Err(e) if attempt < BUS_ATTEMPTS && is_address_in_use(&e) => continue,
            other => return other,
        }
    }
}

/// The node's cluster bus port, as its configuration says.
fn bus_port(node: &RedisServer) -> Result<u16, EmbeddedError> {
    let reply: Vec<String> = admin(node, redis::cmd("CONFIG").arg("GET").arg("cluster-port"))?;
    reply
        .get(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| EmbeddedError::Cluster(format!("no cluster-port on {}", node.port())))
}

/// `CLUSTER INFO`'s `name` on `node`.
fn cluster_field(node: &RedisServer, name: &str) -> Result<Option<String>, EmbeddedError> {
    let info: String = admin(node, redis::cmd("CLUSTER").arg("INFO"))?;
    Ok(field(&info, name))
}

/// `name:value` out of an INFO-style text.
fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim_end().strip_prefix(name)?.strip_prefix(':'))
        .map(str::to_string)
}

fn node_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// Runs one command on `node` over a fresh connection with timeouts.
fn admin<T: FromRedisValue>(node: &RedisServer, cmd: &redis::Cmd) -> Result<T, EmbeddedError> {
    let run = || -> redis::RedisResult<T> {
        let client = redis::Client::open(node.url())?;
        let mut conn = client.get_connection_with_timeout(ADMIN_TIMEOUT)?;
        conn.set_read_timeout(Some(ADMIN_TIMEOUT))?;
        conn.set_write_timeout(Some(ADMIN_TIMEOUT))?;
        cmd.query(&mut conn)
    };
    run().map_err(|e| EmbeddedError::Cluster(format!("{cmd:?} on {}: {e}", node.port())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_info_fields() {
        let text = "cluster_state:ok\r\ncluster_slots_ok:16384\r\n";
        assert_eq!(field(text, "cluster_state").as_deref(), Some("ok"));
        assert_eq!(field(text, "cluster_slots_ok").as_deref(), Some("16384"));
        assert_eq!(field(text, "cluster_size"), None);
    }

    #[test]
    fn slot_ranges_cover_every_slot_once_with_the_moves_applied() {
        let moves = [SlotMove {
            slot: 8241,
            from: 1,
            to: 2,
        }];
        let ranges: Vec<Vec<(u16, u16)>> = (0..3).map(|i| slot_ranges(3, &moves, i)).collect();
        assert_eq!(ranges[0], vec![(0, 5460)]);
        assert_eq!(ranges[1], vec![(5461, 8240), (8242, 10921)]);
        assert_eq!(ranges[2], vec![(8241, 8241), (10922, 16383)]);
        assert_eq!(slot_ranges(3, &[], 1), vec![(5461, 10921)]);
    }

    #[test]
    fn no_masters_is_refused() {
        let opts = ClusterOptions {
            masters: 0,
            ..ClusterOptions::default()
        };
        assert!(matches!(
            RedisCluster::start(opts),
            Err(EmbeddedError::Cluster(_))
        ));
    }
}
