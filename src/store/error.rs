//! Every error of the Redis access layer sorted into its class: transient
//! (back off, reconnect, retry: outages, timeouts, LOADING, BUSY, OOM,
//! failover, a reply the code does not expect) or fatal (no retry can help:
//! a wrong password, NOPERM, an unknown command, a key of the wrong type, a
//! script Redis refuses). Bad input never gets here: it is dead-lettered
//! where it is read.

use redis::RedisError;

use crate::model::metrics::metrics;

pub(crate) use super::hint::fatal_hint;

/// What to do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The connection or the server is (maybe briefly) unavailable, or a
    /// reply was not what the code expects: back off, reconnect, retry.
    /// Includes OOM, LOADING, BUSY, TRYAGAIN, failover and timeouts.
    Transient,
    /// Retrying cannot help until an operator changes something (a password,
    /// an ACL, a setting, the Redis version): the process stops with one line
    /// naming the cause and the setting to fix.
    Fatal,
}

/// Whether `err` is Redis refusing a write for its `maxmemory` (alone,
/// within a script, or the first refusal of a pipeline).
pub(crate) fn is_oom(err: &RedisError) -> bool {
    err.code() == Some("OOM")
        || err
            .clone()
            .into_server_errors()
            .is_some_and(|all| all.iter().any(|(_, e)| e.code() == "OOM"))
        || err.to_string().contains("OOM command not allowed")
}

/// Sorts an error into its class and a bounded metric label.
pub(crate) fn classify(err: &RedisError) -> (ErrorClass, &'static str) {
    let kind = match err.code() {
        _ if fatal_hint(err).is_some() => return (ErrorClass::Fatal, "fatal"),
        _ if is_oom(err) => "oom",
        _ if err.is_timeout() => "timeout",
        _ if is_broken_link(err) => "io",
        Some("NOSCRIPT") => "script",
        Some(
            "LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "READONLY" | "CLUSTERDOWN" | "MOVED"
            | "ASK",
        ) => "other",
        _ => "response",
    };
    (ErrorClass::Transient, kind)
}

/// The error codes with which Redis refuses writes while it answers:
/// a replica (`READONLY`), too few good replicas (`NOREPLICAS`), a failed
/// save to disk (`MISCONF`). `/readyz` names the cause instead of "redis
/// not connected".
pub(crate) const WRITE_REFUSALS: [&str; 3] = ["READONLY", "NOREPLICAS", "MISCONF"];

/// The index in [`WRITE_REFUSALS`] of the refusal met by this process'
/// last try on some connection, plus one (0: none).
static WRITES_REFUSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Records the write refusal `code` (one of [`WRITE_REFUSALS`]), or its
/// end (`None`).
pub(crate) fn set_writes_refused(code: Option<&str>) {
    let at = code
        .and_then(|c| WRITE_REFUSALS.iter().position(|r| *r == c))
        .map_or(0, |i| i + 1);
    WRITES_REFUSED.store(at, std::sync::atomic::Ordering::Relaxed);
}

/// The code with which Redis last refused a write, if it still does as
/// far as anyone knows (a `REDIS_URL` naming a replica, a cluster's
/// failover under way, `min-replicas-to-write`, a failed `BGSAVE`).
pub(crate) fn writes_refused() -> Option<&'static str> {
    let at = WRITES_REFUSED.load(std::sync::atomic::Ordering::Relaxed);
    at.checked_sub(1).map(|i| WRITE_REFUSALS[i])
}

/// Whether Redis says it lost what hitcount keeps there under this call:
/// the stream or its consumer group deleted (`NOGROUP`, or a blocked read
/// `UNBLOCKED`), its scripts flushed (`NOSCRIPT`). Not an outage: the
/// resync that follows makes them again (and says so for the group).
pub(crate) fn is_deleted_under(err: &RedisError) -> bool {
    matches!(err.code(), Some("NOGROUP" | "UNBLOCKED" | "NOSCRIPT"))
}

/// Whether a Redis Cluster refused a command because its hash slot is
/// moving between masters (`ASK`, `TRYAGAIN`) or has just moved (`MOVED`):
/// the client library follows these for a command sent alone, not inside a
/// pipeline, so a batched step fails until the move ends.
pub(crate) fn is_slot_moving(err: &RedisError) -> bool {
    matches!(err.code(), Some("ASK" | "TRYAGAIN" | "MOVED"))
}

/// Whether an error says the connection itself broke (not Redis' answer).
pub(crate) fn is_broken_link(err: &RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
}

/// Whether a command failed because its connection was closed before it
/// could be written (a broken pipe: Redis restarted, or closed an idle
/// connection): it reached no Redis, so sending it again on a new
/// connection cannot do it twice.
pub(crate) fn never_sent(err: &RedisError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::BrokenPipe;
        }
        source = e.source();
    }
    // The multiplexed connection reports a write its driver could not make
    // in words only.
    err.is_io_error() && err.to_string().eq_ignore_ascii_case("broken pipe")
}

/// What answered at the URL is not Redis (an HTTP server, say): a fatal
/// error whose detail is the one line to print, naming the URL `shown`
/// (password hidden).
pub(crate) fn not_redis(shown: &str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        NOT_REDIS,
        format!(
            "{NOT_REDIS} at {shown}: what answers there does not speak Redis' protocol \
             (check REDIS_URL / --redis-url)"
        ),
    ))
}

const NOT_REDIS: &str = "not a Redis server";

/// Whether `err` is [`not_redis`]'s: its detail says it all.
pub(crate) fn is_not_redis(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::InvalidClientConfig
        && err.detail().is_some_and(|d| d.starts_with(NOT_REDIS))
}

/// A Redis error as one line that keeps Redis' own error code in front
/// (`NOPERM this user has no permissions to run the 'xreadgroup' command`).
pub(crate) fn describe(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        // A setting hitcount refuses says all in its detail.
        (None, Some(detail)) if err.kind() == redis::ErrorKind::InvalidClientConfig => {
            detail.to_string()
        }
        _ => err.to_string(),
    }
}

/// [`describe`] of the first error Redis answered (a pipeline's first
/// failed command), without the script location Redis appends to an error
/// raised inside a script (` script: SHA, on @user_script:N.`).
pub(crate) fn first_cause(err: &RedisError) -> String {
    let first = err
        .clone()
        .into_server_errors()
        .and_then(|errors| errors.first().cloned());
    let line = match first {
        Some((_, e)) => e
            .details()
            .map_or(e.code().to_string(), |d| format!("{} {d}", e.code())),
        None => describe(err),
    };
    line.split(" script: ")
        .next()
        .unwrap_or_default()
        .to_string()
}

/// An error of the Redis access layer: Redis' own, or a reply the code does
/// not expect, or a record it cannot read back. Each carries its class.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis (or the connection to it) failed.
    #[error("{0}")]
    Redis(#[from] RedisError),
    /// A reply of a script or command is not one the code knows: nothing is
    /// taken as done, the caller keeps its state and retries later.
    #[error("unexpected reply to {what}: {reply}")]
    Unexpected {
        /// The command or script.
        what: &'static str,
        /// The reply, abridged.
        reply: String,
    },
    /// A window's apply step ran past the time its markers surely live: it is
    /// left to recovery, which reloads the record.
    #[error("window apply took longer than the guard ({0:?})")]
    Guard(std::time::Duration),
    /// A window whose cells waited in the carry was finished by
    /// another worker (this one stalled past the claim time): nothing was
    /// carried; a resync finishes this consumer's windows one by one.
    #[error("window {0} of the carry was finished by another worker")]
    CarryGone(String),
    /// A read ahead task ended without a reply.
    #[error("the read ahead task failed: {0}")]
    ReadAhead(String),
    /// Another live worker holds this consumer name.
    #[error(
        "consumer name {name:?} is in use by another live worker ({holder}); give each worker \
         its own HITCOUNT_CONSUMER (--consumer) or POD_NAME, or leave both unset for a unique \
         default"
    )]
    NameTaken {
        /// The consumer name.
        name: String,
        /// The holder's registration token (`host/pid/random`).
        holder: String,
    },
}

impl StoreError {
    /// Whether it tells of this process having stalled (its window's guard
    /// passed, its carry's windows finished by another worker), not of
    /// Redis: no outage, though a resync follows.
    pub(crate) fn is_stall(&self) -> bool {
        matches!(self, StoreError::Guard(_) | StoreError::CarryGone(_))
    }

    /// What to do about it.
    pub fn class(&self) -> ErrorClass {
        match self {
            StoreError::Redis(e) => classify(e).0,
            StoreError::NameTaken { .. } => ErrorClass::Fatal,
            StoreError::Unexpected { .. }
            | StoreError::Guard(_)
            | StoreError::ReadAhead(_)
            | StoreError::CarryGone(_) => ErrorClass::Transient,
        }
    }

    /// Counts it in `hitcount_redis_errors_total` and returns its class.
    pub(crate) fn record(&self) -> ErrorClass {
        let (class, kind) = match self {
            StoreError::Redis(e) => classify(e),
            StoreError::Unexpected { .. } => (ErrorClass::Transient, "unexpected"),
            other => return other.class(),
        };
        metrics().redis_errors.with_label_values(&[kind]).inc();
        class
    }

    /// Shortens a reply for an error message.
    pub(crate) fn unexpected(what: &'static str, reply: &redis::Value) -> StoreError {
        let mut text = format!("{reply:?}");
        if text.len() > 200 {
            text.truncate((0..=200).rfind(|&i| text.is_char_boundary(i)).unwrap_or(0));
            text.push('…');
        }
        StoreError::Unexpected { what, reply: text }
    }
}

/// A result of the Redis access layer.
pub type StoreResult<T> = Result<T, StoreError>;

/// The outcome of a task that talks to Redis on its own; one that panicked
/// or was cancelled is `what` ending unexpectedly.
pub(crate) async fn joined<T, E>(
    task: tokio::task::JoinHandle<Result<T, E>>,
    what: &'static str,
) -> StoreResult<T>
where
    StoreError: From<E>,
{
    let outcome = task.await.map_err(|e| StoreError::Unexpected {
        what,
        reply: e.to_string(),
    })?;
    Ok(outcome?)
}

/// Whether `e` is Redis' `WRONGTYPE`: the key holds another type than the
/// command reads (a key named as hitcount's, written by something else).
pub(crate) fn wrong_type(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE")
}

/// `err`, one of `cmd`'s, naming the key `cmd` acts on when it is a
/// [`wrong_type`] (Redis' words name none, and an operator must find the
/// key written by something else): the same error code, with ` (key K)`.
/// A script's keys are left unnamed (which one failed is not known).
pub(crate) fn naming_key(cmd: &redis::Cmd, err: redis::RedisError) -> redis::RedisError {
    if !wrong_type(&err) {
        return err;
    }
    let mut args = cmd.args_iter().filter_map(|a| match a {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let (Some(name), Some(key)) = (args.next(), args.next()) else {
        return err;
    };
    if [&b"EVALSHA"[..], b"EVAL", b"FCALL"]
        .iter()
        .any(|s| name.eq_ignore_ascii_case(s))
    {
        return err;
    }
    let key = String::from_utf8_lossy(key);
    let key = crate::model::event::printable(&key);
    let detail = err.detail().unwrap_or("").replace(['\r', '\n'], " ");
    let reply = format!("-WRONGTYPE {detail} (key {key})\r\n");
    match redis::parse_redis_value(reply.as_bytes()).and_then(redis::Value::extract_error) {
        Err(named) if wrong_type(&named) => named,
        _ => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::hint::{is_needless_password, NEEDLESS_PASSWORD};

    /// A worker that stalled past its windows' guard, or whose carried
    /// windows another worker finished, was logged as "Redis unavailable"
    /// while Redis was fine: these are stalls, not outages.
    #[test]
    fn a_stalled_worker_is_no_outage() {
        let stall = [
            StoreError::Guard(std::time::Duration::from_secs(1)),
            StoreError::CarryGone("w-0".into()),
        ];
        assert!(stall.iter().all(StoreError::is_stall));
        let refused = RedisError::from((redis::ErrorKind::Io, "broken pipe"));
        assert!(!StoreError::Redis(refused).is_stall());
        assert!(!StoreError::ReadAhead("x".into()).is_stall());
    }

    /// An error Redis words itself (`-CODE detail`).
    fn reply(text: &str) -> RedisError {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
            .and_then(redis::Value::extract_error)
            .unwrap_err()
    }

    /// A key the user's patterns leave out is told apart from a command it
    /// may not run: the first is fixed by the settings' names or the
    /// user's key patterns, not by granting a command.
    #[test]
    fn a_key_refused_by_the_users_patterns_is_named_as_such() {
        let key = reply(
            "NOPERM this user has no permissions to access one of the keys used as arguments",
        );
        assert_eq!(classify(&key).0, ErrorClass::Fatal);
        assert!(fatal_hint(&key).unwrap().contains("key patterns"), "{key}");
        let command = reply("NOPERM this user has no permissions to run the 'xadd' command");
        assert!(fatal_hint(&command).unwrap().contains("the command named"));
    }

    /// Settings no retry fixes stop with a hint: a command a script calls
    /// renamed away, a database number over `databases`.
    #[test]
    fn a_renamed_command_and_a_database_out_of_range_are_fatal() {
        let renamed =
            reply("ERR Unknown Redis command called from script script: 0123, on @user_script:7.");
        assert_eq!(classify(&renamed).0, ErrorClass::Fatal);
        assert!(fatal_hint(&renamed).unwrap().contains("rename-command"));
        let db = refused_select("ERR DB index is out of range");
        assert_eq!(classify(&db).0, ErrorClass::Fatal, "{db}");
        assert!(fatal_hint(&db).unwrap().contains("REDIS_URL"));
        assert!(is_deleted_under(&reply("NOSCRIPT No matching script.")));
        let no_cluster = reply("ERR This instance has cluster support disabled");
        assert_eq!(classify(&no_cluster).0, ErrorClass::Fatal);
        assert!(fatal_hint(&no_cluster)
            .unwrap()
            .contains("HITCOUNT_CLUSTER"));
    }

    /// The client's error for a `SELECT` Redis refused, with Redis' reason
    /// (without its code, as the client gives it).
    fn refused_select(reason: &str) -> RedisError {
        RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "Redis server refused to switch database",
            reason.to_string(),
        ))
    }

    /// A SELECT Redis refused, which the client reports without Redis'
    /// code (a user without `select`, a number past 2^31): no retry fixes
    /// it, so it stops with a hint naming REDIS_URL instead of retrying for
    /// ever. A Redis busy with a script, or loading, refuses the SELECT of
    /// a new connection too: that is waited out.
    #[test]
    fn a_refused_select_is_fatal_unless_redis_asks_to_wait() {
        for reason in [
            "Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
            "Redis is loading the dataset in memory",
        ] {
            let wait = refused_select(reason);
            assert_eq!(classify(&wait).0, ErrorClass::Transient, "{wait}");
        }
        for reason in [
            "User ro has no permissions to run the 'select' command",
            "value is out of range, value must between -2147483648 and 2147483647",
        ] {
            let select = refused_select(reason);
            assert_eq!(classify(&select).0, ErrorClass::Fatal, "{select}");
            let hint = fatal_hint(&select).unwrap();
            assert!(
                hint.contains("REDIS_URL") && hint.contains("+select"),
                "{hint}"
            );
        }
    }

    /// A password sent to a Redis that has none: Redis' words, and a hint
    /// that says so, not "wrong password".
    #[test]
    fn a_password_redis_does_not_have_is_named_so() {
        let needless = reply(
            "ERR AUTH <password> called without any password configured for the default \
             user. Are you sure your configuration is correct?",
        );
        assert!(is_needless_password(&needless));
        assert_eq!(classify(&needless).0, ErrorClass::Fatal);
        assert_eq!(fatal_hint(&needless), Some(NEEDLESS_PASSWORD));
        assert!(!is_needless_password(&reply(
            "WRONGPASS invalid username-password pair"
        )));
    }

    #[test]
    fn a_broken_connection_is_no_oom() {
        let io = RedisError::from(std::io::Error::other("broken pipe"));
        assert!(!is_oom(&io));
    }

    #[test]
    fn a_refused_password_is_fatal_even_wrapped_by_the_cluster_client() {
        let wrapped = RedisError::from((
            redis::ErrorKind::Io,
            "Failed to create initial connections",
            "Password authentication failed - AuthenticationFailed".to_string(),
        ));
        assert_eq!(classify(&wrapped).0, ErrorClass::Fatal);
        assert!(fatal_hint(&wrapped).unwrap().contains("REDIS_URL"));
        let refused = RedisError::from((
            redis::ErrorKind::Io,
            "Failed to create initial connections",
            "Connection refused (os error 111)".to_string(),
        ));
        assert_eq!(classify(&refused).0, ErrorClass::Transient);
    }

    /// A WRONGTYPE names its key (with its code kept, so that it is told
    /// apart and judged fatal as before), on one node and on a cluster; a
    /// script's is left as Redis words it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_key_of_another_type_is_named() {
        let srv = crate::testing::server();
        let cluster = crate::testing::cluster(3, 0);
        for url in [srv.url(), cluster.url()] {
            let mut c = crate::testing::conn(&url).await;
            let () = redis::cmd("SET")
                .arg("known:")
                .arg("x")
                .query_async(&mut c)
                .await
                .unwrap();
            let mut zadd = redis::cmd("ZADD");
            zadd.arg("known:").arg(0).arg("60:a");
            let mut script = redis::cmd("EVAL");
            script
                .arg("return redis.call('ZADD', KEYS[1], 0, 'm')")
                .arg(1)
                .arg("known:");
            let mut ok = redis::cmd("SET");
            ok.arg("other").arg("y");
            let replies = c.query_each_apart(vec![ok, zadd, script]).await.unwrap();
            assert!(replies[0].is_ok(), "{:?}", replies[0]);
            let named = replies[1].as_ref().unwrap_err();
            assert!(wrong_type(named), "{named}");
            assert!(named.to_string().contains("(key known:)"), "{named}");
            let fatal = fatal_hint(named).unwrap();
            assert!(fatal.contains("named above"), "{fatal}");
            let unnamed = replies[2].as_ref().unwrap_err();
            assert!(wrong_type(unnamed), "{unnamed}");
            assert!(!unnamed.to_string().contains("(key"), "{unnamed}");
        }
    }
}
