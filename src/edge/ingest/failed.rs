//! What `ingest` answers and logs when Redis fails a body's hits: 503
//! (send again) for an outage or a full Redis, each logged once until hits
//! go in again, 500 for a refusal an operator must fix; and what Redis took
//! before it failed.

use std::sync::atomic::{AtomicBool, Ordering};

use hyper::header::RETRY_AFTER;
use hyper::StatusCode;

use super::JSON;
use crate::edge::server::{self, Resp};
use crate::store::connect::ErrorClass;

/// Redis took a body's hits: an outage or a full Redis logged is over.
pub(super) fn took_hits() {
    crate::store::memory::set_out_of_memory(false);
    if UNAVAILABLE.swap(false, Ordering::Relaxed) {
        tracing::warn!("ingest: Redis reachable again");
    }
}

/// The 503 of a Redis unreachable or silent: the hits may be in.
const REPLY_MAYBE_LOST: &str = "Redis is unavailable or did not answer: it may have taken the \
     hits before its reply was lost; send again with the same ids, counted once (a hit \
     without an id sent again may count twice)";

/// Whether Redis was last found unavailable (logged once until a request
/// goes in again).
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// 503 for a Redis that could not be reached or answered, or refused
/// writes for its memory (resend), 500 for one that refused otherwise (a
/// permission: the operator must act). When Redis took `taken` of the
/// `total` hits before, the answer says so (`accepted`): those without an
/// id would count twice if sent again.
pub(super) fn redis_failed(e: &redis::RedisError, taken: u64, total: usize) -> Resp {
    use crate::store::memory::{is_oom, out_of_memory, set_out_of_memory, OUT_OF_MEMORY};
    let (class, _) = crate::store::connect::classify(e);
    let fatal = class == ErrorClass::Fatal || e.code().is_some_and(|c| c == "NOPERM");
    let why = if fatal {
        tracing::error!(error = %crate::store::connect::first_cause(e), "Redis refused ingest's hits");
        "Redis refused the hits (see ingest's log)"
    } else if is_oom(e) {
        // Logged once until a request goes in again.
        if !out_of_memory() {
            tracing::warn!("{OUT_OF_MEMORY}: ingest answers 503 until it takes writes again");
        }
        set_out_of_memory(true);
        "Redis is out of memory (maxmemory): send again"
    } else {
        // Logged once until a request goes in again.
        if !UNAVAILABLE.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "ingest: Redis unavailable; answering 503 (send again) until it takes hits again");
        }
        // A call whose reply was lost (Redis stalled, the connection cut)
        // may have run: "send again" alone would count hits twice.
        REPLY_MAYBE_LOST
    };
    let body = match taken {
        0 => serde_json::json!({ "error": why }),
        _ => {
            let text = format!(
                "{why} (Redis took {taken} of the {total} hits accepted before it failed: sent \
                 again, those without an id count twice)"
            );
            serde_json::json!({ "error": text, "accepted": taken })
        }
    };
    let status = match fatal {
        true => StatusCode::INTERNAL_SERVER_ERROR,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    let resp = server::respond(status, JSON, body.to_string());
    match fatal {
        true => resp,
        false => server::with_header(resp, RETRY_AFTER, "1"),
    }
}
