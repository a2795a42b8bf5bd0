//! The real worker as child processes of the `hitcount` binary, for the
//! lab's own drains (cluster scaling, the latency probe): started with
//! their settings in the environment (`HITCOUNT_*`), watched, paused and
//! stopped; and the counter hashes' memory per encoding.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use hitcount::model::config::RedisArgs;
use hitcount::model::keys::Keys;
use hitcount::store::connect::Conn;
use tokio::process::{Child, Command};

use super::BenchError;

/// The group of a run with `workers` workers.
pub fn group(workers: usize) -> String {
    format!("bench-hitcount-{workers}")
}

/// How to start the workers of one run.
#[derive(Debug, Clone)]
pub struct Target {
    hitcount: PathBuf,
    redis: RedisArgs,
    workers: usize,
    extra: Vec<String>,
    keys: Keys,
}

impl Target {
    /// `workers` workers of the binary `hitcount` on `stream`, counters
    /// under `<stream>:w<workers>:`.
    pub fn new(
        hitcount: &Path,
        redis: &RedisArgs,
        stream: &str,
        workers: usize,
        extra: &[String],
    ) -> Target {
        Target {
            hitcount: hitcount.to_path_buf(),
            redis: redis.clone(),
            workers,
            extra: extra.to_vec(),
            keys: Keys::named(stream, &group(workers), &prefix(stream, workers)),
        }
    }

    /// The keys the workers use.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Starts the worker processes, logging to files in the temp directory.
    /// Their settings go in the environment, the URL (password included)
    /// too: other local users cannot read it there, as they could read a
    /// command line with `ps`.
    pub fn spawn(&self) -> Result<Vec<Child>, BenchError> {
        let k = &self.keys;
        let mut env = vec![
            ("REDIS_URL", self.redis.url.clone()),
            ("HITCOUNT_STREAM", k.stream.clone()),
            ("HITCOUNT_GROUP", k.group.clone()),
            ("HITCOUNT_DEAD_STREAM", k.dead.clone()),
            ("HITCOUNT_PREFIX", k.prefix().to_string()),
            ("HITCOUNT_LISTEN", "127.0.0.1:0".into()),
            ("RUST_LOG", "warn".into()),
        ];
        let files = [
            ("HITCOUNT_REDIS_CA", &self.redis.ca),
            ("HITCOUNT_REDIS_CERT", &self.redis.cert),
            ("HITCOUNT_REDIS_KEY", &self.redis.key),
        ];
        env.extend(
            files
                .into_iter()
                .filter_map(|(name, f)| Some((name, f.as_ref()?.display().to_string()))),
        );
        (0..self.workers)
            .map(|i| {
                let log = std::env::temp_dir().join(format!("hitcount-bench-worker-{i}.log"));
                Command::new(&self.hitcount)
                    .arg("worker")
                    .args(&self.extra)
                    .envs(env.iter().map(|(n, v)| (n, v)))
                    .env("HITCOUNT_CONSUMER", format!("bench-{i}"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(log)?)
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(BenchError::from)
            })
            .collect()
    }
}

/// The counters' prefix of `workers` workers on `stream`:
/// `<stream>:w<workers>:`, less the stream's `:hits`.
fn prefix(stream: &str, workers: usize) -> String {
    format!("{}:w{workers}:", stream.trim_end_matches(":hits"))
}

/// The `known:` key of [`Target::new`]'s workers.
pub fn known_key(stream: &str, workers: usize) -> String {
    Keys::named(stream, &group(workers), &prefix(stream, workers)).known()
}

/// An error when a worker has exited or `deadline` has passed.
pub fn check_alive(children: &mut [Child], deadline: Instant) -> Result<(), BenchError> {
    let exited = children
        .iter_mut()
        .find_map(|c| c.try_wait().transpose())
        .transpose()?;
    match exited {
        Some(status) => Err(BenchError::Check(format!(
            "a worker exited ({status}); see hitcount-bench-worker-*.log in {}",
            std::env::temp_dir().display()
        ))),
        None if Instant::now() > deadline => Err(BenchError::Check(
            "the workers did not drain the stream in time".into(),
        )),
        None => Ok(()),
    }
}

/// Sends `sig` to every worker (SIGSTOP and SIGCONT pause and resume them).
pub fn signal(children: &[Child], sig: libc::c_int) {
    for c in children {
        if let Some(pid) = c.id() {
            // SAFETY: kill(2) on a child we started and have not reaped.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    }
}

/// Stops the workers with SIGTERM (they finish their window and leave the
/// group) and waits for them; kills any still running after 30 s.
pub async fn stop(children: Vec<Child>) {
    signal(&children, libc::SIGTERM);
    for mut c in children {
        if tokio::time::timeout(Duration::from_secs(30), c.wait())
            .await
            .is_err()
        {
            let _ = c.kill().await;
        }
    }
}

/// `hash-max-listpack-entries` low enough that counter hashes of 120
/// samples are hash tables (the "hashtable" runs).
pub const HASHTABLE_ENTRIES: u32 = 16;
/// Samples per counter hash when measuring its memory: the default
/// `HITCOUNT_SAMPLES`.
const MEMORY_SAMPLES: i64 = 120;

/// Sets `hash-max-listpack-entries` and returns the value it had.
pub async fn set_listpack_entries(
    conn: &mut Conn,
    entries: impl ToString,
) -> Result<String, BenchError> {
    let old: (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("hash-max-listpack-entries")
        .query_async(conn)
        .await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hash-max-listpack-entries")
        .arg(entries.to_string())
        .query_async(conn)
        .await?;
    Ok(old.1)
}

/// Bytes of one counter hash of [`MEMORY_SAMPLES`] samples (`MEMORY
/// USAGE`), as Redis' current `hash-max-listpack-entries` encodes it, and
/// that encoding. Written as the worker writes one: HINCRBY, bucket by bucket.
pub async fn counter_hash_bytes(conn: &mut Conn) -> Result<(u64, String), BenchError> {
    let key = "bench:memory:count:60:page";
    let _: () = redis::cmd("DEL").arg(key).query_async(conn).await?;
    let start = super::unix_ms() / 1000 / 60 * 60;
    let mut pipe = redis::pipe();
    for i in 0..MEMORY_SAMPLES {
        pipe.cmd("HINCRBY")
            .arg(key)
            .arg(start - 60 * (MEMORY_SAMPLES - i))
            .arg(1 + i * 37)
            .ignore();
    }
    pipe.query_async::<()>(conn).await?;
    let (bytes, encoding): (u64, String) = redis::pipe()
        .cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query_async(conn)
        .await?;
    let _: () = redis::cmd("DEL").arg(key).query_async(conn).await?;
    Ok((bytes, encoding))
}

/// Bytes of a counter hash of 120 samples and its encoding, with Redis'
/// `hash-max-listpack-entries` as it is, then at [`HASHTABLE_ENTRIES`]
/// (restored afterwards).
pub async fn hash_memory(conn: &mut Conn) -> Result<Vec<(String, u64)>, BenchError> {
    let (lp, lp_enc) = counter_hash_bytes(conn).await?;
    let old = set_listpack_entries(conn, HASHTABLE_ENTRIES).await?;
    let ht = counter_hash_bytes(conn).await;
    set_listpack_entries(conn, &old).await?;
    let (ht, ht_enc) = ht?;
    Ok(vec![
        (format!("{lp_enc} (hash-max-listpack-entries {old})"), lp),
        (
            format!("{ht_enc} (hash-max-listpack-entries {HASHTABLE_ENTRIES})"),
            ht,
        ),
    ])
}
