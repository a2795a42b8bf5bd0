//! Turns at Redis: what the requests `serve` answers may read at once.
//! Every request shares one connection and one Redis serves them in turn,
//! so without a bound a few large reads keep every other request, however
//! small, past its reply timeout (48 reads of a 500,000-field hash once
//! answered every request 503). A read waits for its turn for at most
//! [`TURN_WAIT`], then is answered 429 with the reason.

use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use super::Failure;
use crate::store::client::Conn;
use crate::store::hashes;

/// Samples the remote reads answered at once hold between them (one read
/// of the most, [`super::remote_read::MAX_SAMPLES`]): a read holds about
/// 40 bytes a sample while it is answered, so further reads wait instead
/// of growing `serve` with their number.
const SAMPLES_AT_ONCE: u32 = 5_000_000;
/// Hash fields that reads of whole hashes (`/counters/{name}`,
/// `/stats/{name}`) hold in flight at once: about half a second of Redis'
/// time, the longest another request waits behind them.
const FIELDS_AT_ONCE: u32 = 1_000_000;
/// A hash of at most this many fields (120 buckets of statistics with a
/// wide histogram) is read without a turn.
const SMALL_HASH: u64 = 10_000;
/// Label matchers the remote reads under way hold between them, each
/// regex at most 512 KiB with its cache (`select::REGEX_BYTES`): 128 MiB.
const MATCHERS_AT_ONCE: u32 = 256;
/// Longest a read waits for its turn, well within a connection's 30 s.
const TURN_WAIT: Duration = Duration::from_secs(15);

/// The budgets of the reads under way.
pub(super) struct Turns {
    samples: Semaphore,
    fields: Semaphore,
    matchers: Semaphore,
}

impl Turns {
    pub(super) fn new() -> Turns {
        Turns {
            samples: Semaphore::new(SAMPLES_AT_ONCE as usize),
            fields: Semaphore::new(FIELDS_AT_ONCE as usize),
            matchers: Semaphore::new(MATCHERS_AT_ONCE as usize),
        }
    }

    /// The turn of a remote read with `matchers` label matchers (at most
    /// [`super::remote_read::MAX_MATCHERS`]), before they are compiled.
    pub(super) async fn matchers(&self, matchers: u32) -> Result<SemaphorePermit<'_>, Failure> {
        let share = matchers.min(MATCHERS_AT_ONCE);
        let held = "other reads held the label matchers compiled at once";
        take(&self.matchers, share, TURN_WAIT, held).await
    }

    /// The turn of a remote read that answers `samples` samples.
    pub(super) async fn samples(&self, samples: u64) -> Result<SemaphorePermit<'_>, Failure> {
        let share = samples.clamp(1, u64::from(SAMPLES_AT_ONCE)) as u32;
        let held = "other reads held the samples one may answer at once";
        take(&self.samples, share, TURN_WAIT, held).await
    }

    /// The turn to read hash `key` whole (one HLEN tells its size): none
    /// for a small hash, else its fields' share of [`FIELDS_AT_ONCE`], all
    /// of it for a larger hash.
    pub(super) async fn whole_hash(
        &self,
        conn: &mut Conn,
        key: &str,
    ) -> Result<Option<SemaphorePermit<'_>>, Failure> {
        let fields = hashes::len(conn, key).await?;
        self.fields(fields).await
    }

    /// The turn to read `fields` hash fields (a remote read's hashes
    /// together): none for a small read, else their share of
    /// [`FIELDS_AT_ONCE`], all of it for a larger read.
    pub(super) async fn fields(&self, fields: u64) -> Result<Option<SemaphorePermit<'_>>, Failure> {
        if fields <= SMALL_HASH {
            return Ok(None);
        }
        let share = fields.min(u64::from(FIELDS_AT_ONCE)) as u32;
        let held = "other reads of large hashes held Redis";
        Ok(Some(take(&self.fields, share, TURN_WAIT, held).await?))
    }
}

/// `share` permits of `budget`, waited for at most `wait`; past that, a
/// 429 that says what was `held` that long.
async fn take<'a>(
    budget: &'a Semaphore,
    share: u32,
    wait: Duration,
    held: &str,
) -> Result<SemaphorePermit<'a>, Failure> {
    match tokio::time::timeout(wait, budget.acquire_many(share)).await {
        Ok(turn) => Ok(turn.expect("a budget is never closed")),
        Err(_) => Err(Failure::Busy {
            why: format!("busy: {held} for {} s; read again", wait.as_secs()),
            retry: Duration::from_secs(1),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_waits_for_its_turn_and_is_refused_past_the_wait() {
        let budget = Semaphore::new(FIELDS_AT_ONCE as usize);
        let wait = Duration::from_millis(20);
        let first = take(&budget, FIELDS_AT_ONCE, wait, "x").await.unwrap();
        // The budget is held whole: a second read is refused, with a
        // reason and a retry.
        match take(&budget, 1, wait, "other reads held Redis").await {
            Err(Failure::Busy { why, retry }) => {
                assert_eq!(why, "busy: other reads held Redis for 0 s; read again");
                assert!(retry >= Duration::from_secs(1));
            }
            other => panic!("{other:?}"),
        }
        // Once it is given back, a read takes its share, and two halves
        // fit at once.
        drop(first);
        let half = FIELDS_AT_ONCE / 2;
        let a = take(&budget, half, wait, "x").await.unwrap();
        let b = take(&budget, half, wait, "x").await.unwrap();
        assert_eq!(budget.available_permits(), 0);
        drop((a, b));
        assert_eq!(budget.available_permits(), FIELDS_AT_ONCE as usize);
    }
}
