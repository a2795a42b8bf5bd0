//! How to reach Redis: the URL (one node, or several nodes of a Redis
//! Cluster), cluster mode and the TLS files ([`RedisArgs`]), their defaults,
//! [`ignored_url_field`] to refuse a URL the Redis client would read only in
//! part, and [`redact_url`] to print a URL without its password.

use std::path::PathBuf;

use clap::Args;

/// Default Redis URL when `REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Whether to talk to Redis as a cluster (`HITCOUNT_CLUSTER`): see
/// [`RedisArgs::cluster`]. (The variants carry no doc comment, so that
/// `--help` lists them on one line after the flag's own text.)
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub enum ClusterMode {
    #[default]
    Auto,
    On,
    Off,
}

/// How to reach Redis. Its `Debug` hides the password, as every message
/// does.
#[derive(Args, Clone)]
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
    #[arg(long = "cluster", env = "HITCOUNT_CLUSTER", value_enum, default_value_t = ClusterMode::Auto)]
    pub cluster: ClusterMode,
    /// PEM file of the CA that signed the server's certificate (rediss:// only;
    /// default: the system's roots).
    #[arg(long = "redis-ca", env = "HITCOUNT_REDIS_CA")]
    pub ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --redis-key).
    #[arg(long = "redis-cert", env = "HITCOUNT_REDIS_CERT")]
    pub cert: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long = "redis-key", env = "HITCOUNT_REDIS_KEY")]
    pub key: Option<PathBuf>,
}

impl std::fmt::Debug for RedisArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisArgs")
            .field("url", &redact_url(&self.url))
            .field("cluster", &self.cluster)
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish()
    }
}

impl RedisArgs {
    /// Settings for a plain URL, no TLS files.
    pub fn from_url(url: &str) -> Self {
        RedisArgs {
            url: url.to_string(),
            ..RedisArgs::default()
        }
    }

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

/// The query fields the Redis client reads in a URL of a TCP scheme
/// (`redis://`, `rediss://` and valkey's): the protocol only; the database
/// is the path, the user and password come before the host.
const TCP_QUERY_FIELDS: [&str; 1] = ["protocol"];
/// The query fields the Redis client reads in a unix socket's URL
/// (`redis+unix://`, `unix://`, `valkey+unix://`).
const UNIX_QUERY_FIELDS: [&str; 4] = ["db", "user", "pass", "protocol"];

/// For a URL that did not parse and holds user info: the characters that
/// must be percent-encoded there (the text never repeats the URL, whose
/// password it may hold).
pub(crate) fn encoding_hint(url: &str) -> &'static str {
    if url.contains('@') {
        "; a user name or password holding ? # / @ % or a comma must be written \
         percent-encoded (%3F %23 %2F %40 %25 %2C)"
    } else {
        ""
    }
}

/// Why the Redis client would ignore part of one node's URL `url`: a query
/// field it does not read for the URL's scheme (`redis://h:6379/?db=3`
/// connects to database 0, `redis+unix:///s?password=x` sends no
/// password), naming the field and the form that works; `None` when it
/// reads every field. A field's value is never repeated (it may be a
/// password). Other schemes are left to the client, which refuses them.
pub(crate) fn ignored_url_field(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let tcp = matches!(scheme.as_str(), "redis" | "rediss" | "valkey" | "valkeys");
    let unix = matches!(scheme.as_str(), "unix" | "redis+unix" | "valkey+unix");
    if !tcp && !unix {
        return None;
    }
    // After the user info, as `redact_url` reads it: a `?` in a password
    // the URL failed to encode is no query, and none of it is repeated.
    let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    // The query ends at the fragment (`#insecure`).
    let query = rest.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or_default();
    let field = query
        .split('&')
        .filter(|f| !f.is_empty())
        .map(|f| f.split_once('=').map_or(f, |(key, _)| key))
        .find(|key| {
            let read: &[&str] = if tcp {
                &TCP_QUERY_FIELDS
            } else {
                &UNIX_QUERY_FIELDS
            };
            !read.contains(key)
        })?;
    let ignored = format!("the query field `{field}` is ignored by the Redis client");
    Some(match (tcp, field) {
        (true, "db" | "database") => format!(
            "{ignored}, which would use database 0: give the database as the URL's path, \
             {scheme}://HOST:PORT/DB"
        ),
        (true, "user" | "username" | "pass" | "password") => format!(
            "{ignored}, which would send no {field}: give them before the host, \
             {scheme}://USER:PASSWORD@HOST:PORT, or {scheme}://:PASSWORD@HOST:PORT for the \
             default user"
        ),
        (true, _) => format!(
            "{ignored} (it reads only `protocol` there): remove it; the database is the URL's \
             path ({scheme}://HOST:PORT/DB), the user and password come before the host \
             ({scheme}://USER:PASSWORD@HOST:PORT)"
        ),
        (false, "password") => format!(
            "{ignored}, which would send no password: a unix socket's password is \
             `?pass=PASSWORD`"
        ),
        (false, "username") => format!(
            "{ignored}, which would send no user name: a unix socket's user is `?user=USER`"
        ),
        (false, _) => format!(
            "{ignored} (it reads only `db`, `user`, `pass` and `protocol` for a unix socket: \
             {scheme}:///PATH?pass=PASSWORD&user=USER&db=N): remove it"
        ),
    })
}

/// Removes the passwords from a Redis URL (or a comma-separated list of
/// them) so it can be printed: every form redis-rs accepts, the user info
/// of `redis://`, `rediss://` (and valkey's) and the `pass=` (or
/// `password=`) query field of `redis+unix://` and `unix://`. The one
/// function every message, log line and child process goes through.
pub(crate) fn redact_url(url: &str) -> String {
    let parts: Vec<&str> = url.split(',').collect();
    // A comma the URL failed to encode (in a password, say) is no list of
    // nodes: the whole is one URL, so no part of its password shows.
    if parts
        .iter()
        .skip(1)
        .any(|p| !p.trim().is_empty() && !p.contains("://"))
    {
        return redact_one(url);
    }
    parts
        .into_iter()
        .map(redact_one)
        .collect::<Vec<_>>()
        .join(",")
}

/// Query fields that carry a password.
const PASSWORD_FIELDS: [&str; 2] = ["pass", "password"];

fn redact_one(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_query(url);
    };
    // The last `@` anywhere ends the user info: a password holding a `/`,
    // `?` or `#` the URL failed to encode is hidden too (at worst a path
    // with an `@` is hidden with it).
    let rest = match rest.rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let redacted = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => "***".to_string(),
            };
            format!("{redacted}{}", &rest[at..])
        }
        None => rest.to_string(),
    };
    format!("{scheme}://{}", redact_query(&rest))
}

/// Hides the value of every password field of a URL's query.
fn redact_query(url: &str) -> String {
    let Some(q) = url.find('?') else {
        return url.to_string();
    };
    let fields: Vec<String> = url[q + 1..]
        .split('&')
        .map(|field| match field.split_once('=') {
            Some((key, _)) if PASSWORD_FIELDS.iter().any(|p| key.eq_ignore_ascii_case(p)) => {
                format!("{key}=***")
            }
            _ => field.to_string(),
        })
        .collect();
    format!("{}?{}", &url[..q], fields.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;
    /// A URL with user info that did not parse is told what to encode;
    /// one without gets nothing more.
    #[test]
    fn a_url_that_does_not_parse_is_told_what_to_encode() {
        assert!(encoding_hint("redis://u:se?cret@h:1").contains("percent-encoded (%3F %23"));
        assert_eq!(encoding_hint("redis://h:99999"), "");
    }

    #[test]
    fn clap_defaults_match_default() {
        crate::model::config::tests::assert_clap_defaults::<RedisArgs>();
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
    fn debug_hides_the_password() {
        let args = RedisArgs::from_url("unix:///s?pass=SECRET");
        assert!(!format!("{args:?}").contains("SECRET"));
    }

    #[test]
    fn redacts_passwords_of_unix_sockets() {
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?pass=SECRET"),
            "redis+unix:///run/redis.sock?pass=***"
        );
        assert_eq!(
            redact_url("unix:///run/redis.sock?db=1&user=me&pass=SECRET&protocol=3"),
            "unix:///run/redis.sock?db=1&user=me&pass=***&protocol=3"
        );
        assert_eq!(
            redact_url("redis://h:1/0?password=SECRET"),
            "redis://h:1/0?password=***"
        );
        assert_eq!(
            redact_url("/run/redis.sock?pass=SECRET"),
            "/run/redis.sock?pass=***"
        );
        assert_eq!(redact_url("valkeys://u:SECRET@h:1"), "valkeys://u:***@h:1");
        for careless in [
            "redis://u:SE/CRET@h:1",
            "redis://u:SE?CRET@h:1",
            "redis://:SE#CRET@h",
            "redis://:SE,CRET@h:1",
            "unix:///s?pass=SE#CRET",
        ] {
            assert!(!redact_url(careless).contains("CRET"), "{careless}");
        }
    }

    /// A query field the Redis client does not read is named with the form
    /// that works (it would connect to database 0, or send no password);
    /// every field it reads is accepted, for each scheme.
    #[test]
    fn url_query_fields_the_client_ignores_are_named() {
        let db = ignored_url_field("redis://127.0.0.1:6379/?db=3").unwrap();
        assert!(
            db.contains("`db`") && db.contains("redis://HOST:PORT/DB"),
            "{db}"
        );
        let pass = ignored_url_field("rediss://h:1?password=SECRET").unwrap();
        assert!(pass.contains("`password`"), "{pass}");
        assert!(pass.contains("rediss://:PASSWORD@HOST:PORT"), "{pass}");
        assert!(!pass.contains("SECRET"), "{pass}");
        let unix = ignored_url_field("redis+unix:///s.sock?user=a&password=b").unwrap();
        assert!(
            unix.contains("`password`") && unix.contains("?pass="),
            "{unix}"
        );
        let other = ignored_url_field("redis://h:1/0?timeout=5").unwrap();
        assert!(other.contains("`timeout`"), "{other}");
        for fine in [
            "redis://127.0.0.1:6379",
            "redis://u:p@h:1/3",
            "redis://h:1/?protocol=resp3",
            "rediss://h:1/#insecure",
            "rediss://h:1/?protocol=2#insecure",
            "valkey://h:1?protocol=3",
            "redis+unix:///s.sock?pass=x&user=u&db=2&protocol=3",
            "unix:///s.sock?pass=x",
            "unix:///s.sock",
            "redis://h:1/?",
            "127.0.0.1:6379",
            // Left to the client, which refuses it without a word of it.
            "redis://:SE?CRET@h:1",
        ] {
            assert_eq!(ignored_url_field(fine), None, "{fine}");
        }
    }

    #[test]
    fn a_list_of_nodes_splits_at_commas() {
        let args = RedisArgs::from_url("redis://h1:1, redis://h2:2,");
        assert_eq!(args.urls(), ["redis://h1:1", "redis://h2:2"]);
        assert_eq!(RedisArgs::default().urls(), [DEFAULT_REDIS_URL]);
    }
}
