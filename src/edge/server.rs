//! The hardened HTTP/1 server loop every endpoint of hitcount shares (the
//! worker's `/metrics` and probes in [`crate::edge::http`], `hitcount
//! serve`'s JSON API): headers must arrive within a deadline and fit a
//! bounded buffer, every connection has an overall deadline, and the number
//! of concurrent connections is capped, in all and per source address, with
//! the last slots kept for addresses that hold none yet ([`super::peers`]; excess
//! connections are closed at once). Request bodies are not read unless an
//! endpoint reads its own within a size and a deadline ([`super::body`]:
//! remote read, `ingest`); a request that announces one is answered and
//! its connection closed unless the endpoint read it all ([`BodyRead`]),
//! so a body trickled a byte a second holds nothing. Each request carries
//! its client's address ([`Peer`]). A misbehaving client only ever
//! costs itself: a liveness probe from another address still gets in. Also
//! the response headers every answer carries ([`respond`]) and the one
//! refusal every endpoint shares ([`method_not_allowed`]): only GET and HEAD.

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
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
use tokio::sync::watch;

use super::peers::{client, Peers, Slot};
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
    let (stop_tx, stop) = watch::channel(false);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buf_size.max(8192));
    let server = Arc::new(Server {
        peers: Peers::new(limits.max_connections, limits.max_connections_per_peer),
        budget: Arc::new(sending::Budget::new()),
        builder,
        handle,
        stop,
        limits,
    });
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
        // Admitted (or a place made) on its own task: making room waits
        // for the connection closed to go, and the loop accepts meanwhile.
        let server = server.clone();
        tokio::spawn(async move {
            let Some(slot) = server.peers.admit_or_make_room(peer.ip()).await else {
                tracing::debug!(%peer, "http connection refused: too many connections");
                return;
            };
            server.serve_connection(stream, peer, Arc::new(slot)).await;
        });
    }

    drop(listener);
    let _ = stop_tx.send(true);
    // Wait (briefly) for open connections to finish.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    let grace = server.limits.shutdown_grace;
    let _ = tokio::time::timeout(grace, server.peers.all_closed(all)).await;
    Ok(())
}

/// What every connection of one server shares.
struct Server<H> {
    peers: Arc<Peers>,
    /// Large answers being sent ([`sending`]).
    budget: Arc<sending::Budget>,
    builder: http1::Builder,
    handle: H,
    /// Turns true when the server stops.
    stop: watch::Receiver<bool>,
    limits: Limits,
}

impl<H, F> Server<H>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Resp> + Send + 'static,
{
    /// Serves one admitted connection: its requests, until it closes, its
    /// lifetime is over, the server stops or its place is wanted.
    async fn serve_connection(
        &self,
        stream: tokio::net::TcpStream,
        peer: std::net::SocketAddr,
        slot: Arc<Slot>,
    ) {
        let _ = stream.set_nodelay(true);
        let sent = sending::Sent::default();
        let (busy, handle, budget) = (slot.clone(), self.handle.clone(), self.budget.clone());
        let conn = self.builder.serve_connection(
            TokioIo::new(sending::Counted::new(stream, sent.clone())),
            service_fn(move |mut req: Request<Incoming>| {
                // A request under way: its connection is not closed for room.
                busy.set_busy(true);
                // A body left unread leaves the connection unusable: close
                // it rather than wait for the body to end.
                let has_body = !req.body().is_end_stream();
                // Only an answer to GET may be refused for the budget: it
                // changed nothing (hyper sends no body in answer to HEAD; a
                // POST's answer, ingest's, comes after its hits are taken).
                let get = req.method() == Method::GET;
                req.extensions_mut().insert(Peer(client(peer.ip())));
                let answer = handle(req);
                let (budget, sent, busy) = (budget.clone(), sent.clone(), busy.clone());
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
                    busy.set_busy(false);
                    Ok::<_, Infallible>(resp)
                }
            }),
        );
        tokio::pin!(conn);
        // Its lifetime over, the server stopping, or its place wanted, a
        // connection answers the request under way (whose hits ingest may
        // have appended: cut off, its client would send them again), then
        // closes; an idle one closes at once.
        let result = tokio::select! {
            res = conn.as_mut() => Ok(res),
            () = async { drop(self.stop.clone().wait_for(|s| *s).await) } => Err("stopping"),
            () = tokio::time::sleep(self.limits.connection_timeout) => Err("lifetime over"),
            () = slot.evicted() => Err("closed to make room"),
        };
        let result = match result {
            Ok(res) => Some(res),
            // Headers still trickling in, or idle: hyper would wait for a
            // request it has begun reading, so the place is given up at once.
            Err(why @ "closed to make room") if !slot.is_busy() => {
                tracing::debug!(%peer, why, "http connection closing");
                return;
            }
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
                if let Some(count) = self.limits.answered_unread.filter(|_| e.is_parse()) {
                    // What hyper answered a request it could not parse.
                    count(if e.is_parse_too_large() { 431 } else { 400 });
                }
            }
            None => tracing::debug!(%peer, "http connection timed out"),
        }
    }
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
