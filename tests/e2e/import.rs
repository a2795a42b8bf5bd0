//! `hitcount import`, the real binary against a real redis-server with a
//! real worker counting what it appends: an access log imported with the
//! import killed (SIGKILL) twice at random points and run again counts
//! every line exactly once at every precision, as a reference computed
//! from the generated lines says (and interrupted by Ctrl-C, it says the
//! line a rerun goes on after); a second run adds nothing; templates,
//! query strings, gzip, request times as values, NDJSON and refused lines
//! with their reasons and line numbers.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::stats::{self as st, Obs};
use common::*;
use hitcount::model::config::DEFAULT_PRECISIONS;
use hitcount::model::stats::DEFAULT_QUANTILE_PRECISIONS;
use hitcount::store::connect::Conn;

/// Lines of the killed import: the million of the goal; a debug build
/// imports and counts them in about 20 s.
const LINES: usize = 1_000_000;

fn combined(t: i64, method: &str, target: &str, status: u16) -> String {
    format!(
        "10.0.0.{} - - [{}] \"{method} {target} HTTP/1.1\" {status} 512 \"-\" \"Mozilla/5.0 (X11; \\\"q\\\")\"",
        t % 250,
        hitcount_lab::bench::import::log_time(t, 120)
    )
}

/// A small deterministic generator (no seed to keep: the test reports
/// the kill points it chose).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
}

/// Spans of hit times far from every default precision's horizon
/// (120 samples): the last 30 s (kept everywhere), 30 to 90 minutes ago
/// (too old for 1 s and 5 s), 2.5 to 3 hours ago (too old for 60 s too).
fn spans(now: i64) -> [(i64, i64); 3] {
    [
        (now - 30, now),
        (now - 5400, now - 1800),
        (now - 10_800, now - 9000),
    ]
}

/// Kept by the worker at precision `p`, with the margins of [`spans`].
fn kept(now: i64) -> impl Fn(u32, i64) -> bool {
    st::kept(now)
}

/// Adds `count` of `name` at `ts` to `counts` at every precision that
/// keeps it.
fn count(counts: &mut Counts, name: &str, n: i64, ts: i64, keep: &impl Fn(u32, i64) -> bool) {
    for p in DEFAULT_PRECISIONS {
        let bucket = ts.div_euclid(i64::from(p)) * i64::from(p);
        if keep(p, bucket) {
            *counts
                .entry((p, name.to_string()))
                .or_default()
                .entry(bucket)
                .or_default() += n;
        }
    }
}

/// The generated log: its text, the counts the worker must write, and each
/// bad line's number with the reason it must be refused for.
fn access_log(now: i64, lines: usize) -> (String, Counts, BTreeMap<usize, &'static str>) {
    let mut rng = Lcg(now as u64);
    let (mut text, mut counts, mut bad) = (String::new(), Counts::new(), BTreeMap::new());
    let keep = kept(now);
    let spans = spans(now);
    for i in 1..=lines {
        let (from, to) = spans[i % 3];
        let t = from + (rng.next() % (to - from) as u64) as i64;
        let path = format!("/page/{}", rng.next() % 300 % (1 + rng.next() % 300));
        let line = match (i % 997 == 0).then_some(i / 997 % 5) {
            Some(0) => (bad.insert(i, "not_combined"), "junk, not a log line".into()).1,
            Some(1) => {
                (
                    bad.insert(i, "bad_time"),
                    combined(t, "GET", &path, 200).replace("/20", "/Foo/20"),
                )
                    .1
            }
            Some(2) => {
                (
                    bad.insert(i, "bad_request"),
                    combined(t, "GET", &path, 400).replace("GET /page", "-\\x16\\x03"),
                )
                    .1
            }
            Some(3) => {
                (
                    bad.insert(i, "future_timestamp"),
                    combined(now + 3 * 86_400, "GET", &path, 200),
                )
                    .1
            }
            Some(_) => {
                (
                    bad.insert(i, "name_too_long"),
                    combined(t, "GET", &"/x".repeat(2100), 200),
                )
                    .1
            }
            None => {
                let target = match rng.next() % 3 {
                    0 => format!("{path}?utm_source=x&i={i}"),
                    1 => format!("{path}#top"),
                    _ => path.clone(),
                };
                count(&mut counts, &path, 1, t, &keep);
                combined(t, if i % 7 == 0 { "POST" } else { "GET" }, &target, 200)
            }
        };
        text.push_str(&line);
        text.push('\n');
    }
    (text, counts, bad)
}

fn import(url: &str, args: &[&str]) -> Command {
    let mut cmd = bin::hitcount();
    cmd.arg("import")
        .args(args)
        .env("REDIS_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// `hitcount import ARGS`, which must succeed: its stdout.
fn import_ok(url: &str, args: &[&str]) -> String {
    let out = import(url, args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "import {args:?}: {text} {err}");
    text
}

/// The lines read of the one file imported so far on this server.
async fn progress_lines(c: &mut Conn) -> u64 {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*:hc:import:*")
        .query_async(c)
        .await
        .unwrap();
    let Some(key) = keys.first() else { return 0 };
    let at: Option<String> = redis::cmd("GET").arg(key).query_async(c).await.unwrap();
    // `BYTES:LINES:SHA1`
    at.and_then(|a| a.split(':').nth(1).map(|l| l.parse().unwrap()))
        .unwrap_or(0)
}

async fn xlen(c: &mut Conn) -> u64 {
    redis::cmd("XLEN").arg("hits").query_async(c).await.unwrap()
}

/// Counts with one in-process worker until the stream is drained.
/// Counts with the real `hitcount worker` until the stream is drained;
/// stops it and returns its `/metrics`.
async fn drain(c: &mut Conn, url: &str) -> String {
    let listen = bin::free_addr();
    let mut worker = bin::start_worker(url, "w1", &listen, &[]);
    wait_drained(c, &keys(&settings(url, "w1"))).await;
    // Counted in the metrics once applied, which may trail the XACK.
    // (Entries ever added: the leader may have trimmed some.)
    let info: std::collections::HashMap<String, redis::Value> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg("hits")
        .query_async(c)
        .await
        .unwrap();
    let Some(redis::Value::Int(entries)) = info.get("entries-added").cloned() else {
        panic!("XINFO STREAM: {info:?}");
    };
    let entries = entries as f64;
    let metrics = bin::wait_for("every entry applied", Duration::from_secs(30), || {
        let (_, metrics) = bin::http_get(&listen, "/metrics")?;
        let applied = bin::metric_value(&metrics, "hitcount_events_applied_total");
        (applied == Some(entries)).then_some(metrics)
    });
    let stopped = worker.terminate(Duration::from_secs(30));
    assert!(stopped.success(), "{}", worker.stderr());
    metrics
}

/// A redis-server, its URL, a connection to it and the time now.
async fn start() -> (hitcount_lab::kit::RedisServer, String, Conn, i64) {
    let srv = server();
    let url = srv.url();
    let c = conn(&url).await;
    (srv, url, c, unix_now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_killed_twice_counts_every_line_once() {
    let (_srv, url, mut c, now) = start().await;
    let (text, want, bad) = access_log(now, LINES);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    std::fs::write(&log, &text).unwrap();
    let log = log.to_str().unwrap();
    // A worker counts while the import runs, as in production.
    let s = settings(&url, "w1");
    let workers = Workers::start(vec![s.clone()]);
    let mut rng = Lcg(now as u64 ^ 0x5eed);
    for kill in 1..=2 {
        let from = progress_lines(&mut c).await;
        let target = from + 1 + rng.next() % ((LINES as u64 * 4 / 5).saturating_sub(from)).max(1);
        let mut child = import(&url, &[log]).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while progress_lines(&mut c).await < target {
            assert!(
                child.try_wait().unwrap().is_none(),
                "kill {kill}: import ended before line {target}"
            );
            assert!(
                Instant::now() < deadline,
                "kill {kill}: line {target} not reached"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let at = progress_lines(&mut c).await;
        assert!(
            at < LINES as u64,
            "kill {kill} at line {at}: before the end"
        );
        eprintln!("kill {kill}: SIGKILL at line {at} (aimed at {target})");
    }
    // Ctrl-C: it stops and says at which line a rerun goes on.
    let from = progress_lines(&mut c).await;
    let mut child = import(&url, &[log]).spawn().unwrap();
    while progress_lines(&mut c).await == from {
        assert!(
            child.try_wait().unwrap().is_none(),
            "import ended before Ctrl-C"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let interrupted = child.wait_with_output().unwrap();
    let at = progress_lines(&mut c).await;
    let err = String::from_utf8_lossy(&interrupted.stderr);
    assert_eq!(interrupted.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("interrupted after line {at}: ")),
        "{err}"
    );
    let out = import_ok(&url, &[log]);
    assert!(out.contains(&format!("resumed after line {at}: ")), "{out}");
    // The final run reports the bad lines it read, with their numbers.
    let resumed: usize = out
        .split("resumed after line ")
        .nth(1)
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for (&n, &reason) in bad.range(resumed + 1..).take(5) {
        assert!(
            out.contains(&format!("  line {n}: {reason}: ")),
            "line {n} {reason}: {out}"
        );
    }
    let mut refused: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, reason) in bad.range(resumed + 1..) {
        *refused.entry(reason).or_default() += 1;
    }
    let reasons: Vec<String> = refused.iter().map(|(r, n)| format!("{r} {n}")).collect();
    assert!(
        out.contains(&format!("({})", reasons.join(", "))),
        "{reasons:?}: {out}"
    );
    assert!(
        out.contains(&format!("{} lines read", LINES - resumed)),
        "{out}"
    );
    // Again: nothing added.
    let entries = xlen(&mut c).await;
    let again = import_ok(&url, &[log]);
    assert!(
        again.contains(&format!("already imported ({LINES} lines): nothing added")),
        "{again}"
    );
    assert_eq!(
        xlen(&mut c).await,
        entries,
        "a finished import appends nothing"
    );
    wait_drained(&mut c, &keys(&s)).await;
    workers.stop().await;
    let got = read_all(&mut c, &keys(&s)).await;
    assert_eq!(got.len(), want.len(), "the same counters");
    for (key, buckets) in &want {
        assert_eq!(got.get(key), Some(buckets), "count:{}:{}", key.0, key.1);
    }
    assert!(
        dead_letters(&mut c).await.is_empty(),
        "nothing the worker refuses was appended"
    );
    // The progress expires: after the longest retention and a day.
    let ttl: i64 = redis::cmd("TTL")
        .arg(
            redis::cmd("KEYS")
                .arg("*:hc:import:*")
                .query_async::<Vec<String>>(&mut c)
                .await
                .unwrap()[0]
                .clone(),
        )
        .query_async(&mut c)
        .await
        .unwrap();
    assert!((121 * 86_400 - 60..=121 * 86_400).contains(&ttl), "{ttl}");
}

fn gzip(path: &Path, text: &str) {
    let file = std::fs::File::create(path).unwrap();
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_gzip_request_times_and_ndjson() {
    let (_srv, url, mut c, now) = start().await;
    let keep = kept(now);
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let mut want = Counts::new();
    let mut rng = Lcg(now as u64);

    // Request times, gzipped, named by method and path.
    let (mut timed, mut obs) = (String::new(), Vec::<Obs>::new());
    for i in 0..3000 {
        let (from, to) = spans(now)[i % 3];
        let t = from + (rng.next() % (to - from) as u64) as i64;
        let method = ["GET", "POST", "DELETE"][i % 3];
        let ms = (rng.next() % 5000) as f64;
        let name = format!("{method}:/api/{}", i % 7);
        obs.push((name.clone(), 1, t, ms));
        count(&mut want, &name, 1, t, &keep);
        let line = combined(t, method, &format!("/api/{}?q={i}", i % 7), 200);
        timed.push_str(&format!("{line} {:.3}\n", ms / 1000.0));
    }
    gzip(Path::new(&path("timed.log.gz")), &timed);
    let args = [
        "--format",
        "combined-time",
        "--name-template",
        "{method}:{path}",
    ];
    let out = import_ok(&url, &[&args[..], &[&path("timed.log.gz")]].concat());
    assert!(
        out.contains("3000 lines read, 3000 counted in 3000 hits written, none refused"),
        "{out}"
    );
    // The same log uncompressed (as before its rotation) is the same file.
    std::fs::write(path("timed.log"), &timed).unwrap();
    let out = import_ok(&url, &[&args[..], &[&path("timed.log")]].concat());
    assert!(
        out.contains("already imported (3000 lines): nothing added"),
        "{out}"
    );

    // Hosts of absolute URIs; a line without one is refused as no_host.
    let mut hosts = String::new();
    for i in 0..1000 {
        let t = now - 10 - (i % 20) as i64;
        let target = match i % 4 {
            0 => format!("https://shop.example/cart/{}?id={i}", i % 3),
            1 => format!("http://blog.example/p/{}", i % 3),
            _ => format!("/local/{i}"),
        };
        if i % 4 < 2 {
            let host = if i % 4 == 0 {
                "shop.example/cart/"
            } else {
                "blog.example/p/"
            };
            count(&mut want, &format!("h:{host}{}", i % 3), 1, t, &keep);
        }
        hosts.push_str(&combined(t, "GET", &target, 200));
        hosts.push('\n');
    }
    std::fs::write(path("hosts.log"), &hosts).unwrap();
    let out = import_ok(
        &url,
        &["--name-template", "h:{host}{path}", &path("hosts.log")],
    );
    assert!(
        out.contains("1000 lines read, 500 counted") && out.contains("500 refused (no_host 500)"),
        "{out}"
    );
    assert!(
        out.contains("  line 3: no_host: ") && out.contains("(495 more refused lines not shown)"),
        "{out}"
    );

    // Statuses.
    let statuses: String = (0..600)
        .map(|i| {
            let status = [200, 404, 503][i % 3];
            count(&mut want, &format!("status:{status}"), 1, now - 5, &keep);
            combined(now - 5, "GET", "/", status) + "\n"
        })
        .collect();
    // Its last line is still being written: left for a later import.
    let last = combined(now - 5, "GET", "/", 201);
    let (head, tail) = last.split_at(40);
    // A file of that line alone has nothing to import yet.
    std::fs::write(path("partial.log"), head).unwrap();
    let out = import_ok(&url, &[&path("partial.log")]);
    assert!(out.contains("partial.log: no whole line yet: nothing added; its last line has no line end (40 bytes)"), "{out}");
    std::fs::write(path("status.log"), statuses + head).unwrap();
    let by_status = ["--name-template", "status:{status}", &path("status.log")];
    let out = import_ok(&url, &by_status);
    assert!(out.contains("600 counted in 3 hits written"), "{out}");
    let held = "its last line has no line end (40 bytes): left for a later import";
    assert!(out.contains(held), "{out}");
    // Appended to since: the import goes on where it stopped.
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(path("status.log"))
        .unwrap();
    writeln!(log, "{tail}\n{}", combined(now - 5, "GET", "/", 201)).unwrap();
    count(&mut want, "status:201", 2, now - 5, &keep);
    let out = import_ok(&url, &by_status);
    let resumed = "resumed after line 600: 2 lines read, 2 counted in 1 hit written, none refused";
    assert!(out.contains(resumed), "{out}");

    // NDJSON hits, with counts, times and values, and bad lines.
    let t = now - 7;
    count(&mut want, "nd:a", 5, t, &keep);
    count(&mut want, "nd:b", 1, t, &keep);
    obs.push(("nd:b".into(), 1, t, 2.5));
    let nd = format!(
        "{{\"name\":\"nd:a\",\"count\":2,\"ts\":{t}}}\n{{\"name\":\"nd:a\",\"count\":3,\"ts\":{t}.5,\"id\":\"x\"}}\n\n\
         {{\"name\":\"nd:b\",\"ts\":{t},\"value\":2.5}}\nnot json\n{{\"name\":\"nd:c\",\"count\":0}}\n"
    );
    std::fs::write(path("hits.ndjson"), nd).unwrap();
    let out = import_ok(&url, &["--format", "ndjson", &path("hits.ndjson")]);
    assert!(out.contains("6 lines read, 3 counted in 3 hits written, 3 refused (bad_count 1, bad_json 1, blank_line 1)"), "{out}");
    assert!(out.contains("  line 5: bad_json: not json"), "{out}");

    // What the command refuses before it reads anything (a template no
    // name of which can be counted not echoed in full).
    let long = format!("{}{{path}}", "n".repeat(5000));
    for (args, says) in [
        (vec!["-"], "standard input is not supported"),
        (
            vec!["--name-template", "{query}", "x"],
            "is not a name template",
        ),
        (
            vec!["--format", "ndjson", "--name-template", "{path}", "x"],
            "an NDJSON hit has its name",
        ),
        (
            vec!["--name-template", &long, "x"],
            "is longer than a name may be (4096 bytes): every line would be refused",
        ),
        (vec![&path("missing.log")[..]], "cannot read"),
    ] {
        let out = import(&url, &args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says) && err.len() < 1000,
            "{args:?}: {err}"
        );
    }

    let metrics = drain(&mut c, &url).await;
    // Lines older than a precision keeps are counted as the worker counts
    // any late hit: one per entry at each precision that drops them. The
    // request times' lines (one entry each) are the only old ones here:
    // a third 30 to 90 minutes old, a third 2.5 to 3 hours.
    for (p, n) in [(1, 2000.0), (5, 2000.0), (60, 1000.0), (300, 0.0)] {
        let series = format!("hitcount_hits_too_old_total{{precision=\"{p}\"}}");
        assert_eq!(bin::metric_value(&metrics, &series), Some(n), "{series}");
    }
    let s = settings(&url, "w1");
    let got = read_all(&mut c, &keys(&s)).await;
    assert_eq!(got, want);
    let (stats, _) = st::reference(
        &obs,
        &DEFAULT_PRECISIONS,
        &DEFAULT_QUANTILE_PRECISIONS,
        &keep,
    );
    st::assert_equal(&st::read(&mut c, &keys(&s)).await, &stats);
    assert!(dead_letters(&mut c).await.is_empty());
}

/// `hitcount-lab bench --import` times the three imports of a generated
/// log, checks what each appended, and deletes what it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_import_benchmark_times_each_log_and_cleans_up() {
    let (_srv, url, mut c, _) = start().await;
    let args = ["bench", "--redis-url", &url, "--import", "--import-lines"];
    let out = bin::lab(&[&args[..], &["20000", "--json"]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "{report:#}");
    for run in runs {
        assert_eq!(run["lines"], 20_000, "{report:#}");
        assert!(run["lines_per_sec"].as_f64().unwrap() > 0.0, "{report:#}");
    }
    // Summed per name and second, except with a request time on every line.
    let entries = |i: usize| runs[i]["entries"].as_u64().unwrap();
    assert!(
        entries(0) < 20_000 && entries(0) == entries(1),
        "{report:#}"
    );
    assert_eq!(entries(2), 20_000, "{report:#}");
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(
        left.iter().all(|k| !k.contains("bench:import:")),
        "{left:?}"
    );
}

/// A gzipped log cut short (a copy interrupted): every whole line before
/// the cut is imported and recorded, as the error says, and a second run
/// adds nothing; the batches read with the failed one were dropped before.
/// A horizon too long for Redis' expiry (a billion samples of a year)
/// keeps the progress for good instead of failing after the hits went in
/// (each rerun appended the batch again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_gzip_keeps_its_whole_lines_and_a_long_horizon_its_progress() {
    let (_srv, url, mut c, now) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let text: String = (0..60_000)
        .map(|i| combined(now - 10, "GET", &format!("/t/{i}"), 200) + "\n")
        .collect();
    gzip(Path::new(&path("cut.log.gz")), &text);
    let mut gz = std::fs::read(path("cut.log.gz")).unwrap();
    gz.truncate(gz.len() - 10);
    std::fs::write(path("cut.log.gz"), &gz).unwrap();
    // The whole lines the cut file still holds.
    let mut decoded = Vec::new();
    let _ = std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut decoded);
    let whole = decoded.iter().filter(|b| **b == b'\n').count() as u64;
    assert!(whole > 50_000, "{whole}");
    for _ in 0..2 {
        let out = import(&url, &[&path("cut.log.gz")]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("the lines before are imported and recorded"),
            "{err}"
        );
        assert_eq!(progress_lines(&mut c).await, whole, "{err}");
        assert_eq!(
            xlen(&mut c).await,
            whole,
            "one event a line: distinct names"
        );
    }

    let (_srv, url, mut c, now) = start().await;
    std::fs::write(
        path("far.log"),
        combined(now - 10, "GET", "/far", 200) + "\n",
    )
    .unwrap();
    for run in 0..2 {
        let out = import(&url, &[&path("far.log")])
            .env("HITCOUNT_SAMPLES", "1000000000")
            .env("HITCOUNT_PRECISIONS", "31536000")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if run == 1 {
            assert!(text.contains("already imported (1 line)"), "{text}");
        }
        assert_eq!(xlen(&mut c).await, 1);
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*:hc:import:*")
        .query_async(&mut c)
        .await
        .unwrap();
    let ttl: i64 = redis::cmd("TTL")
        .arg(&keys[0])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ttl, -1, "kept for good");
}

/// Several files, one missing and one rewritten shorter in place: the
/// others are imported, each failure is told with what to do (a rewritten
/// file is not one to run again), and the run fails at the end naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_cannot_be_imported_leaves_the_others_going() {
    let (_srv, url, mut c, now) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let lines = |from: usize, n: usize| -> String {
        (from..from + n)
            .map(|i| combined(now - 10, "GET", &format!("/f/{i}"), 200) + "\n")
            .collect()
    };
    std::fs::write(path("a.log"), lines(0, 100)).unwrap();
    std::fs::write(path("b.log"), lines(100, 50)).unwrap();
    std::fs::write(path("c.log"), lines(300, 100)).unwrap();
    import_ok(&url, &[&path("a.log")]);
    import_ok(&url, &[&path("c.log")]);
    // A log under 4 KiB is imported, with a warning that it must not grow.
    std::fs::write(path("d.log"), lines(500, 2)).unwrap();
    let out = import(&url, &[&path("d.log")]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("holds less than 4096 bytes"), "{err}");
    // a.log rewritten in place, shorter, its first 4 KiB (its identity) kept.
    std::fs::write(path("a.log"), lines(0, 60)).unwrap();
    // c.log rewritten longer, its first 4 KiB kept and its lines after them
    // longer: its bytes up to its recorded progress are not those imported,
    // so it is another file, imported from its start under its own
    // progress, and said so.
    let longer: String = (60..200)
        .map(|i| combined(now - 10, "GET", &format!("/long/{i}"), 200) + "\n")
        .collect();
    std::fs::write(path("c.log"), lines(300, 60) + &longer).unwrap();
    let out = import_ok(&url, &[&path("c.log")]);
    assert!(
        out.contains(
            "another file than the one imported with the same first 4 KiB, imported from its \
             start: 200 lines read, 200 counted"
        ),
        "{out}"
    );
    let files = [path("a.log"), path("missing.log"), path("b.log")];
    let args: Vec<&str> = files.iter().map(String::as_str).collect();
    let out = import(&url, &args).output().unwrap();
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{text} {err}");
    assert!(
        text.contains("b.log: 50 lines read, 50 counted"),
        "{text} {err}"
    );
    assert!(err.contains("nothing more is imported from it"), "{err}");
    assert!(!err.contains("run the same command again"), "{err}");
    assert!(
        err.contains("missing.log") && err.contains("the other files go on"),
        "{err}"
    );
    assert!(err.contains("2 of 3 files not imported in full"), "{err}");
    assert!(
        text.contains("1 of 3 files imported: ") && !text.contains("the 1 of 3"),
        "{text}"
    );
    assert!(!text.contains("all 3 files"), "{text}");
    assert_eq!(
        xlen(&mut c).await,
        452,
        "a.log's 100 lines, c.log's 100 then 200, d.log's 2 and b.log's 50"
    );
}

/// NDJSON hits without times: two files with the same first 4 KiB. The
/// second is another file (its bytes up to where the first's import
/// stopped are not the first's), imported from its start, every line once
/// (an earlier version went on after the first's 1000 lines and lost 965 of
/// its lines without a word); the first, grown since, goes on where it
/// stopped, and so does the second; a gzipped copy is the same file; one
/// shorter than both that is neither is refused. A progress an earlier
/// version recorded (without the hash) is gone on from as then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_only_starts_as_an_imported_one_is_another() {
    let (_srv, url, mut c, _) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let hits = |name: &str, n: usize| format!("{{\"name\":\"nd:{name}\"}}\n").repeat(n);
    let nd = |file: &str| import_ok(&url, &["--format", "ndjson", &path(file)]);
    std::fs::write(path("nd1.ndjson"), hits("home", 1000)).unwrap();
    let nd2 = hits("home", 300) + &hits("other", 700) + &hits("home", 500);
    std::fs::write(path("nd2.ndjson"), &nd2).unwrap();
    let out = nd("nd1.ndjson");
    assert!(out.contains("1000 lines read, 1000 counted"), "{out}");
    let out = nd("nd2.ndjson");
    let another = "another file than the one imported with the same first 4 KiB, imported \
                   from its start: 1500 lines read, 1500 counted";
    assert!(out.contains(another), "{out}");
    for (file, lines) in [("nd1.ndjson", 1000), ("nd2.ndjson", 1500)] {
        let out = nd(file);
        let done = format!("already imported ({lines} lines): nothing added");
        assert!(out.contains(&done), "{file}: {out}");
    }
    // Grown since: each goes on where it stopped.
    let append = |file: &str, text: String| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path(file))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    };
    append("nd1.ndjson", hits("home", 200));
    append("nd2.ndjson", hits("other", 100));
    let out = nd("nd1.ndjson");
    assert!(
        out.contains("resumed after line 1000: 200 lines read"),
        "{out}"
    );
    let out = nd("nd2.ndjson");
    assert!(
        out.contains("resumed after line 1500: 100 lines read"),
        "{out}"
    );
    let text = std::fs::read_to_string(path("nd1.ndjson")).unwrap();
    gzip(Path::new(&path("nd1.ndjson.gz")), &text);
    let out = nd("nd1.ndjson.gz");
    assert!(out.contains("already imported (1200 lines)"), "{out}");
    // Shorter than both and neither: a cut copy cannot be told from
    // another file, so nothing of it is imported.
    std::fs::write(path("nd3.ndjson"), hits("home", 250) + &hits("x", 10)).unwrap();
    let out = import(&url, &["--format", "ndjson", &path("nd3.ndjson")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("or another file that starts the same way"),
        "{err}"
    );
    let entries = xlen(&mut c).await;
    assert_eq!(entries, 1200 + 1600, "one entry a line without a time");

    // A progress without the hash, as an earlier version recorded it.
    let progress: Vec<String> = redis::cmd("KEYS")
        .arg("*:hc:import:*")
        .query_async(&mut c)
        .await
        .unwrap();
    // nd1's: the identity's first (nd2's is `SHA1:2`).
    let first = progress.iter().min_by_key(|k| k.len()).unwrap().clone();
    let set = |at: String| redis::cmd("SET").arg(&first).arg(at).to_owned();
    let at = 19 * 1200;
    let _: () = set(format!("{at}:1200")).query_async(&mut c).await.unwrap();
    append("nd1.ndjson", hits("home", 50));
    let out = nd("nd1.ndjson");
    assert!(
        out.contains("resumed after line 1200: 50 lines read"),
        "{out}"
    );
    let now: String = redis::cmd("GET")
        .arg(&first)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(now.starts_with(&format!("{}:1250:", at + 19 * 50)), "{now}");
    // One at a byte that ends no line: the file was rewritten, as then.
    let _: () = set(format!("{}:1000", at + 5))
        .query_async(&mut c)
        .await
        .unwrap();
    let out = import(&url, &["--format", "ndjson", &path("nd1.ndjson")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ends no line: it was rewritten"), "{err}");

    drain(&mut c, &url).await;
    let got = read_all(&mut c, &keys(&settings(&url, "w1"))).await;
    let day = *DEFAULT_PRECISIONS.iter().max().unwrap();
    let total = |name: &str| -> i64 {
        got.get(&(day, format!("nd:{name}")))
            .map(|b| b.values().sum())
            .unwrap_or(0)
    };
    assert_eq!(
        (total("home"), total("other")),
        (1250 + 800, 800),
        "nd1's 1250 lines, nd2's 800 of each"
    );
}
