//! The hardened HTTP/1 server loop every endpoint of hitcount shares (the
//! worker's `/metrics` and probes in [`crate::edge::http`], `hitcount
//! serve`'s JSON API): headers must arrive within a deadline and fit a
//! bounded buffer, every connection has an overall deadline, and the number
//! of concurrent connections is capped, in all and per source address, with
//! the last slots kept for addresses that hold none yet ([`Peers`]; excess
//! connections are closed at once). Request bodies are not read unless an
//! endpoint reads its own within a size and a deadline ([`super::body`]:
//! remote read, `ingest`); a request that announces one is answered and
//! its connection closed unless the endpoint read it all ([`BodyRead`]),
//! so a body trickled a byte a second holds nothing. Each request carries
//! its client's address ([`Peer`]). A misbehaving client only ever
//! costs itself: a liveness probe from another address still gets in. Also
//! the response headers every answer carries ([`respond`]) and the one
//! refusal every endpoint shares ([`method_not_allowed`]): only GET and HEAD.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Body as _, Bytes, Incoming};
use hyper::header::{
    HeaderName, HeaderValue, ALLOW, CACHE_CONTROL, CONNECTION, CONTENT_SECURITY_POLICY,
    CONTENT_TYPE, RETRY_AFTER, X_CONTENT_TYPE_OPTIONS,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::sending;

/// Limits protecting the server from slow, malformed or too many clients.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Time allowed for a request's headers to arrive in full.
    pub header_read_timeout: Duration,
    /// Largest read buffer per connection, in bytes; a request whose headers
    /// do not fit is refused (431). At least 8192.
    pub max_buf_size: usize,
    /// Overall lifetime of one connection, keep-alive included.
    pub connection_timeout: Duration,
    /// Connections served at once; excess connections are closed unanswered.
    /// The last quarter of them is kept for addresses holding none yet.
    pub max_connections: usize,
    /// Connections served at once from one client (an IPv4 address, or an
    /// IPv6 /64: see [`client`]); more from it are closed unanswered.
    pub max_connections_per_peer: usize,
    /// On shutdown, how long open connections may take to finish.
    pub shutdown_grace: Duration,
    /// Told the status of each answer the HTTP layer gives itself, to a
    /// request it could not read (400, or 431 for headers over
    /// `max_buf_size`), which never reaches the endpoint: so that an
    /// endpoint counting its answers counts these too. None by default.
    pub answered_unread: Option<fn(u16)>,
}

impl Default for Limits {
    /// 5 s for headers, 16 KiB buffer, 30 s per connection, 256
    /// connections, 16 from one address, 1 s shutdown grace.
    fn default() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(5),
            max_buf_size: 16 * 1024,
            connection_timeout: Duration::from_secs(30),
            max_connections: 256,
            // Prometheus, the kubelet's probes and a few dashboards each
            // need one or two; 16 leaves room for keep-alive bursts.
            max_connections_per_peer: 16,
            shutdown_grace: Duration::from_secs(1),
            answered_unread: None,
        }
    }
}

/// The one response type of every endpoint.
pub(crate) type Resp = Response<Full<Bytes>>;

/// The connections open, in all (the semaphore's permits) and per source
/// address, and who may open one more (also StatsD's over TCP).
pub(crate) struct Peers {
    permits: Arc<Semaphore>,
    per_peer: usize,
    /// Permits kept for addresses that hold no connection yet.
    reserve: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; frees its place on drop.
pub(crate) struct Slot {
    peers: Arc<Peers>,
    ip: IpAddr,
    _permit: OwnedSemaphorePermit,
}

impl Peers {
    /// Places for [`Limits::max_connections`], of which
    /// [`Limits::max_connections_per_peer`] from one address.
    pub(crate) fn new(limits: &Limits) -> Arc<Peers> {
        let max = limits.max_connections.max(1);
        Arc::new(Peers {
            permits: Arc::new(Semaphore::new(max)),
            per_peer: limits.max_connections_per_peer.max(1),
            reserve: max / 4,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more connection from `ip`, unless it holds its
    /// share already, every place is taken, or only the reserve is left
    /// and `ip` holds one.
    pub(crate) fn admit(self: &Arc<Peers>, ip: IpAddr) -> Option<Slot> {
        let ip = client(ip);
        let mut open = self.lock();
        let held = open.get(&ip).copied().unwrap_or(0);
        let free = self.permits.available_permits();
        if held >= self.per_peer || (held > 0 && free <= self.reserve) {
            return None;
        }
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        *open.entry(ip).or_default() += 1;
        Some(Slot {
            peers: self.clone(),
            ip,
            _permit: permit,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.peers.lock();
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// How long a connection whose lifetime is over (or whose server stops)
/// has to answer the request under way: a body's 10 s and a Redis reply's
/// 5 s.
const REQUEST_GRACE: Duration = Duration::from_secs(15);

/// Serves `handle` on `listener` within `limits` until `shutdown`
/// completes, then stops accepting and returns (open connections get
/// [`Limits::shutdown_grace`]). The answer to a request whose body the
/// endpoint did not read in full closes its connection.
pub(crate) async fn run<H, F>(
    listener: TcpListener,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handle: H,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Resp> + Send + 'static,
{
    let max = limits.max_connections.max(1);
    let peers = Peers::new(&limits);
    let budget = Arc::new(sending::Budget::new());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buf_size.max(8192));
    tokio::pin!(shutdown);

    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    accept_failed("http", &e).await;
                    continue;
                }
            },
        };
        let Some(slot) = peers.admit(peer.ip()) else {
            tracing::debug!(%peer, "http connection refused: too many connections");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        let (budget, sent) = (budget.clone(), sending::Sent::default());
        let conn = builder.serve_connection(
            TokioIo::new(sending::Counted::new(stream, sent.clone())),
            service_fn(move |mut req: Request<Incoming>| {
                // A body left unread leaves the connection unusable: close
                // it rather than wait for the body to end.
                let has_body = !req.body().is_end_stream();
                // Only an answer to GET may be refused for the budget: it
                // changed nothing (hyper sends no body in answer to HEAD; a
                // POST's answer, ingest's, comes after its hits are taken).
                let get = req.method() == Method::GET;
                req.extensions_mut().insert(Peer(client(peer.ip())));
                let answer = handle(req);
                let (budget, sent) = (budget.clone(), sent.clone());
                async move {
                    let mut resp = answer.await;
                    let len = resp.body().size_hint().exact().unwrap_or(u64::MAX);
                    if get && !budget.take(len, &sent) {
                        resp = too_busy_to_send(&resp);
                    }
                    let read = resp.extensions_mut().remove::<BodyRead>().is_some();
                    if has_body && !read {
                        resp = with_header(resp, CONNECTION, "close");
                    }
                    Ok::<_, Infallible>(resp)
                }
            }),
        );
        let mut stop = stop_rx.clone();
        let lifetime = limits.connection_timeout;
        let answered_unread = limits.answered_unread;
        tokio::spawn(async move {
            let _slot = slot;
            tokio::pin!(conn);
            // Its lifetime over, or the server stopping, a connection
            // answers the request under way (whose hits ingest may have
            // appended: cut off, its client would send them again), then
            // closes; an idle one closes at once.
            let result = tokio::select! {
                res = conn.as_mut() => Ok(res),
                () = async { drop(stop.wait_for(|s| *s).await) } => Err("stopping"),
                () = tokio::time::sleep(lifetime) => Err("lifetime over"),
            };
            let result = match result {
                Ok(res) => Some(res),
                Err(why) => {
                    tracing::debug!(%peer, why, "http connection closing");
                    conn.as_mut().graceful_shutdown();
                    tokio::time::timeout(REQUEST_GRACE, conn.as_mut())
                        .await
                        .ok()
                }
            };
            match result {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "http connection error");
                    if let Some(count) = answered_unread.filter(|_| e.is_parse()) {
                        // What hyper answered a request it could not parse.
                        count(if e.is_parse_too_large() { 431 } else { 400 });
                    }
                }
                None => tracing::debug!(%peer, "http connection timed out"),
            }
        });
    }

    drop(listener);
    let _ = stop_tx.send(true);
    // Wait (briefly) for open connections to finish.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.shutdown_grace, peers.permits.acquire_many(all)).await;
    Ok(())
}

/// 503 with `Retry-After: 1` in place of `answer`, too large to send while
/// others hold the budget of [`sending`]: in JSON when `answer` was.
fn too_busy_to_send(answer: &Resp) -> Resp {
    let why = format!(
        "busy: other large answers are being sent (at most {} MiB at once); retry",
        sending::BUDGET >> 20
    );
    let json = answer
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    let (content_type, body) = match json {
        // Nothing in `why` needs escaping.
        true => ("application/json", format!("{{\"error\":\"{why}\"}}")),
        false => ("text/plain; charset=utf-8", why),
    };
    let resp = respond(StatusCode::SERVICE_UNAVAILABLE, content_type, body);
    let mut resp = with_header(resp, RETRY_AFTER, "1");
    // What the answer forbade its page, the refusal forbids too.
    if let Some(csp) = answer.headers().get(CONTENT_SECURITY_POLICY) {
        resp.headers_mut()
            .insert(CONTENT_SECURITY_POLICY, csp.clone());
    }
    resp
}

/// The client a request came from, in its extensions ([`client`]), for
/// those that limit each one (`ingest`'s rate).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) IpAddr);

/// The client an address belongs to, as the limits per client count it:
/// an IPv4 address (IPv4-mapped IPv6 included) alone, an IPv6 address by
/// its /64, the network one host is given (it may take any address in
/// it: counted apart, they would each have a share).
pub(crate) fn client(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

/// Put in a response's extensions by an endpoint that read its request's
/// body in full ([`super::body::read_body`]): the connection may serve the
/// next request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyRead;

/// A response with `body` of `content_type`, never cached, never sniffed.
pub(crate) fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Resp {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    resp
}

/// `resp` with the header `name: value` (in place of any of that name).
pub(crate) fn with_header(mut resp: Resp, name: HeaderName, value: &'static str) -> Resp {
    resp.headers_mut()
        .insert(name, HeaderValue::from_static(value));
    resp
}

/// Whether `method` is one the endpoints answer: GET or HEAD (hyper sends
/// no body in answer to HEAD).
pub(crate) fn allowed(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// 405 with `Allow: GET, HEAD`, its body of `content_type`.
pub(crate) fn method_not_allowed(content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let resp = respond(StatusCode::METHOD_NOT_ALLOWED, content_type, body);
    with_header(resp, ALLOW, "GET, HEAD")
}

/// When a warning about connections refused for want of file descriptors
/// was last logged (one a minute at most, for every listener).
static FILES_WARNED: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

/// After a failed `accept` on `listener`: usually transient (a connection
/// aborted before it was taken), logged at debug; out of file descriptors
/// (EMFILE, ENFILE) every new connection waits, the probes' included, so
/// that is a warning naming the limit, once a minute at most. Backs off
/// briefly rather than spin.
pub(crate) async fn accept_failed(listener: &str, e: &std::io::Error) {
    // EMFILE and ENFILE on Linux (std has no kind for them yet).
    const OUT_OF_FILES: [i32; 2] = [24, 23];
    let out_of_files = e.raw_os_error().is_some_and(|n| OUT_OF_FILES.contains(&n));
    if out_of_files {
        let mut last = FILES_WARNED.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *last = Some(std::time::Instant::now());
            tracing::warn!(error = %e, "{listener}: new connections wait: this process is out of \
                file descriptors (ulimit -n); they are taken again as open ones close");
        }
    } else {
        tracing::debug!(error = %e, "{listener} accept failed");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// An IPv6 host may take any address of its /64: its connections are
    /// counted together, an IPv4 address (mapped or not) alone.
    #[test]
    fn one_client_is_an_ipv4_address_or_an_ipv6_slash_64() {
        let peers = Peers::new(&Limits {
            max_connections_per_peer: 2,
            ..Limits::default()
        });
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let held: Vec<Slot> = ["2001:db8::1", "2001:db8::ffff:1"]
            .iter()
            .map(|a| peers.admit(ip(a)).expect("admitted"))
            .collect();
        assert!(
            peers.admit(ip("2001:db8::1:2:3:4")).is_none(),
            "the same /64"
        );
        assert!(peers.admit(ip("2001:db8:0:1::1")).is_some(), "another /64");
        assert_eq!(client(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(client(ip("10.0.0.7")), ip("10.0.0.7"));
        drop(held);
        assert!(
            peers.admit(ip("2001:db8::9")).is_some(),
            "places given back"
        );
    }

    /// A request still being answered when its connection's lifetime ends
    /// gets its answer (ingest may have appended its hits), then the
    /// connection closes.
    #[tokio::test]
    async fn a_request_under_way_is_answered_past_the_connection_lifetime() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            connection_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(run(
            listener,
            limits,
            async move { drop(stopped.await) },
            |_req| async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                Response::new(Full::new(Bytes::from_static(b"taken")))
            },
        ));
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut answer))
            .await
            .expect("the connection closes after its answer")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("taken"),
            "{answer}"
        );
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
