//! The plain form: the `name`, `count`, `ts` and `value` fields as decimal
//! text, read for [`decode`](super::decode) when an entry has no `hit` field.

use super::{check_value, clamp_ms, count_in_range, float_ts_ms, parse_digits, Reject};

/// A plain-form `value`: any spelling Rust's `f64` parser takes (`12.5`,
/// `-3`, `1e-3`, `+2`) that is finite and within
/// [`MAX_ABS_VALUE`](super::MAX_ABS_VALUE); `NaN`, `inf`, text → [`Reject::BadValue`].
pub(super) fn text_value(bytes: &[u8]) -> Result<f64, Reject> {
    let text = std::str::from_utf8(bytes).map_err(|_| Reject::BadValue)?;
    check_value(text.parse::<f64>().map_err(|_| Reject::BadValue)?)
}

/// A plain-form `count`: decimal digits only, value in
/// 1..=[`MAX_COUNT`](super::MAX_COUNT).
pub(super) fn text_count(bytes: &[u8]) -> Result<i64, Reject> {
    count_in_range(parse_digits(bytes).ok_or(Reject::BadCount)? as i128)
}

/// A plain-form `ts` to unix ms. `digits[.digits]` is read exactly (the ms
/// are the first three fraction digits, the rest truncated), so
/// `"1700000000.001"` is exactly `1700000000001`. Any other spelling that
/// Rust's `f64` parser accepts (`1e9`, `.5`) goes through [`float_ts_ms`],
/// except a leading sign, refused as it is for `count` (`-0` too).
pub(super) fn text_ts_ms(bytes: &[u8]) -> Result<i64, Reject> {
    if let Some(ms) = exact_decimal_ms(bytes) {
        return Ok(ms);
    }
    if matches!(bytes.first(), Some(b'+' | b'-')) {
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

#[cfg(test)]
mod tests {
    use crate::model::event::tests::{hit, plain, ID_MS};
    use crate::model::event::{Reject, MAX_COUNT};

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
    fn plain_values() {
        let value = |v: &'static [u8]| plain(&[("name", b"a"), ("value", v)]).map(|h| h.value);
        assert_eq!(value(b"12.5"), Ok(Some(12.5)));
        assert_eq!(value(b"-3"), Ok(Some(-3.0)));
        assert_eq!(value(b"1e-3"), Ok(Some(0.001)));
        assert_eq!(value(b"0"), Ok(Some(0.0)));
        // -0 is 0: a minimum of -0 would be stored as the text "-0".
        let zero = value(b"-0").unwrap().unwrap();
        assert!(zero == 0.0 && zero.is_sign_positive());
        assert_eq!(value(b"0.1"), Ok(Some(0.1)));
        assert_eq!(plain(&[("name", b"a")]).unwrap().value, None);
        for bad in [
            &b"NaN"[..],
            b"nan",
            b"inf",
            b"-inf",
            b"infinity",
            b"1e400",
            b"1e101",
            b"abc",
            b"",
            b" 1",
            b"1,5",
            b"\xff",
        ] {
            assert_eq!(value(bad), Err(Reject::BadValue), "{bad:?}");
        }
        // With count: c observations of v; the ts check comes first.
        let h = plain(&[("name", b"a"), ("count", b"3"), ("value", b"2")]).unwrap();
        assert_eq!((h.count, h.value), (3, Some(2.0)));
        assert_eq!(
            plain(&[("name", b"a"), ("ts", b"x"), ("value", b"y")]),
            Err(Reject::BadTimestamp)
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
            // A minus too: `-0` read as 0 while every other signed ts
            // was refused.
            b"-0",
            b"-0.0",
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
}
