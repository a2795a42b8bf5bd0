//! The leader's duties, beside the worker loop in every `hitcount worker`:
//! while this worker holds the lease, once per interval, one cleaner pass
//! ([`crate::service::cleaner`]) and one stream trim ([`crate::service::trim`]); the outcome is
//! recorded in Redis (`Keys::cleaner_status`) for `hitcount status`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Client;

use crate::model::config::LeaderArgs;
use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::model::shutdown::Shutdown;
use crate::service::cleaner::{self, CleanError, Cleaner, PassReport};
use crate::service::leader::Lease;
use crate::service::trim::{self, Trimmed};
use crate::store::connect::{self, Conn, Reconnecting};

/// How often a worker that is not leader looks whether it became one.
const IDLE_CHECK: Duration = Duration::from_millis(500);

/// One run of the duties: the pass and the trim, as recorded in Redis.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LastPass {
    /// When the pass ended, unix ms.
    pub at_ms: i64,
    /// The token of the leader that ran it.
    pub leader: String,
    /// The cleaner pass.
    #[serde(flatten)]
    pub pass: PassReport,
    /// The trim. Serialized as the pass is recorded in Redis (and shown by
    /// `hitcount status --json`): `"trimmed": entries, "min_id": id`.
    #[serde(flatten, serialize_with = "trimmed_as_recorded")]
    pub trimmed: Trimmed,
}

/// `Trimmed` as two fields, `trimmed` (entries) and `min_id`, the names of
/// the recorded pass, so `clean --json` and `status --json` agree.
fn trimmed_as_recorded<S: serde::Serializer>(t: &Trimmed, ser: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = ser.serialize_map(Some(2))?;
    map.serialize_entry("trimmed", &t.entries)?;
    map.serialize_entry("min_id", &t.min_id)?;
    map.end()
}

/// Cleans and trims once at `now` (unix seconds) and records it. Fails with
/// [`CleanError::LostLease`] as soon as `lease` is no longer held.
pub async fn once(
    cleaner: &mut Cleaner,
    conn: &mut Conn,
    keys: &Keys,
    lease: &Lease,
    now: i64,
) -> Result<LastPass, CleanError> {
    let pass = cleaner.pass(conn, now).await?;
    let trimmed = trim::trim(conn, keys, lease).await?;
    let last = LastPass {
        at_ms: crate::model::clock::unix_ms(),
        leader: lease.token().to_string(),
        pass,
        trimmed,
    };
    if !lease.held() {
        return Err(CleanError::LostLease);
    }
    let p = &last.pass;
    let _: () = redis::cmd("HSET")
        .arg(keys.cleaner_status())
        .arg("at_ms")
        .arg(last.at_ms)
        .arg("leader")
        .arg(&last.leader)
        .arg("pass")
        .arg(p.pass)
        .arg("duration_ms")
        .arg(p.duration_ms)
        .arg("counters_scanned")
        .arg(p.counters_scanned)
        .arg("samples_removed")
        .arg(p.samples_removed)
        .arg("counters_removed")
        .arg(p.counters_removed)
        .arg("trimmed")
        .arg(last.trimmed.entries)
        .arg("min_id")
        .arg(&last.trimmed.min_id)
        .query_async(conn)
        .await?;
    metrics().cleaner_last_pass.set(last.at_ms as f64 / 1000.0);
    Ok(last)
}

/// Runs the duties until shutdown, whenever `lease` is held.
pub async fn run(
    client: Client,
    keys: Keys,
    mut cleaner: Cleaner,
    settings: LeaderArgs,
    lease: Arc<Lease>,
    mut shutdown: Shutdown,
) {
    let mut link = Reconnecting::new(client, "cleaner", connect::RESPONSE_TIMEOUT);
    while !shutdown.is_triggered() {
        if !lease.held() {
            tokio::select! {
                _ = tokio::time::sleep(IDLE_CHECK) => {}
                _ = shutdown.wait() => {}
            }
            continue;
        }
        let started = Instant::now();
        let now = crate::model::clock::unix_ms() / 1000;
        let result = match link.get().await {
            Ok(c) => once(&mut cleaner, c, &keys, &lease, now).await,
            Err(e) => Err(e.into()),
        };
        match result {
            Ok(last) => {
                link.succeeded();
                let p = &last.pass;
                tracing::debug!(
                    pass = p.pass,
                    duration_ms = p.duration_ms,
                    counters_scanned = p.counters_scanned,
                    samples_removed = p.samples_removed,
                    counters_removed = p.counters_removed,
                    trimmed = last.trimmed.entries,
                    "cleaner pass done"
                );
            }
            Err(CleanError::LostLease) => {
                tracing::warn!("leader lease lost during a cleaner pass: stopped cleaning");
            }
            Err(CleanError::Store(e)) => {
                link.failed(&e, Some(&shutdown));
            }
        }
        let pause = cleaner::pause_after(started.elapsed(), settings.clean_interval());
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.wait() => {}
        }
    }
}
