//! How a Redis Cluster's masters share the stream shards, for `hitcount
//! status`: which master serves which shards, and the single slots to move
//! so that none serves two more than another. A master's share of the
//! shards is its share of the stream's work (README, "Choosing N"); when
//! the shards cannot fall exactly evenly, the master serving `known:`,
//! which takes every new counter's ZADD, is left the fewer.

use std::fmt::Write as _;

use crate::model::slots::{evening_moves, shard_slot, shards_by_master, slot};
use crate::store::topology::Master;

/// A master of a Redis Cluster and the stream shards in its slots.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MasterShards {
    /// `host:port`, as the cluster announces it.
    pub master: String,
    /// The shards it serves.
    pub shards: Vec<u32>,
}

/// A shard's slot to serve from another master.
#[derive(Debug, Clone, Default, serde::Serialize, PartialEq, Eq)]
pub struct ShardMove {
    /// The shard.
    pub shard: u32,
    /// Its slot.
    pub slot: u16,
    /// The master serving it now.
    pub from: String,
    /// The master to serve it.
    pub to: String,
}

/// Which of `shards` shards each master serves, and the single slot moves
/// ([`crate::model::slots::evening_moves`]) that would even them out,
/// leaving the fewer to the master serving `known` (the `known:` key) when
/// they cannot fall exactly evenly: it takes every new counter's ZADD.
pub fn spread(masters: &[Master], shards: u32, known: &str) -> (Vec<MasterShards>, Vec<ShardMove>) {
    let owner = |slot: u16| masters.iter().position(|m| m.serves(slot));
    let by_master = shards_by_master(shards, masters.len(), owner);
    // Shards no master serves (a cluster mid-change) are left out.
    let served: Vec<u16> = by_master.iter().flatten().map(|&k| shard_slot(k)).collect();
    let held = masters
        .iter()
        .zip(by_master)
        .map(|(m, shards)| MasterShards {
            master: m.addr(),
            shards,
        })
        .collect();
    let lighter = owner(slot(known.as_bytes()));
    let moves = evening_moves(masters.len(), |s| owner(s).unwrap_or(0), &served, lighter)
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

/// Which master serves which shards, and how to even them out.
pub fn render_masters(out: &mut String, masters: &[MasterShards], moves: &[ShardMove]) {
    if masters.is_empty() {
        return;
    }
    let counts: Vec<String> = masters.iter().map(|m| m.shards.len().to_string()).collect();
    let _ = writeln!(out, "shards per master: {}", counts.join("/"));
    for m in masters {
        let list: Vec<String> = m.shards.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "  master {}: shards {}", m.master, list.join(", "));
    }
    if moves.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  a master's shards are its share of the stream's work, and the master of known: \
         takes every new counter's ZADD; to even them out, move these slots (README, \
         \"Choosing N\"):"
    );
    for m in moves {
        let _ = writeln!(
            out,
            "    slot {} (shard {}) from {} to {}",
            m.slot, m.shard, m.from, m.to
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn which_master_serves_which_shards_and_what_to_move() {
        // 18 shards on three even masters: 6/7/5, and one slot evens them.
        let (held, moves) = spread(&even_masters(3), 18, "known:");
        let counts: Vec<usize> = held.iter().map(|m| m.shards.len()).collect();
        assert_eq!(counts, [6, 7, 5]);
        assert_eq!(held[0].shards, [3, 7, 10, 11, 14, 15]);
        assert_eq!(
            moves,
            [ShardMove {
                shard: 16,
                slot: 8241,
                from: "10.0.0.1:7001".into(),
                to: "10.0.0.1:7002".into(),
            }]
        );
        let mut out = String::new();
        render_masters(&mut out, &held, &moves);
        assert!(out.contains("shards per master: 6/7/5\n"), "{out}");
        assert!(
            out.contains("  master 10.0.0.1:7000: shards 3, 7, 10, 11, 14, 15\n"),
            "{out}"
        );
        assert!(
            out.contains("    slot 8241 (shard 16) from 10.0.0.1:7001 to 10.0.0.1:7002\n"),
            "{out}"
        );
        // Once moved, nothing more to do.
        let mut masters = even_masters(3);
        masters[1].ranges = vec![(5461, 8240), (8242, 10921)];
        masters[2].ranges = vec![(8241, 8241), (10922, 16383)];
        let (held, moves) = spread(&masters, 18, "known:");
        assert_eq!(
            held.iter().map(|m| m.shards.len()).collect::<Vec<_>>(),
            [6, 6, 6]
        );
        assert!(moves.is_empty());
        // 16 shards fall 6/6/4: the second master gives one up when it
        // serves `known:` (6/5/5), the first otherwise (5/6/5).
        let from = |known: &str| {
            let (_, moves) = spread(&even_masters(3), 16, known);
            assert_eq!(moves.len(), 1, "{moves:?}");
            assert_eq!(moves[0].to, "10.0.0.1:7002");
            moves[0].from.clone()
        };
        assert_eq!(from("known:"), "10.0.0.1:7001");
        assert_eq!(from("bench:zipf:w1:known:"), "10.0.0.1:7000");
        let mut out = String::new();
        render_masters(&mut out, &held, &moves);
        assert!(
            out.contains("shards per master: 6/6/6\n") && !out.contains("move these slots"),
            "{out}"
        );
    }
}
