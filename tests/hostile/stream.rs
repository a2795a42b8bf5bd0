//! The stream as others leave it: an entry ID far in the future, a stream
//! whose last possible ID is used, a group whose lag Redis misreports after
//! a restart from its AOF, a group destroyed under running workers,
//! producers and workers with different shard counts.

use std::process::Stdio;
use std::time::Duration;

use crate::common::bin::{self, hitcount, Child};
use crate::common::{server, server_with, unix_now};
use hitcount_lab::kit::ServerOptions;

use crate::redis;

/// `hitcount ARGS` on `url`: exit code, stdout, stderr; a run still going
/// after a minute fails the test (a hang is the bug here).
fn run(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = hitcount();
    cmd.args(args).env("REDIS_URL", url).stdin(Stdio::null());
    let mut child = Child::spawn(args[0], cmd);
    let status = child
        .wait(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("hitcount {args:?} still running after 60 s"));
    (status.code(), child.stdout(), child.stderr())
}

/// A worker's metric, scraped from `/metrics` on `listen`.
fn metric(listen: &str, series: &str) -> Option<f64> {
    let (_, body) = bin::http_get(listen, "/metrics")?;
    bin::metric_value(&body, series)
}

/// Point 4: one `XADD` with an explicit ID ahead (an hour, or the year
/// 2286) makes every later ID at least as high. Hits without `ts` are
/// counted at Redis' clock then (counted in a metric, warned about once),
/// not an hour ahead nor in the year 2286; a `ts` is judged against Redis'
/// clock, not the entry ID.
#[test]
fn an_entry_id_far_ahead_moves_no_hit_out_of_today() {
    let srv = server();
    let url = srv.url();
    let listen = bin::free_addr();
    let mut worker = bin::start_worker(&url, "w", &listen, &[]);
    let mut c = redis(&url);
    let now = unix_now();
    let day = now / 86_400 * 86_400;
    let add = |c: &mut redis::Connection, id: &str, fields: &[(&str, String)]| {
        let mut cmd = redis::cmd("XADD");
        cmd.arg("hits").arg(id);
        for (f, v) in fields {
            cmd.arg(*f).arg(v);
        }
        cmd.query::<String>(c).unwrap()
    };
    // An hour ahead (less than a day: once counted an hour ahead, every
    // later hit with it, without a word).
    let hour = (now + 3_600) * 1000;
    add(&mut c, &format!("{hour}-0"), &[("name", "soon:x".into())]);
    for _ in 0..3 {
        let id = add(&mut c, "*", &[("name", "soon:x".into())]);
        assert!(id.starts_with(&format!("{hour}-")), "{id}");
    }
    add(&mut c, "9999999999999-0", &[("name", "evil:x".into())]);
    for _ in 0..3 {
        let id = add(&mut c, "*", &[("name", "after:x".into())]);
        assert!(id.starts_with("9999999999999-"), "{id}");
    }
    // Two days ahead of Redis' clock: dead-lettered, though within a day
    // of its entry ID.
    add(
        &mut c,
        "*",
        &[
            ("name", "ahead:x".into()),
            ("ts", (now + 2 * 86_400).to_string()),
        ],
    );
    // A ts of now counts now, whatever the ID.
    add(
        &mut c,
        "*",
        &[("name", "stated:x".into()), ("ts", now.to_string())],
    );
    // The largest ID Redis gives: as far ahead, not a bad ID.
    add(
        &mut c,
        "18446744073709551615-0",
        &[("name", "max:x".into())],
    );
    for (name, n) in [("soon:x", 4), ("after:x", 3), ("stated:x", 1), ("max:x", 1)] {
        bin::wait_for(name, Duration::from_secs(30), || {
            let got: Option<i64> = redis::cmd("HGET")
                .arg(format!("count:86400:{name}"))
                .arg(day)
                .query(&mut c)
                .unwrap();
            got.filter(|got| *got == n)
        });
    }
    for name in ["soon:x", "evil:x", "after:x", "max:x"] {
        let buckets: Vec<String> = redis::cmd("HKEYS")
            .arg(format!("count:86400:{name}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(buckets, vec![day.to_string()], "{name} counted today only");
        // And now, not an hour ahead.
        let seconds: Vec<i64> = redis::cmd("HKEYS")
            .arg(format!("count:1:{name}"))
            .query(&mut c)
            .unwrap();
        let latest = unix_now() + 60;
        assert!(seconds.iter().all(|&t| t <= latest), "{name}: {seconds:?}");
    }
    let dead: redis::Value = redis::cmd("XRANGE")
        .arg("hits:dead")
        .arg("-")
        .arg("+")
        .query(&mut c)
        .unwrap();
    let dead = crate::common::plain::entry_list(&dead)
        .iter()
        .map(|e| {
            e.pairs()
                .map(|(f, v)| {
                    (
                        String::from_utf8_lossy(f).into_owned(),
                        String::from_utf8_lossy(v).into_owned(),
                    )
                })
                .collect::<std::collections::BTreeMap<_, _>>()
        })
        .collect::<Vec<_>>();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "future_timestamp");
    assert_eq!(dead[0]["name"], "ahead:x");
    let exists: i64 = redis::cmd("EXISTS")
        .arg("count:86400:ahead:x")
        .query(&mut c)
        .unwrap();
    assert_eq!(exists, 0);
    // The four soon:x, evil:x, the three after:x and max:x; not the hits
    // with a ts.
    bin::wait_for("the metric counts 9", Duration::from_secs(30), || {
        metric(&listen, "hitcount_hits_future_id_total").filter(|n| *n >= 9.0)
    });
    assert_eq!(
        metric(&listen, "hitcount_hits_future_id_total"),
        Some(9.0),
        "{}",
        worker.stderr()
    );
    let warnings = worker
        .stderr()
        .matches("more than a minute ahead of Redis' clock")
        .count();
    assert_eq!(warnings, 1, "warned once:\n{}", worker.stderr());
    assert_eq!(worker.terminate(Duration::from_secs(25)).code(), Some(0));
}

/// Point 4: once the stream's last ID is the largest possible, Redis
/// refuses every `XADD *`: `hit`, `load` and `import` say so in one line and exit 1,
/// instead of printing "sent" or retrying for ever.
#[test]
fn hit_load_and_import_report_a_stream_that_takes_no_more_entries() {
    let srv = server();
    let url = srv.url();
    let mut c = redis(&url);
    let last = "18446744073709551615-18446744073709551615";
    let _: String = redis::cmd("XADD")
        .arg("hits")
        .arg(last)
        .arg("name")
        .arg("x")
        .query(&mut c)
        .unwrap();
    for args in [
        vec!["hit", "page:a"],
        vec!["hit", "page:a", "--count", "3"],
        vec!["load", "--hits", "5000", "--names", "5"],
    ] {
        let (code, out, err) = run(&url, &args);
        assert_eq!(code, Some(1), "{args:?}: {out}\n{err}");
        assert!(!out.contains("sent"), "{args:?}: {out}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line\n{err}");
        for want in ["exhausted the last possible ID", "hits", "--stream"] {
            assert!(err.contains(want), "{args:?}: {want}\n{err}");
        }
        for bad in ["Pipeline failure", "script:", "panicked", "could not reach"] {
            assert!(!err.contains(bad), "{args:?}: {bad}\n{err}");
        }
    }
    // `import` alike (it appends by a script), and it does not ask to be
    // run again: no run can append.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hits.ndjson");
    std::fs::write(&file, "{\"name\":\"page:a\"}\n".repeat(300)).unwrap();
    let (code, out, err) = run(
        &url,
        &["import", "--format", "ndjson", file.to_str().unwrap()],
    );
    assert_eq!(code, Some(1), "{out}\n{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line\n{err}");
    for want in ["exhausted the last possible ID", "hits", "--stream"] {
        assert!(err.contains(want), "{want}\n{err}");
    }
    for bad in [
        "Pipeline failure",
        "script:",
        "panicked",
        "run the same command again",
    ] {
        assert!(!err.contains(bad), "{bad}\n{err}");
    }
    let len: i64 = redis::cmd("XLEN").arg("hits").query(&mut c).unwrap();
    assert_eq!(len, 1, "nothing was added");
}

/// Newcomer 2: after a restart from the AOF, Redis 7.0 may keep a stale
/// `entries-read` and report a lag of thousands for a group whose
/// last-delivered ID is the stream's last one, for good (a SIGKILL under
/// load left `lag 72898` so; here the AOF ends with the same stale
/// counter, so the state is the same every run). The worker's gauge and
/// `status` say 0.
#[test]
fn a_drained_group_shows_no_lag_after_a_restart_from_the_aof() {
    let mut srv = server_with(ServerOptions {
        appendonly: true,
        ..ServerOptions::default()
    });
    let url = srv.url();
    let listen = bin::free_addr();
    let mut worker = bin::start_worker(&url, "w", &listen, &[]);
    bin::run_ok(&url, &["load", "--hits", "3000", "--names", "7"]);
    let mut c = redis(&url);
    let drained = |c: &mut redis::Connection| {
        let (groups, stream): (redis::Value, redis::Value) = redis::pipe()
            .cmd("XINFO")
            .arg("GROUPS")
            .arg("hits")
            .cmd("XINFO")
            .arg("STREAM")
            .arg("hits")
            .query(c)
            .unwrap();
        use crate::common::plain::{info_fields, info_number, info_text};
        let redis::Value::Array(groups) = groups else {
            panic!("XINFO GROUPS: {groups:?}")
        };
        let g = info_fields(&groups[0]);
        let s = info_fields(&stream);
        let drained = info_number(&g, "pending") == Some(0)
            && info_text(&g, "last-delivered-id") == info_text(&s, "last-generated-id");
        (drained, info_number(&g, "lag"))
    };
    bin::wait_for("the load drained", Duration::from_secs(60), || {
        drained(&mut c).0.then_some(())
    });
    drop(c);
    // What the AOF holds after such a restart: the group's read counter
    // far behind its last-delivered ID.
    srv.stop();
    let aof_dir = srv.dir().join("appendonlydir");
    let incr = std::fs::read_dir(&aof_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .max()
        .expect("an incremental AOF file");
    let stale = [
        "XGROUP",
        "SETID",
        "hits",
        "hitcount",
        "$",
        "ENTRIESREAD",
        "1",
    ];
    let mut resp = format!("*{}\r\n", stale.len());
    for a in stale {
        resp.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&incr)
        .unwrap()
        .write_all(resp.as_bytes())
        .unwrap();
    srv.restart().unwrap();
    let mut c = redis(&url);
    let (is_drained, raw_lag) = drained(&mut c);
    assert!(is_drained, "still drained after the restart");
    assert_eq!(raw_lag, Some(2999), "Redis reports the stale lag");
    // The worker's sampler reads the group every SAMPLE_EVERY: its first
    // read after the restart may fail on the old connection, the next one
    // reads the group as the restart left it.
    let sampled = crate::common::plain::SAMPLE_EVERY * 2 + Duration::from_secs(2);
    std::thread::sleep(sampled);
    worker.assert_running();
    assert_eq!(metric(&listen, "hitcount_group_lag_entries"), Some(0.0));
    assert_eq!(
        metric(&listen, "hitcount_shard_lag_entries{shard=\"0\"}"),
        Some(0.0)
    );
    let out = bin::run_ok(&url, &["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("lag 0 (estimate)"), "{text}");
    let out = bin::run_ok(&url, &["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["groups"][0]["lag"], 0, "{status}");
    assert_eq!(status["shards"][0]["lag"], 0, "{status}");
    assert_eq!(worker.terminate(Duration::from_secs(25)).code(), Some(0));
}

/// Newcomer 1: `hit` and `load` with one shard, then a worker with 16:
/// every hit would stay unread. The first to come records the count; a
/// worker with another is refused naming both; with nothing recorded
/// (a deployment from before the record) a count that strands entries is
/// refused naming them; a worker and `status` warn about entries in
/// streams the count in use leaves unread.
#[test]
fn producers_and_workers_agree_on_the_shard_count() {
    let srv = server();
    let url = srv.url();
    let mut c = redis(&url);
    bin::run_ok(&url, &["hit", "lost:a", "--count", "5", "--stream", "fr"]);
    bin::run_ok(
        &url,
        &["load", "--hits", "1000", "--names", "5", "--stream", "fr"],
    );
    let key = "{fr}:hc:hitcount:shards";
    let recorded: Option<String> = redis::cmd("GET").arg(key).query(&mut c).unwrap();
    assert_eq!(recorded.as_deref(), Some("1"), "the first producer records");
    let refused = |c: &mut redis::Connection, want: &[&str]| {
        let listen = bin::free_addr();
        let args = [
            "worker", "--stream", "fr", "--shards", "16", "--listen", &listen,
        ];
        let (code, _, err) = run(&url, &args);
        assert_eq!(code, Some(1), "{err}");
        let last = err.lines().last().unwrap_or_default();
        for w in want {
            assert!(last.contains(w), "{w}: {last}");
        }
        let len: i64 = redis::cmd("XLEN").arg("fr").query(c).unwrap();
        assert_eq!(len, 1001, "nothing read");
    };
    refused(
        &mut c,
        &["HITCOUNT_SHARDS is 16", "as 1 shard(s)", key, "same count"],
    );
    // As if the stream came from before the record.
    let _: () = redis::cmd("DEL").arg(key).query(&mut c).unwrap();
    refused(&mut c, &["HITCOUNT_SHARDS is 16", "1001 entries in fr"]);
    let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut c).unwrap();
    assert_eq!(exists, 0, "a count that strands entries is not recorded");
    let out = hitcount()
        .args(["status", "--stream", "fr", "--shards", "16", "--json"])
        .env("REDIS_URL", &url)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status["unread"],
        serde_json::json!([{"stream": "fr", "entries": 1001}]),
        "{status}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1001 entries in fr are not read"), "{err}");
    // The count they were sent with reads them all.
    let listen = bin::free_addr();
    let mut w1 = bin::start_worker(&url, "w1", &listen, &["--stream", "fr"]);
    let day = unix_now() / 86_400 * 86_400;
    bin::wait_for("lost:a counted", Duration::from_secs(30), || {
        let n: Option<i64> = redis::cmd("HGET")
            .arg("count:86400:lost:a")
            .arg(day)
            .query(&mut c)
            .unwrap();
        n.filter(|n| *n == 5)
    });
    // Hits sent to a shard stream that one shard leaves unread.
    let _: String = redis::cmd("XADD")
        .arg("fr:{3}")
        .arg("*")
        .arg("name")
        .arg("stray")
        .query(&mut c)
        .unwrap();
    let listen2 = bin::free_addr();
    let mut w2 = bin::start_worker(&url, "w2", &listen2, &["--stream", "fr"]);
    bin::wait_for("the worker's warning", Duration::from_secs(30), || {
        w2.stderr()
            .contains("1 entries in fr:{3} are not read with HITCOUNT_SHARDS=1")
            .then_some(())
    });
    // The way to count them that the shard-count rule allows (workers with
    // another count are refused while this one is recorded).
    let said = w2.stderr();
    assert!(
        said.contains("drain the stream with this count, delete the recorded count"),
        "{said}"
    );
    let out = bin::run_ok(&url, &["status", "--stream", "fr"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("unread: 1 entries in fr:{3} are not read with 1 shard(s)"),
        "{text}"
    );
    for w in [&mut w1, &mut w2] {
        assert_eq!(w.terminate(Duration::from_secs(25)).code(), Some(0));
    }
}

/// Appends `n` plain hits of `name` in one pipeline.
fn send_hits(r: &mut redis::Connection, name: &str, n: usize) {
    let mut pipe = redis::pipe();
    for _ in 0..n {
        pipe.cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("name")
            .arg(name)
            .ignore();
    }
    let _: () = pipe.query(r).unwrap();
}

/// The hits of `name` counted at the day precision.
fn day_count(r: &mut redis::Connection, name: &str) -> i64 {
    let counts: Vec<i64> = redis::cmd("HVALS")
        .arg(format!("count:86400:{name}"))
        .query(r)
        .unwrap();
    counts.iter().sum()
}

/// Whether the group has read and acknowledged every entry: the counts are
/// final.
fn settled(r: &mut redis::Connection) -> bool {
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("hits")
        .query(r)
        .unwrap_or_default();
    groups.first().is_some_and(|g| {
        g.get("lag") == Some(&redis::Value::Int(0))
            && g.get("pending") == Some(&redis::Value::Int(0))
    })
}

/// Stops `worker`, which must stop cleanly and have logged no outage:
/// Redis never went away (what Redis lost under it was logged as one).
fn stops_without_an_outage(mut worker: bin::Child) {
    let log = worker.stderr();
    assert!(!log.contains("Redis unavailable"), "{log}");
    assert_eq!(worker.terminate(Duration::from_secs(30)).code(), Some(0));
}

/// `XGROUP DESTROY` under a running worker: the group is made again after
/// the newest entry the worker committed, so what it counted is not counted
/// again (it was made again from the stream's start: every entry still in
/// the stream counted twice).
#[test]
fn a_group_destroyed_under_a_worker_counts_nothing_twice() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let send = |r: &mut redis::Connection, n: usize| send_hits(r, "g", n);
    let counted = |r: &mut redis::Connection| day_count(r, "g");
    let listen = bin::free_addr();
    let mut worker = bin::start_worker(&url, "w1", &listen, &[]);
    send(&mut r, 100);
    bin::wait_for("the first hits counted", Duration::from_secs(60), || {
        (counted(&mut r) == 100 && settled(&mut r)).then_some(())
    });
    let _: () = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg("hits")
        .arg("hitcount")
        .query(&mut r)
        .unwrap();
    send(&mut r, 100);
    bin::wait_for(
        "the group made again and read",
        Duration::from_secs(60),
        || {
            worker.assert_running();
            (counted(&mut r) >= 200 && settled(&mut r)).then_some(())
        },
    );
    assert_eq!(counted(&mut r), 200, "{}", worker.stderr());
    assert!(worker.stderr().contains("the consumer group was gone"));
    // The NOGROUP or UNBLOCKED that tells of the deletion is no outage.
    stops_without_an_outage(worker);
}

/// `SCRIPT FLUSH` under a running worker: it loads its scripts again on a
/// new connection and counts every hit once, without calling it an outage.
#[test]
fn flushed_scripts_are_loaded_again_and_nothing_counts_twice() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let send = |r: &mut redis::Connection| send_hits(r, "sf", 100);
    let counted = |r: &mut redis::Connection| day_count(r, "sf");
    let mut worker = bin::start_worker(&url, "w1", &bin::free_addr(), &[]);
    send(&mut r);
    bin::wait_for("the first hits counted", Duration::from_secs(60), || {
        (counted(&mut r) == 100).then_some(())
    });
    for _ in 0..3 {
        let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut r).unwrap();
        send(&mut r);
    }
    bin::wait_for("every hit counted", Duration::from_secs(60), || {
        worker.assert_running();
        (counted(&mut r) >= 400 && settled(&mut r)).then_some(())
    });
    assert_eq!(counted(&mut r), 400, "{}", worker.stderr());
    stops_without_an_outage(worker);
}

/// A stream that took the last possible id, drained and then deleted, as
/// the README advises: the worker makes the group again from the new
/// stream's start, not after the old stream's newest id (which no new
/// entry would ever pass: counting stopped for good).
#[test]
fn a_stream_deleted_after_the_last_possible_id_counts_its_new_entries() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let counted = day_count;
    let listen = bin::free_addr();
    let mut worker = bin::start_worker(&url, "w1", &listen, &[]);
    let _: String = redis::cmd("XADD")
        .arg("hits")
        .arg("18446744073709551615-18446744073709551615")
        .arg("name")
        .arg("last")
        .query(&mut r)
        .unwrap();
    bin::wait_for("the last entry counted", Duration::from_secs(60), || {
        (counted(&mut r, "last") == 1).then_some(())
    });
    let _: () = redis::cmd("DEL").arg("hits").query(&mut r).unwrap();
    for _ in 0..3 {
        let _: String = redis::cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("name")
            .arg("after")
            .query(&mut r)
            .unwrap();
    }
    bin::wait_for(
        "the new stream's hits counted",
        Duration::from_secs(60),
        || {
            worker.assert_running();
            (counted(&mut r, "after") == 3).then_some(())
        },
    );
    assert!(
        worker
            .stderr()
            .contains("the stream was deleted and made again"),
        "{}",
        worker.stderr()
    );
    assert_eq!(worker.terminate(Duration::from_secs(30)).code(), Some(0));
}

/// Pending entries deleted from the stream by another client (an `XTRIM`
/// while a stopped worker held them, or its own ones across a restart)
/// are lost: the worker says so once, counts them in
/// `hitcount_events_gone_total`, and counts every hit still there once.
/// They left the pending list without a word (a claim of a deleted entry
/// drops it from the list and returns nothing).
#[test]
fn pending_entries_deleted_by_another_client_are_reported_lost() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("hits")
        .arg("hitcount")
        .arg("0")
        .arg("MKSTREAM")
        .query(&mut r)
        .unwrap();
    // 30 read by a consumer that stopped, 20 by this worker's own name
    // before a restart: pending, then trimmed away.
    send_hits(&mut r, "gone", 50);
    for (consumer, n) in [("stopped", 30), ("w", 20)] {
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("hitcount")
            .arg(consumer)
            .arg("COUNT")
            .arg(n)
            .arg("STREAMS")
            .arg("hits")
            .arg(">")
            .query(&mut r)
            .unwrap();
    }
    let _: i64 = redis::cmd("XTRIM")
        .arg("hits")
        .arg("MAXLEN")
        .arg(0)
        .query(&mut r)
        .unwrap();
    send_hits(&mut r, "kept", 10);
    let listen = bin::free_addr();
    let worker = bin::start_worker(&url, "w", &listen, &["--claim-idle-ms", "1000"]);
    bin::wait_for("all 50 reported", Duration::from_secs(60), || {
        metric(&listen, "hitcount_events_gone_total").filter(|n| *n >= 50.0)
    });
    bin::wait_for("the rest counted", Duration::from_secs(60), || {
        (day_count(&mut r, "kept") == 10 && settled(&mut r)).then_some(())
    });
    assert_eq!(metric(&listen, "hitcount_events_gone_total"), Some(50.0));
    assert_eq!(day_count(&mut r, "gone"), 0);
    let log = worker.stderr();
    assert!(
        log.contains("deleted from the stream before they were counted"),
        "{log}"
    );
    stops_without_an_outage(worker);
}
