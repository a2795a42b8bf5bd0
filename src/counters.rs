//! Reading counters, as the seeds' `get_counter` does: every sample of
//! `count:PREC:NAME` as (bucket start, count), oldest first.

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::keys::Keys;

/// One sample of a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sample {
    /// Bucket start, unix seconds.
    pub time: i64,
    /// Hits counted in the bucket.
    pub count: i64,
}

/// The samples of counter `name` at `precision`, oldest first. Fields that
/// are not integers (written by something else) are skipped.
pub async fn read<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    precision: u32,
    name: &str,
) -> RedisResult<Vec<Sample>> {
    let raw: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(keys.count(precision, name))
        .query_async(conn)
        .await?;
    let mut samples: Vec<Sample> = raw
        .iter()
        .filter_map(|(t, c)| {
            Some(Sample {
                time: t.parse().ok()?,
                count: c.parse().ok()?,
            })
        })
        .collect();
    samples.sort_unstable_by_key(|s| s.time);
    Ok(samples)
}

/// Formats unix seconds as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn format_utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (H. Hinnant's algorithm), valid for the whole i64 day range used here.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14 22:13:20");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00");
    }
}
