//! `hitcount-lab bench` on a Redis Cluster runs end to end at tiny sizes and
//! prints its per-master table: with `--cluster` (a throwaway cluster of
//! its own) and with a `REDIS_URL` naming the harness' cluster. Not a
//! speed test: the figures of so few hits mean nothing, only that they are
//! there, and that the counts came out exact (the bench fails otherwise).

use crate::common;

use std::process::Output;

use common::bin;
use common::cluster::Cluster;

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout {}\nstderr {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `hitcount bench ARGS` on 1,000 hot names, one worker, 4 shards.
fn bench(args: &[&str], url: Option<&str>) -> Output {
    bench_shards(4, args, url)
}

/// Runs `hitcount-lab bench ARGS` on 1,000 hot names, one worker, `shards` shards.
fn bench_shards(shards: u32, args: &[&str], url: Option<&str>) -> Output {
    let shards = shards.to_string();
    let mut all = vec!["bench", "--entries", "2000", "--workers", "1"];
    all.extend(["--workload", "hot", "--shards", &shards]);
    all.extend(args);
    if let Some(url) = url {
        all.extend(["--redis-url", url]);
    }
    bin::lab(&all)
}

/// `out` is a refusal: exit status `code`, and `says` on stderr.
fn assert_refused(out: &Output, code: i32, says: &str) {
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(says),
        "{}",
        text(out)
    );
}

/// The table of one round has one Redis, every master and their sum, and
/// the verdicts.
fn assert_per_master_table(out: &Output, masters: usize) {
    assert_per_master_table_of(out, masters, 4, 1);
}

fn assert_per_master_table_of(out: &Output, masters: usize, shards: u32, rounds: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(out));
    assert!(
        stdout.contains("| workload | W | round | Redis |"),
        "{}",
        text(out)
    );
    let rows = |who: &str| stdout.lines().filter(|l| l.contains(who)).count();
    assert_eq!(rows("| one Redis |"), rounds, "{}", text(out));
    assert_eq!(
        rows("| master 127.0.0.1:"),
        masters * rounds,
        "{}",
        text(out)
    );
    assert_eq!(
        rows(&format!("| all {masters} masters |")),
        rounds,
        "{}",
        text(out)
    );
    assert!(
        stdout.contains("busiest master") && stdout.contains("all masters"),
        "{}",
        text(out)
    );
    assert!(
        stdout.contains(&format!("{shards} stream shards over the masters")),
        "{}",
        text(out)
    );
    // Where each node's time went, by command.
    assert!(stdout.contains("µs per hit by command"), "{}", text(out));
    let one = stdout
        .lines()
        .find(|l| l.starts_with("  - one Redis: "))
        .unwrap_or_else(|| panic!("{}", text(out)));
    assert!(
        one.contains("xreadgroup ") && one.contains("evalsha "),
        "{}",
        text(out)
    );
    assert_eq!(
        rows("  - master 127.0.0.1:"),
        masters * rounds,
        "{}",
        text(out)
    );
}

/// The ratios of a verdict line's `what` ("busiest master", "all
/// masters"): the median first, then each round's.
fn ratios(line: &str, what: &str) -> Vec<f64> {
    let rest = &line[line.find(what).unwrap() + what.len()..];
    let part = rest.split(" (goal").next().unwrap();
    part.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|x| x.parse::<f64>().ok())
        .collect()
}

#[test]
fn bench_with_cluster_starts_one_and_prints_the_per_master_table() {
    // The default: three rounds, the goals judged on the median.
    let out = bench(&["--cluster"], None);
    assert_per_master_table_of(&out, 3, 4, 3);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("3 rounds, one Redis and the cluster side by side in each"),
        "{}",
        text(&out)
    );
    for round in 1..=3 {
        assert!(
            stdout.contains(&format!("1,000 hot names, W=1, round {round}, µs per hit")),
            "{}",
            text(&out)
        );
    }
    // The verdict: the median of three rounds, each listed; met or missed
    // as the median stands to the goal.
    let verdict = stdout
        .lines()
        .find(|l| l.starts_with("- 1,000 hot names, W=1: busiest master"))
        .unwrap_or_else(|| panic!("{}", text(&out)));
    assert!(verdict.contains("median of 3 rounds ("), "{verdict}");
    // 1/(0.8 × 3) and 1.25; printed to two places.
    for (what, goal) in [("busiest master ", 1.0 / 2.4), ("all masters ", 1.25)] {
        let r = ratios(verdict, what);
        assert_eq!(
            r.len(),
            5,
            "median, 3 rounds, 3 (of 'median of 3'): {verdict}"
        );
        let mut rounds = r[2..].to_vec();
        rounds.sort_by(f64::total_cmp);
        assert_eq!(r[0], rounds[1], "{verdict}");
        // " ≤ 0.42: met", the goal this ratio is judged against.
        let after = &verdict[verdict.find(what).unwrap()..];
        let judged = after.split(" (goal").nth(1).unwrap().split(')').next();
        let met = if r[0] <= goal { "met" } else { "missed" };
        if (r[0] - goal).abs() > 0.005 {
            assert_eq!(judged, Some(&*format!(" ≤ {goal:.2}: {met}")), "{verdict}");
        }
    }
    // A busiest master over its goal, on slots as created, points to the
    // moves that balance the masters.
    let hint = "`hitcount status --shards 4` on the cluster lists the slot moves";
    assert_eq!(
        stdout.contains("(goal ≤ 0.42: missed)"),
        stdout.contains(hint),
        "{}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("--wait-replicas 0"),
        "no replicas, so the workers do not wait for any: {}",
        text(&out)
    );
}

#[test]
fn balance_shards_places_the_shards_as_status_would_advise() {
    // Tags 0..7 fall 2/4/2 on three even masters. 2,000 hot hits over
    // 1,000 names make nearly every hit a new name: ~3 new counters per
    // hit, whose ZADDs outweigh all the stream's work on the master
    // serving known: (the first, here), so it is given no shard: the slots
    // of shards 6 (1716) and 7 (1584) go to the third, 0/4/4.
    let out = bench_shards(8, &["--cluster", "--balance-shards", "--rounds", "1"], None);
    assert_per_master_table_of(&out, 3, 8, 1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "8 stream shards over the masters: 0/4/4 (balanced by serving slot(s) 1716, 1584 from another master"
        ),
        "{}",
        text(&out)
    );
    // Each master's row counts its shards.
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("| master 127.0.0.1:"))
        .collect();
    let shards: Vec<&str> = rows
        .iter()
        .map(|l| l.split('|').nth(5).unwrap_or("").trim())
        .collect();
    assert_eq!(shards, ["0", "4", "4"], "{}", text(&out));
    assert!(rows[0].contains("(holds known:)"), "{}", text(&out));
    // Balanced already: no pointer to the moves.
    assert!(!stdout.contains("lists the slot moves"), "{}", text(&out));
}

#[test]
fn balance_shards_needs_the_throwaway_cluster() {
    let out = bench(&["--balance-shards"], None);
    assert_refused(&out, 2, "--cluster");
}

#[test]
fn cluster_flags_without_a_cluster_are_refused_not_ignored() {
    // `--shards` without a cluster to shard over.
    let out = bench(&[], None);
    assert_refused(
        &out,
        1,
        "--shards sets a cluster's stream shards, but there is no cluster",
    );
    // `--cluster-replicas` shapes the throwaway cluster only.
    let out = bin::lab(&["bench", "--entries", "2000", "--cluster-replicas", "1"]);
    assert_refused(&out, 2, "--cluster");
    // `--rounds` repeats a cluster run only, 1 to 9 times.
    let out = bin::lab(&["bench", "--entries", "2000", "--rounds", "3"]);
    assert_refused(
        &out,
        1,
        "--rounds repeats a cluster run, but there is no cluster",
    );
    for rounds in ["0", "10", "two"] {
        let out = bin::lab(&["bench", "--cluster", "--rounds", rounds]);
        assert_refused(&out, 2, "--rounds");
    }
}

#[test]
fn warm_without_a_cluster_is_refused_with_one_line() {
    let out = bench(&["--warm"], None);
    assert_refused(&out, 1, "--warm prices a cluster run");
}

#[test]
fn bench_on_a_redis_url_naming_a_cluster_measures_that_cluster() {
    let cluster = Cluster::start_with(3, 0);
    let out = bench(&["--rounds", "1"], Some(&cluster.seed_url()));
    assert_per_master_table(&out, 3);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cold start (every name new)"),
        "{}",
        text(&out)
    );
    // The steady state: workers warmed up on as many hits, paused while the
    // measured ones are filled (the bench checks both counted exactly), in
    // two rounds on the same cluster.
    let out = bench(&["--warm", "--rounds", "2"], Some(&cluster.seed_url()));
    assert_per_master_table_of(&out, 3, 4, 2);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("steady state (names known, workers warm"),
        "{}",
        text(&out)
    );
    // `--json`: every round's run and the verdicts judged on their median.
    let out = bench(&["--rounds", "2", "--json"], Some(&cluster.seed_url()));
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rounds: Vec<u64> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["round"].as_u64().unwrap())
        .collect();
    assert_eq!((report["rounds"].as_u64(), rounds), (Some(2), vec![1, 2]));
    let verdicts = report["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{report}");
    let v = &verdicts[0];
    assert_eq!((&v["workload"], &v["workers"]), (&"hot".into(), &1.into()));
    for (each, median, met, goal) in [
        ("busiest", "busiest_median", "busiest_met", 1.0 / 2.4),
        ("total", "total_median", "total_met", 1.25),
    ] {
        let xs: Vec<f64> = v[each]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(xs.len(), 2, "{report}");
        let m = v[median].as_f64().unwrap();
        assert!((m - (xs[0] + xs[1]) / 2.0).abs() < 1e-9, "{report}");
        assert_eq!(v[met].as_bool(), Some(m <= goal), "{report}");
    }
    // The product's own `hitcount bench` measures one Redis: on a cluster
    // it names the lab instead of measuring something else.
    let out = bin::hitcount()
        .args(["bench", "--entries", "2000", "--workers", "1"])
        .env("REDIS_URL", cluster.seed_url())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_refused(&out, 1, "the project's lab measures clusters");
    // Its slots are the operator's: bench does not move them.
    let out = bench(
        &["--cluster", "--balance-shards"],
        Some(&cluster.seed_url()),
    );
    assert_refused(&out, 1, "bench does not move");
    // Its keys are gone afterwards.
    for url in cluster.urls() {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg("bench:*").query(&mut conn).unwrap();
        assert!(keys.is_empty(), "{keys:?}");
    }
}
