//! What a new user meets first: the real binary against a real redis-server,
//! fed nonsense flags, wrong passwords, missing permissions, a closed pipe,
//! a second demo, events the worker would not count, a precision that is not
//! configured, and JSON logs. Every failure must be one clear line, never a
//! panic, a hang or a "sent" that counts nowhere.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};
use std::time::Duration;

use common::bin::{hitcount, run_hitcount, Child};
use common::*;
use hitcount::embedded::ServerOptions;

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

/// Finding 7: the seeds' Python figure is quoted, not passed off as
/// measured, and no ratio divides by it.
#[test]
fn bench_quotes_the_seeds_python_figure_without_dividing_by_it() {
    let srv = server();
    let url = srv.url();
    let o = run_hitcount(&[
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

/// Finding 8: `clean --json` and `status --json` give the last pass in the
/// same shape: `trimmed` is the number of entries, `min_id` beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_and_status_json_give_the_pass_in_one_shape() {
    let srv = server();
    let url = srv.url();
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
