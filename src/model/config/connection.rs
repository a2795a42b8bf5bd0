//! How to reach Redis: the URL (one node, or several nodes of a Redis
//! Cluster), cluster mode and the TLS files ([`RedisArgs`]), their defaults,
//! and [`redact_url`] to print a URL without its password.

use std::path::PathBuf;

use clap::Args;

/// Default Redis URL when `REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// Default cluster mode: ask the server (`cluster_enabled:1` in `INFO`).
pub const DEFAULT_CLUSTER: ClusterMode = ClusterMode::Auto;

/// Whether to talk to Redis as a cluster (`HITCOUNT_CLUSTER`): see
/// [`RedisArgs::cluster`]. (The variants carry no doc comment, so that
/// `--help` lists them on one line after the flag's own text.)
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterMode {
    #[allow(missing_docs)]
    #[default]
    Auto,
    #[allow(missing_docs)]
    On,
    #[allow(missing_docs)]
    Off,
}

/// How to reach Redis.
#[derive(Args, Debug, Clone)]
pub struct RedisArgs {
    /// Redis URL: `redis://[user:password@]host:port[/db]` or `rediss://` for TLS;
    /// several nodes of a cluster separated by commas. The password is never
    /// logged.
    #[arg(long = "redis-url", env = "REDIS_URL", default_value = DEFAULT_REDIS_URL, hide_env_values = true)]
    pub url: String,
    /// Redis Cluster. `auto`: a cluster client when the URL names several
    /// nodes or its node reports `cluster_enabled:1` (INFO), else one node;
    /// `on`: always a cluster client; `off`: always one node (several nodes
    /// are refused, and so is a node that is one of a cluster's several
    /// masters, whose other keys would answer MOVED; a cluster of one
    /// master, or a proxy, is fine).
    #[arg(long = "cluster", env = "HITCOUNT_CLUSTER", value_enum, default_value_t = DEFAULT_CLUSTER)]
    pub cluster: ClusterMode,
    /// PEM file of the CA that signed the server's certificate (rediss:// only;
    /// default: the system's roots).
    #[arg(long = "redis-ca", env = "HITCOUNT_REDIS_CA")]
    pub ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --redis-key).
    #[arg(long = "redis-cert", env = "HITCOUNT_REDIS_CERT", requires = "key")]
    pub cert: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long = "redis-key", env = "HITCOUNT_REDIS_KEY", requires = "cert")]
    pub key: Option<PathBuf>,
}

impl Default for RedisArgs {
    fn default() -> Self {
        RedisArgs::from_url(DEFAULT_REDIS_URL)
    }
}

impl RedisArgs {
    /// Settings for a plain URL, no TLS files.
    pub fn from_url(url: &str) -> Self {
        RedisArgs {
            url: url.to_string(),
            cluster: DEFAULT_CLUSTER,
            ca: None,
            cert: None,
            key: None,
        }
    }
}

impl RedisArgs {
    /// The node URLs: `url` split at its commas (a comma in a password is
    /// written `%2C`, as in any URL).
    pub fn urls(&self) -> Vec<&str> {
        self.url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect()
    }
}

/// Removes the passwords from a Redis URL (or a comma-separated list of
/// them) so it can be printed.
pub fn redact_url(url: &str) -> String {
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let redacted = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_string()
            };
            format!("{}://{}{}", &url[..scheme_end], redacted, &rest[at..])
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_defaults_match_default() {
        assert_clap_defaults!(RedisArgs {
            url: "REDIS_URL",
            cluster: "HITCOUNT_CLUSTER",
            ca: "HITCOUNT_REDIS_CA",
            cert: "HITCOUNT_REDIS_CERT",
            key: "HITCOUNT_REDIS_KEY",
        });
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("rediss://:secret@h:1"), "rediss://:***@h:1");
        assert_eq!(redact_url("redis://secret@h:1"), "redis://***@h:1");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(redact_url("redis://u:p@ss@h:1"), "redis://u:***@h:1");
        assert_eq!(
            redact_url("redis://u:one@h1:1,redis://u:two@h2:2"),
            "redis://u:***@h1:1,redis://u:***@h2:2",
            "every node of a list"
        );
    }

    #[test]
    fn a_list_of_nodes_splits_at_commas() {
        let args = RedisArgs::from_url("redis://h1:1, redis://h2:2,");
        assert_eq!(args.urls(), ["redis://h1:1", "redis://h2:2"]);
        assert_eq!(RedisArgs::default().urls(), [DEFAULT_REDIS_URL]);
    }
}
