//! Property tests of the wire contract and the aggregation window: decoding
//! never panics on hostile input, encode→decode round-trips, and a window's
//! cells equal a naive per-hit sum.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::model::aggregate::Window;
    use crate::model::event::{self, Hit, MAX_COUNT, MAX_FUTURE_MS, MAX_NAME_BYTES};
    use proptest::prelude::*;

    /// A MessagePack value tree, to build structured (not only random) inputs.
    #[derive(Debug, Clone)]
    enum Mp {
        Nil,
        Bool(bool),
        Int(i64),
        UInt(u64),
        F32(f32),
        F64(f64),
        Str(String),
        /// A str whose bytes may not be UTF-8.
        RawStr(Vec<u8>),
        Bin(Vec<u8>),
        Ext(i8, Vec<u8>),
        Array(Vec<Mp>),
        Map(Vec<(Mp, Mp)>),
    }

    fn write(v: &Mp, out: &mut Vec<u8>) {
        use rmp::encode as e;
        match v {
            Mp::Nil => e::write_nil(out).unwrap(),
            Mp::Bool(b) => e::write_bool(out, *b).unwrap(),
            Mp::Int(i) => drop(e::write_sint(out, *i).unwrap()),
            Mp::UInt(u) => drop(e::write_uint(out, *u).unwrap()),
            Mp::F32(f) => e::write_f32(out, *f).unwrap(),
            Mp::F64(f) => e::write_f64(out, *f).unwrap(),
            Mp::Str(s) => e::write_str(out, s).unwrap(),
            Mp::RawStr(b) => {
                e::write_str_len(out, b.len() as u32).unwrap();
                out.extend_from_slice(b);
            }
            Mp::Bin(b) => e::write_bin(out, b).unwrap(),
            Mp::Ext(t, b) => {
                e::write_ext_meta(out, b.len() as u32, *t).unwrap();
                out.extend_from_slice(b);
            }
            Mp::Array(items) => {
                e::write_array_len(out, items.len() as u32).unwrap();
                items.iter().for_each(|i| write(i, out));
            }
            Mp::Map(pairs) => {
                e::write_map_len(out, pairs.len() as u32).unwrap();
                for (k, v) in pairs {
                    write(k, out);
                    write(v, out);
                }
            }
        }
    }

    fn mp_leaf() -> impl Strategy<Value = Mp> {
        prop_oneof![
            Just(Mp::Nil),
            any::<bool>().prop_map(Mp::Bool),
            any::<i64>().prop_map(Mp::Int),
            (0i64..=2_000_000_000).prop_map(Mp::Int),
            any::<u64>().prop_map(Mp::UInt),
            any::<f32>().prop_map(Mp::F32),
            any::<f64>().prop_map(Mp::F64),
            (0f64..2e9).prop_map(Mp::F64),
            prop_oneof![Just("name"), Just("count"), Just("ts"), Just(""), Just("x")]
                .prop_map(|s| Mp::Str(s.into())),
            "\\PC{0,12}".prop_map(Mp::Str),
            prop::collection::vec(any::<u8>(), 0..8).prop_map(Mp::RawStr),
            prop::collection::vec(any::<u8>(), 0..8).prop_map(Mp::Bin),
            (any::<i8>(), prop::collection::vec(any::<u8>(), 0..20))
                .prop_map(|(t, b)| Mp::Ext(t, b)),
        ]
    }

    fn mp_value() -> impl Strategy<Value = Mp> {
        mp_leaf().prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Mp::Array),
                prop::collection::vec((inner.clone(), inner), 0..6).prop_map(Mp::Map),
            ]
        })
    }

    /// A map that looks like a hit: known keys with arbitrary values, plus noise.
    fn mp_hit() -> impl Strategy<Value = Mp> {
        let key = prop_oneof![
            Just(Mp::Str("name".into())),
            Just(Mp::Str("count".into())),
            Just(Mp::Str("ts".into())),
            mp_leaf(),
        ];
        prop::collection::vec((key, mp_value()), 0..5).prop_map(Mp::Map)
    }

    /// An entry ID: usually valid, sometimes not.
    fn entry_id() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => (0i64..4_000_000_000_000, any::<u16>()).prop_map(|(ms, s)| format!("{ms}-{s}").into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..24),
        ]
    }

    /// What every accepted hit must satisfy, whatever the input.
    fn check_accepted(id: &[u8], hit: &Hit<'_>, input: &[&[u8]]) {
        assert!(!hit.name.is_empty() && hit.name.len() <= MAX_NAME_BYTES);
        assert!((1..=MAX_COUNT).contains(&hit.count));
        assert!(hit.ts_ms >= 0);
        let id_ms = event::entry_id_ms(id).expect("accepted with a valid ID");
        assert!(hit.ts_ms <= id_ms + MAX_FUTURE_MS);
        // The name borrows from one of the input values.
        let p = hit.name.as_ptr();
        assert!(input.iter().any(|v| v.as_ptr_range().contains(&p)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_bytes_as_hit_never_panic(id in entry_id(), bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(hit) = event::decode(&id, [(&b"hit"[..], &bytes[..])]) {
                check_accepted(&id, &hit, &[&bytes]);
            }
        }

        #[test]
        fn structured_msgpack_never_panics(
            id in entry_id(),
            v in prop_oneof![mp_hit(), mp_value()],
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
            flip in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
        ) {
            let mut bytes = Vec::new();
            write(&v, &mut bytes);
            if let Some((at, b)) = flip {
                if !bytes.is_empty() {
                    let i = at.index(bytes.len());
                    bytes[i] ^= b;
                }
            }
            if truncate && !bytes.is_empty() {
                bytes.truncate(cut.index(bytes.len()));
            }
            match event::decode(&id, [(&b"hit"[..], &bytes[..])]) {
                Ok(hit) => check_accepted(&id, &hit, &[&bytes]),
                Err(r) => prop_assert!(crate::model::event::tests::ALL.contains(&r)),
            }
        }

        #[test]
        fn arbitrary_field_sets_never_panic(
            id in entry_id(),
            fields in prop::collection::vec((
                prop_oneof![
                    Just(b"name".to_vec()), Just(b"count".to_vec()), Just(b"ts".to_vec()),
                    Just(b"hit".to_vec()), prop::collection::vec(any::<u8>(), 0..6),
                ],
                prop_oneof![
                    prop::collection::vec(any::<u8>(), 0..12),
                    "[0-9]{0,25}(\\.[0-9]{0,6})?".prop_map(String::into_bytes),
                    "-?[0-9.eE+-]{0,10}|NaN|inf|-inf|infinity".prop_map(String::into_bytes),
                ],
            ), 0..6),
        ) {
            let input: Vec<&[u8]> = fields.iter().map(|(_, v)| &v[..]).collect();
            if let Ok(hit) = event::decode(&id, fields.iter().map(|(k, v)| (&k[..], &v[..]))) {
                check_accepted(&id, &hit, &input);
            }
        }

        #[test]
        fn encode_decode_round_trip(
            name in "\\PC{1,64}",
            long in any::<bool>(),
            count in 1..=MAX_COUNT,
            id_ms in 0i64..4_000_000_000_000,
            seq in any::<u64>(),
            ts in proptest::option::of(0f64..=1.0),
        ) {
            // Sometimes a long name up to exactly the limit (multi-byte chars included).
            let name = if long {
                let mut n = name.repeat(MAX_NAME_BYTES / name.len() + 1);
                while n.len() > MAX_NAME_BYTES { n.pop(); }
                n
            } else { name };
            let id = format!("{id_ms}-{seq}");
            // Any time from the epoch up to the ID's own time.
            let ts = ts.map(|f| f * id_ms as f64 / 1000.0);
            let packed = event::encode(&name, count, ts);
            let hit = event::decode(id.as_bytes(), [(&b"hit"[..], &packed[..])]).unwrap();
            let ts_ms = ts.map_or(id_ms, |t| (t * 1000.0).floor() as i64);
            prop_assert_eq!(hit, Hit { name: &name, count, ts_ms, value: None });

            // The plain form of the same hit, with integer seconds.
            let ts_s = ts.map(|t| t.floor() as i64);
            let count_s = count.to_string();
            let ts_text = ts_s.map(|t| t.to_string());
            let mut fields: Vec<(&[u8], &[u8])> = vec![(b"name", name.as_bytes()), (b"count", count_s.as_bytes())];
            if let Some(t) = &ts_text { fields.push((b"ts", t.as_bytes())); }
            let hit = event::decode(id.as_bytes(), fields).unwrap();
            prop_assert_eq!(hit, Hit { name: &name, count, ts_ms: ts_s.map_or(id_ms, |t| t * 1000), value: None });
        }

        #[test]
        fn window_equals_naive_sum(
            precisions in prop::collection::vec(prop_oneof![1u32..=10, Just(60u32), Just(300), Just(3600), Just(86400), 1u32..=200_000], 1..8),
            samples in prop_oneof![0u32..=5, 100u32..=130, Just(u32::MAX)],
            now_ms in -10_000_000i64..2_000_000_000_000,
            hits in prop::collection::vec((0usize..6, 1i64..=MAX_COUNT, -2_000_000i64..2_000_000, any::<bool>()), 0..200),
            clear_first in any::<bool>(),
        ) {
            const NAMES: [&str; 6] = ["a", "b", "page:/home", "é", "x y", "a:b:c"];
            let mut w = Window::new(&precisions, samples);
            if clear_first {
                w.add(&Hit { name: "junk", count: 5, ts_ms: now_ms, value: None }, now_ms);
                w.clear();
            }
            let mut uniq = Vec::new();
            for p in &precisions { if !uniq.contains(p) { uniq.push(*p); } }
            prop_assert_eq!(w.precisions(), &uniq[..]);

            let mut naive: BTreeMap<(u32, &str, i64), i64> = BTreeMap::new();
            let mut skipped: BTreeMap<u32, u64> = uniq.iter().map(|&p| (p, 0)).collect();
            let now_s = now_ms.div_euclid(1000);
            let mut count_sum = 0i64;
            for &(n, count, offset_ms, far) in &hits {
                // Spread hits from minutes to (with `far`) weeks around now.
                let ts_ms = now_ms + if far { offset_ms * 1000 } else { offset_ms };
                let hit = Hit { name: NAMES[n], count, ts_ms, value: None };
                w.add(&hit, now_ms);
                count_sum += count;
                for &p in &uniq {
                    let p64 = i64::from(p);
                    let bucket = ts_ms.div_euclid(1000).div_euclid(p64) * p64;
                    if bucket <= now_s - i64::from(samples) * p64 {
                        *skipped.get_mut(&p).unwrap() += 1;
                    } else {
                        *naive.entry((p, NAMES[n], bucket)).or_default() += count;
                    }
                }
            }
            let got: BTreeMap<(u32, &str, i64), i64> = w.cells().map(|c| ((c.precision, c.name, c.bucket), c.delta)).collect();
            prop_assert_eq!(got.len(), w.cells_len());
            prop_assert_eq!(&got, &naive);
            prop_assert_eq!(w.skipped().collect::<BTreeMap<_, _>>(), skipped);
            prop_assert_eq!(w.hits(), hits.len() as u64);
            prop_assert_eq!(w.count_sum(), count_sum);
            let names: std::collections::BTreeSet<&str> = naive.keys().map(|k| k.1).collect();
            prop_assert_eq!(w.names_len(), names.len());
            prop_assert_eq!(w.is_empty(), hits.is_empty());
        }
    }
}
