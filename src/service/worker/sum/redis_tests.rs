//! The process' sum against a real redis-server: windows wait while a
//! shard has more coming and go in together as one sum once none has, a flush
//! applies them at once, and a forgotten shard's windows stay recorded for
//! its resync to finish, each counted once.

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::model::ids::IdList;
    use crate::service::worker::apply::recorded;
    use crate::service::worker::batch::Batch;
    use crate::service::worker::sum::Summer;
    use crate::store::commit::{Committer, Deferred, Outcome, Sealed, CHUNK_CELLS};
    use crate::store::connect::Conn;
    use crate::testing::*;

    /// The count of `name` at one day's precision.
    async fn counted(c: &mut Conn, name: &str) -> i64 {
        let counts: Vec<i64> = redis::cmd("HVALS")
            .arg(format!("count:86400:{name}"))
            .query_async(c)
            .await
            .unwrap();
        counts.iter().sum()
    }

    /// Entries pending for the group, and windows recorded.
    async fn pending_and_records(c: &mut Conn, keys: &crate::model::keys::Keys) -> (i64, i64) {
        let pending: redis::Value = redis::cmd("XPENDING")
            .arg(&keys.stream)
            .arg(&keys.group)
            .query_async(c)
            .await
            .unwrap();
        let pending = match pending {
            redis::Value::Array(v) => match v.first() {
                Some(redis::Value::Int(n)) => *n,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        let records: i64 = redis::cmd("ZCARD")
            .arg(keys.windows())
            .query_async(c)
            .await
            .unwrap();
        (pending, records)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn windows_wait_while_a_shard_has_more_coming_and_go_in_once_as_one_sum() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let mut s = settings(&srv.url(), "w");
        // Only a shard with more coming or a flush keep windows waiting, never age.
        s.worker.carry_ms = 600_000;
        let k = keys(&s);
        crate::store::scripts::load_all(&mut c).await.unwrap();
        crate::store::stream::ensure_group(&mut c, &k, None)
            .await
            .unwrap();
        let client = crate::store::client::client(&s.redis).unwrap();
        let summer = Summer::start(s.worker.clone(), &s.layout, client);
        let mut share = summer.join(0);
        let committer = Committer::new(k.clone(), "w".into(), 1000);
        let epoch = committer.epoch(&mut c).await.unwrap();
        let now = unix_now();
        // Commits a window of the entries waiting (`n` hits of `name`) and
        // hands it in.
        let mut seq = 0;
        let mut window = async |c: &mut Conn, share: &mut super::super::Share, name, n| {
            xadd_hits(c, name, n, now).await;
            let reply = crate::store::stream::read(c, &k, "w", 1000, None, ">")
                .await
                .unwrap();
            let entries = crate::store::stream::read_reply_entries(&reply);
            let mut batch = Batch::new(&s.layout.precisions, s.layout.samples);
            batch.add(&entries, now * 1000, now * 1000);
            seq += 1;
            let id = format!("test-{seq}");
            let mut pieces = Vec::new();
            let (cells, stats) = recorded(batch.window().cell_lists(), &k, false, &mut pieces);
            let sealed = Sealed {
                window: &id,
                ids: batch.ids(),
                cells: &cells,
                stats: &stats,
                rejected: &[],
                chunk: CHUNK_CELLS,
            };
            let outcome = committer.commit(c, &epoch, None, Some(&sealed)).await;
            assert_eq!(outcome.unwrap(), Outcome::Committed);
            let deferred = Deferred {
                window: id.clone(),
                ids: IdList::parse(batch.ids()).unwrap(),
                committed: Instant::now(),
                oldest_ms: None,
            };
            share
                .add(&committer, deferred, batch.window_mut())
                .await
                .unwrap();
        };

        share.set_coming(true).await.unwrap();
        window(&mut c, &mut share, "a", 5).await;
        window(&mut c, &mut share, "a", 7).await;
        // More coming: nothing goes in (a little time for a wrong apply to show).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(counted(&mut c, "a").await, 0);
        assert_eq!(pending_and_records(&mut c, &k).await, (12, 2));

        // At the head: both windows go in as one sum, then are finished.
        share.set_coming(false).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while pending_and_records(&mut c, &k).await != (0, 0) {
            assert!(Instant::now() < deadline, "not applied at the head");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(counted(&mut c, "a").await, 12);
        // Under one marker: a sum's, not each window's own.
        let markers: Vec<String> = redis::cmd("KEYS")
            .arg("hc:applied:*")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(markers.len(), 1, "{markers:?}");
        assert!(!markers[0].contains("test-"), "{markers:?}");

        // A flush applies at once, more coming or not.
        share.set_coming(true).await.unwrap();
        window(&mut c, &mut share, "b", 3).await;
        share.flush().await.unwrap();
        assert_eq!(counted(&mut c, "b").await, 3);
        assert_eq!(pending_and_records(&mut c, &k).await, (0, 0));

        // Forgotten (a resync): the window stays recorded, its entries
        // pending, and recovery counts it once.
        window(&mut c, &mut share, "c", 4).await;
        share.forget(false).await;
        share.flush().await.unwrap();
        assert_eq!(counted(&mut c, "c").await, 0, "forgotten, not applied");
        assert_eq!(pending_and_records(&mut c, &k).await, (4, 1));
        let (records, _, _) = committer.records(&mut c).await.unwrap();
        for r in &records {
            committer.recover(&mut c, r, Instant::now()).await.unwrap();
        }
        assert_eq!(counted(&mut c, "c").await, 4);
        assert_eq!(pending_and_records(&mut c, &k).await, (0, 0));
        share.forget(true).await;
    }
}
