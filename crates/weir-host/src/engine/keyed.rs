//! The keyed state backend of a subtask, as the backend it is: RocksDB
//! also takes native (incremental) checkpoints and restores from them.

use std::ops::{Deref, DerefMut};

use weir_state::{
    EntryHint, HeapKeyedStateBackend, KeyedStateBackend, PREFETCH_AHEAD, StateError, StateId,
};
use weir_state_rocksdb::RocksDbKeyedStateBackend;

use crate::batch::KeyBatch;

/// A subtask's keyed state; derefs to the backend contract every caller
/// except snapshots and restores uses.
pub(crate) enum KeyedBackend {
    Heap(HeapKeyedStateBackend),
    RocksDb(Box<RocksDbKeyedStateBackend>),
}

/// Where the last batch read found its rows' entries (the heap's; RocksDB
/// notes none). The batch write of the same keys that follows it, a
/// vectorized function's read-modify-write, then writes each row without a
/// lookup.
#[derive(Debug, Default)]
pub(crate) struct FoundEntries {
    state: Option<StateId>,
    at: Vec<Option<EntryHint>>,
}

impl FoundEntries {
    /// Where the last read found the entries of a write of `rows` rows to
    /// `state`, one per row, if that read was of `state` and as many rows
    /// (else none). Taken: a second write looks its rows up.
    pub(crate) fn take_for(&mut self, state: StateId, rows: usize) -> &[Option<EntryHint>] {
        let fits = self.state.take() == Some(state) && self.at.len() == rows;
        if fits { &self.at } else { &[] }
    }
}

impl KeyedBackend {
    /// Call before accessing row `row` of `keys` in `state`, for every row in
    /// order: hints the value of the row [`PREFETCH_AHEAD`] rows on (at row
    /// 0, of the rows up to it), so that a loop over a batch's random keys
    /// overlaps their memory waits (see
    /// [`KeyedStateBackend::prefetch_value`]; the heap's values are in
    /// memory, RocksDB's are not). A row `found` locates (see
    /// [`FoundEntries::take_for`]) is loaded from there, without a hash.
    pub(crate) fn prefetch_ahead(
        &self,
        state: StateId,
        keys: &KeyBatch,
        row: usize,
        found: &[Option<EntryHint>],
    ) {
        let Self::Heap(heap) = self else {
            return;
        };
        let first = if row == 0 { 0 } else { row + PREFETCH_AHEAD };
        for ahead in first..keys.len().min(row + PREFETCH_AHEAD + 1) {
            let key = keys.key(ahead);
            match found.get(ahead).copied().flatten() {
                Some(at) => heap.prefetch_at(state, key.key_group, at),
                None => heap.prefetch_value(state, key),
            }
        }
    }

    /// Reads the values of `keys` of a value, reducing or aggregating state
    /// and passes them to `each` in order (`None`: absent): the heap's in
    /// memory with prefetches ahead, noting in `found` where it found them,
    /// RocksDB's in batched reads.
    pub(crate) fn get_values<E: From<StateError>>(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        found: &mut FoundEntries,
        mut each: impl FnMut(Option<&[u8]>) -> Result<(), E>,
    ) -> Result<(), E> {
        found.state = None;
        found.at.clear();
        let rows = (0..keys.len()).map(|i| keys.key(i));
        match self {
            Self::Heap(heap) => {
                heap.get_values_at(state, rows, |value, at| {
                    found.at.push(at);
                    each(value)
                })?;
                found.state = Some(state);
                Ok(())
            }
            Self::RocksDb(backend) => backend.get_values(state, rows, each),
        }
    }

    /// Writes `value` at row `row` of `keys` in value state `state`; `found`
    /// (see [`FoundEntries::take_for`]) saves the heap its lookup.
    pub(crate) fn put_value_at(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        row: usize,
        found: &[Option<EntryHint>],
        value: &[u8],
    ) -> Result<(), StateError> {
        match self {
            Self::Heap(heap) => {
                let at = found.get(row).copied().flatten();
                heap.put_value_at(state, keys.key(row), at, value)
            }
            Self::RocksDb(backend) => backend.put_value(state, keys.key(row), value),
        }
    }
}

impl Deref for KeyedBackend {
    type Target = dyn KeyedStateBackend;

    fn deref(&self) -> &Self::Target {
        match self {
            Self::Heap(backend) => backend,
            Self::RocksDb(backend) => &**backend,
        }
    }
}

impl DerefMut for KeyedBackend {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Self::Heap(backend) => backend,
            Self::RocksDb(backend) => &mut **backend,
        }
    }
}
