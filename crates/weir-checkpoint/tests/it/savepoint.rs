//! Savepoints: self-contained, movable, disposable, and restorable
//! at another parallelism through the restore plan.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use weir_checkpoint::{
    CheckpointError, CheckpointKind, CheckpointStorage, JobOperator, OperatorRestore,
    ResolvedSnapshot, RestorePlan, StorageLocation, StorageOptions, create_savepoint,
    dispose_savepoint,
};
use weir_types::CheckpointId;

use crate::common::{
    content, edit_metadata, full_checkpoint, incremental_checkpoint, job, max, uid,
};

#[tokio::test]
async fn moved_savepoint_directory_restores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StorageOptions::default();
    let checkpoints =
        StorageLocation::parse(&dir.path().join("ckpt").to_string_lossy(), &opts).expect("ckpt");
    let storage = CheckpointStorage::filesystem(&checkpoints, job()).expect("storage");
    let meta = storage
        .complete(&full_checkpoint(&storage, 4, 2).await)
        .await
        .expect("completes");

    let savepoints =
        StorageLocation::parse(&dir.path().join("sp").to_string_lossy(), &opts).expect("sp");
    let created = create_savepoint(
        &storage.open(CheckpointId(4)).await.expect("opens"),
        &savepoints,
    )
    .await
    .expect("savepoint");
    assert_eq!(created.metadata().kind, CheckpointKind::Savepoint);

    // Move the savepoint somewhere else and drop the checkpoints entirely.
    let moved = dir.path().join("elsewhere/renamed");
    std::fs::create_dir_all(moved.parent().expect("parent")).expect("mkdir");
    std::fs::rename(dir.path().join("sp/savepoint-orders-4"), &moved).expect("move");
    std::fs::remove_dir_all(dir.path().join("ckpt")).expect("remove checkpoints");

    // Resume from the `_metadata` path, as a user would.
    let url = format!("file://{}/_metadata", moved.display());
    let resolved = ResolvedSnapshot::open(&StorageLocation::parse(&url, &opts).expect("url"))
        .await
        .expect("opens moved savepoint");
    assert_eq!(resolved.metadata().operators, meta.operators);

    let job_ops = [JobOperator {
        uid: uid(),
        max_parallelism: max(),
        parallelism: 3,
    }];
    let plan = RestorePlan::new(resolved.metadata(), &job_ops, false).expect("plans");
    let OperatorRestore::Restored(op) = &plan.operators[&uid()] else {
        panic!("state was not restored");
    };
    let middle = &op.subtasks[1];
    assert_eq!(
        middle.keyed.len(),
        2,
        "subtask 1 of 3 straddles both old ranges"
    );
    for (i, handle) in middle.keyed.iter().enumerate() {
        let bytes = resolved.read_file(handle.files()[0]).await.expect("reads");
        assert_eq!(bytes.as_ref(), content(4, i as u32));
    }

    // Disposing removes the directory and nothing beside it.
    std::fs::write(dir.path().join("elsewhere/keep.txt"), b"unrelated").expect("write");
    let moved_url = moved.to_string_lossy().into_owned();
    dispose_savepoint(&StorageLocation::parse(&moved_url, &opts).expect("url"))
        .await
        .expect("disposes");
    assert!(!moved.exists());
    assert!(dir.path().join("elsewhere/keep.txt").is_file());
}

#[tokio::test]
async fn savepoints_copy_shared_files_in_and_dispose_cleanly() {
    let store = Arc::new(InMemory::new());
    let checkpoints = StorageLocation::new(store.clone(), Path::from("ckpt"), "memory://ckpt");
    let savepoints = StorageLocation::new(store.clone(), Path::from("sp"), "memory://sp");
    let storage = CheckpointStorage::filesystem(&checkpoints, job()).expect("storage");
    storage
        .complete(&incremental_checkpoint(&storage, 7, &["1.sst", "2.sst"]).await)
        .await
        .expect("completes");

    let created = create_savepoint(
        &storage.open(CheckpointId(7)).await.expect("opens"),
        &savepoints,
    )
    .await
    .expect("savepoint");
    assert_eq!(created.base().root().as_ref(), "sp/savepoint-orders-7");
    // Nothing the savepoint needs lives outside its directory.
    storage
        .discard(CheckpointId(7))
        .await
        .expect("discard checkpoint");
    for file in created.metadata().files() {
        created.read_file(file).await.expect("self-contained");
    }
    assert!(matches!(
        create_savepoint(&created, &savepoints).await,
        Err(CheckpointError::AlreadyExists { .. })
    ));

    // A checkpoint is never disposed as a savepoint.
    storage
        .complete(&incremental_checkpoint(&storage, 8, &["1.sst"]).await)
        .await
        .expect("completes");
    let chk = checkpoints.child("orders/chk-8").expect("valid");
    let err = dispose_savepoint(&chk).await.expect_err("not a savepoint");
    assert!(matches!(err, CheckpointError::WrongKind { .. }));
    assert_eq!(err.to_string(), "checkpoint 8 is not a savepoint");
    assert!(
        storage.open(CheckpointId(8)).await.is_ok(),
        "the checkpoint is untouched"
    );

    let sp_dir = savepoints.child("savepoint-orders-7").expect("valid");
    dispose_savepoint(&sp_dir).await.expect("disposes");
    assert!(matches!(
        ResolvedSnapshot::open(&sp_dir).await,
        Err(CheckpointError::MissingMetadata { .. })
    ));
    let left: Vec<_> = store
        .list(Some(&Path::from("sp")))
        .try_collect()
        .await
        .expect("lists");
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn a_savepoint_naming_a_file_outside_it_is_refused_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StorageOptions::default();
    let checkpoints =
        StorageLocation::parse(&dir.path().join("ckpt").to_string_lossy(), &opts).expect("ckpt");
    let storage = CheckpointStorage::filesystem(&checkpoints, job()).expect("storage");
    storage
        .complete(&full_checkpoint(&storage, 4, 1).await)
        .await
        .expect("completes");
    let savepoints =
        StorageLocation::parse(&dir.path().join("sp").to_string_lossy(), &opts).expect("sp");
    let source = storage.open(CheckpointId(4)).await.expect("opens");
    create_savepoint(&source, &savepoints)
        .await
        .expect("savepoint");

    // Hand-edited: the keyed file now lies beside the savepoint, not in it.
    let sp = dir.path().join("sp/savepoint-orders-4");
    let outside = dir.path().join("sp/outside/keyed");
    std::fs::create_dir_all(outside.parent().expect("parent")).expect("mkdir");
    std::fs::write(&outside, content(4, 0)).expect("write");
    edit_metadata(&sp.join("_metadata"), |body| {
        body.replace("\"chk-4/avg/0/keyed\"", "\"../outside/keyed\"")
    });

    let location = StorageLocation::parse(&sp.to_string_lossy(), &opts).expect("url");
    let err = ResolvedSnapshot::open(&location)
        .await
        .expect_err("refused when opened");
    let message = err.to_string();
    assert!(message.contains("../outside/keyed"), "{message}");
    let err = dispose_savepoint(&location)
        .await
        .expect_err("dispose refuses it too");
    assert_eq!(err.to_string(), message, "every command says the same");
    assert!(sp.join("_metadata").is_file(), "nothing was disposed");
    assert!(sp.join("chk-4/avg/0/keyed").is_file());
    assert!(outside.is_file());
}
