//! The exactly-once commit against a real redis-server and a real Redis
//! Cluster: a stalled worker's window is fenced once its entries are
//! claimed, a resent commit keeps its record, a carried window is
//! acknowledged only once its carry is applied, a replayed or recovered
//! window adds its statistics once, and sums applied together on a cluster
//! (`apply.lua`: one script per hash slot carries chunks of sums
//! recorded in different groups, each under its own group's marker) count
//! nothing twice on any replay.

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::model::aggregate::{Cell, StatCell, Window};
    use crate::model::config::{LayoutArgs, StreamArgs, DEFAULT_PRECISIONS};
    use crate::model::keys::Keys;
    use crate::model::slots::{slot, tag_for_slot};
    use crate::model::stats::DEFAULT_QUANTILE_PRECISIONS;
    use crate::store::commit::plan::{plan, Apply};
    use crate::store::commit::{
        self, sort_for_cluster, Committer, Outcome, Sealed, Sum, CHUNK_CELLS,
    };
    use crate::store::connect::Conn;
    use crate::testing::stats::{self as st, kept, observations, Obs};
    use crate::testing::*;

    const PRECISIONS: [u32; 7] = DEFAULT_PRECISIONS;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_workers_window_is_fenced_after_its_entries_are_claimed() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let now = unix_now();
        xadd_hits(&mut c, "race", 10, now).await;
        let mut stalled = settings(&srv.url(), "stalled");
        stalled.worker.claim_idle_ms = 1000;
        let k = keys(&stalled);
        crate::store::scripts::load_all(&mut c).await.unwrap();
        crate::store::stream::ensure_group(&mut c, &k, None)
            .await
            .unwrap();
        // The stalled worker: reads its epoch and the entries, then stops.
        let committer = Committer::new(k.clone(), "stalled".into(), 1000);
        let epoch = committer.epoch(&mut c).await.unwrap();
        let (ids, window) = read_ten(&mut c, &k, "stalled", now).await;

        // A live worker claims them once idle and counts them.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let mut live = settings(&srv.url(), "live");
        live.worker.claim_idle_ms = 1000;
        let workers = Workers::start(vec![live]);
        wait_drained(&mut c, &k).await;
        workers.stop().await;

        // The stalled worker wakes up and tries to commit its window.
        let cells: Vec<_> = window.cells().collect();
        let sealed = counts_only("stale-1", &ids, &cells);
        let outcome = committer
            .commit(&mut c, &epoch, None, Some(&sealed))
            .await
            .unwrap();
        assert!(matches!(outcome, Outcome::Fenced(_)), "{outcome:?}");
        let got = read_all(&mut c, &k).await;
        assert_eq!(
            got[&(60, "race".to_string())].values().sum::<i64>(),
            10,
            "counted once"
        );
        // The fields written ahead of the refused commit do not stay behind.
        let left: i64 = redis::cmd("EXISTS")
            .arg(k.window("stale-1"))
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(left, 0, "a refused window leaves no record");
    }

    /// A window whose cells a carry took is acknowledged only once that
    /// carry is in the counters: recovering the window finishes the carry
    /// first, so a drained group (nothing pending) means counted hits even
    /// when the recovery stops right after the window.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_carried_window_is_acknowledged_only_once_its_carry_is_applied() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let now = unix_now();
        xadd_hits(&mut c, "carried", 10, now).await;
        let s = settings(&srv.url(), "gone");
        let k = keys(&s);
        crate::store::scripts::load_all(&mut c).await.unwrap();
        crate::store::stream::ensure_group(&mut c, &k, None)
            .await
            .unwrap();
        let committer = Committer::new(k.clone(), "gone".into(), 1000);
        let (ids, window) = read_ten(&mut c, &k, "gone", now).await;
        let cells: Vec<_> = window.cells().collect();
        // The window is recorded, its cells wait; the carry records their
        // sum and takes them; the worker dies before applying the carry.
        let sealed = counts_only("w-1", &ids, &cells);
        let outcome = committer
            .commit(&mut c, "0", None, Some(&sealed))
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Committed);
        let deferred = commit::Deferred {
            window: "w-1".into(),
            ids: crate::model::ids::IdList::parse(&ids).unwrap(),
            committed: std::time::Instant::now(),
            oldest_ms: None,
        };
        let carry = Sealed {
            window: "c-1",
            ids: "",
            ..sealed
        };
        let outcome = committer
            .carry(&mut c, &carry, &[deferred], None)
            .await
            .unwrap();
        assert_eq!(outcome, commit::CarryOutcome::Recorded);

        // Recovery reaches the window first (records come oldest first).
        let (records, corrupt, _) = committer.records(&mut c).await.unwrap();
        assert!(corrupt.is_empty());
        let mut names: Vec<&str> = records.iter().map(|r| r.window.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["c-1", "w-1"]);
        let window = records.iter().find(|r| r.window == "w-1").unwrap();
        assert!(committer
            .recover(&mut c, window, Instant::now())
            .await
            .unwrap());
        let pending: redis::Value = redis::cmd("XPENDING")
            .arg(&k.stream)
            .arg(&k.group)
            .query_async(&mut c)
            .await
            .unwrap();
        let redis::Value::Array(summary) = pending else {
            panic!("XPENDING: {pending:?}")
        };
        assert_eq!(
            summary[0],
            redis::Value::Int(0),
            "the window's entries are acknowledged"
        );
        let got = read_all(&mut c, &k).await;
        assert_eq!(
            got.get(&(60, "carried".to_string()))
                .map(|b| b.values().sum::<i64>()),
            Some(10),
            "acknowledged entries are counted: the carry was applied first"
        );
        // The carry is finished, and finishing it again does nothing.
        let (records, _, _) = committer.records(&mut c).await.unwrap();
        assert!(records.is_empty(), "{records:?}");
    }

    /// A carry of long names is recorded in pieces of about a megabyte (by
    /// cell count alone, 50,000 cells of 4 KiB names made one piece of
    /// 200 MB, held twice in the worker while sent), and whoever recovers
    /// it reads every piece back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_carry_of_long_names_is_recorded_in_pieces_of_about_a_megabyte() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let k = keys(&settings(&srv.url(), "gone"));
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let names: Vec<String> = (0..1000)
            .map(|i| format!("{i:04}{}", "x".repeat(4092)))
            .collect();
        let cells = cells(&k, &names, 3);
        let committer = Committer::new(k.clone(), "gone".into(), 1000);
        let carry = counts_only("c-1", "", &cells);
        let outcome = committer.carry(&mut c, &carry, &[], None).await.unwrap();
        assert_eq!(outcome, commit::CarryOutcome::Recorded);
        let record = k.window("c-1");
        let pieces: usize = redis::cmd("HGET")
            .arg(&record)
            .arg("pieces")
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(pieces >= 8, "8 MB of names in {pieces} pieces");
        for i in 0..pieces {
            let field = if i == 0 {
                "cells".to_string()
            } else {
                format!("cells:{i}")
            };
            let len: usize = redis::cmd("HSTRLEN")
                .arg(&record)
                .arg(&field)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(len > 0 && len <= (1 << 20) + 4200, "{field}: {len} bytes");
        }
        let (records, corrupt, _) = committer.records(&mut c).await.unwrap();
        assert!(corrupt.is_empty());
        assert!(committer
            .recover(&mut c, &records[0], Instant::now())
            .await
            .unwrap());
        assert_eq!(totals(&mut c, &k, &names).await, vec![6; names.len()]);
    }

    /// A carry's pieces that its script never makes a record (its worker
    /// died in between, or, here, the script refused: another worker holds
    /// the consumer name) expire within ten minutes, not a day: a SIGKILLed
    /// worker's carry of long names left megabytes for 24 h.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_carrys_pieces_never_recorded_expire_within_minutes() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let k = keys(&settings(&srv.url(), "gone"));
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let _: () = redis::cmd("SET")
            .arg(k.consumer_registration("gone"))
            .arg("another/worker")
            .query_async(&mut c)
            .await
            .unwrap();
        let names: Vec<String> = (0..100).map(|i| format!("n{i}")).collect();
        let cells = cells(&k, &names, 1);
        let committer = Committer::new(k.clone(), "gone".into(), 1000);
        let carry = counts_only("c-1", "", &cells);
        let outcome = committer.carry(&mut c, &carry, &[], None).await.unwrap();
        assert!(
            matches!(outcome, commit::CarryOutcome::Taken(_)),
            "{outcome:?}"
        );
        let ttl: i64 = redis::cmd("PTTL")
            .arg(k.window("c-1"))
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(ttl > 0 && ttl <= 600_000, "pieces left for {ttl} ms");
    }

    /// A commit resent after a lost reply writes the window's fields again,
    /// with the TTL of fields not yet a record: the record stays a record (no
    /// TTL, its owner, listed) and the resend is a duplicate.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resent_commit_keeps_its_record_for_good() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let s = settings(&srv.url(), "w");
        let k = keys(&s);
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let committer = Committer::new(k.clone(), "w".into(), 1000);
        let epoch = committer.epoch(&mut c).await.unwrap();
        let mut window = Window::new(&PRECISIONS, 120);
        let now = unix_now();
        window.add(
            &crate::model::event::Hit {
                name: "resent",
                count: 3,
                ts_ms: now * 1000,
                value: None,
            },
            now * 1000,
        );
        let cells: Vec<_> = window.cells().collect();
        let sealed = Sealed {
            window: "w-1",
            ids: "1-0",
            cells: &cells,
            stats: &[],
            rejected: &[],
            chunk: CHUNK_CELLS,
        };
        for expected in [Outcome::Committed, Outcome::Duplicate] {
            let outcome = committer
                .commit(&mut c, &epoch, None, Some(&sealed))
                .await
                .unwrap();
            assert_eq!(outcome, expected);
            let record = k.window("w-1");
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&record)
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(ttl, -1, "a record has no TTL");
            let (owner, ids, chunk): (Option<String>, Option<String>, Option<String>) =
                redis::cmd("HMGET")
                    .arg(&record)
                    .arg("owner")
                    .arg("ids")
                    .arg("chunk")
                    .query_async(&mut c)
                    .await
                    .unwrap();
            assert_eq!(
                (owner.as_deref(), ids.as_deref(), chunk.as_deref()),
                (
                    Some("w"),
                    Some("1-0"),
                    Some(CHUNK_CELLS.to_string().as_str())
                )
            );
            assert_eq!(zset_members(&mut c, &k.windows()).await, ["w-1"]);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replayed_or_recovered_window_adds_its_statistics_once() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let s = settings(&srv.url(), "gone");
        let k = keys(&s);
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let now = unix_now();
        let obs = observations(500, 3, now, 3);
        let window = window_of(&obs, now);
        let cells: Vec<_> = window.cells().collect();
        let stats: Vec<_> = window.stat_cells().collect();
        // A small chunk size: many chunks, the first with counts and
        // statistics mixed.
        let chunk = cells.len() + 30;
        let step = Apply {
            window: "w-1",
            cells: &cells,
            stats: &stats,
            chunk,
            by_slot: false,
        };
        let sum = Sum {
            id: "w-1",
            group: None,
            cells: &cells,
            stats: &stats,
            chunk,
        };
        let chunks = plan(&k, &step);
        assert!(
            !chunks[0].stats.is_empty() && chunks.len() > 3,
            "{chunks:?}"
        );
        let sealed = Sealed {
            window: "w-1",
            ids: "",
            cells: &cells,
            stats: &stats,
            rejected: &[],
            chunk,
        };
        let committer = Committer::new(k.clone(), "gone".into(), 1000);
        applied_replayed_and_recovered(&mut c, &committer, &sealed, sum).await;
        let (want, _) = st::reference(
            &obs,
            &DEFAULT_PRECISIONS,
            &DEFAULT_QUANTILE_PRECISIONS,
            kept(now),
        );
        st::assert_equal(&st::read(&mut c, &k).await, &want);

        // A window recorded and never applied: recovery applies its statistics.
        let sealed = Sealed {
            window: "w-2",
            ..sealed
        };
        let outcome = committer
            .commit(&mut c, "0", None, Some(&sealed))
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Committed);
        let (records, _, _) = committer.records(&mut c).await.unwrap();
        assert_eq!(records.len(), 1);
        assert!(committer
            .recover(&mut c, &records[0], Instant::now())
            .await
            .unwrap());
        let doubled: Vec<Obs> = obs.iter().chain(&obs).cloned().collect();
        let (want, _) = st::reference(
            &doubled,
            &DEFAULT_PRECISIONS,
            &DEFAULT_QUANTILE_PRECISIONS,
            kept(now),
        );
        st::assert_equal(&st::read(&mut c, &k).await, &want);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_heavy_statistics_cell_goes_in_by_pieces_of_a_chunk_each_once() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let s = settings(&srv.url(), "spread");
        let k = keys(&s);
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let now = unix_now();
        let obs = st::spread_observations(3000, "api:spread", now);
        let window = window_of(&obs, now);
        let cells: Vec<_> = window.cells().collect();
        let whole: Vec<StatCell<'_>> = window.stat_cells().collect();
        assert!(whole.iter().map(commit::stats::weight).max() > Some(3 * CHUNK_CELLS));
        let mut pieces = Vec::new();
        let stats = commit::split_heavy(whole.clone(), &mut pieces);
        assert!(stats.len() > whole.len() + 6, "{} pieces", stats.len());
        let sum = Sum {
            id: "w-1",
            group: None,
            cells: &cells,
            stats: &stats,
            chunk: CHUNK_CELLS,
        };
        // No apply script weighs more than a chunk.
        for script in commit::plan::scripts(&k, &[sum], false) {
            let weight: usize = (script.parts.iter())
                .map(|p| {
                    p.cells.len()
                        + stats[p.stats.clone()]
                            .iter()
                            .map(commit::stats::weight)
                            .sum::<usize>()
                })
                .sum();
            assert!(weight <= CHUNK_CELLS, "a script of weight {weight}");
        }
        let sealed = Sealed {
            window: "w-1",
            ids: "",
            cells: &cells,
            stats: &stats,
            rejected: &[],
            chunk: CHUNK_CELLS,
        };
        let committer = Committer::new(k.clone(), "spread".into(), 1000);
        applied_replayed_and_recovered(&mut c, &committer, &sealed, sum).await;
        let (want, _) = st::reference(&obs, &PRECISIONS, &DEFAULT_QUANTILE_PRECISIONS, kept(now));
        st::assert_equal(&st::read(&mut c, &k).await, &want);
    }

    /// A new statistics field takes the worker's own text (the shortest
    /// that reads back); a field added to is summed by the script, in 15
    /// digits when they read back, else 17; a sum that is not finite fails
    /// its cell whole on a new key as on one that exists.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statistics_fields_are_written_as_decimals_that_read_back() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let k = keys(&settings(&srv.url(), "text"));
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let committer = Committer::new(k.clone(), "text".into(), 1000);
        let summary = |sum: f64| crate::model::stats::Summary {
            count: 1,
            sum,
            sumsq: sum * sum,
            min: sum,
            max: sum,
            histogram: Default::default(),
        };
        let leak = |sum: f64| &*Box::leak(Box::new(summary(sum)));
        let cell = |name, sum| StatCell {
            precision: 60,
            name,
            bucket: BUCKET,
            summary: leak(sum),
        };
        let apply = |id: &'static str, stats: Vec<StatCell<'static>>| {
            let (committer, mut c) = (committer.clone(), c.clone());
            async move {
                let sum = Sum {
                    id,
                    group: None,
                    cells: &[],
                    stats: &stats,
                    chunk: CHUNK_CELLS,
                };
                let failed = committer.apply(&mut c, &[sum], None, Vec::new()).await;
                failed.unwrap().remove(0)
            }
        };
        let new = vec![cell("a", 0.1), cell("b", 1.5), cell("bad", f64::INFINITY)];
        let first = apply("w-1", new).await;
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(first[0].name, "bad");
        assert!(first[0].error.contains("NaN or infinite"), "{first:?}");
        let added = vec![cell("a", 0.2), cell("b", 2.25), cell("a", f64::INFINITY)];
        let second = apply("w-2", added).await;
        assert_eq!(second.len(), 1, "{second:?}");
        let fields = |name: &'static str| {
            let mut c = c.clone();
            let key = k.stats(60, name);
            async move {
                let f: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
                    .arg(key)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                f
            }
        };
        assert!(fields("bad").await.is_empty(), "nothing of a failed cell");
        let (a, b) = (fields("a").await, fields("b").await);
        let field = |h: &std::collections::HashMap<String, String>, f: &str| {
            h[&format!("{BUCKET}:{f}")].clone()
        };
        // New: the worker's text. Added to: 15 digits when they read back
        // (1.5 + 2.25), else 17 (0.1 + 0.2); always the exact double.
        assert_eq!(field(&b, "sum"), "3.75");
        assert_eq!(field(&b, "sumsq"), "7.3125");
        assert_eq!(field(&a, "sum"), "0.30000000000000004");
        let sumsq: f64 = field(&a, "sumsq").parse().unwrap();
        assert_eq!(sumsq, 0.1 * 0.1 + 0.2 * 0.2);
        let mins = (field(&a, "min"), field(&a, "max"), field(&a, "count"));
        assert_eq!(mins, ("0.1".into(), "0.2".into(), "2".into()));
    }

    /// Commits `sealed`, applies it as `sum`, applies it again (the reply
    /// lost), then has a recovering worker finish it from its record
    /// (statistics read back from it): the markers make both a replay.
    async fn applied_replayed_and_recovered(
        c: &mut Conn,
        committer: &Committer,
        sealed: &Sealed<'_>,
        sum: Sum<'_>,
    ) {
        let outcome = committer.commit(c, "0", None, Some(sealed)).await;
        assert_eq!(outcome.unwrap(), Outcome::Committed);
        for _ in 0..2 {
            let failed = committer.apply(c, &[sum], None, Vec::new()).await;
            assert!(failed.unwrap().iter().all(Vec::is_empty));
        }
        let (records, corrupt, _) = committer.records(c).await.unwrap();
        assert!(corrupt.is_empty());
        assert_eq!(records.len(), 1);
        assert!(committer
            .recover(c, &records[0], Instant::now())
            .await
            .unwrap());
    }

    /// A window of `obs` at every precision, histograms at the quantile ones.
    fn window_of(obs: &[Obs], now: i64) -> Window {
        let mut window = Window::new(&PRECISIONS, 120).with_quantiles(&DEFAULT_QUANTILE_PRECISIONS);
        for (name, count, ts, value) in obs {
            let hit = crate::model::event::Hit {
                name,
                count: *count,
                ts_ms: ts * 1000,
                value: Some(*value),
            };
            window.add(&hit, now * 1000);
        }
        window
    }

    /// A window of counts only, in chunks of [`CHUNK_CELLS`].
    fn counts_only<'a>(window: &'a str, ids: &'a str, cells: &'a [Cell<'a>]) -> Sealed<'a> {
        Sealed {
            window,
            ids,
            cells,
            stats: &[],
            rejected: &[],
            chunk: CHUNK_CELLS,
        }
    }

    /// Reads the stream's 10 new entries for `consumer` (left pending):
    /// their ids, space separated, and their window.
    async fn read_ten(c: &mut Conn, k: &Keys, consumer: &str, now: i64) -> (String, Window) {
        let reply = crate::store::stream::read(c, k, consumer, 100, None, ">")
            .await
            .unwrap();
        let entries = crate::store::stream::read_reply_entries(&reply);
        assert_eq!(entries.len(), 10);
        let ids: Vec<&str> = entries.iter().map(|e| e.id_str()).collect();
        let mut window = Window::new(&PRECISIONS, 120);
        for e in &entries {
            let hit = crate::model::event::decode(e.id, e.pairs()).unwrap();
            window.add(&hit, now * 1000);
        }
        (ids.join(" "), window)
    }

    const BUCKET: i64 = 1_700_000_040;

    fn cells<'a>(keys: &Keys, names: &'a [String], delta: i64) -> Vec<Cell<'a>> {
        let mut v: Vec<Cell<'a>> = names
            .iter()
            .flat_map(|n| {
                [60u32, 300].map(|p| Cell {
                    precision: p,
                    name: n.as_str(),
                    bucket: BUCKET - BUCKET % i64::from(p),
                    delta,
                })
            })
            .collect();
        sort_for_cluster(keys, &mut v);
        v
    }

    /// Asserts that `marker` has fields and that each passes `ok`.
    async fn assert_marked(c: &mut Conn, marker: &str, ok: impl Fn(&str) -> bool) {
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(marker)
            .query_async(c)
            .await
            .unwrap();
        assert!(
            !fields.is_empty() && fields.iter().all(|f| ok(f)),
            "{marker}: {fields:?}"
        );
    }

    /// Each name's count at both precisions, summed.
    async fn totals(c: &mut Conn, keys: &Keys, names: &[String]) -> Vec<i64> {
        let mut out = Vec::new();
        for n in names {
            let mut t = 0;
            for p in [60u32, 300] {
                let v: Option<i64> = redis::cmd("HGET")
                    .arg(keys.count(p, n))
                    .arg(BUCKET - BUCKET % i64::from(p))
                    .query_async(c)
                    .await
                    .unwrap();
                t += v.unwrap_or(0);
            }
            out.push(t);
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sums_of_two_groups_share_scripts_and_every_replay_counts_once() {
        let cluster = cluster(3, 0);
        let mut c = conn(&cluster.url()).await;
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
        let committer = Committer::new(keys.clone(), "grouptest".into(), 1000);
        let names = |p: &str| -> Vec<String> { (0..400).map(|i| format!("{p}{i}")).collect() };
        let (a, b, d, w) = (names("a"), names("b"), names("d"), names("w"));
        let (ca, cb, cd, cw) = (
            cells(&keys, &a, 1),
            cells(&keys, &b, 2),
            cells(&keys, &d, 5),
            cells(&keys, &w, 3),
        );
        let sum = |id, group, cells| Sum {
            id,
            group: Some(group),
            cells,
            stats: &[],
            chunk: CHUNK_CELLS,
        };
        // Sum b's statistics too: under its own markers, in the same scripts.
        let mut summary = crate::model::stats::Summary::default();
        summary.observe(2.0, 1, true);
        summary.observe(4.0, 2, true);
        let minute = BUCKET - BUCKET % 60;
        let mut sb: Vec<StatCell<'_>> = b
            .iter()
            .map(|n| StatCell {
                precision: 60,
                name: n,
                bucket: minute,
                summary: &summary,
            })
            .collect();
        commit::sort_stats_for_cluster(&keys, &mut sb);
        let a1 = sum("sa", "g1", &ca);
        let b2 = Sum {
            stats: &sb,
            ..sum("sb", "g2", &cb)
        };
        let d1 = sum("sd", "g1", &cd);
        // A window, applied in the same scripts: under its own markers.
        let w1 = Sum {
            group: None,
            ..sum("w-1", "", &cw)
        };

        // Together: a sum recorded in g1, one in g2, a window.
        let failed = committer
            .apply(&mut c, &[a1, b2, w1], None, vec![])
            .await
            .unwrap();
        assert!(failed.iter().all(Vec::is_empty), "{failed:?}");
        let want = |names: &[String], per: i64| vec![2 * per; names.len()];
        assert_eq!(totals(&mut c, &keys, &a).await, want(&a, 1));
        assert_eq!(totals(&mut c, &keys, &b).await, want(&b, 2));
        assert_eq!(totals(&mut c, &keys, &w).await, want(&w, 3));

        // In a slot holding cells of both, each group's marks are in its own
        // marker there.
        let slots = |cells: &[Cell<'_>]| -> std::collections::BTreeSet<u16> {
            cells
                .iter()
                .map(|c| slot(keys.count(c.precision, c.name).as_bytes()))
                .collect()
        };
        let both = slots(&ca)
            .intersection(&slots(&cb))
            .copied()
            .collect::<Vec<_>>();
        assert!(
            !both.is_empty(),
            "800 cells each over 16,384 slots share some"
        );
        for at in both {
            for (group, id) in [("g1", "sa"), ("g2", "sb")] {
                let prefix = format!("{id}:");
                let marker = keys.applied_marker_tagged(group, tag_for_slot(at));
                assert_marked(&mut c, &marker, |f| f.starts_with(&prefix)).await;
            }
        }

        // The window's chunks are marked in its own markers, by number.
        for at in slots(&cw) {
            let marker = keys.applied_marker_tagged("w-1", tag_for_slot(at));
            assert_marked(&mut c, &marker, |f| f.parse::<usize>().is_ok()).await;
        }

        // Replays: together again, each alone, and one with a new sum.
        committer
            .apply(&mut c, &[a1, b2, w1], None, vec![])
            .await
            .unwrap();
        committer.apply(&mut c, &[b2], None, vec![]).await.unwrap();
        committer.apply(&mut c, &[a1], None, vec![]).await.unwrap();
        committer.apply(&mut c, &[w1], None, vec![]).await.unwrap();
        committer
            .apply(&mut c, &[b2, d1, w1], None, vec![])
            .await
            .unwrap();
        assert_eq!(totals(&mut c, &keys, &a).await, want(&a, 1));
        assert_eq!(totals(&mut c, &keys, &b).await, want(&b, 2));
        assert_eq!(totals(&mut c, &keys, &d).await, want(&d, 5));
        assert_eq!(totals(&mut c, &keys, &w).await, want(&w, 3));
        for n in &b {
            let (count, sum): (i64, f64) = redis::cmd("HMGET")
                .arg(keys.stats(60, n))
                .arg(format!("{minute}:count"))
                .arg(format!("{minute}:sum"))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!((count, sum), (3, 10.0), "{n}");
        }
        let listed: Option<f64> = redis::cmd("ZSCORE")
            .arg(keys.stats_known())
            .arg(Keys::member(60, &b[0]))
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(listed, Some(0.0));

        // Every marker the group leaves is one the worker expires once its
        // sums are finished.
        let mut markers = committer.markers(&[a1, b2], true);
        markers.extend(committer.markers(&[b2, d1], true));
        for m in &markers {
            let exists: i64 = redis::cmd("EXISTS")
                .arg(m)
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(exists, 1, "{m}");
        }
    }
}
