//! Who hitcount talks to: one Redis node, or a Redis Cluster (several nodes
//! in `REDIS_URL`, `HITCOUNT_CLUSTER=on`, or detected: `auto` asks the first
//! node `INFO cluster`), with TLS files when given; and [`Conn`], the
//! one connection type every module uses, whichever it is.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::model::config::{
    encoding_hint, ignored_url_field, invalid, redact_url, ClusterMode, ConfigError, RedisArgs,
};
use crate::store::detect::{node_client, open_node};

/// Time allowed to open a connection (TCP, TLS, AUTH).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach Redis, built from the settings; cheap to clone.
#[derive(Clone)]
pub struct Client {
    /// The first node (the only one without a cluster).
    first: redis::Client,
    /// Every node given, for a cluster client.
    nodes: Vec<String>,
    tls: Option<redis::TlsCertificates>,
    mode: ClusterMode,
    /// Whether the server is a cluster, once `auto` asked it.
    detected: Arc<OnceLock<bool>>,
    /// The nodes, passwords hidden, for messages.
    shown: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("nodes", &self.shown)
            .field("mode", &self.mode)
            .finish()
    }
}

/// Builds a client from the settings, reading TLS files when given.
pub fn client(args: &RedisArgs) -> Result<Client, ConfigError> {
    let bad_url = |reason: String| invalid("--redis-url / REDIS_URL", reason);
    let nodes: Vec<String> = args.urls().into_iter().map(str::to_string).collect();
    let Some(first_url) = nodes.first() else {
        return Err(bad_url("no Redis URL given".into()));
    };
    if nodes.len() > 1 && args.cluster == ClusterMode::Off {
        return Err(invalid(
            "--cluster / HITCOUNT_CLUSTER",
            format!(
                "off, but REDIS_URL names {} nodes: give one node, or let it be auto or on",
                nodes.len()
            ),
        ));
    }
    if let Some(why) = nodes.iter().find_map(|u| ignored_url_field(u)) {
        return Err(bad_url(why));
    }
    let tls_urls = nodes.iter().filter(|u| u.starts_with("rediss://")).count();
    if tls_urls != 0 && tls_urls != nodes.len() {
        return Err(bad_url(
            "mixes rediss:// and redis:// nodes: use one scheme for all".into(),
        ));
    }
    if tls_urls > 0 {
        // ring as rustls' process-wide crypto provider: redis-rs builds its
        // TLS configuration from the process default and panics without one
        // (rustls is compiled here with ring only). Refused, and left as it
        // is, when one is set already (by an earlier client, or by the
        // program hitcount is a library of).
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    if args.cert.is_some() != args.key.is_some() {
        return Err(ConfigError::Invalid {
            setting: "--redis-cert / HITCOUNT_REDIS_CERT and --redis-key / HITCOUNT_REDIS_KEY",
            reason: "a client certificate needs its key: set both, or neither".into(),
        });
    }
    let tls_files = args.ca.is_some() || args.cert.is_some();
    if tls_files && tls_urls == 0 {
        return Err(bad_url(format!(
            "TLS files are set but {} is not a rediss:// URL",
            redact_url(&args.url)
        )));
    }
    // A file that holds no PEM block of its kind (a key given as the CA,
    // say) is refused here, naming it: rustls would skip it and then blame
    // Redis' certificate.
    let read = |what: &'static str, path: &std::path::PathBuf, pem: &str| {
        let failed = |reason| ConfigError::TlsFile {
            what,
            path: path.clone(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(failed)?;
        if !bytes.windows(pem.len()).any(|w| w == pem.as_bytes()) {
            let why = format!("it holds no PEM block ending in \"{pem}\"");
            return Err(failed(std::io::Error::other(why)));
        }
        Ok(bytes)
    };
    // Without TLS files both are None, and nothing is read.
    const CERTIFICATE: &str = "CERTIFICATE-----";
    let root_cert = args.ca.as_ref().map(|p| read("CA", p, CERTIFICATE));
    let root_cert = root_cert.transpose()?;
    let client_tls = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read("client certificate", cert, CERTIFICATE)?,
            client_key: read("client key", key, "PRIVATE KEY-----")?,
        }),
        _ => None,
    };
    let tls = tls_files.then_some(redis::TlsCertificates {
        client_tls,
        root_cert,
    });
    let first = node_client(first_url.as_str(), tls.as_ref())
        .map_err(|e| bad_url(format!("{e}{}", encoding_hint(first_url))))?;
    let known = match args.cluster {
        ClusterMode::On => Some(true),
        ClusterMode::Off => Some(false),
        // Several nodes given: a cluster, whatever the first one says.
        ClusterMode::Auto => (nodes.len() > 1).then_some(true),
    };
    let detected = Arc::new(known.map_or_else(OnceLock::new, OnceLock::from));
    Ok(Client {
        first,
        shown: redact_url(&args.url),
        nodes,
        tls,
        mode: args.cluster,
        detected,
    })
}

impl Client {
    /// The nodes, passwords hidden, for messages.
    pub(crate) fn describe(&self) -> &str {
        &self.shown
    }

    /// Opens a connection whose replies may take up to `response_timeout`
    /// (give blocking reads more than their BLOCK); never without a
    /// deadline. With `auto`, the first open asks the server whether it is
    /// a cluster.
    pub async fn open(&self, response_timeout: Duration) -> RedisResult<Conn> {
        self.explained(self.open_any(response_timeout).await).await
    }

    /// A failed open told in the words that say why: [`Self::not_redis`],
    /// and what `store::detect` finds out.
    async fn explained<T>(&self, opened: RedisResult<T>) -> RedisResult<T> {
        use crate::store::detect::{needless_password, tls_silence};
        let Err(err) = opened else { return opened };
        let err = self.not_redis(err);
        let err = needless_password(&self.first, self.tls.as_ref(), CONNECT_TIMEOUT, err).await;
        Err(tls_silence(&self.first, CONNECT_TIMEOUT, err).await)
    }

    async fn open_any(&self, response_timeout: Duration) -> RedisResult<Conn> {
        if self.detected.get() == Some(&true) {
            return self.open_cluster(response_timeout).await;
        }
        let mut single = open_node(&self.first, CONNECT_TIMEOUT, response_timeout).await?;
        if self.mode == ClusterMode::Off {
            crate::store::detect::refuse_several_masters(&mut single).await?;
        } else if self.detected.get().is_none() {
            let cluster = crate::store::detect::is_cluster_node(&mut single).await?;
            let _ = self.detected.set(cluster);
            if cluster {
                return self.open_cluster(response_timeout).await;
            }
        }
        Ok(Conn::Single(single))
    }

    /// A reply that is not Redis' protocol at all (an HTTP server, say, at
    /// the URL's port) as the one fatal error that says so; other errors
    /// unchanged.
    fn not_redis(&self, err: redis::RedisError) -> redis::RedisError {
        // A cluster client wraps the parser's error in one of its own.
        let wrapped = err.detail().is_some_and(|d| d.contains("Parse error"));
        if err.kind() == redis::ErrorKind::Parse || wrapped {
            crate::store::error::not_redis(&self.shown)
        } else {
            err
        }
    }

    /// Opens a connection to exactly the first node, even one of a cluster
    /// of several masters: for reading that node's own figures (`INFO`),
    /// never for keys, which the other masters' slots answer with MOVED.
    pub async fn open_this_node(&self, response_timeout: Duration) -> RedisResult<Conn> {
        let opened = open_node(&self.first, CONNECT_TIMEOUT, response_timeout).await;
        self.explained(opened.map(Conn::Single)).await
    }

    async fn open_cluster(&self, response_timeout: Duration) -> RedisResult<Conn> {
        let mut builder = ClusterClient::builder(self.nodes.iter().map(String::as_str))
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(response_timeout);
        if let Some(certs) = &self.tls {
            builder = builder.certs(certs.clone());
        }
        let conn = builder.build()?.get_async_connection().await?;
        Ok(Conn::Cluster(conn, response_timeout * 2))
    }
}

/// `call` bounded by `deadline`: past it, an I/O timeout error (so it is
/// retried on a fresh connection like any other).
pub(crate) async fn within<T>(
    deadline: Duration,
    call: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    tokio::time::timeout(deadline, call)
        .await
        .unwrap_or_else(|_| {
            Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no reply from the cluster within {deadline:?}"),
            )))
        })
}

/// The one connection type hitcount talks to Redis through: to one node,
/// or to a cluster (routed by key, redirected on MOVED/ASK). Every module
/// names this, never redis-rs' own types. Cheap to clone (multiplexed).
#[derive(Clone)]
pub enum Conn {
    /// One Redis node.
    Single(MultiplexedConnection),
    /// A Redis Cluster, and the longest any call may take: the cluster
    /// client retries (redirects, a node being repaired) within a call, and
    /// a call to a master that died can otherwise hang for good.
    Cluster(ClusterConnection, Duration),
}

use crate::store::error::naming_key;
pub(crate) use crate::store::error::wrong_type;

/// A reply of [`Conn::query_each_apart`] for a reader that leaves out a
/// key of another type: `None` for it, any other error as it is.
pub(crate) fn unless_wrong_type(reply: RedisResult<Value>) -> RedisResult<Option<Value>> {
    match reply {
        Err(e) if wrong_type(&e) => Ok(None),
        reply => reply.map(Some),
    }
}

impl Conn {
    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(..))
    }

    /// Sends commands that may each live in a different hash slot and
    /// returns their replies in order: one pipeline on one node; on a
    /// cluster each command on its own, all in flight at once (a cluster
    /// pipeline must stay in one slot). Any command's error fails the call,
    /// as it fails a pipeline.
    pub async fn query_each(&mut self, cmds: Vec<Cmd>) -> RedisResult<Vec<Value>> {
        self.query_each_apart(cmds).await?.into_iter().collect()
    }

    /// [`Conn::query_each`], each command's error in its own reply: a
    /// reader of many keys can leave out one that is not what it reads
    /// ([`wrong_type`]) instead of failing for all.
    pub(crate) async fn query_each_apart(
        &mut self,
        cmds: Vec<Cmd>,
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        if !self.is_cluster() {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for c in cmds {
                pipe.add_command(c);
            }
            let replies: Vec<Value> = pipe.query_async(self).await?;
            return Ok(replies
                .into_iter()
                .zip(pipe.cmd_iter())
                .map(|(reply, cmd)| reply.extract_error().map_err(|e| naming_key(cmd, e)))
                .collect());
        }
        let n = cmds.len();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, cmd) in cmds.into_iter().enumerate() {
            let mut conn = self.clone();
            tasks.spawn(async move {
                let reply = cmd.query_async::<Value>(&mut conn).await;
                (i, reply.map_err(|e| naming_key(&cmd, e)))
            });
        }
        let mut replies: Vec<RedisResult<Value>> = (0..n).map(|_| Ok(Value::Nil)).collect();
        while let Some(done) = tasks.join_next().await {
            let (i, reply) = done.map_err(|e| {
                redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "a concurrent command failed",
                    e.to_string(),
                ))
            })?;
            replies[i] = reply;
        }
        Ok(replies)
    }

    /// `name key` for each of `keys`, sent as [`Conn::query_each`] sends
    /// commands.
    pub(crate) async fn each_key<K: redis::ToRedisArgs>(
        &mut self,
        name: &str,
        keys: impl IntoIterator<Item = K>,
    ) -> RedisResult<Vec<Value>> {
        self.each_key_apart(name, keys).await?.into_iter().collect()
    }

    /// [`Conn::each_key`], each key's error in its own reply, as
    /// [`Conn::query_each_apart`].
    pub(crate) async fn each_key_apart<K: redis::ToRedisArgs>(
        &mut self,
        name: &str,
        keys: impl IntoIterator<Item = K>,
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        let cmds = keys.into_iter().map(|k| redis::cmd(name).arg(k).clone());
        self.query_each_apart(cmds.collect()).await
    }

    /// The fewest replicas attached to any master (`connected_slaves` in
    /// `INFO replication` of every master; on one node, its own): whether
    /// a WAIT that came back short may still be confirmed by waiting on.
    pub(crate) async fn fewest_replicas(&mut self) -> RedisResult<u32> {
        let replies = self.info_of_masters("replication").await?;
        let fewest = replies
            .iter()
            .map(|text| {
                let replicas = crate::store::detect::info_field(text, "connected_slaves");
                replicas.and_then(|n| n.parse().ok()).unwrap_or(0)
            })
            .min();
        Ok(fewest.unwrap_or(0))
    }

    /// `INFO section` of every master (on one node, its own), one text
    /// each.
    pub(crate) async fn info_of_masters(&mut self, section: &str) -> RedisResult<Vec<String>> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg(section);
        let reply: Value = match self {
            Conn::Single(c) => cmd.query_async(c).await?,
            Conn::Cluster(c, deadline) => {
                use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
                let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                within(*deadline, c.route_command(cmd, all)).await?
            }
        };
        let replies = match reply {
            Value::Map(per_node) => per_node.into_iter().map(|(_, v)| v).collect(),
            one => vec![one],
        };
        replies
            .into_iter()
            .map(|v| redis::FromRedisValue::from_redis_value(v).map_err(redis::RedisError::from))
            .collect()
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c, deadline) => Box::pin(within(*deadline, c.req_packed_command(cmd))),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c, deadline) => Box::pin(within(
                *deadline,
                c.req_packed_commands(pipeline, offset, count),
            )),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c, _) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_files_need_rediss() {
        let args = RedisArgs {
            ca: Some("ca.pem".into()),
            ..RedisArgs::from_url("redis://127.0.0.1:1")
        };
        let err = client(&args).unwrap_err().to_string();
        assert!(err.contains("rediss://"), "{err}");
    }

    #[test]
    fn several_nodes_are_a_cluster_unless_off_which_is_refused() {
        let mut args = RedisArgs::from_url("redis://127.0.0.1:1,redis://127.0.0.1:2");
        let c = client(&args).unwrap();
        assert_eq!(c.detected.get(), Some(&true));
        assert_eq!(c.describe(), "redis://127.0.0.1:1,redis://127.0.0.1:2");
        args.cluster = ClusterMode::Off;
        let err = client(&args).unwrap_err().to_string();
        assert!(err.contains("HITCOUNT_CLUSTER"), "{err}");
        let mixed = RedisArgs::from_url("rediss://127.0.0.1:1,redis://127.0.0.1:2");
        assert!(client(&mixed).unwrap_err().to_string().contains("mixes"));
    }

    #[test]
    fn one_node_is_asked_unless_told() {
        let mut args = RedisArgs::from_url("redis://127.0.0.1:1");
        assert_eq!(client(&args).unwrap().detected.get(), None);
        args.cluster = ClusterMode::On;
        assert_eq!(client(&args).unwrap().detected.get(), Some(&true));
        args.cluster = ClusterMode::Off;
        assert_eq!(client(&args).unwrap().detected.get(), Some(&false));
    }
}
