//! Shared fixtures: heap backends filled with every kind of state, and a
//! check that a backend holds exactly the expected entries of its range.

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::ObjectStoreExt;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use weir_snapshot::format::{Compression, SnapshotHeader};
use weir_snapshot::{
    FullSnapshotHandle, FullSnapshotOptions, KeyedStateHandle, SnapshotStorage, StateFile,
    spawn_full_snapshot,
};
use weir_state::{HeapKeyedStateBackend, KeyedStateBackend, StateId, StateKey, push_list_item};
use weir_types::{
    Attempt, Epoch, FORMAT_VERSION, KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor,
    StateKind, SubtaskIndex, Value, ValueType, encode_key, key_group_of,
};

pub const MAX: u32 = 32;
pub const KEYS: i64 = 300;

pub fn max() -> MaxParallelism {
    MaxParallelism::new(MAX).expect("valid")
}

/// One of each kind of state.
pub fn descriptors() -> Vec<StateDescriptor> {
    vec![
        StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
        StateDescriptor::new("seen", StateKind::List, ValueType::Utf8).expect("valid"),
        StateDescriptor::new("sum", StateKind::Reducing, ValueType::Int64).expect("valid"),
        StateDescriptor::new("avg", StateKind::Aggregating, ValueType::Binary).expect("valid"),
        StateDescriptor::map("by", ValueType::Utf8, ValueType::Int64).expect("valid"),
    ]
}

pub fn key(k: i64) -> (weir_types::KeyGroup, Vec<u8>) {
    let mut bytes = Vec::new();
    encode_key(&[Value::Int64(k)], &[ValueType::Int64], &mut bytes).expect("int64 key");
    (key_group_of(&[Value::Int64(k)], max()), bytes)
}

pub fn range(parallelism: u32, subtask: u32) -> KeyGroupRange {
    KeyGroupRange::for_subtask(max(), parallelism, SubtaskIndex(subtask)).expect("valid")
}

/// What one key holds, as read back through the backend API.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyState {
    pub values: Vec<Option<Vec<u8>>>,
    pub list: Option<Vec<u8>>,
    pub map: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The state every key `k` gets (some keys leave some states empty).
pub fn expected(k: i64) -> KeyState {
    let mut list = Vec::new();
    for i in 0..(k % 3) {
        push_list_item(format!("item-{k}-{i}").as_bytes(), &mut list);
    }
    KeyState {
        values: vec![
            Some(k.to_le_bytes().to_vec()),
            (k % 2 == 0).then(|| (k * 10).to_le_bytes().to_vec()),
            (k % 5 != 0).then(|| format!("acc{k}").into_bytes()),
        ],
        list: (!list.is_empty()).then_some(list),
        map: (0..(k % 4))
            .map(|i| (format!("u{i}").into_bytes(), (k + i).to_le_bytes().to_vec()))
            .collect(),
    }
}

const VALUE_STATES: [u32; 3] = [0, 2, 3];

/// A heap backend for `subtask` of `parallelism`, filled with the keys it owns.
pub fn filled_backend(parallelism: u32, subtask: u32) -> HeapKeyedStateBackend {
    let mut b = HeapKeyedStateBackend::new(max(), range(parallelism, subtask)).expect("valid");
    for d in descriptors() {
        b.register_state(&d).expect("new state");
    }
    b.begin_epoch(Epoch(1), Attempt(0)).expect("first epoch");
    for k in 0..KEYS {
        let (kg, bytes) = key(k);
        if !b.key_group_range().contains(kg) {
            continue;
        }
        let at = StateKey::new(kg, &bytes);
        let want = expected(k);
        for (state, value) in VALUE_STATES.iter().zip(&want.values) {
            if let Some(v) = value {
                b.put_value(StateId(*state), at, v).expect("put");
            }
        }
        if let Some(list) = &want.list {
            b.append_list(StateId(1), at, list).expect("append");
        }
        for (u, v) in &want.map {
            b.map_put(StateId(4), at, u, v).expect("map put");
        }
    }
    b.commit_epoch(Epoch(1), Attempt(0)).expect("commit");
    b.finalize_up_to(Epoch(1)).expect("finalize");
    b
}

/// Asserts `b` holds exactly the expected state of the keys in its range.
pub fn assert_holds_expected(b: &mut dyn KeyedStateBackend) {
    let ids: Vec<StateId> = descriptors()
        .iter()
        .map(|d| b.register_state(d).expect("same descriptor"))
        .collect();
    for k in 0..KEYS {
        let (kg, bytes) = key(k);
        if !b.key_group_range().contains(kg) {
            continue;
        }
        let at = StateKey::new(kg, &bytes);
        let mut got = KeyState::default();
        for state in VALUE_STATES {
            let v = b.get_value(ids[state as usize], at).expect("get");
            got.values.push(v.map(|v| v.into_owned()));
        }
        got.list = b
            .get_list(ids[1], at)
            .expect("list")
            .map(|l| l.into_owned());
        let mut map = BTreeMap::new();
        b.map_for_each(ids[4], at, &mut |u, v| {
            map.insert(u.to_vec(), v.to_vec());
        })
        .expect("map");
        got.map = map;
        assert_eq!(got, expected(k), "key {k}");
    }
}

/// Number of expected keys in `range`.
pub fn keys_in(range: KeyGroupRange) -> usize {
    (0..KEYS).filter(|&k| range.contains(key(k).0)).count()
}

/// A local file system store rooted at a temporary directory.
pub fn local_storage(dir: &tempfile::TempDir) -> SnapshotStorage {
    let store = LocalFileSystem::new_with_prefix(dir.path()).expect("temp dir exists");
    SnapshotStorage {
        store: Arc::new(store),
        root: Path::from("job-1"),
        local: None,
    }
}

/// Full snapshots of every subtask at `parallelism`.
pub async fn snapshot_all(
    storage: &SnapshotStorage,
    parallelism: u32,
    options: &FullSnapshotOptions,
) -> Vec<KeyedStateHandle> {
    let mut handles = Vec::new();
    for subtask in 0..parallelism {
        let mut b = filled_backend(parallelism, subtask);
        let frozen = b.snapshot_sync().expect("all epochs final");
        let path = format!("chk-1/op/{subtask}");
        let future = spawn_full_snapshot(
            &tokio::runtime::Handle::current(),
            frozen,
            storage,
            &path,
            options.clone(),
        );
        let outcome = future.await.expect("snapshot succeeds");
        let FullSnapshotHandle { file, entries, .. } = &outcome.handle;
        assert_eq!(file.path, path);
        assert_eq!(outcome.metrics.entries, Some(*entries));
        assert_eq!(outcome.metrics.state_size, file.size);
        handles.push(KeyedStateHandle::Full(outcome.handle));
    }
    handles
}

/// A block as stored in a file, with what its index record claims.
pub struct StoredBlock {
    pub key_group: KeyGroup,
    pub stored: Vec<u8>,
    pub raw_length: u64,
    pub entries: u64,
}

/// A snapshot file assembled from stored blocks as the documented layout
/// says, checksums included: an independent writer, for files the real one
/// never writes (blocks must be in ascending key-group order).
pub fn assemble(header: &SnapshotHeader, blocks: &[StoredBlock]) -> Vec<u8> {
    let header_json = serde_json::to_vec(header).expect("headers serialize");
    let mut file = b"WEIRSNAP".to_vec();
    file.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    file.extend_from_slice(&header_json);
    let mut index = (blocks.len() as u32).to_le_bytes().to_vec();
    for block in blocks {
        index.extend_from_slice(&block.key_group.0.to_le_bytes());
        let fields = [
            file.len() as u64,
            block.stored.len() as u64,
            block.raw_length,
            block.entries,
        ];
        for field in fields {
            index.extend_from_slice(&field.to_le_bytes());
        }
        index.extend_from_slice(&crc32fast::hash(&block.stored).to_le_bytes());
        file.extend_from_slice(&block.stored);
    }
    let mut footer = (file.len() as u64).to_le_bytes().to_vec();
    footer.extend_from_slice(&(index.len() as u64).to_le_bytes());
    footer.extend_from_slice(&crc32fast::hash(&index).to_le_bytes());
    footer.extend_from_slice(&(header_json.len() as u32).to_le_bytes());
    footer.extend_from_slice(&crc32fast::hash(&header_json).to_le_bytes());
    footer.extend_from_slice(&crc32fast::hash(&footer).to_le_bytes());
    footer.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    footer.extend_from_slice(b"WEIRSNAP");
    file.extend_from_slice(&index);
    file.extend_from_slice(&footer);
    file
}

/// A header for one value state `count` over key groups `[0, 1)` of `max()`.
pub fn one_value_header(compression: Compression) -> SnapshotHeader {
    SnapshotHeader {
        max_parallelism: max(),
        key_group_range: KeyGroupRange::new(0, 1).expect("valid"),
        descriptors: descriptors()[..1].to_vec(),
        key_types: None,
        compression,
    }
}

/// Puts `bytes` into a fresh in-memory store at `job-1/<relative>` and
/// returns the storage with a full handle for it.
pub async fn in_memory_file(
    header: &SnapshotHeader,
    relative: &str,
    bytes: Vec<u8>,
    entries: u64,
) -> (SnapshotStorage, KeyedStateHandle) {
    let storage = SnapshotStorage {
        store: Arc::new(InMemory::new()),
        root: Path::from("job-1"),
        local: None,
    };
    let file = StateFile {
        path: relative.to_owned(),
        size: bytes.len() as u64,
        crc32: crc32fast::hash(&bytes),
    };
    storage
        .store
        .put(&Path::from(format!("job-1/{relative}")), bytes.into())
        .await
        .expect("in-memory put");
    let handle = KeyedStateHandle::Full(FullSnapshotHandle {
        key_group_range: header.key_group_range,
        file,
        entries,
    });
    (storage, handle)
}
