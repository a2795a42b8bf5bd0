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

use crate::model::config::{LayoutArgs, StreamArgs, MAX_SHARDS};
use crate::model::slots::{hash_tag, slot, tag_for_slot};

/// How long a consumer name's registration lives without renewal, in ms:
/// the longest a worker restarted under its own name waits for its old one
/// to lapse. Written here, beside the key, because the commit fence and the
/// registration both set it.
pub(crate) const REGISTRATION_LIFETIME_MS: u64 = 15_000;

/// Key names for one stream shard of a deployment (prefix, stream, group).
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
    /// The stream of hit events (this shard's).
    pub stream: String,
    /// The consumer group.
    pub group: String,
    /// The dead-letter stream (this shard's).
    pub dead: String,
    /// This shard's number, `0..shards`.
    pub shard: u32,
    /// How many shards the stream has.
    pub shards: u32,
    /// Base of the bookkeeping keys: carries the stream's hash slot.
    state: String,
}

impl Keys {
    /// Keys of an unsharded stream on one Redis (shard 0 of 1): the
    /// counters' keys, and the stream's as configured.
    pub fn new(layout: &LayoutArgs, stream: &StreamArgs) -> Self {
        Keys::shard(layout, stream, 0, false)
    }

    /// Keys of the unsharded stream `stream` read by `group`, its dead
    /// letters in `STREAM:dead`, its counters under `prefix`, every other
    /// setting at its default.
    pub fn named(stream: &str, group: &str, prefix: &str) -> Self {
        let layout = LayoutArgs {
            prefix: prefix.into(),
            ..LayoutArgs::default()
        };
        let stream = StreamArgs {
            stream: stream.into(),
            group: group.into(),
            dead_stream: format!("{stream}:dead"),
            ..StreamArgs::default()
        };
        Keys::new(&layout, &stream)
    }

    /// Keys of shard `k` of `stream.shards`. With one shard the stream is
    /// `STREAM` itself and, on one Redis, its dead letters `DEAD_STREAM`; with
    /// several, shard k is `STREAM:{k}`. A shard's dead-letter stream must
    /// share its Cluster slot (dead letters are written by the commit
    /// script): `DEAD_STREAM:{k}`, or `DEAD_STREAM:{STREAM}` for one shard
    /// on a cluster. See [`Keys::slot_problem`] for what is checked.
    pub fn shard(layout: &LayoutArgs, stream: &StreamArgs, k: u32, clustered: bool) -> Self {
        let shards = stream.shards.max(1);
        let (name, dead) = if shards == 1 {
            let dead = if clustered {
                format!("{}:{}", stream.dead_stream, slot_tagged(&stream.stream))
            } else {
                stream.dead_stream.clone()
            };
            (stream.stream.clone(), dead)
        } else {
            (
                format!("{}:{{{k}}}", stream.stream),
                format!("{}:{{{k}}}", stream.dead_stream),
            )
        };
        Keys {
            prefix: layout.prefix.clone(),
            state: format!(
                "{}{}:hc:{}",
                layout.prefix,
                slot_tagged(&name),
                stream.group
            ),
            stream: name,
            group: stream.group.clone(),
            dead,
            shard: k.min(shards - 1),
            shards,
        }
    }

    /// The keys of every shard, in shard order.
    pub fn all_shards(layout: &LayoutArgs, stream: &StreamArgs, clustered: bool) -> Vec<Keys> {
        (0..stream.shards.max(1))
            .map(|k| Keys::shard(layout, stream, k, clustered))
            .collect()
    }

    /// The streams of this stream name that `stream.shards` leaves unread
    /// (where hits sent with another count land): with one shard, every
    /// `STREAM:{k}` a count up to [`MAX_SHARDS`] names; with several,
    /// `STREAM` itself and `STREAM:{k}` from the count up. Their dead
    /// letters do not matter here.
    pub fn unread_streams(layout: &LayoutArgs, stream: &StreamArgs) -> Vec<Keys> {
        let shards = stream.shards.max(1);
        let as_shards = |n: u32| StreamArgs {
            shards: n,
            ..stream.clone()
        };
        let plain = (shards > 1).then(|| Keys::shard(layout, &as_shards(1), 0, false));
        let first = if shards == 1 { 0 } else { shards };
        let most = as_shards(MAX_SHARDS);
        plain
            .into_iter()
            .chain((first..MAX_SHARDS).map(|k| Keys::shard(layout, &most, k, false)))
            .collect()
    }

    /// The shard the Rust producer sends `name`'s hits to: FNV-1a (64 bit)
    /// of the name's UTF-8 bytes, modulo the shard count, so one name's
    /// hits aggregate in one shard. Any shard is counted alike.
    pub fn shard_of_name(name: &str, shards: u32) -> u32 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in name.as_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        (h % shards.max(1) as u64) as u32
    }

    /// Why this shard's keys cannot work on a Redis Cluster, if they cannot:
    /// the commit script touches the stream, its dead letters and the
    /// bookkeeping keys at once, so all must share one hash slot (a `{` in
    /// the prefix or in the dead-letter stream's name can break that).
    pub fn slot_problem(&self) -> Option<String> {
        let want = slot(self.stream.as_bytes());
        let keys = [
            ("the dead-letter stream", self.dead.clone()),
            ("the bookkeeping keys", self.epochs()),
            ("the producers' keys", self.producer("p")),
        ];
        keys.into_iter()
            .find(|(_, k)| slot(k.as_bytes()) != want)
            .map(|(what, key)| {
                format!(
                    "on a Redis Cluster {what} ({key}) must share the stream {}'s hash slot: \
                     remove the `{{…}}` from HITCOUNT_PREFIX / HITCOUNT_DEAD_STREAM",
                    self.stream
                )
            })
    }

    /// Why a stream's shards cannot work on a Redis Cluster with these
    /// settings, if they cannot: the [`Keys::slot_problem`] of the first
    /// shard that has one. Workers refuse to start with it, and producers
    /// refuse to send what no worker would count.
    pub fn cluster_problem(layout: &LayoutArgs, stream: &StreamArgs) -> Option<String> {
        Keys::all_shards(layout, stream, true)
            .iter()
            .find_map(Keys::slot_problem)
    }

    /// The key prefix (may be empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// ZSET of every counter that has data: `known:`.
    pub fn known(&self) -> String {
        self.known_of(Family::Counts)
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
        self.hash_of_member(Family::Counts, member)
    }

    /// ZSET of every statistics hash that has data: `stats:known:`, members
    /// `PREC:NAME` as in `known:`.
    pub fn stats_known(&self) -> String {
        self.known_of(Family::Stats)
    }

    /// HASH of a counter's statistics: `stats:PREC:NAME` (fields in
    /// [`crate::model::stats`]).
    pub fn stats(&self, precision: u32, name: &str) -> String {
        format!("{}stats:{precision}:{name}", self.prefix)
    }

    /// HASH key of a statistics hash from its `stats:known:` member.
    pub fn stats_of_member(&self, member: &str) -> String {
        self.hash_of_member(Family::Stats, member)
    }

    /// The ZSET listing the hashes of `family`: `known:` or `stats:known:`.
    pub fn known_of(&self, family: Family) -> String {
        format!("{}{}", self.prefix, family.names().0)
    }

    /// The hash of `family` behind one of its ZSET's members `PREC:NAME`.
    pub fn hash_of_member(&self, family: Family, member: &str) -> String {
        format!("{}{}{member}", self.prefix, family.names().1)
    }

    /// SET: on a cluster, the members of [`Keys::known_of`] `family` the
    /// cleaner removed and has not yet re-checked, in that ZSET's hash slot
    /// (see `forget.lua`). For counts, [`Keys::forgetting`].
    pub fn forgetting_of(&self, family: Family) -> String {
        self.in_slot_of(family.names().2, &self.known_of(family))
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

    /// STRING: a hit id `ingest` appended to this shard (expires after
    /// the de-duplication horizon): its key in the shard's hash slot, so
    /// the one script that sets it also appends the hit on a cluster.
    pub(crate) fn ingest_id(&self, id: &str) -> String {
        format!("{}:hc:ingest:{id}", slot_tagged(&self.stream))
    }

    /// STRING: a hit id a page (a request with an `Origin`, no token)
    /// gave, by `digest` (the hex SHA-1 of the id), as
    /// [`Keys::ingest_id`]: a namespace of its own, so that a page cannot
    /// take an id ahead of the servers that use it (a server's id would
    /// have to be `page:` and such a digest to meet one).
    pub(crate) fn ingest_page_id(&self, digest: &str) -> String {
        format!("{}:hc:ingest:page:{digest}", slot_tagged(&self.stream))
    }

    /// STRING `BYTES:LINES:SHA1`: how far `hitcount import` got through the
    /// file identified by `file` (hex, then `:N` for the Nth file with that
    /// identity), and the hash of the bytes before (`BYTES:LINES` from an
    /// earlier version), in this shard's slot so that one script appends a
    /// batch of its hits and moves it on (expires).
    pub fn import_progress(&self, file: &str) -> String {
        format!(
            "{}{}:hc:import:{file}",
            self.prefix,
            slot_tagged(&self.stream)
        )
    }

    /// ZSET worker → expiry (ms): the live workers sharing the shards. One
    /// key for every shard (in the unsharded stream name's slot).
    pub fn members(&self) -> String {
        format!("{}:members", self.state)
    }

    /// STRING: how many shards the stream is read with, recorded by the
    /// first worker; a worker with another count is refused. One key for
    /// every shard (in the unsharded stream name's slot).
    pub fn shard_count(&self) -> String {
        format!("{}:shards", self.state)
    }

    /// STRING: the layout the counters under this prefix are counted with
    /// (precisions, samples, quantile precisions), recorded by the first
    /// worker; a worker (of any stream: they share the counters, the
    /// cleaner and its lease) with another is refused.
    pub(crate) fn layout(&self) -> String {
        format!("{}hc:layout", self.prefix)
    }

    /// STRING: the lease of this shard, holding its reader's token (only
    /// with several shards: one shard is read by every worker).
    pub fn shard_lease(&self) -> String {
        format!("{}:lease", self.state)
    }

    /// HASH chunk index → failures: marks a window's chunks as applied so that
    /// replays do nothing. Expires on its own.
    pub fn applied_marker(&self, window_id: &str) -> String {
        format!("{}hc:applied:{window_id}", self.prefix)
    }

    /// The applied marker of a window's chunks in one Cluster hash slot:
    /// `tag` (see [`crate::model::slots::tag_for_slot`]) puts it in the
    /// slot of the counters it guards.
    pub fn applied_marker_tagged(&self, window_id: &str, tag: &str) -> String {
        format!("{}hc:applied:{{{tag}}}:{window_id}", self.prefix)
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

    /// STRING: the counter of the leader's fencing epochs on a cluster, in
    /// the hash slot of the lease key `lease` (so one script can check the
    /// lease and issue the next epoch).
    pub fn leader_epoch(&self, lease: &str) -> String {
        self.in_slot_of("leader-epoch", lease)
    }

    /// STRING: on a cluster, the fence of the hash slot of `key`: the
    /// largest leader epoch that wrote there (see `fence.lua`). Expires a
    /// day after its last change.
    pub fn fence(&self, key: &str) -> String {
        self.in_slot_of("fence", key)
    }

    /// SET: on a cluster, the `known:` members the cleaner removed and has
    /// not yet re-checked, in `known:`'s hash slot (see `forget.lua`).
    pub fn forgetting(&self) -> String {
        self.forgetting_of(Family::Counts)
    }

    /// `PREFIXhc:WHAT:{TAG}`: a bookkeeping key in the hash slot of `key`
    /// (see [`tag_for_slot`]).
    fn in_slot_of(&self, what: &str, key: &str) -> String {
        let tag = tag_for_slot(slot(key.as_bytes()));
        format!("{}hc:{what}:{{{tag}}}", self.prefix)
    }
}

/// A family of time-bucketed hashes, each listed in its own ZSET of
/// `PREC:NAME` members and kept to `samples` buckets per precision by the
/// cleaner: the counts (`count:`, `known:`) and the statistics (`stats:`,
/// `stats:known:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `count:PREC:NAME`, fields `B` (the bucket start).
    Counts,
    /// `stats:PREC:NAME`, fields `B:…` ([`crate::model::stats`]).
    Stats,
}

impl Family {
    /// Both, in the order the cleaner visits them.
    pub const ALL: [Family; 2] = [Family::Counts, Family::Stats];

    /// Its keys' names, each behind the prefix: its ZSET, the head of its
    /// hashes (before `PREC:NAME`) and, on a cluster, the cleaner's journal
    /// (`hc:WHAT:{TAG}`, see [`Keys::forgetting_of`]).
    fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Family::Counts => ("known:", "count:", "forgetting"),
            Family::Stats => ("stats:known:", "stats:", "stats-forgetting"),
        }
    }

    /// The bucket start a field of this family's hashes belongs to; `None`
    /// for a field of another shape (never touched by the cleaner).
    pub fn bucket_of(self, field: &[u8]) -> Option<i64> {
        match self {
            Family::Counts => std::str::from_utf8(field).ok()?.parse().ok(),
            Family::Stats => crate::model::stats_hash::bucket_of_field(field),
        }
    }
}

/// A name that hashes to the same Cluster slot as `key`: `key` itself when it
/// already has a hash tag, else `{key}`.
pub(crate) fn slot_tagged(key: &str) -> String {
    if hash_tag(key.as_bytes()).is_some() {
        key.to_string()
    } else {
        format!("{{{key}}}")
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
    fn unread_streams_are_those_another_count_writes() {
        let names = |shards: u32| {
            let stream = StreamArgs {
                shards,
                ..StreamArgs::default()
            };
            Keys::unread_streams(&LayoutArgs::default(), &stream)
                .into_iter()
                .map(|k| k.stream)
                .collect::<Vec<_>>()
        };
        let one = names(1);
        assert_eq!(one.len(), MAX_SHARDS as usize);
        assert_eq!(
            (one[0].as_str(), one[255].as_str()),
            ("hits:{0}", "hits:{255}")
        );
        let four = names(4);
        assert_eq!(four.len(), 1 + MAX_SHARDS as usize - 4);
        assert_eq!((four[0].as_str(), four[1].as_str()), ("hits", "hits:{4}"));
        assert!(names(MAX_SHARDS) == vec!["hits".to_string()]);
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

    #[test]
    fn an_imported_files_progress_shares_its_shards_slot() {
        assert_eq!(keys("").import_progress("ab12"), "{hits}:hc:import:ab12");
        assert_eq!(
            keys("app1:").import_progress("ab12"),
            "app1:{hits}:hc:import:ab12"
        );
        let stream = StreamArgs {
            shards: 4,
            ..StreamArgs::default()
        };
        let third = Keys::shard(&LayoutArgs::default(), &stream, 3, true);
        let key = third.import_progress("ab12");
        assert_eq!(key, "hits:{3}:hc:import:ab12");
        assert_eq!(slot(key.as_bytes()), slot(third.stream.as_bytes()));
    }

    #[test]
    fn shards_are_named_by_the_contract() {
        let layout = LayoutArgs::default();
        let one = StreamArgs::default();
        let k = Keys::shard(&layout, &one, 0, false);
        assert_eq!((k.stream.as_str(), k.dead.as_str()), ("hits", "hits:dead"));
        let k = Keys::shard(&layout, &one, 0, true);
        assert_eq!(
            (k.stream.as_str(), k.dead.as_str()),
            ("hits", "hits:dead:{hits}")
        );
        assert_eq!(k.slot_problem(), None);
        let many = StreamArgs {
            shards: 16,
            ..StreamArgs::default()
        };
        let all = Keys::all_shards(&layout, &many, true);
        assert_eq!(all.len(), 16);
        assert_eq!(all[15].stream, "hits:{15}");
        assert_eq!(all[15].dead, "hits:dead:{15}");
        assert_eq!(all[3].shard_lease(), "hits:{3}:hc:hitcount:lease");
        assert_eq!(all[3].producer("p1"), "hits:{3}:hc:producer:p1");
        assert!(all.iter().all(|k| k.slot_problem().is_none()));
        // Single Redis, several shards: the same names.
        assert_eq!(Keys::shard(&layout, &many, 2, false).dead, "hits:dead:{2}");
        // A tag in the prefix moves the bookkeeping away from the stream.
        let tagged = LayoutArgs {
            prefix: "{app}:".into(),
            ..LayoutArgs::default()
        };
        let k = Keys::shard(&tagged, &one, 0, true);
        assert!(k.slot_problem().unwrap().contains("HITCOUNT_PREFIX"));
    }

    #[test]
    fn the_leaders_cluster_keys_share_the_slots_they_guard() {
        for prefix in ["", "app1:"] {
            let k = keys(prefix);
            let lease = k.leader("hitcount:leader");
            let epoch = k.leader_epoch(&lease);
            assert!(epoch.starts_with(&format!("{prefix}hc:leader-epoch:{{")));
            assert_eq!(slot(epoch.as_bytes()), slot(lease.as_bytes()));
            let known = k.known();
            assert_eq!(slot(k.forgetting().as_bytes()), slot(known.as_bytes()));
            assert_eq!(slot(k.fence(&known).as_bytes()), slot(known.as_bytes()));
            let count = k.count(60, "page:{home}");
            assert_eq!(slot(k.fence(&count).as_bytes()), slot(count.as_bytes()));
            assert!(k.fence(&count).starts_with(&format!("{prefix}hc:fence:{{")));
        }
    }

    #[test]
    fn each_family_has_its_zset_hashes_and_journal() {
        for prefix in ["", "app1:"] {
            let k = keys(prefix);
            assert_eq!(k.known_of(Family::Counts), k.known());
            assert_eq!(k.known_of(Family::Stats), format!("{prefix}stats:known:"));
            assert_eq!(
                k.hash_of_member(Family::Stats, "60:a"),
                format!("{prefix}stats:60:a")
            );
            assert_eq!(k.hash_of_member(Family::Counts, "60:a"), k.count(60, "a"));
            assert_eq!(k.forgetting_of(Family::Counts), k.forgetting());
            let journal = k.forgetting_of(Family::Stats);
            assert_ne!(journal, k.forgetting());
            assert_eq!(slot(journal.as_bytes()), slot(k.stats_known().as_bytes()));
        }
        assert_eq!(Family::Counts.bucket_of(b"120"), Some(120));
        assert_eq!(Family::Counts.bucket_of(b"120:count"), None);
        assert_eq!(Family::Stats.bucket_of(b"120:count"), Some(120));
        assert_eq!(Family::Stats.bucket_of(b"120"), None);
    }

    #[test]
    fn names_go_to_a_fixed_shard() {
        // FNV-1a 64 of "" is the offset basis; of "a" a published value.
        assert_eq!(
            Keys::shard_of_name("", 1 << 31),
            (0xcbf2_9ce4_8422_2325u64 % (1 << 31)) as u32
        );
        assert_eq!(
            Keys::shard_of_name("a", 1000),
            (0xaf63_dc4c_8601_ec8cu64 % 1000) as u32
        );
        assert_eq!(Keys::shard_of_name("page:home", 1), 0);
        let spread: std::collections::HashSet<u32> = (0..1000)
            .map(|i| Keys::shard_of_name(&format!("n{i}"), 16))
            .collect();
        assert_eq!(spread.len(), 16);
    }
}
