//! The leader's trim on a real local Redis Cluster, run by the binary:
//! `clean --once` over 8 shards keeps every pending and undelivered entry
//! (the cleaner's own cluster tests are beside it, in `service::cleaner`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::bin;
use common::cluster::Cluster;
use hitcount::model::config::{LayoutArgs, StreamArgs};
use hitcount::model::keys::Keys;
use hitcount::store::connect::Conn;
use redis::Value;

/// Reads `n` entries of `stream` as consumer `c1` of `group` and
/// acknowledges the first `ack`; returns the ids read.
async fn read(c: &mut Conn, stream: &str, n: usize, ack: usize) -> Vec<String> {
    let v: Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("hitcount")
        .arg("c1")
        .arg("COUNT")
        .arg(n)
        .arg("STREAMS")
        .arg(stream)
        .arg(">")
        .query_async(c)
        .await
        .unwrap();
    let ids: Vec<String> = crate::common::plain::read_reply_entries(&v)
        .iter()
        .map(|e| e.id_str().to_string())
        .collect();
    if ack > 0 {
        let _: i64 = redis::cmd("XACK")
            .arg(stream)
            .arg("hitcount")
            .arg(&ids[..ack])
            .query_async(c)
            .await
            .unwrap();
    }
    ids
}

async fn stream_ids(c: &mut Conn, stream: &str) -> Vec<String> {
    let v: Value = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(c)
        .await
        .unwrap();
    crate::common::plain::entry_list(&v)
        .iter()
        .map(|e| e.id_str().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_once_trims_eight_shards_on_a_cluster_keeping_what_groups_need() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    let mut c = common::conn(&seeds).await;
    let stream = StreamArgs {
        shards: 8,
        ..StreamArgs::default()
    };
    let shards = Keys::all_shards(&LayoutArgs::default(), &stream, true);
    let masters: BTreeSet<u16> = shards
        .iter()
        .map(|k| cluster.master_of(&k.stream))
        .collect();
    assert!(masters.len() > 1, "shards on several masters");
    // Per shard: 1,500 entries read and acknowledged, 200 read and pending,
    // 300 never delivered.
    let mut needed = BTreeMap::new();
    for k in &shards {
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&k.stream)
            .arg("hitcount")
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut c)
            .await
            .unwrap();
        let mut pipe = redis::pipe();
        for i in 0..2000 {
            pipe.cmd("XADD")
                .arg(&k.stream)
                .arg("*")
                .arg("name")
                .arg(format!("n{i}"))
                .ignore();
        }
        let _: () = pipe.query_async(&mut c).await.unwrap();
        let ids = read(&mut c, &k.stream, 1700, 1500).await;
        let all = stream_ids(&mut c, &k.stream).await;
        needed.insert(k.stream.clone(), all[all.len() - 500..].to_vec());
        assert_eq!(ids[1500..], all[1500..1700]);
    }
    let out = bin::run_ok(
        &seeds,
        &["clean", "--once", "--json", "--shards", "8", "--wait", "0"],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let trimmed = report["trimmed"].as_u64().unwrap();
    eprintln!("clean --once: {report}");
    assert!(
        trimmed >= 8 * 1400,
        "whole stream nodes of acked entries go"
    );
    let mut left = 0;
    for k in &shards {
        let ids = stream_ids(&mut c, &k.stream).await;
        left += ids.len();
        let have: BTreeSet<&String> = ids.iter().collect();
        for id in &needed[&k.stream] {
            assert!(
                have.contains(id),
                "{} lost {id}, which a group needs",
                k.stream
            );
        }
    }
    assert_eq!(left as u64 + trimmed, 8 * 2000);
    // The oldest id any shard's group needs is the one reported.
    let oldest = needed.values().map(|ids| ids[0].clone()).min_by_key(|id| {
        let (ms, seq) = id.split_once('-').unwrap();
        (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap())
    });
    assert_eq!(report["min_id"].as_str(), oldest.as_deref());
    // The leader lease was released: a worker could lead at once.
    let lease: Option<String> = redis::cmd("GET")
        .arg("hitcount:leader")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(lease, None);
}
