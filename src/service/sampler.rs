//! The group sampler: how far behind the consumer group is, on every
//! stream shard, sampled every few seconds on its own connection and
//! exported as gauges.
//!
//! Per shard: `hitcount_shard_lag_entries{shard}` (XINFO GROUPS `lag`, an
//! estimate that Redis may not know: then the gauge is left as it was;
//! held to what the stream's positions allow, so 0 when no entry follows
//! the group's last-delivered one, see [`group::consistent_lag`]),
//! `hitcount_shard_pending_entries{shard}` (delivered, not yet acknowledged)
//! and `hitcount_shard_backlog_age_seconds{shard}`: the entry just after the
//! group's last-delivered id (`XRANGE stream (ID + COUNT 1`) carries its own
//! millisecond timestamp, so now minus that is how long the oldest
//! undelivered entry has waited (0 when there is none). The age is the
//! sturdier of the two: `lag` was seen to stay wrong after a restart from
//! AOF, while the age is read from the entries themselves.
//!
//! Over all shards (one stream: that stream), the unlabelled
//! `hitcount_group_lag_entries` (the sum, when Redis knows every shard's),
//! `hitcount_group_pending_entries` (the sum) and
//! `hitcount_group_backlog_age_seconds` (the oldest).
//!
//! Sampling never runs per batch: a sample costs three round trips, however
//! many shards and whatever the load; on a cluster each shard's commands go
//! to its own slot. Every worker samples every shard, so any one pod's
//! gauges tell the whole story (dashboards take `max` over pods).

use std::time::Duration;

use crate::store::connect::Client;
use redis::RedisResult;

use crate::model::config::{LayoutArgs, StreamArgs};
use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::model::shutdown::Shutdown;
use crate::store::connect::{self, Conn, Reconnecting, StoreError};
use crate::store::group::{self, GroupInfo};

/// Time between samples: often enough for a 15 s scrape interval to see
/// every change, rare enough to cost Redis nothing.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// One reading of the group's state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    /// Entries not yet delivered to the group, when Redis knows it.
    pub lag: Option<i64>,
    /// Entries delivered to the group and not acknowledged.
    pub pending: i64,
    /// Seconds the oldest undelivered entry has waited; 0 when none.
    pub backlog_age: f64,
}

/// Reads the group's lag, pending count and backlog age on every shard
/// (stream), in shard order: `None` for one whose stream or group does not
/// exist yet.
pub(crate) async fn sample_all(
    conn: &mut Conn,
    shards: &[Keys],
) -> RedisResult<Vec<Option<Sample>>> {
    let now_ms = crate::model::clock::unix_ms();
    let groups = group::own_groups(conn, shards, now_ms).await?;
    Ok(groups
        .iter()
        .map(|g| g.as_ref().map(|(g, age)| sample_of(g, *age)))
        .collect())
}

/// The whole group over its shards, pure: lag and pending summed (the lag
/// unknown when any shard's is), the oldest backlog; `None` when no shard
/// has the group yet.
pub(crate) fn total(samples: &[Option<Sample>]) -> Option<Sample> {
    let known: Vec<&Sample> = samples.iter().flatten().collect();
    if known.is_empty() {
        return None;
    }
    Some(Sample {
        lag: known.iter().map(|s| s.lag).sum(),
        pending: known.iter().map(|s| s.pending).sum(),
        backlog_age: known.iter().map(|s| s.backlog_age).fold(0.0, f64::max),
    })
}

/// A sample from the group's state and its backlog age, pure.
pub(crate) fn sample_of(g: &GroupInfo, backlog_age: Option<f64>) -> Sample {
    Sample {
        lag: g.lag.map(|l| l as i64),
        pending: g.pending as i64,
        backlog_age: backlog_age.unwrap_or(0.0),
    }
}

/// Sets the shard gauges from each shard's sample, and the group gauges
/// from their total.
fn export(shards: &[Keys], samples: &[Option<Sample>]) {
    let m = metrics();
    for (k, s) in shards.iter().zip(samples) {
        if let Some(s) = s {
            m.shard_sample(k.shard, s.lag, s.pending, s.backlog_age);
        }
    }
    let Some(s) = total(samples) else {
        return;
    };
    if let Some(lag) = s.lag {
        m.group_lag.set(lag);
    }
    m.group_pending.set(s.pending);
    m.group_backlog_age.set(s.backlog_age);
}

/// Samples every shard every [`SAMPLE_EVERY`] until `shutdown`,
/// reconnecting after errors (logged once per outage, counted in
/// `hitcount_redis_errors_total`).
pub(crate) async fn run(
    client: Client,
    layout: LayoutArgs,
    stream: StreamArgs,
    mut shutdown: Shutdown,
) {
    let mut link = Reconnecting::new(client, "group sampler", connect::RESPONSE_TIMEOUT);
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    metrics().init_shards(stream.shards);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => return,
        }
        let result = link
            .call(async |c| {
                // Only the streams' names matter here, the same on a cluster.
                let shards = Keys::all_shards(&layout, &stream, c.is_cluster());
                let samples = sample_all(c, &shards).await?;
                Ok::<_, StoreError>((shards, samples))
            })
            .await;
        match result {
            Ok((shards, samples)) => {
                link.succeeded();
                export(&shards, &samples);
            }
            // After a failure: the backoff's pause, not a whole tick.
            Err(e) => tick.reset_after(link.failed(&e, Some(&shutdown)).1.min(SAMPLE_EVERY)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_keeps_an_unknown_lag_unknown() {
        let g = GroupInfo {
            name: "g".into(),
            pending: 4,
            last_delivered_id: "1-0".into(),
            lag: None,
        };
        let s = sample_of(&g, None);
        assert_eq!((s.lag, s.pending, s.backlog_age), (None, 4, 0.0));
        let g = GroupInfo { lag: Some(9), ..g };
        assert_eq!(sample_of(&g, Some(1.5)).lag, Some(9));
        assert_eq!(sample_of(&g, Some(1.5)).backlog_age, 1.5);
    }

    #[test]
    fn the_total_sums_lag_and_pending_and_keeps_the_oldest_backlog() {
        let s = |lag, pending, backlog_age| Sample {
            lag,
            pending,
            backlog_age,
        };
        assert_eq!(total(&[None, None]), None);
        let all = [Some(s(Some(3), 1, 2.0)), None, Some(s(Some(4), 2, 7.5))];
        assert_eq!(total(&all), Some(s(Some(7), 3, 7.5)));
        let unknown = [Some(s(Some(3), 1, 2.0)), Some(s(None, 0, 0.0))];
        assert_eq!(total(&unknown).unwrap().lag, None, "one unknown lag");
    }
}

// A real Redis comes from the test kit, built with the `cli` feature.
#[cfg(all(test, feature = "cli"))]
mod redis_tests;
