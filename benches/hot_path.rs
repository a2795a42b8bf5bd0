//! The worker's hot path without Redis: decoding both event forms,
//! aggregating a read's worth of hits into a window, and building the apply
//! step's pipeline of a window.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use hitcount::hot_path::{apply_step_len, Aggregation};
use hitcount::model::config::{LayoutArgs, StreamArgs};
use hitcount::model::event;
use hitcount::model::keys::Keys;

/// Hits per read, the worker's default read size.
const BATCH: usize = 1000;

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn entries(n: usize) -> Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    let base = unix_ms();
    (0..n)
        .map(|i| {
            let id = format!("{}-{i}", base).into_bytes();
            let name = format!("page:{}", (i * 7919) % 1000);
            (id, name.clone().into_bytes(), event::encode(&name, 1, None))
        })
        .collect()
}

fn decode(c: &mut Criterion) {
    let es = entries(BATCH);
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("msgpack", |b| {
        b.iter(|| {
            es.iter()
                .filter(|(id, _, packed)| {
                    event::decode(id, [(&b"hit"[..], packed.as_slice())]).is_ok()
                })
                .count()
        })
    });
    g.bench_function("plain", |b| {
        b.iter(|| {
            es.iter()
                .filter(|(id, name, _)| {
                    event::decode(id, [(&b"name"[..], name.as_slice()), (b"count", b"1")]).is_ok()
                })
                .count()
        })
    });
    g.finish();
}

fn aggregate(c: &mut Criterion) {
    let es = entries(BATCH);
    let now = unix_ms();
    let hits: Vec<_> = es
        .iter()
        .map(|(id, _, packed)| event::decode(id, [(&b"hit"[..], packed.as_slice())]).unwrap())
        .collect();
    let mut g = c.benchmark_group("aggregate");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("1000 hits over 1000 names", |b| {
        b.iter_batched_ref(
            Aggregation::default,
            |w| {
                for h in &hits {
                    w.add(h, now);
                }
                w.cells_len()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn apply_step(c: &mut Criterion) {
    let keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
    let now = unix_ms();
    let es = entries(50_000);
    let mut window = Aggregation::default();
    let mut ids = String::new();
    for (id, _, packed) in &es {
        window.add(
            &event::decode(id, [(&b"hit"[..], packed.as_slice())]).unwrap(),
            now,
        );
        ids.push_str(std::str::from_utf8(id).unwrap());
        ids.push(' ');
    }
    let cells = window.cells();
    let mut g = c.benchmark_group("apply step");
    g.throughput(Throughput::Elements(es.len() as u64));
    g.bench_function("50k hits, 1000 names (7000 cells)", |b| {
        b.iter(|| apply_step_len(&keys, &cells, &ids))
    });
    g.finish();
}

criterion_group!(benches, decode, aggregate, apply_step);
criterion_main!(benches);
