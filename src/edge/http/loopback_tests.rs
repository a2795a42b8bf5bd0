//! Tests of the metrics and health HTTP server over real TCP on the
//! loopback interface.

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::edge::http::{serve, Limits};
    use crate::model::metrics::metrics;
    use crate::service::health::Health;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    /// A running server; shut down on drop of `stop`.
    struct Server {
        addr: std::net::SocketAddr,
        stop: Option<oneshot::Sender<()>>,
        task: JoinHandle<std::io::Result<()>>,
    }

    impl Server {
        async fn start(health: Arc<Health>, limits: Option<Limits>) -> Server {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (tx, rx) = oneshot::channel();
            let shutdown = async move {
                let _ = rx.await;
            };
            let limits = limits.unwrap_or_default();
            let task = tokio::spawn(serve(listener, health, shutdown, limits));
            Server {
                addr,
                stop: Some(tx),
                task,
            }
        }

        async fn shutdown(mut self) {
            let _ = self.stop.take().unwrap().send(());
            tokio::time::timeout(Duration::from_secs(5), &mut self.task)
                .await
                .expect("server stops promptly")
                .unwrap()
                .unwrap();
        }
    }

    /// A parsed HTTP/1.1 response.
    struct Resp {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Resp {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    fn parse(raw: &[u8]) -> Resp {
        let text = String::from_utf8_lossy(raw);
        let (head, body) = text.split_once("\r\n\r\n").expect("complete response head");
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .map(|l| {
                let (k, v) = l.split_once(':').unwrap();
                (k.trim().to_string(), v.trim().to_string())
            })
            .collect();
        Resp {
            status,
            headers,
            body: body.to_string(),
        }
    }

    /// Sends one request with `Connection: close` and reads the whole response.
    async fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> Resp {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut raw))
            .await
            .expect("response within 5 s")
            .unwrap();
        parse(&raw)
    }

    async fn get(addr: std::net::SocketAddr, path: &str) -> Resp {
        request(addr, "GET", path).await
    }

    /// Reads until EOF or error; returns what was read, or None if the server
    /// kept the connection open past `within`.
    async fn read_until_closed(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
        let mut raw = Vec::new();
        match tokio::time::timeout(within, s.read_to_end(&mut raw)).await {
            Ok(_) => Some(raw),
            Err(_) => None,
        }
    }

    fn ready_health() -> Arc<Health> {
        let h = Health::new(Duration::from_secs(60));
        h.set_redis_connected(true);
        h.set_in_group(true);
        h
    }

    /// A minimal check of the Prometheus text format: every sample line is
    /// `name{labels} value` with a valid metric name and a float value, and
    /// every sample belongs to a family announced by `# TYPE`.
    fn check_prometheus_text(body: &str) {
        let mut families = Vec::new();
        for line in body.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                let name = parts.next().unwrap();
                let kind = parts.next().unwrap();
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                    "bad type in {line:?}"
                );
                families.push(name.to_string());
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("sample has a value");
            let name = series.split('{').next().unwrap();
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                    && !name.starts_with(|c: char| c.is_ascii_digit()),
                "bad metric name in {line:?}"
            );
            if let Some(labels) = series.strip_prefix(name) {
                if !labels.is_empty() {
                    assert!(labels.starts_with('{') && labels.ends_with('}'), "{line:?}");
                }
            }
            assert!(
                matches!(value, "+Inf" | "-Inf" | "NaN") || value.parse::<f64>().is_ok(),
                "bad value in {line:?}"
            );
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|b| families.iter().any(|f| f == b))
                })
                .unwrap_or(name);
            assert!(families.iter().any(|f| f == base), "no # TYPE for {line:?}");
        }
    }

    #[tokio::test]
    async fn status_codes() {
        let server = Server::start(ready_health(), None).await;
        let addr = server.addr;

        let r = get(addr, "/metrics").await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        assert_eq!(get(addr, "/healthz").await.status, 200);
        assert_eq!(get(addr, "/healthz").await.body, "ok\n");
        assert_eq!(get(addr, "/readyz").await.status, 200);
        assert_eq!(get(addr, "/metrics?format=text").await.status, 200);

        let head = request(addr, "HEAD", "/metrics").await;
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty(), "HEAD has no body");

        assert_eq!(get(addr, "/").await.status, 404);
        assert_eq!(get(addr, "/metricsx").await.status, 404);
        assert_eq!(get(addr, "/config").await.status, 404);
        assert_eq!(request(addr, "POST", "/nope").await.status, 404);

        for path in ["/metrics", "/healthz", "/readyz"] {
            for method in ["POST", "PUT", "DELETE"] {
                let r = request(addr, method, path).await;
                assert_eq!(r.status, 405, "{method} {path}");
                assert_eq!(r.header("allow"), Some("GET, HEAD"));
            }
        }
        server.shutdown().await;
    }

    #[tokio::test]
    async fn healthz_fails_when_loop_stops_turning() {
        let health = Health::new(Duration::from_millis(100));
        let server = Server::start(health.clone(), None).await;
        assert!(health.is_live(), "a fresh Health counts as turned now");
        assert_eq!(get(server.addr, "/healthz").await.status, 200);

        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!health.is_live());
        let r = get(server.addr, "/healthz").await;
        assert_eq!(r.status, 503);
        assert!(r.body.contains("stuck"), "{}", r.body);

        health.turned();
        assert_eq!(get(server.addr, "/healthz").await.status, 200);
        assert!(
            metrics().loop_last_turn.get() > 1.0e9,
            "turned() sets the gauge"
        );
        server.shutdown().await;
    }

    #[tokio::test]
    async fn readyz_reflects_connection_and_group() {
        let health = Health::new(Duration::from_secs(60));
        let server = Server::start(health.clone(), None).await;
        let addr = server.addr;

        let r = get(addr, "/readyz").await;
        assert_eq!(r.status, 503);
        assert!(r.body.contains("redis not connected"), "{}", r.body);
        assert!(r.body.contains("not in consumer group"), "{}", r.body);

        health.set_redis_connected(true);
        let r = get(addr, "/readyz").await;
        assert_eq!(r.status, 503);
        assert!(!r.body.contains("redis"), "{}", r.body);
        assert!(r.body.contains("not in consumer group"), "{}", r.body);

        health.set_in_group(true);
        assert!(health.is_ready());
        assert_eq!(get(addr, "/readyz").await.status, 200);

        health.set_redis_connected(false);
        let r = get(addr, "/readyz").await;
        assert_eq!(r.status, 503);
        assert!(r.body.contains("redis not connected"), "{}", r.body);
        // Liveness does not depend on Redis.
        assert_eq!(get(addr, "/healthz").await.status, 200);
        server.shutdown().await;
    }

    #[tokio::test]
    async fn readyz_fails_when_loop_is_stuck() {
        let stuck = Health::new(Duration::from_millis(50));
        stuck.set_redis_connected(true);
        stuck.set_in_group(true);
        assert!(stuck.is_ready());
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(!stuck.is_ready());
        let server = Server::start(stuck, None).await;
        let r = get(server.addr, "/readyz").await;
        assert_eq!(r.status, 503);
        assert!(r.body.contains("stuck"), "{}", r.body);
        server.shutdown().await;
    }

    #[tokio::test]
    async fn stalled_client_does_not_block_others_and_is_dropped() {
        let limits = Limits {
            header_read_timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let server = Server::start(ready_health(), Some(limits)).await;
        let addr = server.addr;

        let mut stalled = TcpStream::connect(addr).await.unwrap();
        stalled
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: te")
            .await
            .unwrap();

        // Others are served while it stalls.
        for _ in 0..5 {
            assert_eq!(get(addr, "/healthz").await.status, 200);
        }

        let raw = read_until_closed(&mut stalled, Duration::from_secs(3))
            .await
            .expect("stalled connection closed by the server");
        // Either closed silently or answered with 408.
        if !raw.is_empty() {
            assert_eq!(parse(&raw).status, 408);
        }
        assert_eq!(get(addr, "/healthz").await.status, 200);
        server.shutdown().await;
    }

    #[tokio::test]
    async fn idle_connection_is_closed_after_connection_timeout() {
        let limits = Limits {
            connection_timeout: Duration::from_millis(300),
            header_read_timeout: Duration::from_secs(10),
            ..Limits::default()
        };
        let server = Server::start(ready_health(), Some(limits)).await;
        // Connect and send nothing at all.
        let mut idle = TcpStream::connect(server.addr).await.unwrap();
        assert!(
            read_until_closed(&mut idle, Duration::from_secs(3))
                .await
                .is_some(),
            "idle connection closed"
        );
        server.shutdown().await;
    }

    #[tokio::test]
    async fn oversized_header_is_refused() {
        let server = Server::start(ready_health(), None).await;
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        let big = "a".repeat(64 * 1024);
        let req = format!("GET /metrics HTTP/1.1\r\nHost: test\r\nX-Big: {big}\r\n\r\n");
        // The server may close before reading it all; a write error is fine.
        let _ = s.write_all(req.as_bytes()).await;
        let raw = read_until_closed(&mut s, Duration::from_secs(3)).await;
        match raw {
            Some(raw) if !raw.is_empty() => {
                let status = parse(&raw).status;
                assert!(status == 431 || status == 400, "unexpected status {status}");
            }
            Some(_) => {} // closed without answer
            None => panic!("oversized request neither answered nor closed"),
        }
        // The server is unaffected.
        assert_eq!(get(server.addr, "/healthz").await.status, 200);
        server.shutdown().await;
    }

    #[tokio::test]
    async fn excess_connections_are_closed() {
        let limits = Limits {
            max_connections: 2,
            header_read_timeout: Duration::from_millis(500),
            ..Limits::default()
        };
        let server = Server::start(ready_health(), Some(limits)).await;
        let addr = server.addr;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
            held.push(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A third connection is accepted and closed unanswered.
        let mut third = TcpStream::connect(addr).await.unwrap();
        let _ = third
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .await;
        let raw = read_until_closed(&mut third, Duration::from_millis(400))
            .await
            .expect("excess connection closed at once");
        assert!(raw.is_empty(), "excess connection got no answer");
        // Once the held connections time out, service resumes.
        for s in &mut held {
            assert!(read_until_closed(s, Duration::from_secs(3)).await.is_some());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(get(addr, "/healthz").await.status, 200);
        server.shutdown().await;
    }

    #[tokio::test]
    async fn shutdown_stops_accepting_without_waiting_for_open_connections() {
        let server = Server::start(ready_health(), None).await;
        let addr = server.addr;
        // A keep-alive connection that stays open.
        let mut open = TcpStream::connect(addr).await.unwrap();
        open.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = open.read(&mut buf).await.unwrap();
        assert!(n > 0);

        let started = std::time::Instant::now();
        server.shutdown().await;
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "listener closed after shutdown"
        );
    }

    #[tokio::test]
    async fn metrics_body_is_prometheus_text() {
        let server = Server::start(ready_health(), None).await;
        metrics().events_read.inc_by(3);
        metrics().apply_duration.observe(0.002);
        metrics().init_precisions([1, 60, 3600]);
        let r = get(server.addr, "/metrics").await;
        assert_eq!(r.status, 200);
        assert!(r.body.contains("hitcount_build_info{"), "{}", r.body);
        assert!(r.body.contains("hitcount_events_read_total "));
        assert!(r
            .body
            .contains("hitcount_redis_errors_total{kind=\"timeout\"} "));
        check_prometheus_text(&r.body);
        server.shutdown().await;
    }

    #[tokio::test]
    async fn metrics_pass_promtool_check() {
        let Ok(status) = Command::new("promtool")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        else {
            eprintln!("note: promtool not found on PATH; skipping `promtool check metrics`");
            return;
        };
        assert!(status.success(), "promtool --version failed");

        let server = Server::start(ready_health(), None).await;
        metrics().init_precisions([1, 60]);
        let body = get(server.addr, "/metrics").await.body;
        server.shutdown().await;

        let mut child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(body.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && report.trim().is_empty(),
            "promtool check metrics reported problems:\n{report}"
        );
    }
}
