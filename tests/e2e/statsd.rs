//! StatsD into `hitcount ingest` through a real UDP socket (and a TCP
//! stream), the real binary against a real redis-server and a real worker:
//! every type, sample rates, several lines a packet and malformed lines;
//! the counts and the statistics exact, ignored and refused lines counted
//! by type and reason, no drop.

use std::io::Write as _;
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

use crate::common::bin::{counted, free_addr, http_get, metric_value, start_ingest, start_worker};
use crate::common::stats::summary;
use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statsd_lines_of_every_type_count_exactly() {
    let srv = server();
    let url = srv.url();
    let mut admin = conn(&url).await;
    let statsd = free_addr();
    let (mut ingest, addr) = start_ingest(&url, &["--statsd-listen", &statsd]);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    for packet in [
        // Counters, with rates: 1 + 2/0.5 + round(1/0.4) = 1 + 4 + 3.
        "page.a:1|c\npage.a:2|c|@0.5\npage.a:1|c|@0.4",
        // Timers: one of 10, and round(1/0.5) = 2 of 30.
        "api.t:10|ms\r\napi.t:30|ms|@0.5\n",
        // A histogram and a distribution with DogStatsD tags.
        "h.x:5|h\nd.x:-2.5|d|#env:prod,region:eu",
        // Types not counted.
        "gauge:3|g\nset:alice|s\nodd:1|kv",
        // Malformed lines, each with its reason, beside a good one.
        "nocolon\nbad:x|c\nbad:1|c|@2\n:1|c\nneg:-1|c\nlate:1|c\n",
    ] {
        udp.send_to(packet.as_bytes(), &statsd).unwrap();
    }
    // TCP: lines over a stream, the last one without a newline.
    let mut tcp = TcpStream::connect(&statsd).unwrap();
    tcp.write_all(b"tcp.a:5|c\ntcp.a:").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    tcp.write_all(b"1|c").unwrap();
    drop(tcp);
    // Lines over 64 KiB, one trickled and one whole: each refused, and the
    // lines around them taken.
    let mut tcp = TcpStream::connect(&statsd).unwrap();
    tcp.write_all(b"tcp.b:1|c\n").unwrap();
    for part in [
        vec![b'x'; 40_000],
        vec![b'x'; 40_000],
        b"x\ntcp.b:2|c\n".to_vec(),
    ] {
        tcp.write_all(&part).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    tcp.write_all(&[vec![b'y'; 100_000], b"\ntcp.b:4|c".to_vec()].concat())
        .unwrap();
    drop(tcp);
    // A stream reset after a line without its newline (`tcp.c:5|c` of
    // `tcp.c:5|c|@0.1`): that line is refused as cut off, not taken as 5.
    let tcp = TcpStream::connect(&statsd).unwrap();
    (&tcp).write_all(b"tcp.c:1|c\ntcp.c:5|c").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    reset(tcp);

    let hits = |body: &str| metric_value(body, "hitcount_statsd_hits_total");
    eventually!(30, "every StatsD hit taken", {
        http_get(&addr, "/metrics").and_then(|(_, b)| hits(&b)) == Some(14.0)
    });
    let listen = free_addr();
    let mut worker = start_worker(&url, "w", &listen, &[]);
    eventually!(60, "every hit counted", {
        counted(&mut admin, "page.a").await == 8 && counted(&mut admin, "tcp.b").await == 7
    });
    eventually!(30, "the statistics written", {
        summary(&mut admin, "api.t").await.0 == 3.0
    });
    assert_eq!(counted(&mut admin, "page.a").await, 8);
    assert_eq!(counted(&mut admin, "api.t").await, 3);
    assert_eq!(counted(&mut admin, "h.x").await, 1);
    assert_eq!(counted(&mut admin, "d.x").await, 1);
    assert_eq!(counted(&mut admin, "late").await, 1);
    assert_eq!(counted(&mut admin, "tcp.a").await, 6);
    assert_eq!(counted(&mut admin, "tcp.b").await, 7);
    assert_eq!(counted(&mut admin, "tcp.c").await, 1);
    for ignored in ["gauge", "set", "odd", "bad", "neg"] {
        assert_eq!(counted(&mut admin, ignored).await, 0, "{ignored}");
    }
    assert_eq!(summary(&mut admin, "api.t").await, (3.0, 70.0, 10.0, 30.0));
    assert_eq!(summary(&mut admin, "h.x").await, (1.0, 5.0, 5.0, 5.0));
    assert_eq!(summary(&mut admin, "d.x").await, (1.0, -2.5, -2.5, -2.5));
    let (_, body) = http_get(&addr, "/metrics").unwrap();
    for (series, want) in [
        ("hitcount_statsd_lines_ignored_total{type=\"g\"}", 1.0),
        ("hitcount_statsd_lines_ignored_total{type=\"s\"}", 1.0),
        ("hitcount_statsd_lines_ignored_total{type=\"other\"}", 1.0),
        (
            "hitcount_statsd_lines_refused_total{reason=\"bad_format\"}",
            1.0,
        ),
        (
            "hitcount_statsd_lines_refused_total{reason=\"line_too_long\"}",
            2.0,
        ),
        (
            "hitcount_statsd_lines_refused_total{reason=\"bad_value\"}",
            1.0,
        ),
        (
            "hitcount_statsd_lines_refused_total{reason=\"bad_rate\"}",
            1.0,
        ),
        (
            "hitcount_statsd_lines_refused_total{reason=\"empty_name\"}",
            1.0,
        ),
        (
            "hitcount_statsd_lines_refused_total{reason=\"bad_count\"}",
            1.0,
        ),
        (
            "hitcount_statsd_lines_refused_total{reason=\"cut_off\"}",
            1.0,
        ),
        ("hitcount_statsd_dropped_total{where=\"socket\"}", 0.0),
        ("hitcount_statsd_dropped_total{where=\"queue\"}", 0.0),
    ] {
        assert_eq!(metric_value(&body, series), Some(want), "{series}");
    }
    assert!(dead_letters(&mut admin).await.is_empty());
    assert!(worker.terminate(Duration::from_secs(30)).success());
    assert!(
        ingest.terminate(Duration::from_secs(15)).success(),
        "{}",
        ingest.stderr()
    );
}

/// Closes `tcp` with a reset (SO_LINGER 0), as a crashed client's kernel
/// does, instead of a clean end of stream.
fn reset(tcp: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket and a `linger` of the size given.
    let set = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0, "SO_LINGER");
    drop(tcp);
}

/// With Redis away, hits beyond the producer's buffer are dropped and
/// said in the log at WARN (not a line a drop: the first at once, the rest
/// in one line as ingest stops), and the hits still buffered when ingest
/// stops are said lost at ERROR, with their number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statsd_drops_and_hits_lost_at_a_stop_are_logged() {
    let mut srv = server_with(hitcount_lab::kit::ServerOptions::default());
    let statsd = free_addr();
    let (mut ingest, addr) = start_ingest(
        &srv.url(),
        &["--statsd-listen", &statsd, "--statsd-buffer", "100"],
    );
    srv.stop();
    let mut tcp = TcpStream::connect(&statsd).unwrap();
    tcp.write_all("lost:1|c\n".repeat(500).as_bytes()).unwrap();
    drop(tcp);
    crate::common::bin::wait_for("the drops counted", Duration::from_secs(30), || {
        let (_, body) = http_get(&addr, "/metrics")?;
        let queue = metric_value(&body, "hitcount_statsd_dropped_total{where=\"queue\"}");
        (queue == Some(400.0)).then_some(())
    });
    let (_, body) = http_get(&addr, "/metrics").unwrap();
    assert_eq!(
        metric_value(&body, "hitcount_statsd_hits_total"),
        Some(100.0)
    );
    assert!(ingest.terminate(Duration::from_secs(30)).success());
    let log = ingest.stderr();
    let reports: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("statsd: dropped since the last report"))
        .collect();
    let field = |line: &str, name: &str| -> u64 {
        let at = line.find(&format!("{name}=")).expect(name) + name.len() + 1;
        let digits: String = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };
    let dropped: u64 = reports.iter().map(|l| field(l, "queue_hits")).sum();
    assert_eq!((reports.len(), dropped), (2, 400), "{log}");
    assert!(reports.iter().all(|l| l.contains("WARN")), "{log}");
    let lost: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("StatsD hits not in Redis when ingest stopped"))
        .collect();
    assert_eq!(lost.len(), 1, "{log}");
    assert!(lost[0].contains("ERROR"), "{log}");
    assert_eq!(field(lost[0], "lost"), 100, "{log}");
}
