//! Carries applied together on a Redis Cluster: one script per hash slot
//! for the chunks of every sum of a *group*.
//!
//! On a cluster a script touches one hash slot, and a window's or a carry's
//! cells spread over up to 16,384 of them, so its apply step is one script
//! per slot it touches; each costs Redis a call and a marker whatever it
//! holds. A process reading several stream shards keeps a carry per shard,
//! and those small sums would each pay that per slot. So the carries of one
//! process that are due together form a group (see
//! `service::worker::group`): each is recorded on its own shard as usual
//! (`carry.lua`, with the group's id in its record), and then one script per
//! slot (`apply_group.lua`) applies the chunks of all of them in that slot.
//!
//! Exactly once does not rest on the grouping: a sum's chunk `c` is always
//! marked applied as field `SUM:c` of its group's marker in that chunk's
//! slot (`hc:applied:{T}:GROUP`), whether it is applied with the group or
//! alone by a worker recovering that one sum. The chunks are [`plan`]'s, a
//! function of the recorded cells alone.

use std::ops::Range;
use std::sync::Mutex;

use redis::{Cmd, Value};

use super::apply::{members_after, zadds};
use super::plan::{plan, Apply};
use super::replies::{parse_failures, Failure};
use super::{Committer, CHUNK_CELLS, MARKER_TTL_SECS};
use crate::model::aggregate::Cell;
use crate::model::keys::Keys;
use crate::model::known::KnownCache;
use crate::model::slots::{slot, tag_for_slot};
use crate::store::connect::{Conn, StoreError, StoreResult};
use crate::store::scripts::APPLY_GROUP;
use crate::store::stream;

/// Scripts sent at once (each holds at most [`CHUNK_CELLS`] cells).
const SCRIPTS_AT_ONCE: usize = 64;

/// A recorded carry, to apply with the others of its group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sum<'a> {
    /// The carry's id (its window id).
    pub id: &'a str,
    /// The group it was recorded in (its marker keys' name).
    pub group: &'a str,
    /// Its cells as recorded: sorted by slot (see
    /// [`super::sort_for_cluster`]).
    pub cells: &'a [Cell<'a>],
    /// Cells per chunk, as recorded.
    pub chunk: usize,
}

/// One chunk of one sum, within a script.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    /// Which sum.
    sum: usize,
    /// Its chunk number in the sum's plan.
    chunk: usize,
    /// Its cells, as indices into the sum's.
    cells: Range<usize>,
    /// Its group's marker, as an index into the script's.
    marker: usize,
}

/// One `apply_group.lua` call: the chunks it applies in one slot and the
/// markers there of the groups their sums were recorded in (most often
/// one: two when a carry recorded in one group is applied with the next).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Script {
    markers: Vec<String>,
    parts: Vec<Part>,
}

/// The scripts of a group: each sum's chunks (its [`plan`] on a cluster),
/// gathered slot by slot, and within a slot packed whole into scripts of
/// at most [`CHUNK_CELLS`] cells (a chunk holds at most that many),
/// whatever group each sum was recorded in.
fn scripts(keys: &Keys, sums: &[Sum<'_>]) -> Vec<Script> {
    let mut all: Vec<(u16, &str, Part)> = Vec::new();
    for (i, s) in sums.iter().enumerate() {
        let step = Apply {
            window: s.id,
            cells: s.cells,
            stats: &[],
            ids: "",
            chunk: s.chunk,
            by_slot: true,
        };
        for (c, chunk) in plan(keys, &step).into_iter().enumerate() {
            let first = &s.cells[chunk.cells.start];
            let at = slot(keys.count(first.precision, first.name).as_bytes());
            let part = Part {
                sum: i,
                chunk: c,
                cells: chunk.cells,
                marker: 0,
            };
            all.push((at, s.group, part));
        }
    }
    all.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut out: Vec<Script> = Vec::new();
    let mut open: Option<(u16, usize)> = None;
    for (at, group, mut part) in all {
        let n = part.cells.len();
        let marker = keys.applied_marker_tagged(group, tag_for_slot(at));
        let script = match (&mut open, out.last_mut()) {
            (Some((s, w)), Some(script)) if *s == at && *w + n <= CHUNK_CELLS => {
                *w += n;
                script
            }
            _ => {
                open = Some((at, n));
                out.push(Script {
                    markers: Vec::new(),
                    parts: Vec::new(),
                });
                out.last_mut().expect("just pushed")
            }
        };
        part.marker = match script.markers.iter().position(|m| *m == marker) {
            Some(k) => k,
            None => {
                script.markers.push(marker);
                script.markers.len() - 1
            }
        };
        script.parts.push(part);
    }
    out
}

/// The marker field of a sum's chunk.
fn field(sum: &str, chunk: usize) -> String {
    format!("{sum}:{chunk}")
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
        let cells: usize = script.parts.iter().map(|p| p.cells.len()).sum();
        let mut deadline = i64::MAX;
        let mut mine = Vec::new();
        let mut cmd = APPLY_GROUP.evalsha(script.markers.len() + cells);
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
        }
        let deadline = if deadline == i64::MAX { 0 } else { deadline };
        cmd.arg(MARKER_TTL_SECS)
            .arg(deadline)
            .arg(script.markers.len())
            .arg(script.parts.len());
        for part in &script.parts {
            cmd.arg(part.marker + 1)
                .arg(field(sums[part.sum].id, part.chunk))
                .arg(part.cells.len());
        }
        for part in &script.parts {
            for c in &sums[part.sum].cells[part.cells.clone()] {
                cmd.arg(c.bucket).arg(c.delta);
            }
        }
        cmds.push(cmd);
        zadded.push(mine);
    }
    (cmds, zadded)
}

/// Each part's status (1 applied now, 0 a replay, -1 stale: the script
/// wrote nothing) and failure text, from its script's reply; fail closed.
fn part_statuses<'r>(script: &Script, reply: &'r Value) -> StoreResult<Vec<(i64, &'r [u8])>> {
    let bad = || StoreError::unexpected("apply_group.lua", reply);
    let Value::Array(v) = reply else {
        return Err(bad());
    };
    if let [Value::Int(-1), _] = v.as_slice() {
        return Ok(vec![(-1, &b""[..]); script.parts.len()]);
    }
    if v.len() != 2 * script.parts.len() {
        return Err(bad());
    }
    v.chunks(2)
        .map(|pair| match pair {
            [Value::Int(s @ 0..=1), text] => Ok((*s, stream::bytes(text).ok_or_else(bad)?)),
            _ => Err(bad()),
        })
        .collect()
}

impl Committer {
    /// Applies `sums` together, every chunk at most once, and adds their
    /// members to `known:` (on a cluster only: see the module). Returns the
    /// cells that failed, per sum. Safe to repeat after any error. With
    /// `known`, ZADDs of members it trusts are left out and the members
    /// added are remembered; when a script finds it stale it is cleared
    /// and the step runs again (parts applied already only replay).
    pub(crate) async fn apply_sums(
        &self,
        conn: &mut Conn,
        sums: &[Sum<'_>],
        known: Option<&Mutex<KnownCache>>,
    ) -> StoreResult<Vec<Vec<Failure>>> {
        let scripts = scripts(&self.keys, sums);
        // Locked only while commands are built or replies read.
        let lock = || known.map(|k| k.lock().unwrap_or_else(|p| p.into_inner()));
        loop {
            let now_s = crate::model::clock::unix_ms().div_euclid(1000);
            let mut failures = vec![Vec::new(); sums.len()];
            let mut wrote: Vec<(usize, usize)> = Vec::new();
            let mut stale = false;
            // Added once every script ran, in member order: members new to
            // `known:` then go into its skip list next to each other (as
            // one Redis adds a carry's), not in slot order.
            let mut members = Vec::new();
            for batch in scripts.chunks(SCRIPTS_AT_ONCE) {
                let (cmds, zadded) = {
                    let k = lock();
                    commands(&self.keys, sums, batch, k.as_deref().map(|k| (k, now_s)))
                };
                let replies = conn.query_each(cmds).await?;
                for ((script, reply), zadded) in batch.iter().zip(&replies).zip(&zadded) {
                    for (part, (status, text)) in
                        script.parts.iter().zip(part_statuses(script, reply)?)
                    {
                        if status < 0 {
                            stale = true;
                            continue;
                        }
                        let cells = sums[part.sum].cells;
                        let failed = parse_failures(&cells[part.cells.clone()], &[], text);
                        let mine = |i: usize| zadded.contains(&(part.sum, i));
                        members_after(
                            cells,
                            part.cells.clone(),
                            status,
                            &failed,
                            mine,
                            &mut members,
                        );
                        if status == 1 {
                            wrote.extend(
                                zadded
                                    .iter()
                                    .filter(|(s, i)| *s == part.sum && part.cells.contains(i)),
                            );
                        }
                        failures[part.sum].extend(failed);
                    }
                }
            }
            members.sort_unstable();
            members.dedup();
            conn.query_each(zadds(&self.keys.known(), &members)).await?;
            self.replicated(conn).await?;
            let mut k = lock();
            match k.as_deref_mut() {
                Some(k) if stale => k.clear(),
                Some(k) => {
                    for (s, i) in wrote {
                        let c = &sums[s].cells[i];
                        k.wrote(c.precision, c.name, c.bucket);
                    }
                    return Ok(failures);
                }
                None => return Ok(failures),
            }
        }
    }

    /// The marker keys of `sums` applied as a group, to expire once every
    /// one of them is finished (not before: a sum still recorded may be
    /// replayed against them).
    pub(crate) fn group_markers(&self, sums: &[Sum<'_>]) -> Vec<String> {
        let mut m: Vec<String> = scripts(&self.keys, sums)
            .into_iter()
            .flat_map(|s| s.markers)
            .collect();
        m.sort_unstable();
        m.dedup();
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::{LayoutArgs, StreamArgs};

    fn keys() -> Keys {
        Keys::new(&LayoutArgs::default(), &StreamArgs::default())
    }

    fn cells<'a>(names: &'a [String]) -> Vec<Cell<'a>> {
        let mut v: Vec<Cell<'a>> = names
            .iter()
            .flat_map(|n| {
                [1u32, 60].map(|p| Cell {
                    precision: p,
                    name: n.as_str(),
                    bucket: 0,
                    delta: 1,
                })
            })
            .collect();
        super::super::sort_for_cluster(&keys(), &mut v);
        v
    }

    /// The scripts of two sums recorded in groups `ga` and `gb`, checked:
    /// every chunk of every sum once, under its own group's marker in its
    /// own slot, with the chunk numbers it has applied alone; one slot per
    /// script. Returns how many scripts.
    fn checked_scripts(ga: &str, gb: &str) -> usize {
        let k = keys();
        let a: Vec<String> = (0..300).map(|i| format!("a{i}")).collect();
        let b: Vec<String> = (0..300).map(|i| format!("b{i}")).collect();
        let (ca, cb) = (cells(&a), cells(&b));
        let sums = [
            Sum {
                id: "s1",
                group: ga,
                cells: &ca,
                chunk: CHUNK_CELLS,
            },
            Sum {
                id: "s2",
                group: gb,
                cells: &cb,
                chunk: CHUNK_CELLS,
            },
        ];
        let together = scripts(&k, &sums);
        let alone: usize = sums.iter().map(|s| scripts(&k, &[*s]).len()).sum();
        assert!(together.len() < alone, "{} vs {alone}", together.len());
        for (i, s) in sums.iter().enumerate() {
            let own = scripts(&k, &[*s]);
            let mut parts: Vec<(String, usize, Range<usize>)> = together
                .iter()
                .flat_map(|sc| {
                    sc.parts
                        .iter()
                        .filter(|p| p.sum == i)
                        .map(|p| (sc.markers[p.marker].clone(), p.chunk, p.cells.clone()))
                })
                .collect();
            parts.sort_by_key(|p| p.1);
            let want: Vec<(String, usize, Range<usize>)> = own
                .iter()
                .flat_map(|sc| {
                    assert_eq!(sc.markers.len(), 1, "a sum alone has one group");
                    sc.parts
                        .iter()
                        .map(|p| (sc.markers[p.marker].clone(), p.chunk, p.cells.clone()))
                })
                .collect();
            assert_eq!(parts, want);
        }
        for sc in &together {
            let n: usize = sc.parts.iter().map(|p| p.cells.len()).sum();
            assert!(n <= CHUNK_CELLS);
            let slots: std::collections::BTreeSet<u16> = sc
                .parts
                .iter()
                .flat_map(|p| {
                    let s = &sums[p.sum];
                    s.cells[p.cells.clone()]
                        .iter()
                        .map(|c| slot(k.count(c.precision, c.name).as_bytes()))
                })
                .collect();
            assert_eq!(slots.len(), 1, "one slot per script");
            let mut distinct = sc.markers.clone();
            distinct.dedup();
            assert_eq!(distinct, sc.markers, "each marker once");
            for m in &sc.markers {
                assert_eq!(
                    slot(m.as_bytes()),
                    *slots.iter().next().unwrap(),
                    "the markers in that slot"
                );
            }
        }
        together.len()
    }

    #[test]
    fn one_script_per_slot_holds_every_sum_of_the_group_there() {
        checked_scripts("g", "g");
    }

    #[test]
    fn sums_of_two_groups_applied_together_share_their_scripts() {
        assert_eq!(checked_scripts("g", "h"), checked_scripts("g", "g"));
    }

    #[test]
    fn every_reply_class_of_a_group_script() {
        let script = Script {
            markers: vec!["m".into()],
            parts: vec![
                Part {
                    sum: 0,
                    chunk: 0,
                    cells: 0..1,
                    marker: 0,
                },
                Part {
                    sum: 1,
                    chunk: 3,
                    cells: 0..2,
                    marker: 0,
                },
            ],
        };
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let ok = Value::Array(vec![Value::Int(1), bulk(""), Value::Int(0), bulk("1\tx")]);
        assert_eq!(
            part_statuses(&script, &ok).unwrap(),
            vec![(1, &b""[..]), (0, &b"1\tx"[..])]
        );
        let stale = Value::Array(vec![Value::Int(-1), bulk("")]);
        assert_eq!(
            part_statuses(&script, &stale).unwrap(),
            vec![(-1, &b""[..]); 2]
        );
        // Fail closed: too few parts, an unknown status, not an array.
        assert!(part_statuses(&script, &Value::Array(vec![Value::Int(1), bulk("")])).is_err());
        let odd = Value::Array(vec![Value::Int(2), bulk(""), Value::Int(1), bulk("")]);
        assert!(part_statuses(&script, &odd).is_err());
        assert!(part_statuses(&script, &Value::Nil).is_err());
    }
}
