//! Step 2 of windows and sums: their cells into the counters and
//! statistics, each chunk at most once, by the one script that writes them
//! (`apply.lua`); then their `known:` and `stats:known:` members, then
//! whatever the caller acknowledges (step 3).
//!
//! What is applied is a [`Sum`]: a window applied as it closes, a carry
//! (the sum of several windows' cells), or one of a *group* of carries of a
//! process' stream shards on a Redis Cluster. Each is cut into chunks by
//! [`super::plan::plan()`], a function of its recorded cells alone, so a replay cuts it
//! alike; chunk `c` is marked applied as field `c` of its own marker
//! (`hc:applied:ID`, on a cluster `hc:applied:{T}:ID` in the chunk's slot),
//! a group's sum's counts as field `ID:c` of the group's (`hc:applied:{T}:GROUP`),
//! whether it is applied with its group or alone by a worker recovering it:
//! exactly once does not rest on the grouping.
//!
//! The chunks of every sum applied together are packed slot by slot into
//! scripts of at most [`super::CHUNK_CELLS`] weight (on a cluster a script touches
//! one slot; one Redis is one slot here), so a group pays one script per
//! slot, not one per sum and slot. The members go after their scripts, by
//! plain ZADDs (for a replayed chunk too: the worker may have died in
//! between), in member order, so that members new to `known:` go into its
//! skip list next to each other.

use std::sync::Mutex;

use redis::Cmd;

pub(crate) use super::plan::Sum;
use super::plan::{scripts, Script};
pub(crate) use super::replies::Failure;
use super::replies::{members_after, parse_failures, part_statuses, zadds};
use super::{stats, Committer, ACK_IDS, MARKER_TTL_AFTER_FINISH, MARKER_TTL_SECS};
use crate::model::ids::IdList;
use crate::model::keys::Keys;
use crate::model::known::KnownCache;
use crate::store::connect::{joined, Conn, StoreError, StoreResult};
use crate::store::scripts::APPLY;
use crate::store::stream;

/// Scripts sent at once (each holds at most [`super::CHUNK_CELLS`] weight,
/// a few ms of Redis), one batch in flight while the next is built: a
/// carry of a million cells is never built whole in memory (with 64, the
/// 1 M-entry Zipf backlog peaked 10 MiB higher, no faster).
const SCRIPTS_AT_ONCE: usize = 16;
/// Bytes of names the scripts sent at once carry at most (at least one
/// script goes, whatever it holds): each name goes out in its cell's key
/// and its `known:` member, so sixteen scripts of 4 KiB names (500 cells
/// each) held some 200 MiB of arguments while one batch was in flight and
/// the next built.
const NAME_BYTES_AT_ONCE: usize = 4 << 20;

/// XACK commands per round trip when acknowledging many ids alone: 8 of
/// [`ACK_IDS`] ids, about 0.5 MB of commands.
const ACKS_AT_ONCE: usize = 8;

/// `scripts` in batches sent at once: at most [`SCRIPTS_AT_ONCE`] scripts
/// and [`NAME_BYTES_AT_ONCE`] of names each, one script at least.
fn batches<'s>(scripts: &'s [Script], sums: &[Sum<'_>]) -> Vec<&'s [Script]> {
    let names = |script: &Script| -> usize {
        script
            .parts
            .iter()
            .map(|p| {
                let sum = &sums[p.sum];
                let cells = sum.cells[p.cells.clone()].iter().map(|c| c.name.len());
                let stats = sum.stats[p.stats.clone()].iter().map(|c| c.name.len());
                cells.chain(stats).sum::<usize>()
            })
            .sum()
    };
    crate::model::runs(scripts, SCRIPTS_AT_ONCE, NAME_BYTES_AT_ONCE, names)
}

/// The calls of `scripts`, and per script the cells (sum, index) whose
/// member the worker adds to `known:` after it (those `known` does not
/// trust, the first of each counter's run in a part).
fn commands(
    keys: &Keys,
    sums: &[Sum<'_>],
    scripts: &[Script],
    known: Option<(&KnownCache, i64)>,
) -> (Vec<Cmd>, Vec<Vec<(usize, usize)>>) {
    let mut cmds = Vec::with_capacity(scripts.len());
    let mut zadded = Vec::with_capacity(scripts.len());
    for script in scripts {
        let keys_n: usize = script
            .parts
            .iter()
            .map(|p| p.cells.len() + p.stats.len())
            .sum();
        let mut deadline = i64::MAX;
        let mut mine = Vec::new();
        let mut cmd = APPLY.evalsha(script.markers.len() + keys_n);
        cmd.arg(&script.markers);
        for part in &script.parts {
            let sum = &sums[part.sum];
            let mut prev: Option<(u32, &str)> = None;
            for i in part.cells.clone() {
                let c = &sum.cells[i];
                cmd.arg(keys.count(c.precision, c.name));
                if prev == Some((c.precision, c.name)) {
                    continue;
                }
                prev = Some((c.precision, c.name));
                match known.and_then(|(k, now)| k.trusted_until(c.precision, c.name, now)) {
                    Some(until) => deadline = deadline.min(until),
                    None => mine.push((part.sum, i)),
                }
            }
            for s in &sum.stats[part.stats.clone()] {
                cmd.arg(keys.stats(s.precision, s.name));
            }
        }
        let deadline = if deadline == i64::MAX { 0 } else { deadline };
        cmd.arg(MARKER_TTL_SECS)
            .arg(deadline)
            .arg(script.markers.len())
            .arg(script.parts.len());
        for part in &script.parts {
            cmd.arg(part.marker + 1)
                .arg(&part.field)
                .arg(part.cells.len())
                .arg(part.stats.len());
        }
        for part in &script.parts {
            let sum = &sums[part.sum];
            for c in &sum.cells[part.cells.clone()] {
                cmd.arg(c.bucket).arg(c.delta);
            }
            stats::push_args(&mut cmd, &sum.stats[part.stats.clone()]);
        }
        cmds.push(cmd);
        mine.sort_unstable();
        zadded.push(mine);
    }
    (cmds, zadded)
}

/// The commands that shorten finished windows' markers to their final TTL.
pub(crate) fn expire_markers(markers: &[String]) -> Vec<Cmd> {
    markers
        .iter()
        .map(|m| {
            let mut c = redis::cmd("EXPIRE");
            c.arg(m).arg(MARKER_TTL_AFTER_FINISH);
            c
        })
        .collect()
}

/// The scripts that apply `sums` on one Redis, as the worker sends them
/// (every member left to add). Pure, so that the hot-path benchmark can
/// build them without a connection.
#[cfg(feature = "bench")]
pub(crate) fn apply_commands(keys: &Keys, sums: &[Sum<'_>]) -> Vec<Cmd> {
    commands(keys, sums, &scripts(keys, sums, false), None).0
}

/// Per script of a batch, the cells (sum, index) whose member the worker
/// adds after it (see [`commands`]).
type Zadded = Vec<Vec<(usize, usize)>>;

/// A batch of scripts sent on its own task: its replies.
type Replies = tokio::task::JoinHandle<redis::RedisResult<Vec<redis::Value>>>;

/// What the replies of a step's scripts said so far.
#[derive(Default)]
struct Tally {
    /// Per sum, its cells that failed.
    failures: Vec<Vec<Failure>>,
    /// The cells (sum, index) whose member was added with a part applied
    /// now, for the `known:` cache.
    wrote: Vec<(usize, usize)>,
    /// A script found the cache stale and wrote nothing.
    stale: bool,
    /// `known:` members to add.
    members: Vec<String>,
    /// `stats:known:` members to add.
    stat_members: Vec<String>,
}

impl Tally {
    /// Reads the replies of `batch`'s scripts.
    fn read(
        &mut self,
        sums: &[Sum<'_>],
        batch: &[Script],
        replies: &[redis::Value],
        zadded: &Zadded,
    ) -> StoreResult<()> {
        if replies.len() != batch.len() {
            return Err(StoreError::Unexpected {
                what: "the apply step",
                reply: format!("{} replies for {} scripts", replies.len(), batch.len()),
            });
        }
        for ((script, reply), zadded) in batch.iter().zip(replies).zip(zadded) {
            for (part, (status, text)) in script.parts.iter().zip(part_statuses(script, reply)?) {
                if status < 0 {
                    self.stale = true;
                    continue;
                }
                let sum = &sums[part.sum];
                let stat_cells = &sum.stats[part.stats.clone()];
                let failed = parse_failures(&sum.cells[part.cells.clone()], stat_cells, text);
                let mine = |i: usize| zadded.binary_search(&(part.sum, i)).is_ok();
                members_after(
                    sum.cells,
                    part.cells.clone(),
                    status,
                    &failed,
                    mine,
                    &mut self.members,
                );
                stats::members(stat_cells, &failed, &mut self.stat_members);
                if status == 1 {
                    self.wrote.extend(
                        zadded
                            .iter()
                            .filter(|(s, i)| *s == part.sum && part.cells.contains(i)),
                    );
                }
                self.failures[part.sum].extend(failed);
            }
        }
        Ok(())
    }
}

impl Committer {
    /// Applies `sums` together, every chunk at most once, adds their
    /// members to `known:` and `stats:known:`, then sends `then` (XACKs,
    /// EXPIREs: on a cluster once replicas hold the rest). Returns the
    /// cells that failed, per sum. Safe to repeat after any error. With
    /// `known`, ZADDs of members it trusts are left out and the members
    /// added are remembered; when a script finds it stale it is cleared
    /// and the step runs again (parts applied already only replay).
    pub(crate) async fn apply(
        &self,
        conn: &mut Conn,
        sums: &[Sum<'_>],
        known: Option<&Mutex<KnownCache>>,
        then: Vec<Cmd>,
    ) -> StoreResult<Vec<Vec<Failure>>> {
        let by_slot = conn.is_cluster();
        let scripts = scripts(&self.keys, sums, by_slot);
        if scripts.is_empty() {
            // Nothing to write (a window whose cells wait in the carry, or
            // that holds none): no member to add, no replica to wait for.
            conn.query_each(then).await?;
            return Ok(vec![Vec::new(); sums.len()]);
        }
        // Locked only while commands are built or replies read, never
        // across a round trip (a carry applies beside windows).
        let lock = || known.map(|k| k.lock().unwrap_or_else(|p| p.into_inner()));
        loop {
            let now_s = crate::model::clock::unix_ms().div_euclid(1000);
            let mut tally = Tally {
                failures: vec![Vec::new(); sums.len()],
                ..Tally::default()
            };
            // On one Redis the members of a batch go with a later one (a
            // sum there comes in member order); on a cluster, where cells
            // come in slot order, all of them once every script ran, sorted.
            let mut zadds_due: Vec<Cmd> = Vec::new();
            // One batch in flight while the next is built: Redis runs the
            // one while the worker builds the other.
            let mut in_flight: Option<(&[Script], usize, Zadded, Replies)> = None;
            for batch in batches(&scripts, sums) {
                let (mut cmds, zadded) = {
                    let k = lock();
                    commands(&self.keys, sums, batch, k.as_deref().map(|k| (k, now_s)))
                };
                let skip = zadds_due.len();
                cmds.splice(0..0, zadds_due.drain(..));
                let mut c = conn.clone();
                let sent = tokio::spawn(async move { c.query_each(cmds).await });
                if let Some((b, skip, zadded, sent)) =
                    in_flight.replace((batch, skip, zadded, sent))
                {
                    let replies = joined(sent, "an apply batch's task").await?;
                    tally.read(sums, b, replies.get(skip..).unwrap_or_default(), &zadded)?;
                    if !by_slot {
                        zadds_due = self.member_zadds(&mut tally.members, &mut tally.stat_members);
                    }
                }
            }
            if let Some((b, skip, zadded, sent)) = in_flight {
                let replies = joined(sent, "an apply batch's task").await?;
                tally.read(sums, b, replies.get(skip..).unwrap_or_default(), &zadded)?;
            }
            zadds_due.extend(self.member_zadds(&mut tally.members, &mut tally.stat_members));
            if by_slot {
                conn.query_each(zadds_due).await?;
                self.replicated(conn).await?;
                zadds_due = Vec::new();
            }
            if tally.stale {
                if let Some(k) = lock().as_deref_mut() {
                    k.clear();
                }
                conn.query_each(zadds_due).await?;
                continue;
            }
            zadds_due.extend(then);
            conn.query_each(zadds_due).await?;
            // Remembered only once their ZADDs went in (see `known`).
            if let Some(k) = lock().as_deref_mut() {
                for &(s, i) in &tally.wrote {
                    let c = &sums[s].cells[i];
                    k.wrote(c.precision, c.name, c.bucket);
                }
            }
            return Ok(tally.failures);
        }
    }

    /// The ZADDs of `members` and `stat_members`, sorted, each once; both
    /// emptied.
    fn member_zadds(&self, members: &mut Vec<String>, stat_members: &mut Vec<String>) -> Vec<Cmd> {
        let mut cmds = Vec::new();
        for (zset, m) in [
            (self.keys.known(), members),
            (self.keys.stats_known(), stat_members),
        ] {
            m.sort_unstable();
            m.dedup();
            cmds.extend(zadds(&zset, m));
            m.clear();
        }
        cmds
    }

    /// The marker keys of `sums`, to expire once every one of them is
    /// finished (not before: a sum still recorded may be replayed against
    /// them). On one Redis or on a cluster as `conn` is.
    pub(crate) fn markers(&self, sums: &[Sum<'_>], by_slot: bool) -> Vec<String> {
        let mut m: Vec<String> = scripts(&self.keys, sums, by_slot)
            .into_iter()
            .flat_map(|s| s.markers)
            .collect();
        m.sort_unstable();
        m.dedup();
        m
    }

    /// Acknowledges a window's `ids` (space separated), in commands of at
    /// most [`ACK_IDS`] ids.
    pub(crate) fn acks(&self, ids: &str) -> Vec<Cmd> {
        stream::acks(&self.keys, ids, ACK_IDS)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::aggregate::Cell;
    use crate::model::keys::Keys;

    /// Sixteen scripts of short names go at once; of 1 KiB names, only as
    /// many as hold 4 MiB of them (500 KB a script: eight); a script over
    /// the budget alone.
    #[test]
    fn scripts_go_in_batches_bounded_by_their_names_bytes() {
        let sizes = |name_len: usize, cells: usize| -> Vec<usize> {
            let names: Vec<String> = (0..cells)
                .map(|i| format!("{i:08}{}", "n".repeat(name_len.saturating_sub(8))))
                .collect();
            let cells: Vec<Cell<'_>> = names
                .iter()
                .map(|name| Cell {
                    precision: 60,
                    name,
                    bucket: 0,
                    delta: 1,
                })
                .collect();
            let sum = Sum {
                id: "w",
                group: None,
                cells: &cells,
                stats: &[],
                chunk: crate::store::commit::CHUNK_CELLS,
            };
            let keys = Keys::named("hits", "hitcount", "");
            let scripts = scripts(&keys, &[sum], false);
            batches(&scripts, &[sum]).iter().map(|b| b.len()).collect()
        };
        assert_eq!(sizes(10, 20_000), [16, 16, 8]);
        assert_eq!(sizes(1024, 20_000), [8, 8, 8, 8, 8]);
        assert_eq!(sizes(10_000, 1_000), [1, 1]);
    }
}
