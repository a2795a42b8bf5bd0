//! Keeping `known:` and `stats:known:` readable by name: every reader of
//! them (the cleaner, `top`, the API, remote reads) pages with
//! `ZRANGEBYLEX`, which Redis answers right only when every member has the
//! same score. hitcount writes 0; the cleaner sets back any other score
//! something else wrote.

use redis::RedisResult;

use crate::store::connect::Conn;

/// Sets back to 0 the score of every member of `zset` that has another,
/// `page` members a round trip; how many. One member with another score (a
/// careless `ZINCRBY`) would hide every member after it from the readers'
/// pages. Members are only re-scored, never added (`XX`): one removed
/// meanwhile stays removed.
pub(crate) async fn rescore(conn: &mut Conn, zset: &str, page: usize) -> RedisResult<u64> {
    let mut done = 0;
    for (min, max) in [("-inf", "(0"), ("(0", "+inf")] {
        loop {
            let members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
                .arg(zset)
                .arg(min)
                .arg(max)
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(0)
                .arg(page)
                .query_async(conn)
                .await?;
            if members.is_empty() {
                break;
            }
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(zset).arg("XX");
            for m in &members {
                zadd.arg(0).arg(m);
            }
            let _: () = zadd.query_async(conn).await?;
            done += members.len() as u64;
        }
    }
    Ok(done)
}
