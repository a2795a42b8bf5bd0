//! The group sampler: how far behind the consumer group is, sampled every
//! few seconds on its own connection and exported as gauges.
//!
//! Sets `hitcount_group_lag_entries` (XINFO GROUPS `lag`, an estimate that
//! Redis may not know: then the gauge is left as it was),
//! `hitcount_group_pending_entries` (delivered, not yet acknowledged) and
//! `hitcount_group_backlog_age_seconds`: the entry just after the group's
//! last-delivered id (`XRANGE stream (ID + COUNT 1`) carries its own
//! millisecond timestamp, so now minus that is how long the oldest
//! undelivered entry has waited (0 when there is none). The age is the
//! sturdier of the two: `lag` was seen to stay wrong after a restart from
//! AOF, while the age is read from the entries themselves.
//!
//! Sampling never runs per batch: a sample costs two commands, whatever the
//! load. Every worker samples the same group, so any one pod's gauges tell
//! the whole story (dashboards take `max` over pods).

use std::time::Duration;

use crate::store::connect::Client;
use redis::RedisResult;

use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::model::shutdown::Shutdown;
use crate::store::connect::{self, Conn, Reconnecting, StoreError};
use crate::store::group::{self, GroupInfo};

/// Time between samples: often enough for a 15 s scrape interval to see
/// every change, rare enough to cost Redis nothing.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// One reading of the group's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Entries not yet delivered to the group, when Redis knows it.
    pub lag: Option<i64>,
    /// Entries delivered to the group and not acknowledged.
    pub pending: i64,
    /// Seconds the oldest undelivered entry has waited; 0 when none.
    pub backlog_age: f64,
}

/// Reads the group's lag, pending count and backlog age. `None` when the
/// stream or the group does not exist yet.
pub async fn sample(conn: &mut Conn, keys: &Keys) -> RedisResult<Option<Sample>> {
    let Some(g) = group::own_group(conn, keys).await? else {
        return Ok(None);
    };
    let now_ms = crate::model::clock::unix_ms();
    let age = group::backlog_age(conn, keys, &g, now_ms).await?;
    Ok(Some(sample_of(&g, age)))
}

/// A sample from the group's state and its backlog age, pure.
pub fn sample_of(g: &GroupInfo, backlog_age: Option<f64>) -> Sample {
    Sample {
        lag: g.lag.map(|l| l as i64),
        pending: g.pending as i64,
        backlog_age: backlog_age.unwrap_or(0.0),
    }
}

/// Sets the group gauges from a sample.
fn export(s: &Sample) {
    let m = metrics();
    if let Some(lag) = s.lag {
        m.group_lag.set(lag);
    }
    m.group_pending.set(s.pending);
    m.group_backlog_age.set(s.backlog_age);
}

/// Samples every [`SAMPLE_EVERY`] until `shutdown`, reconnecting after
/// errors (logged once per outage, counted in `hitcount_redis_errors_total`).
pub async fn run(client: Client, keys: Keys, mut shutdown: Shutdown) {
    let mut link = Reconnecting::new(client, "group sampler", connect::RESPONSE_TIMEOUT);
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => return,
        }
        let result = match link.get().await {
            Ok(c) => sample(c, &keys).await.map_err(StoreError::from),
            Err(e) => Err(e),
        };
        match result {
            Ok(s) => {
                link.succeeded();
                if let Some(s) = s {
                    export(&s);
                }
            }
            Err(e) => {
                link.failed(&e, Some(&shutdown));
            }
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
}
