//! How keyed state is addressed, and the canonical list payload.

use weir_types::{KeyGroup, read_varint, write_varint};

/// The address of one keyed-state entry: the current key (already encoded, see
/// [`weir_types::encode_key`]), its key group and a namespace (empty unless
/// windows or other scopes are in use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateKey<'a> {
    /// The key group of `key`; it must lie in the backend's range.
    pub key_group: KeyGroup,
    /// The encoded key.
    pub key: &'a [u8],
    /// The encoded namespace.
    pub namespace: &'a [u8],
}

impl<'a> StateKey<'a> {
    /// A key in the empty namespace.
    pub fn new(key_group: KeyGroup, key: &'a [u8]) -> Self {
        Self {
            key_group,
            key,
            namespace: &[],
        }
    }
}

/// Appends one item to a list payload (the canonical list encoding: items
/// each prefixed by their varint length, concatenated). Appending is a
/// concatenation, which is what lets RocksDB merge list appends.
pub fn push_list_item(item: &[u8], payload: &mut Vec<u8>) {
    write_varint(item.len() as u64, payload);
    payload.extend_from_slice(item);
}

/// The items of a list payload; `None` in place of an item marks a corrupt
/// payload (and ends the iteration).
pub fn list_items(payload: &[u8]) -> impl Iterator<Item = Option<&[u8]>> {
    let mut rest = payload;
    let mut failed = false;
    std::iter::from_fn(move || {
        if rest.is_empty() || failed {
            return None;
        }
        let item = read_varint(&mut rest)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= rest.len())
            .map(|n| {
                let (item, tail) = rest.split_at(n);
                rest = tail;
                item
            });
        failed = item.is_none();
        Some(item)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_payload_round_trip() {
        let mut p = Vec::new();
        for item in [&b"a"[..], b"", b"xyz"] {
            push_list_item(item, &mut p);
        }
        let items: Vec<_> = list_items(&p).collect();
        assert_eq!(items, vec![Some(&b"a"[..]), Some(b""), Some(b"xyz")]);
        assert_eq!(list_items(&p[..p.len() - 1]).last(), Some(None));
    }
}
