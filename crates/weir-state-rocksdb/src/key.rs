//! The byte layout of stored keys.
//!
//! A row key is `[key group: 2 bytes BE][varint key len][key][varint
//! namespace len][namespace]`, followed by the encoded user key for map
//! entries. The key-group prefix makes a key-group range one contiguous run of
//! keys (iteration per key group, `delete_range` on rescale); the length
//! prefixes make the `(key, namespace)` part prefix-free, so a map's entries
//! for one key and namespace are exactly the keys starting with its row key.
//! This module only encodes and decodes; it does not touch RocksDB.

use weir_state::StateKey;
use weir_types::{KeyGroup, read_varint, write_varint};

/// Writes the row key of `key` into `out` (cleared first).
pub(crate) fn row_key(key: StateKey<'_>, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&key.key_group.prefix());
    write_varint(key.key.len() as u64, out);
    out.extend_from_slice(key.key);
    write_varint(key.namespace.len() as u64, out);
    out.extend_from_slice(key.namespace);
}

/// The two-byte prefix of key group `key_group`: every row key of the group
/// sorts at or after it, and every row key of a lower group sorts before it,
/// so it is both the inclusive start of `key_group` and the exclusive end of a
/// range ending there. `key_group` may be one past the last key group (max
/// parallelism is at most 32768, which keeps it within two bytes).
pub(crate) fn key_group_bound(key_group: u32) -> Vec<u8> {
    let kg = u16::try_from(key_group).expect("invariant: key groups are at most 32768");
    kg.to_be_bytes().to_vec()
}

/// The smallest key greater than every key that starts with `prefix`, or
/// `None` when no such key exists (the prefix is all `0xff`).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
}

/// A row key taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodedRowKey<'a> {
    /// The key group.
    pub key_group: KeyGroup,
    /// The encoded key.
    pub key: &'a [u8],
    /// The encoded namespace.
    pub namespace: &'a [u8],
    /// What follows: the user key of a map entry, empty otherwise.
    pub user_key: &'a [u8],
}

/// Splits a stored row key; `None` when it does not follow the layout.
pub(crate) fn decode_row_key(bytes: &[u8]) -> Option<DecodedRowKey<'_>> {
    let (kg, mut rest) = bytes.split_first_chunk::<2>()?;
    let key = take_prefixed(&mut rest)?;
    let namespace = take_prefixed(&mut rest)?;
    Some(DecodedRowKey {
        key_group: KeyGroup(u16::from_be_bytes(*kg)),
        key,
        namespace,
        user_key: rest,
    })
}

fn take_prefixed<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(read_varint(rest)?).ok()?;
    if len > rest.len() {
        return None;
    }
    let (head, tail) = rest.split_at(len);
    *rest = tail;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_key_round_trips_and_keeps_map_entries_under_their_prefix() {
        let key = StateKey {
            key_group: KeyGroup(300),
            key: b"k\x00y",
            namespace: b"ns",
        };
        let mut row = Vec::new();
        row_key(key, &mut row);
        assert_eq!(&row[..2], &[1, 44]);
        let prefix_len = row.len();
        row.extend_from_slice(b"user");
        let decoded = decode_row_key(&row).expect("valid layout");
        assert_eq!(decoded.key_group, KeyGroup(300));
        assert_eq!(decoded.key, b"k\x00y");
        assert_eq!(decoded.namespace, b"ns");
        assert_eq!(decoded.user_key, b"user");
        let end = prefix_end(&row[..prefix_len]).expect("not all 0xff");
        assert!(row.as_slice() < end.as_slice());
    }

    #[test]
    fn key_group_bounds_enclose_their_group() {
        let mut row = Vec::new();
        row_key(StateKey::new(KeyGroup(7), &[0xff; 40]), &mut row);
        assert!(key_group_bound(7) <= row && row < key_group_bound(8));
        assert_eq!(key_group_bound(32768), vec![0x80, 0x00]);
    }

    #[test]
    fn prefix_end_skips_trailing_ff() {
        assert_eq!(prefix_end(&[1, 0xff, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff]), None);
    }

    #[test]
    fn truncated_row_key_is_rejected() {
        let mut row = Vec::new();
        row_key(StateKey::new(KeyGroup(1), b"abc"), &mut row);
        assert!(decode_row_key(&row[..4]).is_none());
        assert!(decode_row_key(&row[..1]).is_none());
    }
}
