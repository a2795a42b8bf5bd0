//! Prometheus' remote read on `hitcount serve` over a real local Redis
//! Cluster: the real `prometheus` reading through `serve` as the read-only
//! user of the docs sums counters spread over every master exactly, reads
//! one name's samples and its statistics, and Redis refuses serve nothing.

use crate::common;

use std::collections::BTreeMap;

use common::cluster::Cluster;
use common::prometheus::{at, one, prometheus_reading};
use redis::AsyncCommands;

use crate::cluster::{assert_nothing_refused, read_only_user, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_reads_counters_spread_over_the_cluster() {
    let cluster = Cluster::start();
    let mut c = cluster.client_conn().await;
    let now = common::unix_now();
    let b0 = now - now % 60;
    let names: Vec<String> = (0..60).map(|i| format!("p/{i:02} é")).collect();
    let mut total = 0;
    for (i, name) in names.iter().enumerate() {
        let count = (i as i64 * 37) % 11 + 1;
        let fields = [(b0 - 120, count), (b0 - 60, 2 * count)];
        let _: () = c
            .hset_multiple(format!("count:60:{name}"), &fields)
            .await
            .unwrap();
        let _: () = c.zadd("known:", format!("60:{name}"), 0).await.unwrap();
        total += 3 * count;
    }
    let masters: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|n| cluster.master_of(&format!("count:60:{n}")))
        .collect();
    assert_eq!(masters.len(), 3, "counters on every master");
    // Statistics of one bucket: 4 observations of 2.5 and 1 of 10.
    let stats = [
        (format!("{}:count", b0 - 60), "5"),
        (format!("{}:sum", b0 - 60), "20"),
        (format!("{}:sumsq", b0 - 60), "125"),
        (format!("{}:min", b0 - 60), "2.5"),
        (format!("{}:max", b0 - 60), "10"),
    ];
    let _: () = c.hset_multiple("stats:60:p/07 é", &stats).await.unwrap();
    let _: () = c.zadd("stats:known:", "60:p/07 é", 0).await.unwrap();

    let reader = read_only_user(&cluster).await;
    let (_serve, addr) = serve(&reader);
    let dir = tempfile::tempdir().unwrap();
    let (_prom, prom) = prometheus_reading(dir.path(), &addr, "");

    let q =
        "sum by (precision) (sum_over_time(hitcount_hits{name=~\"p/.*\",precision=\"60\"}[1h]))";
    let want = BTreeMap::from([("60".to_string(), total as f64)]);
    assert_eq!(at(&prom, q, now), want);
    let q = "count(hitcount_hits{precision=\"60\"})";
    assert_eq!(one(&prom, q, b0 - 60), 60.0, "every name, whichever master");
    let home = "hitcount_hits{name=\"p/07 é\",precision=\"60\"}";
    let count = (7 * 37) % 11 + 1;
    assert_eq!(one(&prom, home, b0 - 120 + 30), count as f64);
    assert_eq!(one(&prom, home, b0 - 60), 2.0 * count as f64);
    let stat = |family: &str| one(&prom, &format!("{family}{{name=\"p/07 é\"}}"), b0 - 30);
    assert_eq!(
        [
            stat("hitcount_value_count"),
            stat("hitcount_value_sum"),
            stat("hitcount_value_min"),
            stat("hitcount_value_max"),
        ],
        [5.0, 20.0, 2.5, 10.0]
    );
    assert_nothing_refused(&cluster).await;
}
