//! Reaching Redis from a one-shot command: connect once with a deadline,
//! refuse what no retry can fix, and say every failure in one line that
//! names the URL (password hidden) and the cause.

use anyhow::anyhow;
use redis::RedisError;

use super::Common;
use crate::model::config::{redact_url, LayoutArgs, RedisArgs, StreamArgs};
use crate::model::keys::Keys;
use crate::service::producer::{Producer, ProducerOptions};
use crate::store::connect::{Conn, ErrorClass};
use crate::store::shard_count::{self, Recorded};

/// Where the Redis user of most commands is given (the worker's).
const WORKER_ACL: &str = "deploy/redis/hitcount.acl";

/// Where the Redis user of the command running is given, when it is not
/// [`WORKER_ACL`] (see [`acl_for`]): named by a `NOPERM`'s hint.
static ACL: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// The command running is `serve` or `ingest`, whose users are their own.
pub(crate) fn acl_for(command: &'static str) {
    let acl = match command {
        "serve" => "the read-only user of `hitcount serve` in docs/operations.md",
        "ingest" => "deploy/redis/ingest.acl",
        _ => WORKER_ACL,
    };
    let _ = ACL.set(acl);
}

/// What went wrong, in one line: for a reply error (alone or the first of a
/// pipeline) its code and message, plus a hint for the usual causes; else
/// the client's words.
pub(crate) fn cause(err: &RedisError) -> String {
    if crate::store::error::is_not_redis(err) {
        return crate::store::connect::describe(err);
    }
    if err.kind() == redis::ErrorKind::AuthenticationFailed {
        return "authentication failed: wrong user name or password (WRONGPASS)".into();
    }
    let Some((_, first)) = err
        .clone()
        .into_server_errors()
        .and_then(|errors| errors.first().cloned())
    else {
        return match crate::store::connect::fatal_hint(err) {
            Some(hint) => format!("{}; {hint}", crate::store::connect::describe(err)),
            None => err.to_string(),
        };
    };
    let code = first.code();
    let mut line = match first.details() {
        // An error raised in a script ends with where: " script: SHA, on
        // @user_script:LINE." (hitcount's own scripts: no use to a reader).
        Some(detail) => format!(
            "{code} {}",
            detail.split(" script: ").next().unwrap_or(detail)
        ),
        None => code.to_string(),
    };
    match code {
        // Not `redis://PASSWORD@HOST`: the client reads that as a user name.
        "NOAUTH" => line.push_str(
            " (the Redis URL carries no password: redis://:PASSWORD@HOST:PORT, or \
             redis://USER:PASSWORD@HOST:PORT for a user of Redis' ACL)",
        ),
        _ if crate::store::hint::is_needless_password(err) => {
            line.push_str(&format!(" ({})", crate::store::hint::NEEDLESS_PASSWORD));
        }
        "NOPERM" => line.push_str(&format!(
            " (the user lacks a command or key hitcount needs: see {})",
            ACL.get().copied().unwrap_or(WORKER_ACL)
        )),
        _ => {}
    }
    line
}

/// Rewrites an error whose cause is a [`RedisError`] as one line: the
/// contexts above it, then the Redis URL (password hidden) and the
/// [`cause`]. Other errors pass unchanged.
pub(crate) fn one_line(err: anyhow::Error, url: Option<&str>) -> anyhow::Error {
    let Some(redis) = err.chain().find_map(|e| e.downcast_ref::<RedisError>()) else {
        return err;
    };
    let raw = redis.to_string();
    let mut parts: Vec<String> = err
        .chain()
        .take_while(|e| !e.is::<RedisError>())
        .map(|e| e.to_string())
        // A wrapper that only repeats the Redis error adds nothing.
        .filter(|m| !m.ends_with(&raw))
        .collect();
    let cause = cause(redis);
    parts.push(match url {
        // A failure that is not Redis' names the URL already.
        Some(_) if crate::store::error::is_not_redis(redis) => cause,
        Some(url) => format!("Redis at {}: {cause}", redact_url(url)),
        None => format!("Redis: {cause}"),
    });
    anyhow!(parts.join(": "))
}

/// Opens a connection for a one-shot command and makes sure Redis accepts
/// it (a `PING`, so a missing password shows here): any failure is one line
/// naming the URL. Reaching Redis is tried once, within the connect and
/// reply timeouts of [`crate::store::connect`].
pub(crate) async fn connect(redis: &RedisArgs) -> anyhow::Result<Conn> {
    let client = crate::store::connect::client(redis)?;
    let url = redact_url(&redis.url);
    let failed = |e: RedisError| {
        // A refusal of the certificates (Redis' or this client's) is not
        // Redis refusing.
        let tls = crate::store::hint::is_tls_refusal(&e);
        if crate::store::error::is_not_redis(&e) {
            anyhow!(cause(&e))
        } else if !tls && crate::store::connect::classify(&e).0 == ErrorClass::Fatal {
            // No retry can help (the classes every command shares with the
            // worker).
            anyhow!("Redis at {url} refused the connection: {}", cause(&e))
        } else {
            anyhow!("cannot connect to Redis at {url}: {}", cause(&e))
        }
    };
    let mut conn = client
        .open(crate::store::connect::RESPONSE_TIMEOUT)
        .await
        .map_err(failed)?;
    let _: () = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(failed)?;
    Ok(conn)
}

/// What a server (`serve`, `ingest`) makes of its first look at Redis,
/// `checked`: an error no retry can fix (a wrong password, a URL that is no
/// Redis, a permission the ACL lacks) stops it, said in one line naming the
/// URL as every command's; a Redis that is only down is waited for, each
/// request trying again (`Ok(false)`). `Ok(true)`: Redis answered.
pub(crate) fn serving_anyway(checked: Result<(), RedisError>) -> anyhow::Result<bool> {
    match checked {
        Ok(()) => Ok(true),
        Err(e) if crate::store::connect::classify(&e).0 == ErrorClass::Fatal => Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "Redis unavailable at start: serving anyway, each request tries again");
            Ok(false)
        }
    }
}

/// Checks, before a producer starts (it retries every error in the
/// background, forever), that hit events can go to `stream`: Redis accepts
/// the connection and this user may use the key, which is a stream or does
/// not exist yet (`XLEN`), and it may run the producer's script (run with
/// no events on a probe key of its own that expires within a second: it
/// appends nothing). Both are allowed by hitcount's ACL rules.
pub(crate) async fn check_stream(redis: &RedisArgs, stream: &str) -> anyhow::Result<()> {
    let mut conn = connect(redis).await?;
    let url = redact_url(&redis.url);
    let probe = async {
        let _: u64 = redis::Cmd::xlen(stream).query_async(&mut conn).await?;
        let probed = StreamArgs {
            stream: stream.to_string(),
            ..StreamArgs::default()
        };
        let keys = Keys::new(&LayoutArgs::default(), &probed);
        let producer = keys.producer(&format!("probe-{:016x}", rand::random::<u64>()));
        let mut produce = crate::store::scripts::PRODUCE.evalsha(2);
        produce.arg(stream).arg(producer).arg(1).arg(1).arg(0);
        match produce.query_async::<u64>(&mut conn).await {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                crate::store::scripts::load_all(&mut conn).await?;
                produce.query_async::<u64>(&mut conn).await
            }
            other => other,
        }
    };
    match probe.await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some("WRONGTYPE") => Err(anyhow!(
            "cannot send hits to {stream} on Redis at {url}: that key holds another type than a stream \
             (choose another with --stream / HITCOUNT_STREAM)"
        )),
        Err(e) => Err(anyhow!(
            "cannot send hits to {stream} on Redis at {url}: {}",
            cause(&e)
        )),
    }
}

/// The shard counts that disagree, in the words every command uses.
fn mismatch(wanted: u32, recorded: u32, key: &str) -> String {
    format!(
        "HITCOUNT_SHARDS is {}, but this stream's workers read it as {recorded} shard(s) \
         (recorded in {key})",
        wanted.max(1)
    )
}

/// The keys of every shard, for a command that reads or tidies the stream
/// (`status`, `clean`): when the workers recorded another shard count than
/// `common`'s (see `service::shards`), it is used instead, with a warning
/// naming both (the command would otherwise look at streams no worker reads).
pub(crate) async fn shards_read(conn: &mut Conn, common: &mut Common) -> anyhow::Result<Vec<Keys>> {
    match read_record(conn, common).await? {
        Recorded::Damaged { key, value } => {
            tracing::warn!("{}", shard_count::damaged(&key, &value));
        }
        Recorded::Other { recorded, key } => {
            tracing::warn!(
                "{}: using {recorded}",
                mismatch(common.stream.shards, recorded, &key)
            );
            common.stream.shards = recorded;
        }
        Recorded::Agreed | Recorded::Strands { .. } => {}
    }
    let cluster = conn.is_cluster();
    Ok(Keys::all_shards(&common.layout, &common.stream, cluster))
}

/// Refuses to send hits no worker would count: on a Redis Cluster, with
/// settings that put a shard's keys in different hash slots (a `{` in
/// `HITCOUNT_PREFIX` or `HITCOUNT_DEAD_STREAM`: every worker refuses to
/// start with them, [`Keys::cluster_problem`]); and with another shard count
/// than the one recorded for the stream (by its first worker or producer,
/// see [`crate::store::shard_count`]): the hits would go to streams no
/// worker reads. With nothing recorded, this producer's count is recorded,
/// unless it would leave entries already sent unread.
async fn check_shards(common: &Common) -> anyhow::Result<()> {
    let mut conn = connect(&common.redis).await?;
    if conn.is_cluster() {
        if let Some(problem) = Keys::cluster_problem(&common.layout, &common.stream) {
            return Err(anyhow!(
                "{problem}; no worker starts with these settings, so no hit is sent"
            ));
        }
    }
    let recorded = shard_count::record(&mut conn, &common.layout, &common.stream)
        .await
        .map_err(|e| anyhow!("cannot record the stream's shard count: {}", cause(&e)))?;
    against_record(common, recorded)
}

/// For a producer that only reads the record (`ingest`, whose user may
/// not write it): another shard count than the one recorded, or a damaged
/// record, is refused as in [`check_shards`]; with nothing recorded, the
/// first worker records its count.
pub(crate) async fn check_recorded_shards(common: &Common) -> anyhow::Result<()> {
    let mut conn = connect(&common.redis).await?;
    let recorded = read_record(&mut conn, common).await?;
    against_record(common, recorded)
}

/// The shard count recorded for `common`'s stream, judged against its own
/// (read only); an error names the key (Redis' NOPERM does not).
async fn read_record(conn: &mut Conn, common: &Common) -> anyhow::Result<Recorded> {
    let key = shard_count::key(&common.layout, &common.stream, conn.is_cluster());
    let read = shard_count::read(conn, &common.layout, &common.stream).await;
    read.map_err(|e| {
        anyhow!(
            "cannot read the stream's shard count in {key}: {}",
            cause(&e)
        )
    })
}

/// `Err` saying why no hit may be sent with `common`'s shard count, unless
/// `recorded` agrees.
fn against_record(common: &Common, recorded: Recorded) -> anyhow::Result<()> {
    match recorded {
        Recorded::Agreed => Ok(()),
        Recorded::Other { recorded, key } => Err(anyhow!(
            "{}: hits sent now would go to streams no worker reads; give every producer the \
             workers' count (--shards / HITCOUNT_SHARDS)",
            mismatch(common.stream.shards, recorded, &key)
        )),
        Recorded::Damaged { key, value } => Err(anyhow!(
            "{}; no hit is sent",
            shard_count::damaged(&key, &value)
        )),
        Recorded::Strands { key, stranded } => Err(anyhow!(
            "HITCOUNT_SHARDS is {}, which leaves {} unread (no shard count is recorded in \
             {key} yet): give every worker and producer the count those hits were sent \
             with (--shards / HITCOUNT_SHARDS), or delete those streams",
            common.stream.shards.max(1),
            shard_count::describe(&stranded)
        )),
    }
}

/// Checks that hits can go to `common`'s stream and that its workers read
/// it with `common`'s shard count ([`check_stream`], [`check_shards`]).
pub(crate) async fn check_sending(common: &Common) -> anyhow::Result<()> {
    check_stream(&common.redis, &common.stream.stream).await?;
    check_shards(common).await
}

/// A producer for a one-shot command (`hit`, `load`), started once
/// [`check_stream`] has shown that Redis takes hits from this user: the
/// producer retries transient errors in the background, and gives up
/// events Redis refuses for good (see [`refused`]).
pub(crate) async fn checked_producer(common: &Common) -> anyhow::Result<Producer> {
    check_sending(common).await?;
    let options = ProducerOptions {
        give_up_when_refused: true,
        ..Default::default()
    };
    Ok(Producer::start(&common.redis, &common.stream, options)?)
}

/// The one-line error of a one-shot command whose producer Redis refused
/// (an XADD failed: the stream's last ID is the largest possible, a
/// permission was taken away…), instead of saying "sent".
pub(crate) fn refused(producer: &Producer, common: &Common) -> anyhow::Result<()> {
    match producer.refused() {
        None => Ok(()),
        Some(why) => Err(anyhow!(
            "could not send hits to {} on Redis at {}: {why}",
            common.stream.stream,
            redact_url(&common.redis.url)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::cause;

    /// An error as Redis words it (`-CODE detail`).
    fn reply(text: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
            .and_then(redis::Value::extract_error)
            .unwrap_err()
    }

    /// A missing password is shown with the colon that makes it one
    /// (`redis://PASSWORD@HOST` is read as a user name); a password Redis
    /// has none for is said so, not as a wrong one.
    #[test]
    fn password_refusals_show_the_form_that_works() {
        let noauth = cause(&reply("NOAUTH Authentication required."));
        assert!(noauth.contains("redis://:PASSWORD@HOST:PORT"), "{noauth}");
        assert!(
            noauth.contains("redis://USER:PASSWORD@HOST:PORT"),
            "{noauth}"
        );
        assert!(!noauth.contains("[USER:]PASSWORD"), "{noauth}");
        let needless = cause(&reply(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ));
        assert!(
            needless.contains("called without any password configured"),
            "{needless}"
        );
        assert!(needless.contains("remove the password"), "{needless}");
        assert!(!needless.contains("WRONGPASS"), "{needless}");
    }
}
