//! `hitcount import`'s way into the stream: a file's lines, batch by batch,
//! each batch appended by one script together with how far the file has
//! been read (`import.lua`), so that an import killed at any point and run
//! again counts every line once, and a finished one adds nothing.
//!
//! A file is known by its identity (the CLI's: a hash of its first bytes),
//! not its path, and by the hash of the bytes an import of it read
//! ([`resume`]); its hits all go to one shard, picked by that identity,
//! where its progress key lives too (one hash slot on a cluster). The
//! progress key expires [`progress_ttl_secs`] after the last batch: by
//! then every line it counted is older than any precision keeps, so a
//! second import of the file would count nothing anyway.
//!
//! Lines are read and parsed on a thread of their own while the batches
//! before them travel to Redis, several per round trip.

pub(crate) mod batch;
mod resume;

use std::collections::BTreeMap;
use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::model::config::LayoutArgs;
use crate::model::event::MAX_FUTURE_MS;
use crate::model::keys::Keys;
use crate::store::connect::Conn;
use crate::store::scripts::IMPORT;

use batch::{Batch, Lines};
pub(crate) use batch::{Example, LineFormat, Progress};

/// Batches read ahead of those sent.
const READ_AHEAD: usize = 32;
/// Batches sent per round trip.
const BATCHES_PER_TRIP: usize = 16;

/// Why an import stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImportError {
    #[error("reading the file: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// The recorded progress moved while this import ran: another import
    /// of the same file.
    #[error(
        "the file's recorded progress is {recorded}, not {expected}: another import of the \
         same file is running (or ran meanwhile); its lines are counted once whichever goes on"
    )]
    Raced { recorded: String, expected: String },
    /// The file is shorter than a progress recorded for its identity, and
    /// its bytes are none of the others' imported ones.
    #[error(
        "the file has {len} bytes, fewer than the {recorded} an earlier import of a file with \
         its first 4 KiB read: it is that file truncated or rewritten, or another file that \
         starts the same way; nothing more is imported from it (once it is longer, and not \
         that file grown, it is imported from its start as another file)"
    )]
    Shrank { len: u64, recorded: u64 },
    /// The file's byte where the recorded progress ends is no line's end.
    #[error(
        "the file's byte {recorded}, where an earlier import of it stopped, ends no line: it \
         was rewritten; nothing more is imported from it"
    )]
    Rewritten { recorded: u64 },
    #[error("recorded progress {0:?} is not BYTES:LINES:SHA1")]
    BadProgress(String),
    /// As many other files with the same first 4 KiB were imported as one
    /// identity holds.
    #[error(
        "{files} other files with the same first 4 KiB were imported: this one is not (make its \
         first lines differ, or delete the progress keys of files done with)"
    )]
    TooManyFiles { files: u32 },
}

/// What one file's import did.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// The progress key this import moves (none before it is found).
    pub key: Option<String>,
    /// Another file than the one first imported with the same first
    /// 4 KiB, imported from its start.
    pub another: bool,
    /// Where an earlier import had left the file.
    pub resumed: Progress,
    /// Where it stands now.
    pub at: Progress,
    /// Lines read by this run.
    pub lines: u64,
    /// Lines that made a hit.
    pub counted: u64,
    /// Events appended to the stream (hits summed per name and second).
    pub events: u64,
    pub refused: BTreeMap<&'static str, u64>,
    pub examples: Vec<Example>,
    /// Bytes of a last line without a line end (being written, or cut
    /// off), left for a later import.
    pub held_back: u64,
}

/// How long a file's progress is kept after its last batch, in seconds:
/// the longest any precision keeps a bucket (`samples × the largest
/// precision`) plus the day a hit may lie ahead. After that every line a
/// file's import counted is too old for every precision, so importing it
/// again counts nothing, and the key can go.
/// Longer than [`MAX_PROGRESS_TTL_SECS`], the key is kept for good instead
/// (`None`): Redis refuses an expiry past its clock's range, and a refused
/// one would fail the import's script after its hits went in.
pub(crate) fn progress_ttl_secs(layout: &LayoutArgs) -> Option<u64> {
    let largest = layout.precisions.iter().max().copied().unwrap_or(1);
    let ttl = u64::from(layout.samples) * u64::from(largest) + MAX_FUTURE_MS as u64 / 1000;
    (ttl <= MAX_PROGRESS_TTL_SECS).then_some(ttl)
}

/// The longest expiry given a progress key: a hundred years.
const MAX_PROGRESS_TTL_SECS: u64 = 100 * 366 * 86_400;

/// The shard a file's hits go to, by its identity.
pub(crate) fn shard_of(file: &str, shards: u32) -> u32 {
    Keys::shard_of_name(file, shards)
}

/// The progress recorded at `key` (nothing read when none is).
pub(crate) async fn recorded(conn: &mut Conn, key: &str) -> Result<Progress, ImportError> {
    let text: Option<String> = redis::cmd("GET").arg(key).query_async(conn).await?;
    match text {
        None => Ok(Progress::default()),
        Some(t) => Progress::parse(&t).ok_or(ImportError::BadProgress(t)),
    }
}

/// A file to import.
pub(crate) struct Source<R> {
    /// Its identity (hex): the same file whatever its path.
    pub id: String,
    /// Its lines, from its start, each time it is called (a file that
    /// turns out to be another than the one its progress was read for is
    /// read again from its start).
    pub open: Box<dyn FnMut() -> io::Result<R> + Send>,
}

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A reader whose reads fail once `stopped` is set.
struct Stoppable<R> {
    inner: R,
    stopped: Arc<AtomicBool>,
}

impl<R> Stoppable<R> {
    fn check(&self) -> io::Result<()> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(io::Error::other("the import stopped"));
        }
        Ok(())
    }
}

impl<R: Read> Read for Stoppable<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.check()?;
        self.inner.read(buf)
    }
}

impl<R: BufRead> BufRead for Stoppable<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.check()?;
        self.inner.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        self.inner.consume(n);
    }
}

/// How a file is imported.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub format: LineFormat,
    /// Redis' clock (unix ms) the lines' times are judged against.
    pub clock_ms: i64,
    /// See [`progress_ttl_secs`].
    pub ttl_secs: Option<u64>,
}

/// Imports `source` into `keys`' stream from where its import stands.
/// `progress` is told what was done so far after each round trip.
pub(crate) async fn import<R: BufRead + Send + 'static>(
    conn: &mut Conn,
    keys: &Keys,
    source: Source<R>,
    settings: &Settings,
    progress: impl Fn(&Tally),
) -> Result<Tally, ImportError> {
    let Source { id, mut open } = source;
    let start = resume::find(conn, keys, &id, &mut *open).await?;
    let (reader, at, hashed) = (start.reader, start.at, start.hashed);
    let mut tally = Tally {
        key: Some(start.key.clone()),
        another: start.another,
        resumed: at,
        at,
        ..Tally::default()
    };
    progress(&tally);
    let (tx, mut rx) = mpsc::channel::<io::Result<Batch>>(READ_AHEAD);
    let (format, clock_ms) = (settings.format.clone(), settings.clock_ms);
    // Once this import ends or is dropped (Ctrl-C), the reader's next read
    // fails: a line that never ends (`/dev/zero`) cannot keep its thread,
    // and the process, alive.
    let stopped = Arc::new(AtomicBool::new(false));
    let stop_reading = StopOnDrop(stopped.clone());
    let reader = Stoppable {
        inner: reader,
        stopped,
    };
    let read = tokio::task::spawn_blocking(move || {
        let mut lines = Lines::new(reader, format, (at, hashed), clock_ms);
        loop {
            let next = lines.next_batch().transpose();
            let end = !matches!(next, Some(Ok(_)));
            if let Some(b) = next {
                if tx.blocking_send(b).is_err() {
                    return;
                }
            }
            if end {
                return;
            }
        }
    });
    let key = start.key;
    let mut trip = Vec::with_capacity(BATCHES_PER_TRIP);
    let sent = async {
        while rx.recv_many(&mut trip, BATCHES_PER_TRIP).await > 0 {
            // The batches before a failed read are sent, then it is told:
            // what the error message says was imported was.
            let mut failed = None;
            let batches: Vec<Batch> = trip
                .drain(..)
                .map_while(|b| b.map_err(|e| failed = Some(e)).ok())
                .collect();
            if !batches.is_empty() {
                send(conn, &keys.stream, &key, &batches, settings.ttl_secs).await?;
            }
            for b in batches {
                tally.add(b);
            }
            progress(&tally);
            if let Some(e) = failed {
                return Err(e.into());
            }
        }
        Ok::<_, ImportError>(())
    }
    .await;
    drop(rx);
    drop(stop_reading);
    let _ = read.await;
    sent.map(|()| tally)
}

/// Appends `batches` (consecutive) in one round trip; each checks that it
/// starts where the recorded progress stands.
async fn send(
    conn: &mut Conn,
    stream: &str,
    key: &str,
    batches: &[Batch],
    ttl_secs: Option<u64>,
) -> Result<(), ImportError> {
    let mut pipe = redis::pipe();
    for b in batches {
        let mut cmd = IMPORT.evalsha(2);
        cmd.arg(stream)
            .arg(key)
            .arg(b.from.text())
            .arg(b.to.text())
            .arg(ttl_secs.unwrap_or(0))
            .arg(&b.events);
        pipe.add_command(cmd);
    }
    let recorded: Vec<String> = pipe.query_async(conn).await?;
    for (b, r) in batches.iter().zip(recorded) {
        if r != b.to.text() {
            return Err(ImportError::Raced {
                recorded: r,
                expected: b.from.text(),
            });
        }
    }
    Ok(())
}

impl Tally {
    /// Adds another file's tally to this one (for a total).
    pub(crate) fn add_up(&mut self, t: Tally) {
        self.at.lines += t.at.lines;
        self.lines += t.lines;
        self.counted += t.counted;
        self.events += t.events;
        for (reason, n) in t.refused {
            *self.refused.entry(reason).or_default() += n;
        }
    }

    fn add(&mut self, b: Batch) {
        self.at = b.to;
        self.lines += b.to.lines - b.from.lines;
        self.counted += b.counted;
        self.events += b.events.len() as u64;
        for (reason, n) in b.refused {
            *self.refused.entry(reason).or_default() += n;
        }
        self.examples.extend(b.examples);
        self.held_back = b.held_back;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lives_as_long_as_the_coarsest_precision_keeps_hits() {
        // 120 samples of a day, and the day a hit may lie ahead: 121 days.
        assert_eq!(
            progress_ttl_secs(&LayoutArgs::default()),
            Some(121 * 86_400)
        );
        let far = LayoutArgs {
            samples: 1_000_000_000,
            precisions: vec![31_536_000],
            ..LayoutArgs::default()
        };
        assert_eq!(progress_ttl_secs(&far), None, "kept for good");
    }
}
