//! HTTP that a few clients cannot starve, and a `top` that nobody can make
//! scan at will: hundreds of connections from one address (or one from
//! each of hundreds) trickling headers or bodies against a worker's
//! `/healthz` and `hitcount serve`,
//! while probes from another address are answered within a second; large
//! bodies half sent that hold no more than `ingest`'s read budget; buckets
//! that are not kept, not aligned or absurd; a burst of distinct buckets;
//! the page's questions that must not be errors.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::common::bin::{self, Child};
use crate::common::{self, unix_now};

/// Connections the one hostile address keeps trickling.
const TRICKLERS: usize = 400;
/// The hostile address (any 127.x.y.z reaches the loopback listener).
const HOSTILE: [u8; 4] = [127, 0, 0, 2];
/// What a probe may take: the kubelet's default timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug)]
enum Trickle {
    /// A partial request line, then one header line a second.
    Headers,
    /// `POST` with `Content-Length: 100000`, then one byte a second.
    Body,
}

pub(crate) async fn connect_from(ip: [u8; 4], addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((ip, 0)))?;
    socket.connect(addr).await
}

/// One hostile client: trickles `how` to `path`, reconnecting (after a
/// short pause) whenever the server closes, until `stop`.
async fn trickler(
    addr: SocketAddr,
    from: [u8; 4],
    path: String,
    how: Trickle,
    stop: Arc<AtomicBool>,
    connects: Arc<AtomicUsize>,
) {
    while !stop.load(Ordering::Relaxed) {
        if let Ok(mut s) = connect_from(from, addr).await {
            connects.fetch_add(1, Ordering::Relaxed);
            let first = match how {
                Trickle::Headers => format!("GET {path} HTT"),
                Trickle::Body => {
                    // A content type an endpoint that reads bodies takes
                    // (ingest's), so that its body is read.
                    format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                }
            };
            let mut open = s.write_all(first.as_bytes()).await.is_ok();
            let mut tick = 0;
            let mut buf = [0u8; 1024];
            while open && !stop.load(Ordering::Relaxed) {
                tokio::select! {
                    r = s.read(&mut buf) => open = matches!(r, Ok(n) if n > 0),
                    () = tokio::time::sleep(Duration::from_secs(1)) => {
                        let more: &[u8] = match how {
                            Trickle::Headers if tick == 0 => b"P/1.1\r\n",
                            Trickle::Headers => b"X-Slow: 1\r\n",
                            Trickle::Body => b"a",
                        };
                        tick += 1;
                        open = s.write_all(more).await.is_ok();
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `GET path` from 127.0.0.1 within [`PROBE_TIMEOUT`]: the status, or why not.
async fn probe(addr: SocketAddr, path: &str) -> Result<u16, String> {
    let asked = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
        let raw = String::from_utf8_lossy(&raw);
        raw.split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no answer: {raw:?}"))
    };
    tokio::time::timeout(PROBE_TIMEOUT, asked)
        .await
        .unwrap_or_else(|_| Err("no answer within 1 s".into()))
}

/// [`TRICKLERS`] hostile connections trickle `how` to `addr` while a probe
/// of `probe_path` goes every 200 ms for 6 s from another address: every
/// probe must be answered 200 within a second.
async fn probes_outlast_tricklers(addr: SocketAddr, probe_path: &str, how: Trickle) {
    probes_outlast_tricklers_of(addr, probe_path, probe_path, how).await;
}

/// [`probes_outlast_tricklers`], the tricklers sending to `trickled_path`.
async fn probes_outlast_tricklers_of(
    addr: SocketAddr,
    probe_path: &str,
    trickled_path: &str,
    how: Trickle,
) {
    probes_outlast(addr, probe_path, trickled_path, how, |_| HOSTILE).await;
}

/// [`probes_outlast_tricklers_of`], trickler `i` connecting from `from(i)`.
async fn probes_outlast(
    addr: SocketAddr,
    probe_path: &str,
    trickled_path: &str,
    how: Trickle,
    from: fn(usize) -> [u8; 4],
) {
    let stop = Arc::new(AtomicBool::new(false));
    let connects = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..TRICKLERS)
        .map(|i| {
            tokio::spawn(trickler(
                addr,
                from(i),
                trickled_path.to_string(),
                how,
                stop.clone(),
                connects.clone(),
            ))
        })
        .collect();
    // Let them take every place they can.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mut asked, mut failed) = (0, Vec::new());
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        asked += 1;
        match probe(addr, probe_path).await {
            Ok(200) => {}
            other => failed.push(other),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    let connects = connects.load(Ordering::Relaxed);
    assert!(
        failed.is_empty(),
        "{how:?}: {} of {asked} probes of {probe_path} failed: {failed:?}",
        failed.len()
    );
    assert!(
        connects >= TRICKLERS,
        "{how:?}: the tricklers connected only {connects} times"
    );
}

/// A POST announcing a 100,000-byte body that never comes is answered and
/// its connection closed at once: the body is never waited for.
async fn an_unfinished_body_is_not_waited_for(addr: SocketAddr, path: &str) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\na");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut raw)).await;
    assert!(
        matches!(read, Ok(Ok(_))),
        "{path}: the connection stayed open for the body"
    );
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 405 "), "{raw}");
}

pub(crate) fn serve(url: &str, extra: &[&str]) -> (Child, String) {
    let addr = bin::free_addr();
    let mut cmd = bin::hitcount();
    cmd.args(["serve", "--redis-url", url, "--listen", &addr])
        .args(extra);
    let mut child = Child::spawn("serve", cmd);
    bin::wait_for("serve answers", Duration::from_secs(30), || {
        child.assert_running();
        bin::http_get(&addr, "/api/v1/nope")
    });
    (child, addr)
}

/// The body of a Prometheus remote read (snappy, protobuf written field by
/// field) of one query from `from` to `until` (unix seconds) whose
/// matchers each ask that a label equal a value (`__name__=~` when the
/// value ends in `.*`).
pub(crate) fn remote_read(from: i64, until: i64, matchers: &[(&str, &str)]) -> Vec<u8> {
    remote_read_n(1, from, until, matchers)
}

/// [`remote_read`] asking its query `n` times.
fn remote_read_n(n: usize, from: i64, until: i64, matchers: &[(&str, &str)]) -> Vec<u8> {
    let varint = |mut n: u64, out: &mut Vec<u8>| loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    };
    let field = |num: u8, bytes: &[u8], out: &mut Vec<u8>| {
        out.push(num << 3 | 2);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    };
    let mut q = vec![0x08];
    varint((from * 1000) as u64, &mut q);
    q.push(0x10);
    varint((until * 1000) as u64, &mut q);
    for (name, value) in matchers {
        // Type 0 is EQ, 2 is RE.
        let mut m = vec![0x08, if value.ends_with(".*") { 2 } else { 0 }];
        field(2, name.as_bytes(), &mut m);
        field(3, value.as_bytes(), &mut m);
        field(3, &m, &mut q);
    }
    let mut request = Vec::new();
    for _ in 0..n {
        field(1, &q, &mut request);
    }
    snap::raw::Encoder::new().compress_vec(&request).unwrap()
}

/// Every server that listens, facing [`TRICKLERS`] slow clients: one test,
/// one server at a time, since the 1 s bound is about one server facing 400
/// slow clients on this machine, not about several servers' 1,600 at once
/// (separate tests would run side by side).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_starve_no_server() {
    a_workers_healthz_outlasts_four_hundred_slow_clients().await;
    serves_api_outlasts_four_hundred_slow_clients().await;
    trickled_remote_read_bodies_starve_no_one().await;
    trickled_hits_starve_no_one().await;
}

async fn a_workers_healthz_outlasts_four_hundred_slow_clients() {
    let srv = common::server();
    let listen = bin::free_addr();
    let _worker = bin::start_worker(&srv.url(), "trickled", &listen, &[]);
    let addr: SocketAddr = listen.parse().unwrap();
    an_unfinished_body_is_not_waited_for(addr, "/healthz").await;
    probes_outlast_tricklers(addr, "/healthz", Trickle::Headers).await;
    probes_outlast_tricklers(addr, "/healthz", Trickle::Body).await;
    // One trickler an address, more addresses than places: the place of
    // the one waiting longest is given to the probe (they shut out 75 %
    // of the probes when no place was ever taken back).
    let own = |i: usize| [127, 1, (i / 200) as u8, (1 + i % 200) as u8];
    probes_outlast(addr, "/healthz", "/healthz", Trickle::Headers, own).await;
}

async fn serves_api_outlasts_four_hundred_slow_clients() {
    let srv = common::server();
    let (_serve, addr) = serve(&srv.url(), &[]);
    let addr: SocketAddr = addr.parse().unwrap();
    an_unfinished_body_is_not_waited_for(addr, "/api/v1/counters").await;
    probes_outlast_tricklers(addr, "/api/v1/counters?limit=1", Trickle::Headers).await;
    probes_outlast_tricklers(addr, "/api/v1/counters?limit=1", Trickle::Body).await;
}

/// The one path that reads a body, Prometheus' remote read, reads it within
/// a deadline and from a bounded number of connections per address: bodies
/// trickled to it starve no probe.
async fn trickled_remote_read_bodies_starve_no_one() {
    let srv = common::server();
    let (_serve, addr) = serve(&srv.url(), &[]);
    let addr: SocketAddr = addr.parse().unwrap();
    probes_outlast_tricklers_of(
        addr,
        "/api/v1/counters?limit=1",
        "/api/v1/read",
        Trickle::Body,
    )
    .await;
}

/// `ingest` reads bodies (within 10 s, from at most 16 connections an
/// address): 400 connections trickling hits starve neither its probes nor
/// a client of another address.
async fn trickled_hits_starve_no_one() {
    let srv = common::server();
    let (_ingest, addr) = crate::common::bin::start_ingest(&srv.url(), &[]);
    let addr: SocketAddr = addr.parse().unwrap();
    probes_outlast_tricklers_of(addr, "/healthz", "/api/v1/hits", Trickle::Body).await;
    probes_outlast_tricklers_of(addr, "/hitcount.js", "/api/v1/hits", Trickle::Headers).await;
}

/// Bodies read at once hold at most ingest's read budget (32 MiB beyond
/// each body's first 64 KiB), however many connections send them: two
/// large bodies half sent take it all, so a third large body is not read
/// (no answer while they hang) while a small one is taken at once; once
/// the two are gone the third is read and taken whole. Before, every body
/// was read as it came: 256 connections of 1 MiB held 256 MiB.
#[test]
fn large_bodies_half_sent_hold_at_most_the_read_budget() {
    use std::io::{Read, Write};
    let srv = common::server();
    let (_ingest, addr) = bin::start_ingest(&srv.url(), &["--max-body", "20000000"]);
    let head = |len: usize| {
        format!(
            "POST /api/v1/hits HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n\
             Content-Length: {len}\r\nConnection: close\r\n\r\n"
        )
    };
    // Two bodies of 20 MB, 17 MB of each sent: more than the budget.
    let hangers: Vec<std::net::TcpStream> = (0..2)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.write_all(head(20_000_000).as_bytes()).unwrap();
            let mut sending = s.try_clone().unwrap();
            std::thread::spawn(move || {
                // Blocks once ingest stops reading; fails once closed.
                let _ = sending.write_all(&vec![b' '; 17_000_000]);
            });
            s
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    let line = "{\"name\":\"big\"}\n";
    let lines = 1_000_000 / line.len();
    let mut third = std::net::TcpStream::connect(&addr).unwrap();
    third
        .write_all(head(lines * line.len()).as_bytes())
        .unwrap();
    let mut sending = third.try_clone().unwrap();
    let body = line.repeat(lines);
    let sent = std::thread::spawn(move || sending.write_all(body.as_bytes()).is_ok());
    third
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut first = [0u8; 1];
    let early = third.read(&mut first);
    assert!(
        early.is_err(),
        "a large body was answered while the budget was held: {early:?}"
    );

    // A small body needs none of the budget.
    let small = "{\"name\":\"small\"}";
    let (status, _, body) = bin::post_hits(&addr, "application/json", &[], small);
    assert_eq!(status, 202, "{body}");

    drop(hangers);
    third
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut raw = Vec::new();
    let _ = third.read_to_end(&mut raw);
    assert!(sent.join().unwrap(), "the third body was sent whole");
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 202 "), "{raw}");
    let accepted = format!("\"accepted\":{lines},");
    assert!(raw.contains(&accepted), "{raw}");
}

/// Two large bodies sent at once that need more than the read budget
/// between them are read one after the other, both taken: each used to
/// take the budget as its bytes came and wait for more while holding it,
/// so both stalled until their deadline and one failed.
#[test]
fn large_bodies_that_need_more_than_the_budget_together_are_read_in_turn() {
    use std::io::{Read, Write};
    let srv = common::server();
    let (_ingest, addr) = bin::start_ingest(&srv.url(), &["--max-body", "20000000"]);
    let started = Instant::now();
    let senders: Vec<_> = (0..2)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let hit = format!("{{\"name\":\"turn{i}\"}}");
                let mut body = hit.into_bytes();
                body.resize(20_000_000, b' ');
                let mut s = std::net::TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let head = format!(
                    "POST /api/v1/hits HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                s.write_all(head.as_bytes()).unwrap();
                let _ = s.write_all(&body);
                let mut raw = Vec::new();
                let _ = s.read_to_end(&mut raw);
                String::from_utf8_lossy(&raw).into_owned()
            })
        })
        .collect();
    for sender in senders {
        let raw = sender.join().unwrap();
        assert!(
            raw.starts_with("HTTP/1.1 202 ") && raw.contains("\"accepted\":1,"),
            "{raw}"
        );
    }
    eprintln!("both taken after {:?}", started.elapsed());
}

/// The raw answer to `POST /api/v1/read` of `read` (a body of
/// [`remote_read`]).
pub(crate) fn post_read(addr: &str, read: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /api/v1/read HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
         Content-Encoding: snappy\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        read.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(read).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    raw
}

/// Label matchers cost `serve` only a bounded share: a read of 2 KB with a
/// hundred copies of `job=~".{10000}"` once took 865 MB and 3 s to compile.
/// Now more than 64 matchers, or a regex over 256 KiB compiled, is a 400
/// saying so, before anything is compiled or read.
#[test]
fn label_matchers_are_bounded_in_number_and_size() {
    let srv = common::server();
    let (_serve, addr) = serve(&srv.url(), &[]);
    let now = unix_now();
    let answer = |matchers: &[(&str, &str)]| {
        let raw = post_read(&addr, &remote_read(now - 600, now, matchers));
        String::from_utf8_lossy(&raw).into_owned()
    };
    let mut many = vec![("__name__", "hitcount_hits")];
    many.extend([("job", "x"); 64]);
    let text = answer(&many);
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert!(
        text.contains("65 label matchers: one read may hold at most 64"),
        "{text}"
    );
    many.pop();
    assert!(answer(&many).starts_with("HTTP/1.1 200 "));
    let text = answer(&[("__name__", "hitcount_hits"), ("job", ".{10000}.*")]);
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert!(
        text.contains("bad regex for job") && text.contains("size limit"),
        "{text}"
    );
    let text = answer(&[("__name__", "hitcount_hits"), ("job", ".{100}.*")]);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
}

/// A remote read counts the fields of the hashes it reads, not only the
/// samples in its range: 100 reads of a minute of a 1,000,000-field
/// counter once read it whole each, all at once, took `serve` to 4.7 GB
/// and were cut off unanswered. Now one read reads at most 10,000,000
/// fields (a 400 beyond), and large reads take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_read_counts_the_fields_it_reads() {
    const BUCKETS: i64 = 320_000;
    let srv = common::server();
    let url = srv.url();
    let now = unix_now();
    let mut c = common::conn(&url).await;
    one_hit_a_second(&mut c, "count:1:big", now, BUCKETS).await;
    let () = redis::pipe()
        .zadd("known:", "1:big", 0)
        .query_async(&mut c)
        .await
        .unwrap();
    let samples = (BUCKETS + 10).to_string();
    let (_serve, addr) = serve(&url, &["--precisions", "1", "--samples", &samples]);
    let minute = [("__name__", "hitcount_hits"), ("name", "big")];
    // 32 queries of one minute each: 32 × 320,000 fields.
    let raw = post_read(&addr, &remote_read_n(32, now - 60, now, &minute));
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert!(
        text.contains("hold 10240000 fields, more than 10000000"),
        "{text}"
    );
    // One is read, and answered.
    let raw = post_read(&addr, &remote_read(now - 60, now, &minute));
    assert!(
        raw.starts_with(b"HTTP/1.1 200 "),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

/// Counter `key` at precision 1 with one hit in each of the `buckets`
/// seconds up to `now`.
async fn one_hit_a_second(
    c: &mut hitcount::store::connect::Conn,
    key: &str,
    now: i64,
    buckets: i64,
) {
    for chunk in (now - buckets + 1..=now).collect::<Vec<_>>().chunks(20_000) {
        let fields: Vec<(i64, i64)> = chunk.iter().map(|&t| (t, 1)).collect();
        let () = redis::pipe()
            .hset_multiple(key, &fields)
            .query_async(c)
            .await
            .unwrap();
    }
}

/// `(status, headers in lower case, body)` of `GET path`.
pub(crate) fn get(addr: &str, path: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// [`get`] from the address `ip`.
async fn get_from(ip: [u8; 4], addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut s = connect_from(ip, addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// `names` counters of `precision` with a count in each of `buckets`,
/// written directly in the seeds' layout.
async fn seed(url: &str, precision: u32, names: usize, buckets: &[i64]) {
    let mut c = common::conn(url).await;
    let mut pipe = redis::pipe();
    for i in 0..names {
        let name = format!("n{i}");
        pipe.cmd("ZADD")
            .arg("known:")
            .arg(0)
            .arg(format!("{precision}:{name}"))
            .ignore();
        for b in buckets {
            pipe.cmd("HSET")
                .arg(format!("count:{precision}:{name}"))
                .arg(b)
                .arg(i + 1)
                .ignore();
        }
    }
    let _: () = pipe.query_async(&mut c).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_ranks_only_buckets_that_are_kept() {
    let srv = common::server();
    let now = unix_now();
    let hour = now / 3600 * 3600;
    seed(&srv.url(), 3600, 3, &[hour]).await;
    let (_serve, addr) = serve(&srv.url(), &[]);
    let minute = unix_now() / 60 * 60;
    let refused: Vec<(String, &str)> = vec![
        // Misaligned and too old: the age is said, with the oldest bucket
        // kept, not the (too old) bucket holding it.
        (
            format!("bucket={}", i64::MIN),
            "older than the 3600 s precision keeps",
        ),
        (
            format!("precision=60&bucket={}", i64::MIN),
            "older than the 60 s precision keeps",
        ),
        (
            format!("precision=60&bucket={}", i64::MIN + 8),
            "older than the 60 s precision keeps",
        ),
        (format!("bucket={}", i64::MAX), "after now"),
        ("bucket=-1".into(), "older than the 3600 s precision keeps"),
        (
            "bucket=-3600".into(),
            "older than the 3600 s precision keeps",
        ),
        ("bucket=0".into(), "older than the 3600 s precision keeps"),
        ("bucket=9999999999997200".into(), "after now"),
        (format!("bucket={}", hour + 3600), "after now"),
        (format!("bucket={}", hour + 17), "multiple of 3600"),
        (
            format!("bucket={}", hour - 121 * 3600),
            "older than the 3600 s precision keeps",
        ),
        (
            format!("precision=60&bucket={}", minute - 125 * 60),
            "older than the 60 s precision keeps",
        ),
        ("precision=7".into(), "precision must be one of"),
    ];
    for (query, why) in refused {
        let (status, head, body) = get(&addr, &format!("/api/v1/top?{query}"));
        assert_eq!(status, 400, "{query}: {body}");
        assert!(head.contains("application/json"), "{query}: {head}");
        let error = json(&body)["error"].as_str().unwrap().to_string();
        assert!(error.contains(why), "{query}: {error}");
    }
    // The CLI's default precision, and its bucket: the current one.
    let (status, _, body) = get(&addr, "/api/v1/top");
    assert_eq!(status, 200, "{body}");
    let top = json(&body);
    assert_eq!(top["precision"], 3600, "{body}");
    let b = top["bucket"].as_i64().unwrap();
    assert!(b == hour || b == hour + 3600, "{body}");
    // The oldest bucket kept and the current one are ranked.
    for query in [
        format!("bucket={hour}"),
        format!("bucket={}", hour - 119 * 3600),
        format!("precision=60&bucket={}", minute - 60),
        // Every configured precision, as the CLI.
        "precision=1".into(),
        "precision=5&by=mean".into(),
    ] {
        // Each scan waits its turn, as the page waits.
        let answered = get_after_retries(&addr, &format!("/api/v1/top?{query}"));
        assert!(answered.is_some(), "{query}: still refused after ten waits");
    }
}

/// The body of a 200 for `path`, asked again after each 429's
/// `Retry-After` as the page does; `None` after ten refusals. Any other
/// status fails the test.
fn get_after_retries(addr: &str, path: &str) -> Option<String> {
    (0..10).find_map(|_| {
        let (status, head, body) = get(addr, path);
        if status == 200 {
            return Some(body);
        }
        assert_eq!(status, 429, "{path}: {body}");
        let secs = head
            .lines()
            .find_map(|l| l.strip_prefix("retry-after: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1);
        std::thread::sleep(Duration::from_secs(secs));
        None
    })
}

/// Calls of `command` Redis has counted since its stats were reset.
async fn calls(url: &str, command: &str) -> u64 {
    let mut c = common::conn(url).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_distinct_buckets_costs_at_most_three_scans() {
    let srv = common::server();
    let url = srv.url();
    let minute = unix_now() / 60 * 60;
    let buckets: Vec<i64> = (1..=30).map(|k| minute - 60 * k).collect();
    // Fewer names than a ZRANGEBYLEX page: one call per scan.
    seed(&url, 60, 200, &buckets).await;
    let (_serve, addr) = serve(&url, &[]);
    let mut c = common::conn(&url).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut c)
        .await
        .unwrap();
    // 24 distinct uncached buckets at once, each from its own address
    // (one address may hold only 16 connections).
    let sock: SocketAddr = addr.parse().unwrap();
    let asked: Vec<_> = buckets[..24]
        .iter()
        .zip(1u8..)
        .map(|(b, i)| {
            let path = format!("/api/v1/top?precision=60&bucket={b}&limit=3");
            tokio::spawn(async move { get_from([127, 0, 1, i], sock, &path).await })
        })
        .collect();
    let mut answers = Vec::new();
    for a in asked {
        answers.push(a.await.unwrap());
    }
    let scans = calls(&url, "zrangebylex").await;
    let ok = answers.iter().filter(|a| a.0 == 200).count();
    assert!(ok >= 1, "{answers:?}");
    for (status, head, body) in &answers {
        if *status == 200 {
            assert_eq!(json(body)["counters"][0]["name"], "n199", "{body}");
            continue;
        }
        assert_eq!(*status, 429, "{body}");
        assert!(head.contains("application/json"), "{head}");
        let retry = head
            .lines()
            .find_map(|l| l.strip_prefix("retry-after: "))
            .and_then(|v| v.trim().parse::<u64>().ok());
        assert!(matches!(retry, Some(1..=60)), "{head}");
        assert!(json(body)["error"].as_str().unwrap().contains("retry in"));
    }
    assert!(
        scans <= 3,
        "{scans} scans for 24 buckets ({ok} answered 200)"
    );
    // Old buckets asked one after another until their scans are spent...
    let spent = buckets[24..].iter().any(|b| {
        let path = format!("/api/v1/top?precision=60&bucket={b}&limit=3");
        get(&addr, &path).0 == 429
    });
    assert!(spent, "six more old buckets, all scanned");
    // ...spend none of the current one's: a page showing the hottest now
    // is answered at once (one client asking old bucket after old bucket
    // kept it refused).
    let (status, _, body) = get(&addr, "/api/v1/top?precision=60&limit=3");
    assert_eq!(status, 200, "{body}");
    // Asked again after Retry-After, as the page does, each is answered.
    let path = format!("/api/v1/top?precision=60&bucket={}&limit=3", buckets[29]);
    let answered = get_after_retries(&addr, &path);
    assert!(answered.is_some(), "still refused after ten waits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_says_whether_it_has_statistics() {
    let srv = common::server();
    let url = srv.url();
    let minute = unix_now() / 60 * 60;
    seed(&url, 60, 1, &[minute]).await;
    let (_serve, addr) = serve(&url, &[]);
    let (status, _, body) = get(&addr, "/api/v1/counters/n0?precision=60");
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["stats"], false, "{body}");
    let mut c = common::conn(&url).await;
    let _: () = redis::cmd("HSET")
        .arg("stats:60:n0")
        .arg(format!("{minute}:count"))
        .arg(1)
        .query_async(&mut c)
        .await
        .unwrap();
    let (_, _, body) = get(&addr, "/api/v1/counters/n0?precision=60");
    assert_eq!(json(&body)["stats"], true, "{body}");
}

/// Hashes larger than serve reads at once are read whole, each in its
/// turn, while a small counter is answered beside them. 48 reads of a
/// 500,000-field counter at once used to keep every request, small ones
/// included, past the reply timeout: 503 for all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashes_larger_than_a_turn_are_read_whole_in_turn() {
    /// Buckets of the large counter: two reads of it hold more fields
    /// than serve reads at once (1,000,000), so one waits for the other.
    const BUCKETS: i64 = 600_000;
    /// Buckets of the statistics, 5 fields each: more than a hash read
    /// without a turn (10,000 fields).
    const STAT_BUCKETS: i64 = 2_400;
    let srv = common::server();
    let url = srv.url();
    let now = unix_now();
    let mut c = common::conn(&url).await;
    one_hit_a_second(&mut c, "count:1:big", now, BUCKETS).await;
    let mut stats = Vec::new();
    for t in now - STAT_BUCKETS + 1..=now {
        for (f, v) in [
            ("count", 2),
            ("sum", 6),
            ("sumsq", 20),
            ("min", 2),
            ("max", 4),
        ] {
            stats.push((format!("{t}:{f}"), v));
        }
    }
    let _: () = redis::pipe()
        .hset_multiple("stats:1:big", &stats)
        .hset("count:1:small", now, 5)
        .zadd("known:", "1:big", 0)
        .zadd("known:", "1:small", 0)
        .zadd("stats:known:", "1:big", 0)
        .query_async(&mut c)
        .await
        .unwrap();
    let samples = (BUCKETS + 10).to_string();
    let (_serve, addr) = serve(&url, &["--precisions", "1", "--samples", &samples]);
    let addr: SocketAddr = addr.parse().unwrap();

    let read = |ip: [u8; 4], path: &'static str| tokio::spawn(get_from(ip, addr, path));
    let bigs = [1, 2].map(|i| read([127, 0, 2, i], "/api/v1/counters/big?precision=1"));
    let stats = read([127, 0, 2, 3], "/api/v1/stats/big?precision=1");
    let small = read([127, 0, 3, 1], "/api/v1/counters/small?precision=1");
    for big in bigs {
        let (status, _, body) = big.await.unwrap();
        assert_eq!(status, 200, "{}", &body[..body.len().min(300)]);
        let samples = json(&body)["samples"].as_array().unwrap().clone();
        assert_eq!(samples.len() as i64, BUCKETS);
        assert!(samples.iter().all(|s| s[1] == 1));
        assert_eq!(samples.last().unwrap()[0], now);
    }
    let (status, _, body) = stats.await.unwrap();
    assert_eq!(status, 200, "{}", &body[..body.len().min(300)]);
    let buckets = json(&body)["buckets"].as_array().unwrap().clone();
    assert_eq!(buckets.len() as i64, STAT_BUCKETS);
    assert!(buckets.iter().all(|b| b["count"] == 2 && b["mean"] == 3.0));
    let (status, _, body) = small.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["samples"], serde_json::json!([[now, 5]]));
}

#[test]
fn the_404_page_names_every_api_path() {
    let srv = common::server();
    let (_serve, addr) = serve(&srv.url(), &[]);
    let (status, _, body) = get(&addr, "/no/such/page");
    assert_eq!(status, 404);
    for path in [
        "<code>counters</code>",
        "<code>counters/{name}</code>",
        "<code>top</code>",
        "<code>stats</code>",
        "<code>stats/{name}</code>",
        "<code>/api/v1/read</code>",
    ] {
        assert!(body.contains(path), "{path}: {body}");
    }
}

/// StatsD over TCP: 300 idle connections from one address hold 16 places
/// (the rest are closed at once), so a client of another address is still
/// served (before, the first 256 held every place for ever and the next
/// client waited to be accepted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_statsd_streams_of_one_address_starve_no_one() {
    let srv = common::server();
    let statsd = bin::free_addr();
    let (_ingest, addr) = bin::start_ingest(&srv.url(), &["--statsd-listen", &statsd]);
    let target: SocketAddr = statsd.parse().unwrap();
    let mut idle = Vec::new();
    for _ in 0..300 {
        if let Ok(s) = connect_from(HOSTILE, target).await {
            idle.push(s);
        }
    }
    // Give the server time to accept (and close) them all.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut open = 0;
    for s in &mut idle {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(20), s.read(&mut byte)).await;
        // Still open: no answer yet (a closed one reads 0 or fails).
        open += usize::from(read.is_err());
    }
    assert_eq!(open, 16, "idle streams the server kept of one address");
    let mut client = TcpStream::connect(target).await.unwrap();
    client.write_all(b"starved.not:3|c\n").await.unwrap();
    drop(client);
    let hits = || {
        bin::http_get(&addr, "/metrics")
            .and_then(|(_, body)| bin::metric_value(&body, "hitcount_statsd_hits_total"))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while hits() != Some(1.0) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(hits(), Some(1.0), "the other client's line was not taken");
    drop(idle);
}

/// A worker out of file descriptors (`ulimit -n`) takes no new connection,
/// its probes' included, until open ones close: it says so in its log (it
/// said nothing at the default level), and answers again once they close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_out_of_file_descriptors_says_so_and_recovers() {
    let srv = common::server();
    let listen = bin::free_addr();
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_hitcount"))
        .args(["worker", "--redis-url", &srv.url(), "--listen", &listen]);
    let mut worker = Child::spawn("few-files", cmd);
    bin::wait_ready(&mut worker, &listen);
    let addr: SocketAddr = listen.parse().unwrap();
    // Sixteen addresses, eight connections each: more than 64 files.
    let mut held = Vec::new();
    for a in 0..16u8 {
        for _ in 0..8 {
            if let Ok(s) = connect_from([127, 0, 9, a + 1], addr).await {
                held.push(s);
            }
        }
    }
    bin::wait_for("the warning", Duration::from_secs(10), || {
        worker.assert_running();
        worker
            .stderr()
            .contains("out of file descriptors (ulimit -n)")
            .then_some(())
    });
    drop(held);
    bin::wait_for("/healthz answered again", Duration::from_secs(30), || {
        bin::http_get(&listen, "/healthz").filter(|(status, _)| *status == 200)
    });
    assert_eq!(
        worker.stderr().matches("out of file descriptors").count(),
        1,
        "once a minute at most:\n{}",
        worker.stderr()
    );
}
