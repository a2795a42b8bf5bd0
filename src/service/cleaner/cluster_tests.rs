//! The cleaner on a real local Redis Cluster (3 masters, 3 replicas): it removes old samples at every precision exactly as
//! the seeds' `clean_counters` would, takes counters out of `known:` only
//! when their hashes are empty, never orphans a counter written while it
//! cleans (nor when the leader dies between removal and re-check, nor when
//! the master of `known:` dies during a pass), never
//! trips the 10 ms SLOWLOG on any master.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;
    use std::time::Instant;

    use crate::model::config::{LayoutArgs, StreamArgs};
    use crate::model::keys::{Family, Keys};
    use crate::service::cleaner::Cleaner;
    use crate::service::fence::Fence;
    use crate::service::leader::Lease;
    use crate::store::connect::Conn;
    use crate::testing::{self as common, RedisCluster as Cluster};
    use redis::{Cmd, Value};

    const NOW: i64 = 1_700_000_000;
    const PRECISIONS: [u32; 7] = [1, 5, 60, 300, 3600, 18000, 86400];

    fn keys() -> Keys {
        Keys::new(&LayoutArgs::default(), &StreamArgs::default())
    }

    /// A cleaner holding the lease.
    async fn leader(c: &mut Conn, keys: &Keys) -> (Cleaner, Arc<Lease>) {
        common::cleaning_leader(c, keys).await
    }

    /// Sends commands of any slots, all in flight at once.
    async fn each(c: &mut Conn, cmds: Vec<Cmd>) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cmds = cmds.into_iter().peekable();
        while cmds.peek().is_some() {
            let part: Vec<Cmd> = cmds.by_ref().take(2000).collect();
            out.extend(c.query_each(part).await.unwrap());
        }
        out
    }

    /// `command HASH ARGS…` for the hash of `family` of each of `members`.
    fn per_member<'a>(
        command: &str,
        keys: &Keys,
        family: Family,
        members: impl IntoIterator<Item = &'a String>,
        args: &[String],
    ) -> Vec<Cmd> {
        members
            .into_iter()
            .map(|m| {
                let mut cmd = redis::cmd(command);
                cmd.arg(keys.hash_of_member(family, m)).arg(args);
                cmd
            })
            .collect()
    }

    /// A field of bucket `t` in a hash of `family`.
    fn field(family: Family, t: i64) -> String {
        match family {
            Family::Counts => t.to_string(),
            Family::Stats => format!("{t}:count"),
        }
    }

    /// Adds `members` to `family`'s ZSET, a thousand per ZADD.
    async fn zadd_known(c: &mut Conn, keys: &Keys, family: Family, members: &[String]) {
        for part in members.chunks(1000) {
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(keys.known_of(family));
            for m in part {
                zadd.arg(0).arg(m);
            }
            let _: i64 = zadd.query_async(c).await.unwrap();
        }
    }

    /// Every `known:` member's samples: the counter layout as readers see it.
    type State = BTreeMap<String, BTreeMap<i64, i64>>;

    async fn state(c: &mut Conn, keys: &Keys) -> (BTreeSet<String>, State) {
        let members: BTreeSet<String> = redis::cmd("ZRANGE")
            .arg(keys.known())
            .arg(0)
            .arg(-1)
            .query_async(c)
            .await
            .unwrap();
        let replies = each(
            c,
            per_member("HGETALL", keys, Family::Counts, &members, &[]),
        )
        .await;
        let mut out = State::new();
        for (m, r) in members.iter().zip(replies) {
            let h: BTreeMap<i64, i64> = redis::from_redis_value(r).unwrap();
            out.insert(m.clone(), h);
        }
        (members, out)
    }

    /// The seeds' clean_counters, one pass (number `pass`) at `now`, with the
    /// bugs fixed as in tests/e2e/cleaner.rs.
    fn seeds_pass(st: &mut State, pass: u64, now: i64) {
        let members: Vec<String> = st.keys().cloned().collect();
        for m in members {
            let prec: i64 = m.split_once(':').unwrap().0.parse().unwrap();
            if !pass.is_multiple_of((prec / 60).max(1) as u64) {
                continue;
            }
            let cutoff = now - 120 * prec;
            let samples = st.get_mut(&m).unwrap();
            samples.retain(|&t, _| t > cutoff);
            if samples.is_empty() {
                st.remove(&m);
            }
        }
    }

    /// Counters at every precision, spread over every master: a quarter only
    /// old samples, a quarter mixed, a quarter young, a quarter at the edge;
    /// plus big hashes (paged with HSCAN) old, mixed and young.
    async fn fill(c: &mut Conn, keys: &Keys, names: usize) -> Vec<String> {
        let mut cmds = Vec::new();
        let mut members = Vec::new();
        for &prec in &PRECISIONS {
            let p = i64::from(prec);
            let cutoff = (NOW - 120 * p).div_euclid(p) * p;
            for i in 0..names {
                let member = Keys::member(prec, &format!("page:{i}"));
                let buckets: Vec<i64> = match i % 4 {
                    0 => (1..=30).map(|k| cutoff - k * p).collect(),
                    1 => (-20..=20).map(|k| cutoff + k * p).collect(),
                    2 => (1..=10).map(|k| cutoff + k * p).collect(),
                    _ => vec![NOW - 120 * p, NOW - 120 * p + 1],
                };
                let mut hset = redis::cmd("HSET");
                hset.arg(keys.count_of_member(&member));
                for b in buckets {
                    hset.arg(b).arg(b % 7 + 1);
                }
                cmds.push(hset);
                members.push(member);
            }
        }
        for (name, range) in [
            ("big-old", -3000..0),
            ("big-mixed", -1500..1500),
            ("big-young", 1..3001),
        ] {
            let member = Keys::member(1, name);
            let mut hset = redis::cmd("HSET");
            hset.arg(keys.count_of_member(&member));
            for k in range {
                hset.arg(NOW - 120 + k).arg(1);
            }
            cmds.push(hset);
            members.push(member);
        }
        each(c, cmds).await;
        zadd_known(c, keys, Family::Counts, &members).await;
        members
    }

    /// A single-node connection to the master on `port`.
    async fn node(port: u16) -> Conn {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        Conn::Single(client.get_multiplexed_async_connection().await.unwrap())
    }

    /// A master's replication offset and its first replica's (0 without
    /// one), from `INFO replication`.
    async fn replication_offsets(conn: &mut Conn) -> (i64, i64) {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(conn)
            .await
            .unwrap();
        let field = |line: &str, name: &str| -> Option<i64> {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
        };
        let master = info
            .lines()
            .find_map(|l| field(l, "master_repl_offset:"))
            .unwrap();
        let replica = info
            .lines()
            .filter(|l| l.starts_with("slave0:"))
            .find_map(|l| field(l, "offset="))
            .unwrap_or(0);
        (master, replica)
    }

    /// Arms the 10 ms SLOWLOG on every master and empties it, with every
    /// node ahead of this test's own threads for a core (as the tests on
    /// one Redis have it), so that SLOWLOG times commands, not waits.
    async fn arm_slowlog(cluster: &Cluster) {
        common::note_priority(cluster.raise_priority(-10));
        for port in cluster.master_ports() {
            let mut n = node(port).await;
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("slowlog-log-slower-than")
                .arg(10_000)
                .query_async(&mut n)
                .await
                .unwrap();
            let _: () = redis::cmd("SLOWLOG")
                .arg("RESET")
                .query_async(&mut n)
                .await
                .unwrap();
        }
    }

    /// Every master's SLOWLOG entries, named by port.
    async fn slowlogs(cluster: &Cluster) -> Vec<String> {
        let mut out = Vec::new();
        for port in cluster.master_ports() {
            let mut n = node(port).await;
            out.extend(
                common::slowlog(&mut n)
                    .await
                    .into_iter()
                    .map(|e| format!("{port}: {e}")),
            );
        }
        out
    }

    /// Nothing left behind in the journal of removals from `known:`.
    async fn assert_journal_empty(c: &mut Conn, keys: &Keys) {
        let journal: usize = redis::cmd("SCARD")
            .arg(keys.forgetting())
            .query_async(c)
            .await
            .unwrap();
        assert_eq!(journal, 0, "members removed but never re-checked");
    }

    /// Hashes of `family` that exist, among `members`' (whether known or not).
    async fn existing(
        c: &mut Conn,
        keys: &Keys,
        family: Family,
        members: &[String],
    ) -> BTreeSet<String> {
        let replies = each(c, per_member("EXISTS", keys, family, members, &[])).await;
        members
            .iter()
            .zip(replies)
            .filter(|(_, r)| *r == Value::Int(1))
            .map(|(m, _)| m.clone())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cleaner_on_a_cluster_equals_the_seeds_and_stays_under_10_ms() {
        let _alone = common::exclusive().await;
        common::slowlog_clean_in_one_of(common::SLOWLOG_ATTEMPTS, six_passes).await;
    }

    /// Six passes over ~2,800 counters on 3 masters, each compared with the
    /// seeds'; returns every master's SLOWLOG.
    async fn six_passes() -> Vec<String> {
        let cluster = common::cluster(3, 1);
        let mut c = common::conn(&cluster.url()).await;
        assert!(c.is_cluster());
        let keys = keys();
        let members = fill(&mut c, &keys, 400).await;
        let masters: BTreeSet<u16> = members
            .iter()
            .map(|m| common::master_of(&cluster, &keys.count_of_member(m)))
            .collect();
        assert_eq!(masters.len(), 3, "counters on every master");
        let (_, mut expected) = state(&mut c, &keys).await;
        let (mut cleaner, _lease) = leader(&mut c, &keys).await;
        arm_slowlog(&cluster).await;
        // Passes 0..6 one minute apart: pass 0 cleans every precision, pass 5
        // the 5-minute counters again, the others only the fine ones.
        let mut removed = 0;
        for pass in 0..6u64 {
            let now = NOW + 60 * pass as i64;
            let started = Instant::now();
            let report = cleaner.pass(&mut c, now).await.unwrap();
            eprintln!(
                "pass {pass}: {} counters, {} samples and {} counters removed in {:.0} ms",
                report.counters_scanned,
                report.samples_removed,
                report.counters_removed,
                started.elapsed().as_secs_f64() * 1000.0
            );
            assert_eq!(report.pass, pass);
            removed += report.samples_removed;
            let before = expected.len();
            seeds_pass(&mut expected, pass, now);
            assert_eq!(
                report.counters_removed,
                (before - expected.len()) as u64,
                "pass {pass}"
            );
            let (known, got) = state(&mut c, &keys).await;
            assert_eq!(got, expected, "after pass {pass}");
            // A member left known: only with its hash: none exists unknown.
            let there = existing(&mut c, &keys, Family::Counts, &members).await;
            assert_eq!(there, known, "after pass {pass}: hashes vs known:");
        }
        let slow = slowlogs(&cluster).await;
        assert!(removed > 0);
        for p in PRECISIONS {
            assert!(
                !expected.contains_key(&format!("{p}:page:0")),
                "all-old at {p}"
            );
            // Mixed counters keep young samples where six minutes are little.
            let mixed = expected.contains_key(&format!("{p}:page:1"));
            assert_eq!(mixed, p >= 60, "mixed at {p}");
        }
        assert!(!expected.contains_key("1:big-old"));
        assert!(expected.contains_key("1:big-mixed") && expected.contains_key("1:big-young"));
        assert_journal_empty(&mut c, &keys).await;
        slow
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_master_of_known_dies_during_a_pass_and_the_next_pass_leaves_nothing_out() {
        let cluster = common::cluster(3, 1);
        let mut c = common::conn(&cluster.url()).await;
        let keys = keys();
        let members = fill(&mut c, &keys, 400).await;
        // Let the replicas take the writes before a master is killed: a
        // replica that missed them would lose them with the failover (the
        // promise is relative to what the survivor holds), so wait until
        // each replica's offset reaches its master's, however loaded the
        // machine. (WAIT on a connection of its own would not do: it waits
        // only for that connection's writes, and this one wrote nothing.)
        for port in cluster.master_ports() {
            let mut conn = node(port).await;
            let target = replication_offsets(&mut conn).await.0;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while replication_offsets(&mut conn).await.1 < target {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no replica of {port} caught up"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        let (mut cleaner, _lease) = leader(&mut c, &keys).await;
        // The pass and the SIGKILL of known:'s master at once: the pass may
        // finish, or fail part-way; either is fine, nothing may be left out.
        let pass = tokio::spawn(async move {
            let out = cleaner.pass(&mut c, NOW).await.map(|r| r.counters_removed);
            eprintln!("pass during the failover: {out:?}");
            cleaner
        });
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let took = common::kill_master_of(&cluster, &keys.known()).await;
        eprintln!("failover of known:'s master took {took:?}");
        let mut cleaner = pass.await.unwrap();

        // The same leader on a new connection (as a worker reconnects after an
        // error: a promoted replica has no scripts until they are loaded
        // again), two passes: every counter with data is in known:, the old
        // ones are gone, the journal is empty.
        let mut c = common::conn(&cluster.url()).await;
        crate::store::scripts::load_all(&mut c).await.unwrap();
        for pass in 1..3 {
            cleaner.pass(&mut c, NOW + 60 * pass).await.unwrap();
        }
        let (known, _) = state(&mut c, &keys).await;
        let there = existing(&mut c, &keys, Family::Counts, &members).await;
        // Never a counter with data missing from known: (the guarantee). A
        // member whose hash the interrupted pass deleted may stay listed until
        // its precision's next pass (a listed counter without data reads as
        // empty): at a minute or finer, that was one of the passes above.
        let orphans: Vec<&String> = there.difference(&known).collect();
        assert!(
            orphans.is_empty(),
            "hashes with data missing from known: {orphans:?}"
        );
        let stale: Vec<&String> = known
            .difference(&there)
            .filter(|m| m.split_once(':').unwrap().0.parse::<u32>().unwrap() <= 60)
            .collect();
        assert!(stale.is_empty(), "members without a hash: {stale:?}");
        // Precisions up to a minute are cleaned on every pass; coarser ones on
        // every fifth or later, so whether a pass before the failover got to
        // them decides, and only their young samples are sure to stay.
        for p in PRECISIONS {
            let old = format!("{p}:page:0");
            if p <= 60 {
                assert!(!known.contains(&old), "{old} is all old");
            } else {
                assert!(
                    known.contains(&format!("{p}:page:2")),
                    "{p}:page:2 is young"
                );
            }
        }
        assert_journal_empty(&mut c, &keys).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_counter_written_while_the_cluster_cleaner_runs_is_never_left_out_of_known() {
        written_while_cleaning(Family::Counts).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statistics_written_while_the_cluster_cleaner_runs_are_never_left_out_of_stats_known() {
        written_while_cleaning(Family::Stats).await;
    }

    /// The members of `family`'s ZSET.
    async fn members_of(c: &mut Conn, keys: &Keys, family: Family) -> BTreeSet<String> {
        redis::cmd("ZRANGE")
            .arg(keys.known_of(family))
            .arg(0)
            .arg(-1)
            .query_async(c)
            .await
            .unwrap()
    }

    /// 4,000 hashes of `family` with an old bucket; writers add a fresh one to
    /// half of them as a worker does on a cluster (the hash, then once that
    /// completed, the ZADD) while passes delete the old buckets and forget the
    /// emptied hashes: the ZSET ends exactly the hashes with data.
    async fn written_while_cleaning(family: Family) {
        let cluster = common::cluster(3, 1);
        let seeds = cluster.url();
        let mut c = common::conn(&seeds).await;
        let keys = keys();
        const N: usize = 4000;
        let old = NOW - 1000;
        let members: Vec<String> = (0..N).map(|i| format!("1:c{i:05}")).collect();
        let set = [field(family, old), "1".to_string()];
        each(&mut c, per_member("HSET", &keys, family, &members, &set)).await;
        zadd_known(&mut c, &keys, family, &members).await;
        let (mut cleaner, _lease) = leader(&mut c, &keys).await;
        let mut writers = Vec::new();
        for w in 0..4usize {
            let mut wc = common::conn(&seeds).await;
            let keys = keys.clone();
            let members = members.clone();
            writers.push(tokio::spawn(async move {
                for (i, m) in members.iter().enumerate().rev() {
                    if i % 8 != w * 2 {
                        continue;
                    }
                    let _: i64 = redis::cmd("HINCRBY")
                        .arg(keys.hash_of_member(family, m))
                        .arg(field(family, NOW))
                        .arg(1)
                        .query_async(&mut wc)
                        .await
                        .unwrap();
                    let _: i64 = redis::cmd("ZADD")
                        .arg(keys.known_of(family))
                        .arg(0)
                        .arg(m)
                        .query_async(&mut wc)
                        .await
                        .unwrap();
                }
            }));
        }
        let mut removed = 0;
        let mut passes = 0;
        while writers.iter().any(|w| !w.is_finished()) || passes < 2 {
            let report = cleaner.pass(&mut c, NOW).await.unwrap();
            removed += match family {
                Family::Counts => report.samples_removed,
                Family::Stats => report.stats_fields_removed,
            };
            passes += 1;
        }
        for w in writers {
            w.await.unwrap();
        }
        eprintln!("{passes} passes while writing");
        assert_eq!(removed, N as u64, "every old bucket went");
        let known = members_of(&mut c, &keys, family).await;
        let there = existing(&mut c, &keys, family, &members).await;
        assert_eq!(there.len(), N / 2, "half the hashes were written");
        assert_eq!(known, there, "the ZSET is exactly the hashes with data");
        let all: Vec<String> = known.iter().cloned().collect();
        let replies = each(&mut c, per_member("HGETALL", &keys, family, &all, &[])).await;
        let fresh = BTreeMap::from([(field(family, NOW), "1".to_string())]);
        for (m, r) in all.iter().zip(replies) {
            let fields: BTreeMap<String, String> = redis::from_redis_value(r).unwrap();
            assert_eq!(fields, fresh, "{m}");
        }
        let journal: usize = redis::cmd("SCARD")
            .arg(keys.forgetting_of(family))
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(journal, 0, "nothing left in the journal");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leader_dead_between_removal_and_recheck_is_repaired_and_a_stale_one_fenced_out() {
        dead_between_removal_and_recheck(Family::Counts).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stats_member_removed_by_a_dead_leader_is_repaired_and_a_stale_one_fenced_out() {
        dead_between_removal_and_recheck(Family::Stats).await;
    }

    /// A stale pass's fence, then a newer one that removes from `family`'s
    /// ZSET a member whose hash a worker has just written, and dies before its
    /// re-check: the next pass puts it back, the stale fence removes nothing.
    async fn dead_between_removal_and_recheck(family: Family) {
        let cluster = common::cluster(3, 1);
        let mut c = common::conn(&cluster.url()).await;
        let keys = keys();
        let (mut cleaner, lease) = leader(&mut c, &keys).await;
        let stale = Fence::take(&mut c, &keys, &lease).await.unwrap().unwrap();
        let dying = Fence::take(&mut c, &keys, &lease).await.unwrap().unwrap();
        match (&stale, &dying) {
            (Fence::Epoch(a), Fence::Epoch(b)) => assert!(b > a, "epochs grow"),
            other => panic!("a cluster's fences are epochs: {other:?}"),
        }
        let both = ["60:raced".to_string(), "60:gone".to_string()];
        zadd_known(&mut c, &keys, family, &both).await;
        let write = [field(family, NOW), "1".to_string()];
        each(
            &mut c,
            per_member("HINCRBY", &keys, family, &both[..1], &write),
        )
        .await;
        let zset = keys.known_of(family);
        let mut forget = crate::store::scripts::FORGET.evalsha(3);
        forget
            .arg(dying.key(&keys, &zset))
            .arg(&zset)
            .arg(keys.forgetting_of(family))
            .arg(dying.arg())
            .arg("60:raced")
            .arg("60:gone");
        let removed: Vec<String> = forget.query_async(&mut c).await.unwrap();
        assert_eq!(removed.len(), 2);
        // The next pass (a new epoch) re-checks the journal first, and counts
        // the member it puts back.
        let readded = || {
            crate::model::metrics::metrics()
                .cleaner_members_readded
                .get()
        };
        let before = readded();
        cleaner.pass(&mut c, NOW).await.unwrap();
        let known = members_of(&mut c, &keys, family).await;
        assert_eq!(known, BTreeSet::from(["60:raced".to_string()]));
        assert!(readded() > before, "the put-back member is counted");
        // The stale fence is refused in the ZSET's slot now.
        let out =
            crate::service::forget::forget(&mut c, &keys, family, &stale, &["60:raced".into()])
                .await
                .unwrap();
        assert_eq!(out, None, "a stale leader removes nothing");
        assert!(members_of(&mut c, &keys, family).await.contains("60:raced"));
    }
}
