//! The ceiling: bare consumers that only read (XREADGROUP, the worker's read
//! size) and acknowledge (XACK), nothing else. The fastest any worker could
//! drain this Redis from this machine with as many consumers.

use std::time::Instant;

use crate::store::connect::{Client, Conn};

use crate::model::keys::Keys;
use crate::store::stream;

/// The ceiling's group for `consumers` consumers.
pub(crate) fn group(consumers: usize) -> String {
    format!("bench-ceiling-{consumers}")
}

/// What the consumers did.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Drained {
    /// Entries read and acknowledged.
    pub entries: u64,
    /// Seconds from the first read to the last acknowledgement.
    pub secs: f64,
    /// Redis' own CPU time over those seconds (user + system, `INFO cpu`).
    pub redis_cpu_secs: f64,
}

impl Drained {
    /// Entries per second.
    pub(crate) fn rate(&self) -> f64 {
        self.entries as f64 / self.secs.max(1e-9)
    }

    /// Redis CPU per entry, µs: what one entry costs the Redis thread.
    pub(crate) fn redis_cpu_us(&self) -> f64 {
        self.redis_cpu_secs * 1e6 / (self.entries as f64).max(1.0)
    }
}

/// Redis' own CPU time so far, user + system, in seconds (`INFO cpu`).
pub(crate) async fn redis_cpu_secs(conn: &mut Conn) -> anyhow::Result<f64> {
    let info: redis::InfoDict = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    let secs = |field| info.get::<f64>(field).unwrap_or(0.0);
    Ok(secs("used_cpu_sys") + secs("used_cpu_user"))
}

/// Drains `stream` through the ceiling's group with `consumers` consumers,
/// each on its own connection; checks that `expected` entries came through.
pub(crate) async fn run(
    client: &Client,
    stream_key: &str,
    consumers: usize,
    expected: u64,
) -> anyhow::Result<Drained> {
    let k = Keys::named(stream_key, &group(consumers), "");
    // The worker's read size.
    let read_count = crate::model::config::WorkerArgs::default().read_count;
    let mut probe = client.open(crate::store::connect::RESPONSE_TIMEOUT).await?;
    let mut conns = Vec::new();
    for _ in 0..consumers {
        conns.push(client.open(crate::store::connect::RESPONSE_TIMEOUT).await?);
    }
    let cpu = redis_cpu_secs(&mut probe).await?;
    let started = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut conn)| {
            let k = k.clone();
            tokio::spawn(async move {
                let consumer = format!("c{i}");
                let mut n = 0u64;
                let mut ids = String::new();
                loop {
                    let reply =
                        stream::read(&mut conn, &k, &consumer, read_count, None, ">").await?;
                    let entries = stream::read_reply_entries(&reply);
                    if entries.is_empty() {
                        return Ok::<u64, redis::RedisError>(n);
                    }
                    n += entries.len() as u64;
                    ids.clear();
                    for e in &entries {
                        ids.push_str(e.id_str());
                        ids.push(' ');
                    }
                    let mut pipe = redis::pipe();
                    stream::ack_into(&mut pipe, &k, &ids, usize::MAX);
                    pipe.query_async::<()>(&mut conn).await?;
                }
            })
        })
        .collect();
    let mut entries = 0;
    for t in tasks {
        entries += t
            .await
            .map_err(|e| anyhow::anyhow!("check failed: ceiling consumer: {e}"))??;
    }
    let secs = started.elapsed().as_secs_f64();
    let redis_cpu_secs = redis_cpu_secs(&mut probe).await? - cpu;
    anyhow::ensure!(
        entries == expected,
        "check failed: the ceiling read {entries} entries, {expected} were prefilled"
    );
    Ok(Drained {
        entries,
        secs,
        redis_cpu_secs,
    })
}
