//! A worker's memory of the `known:` members it added after its apply
//! scripts, so that it skips later ZADDs that cannot matter.
//!
//! # Why a skipped ZADD is safe
//! `known:` must list every counter whose hash holds data (the cleaner walks
//! only `known:`, readers enumerate it). Nothing but the cleaner removes a
//! member, and it does so only when the member's hash is empty at that very
//! moment (`clean.lua`, atomically); it deletes only samples whose bucket
//! starts at or before `now - SAMPLES × PREC` on the leader's clock. So:
//!
//! 1. An apply script that ran `HINCRBY count:P:N b`, followed by the
//!    worker's `ZADD known: P:N`, leaves `P:N` in `known:` at least while
//!    field `b` exists, that is until a cleaner pass with
//!    `now ≥ b + SAMPLES × P` deletes it.
//! 2. The cache remembers, per member, the newest such `b` (only from a
//!    script whose reply said it ran now, not a replay, and only once the
//!    ZADD went in).
//! 3. A later script may skip `ZADD P:N` only while the Redis clock is
//!    before `b + SAMPLES × P - CLOCK_MARGIN_SECS`: the worker decides on its
//!    own clock, and the script checks the earliest such deadline of its
//!    skipped members against `TIME` before writing anything, returning
//!    "stale" instead (then the worker forgets everything and applies again
//!    with every ZADD). With the Redis and leader clocks within
//!    [`CLOCK_MARGIN_SECS`] of each other, no cleaner pass that ran before
//!    the script can have deleted `b`: the hash is not empty, the member is
//!    still there, and the script's HINCRBY keeps it non-empty. A delay of
//!    the script in flight (a stopped worker, a slow network) is covered by
//!    the script's own check, not by the margin.
//! 4. The cache is cleared whenever the worker resyncs: a Redis restart or
//!    failover may have lost the writes it remembers.
//!
//! Assumed, as by the counters themselves: no eviction policy that drops
//! counter hashes, and nobody deletes `known:` or counter hashes by hand
//! while workers run (restart the workers after doing so).
//!
//! # Memory
//! A name is remembered by a 128-bit fingerprint (two independently keyed
//! SipHash values: a false "known" needs a collision, ~2^-128 per pair) and
//! one `u32` bucket per precision, about 60 bytes with seven precisions.
//! Two generations of at most [`GENERATION`] names each: when the newer is
//! full it becomes the older and the oldest is dropped, so names written
//! window after window stay (they are written again into the newer one)
//! while a long tail of names seen once ages out. Both full: ~15 MiB.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use crate::model::aggregate::Cell;

/// Allowed difference between the Redis clock and any leader's clock, in
/// seconds: a member is not trusted to be in `known:` within this time of
/// its cleaner horizon.
pub(crate) const CLOCK_MARGIN_SECS: i64 = 60;
/// Names per generation: 7/8 of a power of two, the most a hash table of
/// 2^17 slots holds without growing. Two generations cover a Zipf workload
/// over 100,000 names without forgetting any.
pub(crate) const GENERATION: usize = 114_688;
/// "No bucket written with a ZADD" at this precision (bucket 0, the first
/// second of 1970, is never trusted: a ZADD more, nothing less).
const NONE: u32 = 0;

/// A name's fingerprint is already uniformly random: the table uses its low
/// bits as they are instead of hashing it again.
#[derive(Default)]
struct Fingerprinted(u64);

impl Hasher for Fingerprinted {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

/// Fingerprint → index of the name's buckets in `buckets`.
type Index = HashMap<u128, u32, BuildHasherDefault<Fingerprinted>>;

/// One generation: names and, per name, the newest bucket written with a
/// ZADD per precision (`stride` entries from `index × stride`).
#[derive(Debug, Clone, Default)]
struct Generation {
    index: Index,
    buckets: Vec<u32>,
}

impl Generation {
    fn get(&self, fp: u128, stride: usize) -> Option<&[u32]> {
        let i = *self.index.get(&fp)? as usize * stride;
        Some(&self.buckets[i..i + stride])
    }
}

/// Per name, the newest bucket written together with a ZADD of its member,
/// per precision.
#[derive(Debug, Clone)]
pub(crate) struct KnownCache {
    precisions: Vec<u32>,
    /// `SAMPLES × P - CLOCK_MARGIN_SECS`, per precision.
    trust: Vec<i64>,
    keys: (RandomState, RandomState),
    newer: Generation,
    older: Generation,
}

impl KnownCache {
    /// An empty cache for this layout.
    pub(crate) fn new(precisions: &[u32], samples: u32) -> KnownCache {
        KnownCache {
            precisions: precisions.to_vec(),
            trust: precisions
                .iter()
                .map(|&p| i64::from(samples) * i64::from(p) - CLOCK_MARGIN_SECS)
                .collect(),
            keys: (RandomState::new(), RandomState::new()),
            newer: Generation::default(),
            older: Generation::default(),
        }
    }

    fn fingerprint(&self, name: &str) -> u128 {
        let hi = self.keys.0.hash_one(name);
        let lo = self.keys.1.hash_one(name);
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// The remembered buckets of a name, newer generation first.
    fn buckets(&self, fp: u128) -> Option<&[u32]> {
        let stride = self.precisions.len();
        self.newer
            .get(fp, stride)
            .or_else(|| self.older.get(fp, stride))
    }

    /// Until when (unix seconds, exclusive) `P:name` is surely in `known:`,
    /// or `None` when a ZADD is needed at `now_s` (unix seconds).
    pub(crate) fn trusted_until(&self, precision: u32, name: &str, now_s: i64) -> Option<i64> {
        let p = self.precisions.iter().position(|&x| x == precision)?;
        let b = self.buckets(self.fingerprint(name))?[p];
        if b == NONE {
            return None;
        }
        let until = i64::from(b).saturating_add(self.trust[p]);
        (now_s < until).then_some(until)
    }

    /// Records that a script ran `HINCRBY` of `bucket` and the worker then
    /// `ZADD P:name`.
    pub(crate) fn wrote(&mut self, precision: u32, name: &str, bucket: i64) {
        let Some(p) = self.precisions.iter().position(|&x| x == precision) else {
            return;
        };
        // A bucket a u32 cannot hold (before 1970, after 2106) is not
        // remembered: its member is simply added every time.
        let Ok(bucket) = u32::try_from(bucket) else {
            return;
        };
        let stride = self.precisions.len();
        let fp = self.fingerprint(name);
        if !self.newer.index.contains_key(&fp) {
            if self.newer.index.len() >= GENERATION {
                self.older = std::mem::take(&mut self.newer);
            }
            let carried = self.older.get(fp, stride).map(<[u32]>::to_vec);
            let at = self.newer.index.len() as u32;
            self.newer.index.insert(fp, at);
            match carried {
                Some(b) => self.newer.buckets.extend(b),
                None => self.newer.buckets.extend(std::iter::repeat_n(NONE, stride)),
            }
        }
        let i = self.newer.index[&fp] as usize * stride + p;
        let slot = &mut self.newer.buckets[i];
        *slot = (*slot).max(bucket);
    }

    /// Forgets everything (after a resync, or a script found it stale).
    pub(crate) fn clear(&mut self) {
        self.newer = Generation::default();
        self.older = Generation::default();
    }
}

/// Sorts cells in the byte order of their `known:` members (`PREC:NAME`),
/// each counter's cells by bucket, without building the members.
///
/// `known:` holds every member at score 0, so Redis orders it by member:
/// members added in that order insert next to each other in its skip
/// list, which costs far fewer cache misses than the same members in
/// random order (a large carry of counters new to `known:` adds hundreds
/// of thousands at once).
///
/// Cost: names are compared only between runs of cells of one name (as
/// [`crate::model::aggregate::Window::cell_lists`] lists them: a name's cells
/// together), so a carry of 500,000 cells over 100,000 names sorts 100,000
/// runs, not 500,000 cells; any order is sorted right, just slower.
pub(crate) fn sort_by_member(cells: &mut [Cell<'_>]) {
    // "P:" strings of the precisions present, ranked byte-wise: two
    // members of different precisions differ at or before the shorter
    // one's ':', so the rank decides; within one the name does.
    let mut prefixes: Vec<(String, u32)> = Vec::new();
    for c in cells.iter() {
        if !prefixes.iter().any(|(_, p)| *p == c.precision) {
            prefixes.push((format!("{}:", c.precision), c.precision));
        }
    }
    prefixes.sort();
    let rank = |p: u32| prefixes.iter().position(|(_, q)| *q == p).unwrap_or(0);
    // Runs of one name, in name order (runs of the same name end up next
    // to each other).
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, c) in cells.iter().enumerate() {
        match runs.last_mut() {
            Some(r) if cells[r.start].name == c.name => r.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    runs.sort_unstable_by_key(|r| cells[r.start].name);
    // Precision by precision, the runs' cells of that precision: members in
    // byte order, a counter's cells next to each other.
    let ranks: Vec<u8> = cells.iter().map(|c| rank(c.precision) as u8).collect();
    // Where each cell goes, as indices: a carry holds up to a million
    // cells, and a second copy of them would be 40 MB more at the worker's
    // peak.
    let mut order: Vec<u32> = Vec::with_capacity(cells.len());
    for r in 0..prefixes.len() {
        for run in &runs {
            order.extend(
                run.clone()
                    .filter(|&i| usize::from(ranks[i]) == r)
                    .map(|i| i as u32),
            );
        }
    }
    drop((runs, ranks));
    permute(cells, &mut order);
    // Each counter's cells (one or a few) by bucket.
    for counter in cells.chunk_by_mut(|a, b| a.precision == b.precision && a.name == b.name) {
        counter.sort_unstable_by_key(|c| c.bucket);
    }
}

/// Puts `cells[order[k]]` at `k` for every `k`, in place, following the
/// permutation's cycles (`order` is used up).
fn permute<T: Copy>(cells: &mut [T], order: &mut [u32]) {
    const DONE: u32 = u32::MAX;
    for start in 0..cells.len() {
        if order[start] == DONE {
            continue;
        }
        let first = cells[start];
        let mut at = start;
        loop {
            let from = order[at] as usize;
            order[at] = DONE;
            if from == start {
                cells[at] = first;
                break;
            }
            cells[at] = cells[from];
            at = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names remembered (one in both generations counts twice).
    fn remembered(c: &KnownCache) -> usize {
        c.newer.index.len() + c.older.index.len()
    }

    #[test]
    fn trusts_a_member_until_its_bucket_nears_the_cleaner_horizon() {
        let mut c = KnownCache::new(&[1, 60], 120);
        let now = 1_000_000;
        assert_eq!(c.trusted_until(1, "a", now), None, "never written");
        c.wrote(1, "a", now);
        // The cleaner deletes bucket `now` at `now + 120`; trusted 60 s less.
        assert_eq!(c.trusted_until(1, "a", now), Some(now + 60));
        assert_eq!(c.trusted_until(1, "a", now + 59), Some(now + 60));
        assert_eq!(c.trusted_until(1, "a", now + 60), None);
        assert_eq!(c.trusted_until(60, "a", now), None, "other precision");
        assert_eq!(c.trusted_until(1, "b", now), None, "other name");
        // An older bucket never lowers what is remembered.
        c.wrote(1, "a", now - 30);
        assert_eq!(c.trusted_until(1, "a", now), Some(now + 60));
        c.wrote(1, "a", now + 30);
        assert_eq!(c.trusted_until(1, "a", now + 60), Some(now + 90));
        let b = 999_960;
        c.wrote(60, "a", b);
        assert_eq!(c.trusted_until(60, "a", now), Some(b + 7200 - 60));
        c.clear();
        assert_eq!(c.trusted_until(1, "a", now), None);
        assert_eq!(remembered(&c), 0);
    }

    #[test]
    fn a_margin_as_wide_as_the_horizon_trusts_nothing() {
        let mut c = KnownCache::new(&[1], 60);
        c.wrote(1, "a", 100);
        assert_eq!(c.trusted_until(1, "a", 99), Some(100));
        assert_eq!(c.trusted_until(1, "a", 100), None);
        c.wrote(7, "a", 100); // unknown precision: ignored
        assert_eq!(remembered(&c), 1);
    }

    #[test]
    fn keeps_the_names_written_again_when_a_generation_fills() {
        let mut c = KnownCache::new(&[1], 120);
        c.wrote(1, "hot", 500);
        for i in 0..GENERATION {
            c.wrote(1, &i.to_string(), 500);
        }
        // "hot" was in the newer generation, now the older: still trusted.
        assert_eq!(c.trusted_until(1, "hot", 500), Some(560));
        // Written again, it moves to the newer generation and survives the
        // next rotation; a name written only once before does not.
        c.wrote(1, "hot", 501);
        for i in 0..GENERATION {
            c.wrote(1, &format!("x{i}"), 500);
        }
        assert_eq!(c.trusted_until(1, "hot", 500), Some(561));
        assert_eq!(c.trusted_until(1, "0", 500), None, "aged out");
        assert!(remembered(&c) <= 2 * GENERATION);
        c.wrote(1, "old", -5);
        assert_eq!(
            c.trusted_until(1, "old", 0),
            None,
            "before 1970: never trusted"
        );
    }

    #[test]
    fn a_large_shuffled_carry_sorts_as_its_members_do() {
        // Names in runs as a window lists them, runs out of order, several
        // precisions and buckets each: long permutation cycles.
        let names: Vec<String> = (0..300)
            .map(|i| format!("n{}", (i * 7919) % 1000))
            .collect();
        let mut cells = Vec::new();
        for (i, name) in names.iter().enumerate() {
            for p in [1u32, 5, 60, 300, 3600] {
                for b in 0..(1 + i % 3) as i64 {
                    cells.push(Cell {
                        precision: p,
                        name,
                        bucket: (b * 7 + i as i64) % 5,
                        delta: i as i64,
                    });
                }
            }
        }
        let mut want: Vec<(String, i64, i64)> = cells
            .iter()
            .map(|c| (format!("{}:{}", c.precision, c.name), c.bucket, c.delta))
            .collect();
        want.sort();
        sort_by_member(&mut cells);
        let got: Vec<(String, i64, i64)> = cells
            .iter()
            .map(|c| (format!("{}:{}", c.precision, c.name), c.bucket, c.delta))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn cells_sort_as_their_members_do() {
        let cell = |precision, name, bucket| Cell {
            precision,
            name,
            bucket,
            delta: 1,
        };
        let mut cells = vec![
            cell(60, "b", 0),
            cell(600, "a", 0),
            cell(5, "a", 5),
            cell(60, "a", 60),
            cell(5, "a", 0),
            cell(86400, "", 0),
            cell(60, "a", 0),
            cell(5, "b", 0),
            cell(5, "a", 10),
        ];
        sort_by_member(&mut cells);
        let got: Vec<(String, i64)> = cells
            .iter()
            .map(|c| (format!("{}:{}", c.precision, c.name), c.bucket))
            .collect();
        let mut want = got.clone();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(got[0], ("5:a".to_string(), 0));
        assert_eq!(got[1], ("5:a".to_string(), 5));
        assert_eq!(got[2], ("5:a".to_string(), 10));
        assert_eq!(got.len(), 9);
    }
}
