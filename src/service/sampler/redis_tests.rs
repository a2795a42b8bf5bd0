//! The group sampler against a real Redis and a real Redis Cluster: lag,
//! pending and backlog age, of one stream and of every shard.

#[cfg(test)]
mod tests {
    use crate::model::config::{LayoutArgs, StreamArgs};
    use crate::model::keys::Keys;
    use crate::service::sampler::{sample_all, total, Sample};
    use crate::store::connect::Conn;
    use crate::testing::*;

    /// Reads the group's lag, pending count and backlog age on one stream (or
    /// shard). `None` when the stream or the group does not exist yet.
    async fn sample(conn: &mut Conn, keys: &Keys) -> redis::RedisResult<Option<Sample>> {
        let mut all = sample_all(conn, std::slice::from_ref(keys)).await?;
        Ok(all.pop().flatten())
    }

    /// Appends a hit of name `a` with id `id`.
    async fn xadd(c: &mut Conn, keys: &Keys, id: &str) {
        let _: String = redis::cmd("XADD")
            .arg(&keys.stream)
            .arg(id)
            .arg("name")
            .arg("a")
            .query_async(c)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn samples_lag_pending_and_backlog_age() {
        let server = server();
        let mut c = conn(&server.url()).await;
        let s = settings(&server.url(), "sampler");
        let keys = keys(&s);
        assert_eq!(sample(&mut c, &keys).await.unwrap(), None, "no stream yet");

        // Five entries stamped 40, 30, 20, 10 and 0 seconds ago.
        let now_ms = crate::model::clock::unix_ms();
        for age in [40, 30, 20, 10, 0] {
            xadd(&mut c, &keys, &format!("{}-0", now_ms - age * 1000)).await;
        }
        crate::store::stream::ensure_group(&mut c, &keys, None)
            .await
            .unwrap();
        let Sample {
            lag,
            pending,
            backlog_age,
        } = sample(&mut c, &keys).await.unwrap().unwrap();
        assert_eq!((lag, pending), (Some(5), 0));
        assert!((40.0..100.0).contains(&backlog_age), "{backlog_age}");

        // Two delivered, not acknowledged: the backlog starts at the third.
        let _: redis::Value = crate::store::stream::read(&mut c, &keys, "c1", 2, None, ">")
            .await
            .unwrap();
        let got = sample(&mut c, &keys).await.unwrap().unwrap();
        assert_eq!((got.lag, got.pending), (Some(3), 2));
        assert!(
            (20.0..80.0).contains(&got.backlog_age),
            "{}",
            got.backlog_age
        );

        // Everything delivered: no backlog.
        let _: redis::Value = crate::store::stream::read(&mut c, &keys, "c1", 10, None, ">")
            .await
            .unwrap();
        let got = sample(&mut c, &keys).await.unwrap().unwrap();
        assert_eq!((got.lag, got.pending, got.backlog_age), (Some(0), 5, 0.0));
    }

    /// A stream that took the last possible id (it takes no more entries)
    /// is sampled, and its consumers and backlog read (as `status` does),
    /// instead of failing on Redis' refusal of a range after that id.
    #[tokio::test]
    async fn a_stream_at_the_last_possible_id_is_sampled() {
        let server = server();
        let mut c = conn(&server.url()).await;
        let keys = keys(&settings(&server.url(), "sampler-last-id"));
        xadd(&mut c, &keys, "18446744073709551615-18446744073709551615").await;
        crate::store::stream::ensure_group(&mut c, &keys, None)
            .await
            .unwrap();
        let _: redis::Value = crate::store::stream::read(&mut c, &keys, "c1", 10, None, ">")
            .await
            .unwrap();
        let got = sample(&mut c, &keys).await.unwrap().unwrap();
        assert_eq!((got.lag, got.pending, got.backlog_age), (Some(0), 1, 0.0));
        let group = crate::store::group::own_group(&mut c, &keys)
            .await
            .unwrap()
            .unwrap();
        let (consumers, lag, age) =
            crate::store::group::consumers_and_backlog(&mut c, &keys, &group, 1)
                .await
                .unwrap();
        assert_eq!((consumers.len(), lag, age), (1, Some(0), None));
    }

    const SHARDS: u32 = 4;

    /// Shard k gets `entries[k]` entries stamped 10 s ago, and the group on
    /// every shard but the last; `delivered` of shard 0's are read unacked.
    async fn fill(c: &mut Conn, shards: &[Keys], entries: &[usize], delivered: usize) {
        let at = crate::model::clock::unix_ms() - 10_000;
        for (k, n) in shards.iter().zip(entries) {
            for i in 0..*n {
                let _: String = redis::cmd("XADD")
                    .arg(&k.stream)
                    .arg(format!("{at}-{i}"))
                    .arg("name")
                    .arg("a")
                    .query_async(c)
                    .await
                    .unwrap();
            }
        }
        for k in &shards[..shards.len() - 1] {
            crate::store::stream::ensure_group(c, k, None)
                .await
                .unwrap();
        }
        let _: redis::Value = crate::store::stream::read(c, &shards[0], "c1", delivered, None, ">")
            .await
            .unwrap();
    }

    /// The sampler over four shards: each shard's own lag, pending and backlog
    /// age, and their total; a shard without the group is left out.
    async fn sampler_reads_every_shard(c: &mut Conn, clustered: bool) {
        let stream = StreamArgs {
            shards: SHARDS,
            ..StreamArgs::default()
        };
        let shards = Keys::all_shards(&LayoutArgs::default(), &stream, clustered);
        let all = sample_all(c, &shards).await.unwrap();
        assert_eq!(all, vec![None; SHARDS as usize], "no stream yet");
        fill(c, &shards, &[3, 1, 0, 5], 2).await;
        let all = sample_all(c, &shards).await.unwrap();
        let lags: Vec<_> = all.iter().map(|s| s.as_ref().map(|s| s.lag)).collect();
        assert_eq!(
            lags,
            vec![Some(Some(1)), Some(Some(1)), Some(Some(0)), None]
        );
        let s0 = all[0].as_ref().unwrap();
        assert_eq!(s0.pending, 2);
        assert!((9.0..60.0).contains(&s0.backlog_age), "{s0:?}");
        assert_eq!(all[2].as_ref().unwrap().backlog_age, 0.0, "empty shard");
        let Sample {
            lag,
            pending,
            backlog_age,
        } = total(&all).unwrap();
        assert_eq!((lag, pending), (Some(2), 2));
        assert!((9.0..60.0).contains(&backlog_age));
    }

    #[tokio::test]
    async fn the_sampler_reads_every_shard_on_one_redis() {
        let server = server();
        let mut c = conn(&server.url()).await;
        sampler_reads_every_shard(&mut c, false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sampler_reads_every_shard_on_a_cluster() {
        let cluster = crate::testing::cluster(3, 0);
        let mut c = conn(&cluster.url()).await;
        assert!(c.is_cluster());
        sampler_reads_every_shard(&mut c, true).await;
    }
}
