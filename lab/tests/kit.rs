//! Tests of the throwaway `redis-server` launcher, spoken to in raw RESP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hitcount_lab::kit::{
    free_port, make_test_certs, EmbeddedError, RedisServer, ServerOptions, CLIENT_CERT_FILE,
    CLIENT_KEY_FILE, CONFIG_FILE,
};

/// A raw RESP connection to a plain-text server.
struct Conn(BufReader<TcpStream>);

impl Conn {
    fn open(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Conn(BufReader::new(stream))
    }

    /// Sends one command and returns its reply: the status or error line,
    /// the integer, the bulk string's content (`(nil)` for a null bulk), or
    /// an array's elements one per line.
    fn cmd(&mut self, args: &[&str]) -> String {
        let mut req = format!("*{}\r\n", args.len());
        for arg in args {
            req.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.0.get_mut().write_all(req.as_bytes()).unwrap();
        self.reply()
    }

    fn reply(&mut self) -> String {
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        let line = line.trim_end().to_string();
        if let Some(len) = line.strip_prefix('$') {
            if len == "-1" {
                return "(nil)".to_string();
            }
            let mut buf = vec![0; len.parse::<usize>().unwrap() + 2];
            self.0.read_exact(&mut buf).unwrap();
            return String::from_utf8_lossy(&buf[..buf.len() - 2]).into_owned();
        }
        if let Some(n) = line.strip_prefix('*') {
            let n: usize = n.parse().unwrap_or(0);
            return (0..n).map(|_| self.reply()).collect::<Vec<_>>().join("\n");
        }
        line
    }
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn starts_answers_and_stops() {
    let mut server = RedisServer::start(ServerOptions::default()).unwrap();
    let port = server.port();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));
    assert!(server.dir().join(CONFIG_FILE).is_file());
    assert!(server.is_running());
    assert_eq!(Conn::open(port).cmd(&["PING"]), "+PONG");
    let dir = Conn::open(port).cmd(&["CONFIG", "GET", "dir"]);
    let canonical = server.dir().canonicalize().unwrap();
    assert_eq!(dir, format!("dir\n{}", canonical.display()));

    server.stop();
    assert!(!server.is_running());
    assert!(!pid_alive(server.pid()));
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn restart_keeps_aof_data() {
    let mut server = RedisServer::start(ServerOptions {
        appendonly: true,
        ..ServerOptions::default()
    })
    .unwrap();
    let port = server.port();
    let first_pid = server.pid();
    assert_eq!(Conn::open(port).cmd(&["SET", "hits", "42"]), "+OK");

    server.restart().unwrap();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), first_pid);
    assert!(!pid_alive(first_pid));
    assert_eq!(Conn::open(port).cmd(&["GET", "hits"]), "42");
}

#[test]
fn kill_then_restart() {
    let mut server = RedisServer::start(ServerOptions::default()).unwrap();
    let pid = server.pid();
    server.kill();
    assert!(!pid_alive(pid));
    assert!(!server.is_running());
    server.restart().unwrap();
    assert_eq!(Conn::open(server.port()).cmd(&["PING"]), "+PONG");
}

#[test]
fn drop_kills_the_process_and_removes_the_dir() {
    let server = RedisServer::start(ServerOptions::default()).unwrap();
    let pid = server.pid();
    let dir = server.dir().to_path_buf();
    assert!(pid_alive(pid));
    drop(server);
    assert!(!pid_alive(pid));
    assert!(!dir.exists());
}

#[test]
fn password_is_required_and_in_the_url() {
    let server = RedisServer::start(ServerOptions {
        password: Some("s3cret pw".into()),
        ..ServerOptions::default()
    })
    .unwrap();
    assert_eq!(
        server.url(),
        format!("redis://:s3cret%20pw@127.0.0.1:{}", server.port())
    );
    let mut conn = Conn::open(server.port());
    assert!(conn.cmd(&["PING"]).starts_with("-NOAUTH"));
    assert_eq!(conn.cmd(&["AUTH", "s3cret pw"]), "+OK");
    assert_eq!(conn.cmd(&["PING"]), "+PONG");
}

#[test]
fn extra_config_lines_apply() {
    let server = RedisServer::start(ServerOptions {
        extra: vec![
            "slowlog-log-slower-than 10000".into(),
            "user app on >pw ~* +@all".into(),
        ],
        ..ServerOptions::default()
    })
    .unwrap();
    let mut conn = Conn::open(server.port());
    assert_eq!(conn.cmd(&["AUTH", "app", "pw"]), "+OK");
    assert_eq!(
        conn.cmd(&["CONFIG", "GET", "slowlog-log-slower-than"]),
        "slowlog-log-slower-than\n10000"
    );
}

#[test]
fn bad_config_fails_fast_with_the_log() {
    let err = RedisServer::start(ServerOptions {
        extra: vec!["no-such-directive yes".into()],
        ..ServerOptions::default()
    })
    .unwrap_err();
    assert!(matches!(err, EmbeddedError::Exited { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-directive"), "{err}");
}

#[test]
fn parallel_servers_get_distinct_ports() {
    let servers: Vec<RedisServer> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| s.spawn(|| RedisServer::start(ServerOptions::default()).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), servers.len());
    for server in &servers {
        assert_eq!(Conn::open(server.port()).cmd(&["PING"]), "+PONG");
    }
}

#[test]
fn free_port_differs_between_calls_mostly() {
    let ports: std::collections::HashSet<u16> = (0..5).map(|_| free_port()).collect();
    assert!(ports.len() > 1);
}

/// Runs `redis-cli --tls … PING` against `server` and returns its stdout.
fn tls_ping(server: &RedisServer, certs: &Path, client_cert: bool) -> String {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["--tls", "-h", "127.0.0.1", "-p", &server.port().to_string()])
        .arg("--cacert")
        .arg(certs.join("ca.crt"));
    if client_cert {
        cmd.arg("--cert")
            .arg(certs.join(CLIENT_CERT_FILE))
            .arg("--key")
            .arg(certs.join(CLIENT_KEY_FILE));
    }
    let out = cmd.arg("PING").output().expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn tls_server_starts() {
    let certs = tempfile::tempdir().unwrap();
    let tls = make_test_certs(certs.path()).unwrap();
    let server = RedisServer::start(ServerOptions {
        tls: Some(tls),
        ..ServerOptions::default()
    })
    .unwrap();
    assert_eq!(
        server.url(),
        format!("rediss://127.0.0.1:{}", server.port())
    );
    assert_eq!(tls_ping(&server, certs.path(), false), "PONG");
}

#[test]
fn tls_server_can_require_client_certs() {
    let certs = tempfile::tempdir().unwrap();
    let mut tls = make_test_certs(certs.path()).unwrap();
    tls.require_client_cert = true;
    let server = RedisServer::start(ServerOptions {
        tls: Some(tls),
        password: Some("pw".into()),
        ..ServerOptions::default()
    })
    .unwrap();
    assert_eq!(
        server.url(),
        format!("rediss://:pw@127.0.0.1:{}", server.port())
    );
    assert_ne!(tls_ping(&server, certs.path(), false), "PONG");
    assert!(tls_ping(&server, certs.path(), true).contains("NOAUTH"));
}
