//! The fence of the leader's writes: what every script of its duties
//! (`clean.lua`, `trim.lua`, `forget.lua`, after `fence.lua`) checks before
//! it writes, so that a leader that lost its lease (paused past it, or its
//! write delayed in flight) cannot race the next one.
//!
//! - **One Redis**: the leader's token, checked against the lease key in the
//!   same script that writes. Nothing to fetch: [`Fence::take`] only asks
//!   [`Lease::held`].
//! - **A cluster**: a script may touch one hash slot only, and the lease
//!   lives in another slot than the counters, streams and `known:` it
//!   guards. Checking the lease from Rust right before each write would
//!   leave a window as long as a write can be delayed (the cluster client
//!   resends a command for up to its reply timeout, seconds during a
//!   failover). So the fence is a *fencing token*: at the start of a pass
//!   the leader asks `epoch.lua` for an epoch, which it issues only while
//!   the lease holds this leader's token (both keys in the lease's slot),
//!   each larger than the one before. Every fenced script then shows this
//!   epoch to a fence key in its own slot ([`Keys::fence`], tagged with
//!   [`crate::model::slots::tag_for_slot`]), which keeps the largest epoch
//!   seen and refuses smaller ones. A stale leader is refused in every slot
//!   a newer leader has written; where the newer one has not written yet,
//!   its late write is one it might have made just before losing the lease.
//!   That is harmless for each duty: deleting samples older than the
//!   horizon is what any leader does (a stale one computed an older
//!   horizon, so deletes less); a trim computes its bound atomically from
//!   the groups in the same script; and a removal from `known:` is re-checked
//!   (see [`crate::service::forget`]). A new leader's first pass moves the
//!   fence of `known:`'s slot at once, so the one write that could orphan a
//!   counter is refused first.

use crate::model::keys::Keys;
use crate::service::leader::Lease;
use crate::store::connect::{Conn, StoreResult};
use crate::store::scripts::EPOCH;

/// How one pass of the leader's duties proves its right to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fence {
    /// One Redis: the lease key and the leader's token.
    Token {
        /// The lease key.
        lease: String,
        /// The leader's token.
        token: String,
    },
    /// A cluster: an epoch issued to the leader for this pass.
    Epoch(u64),
}

impl Fence {
    /// The fence for a pass starting now, or `None` when `lease` is not
    /// held (then nothing may be written). On a cluster this asks Redis for
    /// a new epoch (one round trip).
    pub(crate) async fn take(
        conn: &mut Conn,
        keys: &Keys,
        lease: &Lease,
    ) -> StoreResult<Option<Fence>> {
        if !lease.held() {
            return Ok(None);
        }
        if !conn.is_cluster() {
            return Ok(Some(Fence::Token {
                lease: lease.key().to_string(),
                token: lease.token().to_string(),
            }));
        }
        let epoch: i64 = EPOCH
            .evalsha(2)
            .arg(lease.key())
            .arg(keys.leader_epoch(lease.key()))
            .arg(lease.token())
            .query_async(conn)
            .await?;
        Ok((epoch > 0).then_some(Fence::Epoch(epoch as u64)))
    }

    /// The fence's key for a script that writes `key` (and only keys of its
    /// hash slot): the lease itself on one Redis, else the fence key of
    /// `key`'s slot.
    pub(crate) fn key(&self, keys: &Keys, key: &str) -> String {
        match self {
            Fence::Token { lease, .. } => lease.clone(),
            Fence::Epoch(_) => keys.fence(key),
        }
    }

    /// The fence's argument (a script's `ARGV[1]`): the token, or
    /// `epoch:N`.
    pub(crate) fn arg(&self) -> String {
        match self {
            Fence::Token { token, .. } => token.clone(),
            Fence::Epoch(n) => format!("epoch:{n}"),
        }
    }

    /// Whether this is a cluster's epoch fence.
    pub(crate) fn is_epoch(&self) -> bool {
        matches!(self, Fence::Epoch(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_fence_is_the_lease_and_an_epoch_fence_a_key_in_the_slot() {
        let keys = Keys::new(&Default::default(), &Default::default());
        let token = Fence::Token {
            lease: "hitcount:leader".into(),
            token: "w1/00ff".into(),
        };
        assert_eq!(token.key(&keys, "count:60:a"), "hitcount:leader");
        assert_eq!(token.arg(), "w1/00ff");
        assert!(!token.is_epoch());
        let epoch = Fence::Epoch(42);
        assert_eq!(epoch.key(&keys, "count:60:a"), keys.fence("count:60:a"));
        assert_eq!(epoch.arg(), "epoch:42");
        assert!(epoch.is_epoch());
    }
}
