//! The Lua scripts hitcount runs on Redis, one `.lua` file each, and the code
//! that loads and invokes them.
//!
//! Scripts are sent as EVALSHA, mostly inside pipelines; [`load_all`] runs
//! after every (re)connection so a restarted Redis has them, and a NOSCRIPT
//! error is treated as transient (the caller reconnects, which reloads).
//! Each script stays well under 10 ms at default settings (chunk sizes and
//! read counts are chosen for it), so Redis never stalls other clients.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;

use crate::store::client::Conn;
use redis::{Cmd, RedisResult, Script};

/// A script: its file name, its source and its SHA1.
pub(crate) struct Lua {
    name: &'static str,
    source: &'static str,
    script: Script,
}

impl Lua {
    fn new(name: &'static str, source: &'static str) -> Lua {
        Lua {
            name,
            source,
            script: Script::new(source),
        }
    }

    /// An EVALSHA command for this script with `nkeys` keys; the caller adds
    /// the keys, then the arguments.
    pub(crate) fn evalsha(&self, nkeys: usize) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash()).arg(nkeys);
        cmd
    }

    /// The script's SHA1, as Redis names it.
    pub(crate) fn hash(&self) -> &str {
        self.script.get_hash()
    }
}

/// The file name of the script Redis knows by `sha` (as SLOWLOG or MONITOR
/// show an EVALSHA), if it is one of hitcount's.
pub fn name_of(sha: &str) -> Option<&'static str> {
    all()
        .into_iter()
        .find(|lua| lua.hash().eq_ignore_ascii_case(sha))
        .map(|lua| lua.name)
}

/// Each script is its file, or several files one after the other (`a.lua` +
/// `b.lua`: `fence.lua` puts the leader's fence in front of a duty's body).
macro_rules! scripts {
    ($($(#[$doc:meta])* $name:ident = $first:literal $(+ $more:literal)*;)*) => {
        $($(#[$doc])* pub(crate) static $name: LazyLock<Lua> =
            LazyLock::new(|| Lua::new(concat!($first $(, "+", $more)*), concat!(include_str!($first) $(, include_str!($more))*)));)*
        /// Every script, for loading.
        fn all() -> Vec<&'static Lua> { vec![$(&*$name),*] }
    };
}

scripts! {
    /// Finish the previous window and commit the next (fence, record, dead letters).
    COMMIT = "commit.lua";
    /// Apply chunks of recorded windows and sums in one hash slot to the
    /// counters and statistics, each at most once.
    APPLY = "apply.lua";
    /// Record the summed count cells of several windows as one, taking
    /// them out of those windows.
    CARRY = "carry.lua";
    /// Take a recorded window for applying it, unless the carry took its cells.
    TAKE = "take.lua";
    /// Claim idle entries of other consumers, bumping their epochs.
    CLAIM = "claim.lua";
    /// Append a producer's batch at most once.
    PRODUCE = "produce.lua";
    /// Append a request's hits to a shard, each hit with an id once within a horizon.
    INGEST = "ingest.lua";
    /// Append a batch of an imported file's hits with the file's progress.
    IMPORT = "import.lua";
    /// Read own pending entries without counting deliveries.
    PENDING = "pending.lua";
    /// Remove consumers that are gone and own nothing.
    GC = "gc.lua";
    /// Take a lease nobody holds (or that a key of no holder blocks).
    ACQUIRE = "acquire.lua";
    /// Renew the leader lease if it is still this worker's.
    RENEW = "renew.lua";
    /// Release the leader lease (or a consumer registration) if it is still this worker's.
    RELEASE = "release.lua";
    /// Take or keep a consumer name's registration.
    REGISTER = "register.lua";
    /// Move a window record that cannot be read back to the dead-letter stream.
    QUARANTINE = "quarantine.lua";
    /// Delete old samples of a batch of counters; forget those left empty (fenced).
    CLEAN = "fence.lua" + "clean.lua";
    /// Trim the stream below what every group still needs (fenced).
    TRIM = "fence.lua" + "trim.lua";
    /// Issue a fencing epoch to the leader of the moment (a cluster's fence).
    EPOCH = "epoch.lua";
    /// On a cluster: remove emptied counters from known:, journaled (fenced).
    FORGET = "fence.lua" + "forget.lua";
    /// Mark this worker live (or leaving) and count the live workers of a sharded stream.
    MEMBERS = "members.lua";
}

/// Loads every script into Redis' script cache: in one pipeline on one
/// node; on a cluster, one `SCRIPT LOAD` each to every master serving
/// slots (a pipeline would go to one node only). Replicas are left out: a
/// dead one must not stop the load, and a replica promoted later answers
/// NOSCRIPT once, which makes the caller reconnect and load again.
pub(crate) async fn load_all(conn: &mut Conn) -> RedisResult<()> {
    if let Conn::Cluster(cluster, deadline) = conn {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
        for lua in all() {
            let mut cmd = redis::cmd("SCRIPT");
            cmd.arg("LOAD").arg(lua.source);
            let load = cluster.route_command(
                cmd,
                RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::AllSucceeded),
                )),
            );
            tokio::time::timeout(*deadline, load).await.map_err(|_| {
                redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "SCRIPT LOAD timed out",
                ))
            })??;
        }
        return Ok(());
    }
    let mut pipe = redis::pipe();
    for lua in all() {
        pipe.cmd("SCRIPT").arg("LOAD").arg(lua.source);
    }
    let hashes: Vec<String> = pipe.query_async(conn).await?;
    debug_assert!(hashes.iter().zip(all()).all(|(h, l)| h == l.hash()));
    Ok(())
}

/// Deletes `key` if it still holds `token` (`release.lua`): how the leader
/// lease and a consumer name registration are given up. Returns whether it
/// was released.
pub(crate) async fn release_if_held<C: ConnectionLike>(
    conn: &mut C,
    key: &str,
    token: &str,
) -> RedisResult<bool> {
    let released: i64 = RELEASE
        .evalsha(1)
        .arg(key)
        .arg(token)
        .query_async(conn)
        .await?;
    Ok(released == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_is_named_by_its_files_from_its_sha() {
        assert_eq!(name_of(CLAIM.hash()), Some("claim.lua"));
        assert_eq!(
            name_of(&CLEAN.hash().to_uppercase()),
            Some("fence.lua+clean.lua")
        );
        assert_eq!(name_of("0000000000000000000000000000000000000000"), None);
    }
}

// A real Redis comes from the test kit, built with the `cli` feature.
#[cfg(all(test, feature = "cli"))]
mod redis_tests;
