//! Sums applied together on a real Redis Cluster (`apply_group.lua`): one
//! script per hash slot carries chunks of sums recorded in different
//! groups, each under its own group's marker, and every replay (together,
//! alone, or with other sums) counts nothing twice.

use crate::common;

use common::cluster::Cluster;
use hitcount::model::aggregate::Cell;
use hitcount::model::config::{LayoutArgs, StreamArgs};
use hitcount::model::keys::Keys;
use hitcount::model::slots::{slot, tag_for_slot};
use hitcount::store::commit::{sort_for_cluster, Committer, Sum, CHUNK_CELLS};
use hitcount::store::connect::Conn;

const BUCKET: i64 = 1_700_000_040;

fn cells<'a>(keys: &Keys, names: &'a [String], delta: i64) -> Vec<Cell<'a>> {
    let mut v: Vec<Cell<'a>> = names
        .iter()
        .flat_map(|n| {
            [60u32, 300].map(|p| Cell {
                precision: p,
                name: n.as_str(),
                bucket: BUCKET - BUCKET % i64::from(p),
                delta,
            })
        })
        .collect();
    sort_for_cluster(keys, &mut v);
    v
}

/// Each name's count at both precisions, summed.
async fn totals(c: &mut Conn, keys: &Keys, names: &[String]) -> Vec<i64> {
    let mut out = Vec::new();
    for n in names {
        let mut t = 0;
        for p in [60u32, 300] {
            let v: Option<i64> = redis::cmd("HGET")
                .arg(keys.count(p, n))
                .arg(BUCKET - BUCKET % i64::from(p))
                .query_async(c)
                .await
                .unwrap();
            t += v.unwrap_or(0);
        }
        out.push(t);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sums_of_two_groups_share_scripts_and_every_replay_counts_once() {
    let cluster = Cluster::start_with(3, 0);
    let mut c = common::conn(&cluster.seed_url()).await;
    hitcount::store::scripts::load_all(&mut c).await.unwrap();
    let keys = Keys::new(&LayoutArgs::default(), &StreamArgs::default());
    let committer = Committer::new(keys.clone(), "grouptest".into(), 1000);
    let names = |p: &str| -> Vec<String> { (0..400).map(|i| format!("{p}{i}")).collect() };
    let (a, b, d) = (names("a"), names("b"), names("d"));
    let (ca, cb, cd) = (
        cells(&keys, &a, 1),
        cells(&keys, &b, 2),
        cells(&keys, &d, 5),
    );
    let sum = |id, group, cells| Sum {
        id,
        group,
        cells,
        chunk: CHUNK_CELLS,
    };
    let a1 = sum("sa", "g1", &ca);
    let b2 = sum("sb", "g2", &cb);
    let d1 = sum("sd", "g1", &cd);

    // Together: a sum recorded in g1, one in g2.
    let failed = committer.apply_sums(&mut c, &[a1, b2], None).await.unwrap();
    assert!(failed.iter().all(Vec::is_empty), "{failed:?}");
    let want = |names: &[String], per: i64| vec![2 * per; names.len()];
    assert_eq!(totals(&mut c, &keys, &a).await, want(&a, 1));
    assert_eq!(totals(&mut c, &keys, &b).await, want(&b, 2));

    // In a slot holding cells of both, each group's marks are in its own
    // marker there.
    let slots = |cells: &[Cell<'_>]| -> std::collections::BTreeSet<u16> {
        cells
            .iter()
            .map(|c| slot(keys.count(c.precision, c.name).as_bytes()))
            .collect()
    };
    let both = slots(&ca)
        .intersection(&slots(&cb))
        .copied()
        .collect::<Vec<_>>();
    assert!(
        !both.is_empty(),
        "800 cells each over 16,384 slots share some"
    );
    for at in both {
        for (group, id) in [("g1", "sa"), ("g2", "sb")] {
            let marker = keys.applied_marker_tagged(group, tag_for_slot(at));
            let fields: Vec<String> = redis::cmd("HKEYS")
                .arg(&marker)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(
                !fields.is_empty() && fields.iter().all(|f| f.starts_with(&format!("{id}:"))),
                "{marker}: {fields:?}"
            );
        }
    }

    // Replays: together again, each alone, and one with a new sum.
    committer.apply_sums(&mut c, &[a1, b2], None).await.unwrap();
    committer.apply_sums(&mut c, &[b2], None).await.unwrap();
    committer.apply_sums(&mut c, &[a1], None).await.unwrap();
    committer.apply_sums(&mut c, &[b2, d1], None).await.unwrap();
    assert_eq!(totals(&mut c, &keys, &a).await, want(&a, 1));
    assert_eq!(totals(&mut c, &keys, &b).await, want(&b, 2));
    assert_eq!(totals(&mut c, &keys, &d).await, want(&d, 5));

    // Every marker the group leaves is one the worker expires once its
    // sums are finished.
    let mut markers = committer.group_markers(&[a1, b2]);
    markers.extend(committer.group_markers(&[b2, d1]));
    for m in &markers {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(m)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(exists, 1, "{m}");
    }
}
