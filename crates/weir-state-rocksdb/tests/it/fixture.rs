//! Shared setup: a backend in a temporary directory with one state of each kind.

use std::path::Path;

use weir_state::{KeyedStateBackend, StateId, StateKey, push_list_item};
use weir_state_rocksdb::{RocksDbKeyedStateBackend, RocksDbOptions};
use weir_types::{
    Attempt, Epoch, KeyGroupRange, MaxParallelism, StateDescriptor, StateKind, Value, ValueType,
    encode_key, key_group_of,
};

pub const MAX: u32 = 16;

pub fn max() -> MaxParallelism {
    MaxParallelism::new(MAX).expect("valid")
}

pub fn options(path: &Path, range: KeyGroupRange) -> RocksDbOptions {
    RocksDbOptions::new(path, max(), range)
}

pub fn open(path: &Path) -> RocksDbKeyedStateBackend {
    RocksDbKeyedStateBackend::open(options(path, max().full_range())).expect("open")
}

/// The ids of the states registered by [`register_all`].
pub struct States {
    pub value: StateId,
    pub list: StateId,
    pub map: StateId,
    pub reducing: StateId,
}

pub fn register_all(backend: &mut impl KeyedStateBackend) -> States {
    let d = |name: &str, kind| StateDescriptor::new(name, kind, ValueType::Int64).expect("valid");
    States {
        value: backend
            .register_state(&d("value", StateKind::Value))
            .expect("register"),
        list: backend
            .register_state(&d("list", StateKind::List))
            .expect("register"),
        map: backend
            .register_state(
                &StateDescriptor::map("map", ValueType::Utf8, ValueType::Int64).expect("valid"),
            )
            .expect("register"),
        reducing: backend
            .register_state(&d("sum", StateKind::Reducing))
            .expect("register"),
    }
}

/// An encoded int64 key and its key group.
pub struct Key {
    pub bytes: Vec<u8>,
    pub key_group: weir_types::KeyGroup,
}

impl Key {
    pub fn new(k: i64) -> Self {
        let columns = [Value::Int64(k)];
        let mut bytes = Vec::new();
        encode_key(&columns, &[ValueType::Int64], &mut bytes).expect("encodable");
        Self {
            key_group: key_group_of(&columns, max()),
            bytes,
        }
    }

    pub fn state_key(&self) -> StateKey<'_> {
        StateKey::new(self.key_group, &self.bytes)
    }
}

pub fn list(items: &[&[u8]]) -> Vec<u8> {
    let mut payload = Vec::new();
    for item in items {
        push_list_item(item, &mut payload);
    }
    payload
}

/// Runs `work` as epoch `e` (attempt 0) and makes it final.
pub fn final_epoch(
    backend: &mut impl KeyedStateBackend,
    e: u64,
    work: impl FnOnce(&mut dyn KeyedStateBackend),
) {
    backend.begin_epoch(Epoch(e), Attempt(0)).expect("begin");
    work(&mut *backend as &mut dyn KeyedStateBackend);
    backend.commit_epoch(Epoch(e), Attempt(0)).expect("commit");
    backend.finalize_up_to(Epoch(e)).expect("finalize");
}

pub fn value(backend: &mut dyn KeyedStateBackend, state: StateId, key: &Key) -> Option<Vec<u8>> {
    backend
        .get_value(state, key.state_key())
        .expect("get")
        .map(|v| v.into_owned())
}
