//! Read-only queries for the query API: counter names (or names with
//! statistics) page by page, a counter's samples in a time range, and the
//! ranking of one bucket by count or by mean, and the precisions a sample
//! of `known:` holds. Only read commands (ZRANGEBYLEX, ZLEXCOUNT,
//! ZRANDMEMBER, HSCAN, ZSCORE, HGET, HMGET), so a Redis user allowed
//! `+@read` on `known:` and `count:*` (and `stats:*`) can run them all.
//!
//! `known:` members are `PREC:NAME`, all of score 0, so they sort by
//! precision first, then name: listing names in name order takes one
//! ZRANGEBYLEX per precision, merged in memory.

use std::collections::BTreeMap;

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::model::keys::{Family, Keys};
use crate::model::stats_hash;
use crate::store::client::Conn;
use crate::store::counters::{self, Sample};

/// One counter name and the precisions it has in `known:`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Listed {
    /// The counter's name.
    pub name: String,
    /// Its precisions, ascending.
    pub precisions: Vec<u32>,
}

/// One page of names (as `/api/v1/counters` answers it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Page {
    /// Up to `limit` names, ascending (byte order).
    pub counters: Vec<Listed>,
    /// The `after` of the next page; `None` on the last page.
    pub next: Option<String>,
}

/// The names of `family` (counters, or names with statistics) starting with
/// `prefix`, after `after` (exclusive), up to `limit` of them, in name
/// order, with their precisions among `precisions`. Cost: one pipelined round trip of one `ZRANGEBYLEX …
/// LIMIT 0 limit+1` per precision, so at most `precisions × (limit + 1)`
/// members. Members that are not UTF-8 (not written by hitcount) are listed
/// with replacement characters.
pub(crate) async fn list<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    family: Family,
    precisions: &[u32],
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> RedisResult<Page> {
    let mut pipe = redis::pipe();
    for &p in precisions {
        let (min, max) = bounds(p, prefix, after);
        pipe.zrangebylex_limit(keys.known_of(family), min, max, 0, limit as isize + 1);
    }
    let lists: Vec<Vec<Vec<u8>>> = pipe.query_async(conn).await?;
    Ok(merge(precisions, lists, limit))
}

/// Members of `known:` sampled by [`sampled_precisions`].
const SAMPLED: usize = 256;

/// The precisions of up to [`SAMPLED`] members of `known:` taken at
/// random (`ZRANDMEMBER`, Redis 6.2 and later): the precisions the workers
/// count at, as far as a sample can tell.
pub(crate) async fn sampled_precisions<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
) -> RedisResult<std::collections::BTreeSet<u32>> {
    let members: Vec<Vec<u8>> = redis::cmd("ZRANDMEMBER")
        .arg(keys.known())
        .arg(SAMPLED)
        .query_async(conn)
        .await?;
    let precision = |m: &Vec<u8>| {
        let head = m.split(|&b| b == b':').next()?;
        std::str::from_utf8(head).ok()?.parse::<u32>().ok()
    };
    Ok(members.iter().filter_map(precision).collect())
}

/// How many names [`list`] lists at least for `prefix` (and no `after`):
/// the most members of one of `precisions` in the prefix's range, by one
/// pipelined `ZLEXCOUNT` a precision (O(log N) each), so that a caller can
/// refuse a listing too long for it before a member is read.
pub(crate) async fn listed_at_least<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    family: Family,
    precisions: &[u32],
    prefix: &str,
) -> RedisResult<u64> {
    if precisions.is_empty() {
        return Ok(0);
    }
    let mut pipe = redis::pipe();
    for &p in precisions {
        let (min, max) = bounds(p, prefix, None);
        pipe.cmd("ZLEXCOUNT")
            .arg(keys.known_of(family))
            .arg(min)
            .arg(max);
    }
    let counts: Vec<u64> = pipe.query_async(conn).await?;
    Ok(counts.into_iter().max().unwrap_or(0))
}

/// ZRANGEBYLEX bounds of the members `P:NAME` at precision `p` with NAME
/// starting with `prefix` and after `after`.
fn bounds(p: u32, prefix: &str, after: Option<&str>) -> (Vec<u8>, Vec<u8>) {
    let from = Keys::member(p, prefix).into_bytes();
    let min = match after {
        Some(a) if a.as_bytes() >= prefix.as_bytes() => {
            [b"(".as_slice(), Keys::member(p, a).as_bytes()].concat()
        }
        _ => [b"[".as_slice(), &from].concat(),
    };
    (min, [b"(".as_slice(), &successor(&from)].concat())
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
    let next = counters.last().filter(|_| more).map(|c| c.name.clone());
    Page { counters, next }
}

/// The samples of `name` at `precision` with `from ≤ time ≤ until`, oldest
/// first; `None` when there is no such counter (no hash and no `known:`
/// member). Cost: the hash read in pages ([`counters::read_counter`]; it
/// holds about `samples` fields), and one ZSCORE when it is empty.
pub(crate) async fn samples<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    precision: u32,
    name: &str,
    from: Option<i64>,
    until: Option<i64>,
) -> RedisResult<Option<Vec<Sample>>> {
    let mut counter = counters::read_counter(conn, keys, precision, name).await?;
    if counter.samples.is_empty()
        && counter.corrupt == 0
        && !is_listed(conn, keys, Family::Counts, precision, name).await?
    {
        return Ok(None);
    }
    counter.samples.retain(|s| within(s.time, from, until));
    Ok(Some(counter.samples))
}

/// Whether `name` at `precision` is a member of `family`'s ZSET: a hash
/// the cleaner has just emptied still exists for readers until its member
/// goes. One ZRANGEBYLEX of that member alone, not a ZSCORE, which the
/// worker's documented ACL does not grant (`hitcount get` runs as that
/// user); the members' scores are all 0 (the cleaner sets any other back),
/// so Redis orders them by name.
pub(crate) async fn is_listed<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    family: Family,
    precision: u32,
    name: &str,
) -> RedisResult<bool> {
    let bound = [b"[".as_slice(), Keys::member(precision, name).as_bytes()].concat();
    let found: Vec<Vec<u8>> = redis::cmd("ZRANGEBYLEX")
        .arg(keys.known_of(family))
        .arg(&bound)
        .arg(&bound)
        .query_async(conn)
        .await?;
    Ok(!found.is_empty())
}

/// Whether bucket `t` is within `from ≤ t ≤ until` (each bound optional).
pub(crate) fn within(t: i64, from: Option<i64>, until: Option<i64>) -> bool {
    from.is_none_or(|f| f <= t) && until.is_none_or(|u| t <= u)
}

/// Names read per ZRANGEBYLEX page and replies per pipeline when ranking
/// a bucket.
pub(crate) const RANK_PAGE: usize = 1000;

/// What a ranking orders names by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum By {
    /// The bucket's count (`count:PREC:NAME`), highest first.
    #[default]
    Count,
    /// The mean of the bucket's statistics (`stats:PREC:NAME`, `B:sum /
    /// B:count` within `B:min` and `B:max`), highest first: the slowest
    /// pages.
    Mean,
}

impl std::str::FromStr for By {
    type Err = String;

    fn from_str(text: &str) -> Result<By, String> {
        match text {
            "count" => Ok(By::Count),
            "mean" => Ok(By::Mean),
            _ => Err(format!("by must be `count` or `mean`, not `{text}`")),
        }
    }
}

impl By {
    /// The family of hashes this ranking reads.
    pub(crate) fn family(self) -> Family {
        match self {
            By::Count => Family::Counts,
            By::Mean => Family::Stats,
        }
    }

    /// The read of `name`'s bucket: `HGET count:… B`, or `HMGET stats:…
    /// B:count B:sum B:min B:max`.
    fn read(self, keys: &Keys, precision: u32, bucket: i64, name: &str) -> redis::Cmd {
        match self {
            By::Count => redis::Cmd::hget(keys.count(precision, name), bucket),
            By::Mean => redis::Cmd::hmget(
                keys.stats(precision, name),
                &["count", "sum", "min", "max"].map(|f| format!("{bucket}:{f}")),
            ),
        }
    }

    /// `name`'s place from the reply of [`By::read`]; `None` when it has no
    /// such bucket or its fields are malformed.
    fn ranked(self, name: String, reply: redis::Value) -> Option<Ranked> {
        let (count, mean) = match self {
            By::Count => {
                let count: Option<String> = redis::from_redis_value(reply).ok()?;
                (count?.parse().ok()?, None)
            }
            By::Mean => {
                let fields: Vec<Option<String>> = redis::from_redis_value(reply).ok()?;
                let fields = <[Option<String>; 4]>::try_from(fields).ok()?;
                let (count, mean) = stats_hash::mean_of(fields.each_ref().map(Option::as_deref))?;
                (count, Some(mean))
            }
        };
        Some(Ranked { name, count, mean })
    }
}

/// One name in a ranking.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ranked {
    /// The counter's name.
    pub name: String,
    /// Hits (by count), or observations (by mean) in the bucket.
    pub count: i64,
    /// The mean observed value (by mean only).
    pub mean: Option<f64>,
}

/// The `keep` names ranked highest by `by` in bucket `bucket` at
/// `precision`, highest first, ties by name. Reads every name of that
/// precision: pages of [`RANK_PAGE`] members of `known:` (or `stats:known:`),
/// ZRANGEBYLEX from the last one seen, each followed by one pipeline of as
/// many HGETs (or HMGETs); on a cluster, where a pipeline may not span hash
/// slots, those go one by one, all in flight at once on the multiplexed
/// connection. A name without that bucket, whose fields are malformed or
/// whose key is no hash (written by something else), is left out.
pub(crate) async fn rank(
    conn: &mut Conn,
    keys: &Keys,
    by: By,
    precision: u32,
    bucket: i64,
    keep: usize,
) -> RedisResult<Vec<Ranked>> {
    let (mut min, max) = bounds(precision, "", None);
    let head = format!("{precision}:").into_bytes();
    let mut best: Vec<Ranked> = Vec::new();
    loop {
        let page = RANK_PAGE as isize;
        let members: Vec<Vec<u8>> =
            redis::Cmd::zrangebylex_limit(keys.known_of(by.family()), &min, &max, 0, page)
                .query_async(conn)
                .await?;
        let Some(last) = members.last() else { break };
        min = [b"(".as_slice(), last].concat();
        let names: Vec<String> = members
            .iter()
            .filter_map(|m| m.strip_prefix(head.as_slice()))
            .filter_map(|n| String::from_utf8(n.to_vec()).ok())
            .collect();
        let cmds = names
            .iter()
            .map(|n| by.read(keys, precision, bucket, n))
            .collect();
        for (name, reply) in names.into_iter().zip(conn.query_each_apart(cmds).await?) {
            if let Some(reply) = crate::store::client::unless_wrong_type(reply)? {
                best.extend(by.ranked(name, reply));
            }
        }
        keep_best(&mut best, by, keep);
        if members.len() < RANK_PAGE {
            break;
        }
    }
    Ok(best)
}

/// Sorts highest first by `by`, ties by name, and keeps the first `keep`.
fn keep_best(best: &mut Vec<Ranked>, by: By, keep: usize) {
    best.sort_unstable_by(|a, b| {
        let order = match by {
            By::Count => b.count.cmp(&a.count),
            By::Mean => b
                .mean
                .unwrap_or(f64::NEG_INFINITY)
                .total_cmp(&a.mean.unwrap_or(f64::NEG_INFINITY)),
        };
        order.then_with(|| a.name.cmp(&b.name))
    });
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

    fn ranked(name: &str, count: i64, mean: Option<f64>) -> Ranked {
        Ranked {
            name: name.into(),
            count,
            mean,
        }
    }

    #[test]
    fn ranking_is_by_count_then_name() {
        let mut v = vec![
            ranked("b", 3, None),
            ranked("a", 3, None),
            ranked("c", 9, None),
            ranked("d", 1, None),
        ];
        keep_best(&mut v, By::Count, 3);
        let names: Vec<&str> = v.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["c", "a", "b"]);
    }

    #[test]
    fn ranking_by_mean_is_by_mean_then_name() {
        let mut v = vec![
            ranked("slow", 1, Some(2000.0)),
            ranked("b", 100, Some(2.5)),
            ranked("a", 7, Some(2.5)),
            ranked("negative", 9, Some(-1.0)),
        ];
        keep_best(&mut v, By::Mean, 3);
        let names: Vec<&str> = v.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["slow", "a", "b"]);
        assert_eq!("mean".parse(), Ok(By::Mean));
        assert_eq!("count".parse(), Ok(By::Count));
        assert!("Mean"
            .parse::<By>()
            .unwrap_err()
            .contains("`count` or `mean`"));
    }

    #[test]
    fn replies_that_are_not_a_bucket_are_left_out() {
        use redis::Value::{Array, BulkString, Nil};
        let bulk = |s: &str| BulkString(s.as_bytes().to_vec());
        // HMGET's reply: count, sum, min, max.
        let r = By::Mean.ranked("a".into(), Array(vec![bulk("4"), bulk("10"), Nil, Nil]));
        assert_eq!(r, Some(ranked("a", 4, Some(2.5))));
        let within = Array(vec![bulk("4"), bulk("10"), bulk("3"), bulk("3")]);
        assert_eq!(
            By::Mean.ranked("a".into(), within),
            Some(ranked("a", 4, Some(3.0)))
        );
        assert_eq!(By::Mean.ranked("a".into(), Array(vec![Nil; 4])), None);
        assert_eq!(By::Mean.ranked("a".into(), Array(vec![bulk("4")])), None);
        let short = Array(vec![bulk("4"), bulk("10")]);
        assert_eq!(By::Mean.ranked("a".into(), short), None);
        assert_eq!(By::Mean.ranked("a".into(), bulk("x")), None);
        assert_eq!(
            By::Count.ranked("a".into(), bulk("7")),
            Some(ranked("a", 7, None))
        );
        assert_eq!(By::Count.ranked("a".into(), bulk("7.5")), None);
        assert_eq!(By::Count.ranked("a".into(), Nil), None);
    }
}
