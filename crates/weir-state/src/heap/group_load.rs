//! One key group of a heap backend, out on a restore's thread
//! ([`KeyedStateBackend::detach_key_group`](crate::KeyedStateBackend::detach_key_group)).
//!
//! It holds every state's table of that key group alone (as tables of one
//! key group, index 0) and loads entries into them as the backend's own bulk
//! load does, value entries sized once per table, on the thread that calls
//! it: restores load several key groups at once this way, one per thread.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

use weir_types::KeyGroup;

use super::bulk::{BulkLoad, Held};
use super::data::StateData;
use super::ingest_into;
use crate::backend::KeyGroupLoad;
use crate::error::{Result, StateError};
use crate::frozen::StateEntry;
use crate::registry::{Access, StateRegistry};

/// The key group's tables and the entries held for them.
#[derive(Debug)]
pub(crate) struct HeapGroupLoad {
    /// The id of the backend it came from.
    owner: u64,
    key_group: KeyGroup,
    /// The key group's index in the backend's range.
    group: usize,
    /// The backend's states when the key group went out (access checks).
    states: StateRegistry,
    /// Per state, a table of this key group only.
    data: Vec<StateData>,
    /// From the first entry to [`KeyGroupLoad::finish`].
    bulk: Option<BulkLoad>,
    /// Emptied vectors that loads of the backend's key groups pass on.
    spare: Arc<Mutex<Vec<Held>>>,
}

impl HeapGroupLoad {
    /// The load of `key_group` (index `group`) of backend `owner` into
    /// `data`; value entries are held in vectors from `spare`, which get
    /// back there once inserted.
    pub(crate) fn new(
        owner: u64,
        (key_group, group): (KeyGroup, usize),
        states: StateRegistry,
        data: Vec<StateData>,
        spare: Arc<Mutex<Vec<Held>>>,
    ) -> Self {
        Self {
            owner,
            key_group,
            group,
            states,
            data,
            bulk: None,
            spare,
        }
    }

    /// The id of the backend it came from.
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// Inserts what is still held; returns the key group's index and its
    /// tables.
    pub(crate) fn into_parts(mut self) -> (usize, Vec<StateData>) {
        self.insert_held();
        (self.group, self.data)
    }

    fn spare(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.spare.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert_held(&mut self) {
        if let Some(bulk) = self.bulk.take() {
            let held = bulk.finish(&mut self.data);
            self.spare().push(held);
        }
    }
}

impl KeyGroupLoad for HeapGroupLoad {
    fn ingest(&mut self, entry: StateEntry<'_>) -> Result<()> {
        self.states
            .get(entry.state, Access::of_payload(&entry.payload))?;
        if entry.key_group != self.key_group {
            return Err(StateError::KeyGroupOutOfRange {
                key_group: entry.key_group,
                range: weir_types::KeyGroupRange::new(
                    u32::from(self.key_group.0),
                    u32::from(self.key_group.0) + 1,
                )?,
            });
        }
        if self.bulk.is_none() {
            let held = self.spare().pop().unwrap_or_default();
            self.bulk = Some(BulkLoad::with_held(held));
        }
        ingest_into(&mut self.data, 0, entry, self.bulk.as_mut());
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.insert_held();
        Ok(())
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}
