//! Damaged snapshot files give typed errors naming the file.

use object_store::ObjectStoreExt;
use object_store::path::Path;
use weir_snapshot::{
    FormatError, FullSnapshotOptions, KeyedStateHandle, SnapshotError, SnapshotFile, restore_keyed,
};
use weir_state::HeapKeyedStateBackend;

use crate::common::*;

async fn damaged(edit: impl FnOnce(&mut Vec<u8>)) -> SnapshotError {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&dir);
    let mut handles = snapshot_all(&storage, 1, &FullSnapshotOptions::default()).await;
    let KeyedStateHandle::Full(handle) = &mut handles[0] else {
        unreachable!("full snapshots only");
    };
    let location = Path::from(format!("job-1/{}", handle.file.path));
    let mut bytes = storage
        .store
        .get(&location)
        .await
        .expect("written")
        .bytes()
        .await
        .expect("readable")
        .to_vec();
    edit(&mut bytes);
    handle.file.size = bytes.len() as u64;
    storage
        .store
        .put(&location, bytes.into())
        .await
        .expect("rewritten");
    let mut b = HeapKeyedStateBackend::new(max(), range(1, 0)).expect("valid");
    restore_keyed(&mut b, &handles, &*storage.store, &storage.root)
        .await
        .expect_err("damaged file")
}

fn format_error(err: &SnapshotError) -> &FormatError {
    match err {
        SnapshotError::Format { path, source } => {
            assert_eq!(path, "chk-1/op/0", "the error names the file");
            assert!(err.to_string().contains("chk-1/op/0"), "{err}");
            source
        }
        other => panic!("expected a format error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_block_byte_is_a_checksum_error() {
    let err = damaged(|b| b[200] ^= 1).await;
    assert!(
        matches!(format_error(&err), FormatError::ChecksumMismatch { .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_file_is_an_error() {
    let err = damaged(|b| b.truncate(b.len() - 10)).await;
    assert!(
        matches!(format_error(&err), FormatError::BadMagic { .. }),
        "{err}"
    );
    let err = damaged(|b| b.truncate(20)).await;
    assert!(
        matches!(format_error(&err), FormatError::Truncated { .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_version_is_refused_with_advice() {
    let err = damaged(|b| {
        let n = b.len();
        b[n - 12] = 9;
    })
    .await;
    assert!(
        matches!(
            format_error(&err),
            FormatError::UnsupportedVersion { found: 9, .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("version 9"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_file_is_a_storage_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&dir);
    let err = SnapshotFile::open(&*storage.store, &storage.root, "chk-9/op/0", None)
        .await
        .expect_err("no such file");
    assert!(matches!(err, SnapshotError::Storage { .. }), "{err}");
    assert!(err.to_string().contains("chk-9/op/0"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_handles_are_refused_by_file_restore() {
    let dir = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&dir);
    let handle = KeyedStateHandle::Incremental(weir_snapshot::IncrementalSnapshotHandle {
        key_group_range: range(1, 0),
        max_parallelism: max(),
        descriptors: descriptors(),
        shared: vec![],
        private: vec![],
    });
    let mut b = HeapKeyedStateBackend::new(max(), range(1, 0)).expect("valid");
    let err = restore_keyed(&mut b, &[handle], &*storage.store, &storage.root)
        .await
        .expect_err("incremental");
    assert!(
        matches!(err, SnapshotError::UnsupportedHandle { .. }),
        "{err}"
    );
}
