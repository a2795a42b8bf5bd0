//! The dead letter of a rejected entry: its id, its reason and the first
//! [`DEAD_LETTER_FIELD_BYTES`] of its fields, copied once, however large the
//! entry (written by `commit.lua` in the commit that records its window).

/// Most bytes of an entry's original fields (names and values together) a
/// dead letter keeps: 4 KiB, enough to see what a producer sent. Past it the
/// fields are cut, and the dead letter says so with `truncated` (`1`) and
/// `original_bytes` (what the fields took). The dead-letter stream is capped
/// by entry count (`--dead-maxlen`): this caps each entry too.
pub(crate) const DEAD_LETTER_FIELD_BYTES: usize = 4096;

/// An entry that could not be decoded, on its way to the dead-letter stream.
#[derive(Debug, Clone)]
pub(crate) struct Rejected {
    /// The entry ID.
    pub id: String,
    /// Why (a stable snake_case reason, also the metric label).
    pub reason: &'static str,
    /// The entry's original fields, cut to [`DEAD_LETTER_FIELD_BYTES`] (and
    /// then followed by `truncated` and `original_bytes`).
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Rejected {
    /// The dead letter of entry `id`, whose fields take `bytes` (see
    /// [`crate::model::event::entry_bytes`]): its fields copied once, and
    /// only the first [`DEAD_LETTER_FIELD_BYTES`] of them, however large
    /// the entry.
    pub(crate) fn new<'a>(
        id: &str,
        reason: &'static str,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        bytes: usize,
    ) -> Rejected {
        let mut room = DEAD_LETTER_FIELD_BYTES;
        let mut kept = Vec::new();
        for (k, v) in fields {
            if room == 0 {
                break;
            }
            let k = &k[..k.len().min(room)];
            room -= k.len();
            let v = &v[..v.len().min(room)];
            room -= v.len();
            kept.push((k.to_vec(), v.to_vec()));
        }
        if bytes > DEAD_LETTER_FIELD_BYTES {
            kept.push((b"truncated".to_vec(), b"1".to_vec()));
            kept.push((b"original_bytes".to_vec(), bytes.to_string().into_bytes()));
        }
        Rejected {
            id: id.to_string(),
            reason,
            fields: kept,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_letter_keeps_small_fields_whole() {
        let fields: [(&[u8], &[u8]); 2] = [(b"count", b"2"), (b"extra", b"x")];
        let r = Rejected::new("1-0", "missing_name", fields, 12);
        assert_eq!((r.id.as_str(), r.reason), ("1-0", "missing_name"));
        assert_eq!(
            r.fields,
            vec![
                (b"count".to_vec(), b"2".to_vec()),
                (b"extra".to_vec(), b"x".to_vec())
            ]
        );
    }

    #[test]
    fn a_dead_letter_keeps_at_most_4_kib_of_fields_and_says_so() {
        let mib = vec![b'b'; 1 << 20];
        let one: [(&[u8], &[u8]); 2] = [(b"name", &mib), (b"count", b"1")];
        let r = Rejected::new("1-0", "too_large", one, (1 << 20) + 10);
        let kept: usize = r.fields[..r.fields.len() - 2]
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        assert_eq!(kept, DEAD_LETTER_FIELD_BYTES);
        assert_eq!(r.fields.len(), 3, "name, then the two marks");
        assert_eq!(r.fields[1], (b"truncated".to_vec(), b"1".to_vec()));
        assert_eq!(
            r.fields[2],
            (b"original_bytes".to_vec(), b"1048586".to_vec())
        );
        // Many small fields: whole ones while they fit, then the cut.
        let kib = vec![b'k'; 1024];
        let many: Vec<(&[u8], &[u8])> = (0..1000).map(|_| (&b"f"[..], &kib[..])).collect();
        let r = Rejected::new("1-0", "too_large", many, 1000 * 1025);
        let kept: usize = r.fields[..r.fields.len() - 2]
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        assert_eq!(kept, DEAD_LETTER_FIELD_BYTES);
        assert_eq!(r.fields.len(), 4 + 2, "three whole, one cut, the marks");
        // A huge field name is cut too.
        let huge: [(&[u8], &[u8]); 1] = [(&mib, b"v")];
        let r = Rejected::new("1-0", "too_large", huge, (1 << 20) + 1);
        assert_eq!(r.fields[0].0.len(), DEAD_LETTER_FIELD_BYTES);
        assert!(r.fields[0].1.is_empty());
    }
}
