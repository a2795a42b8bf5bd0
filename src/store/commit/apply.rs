//! Steps 2 and 3 of a window: its cells applied in chunks, each at most
//! once (`apply.lua` marks the chunk in the same script), and its entries
//! acknowledged: one pipeline on one Redis. The window's statistics cells
//! (see [`super::stats`]) follow its count cells in the same chunks, each
//! weighing more.
//!
//! On a Redis Cluster a script may only touch one hash slot, so a chunk
//! holds the cells of one slot (cells come sorted by slot, see
//! [`super::sort_for_cluster`]) and its marker is a key in that slot (tagged with
//! [`crate::model::slots::tag_for_slot`]). The `known:` and `stats:known:`
//! ZADDs, in slots of their own, are sent after the chunk is applied (for a replayed chunk
//! too: the worker may have died in between); every command goes on its
//! own, all in flight at once.

use std::sync::Mutex;

use redis::{Cmd, Value};

pub(crate) use super::plan::Apply;
use super::plan::{plan, Chunk};
pub(crate) use super::replies::Failure;
use super::replies::{chunk_statuses, group_statuses, InFlight, GROUP_CHUNKS};
use super::{stats, Committer, ACK_IDS, MARKER_TTL_AFTER_FINISH, MARKER_TTL_SECS};
use crate::model::aggregate::Cell;
use crate::model::ids::IdList;
use crate::model::keys::Keys;
use crate::model::known::KnownCache;
use crate::store::connect::{joined, Conn, StoreResult};
use crate::store::scripts::APPLY;
use crate::store::stream;

/// Members per `ZADD known:` sent on its own (about 1 µs each).
const ZADD_MEMBERS: usize = 1000;

/// XACK commands per round trip when acknowledging many ids alone: 8 of
/// [`ACK_IDS`] ids, about 0.5 MB of commands.
const ACKS_AT_ONCE: usize = 8;

/// The apply scripts of `chunks`, the plan's chunks from number `first`
/// on. With `known` (a cache and the current unix
/// second), the ZADDs of members it trusts are left out (see
/// [`crate::model::known`]). Returns the scripts and the indices of the
/// cells whose member is to be added (by the scripts on one Redis; on a
/// cluster by ZADDs sent after them).
fn apply_commands(
    keys: &Keys,
    step: &Apply<'_>,
    chunks: &[Chunk],
    first: usize,
    known: Option<(&KnownCache, i64)>,
) -> (Vec<Cmd>, Vec<usize>) {
    let known_key = keys.known();
    let stats_known = keys.stats_known();
    let prefix = keys.count_of_member("").len();
    let stats_prefix = keys.stats_of_member("").len();
    let mut cmds = Vec::with_capacity(chunks.len());
    let mut zadded = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let cells = &step.cells[chunk.cells.clone()];
        let stat_cells = &step.stats[chunk.stats.clone()];
        let base = chunk.cells.start;
        let first_zadd = zadded.len();
        let mut deadline = i64::MAX;
        let mut prev: Option<(u32, &str)> = None;
        for (j, c) in cells.iter().enumerate() {
            // Cells come grouped by counter: one member per group.
            if prev == Some((c.precision, c.name)) {
                continue;
            }
            prev = Some((c.precision, c.name));
            match known.and_then(|(k, now)| k.trusted_until(c.precision, c.name, now)) {
                Some(until) => deadline = deadline.min(until),
                None => zadded.push(base + j),
            }
        }
        let mut cmd = APPLY.evalsha(3 + cells.len() + stat_cells.len());
        // On a cluster the script may not touch known: or stats:known:
        // (other slots): it gets its own marker there and no member to add.
        let (zset, stats_zset, stats_skip) = if step.by_slot {
            (&chunk.marker, &chunk.marker, 0)
        } else {
            (&known_key, &stats_known, stats_prefix)
        };
        cmd.arg(&chunk.marker).arg(zset).arg(stats_zset);
        for c in cells {
            cmd.arg(keys.count(c.precision, c.name));
        }
        for s in stat_cells {
            cmd.arg(keys.stats(s.precision, s.name));
        }
        let deadline = if deadline == i64::MAX { 0 } else { deadline };
        cmd.arg(first + i)
            .arg(MARKER_TTL_SECS)
            .arg(deadline)
            .arg(prefix);
        cmd.arg(cells.len()).arg(stats_skip);
        for c in cells {
            cmd.arg(c.bucket).arg(c.delta);
        }
        let members = if step.by_slot {
            &[][..]
        } else {
            &zadded[first_zadd..]
        };
        cmd.arg(members.len());
        for &z in members {
            cmd.arg(z - base + 1);
        }
        stats::push_args(&mut cmd, stat_cells);
        cmds.push(cmd);
    }
    (cmds, zadded)
}

/// The commands that shorten finished windows' markers to their final TTL.
pub(super) fn expire_markers(markers: &[String]) -> Vec<Cmd> {
    markers
        .iter()
        .map(|m| {
            let mut c = redis::cmd("EXPIRE");
            c.arg(m).arg(MARKER_TTL_AFTER_FINISH);
            c
        })
        .collect()
}

/// Builds the pipeline of steps 2 and 3 on one Redis without sending it:
/// the EXPIREs of `finished`'s markers (replies ignored), one apply script
/// per chunk, then XACKs of at most [`ACK_IDS`] ids. Pure, so that the
/// hot-path benchmark can build it without a connection.
#[cfg(feature = "bench")]
pub(crate) fn apply_pipeline(
    keys: &Keys,
    step: &Apply<'_>,
    finished: &[String],
    known: Option<(&KnownCache, i64)>,
) -> (redis::Pipeline, Vec<usize>) {
    let chunks = plan(keys, step);
    let (mut pipe, zadded) = pipeline_part(keys, step, &chunks, 0, finished, known);
    stream::ack_into(&mut pipe, keys, step.ids, ACK_IDS);
    (pipe, zadded)
}

/// The EXPIREs of `finished`'s markers (replies ignored) and the apply
/// scripts of `chunks`, the plan's from number `first` on, in one pipeline.
fn pipeline_part(
    keys: &Keys,
    step: &Apply<'_>,
    chunks: &[Chunk],
    first: usize,
    finished: &[String],
    known: Option<(&KnownCache, i64)>,
) -> (redis::Pipeline, Vec<usize>) {
    let (cmds, zadded) = apply_commands(keys, step, chunks, first, known);
    let mut pipe = redis::pipe();
    for c in expire_markers(finished) {
        pipe.add_command(c).ignore();
    }
    for c in cmds {
        pipe.add_command(c);
    }
    (pipe, zadded)
}

impl Committer {
    /// Steps 2 and 3: apply every chunk (at most once each), then
    /// acknowledge the ids. Returns the cells that failed to apply. Safe to
    /// repeat after any error. `finished` are the markers of the window the
    /// last commit finished, which may now expire soon. With `known`, ZADDs
    /// of members it trusts are left out and the members added are
    /// remembered; a chunk that finds it stale clears it and the step runs
    /// again with every ZADD (chunks already applied only replay).
    pub(crate) async fn apply_and_ack(
        &self,
        conn: &mut Conn,
        step: &Apply<'_>,
        finished: &[String],
        known: Option<&Mutex<KnownCache>>,
    ) -> StoreResult<Vec<Failure>> {
        let chunks = plan(&self.keys, step);
        if chunks.is_empty() && finished.is_empty() && step.ids.is_empty() {
            // A window whose cells all wait in the carry: nothing to send.
            return Ok(Vec::new());
        }
        // The cache is locked only while commands are built or replies
        // read, never across a round trip (a carry applies beside windows).
        let lock = || known.map(|k| k.lock().unwrap_or_else(|p| p.into_inner()));
        loop {
            let now_s = crate::model::clock::unix_ms().div_euclid(1000);
            let mut statuses = Vec::with_capacity(chunks.len());
            let mut zadded = Vec::new();
            // A few dozen chunks at a time, so that a large step (a carry)
            // is never built whole in memory; on one Redis the next group
            // is built while the previous one runs.
            let groups = chunks.len().div_ceil(GROUP_CHUNKS).max(1);
            let mut running: Option<(usize, InFlight)> = None;
            for g in 0..groups {
                let first = g * GROUP_CHUNKS;
                let part = &chunks[first..(first + GROUP_CHUNKS).min(chunks.len())];
                let expire = if g == 0 { finished } else { &[][..] };
                if step.by_slot {
                    let (cmds, z) = {
                        let k = lock();
                        let trusted = k.as_deref().map(|k| (k, now_s));
                        apply_commands(&self.keys, step, part, first, trusted)
                    };
                    let mut all = expire_markers(expire);
                    let skip = all.len();
                    all.extend(cmds);
                    let replies = conn.query_each(all).await?;
                    let st = chunk_statuses(part, &replies[skip..], step)?;
                    self.add_members(conn, step, part, &st, &z).await?;
                    statuses.extend(st);
                    zadded.extend(z);
                    continue;
                }
                let (mut pipe, z) = {
                    let k = lock();
                    let trusted = k.as_deref().map(|k| (k, now_s));
                    pipeline_part(&self.keys, step, part, first, expire, trusted)
                };
                if g + 1 == groups {
                    // Acknowledged once every other group is counted: a
                    // drained group means visible counters.
                    if let Some((at, previous)) = running.take() {
                        statuses.extend(group_statuses(&chunks, at, previous, step).await?);
                    }
                    stream::ack_into(&mut pipe, &self.keys, step.ids, ACK_IDS);
                }
                zadded.extend(z);
                let mut c = conn.clone();
                let sent: InFlight =
                    tokio::spawn(async move { pipe.query_async::<Vec<Value>>(&mut c).await });
                if let Some((at, previous)) = running.replace((first, sent)) {
                    statuses.extend(group_statuses(&chunks, at, previous, step).await?);
                }
            }
            if let Some((at, last)) = running {
                statuses.extend(group_statuses(&chunks, at, last, step).await?);
            }
            if step.by_slot {
                self.replicated(conn).await?;
                // Acknowledged once counted, as on one Redis: a drained
                // group means visible counters.
                self.ack(conn, step.ids).await?;
            }
            let mut failures = Vec::new();
            let mut stale = false;
            // The cells of chunks applied now: their members went in with
            // them (one pass; a carry has a thousand chunks and as many
            // members as cells).
            let mut applied = vec![false; step.cells.len()];
            for (chunk, (status, chunk_failures)) in chunks.iter().zip(statuses) {
                if status < 0 {
                    stale = true;
                    continue;
                }
                if status == 1 {
                    applied[chunk.cells.clone()].fill(true);
                }
                failures.extend(chunk_failures);
            }
            let mut k = lock();
            if let (false, Some(k)) = (stale, k.as_deref_mut()) {
                for &z in zadded.iter().filter(|&&z| applied[z]) {
                    let c = &step.cells[z];
                    k.wrote(c.precision, c.name, c.bucket);
                }
            }
            match k.as_deref_mut() {
                Some(k) if stale => k.clear(),
                _ => return Ok(failures),
            }
        }
    }

    /// Acknowledges a window's `ids` (space separated), in commands of at
    /// most [`ACK_IDS`] ids, in one round trip.
    pub(crate) async fn ack(&self, conn: &mut Conn, ids: &str) -> StoreResult<()> {
        let mut acks = redis::pipe();
        stream::ack_into(&mut acks, &self.keys, ids, ACK_IDS);
        // None (a carry acknowledges nothing itself): an empty pipeline is
        // an error on a cluster.
        if !acks.is_empty() {
            acks.query_async::<()>(conn).await?;
        }
        Ok(())
    }

    /// Acknowledges the ids of a carry's windows, in commands of at most
    /// [`ACK_IDS`], at most [`ACKS_AT_ONCE`] per round trip (a carry's
    /// windows hold up to 2 M ids, whose commands built at once took tens
    /// of MiB), the next round trip's commands built while the last one is
    /// in flight: building them costs the worker about what they cost
    /// Redis, and one after the other left Redis idle half the time.
    pub(crate) async fn ack_lists(&self, conn: &mut Conn, lists: &[&IdList]) -> StoreResult<()> {
        let mut ids = lists.iter().flat_map(|l| l.iter());
        let mut in_flight: Option<tokio::task::JoinHandle<redis::RedisResult<()>>> = None;
        loop {
            let mut acks = redis::pipe();
            let part = ids.by_ref().take(ACK_IDS * ACKS_AT_ONCE);
            stream::ack_each_into(&mut acks, &self.keys, part, ACK_IDS);
            // Sent in order: the one before is answered first.
            if let Some(task) = in_flight.take() {
                joined(task, "an acknowledgement's task").await?;
            }
            // None left (a carry acknowledges nothing itself): an empty
            // pipeline is an error on a cluster.
            if acks.is_empty() {
                return Ok(());
            }
            let mut c = conn.clone();
            in_flight = Some(tokio::spawn(
                async move { acks.query_async::<()>(&mut c).await },
            ));
        }
    }

    /// On a cluster, the `known:` members of the chunks just applied: those
    /// `zadded` names for chunks applied now, every member for replayed
    /// ones, none of the cells that failed; in commands of at most
    /// [`ZADD_MEMBERS`]. ZADD is idempotent, so a repeat is harmless.
    async fn add_members(
        &self,
        conn: &mut Conn,
        step: &Apply<'_>,
        chunks: &[Chunk],
        statuses: &[(i64, Vec<Failure>)],
        zadded: &[usize],
    ) -> StoreResult<()> {
        let mut members: Vec<String> = Vec::new();
        for (chunk, (status, failures)) in chunks.iter().zip(statuses) {
            members_after(
                step.cells,
                chunk.cells.clone(),
                *status,
                failures,
                |i| zadded.binary_search(&i).is_ok(),
                &mut members,
            );
        }
        let mut stat_members = Vec::new();
        for (chunk, (status, failures)) in chunks.iter().zip(statuses) {
            if *status >= 0 {
                stats::members(
                    &step.stats[chunk.stats.clone()],
                    failures,
                    &mut stat_members,
                );
            }
        }
        let mut cmds = zadds(&self.keys.known(), &members);
        cmds.extend(zadds(&self.keys.stats_known(), &stat_members));
        conn.query_each(cmds).await?;
        Ok(())
    }

    /// The marker keys of a window's apply step, to expire once finished.
    pub(crate) fn markers_of(&self, step: &Apply<'_>) -> Vec<String> {
        super::plan::markers(&plan(&self.keys, step))
    }
}

/// On a cluster, the `known:` members to add once the script of the cells
/// `range` (of `cells`) replied `status`: for cells applied now (1) those
/// the worker left to add (`zadded`, by index), for a replay (0) every
/// counter's (the worker may have died before adding them), none of the
/// cells that failed.
pub(super) fn members_after(
    cells: &[Cell<'_>],
    range: std::ops::Range<usize>,
    status: i64,
    failures: &[Failure],
    zadded: impl Fn(usize) -> bool,
    out: &mut Vec<String>,
) {
    let failed = |c: &Cell<'_>| {
        failures
            .iter()
            .any(|f| f.precision == c.precision && f.name == c.name && !stats::is_stats(f))
    };
    let mut prev: Option<(u32, &str)> = None;
    for i in range {
        let c = &cells[i];
        let first = prev != Some((c.precision, c.name));
        prev = Some((c.precision, c.name));
        let wanted = match status {
            1 => zadded(i),
            0 => first,
            _ => false,
        };
        if wanted && !failed(c) {
            out.push(Keys::member(c.precision, c.name));
        }
    }
}

/// `ZADD zset 0 member ...` of `members`, at most [`ZADD_MEMBERS`] each.
pub(super) fn zadds(zset: &str, members: &[String]) -> Vec<Cmd> {
    members
        .chunks(ZADD_MEMBERS)
        .map(|part| {
            let mut c = redis::cmd("ZADD");
            c.arg(zset);
            for m in part {
                c.arg(0).arg(m);
            }
            c
        })
        .collect()
}
