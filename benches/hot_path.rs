//! The worker's hot path without Redis: decoding both event forms,
//! aggregating a read's worth of hits into a window, and building the apply
//! step's pipeline of a window.
//!
//! Timed by a harness of its own rather than a benchmark crate, which every
//! test build would compile: each case warms up while it finds how many
//! runs take about 10 ms, then takes such samples for about 2 s and prints
//! the median time per element (hit or entry) with the fastest and slowest
//! sample. Run by `cargo test` (no `--bench` argument), each case runs once.

use std::hint::black_box;
use std::time::{Duration, Instant};

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

/// Times the cases, or runs each once when not asked to time them.
struct Harness {
    timing: bool,
}

impl Harness {
    /// Times `run` on inputs made by `setup`, which is not timed (nor is
    /// dropping them); what `run` returns is dropped within the time.
    fn case<S, R>(
        &self,
        name: &str,
        elements: usize,
        mut setup: impl FnMut() -> S,
        mut run: impl FnMut(&mut S) -> R,
    ) {
        if !self.timing {
            black_box(run(&mut setup()));
            return;
        }
        let mut sample = |runs: u64| {
            let mut inputs: Vec<S> = (0..runs).map(|_| setup()).collect();
            let t = Instant::now();
            for input in &mut inputs {
                black_box(run(input));
            }
            t.elapsed()
        };
        let mut runs = 1;
        while sample(runs) < Duration::from_millis(10) {
            runs *= 2;
        }
        let mut ns = Vec::new();
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until || ns.len() < 10 {
            ns.push(sample(runs).as_nanos() as f64 / (runs as usize * elements) as f64);
        }
        ns.sort_by(f64::total_cmp);
        println!(
            "{name:<48} {:>8.1} ns per element (median of {} samples of {runs} runs; {:.1} to {:.1})",
            ns[ns.len() / 2],
            ns.len(),
            ns[0],
            ns[ns.len() - 1]
        );
    }
}

fn decode(h: &Harness) {
    let es = entries(BATCH);
    h.case(
        "decode/msgpack",
        BATCH,
        || (),
        |_| {
            es.iter()
                .filter(|(id, _, packed)| {
                    event::decode(id, [(&b"hit"[..], packed.as_slice())]).is_ok()
                })
                .count()
        },
    );
    h.case(
        "decode/plain",
        BATCH,
        || (),
        |_| {
            es.iter()
                .filter(|(id, name, _)| {
                    event::decode(id, [(&b"name"[..], name.as_slice()), (b"count", b"1")]).is_ok()
                })
                .count()
        },
    );
}

fn aggregate(h: &Harness) {
    let es = entries(BATCH);
    let now = unix_ms();
    let hits: Vec<_> = es
        .iter()
        .map(|(id, _, packed)| event::decode(id, [(&b"hit"[..], packed.as_slice())]).unwrap())
        .collect();
    h.case(
        "aggregate/1000 hits over 1000 names",
        BATCH,
        Aggregation::default,
        |w| {
            for hit in &hits {
                w.add(hit, now);
            }
            w.cells_len()
        },
    );
}

fn apply_step(h: &Harness) {
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
    h.case(
        "apply step/50k hits, 1000 names (7000 cells)",
        es.len(),
        || (),
        |_| apply_step_len(&keys, &cells, &ids),
    );
}

fn main() {
    let h = Harness {
        timing: std::env::args().any(|a| a == "--bench"),
    };
    decode(&h);
    aggregate(&h);
    apply_step(&h);
}
