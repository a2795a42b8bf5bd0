//! The hit event and its two wire forms.
//!
//! A hit is one stream entry. Producers in any language write it in one of two
//! forms, and this module is the reference for both:
//!
//! * **MessagePack**: one field `hit` whose value is a MessagePack map
//!   `{"name": str, "count": int, "ts": int | float}`. `count` is optional
//!   (default 1), `ts` is optional (unix seconds). Unknown keys are ignored,
//!   whatever their value. If an entry has a `hit` field it is in this form and
//!   its other fields are ignored. A key given twice: the last one wins.
//! * **Plain fields**: `name`, optional `count` (decimal integer, e.g. `3`),
//!   optional `ts` (decimal unix seconds, e.g. `1700000000` or
//!   `1700000000.25`). Other fields are ignored; a field given twice: the last
//!   one wins.
//!
//! Without `ts`, the hit happened at the entry ID's millisecond part (IDs are
//! `<ms>-<seq>`), which is when Redis accepted it.
//!
//! Rules, each with its [`Reject`] reason:
//! * name: valid UTF-8, 1..=[`MAX_NAME_BYTES`] bytes.
//! * count: an integer in 1..=[`MAX_COUNT`]. Floats (even `2.0`), strings in
//!   MessagePack, `nil` and any other type are rejected.
//! * ts: finite and ≥ 0, written without a sign in the plain form (as
//!   `count`); in MessagePack any int or float type. The resolved
//!   time may be at most [`MAX_FUTURE_MS`] after the entry ID's time.
//!
//! When an entry breaks several rules the first failing check names it, in
//! this order: entry ID, MessagePack structure, name, count, ts, future.
//!
//! Decoding never panics, never copies the name (it borrows from the entry's
//! bytes) and never allocates. The MessagePack form is read with `rmp`'s marker
//! table and a bounds-checked, iterative (no recursion) skipper, so hostile
//! nesting cannot exhaust the stack.

use rmp::Marker;
use serde::Serialize;

/// Longest accepted hit name, in bytes of UTF-8 (4096). Names key Redis
/// counters; a bound keeps one bad producer from bloating every precision.
pub const MAX_NAME_BYTES: usize = 4096;

/// Largest accepted `count` of one hit (10^9). Keeps per-window sums far from
/// `i64` overflow even for windows of millions of hits.
pub const MAX_COUNT: i64 = 1_000_000_000;

/// How far (in ms, one day) a hit's `ts` may lie after its entry ID's time.
/// Later hits are almost surely clock or unit bugs (ms sent as seconds) and
/// would create counters no one will ever read.
pub const MAX_FUTURE_MS: i64 = 86_400_000;

/// One decoded hit. `name` borrows from the stream entry's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hit<'a> {
    /// Counter name, valid UTF-8, 1..=[`MAX_NAME_BYTES`] bytes.
    pub name: &'a str,
    /// How many hits this event stands for, 1..=[`MAX_COUNT`].
    pub count: i64,
    /// When the hit happened, unix milliseconds: `floor(ts * 1000)` for the
    /// event's `ts`, else the entry ID's millisecond part.
    pub ts_ms: i64,
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
    /// `ts` is more than [`MAX_FUTURE_MS`] after the entry ID's time.
    #[error("ts more than {} ms after the entry ID's time", MAX_FUTURE_MS)]
    FutureTimestamp,
    /// The `hit` field is not one well-formed MessagePack map, or its `name`
    /// is not a MessagePack string.
    #[error("hit field is not a well-formed MessagePack map with a string name")]
    BadMessagePack,
    /// The entry ID is not `<ms>-<seq>` with decimal parts (`ms` ≤ `i64::MAX`).
    #[error("entry ID is not <ms>-<seq>")]
    BadEntryId,
}

impl Reject {
    /// Every reason, in declaration order (e.g. to pre-register metric labels).
    pub const ALL: [Reject; 9] = [
        Reject::MissingName,
        Reject::EmptyName,
        Reject::NameTooLong,
        Reject::NameNotUtf8,
        Reject::BadCount,
        Reject::BadTimestamp,
        Reject::FutureTimestamp,
        Reject::BadMessagePack,
        Reject::BadEntryId,
    ];

    /// Stable snake_case label, e.g. `"name_too_long"`; part of the metrics
    /// contract, never renamed.
    pub fn reason(self) -> &'static str {
        match self {
            Reject::MissingName => "missing_name",
            Reject::EmptyName => "empty_name",
            Reject::NameTooLong => "name_too_long",
            Reject::NameNotUtf8 => "name_not_utf8",
            Reject::BadCount => "bad_count",
            Reject::BadTimestamp => "bad_timestamp",
            Reject::FutureTimestamp => "future_timestamp",
            Reject::BadMessagePack => "bad_msgpack",
            Reject::BadEntryId => "bad_entry_id",
        }
    }
}

/// The millisecond part of a stream entry ID: `b"1700000000123-5"` →
/// `Some(1700000000123)`. `None` unless the ID is `<digits>-<digits>` with the
/// first part ≤ `i64::MAX` and the second ≤ `u64::MAX`.
pub fn entry_id_ms(id: &[u8]) -> Option<i64> {
    let dash = id.iter().position(|&b| b == b'-')?;
    let (ms, seq) = (&id[..dash], &id[dash + 1..]);
    parse_digits(seq).filter(|&s| s <= u64::MAX as u128)?;
    parse_digits(ms).and_then(|m| i64::try_from(m).ok())
}

/// Decodes one stream entry (its ID and its field/value pairs) into a [`Hit`].
///
/// The returned name borrows from the field values; nothing is copied or
/// allocated. See the module doc for the forms and the rules.
pub fn decode<'a, I>(id: &[u8], fields: I) -> Result<Hit<'a>, Reject>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    let id_ms = entry_id_ms(id).ok_or(Reject::BadEntryId)?;
    let (mut hit, mut name, mut count, mut ts) = (None, None, None, None);
    for (key, value) in fields {
        match key {
            b"hit" => hit = Some(value),
            b"name" => name = Some(value),
            b"count" => count = Some(value),
            b"ts" => ts = Some(value),
            _ => {}
        }
    }
    let (name, count, ts_ms) = match hit {
        Some(packed) => decode_msgpack(packed)?,
        None => {
            let name = check_name(name.ok_or(Reject::MissingName)?)?;
            let count = count.map_or(Ok(1), text_count)?;
            let ts_ms = ts.map(text_ts_ms).transpose()?;
            (name, count, ts_ms)
        }
    };
    let ts_ms = match ts_ms {
        Some(t) if t > id_ms.saturating_add(MAX_FUTURE_MS) => return Err(Reject::FutureTimestamp),
        Some(t) => t,
        None => id_ms,
    };
    Ok(Hit { name, count, ts_ms })
}

/// The MessagePack map written by [`encode`]; field names are the contract.
#[derive(Serialize)]
struct WireHit<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "is_one")]
    count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
}

fn is_one(count: &i64) -> bool {
    *count == 1
}

/// Encodes a hit as the MessagePack map for an entry's `hit` field:
/// `{"name": name, "count": count, "ts": ts}`, omitting `count` when it is 1
/// and `ts` when `None`. Integers use the smallest MessagePack int type; `ts`
/// is written as a float64 (unix seconds). Nothing is validated here: an
/// out-of-range value is written as given and rejected by [`decode`].
pub fn encode(name: &str, count: i64, ts: Option<f64>) -> Vec<u8> {
    rmp_serde::to_vec_named(&WireHit { name, count, ts })
        .expect("serializing a flat struct into a Vec cannot fail")
}

/// Checks a name's bytes: non-empty, ≤ [`MAX_NAME_BYTES`], valid UTF-8.
fn check_name(bytes: &[u8]) -> Result<&str, Reject> {
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
    if s.is_empty() || s.len() > 39 {
        return None;
    }
    s.iter().try_fold(0u128, |acc, &b| {
        let d = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        acc.checked_mul(10)?.checked_add(u128::from(d))
    })
}

/// A plain-form `count`: decimal digits only, value in 1..=[`MAX_COUNT`].
fn text_count(bytes: &[u8]) -> Result<i64, Reject> {
    count_in_range(parse_digits(bytes).ok_or(Reject::BadCount)? as i128)
}

fn count_in_range(count: i128) -> Result<i64, Reject> {
    if (1..=i128::from(MAX_COUNT)).contains(&count) {
        Ok(count as i64)
    } else {
        Err(Reject::BadCount)
    }
}

/// A plain-form `ts` to unix ms. `digits[.digits]` is read exactly (the ms
/// are the first three fraction digits, the rest truncated), so
/// `"1700000000.001"` is exactly `1700000000001`. Any other spelling that
/// Rust's `f64` parser accepts (`1e9`, `.5`) goes through [`float_ts_ms`],
/// except a leading `+`, refused as it is for `count`.
fn text_ts_ms(bytes: &[u8]) -> Result<i64, Reject> {
    if let Some(ms) = exact_decimal_ms(bytes) {
        return Ok(ms);
    }
    if bytes.first() == Some(&b'+') {
        return Err(Reject::BadTimestamp);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Reject::BadTimestamp)?;
    float_ts_ms(text.parse::<f64>().map_err(|_| Reject::BadTimestamp)?)
}

/// `digits[.digits*]` seconds to ms without going through binary floats.
fn exact_decimal_ms(bytes: &[u8]) -> Option<i64> {
    let (int, frac) = match bytes.iter().position(|&b| b == b'.') {
        Some(dot) => (&bytes[..dot], &bytes[dot + 1..]),
        None => (bytes, &[][..]),
    };
    let secs = parse_digits(int)?;
    if !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let ms = frac
        .iter()
        .chain(b"000")
        .take(3)
        .fold(0u128, |acc, &b| acc * 10 + u128::from(b - b'0'));
    Some(clamp_ms(secs.saturating_mul(1000).saturating_add(ms)))
}

/// Float seconds to ms: finite, ≥ 0, `floor(ts * 1000)` (saturating).
fn float_ts_ms(ts: f64) -> Result<i64, Reject> {
    if ts.is_finite() && ts >= 0.0 {
        // `as` saturates; a saturated value is rejected as future later.
        Ok((ts * 1000.0).floor() as i64)
    } else {
        Err(Reject::BadTimestamp)
    }
}

/// Integer seconds (any MessagePack int) to ms; huge values saturate (they
/// are rejected as future later).
fn int_ts_ms(ts: i128) -> Result<i64, Reject> {
    if ts < 0 {
        return Err(Reject::BadTimestamp);
    }
    Ok(clamp_ms(ts.unsigned_abs().saturating_mul(1000)))
}

fn clamp_ms(ms: u128) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Reads the `hit` map: (validated name, count, ts in ms if given).
fn decode_msgpack(packed: &[u8]) -> Result<(&str, i64, Option<i64>), Reject> {
    let bad = |_: Malformed| Reject::BadMessagePack;
    let mut rd = Reader { buf: packed };
    let pairs = match rd.head().map_err(bad)? {
        Head::Map(n) => n,
        _ => return Err(Reject::BadMessagePack),
    };
    let (mut name, mut count, mut ts) = (None, None, None);
    for _ in 0..pairs {
        let slot = match rd.head().map_err(bad)? {
            Head::Scalar(Scalar::Str(b"name")) => &mut name,
            Head::Scalar(Scalar::Str(b"count")) => &mut count,
            Head::Scalar(Scalar::Str(b"ts")) => &mut ts,
            Head::Scalar(_) => {
                rd.skip(1).map_err(bad)?;
                continue;
            }
            // A container key: skip its contents, then the value.
            Head::Array(n) => {
                rd.skip(n + 1).map_err(bad)?;
                continue;
            }
            Head::Map(n) => {
                rd.skip(2 * n + 1).map_err(bad)?;
                continue;
            }
        };
        *slot = Some(rd.value().map_err(bad)?);
    }
    if !rd.buf.is_empty() {
        return Err(Reject::BadMessagePack);
    }
    let name = match name {
        None => return Err(Reject::MissingName),
        Some(Scalar::Str(bytes)) => check_name(bytes)?,
        Some(_) => return Err(Reject::BadMessagePack),
    };
    let count = match count {
        None => 1,
        Some(Scalar::Int(c)) => count_in_range(c)?,
        Some(_) => return Err(Reject::BadCount),
    };
    let ts_ms = match ts {
        None => None,
        Some(Scalar::Int(t)) => Some(int_ts_ms(t)?),
        Some(Scalar::Float(t)) => Some(float_ts_ms(t)?),
        Some(_) => return Err(Reject::BadTimestamp),
    };
    Ok((name, count, ts_ms))
}

/// The input ended early or used the reserved marker `0xc1`.
struct Malformed;

/// A MessagePack value that is not a container.
#[derive(Clone, Copy)]
enum Scalar<'a> {
    /// Any int type, widened so u64 and i64 both fit.
    Int(i128),
    /// float32 or float64.
    Float(f64),
    /// A str's raw bytes (UTF-8 not yet checked).
    Str(&'a [u8]),
    /// nil, bool, bin, ext, or a skipped container.
    Other,
}

/// One value's header: a scalar (payload consumed) or a container's length.
enum Head<'a> {
    Scalar(Scalar<'a>),
    /// Array with this many elements still to read.
    Array(u64),
    /// Map with this many key/value pairs still to read.
    Map(u64),
}

/// Bounds-checked cursor over MessagePack bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.buf.len() {
            return Err(Malformed);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn len8(&mut self) -> Result<usize, Malformed> {
        Ok(usize::from(self.be::<1>()?[0]))
    }

    fn len16(&mut self) -> Result<usize, Malformed> {
        Ok(usize::from(u16::from_be_bytes(self.be()?)))
    }

    fn len32(&mut self) -> Result<usize, Malformed> {
        usize::try_from(u32::from_be_bytes(self.be()?)).map_err(|_| Malformed)
    }

    /// Skips a byte payload of `len` bytes (plus `extra`, e.g. an ext type).
    fn skip_bytes(&mut self, len: usize, extra: usize) -> Result<Scalar<'a>, Malformed> {
        self.take(len.checked_add(extra).ok_or(Malformed)?)?;
        Ok(Scalar::Other)
    }

    /// Reads one value's marker and, for scalars, its payload.
    fn head(&mut self) -> Result<Head<'a>, Malformed> {
        let scalar = match Marker::from_u8(self.be::<1>()?[0]) {
            Marker::FixPos(n) => Scalar::Int(i128::from(n)),
            Marker::FixNeg(n) => Scalar::Int(i128::from(n)),
            Marker::U8 => Scalar::Int(i128::from(u8::from_be_bytes(self.be()?))),
            Marker::U16 => Scalar::Int(i128::from(u16::from_be_bytes(self.be()?))),
            Marker::U32 => Scalar::Int(i128::from(u32::from_be_bytes(self.be()?))),
            Marker::U64 => Scalar::Int(i128::from(u64::from_be_bytes(self.be()?))),
            Marker::I8 => Scalar::Int(i128::from(i8::from_be_bytes(self.be()?))),
            Marker::I16 => Scalar::Int(i128::from(i16::from_be_bytes(self.be()?))),
            Marker::I32 => Scalar::Int(i128::from(i32::from_be_bytes(self.be()?))),
            Marker::I64 => Scalar::Int(i128::from(i64::from_be_bytes(self.be()?))),
            Marker::F32 => Scalar::Float(f64::from(f32::from_be_bytes(self.be()?))),
            Marker::F64 => Scalar::Float(f64::from_be_bytes(self.be()?)),
            Marker::FixStr(n) => Scalar::Str(self.take(usize::from(n))?),
            Marker::Str8 => Scalar::Str({
                let n = self.len8()?;
                self.take(n)?
            }),
            Marker::Str16 => Scalar::Str({
                let n = self.len16()?;
                self.take(n)?
            }),
            Marker::Str32 => Scalar::Str({
                let n = self.len32()?;
                self.take(n)?
            }),
            Marker::Null | Marker::True | Marker::False => Scalar::Other,
            Marker::Bin8 => self.len8().and_then(|n| self.skip_bytes(n, 0))?,
            Marker::Bin16 => self.len16().and_then(|n| self.skip_bytes(n, 0))?,
            Marker::Bin32 => self.len32().and_then(|n| self.skip_bytes(n, 0))?,
            Marker::FixExt1 => self.skip_bytes(1, 1)?,
            Marker::FixExt2 => self.skip_bytes(2, 1)?,
            Marker::FixExt4 => self.skip_bytes(4, 1)?,
            Marker::FixExt8 => self.skip_bytes(8, 1)?,
            Marker::FixExt16 => self.skip_bytes(16, 1)?,
            Marker::Ext8 => self.len8().and_then(|n| self.skip_bytes(n, 1))?,
            Marker::Ext16 => self.len16().and_then(|n| self.skip_bytes(n, 1))?,
            Marker::Ext32 => self.len32().and_then(|n| self.skip_bytes(n, 1))?,
            Marker::FixArray(n) => return Ok(Head::Array(u64::from(n))),
            Marker::Array16 => return Ok(Head::Array(self.len16()? as u64)),
            Marker::Array32 => return Ok(Head::Array(self.len32()? as u64)),
            Marker::FixMap(n) => return Ok(Head::Map(u64::from(n))),
            Marker::Map16 => return Ok(Head::Map(self.len16()? as u64)),
            Marker::Map32 => return Ok(Head::Map(self.len32()? as u64)),
            Marker::Reserved => return Err(Malformed),
        };
        Ok(Head::Scalar(scalar))
    }

    /// Skips `pending` whole values, iteratively. Every value takes at least
    /// one byte, so a count larger than what is left fails at once; this
    /// bounds the work by the input's length.
    fn skip(&mut self, mut pending: u64) -> Result<(), Malformed> {
        while pending > 0 {
            if pending > self.buf.len() as u64 {
                return Err(Malformed);
            }
            pending -= 1;
            match self.head()? {
                Head::Scalar(_) => {}
                Head::Array(n) => pending += n,
                Head::Map(n) => pending += 2 * n,
            }
        }
        Ok(())
    }

    /// Reads one value; a container is skipped and reads as `Other`.
    fn value(&mut self) -> Result<Scalar<'a>, Malformed> {
        match self.head()? {
            Head::Scalar(s) => Ok(s),
            Head::Array(n) => self.skip(n).map(|_| Scalar::Other),
            Head::Map(n) => self.skip(2 * n).map(|_| Scalar::Other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &[u8] = b"1700000000123-5";
    const ID_MS: i64 = 1_700_000_000_123;

    fn plain<'a>(fields: &'a [(&'a str, &'a [u8])]) -> Result<Hit<'a>, Reject> {
        decode(ID, fields.iter().map(|(k, v)| (k.as_bytes(), *v)))
    }

    fn packed(bytes: &[u8]) -> Result<Hit<'_>, Reject> {
        decode(ID, [(&b"hit"[..], bytes)])
    }

    /// A MessagePack map from (key, already-encoded value) pairs.
    fn map(pairs: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_map_len(&mut out, pairs.len() as u32).unwrap();
        for (k, v) in pairs {
            rmp::encode::write_str(&mut out, k).unwrap();
            out.extend_from_slice(v);
        }
        out
    }

    fn mp_str(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_str(&mut out, s).unwrap();
        out
    }

    fn mp_raw_str(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_str_len(&mut out, bytes.len() as u32).unwrap();
        out.extend_from_slice(bytes);
        out
    }

    fn mp_int(v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_sint(&mut out, v).unwrap();
        out
    }

    fn mp_f64(v: f64) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_f64(&mut out, v).unwrap();
        out
    }

    fn hit(name: &str, count: i64, ts_ms: i64) -> Hit<'_> {
        Hit { name, count, ts_ms }
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
    fn plain_form() {
        assert_eq!(
            plain(&[("name", b"page:home")]),
            Ok(hit("page:home", 1, ID_MS))
        );
        assert_eq!(
            plain(&[
                ("name", b"a"),
                ("count", b"7"),
                ("ts", b"1700000000"),
                ("x", b"y")
            ]),
            Ok(hit("a", 7, 1_700_000_000_000))
        );
        assert_eq!(
            plain(&[("ts", b"1700000000.25"), ("name", b"a")]),
            Ok(hit("a", 1, 1_700_000_000_250))
        );
        // Exact decimal: no binary-float rounding, sub-ms digits truncated.
        assert_eq!(
            plain(&[("name", b"a"), ("ts", b"1.001")]),
            Ok(hit("a", 1, 1001))
        );
        assert_eq!(
            plain(&[("name", b"a"), ("ts", b"0.2999")]),
            Ok(hit("a", 1, 299))
        );
        assert_eq!(
            plain(&[("name", b"a"), ("ts", b"5.")]),
            Ok(hit("a", 1, 5000))
        );
        // Other float spellings go through f64.
        assert_eq!(
            plain(&[("name", b"a"), ("ts", b"1.7e9")]),
            Ok(hit("a", 1, 1_700_000_000_000))
        );
        assert_eq!(
            plain(&[("name", b"a"), ("ts", b".5")]),
            Ok(hit("a", 1, 500))
        );
        // Last duplicate wins.
        assert_eq!(
            plain(&[("name", b"a"), ("name", b"b")]),
            Ok(hit("b", 1, ID_MS))
        );
        assert_eq!(
            plain(&[("count", b"1000000000"), ("name", b"a")])
                .unwrap()
                .count,
            MAX_COUNT
        );
        assert_eq!(
            plain(&[("count", b"007"), ("name", b"a")]).unwrap().count,
            7
        );
    }

    #[test]
    fn plain_rejects() {
        assert_eq!(plain(&[]), Err(Reject::MissingName));
        assert_eq!(plain(&[("count", b"2")]), Err(Reject::MissingName));
        assert_eq!(plain(&[("name", b"")]), Err(Reject::EmptyName));
        assert_eq!(plain(&[("name", b"\xff\xfe")]), Err(Reject::NameNotUtf8));
        for bad in [
            &b"0"[..],
            b"-1",
            b"1000000001",
            b"2.0",
            b"abc",
            b"",
            b" 1",
            b"+1",
            b"99999999999999999999999",
        ] {
            assert_eq!(
                plain(&[("name", b"a"), ("count", bad)]),
                Err(Reject::BadCount),
                "{bad:?}"
            );
        }
        for bad in [
            &b"-1"[..],
            b"-0.5",
            b"NaN",
            b"inf",
            b"-inf",
            b"abc",
            b"",
            b"1.2.3",
            b"\xff",
            // A sign is refused as for count, even where f64 would take it.
            b"+1700000000",
            b"+1.5e9",
        ] {
            assert_eq!(
                plain(&[("name", b"a"), ("ts", bad)]),
                Err(Reject::BadTimestamp),
                "{bad:?}"
            );
        }
        // Checked in order: name, count, ts.
        assert_eq!(
            plain(&[("name", b""), ("count", b"0")]),
            Err(Reject::EmptyName)
        );
        assert_eq!(
            plain(&[("name", b"a"), ("count", b"0"), ("ts", b"x")]),
            Err(Reject::BadCount)
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

    #[test]
    fn msgpack_form() {
        assert_eq!(packed(&encode("a", 1, None)), Ok(hit("a", 1, ID_MS)));
        assert_eq!(
            packed(&encode("a", 42, Some(1_700_000_000.25))),
            Ok(hit("a", 42, 1_700_000_000_250))
        );
        assert_eq!(
            packed(&encode("a", 1, Some(1_700_000_000.0))),
            Ok(hit("a", 1, 1_700_000_000_000))
        );
        // Int ts of every width, float32 ts.
        for ts in [
            mp_int(1_700_000_000),
            vec![0xcf, 0, 0, 0, 0, 0x65, 0x53, 0xf1, 0x00],
            vec![0xd3, 0, 0, 0, 0, 0x65, 0x53, 0xf1, 0x00],
        ] {
            assert_eq!(
                packed(&map(&[("name", mp_str("a")), ("ts", ts)])),
                Ok(hit("a", 1, 1_700_000_000_000))
            );
        }
        assert_eq!(
            packed(&map(&[("name", mp_str("a")), ("ts", mp_int(7))])),
            Ok(hit("a", 1, 7000))
        );
        let mut f32ts = vec![0xca];
        f32ts.extend_from_slice(&1.5f32.to_be_bytes());
        assert_eq!(
            packed(&map(&[("name", mp_str("a")), ("ts", f32ts)])),
            Ok(hit("a", 1, 1500))
        );
        // Count of every int width.
        for (bytes, c) in [
            (vec![0x05], 5),
            (vec![0xcc, 200], 200),
            (vec![0xd1, 0x01, 0x00], 256),
            (mp_int(MAX_COUNT), MAX_COUNT),
        ] {
            assert_eq!(
                packed(&map(&[("count", bytes), ("name", mp_str("a"))]))
                    .unwrap()
                    .count,
                c
            );
        }
        // Unknown keys of any type, with any value, are ignored.
        let nested = vec![0x92, 0x81, 0xa1, b'k', 0x90, 0xc4, 0x01, 0x00]; // [{"k": []}, bin 1]
        let m = map(&[
            ("app", mp_str("x")),
            ("name", mp_str("a")),
            ("z", nested),
            ("e", vec![0xd4, 0x01, 0x02]), // fixext 1
        ]);
        assert_eq!(packed(&m), Ok(hit("a", 1, ID_MS)));
        // Non-string keys: 1 => nil, [2] => true, {1: 2} => false, then "name" => "k".
        let mut m = vec![0x84, 0x01, 0xc0, 0x91, 0x02, 0xc3, 0x81, 0x01, 0x02, 0xc2];
        m.extend_from_slice(&mp_str("name"));
        m.extend_from_slice(&mp_str("k"));
        assert_eq!(packed(&m), Ok(hit("k", 1, ID_MS)));
        // Other fields beside `hit` are ignored, plain ones included.
        let e = encode("a", 2, None);
        let fields: [(&[u8], &[u8]); 3] = [(b"name", b"plain"), (b"hit", &e), (b"count", b"9")];
        assert_eq!(decode(ID, fields), Ok(hit("a", 2, ID_MS)));
        // Last duplicate key wins.
        assert_eq!(
            packed(&map(&[("name", mp_str("a")), ("name", mp_str("b"))]))
                .unwrap()
                .name,
            "b"
        );
    }

    #[test]
    fn msgpack_rejects() {
        assert_eq!(
            packed(&map(&[("count", mp_int(2))])),
            Err(Reject::MissingName)
        );
        assert_eq!(packed(&map(&[])), Err(Reject::MissingName));
        assert_eq!(
            packed(&map(&[("name", mp_str(""))])),
            Err(Reject::EmptyName)
        );
        assert_eq!(
            packed(&map(&[("name", mp_raw_str(b"\xc3\x28"))])),
            Err(Reject::NameNotUtf8)
        );
        for name in [
            mp_int(1),
            vec![0xc0],
            vec![0xc4, 0x01, b'a'],
            vec![0x91, 0xa1, b'a'],
        ] {
            assert_eq!(packed(&map(&[("name", name)])), Err(Reject::BadMessagePack));
        }
        for count in [
            mp_int(0),
            mp_int(-1),
            mp_int(MAX_COUNT + 1),
            mp_f64(2.0),
            mp_str("2"),
            vec![0xc0],
            vec![0xc3],
            vec![0x90],
            vec![0x80],
            vec![0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert_eq!(
                packed(&map(&[("name", mp_str("a")), ("count", count.clone())])),
                Err(Reject::BadCount),
                "{count:?}"
            );
        }
        for ts in [
            mp_int(-1),
            mp_f64(-0.5),
            mp_f64(f64::NAN),
            mp_f64(f64::INFINITY),
            mp_f64(f64::NEG_INFINITY),
            mp_str("1700000000"),
            vec![0xc0],
            vec![0x90],
        ] {
            assert_eq!(
                packed(&map(&[("name", mp_str("a")), ("ts", ts.clone())])),
                Err(Reject::BadTimestamp),
                "{ts:?}"
            );
        }
        // Garbage, truncation, non-maps, trailing bytes, reserved marker.
        let good = encode("abc", 5, Some(1.5));
        for cut in 0..good.len() {
            assert_eq!(
                packed(&good[..cut]),
                Err(Reject::BadMessagePack),
                "cut at {cut}"
            );
        }
        let mut trailing = good.clone();
        trailing.push(0xc0);
        for bad in [
            trailing,
            vec![0xc1],
            vec![0x91, 0x01],
            mp_str("name"),
            mp_int(1),
            vec![0xdf, 0xff, 0xff, 0xff, 0xff],
            vec![0x81, 0xc1, 0x01],
            vec![0x81, 0xa1, b'x', 0xdd, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert_eq!(packed(&bad), Err(Reject::BadMessagePack), "{bad:?}");
        }
        // Deep nesting is skipped without recursion.
        let mut deep = map(&[("name", mp_str("a"))]);
        deep[0] += 1;
        deep.extend_from_slice(&mp_str("deep"));
        deep.extend(std::iter::repeat_n(0x91, 100_000));
        deep.push(0xc0);
        assert_eq!(packed(&deep), Ok(hit("a", 1, ID_MS)));
        deep.pop();
        assert_eq!(packed(&deep), Err(Reject::BadMessagePack));
        // Structure is checked before the name; ID before everything.
        assert_eq!(
            packed(&[0x81, 0xa4, b'n', b'a', b'm', b'e', 0xa0, 0xc0]),
            Err(Reject::BadMessagePack)
        );
        assert_eq!(
            decode(b"x", [(&b"hit"[..], &b"\xc1"[..])]),
            Err(Reject::BadEntryId)
        );
    }

    #[test]
    fn encode_shape() {
        // Smallest form: {"name": "a"}.
        assert_eq!(
            encode("a", 1, None),
            vec![0x81, 0xa4, b'n', b'a', b'm', b'e', 0xa1, b'a']
        );
        let e = encode("a", 300, Some(2.5));
        let v: std::collections::BTreeMap<String, rmpv_like::Any> =
            rmp_serde::from_slice(&e).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v["count"], rmpv_like::Any::Int(300));
        assert_eq!(v["ts"], rmpv_like::Any::Float(2.5));
        assert_eq!(v["name"], rmpv_like::Any::Str("a".into()));
    }

    /// Just enough of a dynamic MessagePack value to inspect `encode`.
    mod rmpv_like {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        #[serde(untagged)]
        pub enum Any {
            Int(i64),
            Float(f64),
            Str(String),
        }
    }

    #[test]
    fn reasons() {
        let labels: Vec<_> = Reject::ALL.iter().map(|r| r.reason()).collect();
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
                "bad_entry_id"
            ]
        );
        assert_eq!(
            Reject::NameTooLong.to_string(),
            "name longer than 4096 bytes"
        );
        assert!(Reject::BadCount.to_string().contains("1000000000"));
        assert!(Reject::FutureTimestamp.to_string().contains("86400000"));
        for r in Reject::ALL {
            assert!(!r.to_string().is_empty());
        }
    }
}
