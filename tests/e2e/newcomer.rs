//! What a new user meets first: the real binary against a real redis-server,
//! fed nonsense flags, wrong passwords, missing permissions, a closed pipe,
//! a second demo, events the worker would not count, a precision that is not
//! configured, and JSON logs. Every failure must be one clear line, never a
//! panic, a hang or a "sent" that counts nowhere.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};
use std::time::Duration;

use common::bin::{hitcount, run_hitcount, Child};
use common::*;
use hitcount_lab::kit::ServerOptions;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `hitcount ARGS` and returns its output, failing the test if it has
/// not exited within a minute (a hang is a bug here, whatever the cause).
fn run_within_a_minute(name: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = hitcount();
    cmd.args(args);
    let mut child = Child::spawn(name, cmd);
    let status = child
        .wait(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("hitcount {args:?} still running after 60 s"));
    (status.code(), child.stdout(), child.stderr())
}

/// A worker of `url` named `consumer`, with `extra` flags, that must stop
/// at start with status 1: what it said.
fn refused_worker(url: &str, consumer: &str, extra: &[&str]) -> String {
    let listen = common::bin::free_addr();
    let mut args = vec!["worker", "--redis-url", url, "--listen", &listen];
    args.extend(["--consumer", consumer]);
    args.extend(extra);
    let (code, _, err) = run_within_a_minute(consumer, &args);
    assert_eq!(code, Some(1), "{err}");
    err
}

/// Sends `hits` hits of `page:0` and waits until each precision of
/// `precisions` counts them all.
fn load_and_count(url: &str, hits: i64, precisions: &[&str]) {
    let n = hits.to_string();
    let o = run_hitcount(&["load", "--redis-url", url, "--hits", &n, "--names", "1"]);
    assert!(o.status.success(), "{o:?}");
    wait_counted(url, hits, precisions);
}

/// Waits until each precision of `precisions` counts `hits` hits of `page:0`.
fn wait_counted(url: &str, hits: i64, precisions: &[&str]) {
    for prec in precisions {
        common::bin::wait_for("every hit counted", Duration::from_secs(30), || {
            let counts: Vec<i64> = redis::cmd("HVALS")
                .arg(format!("count:{prec}:page:0"))
                .query(&mut sync_conn(url))
                .unwrap();
            (counts.iter().sum::<i64>() == hits).then_some(())
        });
    }
}

/// Asserts a failure reported in exactly one line, with no panic and no
/// raw pipeline dump.
fn assert_one_line_failure(what: &str, code: Option<i32>, err: &str) {
    assert_eq!(code, Some(1), "{what}: exit status\n{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: one line\n{err}");
    for bad in ["panicked", "Pipeline failure", "Index 0"] {
        assert!(!err.contains(bad), "{what}: {bad}\n{err}");
    }
}

/// Finding 1: every flag value a command cannot work with is refused by the
/// argument parser (exit 2) with the flag's name, before anything runs.
#[test]
fn nonsense_flag_values_are_refused_naming_the_flag() {
    let long_name = "n".repeat(4097);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["load", "--hits", "10", "--zipf", "nan"], "--zipf"),
        (vec!["load", "--hits", "10", "--zipf", "inf"], "--zipf"),
        (vec!["load", "--hits", "10", "--zipf", "-1"], "--zipf"),
        (vec!["load", "--hits", "10", "--zipf", "11"], "--zipf"),
        (vec!["load", "--hits", "10", "--names", "0"], "--names"),
        (
            vec!["load", "--hits", "10", "--names", "99999999999"],
            "--names",
        ),
        (vec!["load", "--hits", "10", "--rate", "0"], "--rate"),
        (vec!["load", "--hits", "0"], "--hits"),
        (vec!["hit", ""], "<NAME>"),
        (vec!["hit", &long_name], "<NAME>"),
        (vec!["hit", "x", "--at", "nan"], "--at"),
        (vec!["hit", "x", "--at", "inf"], "--at"),
        (vec!["hit", "x", "--at", "-1"], "--at"),
        (vec!["hit", "x", "--count", "0"], "--count"),
        (vec!["demo", "--hits", "0"], "--hits"),
        (vec!["demo", "--names", "0"], "--names"),
        (vec!["demo", "--names", "99999999999"], "--names"),
        (vec!["bench", "--entries", "0"], "--entries"),
        (vec!["bench", "--workers", "1,0"], "--workers"),
        (vec!["bench", "--seeds-sample", "0"], "--seeds-sample"),
        (vec!["bench", "--latency-secs", "0"], "--latency-secs"),
        (vec!["clean", "--once", "--wait", "99999999999"], "--wait"),
        (vec!["get", "x", "--precision", "-5"], "--precision"),
    ];
    for (args, flag) in cases {
        let o = run_hitcount(&args);
        let err = stderr(&o);
        let shown: Vec<&str> = args.iter().map(|a| &a[..a.len().min(20)]).collect();
        assert_eq!(o.status.code(), Some(2), "{shown:?}: exit status\n{err}");
        assert!(err.contains(flag), "{shown:?} names {flag}:\n{err}");
        assert!(!err.contains("panicked"), "{shown:?}:\n{err}");
    }
}

/// Findings 1, 5 and 6: values that parse but make no sense with the
/// counter layout are refused before Redis is contacted (no server here).
#[test]
fn values_that_do_not_fit_the_layout_are_refused_with_the_reason() {
    let unreachable = format!("redis://127.0.0.1:{}", hitcount_lab::kit::free_port());
    let now = unix_now();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["hit".into(), "x".into(), "--at".into(), "0".into()],
            "nowhere",
        ),
        (
            vec![
                "hit".into(),
                "x".into(),
                "--at".into(),
                (now - 200 * 86_400).to_string(),
            ],
            "nowhere",
        ),
        (
            vec![
                "hit".into(),
                "x".into(),
                "--at".into(),
                (now + 2 * 86_400).to_string(),
            ],
            "a day ahead",
        ),
        (
            vec!["get".into(), "x".into(), "-p".into(), "7".into()],
            "1, 5, 60, 300, 3600, 18000, 86400",
        ),
        (
            vec!["status".into(), "--samples".into(), "0".into()],
            "HITCOUNT_SAMPLES",
        ),
        (
            vec![
                "get".into(),
                "x".into(),
                "-p".into(),
                "60".into(),
                "--precisions".into(),
                "0".into(),
            ],
            "HITCOUNT_PRECISIONS",
        ),
        (
            ["worker", "--shards", "4", "--stream", "h{x}"]
                .map(String::from)
                .to_vec(),
            "with 4 shards shard k is h{x}:{k}",
        ),
        (
            ["hit", "x", "--shards", "4", "--stream", "h{x}"]
                .map(String::from)
                .to_vec(),
            "remove the `{`",
        ),
    ];
    for (mut args, why) in cases {
        args.extend(["--redis-url".into(), unreachable.clone()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = run_within_a_minute("refused", &args);
        assert_one_line_failure(&format!("{args:?}"), code, &err);
        assert!(err.contains(why), "{args:?}: {why}\n{err}");
        assert!(
            !err.contains("cannot connect"),
            "checked before connecting: {err}"
        );
    }
}

/// Finding 5: a hit the worker would count is still sent, with a current
/// `--at`; refused ones never reach the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hit_sends_only_what_the_worker_counts() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    for at in ["0", "nan", "-1", "99999999999"] {
        let o = run_hitcount(&["hit", "page:x", "--at", at, "--redis-url", &url]);
        assert!(!o.status.success(), "--at {at} refused: {}", stdout(&o));
        assert!(!stdout(&o).contains("sent"), "--at {at}: {}", stdout(&o));
    }
    let len: u64 = redis::cmd("XLEN")
        .arg("hits")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(len, 0, "nothing refused reached the stream");
    let now = unix_now().to_string();
    let o = run_hitcount(&["hit", "page:x", "--at", &now, "--redis-url", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("sent page:x x1"), "{}", stdout(&o));
}

/// Finding 2: a missing or wrong password, a missing permission and a
/// stream key of another type fail at once, in one line naming the Redis URL
/// (password hidden) and Redis' own reason; nothing retries forever.
#[test]
fn refusals_by_redis_are_one_line_with_the_url_and_the_cause() {
    const PASSWORD: &str = "newcomer-pw";
    let srv = server_with(ServerOptions {
        password: Some(PASSWORD.into()),
        // Everything but running scripts: the producer cannot append.
        extra: vec!["user noscripts on >np-pw ~* +@all -evalsha -eval".into()],
        ..ServerOptions::default()
    });
    let port = srv.port();
    let host = format!("127.0.0.1:{port}");
    let no_password = format!("redis://{host}");
    let wrong_password = format!("redis://:wrong-secret@{host}");
    let no_scripts = format!("redis://noscripts:np-pw@{host}");
    let commands: Vec<Vec<&str>> = vec![
        vec!["get", "x", "-p", "60"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["clean", "--once"],
        vec!["hit", "x"],
        vec!["load", "--hits", "100"],
        vec!["demo", "--hits", "100", "--names", "5"],
    ];
    for cmd in &commands {
        for (url, cause) in [(&no_password, "NOAUTH"), (&wrong_password, "WRONGPASS")] {
            let args = [&cmd[..], &["--redis-url", url]].concat();
            let (code, _, err) = run_within_a_minute("refused", &args);
            let what = format!("{cmd:?} {cause}");
            assert_one_line_failure(&what, code, &err);
            assert!(err.contains(cause), "{what}:\n{err}");
            assert!(err.contains(&host), "{what} names the URL:\n{err}");
            assert!(!err.contains("wrong-secret"), "{what} hides it:\n{err}");
        }
    }
    for cmd in [&commands[4], &commands[5], &commands[6]] {
        let args = [&cmd[..], &["--redis-url", &no_scripts]].concat();
        let (code, _, err) = run_within_a_minute("noperm", &args);
        let what = format!("{cmd:?} NOPERM");
        assert_one_line_failure(&what, code, &err);
        assert!(
            err.contains("NOPERM") && err.contains("evalsha"),
            "{what}:\n{err}"
        );
        assert!(!err.contains("np-pw"), "{what} hides it:\n{err}");
    }

    // A stream key that holds something else.
    let admin = format!("redis://:{PASSWORD}@{host}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = conn(&admin).await;
        let _: () = redis::cmd("SET")
            .arg("hits")
            .arg("oops")
            .query_async(&mut c)
            .await
            .unwrap();
    });
    for cmd in [&commands[4], &commands[5]] {
        let args = [&cmd[..], &["--redis-url", &admin]].concat();
        let (code, _, err) = run_within_a_minute("wrongtype", &args);
        let what = format!("{cmd:?} on a string key");
        assert_one_line_failure(&what, code, &err);
        assert!(
            err.contains("not a stream") || err.contains("another type"),
            "{what}:\n{err}"
        );
        assert!(!err.contains("could not reach"), "{what}:\n{err}");
    }
}

/// Finding 3: a reader that stops early (`| head -1`) ends the command
/// quietly instead of a panic about a broken pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_the_command_quietly() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    // 5,000 samples: far more output than a pipe holds.
    let now = unix_now();
    let mut cmd = redis::cmd("HSET");
    cmd.arg("count:1:page:big");
    for i in 0..5000 {
        cmd.arg(now - i).arg(1);
    }
    let _: () = cmd.query_async(&mut c).await.unwrap();
    // And as many buckets of statistics.
    let mut cmd = redis::cmd("HSET");
    cmd.arg("stats:1:page:big");
    for i in 0..5000 {
        for f in ["count", "sum", "sumsq", "min", "max"] {
            cmd.arg(format!("{}:{f}", now - i)).arg(1);
        }
    }
    let _: () = cmd.query_async(&mut c).await.unwrap();
    for args in [
        &["get", "page:big", "-p", "1"][..],
        &["get", "page:big", "-p", "1", "--json"],
        &["get", "page:big", "-p", "1", "--stats"],
        &["get", "page:big", "-p", "1", "--stats", "--json"],
    ] {
        let mut child = hitcount()
            .args(args)
            .args(["--redis-url", &url])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        // The reader is gone (dropped above): like `| head -1`.
        assert!(!first.is_empty());
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_ne!(out.status.code(), Some(101), "{args:?} panicked:\n{err}");
        assert!(out.status.success(), "{args:?}: {:?}\n{err}", out.status);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}:\n{err}"
        );
    }
}

/// Finding 4: the demo clears what an earlier demo left, so it is exact on
/// the same Redis every time.
#[test]
fn demo_twice_on_the_same_redis_is_exact_both_times() {
    let srv = server();
    let url = srv.url();
    for run in 1..=2 {
        let (code, out, err) = run_within_a_minute(
            "demo",
            &[
                "demo",
                "--redis-url",
                &url,
                "--hits",
                "2000",
                "--names",
                "50",
            ],
        );
        assert_eq!(code, Some(0), "run {run}:\n{out}\n{err}");
        assert!(
            out.contains("total at the 1-day precision: 2000 of 2000 sent: exact"),
            "run {run}:\n{out}"
        );
        if run == 2 {
            assert!(out.contains("left by an earlier demo"), "{out}");
        } else {
            assert!(
                !out.contains("left by an earlier demo"),
                "a fresh Redis has nothing of an earlier demo: {out}"
            );
        }
        assert!(!out.contains(" 1 samples"), "{out}");
    }
}

/// Finding 6: counter fields that are not integers are reported, not
/// silently dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_warns_about_fields_that_are_not_integers() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let bucket = unix_now() / 60 * 60;
    let _: () = redis::cmd("HSET")
        .arg("count:60:page:odd")
        .arg(bucket)
        .arg(4)
        .arg(bucket - 60)
        .arg("lots")
        // Not a bucket's start: no sample either (it was one).
        .arg(bucket - 30)
        .arg(2)
        .arg(format!("0{bucket}"))
        .arg(3)
        .query_async(&mut c)
        .await
        .unwrap();
    let o = run_hitcount(&["get", "page:odd", "-p", "60", "--json", "--redis-url", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let samples: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(samples, serde_json::json!([{"time": bucket, "count": 4}]));
    let err = stderr(&o);
    assert!(
        err.contains("not integers") && err.contains("lots"),
        "{err}"
    );
    // A key of another type reads as no samples, with a warning naming it;
    // with --stats too; a name never seen, without one.
    for key in ["count:60:page:text", "stats:60:page:text"] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("junk")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    for (name, stats, warned) in [
        ("page:text", false, true),
        ("page:text", true, true),
        ("page:never", false, false),
    ] {
        let mut args = vec!["get", name, "-p", "60", "--redis-url", &url];
        if stats {
            args.push("--stats");
        }
        let o = run_hitcount(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(
            err.contains("a key of another type"),
            warned,
            "{name} {stats}: {err}"
        );
    }
}

/// Finding 7: the seeds' Python figure is quoted, not passed off as
/// measured, and no ratio divides by it.
#[test]
fn bench_quotes_the_seeds_python_figure_without_dividing_by_it() {
    let srv = server();
    let url = srv.url();
    let o = crate::common::bin::lab(&[
        "bench",
        "--redis-url",
        &url,
        "--entries",
        "300",
        "--workers",
        "1",
        "--workload",
        "hot",
        "--seeds-sample",
        "50",
        "--latency-secs",
        "1",
    ]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(out.contains("| workload |"), "{out}");
    assert!(!out.contains("seeds' Python |"), "no ratio column: {out}");
    let line = out.lines().find(|l| l.contains("seeds' Python")).unwrap();
    assert!(line.contains("not measured in this run"), "{line}");
}

/// `hitcount bench` says where Redis' time went, command by command, for
/// each run and the run with values (whose statistics cells each read
/// their fields: an HMGET), in the table's text and in `--json`.
#[test]
fn bench_says_where_redis_time_goes_by_command() {
    let srv = server();
    let args = [
        "bench",
        "--redis-url",
        &srv.url(),
        "--entries",
        "3000",
        "--workers",
        "1",
        "--workload",
        "hot",
    ];
    let o = run_hitcount(&args);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let line = |label: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("- {label}: ")))
            .unwrap_or_else(|| panic!("no breakdown for {label}: {out}"))
            .to_string()
    };
    let plain = line("1,000 hot names, 1 worker(s)");
    assert!(
        plain.contains("xreadgroup ") && plain.contains(" µs ("),
        "{plain}"
    );
    // And how many counter cells each hit cost (HINCRBYs, in scripts too).
    let cells = |l: &str| l.split('|').map(str::trim).nth(8).map(str::to_string);
    let header = out.lines().find(|l| l.starts_with("| workload |")).unwrap();
    assert_eq!(cells(header).as_deref(), Some("cells per hit"), "{header}");
    let row = out
        .lines()
        .find(|l| l.starts_with("| 1,000 hot names |"))
        .unwrap();
    let per_hit: f64 = cells(row).unwrap().parse().unwrap();
    assert!(per_hit > 0.0 && per_hit < 3.0, "{row}");
    assert!(line("every hit with a value").contains("evalsha "), "{out}");
    let o = run_hitcount(&[&args[..], &["--json"]].concat());
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let by_command = json["values"]["by_command"].as_array().unwrap();
    let reads_per_hit = |by_command: &serde_json::Value| {
        let by_command = by_command.as_array().unwrap();
        let hmget = by_command.iter().find(|c| c["command"] == "hmget");
        hmget.map_or(0.0, |c| c["calls_per_hit"].as_f64().unwrap())
    };
    let (plain, valued) = (
        reads_per_hit(&json["runs"][0]["hitcount"]["by_command"]),
        reads_per_hit(&json["values"]["by_command"]),
    );
    assert!(valued > plain, "statistics read their fields: {json}");
    let time = |c: &serde_json::Value| c["usec_per_hit"].as_f64().unwrap();
    assert!(
        by_command.windows(2).all(|w| time(&w[0]) >= time(&w[1])),
        "most time first: {by_command:?}"
    );

    // `--values`: every hit of the workload has one, so its own run pays
    // for the statistics (their HMGETs) and no extra run is made.
    let o = run_hitcount(&[&args[..], &["--values", "--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["all_valued"], true, "{json}");
    assert!(json["values"].is_null(), "{json}");
    let run = reads_per_hit(&json["runs"][0]["hitcount"]["by_command"]);
    assert!(run >= valued / 2.0, "{json}");
}

/// The demo with the fewest names `--help` allows (1 and 2) prints its
/// samples and checks its totals: the samples it shows of the second and
/// third most hit names fall back to the last name there is.
#[test]
fn demo_counts_one_or_two_names() {
    let srv = server();
    let url = srv.url();
    for names in ["1", "2"] {
        let args = [
            "demo",
            "--redis-url",
            &url,
            "--hits",
            "10",
            "--names",
            names,
        ];
        let (code, out, err) = run_within_a_minute("demo", &args);
        assert_eq!(code, Some(0), "--names {names}:\n{out}\n{err}");
        assert!(!err.contains("panicked"), "--names {names}: {err}");
        assert!(
            out.contains("total at the 1-day precision: 10 of 10 sent: exact"),
            "--names {names}:\n{out}"
        );
        let last = format!(
            "page:{} at 86400 s precision: ",
            names.parse::<u8>().unwrap() - 1
        );
        assert!(out.contains(&last), "--names {names}:\n{out}");
    }
}

/// The processes whose parent is `pid`: their ids and command lines
/// (arguments joined by spaces).
fn children_of(pid: i32) -> Vec<(i32, String)> {
    let parent = pid.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let child: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The parent's id is the second field after the command's
            // closing parenthesis.
            let (_, rest) = stat.rsplit_once(") ")?;
            (rest.split(' ').nth(1)? == parent).then_some(())?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            Some((child, cmdline))
        })
        .collect()
}

/// Whether process `pid` still runs the program whose command line was
/// `cmdline` (a zombie's is empty; an id reused by another program does not
/// count).
fn still_runs(pid: i32, cmdline: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| !c.is_empty() && String::from_utf8_lossy(&c).replace('\0', " ") == cmdline)
}

/// SIGTERM to `hitcount bench` while its workers drain stops them and the
/// throwaway redis-server it started, and the bench exits non-zero saying
/// so: no `hitcount worker` is left running, reparented to init.
#[test]
fn a_signalled_bench_stops_its_workers_and_its_redis() {
    let mut cmd = hitcount();
    cmd.args([
        "bench",
        "--entries",
        "100000",
        "--workers",
        "2",
        "--workload",
        "uniform",
    ]);
    let mut bench = Child::spawn("bench", cmd);
    let pid = bench.pid();
    let started = common::bin::wait_for("the bench's workers", Duration::from_secs(120), || {
        bench.assert_running();
        let children = children_of(pid);
        let workers = children
            .iter()
            .filter(|(_, c)| c.contains(" worker --stream bench:"));
        (workers.count() == 2).then_some(children)
    });
    assert!(
        started.iter().any(|(_, c)| c.contains("redis-server")),
        "the throwaway Redis is the bench's child: {started:?}"
    );
    bench.signal(libc::SIGTERM);
    let status = bench
        .wait(Duration::from_secs(30))
        .expect("the bench exits on SIGTERM");
    assert!(!status.success(), "{status}");
    let err = bench.stderr();
    assert!(
        err.contains("interrupted: stopped the bench's workers and its throwaway Redis"),
        "{err}"
    );
    common::bin::wait_for("the bench's children gone", Duration::from_secs(10), || {
        let left: Vec<_> = started.iter().filter(|(p, c)| still_runs(*p, c)).collect();
        left.is_empty().then_some(())
    });
}

/// The bench takes `REDIS_URL` only: the shell's `HITCOUNT_*` settings,
/// meant for a deployment's workers, do not reach the bench's own (with
/// `HITCOUNT_SHARDS=2` a worker would exit, with `HITCOUNT_PRECISIONS=60`
/// count nothing at the day precision the bench checks).
#[test]
fn the_bench_workers_ignore_the_shells_settings() {
    let srv = server();
    let url = srv.url();
    // A small bench of one worker on `workload`, with `extra` flags.
    let bench_args = |workload: &'static str, extra: &'static [&'static str]| {
        let mut args = vec![
            "bench",
            "--redis-url",
            &url,
            "--entries",
            "300",
            "--workers",
            "1",
        ];
        args.extend(["--workload", workload]);
        args.extend(extra);
        args
    };
    let mut cmd = hitcount();
    cmd.args(bench_args("zipf", &[]))
        .env("HITCOUNT_SHARDS", "2")
        .env("HITCOUNT_PRECISIONS", "60");
    let mut bench = Child::spawn("bench", cmd);
    let status = bench
        .wait(Duration::from_secs(120))
        .expect("the bench ends within 2 minutes");
    assert!(status.success(), "{}\n{}", bench.stdout(), bench.stderr());
    assert!(
        bench.stdout().contains("| workload |"),
        "{}",
        bench.stdout()
    );
    // A bench that fails (its workers count at no precision it checks)
    // deletes its keys all the same: it left hundreds in the Redis it
    // measured.
    let o = common::bin::run_hitcount(&bench_args("hot", &["--worker-arg=--precisions=1"]));
    assert!(!o.status.success(), "{o:?}");
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("bench:*")
        .query(&mut sync_conn(&srv.url()))
        .unwrap();
    assert!(
        left.is_empty(),
        "{} keys left: {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
}

/// The flags of `hitcount bench` that moved to the lab are still taken,
/// unshown, and refused with one line naming the lab's command (exit 2):
/// never ignored, never an unknown flag.
#[test]
fn bench_flags_that_moved_to_the_lab_name_its_command() {
    let help = stdout(&run_hitcount(&["bench", "--help"]));
    for (args, flag) in [
        (vec!["--cluster"], "--cluster"),
        (vec!["--cluster", "5"], "--cluster"),
        (vec!["--serve"], "--serve"),
        (vec!["--rounds", "3"], "--rounds"),
        (vec!["--warm"], "--warm"),
        (vec!["--seeds-sample", "50"], "--seeds-sample"),
        (vec!["--latency-secs", "1"], "--latency-secs"),
        (vec!["--rss-backlog", "1000"], "--rss-backlog"),
        (vec!["--shards", "4"], "--shards"),
        (vec!["--cluster-replicas", "1"], "--cluster-replicas"),
        (vec!["--balance-shards"], "--balance-shards"),
        (vec!["--serve-secs", "3"], "--serve-secs"),
    ] {
        let mut all = vec!["bench"];
        all.extend(&args);
        let o = run_hitcount(&all);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.contains(&format!("target/release/hitcount-lab bench {flag}")),
            "{args:?} names the lab's command: {err}"
        );
        assert!(
            !help.contains(&format!("{flag} ")),
            "{flag} is unshown: {help}"
        );
    }
}

/// Finding 8: help, defaults and JSON errors say what the binary does.
#[test]
fn help_and_errors_match_the_binary() {
    let o = run_hitcount(&["worker", "--help"]);
    let help = stdout(&o);
    assert!(
        help.contains("[default: 1,5,60,300,3600,18000,86400]"),
        "comma separated, as the flag takes them:\n{help}"
    );
    assert!(
        help.contains("warn for"),
        "one-shot commands log at warn: {help}"
    );
    let bench = stdout(&run_hitcount(&["bench", "--help"]));
    assert!(bench.contains("[default: 1,2]") && bench.contains("[default: hot,zipf,uniform]"));
    // The default itself is taken back as it is shown.
    let o = run_hitcount(&[
        "get",
        "x",
        "-p",
        "7",
        "--precisions",
        "1,5,60,300,3600,18000,86400",
    ]);
    assert!(
        stderr(&o).contains("not a configured precision"),
        "{}",
        stderr(&o)
    );

    let get = stdout(&run_hitcount(&["get", "--help"]));
    let usage = get.lines().find(|l| l.starts_with("Usage:")).unwrap();
    assert!(!usage.contains("--redis-url"), "not required: {usage}");

    // Argument errors are a JSON line when JSON logs are asked for.
    for env in [true, false] {
        let mut cmd = hitcount();
        if env {
            cmd.env("HITCOUNT_LOG_FORMAT", "json");
        } else {
            cmd.args(["--log-format", "json"]);
        }
        let o = cmd
            .args(["load", "--hits", "5", "--zipf", "nan"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        let err = stderr(&o);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(line["level"], "ERROR", "{line}");
        assert!(line["error"].as_str().unwrap().contains("--zipf"), "{line}");
    }
    // Help stays help, on stdout, status 0.
    let o = hitcount()
        .env("HITCOUNT_LOG_FORMAT", "json")
        .args(["get", "--help"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).starts_with("Print a counter's samples"),
        "{}",
        stdout(&o)
    );
}

/// Finding 8: `clean --json` and `status --json` give the last pass in the
/// same shape: `trimmed` is the number of entries, `min_id` beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_and_status_json_give_the_pass_in_one_shape() {
    let srv = server();
    let url = srv.url();
    // Before any pass: null, not an object of another shape.
    let o = run_hitcount(&["status", "--json", "--redis-url", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let before: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(before["last_pass"].is_null(), "{before}");
    let o = run_hitcount(&["clean", "--once", "--json", "--redis-url", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let clean: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let o = run_hitcount(&["status", "--json", "--redis-url", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let recorded = &status["last_pass"];
    assert!(clean["trimmed"].is_u64(), "{clean}");
    assert!(recorded["trimmed"].is_i64(), "{recorded}");
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&clean), keys(recorded), "{clean}\n{recorded}");
    assert_eq!(clean["trimmed"], recorded["trimmed"]);
    assert_eq!(clean["leader"], recorded["leader"]);
}

/// Producers with another shard count than the workers' would send hits to
/// streams no worker reads: `hit` and `load` refuse that with one line, and
/// send nothing; with the workers' count they send. `status` (and `clean`)
/// use the workers' count, with a warning.
#[test]
fn a_producer_with_another_shard_count_than_the_workers_is_refused() {
    let srv = server();
    let url = srv.url();
    let listen = common::bin::free_addr();
    let mut worker = common::bin::start_worker(&url, "sharded", &listen, &["--shards", "4"]);
    let refused = |args: &[&str]| {
        let out = hitcount()
            .args(args)
            .env("REDIS_URL", &url)
            .env_remove("HITCOUNT_SHARDS")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was not refused");
        let err = stderr(&out);
        assert!(
            err.contains("HITCOUNT_SHARDS is 1, but this stream's workers read it as 4"),
            "{err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    };
    refused(&["hit", "page:home"]);
    refused(&["load", "--hits", "10", "--names", "2"]);
    let mut c = sync_conn(&url);
    let exists: i64 = redis::cmd("EXISTS").arg("hits").query(&mut c).unwrap();
    assert_eq!(exists, 0, "a refused producer sent nothing to hits");
    // `status` without the count looks at the workers' shards, and says
    // that it does.
    let out = hitcount()
        .args(["status", "--json"])
        .env("REDIS_URL", &url)
        .env_remove("HITCOUNT_SHARDS")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status["shards"].as_array().map(Vec::len),
        Some(4),
        "{status}"
    );
    assert!(
        stderr(&out)
            .contains("HITCOUNT_SHARDS is 1, but this stream's workers read it as 4 shard(s)")
            && stderr(&out).contains("using 4"),
        "{}",
        stderr(&out)
    );
    let sent = common::bin::run_ok(&url, &["hit", "page:home", "--shards", "4"]);
    // The shard FNV-1a-64("page:home") mod 4 picks (docs/cluster.md, "Producers").
    assert_eq!(
        stdout(&sent).trim(),
        "sent page:home x1 to hits:{3}",
        "the line names the shard"
    );
    common::bin::wait_for("the hit counted", Duration::from_secs(30), || {
        let n: Option<i64> = redis::cmd("HGET")
            .arg("count:86400:page:home")
            .arg(common::unix_now() / 86400 * 86400)
            .query(&mut c)
            .unwrap();
        n.filter(|n| *n == 1)
    });
    assert_eq!(
        worker.terminate(Duration::from_secs(25)).code(),
        Some(0),
        "{}",
        worker.stderr()
    );
}

/// A worker run in-process through the library that meets an error no
/// retry fixes (the stream key holds a string) stops on its own, and its
/// trigger says why: the cause was only logged, which a program without a
/// tracing subscriber never saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_worker_stopped_by_a_fatal_error_tells_why() {
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let () = redis::cmd("SET")
        .arg("hits")
        .arg("a string")
        .query_async(&mut c)
        .await
        .unwrap();
    let (trigger, stop) = hitcount::model::shutdown::channel();
    let health = hitcount::service::health::Health::new(Duration::from_secs(60));
    let run = hitcount::service::shards::run(settings(&srv.url(), "lib"), health.clone(), stop);
    let ran = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the worker stops on its own");
    assert!(ran.is_ok(), "{ran:?}");
    let why = trigger.fatal().expect("a cause");
    assert!(why.contains("WRONGTYPE"), "{why}");
    // What the probes would answer, readable in-process too.
    assert_eq!(
        health.liveness_problem().as_deref(),
        Some("stopping on a fatal error")
    );
    assert!(!health.readiness_problems().is_empty());
}

/// Settings no retry fixes stop a worker with a hint instead of retrying
/// for ever behind "Redis unavailable": a database number over the
/// server's `databases`, `--cluster on` for a Redis that is no cluster
/// node, and a command its scripts call renamed away
/// (`rename-command XCLAIM ""`: the claim of a dead consumer's entries
/// failed again and again while /readyz said ok and those hits waited).
#[test]
fn settings_no_retry_fixes_stop_a_worker_saying_why() {
    let srv = server_with(ServerOptions {
        extra: vec![
            "rename-command XCLAIM \"\"".into(),
            // A user that may not SELECT another database.
            "user ro on >ro ~* +@read +ping +hello +client +info".into(),
        ],
        ..ServerOptions::default()
    });
    let url = srv.url();
    let listen = common::bin::free_addr();
    let db = format!("{url}/16");
    let (code, _, err) =
        run_within_a_minute("db16", &["worker", "--listen", &listen, "--redis-url", &db]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("DB index is out of range"), "{err}");
    assert!(err.contains("`databases` setting"), "{err}");
    // A SELECT Redis refuses in other words (a user without `select`, a
    // number past 2^31), which the client reports without a code: it was
    // retried for ever as "redis not connected".
    let no_select = format!("redis://ro:ro@127.0.0.1:{}/2", srv.port());
    let past = format!("{url}/99999999999");
    for (name, db) in [("no-select", &no_select), ("db-past-2^31", &past)] {
        let (code, _, err) =
            run_within_a_minute(name, &["worker", "--listen", &listen, "--redis-url", db]);
        assert_eq!(code, Some(1), "{name}: {err}");
        assert!(err.contains("refused to switch"), "{name}: {err}");
        assert!(err.contains("+select"), "{name}: {err}");
        assert!(!err.contains("ro:ro@"), "{name} hides the password: {err}");
    }
    // HITCOUNT_CLUSTER=on against a Redis that is no cluster: the cluster
    // manifests promise a fast failure (it was retried as an outage).
    let (code, _, err) = run_within_a_minute(
        "cluster-on",
        &[
            "worker",
            "--listen",
            &listen,
            "--cluster",
            "on",
            "--redis-url",
            &url,
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cluster support disabled"), "{err}");
    assert!(err.contains("leave it at auto"), "{err}");

    // A hit delivered to a consumer that died: a worker must claim it.
    let o = run_hitcount(&["hit", "cx", "--redis-url", &url]);
    assert!(o.status.success(), "{o:?}");
    let mut r = sync_conn(&url);
    let () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("hits")
        .arg("hitcount")
        .arg("0")
        .query(&mut r)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("hitcount")
        .arg("dead")
        .arg("STREAMS")
        .arg("hits")
        .arg(">")
        .query(&mut r)
        .unwrap();
    let (code, _, err) = run_within_a_minute(
        "renamed",
        &[
            "worker",
            "--listen",
            &listen,
            "--claim-idle-ms",
            "1000",
            "--redis-url",
            &url,
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("rename-command"), "{err}");
}

/// Workers of one stream with different precisions split the counts (each
/// hit counted at the precisions of whichever worker read it), and a
/// leader with fewer samples cleans samples the others still keep: the
/// first worker records its layout, a worker or `clean` with another is
/// refused naming both and the remedy, and the remedy works.
/// A worker started with another `HITCOUNT_PREFIX` than the workers that
/// read the stream is refused, naming them: its state and its counters
/// would be under its own prefix, so it would count apart and no worker
/// would fence it (2,000 hits were once counted as 1,952 and 48 under two
/// prefixes).
#[test]
fn a_worker_with_another_prefix_is_refused_and_no_count_is_split() {
    let srv = common::server();
    let url = srv.url();
    let listen = common::bin::free_addr();
    let mut first = common::bin::start_worker(&url, "first", &listen, &[]);
    // Hits flowing (ten seconds of them), so that `first` reads: Redis 7.0
    // finds a consumer blocked on an empty stream idle, not live.
    let sending = std::thread::spawn({
        let url = url.clone();
        move || {
            run_hitcount(&[
                "load",
                "--redis-url",
                &url,
                "--hits",
                "3000",
                "--rate",
                "300",
                "--names",
                "1",
            ])
        }
    });
    std::thread::sleep(Duration::from_secs(1));
    let err = refused_worker(&url, "other", &["--prefix", "app2:"]);
    for said in [
        "consumer(s) \"first\" read group hitcount of stream hits",
        "not registered under HITCOUNT_PREFIX 'app2:'",
        "this worker does not start",
    ] {
        assert!(err.contains(said), "{said}\n{err}");
    }
    let o = sending.join().unwrap();
    assert!(o.status.success(), "{o:?}");
    wait_counted(&url, 3000, &["86400"]);
    // No count under its prefix (its leader may have noted a cleaner pass).
    for pattern in ["app2:count:*", "app2:known:", "app2:stats:*"] {
        let theirs: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut sync_conn(&url))
            .unwrap();
        assert!(theirs.is_empty(), "{theirs:?}");
    }
    first.terminate(Duration::from_secs(30));
}

/// A worker given another `HITCOUNT_GROUP` than its deployment's (a typo)
/// is refused at start, even on an idle stream: both groups would get every
/// hit and count it twice into the same counters (the probe saw 2,000 for
/// 1,000). With another prefix too it counts apart, as a second deployment.
#[test]
fn a_worker_with_another_group_is_refused_and_nothing_is_counted_twice() {
    let srv = common::server();
    let url = srv.url();
    let listen = common::bin::free_addr();
    let mut first = common::bin::start_worker(&url, "first", &listen, &[]);
    let err = refused_worker(&url, "other", &["--group", "typo"]);
    for said in [
        "consumer group(s) \"hitcount\" of stream hits are read by workers of HITCOUNT_PREFIX ''",
        "this worker's group is \"typo\"",
        "this worker does not start",
    ] {
        assert!(err.contains(said), "{said}\n{err}");
    }
    let apart = common::bin::free_addr();
    let args = ["--group", "typo", "--prefix", "app2:"];
    let mut second = common::bin::start_worker(&url, "apart", &apart, &args);
    let o = run_hitcount(&[
        "load",
        "--redis-url",
        &url,
        "--hits",
        "1000",
        "--names",
        "1",
    ]);
    assert!(o.status.success(), "{o:?}");
    wait_counted(&url, 1000, &["86400"]);
    second.terminate(Duration::from_secs(30));
    first.terminate(Duration::from_secs(30));
    let mut c = sync_conn(&url);
    for key in ["count:86400:", "app2:count:86400:"] {
        let names: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{key}*"))
            .query(&mut c)
            .unwrap();
        let total: i64 = names
            .iter()
            .map(|k| {
                let v: Vec<i64> = redis::cmd("HVALS").arg(k).query(&mut c).unwrap();
                v.iter().sum::<i64>()
            })
            .sum();
        assert_eq!(total, 1000, "{key}: each deployment counts every hit once");
    }
}

/// A worker refused at start never leads: in the moments before its
/// refusal, its leader would clean with its own settings (here one sample,
/// deleting what the deployment's 120 keep). A consumer that read just now
/// makes it look twice before it decides, two seconds.
#[test]
fn a_worker_refused_at_start_never_cleans() {
    let srv = common::server();
    let url = srv.url();
    let listen = common::bin::free_addr();
    // The deployment's layout recorded; its leader stopped, the lease free.
    let mut first = common::bin::start_worker(&url, "first", &listen, &[]);
    assert_eq!(first.terminate(Duration::from_secs(30)).code(), Some(0));
    let old = common::unix_now() - 60;
    let mut c = sync_conn(&url);
    let _: () = redis::pipe()
        .hset("count:1:kept", old, 1)
        .zadd("known:", "1:kept", 0)
        .cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg("hits")
        .arg("hitcount")
        .arg("ghost")
        .query(&mut c)
        .unwrap();
    let err = refused_worker(&url, "other", &["--samples", "1", "--clean-interval", "1"]);
    assert!(err.contains("samples=1"), "{err}");
    assert!(!err.contains("became leader"), "{err}");
    let kept: Option<i64> = redis::cmd("HGET")
        .arg("count:1:kept")
        .arg(old)
        .query(&mut c)
        .unwrap();
    assert_eq!(kept, Some(1), "{err}");
}

#[test]
fn a_worker_with_another_layout_is_refused_and_no_count_is_split() {
    let srv = common::server();
    let url = srv.url();
    let listen = common::bin::free_addr();
    let mut first = common::bin::start_worker(&url, "first", &listen, &[]);
    let key = "hc:layout";
    let recorded_now = || -> String {
        redis::cmd("GET")
            .arg(key)
            .query(&mut sync_conn(&url))
            .unwrap()
    };
    let recorded = recorded_now();
    assert_eq!(
        recorded,
        "precisions=1,5,60,300,3600,18000,86400 samples=120 quantile_precisions=60,3600,86400"
    );
    // `hit --at` judges by the workers' recorded layout, not its flags.
    let day_ago = |days: i64| (common::unix_now() - days * 86_400).to_string();
    let at = |days, samples| {
        run_hitcount(&[
            "hit",
            "old",
            "--redis-url",
            &url,
            "--at",
            &day_ago(days),
            "--samples",
            samples,
        ])
    };
    let o = at(200, "1000");
    assert!(!o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("count it nowhere"),
        "{o:?}"
    );
    assert!(at(100, "1").status.success());
    let other = common::bin::free_addr();
    let err = refused_worker(&url, "other", &["--precisions", "1,7,60", "--samples", "5"]);
    for said in [
        "`precisions=1,7,60 samples=5 quantile_precisions=60`",
        &format!("`{recorded}` (recorded in {key})"),
        &format!("stop every worker, then delete {key}"),
    ] {
        assert!(err.contains(said), "{said}\n{err}");
    }
    let o = run_hitcount(&["clean", "--once", "--redis-url", &url, "--samples", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("samples=1 ") && err.contains("nothing was cleaned"),
        "{err}"
    );
    // Every hit counted at every precision of the one layout.
    load_and_count(&url, 300, &["1", "5", "60", "86400"]);
    // The remedy: every worker stopped, the record deleted.
    first.terminate(Duration::from_secs(30));
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query(&mut sync_conn(&url))
        .unwrap();
    let mut second = common::bin::start_worker(
        &url,
        "second",
        &other,
        &["--precisions", "1,7,60", "--samples", "5"],
    );
    assert_eq!(
        recorded_now(),
        "precisions=1,7,60 samples=5 quantile_precisions=60"
    );
    // A worker of another stream writes the same counters (and may lead
    // their cleaning): refused as well.
    let err = refused_worker(&url, "o", &["--stream", "other"]);
    assert!(err.contains("(recorded in hc:layout)"), "{err}");
    let third = common::bin::free_addr();
    // clean judges only what it cleans by, precisions and samples: workers
    // with their own quantile precisions (which clean has no setting for)
    // leave it free to clean.
    second.terminate(Duration::from_secs(30));
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query(&mut sync_conn(&url))
        .unwrap();
    let mut fourth =
        common::bin::start_worker(&url, "fourth", &third, &["--quantile-precisions", "60"]);
    fourth.terminate(Duration::from_secs(30));
    let o = run_hitcount(&["clean", "--once", "--redis-url", &url]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A running worker checks the stream's records again (every few seconds,
/// with its claims): a Redis restarted empty lets a producer record
/// another shard count (its hits then go where no worker reads, while the
/// workers' probes said ok), or a worker another layout. Each worker then
/// stops, saying why, instead of counting on silently.
#[test]
fn running_workers_stop_when_the_records_they_count_by_change() {
    let srv = common::server();
    let url = srv.url();
    for (key, other, said, extra) in [
        (
            "{hits}:hc:hitcount:shards",
            "1",
            "HITCOUNT_SHARDS is 2, but this stream's workers read it as 1",
            &["--shards", "2"][..],
        ),
        (
            "hc:layout",
            "precisions=60 samples=1 quantile_precisions=",
            "the workers of these counters count with `precisions=60 samples=1 quantile_precisions=`",
            &[][..],
        ),
    ] {
        let _: () = redis::cmd("FLUSHALL").query(&mut sync_conn(&url)).unwrap();
        let listen = common::bin::free_addr();
        let mut worker = common::bin::start_worker(&url, "w", &listen, extra);
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(other)
            .query(&mut sync_conn(&url))
            .unwrap();
        let status = worker
            .wait(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("still running after {key} changed"));
        let err = worker.stderr();
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(err.contains(said), "{said}\n{err}");
    }
}

/// A password sent to a Redis that has none is said so, in Redis' words,
/// not as a wrong password; a `rediss://` URL naming a plain Redis port
/// says that port may not speak TLS instead of only "timed out".
#[test]
fn a_password_or_tls_a_plain_redis_does_not_have_is_named() {
    let srv = server();
    let host = format!("127.0.0.1:{}", srv.port());
    let needless = format!("redis://:x@{host}");
    for cmd in [&["status"][..], &["hit", "x"]] {
        let args = [cmd, &["--redis-url", &needless]].concat();
        let (code, _, err) = run_within_a_minute("needless", &args);
        assert_one_line_failure(&format!("{cmd:?}"), code, &err);
        assert!(
            err.contains("called without any password configured"),
            "{cmd:?}: {err}"
        );
        assert!(err.contains("remove the password"), "{cmd:?}: {err}");
        assert!(!err.contains("WRONGPASS"), "{cmd:?}: {err}");
    }
    let listen = common::bin::free_addr();
    let (code, _, err) = run_within_a_minute(
        "needless-worker",
        &["worker", "--listen", &listen, "--redis-url", &needless],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("remove the password"), "{err}");
    let tls = format!("rediss://{host}");
    let (code, _, err) = run_within_a_minute("tls", &["status", "--redis-url", &tls]);
    assert_one_line_failure("rediss:// to a plain port", code, &err);
    assert!(err.contains("may not speak TLS"), "{err}");
}

/// A second live process under a worker's consumer name is refused at
/// start, naming the holder, with one shard and with several (with
/// several, each shard's name was registered apart: the two ran, counted
/// as one live member, and shared the shards wrong).
#[test]
fn a_second_worker_under_a_live_ones_name_is_refused() {
    for shards in ["1", "2"] {
        let srv = common::server();
        let url = srv.url();
        // The second never serves (it is refused first): any port will do.
        let (first, second) = (common::bin::free_addr(), "127.0.0.1:0".to_string());
        let extra = ["--shards", shards];
        let _live = common::bin::start_worker(&url, "dupe", &first, &extra);
        let mut args = vec![
            "worker",
            "--redis-url",
            &url,
            "--listen",
            &second,
            "--consumer",
            "dupe",
        ];
        args.extend(extra);
        let (code, _, err) = run_within_a_minute("dupe", &args);
        assert_eq!(code, Some(1), "{shards} shard(s):\n{err}");
        assert!(
            err.contains("consumer name \"dupe\" is in use by another live worker")
                && err.contains("HITCOUNT_CONSUMER (--consumer) or POD_NAME"),
            "{shards} shard(s):\n{err}"
        );
    }
}
