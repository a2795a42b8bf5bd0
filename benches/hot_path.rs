//! The worker's hot path: decoding stream entries and aggregating windows.
//!
//! Run with `cargo bench --bench hot_path`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use hitcount::aggregate::Window;
use hitcount::event::{self, Hit};

const ID: &[u8] = b"1700000000123-0";
const NOW_MS: i64 = 1_700_000_000_500;
const PRECISIONS: [u32; 7] = [1, 5, 60, 300, 3600, 18000, 86400];
const SAMPLES: u32 = 120;
const BATCH: usize = 1000;

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(1));
    let packed = event::encode("page:/products/42", 3, Some(1_700_000_000.25));
    g.bench_function("msgpack", |b| {
        b.iter(|| event::decode(black_box(ID), [(&b"hit"[..], black_box(&packed[..]))]))
    });
    let fields: [(&[u8], &[u8]); 3] = [
        (b"name", b"page:/products/42"),
        (b"count", b"3"),
        (b"ts", b"1700000000.25"),
    ];
    g.bench_function("plain", |b| {
        b.iter(|| event::decode(black_box(ID), black_box(fields)))
    });
    g.finish();
}

/// `BATCH` hits in time order over the last ~2 s, names drawn from a pool.
fn batch(names: &[String]) -> Vec<Hit<'_>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..BATCH)
        .map(|i| {
            // xorshift: deterministic, spread over the pool.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Hit {
                name: &names[(x % names.len() as u64) as usize],
                count: 1,
                ts_ms: NOW_MS - 2000 + (i as i64) * 2,
            }
        })
        .collect()
}

fn aggregate(c: &mut Criterion) {
    let mut g = c.benchmark_group("aggregate_1000_hits");
    g.throughput(Throughput::Elements(BATCH as u64));
    for pool in [1_000usize, 100_000] {
        let names: Vec<String> = (0..pool).map(|i| format!("page:/item/{i}")).collect();
        let hits = batch(&names);
        // A reused window, as the worker keeps one: the steady state.
        let mut w = Window::new(&PRECISIONS, SAMPLES);
        g.bench_function(format!("{pool}_names"), |b| {
            b.iter(|| {
                w.clear();
                for h in &hits {
                    w.add(black_box(h), NOW_MS);
                }
                black_box(w.cells_len())
            })
        });
        // Plus reading every cell back, as the flush does.
        g.bench_function(format!("{pool}_names_and_cells"), |b| {
            b.iter(|| {
                w.clear();
                for h in &hits {
                    w.add(black_box(h), NOW_MS);
                }
                w.cells().map(|c| c.delta).sum::<i64>()
            })
        });
        // A fresh window each batch: includes growing the tables.
        g.bench_function(format!("{pool}_names_fresh_window"), |b| {
            b.iter_batched(
                || Window::new(&PRECISIONS, SAMPLES),
                |mut w| {
                    for h in &hits {
                        w.add(black_box(h), NOW_MS);
                    }
                    w
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, decode, aggregate);
criterion_main!(benches);
