//! The hit event and its two wire forms.
//!
//! A hit is one stream entry. Producers in any language write it in one of two
//! forms, and this module is the reference for both:
//!
//! * **MessagePack**: one field `hit` whose value is a MessagePack map
//!   `{"name": str, "count": int, "ts": int | float, "value": int | float}`.
//!   `count` is optional (default 1), `ts` is optional (unix seconds),
//!   `value` is optional (a measured number, see [`Hit::value`]). Unknown keys are ignored,
//!   whatever their value. If an entry has a `hit` field it is in this form:
//!   fields other than the plain form's are ignored, and an entry that
//!   carries a plain field too (`name`, `count`, `ts` or `value`) is
//!   refused ([`Reject::MixedForms`]): either form alone would count it
//!   differently, and the producer meant one. A key given twice: the last
//!   one wins.
//! * **Plain fields**: `name`, optional `count` (decimal integer, e.g. `3`),
//!   optional `ts` (decimal unix seconds, e.g. `1700000000` or
//!   `1700000000.25`), optional `value` (a decimal number, e.g. `12.5`,
//!   `-3`, `1e-3`). Other fields are ignored (but not `hit`, which makes
//!   the entry MessagePack: see above); a field given twice: the last one
//!   wins.
//!
//! Without `ts`, the hit happened at the entry ID's millisecond part (IDs are
//! `<ms>-<seq>`), which is when Redis accepted it; unless that is more than
//! [`MAX_ID_AHEAD_MS`] ahead of Redis' clock (one `XADD` with an explicit ID
//! ahead pushes every later ID at least that high): then the hit happened
//! when the worker read it, by Redis' clock ([`decode_at`],
//! [`HitTime::Clock`]).
//!
//! Rules, each with its [`Reject`] reason:
//! * name: valid UTF-8, 1..=[`MAX_NAME_BYTES`] bytes.
//! * count: an integer in 1..=[`MAX_COUNT`]. Floats (even `2.0`), strings in
//!   MessagePack, `nil` and any other type are rejected.
//! * ts: finite and ≥ 0, written without a sign in the plain form (as
//!   `count`); in MessagePack any int or float type. It may be at most
//!   [`MAX_FUTURE_MS`] ahead of Redis' clock when the worker reads it.
//! * value: a finite number of magnitude at most [`MAX_ABS_VALUE`]; in
//!   MessagePack any int or float type, in the plain form any decimal
//!   spelling Rust's `f64` parser takes (`12.5`, `-3`, `1e-3`). NaN, ±inf,
//!   text, `nil` and anything else are rejected.
//!
//! * size: the entry's fields, names and values together, take at most
//!   [`MAX_ENTRY_BYTES`] (64 KiB); checked by the worker before anything is
//!   decoded ([`check_size`]), so a larger entry is [`Reject::TooLarge`]
//!   whatever it holds.
//!
//! When an entry breaks several rules the first failing check names it, in
//! this order: size, entry ID, mixed forms, MessagePack structure, name,
//! count, ts, value, future.
//!
//! Decoding never panics, never copies the name (it borrows from the entry's
//! bytes) and never allocates. The MessagePack form is read with `rmp`'s marker
//! table and a bounds-checked, iterative (no recursion) skipper, so hostile
//! nesting cannot exhaust the stack.
//!
//! One file per part: this one holds the [`Hit`], the limits, the [`Reject`]
//! reasons, the [`decode`] entry point and the checks both forms share;
//! `msgpack` reads and writes the `hit` field's map (and `reader` is its
//! bounds-checked MessagePack cursor); `plain` reads the plain fields;
//! `json` reads the JSON hit HTTP clients and files send, judged as the
//! MessagePack map it spells.

#[cfg(feature = "cli")]
#[allow(
    dead_code,
    reason = "read by `ingest` and `import`, which come after it"
)]
pub(crate) mod json;
mod msgpack;
mod plain;
mod reader;

pub use msgpack::{encode, encode_value};

use msgpack::decode_msgpack;
use plain::{text_count, text_ts_ms, text_value};

/// Most bytes an entry's fields (names and values, all together) may take:
/// 64 KiB. A hit takes a few dozen; a larger entry is refused as
/// [`Reject::TooLarge`] before it is decoded or copied, whatever it holds
/// (a valid name does not save it), so one careless producer costs a worker
/// no more than the read that brought the entry.
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;

/// Longest accepted hit name, in bytes of UTF-8 (4096). Names key Redis
/// counters; a bound keeps one bad producer from bloating every precision.
pub const MAX_NAME_BYTES: usize = 4096;

/// Largest accepted `count` of one hit (10^9). Keeps per-window sums far from
/// `i64` overflow even for windows of millions of hits.
pub const MAX_COUNT: i64 = 1_000_000_000;

/// How far (in ms, one day) a hit's `ts` may lie ahead of Redis' clock: a
/// later `ts` is almost surely a clock or unit bug (ms sent as seconds) and
/// would create counters no one will ever read.
pub const MAX_FUTURE_MS: i64 = 86_400_000;

/// How far (in ms, a minute) an entry ID may lie ahead of Redis' clock and
/// still be a hit's time. Redis gives IDs from its own clock: one further
/// ahead was given by a producer (`XADD` with an explicit ID), and every
/// later ID is pushed at least as high, so every later hit without `ts`
/// would land in that one future bucket (for up to a day when this was a
/// day). The minute leaves room for clocks of a cluster's nodes that differ
/// (the worker reads Redis' clock from one).
pub const MAX_ID_AHEAD_MS: i64 = 60_000;

/// Largest accepted magnitude of a `value` (10^100): far beyond any
/// measurement, and small enough that a window's sum of squares
/// (`count × value²`, summed) stays a finite number in Redis.
pub const MAX_ABS_VALUE: f64 = 1e100;

/// One decoded hit. `name` borrows from the stream entry's bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit<'a> {
    /// Counter name, valid UTF-8, 1..=[`MAX_NAME_BYTES`] bytes.
    pub name: &'a str,
    /// How many hits this event stands for, 1..=[`MAX_COUNT`].
    pub count: i64,
    /// When the hit happened, unix milliseconds: `floor(ts * 1000)` for the
    /// event's `ts`, else the entry ID's millisecond part.
    pub ts_ms: i64,
    /// A measured value (e.g. a response time in ms): the hit is `count`
    /// observations of it, kept in `stats:PREC:NAME` (see
    /// [`crate::model::stats`]). Finite, `|value|` ≤ [`MAX_ABS_VALUE`].
    /// `None` for a plain hit, which touches no statistics.
    pub value: Option<f64>,
}

/// Why a stream entry is not a valid hit. [`Reject::reason`] gives a stable
/// label for metrics; `Display` gives a sentence for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Reject {
    /// No `name` (no `name` field, or no `name` key in the `hit` map).
    #[error("hit has no name")]
    MissingName,
    /// `name` is the empty string.
    #[error("name is empty")]
    EmptyName,
    /// `name` is longer than [`MAX_NAME_BYTES`].
    #[error("name longer than {} bytes", MAX_NAME_BYTES)]
    NameTooLong,
    /// `name` is not valid UTF-8.
    #[error("name is not valid UTF-8")]
    NameNotUtf8,
    /// `count` is not an integer in 1..=[`MAX_COUNT`].
    #[error("count is not an integer from 1 to {}", MAX_COUNT)]
    BadCount,
    /// `ts` is not a finite number of unix seconds ≥ 0.
    #[error("ts is not a finite, non-negative number of unix seconds")]
    BadTimestamp,
    /// `ts` is more than [`MAX_FUTURE_MS`] ahead of Redis' clock.
    #[error("ts more than {} ms ahead of Redis' clock", MAX_FUTURE_MS)]
    FutureTimestamp,
    /// The `hit` field is not one well-formed MessagePack map, or its `name`
    /// is not a MessagePack string.
    #[error("hit field is not a well-formed MessagePack map with a string name")]
    BadMessagePack,
    /// The entry ID is not `<ms>-<seq>` with decimal parts (for [`decode`],
    /// `ms` ≤ `i64::MAX`; [`decode_at`] takes a larger `ms` as far ahead).
    #[error("entry ID is not <ms>-<seq>")]
    BadEntryId,
    /// `value` is not a finite number of magnitude at most
    /// [`MAX_ABS_VALUE`] (NaN, ±inf, text, any other type).
    #[error(
        "value is not a finite number of magnitude at most {:e}",
        MAX_ABS_VALUE
    )]
    BadValue,
    /// The entry has a `hit` field (the MessagePack form) and a plain one
    /// (`name`, `count`, `ts` or `value`) too: which form was meant is not
    /// ours to guess (the map's name would silently win over `name`).
    #[error("entry mixes the two forms: a hit field beside plain name/count/ts/value fields")]
    MixedForms,
    /// The entry's fields take more than [`MAX_ENTRY_BYTES`] (see
    /// [`entry_bytes`]); judged before anything else.
    #[error("entry's fields take more than {} bytes", MAX_ENTRY_BYTES)]
    TooLarge,
}

impl Reject {
    /// Stable snake_case label, e.g. `"name_too_long"`; part of the metrics
    /// contract, never renamed. The metrics' list of dead-letter reasons
    /// names the variants first, in their order.
    pub fn reason(self) -> &'static str {
        crate::model::metrics::DEAD_LETTER_REASONS[self as usize]
    }
}

/// The bytes an entry's fields take: every field name and value, added up
/// (what [`MAX_ENTRY_BYTES`] bounds). Counts lengths only, nothing is read.
pub(crate) fn entry_bytes<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> usize {
    fields
        .into_iter()
        .fold(0usize, |sum, (k, v)| sum.saturating_add(k.len() + v.len()))
}

/// [`Reject::TooLarge`] when fields of `bytes` (see [`entry_bytes`]) are
/// over [`MAX_ENTRY_BYTES`].
pub(crate) fn check_size(bytes: usize) -> Result<(), Reject> {
    (bytes <= MAX_ENTRY_BYTES)
        .then_some(())
        .ok_or(Reject::TooLarge)
}

/// The millisecond part of a stream entry ID: `b"1700000000123-5"` →
/// `Some(1700000000123)`. `None` unless the ID is `<digits>-<digits>` with the
/// first part ≤ `i64::MAX` and the second ≤ `u64::MAX`.
pub(crate) fn entry_id_ms(id: &[u8]) -> Option<i64> {
    entry_id_digits(id).and_then(|m| i64::try_from(m).ok())
}

/// The millisecond part of an ID `<digits>-<digits>` whose second part is
/// ≤ `u64::MAX`, however large the first.
fn entry_id_digits(id: &[u8]) -> Option<u128> {
    let dash = id.iter().position(|&b| b == b'-')?;
    let (ms, seq) = (&id[..dash], &id[dash + 1..]);
    parse_digits(seq).filter(|&s| s <= u64::MAX as u128)?;
    parse_digits(ms)
}

/// Where a decoded hit's time ([`Hit::ts_ms`]) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HitTime {
    /// The event's own `ts`.
    Stated,
    /// The entry ID's millisecond part: when Redis accepted it.
    EntryId,
    /// Redis' clock when the worker read the entry: the event has no `ts`
    /// and its entry ID is more than [`MAX_ID_AHEAD_MS`] ahead of that clock
    /// (an explicit ID in the future moves every later ID there too).
    Clock,
}

/// Decodes one stream entry (its ID and its field/value pairs) into a
/// [`Hit`], judging times against the entry's own ID time: [`decode_at`]
/// with that clock (for tools and tests that have no Redis clock; the
/// worker uses [`decode_at`]).
///
/// The returned name borrows from the field values; nothing is copied or
/// allocated. See the module doc for the forms and the rules.
pub fn decode<'a, I>(id: &[u8], fields: I) -> Result<Hit<'a>, Reject>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    let id_ms = entry_id_ms(id).ok_or(Reject::BadEntryId)?;
    decode_at(id, fields, id_ms).map(|(hit, _)| hit)
}

/// Decodes one stream entry read when Redis' clock said `clock_ms` (unix
/// ms): a `ts` more than [`MAX_FUTURE_MS`] ahead of it is rejected, and a
/// hit without `ts` whose entry ID is more than [`MAX_ID_AHEAD_MS`] ahead
/// takes `clock_ms` as its time ([`HitTime::Clock`]). Also says where the hit's time came from.
pub(crate) fn decode_at<'a, I>(
    id: &[u8],
    fields: I,
    clock_ms: i64,
) -> Result<(Hit<'a>, HitTime), Reject>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    // Redis' IDs go up to u64::MAX ms: one past i64::MAX is far ahead too.
    let id_ms = entry_id_digits(id)
        .map(clamp_ms)
        .ok_or(Reject::BadEntryId)?;
    let (mut hit, mut name, mut count, mut ts, mut value) = (None, None, None, None, None);
    for (key, v) in fields {
        match key {
            b"hit" => hit = Some(v),
            b"name" => name = Some(v),
            b"count" => count = Some(v),
            b"ts" => ts = Some(v),
            b"value" => value = Some(v),
            _ => {}
        }
    }
    let plain_too = name.is_some() || count.is_some() || ts.is_some() || value.is_some();
    let (name, count, ts_ms, value) = match hit {
        Some(_) if plain_too => return Err(Reject::MixedForms),
        Some(packed) => decode_msgpack(packed)?,
        None => {
            let name = check_name(name.ok_or(Reject::MissingName)?)?;
            let count = count.map_or(Ok(1), text_count)?;
            let ts_ms = ts.map(text_ts_ms).transpose()?;
            let value = value.map(text_value).transpose()?;
            (name, count, ts_ms, value)
        }
    };
    let latest = clock_ms.saturating_add(MAX_FUTURE_MS);
    let (ts_ms, from) = match ts_ms {
        Some(t) if t > latest => return Err(Reject::FutureTimestamp),
        Some(t) => (t, HitTime::Stated),
        None if id_ms > clock_ms.saturating_add(MAX_ID_AHEAD_MS) => (clock_ms, HitTime::Clock),
        None => (id_ms, HitTime::EntryId),
    };
    let hit = Hit {
        name,
        count,
        ts_ms,
        value,
    };
    Ok((hit, from))
}

/// Unix ms as an event's `ts` (seconds): half a millisecond past, so that
/// the worker's `floor(ts × 1000)` gives `ms` back exactly (`ms / 1000`
/// alone can land a float's width below it).
pub(crate) fn ts_of_ms(ms: i64) -> f64 {
    (ms as f64 + 0.5) / 1000.0
}

/// Whether `c` is a control character, or an invisible one (Unicode's
/// format characters, which reorder text, join or hide; the line and
/// paragraph separators), which [`printable`] escapes: `pa\u{ad}ge` must
/// not print as `page`.
pub(crate) fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}'
            | '\u{890}' | '\u{891}' | '\u{8e2}' | '\u{180e}' | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}' | '\u{2028}' | '\u{2029}' | '\u{2060}'..='\u{206f}'
            | '\u{feff}' | '\u{fff9}'..='\u{fffb}' | '\u{110bd}' | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}' | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}' | '\u{e0020}'..='\u{e007f}')
}

/// A name (or any text a producer wrote) as shown on a terminal: its
/// control characters escaped (`\u{1b}`), so that a hostile name cannot
/// move the cursor or recolour the terminal it is printed on, and so are
/// the invisible ones that reorder or break a line (`\u{202e}`, a
/// right-to-left override; `\u{2028}`); its backslashes doubled, so that an
/// escape is never mistaken for the text.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let escaped = |c: char| unprintable(c) || c == '\\';
    if !text.chars().any(escaped) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// Checks a name's bytes: non-empty, ≤ [`MAX_NAME_BYTES`], valid UTF-8.
pub(crate) fn check_name(bytes: &[u8]) -> Result<&str, Reject> {
    if bytes.is_empty() {
        Err(Reject::EmptyName)
    } else if bytes.len() > MAX_NAME_BYTES {
        Err(Reject::NameTooLong)
    } else {
        std::str::from_utf8(bytes).map_err(|_| Reject::NameNotUtf8)
    }
}

/// Parses 1..=39 ASCII digits (fits u128); `None` for anything else.
fn parse_digits(s: &[u8]) -> Option<u128> {
    // std's parser takes a leading `+` too, which is no digit.
    if s.len() > 39 || s.first() == Some(&b'+') {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

fn count_in_range(count: i128) -> Result<i64, Reject> {
    let in_range = (1..=i128::from(MAX_COUNT)).contains(&count);
    in_range.then_some(count as i64).ok_or(Reject::BadCount)
}

/// Float seconds to ms: finite, ≥ 0, `floor(ts * 1000)` (saturating).
fn float_ts_ms(ts: f64) -> Result<i64, Reject> {
    let ts = Some(ts).filter(|t| t.is_finite() && *t >= 0.0);
    // `as` saturates; a saturated value is rejected as future later.
    Ok((ts.ok_or(Reject::BadTimestamp)? * 1000.0).floor() as i64)
}

/// A value as the contract takes it: finite, `|v|` ≤ [`MAX_ABS_VALUE`];
/// `-0` is `0` (a minimum of `-0` would read back as text `-0`).
pub(crate) fn check_value(v: f64) -> Result<f64, Reject> {
    let v = Some(v + 0.0).filter(|v| v.is_finite() && v.abs() <= MAX_ABS_VALUE);
    v.ok_or(Reject::BadValue)
}

fn clamp_ms(ms: u128) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reason, in declaration order.
    pub(super) const ALL: [Reject; 12] = [
        Reject::MissingName,
        Reject::EmptyName,
        Reject::NameTooLong,
        Reject::NameNotUtf8,
        Reject::BadCount,
        Reject::BadTimestamp,
        Reject::FutureTimestamp,
        Reject::BadMessagePack,
        Reject::BadEntryId,
        Reject::BadValue,
        Reject::MixedForms,
        Reject::TooLarge,
    ];

    pub(super) const ID: &[u8] = b"1700000000123-5";
    pub(super) const ID_MS: i64 = 1_700_000_000_123;

    pub(super) fn plain<'a>(fields: &'a [(&'a str, &'a [u8])]) -> Result<Hit<'a>, Reject> {
        decode(ID, fields.iter().map(|(k, v)| (k.as_bytes(), *v)))
    }

    pub(super) fn packed(bytes: &[u8]) -> Result<Hit<'_>, Reject> {
        decode(ID, [(&b"hit"[..], bytes)])
    }

    /// A MessagePack map from (key, already-encoded value) pairs.
    pub(super) fn map(pairs: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_map_len(&mut out, pairs.len() as u32).unwrap();
        for (k, v) in pairs {
            rmp::encode::write_str(&mut out, k).unwrap();
            out.extend_from_slice(v);
        }
        out
    }

    pub(super) fn mp_str(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_str(&mut out, s).unwrap();
        out
    }

    pub(super) fn mp_raw_str(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_str_len(&mut out, bytes.len() as u32).unwrap();
        out.extend_from_slice(bytes);
        out
    }

    pub(super) fn mp_int(v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_sint(&mut out, v).unwrap();
        out
    }

    pub(super) fn mp_f64(v: f64) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_f64(&mut out, v).unwrap();
        out
    }

    pub(super) fn hit(name: &str, count: i64, ts_ms: i64) -> Hit<'_> {
        Hit {
            name,
            count,
            ts_ms,
            value: None,
        }
    }

    #[test]
    fn entry_ids() {
        assert_eq!(entry_id_ms(b"1700000000123-5"), Some(ID_MS));
        assert_eq!(entry_id_ms(b"0-0"), Some(0));
        assert_eq!(
            entry_id_ms(b"9223372036854775807-18446744073709551615"),
            Some(i64::MAX)
        );
        for bad in [
            &b""[..],
            b"-",
            b"123",
            b"123-",
            b"-5",
            b"12a-5",
            b"12-5-6",
            b"+12-5",
            b"9223372036854775808-0",
            b"1-18446744073709551616",
        ] {
            assert_eq!(entry_id_ms(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(plain(&[("name", b"a")]).map(|_| ()), Ok(()));
        assert_eq!(
            decode(b"nope", [(&b"name"[..], &b"a"[..])]),
            Err(Reject::BadEntryId)
        );
    }

    #[test]
    fn name_lengths() {
        let max = "n".repeat(MAX_NAME_BYTES);
        let over = "n".repeat(MAX_NAME_BYTES + 1);
        let kib = "é".repeat(512);
        assert_eq!(kib.len(), 1024);
        assert_eq!(plain(&[("name", max.as_bytes())]).unwrap().name, max);
        assert_eq!(
            plain(&[("name", over.as_bytes())]),
            Err(Reject::NameTooLong)
        );
        assert_eq!(plain(&[("name", kib.as_bytes())]).unwrap().name, kib);
        let m = encode(&max, 1, None);
        assert_eq!(packed(&m).unwrap().name, max);
        assert_eq!(packed(&encode(&over, 1, None)), Err(Reject::NameTooLong));
        assert_eq!(packed(&encode(&kib, 3, None)).unwrap(), hit(&kib, 3, ID_MS));
    }

    #[test]
    fn name_borrows_input() {
        let fields: [(&[u8], &[u8]); 1] = [(b"name", b"borrowed")];
        let h = decode(ID, fields).unwrap();
        assert_eq!(h.name.as_ptr(), fields[0].1.as_ptr());
        let m = encode("borrowed", 1, None);
        let h = packed(&m).unwrap();
        assert!(m.as_ptr_range().contains(&h.name.as_ptr()));
    }

    #[test]
    fn future_timestamps() {
        let limit_s = (ID_MS + MAX_FUTURE_MS) as f64 / 1000.0;
        assert_eq!(
            packed(&encode("a", 1, Some(limit_s))).unwrap().ts_ms,
            ID_MS + MAX_FUTURE_MS
        );
        assert_eq!(
            packed(&encode("a", 1, Some(limit_s + 0.002))),
            Err(Reject::FutureTimestamp)
        );
        assert_eq!(
            plain(&[("name", b"a"), ("ts", b"1700086400.123")])
                .unwrap()
                .ts_ms,
            ID_MS + MAX_FUTURE_MS
        );
        assert_eq!(
            plain(&[("name", b"a"), ("ts", b"1700086400.124")]),
            Err(Reject::FutureTimestamp)
        );
        // Milliseconds sent as seconds, and absurd values, saturate into "future".
        assert_eq!(
            plain(&[("name", b"a"), ("ts", b"1700000000123")]),
            Err(Reject::FutureTimestamp)
        );
        assert_eq!(
            plain(&[("name", b"a"), ("ts", &[b'9'; 60])]),
            Err(Reject::FutureTimestamp)
        );
        assert_eq!(
            packed(&encode("a", 1, Some(1e300))),
            Err(Reject::FutureTimestamp)
        );
        assert_eq!(
            packed(&map(&[
                ("name", mp_str("a")),
                (
                    "ts",
                    vec![0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
                )
            ])),
            Err(Reject::FutureTimestamp)
        );
        // The past is fine (the aggregator decides what is too old).
        assert_eq!(plain(&[("name", b"a"), ("ts", b"0")]).unwrap().ts_ms, 0);
    }

    /// A `hit` field beside a plain hit field: neither form wins silently
    /// (before, the map's name won over `name`, and a plain entry with a
    /// stray `hit` field was refused as `bad_msgpack`).
    #[test]
    fn mixed_forms() {
        let e = encode("a", 2, None);
        for plain_field in ["name", "count", "ts", "value"] {
            let fields: [(&[u8], &[u8]); 2] = [(plain_field.as_bytes(), b"3"), (b"hit", &e)];
            assert_eq!(decode(ID, fields), Err(Reject::MixedForms), "{plain_field}");
            let fields: [(&[u8], &[u8]); 2] = [(b"hit", &e), (plain_field.as_bytes(), b"3")];
            assert_eq!(decode(ID, fields), Err(Reject::MixedForms), "{plain_field}");
        }
        // A plain entry with a stray `hit` field says so, not `bad_msgpack`.
        assert_eq!(
            plain(&[("name", b"page:home"), ("hit", b"1")]),
            Err(Reject::MixedForms)
        );
        // Either form alone, with fields of neither, still counts.
        assert_eq!(
            plain(&[("name", b"a"), ("source", b"web")]),
            Ok(hit("a", 1, ID_MS))
        );
        assert_eq!(
            decode(ID, [(&b"hit"[..], &e[..]), (b"source", b"web")]),
            Ok(hit("a", 2, ID_MS))
        );
        // The entry ID is still checked first.
        assert_eq!(
            decode(b"nope", [(&b"hit"[..], &e[..]), (b"name", b"a")]),
            Err(Reject::BadEntryId)
        );
        assert!(Reject::MixedForms.to_string().contains("hit field"));
    }

    #[test]
    fn times_are_judged_against_redis_clock() {
        let name: [(&[u8], &[u8]); 1] = [(b"name", b"a")];
        // An entry ID far ahead of Redis' clock is not the hit's time.
        let ahead = b"9999999999999-0";
        let (h, from) = decode_at(ahead, name, ID_MS).unwrap();
        assert_eq!((h.ts_ms, from), (ID_MS, HitTime::Clock));
        // The largest ID Redis gives is as far ahead.
        let (h, from) =
            decode_at(b"18446744073709551615-18446744073709551615", name, ID_MS).unwrap();
        assert_eq!((h.ts_ms, from), (ID_MS, HitTime::Clock));
        assert_eq!(
            decode_at(b"1-18446744073709551616", name, ID_MS),
            Err(Reject::BadEntryId)
        );
        // Up to a minute ahead, the ID is the time; past it (an hour
        // ahead: a producer's explicit ID), Redis' clock is.
        let minute = format!("{}-0", ID_MS + MAX_ID_AHEAD_MS);
        let (h, from) = decode_at(minute.as_bytes(), name, ID_MS).unwrap();
        assert_eq!((h.ts_ms, from), (ID_MS + MAX_ID_AHEAD_MS, HitTime::EntryId));
        let hour = format!("{}-0", ID_MS + 3_600_000);
        let (h, from) = decode_at(hour.as_bytes(), name, ID_MS).unwrap();
        assert_eq!((h.ts_ms, from), (ID_MS, HitTime::Clock));
        let (h, from) = decode_at(ID, name, ID_MS + 5).unwrap();
        assert_eq!((h.ts_ms, from), (ID_MS, HitTime::EntryId));
        // A stated ts is judged against the clock, not the ID.
        let ts: [(&[u8], &[u8]); 2] = [(b"name", b"a"), (b"ts", b"1800000000")];
        assert_eq!(
            decode_at(ahead, ts, ID_MS).map(|(h, _)| h.ts_ms),
            Err(Reject::FutureTimestamp)
        );
        let ts: [(&[u8], &[u8]); 2] = [(b"name", b"a"), (b"ts", b"1700000100")];
        assert_eq!(
            decode_at(ahead, ts, ID_MS),
            Ok((hit("a", 1, 1_700_000_100_000), HitTime::Stated))
        );
    }

    #[test]
    fn entry_sizes() {
        let kib = vec![b'x'; 1024];
        assert_eq!(entry_bytes([(&b"name"[..], &b"abc"[..])]), 7);
        assert_eq!(entry_bytes([]), 0);
        let fields: Vec<(&[u8], &[u8])> = (0..64).map(|_| (&b""[..], &kib[..])).collect();
        assert_eq!(entry_bytes(fields.iter().copied()), MAX_ENTRY_BYTES);
        assert_eq!(check_size(MAX_ENTRY_BYTES), Ok(()));
        assert_eq!(check_size(MAX_ENTRY_BYTES + 1), Err(Reject::TooLarge));
        assert_eq!(Reject::TooLarge.reason(), "too_large");
    }

    #[test]
    fn reasons() {
        let labels: Vec<_> = ALL.iter().map(|r| r.reason()).collect();
        assert_eq!(
            labels,
            [
                "missing_name",
                "empty_name",
                "name_too_long",
                "name_not_utf8",
                "bad_count",
                "bad_timestamp",
                "future_timestamp",
                "bad_msgpack",
                "bad_entry_id",
                "bad_value",
                "mixed_forms",
                "too_large"
            ]
        );
        assert_eq!(
            Reject::NameTooLong.to_string(),
            "name longer than 4096 bytes"
        );
        assert!(Reject::BadCount.to_string().contains("1000000000"));
        assert!(Reject::FutureTimestamp.to_string().contains("86400000"));
        for r in ALL {
            assert!(!r.to_string().is_empty());
        }
    }
    #[test]
    fn every_decoder_reject_has_its_dead_letter_label() {
        // The label list repeats the decoder's reasons (a metric contract);
        // a new Reject must be added here, not folded into "apply_error".
        for r in ALL {
            let labels = crate::model::metrics::DEAD_LETTER_REASONS;
            assert!(labels.contains(&r.reason()), "{}", r.reason());
        }
    }
}

#[cfg(test)]
mod proptests;
