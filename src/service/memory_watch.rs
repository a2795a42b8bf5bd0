//! Watches Redis' `maxmemory-policy` (`INFO memory` of every master) at
//! start and every [`CHECK_EVERY`]: any policy but `noeviction` may drop
//! counters (`allkeys-*`) or the bookkeeping exactly-once counting relies on
//! (`volatile-*`) under memory pressure, without a word. It is said loudly,
//! once per change: an ERROR line, `/readyz`'s detail and
//! `hitcount_redis_maxmemory_policy_evicts`. Counting goes on.

use std::time::Duration;

use crate::model::shutdown::Shutdown;
use crate::store::connect::{self, Client, Reconnecting, StoreError};
use crate::store::memory;

/// How often the policy is read again: an operator may change it at any
/// time (`CONFIG SET`), and one `INFO memory` a minute costs nothing.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(60);

/// Checks the policy until `shutdown`. A user not allowed `INFO` (an ACL
/// line older than `+info`) is told once, and the check stops; so it does
/// on a fatal error, which the process' other tasks report. Either way the
/// task itself ends only at shutdown.
pub(crate) async fn run(client: Client, mut shutdown: Shutdown) {
    let mut link =
        Reconnecting::new(client, "memory policy check", connect::RESPONSE_TIMEOUT).reading();
    loop {
        let found = link
            .call(async |c| Ok::<_, StoreError>(memory::policies(c).await?))
            .await;
        let pause = match found {
            Ok(policies) => {
                link.succeeded();
                report(memory::evicting(&policies));
                CHECK_EVERY
            }
            Err(StoreError::Redis(e)) if e.code() == Some("NOPERM") => {
                tracing::warn!(error = %connect::describe(&e),
                    "cannot read Redis' maxmemory-policy (grant the user +info): it is not checked");
                break;
            }
            // The process' other tasks stop it, naming the cause.
            Err(e) if e.class() == connect::ErrorClass::Fatal => break,
            // Retried; never stops the process.
            Err(e) => link.failed(&e, None).1.max(Duration::from_secs(1)),
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.wait() => return,
        }
    }
    // Not checking is no reason to stop: the task lives until shutdown, so
    // the worker's supervisor never takes its end for a failure (nor names
    // it instead of the cause another task reports).
    shutdown.wait().await;
}

/// Logs the policy once per change.
fn report(evicting: Option<&str>) {
    if !memory::set_evicting(evicting) {
        return;
    }
    match evicting {
        Some(policy) => tracing::error!(
            policy,
            "{}; set maxmemory-policy noeviction",
            memory::policy_warning(policy)
        ),
        None => tracing::info!("Redis' maxmemory-policy is noeviction"),
    }
}
