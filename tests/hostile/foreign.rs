//! Keys named as hitcount's but written by something else (another program
//! sharing the Redis, a slip in redis-cli): a key of another type in the
//! layout is left alone, and every other counter is still cleaned, ranked
//! and read. One such key used to stop the cleaner for good (it retried
//! the same page for ever) and to fail every ranking and remote read.

use std::io::{Read, Write};
use std::net::TcpStream;

use crate::common::bin::run_hitcount;
use crate::common::{server, unix_now};

#[test]
fn keys_of_another_type_are_left_alone_and_every_other_counter_served() {
    let srv = server();
    let url = srv.url();
    let mut r = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .unwrap();
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
        .query(&mut r)
        .unwrap();

    // The cleaner: the old samples go, the other keys stay, with a word.
    let out = run_hitcount(&["clean", "--once", "--redis-url", &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("left alone"), "{err}");
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

    // A remote read of every metric at precision 60: the counter's hits
    // and statistics (the other key reads as a counter without hits).
    let (_serve, addr) = crate::http::serve(&url, &[]);
    let read = crate::http::remote_read(
        now - 600,
        now + 60,
        &[("__name__", "hitcount_.*"), ("precision", "60")],
    );
    let mut s = TcpStream::connect(&addr).unwrap();
    let head = format!(
        "POST /api/v1/read HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
         Content-Encoding: snappy\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        read.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&read).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    assert!(
        raw.starts_with(b"HTTP/1.1 200 "),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    let body = &raw[raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
    let answer = snap::raw::Decoder::new().decompress_vec(body).unwrap();
    let has = |label: &[u8]| answer.windows(label.len()).any(|w| w == label);
    assert!(has(b"hitcount_hits") && has(b"hitcount_value_sum") && has(b"real"));
}
