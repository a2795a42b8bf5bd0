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
//! tags 0..N−1 fall unevenly over masters that split the slots evenly;
//! [`evening_moves`] says which single slots to give to other masters so
//! that every master holds as many shards as another, give or take one.

use std::sync::OnceLock;

/// Hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster uses it.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of `key` Redis Cluster hashes: the bytes between the first `{`
/// and the next `}` when there are any, else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The hash slot of `key`.
pub fn slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

/// A short string (at most 4 characters of `[0-9a-z]`) whose slot is `slot`:
/// `{T}` in a key puts that key in `slot`. Built once (a few ms).
pub fn tag_for_slot(slot: u16) -> &'static str {
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
pub fn shard_slot(k: u32) -> u16 {
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

/// The fewest single-slot moves after which `slots` (say, the shards')
/// spread over `masters` masters as evenly as they can: no master holds
/// two more of them than another. `owner` gives the master (an index below
/// `masters`) that serves a slot now. Each move takes the last listed slot
/// of a master holding the most to a master holding the fewest; a slot
/// listed twice counts twice, as two shards there would.
///
/// `lighter` names a master with work of its own besides the slots (the
/// one serving `known:`, which takes every new counter's ZADD): when the
/// slots cannot fall exactly evenly it ends with the fewer, at the price
/// of one more move at most. Other ties go to the lowest index.
pub fn evening_moves(
    masters: usize,
    owner: impl Fn(u16) -> usize,
    slots: &[u16],
    lighter: Option<usize>,
) -> Vec<SlotMove> {
    if masters == 0 {
        return Vec::new();
    }
    let mut held: Vec<Vec<u16>> = vec![Vec::new(); masters];
    for &s in slots {
        held[owner(s).min(masters - 1)].push(s);
    }
    let is_lighter = |m: usize| lighter == Some(m);
    let mut moves = Vec::new();
    loop {
        let fullest = (0..masters)
            .max_by_key(|&m| (held[m].len(), is_lighter(m), std::cmp::Reverse(m)))
            .expect("masters > 0");
        let emptiest = (0..masters)
            .min_by_key(|&m| (held[m].len(), is_lighter(m), m))
            .expect("masters > 0");
        let (most, fewest) = (held[fullest].len(), held[emptiest].len());
        let settled = most <= fewest + 1;
        // Balanced: only the lighter master may still give one up.
        if settled && !(is_lighter(fullest) && most == fewest + 1) {
            return moves;
        }
        let slot = *held[fullest].last().expect("the fullest holds some");
        // Every copy of the slot goes with it: a slot is served by one master.
        let (going, staying): (Vec<u16>, Vec<u16>) =
            held[fullest].iter().partition(|&&s| s == slot);
        let (after_from, after_to) = (most - going.len(), fewest + going.len());
        let worse = match settled {
            // The last step must keep the balance and leave the lighter
            // master with the fewer.
            true => after_to > after_from + 1 || after_to < after_from,
            false => after_to > after_from + 1,
        };
        if worse {
            return moves; // moving it would only tip the balance the other way
        }
        held[fullest] = staying;
        held[emptiest].extend(going);
        moves.push(SlotMove {
            slot,
            from: fullest,
            to: emptiest,
        });
    }
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

    #[test]
    fn evening_moves_one_slot_for_eighteen_shards_on_three_masters() {
        // 18 shards fall 6/7/5 on an even split; one slot evens them out.
        let moves = evening_moves(3, even(3), &shards(18), None);
        assert_eq!(moves.len(), 1, "{moves:?}");
        let m = moves[0];
        assert_eq!((m.from, m.to), (1, 2));
        assert_eq!(even(3)(m.slot), 1);
        assert!(shards(18).contains(&m.slot));
    }

    #[test]
    fn evening_leaves_at_most_one_shard_of_difference() {
        for masters in 1..=6 {
            for lighter in std::iter::once(None).chain((0..masters).map(Some)) {
                for n in 1..=64 {
                    let slots = shards(n);
                    let plain = evening_moves(masters, even(masters), &slots, None).len();
                    let moves = evening_moves(masters, even(masters), &slots, lighter);
                    let owner = |s: u16| {
                        moves
                            .iter()
                            .rev()
                            .find(|m| m.slot == s)
                            .map_or(even(masters)(s), |m| m.to)
                    };
                    let mut held = vec![0usize; masters];
                    for &s in &slots {
                        held[owner(s)] += 1;
                    }
                    let (lo, hi) = (*held.iter().min().unwrap(), *held.iter().max().unwrap());
                    let case =
                        format!("{masters} masters, {n} shards, lighter {lighter:?}: {held:?}");
                    assert!(hi - lo <= 1, "{case}");
                    // The lighter master ends with the fewer, for one more
                    // move at most.
                    if let Some(l) = lighter {
                        assert_eq!(held[l], lo, "{case}");
                    }
                    assert!(moves.len() <= plain + 1, "{case}");
                    // 16 on three masters: 6/6/4 becomes 5/6/5 with one move.
                    if masters == 3 && n == 16 {
                        assert_eq!(moves.len(), 1, "{case}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_master_of_known_ends_with_the_fewer_shards() {
        // 16 shards fall 6/6/4; `known:` (slot 9558) is on the second.
        let lighter = Some(even_owner(3, slot(b"known:")));
        assert_eq!(lighter, Some(1));
        let moves = evening_moves(3, even(3), &shards(16), lighter);
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!((moves[0].from, moves[0].to), (1, 2));
        // Without it the first master gives one up: 5/6/5.
        let moves = evening_moves(3, even(3), &shards(16), None);
        assert_eq!((moves[0].from, moves[0].to), (0, 2));
        // Already even, the lighter master still sheds its extra shard: 19
        // fall 7/7/5, and 6/7/6 would leave the second with 7.
        let moves = evening_moves(3, even(3), &shards(19), Some(1));
        assert_eq!(
            moves.iter().map(|m| (m.from, m.to)).collect::<Vec<_>>(),
            [(1, 2)]
        );
    }

    #[test]
    fn a_slot_held_twice_moves_whole_or_not_at_all() {
        // Two shards in one slot on master 0, none elsewhere: moving the
        // slot would leave 0/2, no better than 2/0.
        assert!(evening_moves(2, |_| 0, &[5, 5], None).is_empty());
        // Three in one slot and one in another: 4/0 becomes 3/1.
        let moves = evening_moves(2, |_| 0, &[5, 5, 5, 9], None);
        assert_eq!(
            moves,
            vec![SlotMove {
                slot: 9,
                from: 0,
                to: 1
            }]
        );
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
