//! The seeds' reference for counters, every counter read back as the
//! seeds read them, and hits appended for both; shared by the integration
//! tests and the crate's own (`src/testing.rs` includes this file).

use std::collections::BTreeMap;

use hitcount::model::keys::Keys;
use hitcount::store::connect::Conn;

/// The seeds' update_counter, as increments: (precision, name) -> bucket -> count.
pub type Counts = BTreeMap<(u32, String), BTreeMap<i64, i64>>;

pub fn reference(hits: &[(String, i64, i64)], precisions: &[u32]) -> Counts {
    let mut out = Counts::new();
    for (name, count, ts) in hits {
        for &p in precisions {
            let bucket = ts.div_euclid(p as i64) * p as i64;
            *out.entry((p, name.clone()))
                .or_default()
                .entry(bucket)
                .or_default() += count;
        }
    }
    out
}

/// Every member of a ZSET, in order (`known:`, the window records' list).
pub async fn zset_members(conn: &mut Conn, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap()
}

/// Every counter in Redis under the layout, read as the seeds read them.
pub async fn read_all(conn: &mut Conn, keys: &Keys) -> Counts {
    let members = zset_members(conn, &keys.known()).await;
    let read = each_concurrently(conn, members, |mut conn, m| {
        let keys = keys.clone();
        async move {
            let (p, name) = m.split_once(':').unwrap();
            let p: u32 = p.parse().unwrap();
            let samples = hitcount::store::counters::read(&mut conn, &keys, p, name)
                .await
                .unwrap();
            (
                (p, name.to_string()),
                samples.iter().map(|s| (s.time, s.count)).collect(),
            )
        }
    })
    .await;
    read.into_iter().collect()
}

/// `read(conn, item)` for every item, 64 (`IN_FLIGHT`) at a time on clones of
/// `conn`, whose multiplexed connection pipelines them; the results in no
/// particular order. A test reading the 100,000 counters and statistics of
/// a drain one round trip after another spent more time there than in
/// the drain. A panic in `read` is the caller's.
pub async fn each_concurrently<T, R, Fut>(
    conn: &Conn,
    items: impl IntoIterator<Item = T>,
    read: impl Fn(Conn, T) -> Fut,
) -> Vec<R>
where
    Fut: std::future::Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    const IN_FLIGHT: usize = 64;
    let joined = |r: Result<R, tokio::task::JoinError>| match r {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    let (mut reading, mut out) = (tokio::task::JoinSet::new(), Vec::new());
    for item in items {
        if reading.len() >= IN_FLIGHT {
            out.push(joined(reading.join_next().await.unwrap()));
        }
        reading.spawn(read(conn.clone(), item));
    }
    while let Some(r) = reading.join_next().await {
        out.push(joined(r));
    }
    out
}

/// Appends one hit of each name at `ts` (with `value`, if any) in the
/// MessagePack form, a thousand to a pipeline; returns them for the
/// reference.
pub async fn xadd_names(
    c: &mut Conn,
    names: impl IntoIterator<Item = String>,
    ts: i64,
    value: Option<f64>,
) -> Vec<(String, i64, i64)> {
    let hits: Vec<(String, i64, i64)> = names.into_iter().map(|n| (n, 1, ts)).collect();
    for part in hits.chunks(1000) {
        let mut pipe = redis::pipe();
        for (name, count, ts) in part {
            let hit = hitcount::model::event::encode_value(name, *count, Some(*ts as f64), value);
            pipe.cmd("XADD")
                .arg("hits")
                .arg("*")
                .arg("hit")
                .arg(hit)
                .ignore();
        }
        pipe.query_async::<()>(c).await.unwrap();
    }
    hits
}

/// Appends `n` hits of `name` at `ts` in the MessagePack form; returns them
/// for the reference.
pub async fn xadd_hits(c: &mut Conn, name: &str, n: usize, ts: i64) -> Vec<(String, i64, i64)> {
    let mut pipe = redis::pipe();
    for _ in 0..n {
        pipe.cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("hit")
            .arg(hitcount::model::event::encode(name, 1, Some(ts as f64)))
            .ignore();
    }
    pipe.query_async::<()>(c).await.unwrap();
    vec![(name.to_string(), 1, ts); n]
}
