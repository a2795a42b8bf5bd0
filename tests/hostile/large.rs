//! Large entries cost only their sender: 300 entries of a megabyte or more
//! (a plain name, a MessagePack name, a valid name beside a 2 MiB field,
//! 1,000 fields of 1 KiB) among valid hits. The worker is SIGKILLed
//! mid-backlog and restarted under the same consumer name, so that it
//! re-reads its own pending large entries first: valid hits are counted
//! exactly, each large entry is dead-lettered once as `too_large`, each
//! process' peak RSS stays within 256 MiB and the dead-letter stream
//! within 2 MiB. Large request bodies sent to `ingest`, many at once,
//! cost only their senders too: ingest's peak RSS stays within that bound.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use hitcount::model::config::LayoutArgs;
use hitcount::model::keys::Keys;
use hitcount::store::connect::Conn;

use crate::common::bin::{worker, Child};
use crate::common::*;

const MIB: usize = 1 << 20;
/// The contract: a worker's peak RSS whatever the entries hold (and
/// ingest's, whatever the bodies).
const PEAK_RSS_BOUND_KIB: u64 = 256 * 1024;
/// The contract: what the dead letters of 300 large entries keep.
const DEAD_STREAM_BOUND: u64 = 2 * MIB as u64;
/// Valid hits before each large entry.
const VALID_BETWEEN: usize = 2;

/// The four shapes of a large entry, 75 of each: its fields.
fn large_entry(i: usize, blob: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    match i % 4 {
        0 => vec![(b"name".to_vec(), blob.to_vec())],
        1 => {
            let name = std::str::from_utf8(blob).unwrap();
            vec![(
                b"hit".to_vec(),
                hitcount::model::event::encode(name, 1, None),
            )]
        }
        2 => vec![
            (b"name".to_vec(), b"valid:big".to_vec()),
            (b"blob".to_vec(), [blob, blob].concat()),
        ],
        _ => (0..1000)
            .map(|f| (format!("f{f}").into_bytes(), blob[..1024].to_vec()))
            .collect(),
    }
}

/// Fills `hits`: [`VALID_BETWEEN`] valid hits (plain and MessagePack), then
/// one large entry, 300 times, then valid hits again. Returns the valid
/// hits (for the reference) and the large entries' ids.
async fn fill(c: &mut Conn, ts: i64) -> (Vec<(String, i64, i64)>, BTreeSet<String>) {
    let blob = vec![b'b'; MIB];
    let mut hits = Vec::new();
    let mut large = BTreeSet::new();
    for i in 0..=300 {
        let mut pipe = redis::pipe();
        for j in 0..VALID_BETWEEN {
            let name = format!("valid:{}", j % 5);
            let count = 1 + (j % 3) as i64;
            let cmd = pipe.cmd("XADD").arg("hits").arg("*");
            if j % 2 == 0 {
                cmd.arg("name")
                    .arg(&name)
                    .arg("count")
                    .arg(count)
                    .arg("ts")
                    .arg(ts);
            } else {
                cmd.arg("hit").arg(hitcount::model::event::encode(
                    &name,
                    count,
                    Some(ts as f64),
                ));
            }
            cmd.ignore();
            hits.push((name, count, ts));
        }
        pipe.query_async::<()>(c).await.unwrap();
        if i == 300 {
            break;
        }
        let mut cmd = redis::cmd("XADD");
        cmd.arg("hits").arg("*");
        for (f, v) in large_entry(i, &blob) {
            cmd.arg(f).arg(v);
        }
        let id: String = cmd.query_async(c).await.unwrap();
        large.insert(id);
    }
    (hits, large)
}

/// A process' peak resident set (VmHWM), in KiB; `None` once it is gone.
fn peak_rss_kib(pid: libc::pid_t) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn xlen(c: &mut Conn, key: &str) -> u64 {
    redis::cmd("XLEN").arg(key).query_async(c).await.unwrap()
}

/// The dead-letter stream's entries, each its field/value pairs as bytes.
async fn raw_dead_letters(c: &mut Conn) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    let v: redis::Value = redis::cmd("XRANGE")
        .arg("hits:dead")
        .arg("-")
        .arg("+")
        .query_async(c)
        .await
        .unwrap();
    crate::common::plain::entry_list(&v)
        .iter()
        .map(|e| e.pairs().map(|(f, v)| (f.to_vec(), v.to_vec())).collect())
        .collect()
}

/// A worker as `big`, its windows short (100 ms while behind), so that it
/// dead-letters as it goes and a kill finds it mid-backlog.
fn large_worker(url: &str) -> Child {
    let mut cmd = worker(url, "big", "127.0.0.1:0", &["--block-ms", "200"]);
    cmd.args(["--window-ms", "10"]);
    cmd.env("HITCOUNT_CONSUMER", "big");
    Child::spawn("big", cmd)
}

#[tokio::test]
async fn large_entries_are_dead_lettered_once_in_bounded_memory_across_a_kill() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let ts = unix_now() - 5;
    let (hits, large) = fill(&mut c, ts).await;
    assert_eq!(large.len(), 300);

    // First run: killed mid-backlog, holding large entries pending.
    let mut first = large_worker(&url);
    let pid = first.pid();
    let mut peaks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        first.assert_running();
        // A third of the large entries dead-lettered, others read and held.
        let dead = xlen(&mut c, "hits:dead").await;
        let pending = pending_of(&mut c, "big").await;
        if dead >= 100 && pending > 0 {
            break;
        }
        assert!(
            dead < 300,
            "drained in one go, never found mid-backlog (peak RSS {:?} KiB)",
            peak_rss_kib(pid)
        );
        assert!(
            Instant::now() < deadline,
            "the first worker dead-lettered {dead} entries, holds {pending}, after 2 minutes:\n{}",
            first.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    peaks.push(peak_rss_kib(pid).expect("the first worker's status"));
    first.kill();
    let dead_at_kill = xlen(&mut c, "hits:dead").await;
    let pending_at_kill = pending_of(&mut c, "big").await;
    assert!(
        dead_at_kill < 300,
        "killed mid-backlog, not after it ({dead_at_kill} dead letters)"
    );

    // Second run, same consumer name: it re-reads its pending entries first.
    let mut second = large_worker(&url);
    let pid = second.pid();
    let keys = Keys::new(&LayoutArgs::default(), &Default::default());
    let deadline = Instant::now() + Duration::from_secs(300);
    while !crate::common::plain::drained(&mut c, &keys).await.unwrap() {
        second.assert_running();
        assert!(
            Instant::now() < deadline,
            "not drained in 5 minutes:\n{}",
            second.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    peaks.push(peak_rss_kib(pid).expect("the second worker's status"));
    second.terminate(Duration::from_secs(30));
    let dead_bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("hits:dead")
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut c)
        .await
        .unwrap();
    eprintln!(
        "peak RSS of each worker: {peaks:?} KiB; dead-letter stream: {dead_bytes} bytes; \
         dead letters at the kill: {dead_at_kill}, pending: {pending_at_kill}"
    );

    // Valid hits exactly, the large ones in no counter.
    let want = reference(&hits, &LayoutArgs::default().precisions);
    assert_eq!(read_all(&mut c, &keys).await, want);

    // Each large entry dead-lettered once, as too_large, cut to 4 KiB.
    let letters = raw_dead_letters(&mut c).await;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for l in &letters {
        let field = |name: &str| {
            let at = l.iter().rposition(|(k, _)| k == name.as_bytes());
            at.map(|i| String::from_utf8_lossy(&l[i].1).into_owned())
                .unwrap_or_default()
        };
        *seen.entry(field("id")).or_default() += 1;
        assert_eq!(field("reason"), "too_large", "{}", field("id"));
        assert_eq!(field("truncated"), "1");
        assert!(field("original_bytes").parse::<usize>().unwrap() > 1000 * 1024);
        // Past reason and id, before the two marks: the original fields.
        let kept: usize = l[2..l.len() - 2]
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        assert!(kept <= 4096, "{kept} bytes of the original fields kept");
    }
    let once: BTreeSet<String> = seen.keys().cloned().collect();
    assert_eq!(
        once, large,
        "every large entry, and only they, dead-lettered"
    );
    assert!(
        seen.values().all(|&n| n == 1),
        "dead-lettered more than once: {:?}",
        seen.iter().filter(|(_, &n)| n > 1).collect::<Vec<_>>()
    );

    assert!(
        dead_bytes <= DEAD_STREAM_BOUND,
        "the dead-letter stream takes {dead_bytes} bytes"
    );
    for peak in peaks {
        assert!(
            peak <= PEAK_RSS_BOUND_KIB,
            "a worker peaked at {peak} KiB of RSS"
        );
    }
}

/// Claims are bounded too: 250 entries of 1.5 MiB left pending by a
/// consumer that is gone (25 of them delivered too often), before valid
/// hits, are claimed by a live worker a few at a time (one claim takes up
/// to 250 entries: 375 MiB at once without a byte bound), each
/// dead-lettered once and cut to 4 KiB, as `too_large` or, past the
/// delivery bound, `max_deliveries`; the worker's peak RSS stays within
/// 256 MiB.
#[tokio::test]
async fn large_entries_left_pending_by_a_gone_consumer_are_claimed_in_bounded_memory() {
    let srv = server();
    let url = srv.url();
    let mut c = conn(&url).await;
    let ts = unix_now() - 5;
    let blob = vec![b'b'; MIB + MIB / 2];
    let mut large = BTreeSet::new();
    for _ in 0..250 {
        let id: String = redis::cmd("XADD")
            .arg("hits")
            .arg("*")
            .arg("name")
            .arg(&blob)
            .query_async(&mut c)
            .await
            .unwrap();
        large.insert(id);
    }
    let hits = xadd_hits(&mut c, "valid:claimed", 400, ts).await;
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("hits")
        .arg("hitcount")
        .arg("0")
        .query_async(&mut c)
        .await
        .unwrap();
    // The gone consumer reads everything, ten at a time.
    while !read_new(&mut c, "hitcount", "gone", 10).await.is_empty() {}
    let poisoned: Vec<&String> = large.iter().step_by(10).collect();
    for id in &poisoned {
        let _: redis::Value = redis::cmd("XCLAIM")
            .arg("hits")
            .arg("hitcount")
            .arg("gone")
            .arg(0)
            .arg(id.as_str())
            .arg("RETRYCOUNT")
            .arg(10)
            .arg("JUSTID")
            .query_async(&mut c)
            .await
            .unwrap();
    }

    let mut cmd = worker(&url, "live", "127.0.0.1:0", &["--block-ms", "200"]);
    cmd.args(["--claim-idle-ms", "1000"]);
    let mut live = Child::spawn("live", cmd);
    let keys = Keys::new(&LayoutArgs::default(), &Default::default());
    let deadline = Instant::now() + Duration::from_secs(300);
    while !crate::common::plain::drained(&mut c, &keys).await.unwrap() {
        live.assert_running();
        assert!(
            Instant::now() < deadline,
            "not drained in 5 minutes:\n{}",
            live.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let peak = peak_rss_kib(live.pid()).expect("the worker's status");
    live.terminate(Duration::from_secs(30));
    eprintln!("peak RSS of the claiming worker: {peak} KiB");

    let want = reference(&hits, &LayoutArgs::default().precisions);
    assert_eq!(read_all(&mut c, &keys).await, want);
    let letters = raw_dead_letters(&mut c).await;
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in &letters {
        let field = |name: &str| {
            let at = l.iter().position(|(k, _)| k == name.as_bytes());
            at.map(|i| String::from_utf8_lossy(&l[i].1).into_owned())
                .unwrap_or_default()
        };
        seen.entry(field("id")).or_default().push(field("reason"));
        assert_eq!(field("truncated"), "1");
        assert_eq!(field("original_bytes"), (4 + blob.len()).to_string());
        let name = l.iter().find(|(k, _)| k == b"name").expect("the name, cut");
        assert!(
            name.1.len() <= 4096,
            "{} bytes of the name kept",
            name.1.len()
        );
    }
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), large);
    for (id, reasons) in &seen {
        let want = if poisoned.contains(&id) {
            "max_deliveries"
        } else {
            "too_large"
        };
        assert_eq!(reasons, &[want], "{id}");
    }
    assert!(
        peak <= PEAK_RSS_BOUND_KIB,
        "the claiming worker peaked at {peak} KiB of RSS"
    );
}

/// Bodies of a megabyte from 40 addresses at once, 32 of small valid hits
/// (80,000 a body) and 8 of elements that are no hit: every valid hit is
/// taken, each answer lists at most 1,000 refusals, and ingest's peak RSS
/// stays within 256 MiB (judging a body holds about ten times its size:
/// the 32 took 400 MiB at once before their judging had a budget; a
/// refusal listed for each of half a million elements answered a megabyte
/// with twenty). No hit is appended twice: while bodies were judged on
/// the runtime's threads, a busy machine (14 busy loops beside it) made
/// an append's Redis reply outlast its timeout, the client was told 503
/// after part of its body was appended, and sent it all again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_large_bodies_at_once_hold_ingest_to_a_budget() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const BODIES: u8 = 40;
    const REFUSED: u8 = 8;
    const HITS: usize = 80_000;
    let srv = server();
    let (ingest, addr) = crate::common::bin::start_ingest(&srv.url(), &[]);
    let valid = format!("[{}]", vec![r#"{"name":"a"}"#; HITS].join(","));
    let refused = format!("[{}]", vec!["0"; 500_000].join(","));
    assert!(valid.len() <= MIB && refused.len() <= MIB);
    let target: std::net::SocketAddr = addr.parse().unwrap();
    let posts: Vec<_> = (0..BODIES)
        .map(|i| {
            let body = if i < BODIES - REFUSED {
                &valid
            } else {
                &refused
            }
            .clone();
            // Sent again after a 503 (busy), as the docs tell clients.
            tokio::spawn(async move {
                loop {
                    let mut s = crate::http::connect_from([127, 0, 3, 1 + i], target)
                        .await
                        .unwrap();
                    let head = format!(
                        "POST /api/v1/hits HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    s.write_all(head.as_bytes()).await.unwrap();
                    s.write_all(body.as_bytes()).await.unwrap();
                    let mut raw = Vec::new();
                    s.read_to_end(&mut raw).await.unwrap();
                    let raw = String::from_utf8(raw).unwrap();
                    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
                    if head.starts_with("HTTP/1.1 503 ") {
                        continue;
                    }
                    assert!(head.starts_with("HTTP/1.1 202 "), "{head}");
                    return serde_json::from_str::<serde_json::Value>(body).unwrap();
                }
            })
        })
        .collect();
    for (i, answer) in posts.into_iter().enumerate() {
        let answer = answer.await.unwrap();
        let (accepted, listed) = (answer["accepted"].as_u64(), answer["refused"].as_array());
        if i < (BODIES - REFUSED) as usize {
            assert_eq!(
                (accepted, listed.map(Vec::len)),
                (Some(HITS as u64), Some(0))
            );
        } else {
            assert_eq!((accepted, listed.map(Vec::len)), (Some(0), Some(1000)));
            assert_eq!(answer["refused_unlisted"].as_u64(), Some(499_000));
        }
    }
    let mut c = conn(&srv.url()).await;
    assert_eq!(
        xlen(&mut c, "hits").await,
        (BODIES - REFUSED) as u64 * HITS as u64
    );
    let peak = peak_rss_kib(ingest.pid()).expect("ingest's status");
    assert!(
        peak <= PEAK_RSS_BOUND_KIB,
        "ingest's peak RSS: {peak} KiB, over {PEAK_RSS_BOUND_KIB} KiB"
    );
}

/// A remote read of 2.6 million samples (the most one read may answer is 5
/// million) asked six times at once, from six addresses: each is answered
/// whole (or, having waited 15 s for its turn on a busy machine, 429), and
/// `serve`'s peak RSS stays within three times what one such
/// read alone costs a `serve` of its own (reads wait for their turn
/// within a budget of samples; each of the runtime's two threads may keep
/// a read's worth of memory). Before the budget, six such reads were
/// answered 503 (their HGETALLs at once outlasted the reply timeout), and
/// six reads of 4 million samples took 2.4 GB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_large_remote_reads_at_once_hold_serve_to_a_budget() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SERIES: usize = 10_000;
    const KEPT: &str = "260";
    let srv = server();
    let mut c = conn(&srv.url()).await;
    // Every bucket kept holds hits: a read holds the hashes it has read
    // while it waits for the next.
    let now = unix_now();
    let buckets: Vec<(i64, u32)> = (0..KEPT.parse().unwrap())
        .map(|b| (now - now % 60 - 60 * i64::from(b), b + 1))
        .collect();
    for part in (0..SERIES).collect::<Vec<_>>().chunks(200) {
        let mut pipe = redis::pipe();
        for i in part {
            let name = format!("n{i:05}");
            pipe.hset_multiple(format!("count:60:{name}"), &buckets)
                .ignore();
            pipe.zadd("known:", format!("60:{name}"), 0).ignore();
        }
        pipe.query_async::<()>(&mut c).await.unwrap();
    }
    // `hitcount_hits{precision="60"}` over the last five hours.
    let read = crate::http::remote_read(
        now - 5 * 3600,
        now + 60,
        &[("__name__", "hitcount_hits"), ("precision", "60")],
    );
    // The reads: each answered 200 with its samples (compressed).
    async fn ask(from: u8, addr: std::net::SocketAddr, read: Vec<u8>) -> usize {
        let mut s = crate::http::connect_from([127, 0, 4, from], addr)
            .await
            .unwrap();
        let head = format!(
            "POST /api/v1/read HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
             Content-Encoding: snappy\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            read.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&read).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        // Answered (a read that waited too long for its turn: 429, busy).
        if raw.starts_with(b"HTTP/1.1 429 ") {
            return 0;
        }
        assert!(
            raw.starts_with(b"HTTP/1.1 200 "),
            "{:?}",
            &raw[..raw.len().min(300)]
        );
        raw.len()
    }
    let serve_alone = |reads: u8| {
        let (serve, addr) = crate::http::serve(&srv.url(), &["--samples", KEPT]);
        let read = read.clone();
        async move {
            let addr: std::net::SocketAddr = addr.parse().unwrap();
            let asked: Vec<_> = (1..=reads)
                .map(|i| tokio::spawn(ask(i, addr, read.clone())))
                .collect();
            let mut sizes = Vec::new();
            for a in asked {
                sizes.push(a.await.unwrap());
            }
            let peak = peak_rss_kib(serve.pid()).expect("serve's status");
            (peak, sizes)
        }
    };
    let (one, sizes) = serve_alone(1).await;
    assert!(sizes[0] > 1 << 20, "an answer of {} bytes", sizes[0]);
    let (six, more) = serve_alone(6).await;
    assert!(
        more.iter()
            .all(|&n| n == 0 || n.abs_diff(sizes[0]) < sizes[0] / 10),
        "{more:?}"
    );
    assert!(more.iter().any(|&n| n > 0), "no read was answered");
    assert!(
        six <= 3 * one,
        "six reads at once took {six} KiB at their peak, one alone {one} KiB"
    );
}

/// Clients that ask for a large answer and never read it hold `serve` to a
/// budget: 10 of them, each asking for the whole of a 230,000-sample
/// counter (7.6 MB of JSON, more than the kernel's socket buffers hold),
/// once held every answer until their
/// connections' deadline (250 such clients, 588 MB). Now the answers over
/// 64 KiB being sent hold at most 64 MiB between them: the clients beyond
/// are told 503 at once, with `Retry-After`, and once the readers are gone,
/// a client that reads gets its answer whole. `serve`'s peak RSS stays
/// within that budget and three times what one answer alone costs a
/// `serve` of its own (the readers ask one after another). It runs alone
/// (`scripts/run-tests`): it measures memory, and its builds of large
/// answers are a load the other binaries' drains should not share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_hold_serve_to_a_budget() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const BUCKETS: i64 = 230_000;
    const COUNT: i64 = 1_000_000_000_000_000_000;
    const READERS: u8 = 10;
    const BUDGET_KIB: u64 = 64 * 1024;
    let srv = server();
    let mut c = conn(&srv.url()).await;
    let now = unix_now();
    // Counts of 19 digits: 33 bytes of JSON a sample, so that an answer
    // larger than the socket buffers is quick to build.
    for chunk in (now - BUCKETS + 1..=now).collect::<Vec<_>>().chunks(20_000) {
        let fields: Vec<(i64, i64)> = chunk.iter().map(|&t| (t, COUNT)).collect();
        let () = redis::pipe()
            .hset_multiple("count:1:big", &fields)
            .zadd("known:", "1:big", 0)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let samples = (BUCKETS + 10).to_string();
    let args = ["--precisions", "1", "--samples", samples.as_str()];
    const PATH: &str = "/api/v1/counters/big?precision=1";
    // The whole answer of a client that reads it.
    let read_whole = |addr: String| {
        let (status, head, body) = crate::http::get(&addr, PATH);
        assert_eq!(status, 200, "{head}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let samples = v["samples"].as_array().unwrap();
        assert_eq!(samples.len() as i64, BUCKETS);
        assert!(samples.iter().all(|s| s[1] == COUNT));
        body.len()
    };
    let (alone, addr) = crate::http::serve(&srv.url(), &args);
    let size = read_whole(addr.clone());
    assert!(size > 4 * MIB, "an answer of {size} bytes");
    let one = peak_rss_kib(alone.pid()).unwrap();
    drop(alone);

    let (serve, addr) = crate::http::serve(&srv.url(), &args);
    let sock: std::net::SocketAddr = addr.parse().unwrap();
    // A reader that asks, reads the status line and stops reading, with a
    // receive buffer as small as the kernel allows.
    let stall = |i: u8| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 6, 1 + i / 10], 0)))
            .unwrap();
        let mut s = socket.connect(sock).await.unwrap();
        let req = format!("GET {PATH} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.unwrap();
        let status = String::from_utf8_lossy(&head[9..12]).to_string();
        let mut rest = Vec::new();
        if status != "200" {
            s.read_to_end(&mut rest).await.unwrap();
        }
        (status, String::from_utf8_lossy(&rest).to_string(), s)
    };
    // One after another (each answer built alone), until the budget is
    // held: an answer of about 7,400 KiB takes as much of its 65,536, so 8
    // are sent, and none of them can be written whole (the socket buffers
    // of both ends hold about 5 MB) nor reach its connection's 30 s
    // deadline (an answer takes about 1 s to build here).
    let fits = BUDGET_KIB / (size as u64).div_ceil(1024);
    let (mut sending, mut refused, mut held) = (0, 0, Vec::new());
    for i in 0..READERS {
        let (status, rest, s) = stall(i).await;
        match status.as_str() {
            "200" => sending += 1,
            "503" => {
                refused += 1;
                assert!(
                    rest.to_ascii_lowercase().contains("retry-after: 1\r\n"),
                    "{rest}"
                );
                assert!(
                    rest.contains(r#"{"error":"busy: other large answers"#),
                    "{rest}"
                );
                assert!(
                    rest.to_ascii_lowercase()
                        .contains("content-security-policy: default-src 'none'\r\n"),
                    "{rest}"
                );
            }
            other => panic!("reader {i} answered {other}: {rest}"),
        }
        held.push(s);
    }
    assert_eq!(
        (sending, refused),
        (fits, u64::from(READERS) - fits),
        "answers of {size} bytes sent at once"
    );
    // The budget held, and one answer built at a time; but each of the
    // runtime's two threads may keep the memory of a build it freed.
    let peak = peak_rss_kib(serve.pid()).unwrap();
    assert!(
        peak <= 3 * one + BUDGET_KIB,
        "{READERS} stalled readers took serve to {peak} KiB, one answer alone {one} KiB"
    );
    // Gone, they give the budget back: a reader gets its answer whole.
    drop(held);
    let addr2 = addr.clone();
    let got = tokio::task::spawn_blocking(move || read_whole(addr2))
        .await
        .unwrap();
    assert_eq!(got, size);
}
