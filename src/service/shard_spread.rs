//! How a Redis Cluster's masters share the stream shards, for `hitcount
//! status`: which master serves which shards and what share of the traffic
//! they carry, and the single slots to move to balance the masters' work
//! (docs/cluster.md, "Balancing"). A name's hits all go to one shard, so on
//! skewed traffic shards carry unequal shares: the moves weigh each shard by
//! the entries added to it, and the master serving `known:`, which takes every
//! new counter's ZADD, by as many as `known:` has members per entry added.
//! Numbers only: the `status` subcommand turns them into text.

use crate::model::slots::{
    balancing_moves, known_weight, shard_loads, shard_slot, shards_by_master, slot, ShardLoads,
};
use crate::store::topology::Master;

/// A master of a Redis Cluster and the stream shards in its slots.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct MasterShards {
    /// `host:port`, as the cluster announces it.
    pub master: String,
    /// The shards it serves.
    pub shards: Vec<u32>,
    /// The entries ever added to them.
    pub traffic: u64,
    /// Their share of the entries ever added to the shards, 0 to 1 (of the
    /// shards themselves when none was added yet).
    pub traffic_share: f64,
}

/// A shard's slot to serve from another master.
#[derive(Debug, Clone, Default, serde::Serialize, PartialEq, Eq)]
pub(crate) struct ShardMove {
    /// The shard.
    pub shard: u32,
    /// Its slot.
    pub slot: u16,
    /// The master serving it now.
    pub from: String,
    /// The master to serve it.
    pub to: String,
}

/// Which shards each master serves and its share of their traffic, and the
/// single slot moves ([`balancing_moves`]) that would balance the masters'
/// work: `traffic[k]` is the entries ever added to shard k (all 0 when
/// unknown: shards then count alike), and the master serving `known` (the
/// `known:` key, of `members` members) also carries every new counter's
/// ZADD: [`known_weight`] of its members per entry added.
pub(crate) fn spread(
    masters: &[Master],
    traffic: &[u64],
    known: &str,
    members: u64,
) -> (Vec<MasterShards>, Vec<ShardMove>) {
    let owner = |slot: u16| masters.iter().position(|m| m.serves(slot));
    let shards = traffic.len() as u32;
    let by_master = shards_by_master(shards, masters.len(), owner);
    // Shards no master serves (a cluster mid-change) are left out.
    let served: Vec<(u32, Vec<f64>)> = by_master
        .iter()
        .flatten()
        .map(|&k| (k, vec![traffic[k as usize] as f64]))
        .collect();
    let added: u64 = traffic.iter().sum();
    let weight = match added {
        0 => 0.0,
        _ => known_weight(members as f64 / added as f64),
    };
    let known_at: Vec<usize> = owner(slot(known.as_bytes())).into_iter().collect();
    let ShardLoads { slots, base } = shard_loads(&served, &[(known_at, weight)], masters.len());
    // `shard_loads` keeps `served`'s order: each served shard's share.
    let shares: std::collections::HashMap<u32, f64> = served
        .iter()
        .zip(&slots)
        .map(|((k, _), (_, l))| (*k, l[0]))
        .collect();
    let share = |k: u32| shares.get(&k).copied().unwrap_or(0.0);
    let held = masters
        .iter()
        .zip(by_master)
        .map(|(m, shards)| MasterShards {
            master: m.addr(),
            traffic: shards.iter().map(|&k| traffic[k as usize]).sum(),
            traffic_share: shards.iter().map(|&k| share(k)).sum(),
            shards,
        })
        .collect();
    let moves = balancing_moves(masters.len(), |s| owner(s).unwrap_or(0), &slots, &base)
        .into_iter()
        .map(|m| ShardMove {
            shard: (0..shards).find(|&k| shard_slot(k) == m.slot).unwrap_or(0),
            slot: m.slot,
            from: masters[m.from].addr(),
            to: masters[m.to].addr(),
        })
        .collect();
    (held, moves)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::slots::MEMBER_COST;

    fn even_masters(m: u16) -> Vec<Master> {
        (0..m)
            .map(|i| {
                let first = (u32::from(i) * 16384 / u32::from(m)) as u16;
                let last = ((u32::from(i) + 1) * 16384 / u32::from(m) - 1) as u16;
                Master {
                    host: "10.0.0.1".into(),
                    port: 7000 + i,
                    ranges: vec![(first, last)],
                    replicas: 0,
                }
            })
            .collect()
    }

    /// The masters of `even_masters(3)` once `moves` are made.
    fn after(moves: &[ShardMove]) -> Vec<Master> {
        let masters = even_masters(3);
        let owner = |slot: u16| {
            moves.iter().rev().find(|m| m.slot == slot).map_or_else(
                || masters.iter().position(|m| m.serves(slot)).unwrap(),
                |m| masters.iter().position(|x| x.addr() == m.to).unwrap(),
            )
        };
        let mut out = even_masters(3);
        for (i, m) in out.iter_mut().enumerate() {
            m.ranges.clear();
            for slot in 0..16384u16 {
                if owner(slot) != i {
                    continue;
                }
                match m.ranges.last_mut() {
                    Some((_, last)) if *last + 1 == slot => *last = slot,
                    _ => m.ranges.push((slot, slot)),
                }
            }
        }
        out
    }

    fn counts(held: &[MasterShards]) -> Vec<usize> {
        held.iter().map(|m| m.shards.len()).collect()
    }

    #[test]
    fn which_master_serves_which_shards_and_what_to_move() {
        // 18 shards on three even masters fall 6/7/5; with no traffic yet
        // they count alike, and one slot evens them out.
        let (held, moves) = spread(&even_masters(3), &[0; 18], "known:", 0);
        assert_eq!(counts(&held), [6, 7, 5]);
        assert_eq!(held[0].shards, [3, 7, 10, 11, 14, 15]);
        assert!((held[0].traffic_share - 6.0 / 18.0).abs() < 1e-9);
        assert_eq!(
            moves,
            [ShardMove {
                shard: 2,
                slot: 5649,
                from: "10.0.0.1:7001".into(),
                to: "10.0.0.1:7002".into(),
            }]
        );
        // Once moved, nothing more to do.
        let (held, again) = spread(&after(&moves), &[0; 18], "known:", 0);
        assert_eq!(counts(&held), [6, 6, 6]);
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn traffic_and_new_counters_not_shard_counts_are_balanced() {
        // 16 shards, 6/6/4, and shard 3 (on the first master) carries as
        // much as five others: the first master has half the traffic. It
        // gives shards up until no single move lowers the busiest
        // master's work.
        let mut traffic = [100u64; 16];
        traffic[3] = 500;
        let busiest_after = |members: u64| {
            let (held, moves) = spread(&even_masters(3), &traffic, "nothing-here", members);
            assert!((held[0].traffic_share - 0.5).abs() < 1e-9);
            assert!(moves.iter().all(|m| m.shard != 3), "{moves:?}");
            let (held, again) = spread(&after(&moves), &traffic, "nothing-here", members);
            assert!(again.is_empty(), "{again:?}");
            assert!(held[0].shards.contains(&3), "{held:?}");
            held.iter().map(|m| m.traffic_share).collect::<Vec<f64>>()
        };
        // Few new counters: 0.35 at most (0.35/0.35/0.30 in some order).
        let (held, moves) = spread(&even_masters(3), &traffic, "nothing-here", 0);
        assert_eq!(held[0].traffic, 1000);
        assert_eq!(held[0].shards, [3, 7, 10, 11, 14, 15]);
        assert!(!moves.is_empty());
        let shares = busiest_after(0);
        assert!(shares.iter().all(|&x| x <= 0.35 + 1e-9), "{shares:?}");
        // "nothing-here" falls on the third master: with as many new
        // counters as an eighth of the traffic's worth of ZADDs, it is
        // left the least traffic (0.40/0.35/0.25, or the first two
        // swapped; 0.375 each cannot be made of 0.05 steps).
        let members = (2000.0 * 0.125 / MEMBER_COST).round() as u64;
        let shares = busiest_after(members);
        assert!((shares[2] - 0.25).abs() < 1e-9, "{shares:?}");
        let busiest = shares.iter().copied().fold(0.0, f64::max);
        assert!((busiest - 0.40).abs() < 1e-9, "{shares:?}");
    }
}
