//! Keys named as hitcount's but written by something else (another program
//! sharing the Redis, a slip in redis-cli): a key of another type in the
//! layout is left alone, a member of `known:` scored other than 0 is set
//! back to 0, and every other counter is still cleaned, ranked and read. One such key used to stop the cleaner for good (it retried
//! the same page for ever) and to fail every ranking and remote read.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::bin::{free_addr, run_hitcount, start_worker, wait_for};
use crate::common::{server, unix_now};
use crate::redis;

#[test]
fn keys_of_another_type_are_left_alone_and_every_other_counter_served() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let now = unix_now();
    let (minute, old) = (now - now % 60, now - now % 60 - 200 * 60);
    let stats = |b: i64| [(format!("{b}:count"), 2), (format!("{b}:sum"), 5)];
    let _: () = redis::pipe()
        .hset_multiple("count:60:real", &[(minute, 3), (old, 1)])
        .hset_multiple("stats:60:real", &[stats(minute), stats(old)].concat())
        .zadd("known:", "60:real", 0)
        .zadd("stats:known:", "60:real", 0)
        .set("count:60:other", "text")
        .zadd("known:", "60:other", 0)
        .set("stats:60:other", "text")
        .zadd("stats:known:", "60:other", 0)
        // Members scored other than 0 (a careless ZINCRBY): Redis orders
        // by name only members of one score, so these hid the others from
        // every reader that pages by name.
        .zadd("known:", "0:legacy", 1)
        .zadd("stats:known:", "0:legacy", 1)
        .query(&mut r)
        .unwrap();

    // The cleaner: the old samples go, the other keys stay, with a word.
    let out = run_hitcount(&["clean", "--once", "--redis-url", &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("left alone"), "{err}");
    assert!(err.contains("set back to 0"), "{err}");
    for zset in ["known:", "stats:known:"] {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(zset)
            .arg("0:legacy")
            .query(&mut r)
            .unwrap();
        assert_eq!(score, Some(0.0), "{zset}");
    }
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg("count:60:real")
        .query(&mut r)
        .unwrap();
    assert_eq!(fields, [minute.to_string()]);
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg("stats:60:real")
        .query(&mut r)
        .unwrap();
    assert_eq!(fields, stats(minute).map(|(f, _)| f));
    for (key, zset) in [
        ("count:60:other", "known:"),
        ("stats:60:other", "stats:known:"),
    ] {
        let kept: String = redis::cmd("GET").arg(key).query(&mut r).unwrap();
        assert_eq!(kept, "text");
        let member: Option<f64> = redis::cmd("ZSCORE")
            .arg(zset)
            .arg("60:other")
            .query(&mut r)
            .unwrap();
        assert_eq!(member, Some(0.0), "{zset}");
    }

    // Rankings, by count and by mean, of the counters that are hitcount's.
    for (by, want) in [("count", "\"count\":3"), ("mean", "\"mean\":2.5")] {
        let out = run_hitcount(&["top", "-p", "60", "--by", by, "--json", "--redis-url", &url]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("\"name\":\"real\"") && text.contains(want),
            "{text}"
        );
        assert!(!text.contains("other"), "{text}");
    }

    let (_serve, addr) = crate::http::serve(&url, &[]);
    // Each key alone, as the dashboard opens it: a name without samples
    // (a 500 "Redis refused the query" before).
    for (path, empty) in [
        ("counters/other", r#""samples":[]"#),
        ("stats/other", r#""buckets":[]"#),
    ] {
        let (status, _, body) = crate::http::get(&addr, &format!("/api/v1/{path}?precision=60"));
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body.contains(empty), "{path}: {body}");
    }
    // A remote read of every metric at precision 60: the counter's hits
    // and statistics (the other key reads as a counter without hits).
    let read = crate::http::remote_read(
        now - 600,
        now + 60,
        &[("__name__", "hitcount_.*"), ("precision", "60")],
    );
    let raw = crate::http::post_read(&addr, &read);
    assert!(
        raw.starts_with(b"HTTP/1.1 200 "),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    // As every answer of serve: nothing in it may load or run (a GET is
    // answered 405, with the same policy).
    let csp = "content-security-policy: default-src 'none'";
    assert!(String::from_utf8_lossy(&raw).to_lowercase().contains(csp));
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /api/v1/read HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut refused = String::new();
    s.read_to_string(&mut refused).unwrap();
    assert!(refused.starts_with("HTTP/1.1 405 "), "{refused}");
    assert!(refused.to_lowercase().contains(csp), "{refused}");
    let body = &raw[raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
    let answer = snap::raw::Decoder::new().decompress_vec(body).unwrap();
    let has = |label: &[u8]| answer.windows(label.len()).any(|w| w == label);
    assert!(has(b"hitcount_hits") && has(b"hitcount_value_sum") && has(b"real"));
}

/// hitcount's own keys damaged: the cleaner's status of another type, and
/// the leader lease of another type or without an expiry (which no worker
/// writes). A worker used to die on the first (and the next one, and the
/// next), and never to lead with the second: no cleaning, no trimming.
#[test]
fn its_own_keys_damaged_stop_no_worker_and_block_no_lease() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let recorded = |r: &mut redis::Connection| -> Option<String> {
        redis::cmd("HGET")
            .arg("hc:cleaner")
            .arg("leader")
            .query(r)
            .ok()
            .flatten()
    };
    let leader = |r: &mut redis::Connection| -> redis::Value {
        redis::cmd("GET").arg("hitcount:leader").query(r).unwrap()
    };
    let leader_kind = |r: &mut redis::Connection| -> String {
        redis::cmd("TYPE").arg("hitcount:leader").query(r).unwrap()
    };
    for (round, damage) in ["RPUSH", "SET"].into_iter().enumerate() {
        let _: () = redis::pipe()
            .cmd("DEL")
            .arg("hc:cleaner")
            .arg("hitcount:leader")
            .cmd("SET")
            .arg("hc:cleaner")
            .arg("garbage")
            .cmd(damage)
            .arg("hitcount:leader")
            .arg("someone")
            .query(&mut r)
            .unwrap();
        let listen = free_addr();
        let name = format!("w{round}");
        let mut worker = start_worker(
            &url,
            &name,
            &listen,
            &["--clean-interval", "1", "--lease-ms", "1500"],
        );
        let token = wait_for("a pass recorded", Duration::from_secs(60), || {
            worker.assert_running();
            recorded(&mut r)
        });
        assert!(token.starts_with(&format!("{name}/")), "{token}");
        let held = redis::Value::BulkString(token.into_bytes());
        assert_eq!(leader(&mut r), held);
        // The lease made a hash under its holder: its renewal loses it and
        // the next try takes it back (the holder used to stop, for good,
        // on WRONGTYPE, while any other worker took it over).
        let _: () = redis::pipe()
            .del("hitcount:leader")
            .hset("hitcount:leader", "a", "b")
            .query(&mut r)
            .unwrap();
        wait_for("the lease taken back", Duration::from_secs(30), || {
            worker.assert_running();
            (leader_kind(&mut r) == "string").then_some(())
        });
        assert_eq!(leader(&mut r), held);
        // A consumer named to clear the screen is shown escaped.
        let _: i64 = redis::cmd("XGROUP")
            .arg("CREATECONSUMER")
            .arg("hits")
            .arg("hitcount")
            .arg(format!("evil{round}\x1b[2J\u{202e}"))
            .query(&mut r)
            .unwrap();
        let status = run_hitcount(&["status", "--redis-url", &url]);
        let out = String::from_utf8_lossy(&status.stdout);
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
        assert!(out.contains(&format!("leader: {name}/")), "{out}");
        let shown = format!("consumer evil{round}\\u{{1b}}[2J\\u{{202e}}:");
        assert!(out.contains(&shown), "{out}");
        assert!(!out.contains('\x1b') && !out.contains('\u{202e}'), "{out}");
        assert!(worker
            .stderr()
            .contains("took a lease from a key no holder wrote"));
        // And a hash at shutdown is no lease of its to release.
        let _: () = redis::pipe()
            .del("hitcount:leader")
            .hset("hitcount:leader", "a", "b")
            .query(&mut r)
            .unwrap();
        assert_eq!(worker.terminate(Duration::from_secs(30)).code(), Some(0));
        assert!(
            !worker.stderr().contains("WRONGTYPE"),
            "{}",
            worker.stderr()
        );
    }
    // A cleaner's record written by something else: its text escaped, its
    // numbers shown only as numbers (they were printed as stored).
    let _: () = redis::pipe()
        .del("hc:cleaner")
        .hset_multiple(
            "hc:cleaner",
            &[
                ("leader", "L\x1b[2J\r\nX"),
                ("at_ms", "1"),
                ("duration_ms", "abc"),
            ],
        )
        .query(&mut r)
        .unwrap();
    let status = run_hitcount(&["status", "--redis-url", &url]);
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(out.contains("by L\\u{1b}[2J\\r\\nX: took ? ms"), "{out}");
    assert!(!out.contains('\x1b'), "{out}");
}

/// What a worker started on `url` said as it stopped with status 1, as it
/// must (a key of hitcount's of another type).
fn stopped_worker(url: &str) -> String {
    failed(start_worker(url, "w1", &free_addr(), &[]))
}

/// What `child` said as it stopped on its own within a minute, with status
/// 1 as it must.
fn failed(mut child: crate::common::bin::Child) -> String {
    let status = child.wait(Duration::from_secs(60)).expect("it stops");
    let err = child.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    err
}

/// A counter key of another type whose name holds a newline and a fake log
/// line: the cleaner's warning names it escaped, on one line (it was
/// printed raw, so a counter name could forge a line of the log).
#[test]
fn a_foreign_key_is_named_escaped_in_the_log() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let name = "x\nERROR hitcount: FORGED\u{1b}[2J";
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(format!("count:60:{name}"))
        .arg("s")
        .cmd("ZADD")
        .arg("known:")
        .arg(0)
        .arg(format!("60:{name}"))
        .query(&mut r)
        .unwrap();
    let out = run_hitcount(&["clean", "--once", "--redis-url", &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("example=count:60:x\\nERROR hitcount: FORGED\\u{1b}[2J"),
        "{err}"
    );
    assert!(!err.lines().any(|l| l.starts_with("ERROR")), "{err}");
    assert!(!err.contains('\u{1b}'), "{err}");
}

/// A dead-letter stream of another type (a `--dead-stream` that names
/// another program's key): the worker stops in one line naming the setting,
/// before it commits anything. Its commit script used to fail halfway, the
/// window committed and the dead letters lost; the rest went on as if
/// Redis were away.
#[test]
fn a_dead_letter_stream_of_another_type_stops_the_worker_before_it_commits() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("hits:dead").arg("another program's");
    for _ in 0..3 {
        pipe.cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("name")
            .arg("good");
    }
    pipe.cmd("XADD").arg("hits").arg("*").arg("nope").arg("x");
    let _: () = pipe.query(&mut r).unwrap();
    let err = stopped_worker(&url);
    assert!(err.contains("HITCOUNT_DEAD_STREAM"), "{err}");
    let pending = |r: &mut redis::Connection| -> i64 {
        let summary: (i64, redis::Value, redis::Value, redis::Value) = redis::cmd("XPENDING")
            .arg("hits")
            .arg("hitcount")
            .query(r)
            .unwrap();
        summary.0
    };
    let counted = |r: &mut redis::Connection| -> i64 {
        let counts: Vec<i64> = redis::cmd("HVALS")
            .arg("count:86400:good")
            .query(r)
            .unwrap();
        counts.iter().sum()
    };
    assert_eq!(
        (pending(&mut r), counted(&mut r)),
        (4, 0),
        "nothing committed"
    );
    // The key set right, every hit is counted once and the bad entry
    // dead-lettered once.
    let _: () = redis::cmd("DEL").arg("hits:dead").query(&mut r).unwrap();
    let mut worker = start_worker(&url, "w2", &free_addr(), &["--claim-idle-ms", "1000"]);
    wait_for("every entry done", Duration::from_secs(60), || {
        worker.assert_running();
        (pending(&mut r) == 0).then_some(())
    });
    let dead: i64 = redis::cmd("XLEN").arg("hits:dead").query(&mut r).unwrap();
    assert_eq!((counted(&mut r), dead), (3, 1));
    assert_eq!(worker.terminate(Duration::from_secs(30)).code(), Some(0));
}

/// `known:` of another type (another program's key, or a slip in
/// redis-cli): the worker stops in one line naming that key (Redis' own
/// words name none, and the line named only the stream settings); set
/// right, every hit counts once.
#[test]
fn a_known_set_of_another_type_stops_the_worker_naming_it() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("known:").arg("another program's");
    for _ in 0..3 {
        pipe.cmd("XADD").arg("hits").arg("*").arg("name").arg("kn");
    }
    let _: () = pipe.query(&mut r).unwrap();
    let err = stopped_worker(&url);
    assert!(err.contains("(key known:)"), "{err}");
    assert!(err.contains("delete or rename that key"), "{err}");
    let _: () = redis::cmd("DEL").arg("known:").query(&mut r).unwrap();
    let mut worker = start_worker(&url, "w2", &free_addr(), &["--claim-idle-ms", "1000"]);
    let counted = |r: &mut redis::Connection| -> i64 {
        let counts: Vec<i64> = redis::cmd("HVALS").arg("count:86400:kn").query(r).unwrap();
        counts.iter().sum()
    };
    wait_for("every hit counted", Duration::from_secs(60), || {
        worker.assert_running();
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg("known:")
            .arg(0)
            .arg(-1)
            .query(&mut r)
            .unwrap();
        (members.contains(&"86400:kn".to_string())).then_some(())
    });
    assert_eq!(counted(&mut r), 3);
    assert_eq!(worker.terminate(Duration::from_secs(30)).code(), Some(0));
}

/// The stream's shard count record holding no count (`SET … abc`, `+4`,
/// or a hash: another program's value): it decides which streams producers
/// write and workers read, so nobody guesses. A worker stops and `hit` and
/// `ingest` send nothing, each
/// naming the key and the fix; `status` warns and reads on. It used to be
/// read as no record, and every worker and producer used its own count.
#[test]
fn a_shard_count_record_that_is_no_count_is_refused_by_name() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let key = "{hits}:hc:hitcount:shards";
    // Strings that are no count as hitcount writes one, and a hash.
    for value in ["abc", "0", "\u{ff}", "+4", "04", ""] {
        let what = if value.is_empty() {
            let _: () = redis::cmd("DEL").arg(key).query(&mut r).unwrap();
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg("f")
                .arg(4)
                .query(&mut r)
                .unwrap();
            "a value of another type than a string".to_string()
        } else {
            let _: () = redis::cmd("SET").arg(key).arg(value).query(&mut r).unwrap();
            format!("{value:?}")
        };
        let cmd = crate::common::bin::worker(&url, "w1", &free_addr(), &["--shards", "4"]);
        let mut worker = crate::common::bin::Child::spawn("w1", cmd);
        let status = worker.wait(Duration::from_secs(60)).expect("it stops");
        let err = worker.stderr();
        assert_eq!(status.code(), Some(1), "{err}");
        let why = format!("{key} holds {what}, which is no shard count (1 to 256)");
        assert!(err.contains(&why) && err.contains("delete it"), "{err}");
        let out = run_hitcount(&["hit", "a", "--redis-url", &url]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&why) && err.contains("no hit is sent"),
            "{err}"
        );
        let err = ingest_refused(&url);
        assert!(
            err.contains(&why) && err.contains("no hit is sent"),
            "{err}"
        );
        let len: i64 = redis::cmd("XLEN").arg("hits").query(&mut r).unwrap();
        assert_eq!(len, 0, "nothing sent");
        let out = run_hitcount(&["status", "--redis-url", &url]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains(&why), "{err}");
        if !value.is_empty() {
            let kept: String = redis::cmd("GET").arg(key).query(&mut r).unwrap();
            assert_eq!(kept, value, "left as it is");
        }
    }
}

/// The stderr of `ingest` on `url`, which must refuse to start.
fn ingest_refused(url: &str) -> String {
    let mut cmd = crate::common::bin::hitcount();
    cmd.args(["ingest", "--redis-url", url, "--listen", &free_addr()]);
    failed(crate::common::bin::Child::spawn("ingest", cmd))
}

/// `ingest` started with another shard count than the workers recorded
/// would send hits where no worker reads: it refuses to start, naming both
/// counts and the key, as `hit` does; with the recorded count it starts.
#[test]
fn ingest_refuses_another_shard_count_than_the_recorded_one() {
    let srv = server();
    let url = srv.url();
    let mut r = redis(&url);
    let key = "{hits}:hc:hitcount:shards";
    let _: () = redis::cmd("SET").arg(key).arg(4).query(&mut r).unwrap();
    let err = ingest_refused(&url);
    assert!(
        err.contains(&format!(
            "HITCOUNT_SHARDS is 1, but this stream's workers read it as 4 shard(s) (recorded in {key})"
        )),
        "{err}"
    );
    let (_ingest, addr) = crate::common::bin::start_ingest(&url, &["--shards", "4"]);
    let (status, _, body) =
        crate::common::bin::post_hits(&addr, "application/json", &[], r#"{"name":"a"}"#);
    assert_eq!(status, 202, "{body}");
}
