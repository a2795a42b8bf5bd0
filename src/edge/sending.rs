//! Large answers while they are sent: a budget of bytes over all
//! connections, held by an answer until its connection has written it.
//!
//! An answer is built whole before a byte of it goes out, and a client that
//! reads slowly (or not at all) keeps it in memory until its connection's
//! deadline: 250 such clients once held `serve` at 588 MB. So an answer over
//! [`SMALL`] takes its size from [`BUDGET`] before it is sent, and gives it
//! back once its connection has written that many bytes more (counted by
//! [`Counted`], the connection's socket) or has closed. An answer that finds
//! too little left is not sent: the client is told 503 with `Retry-After`,
//! at once, and the answer is dropped. Small answers (probes, metrics, most
//! of the API) never wait for anything, and only answers to GET are ever
//! refused (the server loop asks): a POST's answer may follow a change, such
//! as `ingest`'s hits taken, which a client told 503 would make again.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Answers up to this many bytes are sent without the budget.
pub(crate) const SMALL: u64 = 64 << 10;
/// Bytes of larger answers held at once, over all connections: 64 MiB.
pub(crate) const BUDGET: u64 = 64 << 20;
/// The budget's unit, so that its permits fit a `u32`: one KiB.
const UNIT: u64 = 1 << 10;

/// The budget, shared by every connection of one server.
pub(crate) struct Budget(Arc<Semaphore>);

impl Budget {
    pub(crate) fn new() -> Budget {
        Budget(Arc::new(Semaphore::new((BUDGET / UNIT) as usize)))
    }

    /// Whether an answer of `len` bytes may be sent on the connection
    /// whose socket `sent` counts: true for a small one; for a larger one,
    /// when the budget holds its size (all of it, for one larger than the
    /// budget), then held until `sent` has written it.
    pub(crate) fn take(&self, len: u64, sent: &Sent) -> bool {
        if len <= SMALL {
            return true;
        }
        let units = len.div_ceil(UNIT).min(BUDGET / UNIT) as u32;
        let Ok(permit) = self.0.clone().try_acquire_many_owned(units) else {
            return false;
        };
        let mut held = sent.lock();
        // After what the connection has written, and after the answers it
        // holds already (a client may ask again before reading).
        let until = held.written.max(held.queued) + len;
        held.queued = until;
        held.answers.push_back((until, permit));
        true
    }
}

/// What one connection has written, and the budget its answers hold, each
/// until the connection has written that many bytes.
#[derive(Default)]
struct Written {
    written: u64,
    /// Where the last answer held ends.
    queued: u64,
    answers: VecDeque<(u64, OwnedSemaphorePermit)>,
}

/// A connection's [`Written`], shared by its socket and its requests; the
/// budget it holds is given back when the connection ends.
#[derive(Clone, Default)]
pub(crate) struct Sent(Arc<Mutex<Written>>);

impl Sent {
    fn lock(&self) -> std::sync::MutexGuard<'_, Written> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A connection's socket that counts what it writes into its [`Sent`],
/// giving the budget back once an answer is written.
pub(crate) struct Counted<S> {
    inner: S,
    sent: Sent,
}

impl<S> Counted<S> {
    pub(crate) fn new(inner: S, sent: Sent) -> Counted<S> {
        Counted { inner, sent }
    }

    /// `wrote`, the outcome of a write, with the bytes it wrote counted.
    fn count(&self, wrote: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = wrote {
            let mut held = self.sent.lock();
            held.written += n as u64;
            while held
                .answers
                .front()
                .is_some_and(|(until, _)| *until <= held.written)
            {
                held.answers.pop_front();
            }
        }
        wrote
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let wrote = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count(wrote)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let wrote = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count(wrote)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn an_answer_holds_the_budget_until_its_connection_wrote_it() {
        let budget = Budget::new();
        let free = || budget.0.available_permits() as u64 * UNIT;
        let sent = Sent::default();
        // Small: nothing held.
        assert!(budget.take(SMALL, &sent));
        assert_eq!(free(), BUDGET);
        // Half the budget, then its other half: the third is refused.
        let half = BUDGET / 2;
        let other = Sent::default();
        assert!(budget.take(half, &sent));
        assert!(budget.take(half, &other));
        assert!(!budget.take(SMALL + 1, &Sent::default()));
        // Written in part: still held; in full: given back.
        let mut socket = Counted::new(tokio::io::sink(), sent.clone());
        socket
            .write_all(&vec![0; (half - 1) as usize])
            .await
            .unwrap();
        assert_eq!(free(), 0);
        socket.write_all(b"x").await.unwrap();
        assert_eq!(free(), half);
        // Two answers asked on one connection before it wrote either: the
        // first given back once written, the second once written too.
        let (first, second) = (BUDGET / 4, BUDGET / 8);
        assert!(budget.take(first, &sent));
        assert!(budget.take(second, &sent));
        assert_eq!(free(), BUDGET / 2 - first - second);
        socket.write_all(&vec![0; first as usize]).await.unwrap();
        assert_eq!(free(), BUDGET / 2 - second);
        socket.write_all(&vec![0; second as usize]).await.unwrap();
        assert_eq!(free(), BUDGET / 2);
        // A closed connection gives back what it held.
        drop(other);
        assert_eq!(free(), BUDGET);
        // One answer over the whole budget takes all of it.
        assert!(budget.take(BUDGET * 2, &sent));
        assert_eq!(free(), 0);
    }
}
