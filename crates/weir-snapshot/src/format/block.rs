//! The entries of one key group, before compression.
//!
//! An entry is: state index (varint), payload tag (one byte: 0 value, 1 list,
//! 2 map entry), key, namespace, then the payload (value or list payload; or
//! user key and value), each byte string prefixed by its varint length. The
//! key group is implied by the block. This module neither compresses nor
//! checksums.

use weir_state::{EntryPayload, StateEntry, StateId, list_items};
use weir_types::{KeyGroup, StateDescriptor, StateKind, read_varint, write_varint};

use crate::error::{FormatError, Section};

const TAG_VALUE: u8 = 0;
const TAG_LIST: u8 = 1;
const TAG_MAP_ENTRY: u8 = 2;

/// Whether `payload` is the form entries of a `kind` state take.
pub(crate) fn payload_fits(kind: StateKind, payload: &EntryPayload<'_>) -> bool {
    match payload {
        EntryPayload::Value(_) => matches!(
            kind,
            StateKind::Value | StateKind::Reducing | StateKind::Aggregating
        ),
        EntryPayload::List(p) => {
            kind == StateKind::List && !p.is_empty() && list_items(p).all(|i| i.is_some())
        }
        EntryPayload::MapEntry { .. } => kind == StateKind::Map,
    }
}

/// Appends one entry (its state id is the snapshot's own index).
pub(crate) fn encode_entry(entry: &StateEntry<'_>, out: &mut Vec<u8>) {
    write_varint(u64::from(entry.state.0), out);
    let tag = match entry.payload {
        EntryPayload::Value(_) => TAG_VALUE,
        EntryPayload::List(_) => TAG_LIST,
        EntryPayload::MapEntry { .. } => TAG_MAP_ENTRY,
    };
    out.push(tag);
    put_bytes(entry.key, out);
    put_bytes(entry.namespace, out);
    match entry.payload {
        EntryPayload::Value(v) | EntryPayload::List(v) => put_bytes(v, out),
        EntryPayload::MapEntry { user_key, value } => {
            put_bytes(user_key, out);
            put_bytes(value, out);
        }
    }
}

/// The decompressed entries of one key group.
#[derive(Debug)]
pub struct DecodedBlock {
    key_group: KeyGroup,
    raw: Vec<u8>,
    entries: u64,
}

impl DecodedBlock {
    pub(crate) fn new(key_group: KeyGroup, raw: Vec<u8>, entries: u64) -> Self {
        Self {
            key_group,
            raw,
            entries,
        }
    }

    /// The key group of every entry.
    pub fn key_group(&self) -> KeyGroup {
        self.key_group
    }

    /// The entries, checked against `descriptors` (the snapshot header's):
    /// state indexes in range, payloads of the state's kind, exactly as many
    /// entries as the index says. Stops after the first error.
    pub fn entries<'a>(
        &'a self,
        descriptors: &'a [StateDescriptor],
    ) -> impl Iterator<Item = Result<StateEntry<'a>, FormatError>> + 'a {
        let section = Section::KeyGroup(self.key_group);
        let corrupt = move |reason| FormatError::Corrupt { section, reason };
        let mut rest = self.raw.as_slice();
        let mut decoded = 0u64;
        let mut failed = false;
        std::iter::from_fn(move || {
            if failed {
                return None;
            }
            if rest.is_empty() {
                if decoded == self.entries {
                    return None;
                }
                failed = true;
                return Some(Err(corrupt("fewer entries than the index says")));
            }
            let entry = decode_entry(&mut rest, self.key_group, descriptors)
                .ok_or(())
                .map_err(|()| corrupt("malformed entry"))
                .and_then(|e| {
                    decoded += 1;
                    if decoded > self.entries {
                        Err(corrupt("more entries than the index says"))
                    } else {
                        Ok(e)
                    }
                });
            failed = entry.is_err();
            Some(entry)
        })
    }
}

fn decode_entry<'a>(
    rest: &mut &'a [u8],
    key_group: KeyGroup,
    descriptors: &[StateDescriptor],
) -> Option<StateEntry<'a>> {
    let index = u32::try_from(read_varint(rest)?).ok()?;
    let descriptor = descriptors.get(usize::try_from(index).ok()?)?;
    let (&tag, tail) = rest.split_first()?;
    *rest = tail;
    let key = take_bytes(rest)?;
    let namespace = take_bytes(rest)?;
    let payload = match tag {
        TAG_VALUE => EntryPayload::Value(take_bytes(rest)?),
        TAG_LIST => EntryPayload::List(take_bytes(rest)?),
        TAG_MAP_ENTRY => EntryPayload::MapEntry {
            user_key: take_bytes(rest)?,
            value: take_bytes(rest)?,
        },
        _ => return None,
    };
    payload_fits(descriptor.kind, &payload).then_some(StateEntry {
        state: StateId(index),
        key_group,
        key,
        namespace,
        payload,
    })
}

fn put_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    write_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn take_bytes<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(read_varint(rest)?).ok()?;
    if len > rest.len() {
        return None;
    }
    let (bytes, tail) = rest.split_at(len);
    *rest = tail;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use weir_state::push_list_item;
    use weir_types::ValueType;

    use super::*;

    fn descriptors() -> Vec<StateDescriptor> {
        vec![
            StateDescriptor::new("v", StateKind::Value, ValueType::Int64).expect("valid"),
            StateDescriptor::new("l", StateKind::List, ValueType::Utf8).expect("valid"),
            StateDescriptor::map("m", ValueType::Utf8, ValueType::Int64).expect("valid"),
        ]
    }

    #[test]
    fn entries_round_trip() {
        let kg = KeyGroup(3);
        let mut list = Vec::new();
        push_list_item(b"a", &mut list);
        push_list_item(b"", &mut list);
        let entries = [
            StateEntry {
                state: StateId(0),
                key_group: kg,
                key: b"k1",
                namespace: b"",
                payload: EntryPayload::Value(b"v"),
            },
            StateEntry {
                state: StateId(1),
                key_group: kg,
                key: b"k1",
                namespace: b"ns",
                payload: EntryPayload::List(&list),
            },
            StateEntry {
                state: StateId(2),
                key_group: kg,
                key: b"",
                namespace: b"",
                payload: EntryPayload::MapEntry {
                    user_key: b"u",
                    value: b"",
                },
            },
        ];
        let mut raw = Vec::new();
        for e in &entries {
            encode_entry(e, &mut raw);
        }
        let d = descriptors();
        let block = DecodedBlock::new(kg, raw.clone(), 3);
        let back: Vec<_> = block.entries(&d).collect::<Result<_, _>>().expect("valid");
        assert_eq!(back, entries);

        let short = DecodedBlock::new(kg, raw.clone(), 4);
        assert!(short.entries(&d).any(|e| e.is_err()));
        let long = DecodedBlock::new(kg, raw, 2);
        assert!(long.entries(&d).any(|e| e.is_err()));
    }

    #[test]
    fn wrong_kinds_and_indexes_are_corrupt() {
        let kg = KeyGroup(0);
        let d = descriptors();
        for (state, payload) in [
            (StateId(0), EntryPayload::List(b"\x01a")),
            (StateId(1), EntryPayload::Value(b"x")),
            (StateId(1), EntryPayload::List(b"\x05a")),
            (StateId(5), EntryPayload::Value(b"x")),
        ] {
            let mut raw = Vec::new();
            let entry = StateEntry {
                state,
                key_group: kg,
                key: b"k",
                namespace: b"",
                payload,
            };
            encode_entry(&entry, &mut raw);
            let block = DecodedBlock::new(kg, raw, 1);
            assert!(block.entries(&d).any(|e| e.is_err()), "{entry:?}");
        }
    }
}
