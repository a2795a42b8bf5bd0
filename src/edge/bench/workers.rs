//! The real worker, as child processes of this binary (`hitcount worker`),
//! draining a prefilled stream to empty; then the counters are checked and
//! each process' peak RSS read from `/proc/<pid>/status`.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;

use anyhow::Context as _;
use std::time::{Duration, Instant};

use crate::store::connect::Conn;
use tokio::process::{Child, Command};

use super::ceiling::{redis_cpu_secs, Drained};
use super::{command_stats, Options, Sent};
use crate::edge::workload::Names;
use crate::model::config::RedisArgs;
use crate::model::keys::Keys;
use crate::store::group;

/// Pause between checks that the group has drained the stream.
const POLL: Duration = Duration::from_millis(10);
/// Names whose day counters are read per pipeline when checking.
const CHECK_BATCH: usize = 5000;

/// The group of a run with `workers` workers.
pub(crate) fn group(workers: usize) -> String {
    format!("bench-hitcount-{workers}")
}

/// The command of worker `i` (`exe worker …`, its stderr left to the
/// caller): the keys `k` on `redis` and the `extra` flags, and none of the
/// settings among the `inherited` variables' names (see [`own_settings_only`]).
fn command(
    exe: &Path,
    redis: &RedisArgs,
    k: &Keys,
    i: usize,
    extra: &[String],
    inherited: impl IntoIterator<Item = OsString>,
) -> Command {
    let mut cmd = Command::new(exe);
    own_settings_only(&mut cmd, inherited);
    // The URL (password included) goes in the environment, which
    // other local users cannot read, never on the command line,
    // which `ps` shows them.
    cmd.arg("worker")
        .env("REDIS_URL", &redis.url)
        .args(["--stream", &k.stream])
        .args(["--group", &k.group])
        .args(["--dead-stream", &k.dead])
        .args(["--prefix", k.prefix()])
        .args(["--consumer", &format!("bench-{i}")])
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    for (flag, file) in [
        ("--redis-ca", &redis.ca),
        ("--redis-cert", &redis.cert),
        ("--redis-key", &redis.key),
    ] {
        if let Some(f) = file {
            cmd.arg(flag).arg(f);
        }
    }
    cmd
}

/// Keeps the settings of the shell that runs the bench (its `HITCOUNT_*`
/// variables and `REDIS_URL`, among the `inherited` variables' names) out
/// of `cmd`'s environment: a worker runs with the flags the bench gives it
/// (and `--worker-arg`'s) alone, as the bench takes `REDIS_URL` only. A
/// `HITCOUNT_SHARDS` or `HITCOUNT_PRECISIONS` meant for the deployment
/// would otherwise make the workers read other streams or count other
/// precisions than the bench checks.
fn own_settings_only(cmd: &mut Command, inherited: impl IntoIterator<Item = OsString>) {
    for name in inherited {
        let setting = name
            .to_str()
            .is_some_and(|n| n.starts_with("HITCOUNT_") || n == "REDIS_URL");
        if setting {
            cmd.env_remove(name);
        }
    }
}

/// One command's share of a run, as Redis counts it (`INFO
/// commandstats`): a script's time holds the commands it runs, which are
/// listed too.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct CommandCost {
    /// The command, lower case (`evalsha`, `hincrby`, `xinfo|groups`).
    pub command: String,
    /// Calls per hit.
    pub calls_per_hit: f64,
    /// Microseconds of Redis CPU per hit.
    pub usec_per_hit: f64,
}

/// One run of the real workers.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct WorkerRun {
    /// Entries drained and the time from the group's first read to drained.
    pub drained: Drained,
    /// Redis commands per hit, scripts' own commands included.
    pub commands_per_hit: f64,
    /// Counter cells (HINCRBYs) per hit.
    pub cells_per_hit: f64,
    /// Where Redis' time went: per command, most time first.
    pub by_command: Vec<CommandCost>,
    /// The largest peak RSS of the worker processes, MiB.
    pub peak_rss_mib: f64,
    /// Hits counted at the 86400 s precision.
    pub counted: i64,
}

/// Drains the prefilled `stream` with `workers` workers and checks the
/// counters (under `<stream>:w<workers>:`, less the stream's `:hits`)
/// against `sent`.
pub(crate) async fn run(
    conn: &mut Conn,
    opts: &Options,
    stream: &str,
    workers: usize,
    sent: &Sent,
) -> anyhow::Result<WorkerRun> {
    let prefix = format!("{}:w{workers}:", stream.trim_end_matches(":hits"));
    let k = &Keys::named(stream, &group(workers), &prefix);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    // Each logs to a file in the temp directory.
    let exe = std::env::current_exe().context("worker process")?;
    let mut children = Vec::new();
    for i in 0..workers {
        let log = std::env::temp_dir().join(format!("hitcount-bench-worker-{i}.log"));
        let inherited = std::env::vars_os().map(|(name, _)| name);
        let mut cmd = command(&exe, &opts.redis, k, i, &opts.worker_args, inherited);
        cmd.stderr(std::fs::File::create(log).context("worker process")?);
        children.push(cmd.spawn().context("worker process")?);
    }
    let deadline = Instant::now() + Duration::from_secs(120 + sent.hits / 5000);
    let mut own_calls = 0u64;
    // The clock starts at the group's first read, not at process start-up.
    loop {
        own_calls += 1;
        let group = group::own_group(conn, k).await?;
        if group.is_some_and(|g| g.last_delivered_id != "0-0") {
            break;
        }
        check_alive(&mut children, deadline)?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let cpu = redis_cpu_secs(conn).await?;
    let started = Instant::now();
    loop {
        own_calls += 2;
        if group::drained(conn, k).await? {
            break;
        }
        check_alive(&mut children, deadline)?;
        tokio::time::sleep(POLL).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let redis_cpu_secs = redis_cpu_secs(conn).await? - cpu;
    own_calls += 2;
    let stats = command_stats(conn).await?;
    let calls = stats
        .values()
        .map(|s| s.0)
        .sum::<u64>()
        .saturating_sub(own_calls);
    let cells = stats.get("hincrby").map_or(0, |s| s.0);
    let per_hit = |n: u64| n as f64 / sent.hits as f64;
    let mut by_command: Vec<CommandCost> = stats
        .into_iter()
        .map(|(command, (calls, usec))| CommandCost {
            command,
            calls_per_hit: per_hit(calls),
            usec_per_hit: per_hit(usec),
        })
        .collect();
    by_command.sort_by(|a, b| b.usec_per_hit.total_cmp(&a.usec_per_hit));
    let peak_rss_mib = children
        .iter()
        .filter_map(|c| c.id().and_then(peak_rss_kib))
        .fold(0.0, |a: f64, kib| a.max(kib as f64 / 1024.0));
    stop(children).await;
    let counted = day_total(conn, k, &sent.per_name).await?;
    anyhow::ensure!(
        counted == sent.hits as i64,
        "check failed: {} with {workers} worker(s): counted {counted} hits at the 86400 s \
         precision, sent {}",
        sent.workload.label(),
        sent.hits
    );
    Ok(WorkerRun {
        drained: Drained {
            entries: sent.hits,
            secs,
            redis_cpu_secs,
        },
        commands_per_hit: per_hit(calls),
        cells_per_hit: per_hit(cells),
        by_command,
        peak_rss_mib,
        counted,
    })
}

/// An error when a worker has exited or `deadline` has passed.
fn check_alive(children: &mut [Child], deadline: Instant) -> anyhow::Result<()> {
    for c in children.iter_mut() {
        if let Some(status) = c.try_wait().context("worker process")? {
            anyhow::bail!(
                "check failed: a worker exited ({status}); see hitcount-bench-worker-*.log in {}",
                std::env::temp_dir().display()
            );
        }
    }
    anyhow::ensure!(
        Instant::now() <= deadline,
        "check failed: the workers did not drain the stream in time"
    );
    Ok(())
}

/// Stops the workers with SIGTERM (they finish their window and leave the
/// group; sent with kill(1), so the product needs no libc) and waits for
/// them; kills any still running after 30 s.
async fn stop(children: Vec<Child>) {
    let pids: Vec<String> = children
        .iter()
        .filter_map(|c| c.id().map(|p| p.to_string()))
        .collect();
    if !pids.is_empty() {
        let _ = Command::new("kill").arg("-TERM").args(&pids).status().await;
    }
    for mut c in children {
        if tokio::time::timeout(Duration::from_secs(30), c.wait())
            .await
            .is_err()
        {
            let _ = c.kill().await;
        }
    }
}

/// VmHWM of a process, KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The sum of every day counter of the names that were sent.
async fn day_total(conn: &mut Conn, k: &Keys, per_name: &[u64]) -> anyhow::Result<i64> {
    let ranks: Vec<usize> = (0..per_name.len()).filter(|&r| per_name[r] > 0).collect();
    let mut total = 0i64;
    for batch in ranks.chunks(CHECK_BATCH) {
        let mut pipe = redis::pipe();
        for &r in batch {
            pipe.cmd("HVALS").arg(k.count(86400, &Names::name(r)));
        }
        let values: Vec<Vec<i64>> = pipe.query_async(conn).await?;
        total += values.iter().flatten().sum::<i64>();
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shell's `HITCOUNT_*` and `REDIS_URL` never reach a worker: only
    /// the bench's own `REDIS_URL` and flags do; other variables pass.
    #[test]
    fn a_worker_gets_none_of_the_shells_settings() {
        let redis = RedisArgs::from_url("redis://127.0.0.1:7000");
        let k = Keys::named("bench:hot:hits", &group(1), "bench:hot:w1:");
        let settings = ["HITCOUNT_SHARDS", "HITCOUNT_PRECISIONS", "REDIS_URL"];
        let inherited = settings.iter().chain(&["PATH"]).map(OsString::from);
        let cmd = command(Path::new("hitcount"), &redis, &k, 0, &[], inherited);
        let text = |s: &std::ffi::OsStr| s.to_string_lossy().into_owned();
        let envs: Vec<(String, Option<String>)> = cmd
            .as_std()
            .get_envs()
            .map(|(k, v)| (text(k), v.map(text)))
            .collect();
        for name in &settings[..2] {
            assert!(envs.contains(&(name.to_string(), None)), "{name}: {envs:?}");
        }
        let given = Some(redis.url.clone());
        assert!(envs.contains(&("REDIS_URL".into(), given)), "{envs:?}");
        assert!(envs.iter().all(|(k, _)| k != "PATH"), "{envs:?}");
    }
}
