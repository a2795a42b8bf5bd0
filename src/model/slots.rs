//! Redis Cluster hash slots, computed here as the server does (CRC16/XMODEM
//! of the key's hash tag, modulo 16384), and a short tag for every slot.
//!
//! On a cluster a script may only touch keys of one slot. The counters'
//! keys (`count:PREC:NAME`) fall where their names put them, so the marker
//! that makes an apply exactly once must be a key *in that same slot*:
//! [`tag_for_slot`] gives a string `T` whose slot is `S`, and a key
//! `…{T}…` then shares slot `S` with any counter there.
//!
//! Stream shard k lives in the slot of its tag `{k}` ([`shard_slot`]), and
//! tags 0..N−1 fall unevenly over masters that split the slots evenly, and
//! skewed traffic loads shards unevenly; [`balancing_moves`] says which
//! single slots to give to other masters so that their loads even out.

use std::sync::OnceLock;

/// Hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster uses it.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            let carry = crc & 0x8000 != 0;
            crc = (crc << 1) ^ if carry { 0x1021 } else { 0 };
        }
    }
    crc
}

/// The `{tag}` Redis Cluster hashes `key` by: the bytes between the first
/// `{` and the next `}`, when there are any (else it hashes the whole key).
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// The hash slot of `key`.
pub fn slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// A short string (at most 4 characters of `[0-9a-z]`) whose slot is `slot`:
/// `{T}` in a key puts that key in `slot`. Built once (a few ms).
pub(crate) fn tag_for_slot(slot: u16) -> &'static str {
    static TABLE: OnceLock<Vec<String>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut table = vec![String::new(); SLOTS as usize];
        let mut left = SLOTS as usize;
        let mut candidate = Vec::with_capacity(4);
        'search: for len in 1..=4u32 {
            let n = ALPHABET.len().pow(len);
            for mut i in 0..n {
                candidate.clear();
                for _ in 0..len {
                    candidate.push(ALPHABET[i % ALPHABET.len()]);
                    i /= ALPHABET.len();
                }
                let s = (crc16(&candidate) % SLOTS) as usize;
                if table[s].is_empty() {
                    table[s] = String::from_utf8(candidate.clone()).expect("ASCII");
                    left -= 1;
                    if left == 0 {
                        break 'search;
                    }
                }
            }
        }
        assert_eq!(left, 0, "every slot has a tag of at most 4 characters");
        table
    });
    &table[(slot % SLOTS) as usize]
}

/// The slot of stream shard `k` (`STREAM:{k}`, hashed by its tag alone).
pub(crate) fn shard_slot(k: u32) -> u16 {
    slot(format!("{{{k}}}").as_bytes())
}

/// The shards `0..shards` each of `masters` masters serves, in order;
/// `owner` gives the master (by index) serving a slot, `None` when none
/// does (a cluster mid-change), and such shards are left out.
pub fn shards_by_master(
    shards: u32,
    masters: usize,
    owner: impl Fn(u16) -> Option<usize>,
) -> Vec<Vec<u32>> {
    let mut held = vec![Vec::new(); masters];
    for k in 0..shards {
        if let Some(m) = owner(shard_slot(k)).filter(|&m| m < masters) {
            held[m].push(k);
        }
    }
    held
}

/// The master (by index) that serves `slot` when `masters` masters split
/// the slots evenly in order: master i serves `⌊i·16384/M⌋ ..=
/// ⌊(i+1)·16384/M⌋ − 1`, as `bench --cluster` makes them (`redis-cli
/// --cluster create` rounds a boundary the other way at times: one slot).
pub fn even_owner(masters: usize, slot: u16) -> usize {
    let m = masters.max(1);
    ((usize::from(slot) + 1) * m - 1) / usize::from(SLOTS)
}

/// One slot given from one master to another (masters by index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotMove {
    /// The slot.
    pub slot: u16,
    /// The master that serves it now.
    pub from: usize,
    /// The master to serve it.
    pub to: usize,
}

/// What adding one new member to `known:` costs Redis next to reading and
/// acknowledging one stream entry: 1.1–1.5 µs against 2.2–2.9 on a
/// cluster's masters and 1.5–1.8 on one Redis (docs/cluster.md,
/// "Balancing"). The
/// master serving `known:` takes every new counter's ZADD, so besides its
/// shards' traffic it carries this times the new members per entry
/// ([`known_weight`]).
pub const MEMBER_COST: f64 = 0.6;

/// The work of the master serving `known:`, in shares of the traffic
/// (as [`shard_loads`] counts it): [`MEMBER_COST`] times the new members
/// of `known:` per entry. A cold start over many names adds up to one per
/// precision per entry (each new name once per precision; about 0.56 on
/// the bench's cold Zipf run), a steady state next to none.
pub fn known_weight(new_members_per_entry: f64) -> f64 {
    MEMBER_COST * new_members_per_entry.max(0.0)
}

/// What [`balancing_moves`] balances: each slot's load per dimension, and
/// each master's base.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardLoads {
    /// Each shard's slot and its share of each dimension's traffic.
    pub slots: Vec<(u16, Vec<f64>)>,
    /// Each master's load besides its slots, per dimension.
    pub base: Vec<Vec<f64>>,
}

/// [`balancing_moves`]' slots and base for stream shards. `traffic` holds
/// each shard (by number) and its traffic per dimension (a workload, say:
/// entries, hits, any unit); `known` per dimension the masters serving a
/// `known:` key there and its [`known_weight`], shared among them, as
/// their base. Each dimension counts in shares of its total, or of the
/// shards when it has no traffic (a stream nothing was added to yet).
pub fn shard_loads(
    traffic: &[(u32, Vec<f64>)],
    known: &[(Vec<usize>, f64)],
    masters: usize,
) -> ShardLoads {
    let dims = traffic.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
    let totals: Vec<f64> = (0..dims)
        .map(|d| traffic.iter().filter_map(|(_, t)| t.get(d)).sum())
        .collect();
    let share = |d: usize, t: &[f64]| match totals[d] > 0.0 {
        true => t.get(d).copied().unwrap_or(0.0) / totals[d],
        false => 1.0 / traffic.len() as f64,
    };
    let slots = traffic
        .iter()
        .map(|(k, t)| (shard_slot(*k), (0..dims).map(|d| share(d, t)).collect()))
        .collect();
    let mut base = vec![vec![0.0; dims]; masters];
    for (d, (ms, weight)) in known.iter().enumerate().take(dims) {
        for &m in ms.iter().filter(|&&m| m < masters) {
            base[m][d] += weight / ms.len() as f64;
        }
    }
    ShardLoads { slots, base }
}

/// Single-slot moves after which the masters' loads are as even as
/// moving one slot at a time makes them. `slots` are the slots to place
/// (say, the stream shards'), each with its load in one or more dimensions
/// (one per workload, say: a shard's share of its traffic); a slot listed
/// twice carries both loads. `base` is each master's load besides its slots
/// (a row per master, missing rows and dimensions 0); `owner` gives the
/// master (an index below `masters`) that serves a slot now.
///
/// Each move takes a slot from a master that is the heaviest in some
/// dimension to another master: of all such moves, the one that lowers
/// the most the heaviest master's load summed over the dimensions (so each
/// dimension evens out as far as it can), ties going to the one that lowers
/// the sum of squared loads the most, then to the lowest slot and master.
/// No move is made that lowers neither, so the moves end. With one
/// dimension, unit loads and no base this evens slot counts: no master
/// ends with two more than another.
pub fn balancing_moves(
    masters: usize,
    owner: impl Fn(u16) -> usize,
    slots: &[(u16, Vec<f64>)],
    base: &[Vec<f64>],
) -> Vec<SlotMove> {
    if masters == 0 {
        return Vec::new();
    }
    let dims = slots
        .iter()
        .map(|(_, l)| l.len())
        .chain(base.iter().map(Vec::len))
        .max()
        .unwrap_or(0);
    // Each slot once: its master and its loads, summed over its listings.
    let mut placed: std::collections::BTreeMap<u16, (usize, Vec<f64>)> = Default::default();
    for (s, l) in slots {
        let e = placed
            .entry(*s)
            .or_insert_with(|| (owner(*s).min(masters - 1), vec![0.0; dims]));
        e.1.iter_mut().zip(l).for_each(|(a, b)| *a += b);
    }
    let mut load = vec![vec![0.0; dims]; masters];
    for (m, row) in base.iter().enumerate().take(masters) {
        load[m].iter_mut().zip(row).for_each(|(a, b)| *a += b);
    }
    for (m, l) in placed.values() {
        load[*m].iter_mut().zip(l).for_each(|(a, b)| *a += b);
    }
    let total: f64 = load.iter().flatten().map(|x| x.abs()).sum();
    let eps = total * 1e-9;
    // A layout's score: per dimension its heaviest master's load, summed
    // (each dimension evens out as far as it can, not only the one that
    // cannot go lower), then the sum of squared loads.
    let better = |a: (f64, f64), b: (f64, f64)| {
        a.0 < b.0 - eps || (a.0 <= b.0 + eps && a.1 < b.1 - eps * total.max(1.0))
    };
    let mut moves = Vec::new();
    // Each move lowers the score; the cap is a guard only.
    for _ in 0..=placed.len() * masters {
        // Per dimension the three heaviest masters: a move changes two, so
        // the heaviest of the others is among them.
        let tops: Vec<Vec<(f64, usize)>> = (0..dims)
            .map(|d| {
                let mut rows: Vec<(f64, usize)> = (0..masters).map(|m| (load[m][d], m)).collect();
                rows.sort_by(|a, b| b.0.total_cmp(&a.0));
                rows.truncate(3);
                rows
            })
            .collect();
        let now = (
            tops.iter().map(|t| t[0].0).sum::<f64>(),
            load.iter().flatten().map(|x| x * x).sum::<f64>(),
        );
        let heaviest: Vec<bool> = load
            .iter()
            .map(|row| row.iter().zip(&tops).any(|(&x, t)| x >= t[0].0 - eps))
            .collect();
        let moved = |from: usize, to: usize, l: &[f64]| {
            let mut sc = (0.0, now.1);
            for (d, x) in l.iter().enumerate() {
                let (f, t) = (load[from][d], load[to][d]);
                let others = tops[d]
                    .iter()
                    .find(|(_, m)| *m != from && *m != to)
                    .map_or(f64::MIN, |r| r.0);
                sc.0 += others.max(f - x).max(t + x);
                sc.1 += (f - x) * (f - x) + (t + x) * (t + x) - f * f - t * t;
            }
            sc
        };
        let mut best: Option<((f64, f64), u16, usize)> = None;
        for (&s, (from, l)) in &placed {
            if !heaviest[*from] {
                continue;
            }
            for to in (0..masters).filter(|t| t != from) {
                let sc = moved(*from, to, l);
                if better(sc, now) && best.is_none_or(|(b, _, _)| better(sc, b)) {
                    best = Some((sc, s, to));
                }
            }
        }
        let Some((_, slot, to)) = best else {
            break;
        };
        let (from, l) = placed.get_mut(&slot).expect("a placed slot");
        for (d, x) in l.iter().enumerate() {
            load[*from][d] -= x;
            load[to][d] += x;
        }
        moves.push(SlotMove {
            slot,
            from: *from,
            to,
        });
        *from = to;
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn even(masters: usize) -> impl Fn(u16) -> usize {
        move |slot| even_owner(masters, slot)
    }

    fn shards(n: u32) -> Vec<u16> {
        (0..n).map(shard_slot).collect()
    }

    #[test]
    fn the_even_split_is_the_throwaway_clusters() {
        assert_eq!(even_owner(3, 0), 0);
        assert_eq!(even_owner(3, 5460), 0);
        assert_eq!(even_owner(3, 5461), 1);
        assert_eq!(even_owner(3, 10921), 1);
        assert_eq!(even_owner(3, 10922), 2);
        assert_eq!(even_owner(3, 16383), 2);
        assert_eq!(even_owner(1, 16383), 0);
        // Every master's first and last slot, for any count.
        for m in 1..=7usize {
            for i in 0..m {
                let first = (i * usize::from(SLOTS) / m) as u16;
                let last = ((i + 1) * usize::from(SLOTS) / m - 1) as u16;
                assert_eq!((even_owner(m, first), even_owner(m, last)), (i, i));
            }
        }
    }

    #[test]
    fn shards_by_master_follows_the_owner_and_leaves_out_the_unserved() {
        let held = shards_by_master(16, 3, |s| Some(even_owner(3, s)));
        assert_eq!(held.iter().map(Vec::len).collect::<Vec<_>>(), [6, 6, 4]);
        assert_eq!(held[0], [3, 7, 10, 11, 14, 15]);
        let unserved = shard_slot(3);
        let held = shards_by_master(16, 3, |s| (s != unserved).then(|| even_owner(3, s)));
        assert_eq!(held[0], [7, 10, 11, 14, 15]);
    }

    #[test]
    fn shard_slots_hash_the_tag_alone() {
        assert_eq!(shard_slot(0), slot(b"hits:{0}"));
        assert_eq!(shard_slot(15), slot(b"x:{15}:y"));
    }

    /// Unit loads, one dimension: what counts shards.
    fn units(slots: &[u16]) -> Vec<(u16, Vec<f64>)> {
        slots.iter().map(|&s| (s, vec![1.0])).collect()
    }

    /// Each master's load after `moves`, per dimension.
    fn loads_after(
        masters: usize,
        owner: impl Fn(u16) -> usize,
        slots: &[(u16, Vec<f64>)],
        base: &[Vec<f64>],
        moves: &[SlotMove],
    ) -> Vec<Vec<f64>> {
        let now = |s: u16| {
            moves
                .iter()
                .rev()
                .find(|m| m.slot == s)
                .map_or(owner(s), |m| m.to)
        };
        let dims = slots.first().map_or(1, |(_, l)| l.len());
        let mut load = vec![vec![0.0; dims]; masters];
        for (m, row) in base.iter().enumerate() {
            load[m].iter_mut().zip(row).for_each(|(a, b)| *a += b);
        }
        for (s, l) in slots {
            load[now(*s)].iter_mut().zip(l).for_each(|(a, b)| *a += b);
        }
        load
    }

    #[test]
    fn one_slot_evens_eighteen_shards_on_three_masters() {
        // 18 shards fall 6/7/5 on an even split; one slot evens them out.
        let moves = balancing_moves(3, even(3), &units(&shards(18)), &[]);
        assert_eq!(moves.len(), 1, "{moves:?}");
        let m = moves[0];
        assert_eq!((m.from, m.to), (1, 2));
        assert_eq!(even(3)(m.slot), 1);
        assert!(shards(18).contains(&m.slot));
    }

    #[test]
    fn unit_loads_leave_at_most_one_shard_of_difference() {
        for masters in 1..=6 {
            for n in 1..=64 {
                let slots = units(&shards(n));
                let moves = balancing_moves(masters, even(masters), &slots, &[]);
                let held = loads_after(masters, even(masters), &slots, &[], &moves);
                let held: Vec<f64> = held.iter().map(|r| r[0]).collect();
                let lo = held.iter().copied().fold(f64::MAX, f64::min);
                let hi = held.iter().copied().fold(f64::MIN, f64::max);
                let case = format!("{masters} masters, {n} shards: {held:?}, {moves:?}");
                assert!(hi - lo <= 1.0, "{case}");
                // Never a slot moved back and forth.
                assert!(moves.len() <= n as usize, "{case}");
            }
        }
    }

    #[test]
    fn the_master_of_known_is_left_fewer_shards() {
        // 16 shards fall 6/6/4; `known:` (slot 9558) is on the second,
        // counted as two shards' worth more: it ends with the fewest
        // shards, and the others no more than a shard apart.
        let k = even_owner(3, slot(b"known:"));
        assert_eq!(k, 1);
        let slots = units(&shards(16));
        let mut base = vec![vec![0.0]; 3];
        base[k] = vec![2.0];
        let moves = balancing_moves(3, even(3), &slots, &base);
        let held = loads_after(3, even(3), &slots, &[], &moves);
        let held: Vec<f64> = held.iter().map(|r| r[0]).collect();
        assert_eq!(held, [6.0, 4.0, 6.0], "{moves:?}");
        assert_eq!(moves.len(), 2, "{moves:?}");
        assert!(moves.iter().all(|m| (m.from, m.to) == (1, 2)), "{moves:?}");
    }

    #[test]
    fn traffic_is_balanced_not_slot_counts() {
        // One slot carries half the traffic: it stays alone.
        let slots = vec![
            (1, vec![0.5]),
            (2, vec![0.2]),
            (3, vec![0.2]),
            (4, vec![0.1]),
        ];
        let moves = balancing_moves(2, |_| 0, &slots, &[]);
        let held = loads_after(2, |_| 0, &slots, &[], &moves);
        assert!((held[0][0] - 0.5).abs() < 1e-9, "{held:?} {moves:?}");
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!(moves[0].slot, 1);
    }

    #[test]
    fn every_dimension_is_balanced_at_once() {
        // Two workloads skewed opposite ways: the slots that load both
        // alike are the ones to move.
        let slots = vec![
            (1, vec![1.0, 0.0]),
            (2, vec![0.0, 1.0]),
            (3, vec![0.5, 0.5]),
            (4, vec![0.5, 0.5]),
        ];
        let moves = balancing_moves(2, |_| 0, &slots, &[]);
        let held = loads_after(2, |_| 0, &slots, &[], &moves);
        assert_eq!(held, [vec![1.0, 1.0], vec![1.0, 1.0]], "{moves:?}");
        let mut moved: Vec<u16> = moves.iter().map(|m| m.slot).collect();
        moved.sort_unstable();
        assert_eq!(moved, [3, 4]);
    }

    #[test]
    fn shard_loads_are_shares_with_known_as_base() {
        let traffic = vec![(0, vec![3.0, 0.0]), (1, vec![1.0, 0.0])];
        let known = [(vec![2], 0.3), (vec![0, 1], 0.2)];
        let ShardLoads { slots, base } = shard_loads(&traffic, &known, 3);
        assert_eq!(slots[0], (shard_slot(0), vec![0.75, 0.5]));
        assert_eq!(slots[1], (shard_slot(1), vec![0.25, 0.5]));
        assert_eq!(base[2], [0.3, 0.0]);
        assert_eq!(base[0], [0.0, 0.1]);
        assert_eq!(base[1], [0.0, 0.1]);
        assert_eq!(known_weight(0.5), MEMBER_COST * 0.5);
    }

    #[test]
    fn the_moves_end_where_no_single_move_helps() {
        // Skewed loads in two dimensions over many shards and masters:
        // balancing what the moves leave lists nothing more, and the
        // heaviest load did not rise.
        for masters in [2usize, 3, 7, 32] {
            let slots: Vec<(u16, Vec<f64>)> = (0..256u32)
                .map(|k| {
                    let x = u64::from(k).wrapping_mul(2_654_435_761) % 1000;
                    (
                        shard_slot(k),
                        vec![1.0 / f64::from(k + 1), x as f64 / 1000.0],
                    )
                })
                .collect();
            let mut base = vec![vec![0.0, 0.0]; masters];
            base[0] = vec![0.3, 20.0];
            let moves = balancing_moves(masters, even(masters), &slots, &base);
            let after = |s: u16| {
                moves
                    .iter()
                    .rev()
                    .find(|m| m.slot == s)
                    .map_or(even(masters)(s), |m| m.to)
            };
            assert!(balancing_moves(masters, after, &slots, &base).is_empty());
            let worst = |load: Vec<Vec<f64>>| {
                (0..2)
                    .map(|d| load.iter().map(|r| r[d]).fold(0.0, f64::max))
                    .sum::<f64>()
            };
            let before = worst(loads_after(masters, even(masters), &slots, &base, &[]));
            let now = worst(loads_after(masters, even(masters), &slots, &base, &moves));
            assert!(now <= before, "{masters}: {before} -> {now}");
        }
    }

    #[test]
    fn a_slot_held_twice_moves_whole_or_not_at_all() {
        // Two shards in one slot on master 0, none elsewhere: moving the
        // slot would leave 0/2, no better than 2/0.
        assert!(balancing_moves(2, |_| 0, &units(&[5, 5]), &[]).is_empty());
        // Three in one slot and one in another: 4/0 becomes 3/1 (or 1/3,
        // as good), each slot moved whole.
        let slots = units(&[5, 5, 5, 9]);
        let moves = balancing_moves(2, |_| 0, &slots, &[]);
        assert_eq!(moves.len(), 1, "{moves:?}");
        let mut held: Vec<f64> = loads_after(2, |_| 0, &slots, &[], &moves)
            .iter()
            .map(|r| r[0])
            .collect();
        held.sort_by(f64::total_cmp);
        assert_eq!(held, [1.0, 3.0]);
    }

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on a real server.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"123456789"), 0x31c3 % SLOTS);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        // An empty tag hashes the whole key; only the first tag counts.
        assert_eq!(slot(b"a{}b"), crc16(b"a{}b") % SLOTS);
        assert_eq!(slot(b"x{a}{b}"), slot(b"a"));
        assert_eq!(slot(b"x{a"), crc16(b"x{a") % SLOTS);
    }

    #[test]
    fn every_slot_has_a_short_tag() {
        for s in 0..SLOTS {
            let t = tag_for_slot(s);
            assert!(!t.is_empty() && t.len() <= 4, "{t}");
            assert_eq!(slot(format!("hc:applied:{{{t}}}:w1").as_bytes()), s);
        }
    }
}
