//! The JSON hit: `{"name", "count", "ts", "value", "id"}`, as HTTP clients,
//! browsers and NDJSON files send it, read into the hit the worker would
//! count, so a refusal at the door names the worker's own reason.
//!
//! A JSON hit is judged as the MessagePack map it spells: its `name`,
//! `count`, `ts` and `value` (strings stay strings, integers integers,
//! other numbers floats, `null` a nil) are written into that map and read
//! back by the worker's decoder ([`decode_at`]), so every refusal is
//! the one the worker would dead-letter the same hit with: `"count": 2.0`
//! is `bad_count`, `"ts": -1` is `bad_timestamp`, a `name` that is no
//! string (or an element that is no object) is `bad_msgpack`, the worker's
//! reason for a map it cannot read; a `null` is a nil, refused as the
//! worker refuses it (write no key for no `ts`). Other keys are ignored; a key given
//! twice: the last one wins, as in the worker's forms.
//!
//! Beside them, `id` (optional) names a hit for de-duplication: a string
//! of 1..=[`MAX_ID_BYTES`] bytes, else the hit is refused as `bad_id`. A
//! line of NDJSON that is no JSON is refused as `bad_json`; a body that
//! is no JSON at all is no batch ([`BadJson`]). Nesting deeper than
//! serde_json's limit (128) is no JSON, so hostile nesting cannot exhaust
//! the stack.

use std::collections::BTreeMap;

use serde_json::{value::RawValue, Value};

use super::{decode_at, HitTime, Reject};

/// Longest `id`, in bytes (128): a UUID or a request id fits many times
/// over, and the id becomes part of a Redis key.
pub(crate) const MAX_ID_BYTES: usize = 128;

/// One JSON hit, read and valid: what the worker would count.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonHit {
    /// Counter name, as [`Hit::name`](super::Hit::name).
    pub(crate) name: String,
    /// 1..=[`MAX_COUNT`](super::MAX_COUNT).
    pub(crate) count: i64,
    /// The stated `ts` in unix ms; `None` when the hit has none (the worker
    /// then takes the entry ID's time: when Redis accepted it).
    pub(crate) ts_ms: Option<i64>,
    /// A measured value, as [`Hit::value`](super::Hit::value).
    pub(crate) value: Option<f64>,
    /// The de-duplication id, if given.
    pub(crate) id: Option<String>,
}

impl JsonHit {
    /// The hit as a stream entry's `hit` field (MessagePack), counted as
    /// read (its `ts` by [`super::ts_of_ms`]).
    pub(crate) fn event(&self) -> Vec<u8> {
        let ts = self.ts_ms.map(super::ts_of_ms);
        super::encode_value(&self.name, self.count, ts, self.value)
    }
}

/// Why a JSON hit is refused: one of the worker's reasons, or one of the
/// JSON form's own two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The worker would dead-letter this hit for this reason.
    #[error(transparent)]
    Hit(#[from] Reject),
    /// `id` is not a string of 1..=[`MAX_ID_BYTES`] bytes.
    #[error("id is not a string of 1 to {} bytes", MAX_ID_BYTES)]
    BadId,
    /// A line of NDJSON that is not JSON.
    #[error("line is not JSON")]
    BadJson,
}

impl Refusal {
    /// Stable snake_case label: [`Reject::reason`], `bad_id` or `bad_json`.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::Hit(reject) => reject.reason(),
            Refusal::BadId => "bad_id",
            Refusal::BadJson => "bad_json",
        }
    }
}

/// A body with nothing to read in it: not JSON (or too deeply nested), or
/// JSON that is neither an object nor an array.
#[derive(Debug, thiserror::Error)]
#[error("body is not a JSON hit or array of hits: {0}")]
pub(crate) struct BadJson(String);

/// How a body lays out its hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// One JSON object (one hit) or an array of them.
    Json,
    /// Newline-delimited JSON: one hit per line; blank lines are skipped.
    Ndjson,
}

/// Each hit of a body, handed to `each` in order as it is read (the index
/// of a refusal is its position: in the array, or among the non-blank
/// lines), read against `clock_ms` (unix ms) as the worker reads against
/// Redis' clock. Nothing but what `each` keeps stays in memory: an array
/// is parsed an element at a time (a tree of a body's values is ten times
/// its size). On an error `each` may have had hits: drop them.
pub(crate) fn read_body(
    body: &[u8],
    layout: Layout,
    clock_ms: i64,
    mut each: impl FnMut(Result<JsonHit, Refusal>),
) -> Result<(), BadJson> {
    match layout {
        Layout::Json => {
            let mut de = serde_json::Deserializer::from_slice(body);
            serde::Deserializer::deserialize_any(&mut de, Hits(clock_ms, &mut each))
                .and_then(|()| de.end())
                .map_err(|e| BadJson(e.to_string()))
        }
        Layout::Ndjson => {
            let lines = body
                .split(|&b| b == b'\n')
                .filter(|line| !line.trim_ascii().is_empty());
            let (mut read, mut json) = (0, 0);
            for line in lines {
                let hit = read_line(line, clock_ms);
                read += 1;
                json += usize::from(hit != Err(Refusal::BadJson));
                each(hit);
            }
            if read > 0 && json == 0 {
                return Err(BadJson("no line is JSON".into()));
            }
            Ok(())
        }
    }
}

/// Hands a JSON body's hits to a callback as it parses them: an array's
/// elements one at a time.
struct Hits<'f, F>(i64, &'f mut F);

impl<'de, F: FnMut(Result<JsonHit, Refusal>)> serde::de::Visitor<'de> for Hits<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object or an array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        use serde::de::Error;
        while let Some(item) = items.next_element::<&RawValue>()? {
            let item = value(item.get()).map_err(A::Error::custom)?;
            (self.1)(read_hit(&item, self.0));
        }
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let fields =
            serde::Deserialize::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        let object = object(fields).map_err(A::Error::custom)?;
        (self.1)(read_hit(&object, self.0));
        Ok(())
    }
}

/// One line of NDJSON (a trailing `\r` is fine): the hit, or why not.
pub(crate) fn read_line(line: &[u8], clock_ms: i64) -> Result<JsonHit, Refusal> {
    let line = std::str::from_utf8(line).map_err(|_| Refusal::BadJson)?;
    let value = value(line).map_err(|_| Refusal::BadJson)?;
    read_hit(&value, clock_ms)
}

/// A JSON value. serde_json refuses a number beyond a float's range
/// (`1e400`), and with it everything around it: here it becomes the
/// nearest float, so the hit is judged by the key that holds it (a
/// `count` of `1e400` is `bad_count`, not a body that is no JSON) and the
/// number is ignored in any other key. Any other error (bad syntax,
/// nesting deeper than serde_json's limit) stays an error.
fn value(raw: &str) -> serde_json::Result<Value> {
    let raw = raw.trim_ascii();
    serde_json::from_str(raw).or_else(|error| {
        if !error.to_string().starts_with("number out of range") {
            return Err(error);
        }
        match raw.parse::<f64>() {
            Ok(x) => Ok(Value::from(x.clamp(-f64::MAX, f64::MAX))),
            Err(_) if raw.starts_with('{') => object(serde_json::from_str(raw)?),
            // An array: no key of a hit may be one, whatever it holds.
            Err(_) => Ok(Value::Array(Vec::new())),
        }
    })
}

/// An object from its keys' JSON, each read by [`value`]; a key given
/// twice was kept last.
fn object(fields: BTreeMap<String, &RawValue>) -> serde_json::Result<Value> {
    fields
        .into_iter()
        .map(|(key, raw)| Ok((key, value(raw.get())?)))
        .collect()
}

/// One parsed JSON value as a hit, judged by the worker's decoder.
pub(crate) fn read_hit(value: &Value, clock_ms: i64) -> Result<JsonHit, Refusal> {
    let packed = packed_map(value);
    let id = format!("{}-0", clock_ms.max(0));
    let fields: [(&[u8], &[u8]); 1] = [(b"hit", &packed)];
    let (hit, from) = decode_at(id.as_bytes(), fields, clock_ms)?;
    let id = match value.get("id") {
        None => None,
        Some(Value::String(id)) if (1..=MAX_ID_BYTES).contains(&id.len()) => Some(id.clone()),
        Some(_) => return Err(Refusal::BadId),
    };
    Ok(JsonHit {
        name: hit.name.to_owned(),
        count: hit.count,
        ts_ms: (from == HitTime::Stated).then_some(hit.ts_ms),
        value: hit.value,
        id,
    })
}

/// The MessagePack a JSON hit spells, with only the map's four hit keys
/// (the worker skips the others): strings, integers, floats, nil, arrays
/// and maps as rmp-serde writes serde_json's values. A value that is no
/// object spells no map.
fn packed_map(value: &Value) -> Vec<u8> {
    let packed = match value {
        Value::Object(object) => {
            let hit: BTreeMap<&str, &Value> = ["name", "count", "ts", "value"]
                .into_iter()
                .filter_map(|k| object.get(k).map(|v| (k, v)))
                .collect();
            rmp_serde::to_vec(&hit)
        }
        other => rmp_serde::to_vec(other),
    };
    packed.expect("serializing a JSON value into a Vec cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::{MAX_COUNT, MAX_FUTURE_MS, MAX_NAME_BYTES};

    const NOW: i64 = 1_700_000_000_123;

    /// Every hit of a body, in order.
    fn read_body(
        body: &[u8],
        layout: Layout,
        clock_ms: i64,
    ) -> Result<Vec<Result<JsonHit, Refusal>>, BadJson> {
        let mut hits = Vec::new();
        super::read_body(body, layout, clock_ms, |h| hits.push(h)).map(|()| hits)
    }

    fn one(json: &str) -> Result<JsonHit, Refusal> {
        let mut hits = read_body(json.as_bytes(), Layout::Json, NOW).unwrap();
        assert_eq!(hits.len(), 1, "{json}");
        hits.remove(0)
    }

    fn reason(json: &str) -> &'static str {
        one(json).unwrap_err().reason()
    }

    fn hit(name: &str, count: i64, ts_ms: Option<i64>, value: Option<f64>) -> JsonHit {
        JsonHit {
            name: name.into(),
            count,
            ts_ms,
            value,
            id: None,
        }
    }

    #[test]
    fn reads_every_field() {
        assert_eq!(one(r#"{"name":"a"}"#), Ok(hit("a", 1, None, None)));
        assert_eq!(
            one(r#"{"name":"a","count":3,"ts":1700000000.25,"value":12.5,"x":[1,{"y":2}]}"#),
            Ok(hit("a", 3, Some(1_700_000_000_250), Some(12.5)))
        );
        assert_eq!(
            one(r#"{"ts":1700000000,"name":"é\n\u00e9","value":-3}"#),
            Ok(hit("é\né", 1, Some(1_700_000_000_000), Some(-3.0)))
        );
        assert_eq!(
            one(r#"{"name":"a","id":"req-1"}"#).unwrap().id.as_deref(),
            Some("req-1")
        );
        // The last of a key given twice wins, as in the worker's forms.
        assert_eq!(one(r#"{"name":"a","name":"b"}"#).unwrap().name, "b");
        let max = format!(
            r#"{{"name":"{}","count":{MAX_COUNT}}}"#,
            "n".repeat(MAX_NAME_BYTES)
        );
        assert_eq!(one(&max).unwrap().count, MAX_COUNT);
        let ts = (NOW + MAX_FUTURE_MS) as f64 / 1000.0;
        assert_eq!(
            one(&format!(r#"{{"name":"a","ts":{ts}}}"#)).unwrap().ts_ms,
            Some(NOW + MAX_FUTURE_MS)
        );
    }

    /// Each refusal is the worker's reason for the same hit.
    #[test]
    fn refuses_with_the_workers_reasons() {
        let cases = [
            (r#"{}"#, "missing_name"),
            (r#"{"count":2}"#, "missing_name"),
            (r#"{"name":""}"#, "empty_name"),
            (r#"{"name":5}"#, "bad_msgpack"),
            (r#"{"name":null}"#, "bad_msgpack"),
            (r#"{"name":["a"]}"#, "bad_msgpack"),
            (r#"{"name":"a","count":0}"#, "bad_count"),
            (r#"{"name":"a","count":-1}"#, "bad_count"),
            (r#"{"name":"a","count":2.0}"#, "bad_count"),
            (r#"{"name":"a","count":"2"}"#, "bad_count"),
            (r#"{"name":"a","count":1000000001}"#, "bad_count"),
            (r#"{"name":"a","count":18446744073709551615}"#, "bad_count"),
            (r#"{"name":"a","count":null}"#, "bad_count"),
            (r#"{"name":"a","ts":-1}"#, "bad_timestamp"),
            (r#"{"name":"a","ts":"1700000000"}"#, "bad_timestamp"),
            (r#"{"name":"a","ts":1e300}"#, "future_timestamp"),
            (r#"{"name":"a","ts":1700000000123}"#, "future_timestamp"),
            (r#"{"name":"a","value":"1"}"#, "bad_value"),
            (r#"{"name":"a","value":1e101}"#, "bad_value"),
            (r#"{"name":"a","value":true}"#, "bad_value"),
            // A null is MessagePack's nil, refused by the worker too.
            (r#"{"name":"a","ts":null}"#, "bad_timestamp"),
            (r#"{"name":"a","value":null}"#, "bad_value"),
            (r#"{"name":"a","id":""}"#, "bad_id"),
            (r#"{"name":"a","id":7}"#, "bad_id"),
            // Checked in the worker's order: name, count, ts, value; then id.
            (r#"{"name":"","count":0}"#, "empty_name"),
            (r#"{"name":"a","count":0,"ts":-1}"#, "bad_count"),
            (r#"{"name":"a","ts":-1,"value":"x"}"#, "bad_timestamp"),
            (r#"{"name":"","id":7}"#, "empty_name"),
        ];
        for (json, want) in cases {
            assert_eq!(reason(json), want, "{json}");
        }
        let long = format!(r#"{{"name":"{}"}}"#, "n".repeat(MAX_NAME_BYTES + 1));
        assert_eq!(reason(&long), "name_too_long");
        let id = format!(r#"{{"name":"a","id":"{}"}}"#, "i".repeat(MAX_ID_BYTES + 1));
        assert_eq!(reason(&id), "bad_id");
        let id = format!(r#"{{"name":"a","id":"{}"}}"#, "i".repeat(MAX_ID_BYTES));
        assert!(one(&id).is_ok());
    }

    /// The same hit written as a stream entry in MessagePack decodes alike.
    #[test]
    fn agrees_with_the_worker() {
        use crate::model::event::encode_value;
        for (name, count, ts, value) in [
            ("a", 1, None, None),
            ("b", 7, Some(1_700_000_000.5), Some(0.25)),
            ("", 1, None, None),
            ("c", 0, None, None),
            ("d", 1, Some(-2.0), None),
            ("e", 1, None, Some(f64::INFINITY)),
        ] {
            // As `encode_value` writes it: an absent ts or value is no key.
            let mut json = serde_json::json!({"name": name, "count": count});
            if let Some(ts) = ts {
                json["ts"] = ts.into();
            }
            if let Some(v) = value {
                json["value"] = v.into();
            }
            let id = format!("{NOW}-0");
            let entry = encode_value(name, count, ts, value);
            let fields: [(&[u8], &[u8]); 1] = [(b"hit", &entry)];
            let worker = decode_at(id.as_bytes(), fields, NOW).map(|(h, _)| h);
            // JSON has no infinity: serde_json makes it a null, refused
            // all the same.
            let ours = read_hit(&json, NOW);
            match (worker, ours) {
                (Ok(w), Ok(o)) => {
                    assert_eq!((w.name, w.count, w.value), (&*o.name, o.count, o.value));
                    assert_eq!(o.ts_ms, ts.map(|_| w.ts_ms));
                }
                (Err(w), Err(o)) => assert_eq!(Refusal::Hit(w), o, "{json}"),
                (w, o) => panic!("{json}: worker {w:?}, json {o:?}"),
            }
        }
    }

    /// A hit written as an event is read back by the worker as read here,
    /// to the millisecond.
    #[test]
    fn events_keep_the_hit() {
        for ts in [0i64, 1, 999, 1_700_000_000_001, 1_700_000_000_999, NOW] {
            let mut h = hit("a", 3, Some(ts), Some(1.5));
            h.id = Some("x".into());
            let event = h.event();
            let fields: [(&[u8], &[u8]); 1] = [(b"hit", &event)];
            let read = crate::model::event::decode(b"1800000000000-0", fields).unwrap();
            assert_eq!(
                (read.name, read.count, read.ts_ms, read.value),
                ("a", 3, ts, Some(1.5))
            );
        }
        for ms in (1_700_000_000_000..1_700_000_100_000).step_by(7) {
            let event = hit("a", 1, Some(ms), None).event();
            let fields: [(&[u8], &[u8]); 1] = [(b"hit", &event)];
            assert_eq!(
                crate::model::event::decode(b"1800000000000-0", fields)
                    .unwrap()
                    .ts_ms,
                ms
            );
        }
        let event = hit("a", 1, None, None).event();
        let fields: [(&[u8], &[u8]); 1] = [(b"hit", &event)];
        assert_eq!(
            crate::model::event::decode(b"5-0", fields).unwrap().ts_ms,
            5
        );
    }

    #[test]
    fn arrays_and_lines() {
        let body = br#"[{"name":"a"},{"name":""},5,{"name":"b","count":2}]"#;
        let hits = read_body(body, Layout::Json, NOW).unwrap();
        let reasons: Vec<_> = hits
            .iter()
            .map(|h| h.as_ref().map(|h| h.name.as_str()).map_err(|r| r.reason()))
            .collect();
        assert_eq!(
            reasons,
            [Ok("a"), Err("empty_name"), Err("bad_msgpack"), Ok("b")]
        );
        assert_eq!(read_body(b"[]", Layout::Json, NOW).unwrap(), []);

        let body = b"{\"name\":\"a\"}\r\n\n  \n{\"name\":\nnot json\n{\"name\":\"b\",\"ts\":1}";
        let hits = read_body(body, Layout::Ndjson, NOW).unwrap();
        assert_eq!(
            hits,
            [
                Ok(hit("a", 1, None, None)),
                Err(Refusal::BadJson),
                Err(Refusal::BadJson),
                Ok(hit("b", 1, Some(1000), None)),
            ]
        );
        assert_eq!(read_body(b"", Layout::Ndjson, NOW).unwrap(), []);
        assert_eq!(
            read_line(b"{\"name\":\"a\"}\r", NOW),
            Ok(hit("a", 1, None, None))
        );
    }

    #[test]
    fn nothing_to_read() {
        for body in [
            &b""[..],
            b"{",
            b"5",
            b"\"name\"",
            b"null",
            b"{\"name\":\"a\"} {\"name\":\"b\"}",
            b"{\"name\":\"\xff\"}",
            b"{\"name\":\"\\ud800\"}",
        ] {
            assert!(
                read_body(body, Layout::Json, NOW).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(read_body(b"nope\n{\n", Layout::Ndjson, NOW).is_err());
    }

    /// A number beyond a float's range refuses the hit by its key's reason,
    /// not the whole body.
    #[test]
    fn numbers_out_of_range() {
        let body = br#"[{"name":"a"},{"name":"a","count":1e400},{"name":"b","x":[1e400]},1e400]"#;
        let reasons: Vec<_> = read_body(body, Layout::Json, NOW)
            .unwrap()
            .into_iter()
            .map(|h| h.map(|h| h.name).map_err(|r| r.reason()))
            .collect();
        assert_eq!(
            reasons,
            [
                Ok("a".into()),
                Err("bad_count"),
                Ok("b".into()),
                Err("bad_msgpack")
            ]
        );
        for (json, why) in [
            (r#"{"name":"a","count":-1e400}"#, "bad_count"),
            (r#"{"name":"a","value":1e400}"#, "bad_value"),
            (r#"{"name":"a","ts":1e400}"#, "future_timestamp"),
            (r#"{"name":"a","ts":-1e400}"#, "bad_timestamp"),
            (r#"{"name":1e400}"#, "bad_msgpack"),
            (r#"{"name":"a","id":1e400}"#, "bad_id"),
            (r#"{"name":["a",1e400]}"#, "bad_msgpack"),
            (r#"{"count":1e400,"name":"a","count":2}"#, "ok"),
            (r#"{"name":"a","x":{"y":[{"z":1e400}]}}"#, "ok"),
        ] {
            assert_eq!(
                one(json).map_or_else(|r| r.reason(), |_| "ok"),
                why,
                "{json}"
            );
            let line = read_line(format!(" {json}\r").as_bytes(), NOW);
            assert_eq!(line.map_or_else(|r| r.reason(), |_| "ok"), why, "{json}");
        }
        assert!(read_body(b"[{\"name\":\"a\"},1e400", Layout::Json, NOW).is_err());
    }

    /// Deep nesting is refused, not recursed into: no stack overflow.
    #[test]
    fn hostile_nesting() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        // The docs' bound: nesting deeper than 128 is no JSON.
        assert!(read_body(nested(128).as_bytes(), Layout::Json, NOW).is_ok());
        assert!(read_body(nested(129).as_bytes(), Layout::Json, NOW).is_err());
        let in_object = |n: usize| format!(r#"{{"name":"a","x":{}}}"#, nested(n - 1));
        assert!(read_body(in_object(128).as_bytes(), Layout::Json, NOW).is_ok());
        assert!(read_body(in_object(129).as_bytes(), Layout::Json, NOW).is_err());
        let deep = nested(100_000);
        assert!(read_body(deep.as_bytes(), Layout::Json, NOW).is_err());
        let inner = format!(
            r#"{{"name":"a","x":{}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(read_body(inner.as_bytes(), Layout::Json, NOW).is_err());
        assert_eq!(
            read_body(inner.as_bytes(), Layout::Ndjson, NOW)
                .map(|h| h.len())
                .ok(),
            None
        );
    }
}
