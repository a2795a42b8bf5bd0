//! Read-only queries for the query API: counter names page by page, a
//! counter's samples in a time range, and the ranking of one bucket. Only
//! read commands (ZRANGEBYLEX, HGETALL, ZSCORE, HGET), so a Redis user
//! allowed `+@read` on `known:` and `count:*` can run them all.
//!
//! `known:` members are `PREC:NAME`, all of score 0, so they sort by
//! precision first, then name: listing names in name order takes one
//! ZRANGEBYLEX per precision, merged in memory.

use std::collections::BTreeMap;

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::model::keys::Keys;
use crate::store::client::Conn;
use crate::store::counters::{self, Sample};

/// One counter name and the precisions it has in `known:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The counter's name.
    pub name: String,
    /// Its precisions, ascending.
    pub precisions: Vec<u32>,
}

/// One page of names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Up to `limit` names, ascending (byte order).
    pub counters: Vec<Listed>,
    /// The `after` of the next page; `None` on the last page.
    pub next: Option<String>,
}

/// The names starting with `prefix`, after `after` (exclusive), up to
/// `limit` of them, in name order, with their precisions among
/// `precisions`. Cost: one pipelined round trip of one `ZRANGEBYLEX …
/// LIMIT 0 limit+1` per precision, so at most `precisions × (limit + 1)`
/// members. Members that are not UTF-8 (not written by hitcount) are listed
/// with replacement characters.
pub async fn list<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    precisions: &[u32],
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> RedisResult<Page> {
    let mut pipe = redis::pipe();
    for &p in precisions {
        let (min, max) = bounds(p, prefix, after);
        pipe.cmd("ZRANGEBYLEX")
            .arg(keys.known())
            .arg(min)
            .arg(max)
            .arg("LIMIT")
            .arg(0)
            .arg(limit + 1);
    }
    let lists: Vec<Vec<Vec<u8>>> = pipe.query_async(conn).await?;
    Ok(merge(precisions, lists, limit))
}

/// ZRANGEBYLEX bounds of the members `P:NAME` at precision `p` with NAME
/// starting with `prefix` and after `after`.
fn bounds(p: u32, prefix: &str, after: Option<&str>) -> (Vec<u8>, Vec<u8>) {
    let from = Keys::member(p, prefix).into_bytes();
    let min = match after {
        Some(a) if a.as_bytes() >= prefix.as_bytes() => {
            let mut min = b"(".to_vec();
            min.extend_from_slice(Keys::member(p, a).as_bytes());
            min
        }
        _ => [b"[".as_slice(), &from].concat(),
    };
    let mut max = b"(".to_vec();
    max.extend_from_slice(&successor(&from));
    (min, max)
}

/// The least byte string greater than every string starting with `bytes`
/// (which ends with a byte below 0xff: `P:` and UTF-8 never has 0xff).
fn successor(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    while let Some(last) = out.pop() {
        if last < 0xff {
            out.push(last + 1);
            return out;
        }
    }
    // Only 0xff bytes: nothing is greater but the end of the range.
    b"\xff".repeat(bytes.len() + 1)
}

/// Merges each precision's members (ascending, at most `limit + 1`) into
/// the first `limit` names. A name among those is complete: a list that
/// misses it was cut after `limit + 1` smaller names.
fn merge(precisions: &[u32], lists: Vec<Vec<Vec<u8>>>, limit: usize) -> Page {
    let mut names: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (&p, members) in precisions.iter().zip(lists) {
        let head = format!("{p}:").into_bytes();
        for m in members {
            if let Some(name) = m.strip_prefix(head.as_slice()) {
                let name = String::from_utf8_lossy(name).into_owned();
                names.entry(name).or_default().push(p);
            }
        }
    }
    let more = names.len() > limit;
    let counters: Vec<Listed> = names
        .into_iter()
        .take(limit)
        .map(|(name, mut precisions)| {
            precisions.sort_unstable();
            Listed { name, precisions }
        })
        .collect();
    let next = if more {
        counters.last().map(|c| c.name.clone())
    } else {
        None
    };
    Page { counters, next }
}

/// The samples of `name` at `precision` with `from ≤ time ≤ until`, oldest
/// first; `None` when there is no such counter (no hash and no `known:`
/// member). Cost: one HGETALL (the hash holds about `samples` fields), and
/// one ZSCORE when the hash is empty.
pub async fn samples<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    precision: u32,
    name: &str,
    from: Option<i64>,
    until: Option<i64>,
) -> RedisResult<Option<Vec<Sample>>> {
    let counter = counters::read_counter(conn, keys, precision, name).await?;
    if counter.samples.is_empty() && counter.corrupt == 0 {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(keys.known())
            .arg(Keys::member(precision, name))
            .query_async(conn)
            .await?;
        if score.is_none() {
            return Ok(None);
        }
    }
    let within = |t: i64| from.is_none_or(|f| f <= t) && until.is_none_or(|u| t <= u);
    Ok(Some(
        counter
            .samples
            .into_iter()
            .filter(|s| within(s.time))
            .collect(),
    ))
}

/// Names read per ZRANGEBYLEX page and counts per HGET pipeline when
/// ranking a bucket.
pub const RANK_PAGE: usize = 1000;

/// The `keep` names with the highest count in bucket `bucket` at
/// `precision`, highest first, ties by name. Reads every name of that
/// precision: pages of [`RANK_PAGE`] `known:` members (ZRANGEBYLEX from the
/// last one seen), each followed by one pipeline of as many HGETs. A name
/// without that bucket, or whose count is not an integer, is left out.
pub async fn rank(
    conn: &mut Conn,
    keys: &Keys,
    precision: u32,
    bucket: i64,
    keep: usize,
) -> RedisResult<Vec<(String, i64)>> {
    let (mut min, max) = bounds(precision, "", None);
    let head = format!("{precision}:").into_bytes();
    let mut best: Vec<(String, i64)> = Vec::new();
    loop {
        let members: Vec<Vec<u8>> = redis::cmd("ZRANGEBYLEX")
            .arg(keys.known())
            .arg(&min)
            .arg(&max)
            .arg("LIMIT")
            .arg(0)
            .arg(RANK_PAGE)
            .query_async(conn)
            .await?;
        let Some(last) = members.last() else { break };
        min = [b"(".as_slice(), last].concat();
        let names: Vec<String> = members
            .iter()
            .filter_map(|m| m.strip_prefix(head.as_slice()))
            .filter_map(|n| String::from_utf8(n.to_vec()).ok())
            .collect();
        let counts = counts_of(conn, keys, precision, bucket, &names).await?;
        for (name, count) in names.into_iter().zip(counts) {
            if let Some(c) = count.and_then(|c| c.parse::<i64>().ok()) {
                best.push((name, c));
            }
        }
        keep_best(&mut best, keep);
        if members.len() < RANK_PAGE {
            break;
        }
    }
    Ok(best)
}

/// The count of `bucket` in each named counter: one pipeline on one node;
/// on a cluster, where a pipeline may not span hash slots, one HGET per
/// name, all in flight at once on the multiplexed connection.
async fn counts_of(
    conn: &mut Conn,
    keys: &Keys,
    precision: u32,
    bucket: i64,
    names: &[String],
) -> RedisResult<Vec<Option<String>>> {
    let cmds = names
        .iter()
        .map(|n| {
            let mut c = redis::cmd("HGET");
            c.arg(keys.count(precision, n)).arg(bucket);
            c
        })
        .collect();
    let replies = conn.query_each(cmds).await?;
    replies
        .into_iter()
        .map(|v| redis::from_redis_value(v).map_err(redis::RedisError::from))
        .collect()
}

/// Sorts highest count first, ties by name, and keeps the first `keep`.
fn keep_best(best: &mut Vec<(String, i64)>, keep: usize) {
    best.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    best.truncate(keep);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_select_one_precision_and_prefix() {
        let (min, max) = bounds(1, "", None);
        assert_eq!((min.as_slice(), max.as_slice()), (&b"[1:"[..], &b"(1;"[..]));
        let (min, max) = bounds(60, "page:", None);
        assert_eq!((&min[..], &max[..]), (&b"[60:page:"[..], &b"(60:page;"[..]));
        let (min, _) = bounds(60, "page:", Some("page:b"));
        assert_eq!(&min[..], b"(60:page:b");
        // An `after` before the prefix starts at the prefix.
        let (min, _) = bounds(60, "page:", Some("a"));
        assert_eq!(&min[..], b"[60:page:");
        // Non-ASCII: the last byte goes up by one.
        let (_, max) = bounds(5, "é", None);
        assert_eq!(&max[..], b"(5:\xc3\xaa");
        assert_eq!(successor(b"a\xff"), b"b");
    }

    fn members(p: u32, names: &[&str]) -> Vec<Vec<u8>> {
        names
            .iter()
            .map(|n| format!("{p}:{n}").into_bytes())
            .collect()
    }

    #[test]
    fn merging_keeps_only_complete_names() {
        // limit 2: each list holds up to 3 members.
        let lists = vec![members(1, &["a", "c", "d"]), members(60, &["b", "c"])];
        let page = merge(&[1, 60], lists, 2);
        assert_eq!(
            page.counters,
            [
                Listed {
                    name: "a".into(),
                    precisions: vec![1]
                },
                Listed {
                    name: "b".into(),
                    precisions: vec![60]
                }
            ]
        );
        assert_eq!(page.next.as_deref(), Some("b"));
        let lists = vec![members(1, &["a"]), members(60, &["a", "b"])];
        let page = merge(&[1, 60], lists, 2);
        assert_eq!(page.counters[0].precisions, [1, 60]);
        assert_eq!(page.next, None);
    }

    #[test]
    fn ranking_is_by_count_then_name() {
        let mut v = vec![
            ("b".into(), 3),
            ("a".into(), 3),
            ("c".into(), 9),
            ("d".into(), 1),
        ];
        keep_best(&mut v, 3);
        let names: Vec<&str> = v.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["c", "a", "b"]);
    }
}
