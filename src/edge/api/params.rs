//! The query API's input, checked: percent-decoding of the path and the
//! query string, and each parameter's range. Every refusal is a sentence
//! for a 400 answer. Pure.

use crate::model::config::comma_list;

/// Decodes `%XX` escapes (and `+` as a space when `plus_is_space`, as in a
/// query string); the result must be UTF-8.
pub(crate) fn decode(text: &str, plus_is_space: bool) -> Result<String, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while let Some(&b) = text.as_bytes().get(i) {
        i += 1;
        out.push(match b {
            b'%' => {
                let hex = text.get(i..i + 2);
                i += 2;
                hex.filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad percent-encoding in `{text}`"))?
            }
            b'+' if plus_is_space => b' ',
            b => b,
        });
    }
    String::from_utf8(out).map_err(|_| format!("`{text}` does not decode to UTF-8"))
}

/// A query string's parameters, decoded; the first of a repeated name wins.
#[derive(Debug, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    /// Parses `a=1&b=x%20y`.
    pub(crate) fn parse(query: Option<&str>) -> Result<Query, String> {
        let mut pairs = Vec::new();
        for part in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            pairs.push((decode(k, true)?, decode(v, true)?));
        }
        Ok(Query(pairs))
    }

    /// The value of `name`, if given.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `name` as an integer, if given.
    pub(crate) fn int(&self, name: &str) -> Result<Option<i64>, String> {
        use std::num::IntErrorKind::{NegOverflow, PosOverflow};
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        v.parse()
            .map(Some)
            .map_err(|e: std::num::ParseIntError| match e.kind() {
                PosOverflow | NegOverflow => format!(
                    "{name} must be a whole number from {} to {}, not `{v}`",
                    i64::MIN,
                    i64::MAX
                ),
                _ => format!("{name} must be a whole number, not `{v}`"),
            })
    }

    /// `limit`: 1..=`max`, `default` when absent.
    pub(crate) fn limit(&self, default: usize, max: usize) -> Result<usize, String> {
        let Some(v) = self.get("limit") else {
            return Ok(default);
        };
        match v.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(format!(
                "limit must be a whole number from 1 to {max}, not `{v}`"
            )),
        }
    }

    /// `precision`, one of `configured`; `default` when absent (an error
    /// then if there is none, or it is not configured).
    pub(crate) fn precision(
        &self,
        default: Option<u32>,
        configured: &[u32],
    ) -> Result<u32, String> {
        let list = comma_list(configured);
        match (self.get("precision"), default) {
            (None, Some(d)) if configured.contains(&d) => Ok(d),
            (None, Some(d)) => Err(format!(
                "precision is required here: the default {d} is not configured; one of {list}"
            )),
            (None, None) => Err(format!("precision is required: one of {list}")),
            (Some(v), _) => match v.parse::<u32>() {
                Ok(p) if configured.contains(&p) => Ok(p),
                _ => Err(format!("precision must be one of {list}, not `{v}`")),
            },
        }
    }
}

/// The start of the bucket of `precision` holding `t`; `None` when it is
/// before the earliest time an `i64` holds (`t` near `i64::MIN`).
pub(crate) fn bucket_start(t: i64, precision: u32) -> Option<i64> {
    let p = i64::from(precision.max(1));
    t.div_euclid(p).checked_mul(p)
}

/// The bucket `top` ranks (the API's and the CLI's alike): the current one
/// (holding `now`) unless `asked`, which must start a bucket of `precision`,
/// not after the current one and not before the oldest of the `samples`
/// buckets a counter keeps (the cleaner removes a bucket that starts at or
/// before `now - samples × precision`). Every step is checked arithmetic: no
/// value can wrap into another bucket. The error says which rule `asked`
/// broke and the bucket to ask for instead.
pub(crate) fn top_bucket(
    asked: Option<i64>,
    precision: u32,
    samples: u32,
    now: i64,
) -> Result<i64, String> {
    let p = i64::from(precision.max(1));
    let current = bucket_start(now, precision).ok_or("the clock is out of range")?;
    let Some(b) = asked else {
        return Ok(current);
    };
    // Aligned and not after now, it is not after the current bucket.
    if b > now {
        return Err(format!(
            "{b} is after now: the current {p} s bucket starts at {current}"
        ));
    }
    let oldest = i64::from(samples)
        .checked_sub(1)
        .and_then(|older| older.checked_mul(p))
        .and_then(|span| current.checked_sub(span))
        .unwrap_or(i64::MIN);
    // The age first: the bucket a misaligned `b` falls in may be too old
    // too, and the error must not point at it.
    if b < oldest {
        return Err(format!(
            "{b} is older than the {p} s precision keeps ({samples} samples, \
             --samples / HITCOUNT_SAMPLES: the oldest bucket kept starts at {oldest})"
        ));
    }
    if b.rem_euclid(p) != 0 {
        let holding = b
            .checked_sub(b.rem_euclid(p))
            .filter(|s| *s >= oldest)
            .map_or_else(
                || format!(": the oldest bucket kept starts at {oldest}"),
                |s| format!(": the bucket holding it starts at {s}"),
            );
        return Err(format!(
            "{b} is not the start of a {p} s bucket (a multiple of {p}){holding}"
        ));
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_percent_and_plus() {
        assert_eq!(decode("a%2Fb%20c%3A", false).unwrap(), "a/b c:");
        assert_eq!(decode("caf%C3%A9+x", false).unwrap(), "café+x");
        assert_eq!(decode("caf%C3%A9+x", true).unwrap(), "café x");
        assert!(decode("%zz", false).is_err());
        assert!(decode("%4", false).is_err());
        assert!(decode("%", false).is_err());
        assert!(decode("%ff", false).unwrap_err().contains("UTF-8"));
        assert!(decode("%C3", false).is_err());
    }

    #[test]
    fn parameters_are_checked() {
        let q = Query::parse(Some("limit=0&precision=7&from=x&empty")).unwrap();
        assert!(q.limit(100, 1000).is_err());
        assert!(q.precision(None, &[1, 60]).unwrap_err().contains("1,60"));
        assert!(q.int("from").is_err());
        assert_eq!(q.int("until"), Ok(None));
        assert_eq!(q.get("empty"), Some(""));
        let q = Query::parse(Some("limit=1000&precision=60&prefix=a+b%2F")).unwrap();
        assert_eq!(q.limit(100, 1000), Ok(1000));
        assert_eq!(q.precision(None, &[1, 60]), Ok(60));
        assert_eq!(q.get("prefix"), Some("a b/"));
        assert!(Query::parse(Some("limit=1001"))
            .unwrap()
            .limit(100, 1000)
            .is_err());
        assert_eq!(Query::parse(None).unwrap().limit(100, 1000), Ok(100));
        assert!(Query::parse(Some("a=%")).is_err());
    }

    #[test]
    fn buckets_start_at_multiples() {
        assert_eq!(bucket_start(1_700_000_059, 60), Some(1_700_000_040));
        assert_eq!(bucket_start(-1, 60), Some(-60));
        assert_eq!(bucket_start(i64::MIN, 60), None);
        assert_eq!(bucket_start(i64::MAX, 3600), Some(i64::MAX / 3600 * 3600));
    }

    #[test]
    fn top_buckets_are_aligned_kept_and_not_ahead() {
        let now = 1_700_000_059;
        assert_eq!(top_bucket(None, 60, 120, now), Ok(1_700_000_040));
        assert_eq!(
            top_bucket(Some(1_700_000_040), 60, 120, now),
            Ok(1_700_000_040)
        );
        assert_eq!(
            top_bucket(Some(1_700_000_040 - 119 * 60), 60, 120, now),
            Ok(1_699_992_900)
        );
        let refused = |b: i64| top_bucket(Some(b), 60, 120, now).unwrap_err();
        assert!(refused(1_700_000_059).contains("starts at 1700000040"));
        assert!(refused(1_700_000_100).contains("after now"));
        assert!(refused(1_700_000_040 - 121 * 60).contains("older than the 60 s precision keeps"));
        assert!(refused(-60).contains("older"));
        // A misaligned bucket too old is said to be so, with the oldest
        // bucket kept, never the too-old bucket holding it.
        for b in [-1, 5, 1_700_000_040 - 121 * 60 + 1] {
            let e = refused(b);
            assert!(
                e.contains("older") && e.ends_with("starts at 1699992900)"),
                "{e}"
            );
        }
        // No wrap at either end of i64.
        assert!(refused(i64::MIN).ends_with("starts at 1699992900)"));
        assert!(refused(i64::MIN + 8).contains("older"));
        assert!(refused(i64::MAX).contains("after now"));
        assert!(refused(1_700_000_101).contains("after now"));
        assert!(top_bucket(Some(0), 60, u32::MAX, now).is_ok());
        assert!(top_bucket(Some(i64::MIN + 8), 60, u32::MAX, i64::MIN + 100).is_ok());
    }

    #[test]
    fn a_default_precision_must_be_configured() {
        let none = Query::parse(None).unwrap();
        assert_eq!(none.precision(Some(3600), &[60, 3600]), Ok(3600));
        assert!(none.precision(Some(3600), &[60]).is_err());
        assert!(none.precision(None, &[60]).is_err());
        let q = Query::parse(Some("precision=60")).unwrap();
        assert_eq!(q.precision(Some(3600), &[60, 3600]), Ok(60));
    }
}
