//! Where a file's import goes on: the progress recorded for the files that
//! share its identity (its first 4 KiB), and the check that the bytes
//! before a recorded progress are the ones that were imported.
//!
//! Each batch records, with how far the file was read, the SHA-1 of every
//! byte before that point (`BYTES:LINES:SHA1`, hashed as the lines are
//! read, so it costs no read of its own). A file goes on from a recorded
//! progress only when its bytes up to there hash the same: the file that
//! was imported, grown since or renamed or compressed. Another file that
//! merely starts the same way (NDJSON without times often does) is
//! imported from its start under a progress of its own, the identity's
//! next one (`SHA1:2`, `SHA1:3`, …). One shorter than a progress it
//! matches no other of is refused: a cut copy of that file (already
//! imported) cannot be told from another file, and refusing counts no line
//! twice; once it has grown past, it can be told.
//!
//! A progress written before the hash was recorded (`BYTES:LINES`) is gone
//! on from as then: when the file's byte before it ends a line.

use std::io::{self, BufRead};

use sha1_smol::Sha1;

use super::batch::Progress;
use super::ImportError;
use crate::model::keys::Keys;
use crate::store::connect::Conn;

/// Most files with one identity: more is no accident, and each costs a
/// round trip when a file of that identity is imported.
const MAX_FILES: u32 = 100;

/// Where an import starts.
pub(super) struct Start<R> {
    /// The file, read up to `at`.
    pub reader: R,
    pub at: Progress,
    /// The hash of the bytes before `at`, to go on with.
    pub hashed: Sha1,
    /// The progress key this import moves.
    pub key: String,
    /// Another file than the one first imported with this identity,
    /// imported from its start.
    pub another: bool,
}

/// The identity of the `n`th file (from 1) sharing `file`'s.
fn nth(file: &str, n: u32) -> String {
    match n {
        1 => file.to_string(),
        n => format!("{file}:{n}"),
    }
}

/// Finds where the import of the file `open` reads goes on.
pub(super) async fn find<R: BufRead>(
    conn: &mut Conn,
    keys: &Keys,
    file: &str,
    open: &mut (dyn FnMut() -> io::Result<R> + Send),
) -> Result<Start<R>, ImportError> {
    let mut records = Vec::new();
    for n in 1..=MAX_FILES + 1 {
        let key = keys.import_progress(&nth(file, n));
        let text: Option<String> = redis::cmd("GET").arg(&key).query_async(conn).await?;
        match text {
            None => break,
            Some(t) => records.push((key, Progress::parse(&t).ok_or(ImportError::BadProgress(t))?)),
        }
    }
    let mut reader = open()?;
    let (mut pos, mut hashed) = (0, Sha1::new());
    match records.first() {
        None => {}
        Some((key, at)) if at.digest.is_none() && at.bytes > 0 => {
            let (key, at) = (key.clone(), *at);
            legacy(&mut reader, &mut pos, &mut hashed, at)?;
            return Ok(Start {
                reader,
                at,
                hashed,
                key,
                another: false,
            });
        }
        Some(_) => {}
    }
    // The longest progress whose bytes the file has: it has grown from
    // there (of files sharing their bytes that far, the one imported
    // furthest is the one taken).
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_by_key(|&i| records[i].1.bytes);
    let (mut matched, mut shorter) = (None, None);
    for &i in &order {
        let at = records[i].1;
        skip(&mut reader, &mut pos, at.bytes, &mut hashed)?;
        if pos < at.bytes {
            shorter = Some(at.bytes);
            break;
        }
        if at.bytes == 0 || at.digest == Some(hashed.digest().bytes()) {
            matched = Some(i);
        }
    }
    let (key, at, another) = match (matched, shorter) {
        (Some(i), _) => (records[i].0.clone(), records[i].1, false),
        (None, Some(recorded)) => return Err(ImportError::Shrank { len: pos, recorded }),
        (None, None) if records.len() as u32 >= MAX_FILES => {
            return Err(ImportError::TooManyFiles { files: MAX_FILES })
        }
        (None, None) => {
            let n = records.len() as u32 + 1;
            (
                keys.import_progress(&nth(file, n)),
                Progress::default(),
                n > 1,
            )
        }
    };
    if pos != at.bytes {
        (reader, pos, hashed) = (open()?, 0, Sha1::new());
        skip(&mut reader, &mut pos, at.bytes, &mut hashed)?;
        let same = at.bytes == 0 || at.digest == Some(hashed.digest().bytes());
        if pos < at.bytes || !same {
            return Err(io::Error::other("the file changed while it was read").into());
        }
    }
    Ok(Start {
        reader,
        at,
        hashed,
        key,
        another,
    })
}

/// A progress without a hash (an earlier version's): gone on from when
/// the file has its bytes and the last of them ends a line, as then.
fn legacy(
    reader: &mut impl BufRead,
    pos: &mut u64,
    hashed: &mut Sha1,
    at: Progress,
) -> Result<(), ImportError> {
    skip(reader, pos, at.bytes - 1, hashed)?;
    let last = reader.fill_buf()?.first().copied();
    skip(reader, pos, at.bytes, hashed)?;
    if *pos < at.bytes {
        return Err(ImportError::Shrank {
            len: *pos,
            recorded: at.bytes,
        });
    }
    if last != Some(b'\n') {
        return Err(ImportError::Rewritten { recorded: at.bytes });
    }
    Ok(())
}

/// Reads on from `*pos` to byte `to` (or the end), hashing what it reads.
fn skip(reader: &mut impl BufRead, pos: &mut u64, to: u64, hashed: &mut Sha1) -> io::Result<()> {
    while *pos < to {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let n = buf
            .len()
            .min(usize::try_from(to - *pos).unwrap_or(usize::MAX));
        hashed.update(&buf[..n]);
        reader.consume(n);
        *pos += n as u64;
    }
    Ok(())
}
