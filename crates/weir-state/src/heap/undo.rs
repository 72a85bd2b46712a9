//! Undo logs of the heap backend: what an entry held before the first write
//! of an epoch touched it, so `discard_from` can put it back.
//!
//! A log is replayed newest first; each record restores the state just before
//! its write, so extra records (say, an entry removed and inserted again in
//! one epoch) are harmless. Deciding *when* to log is the backend's job.
//!
//! Value and list entries' records are plain data, their bytes copied into
//! one buffer beside them, so emptying the log of a finalized epoch visits
//! none of them: the barrier finalizes the cut epoch inside the synchronous
//! pause, and dropping one owned record per written entry there took 1-2 ms
//! at 10^7 keys with 1% of them written per epoch. Map states keep owned
//! records (a map's old contents); they are logged apart, which changes no
//! replay: a map entry and a value or list entry never share a table.

use weir_types::Epoch;

use crate::backend::StateId;
use crate::bytes::SmallBytes;
use crate::heap::data::{MapValue, StateData, UserMap};
use crate::heap::table::{OwnedSlotKey, Slot, SlotKey, StateTable};

/// The undo records of one epoch.
#[derive(Debug, Default)]
pub(crate) struct UndoLog {
    /// Value and list entries, oldest first.
    bytes: Vec<BytesUndo>,
    /// The keys, namespaces and old payloads of `bytes`, one after another.
    saved: Vec<u8>,
    /// Map entries and user-map entries, oldest first.
    maps: Vec<MapUndo>,
}

/// What a value or list entry held: its address and old payload lie in the
/// log's buffer, from `at` on.
///
/// `Copy` (owning nothing) is what lets [`UndoLog::clear`] forget these
/// records without visiting them.
#[derive(Debug, Clone, Copy)]
struct BytesUndo {
    state: u32,
    group: u32,
    at: usize,
    key_len: u32,
    namespace_len: u32,
    payload_len: usize,
    /// The old tag, or `None` when the entry did not exist.
    old: Option<Option<Epoch>>,
}

impl UndoLog {
    /// Logs `slot` of key group index `group` of `state` before a write
    /// changes or removes it: as absent when the write `inserted` it, else
    /// with its payload and tag.
    pub(crate) fn save_bytes(
        &mut self,
        state: StateId,
        group: usize,
        slot: &Slot<SmallBytes>,
        inserted: bool,
    ) {
        let at = self.saved.len();
        let (key, namespace) = (slot.key(), slot.namespace());
        let payload = if inserted { &[][..] } else { &slot.payload[..] };
        self.saved.extend_from_slice(key);
        self.saved.extend_from_slice(namespace);
        self.saved.extend_from_slice(payload);
        self.bytes.push(BytesUndo {
            state: state.0,
            group: u32::try_from(group).expect("a key group index fits a key group"),
            at,
            key_len: u32::try_from(key.len()).expect("slot keys are shorter than 4 GiB"),
            namespace_len: u32::try_from(namespace.len())
                .expect("slot namespaces are shorter than 4 GiB"),
            payload_len: payload.len(),
            old: (!inserted).then(|| slot.tag()),
        });
    }

    /// Logs a map entry or user-map entry.
    pub(crate) fn save_map(&mut self, record: MapUndo) {
        self.maps.push(record);
    }

    /// Puts back what the records saved, newest first, and empties the log.
    pub(crate) fn apply(&mut self, data: &mut [StateData]) {
        for record in self.bytes.drain(..).rev() {
            let StateData::Bytes(table) = &mut data[record.state as usize] else {
                continue;
            };
            let key_end = record.at + record.key_len as usize;
            let namespace_end = key_end + record.namespace_len as usize;
            let k = SlotKey::new(
                &self.saved[record.at..key_end],
                &self.saved[key_end..namespace_end],
            );
            let group = record.group as usize;
            match record.old {
                Some(tag) => {
                    let payload = &self.saved[namespace_end..namespace_end + record.payload_len];
                    table.set(group, k, SmallBytes::from_slice(payload), tag);
                }
                None => {
                    table.remove(group, k);
                }
            }
        }
        self.saved.clear();
        for record in self.maps.drain(..).rev() {
            record.apply(data);
        }
    }

    /// Forgets every record (an epoch became final).
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.saved.clear();
        self.maps.clear();
    }

    /// An empty log with room for `bytes` saved bytes.
    #[cfg(test)]
    pub(crate) fn with_saved_capacity(bytes: usize) -> Self {
        Self {
            saved: Vec::with_capacity(bytes),
            ..Self::default()
        }
    }

    /// The bytes its allocations take.
    pub(crate) fn allocated(&self) -> usize {
        self.bytes.capacity() * size_of::<BytesUndo>()
            + self.saved.capacity()
            + self.maps.capacity() * size_of::<MapUndo>()
    }
}

/// Where a map record applies: a state, a key-group index and an entry.
#[derive(Debug)]
pub(crate) struct UndoTarget {
    /// Index into the backend's states.
    state: usize,
    /// Index of the key group within the backend's range.
    group: usize,
    /// The entry.
    key: OwnedSlotKey,
}

impl UndoTarget {
    /// The target of `slot`, in key group index `group` of `state`.
    pub(crate) fn of<P>(state: StateId, group: usize, slot: &Slot<P>) -> Self {
        Self {
            state: state.0 as usize,
            group,
            key: slot.owned_key(),
        }
    }
}

/// One undo record of a map state.
#[derive(Debug)]
pub(crate) enum MapUndo {
    /// A whole map entry: its old map and tag, or absent.
    Whole {
        /// The entry.
        target: UndoTarget,
        /// What it held.
        old: Option<(UserMap, Option<Epoch>)>,
    },
    /// One user key of a map that existed when the record was made.
    Entry {
        /// The (key, namespace) entry holding the map.
        target: UndoTarget,
        /// The user key.
        user_key: Box<[u8]>,
        /// What it held.
        old: Option<MapValue>,
    },
}

impl MapUndo {
    /// The record that brings back `slot`, a whole map entry removed from
    /// key group `group` of state `state`.
    pub(crate) fn removed(state: StateId, group: usize, slot: Slot<UserMap>) -> Self {
        MapUndo::Whole {
            target: UndoTarget::of(state, group, &slot),
            old: Some(slot.into_payload_and_tag()),
        }
    }

    /// Puts back what the record saved.
    fn apply(self, data: &mut [StateData]) {
        let (MapUndo::Whole { target, .. } | MapUndo::Entry { target, .. }) = &self;
        let StateData::Map(table) = &mut data[target.state] else {
            return;
        };
        match self {
            MapUndo::Whole { target, old } => restore(table, &target, old),
            MapUndo::Entry {
                target,
                user_key,
                old,
            } => {
                // Replay newest first means the map exists as it did right
                // after this record's write; inserting covers nothing else.
                let (slot, _) =
                    table.get_or_insert(target.group, target.key.as_key(), UserMap::default);
                match old {
                    Some(v) => {
                        slot.payload.insert(user_key, v);
                    }
                    None => {
                        slot.payload.remove(&*user_key);
                    }
                }
                if slot.payload.is_empty() {
                    table.remove(target.group, target.key.as_key());
                }
            }
        }
    }
}

fn restore(
    table: &mut StateTable<UserMap>,
    target: &UndoTarget,
    old: Option<(UserMap, Option<Epoch>)>,
) {
    let k = target.key.as_key();
    match old {
        Some((payload, tag)) => table.set(target.group, k, payload, tag),
        None => {
            table.remove(target.group, k);
        }
    }
}
