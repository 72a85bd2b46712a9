//! Undo records of the heap backend: what an entry held before the first
//! write of an epoch touched it, so `discard_from` can put it back.
//!
//! A log is replayed newest first; each record restores the state just before
//! its write, so extra records (say, an entry removed and inserted again in
//! one epoch) are harmless. Deciding *when* to log is the backend's job.

use weir_types::Epoch;

use crate::backend::StateId;
use crate::bytes::SmallBytes;
use crate::heap::data::{MapValue, StateData, UserMap};
use crate::heap::table::{OwnedSlotKey, Slot, StateTable};

/// Where an undo record applies: a state, a key-group index and an entry.
#[derive(Debug)]
pub(crate) struct UndoTarget {
    /// Index into the backend's states.
    pub(crate) state: usize,
    /// Index of the key group within the backend's range.
    pub(crate) group: usize,
    /// The entry.
    pub(crate) key: OwnedSlotKey,
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

/// One undo record.
#[derive(Debug)]
pub(crate) enum Undo {
    /// A value or list entry: its old payload and tag, or absent.
    Bytes {
        /// The entry.
        target: UndoTarget,
        /// What it held.
        old: Option<(SmallBytes, Option<Epoch>)>,
    },
    /// A whole map entry: its old map and tag, or absent.
    Map {
        /// The entry.
        target: UndoTarget,
        /// What it held.
        old: Option<(UserMap, Option<Epoch>)>,
    },
    /// One user key of a map that existed when the record was made.
    MapEntry {
        /// The (key, namespace) entry holding the map.
        target: UndoTarget,
        /// The user key.
        user_key: Box<[u8]>,
        /// What it held.
        old: Option<MapValue>,
    },
}

impl Undo {
    /// The record that brings back `slot`, a value or list entry removed
    /// from key group `group` of state `state`.
    pub(crate) fn removed_bytes(state: StateId, group: usize, slot: Slot<SmallBytes>) -> Self {
        Undo::Bytes {
            target: UndoTarget::of(state, group, &slot),
            old: Some(slot.into_payload_and_tag()),
        }
    }

    /// The record that brings back `slot`, a whole map entry removed from
    /// key group `group` of state `state`.
    pub(crate) fn removed_map(state: StateId, group: usize, slot: Slot<UserMap>) -> Self {
        Undo::Map {
            target: UndoTarget::of(state, group, &slot),
            old: Some(slot.into_payload_and_tag()),
        }
    }

    /// Puts back what the record saved.
    pub(crate) fn apply(self, data: &mut [StateData]) {
        match self {
            Undo::Bytes { target, old } => {
                if let StateData::Bytes(table) = &mut data[target.state] {
                    restore(table, &target, old);
                }
            }
            Undo::Map { target, old } => {
                if let StateData::Map(table) = &mut data[target.state] {
                    restore(table, &target, old);
                }
            }
            Undo::MapEntry {
                target,
                user_key,
                old,
            } => {
                if let StateData::Map(table) = &mut data[target.state] {
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
}

fn restore<P: Clone>(
    table: &mut StateTable<P>,
    target: &UndoTarget,
    old: Option<(P, Option<Epoch>)>,
) {
    let k = target.key.as_key();
    match old {
        Some((payload, tag)) => table.set(target.group, k, payload, tag),
        None => {
            table.remove(target.group, k);
        }
    }
}
