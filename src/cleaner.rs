//! The cleaner: one pass over every counter, removing samples too old to
//! keep — the seeds' `clean_counters`, with their bugs fixed and sized for
//! large deployments.
//!
//! The seeds' semantics are kept:
//! - A counter of precision `PREC` is cleaned on every pass when
//!   `PREC <= 60`, else on every `PREC / 60`-th pass (integer division), so a
//!   daily counter is not scanned every minute. Passes are numbered from 0 by
//!   each leader, so a new leader's first pass (and `clean --once`) cleans
//!   everything.
//! - A sample is removed when its bucket starts at or before
//!   `now - SAMPLES * PREC`: the same horizon below which workers skip hits
//!   ([`crate::aggregate::Window::add`]).
//! - A counter whose hash ends up empty leaves `known:` only if the hash is
//!   still empty at that moment, checked atomically (`clean.lua`), so a
//!   worker's concurrent write is never orphaned. A member whose hash is
//!   missing altogether is removed the same way (the seeds left it forever).
//!
//! What is new, after seed 003's lesson that one big delete stalls Redis:
//! - `known:` is paged by name (`ZRANGEBYLEX (last + LIMIT`; every score is
//!   0), so counters added or removed during a pass never make it skip or
//!   repeat one, as index-based paging would.
//! - Each page's counters are read in one pipelined round trip (`fields.lua`:
//!   HKEYS, or only the length of a big hash, which is then paged with HSCAN).
//! - Fields are deleted in chunks of at most [`CHUNK`] per call, every call
//!   fenced by the leader's token, many calls per round trip.
//!
//! No single command holds Redis for more than about a millisecond, however
//! large `known:` or one counter grows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};

use crate::config::LayoutArgs;
use crate::keys::Keys;
use crate::leader::Lease;
use crate::metrics::metrics;
use crate::scripts::{CLEAN, FIELDS};
use crate::stream::bytes;

/// Counters read from `known:` per round trip.
const PAGE: usize = 500;
/// A hash with more fields than this is paged with HSCAN instead of HKEYS
/// (512 is also where Redis leaves the compact listpack encoding).
const BIG_HASH: usize = 512;
/// Fields deleted per script call: about 0.3 ms of HDEL work at most.
pub const CHUNK: usize = 500;
/// HSCAN COUNT when paging a big hash.
const SCAN_COUNT: usize = 1000;
/// The seeds' pass rhythm: a counter of precision P is due every P/60 passes.
const PASS_SECONDS: u32 = 60;

/// Why a pass stopped early.
#[derive(Debug, thiserror::Error)]
pub enum CleanError {
    /// Redis failed (transient: the next pass starts over).
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
    /// The lease ran out or another worker holds it: this worker must not
    /// write any more.
    #[error("the leader lease was lost during the pass")]
    LostLease,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PassReport {
    /// The pass number of this leader (0 cleans every counter).
    pub pass: u64,
    /// Counters due this pass and looked at.
    pub counters_scanned: u64,
    /// Samples deleted.
    pub samples_removed: u64,
    /// Counters that emptied and left `known:`.
    pub counters_removed: u64,
    /// How long the pass took, in ms.
    pub duration_ms: u64,
}

/// The cleaner of one leader: counts its passes.
pub struct Cleaner {
    keys: Keys,
    samples: i64,
    lease: Arc<Lease>,
    passes: u64,
}

/// One counter's fields to delete, and whether it may be empty afterwards.
struct Plan {
    member: String,
    key: String,
    old: Vec<Vec<u8>>,
    forget: bool,
}

impl Cleaner {
    /// A cleaner writing under `lease`.
    pub fn new(keys: Keys, layout: &LayoutArgs, lease: Arc<Lease>) -> Cleaner {
        Cleaner {
            keys,
            samples: i64::from(layout.samples),
            lease,
            passes: 0,
        }
    }

    /// Whether a counter of precision `prec` is cleaned on pass `pass`.
    pub fn due(prec: u32, pass: u64) -> bool {
        let every = u64::from((prec / PASS_SECONDS).max(1));
        pass.is_multiple_of(every)
    }

    /// One pass over every counter at wall-clock time `now` (unix seconds).
    pub async fn pass(
        &mut self,
        conn: &mut MultiplexedConnection,
        now: i64,
    ) -> Result<PassReport, CleanError> {
        let started = Instant::now();
        let mut report = PassReport {
            pass: self.passes,
            ..PassReport::default()
        };
        self.passes += 1;
        let mut after: Option<Vec<u8>> = None;
        loop {
            self.check()?;
            let mut cmd = redis::cmd("ZRANGEBYLEX");
            cmd.arg(self.keys.known());
            match &after {
                None => cmd.arg("-"),
                Some(last) => cmd.arg([b"(".as_slice(), last].concat()),
            };
            let members: Vec<Vec<u8>> = cmd
                .arg("+")
                .arg("LIMIT")
                .arg(0)
                .arg(PAGE)
                .query_async(conn)
                .await?;
            let Some(last) = members.last() else { break };
            after = Some(last.clone());
            let due: Vec<(String, i64)> = members
                .iter()
                .filter_map(|m| {
                    let m = std::str::from_utf8(m).ok()?;
                    let prec: u32 = m.split_once(':')?.0.parse().ok()?;
                    (prec > 0 && Self::due(prec, report.pass))
                        .then(|| (m.to_string(), now - self.samples * i64::from(prec)))
                })
                .collect();
            self.clean_page(conn, &due, &mut report).await?;
            if members.len() < PAGE {
                break;
            }
        }
        report.duration_ms = started.elapsed().as_millis() as u64;
        let m = metrics();
        m.cleaner_passes.inc();
        m.cleaner_pass_duration
            .observe(started.elapsed().as_secs_f64());
        Ok(report)
    }

    fn check(&self) -> Result<(), CleanError> {
        if self.lease.held() {
            Ok(())
        } else {
            Err(CleanError::LostLease)
        }
    }

    /// Reads one page of due counters in one round trip, deletes their old
    /// samples in another, then pages through the big ones.
    async fn clean_page(
        &self,
        conn: &mut MultiplexedConnection,
        due: &[(String, i64)],
        report: &mut PassReport,
    ) -> Result<(), CleanError> {
        if due.is_empty() {
            return Ok(());
        }
        report.counters_scanned += due.len() as u64;
        let mut pipe = redis::pipe();
        for (member, _) in due {
            pipe.add_command(
                FIELDS
                    .evalsha(1)
                    .arg(self.keys.count_of_member(member))
                    .arg(BIG_HASH)
                    .clone(),
            );
        }
        let replies: Vec<Value> = pipe.query_async(conn).await?;
        let mut plans = Vec::new();
        let mut big = Vec::new();
        for ((member, cutoff), reply) in due.iter().zip(&replies) {
            let key = self.keys.count_of_member(member);
            match reply {
                Value::Array(fields) => {
                    let (old, kept) = split_old(fields.iter().filter_map(bytes), *cutoff);
                    if !old.is_empty() || !kept {
                        plans.push(Plan {
                            member: member.clone(),
                            key,
                            old,
                            forget: !kept,
                        });
                    }
                }
                _ => big.push((member.clone(), key, *cutoff)),
            }
        }
        self.apply(conn, &plans, report).await?;
        for (member, key, cutoff) in big {
            self.clean_big(conn, member, key, cutoff, report).await?;
        }
        Ok(())
    }

    /// Pages through a big hash with HSCAN, deleting each page's old fields.
    async fn clean_big(
        &self,
        conn: &mut MultiplexedConnection,
        member: String,
        key: String,
        cutoff: i64,
        report: &mut PassReport,
    ) -> Result<(), CleanError> {
        let mut cursor = 0u64;
        let mut kept_any = false;
        loop {
            self.check()?;
            let (next, pairs): (u64, Vec<Vec<u8>>) = redis::cmd("HSCAN")
                .arg(&key)
                .arg(cursor)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(conn)
                .await?;
            let (old, kept) = split_old(pairs.iter().step_by(2).map(Vec::as_slice), cutoff);
            kept_any |= kept;
            cursor = next;
            let plan = Plan {
                member: member.clone(),
                key: key.clone(),
                old,
                forget: cursor == 0 && !kept_any,
            };
            if !plan.old.is_empty() || plan.forget {
                self.apply(conn, std::slice::from_ref(&plan), report)
                    .await?;
            }
            if cursor == 0 {
                return Ok(());
            }
        }
    }

    /// Runs the plans' fenced deletions, chunked, in one round trip.
    async fn apply(
        &self,
        conn: &mut MultiplexedConnection,
        plans: &[Plan],
        report: &mut PassReport,
    ) -> Result<(), CleanError> {
        if plans.is_empty() {
            return Ok(());
        }
        self.check()?;
        let lease_key = self.lease.key();
        let known = self.keys.known();
        let mut pipe = redis::pipe();
        for plan in plans {
            let chunks: Vec<&[Vec<u8>]> = if plan.old.is_empty() {
                vec![&[]]
            } else {
                plan.old.chunks(CHUNK).collect()
            };
            let n = chunks.len();
            for (i, chunk) in chunks.into_iter().enumerate() {
                let mut cmd = CLEAN.evalsha(3);
                cmd.arg(lease_key)
                    .arg(&plan.key)
                    .arg(&known)
                    .arg(self.lease.token())
                    .arg(&plan.member)
                    .arg(if plan.forget && i + 1 == n { "1" } else { "0" });
                for f in chunk {
                    cmd.arg(f.as_slice());
                }
                pipe.add_command(cmd);
            }
        }
        let replies: Vec<Value> = pipe.query_async(conn).await?;
        let (mut removed, mut forgotten) = (0u64, 0u64);
        let mut lost = false;
        for r in &replies {
            match r {
                Value::Array(v) if v.len() == 2 => {
                    removed += as_u64(&v[0]);
                    forgotten += as_u64(&v[1]);
                }
                _ => lost = true,
            }
        }
        report.samples_removed += removed;
        report.counters_removed += forgotten;
        let m = metrics();
        m.cleaner_samples_removed.inc_by(removed);
        m.cleaner_counters_removed.inc_by(forgotten);
        if lost {
            return Err(CleanError::LostLease);
        }
        Ok(())
    }
}

/// Splits fields into those whose bucket is at or before `cutoff` (to
/// delete) and whether any other field is kept (a younger sample, or a field
/// that is not a bucket time at all, which is never touched).
fn split_old<'a>(fields: impl Iterator<Item = &'a [u8]>, cutoff: i64) -> (Vec<Vec<u8>>, bool) {
    let mut old = Vec::new();
    let mut kept = false;
    for f in fields {
        match std::str::from_utf8(f)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        {
            Some(t) if t <= cutoff => old.push(f.to_vec()),
            _ => kept = true,
        }
    }
    (old, kept)
}

fn as_u64(v: &Value) -> u64 {
    match v {
        Value::Int(i) => (*i).max(0) as u64,
        _ => 0,
    }
}

/// The pause after a pass that took `took`, for passes every `interval`
/// (the seeds': the rest of the interval, at least 1 s).
pub fn pause_after(took: Duration, interval: Duration) -> Duration {
    interval.saturating_sub(took).max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_counters_are_cleaned_every_prec_over_60_passes() {
        for pass in 0..10 {
            assert!(Cleaner::due(1, pass));
            assert!(Cleaner::due(60, pass));
            assert!(Cleaner::due(119, pass), "119/60 = 1: every pass");
        }
        let due: Vec<u64> = (0..12).filter(|&p| Cleaner::due(300, p)).collect();
        assert_eq!(due, vec![0, 5, 10]);
        assert!(Cleaner::due(86400, 0));
        assert!(!Cleaner::due(86400, 1439));
        assert!(Cleaner::due(86400, 1440));
    }

    #[test]
    fn old_means_at_or_before_the_cutoff() {
        let fields: Vec<&[u8]> = vec![b"100", b"101", b"99", b"junk"];
        let (old, kept) = split_old(fields.into_iter(), 100);
        assert_eq!(old, vec![b"100".to_vec(), b"99".to_vec()]);
        assert!(kept);
        let (old, kept) = split_old([b"5".as_slice()].into_iter(), 100);
        assert_eq!(old.len(), 1);
        assert!(!kept);
    }

    #[test]
    fn pause_is_the_rest_of_the_interval_at_least_a_second() {
        let i = Duration::from_secs(60);
        assert_eq!(
            pause_after(Duration::from_secs(10), i),
            Duration::from_secs(50)
        );
        assert_eq!(
            pause_after(Duration::from_secs(90), i),
            Duration::from_secs(1)
        );
    }
}
