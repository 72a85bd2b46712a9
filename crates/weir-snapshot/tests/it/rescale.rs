//! Heap snapshots restored at other parallelisms, in every compression.

use object_store::memory::InMemory;
use std::sync::Arc;
use weir_snapshot::format::Compression;
use weir_snapshot::{FullSnapshotOptions, SnapshotStorage, restore_keyed};
use weir_state::{HeapKeyedStateBackend, KeyedStateBackend};

use crate::common::*;

async fn rescale(storage: &SnapshotStorage, from: u32, to: u32, compression: Compression) {
    let options = FullSnapshotOptions {
        compression,
        key_types: Some(vec![weir_types::ValueType::Int64]),
        part_size: 1024,
        encode_threads: 3,
    };
    let handles = snapshot_all(storage, from, &options).await;
    let mut restored_keys = 0;
    for subtask in 0..to {
        let mut b = HeapKeyedStateBackend::new(max(), range(to, subtask)).expect("valid");
        let stats = restore_keyed(&mut b, &handles, &*storage.store, &storage.root)
            .await
            .expect("restore succeeds");
        let overlapping = handles
            .iter()
            .filter(|h| !h.key_group_range().intersect(range(to, subtask)).is_empty())
            .count();
        assert_eq!(stats.files_read as usize, overlapping);
        assert_holds_expected(&mut b);
        restored_keys += keys_in(b.key_group_range());
    }
    assert_eq!(restored_keys, KEYS as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_two_to_three_on_local_files() {
    for compression in [Compression::None, Compression::Zstd, Compression::Lz4] {
        let dir = tempfile::tempdir().expect("temp dir");
        rescale(&local_storage(&dir), 2, 3, compression).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_in_three_to_one_in_memory() {
    let storage = SnapshotStorage {
        store: Arc::new(InMemory::new()),
        root: object_store::path::Path::from("ckpt"),
        local: None,
    };
    rescale(&storage, 3, 1, Compression::Zstd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_parallelism_round_trip_keeps_everything() {
    let dir = tempfile::tempdir().expect("temp dir");
    rescale(&local_storage(&dir), 2, 2, Compression::Lz4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incompatible_descriptor_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&dir);
    let handles = snapshot_all(&storage, 1, &FullSnapshotOptions::default()).await;
    let mut b = HeapKeyedStateBackend::new(max(), range(1, 0)).expect("valid");
    let other = weir_types::StateDescriptor::new(
        "count",
        weir_types::StateKind::Value,
        weir_types::ValueType::Utf8,
    )
    .expect("valid");
    b.register_state(&other).expect("new state");
    let err = restore_keyed(&mut b, &handles, &*storage.store, &storage.root)
        .await
        .expect_err("type changed");
    assert!(
        matches!(err, weir_snapshot::SnapshotError::IncompatibleState { ref name, .. } if name == "count"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_parallelism_change_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&dir);
    let handles = snapshot_all(&storage, 1, &FullSnapshotOptions::default()).await;
    let other = weir_types::MaxParallelism::new(MAX * 2).expect("valid");
    let mut b = HeapKeyedStateBackend::new(
        other,
        weir_types::KeyGroupRange::new(0, MAX).expect("valid"),
    )
    .expect("valid");
    let err = restore_keyed(&mut b, &handles, &*storage.store, &storage.root)
        .await
        .expect_err("max parallelism changed");
    assert!(
        matches!(
            err,
            weir_snapshot::SnapshotError::MaxParallelismMismatch { .. }
        ),
        "{err}"
    );
}
