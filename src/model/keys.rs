//! Every Redis key name hitcount reads or writes, built here and nowhere else.
//!
//! Two families:
//! - The counter layout, a contract with readers in any language (the seeds'
//!   *Redis in Action* §5.2 layout): ZSET `known:` of members `PREC:NAME`, and
//!   HASH `count:PREC:NAME` of bucket start → count. A prefix namespaces them.
//! - hitcount's own bookkeeping next to the stream: fencing epochs, window
//!   records and their index. They share the stream's Redis Cluster hash slot
//!   (a `{hash tag}` on the stream name), so the one atomic step that checks
//!   ownership, records a window and dead-letters can run as a single script
//!   on Cluster too. Each is scoped by group, so two groups on one stream never
//!   share state.

use crate::model::config::{LayoutArgs, StreamArgs};

/// How long a consumer name's registration lives without renewal, in ms:
/// the longest a worker restarted under its own name waits for its old one
/// to lapse. Written here, beside the key, because the commit fence and the
/// registration both set it.
pub const REGISTRATION_LIFETIME_MS: u64 = 15_000;

/// Key names for one deployment (prefix, stream, group).
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
    /// The stream of hit events.
    pub stream: String,
    /// The consumer group.
    pub group: String,
    /// The dead-letter stream.
    pub dead: String,
    /// Base of the bookkeeping keys: carries the stream's hash slot.
    state: String,
}

impl Keys {
    /// Keys for the given layout and stream settings.
    pub fn new(layout: &LayoutArgs, stream: &StreamArgs) -> Self {
        Keys {
            prefix: layout.prefix.clone(),
            stream: stream.stream.clone(),
            group: stream.group.clone(),
            dead: stream.dead_stream.clone(),
            state: format!(
                "{}{}:hc:{}",
                layout.prefix,
                slot_tagged(&stream.stream),
                stream.group
            ),
        }
    }

    /// The key prefix (may be empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// ZSET of every counter that has data: `known:`.
    pub fn known(&self) -> String {
        format!("{}known:", self.prefix)
    }

    /// The `known:` member of a counter: `PREC:NAME` (no prefix).
    pub fn member(precision: u32, name: &str) -> String {
        format!("{precision}:{name}")
    }

    /// HASH of a counter's samples: `count:PREC:NAME`.
    pub fn count(&self, precision: u32, name: &str) -> String {
        format!("{}count:{precision}:{name}", self.prefix)
    }

    /// HASH key of a counter from its `known:` member.
    pub fn count_of_member(&self, member: &str) -> String {
        format!("{}count:{member}", self.prefix)
    }

    /// HASH consumer → fencing epoch. Claiming a consumer's entries bumps its
    /// epoch, so its window in flight can no longer be committed.
    pub fn epochs(&self) -> String {
        format!("{}:epochs", self.state)
    }

    /// ZSET window id → commit time (ms): windows recorded but not finished.
    pub fn windows(&self) -> String {
        format!("{}:windows", self.state)
    }

    /// HASH of one recorded window: owner, ids, cells, chunking.
    pub fn window(&self, id: &str) -> String {
        format!("{}:win:{id}", self.state)
    }

    /// STRING: a live worker's registration of its consumer name (lives
    /// [`REGISTRATION_LIFETIME_MS`] without renewal), holding
    /// its token and renewed like a lease; a second worker with the same name
    /// is refused while it lives.
    pub fn consumer_registration(&self, consumer: &str) -> String {
        format!("{}:consumer:{consumer}", self.state)
    }

    /// HASH consumer → last error text, shown when its entries are dead-lettered
    /// after too many deliveries.
    pub fn last_errors(&self) -> String {
        format!("{}:lasterr", self.state)
    }

    /// STRING: a producer's last batch number appended (its dedup; expires).
    pub fn producer(&self, id: &str) -> String {
        format!("{}:hc:producer:{id}", slot_tagged(&self.stream))
    }

    /// HASH chunk index → failures: marks a window's chunks as applied so that
    /// replays do nothing. Expires on its own.
    pub fn applied_marker(&self, window_id: &str) -> String {
        format!("{}hc:applied:{window_id}", self.prefix)
    }

    /// STRING: the leader lease, holding the leader's token. `name` is the
    /// configured `--leader-key`; the prefix goes in front like everywhere.
    pub fn leader(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// HASH with the leader's last cleaner pass (when, how long, removed).
    pub fn cleaner_status(&self) -> String {
        format!("{}hc:cleaner", self.prefix)
    }
}

/// A name that hashes to the same Cluster slot as `key`: `key` itself when it
/// already has a hash tag, else `{key}`.
pub fn slot_tagged(key: &str) -> String {
    if has_hash_tag(key) {
        key.to_string()
    } else {
        format!("{{{key}}}")
    }
}

/// Whether Redis Cluster would hash `key` by a `{tag}` inside it.
fn has_hash_tag(key: &str) -> bool {
    match key.find('{') {
        Some(open) => key[open + 1..].find('}').is_some_and(|len| len > 0),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(prefix: &str) -> Keys {
        Keys::new(
            &LayoutArgs {
                prefix: prefix.into(),
                ..LayoutArgs::default()
            },
            &StreamArgs::default(),
        )
    }

    #[test]
    fn counter_layout_is_the_contract() {
        let k = keys("");
        assert_eq!(k.known(), "known:");
        assert_eq!(k.count(60, "page:home"), "count:60:page:home");
        assert_eq!(Keys::member(86400, "x"), "86400:x");
        assert_eq!(k.count_of_member("5:x"), "count:5:x");
        let p = keys("app1:");
        assert_eq!(p.known(), "app1:known:");
        assert_eq!(p.count(1, "a"), "app1:count:1:a");
        assert_eq!(p.leader("hitcount:leader"), "app1:hitcount:leader");
    }

    #[test]
    fn state_keys_share_the_stream_slot() {
        let k = keys("");
        assert_eq!(k.epochs(), "{hits}:hc:hitcount:epochs");
        assert_eq!(k.window("w1"), "{hits}:hc:hitcount:win:w1");
        assert_eq!(slot_tagged("{app}.hits"), "{app}.hits");
        assert_eq!(slot_tagged("a{}b"), "{a{}b}");
    }
}
