//! The throwaway server's `redis.conf`, and how values are written into it
//! and into the connection URL.
//!
//! [`render_config`] turns a directory, a port and [`ServerOptions`] into
//! the configuration text [`RedisServer`](super::RedisServer) writes to
//! [`CONFIG_FILE`](super::CONFIG_FILE); [`quote`] and [`percent_encode`]
//! make paths and passwords safe for `redis.conf` and for a `redis://` URL.

use std::fmt::Write as _;
use std::path::Path;

use super::{ServerOptions, LOG_FILE};

/// Renders `redis.conf` for a server in `dir` on `port`.
pub(super) fn render_config(dir: &Path, port: u16, opts: &ServerOptions) -> String {
    let path = |p: &Path| quote(&p.to_string_lossy());
    let mut conf = String::new();
    let mut line = |l: String| {
        conf.push_str(&l);
        conf.push('\n');
    };
    line("# Written by hitcount's embedded launcher: a throwaway server.".into());
    line(format!("dir {}", path(dir)));
    line("bind 127.0.0.1".into());
    line("daemonize no".into());
    line("save \"\"".into());
    line(format!("logfile {}", path(&dir.join(LOG_FILE))));
    line("loglevel notice".into());
    line("always-show-logo no".into());
    match &opts.tls {
        None => line(format!("port {port}")),
        Some(tls) => {
            line("port 0".into());
            line(format!("tls-port {port}"));
            line(format!("tls-cert-file {}", path(&tls.cert)));
            line(format!("tls-key-file {}", path(&tls.key)));
            line(format!("tls-ca-cert-file {}", path(&tls.ca)));
            let auth = if tls.require_client_cert { "yes" } else { "no" };
            line(format!("tls-auth-clients {auth}"));
        }
    }
    if opts.appendonly {
        line("appendonly yes".into());
        line("appendfsync everysec".into());
    }
    if let Some(pw) = &opts.password {
        line(format!("requirepass {}", quote(pw)));
    }
    for extra in &opts.extra {
        line(extra.clone());
    }
    conf
}

/// Quotes a value for `redis.conf`: double quotes, with `\`, `"` and control
/// characters escaped.
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(super) fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::TlsFiles;

    #[test]
    fn quotes_config_values() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a \"b\" \\c\n"), "\"a \\\"b\\\" \\\\c\\x0a\"");
    }

    #[test]
    fn percent_encodes_passwords() {
        assert_eq!(percent_encode("s3cret-_.~"), "s3cret-_.~");
        assert_eq!(percent_encode("p@ss word/:"), "p%40ss%20word%2F%3A");
    }

    #[test]
    fn renders_tls_config_without_plain_port() {
        let opts = ServerOptions {
            tls: Some(TlsFiles {
                cert: "/c/server.crt".into(),
                key: "/c/server.key".into(),
                ca: "/c/ca.crt".into(),
                require_client_cert: true,
            }),
            extra: vec!["maxclients 100".into()],
            ..ServerOptions::default()
        };
        let conf = render_config(Path::new("/d"), 7000, &opts);
        assert!(conf.contains("\nport 0\n"));
        assert!(conf.contains("\ntls-port 7000\n"));
        assert!(conf.contains("\ntls-auth-clients yes\n"));
        assert!(conf.ends_with("maxclients 100\n"));
    }
}
