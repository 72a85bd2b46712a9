//! A restore's value entries, held back until their key group is complete so
//! that each table is sized once for them.
//!
//! Inserted one by one, a key group of a restore starts from one empty
//! bucket: it splits several times (every split moves every entry) and each
//! bucket grows by doubling. That was 40% of a heap restore's time. A
//! snapshot file holds key groups one after another, so holding one key
//! group's entries costs little memory, and the restore's entries are
//! inserted with the tables' final sizes known.
//!
//! Only value entries are held: list items and map entries of one key are
//! several entries that merge on insert, and they go in at once.

use weir_types::KeyGroup;

use crate::backend::StateId;
use crate::bytes::SmallBytes;
use crate::heap::data::StateData;
use crate::heap::table::Slot;

/// Per state, the entries held for one key group.
pub(crate) type Held = Vec<Vec<Slot<SmallBytes>>>;

/// The value entries of the key group being loaded, per state.
#[derive(Debug, Default)]
pub(crate) struct BulkLoad {
    key_group: Option<(KeyGroup, usize)>,
    /// Indexed by state id; emptied (keeping capacity) at each key group.
    held: Held,
}

impl BulkLoad {
    /// A bulk load that holds entries in `held`'s vectors (emptied ones of
    /// an earlier bulk load, whose capacity it reuses).
    pub(crate) fn with_held(held: Held) -> Self {
        Self {
            key_group: None,
            held,
        }
    }

    /// Holds `slot`, a value entry of `state` in `key_group` (index `group`
    /// of the backend's range), first inserting what another key group held.
    pub(crate) fn hold(
        &mut self,
        data: &mut [StateData],
        state: StateId,
        (key_group, group): (KeyGroup, usize),
        slot: Slot<SmallBytes>,
    ) {
        if self.key_group.is_some_and(|(held, _)| held != key_group) {
            self.insert(data);
        }
        self.key_group = Some((key_group, group));
        let state = state.0 as usize;
        if self.held.len() <= state {
            self.held.resize_with(state + 1, Vec::new);
        }
        self.held[state].push(slot);
    }

    /// Inserts every held entry into `data`, in the order they came (a later
    /// entry of a key replaces an earlier one); returns the emptied vectors.
    pub(crate) fn finish(mut self, data: &mut [StateData]) -> Held {
        self.insert(data);
        self.held
    }

    /// Inserts every held entry into `data` now.
    pub(crate) fn insert(&mut self, data: &mut [StateData]) {
        let Some((_, group)) = self.key_group.take() else {
            return;
        };
        for (state, slots) in self.held.iter_mut().enumerate() {
            if slots.is_empty() {
                continue;
            }
            let StateData::Bytes(table) = &mut data[state] else {
                unreachable!("only value entries are held, and value states hold byte tables");
            };
            table.extend_group(group, slots.drain(..));
        }
    }
}
