//! Reading hashes whole without a reply the size of a hash: `HLEN`, then
//! one `HGETALL` for a hash of at most [`PAGE_FIELDS`] fields (as every
//! counter with the default settings), else `HSCAN` pages of about that
//! many, so that no one command holds Redis or the connection for long,
//! whatever a hash holds (a `--samples` far above the default, histograms
//! of values spread over the whole range of a double, or fields written by
//! something else). An `HSCAN` of a small hash costs Redis about twice its
//! `HGETALL`, hence the `HLEN` first. A key that is no hash (written by
//! something else) reads as an empty hash.

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, Value};

use crate::store::client::{unless_wrong_type, Conn};

/// A hash's fields and values, as read.
pub(crate) type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Most fields of a hash read by one `HGETALL`, and those asked of one
/// `HSCAN` (its `COUNT`; Redis answers a listpack whole whatever it asks).
const PAGE_FIELDS: usize = 1000;
/// Hashes asked in one round trip by [`whole_each`].
const HASHES_PER_TRIP: usize = 1000;

/// The number of fields of hash `key` (one HLEN; 0 for a key that is no
/// hash).
pub(crate) async fn len<C: ConnectionLike>(conn: &mut C, key: &str) -> RedisResult<u64> {
    Ok(length(Cmd::hlen(key).query_async(conn).await)?.unwrap_or(0))
}

/// An `HLEN` reply: `None` for a key that is no hash.
fn length(reply: RedisResult<Value>) -> RedisResult<Option<u64>> {
    let n = unless_wrong_type(reply)?.map(redis::from_redis_value);
    Ok(n.transpose()?)
}

/// The fields of `hashes` together: their `HLEN`s, [`HASHES_PER_TRIP`] a
/// round trip.
pub(crate) async fn len_all(conn: &mut Conn, hashes: &[String]) -> RedisResult<u64> {
    let mut all = 0u64;
    for trip in hashes.chunks(HASHES_PER_TRIP) {
        let lens = conn.query_each_apart(trip.iter().map(Cmd::hlen).collect());
        for len in lens.await? {
            all = all.saturating_add(length(len)?.unwrap_or(0));
        }
    }
    Ok(all)
}

/// Hash `key` read whole.
pub(crate) async fn whole<C: ConnectionLike>(conn: &mut C, key: &str) -> RedisResult<Fields> {
    let fields = len(conn, key).await?;
    if fields > PAGE_FIELDS as u64 {
        return scan(conn, key).await;
    }
    let reply = Cmd::hgetall(key).query_async(conn).await;
    read(unless_wrong_type(reply)?)
}

/// Each of `hashes` read whole and `parse`d with its index, in order
/// (`None` for a key of another type): [`HASHES_PER_TRIP`]
/// a round trip ([`Conn::query_each_apart`]: a pipeline on one node, all in
/// flight at once on a cluster) of `HLEN`s, then one of `HGETALL`s of the
/// small ones, and the pages of each larger one after another; each trip
/// parsed before the next (the replies are several times the size of what
/// they parse into).
pub(crate) async fn whole_each<U>(
    conn: &mut Conn,
    hashes: &[String],
    parse: impl Fn(usize, Fields) -> U,
) -> RedisResult<Vec<Option<U>>> {
    let mut out = Vec::with_capacity(hashes.len());
    for trip in hashes.chunks(HASHES_PER_TRIP) {
        let lens = conn.query_each_apart(trip.iter().map(Cmd::hlen).collect());
        // Per hash: `None` for another type, else whether it is large.
        let mut large = Vec::with_capacity(trip.len());
        for len in lens.await? {
            large.push(length(len)?.map(|n| n > PAGE_FIELDS as u64));
        }
        let small = trip.iter().zip(&large).filter(|(_, &l)| l == Some(false));
        let cmds = small.map(|(k, _)| Cmd::hgetall(k)).collect();
        let mut replies = conn.query_each_apart(cmds).await?.into_iter();
        for (key, large) in trip.iter().zip(large) {
            let fields = match large {
                None => None,
                Some(true) => Some(scan(conn, key).await?),
                Some(false) => {
                    let reply = replies.next().expect("a reply per command");
                    Some(read(unless_wrong_type(reply)?)?)
                }
            };
            out.push(fields.map(|f| parse(out.len(), f)));
        }
    }
    Ok(out)
}

/// A hash's reply, `None` for a key that is no hash.
fn read(reply: Option<Value>) -> RedisResult<Fields> {
    Ok(reply
        .map(redis::from_redis_value)
        .transpose()?
        .unwrap_or_default())
}

/// Hash `key` read whole by `HSCAN key cursor COUNT PAGE_FIELDS`, page
/// after page. A field seen twice (`HSCAN` may repeat one while the hash
/// grows) is kept once.
async fn scan<C: ConnectionLike>(conn: &mut C, key: &str) -> RedisResult<Fields> {
    let mut fields = Fields::new();
    let mut cursor = 0;
    loop {
        let reply = redis::cmd("HSCAN")
            .arg(key)
            .arg(cursor)
            .arg("COUNT")
            .arg(PAGE_FIELDS)
            .query_async(conn)
            .await;
        let Some(reply) = unless_wrong_type(reply)? else {
            return Ok(Vec::new());
        };
        let (next, page): (u64, Fields) = redis::from_redis_value(reply)?;
        fields.extend(page);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    fields.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    fields.dedup_by(|a, b| a.0 == b.0);
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{conn, server};

    /// Hashes small and large, a key of another type and a missing one, in
    /// one call: each read whole and in order, and the same alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_hash_is_read_whole_whatever_its_size() {
        let srv = server();
        let mut c = conn(&srv.url()).await;
        let sizes = [3, PAGE_FIELDS, PAGE_FIELDS + 1, 25 * PAGE_FIELDS + 7];
        let mut pipe = redis::pipe();
        for n in sizes {
            let fields: Vec<(usize, usize)> = (0..n).map(|i| (i, i * 2)).collect();
            pipe.hset_multiple(format!("h{n}"), &fields).ignore();
        }
        pipe.set("text", "x").ignore();
        let () = pipe.query_async(&mut c).await.unwrap();
        let mut keys: Vec<String> = sizes.iter().map(|n| format!("h{n}")).collect();
        keys.extend(["text".to_string(), "none".to_string()]);
        let parse = |f: Fields| -> Vec<(usize, usize)> {
            let text = |b: &[u8]| std::str::from_utf8(b).unwrap().parse().unwrap();
            let mut f: Vec<_> = f.iter().map(|(k, v)| (text(k), text(v))).collect();
            f.sort_unstable();
            f
        };
        let read = whole_each(&mut c, &keys, |_, f| parse(f)).await.unwrap();
        for (i, key) in keys.iter().enumerate() {
            let want: Vec<(usize, usize)> = match sizes.get(i) {
                Some(&n) => (0..n).map(|i| (i, i * 2)).collect(),
                None => Vec::new(),
            };
            // Read together, a key of another type is told apart.
            let together = (key != "text").then(|| want.clone());
            assert_eq!(read[i], together, "{key}");
            assert_eq!(parse(whole(&mut c, key).await.unwrap()), want, "{key}");
        }
    }
}
