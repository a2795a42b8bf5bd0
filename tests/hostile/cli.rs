//! The command line as a careless newcomer meets it: nonsense values,
//! negative numbers, settings from the environment, help and usage lines.
//! Each value is refused before anything connects or starts, in one line
//! naming the setting (its variable when it came from the environment) and
//! its range; unrelated `HITCOUNT_*` variables of a deployment never make a
//! command fail.

use std::process::Stdio;

use std::time::Duration;

use crate::common::bin::{hitcount, wait_for, Child};
use crate::common::{server, sync_conn, unix_now};

/// What a finished run printed, and its exit code.
struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `hitcount ARGS` with `env`, pointed at a Redis that is not there (a free
/// port) unless `env` names one; its output. A run that has not ended
/// within a minute is killed and fails the test (a command that should
/// have refused its settings at once would run on).
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = hitcount();
    cmd.env(
        "REDIS_URL",
        format!("redis://127.0.0.1:{}", hitcount_lab::kit::free_port()),
    )
    .env("HITCOUNT_LISTEN", "127.0.0.1:0")
    .args(args)
    .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = Child::spawn("hitcount", cmd);
    let status = child.wait(Duration::from_secs(60));
    let (stdout, stderr) = (child.stdout(), child.stderr());
    child.kill();
    let Some(status) = status else {
        panic!("{args:?} {env:?} still running after a minute:\n{stderr}");
    };
    Output {
        code: status.code(),
        stdout,
        stderr,
    }
}

fn stderr(o: &Output) -> String {
    o.stderr.clone()
}

/// The first line of stderr that says something.
fn first_line(o: &Output) -> String {
    stderr(o)
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .to_string()
}

/// Asserts `args` (with `env`) is refused with exit `code`, its first line
/// holding every one of `words`, nothing started or connected.
fn refused(args: &[&str], env: &[(&str, &str)], code: i32, words: &[&str]) {
    let o = run(args, env);
    let err = stderr(&o);
    assert_eq!(o.code, Some(code), "{args:?} {env:?}: exit\n{err}");
    let line = first_line(&o);
    for w in words {
        assert!(line.contains(w), "{args:?} {env:?}: names {w:?}\n{err}");
    }
    for bad in [
        "unexpected argument",
        "panicked",
        "cannot connect",
        "serving",
    ] {
        assert!(!err.contains(bad), "{args:?} {env:?}: {bad}\n{err}");
    }
    if code == 1 {
        let lines = err.lines().filter(|l| !l.trim().is_empty()).count();
        assert_eq!(lines, 1, "{args:?} {env:?}: one line\n{err}");
    }
}

/// Newcomer finding 6: values that were clamped or taken without a word.
#[test]
fn nonsense_values_are_refused_naming_the_setting_and_its_range() {
    // Settings of a deployment: one line, exit 1, as every configuration error.
    refused(
        &["worker", "--carry-ms", "99999999"],
        &[],
        1,
        &["--carry-ms", "HITCOUNT_CARRY_MS", "0..=3600000"],
    );
    refused(
        &["worker", "--dead-maxlen", "0"],
        &[],
        1,
        &["HITCOUNT_DEAD_MAXLEN", "1..=100000000"],
    );
    refused(
        &["worker", "--window-ms", "0"],
        &[],
        1,
        &["HITCOUNT_WINDOW_MS", "1..=60000"],
    );
    for (flag, value, range) in [
        ("--read-count", "0", "1..=5000"),
        ("--block-ms", "0", "1..=300000"),
        ("--window-entries", "0", "1..=10000000"),
        ("--window-cells", "0", "1..=10000000"),
        ("--carry-cells", "100000001", "0..=100000000"),
        ("--claim-idle-ms", "999", "1000..=86400000"),
        ("--max-deliveries", "0", "1..=1000"),
        ("--consumer-idle-ms", "0", "1000..=2592000000"),
        ("--shutdown-timeout", "3601", "0..=3600"),
        ("--wait-replicas", "17", "0..=16"),
        ("--stuck-after", "0", "1..=86400"),
        ("--lease-ms", "299", "300..=600000"),
        ("--clean-interval", "0", "1..=86400"),
        ("--samples", "0", "1..=1000000000"),
        ("--shards", "257", "1..=256"),
        ("--precisions", "60,31536001", "1..=31536000"),
    ] {
        refused(&["worker", flag, value], &[], 1, &[flag, range]);
    }
    // A bucket of `top`: a start of a bucket kept, in unix seconds.
    let hour = unix_now() / 3600 * 3600;
    refused(
        &["top", "--bucket", "-1"],
        &[],
        2,
        &["--bucket", "0..=253402300799"],
    );
    refused(
        &["top", "--bucket", "9999999999999999"],
        &[],
        2,
        &["--bucket", "0..=253402300799"],
    );
    refused(
        &["top", "--bucket", &(hour + 5).to_string()],
        &[],
        1,
        &[
            "--bucket",
            "not the start of a 3600 s bucket",
            &hour.to_string(),
        ],
    );
    refused(
        &["top", "--bucket", &(hour + 3600).to_string()],
        &[],
        1,
        &["--bucket", "after now"],
    );
    refused(
        &["top", "--bucket", &(hour - 120 * 3600).to_string()],
        &[],
        1,
        &["--bucket", "older than the 3600 s precision keeps"],
    );
    // `get ''` as `hit ''`: no such counter can exist.
    refused(&["get", "", "-p", "60"], &[], 2, &["<NAME>", "empty"]);
    refused(&["hit", ""], &[], 2, &["<NAME>", "empty"]);
    // `import`: a file to read, a template it knows, a format it reads,
    // and no standard input (no import of it could be resumed).
    refused(
        &["import"],
        &[],
        2,
        &["required arguments were not provided"],
    );
    let template = ["import", "--name-template", "{query}", "x"];
    refused(
        &template,
        &[],
        2,
        &["--name-template", "not a name template"],
    );
    refused(
        &["import", "--format", "xml", "x"],
        &[],
        2,
        &["--format", "xml"],
    );
    refused(
        &["import", "-"],
        &[],
        1,
        &["standard input is not supported"],
    );
    // Half a client certificate, an empty file setting, a rate that is no
    // number, ingest tokens or precisions with a hole, an empty consumer
    // name: one line each, naming the setting.
    refused(
        &["status", "--redis-url", "rediss://127.0.0.1:1"],
        &[("HITCOUNT_REDIS_CERT", "/nonexistent")],
        1,
        &["HITCOUNT_REDIS_KEY", "needs its key"],
    );
    refused(
        &["status"],
        &[("HITCOUNT_REDIS_CA", "")],
        1,
        &["HITCOUNT_REDIS_CA", "an empty value is not accepted"],
    );
    refused(
        &["ingest"],
        &[("HITCOUNT_INGEST_RATE", "abc")],
        1,
        &["HITCOUNT_INGEST_RATE", "0..=4294967295"],
    );
    refused(
        &["ingest", "--listen", "127.0.0.1:0"],
        &[("HITCOUNT_INGEST_TOKENS", "a,")],
        1,
        &["HITCOUNT_INGEST_TOKENS", "empty token"],
    );
    refused(
        &["worker", "--listen", "127.0.0.1:0"],
        &[("HITCOUNT_CONSUMER", "")],
        1,
        &["HITCOUNT_CONSUMER", "must not be empty"],
    );
    refused(
        &["hit", "x"],
        &[("HITCOUNT_PRECISIONS", "60,,5")],
        1,
        &["HITCOUNT_PRECISIONS", "an empty item"],
    );
}

/// Newcomer finding 6: a `--carry-ms` in its range but longer than a
/// quarter of `--claim-idle-ms` is cut to that, and said at start.
#[test]
fn a_carry_cut_to_a_quarter_of_the_claim_idle_time_is_said() {
    let mut cmd = hitcount();
    cmd.env(
        "REDIS_URL",
        format!("redis://127.0.0.1:{}", hitcount_lab::kit::free_port()),
    )
    .args(["worker", "--listen", "127.0.0.1:0", "--carry-ms", "10000"])
    .stdin(Stdio::null());
    let mut worker = Child::spawn("carry-cut", cmd);
    wait_for("the warning", Duration::from_secs(30), || {
        let err = worker.stderr();
        err.contains("HITCOUNT_CARRY_MS is 10000 ms")
            .then_some(())
            .filter(|()| err.contains("cells wait at most 7500 ms"))
    });
    worker.kill();
}

/// Newcomer finding 7: `-1` is a value out of range, not an unknown flag.
#[test]
fn negative_numbers_get_the_range_error() {
    refused(
        &["hit", "x", "--count", "-1"],
        &[],
        2,
        &["--count", "1..=1000000000"],
    );
    refused(
        &["worker", "--samples", "-1"],
        &[],
        1,
        &["--samples", "HITCOUNT_SAMPLES", "1..=1000000000"],
    );
    refused(
        &["clean", "--once", "--wait", "-1"],
        &[],
        2,
        &["--wait", "0..=3600"],
    );
    refused(&["load", "--hits", "-5"], &[], 2, &["--hits", "from 1 up"]);
    refused(
        &["get", "x", "--precision", "-60"],
        &[],
        2,
        &["--precision", "1..=31536000"],
    );
    refused(&["top", "--limit", "-3"], &[], 2, &["--limit"]);
    // Words that start with a minus: the same range error, not "unexpected
    // argument '-i'".
    refused(
        &["hit", "x", "--value", "-inf"],
        &[],
        2,
        &["--value", "not a finite number"],
    );
    refused(
        &["hit", "x", "--at", "-inf"],
        &[],
        2,
        &["--at", "unix seconds"],
    );
}

/// Newcomer finding 8: the variable a value came from is named, with the
/// documented range; spaces in a list are taken; `--at` has a range.
#[test]
fn settings_from_the_environment_are_named_by_their_variable() {
    refused(
        &["get", "x", "-p", "60"],
        &[("HITCOUNT_PRECISIONS", "")],
        1,
        &["HITCOUNT_PRECISIONS=''", "at least one precision"],
    );
    let o = run(&["get", "x", "-p", "60"], &[("HITCOUNT_PRECISIONS", "")]);
    assert!(
        first_line(&o).starts_with("hitcount: invalid HITCOUNT_PRECISIONS"),
        "the variable first: {}",
        stderr(&o)
    );
    refused(
        &["status"],
        &[("HITCOUNT_SHARDS", "-1")],
        1,
        &["HITCOUNT_SHARDS='-1'", "1..=256"],
    );
    let o = run(&["status"], &[("HITCOUNT_SHARDS", "-1")]);
    assert!(!stderr(&o).contains("4294967295"), "{}", stderr(&o));
    refused(
        &["status"],
        &[("HITCOUNT_CLUSTER", "bogus")],
        1,
        &["HITCOUNT_CLUSTER='bogus'", "auto, on, off"],
    );
    // Given as a flag, the flag comes first, and the variable is named too.
    refused(
        &["status", "--shards", "0"],
        &[("HITCOUNT_SHARDS", "4")],
        1,
        &["invalid --shards / HITCOUNT_SHARDS", "1..=256"],
    );
    // Spaces around the precisions are taken: the command goes on to Redis.
    let o = run(
        &["get", "x", "-p", "3600"],
        &[("HITCOUNT_PRECISIONS", " 60, 3600")],
    );
    assert!(
        first_line(&o).contains("cannot connect"),
        "' 60, 3600' accepted: {}",
        stderr(&o)
    );
    // `--at` far beyond what is counted: a range, not a 301-digit number.
    refused(
        &["hit", "x", "--at", "1e300"],
        &[],
        2,
        &["--at", "0..=253402300799"],
    );
    assert!(stderr(&run(&["hit", "x", "--at", "1e300"], &[])).len() < 300);
    // A setting from the environment is not shown as a required flag.
    let o = run(&["load"], &[("HITCOUNT_STREAM", "s")]);
    let usage = stderr(&o);
    assert!(usage.contains("Usage: hitcount load"), "{usage}");
    assert!(
        !usage.contains("--redis-url <URL>") && !usage.contains("--stream <STREAM>"),
        "{usage}"
    );
}

/// Newcomer finding 10: each command's help shows the settings it uses.
#[test]
fn each_command_shows_the_settings_it_uses() {
    let help = |args: &[&str]| run(args, &[]).stdout;
    let hit = help(&["hit", "--help"]);
    for worker_only in [
        "--dead-maxlen",
        "--samples",
        "--group",
        "--window-ms",
        "--lease-ms",
    ] {
        assert!(
            !hit.contains(worker_only),
            "hit --help: {worker_only}\n{hit}"
        );
    }
    assert!(hit.lines().count() < 60, "hit --help is short:\n{hit}");
    let status = help(&["status", "--help"]);
    for unused in ["--lease-ms", "--clean-interval", "--samples", "--carry-ms"] {
        assert!(
            !status.contains(unused),
            "status --help: {unused}\n{status}"
        );
    }
    let worker = help(&["worker", "--help"]);
    let cluster = worker
        .split("--cluster <CLUSTER>")
        .nth(1)
        .unwrap_or_default();
    assert!(
        cluster.contains("several") && cluster.contains("cluster_enabled:1"),
        "--cluster tells auto fully:\n{worker}"
    );
    assert!(
        worker.contains("stats:*"),
        "--prefix names stats:*\n{worker}"
    );
}

/// Variables of a deployment that a command does not use never make it
/// fail; the settings it uses keep their flags and variables.
#[test]
fn unrelated_variables_are_ignored() {
    let srv = server();
    let url = srv.url();
    let worker_only = [
        ("REDIS_URL", url.as_str()),
        ("HITCOUNT_DEAD_MAXLEN", "0"),
        ("HITCOUNT_QUANTILE_PRECISIONS", "7"),
        ("HITCOUNT_CLEAN_INTERVAL", "0"),
        ("HITCOUNT_WINDOW_MS", "0"),
        ("HITCOUNT_READ_COUNT", "0"),
        ("HITCOUNT_STUCK_AFTER", "0"),
        ("HITCOUNT_LISTEN", "nowhere"),
    ];
    for args in [
        &["hit", "page:x", "--count", "2"][..],
        &["get", "page:x", "-p", "60"],
        &["top"],
        &["status"],
        &["load", "--hits", "10", "--names", "2"],
    ] {
        let o = run(args, &worker_only);
        assert_eq!(o.code, Some(0), "{args:?}: {}", stderr(&o));
    }
    let lease = [("REDIS_URL", url.as_str()), ("HITCOUNT_LEASE_MS", "0")];
    let o = run(&["status"], &lease);
    assert!(
        o.code == Some(0),
        "status ignores the lease: {}",
        stderr(&o)
    );
    // Used settings keep their flags and variables.
    let o = run(
        &["hit", "page:y", "--stream", "other", "--shards", "1"],
        &[("REDIS_URL", url.as_str()), ("HITCOUNT_PREFIX", "app:")],
    );
    assert_eq!(o.code, Some(0), "{}", stderr(&o));
    let o = run(
        &["clean", "--once", "--lease-ms", "5000", "--wait", "0"],
        &[("REDIS_URL", url.as_str())],
    );
    assert_eq!(o.code, Some(0), "{}", stderr(&o));
}

/// An argument that is not UTF-8 is refused by the parser (exit 2, one
/// error naming it), in text and in JSON logs: never a panic while the
/// command line is read for its log format.
#[test]
fn an_argument_that_is_not_utf8_is_refused_not_a_panic() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"page:\xff");
    for (lead, json) in [(&[][..], false), (&["--log-format", "json"][..], true)] {
        let mut cmd = hitcount();
        cmd.args(lead)
            .arg("get")
            .arg(bad)
            .args(["--precision", "60"])
            .stdin(Stdio::null());
        let mut child = Child::spawn("hitcount", cmd);
        let status = child.wait(Duration::from_secs(60)).expect("it ends");
        let err = child.stderr();
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains("invalid UTF-8"), "{err}");
        assert_eq!(err.trim_start().starts_with('{'), json, "{err}");
    }
}

/// A name too long to count is refused in one short line that says why,
/// without repeating it (clap's own error printed all 5,000 bytes), by
/// `hit` and by `get`; an empty one likewise.
#[test]
fn a_name_too_long_is_refused_without_being_echoed() {
    let long = "n".repeat(5000);
    for (args, words) in [
        (
            vec!["hit", long.as_str()],
            "5000 bytes is longer than the 4096 bytes a name may have",
        ),
        (
            vec!["get", long.as_str()],
            "5000 bytes is longer than the 4096 bytes a counted name may have",
        ),
        (vec!["hit", ""], "a hit's name cannot be empty"),
    ] {
        let o = run(&args, &[]);
        assert_eq!(o.code, Some(2), "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(words), "{}", o.stderr);
        assert!(
            o.stderr.len() < 300,
            "the name echoed: {} bytes",
            o.stderr.len()
        );
    }
}

/// A name a producer wrote with control characters (an escape sequence
/// that would recolour a terminal) is printed by `top` escaped, never as
/// the raw bytes; in `--json` too, where C1 controls and a right-to-left
/// override used to be printed raw.
#[test]
fn top_prints_a_hostile_name_escaped() {
    let srv = server();
    let url = srv.url();
    let bucket = unix_now().div_euclid(3600) * 3600;
    let name = "evil\u{1b}[31mred\u{7}";
    // A C1 control (an 8-bit CSI) and a right-to-left override.
    let other = "odd\u{9b}2J\u{202e}txt";
    // Format characters that print as nothing: a soft hyphen, a bidi mark.
    let hidden = "pa\u{ad}ge\u{61c}";
    let mut c = sync_conn(&url);
    for (n, count) in [(name, 5), (other, 4), (hidden, 3)] {
        redis::pipe()
            .cmd("HSET")
            .arg(format!("count:3600:{n}"))
            .arg(bucket)
            .arg(count)
            .cmd("ZADD")
            .arg("known:")
            .arg(0)
            .arg(format!("3600:{n}"))
            .query::<()>(&mut c)
            .unwrap();
    }
    let bucket = bucket.to_string();
    let top = |json: &[&str]| {
        let args = [&["top", "--precision", "3600", "--bucket", &bucket], json].concat();
        let o = run(&args, &[("REDIS_URL", &url)]);
        assert_eq!(o.code, Some(0), "{}", o.stderr);
        for raw in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}', '\u{ad}', '\u{61c}'] {
            assert!(!o.stdout.contains(raw), "{raw:?} in {:?}", o.stdout);
        }
        o.stdout
    };
    let text = top(&[]);
    assert!(text.contains("evil\\u{1b}[31mred\\u{7}"), "{text}");
    assert!(text.contains("odd\\u{9b}2J\\u{202e}txt"), "{text}");
    assert!(text.contains("pa\\u{ad}ge\\u{61c}"), "{text}");
    // `get` of a name with nothing saying so, the name escaped too.
    let o = run(&["get", name, "--precision", "60"], &[("REDIS_URL", &url)]);
    assert!(
        o.stdout.contains("no samples for evil\\u{1b}"),
        "{:?}",
        o.stdout
    );
    assert!(!o.stdout.contains('\u{1b}'), "{:?}", o.stdout);
    // As JSON: written `\uXXXX`, read back as the names themselves.
    let json = top(&["--json"]);
    assert!(json.contains(r"odd\u009b2J\u202etxt"), "{json}");
    let top: serde_json::Value = serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = top["counters"]
        .as_array()
        .unwrap_or_else(|| panic!("{top}"))
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [name, other, hidden], "{top}");
}
