//! A request's body, read by the endpoint that takes one (remote read,
//! `ingest`): within a size, a deadline and, for `ingest`, a budget of
//! bytes that the bodies being read share ([`ReadBudget`]), so that many
//! connections trickling large bodies in hold a bounded share of memory.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body as _, Bytes, Incoming};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why [`read_body`] gave no body.
pub(crate) enum BodyError {
    /// Over the limit, announced or sent.
    TooLarge,
    /// Cut off or malformed: the reason in one line.
    Unreadable(String),
    /// Not all there within the deadline (408): the reason in one line.
    TooSlow(String),
    /// Not read within the deadline because other bodies held the
    /// [`ReadBudget`] (503: send again).
    Busy,
}

/// Bytes of bodies read at once, beyond the first [`ReadBudget::FREE`]
/// bytes of each: what bodies trickling in (or read and waiting their
/// turn) hold at most, however many connections send them. A body that
/// cannot get its share within its deadline is refused ([`BodyError::Busy`]).
pub(crate) struct ReadBudget(Arc<Semaphore>);

impl ReadBudget {
    /// Bytes of each body read outside the budget: the connections' own
    /// share (256 of them hold 16 MiB at most), so that a small request
    /// never waits behind large ones.
    pub(crate) const FREE: usize = 64 << 10;

    /// A budget of `bytes` (at least the largest body, or that body would
    /// never be read).
    pub(crate) fn new(bytes: usize) -> ReadBudget {
        ReadBudget(Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))))
    }
}

/// A request's body in full: at most `limit` bytes (a larger
/// `Content-Length` is refused before a byte is read), all within
/// `deadline`. With a `budget`, a body that outgrows
/// [`ReadBudget::FREE`] takes what it may still need (its
/// `Content-Length`, else `limit`) from it at once, and holds it until the
/// permit returned is dropped: a body never holds part of the budget while
/// it waits for more, so bodies that need more than the budget between
/// them are read one after another, never each stuck waiting on the
/// others. Only for an endpoint that takes a body; the loop reads no
/// other.
pub(crate) async fn read_body(
    mut body: Incoming,
    limit: usize,
    deadline: Duration,
    budget: Option<&ReadBudget>,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), BodyError> {
    use http_body_util::BodyExt as _;
    if body.size_hint().lower() > limit as u64 {
        return Err(BodyError::TooLarge);
    }
    let until = tokio::time::Instant::now() + deadline;
    let too_slow = || {
        let why = format!("the body did not arrive within {} s", deadline.as_secs());
        BodyError::TooSlow(why)
    };
    let mut read = Vec::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    loop {
        let frame = match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => return Err(too_slow()),
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(BodyError::Unreadable(format!(
                    "the body is unreadable: {e}"
                )))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        // Trailers are no part of the body.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let total = read.len() + data.len();
        if total > limit {
            return Err(BodyError::TooLarge);
        }
        if let (Some(ReadBudget(permits)), None, true) = (budget, &held, total > ReadBudget::FREE) {
            let whole = body
                .size_hint()
                .exact()
                .map_or(limit as u64, |rest| total as u64 + rest);
            let need = (whole as usize).min(limit) - ReadBudget::FREE;
            let wait = permits.clone().acquire_many_owned(need as u32);
            // (The semaphore is never closed.)
            let Ok(Ok(permit)) = tokio::time::timeout_at(until, wait).await else {
                return Err(BodyError::Busy);
            };
            held = Some(permit);
        }
        read.extend_from_slice(&data);
    }
    Ok((Bytes::from(read), held))
}
