//! The hardened HTTP/1 server loop every endpoint of hitcount shares (the
//! worker's `/metrics` and probes in [`crate::edge::http`], `hitcount
//! serve`'s JSON API): headers must arrive within a deadline and fit a
//! bounded buffer, every connection has an overall deadline, and the number
//! of concurrent connections is capped (excess connections are closed at
//! once). A misbehaving connection only ever costs itself. Also the
//! response headers every answer carries ([`respond`]) and the one refusal
//! every endpoint shares ([`method_not_allowed`]): only GET and HEAD.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

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
    pub max_connections: usize,
    /// On shutdown, how long open connections may take to finish.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    /// 5 s for headers, 16 KiB buffer, 30 s per connection, 256
    /// connections, 1 s shutdown grace.
    fn default() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(5),
            max_buf_size: 16 * 1024,
            connection_timeout: Duration::from_secs(30),
            max_connections: 256,
            shutdown_grace: Duration::from_secs(1),
        }
    }
}

/// The one response type of every endpoint.
pub type Resp = Response<Full<Bytes>>;

/// Serves `handle` on `listener` within `limits` until `shutdown`
/// completes, then stops accepting and returns (open connections get
/// [`Limits::shutdown_grace`]). Request bodies are never read.
pub async fn run<H, F>(
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
    let permits = Arc::new(Semaphore::new(max));
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
                    // Usually transient (EMFILE, ECONNABORTED): back off
                    // briefly rather than spin.
                    tracing::debug!(error = %e, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "http connection refused: too many connections");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        let conn = builder.serve_connection(
            TokioIo::new(stream),
            service_fn(move |req| {
                let answer = handle(req);
                async move { Ok::<_, Infallible>(answer.await) }
            }),
        );
        let mut stop = stop_rx.clone();
        let deadline = limits.connection_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            tokio::pin!(conn);
            let result = tokio::time::timeout(deadline, async {
                tokio::select! {
                    res = conn.as_mut() => res,
                    () = async { drop(stop.wait_for(|s| *s).await) } => {
                        conn.as_mut().graceful_shutdown();
                        conn.as_mut().await
                    }
                }
            })
            .await;
            match result {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "http connection error"),
                Err(_) => tracing::debug!(%peer, "http connection timed out"),
            }
        });
    }

    drop(listener);
    let _ = stop_tx.send(true);
    // Wait (briefly) for open connections to finish.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.shutdown_grace, permits.acquire_many(all)).await;
    Ok(())
}

/// A response with `body` of `content_type`, never cached, never sniffed.
pub fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    resp
}

/// Whether `method` is one the endpoints answer: GET or HEAD (hyper sends
/// no body in answer to HEAD).
pub fn allowed(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// 405 with `Allow: GET, HEAD`, its body of `content_type`.
pub fn method_not_allowed(content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut resp = respond(StatusCode::METHOD_NOT_ALLOWED, content_type, body);
    resp.headers_mut()
        .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    resp
}
