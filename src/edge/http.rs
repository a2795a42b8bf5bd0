//! The worker's HTTP endpoint: `/metrics` for Prometheus, `/healthz`
//! (liveness) and `/readyz` (readiness, naming the stream shards the
//! process reads when there are several) for Kubernetes probes.
//!
//! Anything on the pod network can reach it, so it runs on the hardened
//! loop of [`crate::edge::server`] (header deadline, bounded buffer,
//! connection deadline and cap). Responses carry nothing but metrics and
//! health state — never configuration or secrets.

use std::future::Future;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use tokio::net::TcpListener;

pub use crate::edge::server::Limits;
use crate::edge::server::{self, Resp};
use crate::model::metrics;
use crate::service::health::Health;

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` within
/// `limits` (the worker's are [`Limits::default`]) until `shutdown`
/// completes, then stops accepting and returns (open connections get a
/// short grace period).
pub async fn serve(
    listener: TcpListener,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> std::io::Result<()> {
    let answer = move |req: Request<Incoming>| std::future::ready(handle(&req, &health));
    server::run(listener, limits, shutdown, answer).await
}

/// Routes one request.
fn handle(req: &Request<Incoming>, health: &Health) -> Resp {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return text(StatusCode::NOT_FOUND, "not found\n".into());
    }
    if !server::allowed(req.method()) {
        return server::method_not_allowed(TEXT, "method not allowed\n");
    }
    match path {
        "/metrics" => server::respond(StatusCode::OK, metrics::CONTENT_TYPE, metrics::render()),
        "/healthz" => match health.liveness_problem() {
            None => text(StatusCode::OK, "ok\n".into()),
            Some(problem) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{problem}\n")),
        },
        _ => {
            // With shards, the detail names the ones this process reads; on
            // a cluster it says when a master lacked a replica lately.
            let problems = health.readiness_problems();
            let mut notes: Vec<String> = health.shard_detail().into_iter().collect();
            // Redis' memory: writes refused for maxmemory, an evicting policy.
            notes.extend(crate::store::memory::readiness_notes());
            if let Some(ago) = crate::store::commit::unconfirmed_recently() {
                notes.push(format!(
                    "a master confirmed no replica of a window's writes {}s ago \
                     (HITCOUNT_WAIT_REPLICAS): counting goes on, less safe against its failover",
                    ago.as_secs()
                ));
            }
            let detail = (!notes.is_empty()).then(|| notes.join("; "));
            if problems.is_empty() {
                let body = detail.map_or("ok\n".into(), |d| format!("ok: {d}\n"));
                text(StatusCode::OK, body)
            } else {
                let mut body = format!("not ready: {}", problems.join("; "));
                if let Some(d) = detail {
                    body = format!("{body} ({d})");
                }
                text(StatusCode::SERVICE_UNAVAILABLE, body + "\n")
            }
        }
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// A plain-text response.
fn text(status: StatusCode, body: String) -> Resp {
    server::respond(status, TEXT, body)
}

#[cfg(test)]
mod loopback_tests;
