//! Redis Cluster hash slots, computed here as the server does (CRC16/XMODEM
//! of the key's hash tag, modulo 16384), and a short tag for every slot.
//!
//! On a cluster a script may only touch keys of one slot. The counters'
//! keys (`count:PREC:NAME`) fall where their names put them, so the marker
//! that makes an apply exactly once must be a key *in that same slot*:
//! [`tag_for_slot`] gives a string `T` whose slot is `S`, and a key
//! `…{T}…` then shares slot `S` with any counter there.

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

#[cfg(test)]
mod tests {
    use super::*;

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
