//! Reading counters, as the seeds' `get_counter` does: every sample of
//! `count:PREC:NAME` as (bucket start, count), oldest first.

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::model::keys::Keys;
use crate::store::client::Conn;
use crate::store::hashes::{self, Fields};

/// One sample of a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sample {
    /// Bucket start, unix seconds.
    pub time: i64,
    /// Hits counted in the bucket.
    pub count: i64,
}

/// The samples of counter `name` at `precision`, oldest first (none when
/// its key is no hash). Fields that are not a bucket start and an integer
/// (written by something else) are skipped; see
/// [`read_counter`] to learn about them.
pub async fn read<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    precision: u32,
    name: &str,
) -> RedisResult<Vec<Sample>> {
    Ok(read_counter(conn, keys, precision, name).await?.samples)
}

/// A counter as read: its samples and what was skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counter {
    /// The samples, oldest first.
    pub samples: Vec<Sample>,
    /// Fields whose bucket is no bucket start of the precision or whose
    /// count is not an integer (the counter was written by something else,
    /// or damaged), skipped.
    pub corrupt: usize,
    /// The first of them, as (field, value).
    pub corrupt_example: Option<(String, String)>,
}

/// [`read`], also telling how many fields were not integers. Cost: see
/// [`hashes::whole`].
pub async fn read_counter<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    precision: u32,
    name: &str,
) -> RedisResult<Counter> {
    let key = keys.count(precision, name);
    Ok(parse(hashes::whole(conn, &key).await?, precision))
}

/// The counters of `(precision, name)` each, as [`read_counter`] reads one
/// (`None` for a key of another type). Cost: see [`hashes::whole_each`].
pub(crate) async fn read_each(
    conn: &mut Conn,
    keys: &Keys,
    counters: &[(u32, String)],
) -> RedisResult<Vec<Option<Counter>>> {
    let keys: Vec<String> = counters
        .iter()
        .map(|(p, name)| keys.count(*p, name))
        .collect();
    hashes::whole_each(conn, &keys, |i, f| parse(f, counters[i].0)).await
}

/// The fields of a counter at `precision`: a sample is a bucket start as
/// hitcount writes it (a multiple of the precision, from 0, in plain digits:
/// `060` or `+60` would be a second field for one bucket) with an integer.
fn parse(raw: Fields, precision: u32) -> Counter {
    let mut counter = Counter::default();
    let bucket = |t: &str| {
        let time: i64 = t.parse().ok()?;
        let plain = time >= 0 && time.to_string() == t;
        (plain && time % i64::from(precision.max(1)) == 0).then_some(time)
    };
    for (t, c) in raw {
        // Bytes that are not UTF-8 get replacement characters, then fail
        // to parse and are counted.
        let (t, c) = (String::from_utf8_lossy(&t), String::from_utf8_lossy(&c));
        match (bucket(&t), c.parse()) {
            (Some(time), Ok(count)) => counter.samples.push(Sample { time, count }),
            _ => {
                counter.corrupt += 1;
                counter
                    .corrupt_example
                    .get_or_insert((t.into_owned(), c.into_owned()));
            }
        }
    }
    counter.samples.sort_unstable_by_key(|s| s.time);
    counter
}

/// Formats unix seconds as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn format_utc(secs: i64) -> String {
    let (year, month, day) = crate::model::clock::civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
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
    fn fields_that_are_not_integers_are_counted_not_read() {
        let raw = [
            ("120", "3"),
            ("60", "2"),
            ("x", "1"),
            ("180", "lots"),
            ("060", "5"),
            ("+60", "5"),
            ("-60", "5"),
            ("90", "5"),
        ]
        .map(|(t, c)| (t.as_bytes().to_vec(), c.as_bytes().to_vec()));
        let c = parse(raw.to_vec(), 60);
        assert_eq!(
            c.samples,
            [
                Sample { time: 60, count: 2 },
                Sample {
                    time: 120,
                    count: 3
                }
            ]
        );
        assert_eq!(c.corrupt, 6);
        assert_eq!(c.corrupt_example, Some(("x".into(), "1".into())));
    }

    #[test]
    fn formats_utc() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14 22:13:20");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00");
    }
}
