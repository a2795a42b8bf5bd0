//! `hitcount import` on a real local Redis Cluster with stream shards:
//! each file's hits and its progress go to one shard, chosen by the file's
//! identity, so the script that appends a batch with its progress runs in
//! one hash slot; every line is counted once, and a second import adds
//! nothing.

use crate::common;

use common::bin;
use common::cluster::Cluster;
use hitcount::model::config::{LayoutArgs, StreamArgs};
use hitcount::model::keys::Keys;

use super::cluster_worker::{assert_exact, drain_and_stop, start_workers};

const SHARDS: u32 = 8;
const FILES: usize = 4;
const LINES: usize = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_logs_are_imported_exactly_once_on_a_cluster() {
    let cluster = Cluster::start();
    let seeds = cluster.seed_url();
    let mut c = common::conn(&seeds).await;
    let stream = StreamArgs {
        shards: SHARDS,
        ..StreamArgs::default()
    };
    let shards = Keys::all_shards(&LayoutArgs::default(), &stream, true);
    let mut workers = start_workers(&seeds, 2, &["--shards", "8"]);
    let now = common::unix_now();
    let dir = tempfile::tempdir().unwrap();
    let (mut sent, mut files) = (Vec::new(), Vec::new());
    for f in 0..FILES {
        let mut text = String::new();
        for i in 0..LINES {
            let t = now - 60 + (i % 50) as i64;
            let name = format!("/f{f}/{}", i % 37);
            let time = hitcount_lab::bench::import::log_time(t, -300);
            text.push_str(&format!(
                "h - - [{time}] \"GET {name}?i={i} HTTP/1.1\" 200 1 \"-\" \"-\"\n"
            ));
            sent.push((name, 1, t));
        }
        let path = dir.path().join(format!("access-{f}.log"));
        std::fs::write(&path, &text).unwrap();
        files.push((path.to_str().unwrap().to_string(), text));
    }
    let mut args = vec!["import", "--shards", "8"];
    args.extend(files.iter().map(|(p, _)| p.as_str()));
    let out = String::from_utf8_lossy(&bin::run_ok(&seeds, &args).stdout).into_owned();
    let total = FILES * LINES;
    assert!(
        out.contains(&format!(
            "all {FILES} files: {total} lines read, {total} counted"
        )),
        "{out}"
    );
    let again = String::from_utf8_lossy(&bin::run_ok(&seeds, &args).stdout).into_owned();
    assert_eq!(
        again
            .matches(&format!("already imported ({LINES} lines): nothing added"))
            .count(),
        FILES,
        "{again}"
    );
    drain_and_stop(&mut c, &shards, &mut workers).await;
    assert_exact(&mut c, &sent).await;
    // Each file's progress sits beside its shard's stream, at its end, with
    // the hash of the bytes imported.
    for (path, text) in &files {
        let head = &text.as_bytes()[..4096];
        let id = sha1_smol::Sha1::from(head).digest().to_string();
        let k = Keys::shard_of_name(&id, SHARDS) as usize;
        let at: String = redis::cmd("GET")
            .arg(shards[k].import_progress(&id))
            .query_async(&mut c)
            .await
            .unwrap();
        let hashed = sha1_smol::Sha1::from(text).digest();
        assert_eq!(at, format!("{}:{LINES}:{hashed}", text.len()), "{path}");
    }
}
