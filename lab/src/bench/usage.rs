//! What Redis itself spends, node by node: the masters of a cluster (from
//! `CLUSTER SLOTS`, each reached on a connection of its own) or one Redis,
//! and each node's CPU time (`INFO cpu`) and commands (`INFO
//! commandstats`), so a run can be priced in Redis CPU per hit on every
//! master.
//!
//! CPU time is the process' (`used_cpu_sys` + `used_cpu_user`): everything
//! the node did, network reads and writes, cluster bus and cron included.
//! Commandstats' `usec` is not summed: a script's time already holds the
//! time of the commands it runs, which are listed again on their own.

use std::collections::BTreeMap;

use redis::Value;

use super::BenchError;

/// Hex digits of a script's SHA1 shown in the SLOWLOG summary.
const SHA_SHOWN: usize = 8;
use hitcount::model::config::{ClusterMode, RedisArgs};
use hitcount::store::connect::Conn;

/// Hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// One Redis node measured: a master of a cluster, or one Redis.
pub struct Node {
    /// `host:port`, as the cluster names it.
    pub addr: String,
    /// Slot ranges it serves, inclusive (all of them for one Redis).
    pub slots: Vec<(u16, u16)>,
    conn: Conn,
}

/// A node's counters at one moment, or their growth between two.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Usage {
    /// Process CPU time, µs.
    pub cpu_us: f64,
    /// Commands run, scripts' own included.
    pub calls: u64,
    /// Per command (lower case, as `INFO commandstats` names it): calls and
    /// the µs Redis counted in it (a script's includes its commands').
    pub commands: BTreeMap<String, (u64, u64)>,
}

impl Usage {
    /// The growth from `before` to `self`.
    pub fn since(&self, before: &Usage) -> Usage {
        let commands = self
            .commands
            .iter()
            .map(|(name, &(calls, usec))| {
                let (c0, u0) = before.commands.get(name).copied().unwrap_or_default();
                (
                    name.clone(),
                    (calls.saturating_sub(c0), usec.saturating_sub(u0)),
                )
            })
            .filter(|(_, (calls, _))| *calls > 0)
            .collect();
        Usage {
            cpu_us: self.cpu_us - before.cpu_us,
            calls: self.calls.saturating_sub(before.calls),
            commands,
        }
    }

    /// The commands that took the most time, most first: name, calls and
    /// µs, at most `n`.
    pub fn top(&self, n: usize) -> Vec<(&str, u64, u64)> {
        let mut v: Vec<(&str, u64, u64)> = self
            .commands
            .iter()
            .map(|(name, &(calls, usec))| (name.as_str(), calls, usec))
            .collect();
        v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// Parses the text of `INFO cpu commandstats`.
    pub fn parse(info: &str) -> Usage {
        let mut u = Usage::default();
        for line in info.lines().map(str::trim_end) {
            if let Some(v) = line
                .strip_prefix("used_cpu_sys:")
                .or_else(|| line.strip_prefix("used_cpu_user:"))
            {
                u.cpu_us += v.parse::<f64>().unwrap_or(0.0) * 1e6;
            } else if let Some(stats) = line.strip_prefix("cmdstat_") {
                let field = |name: &str| -> Option<f64> {
                    stats
                        .split_once(':')?
                        .1
                        .split(',')
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))?
                        .parse()
                        .ok()
                };
                let calls = field("calls").unwrap_or(0.0) as u64;
                u.calls += calls;
                if let Some((name, _)) = stats.split_once(':') {
                    let usec = field("usec").unwrap_or(0.0) as u64;
                    u.commands.insert(name.to_string(), (calls, usec));
                }
            }
        }
        u
    }
}

impl Node {
    /// Its counters now.
    pub async fn usage(&mut self) -> Result<Usage, BenchError> {
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .arg("commandstats")
            .query_async(&mut self.conn)
            .await?;
        Ok(Usage::parse(&info))
    }

    /// Whether it serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }

    /// Deletes its keys matching `pattern`.
    pub async fn delete_matching(&mut self, pattern: &str) -> Result<(), BenchError> {
        super::delete_matching(&mut self.conn, pattern).await
    }
}

/// One Redis (not a cluster) as a [`Node`] serving every slot.
pub async fn single(redis: &RedisArgs) -> Result<Node, BenchError> {
    let url = redis
        .urls()
        .first()
        .map(|u| u.to_string())
        .unwrap_or_default();
    Ok(Node {
        addr: host_port(&url),
        slots: vec![(0, SLOTS - 1)],
        conn: open_node(redis, &url).await?,
    })
}

/// The masters of the cluster `redis` names, as `CLUSTER SLOTS` on its
/// first node lists them, in the order of their first slot; and how many
/// replicas the master with the fewest has.
pub async fn masters(redis: &RedisArgs) -> Result<(Vec<Node>, usize), BenchError> {
    let seed = redis
        .urls()
        .first()
        .map(|u| u.to_string())
        .unwrap_or_default();
    let mut first = open_node(redis, &seed).await?;
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut first)
        .await?;
    let listed = cluster_masters(&reply);
    if listed.is_empty() {
        return Err(BenchError::Check(format!(
            "CLUSTER SLOTS on {} lists no master",
            host_port(&seed)
        )));
    }
    let replicas = listed.iter().map(|m| m.replicas).min().unwrap_or(0);
    let mut nodes = Vec::with_capacity(listed.len());
    for m in listed {
        let url = node_url(&seed, &m.host, m.port);
        nodes.push(Node {
            addr: host_port(&url),
            slots: m.ranges,
            conn: open_node(redis, &url).await?,
        });
    }
    Ok((nodes, replicas))
}

/// A master as `CLUSTER SLOTS` lists it.
struct Listed {
    host: String,
    port: u16,
    ranges: Vec<(u16, u16)>,
    replicas: usize,
}

/// The masters of a `CLUSTER SLOTS` reply (`[first, last, [host, port,
/// id], replicas…]` per range), in the order of their lowest slot.
fn cluster_masters(reply: &Value) -> Vec<Listed> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let mut out: Vec<Listed> = Vec::new();
    for range in ranges {
        let Value::Array(r) = range else { continue };
        let Ok((first, last, node)) = redis::from_redis_value::<(u16, u16, Value)>(Value::Array(
            r[..r.len().min(3)].to_vec(),
        )) else {
            continue;
        };
        let Ok((host, port)) = redis::from_redis_value::<(String, u16)>(match node {
            Value::Array(n) => Value::Array(n.into_iter().take(2).collect()),
            other => other,
        }) else {
            continue;
        };
        let replicas = r.len().saturating_sub(3);
        if let Some(m) = out.iter_mut().find(|m| m.host == host && m.port == port) {
            m.ranges.push((first, last));
            m.replicas = m.replicas.min(replicas);
        } else {
            out.push(Listed {
                host,
                port,
                ranges: vec![(first, last)],
                replicas,
            });
        }
    }
    for m in &mut out {
        m.ranges.sort_unstable();
    }
    out.sort_by_key(|m| m.ranges.first().map_or(u16::MAX, |r| r.0));
    out
}

/// A connection to exactly the node at `url`, never a cluster connection.
async fn open_node(redis: &RedisArgs, url: &str) -> Result<Conn, BenchError> {
    let args = RedisArgs {
        url: url.to_string(),
        cluster: ClusterMode::Off,
        ..redis.clone()
    };
    let client = hitcount::store::connect::client(&args)?;
    Ok(client.open_this_node(super::RESPONSE_TIMEOUT).await?)
}

/// `seed` with its host and port replaced: same scheme, user, password,
/// database and options.
fn node_url(seed: &str, host: &str, port: u16) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let user = authority.rfind('@').map_or("", |i| &authority[..=i]);
    // An empty host: the node does not know its address (a cluster of one
    // node, never introduced to another), and the answer means "the node
    // you asked".
    if host.is_empty() {
        let (seed_host, _) = host_port(seed)
            .rsplit_once(':')
            .map(|(h, p)| (h.to_string(), p.to_string()))
            .unwrap_or_else(|| (host_port(seed), String::new()));
        return format!("{scheme}://{user}{seed_host}:{port}{tail}");
    }
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    format!("{scheme}://{user}{host}:{port}{tail}")
}

/// The `host:port` of a URL, without scheme or password.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .to_string()
}

/// SLOWLOG entries, summed up per command, a script by its file:
/// "EVALSHA apply.lua ×3 (max 12345 µs)".
pub async fn slowlog(conn: &mut Conn) -> Result<Vec<String>, BenchError> {
    let entries: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query_async(conn)
        .await?;
    Ok(slowlog_summary(&entries))
}

/// [`slowlog`]'s summary of `SLOWLOG GET` entries.
fn slowlog_summary(entries: &[Value]) -> Vec<String> {
    let mut per_command: std::collections::BTreeMap<String, (usize, i64)> = Default::default();
    for line in entries.iter().filter_map(|e| match e {
        Value::Array(f) => {
            let micros = match f.get(2) {
                Some(Value::Int(n)) => *n,
                _ => 0,
            };
            let cmd = match f.get(3) {
                Some(Value::Array(args)) => {
                    let arg = |i: usize| match args.get(i) {
                        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                        Some(Value::SimpleString(s)) => s.clone(),
                        _ => String::new(),
                    };
                    let cmd = arg(0).to_uppercase();
                    // A script by its file name when it is one of
                    // hitcount's, else by the start of its SHA1.
                    match arg(1).get(..SHA_SHOWN) {
                        Some(sha) if cmd == "EVALSHA" && arg(1).len() == 40 => {
                            match hitcount::store::scripts::name_of(&arg(1)) {
                                Some(name) => format!("{cmd} {name}"),
                                None => format!("{cmd} {sha}"),
                            }
                        }
                        _ => cmd,
                    }
                }
                _ => String::new(),
            };
            Some((cmd, micros))
        }
        _ => None,
    }) {
        let e = per_command.entry(line.0).or_default();
        e.0 += 1;
        e.1 = e.1.max(line.1);
    }
    per_command
        .into_iter()
        .map(|(cmd, (n, max))| format!("{cmd} ×{n} (max {max} µs)"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow(micros: i64, args: &[&str]) -> Value {
        let args = args
            .iter()
            .map(|a| Value::BulkString(a.as_bytes().to_vec()))
            .collect();
        Value::Array(vec![
            Value::Int(1),
            Value::Int(1_700_000_000),
            Value::Int(micros),
            Value::Array(args),
        ])
    }

    #[test]
    fn the_slowlog_summary_counts_per_command_and_names_scripts() {
        let claim = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567";
        let entries = [
            slow(12_000, &["EVALSHA", claim, "5", "hits"]),
            slow(15_000, &["evalsha", claim, "5", "hits"]),
            slow(11_000, &["xadd", "hits", "*"]),
            slow(10_500, &["EVALSHA", "0123", "0"]),
        ];
        assert_eq!(
            slowlog_summary(&entries),
            [
                "EVALSHA ×1 (max 10500 µs)",
                "EVALSHA 0a1b2c3d ×2 (max 15000 µs)",
                "XADD ×1 (max 11000 µs)",
            ]
        );
    }

    #[test]
    fn node_urls_keep_everything_but_the_address() {
        assert_eq!(
            node_url("rediss://u:p%40w@seed:6379/0?x=1", "10.0.0.2", 7001),
            "rediss://u:p%40w@10.0.0.2:7001/0?x=1"
        );
        assert_eq!(node_url("redis://seed:1", "::1", 7), "redis://[::1]:7");
        // A lone node's CLUSTER SLOTS names no host: the one asked.
        assert_eq!(
            node_url("redis://:pw@seed:1/0", "", 7),
            "redis://:pw@seed:7/0"
        );
        assert_eq!(node_url("redis://[::1]:1", "", 7), "redis://[::1]:7");
        assert_eq!(host_port("redis://:pw@h:6379/0"), "h:6379");
    }

    #[test]
    fn parses_cpu_time_and_calls() {
        let info = "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\n\
                    used_cpu_sys_children:9.0\r\n# Commandstats\r\n\
                    cmdstat_evalsha:calls=10,usec=300,usec_per_call=30.00,rejected_calls=0\r\n\
                    cmdstat_hincrby:calls=40,usec=20,usec_per_call=0.50\r\n";
        let u = Usage::parse(info);
        assert!((u.cpu_us - 1_750_000.0).abs() < 1e-6);
        assert_eq!(u.calls, 50);
        let d = u.since(&Usage {
            cpu_us: 750_000.0,
            calls: 5,
            commands: BTreeMap::new(),
        });
        assert_eq!((d.cpu_us, d.calls), (1_000_000.0, 45));
        assert_eq!(d.top(1), vec![("evalsha", 10, 300)]);
        assert_eq!(d.top(5).len(), 2);
        let mut earlier = Usage::parse(info);
        earlier.commands.insert("hincrby".into(), (30, 5));
        let grown = u.since(&earlier);
        assert_eq!(grown.top(5), vec![("hincrby", 10, 15)]);
    }
}
