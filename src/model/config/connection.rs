//! How to reach Redis: the URL and the TLS files ([`RedisArgs`]), its
//! default, and [`redact_url`] to print a URL without its password.

use std::path::PathBuf;

use clap::Args;

/// Default Redis URL when `REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// How to reach Redis.
#[derive(Args, Debug, Clone)]
pub struct RedisArgs {
    /// Redis URL: redis://[user:password@]host:port[/db] or rediss:// for TLS.
    /// The password is never logged.
    #[arg(long = "redis-url", env = "REDIS_URL", default_value = DEFAULT_REDIS_URL, hide_env_values = true)]
    pub url: String,
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
            ca: None,
            cert: None,
            key: None,
        }
    }
}

/// Removes the password from a Redis URL so it can be printed.
pub fn redact_url(url: &str) -> String {
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
    }
}
