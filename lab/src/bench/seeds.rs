//! The seeds' way, in Rust: `update_counter` of *Redis in Action* §5.2 as
//! the seeds run it, one pipeline per hit of ZADD `known:` + HINCRBY
//! `count:PREC:NAME` for every precision, sent one after the other.

use std::time::Instant;

use hitcount::store::connect::Conn;

use super::BenchError;
use hitcount::edge::workload::Names;
use hitcount::edge::workload::Workload;
use hitcount::model::config::DEFAULT_PRECISIONS;
use hitcount::model::keys::Keys;

/// The rate the seeds' Python code reached when measured once, separately,
/// with the seeds' own code on a 2-CPU machine (hits/s). A quoted figure, not
/// a measurement of this run: the report prints it for reference and divides
/// nothing by it.
pub const SEEDS_PYTHON_REFERENCE_RATE: f64 = 3200.0;

/// What the seeds' way did.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SeedsRun {
    /// Hits sent.
    pub hits: u64,
    /// Wall time, seconds.
    pub secs: f64,
}

impl SeedsRun {
    /// Hits per second.
    pub fn rate(&self) -> f64 {
        self.hits as f64 / self.secs.max(1e-9)
    }
}

/// Counts `hits` hits drawn from `workload` the seeds' way, under
/// `bench:seeds:`.
pub async fn run(conn: &mut Conn, workload: Workload, hits: u64) -> Result<SeedsRun, BenchError> {
    let k = Keys::named("bench:seeds:hits", "seeds", "bench:seeds:");
    let known = k.known();
    let names = workload.names();
    let mut rng = rand::rng();
    let started = Instant::now();
    for _ in 0..hits {
        let name = Names::name(names.sample(&mut rng));
        let now = super::unix_ms() / 1000;
        let mut pipe = redis::pipe();
        for p in DEFAULT_PRECISIONS {
            let bucket = now.div_euclid(p as i64) * p as i64;
            pipe.cmd("ZADD")
                .arg(&known)
                .arg(0)
                .arg(Keys::member(p, &name))
                .ignore();
            pipe.cmd("HINCRBY")
                .arg(k.count(p, &name))
                .arg(bucket)
                .arg(1)
                .ignore();
        }
        pipe.query_async::<()>(conn).await?;
    }
    Ok(SeedsRun {
        hits,
        secs: started.elapsed().as_secs_f64(),
    })
}
