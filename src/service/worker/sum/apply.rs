//! A sum's way into the counters, once the sum is due (see the parent
//! module): each shard's part, one window as itself or several recorded as
//! their sum, on a cluster several shards' sums in one group; applied
//! together; then each part's windows acknowledged and finished.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::Part;
use crate::model::clock::unix_ms;
use crate::model::ids::IdList;
use crate::model::known::KnownCache;
use crate::model::metrics::metrics;
use crate::service::worker::apply::recorded;
use crate::service::worker::batch::{count_applied, count_failures};
use crate::store::commit::{
    CarryOutcome, Committer, Deferred, Failure, Finished, Sealed, Sum, APPLY_GUARD, CHUNK_CELLS,
};
use crate::store::connect::{Conn, StoreError, StoreResult};

/// Applies the parts (see the module's doc): each with its outcome.
pub(super) async fn apply(
    mut parts: Vec<Part>,
    conn: StoreResult<Conn>,
    known: Arc<Mutex<KnownCache>>,
    id: String,
) -> Vec<(Part, StoreResult<()>)> {
    let began = Instant::now();
    let mut conn = match conn {
        Ok(c) => c,
        Err(e) => {
            let text = e.to_string();
            let mut first = Some(e);
            let mut failed = |_| Err(first.take().unwrap_or_else(|| unexpected(&text)));
            return parts.into_iter().map(|p| (p, failed(()))).collect();
        }
    };
    let by_slot = conn.is_cluster();
    // On a cluster, the sums of several shards go in one group (see
    // `store::commit::apply`): one script per slot for all of them.
    let group = (by_slot && parts.len() > 1).then(|| format!("g{id}"));
    let group = group.as_deref();
    // A part of one window goes in as itself, under its own record; the
    // others are recorded first as their sum.
    let one: Vec<bool> = parts
        .iter()
        .map(|p| group.is_none() && p.carry.is_one_window())
        .collect();
    let ids: Vec<String> = (parts.iter().zip(&one).enumerate())
        .map(|(n, (p, &one))| match one {
            true => p.deferred[0].window.clone(),
            false => format!("{id}-{n}"),
        })
        .collect();
    let (mut outcomes, mut applied) = (Vec::new(), Vec::new());
    {
        let mut pieces = vec![Vec::new(); parts.len()];
        // Applied from their lists: the carries' slots go as they go.
        let lists: Vec<_> = (parts.iter_mut().zip(&mut pieces).zip(&one))
            .map(|((p, pieces), &one)| {
                let keys = p.committer.keys();
                let (mut cells, stats) =
                    recorded(p.carry.release_into_lists(), keys, by_slot, pieces);
                if !by_slot && !one {
                    // Members new to `known:` then go in in its own order.
                    crate::model::known::sort_by_member(&mut cells);
                }
                (&p.committer, &p.deferred, cells, stats)
            })
            .collect();
        let mut sums = Vec::new();
        for (((committer, deferred, cells, stats), id), &one) in lists.iter().zip(&ids).zip(&one) {
            let sum = Sum {
                id,
                group,
                cells,
                stats,
                chunk: CHUNK_CELLS,
            };
            let outcome = match one {
                // Only within APPLY_GUARD of its commit, while its markers
                // surely live; past that, recovery applies it.
                true if deferred[0].committed.elapsed() > APPLY_GUARD => {
                    Err(StoreError::Guard(APPLY_GUARD))
                }
                true => Ok(()),
                false => record(committer, &mut conn, &sum, deferred).await,
            };
            if outcome.is_ok() {
                sums.push(sum);
            }
            outcomes.push(outcome);
        }
        if let (Some((committer, ..)), false) = (lists.first(), sums.is_empty()) {
            match committer
                .apply(&mut conn, &sums, Some(&known), Vec::new())
                .await
            {
                Ok(failures) => {
                    // A group's markers expire with the last of its sums
                    // finished, the others' with their own.
                    let markers = |s: &[Sum<'_>]| committer.markers(s, by_slot);
                    let mut each: Vec<Vec<String>> = match group {
                        Some(_) => vec![Vec::new(); sums.len()],
                        None => sums
                            .iter()
                            .map(|s| markers(std::slice::from_ref(s)))
                            .collect(),
                    };
                    if let (Some(_), Some(last)) = (group, each.last_mut()) {
                        *last = markers(&sums);
                    }
                    let summed = (sums.iter().zip(&ids).zip(&one))
                        .filter(|(_, &one)| !one)
                        .map(|((s, _), _)| s.cells.len() as u64);
                    metrics().carry_cells.inc_by(summed.sum());
                    if group.is_some() {
                        metrics().carry_groups.inc();
                    }
                    applied = failures.into_iter().zip(each).collect();
                }
                Err(e) => {
                    let text = e.to_string();
                    let mut first = Some(e);
                    for o in outcomes.iter_mut().filter(|o| o.is_ok()) {
                        *o = Err(first.take().unwrap_or_else(|| unexpected(&text)));
                    }
                }
            }
        }
    }
    let mut applied = applied.into_iter();
    let mut out = Vec::with_capacity(parts.len());
    for (((part, outcome), id), one) in parts.into_iter().zip(outcomes).zip(&ids).zip(one) {
        let outcome = match outcome.map(|()| applied.next()) {
            Ok(Some((failures, markers))) => {
                let sum = (!one).then_some(id.as_str());
                let began = if one {
                    part.deferred[0].committed
                } else {
                    began
                };
                finish(&part, &mut conn, sum, failures, markers, began).await
            }
            Ok(None) => Err(unexpected("no outcome for a sum applied")),
            Err(e) => Err(e),
        };
        out.push((part, outcome));
    }
    out
}

/// An error that another part's apply had.
fn unexpected(text: &str) -> StoreError {
    StoreError::Unexpected {
        what: "applying a sum",
        reply: text.to_string(),
    }
}

/// Records a part's sum, the sum of its windows (see [`Committer::carry`]).
async fn record(
    committer: &Committer,
    conn: &mut Conn,
    sum: &Sum<'_>,
    windows: &[Deferred],
) -> StoreResult<()> {
    let sealed = Sealed {
        window: sum.id,
        ids: "",
        cells: sum.cells,
        stats: sum.stats,
        rejected: &[],
        chunk: sum.chunk,
    };
    match committer.carry(conn, &sealed, windows, sum.group).await? {
        CarryOutcome::Recorded => Ok(()),
        CarryOutcome::Gone(w) => Err(StoreError::CarryGone(w)),
        CarryOutcome::Taken(holder) => Err(StoreError::NameTaken {
            name: committer.consumer().to_string(),
            holder,
        }),
    }
}

/// Acknowledges a part's windows and finishes them and their sum (`sum`,
/// `None` when the one window was applied as itself).
async fn finish(
    part: &Part,
    conn: &mut Conn,
    sum: Option<&str>,
    failures: Vec<Failure>,
    markers: Vec<String>,
    began: Instant,
) -> StoreResult<()> {
    count_failures(&failures);
    let committer = &part.committer;
    let lists: Vec<&IdList> = part.deferred.iter().map(|d| &d.ids).collect();
    committer.ack_lists(conn, &lists).await?;
    count_applied(&part.deferred, began, unix_ms());
    if sum.is_some() {
        for d in &part.deferred {
            // None of its chunks was applied, nor marked (see carry.lua).
            let carried = Finished {
                window: d.window.clone(),
                ..Finished::default()
            };
            committer.finish(conn, &carried).await?;
        }
    }
    let done = Finished {
        window: sum.map_or_else(|| part.deferred[0].window.clone(), str::to_string),
        failures,
        markers,
    };
    committer.finish(conn, &done).await
}
