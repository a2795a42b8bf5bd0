//! Silence where a person wants a word, and docs that said another thing
//! than the code: Ctrl-C during `load` and during an `import` of a line
//! that never ends, `status` of a stream that does not
//! exist, `clean --once` beside a live leader, the demo's suggestions, and
//! an entry that mixes the two wire forms.

use std::time::{Duration, Instant};

use crate::common::bin::{free_addr, hitcount, run_hitcount, start_worker, wait_for, Child};
use crate::common::server;
use crate::redis;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Ctrl-C during a rate-limited load: it stops sending, and says how many
/// hits (and entries) reached the stream, which is what the stream holds.
#[test]
fn load_interrupted_by_ctrl_c_says_what_it_sent() {
    let srv = server();
    let url = srv.url();
    let mut c = redis(&url);
    let mut cmd = hitcount();
    cmd.args(["load", "--hits", "1000000", "--rate", "200"])
        .args(["--names", "10", "--redis-url", &url]);
    let mut load = Child::spawn("load", cmd);
    wait_for("hits in the stream", Duration::from_secs(60), || {
        load.assert_running();
        let n: u64 = redis::cmd("XLEN").arg("hits").query(&mut c).unwrap();
        (n >= 100).then_some(())
    });
    load.signal(libc::SIGINT);
    let status = load
        .wait(Duration::from_secs(30))
        .expect("load exits after Ctrl-C");
    let out = load.stdout();
    assert!(status.success(), "{status:?}\n{out}\n{}", load.stderr());
    let in_stream: u64 = redis::cmd("XLEN").arg("hits").query(&mut c).unwrap();
    let want = format!(
        "interrupted: sent {in_stream} of 1000000 hits ({in_stream} entries) over 10 names to hits"
    );
    assert!(out.contains(&want), "want {want:?} in:\n{out}");
    assert!(!out.contains("not confirmed"), "{out}");
}

/// `import /dev/zero`: a line that never ends. Ctrl-C stops it: the
/// process says where it stood and exits (before, the thread reading the
/// endless line kept the process alive, spinning, after the message).
#[test]
fn an_import_of_a_line_that_never_ends_stops_on_ctrl_c() {
    let srv = server();
    // A sparse file of a terabyte of NULs: a line that does not end in any
    // test's time.
    let dir = tempfile::tempdir().unwrap();
    let endless = dir.path().join("endless.log");
    std::fs::File::create(&endless)
        .and_then(|f| f.set_len(1 << 40))
        .unwrap();
    let mut cmd = hitcount();
    cmd.arg("import")
        .arg(&endless)
        .args(["--redis-url", &srv.url()]);
    let mut import = Child::spawn("import", cmd);
    std::thread::sleep(Duration::from_secs(1));
    import.assert_running();
    import.signal(libc::SIGINT);
    let status = import
        .wait(Duration::from_secs(30))
        .expect("import exits after Ctrl-C");
    let err = import.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("endless.log: interrupted after line 0"),
        "{err}"
    );
}

/// A pipe (`import <(zcat …)`, a FIFO) or a device is refused in one line:
/// the import reads a file from its start three times (its kind, its
/// identity, its lines), so a pipe lost its first bytes to the first two,
/// and the counts with them.
#[test]
fn an_import_of_a_pipe_or_a_device_is_refused_not_cut() {
    let srv = server();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("lines.fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    for path in [fifo.as_path(), std::path::Path::new("/dev/zero")] {
        let mut cmd = hitcount();
        cmd.arg("import")
            .arg(path)
            .args(["--redis-url", &srv.url()]);
        let mut import = Child::spawn("import", cmd);
        let status = import
            .wait(Duration::from_secs(30))
            .expect("refused at once");
        let err = import.stderr();
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
}

/// `status --stream typo` beside a real deployment: one line saying the
/// stream does not exist, not "0 entries, no consumer group"; exit 0 (it
/// only reads), and `exists: false` for scripts.
#[test]
fn status_of_a_stream_that_does_not_exist_says_so() {
    let srv = server();
    let url = srv.url();
    let mut c = redis(&url);
    let _: String = redis::cmd("XADD")
        .arg("hits")
        .arg("*")
        .arg("name")
        .arg("page:a")
        .query(&mut c)
        .unwrap();
    for extra in [&[][..], &["--shards", "4"][..]] {
        let mut args = vec!["status", "--stream", "typo", "--redis-url", &url];
        args.extend_from_slice(extra);
        let o = run_hitcount(&args);
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
        let first = out.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("stream typo: does not exist"),
            "{extra:?}:\n{out}"
        );
        assert!(first.contains("--stream / HITCOUNT_STREAM"), "{out}");
        assert!(!out.contains("0 entries"), "{out}");
        assert!(!out.contains("no consumer group"), "{out}");
        assert!(
            !out.contains("typo:{0}"),
            "no table of shards that do not exist:\n{out}"
        );
    }
    let o = run_hitcount(&["status", "--json", "--stream", "typo", "--redis-url", &url]);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["exists"], false, "{s}");
    // The real stream is there.
    let o = run_hitcount(&["status", "--json", "--redis-url", &url]);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&s["exists"], &s["length"]),
        (&true.into(), &1.into()),
        "{s}"
    );
    let o = run_hitcount(&["status", "--redis-url", &url]);
    assert!(
        text(&o.stdout).starts_with("stream hits: 1 entries"),
        "{}",
        text(&o.stdout)
    );
}

/// `clean --once` beside a live leader (default lease, 15 s, renewed every
/// 5 s; default --wait, 30 s) answers within a third of the lease, not
/// after the 30 s: it names the holder, its last pass and when the next is
/// due.
#[test]
fn clean_once_beside_a_live_leader_answers_at_once() {
    let srv = server();
    let url = srv.url();
    let mut c = redis(&url);
    let listen = free_addr();
    let _worker = start_worker(&url, "leader-w1", &listen, &[]);
    let token: String = wait_for("a recorded pass", Duration::from_secs(60), || {
        redis::cmd("HGET")
            .arg("hc:cleaner")
            .arg("leader")
            .query::<Option<String>>(&mut c)
            .unwrap()
    });
    assert!(token.starts_with("leader-w1/"), "{token}");
    let started = Instant::now();
    let mut clean = Child::spawn("clean", {
        let mut cmd = hitcount();
        cmd.args(["clean", "--once", "--redis-url", &url]);
        cmd
    });
    let status = clean
        .wait(Duration::from_secs(60))
        .expect("clean --once exits");
    let took = started.elapsed();
    let err = clean.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    // The contract: a third of the lease (5 s), with room for a loaded
    // machine; before, it waited out --wait (30 s).
    assert!(took < Duration::from_secs(12), "took {took:?}:\n{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "hitcount: the leader lease hitcount:leader is held by {token}, a live worker that renews it"
        )),
        "{err}"
    );
    assert!(last.contains("its last pass ended at "), "{err}");
    assert!(last.contains("the next is due at "), "{err}");
    assert!(last.contains("every 60 s, --clean-interval"), "{err}");
}

/// The demo's suggestions for reading its counters, kept serving: each
/// `hitcount` command it prints works as printed (the demo's prefix, the
/// precision `get` needs, its Redis URL) while it serves. Not on a
/// terminal and not kept, it suggests nothing that would meet a Redis
/// already gone, but says how to keep it.
#[test]
fn the_demos_suggestions_work_while_it_serves() {
    let mut cmd = hitcount();
    cmd.args(["demo", "--hits", "2000", "--names", "10", "--keep-serving"])
        .args(["--dashboard", "127.0.0.1:0"]);
    let mut demo = Child::spawn("demo", cmd);
    wait_for("the demo serving", Duration::from_secs(120), || {
        demo.assert_running();
        demo.stdout()
            .contains("serving it until Ctrl-C")
            .then_some(())
    });
    let out = demo.stdout();
    let commands: Vec<Vec<String>> = out
        .lines()
        .filter_map(|l| l.strip_prefix("  hitcount "))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    assert!(commands.len() >= 3, "{out}");
    let mut stats_seen = false;
    for args in &commands {
        assert!(
            args.windows(2).any(|w| w == ["--prefix", "demo:"]),
            "{args:?}"
        );
        assert!(args.iter().any(|a| a == "--redis-url"), "{args:?}");
        let o = hitcount().args(args).output().unwrap();
        let got = text(&o.stdout);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        assert!(
            got.contains("page:") || got.contains("count"),
            "{args:?}:\n{got}"
        );
        assert!(!got.contains("no samples"), "{args:?}:\n{got}");
        stats_seen |= args.iter().any(|a| a == "--stats") && got.contains("mean");
    }
    assert!(
        stats_seen,
        "a --stats suggestion that shows statistics:\n{out}"
    );
    assert!(demo.terminate(Duration::from_secs(20)).success());

    let o = run_hitcount(&[
        "demo",
        "--hits",
        "200",
        "--names",
        "5",
        "--dashboard",
        "127.0.0.1:0",
    ]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        !out.contains("hitcount get"),
        "nothing that meets a Redis gone:\n{out}"
    );
    assert!(
        out.contains("hitcount demo --keep-serving keeps both up"),
        "{out}"
    );
}

/// An entry with a `hit` field and a plain hit field is dead-lettered as
/// `mixed_forms` (before: the map's name counted and `name` was dropped
/// without a word; a plain entry with a stray `hit` was `bad_msgpack`),
/// and the hits around it count.
#[test]
fn an_entry_mixing_the_two_forms_is_dead_lettered_as_mixed_forms() {
    let srv = server();
    let url = srv.url();
    let mut c = redis(&url);
    let packed = hitcount::model::event::encode("packed:x", 2, None);
    let xadd = |c: &mut redis::Connection, fields: &[(&str, &[u8])]| -> String {
        let mut cmd = redis::cmd("XADD");
        cmd.arg("hits").arg("*");
        for (k, v) in fields {
            cmd.arg(*k).arg(*v);
        }
        cmd.query(c).unwrap()
    };
    xadd(&mut c, &[("name", b"good")]);
    let mixed = [
        xadd(&mut c, &[("hit", &packed), ("name", b"plain:y")]),
        xadd(&mut c, &[("name", b"page:z"), ("hit", b"1")]),
    ];
    xadd(&mut c, &[("hit", &packed), ("source", b"web")]);
    let listen = free_addr();
    let mut w = start_worker(&url, "mixed-w1", &listen, &[]);
    // Every entry read and acknowledged: four delivered, none pending.
    wait_for("the stream drained", Duration::from_secs(60), || {
        w.assert_running();
        let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg("hits")
            .query(&mut c)
            .ok()?;
        let g = groups.first()?;
        let int = |k: &str| redis::from_redis_value::<i64>(g.get(k)?.clone()).ok();
        (int("entries-read")? == 4 && int("pending")? == 0).then_some(())
    });
    assert!(w.terminate(Duration::from_secs(30)).success());
    let dead: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("hits:dead")
        .arg("-")
        .arg("+")
        .query::<redis::streams::StreamRangeReply>(&mut c)
        .unwrap()
        .ids
        .into_iter()
        .map(|e| {
            let mut fields: Vec<(String, String)> = e
                .map
                .into_iter()
                .map(|(k, v)| {
                    (
                        k,
                        redis::from_redis_value::<Vec<u8>>(v)
                            .map(|b| text(&b))
                            .unwrap(),
                    )
                })
                .collect();
            fields.sort();
            (e.id, fields)
        })
        .collect();
    assert_eq!(dead.len(), 2, "{dead:?}");
    for ((_, fields), id) in dead.iter().zip(&mixed) {
        assert!(
            fields.contains(&("reason".into(), "mixed_forms".into())),
            "{fields:?}"
        );
        assert!(fields.contains(&("id".into(), id.clone())), "{fields:?}");
    }
    let count = |c: &mut redis::Connection, key: &str| -> i64 {
        let v: Vec<i64> = redis::cmd("HVALS").arg(key).query(c).unwrap();
        v.iter().sum()
    };
    assert_eq!(count(&mut c, "count:86400:good"), 1);
    assert_eq!(
        count(&mut c, "count:86400:packed:x"),
        2,
        "only the unmixed entry"
    );
    assert_eq!(count(&mut c, "count:86400:plain:y"), 0);
    assert_eq!(count(&mut c, "count:86400:page:z"), 0);
}
