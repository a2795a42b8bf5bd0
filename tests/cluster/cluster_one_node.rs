//! A Redis Cluster of one master, as a small deployment or a test may run:
//! the node was never introduced to another, so `CLUSTER SLOTS` names no
//! address for it (an empty host, meaning "the node you asked"). Whatever
//! walks the masters must still reach it: the demo's cleanup of its own
//! keys (`SCAN` on every master) and the bench's list of masters.

use crate::common;

use std::process::Command;

use common::bin;
use common::cluster::Cluster;
use hitcount::model::config::RedisArgs;

fn demo(url: &str) -> String {
    let mut cmd = bin::hitcount();
    cmd.args(["demo", "--hits", "3000", "--names", "100"])
        .env("REDIS_URL", url);
    run(cmd)
}

fn run(mut cmd: Command) -> String {
    let out = cmd.output().expect("running hitcount");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}

#[test]
fn the_demo_runs_twice_on_a_cluster_of_one_master() {
    let cluster = Cluster::start_with(1, 0);
    let url = cluster.seed_url();
    // The first run leaves its keys for the user to look at; the second
    // finds them with SCAN on every master and starts from nothing.
    for _ in 0..2 {
        let out = demo(&url);
        assert!(
            out.contains("total at the 1-day precision: 3000 of 3000 sent: exact"),
            "{out}"
        );
    }
}

#[tokio::test]
async fn the_bench_finds_the_lone_master_under_the_address_it_was_given() {
    let cluster = Cluster::start_with(1, 0);
    let port = cluster.masters()[0];
    let (masters, replicas) =
        hitcount_lab::bench::usage::masters(&RedisArgs::from_url(&cluster.seed_url()))
            .await
            .expect("listing the masters");
    assert_eq!(replicas, 0);
    assert_eq!(masters.len(), 1);
    assert_eq!(masters[0].addr, format!("127.0.0.1:{port}"));
    assert_eq!(masters[0].slots, vec![(0, 16383)]);
}
