//! For an error no retry can fix, what an operator should change: a hint
//! that names the setting (a password, an ACL rule, the database number,
//! TLS files, the Redis version), read from Redis' and the client's words.
//! [`super::error`] calls an error fatal when it has one.

use redis::RedisError;

/// For an error no retry can fix, what an operator should change.
pub(crate) fn fatal_hint(err: &RedisError) -> Option<&'static str> {
    let text = err.to_string();
    let lower = err.detail().unwrap_or("").to_ascii_lowercase();
    let hint = if text.contains(NO_PASSWORD_SET) {
        NEEDLESS_PASSWORD
    } else if err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH"))
        || text.contains("WRONGPASS")
        || text.contains("NOAUTH")
        // A cluster client wraps a refused AUTH in an I/O error of its own
        // ("Failed to create initial connections - Io: Password
        // authentication failed - AuthenticationFailed").
        || text.contains("AuthenticationFailed")
    {
        "check the user and password in REDIS_URL (--redis-url)"
    } else if (err.code() == Some("NOPERM") || text.contains("NOPERM"))
        && text.contains("one of the keys")
    {
        "the Redis user's key patterns do not cover this key: give it those docs/operations.md \
         (\"ACL users\") lists for this command, with HITCOUNT_PREFIX and the streams as set \
         (serve reads none), or use another user in REDIS_URL"
    } else if err.code() == Some("NOPERM") || text.contains("NOPERM") {
        "grant the Redis user the command named (see docs/operations.md, \"ACL users\"), or use another user in REDIS_URL"
    } else if text.contains("HITCOUNT_CLUSTER=off") {
        "leave HITCOUNT_CLUSTER (--cluster) at auto, the default, or set it to on, to talk to the whole cluster"
    } else if is_tls_refusal(err) {
        "check the TLS settings: HITCOUNT_REDIS_CA must hold the CA that signed Redis' \
         certificate (which must be valid now and name the URL's host), HITCOUNT_REDIS_CERT \
         and HITCOUNT_REDIS_KEY a client certificate (X.509 v3) and its key when Redis asks \
         for one (docs/operations.md, \"TLS\")"
    } else if err.kind() == redis::ErrorKind::InvalidClientConfig {
        "check REDIS_URL (--redis-url) and the TLS settings"
    } else if err.code() == Some("WRONGTYPE") || text.contains("WRONGTYPE") {
        // Anywhere in the text: a pipeline's failure names it after its index.
        "a key hitcount uses (named above unless a script met it) holds another type, written by \
         something else: delete or rename that key, or keep hitcount's keys apart with \
         HITCOUNT_PREFIX, HITCOUNT_STREAM and HITCOUNT_DEAD_STREAM"
    } else if text.contains("exhausted the last possible ID") {
        "the stream's last entry ID is the largest possible (an XADD with an explicit ID?), \
         so nothing can be added to it: let the workers drain it, then delete it, or use another --stream / HITCOUNT_STREAM"
    } else if text.to_ascii_lowercase().contains("unknown redis command") {
        // Redis' words for a command a script calls that it does not know.
        "a command hitcount's scripts call is unknown to this Redis (renamed or removed by \
         rename-command?): hitcount needs Redis 7.0 or newer with its commands under their \
         own names"
    } else if lower.contains("unknown command") || text.contains("unknown command") {
        "hitcount needs Redis 7.0 or newer with scripting and streams"
    } else if text.contains("cluster support disabled") {
        // The cluster client's first call to a node that is no cluster.
        "REDIS_URL names a Redis that is no cluster node while HITCOUNT_CLUSTER (--cluster) \
         is on: leave it at auto, the default, or set it to off"
    } else if text.contains("DB index is out of range") {
        "the database number in REDIS_URL (redis://host:port/DB) is over this Redis' \
         `databases` setting: use a lower one"
    } else if text.contains(SELECT_REFUSED) && !select_waits(&text) {
        // Redis' reason comes without its code (a NOPERM reads "User u has
        // no permissions to run the 'select' command").
        "Redis refused to switch to the database number in REDIS_URL (redis://host:port/DB): \
         the number must be within this Redis' `databases` setting and the Redis user needs \
         the SELECT command (+select, see docs/operations.md, \"ACL users\"); or leave the \
         number out for database 0"
    } else if lower.contains("error compiling script") || lower.contains("scripting is disabled") {
        "Redis refused hitcount's Lua scripts: it needs Redis 7.0 or newer with EVAL allowed"
    } else {
        return None;
    };
    Some(hint)
}

/// How the Redis client words a `SELECT` of the URL's database that Redis
/// refused (a number out of range, a user without `select`).
const SELECT_REFUSED: &str = "refused to switch database";

/// Whether a refused `SELECT` (its error's text) only asks to wait: a
/// Redis busy with a long script, or loading its data, refuses every
/// command of a new connection, its `SELECT` first (the client words it
/// without the code: "Redis is busy running a script").
fn select_waits(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("busy") || lower.contains("loading")
}

/// Redis' words for an `AUTH` with a password it has none to check against
/// (no `requirepass`, the default user `nopass`).
const NO_PASSWORD_SET: &str = "called without any password configured";

/// What to do about [`NO_PASSWORD_SET`].
pub(crate) const NEEDLESS_PASSWORD: &str =
    "REDIS_URL (--redis-url) carries a password, but this Redis has none set (no \
     requirepass): remove the password from the URL, or set one on Redis";

/// Whether `err` is Redis saying it has no password for the one sent
/// ([`NO_PASSWORD_SET`]).
pub(crate) fn is_needless_password(err: &RedisError) -> bool {
    err.to_string().contains(NO_PASSWORD_SET)
}

/// Whether `err` is a TLS handshake that failed for a certificate or key,
/// Redis' or this client's (rustls' reasons, which reach hitcount as I/O
/// errors): no retry fixes it, the settings must change.
pub(crate) fn is_tls_refusal(err: &RedisError) -> bool {
    let text = err.to_string();
    TLS_REFUSALS.iter().any(|reason| text.contains(reason))
}

/// How rustls words a handshake refused for a certificate or key: one it
/// cannot verify (unknown issuer, bad signature, expired, another name, an
/// X.509 v1), none sent, an alert from Redis refusing this client's, or a
/// key that is not the certificate's.
const TLS_REFUSALS: [&str; 4] = [
    "invalid peer certificate",
    "peer sent no certificates",
    "received fatal alert",
    "keys may not be consistent",
];
