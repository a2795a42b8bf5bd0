//! Stream entry ids held compactly while they wait to be acknowledged.
//!
//! A worker behind on the stream keeps the ids of every window waiting in
//! its carry until the carry is applied: up to [`crate::model::carry::MAX_ENTRIES`]
//! of them. As text (`1732489012345-12 `) that is about 17 bytes an id,
//! more with a string's spare capacity; here an id is the difference to the
//! one before, as variable-length integers: 2 bytes for the usual next id
//! (same millisecond and the next sequence number, or a later millisecond
//! and sequence 0), whatever order the ids come in.

/// Entry ids (`MS-SEQ`), in the order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct IdList {
    bytes: Vec<u8>,
    last: (u64, u64),
    /// The newest id added; `None` while empty.
    newest: Option<(u64, u64)>,
}

impl IdList {
    /// The ids of a space-separated list, or `None` if one is not `MS-SEQ`
    /// with two unsigned 64-bit numbers (Redis never gives such an id).
    pub(crate) fn parse(spaced: &str) -> Option<IdList> {
        let mut list = IdList::default();
        for id in spaced.split(' ').filter(|s| !s.is_empty()) {
            let (ms, seq) = id.split_once('-')?;
            list.push(ms.parse().ok()?, seq.parse().ok()?);
        }
        list.bytes.shrink_to_fit();
        Some(list)
    }

    /// Adds the id `ms-seq`.
    pub(crate) fn push(&mut self, ms: u64, seq: u64) {
        let (last_ms, last_seq) = self.last;
        put(&mut self.bytes, zigzag(ms.wrapping_sub(last_ms)));
        let seq_delta = if ms == last_ms {
            zigzag(seq.wrapping_sub(last_seq))
        } else {
            seq
        };
        put(&mut self.bytes, seq_delta);
        self.last = (ms, seq);
        self.newest = self.newest.max(Some((ms, seq)));
    }

    /// The newest id it holds (as `(ms, seq)`), whatever the order added.
    pub(crate) fn newest(&self) -> Option<(u64, u64)> {
        self.newest
    }

    /// How many ids it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether it holds none.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The ids as Redis writes them, in the order they were added.
    pub(crate) fn iter(&self) -> Ids<'_> {
        Ids {
            bytes: &self.bytes,
            at: 0,
            last: (0, 0),
        }
    }
}

/// The ids of an [`IdList`], as `MS-SEQ` text.
#[derive(Debug, Clone)]
pub(crate) struct Ids<'a> {
    bytes: &'a [u8],
    at: usize,
    last: (u64, u64),
}

impl Iterator for Ids<'_> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let ms = self
            .last
            .0
            .wrapping_add(unzigzag(take(self.bytes, &mut self.at)));
        let raw = take(self.bytes, &mut self.at);
        let seq = if ms == self.last.0 {
            self.last.1.wrapping_add(unzigzag(raw))
        } else {
            raw
        };
        self.last = (ms, seq);
        Some(format!("{ms}-{seq}"))
    }
}

/// A signed difference (two's complement in a `u64`) as a small unsigned
/// number: 0, -1, 1, -2, ... become 0, 1, 2, 3, ...
fn zigzag(d: u64) -> u64 {
    let d = d as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> u64 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}

/// LEB128: 7 bits a byte, low bits first, the high bit set on all but the
/// last byte.
fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn take(bytes: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(&b) = bytes.get(*at) {
        *at += 1;
        if shift < 64 {
            v |= u64::from(b & 0x7f) << shift;
        }
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(spaced: &str) -> Vec<String> {
        IdList::parse(spaced).expect("valid ids").iter().collect()
    }

    #[test]
    fn ids_come_back_as_written_in_any_order() {
        let ids = "1732489012345-0 1732489012345-1 1732489012346-0 1732489012300-7 \
                   1732489012300-3 0-1 18446744073709551615-18446744073709551615 5-0";
        let expected: Vec<&str> = ids.split_whitespace().collect();
        assert_eq!(round_trip(ids), expected);
        let list = IdList::parse(ids).unwrap();
        assert_eq!(list.len(), expected.len());
        assert!(IdList::parse("").unwrap().is_empty());
        assert_eq!(round_trip("  7-1  "), ["7-1"]);
    }

    #[test]
    fn consecutive_ids_take_two_bytes_each() {
        let mut list = IdList::default();
        list.push(1_732_489_012_345, 0);
        let first = list.bytes.len();
        for seq in 1..1000 {
            list.push(1_732_489_012_345, seq);
        }
        for ms in 1..1000 {
            list.push(1_732_489_012_345 + ms, 0);
        }
        assert_eq!(list.bytes.len() - first, 2 * 1998);
        assert_eq!(list.len(), 1999);
    }

    #[test]
    fn text_that_is_no_id_is_refused() {
        for bad in ["1", "a-1", "1-b", "-1-0", "1-0-0", "18446744073709551616-0"] {
            assert_eq!(IdList::parse(bad), None, "{bad}");
        }
    }
}
