//! The keyed state backend of a subtask, as the backend it is: RocksDB
//! also takes native (incremental) checkpoints and restores from them.

use std::ops::{Deref, DerefMut};

use weir_state::{HeapKeyedStateBackend, KeyedStateBackend, StateError, StateId};
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

    /// Reads the values of `keys` of a value, reducing or aggregating state
    /// and passes them to `each` in order (`None`: absent): the heap's in
    /// memory with prefetches ahead, RocksDB's in batched reads.
    pub(crate) fn get_values<E: From<StateError>>(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        mut each: impl FnMut(Option<&[u8]>) -> Result<(), E>,
    ) -> Result<(), E> {
        match self {
            Self::Heap(_) => {
                for i in 0..keys.len() {
                    self.prefetch_ahead(state, keys, i);
                    each(self.get_value(state, keys.key(i))?.as_deref())?;
                }
                Ok(())
            }
            Self::RocksDb(backend) => {
                backend.get_values(state, (0..keys.len()).map(|i| keys.key(i)), each)
            }
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
