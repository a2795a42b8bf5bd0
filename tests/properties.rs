//! Properties of the pure parts, over arbitrary input: the event decoder never
//! panics and round-trips what `encode` writes; a window's aggregation equals
//! the naive per-hit sum of the seeds' layout.

use std::collections::BTreeMap;

use hitcount::aggregate::Window;
use hitcount::event::{self, Hit, MAX_COUNT, MAX_FUTURE_MS};
use proptest::prelude::*;

/// Field names the decoder looks at, plus noise.
fn field_name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"hit".to_vec()),
        Just(b"name".to_vec()),
        Just(b"count".to_vec()),
        Just(b"ts".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..8),
    ]
}

/// Values: raw bytes, decimal-ish text, or MessagePack of arbitrary maps.
fn field_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        "[-+0-9.eE naif]{0,24}".prop_map(String::into_bytes),
        (
            ".{0,8}",
            any::<i64>(),
            any::<f64>(),
            proptest::option::of(any::<bool>())
        )
            .prop_map(|(name, count, ts, extra)| {
                let mut out = Vec::new();
                rmp::encode::write_map_len(&mut out, 3 + u32::from(extra.is_some())).unwrap();
                rmp::encode::write_str(&mut out, "name").unwrap();
                rmp::encode::write_str(&mut out, &name).unwrap();
                rmp::encode::write_str(&mut out, "count").unwrap();
                rmp::encode::write_sint(&mut out, count).unwrap();
                rmp::encode::write_str(&mut out, "ts").unwrap();
                rmp::encode::write_f64(&mut out, ts).unwrap();
                if let Some(b) = extra {
                    rmp::encode::write_str(&mut out, "x").unwrap();
                    rmp::encode::write_bool(&mut out, b).unwrap();
                }
                out
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decode_never_panics(
        id in proptest::collection::vec(any::<u8>(), 0..24),
        fields in proptest::collection::vec((field_name(), field_value()), 0..6),
    ) {
        let pairs = fields.iter().map(|(f, v)| (f.as_slice(), v.as_slice()));
        if let Ok(hit) = event::decode(&id, pairs) {
            prop_assert!(!hit.name.is_empty());
            prop_assert!((1..=MAX_COUNT).contains(&hit.count));
            prop_assert!(hit.ts_ms >= 0);
        }
    }

    #[test]
    fn decode_reads_back_what_encode_writes(
        name in "[^\u{0}]{1,40}",
        count in 1..=MAX_COUNT,
        ts in proptest::option::of(0u32..2_000_000_000),
        id_ms in 1_600_000_000_000i64..1_800_000_000_000,
    ) {
        let ts = ts.map(f64::from).filter(|t| (*t * 1000.0) as i64 <= id_ms + MAX_FUTURE_MS);
        let packed = event::encode(&name, count, ts);
        let id = format!("{id_ms}-0");
        let hit = event::decode(id.as_bytes(), [(&b"hit"[..], packed.as_slice())]).unwrap();
        prop_assert_eq!(hit.name, name.as_str());
        prop_assert_eq!(hit.count, count);
        prop_assert_eq!(hit.ts_ms, ts.map_or(id_ms, |t| t as i64 * 1000));
    }

    #[test]
    fn a_window_equals_the_naive_per_hit_sum(
        precisions in proptest::collection::vec(1u32..100_000, 1..8),
        samples in 1u32..200,
        hits in proptest::collection::vec((0usize..5, 1..=MAX_COUNT, -400_000_000i64..10_000_000), 0..300),
    ) {
        const NOW_MS: i64 = 1_700_000_000_000;
        let names = ["a", "b", "c:d", "é", "x y"];
        let mut window = Window::new(&precisions, samples);
        let mut naive: BTreeMap<(u32, String, i64), i64> = BTreeMap::new();
        let mut distinct = precisions.clone();
        distinct.sort_unstable();
        distinct.dedup();
        for &(n, count, offset_ms) in &hits {
            let hit = Hit { name: names[n], count, ts_ms: NOW_MS + offset_ms };
            window.add(&hit, NOW_MS);
            let ts_s = hit.ts_ms.div_euclid(1000);
            for &p in &distinct {
                let p64 = i64::from(p);
                let bucket = ts_s.div_euclid(p64) * p64;
                if bucket > NOW_MS / 1000 - i64::from(samples) * p64 {
                    *naive.entry((p, names[n].to_string(), bucket)).or_default() += count;
                }
            }
        }
        let mut got = BTreeMap::new();
        for c in window.cells() {
            prop_assert!(got.insert((c.precision, c.name.to_string(), c.bucket), c.delta).is_none());
        }
        prop_assert_eq!(got, naive);
        prop_assert_eq!(window.hits(), hits.len() as u64);
        prop_assert_eq!(window.count_sum(), hits.iter().map(|h| h.1).sum::<i64>());
    }
}
