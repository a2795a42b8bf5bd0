//! Redis' memory as it bears on counting: writes refused because its
//! `maxmemory` is reached (`OOM` under `noeviction`: counting waits and
//! retries, nothing is lost), and a `maxmemory-policy` that may evict keys
//! (it can lose counters, or the bookkeeping exactly-once relies on, without
//! a word). Both are facts of the whole process, shown in logs, `/readyz`'s
//! detail and the gauges `hitcount_redis_oom` and
//! `hitcount_redis_maxmemory_policy_evicts`.

use std::sync::Mutex;

use redis::RedisResult;

use crate::model::metrics::metrics;
use crate::store::client::Conn;

/// The one policy under which Redis never drops a key to make room.
pub(crate) const SAFE_POLICY: &str = "noeviction";

/// What logs and `/readyz` say while Redis refuses writes for its memory.
pub(crate) const OUT_OF_MEMORY: &str = "Redis is out of memory (maxmemory)";

/// The evicting policy Redis reported last (`None`: `noeviction`, or not
/// known).
static EVICTING: Mutex<Option<String>> = Mutex::new(None);

pub(crate) use crate::store::error::is_oom;

/// Records whether Redis refuses writes for its memory now, in the gauge
/// `hitcount_redis_oom`, which [`out_of_memory`] reads back.
pub(crate) fn set_out_of_memory(refusing: bool) {
    metrics().redis_oom.set(i64::from(refusing));
}

/// Whether Redis refused this process' last write for its memory.
pub(crate) fn out_of_memory() -> bool {
    metrics().redis_oom.get() != 0
}

/// The `maxmemory_policy` of every master (one Redis: its own), from
/// `INFO memory` (allowed by `+info`, no admin command).
pub(crate) async fn policies(conn: &mut Conn) -> RedisResult<Vec<String>> {
    let replies = conn.info_of_masters("memory").await?;
    Ok(replies
        .iter()
        .filter_map(|text| crate::store::detect::info_field(text, "maxmemory_policy"))
        .map(str::to_string)
        .collect())
}

/// The first policy of `policies` that may evict keys, if any.
pub(crate) fn evicting(policies: &[String]) -> Option<&str> {
    policies
        .iter()
        .map(String::as_str)
        .find(|p| *p != SAFE_POLICY)
}

/// Records the policy found (`None`: `noeviction` everywhere); returns
/// whether it changed since the last call, so it is logged once per change.
pub(crate) fn set_evicting(policy: Option<&str>) -> bool {
    metrics()
        .redis_policy_evicts
        .set(i64::from(policy.is_some()));
    let mut last = EVICTING.lock().unwrap_or_else(|p| p.into_inner());
    let changed = last.as_deref() != policy;
    *last = policy.map(str::to_string);
    changed
}

/// Why a policy is unsafe, in the words logs and `/readyz` use.
pub(crate) fn policy_warning(policy: &str) -> String {
    format!(
        "Redis' maxmemory-policy is {policy}: it must be {SAFE_POLICY}, or under memory pressure \
         Redis may drop counters (allkeys-*) or the bookkeeping exactly-once counting relies on \
         (volatile-*)"
    )
}

/// What `/readyz` adds to its detail about Redis' memory (it stays ready:
/// counting goes on, or waits without loss).
pub(crate) fn readiness_notes() -> Vec<String> {
    let mut notes = Vec::new();
    if out_of_memory() {
        notes.push(format!("{OUT_OF_MEMORY}: writes refused, retrying"));
    }
    if let Some(p) = EVICTING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_deref()
    {
        notes.push(policy_warning(p));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_is_safe() {
        let all = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(evicting(&all(&["noeviction", "noeviction"])), None);
        assert_eq!(
            evicting(&all(&["noeviction", "allkeys-lru"])),
            Some("allkeys-lru")
        );
        assert_eq!(evicting(&[]), None);
        assert!(policy_warning("volatile-ttl").contains("must be noeviction"));
    }
}
