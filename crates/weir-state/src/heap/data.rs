//! What the heap backend stores per registered state: byte payloads (values
//! and list payloads) or maps, and the per-user-key record of map states.
//!
//! Only data layout lives here; reads, writes and epochs are in the backend.

use foldhash::fast::FixedState;
use hashbrown::HashMap;
use weir_types::{Epoch, StateKind};

use crate::bytes::SmallBytes;
use crate::heap::table::StateTable;

/// One user-map entry: its value and the epoch of its last write (`None` when
/// restored), so a second write in the same epoch logs nothing.
#[derive(Debug, Clone)]
pub(crate) struct MapValue {
    /// The encoded value.
    pub(crate) value: Vec<u8>,
    /// The epoch of the last write.
    pub(crate) tag: Option<Epoch>,
}

/// The map of one (key, namespace) of a map state, looked up by `&[u8]`.
pub(crate) type UserMap = HashMap<Box<[u8]>, MapValue, FixedState>;

/// The table of one registered state.
#[derive(Debug, Clone)]
pub(crate) enum StateData {
    /// Value, reducing and aggregating states (encoded value) and list states
    /// (canonical list payload, never empty).
    Bytes(StateTable<SmallBytes>),
    /// Map states (never empty maps).
    Map(StateTable<UserMap>),
}

impl StateData {
    /// An empty table for a state of `kind` over `key_groups` key groups.
    pub(crate) fn new(kind: StateKind, key_groups: usize) -> Self {
        match kind {
            StateKind::Map => Self::Map(StateTable::new(key_groups)),
            StateKind::Value | StateKind::List | StateKind::Reducing | StateKind::Aggregating => {
                Self::Bytes(StateTable::new(key_groups))
            }
        }
    }

    /// Takes key group `group` out (see [`StateTable::detach_group`]).
    pub(crate) fn detach_group(&mut self, group: usize) -> Self {
        match self {
            Self::Bytes(table) => Self::Bytes(table.detach_group(group)),
            Self::Map(table) => Self::Map(table.detach_group(group)),
        }
    }

    /// Puts back what [`detach_group`](Self::detach_group) took out.
    pub(crate) fn attach_group(&mut self, group: usize, detached: Self) {
        match (self, detached) {
            (Self::Bytes(table), Self::Bytes(d)) => table.attach_group(group, d),
            (Self::Map(table), Self::Map(d)) => table.attach_group(group, d),
            _ => unreachable!("a detached key group goes back to the table it came from"),
        }
    }
}
