//! The leader's duties, beside the worker loop in every `hitcount worker`:
//! while this worker holds the lease, once per interval, one cleaner pass
//! ([`crate::service::cleaner`]) and one trim of every shard's stream
//! ([`crate::service::trim`]); the outcome is recorded in Redis
//! (`Keys::cleaner_status`) for `hitcount status`.
//!
//! Nothing here can stop the worker for a fault of Redis or of the cluster
//! (a failover, MOVED/ASK, CROSSSLOT, a timeout): every such error is
//! transient ([`crate::store::error`]); the pass stops, the connection is
//! rebuilt and the next interval starts over. Every call has the reply
//! timeout of [`connect::RESPONSE_TIMEOUT`], so no pass hangs. Only an error
//! an operator must fix (a password, an ACL without a command the duties
//! need) stops the process, with one line naming it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::config::{LayoutArgs, LeaderArgs, StreamArgs};
use crate::model::keys::Keys;
use crate::model::metrics::metrics;
use crate::model::shutdown::Shutdown;
use crate::service::cleaner::{self, CleanError, Cleaner, PassReport};
use crate::service::leader::Lease;
use crate::service::trim::{self, Trimmed};
use crate::store::client::wrong_type;
use crate::store::connect::{self, Client, Conn, Reconnecting};

/// How often a worker that is not leader looks whether it became one.
const IDLE_CHECK: Duration = Duration::from_millis(500);

/// One run of the duties: the pass and the trim, as recorded in Redis.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct LastPass {
    /// When the pass ended, unix ms.
    pub at_ms: i64,
    /// The token of the leader that ran it.
    pub leader: String,
    /// The cleaner pass.
    #[serde(flatten)]
    pub pass: PassReport,
    /// The trim. Serialized as the pass is recorded in Redis (and shown by
    /// `hitcount status --json`): `"trimmed": entries, "min_id": id`.
    #[serde(flatten)]
    pub trimmed: Trimmed,
}

/// Cleans and trims once at `now` (unix seconds) and records it. `shards`
/// are the keys of every stream shard ([`Keys::all_shards`]). Fails with
/// [`CleanError::LostLease`] as soon as `lease` is no longer held.
pub(crate) async fn once(
    cleaner: &mut Cleaner,
    conn: &mut Conn,
    shards: &[Keys],
    lease: &Lease,
    now: i64,
) -> Result<LastPass, CleanError> {
    let Some(keys) = shards.first() else {
        return Ok(LastPass::default());
    };
    let pass = cleaner.pass(conn, now).await?;
    let trimmed = trim::trim_all(conn, shards, lease).await?;
    let last = LastPass {
        at_ms: crate::model::clock::unix_ms(),
        leader: lease.token().to_string(),
        pass,
        trimmed,
    };
    if !lease.held() {
        return Err(CleanError::LostLease);
    }
    let recorded: redis::RedisResult<()> = record(keys, &last).query_async(conn).await;
    match recorded {
        // The status is hitcount's own: written anew, it stops no worker.
        Err(e) if wrong_type(&e) => {
            tracing::warn!(
                key = keys.cleaner_status(),
                "the cleaner's status held another type than a hash: written anew"
            );
            let mut pipe = redis::pipe();
            pipe.del(keys.cleaner_status())
                .add_command(record(keys, &last));
            let _: () = pipe.query_async(conn).await?;
        }
        recorded => recorded?,
    }
    metrics().cleaner_last_pass.set(last.at_ms as f64 / 1000.0);
    Ok(last)
}

/// The last pass as recorded (`Keys::cleaner_status`), field by field:
/// none when there is none, or when the key holds another type (the next
/// pass writes it anew).
pub(crate) async fn last_recorded<T: redis::FromRedisValue + Default>(
    conn: &mut Conn,
    keys: &Keys,
) -> redis::RedisResult<T> {
    let read: redis::RedisResult<T> = redis::Cmd::hgetall(keys.cleaner_status())
        .query_async(conn)
        .await;
    match read {
        Err(e) if wrong_type(&e) => Ok(T::default()),
        read => read,
    }
}

/// The HSET recording `last` in `Keys::cleaner_status`, under the field
/// names of its JSON form (what `hitcount status` reads back).
fn record(keys: &Keys, last: &LastPass) -> redis::Cmd {
    let p = &last.pass;
    let fields = [
        ("at_ms", last.at_ms.to_string()),
        ("leader", last.leader.clone()),
        ("pass", p.pass.to_string()),
        ("duration_ms", p.duration_ms.to_string()),
        ("counters_scanned", p.counters_scanned.to_string()),
        ("samples_removed", p.samples_removed.to_string()),
        ("counters_removed", p.counters_removed.to_string()),
        ("stats_scanned", p.stats_scanned.to_string()),
        ("stats_fields_removed", p.stats_fields_removed.to_string()),
        ("stats_removed", p.stats_removed.to_string()),
        ("trimmed", last.trimmed.entries.to_string()),
        ("min_id", last.trimmed.min_id.clone()),
    ];
    let mut cmd = redis::cmd("HSET");
    cmd.arg(keys.cleaner_status()).arg(&fields[..]);
    cmd
}

/// Runs the duties until shutdown, whenever `lease` is held, over every
/// shard of `stream` (named as on the server the connection finds: one
/// Redis or a cluster).
pub(crate) async fn run(
    client: Client,
    layout: LayoutArgs,
    stream: StreamArgs,
    mut cleaner: Cleaner,
    settings: LeaderArgs,
    lease: Arc<Lease>,
    mut shutdown: Shutdown,
) {
    let mut link = Reconnecting::new(client, "cleaner", connect::RESPONSE_TIMEOUT);
    while !shutdown.is_triggered() {
        if !lease.held() {
            connect::sleep(IDLE_CHECK, &mut shutdown).await;
            continue;
        }
        let started = Instant::now();
        let now = crate::model::clock::unix_ms() / 1000;
        let result = link
            .call(async |c| {
                let shards = Keys::all_shards(&layout, &stream, c.is_cluster());
                once(&mut cleaner, c, &shards, &lease, now).await
            })
            .await;
        let next = cleaner::pause_after(started.elapsed(), settings.clean_interval());
        let pause = match result {
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
                next
            }
            // At shutdown the worker gave the lease up itself: no warning.
            Err(CleanError::LostLease) if shutdown.is_triggered() => next,
            Err(CleanError::LostLease) => {
                // How long the pass ran tells one begun before a pause of
                // the process (its lease lost meanwhile) from one begun late.
                let pass_ms = started.elapsed().as_millis() as u64;
                tracing::warn!(
                    pass_ms,
                    "leader lease lost during a cleaner pass: stopped cleaning"
                );
                next
            }
            // Tried again after the backoff, not a whole interval later: the
            // pass is not skipped, and the outage ends when it does.
            Err(CleanError::Store(e)) => link.failed(&e, Some(&shutdown)).1,
        };
        connect::sleep(pause, &mut shutdown).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::LayoutArgs;

    fn keys() -> Keys {
        Keys::new(&LayoutArgs::default(), &Default::default())
    }

    fn last() -> LastPass {
        LastPass {
            at_ms: 1_700_000_000_123,
            leader: "worker-1/00000000deadbeef".into(),
            pass: PassReport {
                pass: 4,
                counters_scanned: 10,
                samples_removed: 20,
                counters_removed: 3,
                stats_scanned: 5,
                stats_fields_removed: 40,
                stats_removed: 2,
                duration_ms: 7,
            },
            trimmed: Trimmed {
                entries: 12_000,
                min_id: "1700000000000-5".into(),
            },
        }
    }

    /// The command's arguments as text.
    fn args(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => panic!("an HSET has no cursor"),
            })
            .collect()
    }

    /// Field names of an HSET's arguments (after the command and the key).
    fn fields(args: &[String]) -> Vec<&str> {
        args[2..].iter().step_by(2).map(String::as_str).collect()
    }

    #[test]
    fn the_pass_is_recorded_field_by_field_in_the_status_hash() {
        let keys = keys();
        let got = args(&record(&keys, &last()));
        let want: Vec<String> = [
            "HSET",
            &keys.cleaner_status(),
            "at_ms",
            "1700000000123",
            "leader",
            "worker-1/00000000deadbeef",
            "pass",
            "4",
            "duration_ms",
            "7",
            "counters_scanned",
            "10",
            "samples_removed",
            "20",
            "counters_removed",
            "3",
            "stats_scanned",
            "5",
            "stats_fields_removed",
            "40",
            "stats_removed",
            "2",
            "trimmed",
            "12000",
            "min_id",
            "1700000000000-5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_pass_without_a_group_records_an_empty_min_id() {
        let mut l = last();
        l.trimmed = Trimmed::default();
        let got = args(&record(&keys(), &l));
        let at = got.iter().position(|a| a == "min_id").unwrap();
        assert_eq!(got[at + 1], "");
        let at = got.iter().position(|a| a == "trimmed").unwrap();
        assert_eq!(got[at + 1], "0");
    }

    #[test]
    fn the_status_display_finds_every_field_it_reads() {
        // The fields `hitcount status` prints from the hash.
        let got = args(&record(&keys(), &last()));
        let recorded = fields(&got);
        for f in [
            "at_ms",
            "leader",
            "duration_ms",
            "counters_scanned",
            "samples_removed",
            "counters_removed",
            "trimmed",
        ] {
            assert!(recorded.contains(&f), "{f} is not recorded");
        }
    }

    #[cfg(feature = "cli")]
    #[test]
    fn the_json_form_is_flat_with_the_recorded_field_names() {
        let json = serde_json::to_value(last()).unwrap();
        let obj = json.as_object().expect("one flat object");
        assert_eq!(obj["trimmed"], 12_000);
        assert_eq!(obj["min_id"], "1700000000000-5");
        assert_eq!(obj["pass"], 4);
        assert!(
            !obj.contains_key("entries"),
            "trimmed entries are `trimmed`"
        );
        // `clean --json` and `status --json` agree: the same names.
        let mut json_names: Vec<&str> = obj.keys().map(String::as_str).collect();
        let got = args(&record(&keys(), &last()));
        let mut recorded = fields(&got);
        json_names.sort_unstable();
        recorded.sort_unstable();
        assert_eq!(json_names, recorded);
    }

    #[tokio::test]
    async fn a_worker_that_is_not_leader_runs_no_pass_and_stops_at_shutdown() {
        let keys = keys();
        let lease = Arc::new(Lease::new(&keys, &LeaderArgs::default(), "test"));
        let cleaner = Cleaner::new(keys.clone(), &LayoutArgs::default(), lease.clone());
        // Nothing listens there: the duties must not need Redis to idle.
        let client = crate::store::connect::client(&crate::model::config::RedisArgs::from_url(
            "redis://127.0.0.1:1/",
        ))
        .unwrap();
        let (trigger, shutdown) = crate::model::shutdown::channel();
        let last_pass = metrics().cleaner_last_pass.get();
        let duties = tokio::spawn(run(
            client,
            LayoutArgs::default(),
            Default::default(),
            cleaner,
            LeaderArgs::default(),
            lease,
            shutdown,
        ));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!duties.is_finished(), "idles until shutdown");
        trigger.trigger();
        tokio::time::timeout(Duration::from_secs(5), duties)
            .await
            .expect("stops at shutdown, without waiting out its idle check")
            .unwrap();
        assert_eq!(metrics().cleaner_last_pass.get(), last_pass);
    }
}
