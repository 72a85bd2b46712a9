//! Completing, finding and reading checkpoints on the local file system and
//! in "jobmanager" (inline) storage.

use futures::TryStreamExt;
use object_store::ObjectStore;
use weir_checkpoint::{
    CheckpointError, CheckpointStorage, ResolvedSnapshot, StorageLocation, StorageOptions, layout,
};
use weir_types::CheckpointId;

use crate::common::{content, full_checkpoint, job};

fn local(dir: &std::path::Path) -> CheckpointStorage {
    let location = StorageLocation::parse(&dir.to_string_lossy(), &StorageOptions::default())
        .expect("local location");
    CheckpointStorage::filesystem(&location, job()).expect("storage")
}

#[tokio::test]
async fn completed_checkpoints_are_found_and_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = local(dir.path());
    assert!(storage.latest_completed().await.expect("lists").is_none());

    for id in 1..=2 {
        let meta = full_checkpoint(&storage, id, 2).await;
        storage.complete(&meta).await.expect("completes");
    }
    assert!(dir.path().join("orders/chk-2/_metadata").is_file());
    let latest = storage
        .latest_completed()
        .await
        .expect("lists")
        .expect("one");
    assert_eq!(latest.checkpoint_id, CheckpointId(2));
    for (i, file) in latest.files().into_iter().enumerate() {
        let bytes = storage.read_state_file(&latest, file).await.expect("reads");
        assert_eq!(bytes.as_ref(), content(2, i as u32));
    }

    // A user can resume from the checkpoint's directory or `_metadata` path.
    let chk = dir.path().join("orders/chk-2");
    for url in [
        chk.join("_metadata").to_string_lossy().into_owned(),
        format!("file://{}", chk.display()),
    ] {
        let location = StorageLocation::parse(&url, &StorageOptions::default()).expect("parses");
        let resolved = ResolvedSnapshot::open(&location).await.expect("opens");
        for (i, file) in resolved.metadata().files().into_iter().enumerate() {
            let bytes = resolved.read_file(file).await.expect("reads");
            assert_eq!(bytes.as_ref(), content(2, i as u32), "{url}");
        }
    }

    // Completing the same checkpoint again never overwrites it.
    let again = full_checkpoint(&storage, 2, 1).await;
    assert!(matches!(
        storage.complete(&again).await,
        Err(CheckpointError::AlreadyExists { .. })
    ));
    assert_eq!(
        storage
            .open(CheckpointId(2))
            .await
            .expect("opens")
            .metadata(),
        &latest
    );
}

#[tokio::test]
async fn torn_or_missing_metadata_is_not_a_completed_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = local(dir.path());
    let first = full_checkpoint(&storage, 1, 1).await;
    storage.complete(&first).await.expect("completes");

    // Checkpoint 2 wrote its files but no metadata; checkpoint 3's metadata
    // was cut short by a writer without atomic publish.
    full_checkpoint(&storage, 2, 1).await;
    let third = full_checkpoint(&storage, 3, 1).await;
    let bytes = weir_checkpoint::encode_metadata(&third).expect("encodes");
    std::fs::write(
        dir.path()
            .join("orders")
            .join(layout::checkpoint_metadata(CheckpointId(3))),
        &bytes[..bytes.len() / 2],
    )
    .expect("write torn metadata");

    assert_eq!(
        storage.checkpoint_dirs().await.expect("lists"),
        [CheckpointId(1), CheckpointId(2), CheckpointId(3)]
    );
    let latest = storage
        .latest_completed()
        .await
        .expect("lists")
        .expect("one");
    assert_eq!(latest, first);
    assert!(matches!(
        storage.open(CheckpointId(3)).await,
        Err(CheckpointError::Truncated { .. })
    ));
    assert!(matches!(
        storage.open(CheckpointId(2)).await,
        Err(CheckpointError::MissingMetadata { .. })
    ));
}

#[tokio::test]
async fn corrupt_state_files_are_detected_on_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = local(dir.path());
    let meta = storage
        .complete(&full_checkpoint(&storage, 1, 1).await)
        .await
        .expect("completes");
    let file = meta.files()[0].clone();
    std::fs::write(dir.path().join("orders").join(&file.path), b"tampered").expect("write");
    assert!(matches!(
        storage.read_state_file(&meta, &file).await,
        Err(CheckpointError::CorruptStateFile { .. })
    ));
}

#[tokio::test]
async fn jobmanager_storage_keeps_state_inline_up_to_its_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let location =
        StorageLocation::parse(&dir.path().to_string_lossy(), &StorageOptions::default())
            .expect("local location");
    let storage = CheckpointStorage::jobmanager(&location, job(), 64).expect("storage");

    let written = storage
        .complete(&full_checkpoint(&storage, 1, 2).await)
        .await
        .expect("small state fits");
    assert_eq!(written.inline.len(), 2);
    // Only `_metadata` reached the directory.
    assert_eq!(
        crate::common::local_files(dir.path()),
        ["orders/chk-1/_metadata"]
    );
    let latest = storage
        .latest_completed()
        .await
        .expect("lists")
        .expect("one");
    let file = latest.files()[1].clone();
    assert_eq!(
        storage
            .read_state_file(&latest, &file)
            .await
            .expect("inline read")
            .as_ref(),
        content(1, 1)
    );

    let tiny = CheckpointStorage::jobmanager(&location, job(), 8).expect("storage");
    let err = tiny
        .complete(&full_checkpoint(&tiny, 2, 1).await)
        .await
        .expect_err("above the limit");
    assert!(matches!(
        err,
        CheckpointError::InlineStateTooLarge { limit: 8, .. }
    ));
    assert!(err.to_string().contains("raise the limit"), "{err}");
    assert!(!dir.path().join("orders/chk-2").exists());

    let incremental = crate::common::incremental_checkpoint(&storage, 3, &["a.sst"]).await;
    assert!(matches!(
        storage.complete(&incremental).await,
        Err(CheckpointError::IncrementalInline { .. })
    ));

    // Discarding the failed checkpoint frees its staged files.
    tiny.discard(CheckpointId(2)).await.expect("discards");
    let staged = tiny.state_storage();
    let left: Vec<_> = staged
        .store
        .list(Some(&staged.root))
        .try_collect()
        .await
        .expect("lists");
    assert!(left.is_empty(), "{left:?}");
}

/// A crash in the middle of a local write leaves its staging file
/// (`<name>#<n>`), which no listing shows; discarding the checkpoint removes
/// it with the directory, and a link among them is removed, not followed.
#[tokio::test]
async fn discarding_removes_the_staging_files_of_interrupted_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    std::fs::write(elsewhere.path().join("keep#1"), b"not ours").expect("write");
    let storage = local(dir.path());
    full_checkpoint(&storage, 4, 1).await;
    let chk = dir.path().join("orders").join("chk-4");
    std::fs::write(chk.join("_metadata#1"), b"half a metadata").expect("write");
    std::os::unix::fs::symlink(elsewhere.path().join("keep#1"), chk.join("linked#2"))
        .expect("link");

    storage.discard(CheckpointId(4)).await.expect("discards");
    assert!(!chk.exists(), "{} is left", chk.display());
    assert!(elsewhere.path().join("keep#1").exists());
}

/// A checkpoint opened from the local file system keeps the store's local
/// files: its shared SSTs are linked into a restore, not streamed, and a
/// linked file that no longer matches its handle fails the restore.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restores_from_local_storage_link_shared_files_and_check_them() {
    use std::os::unix::fs::MetadataExt;

    use weir_snapshot::{KeyedStateHandle, SnapshotError, download_incremental};

    let dir = tempfile::tempdir().expect("tempdir");
    let storage = local(dir.path());
    let meta = crate::common::incremental_checkpoint(&storage, 1, &["000001.sst"]).await;
    storage.complete(&meta).await.expect("completes");
    let location = StorageLocation::parse(
        &dir.path().join("orders/chk-1").to_string_lossy(),
        &StorageOptions::default(),
    )
    .expect("location");
    let resolved = ResolvedSnapshot::open(&location).await.expect("opens");
    let state = resolved.state_storage().await.expect("storage");
    assert!(state.local.is_some(), "local files are kept");
    let Some(KeyedStateHandle::Incremental(handle)) =
        &resolved.metadata().operators[0].subtasks[0].keyed
    else {
        panic!("an incremental handle");
    };
    let stored = dir.path().join("orders").join(&handle.shared[0].file.path);

    let restored = dir.path().join("restored");
    download_incremental(handle, &state, &restored)
        .await
        .expect("placed")
        .verified()
        .await
        .expect("intact");
    let inode = |path: &std::path::Path| std::fs::metadata(path).expect("exists").ino();
    assert_eq!(
        inode(&restored.join("000001.sst")),
        inode(&stored),
        "linked"
    );
    assert_ne!(
        inode(&restored.join("MANIFEST-000001")),
        inode(&dir.path().join("orders").join(&handle.private[0].file.path)),
        "files the database rewrites are copied"
    );

    // Same size, other bytes: only the checksum tells.
    let mut bytes = std::fs::read(&stored).expect("readable");
    bytes[0] ^= 1;
    std::fs::write(&stored, &bytes).expect("writable");
    let err = download_incremental(handle, &state, &dir.path().join("again"))
        .await
        .expect("placed")
        .verified()
        .await
        .expect_err("checksum differs");
    assert!(
        matches!(err, SnapshotError::FileMismatch { what: "crc32", .. }),
        "{err}"
    );
}
