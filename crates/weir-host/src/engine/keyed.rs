//! The keyed state backend of a subtask, as the backend it is: RocksDB
//! also takes native (incremental) checkpoints and restores from them.

use std::ops::{Deref, DerefMut};

use weir_state::{HeapKeyedStateBackend, KeyedStateBackend};
use weir_state_rocksdb::RocksDbKeyedStateBackend;

/// A subtask's keyed state; derefs to the backend contract every caller
/// except snapshots and restores uses.
pub(crate) enum KeyedBackend {
    Heap(HeapKeyedStateBackend),
    RocksDb(Box<RocksDbKeyedStateBackend>),
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
