//! Connections, a worker's settings and in-process workers through the
//! library's public API (`store::connect`, the settings, the shutdown
//! signal, `service::shards::run`), and the wait for a drained stream; shared by the integration tests and the crate's own
//! (`src/testing.rs` includes this file).

use std::time::{Duration, Instant};

use hitcount::model::config::{LayoutArgs, RedisArgs, StreamArgs, WorkerArgs};
use hitcount::model::keys::Keys;
use hitcount::model::shutdown::{self, Trigger};
use hitcount::service::worker::Settings;
use hitcount::store::connect::Conn;

/// A connection as hitcount opens them (one node, or a cluster when the
/// server is one).
pub async fn conn(url: &str) -> Conn {
    let client = hitcount::store::connect::client(&RedisArgs::from_url(url)).unwrap();
    client.open(Duration::from_secs(10)).await.unwrap()
}

/// Asserts that Redis refused nothing (its `ACL LOG` is empty), naming
/// `who` when it did.
pub async fn assert_nothing_refused(c: &mut impl redis::aio::ConnectionLike, who: &str) {
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query_async(c).await.unwrap();
    assert!(log.is_empty(), "{who}: ACL LOG: {log:?}");
}

/// Settings for a worker on `url` with fast claims for tests.
pub fn settings(url: &str, consumer: &str) -> Settings {
    Settings {
        redis: RedisArgs::from_url(url),
        layout: LayoutArgs::default(),
        stream: StreamArgs::default(),
        worker: WorkerArgs {
            consumer: Some(consumer.into()),
            block_ms: 200,
            ..WorkerArgs::default()
        },
    }
}

pub fn keys(s: &Settings) -> Keys {
    Keys::new(&s.layout, &s.stream)
}

/// In-process workers that stop when dropped.
pub struct Workers {
    trigger: Trigger,
    handles: Vec<tokio::task::JoinHandle<Result<(), hitcount::model::config::ConfigError>>>,
}

impl Workers {
    pub fn start(all: Vec<Settings>) -> Workers {
        let (trigger, shutdown) = shutdown::channel();
        let handles = all
            .into_iter()
            .map(|s| {
                let health = hitcount::service::health::Health::new(Duration::from_secs(60));
                tokio::spawn(hitcount::service::shards::run(s, health, shutdown.clone()))
            })
            .collect();
        Workers { trigger, handles }
    }

    pub async fn stop(self) {
        self.trigger.trigger();
        for h in self.handles {
            h.await.unwrap().unwrap();
        }
    }
}

/// Waits until the group has read and acknowledged the whole stream.
pub async fn wait_drained(conn: &mut Conn, keys: &Keys) {
    wait_drained_within(conn, keys, Duration::from_secs(60)).await;
}

/// [`wait_drained`], for at most `within`.
pub async fn wait_drained_within(conn: &mut Conn, keys: &Keys, within: Duration) {
    let deadline = Instant::now() + within;
    while !super::plain::drained(conn, keys).await.unwrap() {
        if Instant::now() > deadline {
            // Say whether it was stuck (entries pending) or slow (lag).
            let groups: redis::Value = redis::cmd("XINFO")
                .arg("GROUPS")
                .arg(&keys.stream)
                .query_async(conn)
                .await
                .unwrap();
            panic!("stream not drained within {within:?}: {groups:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
