//! Which kind of Redis a URL names: a cluster node or not (`INFO
//! cluster`, which a read-only user's `+info` allows), and, with
//! `HITCOUNT_CLUSTER=off`, refusing one master of a cluster of several;
//! and, when a connection failed, what the client's error leaves unsaid: a
//! Redis with no password to check ([`needless_password`]), a port that
//! does not speak TLS ([`tls_silence`]); and the client of one node and
//! its connection ([`node_client`], [`open_node`]).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{RedisError, RedisResult};

/// Whether the server is a cluster node: `cluster_enabled:1` in `INFO
/// cluster`, which `+info` allows (a read-only user needs nothing more). A
/// user granted `+cluster|info` but not `+info` (hitcount's ACL line before
/// it read `INFO`) is asked `CLUSTER INFO`, which a node without cluster
/// support refuses with "cluster support disabled".
pub(crate) async fn is_cluster_node(single: &mut MultiplexedConnection) -> RedisResult<bool> {
    let info: RedisResult<String> = redis::cmd("INFO").arg("cluster").query_async(single).await;
    match info {
        Ok(text) => Ok(cluster_enabled(&text)),
        Err(e) if e.code() == Some("NOPERM") => {
            let reply: RedisResult<String> =
                redis::cmd("CLUSTER").arg("INFO").query_async(single).await;
            match reply {
                Ok(_) => Ok(true),
                Err(c) if cluster_disabled(&c.to_string()) => Ok(false),
                // Neither is allowed: the refusal of INFO names what the
                // documented line grants.
                Err(_) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Whether an `INFO cluster` reply says cluster support is on.
fn cluster_enabled(info: &str) -> bool {
    info_field(info, "cluster_enabled") == Some("1")
}

/// The value of the field `name` in an `INFO` (or `CLUSTER INFO`) text of
/// `name:value` lines.
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Whether a refused `CLUSTER INFO` says the server is no cluster node.
fn cluster_disabled(error: &str) -> bool {
    error.contains("cluster support disabled")
}

/// With `HITCOUNT_CLUSTER=off`, refuses a node that serves one master's
/// share of a cluster of several (`cluster_size` in `CLUSTER INFO`, else
/// the masters of `CLUSTER SLOTS`): the other masters' keys would answer
/// MOVED on every call, for good. A cluster node whose masters this user
/// may not count (serve's and ingest's documented users are granted
/// neither command, only `INFO`) is refused too. A node that is no
/// cluster, a cluster of one master, or a proxy that does not answer
/// `CLUSTER INFO` is talked to as one Redis, as asked.
pub(crate) async fn refuse_several_masters(single: &mut MultiplexedConnection) -> RedisResult<()> {
    let info: RedisResult<String> = redis::cmd("CLUSTER").arg("INFO").query_async(single).await;
    let masters = match info {
        Ok(info) => masters_serving(&info),
        // Not Redis at all: said as such by the caller.
        Err(e) if e.kind() == redis::ErrorKind::Parse => return Err(e),
        Err(e) if e.code() == Some("NOPERM") => {
            let info: String = redis::cmd("INFO")
                .arg("cluster")
                .query_async(single)
                .await?;
            if !cluster_enabled(&info) {
                return Ok(());
            }
            let slots: RedisResult<redis::Value> =
                redis::cmd("CLUSTER").arg("SLOTS").query_async(single).await;
            match slots {
                Ok(slots) => Some(masters_of_slots(&slots)),
                Err(_) => return Err(off_refused(
                    "this user may not ask how many masters it has (CLUSTER INFO, CLUSTER SLOTS)"
                        .into(),
                )),
            }
        }
        Err(_) => return Ok(()),
    };
    match masters {
        Some(n) if n > 1 => Err(off_refused(format!(
            "this node is one of the {n} masters of a Redis Cluster (the others' keys would \
             answer MOVED)"
        ))),
        _ => Ok(()),
    }
}

/// The refusal of `HITCOUNT_CLUSTER=off` on a cluster node, saying why.
fn off_refused(why: String) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "cluster mode off",
        format!("HITCOUNT_CLUSTER=off, but {why}"),
    ))
}

/// The masters serving slots in a `CLUSTER SLOTS` reply: each range's
/// first node, counted once.
fn masters_of_slots(slots: &redis::Value) -> u64 {
    let redis::Value::Array(ranges) = slots else {
        return 0;
    };
    let masters: std::collections::BTreeSet<String> = ranges
        .iter()
        .filter_map(|range| match range {
            redis::Value::Array(r) => r.get(2).map(|node| format!("{node:?}")),
            _ => None,
        })
        .collect();
    masters.len() as u64
}

/// The masters serving slots, from a `CLUSTER INFO` reply.
fn masters_serving(info: &str) -> Option<u64> {
    info_field(info, "cluster_size")?.parse().ok()
}

/// A refused `AUTH` that Redis refused for having no password to check:
/// the client reports every refusal as "Password authentication
/// failed", a wrong password, also when Redis said `AUTH <password>
/// called without any password configured`. The URL's `AUTH` is sent
/// again (within `within`) on a connection opened without it, and that
/// refusal returned; `err` as it was for any other error or answer (a
/// wrong password, whose words every command already has).
pub(crate) async fn needless_password(
    client: &redis::Client,
    tls: Option<&redis::TlsCertificates>,
    within: Duration,
    err: RedisError,
) -> RedisError {
    if err.kind() != redis::ErrorKind::AuthenticationFailed {
        return err;
    }
    let info = client.get_connection_info();
    let settings = info.redis_settings();
    let Some(password) = settings.password() else {
        return err;
    };
    let bare = info
        .clone()
        .set_redis_settings(redis::RedisConnectionInfo::default());
    let Ok(bare) = node_client(bare, tls) else {
        return err;
    };
    let Ok(mut conn) = open_node(&bare, within, within).await else {
        return err;
    };
    let mut auth = redis::cmd("AUTH");
    if let Some(user) = settings.username() {
        auth.arg(user);
    }
    match auth.arg(password).query_async::<()>(&mut conn).await {
        Err(said) if crate::store::hint::is_needless_password(&said) => said,
        _ => err,
    }
}

/// A `rediss://` connection that timed out while the port takes TCP
/// connections (within `within`): the TLS handshake got no answer, as
/// from a port that does not speak TLS (a plain Redis waits for the rest
/// of what it takes for a command), which the timeout alone does not say.
/// Still a timeout (retried as one); `err` as it was otherwise.
pub(crate) async fn tls_silence(
    client: &redis::Client,
    within: Duration,
    err: RedisError,
) -> RedisError {
    let redis::ConnectionAddr::TcpTls { host, port, .. } = client.get_connection_info().addr()
    else {
        return err;
    };
    if !err.is_timeout() {
        return err;
    }
    let tcp = tokio::net::TcpStream::connect((host.as_str(), *port));
    if !matches!(tokio::time::timeout(within, tcp).await, Ok(Ok(_))) {
        return err;
    }
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "timed out in the TLS handshake with {host}:{port}, which takes TCP \
             connections: that port may not speak TLS (a plain Redis never answers a \
             handshake): use redis:// for it, or the port Redis serves TLS on (its tls-port)"
        ),
    ))
}

/// A client of the one node `info` names, with the TLS files `tls` when
/// given.
pub(crate) fn node_client(
    info: impl redis::IntoConnectionInfo,
    tls: Option<&redis::TlsCertificates>,
) -> RedisResult<redis::Client> {
    match tls {
        Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
        None => redis::Client::open(info),
    }
}

/// A connection to `client`'s node, opened within `connect`, each reply
/// awaited at most `response`.
pub(crate) async fn open_node(
    client: &redis::Client,
    connect: Duration,
    response: Duration,
) -> RedisResult<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(Some(response));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_info_names_the_masters_serving_slots() {
        let info = "cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_size:3\r\n";
        assert_eq!(masters_serving(info), Some(3));
        assert_eq!(masters_serving("cluster_state:fail\r\n"), None);
    }

    #[test]
    fn info_cluster_tells_a_cluster_node() {
        assert!(cluster_enabled("# Cluster\r\ncluster_enabled:1\r\n"));
        assert!(!cluster_enabled("# Cluster\r\ncluster_enabled:0\r\n"));
        assert!(!cluster_enabled("a proxy's own text"));
    }

    #[test]
    fn a_server_without_cluster_support_says_so() {
        assert!(cluster_disabled(
            "An error was signalled by the server - ResponseError: This instance has cluster support disabled"
        ));
        assert!(!cluster_disabled(
            "NOPERM this user has no permissions to run the 'cluster|info' command"
        ));
    }
}
