//! The MessagePack form: the `hit` field's map `{"name", "count", "ts",
//! "value"}`, read by [`decode_msgpack`] (for [`decode`](super::decode)) and
//! written by [`encode`] and [`encode_value`]. The bytes are walked with the bounds-checked cursor of
//! `reader`.

use serde::Serialize;

use super::reader::{Head, Malformed, Reader, Scalar};
use super::{check_name, check_value, clamp_ms, count_in_range, float_ts_ms, Reject};

/// The MessagePack map written by [`encode`]; field names are the contract.
#[derive(Serialize)]
struct WireHit<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "is_one")]
    count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<f64>,
}

fn is_one(count: &i64) -> bool {
    *count == 1
}

/// Encodes a hit as the MessagePack map for an entry's `hit` field:
/// `{"name": name, "count": count, "ts": ts}`, omitting `count` when it is 1
/// and `ts` when `None`. Integers use the smallest MessagePack int type; `ts`
/// is written as a float64 (unix seconds). Nothing is validated here: an
/// out-of-range value is written as given and rejected by
/// [`decode`](super::decode).
pub fn encode(name: &str, count: i64, ts: Option<f64>) -> Vec<u8> {
    encode_value(name, count, ts, None)
}

/// [`encode`] with a measured `value` (written as a float64 when given,
/// omitted when `None`): `count` observations of `value`.
pub fn encode_value(name: &str, count: i64, ts: Option<f64>, value: Option<f64>) -> Vec<u8> {
    rmp_serde::to_vec_named(&WireHit {
        name,
        count,
        ts,
        value,
    })
    .expect("serializing a flat struct into a Vec cannot fail")
}

/// The decoded map: name, count, ts in ms if given, value if given.
type Decoded<'a> = (&'a str, i64, Option<i64>, Option<f64>);

/// Integer seconds (any MessagePack int) to ms; huge values saturate (they
/// are rejected as future later).
fn int_ts_ms(ts: i128) -> Result<i64, Reject> {
    if ts < 0 {
        return Err(Reject::BadTimestamp);
    }
    Ok(clamp_ms(ts.unsigned_abs().saturating_mul(1000)))
}

/// Reads the `hit` map: (validated name, count, ts in ms, value).
pub(super) fn decode_msgpack(packed: &[u8]) -> Result<Decoded<'_>, Reject> {
    let bad = |_: Malformed| Reject::BadMessagePack;
    let mut rd = Reader { buf: packed };
    let pairs = match rd.head().map_err(bad)? {
        Head::Map(n) => n,
        _ => return Err(Reject::BadMessagePack),
    };
    let (mut name, mut count, mut ts, mut value) = (None, None, None, None);
    for _ in 0..pairs {
        let slot = match rd.head().map_err(bad)? {
            Head::Scalar(Scalar::Str(b"name")) => &mut name,
            Head::Scalar(Scalar::Str(b"count")) => &mut count,
            Head::Scalar(Scalar::Str(b"ts")) => &mut ts,
            Head::Scalar(Scalar::Str(b"value")) => &mut value,
            // Another key: skip its contents if a container, then the value.
            key => {
                rd.skip(key.contents() + 1).map_err(bad)?;
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
    let value = match value {
        None => None,
        Some(Scalar::Int(v)) => Some(check_value(v as f64)?),
        Some(Scalar::Float(v)) => Some(check_value(v)?),
        Some(_) => return Err(Reject::BadValue),
    };
    Ok((name, count, ts_ms, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::tests::{
        hit, map, mp_f64, mp_int, mp_raw_str, mp_str, packed, ID, ID_MS,
    };
    use crate::model::event::{decode, Hit, MAX_COUNT};

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
        // Other fields beside `hit` are ignored (a plain hit field beside
        // it refuses the entry: see `mixed_forms`).
        let e = encode("a", 2, None);
        let fields: [(&[u8], &[u8]); 3] = [(b"source", b"web"), (b"hit", &e), (b"x", b"9")];
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
    fn msgpack_values() {
        let with =
            |v: Vec<u8>| packed(&map(&[("name", mp_str("a")), ("value", v)])).map(|h| h.value);
        assert_eq!(with(mp_int(12)), Ok(Some(12.0)));
        assert_eq!(with(mp_int(-7)), Ok(Some(-7.0)));
        assert_eq!(with(mp_f64(12.5)), Ok(Some(12.5)));
        assert_eq!(with(mp_f64(0.0)), Ok(Some(0.0)));
        let mut f32v = vec![0xca];
        f32v.extend_from_slice(&0.25f32.to_be_bytes());
        assert_eq!(with(f32v), Ok(Some(0.25)));
        let e = encode_value("a", 3, Some(1.5), Some(2.75));
        assert_eq!(
            packed(&e),
            Ok(Hit {
                name: "a",
                count: 3,
                ts_ms: 1500,
                value: Some(2.75)
            })
        );
        assert_eq!(packed(&encode("a", 1, None)).unwrap().value, None);
        for bad in [
            mp_f64(f64::NAN),
            mp_f64(f64::INFINITY),
            mp_f64(f64::NEG_INFINITY),
            mp_f64(1e101),
            mp_str("12"),
            vec![0xc0],
            vec![0xc3],
            vec![0x90],
        ] {
            assert_eq!(with(bad.clone()), Err(Reject::BadValue), "{bad:?}");
        }
        // Checked after ts, before the future.
        assert_eq!(
            packed(&map(&[
                ("name", mp_str("a")),
                ("ts", mp_int(-1)),
                ("value", mp_str("x"))
            ])),
            Err(Reject::BadTimestamp)
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
        pub(super) enum Any {
            Int(i64),
            Float(f64),
            Str(String),
        }
    }
}
