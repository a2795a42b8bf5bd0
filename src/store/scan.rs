//! `SCAN` over the whole keyspace: one node's, or every master's on a Redis
//! Cluster (a cluster client sends a plain `SCAN` to one node only), and
//! deleting every key a pattern matches that way (the demo and the bench
//! clear their own keys with it).

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{RedisResult, Value};

use crate::store::connect::Conn;

/// Keys per `SCAN` page (`COUNT`).
const PAGE: usize = 1000;

/// Deletes every key matching `pattern` on this Redis (every master of a
/// cluster), a page of SCAN at a time (`SCAN` tolerates changes between
/// pages; UNLINK frees the memory in the background); returns how many
/// keys.
pub(crate) async fn delete_matching(conn: &mut Conn, pattern: &str) -> RedisResult<u64> {
    let mut deleted = 0;
    for node in nodes(conn).await? {
        let mut cursor = 0u64;
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(PAGE);
            let reply = match (&mut *conn, &node) {
                (Conn::Cluster(c, _), Some(slot)) => {
                    let route =
                        SingleNodeRoutingInfo::SpecificNode(Route::new(*slot, SlotAddr::Master));
                    c.route_command(cmd, RoutingInfo::SingleNode(route)).await?
                }
                _ => cmd.query_async::<Value>(conn).await?,
            };
            let (next, keys): (u64, Vec<String>) = redis::from_redis_value(reply)?;
            if !keys.is_empty() {
                deleted += redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async::<u64>(conn)
                    .await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(deleted)
}

/// The nodes to scan: `None` for the one node; on a cluster a slot of each
/// master (routed by slot, not by address: a lone node, never introduced
/// to another, reports no address of its own).
async fn nodes(conn: &mut Conn) -> RedisResult<Vec<Option<u16>>> {
    if !conn.is_cluster() {
        return Ok(vec![None]);
    }
    let masters = crate::store::topology::masters(conn).await?;
    Ok(masters.iter().map(|m| Some(m.first_slot())).collect())
}
