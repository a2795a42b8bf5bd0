//! The scripts themselves against a real redis-server: a carry marks its
//! windows carried and refuses one a worker took first, and a producer's
//! batch after a failed one is refused so that no retry is lost.

#[cfg(test)]
mod tests {
    use crate::testing::*;

    /// carry.lua and take.lua themselves: a carry marks each of its windows
    /// carried (whoever finishes one then applies none of its cells); it
    /// refuses, writing nothing, a window that a worker finishing it took
    /// first; and a carried window is not taken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_carry_marks_its_windows_carried_and_refuses_one_taken() {
        use crate::store::scripts::{CARRY, TAKE};
        let srv = server();
        let mut c = conn(&srv.url()).await;
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let run = |carry: &'static str, windows: &[&'static str]| {
            let mut cmd = CARRY.evalsha(3 + windows.len());
            cmd.arg("windows").arg(carry).arg("registration");
            for w in windows {
                cmd.arg(format!("record:{w}"));
            }
            cmd.arg("me")
                .arg("token")
                .arg(15_000)
                .arg(carry)
                .arg(500)
                .arg(windows.len())
                .arg("");
            for w in windows {
                cmd.arg(*w);
            }
            cmd
        };
        let take = |w: &str| TAKE.evalsha(1).arg(format!("record:{w}")).clone();
        for w in ["w1", "w2", "w3", "w4"] {
            redis::cmd("HSET")
                .arg(format!("record:{w}"))
                .arg("owner")
                .arg("me")
                .query_async::<()>(&mut c)
                .await
                .unwrap();
        }
        for carry in ["carry1", "carry2"] {
            redis::cmd("HSET")
                .arg(carry)
                .arg("pieces")
                .arg(0)
                .arg("stats_pieces")
                .arg(0)
                .query_async::<()>(&mut c)
                .await
                .unwrap();
        }

        // A carry whose cells were not written first is refused with an
        // error code, so that the log names the refusal, not its first word.
        let refused = run("carry0", &["w1"])
            .query_async::<Vec<String>>(&mut c)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some("ERR"), "{refused}");
        assert!(
            refused.to_string().contains("has no cells written"),
            "{refused}"
        );
        let ok: Vec<String> = run("carry1", &["w1", "w2"])
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(ok, ["ok", "carry1"]);
        for w in ["w1", "w2"] {
            let carried: Option<String> = redis::cmd("HGET")
                .arg(format!("record:{w}"))
                .arg("carried")
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(carried.as_deref(), Some("carry1"), "{w} is carried");
            let taken: Vec<String> = take(w).query_async(&mut c).await.unwrap();
            assert_eq!(
                taken,
                ["carried", "carry1"],
                "a carried window is not taken"
            );
        }
        assert_eq!(zset_members(&mut c, "windows").await, ["carry1"]);

        // w4 was taken by a worker finishing it: the carry of w3 and w4 is
        // refused, and neither window is marked.
        let taken: Vec<String> = take("w4").query_async(&mut c).await.unwrap();
        assert_eq!(taken, ["ok", ""]);
        let gone: Vec<String> = run("carry2", &["w3", "w4"])
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(gone, ["gone", "w4"]);
        let left: (bool, Option<String>, Option<String>, usize) = redis::pipe()
            .cmd("EXISTS")
            .arg("carry2")
            .cmd("HGET")
            .arg("record:w3")
            .arg("carried")
            .cmd("HGET")
            .arg("record:w4")
            .arg("carried")
            .cmd("ZCARD")
            .arg("windows")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(
            left,
            (false, None, None, 1),
            "a refused carry writes nothing"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_after_a_failed_one_is_refused_so_no_retry_is_lost() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let k = keys(&settings(&srv.url(), "any"));
        let dedup = k.producer("p1");
        let event = crate::model::event::encode("x", 1, None);
        let produce = |no: u64, confirmed: u64| {
            let mut cmd = crate::store::scripts::PRODUCE.evalsha(2);
            cmd.arg(&k.stream)
                .arg(&dedup)
                .arg(no)
                .arg(60)
                .arg(confirmed)
                .arg(&event);
            cmd
        };
        // Batch 1 of a trip failed (NOSCRIPT before the scripts were loaded):
        // batch 2 must not go through, or the retry of 1 would look like a
        // duplicate and be dropped.
        let refused: redis::RedisResult<i64> = produce(2, 0).query_async(&mut c).await;
        assert!(refused.is_err(), "{refused:?}");
        assert_eq!(produce(1, 0).query_async::<i64>(&mut c).await.unwrap(), 1);
        assert_eq!(produce(2, 0).query_async::<i64>(&mut c).await.unwrap(), 1);
        assert_eq!(
            produce(2, 0).query_async::<i64>(&mut c).await.unwrap(),
            0,
            "a retry"
        );
        // After the number expired, the producer's own record decides.
        let _: () = redis::cmd("DEL")
            .arg(&dedup)
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(produce(4, 2).query_async::<i64>(&mut c).await.is_err());
        assert_eq!(produce(3, 2).query_async::<i64>(&mut c).await.unwrap(), 1);
        let len: i64 = redis::cmd("XLEN")
            .arg(&k.stream)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(len, 3);

        // End to end on a Redis that never saw the scripts: all arrive.
        let fresh = server();
        let producer = crate::service::producer::Producer::start(
            &crate::model::config::RedisArgs::from_url(&fresh.url()),
            &crate::model::config::StreamArgs::default(),
            crate::service::producer::ProducerOptions::default(),
        )
        .unwrap();
        for _ in 0..20_000 {
            producer.hit("fresh");
        }
        producer.flush().await;
        let mut f = conn(&fresh.url()).await;
        let len: i64 = redis::cmd("XLEN")
            .arg("hits")
            .query_async(&mut f)
            .await
            .unwrap();
        assert_eq!(len, 20_000);
    }
}
