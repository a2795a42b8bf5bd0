//! The cleaner against a real redis-server: its results equal the seeds'
//! `clean_counters` on the same data, a worker's write racing the removal
//! from `known:` is never orphaned, and a pass over a million-sample hash and
//! a hundred thousand counters never trips the 10 ms SLOWLOG.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Instant;

    use crate::model::config::LayoutArgs;
    use crate::model::keys::{Family, Keys};
    use crate::service::cleaner::Cleaner;
    use crate::service::leader::Lease;
    use crate::store::connect::Conn;
    use crate::testing::*;

    const NOW: i64 = 1_700_000_000;

    /// A cleaner holding the lease.
    async fn leader(c: &mut Conn, keys: &Keys) -> (Cleaner, Arc<Lease>) {
        cleaning_leader(c, keys).await
    }

    fn default_keys() -> Keys {
        Keys::new(&LayoutArgs::default(), &Default::default())
    }

    /// known: members and every counter's samples (the whole counter layout).
    type State = BTreeMap<String, BTreeMap<i64, i64>>;

    async fn state(c: &mut Conn, keys: &Keys) -> State {
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.known())
            .arg(0)
            .arg(-1)
            .query_async(c)
            .await
            .unwrap();
        let mut out = State::new();
        for m in members {
            let h: BTreeMap<i64, i64> = redis::cmd("HGETALL")
                .arg(keys.count_of_member(&m))
                .query_async(c)
                .await
                .unwrap();
            out.insert(m, h);
        }
        out
    }

    /// The seeds' clean_counters, one pass (number `passes`) at `now`, with its
    /// bugs fixed (SAMPLE_COUNT 120, passes counted per pass, sorted samples).
    fn seeds_pass(st: &mut State, passes: u64, now: i64) {
        let members: Vec<String> = st.keys().cloned().collect();
        for hash in members {
            let prec: i64 = hash.split_once(':').unwrap().0.parse().unwrap();
            let bprec = (prec / 60).max(1) as u64;
            if !passes.is_multiple_of(bprec) {
                continue;
            }
            let cutoff = now - 120 * prec;
            let samples = st.get_mut(&hash).unwrap();
            let total = samples.len();
            let remove: Vec<i64> = samples.keys().copied().filter(|&t| t <= cutoff).collect();
            for t in &remove {
                samples.remove(t);
            }
            if !remove.is_empty() && remove.len() == total {
                st.remove(&hash);
            }
        }
    }

    /// Counters at every precision with samples on both sides of the horizon,
    /// some wholly old, some wholly young.
    async fn fill_mixed(c: &mut Conn, keys: &Keys) {
        let mut pipe = redis::pipe();
        for &prec in &crate::model::config::DEFAULT_PRECISIONS {
            let p = i64::from(prec);
            for (i, name) in ["all-old", "mixed", "young", "edge"].iter().enumerate() {
                let member = Keys::member(prec, name);
                pipe.cmd("ZADD").arg(keys.known()).arg(0).arg(&member);
                let cutoff = (NOW - 120 * p).div_euclid(p) * p;
                let buckets: Vec<i64> = match i {
                    0 => (1..=30).map(|k| cutoff - k * p).collect(),
                    1 => (-20..=20).map(|k| cutoff + k * p).collect(),
                    2 => (1..=10).map(|k| cutoff + k * p).collect(),
                    _ => vec![NOW - 120 * p, NOW - 120 * p + 1],
                };
                for b in buckets {
                    pipe.cmd("HSET")
                        .arg(keys.count_of_member(&member))
                        .arg(b)
                        .arg(b % 7 + 1);
                }
            }
        }
        let _: () = pipe.query_async(c).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_equal_the_seeds_clean_counters() {
        let _alone = exclusive().await;
        slowlog_clean_in_one_of(SLOWLOG_ATTEMPTS, six_passes).await;
    }

    /// Six passes over mixed counters, each compared with the seeds'; returns
    /// the SLOWLOG.
    async fn six_passes() -> Vec<String> {
        let srv = slowlog_server();
        let mut c = conn(&srv.url()).await;
        let keys = default_keys();
        fill_mixed(&mut c, &keys).await;
        let mut expected = state(&mut c, &keys).await;
        let (mut cleaner, _lease) = leader(&mut c, &keys).await;
        // Passes 0..6 at times one minute apart: pass 5 cleans the 5-minute
        // counters again, the others only the fine ones.
        let mut removed = 0;
        for pass in 0..6u64 {
            let now = NOW + 60 * pass as i64;
            let report = cleaner.pass(&mut c, now).await.unwrap();
            assert_eq!(report.pass, pass);
            removed += report.samples_removed;
            seeds_pass(&mut expected, pass, now);
            assert_eq!(state(&mut c, &keys).await, expected, "after pass {pass}");
        }
        assert!(removed > 0);
        assert!(!expected.contains_key("60:all-old"));
        assert!(expected.contains_key("60:mixed"));
        slowlog(&mut c).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_leaves_known_only_if_its_hash_is_still_empty() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let keys = default_keys();
        let (_cleaner, lease) = leader(&mut c, &keys).await;
        let old = NOW - 1000;
        let clean = |member: &str| {
            let mut cmd = crate::store::scripts::CLEAN.evalsha(3);
            cmd.arg(lease.key())
                .arg(keys.known())
                .arg(keys.count_of_member(member))
                .arg(lease.token())
                .arg(member)
                .arg("1")
                .arg(1)
                .arg(old);
            cmd
        };
        for m in ["1:raced", "1:quiet"] {
            let _: () = redis::pipe()
                .cmd("HSET")
                .arg(keys.count_of_member(m))
                .arg(old)
                .arg(1)
                .cmd("ZADD")
                .arg(keys.known())
                .arg(0)
                .arg(m)
                .query_async(&mut c)
                .await
                .unwrap();
        }
        // The cleaner read [old] for both; then a worker writes a fresh sample
        // to one of them (HINCRBY first, as on Cluster), before the deletion.
        let _: i64 = redis::cmd("HINCRBY")
            .arg(keys.count_of_member("1:raced"))
            .arg(NOW)
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
        let raced: (i64, i64) = clean("1:raced").query_async(&mut c).await.unwrap();
        let quiet: (i64, i64) = clean("1:quiet").query_async(&mut c).await.unwrap();
        assert_eq!(raced, (1, 0), "the written counter stays known");
        assert_eq!(quiet, (1, 1));
        let st = state(&mut c, &keys).await;
        assert_eq!(st.get("1:raced").unwrap(), &BTreeMap::from([(NOW, 1)]));
        assert!(!st.contains_key("1:quiet"));
        // Another token (a stale leader) writes nothing.
        let mut stale = crate::store::scripts::CLEAN.evalsha(3);
        stale
            .arg(lease.key())
            .arg(keys.known())
            .arg(keys.count_of_member("1:raced"))
            .arg("someone-else")
            .arg("1:raced")
            .arg("1")
            .arg(1)
            .arg(NOW);
        let r: i64 = stale.query_async(&mut c).await.unwrap();
        assert_eq!(r, -1);
        assert_eq!(state(&mut c, &keys).await, st);
        // A lease key of another type (written by something else) fences
        // the holder out, as a lost lease does: no WRONGTYPE, which stopped
        // the process.
        let _: () = redis::pipe()
            .del(lease.key())
            .hset(lease.key(), "a", "b")
            .query_async(&mut c)
            .await
            .unwrap();
        let r: i64 = clean("1:raced").query_async(&mut c).await.unwrap();
        assert_eq!(r, -1);
        assert_eq!(state(&mut c, &keys).await, st);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_racing_a_pass_are_never_orphaned() {
        writes_racing_a_pass(Family::Counts).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statistics_written_racing_a_pass_are_never_orphaned() {
        writes_racing_a_pass(Family::Stats).await;
    }

    /// A field of bucket `t` in a hash of `family`.
    fn field(family: Family, t: i64) -> String {
        match family {
            Family::Counts => t.to_string(),
            Family::Stats => format!("{t}:count"),
        }
    }

    /// 20,000 hashes of `family` with one old bucket; a writer adds a fresh
    /// bucket to each (the hash first, then the ZADD, as on Cluster) while a
    /// pass removes the old ones: every hash with data stays in its ZSET.
    async fn writes_racing_a_pass(family: Family) {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let keys = default_keys();
        const N: usize = 20_000;
        let old = NOW - 1000;
        for batch in (0..N).collect::<Vec<_>>().chunks(1000) {
            let mut pipe = redis::pipe();
            for i in batch {
                let m = format!("1:c{i:05}");
                pipe.cmd("HSET")
                    .arg(keys.hash_of_member(family, &m))
                    .arg(field(family, old))
                    .arg(1);
                pipe.cmd("ZADD").arg(keys.known_of(family)).arg(0).arg(&m);
            }
            let _: () = pipe.query_async(&mut c).await.unwrap();
        }
        let (mut cleaner, _lease) = leader(&mut c, &keys).await;
        let mut w = conn(&srv.url()).await;
        let writer_keys = keys.clone();
        let writer = tokio::spawn(async move {
            for i in (0..N).rev() {
                let m = format!("1:c{i:05}");
                let _: i64 = redis::cmd("HINCRBY")
                    .arg(writer_keys.hash_of_member(family, &m))
                    .arg(field(family, NOW))
                    .arg(1)
                    .query_async(&mut w)
                    .await
                    .unwrap();
                let _: i64 = redis::cmd("ZADD")
                    .arg(writer_keys.known_of(family))
                    .arg(0)
                    .arg(&m)
                    .query_async(&mut w)
                    .await
                    .unwrap();
            }
        });
        let report = cleaner.pass(&mut c, NOW).await.unwrap();
        writer.await.unwrap();
        let removed = match family {
            Family::Counts => report.samples_removed,
            Family::Stats => report.stats_fields_removed,
        };
        assert_eq!(removed, N as u64);
        let st = family_state(&mut c, &keys, family).await;
        assert_eq!(st.len(), N, "every written hash is known");
        let fresh = BTreeMap::from([(field(family, NOW), "1".to_string())]);
        for (m, fields) in &st {
            assert_eq!(fields, &fresh, "{m}");
        }
        let keys_left: Vec<String> = redis::cmd("KEYS")
            .arg(keys.hash_of_member(family, "1:*"))
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(keys_left.len(), N, "no hash without its member");
    }

    /// A family's ZSET members and each one's hash, field by field.
    type FamilyState = BTreeMap<String, BTreeMap<String, String>>;

    async fn family_state(c: &mut Conn, keys: &Keys, family: Family) -> FamilyState {
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.known_of(family))
            .arg(0)
            .arg(-1)
            .query_async(c)
            .await
            .unwrap();
        let mut out = FamilyState::new();
        for m in members {
            let h: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(keys.hash_of_member(family, &m))
                .query_async(c)
                .await
                .unwrap();
            out.insert(m, h);
        }
        out
    }

    /// One pass of the reference for statistics: in each hash due on pass
    /// `pass`, every field `B:…` of a bucket `B <= now - 120 × PREC` goes; a
    /// hash left empty leaves `stats:known:`. Returns the fields removed.
    fn stats_pass(st: &mut FamilyState, pass: u64, now: i64) -> u64 {
        let mut removed = 0;
        st.retain(|member, fields| {
            let prec: i64 = member.split_once(':').unwrap().0.parse().unwrap();
            if !pass.is_multiple_of((prec / 60).max(1) as u64) {
                return true;
            }
            let before = fields.len();
            fields.retain(|f, _| {
                let bucket = f.split_once(':').and_then(|(b, _)| b.parse::<i64>().ok());
                bucket.is_none_or(|b| b > now - 120 * prec)
            });
            removed += (before - fields.len()) as u64;
            !fields.is_empty()
        });
        removed
    }

    /// Statistics hashes at every precision on both sides of the horizon, with
    /// histogram fields; one with a field that names no bucket; one member
    /// without a hash; two with thousands of fields.
    async fn fill_stats(c: &mut Conn, keys: &Keys) {
        let mut pipe = redis::pipe();
        for &prec in &crate::model::config::DEFAULT_PRECISIONS {
            let p = i64::from(prec);
            let cutoff = (NOW - 120 * p).div_euclid(p) * p;
            for (i, name) in ["all-old", "mixed", "young", "foreign"].iter().enumerate() {
                let member = Keys::member(prec, name);
                pipe.cmd("ZADD").arg(keys.stats_known()).arg(0).arg(&member);
                let buckets: Vec<i64> = match i {
                    0 => (1..=30).map(|k| cutoff - k * p).collect(),
                    1 => (-20..=20).map(|k| cutoff + k * p).collect(),
                    2 => (1..=10).map(|k| cutoff + k * p).collect(),
                    _ => vec![cutoff - p],
                };
                let key = keys.stats_of_member(&member);
                for b in buckets {
                    let mut hset = redis::cmd("HSET");
                    hset.arg(&key);
                    for f in ["count", "sum", "sumsq", "min", "max", "h:3", "h:z", "h:n17"] {
                        hset.arg(format!("{b}:{f}")).arg(b % 7 + 1);
                    }
                    pipe.add_command(hset);
                }
                if i == 3 {
                    pipe.cmd("HSET").arg(&key).arg("not-a-bucket").arg(1);
                }
            }
        }
        pipe.cmd("ZADD")
            .arg(keys.stats_known())
            .arg(0)
            .arg("60:orphan");
        // Hashes read with HKEYS above the counters' big-hash size (3,200
        // fields), and paged with HSCAN (9,600 fields).
        for (name, buckets) in [("wide", 400), ("big", 1200)] {
            let member = Keys::member(1, name);
            pipe.cmd("ZADD").arg(keys.stats_known()).arg(0).arg(&member);
            for b in NOW - 120 - buckets / 2..NOW - 120 + buckets / 2 {
                let mut hset = redis::cmd("HSET");
                hset.arg(keys.stats_of_member(&member));
                for f in ["count", "sum", "sumsq", "min", "max", "h:3", "h:z", "h:n17"] {
                    hset.arg(format!("{b}:{f}")).arg(1);
                }
                pipe.add_command(hset);
            }
        }
        let _: () = pipe.query_async(c).await.unwrap();
    }

    /// Six passes over counters and statistics together: the counters end as
    /// the seeds' `clean_counters` leaves them (as without statistics), the
    /// statistics as the reference: old buckets gone with all their fields,
    /// emptied hashes out of `stats:known:`, the others kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statistics_keep_120_samples_and_counters_are_cleaned_as_before() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let keys = default_keys();
        fill_mixed(&mut c, &keys).await;
        fill_stats(&mut c, &keys).await;
        let mut counts = state(&mut c, &keys).await;
        let mut stats = family_state(&mut c, &keys, Family::Stats).await;
        let (mut cleaner, _lease) = leader(&mut c, &keys).await;
        let metrics = crate::model::metrics::metrics();
        let metric_before = metrics.cleaner_stats_fields_removed.get();
        let mut fields_removed = 0;
        for pass in 0..6u64 {
            let now = NOW + 60 * pass as i64;
            let report = cleaner.pass(&mut c, now).await.unwrap();
            seeds_pass(&mut counts, pass, now);
            let before = stats.len() as u64;
            let removed = stats_pass(&mut stats, pass, now);
            fields_removed += removed;
            assert_eq!(
                state(&mut c, &keys).await,
                counts,
                "counts after pass {pass}"
            );
            let got = family_state(&mut c, &keys, Family::Stats).await;
            assert_eq!(got, stats, "statistics after pass {pass}");
            assert_eq!(report.stats_fields_removed, removed, "pass {pass}");
            assert_eq!(report.stats_removed, before - stats.len() as u64);
        }
        assert!(fields_removed > 1000, "{fields_removed}");
        // Other tests of this binary may add to the process' counter, never
        // take from it.
        let counted = metrics.cleaner_stats_fields_removed.get() - metric_before;
        assert!(counted >= fields_removed, "{counted} < {fields_removed}");
        for gone in ["60:all-old", "86400:all-old", "60:orphan"] {
            assert!(!stats.contains_key(gone), "{gone}");
        }
        let foreign = &stats["60:foreign"];
        assert_eq!(foreign.keys().collect::<Vec<_>>(), ["not-a-bucket"]);
        // Pass 5 ran 300 s after pass 0: 15 of the 20 young buckets are young
        // still, each with all 8 fields.
        assert_eq!(stats["60:mixed"].len(), 15 * 8);
        // Of the 1-second buckets around the horizon, those after `now - 120`
        // at the last pass (NOW + 180) stay: none of the wide hash's, 299 of
        // the big one's.
        assert!(!stats.contains_key("1:wide"));
        assert_eq!(stats["1:big"].len(), 299 * 8);
        let dead: u64 = redis::cmd("EXISTS")
            .arg(keys.stats(60, "all-old"))
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(dead, 0);
    }

    /// Every counter hash that holds data has its member in `known:`.
    async fn assert_no_orphans(c: &mut Conn, keys: &Keys) -> usize {
        let known: std::collections::BTreeSet<String> = redis::cmd("ZRANGE")
            .arg(keys.known())
            .arg(0)
            .arg(-1)
            .query_async(c)
            .await
            .unwrap();
        let hashes: Vec<String> = redis::cmd("KEYS")
            .arg(keys.count_of_member("*"))
            .query_async(c)
            .await
            .unwrap();
        let prefix = keys.count_of_member("").len();
        for h in &hashes {
            assert!(
                known.contains(&h[prefix..]),
                "{h} holds data but {} is not in known:",
                &h[prefix..]
            );
        }
        hashes.len()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_skipping_zadds_never_orphans_a_counter_across_cleaner_passes() {
        // One worker applies three windows; between them the cleaner runs on a
        // leader clock ahead of this one by just under the allowed skew, which
        // removes the members whose only samples it deems old. The worker must
        // add those members back when it writes them again, while it leaves out
        // the ZADDs of members it added recently.
        let srv = server();
        let url = srv.url();
        let mut c = conn(&url).await;
        let keys = default_keys();
        let workers = Workers::start(vec![settings(&url, "w1")]);
        let (mut cleaner, _lease) = leader(&mut c, &keys).await;
        let names: Vec<String> = (0..200).map(|i| format!("n{i}")).collect();
        let send = |ages: Vec<i64>| {
            let names = names.clone();
            let url = url.clone();
            async move {
                let mut c = conn(&url).await;
                let now = unix_now();
                let mut pipe = redis::pipe();
                for (name, age) in names.iter().zip(ages) {
                    pipe.cmd("XADD")
                        .arg("hits")
                        .arg("*")
                        .arg("name")
                        .arg(name)
                        .arg("ts")
                        .arg(now - age)
                        .ignore();
                }
                pipe.query_async::<()>(&mut c).await.unwrap();
            }
        };
        let skew = crate::model::known::CLOCK_MARGIN_SECS - 1;
        let ones = |c: &State| c.keys().filter(|m| m.starts_with("1:")).count();

        // Window 1: second-precision samples aged 0..100 s.
        send((0..200).map(|i| i % 100).collect()).await;
        wait_drained(&mut c, &keys).await;
        assert_eq!(assert_no_orphans(&mut c, &keys).await, 200 * 7);
        let before = ones(&state(&mut c, &keys).await);
        assert_eq!(before, 200);
        cleaner.pass(&mut c, unix_now() + skew).await.unwrap();
        let after = ones(&state(&mut c, &keys).await);
        assert!(after < before, "the pass removed no member: {after}");
        assert!(after > 0, "the pass removed every member");
        assert_no_orphans(&mut c, &keys).await;

        // Window 2: every name again, fresh: removed members come back.
        send(vec![0; 200]).await;
        wait_drained(&mut c, &keys).await;
        assert_eq!(assert_no_orphans(&mut c, &keys).await, 200 * 7);
        assert_eq!(ones(&state(&mut c, &keys).await), 200);

        // Window 3, after another skewed pass (the fresh samples stay).
        cleaner.pass(&mut c, unix_now() + skew).await.unwrap();
        send((0..200).map(|i| i % 3).collect()).await;
        wait_drained(&mut c, &keys).await;
        assert_eq!(assert_no_orphans(&mut c, &keys).await, 200 * 7);
        workers.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn orphaned_members_and_foreign_fields() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let keys = default_keys();
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg(keys.known())
            .arg(0)
            .arg("60:orphan")
            .arg(0)
            .arg("60:foreign")
            .cmd("HSET")
            .arg(keys.count_of_member("60:foreign"))
            .arg("not-a-time")
            .arg(1)
            .arg(NOW - 100_000)
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
        let (mut cleaner, _lease) = leader(&mut c, &keys).await;
        let report = cleaner.pass(&mut c, NOW).await.unwrap();
        assert_eq!(report.samples_removed, 1);
        assert_eq!(report.counters_removed, 1);
        let known: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.known())
            .arg(0)
            .arg(-1)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(known, vec!["60:foreign"]);
        let left: Vec<String> = redis::cmd("HKEYS")
            .arg(keys.count_of_member("60:foreign"))
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(
            left,
            vec!["not-a-time"],
            "fields that are not times are left alone"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_million_samples_and_100k_counters_never_trip_the_slowlog() {
        let _alone = exclusive().await;
        slowlog_clean_in_one_of(SLOWLOG_ATTEMPTS, big_pass).await;
    }

    /// Fills a hash with a million old samples and `known:` with 100,000
    /// counters, runs a pass, checks everything went; returns the SLOWLOG.
    async fn big_pass() -> Vec<String> {
        let srv = slowlog_server();
        let mut c = conn(&srv.url()).await;
        let keys = default_keys();
        const BIG: i64 = 1_000_000;
        const COUNTERS: usize = 100_000;
        let big = keys.count(1, "huge");
        let fill = Instant::now();
        let mut t = 0;
        while t < BIG {
            let mut pipe = redis::pipe();
            for _ in 0..50 {
                let mut cmd = redis::cmd("HSET");
                cmd.arg(&big);
                for _ in 0..200 {
                    cmd.arg(t).arg(1);
                    t += 1;
                }
                pipe.add_command(cmd);
            }
            let _: () = pipe.query_async(&mut c).await.unwrap();
        }
        let _: () = redis::cmd("ZADD")
            .arg(keys.known())
            .arg(0)
            .arg("1:huge")
            .query_async(&mut c)
            .await
            .unwrap();
        for batch in (0..COUNTERS).collect::<Vec<_>>().chunks(5000) {
            let mut pipe = redis::pipe();
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(keys.known());
            for i in batch {
                let m = format!("{}:n{i}", [1, 5, 60][i % 3]);
                pipe.cmd("HSET")
                    .arg(keys.count_of_member(&m))
                    .arg(1000)
                    .arg(1);
                zadd.arg(0).arg(m);
            }
            pipe.add_command(zadd);
            let _: () = pipe.query_async(&mut c).await.unwrap();
        }
        eprintln!("filled in {:.1} s", fill.elapsed().as_secs_f64());
        let (mut cleaner, _lease) = leader(&mut c, &keys).await;
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut c)
            .await
            .unwrap();
        let started = Instant::now();
        let report = cleaner.pass(&mut c, NOW).await.unwrap();
        eprintln!(
            "pass over {} counters (one of {BIG} samples): {:.2} s, {} samples removed",
            COUNTERS + 1,
            started.elapsed().as_secs_f64(),
            report.samples_removed
        );
        let slow = slowlog(&mut c).await;
        assert_eq!(report.samples_removed, BIG as u64 + COUNTERS as u64);
        assert_eq!(report.counters_removed, COUNTERS as u64 + 1);
        let (known, exists): (u64, bool) = redis::pipe()
            .cmd("ZCARD")
            .arg(keys.known())
            .cmd("EXISTS")
            .arg(&big)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!((known, exists), (0, false));
        let dbsize: u64 = redis::cmd("DBSIZE").query_async(&mut c).await.unwrap();
        assert_eq!(dbsize, 1, "only the lease is left");
        slow
    }
}
