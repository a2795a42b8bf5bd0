//! StatsD lines as hits: what `hitcount ingest` reads on
//! `HITCOUNT_STATSD_LISTEN`, one line at a time (a packet or a TCP stream
//! holds several, one per `\n`).
//!
//! `NAME:VALUE|TYPE[|@RATE][|#TAGS]`:
//! - `c` (a counter): `VALUE / RATE` hits of `NAME`, rounded to the nearest
//!   whole count (halves away from zero: `1|c|@0.4` is 3 hits); a count
//!   that rounds below 1 (`0|c`, `-1|c`) or above 10^9 is `bad_count`;
//! - `ms`, `h`, `d` (a timer, histogram, distribution): `round(1 / RATE)`
//!   hits, each measuring `VALUE` (the hit's value: its statistics);
//! - any other type (`g`, `s`, …) is not a hit: ignored, and counted by
//!   type ([`Line::Ignored`]).
//!
//! Without `@RATE` the rate is 1; a rate must be in (0, 1] (`bad_rate`).
//! DogStatsD's `|#tags` are allowed and left out. The hit is judged as the
//! worker judges a plain-form entry (its name 1 to 4096 bytes of UTF-8, its
//! value finite, |v| ≤ 1e100), and has no time of its own: it happened
//! when Redis appended it.

use crate::model::event::{decode, Reject};

/// One line read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Line<'a> {
    /// A hit: name, count, value.
    Hit(&'a str, i64, Option<f64>),
    /// A metric of a type hitcount does not count, by its label: `g`, `s`
    /// or `other`.
    Ignored(&'static str),
}

/// Why a line is not read, each a stable label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadLine {
    /// Not `NAME:VALUE|TYPE…`.
    #[error("not NAME:VALUE|TYPE")]
    Format,
    /// `VALUE` is not a number.
    #[error("the value is not a number")]
    Value,
    /// `@RATE` is not a number in (0, 1].
    #[error("the sample rate is not in (0, 1]")]
    Rate,
    /// The worker would refuse the hit for this reason.
    #[error(transparent)]
    Hit(#[from] Reject),
}

impl BadLine {
    /// Stable snake_case label: `bad_format`, `bad_value`, `bad_rate`, or
    /// the worker's reason (`empty_name`, `bad_count`, …).
    pub(crate) fn reason(self) -> &'static str {
        match self {
            BadLine::Format => "bad_format",
            BadLine::Value => "bad_value",
            BadLine::Rate => "bad_rate",
            BadLine::Hit(reject) => reject.reason(),
        }
    }
}

/// Reads one line (without its `\n`; a trailing `\r`, and spaces or tabs
/// at its end or around the type, are allowed, as StatsD's own server
/// allows them).
pub(crate) fn read(line: &[u8]) -> Result<Line<'_>, BadLine> {
    let line = line.trim_ascii_end();
    // The value follows the last colon before the first `|` (a name may
    // hold colons, tags after it too).
    let pipe = line.iter().position(|&b| b == b'|').unwrap_or(line.len());
    let colon = line[..pipe]
        .iter()
        .rposition(|&b| b == b':')
        .ok_or(BadLine::Format)?;
    let (name, rest) = (&line[..colon], &line[colon + 1..]);
    let mut parts = rest.split(|&b| b == b'|');
    let value = parts.next().ok_or(BadLine::Format)?;
    let kind = parts.next().ok_or(BadLine::Format)?.trim_ascii();
    let mut rate = None;
    for extra in parts {
        match extra.split_first() {
            // One rate: which of two was meant is not ours to guess.
            Some((b'@', _)) if rate.is_some() => return Err(BadLine::Format),
            Some((b'@', r)) => {
                rate = Some(
                    number(r)
                        .filter(|r| *r > 0.0 && *r <= 1.0)
                        .ok_or(BadLine::Rate)?,
                )
            }
            Some((b'#', _)) => {}
            _ => return Err(BadLine::Format),
        }
    }
    // A type not counted is ignored whatever its value (a set's is text).
    let counter = match kind {
        b"c" => true,
        b"ms" | b"h" | b"d" => false,
        b"g" => return Ok(Line::Ignored("g")),
        b"s" => return Ok(Line::Ignored("s")),
        b"" => return Err(BadLine::Format),
        _ => return Ok(Line::Ignored("other")),
    };
    let value = number(value).ok_or(BadLine::Value)?;
    let rate = rate.unwrap_or(1.0);
    let (count, measured) = if counter {
        ((value / rate).round(), None)
    } else {
        ((1.0 / rate).round(), Some(value))
    };
    // The plain form's own checks, as the worker makes them: an integer
    // count in range, a value within bounds, the name.
    let count = format!("{count:.0}");
    let measured = measured.map(|v| v.to_string());
    let mut fields: Vec<(&[u8], &[u8])> = vec![(b"name", name), (b"count", count.as_bytes())];
    if let Some(v) = &measured {
        fields.push((b"value", v.as_bytes()));
    }
    let hit = decode(b"0-0", fields)?;
    let (count, value) = (hit.count, hit.value);
    // The name the decoder took is `name` itself, valid UTF-8.
    let name = std::str::from_utf8(name).map_err(|_| Reject::NameNotUtf8)?;
    Ok(Line::Hit(name, count, value))
}

/// A finite decimal number.
fn number(text: &[u8]) -> Option<f64> {
    std::str::from_utf8(text)
        .ok()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(line: &str) -> &'static str {
        read(line.as_bytes()).unwrap_err().reason()
    }

    #[test]
    fn every_type() {
        assert_eq!(read(b"page.home:1|c"), Ok(Line::Hit("page.home", 1, None)));
        assert_eq!(
            read(b"page.home:7|c\r"),
            Ok(Line::Hit("page.home", 7, None))
        );
        assert_eq!(
            read(b"api.login:12.5|ms"),
            Ok(Line::Hit("api.login", 1, Some(12.5)))
        );
        assert_eq!(read(b"size:-3|h"), Ok(Line::Hit("size", 1, Some(-3.0))));
        assert_eq!(
            read(b"lat:0.25|d|#env:prod,a:b"),
            Ok(Line::Hit("lat", 1, Some(0.25)))
        );
        assert_eq!(read(b"temp:20|g"), Ok(Line::Ignored("g")));
        assert_eq!(read(b"users:alice|s"), Ok(Line::Ignored("s")));
        assert_eq!(read(b"x:1|kv"), Ok(Line::Ignored("other")));
        // A name may hold a colon: the value follows the last one.
        assert_eq!(read(b"web:/home:2|c"), Ok(Line::Hit("web:/home", 2, None)));
        // Spaces or tabs at the end or around the type (they were an
        // ignored type of their own, `c `, and counted nothing).
        assert_eq!(read(b"sp:1|c "), Ok(Line::Hit("sp", 1, None)));
        assert_eq!(read(b"sp:1|c\t"), Ok(Line::Hit("sp", 1, None)));
        assert_eq!(read(b"sp:2|ms |@0.5"), Ok(Line::Hit("sp", 2, Some(2.0))));
        assert_eq!(read(b"sp:1|c|@0.5 \r"), Ok(Line::Hit("sp", 2, None)));
    }

    /// Rates scale counts to the nearest whole one, halves away from zero.
    #[test]
    fn rates() {
        assert_eq!(read(b"a:1|c|@0.1"), Ok(Line::Hit("a", 10, None)));
        assert_eq!(read(b"a:1|c|@0.4"), Ok(Line::Hit("a", 3, None)));
        assert_eq!(read(b"a:1|c|@0.3"), Ok(Line::Hit("a", 3, None)));
        assert_eq!(read(b"a:3|c|@0.5"), Ok(Line::Hit("a", 6, None)));
        assert_eq!(read(b"a:0.5|c"), Ok(Line::Hit("a", 1, None)));
        assert_eq!(read(b"a:1|c|@1"), Ok(Line::Hit("a", 1, None)));
        assert_eq!(read(b"t:5|ms|@0.25"), Ok(Line::Hit("t", 4, Some(5.0))));
        assert_eq!(read(b"t:5|ms|@0.3|#x"), Ok(Line::Hit("t", 3, Some(5.0))));
        for bad in ["a:1|c|@0", "a:1|c|@1.5", "a:1|c|@-1", "a:1|c|@x", "a:1|c|@"] {
            assert_eq!(reason(bad), "bad_rate", "{bad}");
        }
    }

    #[test]
    fn bad_lines_say_why() {
        for (line, want) in [
            ("", "bad_format"),
            ("nocolon", "bad_format"),
            ("a:1", "bad_format"),
            ("a:1|", "bad_format"),
            ("a:1|c|x", "bad_format"),
            ("a:1|c|@0.5|@0.1", "bad_format"),
            ("a:x|c", "bad_value"),
            ("a:|c", "bad_value"),
            ("a:nan|ms", "bad_value"),
            ("a:inf|c", "bad_value"),
            (":1|c", "empty_name"),
            ("a:0|c", "bad_count"),
            ("a:-1|c", "bad_count"),
            ("a:0.4|c", "bad_count"),
            ("a:1000000001|c", "bad_count"),
            ("a:1e101|ms", "bad_value"),
        ] {
            assert_eq!(reason(line), want, "{line:?}");
        }
        let long = format!("{}:1|c", "n".repeat(4097));
        assert_eq!(reason(&long), "name_too_long");
        assert_eq!(read(b"\xff:1|c").unwrap_err().reason(), "name_not_utf8");
    }
}
