//! The worker's HTTP endpoint: `/metrics` for Prometheus, `/healthz`
//! (liveness) and `/readyz` (readiness) for Kubernetes probes.
//!
//! The server is deliberately small and defensive, since anything on the pod
//! network can reach it: headers must arrive within a deadline and fit a
//! bounded buffer, every connection has an overall deadline, and the number
//! of concurrent connections is capped (excess connections are closed at
//! once). A misbehaving connection only ever costs itself. Responses carry
//! nothing but metrics and health state — never configuration or secrets.

use std::convert::Infallible;
use std::future::Future;

use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::model::metrics;
use crate::service::health::Health;

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

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` with the default
/// [`Limits`] until `shutdown` completes, then stops accepting and returns
/// (open connections get a short grace period).
pub async fn serve(
    listener: TcpListener,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, health, shutdown, Limits::default()).await
}

/// [`serve`] with explicit [`Limits`].
pub async fn serve_with(
    listener: TcpListener,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> std::io::Result<()> {
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
        let conn = builder.serve_connection(
            TokioIo::new(stream),
            service_fn({
                let health = health.clone();
                move |req| {
                    let health = health.clone();
                    async move { Ok::<_, Infallible>(handle(&req, &health)) }
                }
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

/// Routes one request.
fn handle(req: &Request<Incoming>, health: &Health) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return text(StatusCode::NOT_FOUND, "not found\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".into(),
        );
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    match path {
        "/metrics" => {
            let mut resp = Response::new(Full::new(Bytes::from(metrics::render())));
            resp.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            resp.headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
        "/healthz" => match health.liveness_problem() {
            None => text(StatusCode::OK, "ok\n".into()),
            Some(problem) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{problem}\n")),
        },
        _ => {
            let problems = health.readiness_problems();
            if problems.is_empty() {
                text(StatusCode::OK, "ok\n".into())
            } else {
                let body = format!("not ready: {}\n", problems.join("; "));
                text(StatusCode::SERVICE_UNAVAILABLE, body)
            }
        }
    }
}

/// A plain-text response.
fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
