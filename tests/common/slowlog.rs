//! The SLOWLOG checks and the lock of the tests that measure wall time,
//! shared by the integration tests and the crate's own (`src/testing.rs`
//! includes this file), so that both follow one policy.

use redis::aio::ConnectionLike;

/// Empties the SLOWLOG.
pub async fn slowlog_reset(conn: &mut impl ConnectionLike) {
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async::<()>(conn)
        .await
        .unwrap();
}

/// SLOWLOG entries (commands over the 10 ms threshold armed by the test servers),
/// each as its duration in µs and the command's first five words.
pub async fn slowlog(conn: &mut impl ConnectionLike) -> Vec<String> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query_async(conn)
        .await
        .unwrap();
    entries
        .iter()
        .map(|e| match e {
            redis::Value::Array(e) if e.len() > 3 => match &e[3] {
                redis::Value::Array(cmd) => {
                    format!("{:?} µs {:?}", e[2], &cmd[..cmd.len().min(5)])
                }
                other => format!("{e:?} {other:?}"),
            },
            other => format!("{other:?}"),
        })
        .collect()
}

/// The SLOWLOG policy of every test that checks it. This VM stalls now and
/// then for up to ~25 ms by itself (`redis-cli --intrinsic-latency` on an
/// idle machine), and SLOWLOG times wall clock, so a stall can land in any
/// single command. A command too big is slow on every run, a stall is not:
/// `scenario` runs up to `attempts` times, each on a fresh server it starts
/// itself, returning that server's [`slowlog`], and must come out empty
/// once. Every failed attempt's entries are printed.
pub async fn slowlog_clean_in_one_of<F, Fut>(attempts: usize, mut scenario: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    for attempt in 1..=attempts {
        let slow = scenario().await;
        if slow.is_empty() {
            return;
        }
        eprintln!("SLOWLOG attempt {attempt} of {attempts}: commands over 10 ms: {slow:#?}");
    }
    panic!("the SLOWLOG was not empty in any of {attempts} runs (entries above)");
}

/// How many fresh runs a SLOWLOG check gets (see [`slowlog_clean_in_one_of`]).
pub const SLOWLOG_ATTEMPTS: usize = 3;

/// Held by the tests that measure wall time (SLOWLOG, visibility and
/// failover bounds) or load the machine (chaos, millions of entries): the
/// tests of a binary run side by side, two at a time on two cores, and the
/// test binaries run side by side too (`scripts/run-tests`), so no two of
/// these may overlap, in one binary or across binaries, or one would
/// measure the other. The others run beside them.
static EXCLUSIVE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What [`exclusive`] holds: this binary's turn and the machine's (an
/// exclusive lock on a file every test binary opens).
pub struct Alone {
    _turn: tokio::sync::MutexGuard<'static, ()>,
    _file: std::fs::File,
}

/// Waits until no other such test runs, in this binary or another, and
/// holds that until the guard drops: first thing in such a test,
/// `let _alone = exclusive().await;`.
pub async fn exclusive() -> Alone {
    let turn = EXCLUSIVE.lock().await;
    let path = std::env::temp_dir().join("hitcount-tests-alone.lock");
    let file = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
        file.lock()
            .unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
        file
    })
    .await
    .expect("waiting for the machine's turn");
    Alone {
        _turn: turn,
        _file: file,
    }
}

/// Says so when a server's command thread could not be given a higher CPU
/// priority than the test's own (debug-built) workers and producer, which
/// share this machine's two cores with it: SLOWLOG counts wall time, so a
/// Redis merely waiting for a core would show time that is not the
/// command's. Raising it needs root (as CI runs).
pub fn note_priority(raised: bool) {
    if !raised {
        eprintln!("note: could not raise redis-server's priority (not root); SLOWLOG may show CPU contention");
    }
}
