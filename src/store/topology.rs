//! The masters of a Redis Cluster and the hash slots each serves, as
//! `CLUSTER SLOTS` lists them: for `SCAN` over every master, for the bench
//! that prices each master, and for `status`, which shows how the stream
//! shards fall over the masters.

use redis::{RedisResult, Value};

use crate::store::connect::Conn;
use crate::store::stream::items;

/// One master of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Master {
    /// Its address as the cluster announces it (empty for a node that does
    /// not know its own: a cluster of one node, never introduced to
    /// another; the node asked is meant).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The slot ranges it serves, inclusive, lowest first.
    pub ranges: Vec<(u16, u16)>,
    /// Replicas listed with the range that has the fewest.
    pub replicas: usize,
}

impl Master {
    /// `host:port` (`[host]:port` for an IPv6 address).
    pub(crate) fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Whether it serves `slot`.
    pub(crate) fn serves(&self, slot: u16) -> bool {
        self.ranges.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }

    /// Its lowest slot: a command routed there reaches this master.
    pub(crate) fn first_slot(&self) -> u16 {
        self.ranges.first().map_or(0, |r| r.0)
    }
}

/// The masters the cluster `conn` reaches, in the order of their lowest slot.
pub(crate) async fn masters(conn: &mut Conn) -> RedisResult<Vec<Master>> {
    let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
    Ok(parse(&reply))
}

/// The masters in a `CLUSTER SLOTS` reply, in the order of their lowest slot.
pub(crate) fn parse(reply: &Value) -> Vec<Master> {
    let mut masters: Vec<Master> = Vec::new();
    for r in items(reply).iter().map(items) {
        let Some((first, last, host, port)) = range(r) else {
            continue;
        };
        let replicas = r.len().saturating_sub(3);
        match masters
            .iter_mut()
            .find(|m| m.host == host && m.port == port)
        {
            Some(m) => {
                m.ranges.push((first, last));
                m.replicas = m.replicas.min(replicas);
            }
            None => masters.push(Master {
                host,
                port,
                ranges: vec![(first, last)],
                replicas,
            }),
        }
    }
    for m in &mut masters {
        m.ranges.sort_unstable();
    }
    masters.sort_by_key(Master::first_slot);
    masters
}

/// One range of a `CLUSTER SLOTS` reply, `[first, last, [host, port, …],
/// replicas…]`: its slots and its master's address; `None` if malformed.
fn range(r: &[Value]) -> Option<(u16, u16, String, u16)> {
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let node = items(r.get(2)?);
    let host = crate::store::stream::text(node.first()?)?;
    Some((int(r.first()?)?, int(r.get(1)?)?, host, int(node.get(1)?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    fn range(first: i64, last: i64, nodes: Vec<Value>) -> Value {
        let mut r = vec![Value::Int(first), Value::Int(last)];
        r.extend(nodes);
        Value::Array(r)
    }

    #[test]
    fn masters_gather_their_ranges_and_sort_by_their_lowest_slot() {
        let reply = Value::Array(vec![
            range(
                10922,
                16383,
                vec![node("10.0.0.3", 7002), node("10.0.0.6", 7005)],
            ),
            range(8241, 8241, vec![node("10.0.0.3", 7002)]),
            range(
                0,
                5460,
                vec![node("10.0.0.1", 7000), node("10.0.0.4", 7003)],
            ),
            range(5461, 8240, vec![node("::1", 7001), node("10.0.0.5", 7004)]),
            range(8242, 10921, vec![node("::1", 7001), node("10.0.0.5", 7004)]),
        ]);
        let m = parse(&reply);
        let addrs: Vec<String> = m.iter().map(Master::addr).collect();
        assert_eq!(addrs, ["10.0.0.1:7000", "[::1]:7001", "10.0.0.3:7002"]);
        assert_eq!(m[1].ranges, vec![(5461, 8240), (8242, 10921)]);
        assert_eq!(m[2].ranges, vec![(8241, 8241), (10922, 16383)]);
        assert_eq!(m[2].first_slot(), 8241);
        assert!(m[2].serves(8241) && !m[1].serves(8241));
        // The fewest replicas of any of its ranges.
        assert_eq!(m.iter().map(|m| m.replicas).collect::<Vec<_>>(), [1, 1, 0]);
    }

    #[test]
    fn a_malformed_reply_lists_no_master() {
        assert!(parse(&Value::Nil).is_empty());
        assert!(parse(&Value::Array(vec![Value::Int(1)])).is_empty());
    }
}
