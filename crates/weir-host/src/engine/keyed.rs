//! The keyed state backend of a subtask, as the backend it is: RocksDB
//! also takes native (incremental) checkpoints and restores from them.

use std::ops::{Deref, DerefMut};

use weir_state::{HeapKeyedStateBackend, KeyedStateBackend, StateId};
use weir_state_rocksdb::RocksDbKeyedStateBackend;

use crate::batch::KeyBatch;

/// How many rows ahead of its access a row's value is prefetched: enough for
/// the accesses of the rows in between to cover a memory wait.
const PREFETCH_AHEAD: usize = 16;

/// A subtask's keyed state; derefs to the backend contract every caller
/// except snapshots and restores uses.
pub(crate) enum KeyedBackend {
    Heap(HeapKeyedStateBackend),
    RocksDb(Box<RocksDbKeyedStateBackend>),
}

impl KeyedBackend {
    /// Call before accessing row `row` of `keys` in `state`, for every row in
    /// order: hints the value of the row [`PREFETCH_AHEAD`] rows on (at row
    /// 0, of the rows up to it), so that a loop over a batch's random keys
    /// overlaps their memory waits (see
    /// [`KeyedStateBackend::prefetch_value`]; the heap's values are in
    /// memory, RocksDB's are not).
    pub(crate) fn prefetch_ahead(&self, state: StateId, keys: &KeyBatch, row: usize) {
        let Self::Heap(heap) = self else {
            return;
        };
        let first = if row == 0 { 0 } else { row + PREFETCH_AHEAD };
        for ahead in first..keys.len().min(row + PREFETCH_AHEAD + 1) {
            heap.prefetch_value(state, keys.key(ahead));
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
