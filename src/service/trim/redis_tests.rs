//! Trimming the stream never removes an entry a consumer group still needs
//! (pending anywhere, or not yet delivered), also with a second group that
//! lags behind; a stale token trims nothing.

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::model::config::{LayoutArgs, LeaderArgs};
    use crate::model::keys::Keys;
    use crate::service::cleaner::CleanError;
    use crate::service::leader::Lease;
    use crate::store::connect::Conn;
    use crate::testing::ServerOptions;
    use crate::testing::*;

    async fn ids(c: &mut Conn) -> Vec<String> {
        let v: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg("hits")
            .arg("-")
            .arg("+")
            .query_async(c)
            .await
            .unwrap();
        v.into_iter().map(|(id, _)| id).collect()
    }

    /// Reads `n` entries as `group`, acknowledging the first `ack` of them.
    async fn read(c: &mut Conn, group: &str, n: usize, ack: usize) -> Vec<String> {
        let got = read_new(c, group, "c1", n).await;
        if ack > 0 {
            let mut cmd = redis::cmd("XACK");
            cmd.arg("hits").arg(group);
            for id in &got[..ack] {
                cmd.arg(id);
            }
            let _: i64 = cmd.query_async(c).await.unwrap();
        }
        got
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trimming_keeps_what_every_group_needs() {
        let _alone = exclusive().await;
        slowlog_clean_in_one_of(SLOWLOG_ATTEMPTS, trims).await;
    }

    /// The trims of a stream read by two groups; returns the SLOWLOG.
    async fn trims() -> Vec<String> {
        // Small stream nodes, so approximate trimming shows on small streams.
        let srv = slowlog_server_with(ServerOptions {
            extra: vec!["stream-node-max-entries 10".into()],
            ..ServerOptions::default()
        });
        let mut c = conn(&srv.url()).await;
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let keys = Keys::new(&LayoutArgs::default(), &Default::default());
        let lease = Arc::new(Lease::new(&keys, &LeaderArgs::default(), "test"));
        assert!(lease.try_acquire(&mut c).await.unwrap());

        // No group yet: nothing is trimmed.
        let mut pipe = redis::pipe();
        for i in 0..1000 {
            pipe.cmd("XADD").arg("hits").arg("*").arg("i").arg(i);
        }
        let _: () = pipe.query_async(&mut c).await.unwrap();
        let all = ids(&mut c).await;
        let t = crate::service::trim::trim(&mut c, &keys, &lease)
            .await
            .unwrap();
        assert_eq!(t.entries, 0);

        for g in ["hitcount", "other"] {
            let _: () = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg("hits")
                .arg(g)
                .arg("0")
                .query_async(&mut c)
                .await
                .unwrap();
        }
        // hitcount read and acknowledged 950; "other" lags: read 300, acked 100.
        read(&mut c, "hitcount", 950, 950).await;
        let other = read(&mut c, "other", 300, 100).await;
        let t = crate::service::trim::trim(&mut c, &keys, &lease)
            .await
            .unwrap();
        assert_eq!(t.min_id, other[100], "the oldest entry pending in 'other'");
        let left = ids(&mut c).await;
        assert!(t.entries >= 90, "whole nodes below it went: {}", t.entries);
        assert_eq!(left.len() as u64, 1000 - t.entries);
        assert!(
            left.ends_with(&all[100..]),
            "everything from the pending on is kept"
        );

        // 'other' catches up completely; hitcount still has 50 undelivered.
        let rest = read(&mut c, "other", 1000, 0).await;
        let mut ack = redis::cmd("XACK");
        ack.arg("hits").arg("other");
        for id in other[100..].iter().chain(&rest) {
            ack.arg(id);
        }
        let _: i64 = ack.query_async(&mut c).await.unwrap();
        let t = crate::service::trim::trim(&mut c, &keys, &lease)
            .await
            .unwrap();
        let left = ids(&mut c).await;
        assert!(left.ends_with(&all[950..]), "undelivered entries are kept");
        assert!(
            left.len() <= 60,
            "trimmed up to hitcount's last delivered: {}",
            left.len()
        );
        assert!(t.entries > 0);

        // A worker whose token no longer holds the lease trims nothing.
        let stale = Lease::new(&keys, &LeaderArgs::default(), "stale");
        assert!(!stale.try_acquire(&mut c).await.unwrap());
        assert!(matches!(
            crate::service::trim::trim(&mut c, &keys, &stale).await,
            Err(CleanError::LostLease)
        ));
        slowlog(&mut c).await
    }

    /// Stream ids compare as numbers (`9-5 < 10-0`), never as text: with ids of
    /// different lengths a text comparison would trim an entry still pending.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ids_of_different_lengths_compare_as_numbers() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        crate::store::scripts::load_all(&mut c).await.unwrap();
        let keys = Keys::new(&LayoutArgs::default(), &Default::default());
        let lease = Arc::new(Lease::new(&keys, &LeaderArgs::default(), "test"));
        assert!(lease.try_acquire(&mut c).await.unwrap());
        let mut pipe = redis::pipe();
        for id in ["8-0", "9-0", "9-5", "10-0", "11-0", "100-0"] {
            pipe.cmd("XADD").arg("hits").arg(id).arg("i").arg(id);
        }
        let _: () = pipe.query_async(&mut c).await.unwrap();
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg("hits")
            .arg("hitcount")
            .arg("0")
            .query_async(&mut c)
            .await
            .unwrap();
        // Read all six; acknowledge all but 9-5, which stays pending.
        let got = read(&mut c, "hitcount", 6, 0).await;
        assert_eq!(got, ["8-0", "9-0", "9-5", "10-0", "11-0", "100-0"]);
        let _: i64 = redis::cmd("XACK")
            .arg("hits")
            .arg("hitcount")
            .arg("8-0")
            .arg("9-0")
            .arg("10-0")
            .arg("11-0")
            .arg("100-0")
            .query_async(&mut c)
            .await
            .unwrap();
        let t = crate::service::trim::trim(&mut c, &keys, &lease)
            .await
            .unwrap();
        assert_eq!(t.min_id, "9-5", "the oldest pending entry");
        let left = ids(&mut c).await;
        assert!(
            left.contains(&"9-5".to_string()),
            "the pending entry is kept: {left:?}"
        );
        assert!(left.ends_with(&[
            "9-5".to_string(),
            "10-0".into(),
            "11-0".into(),
            "100-0".into()
        ]));
    }
}
