//! Local stores never follow symbolic links: disposing a savepoint,
//! retention and reading state files stay inside the canonical directory,
//! whatever links a user or an attacker put into it.

use std::num::NonZeroUsize;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use weir_checkpoint::{
    CheckpointStorage, JobTimeline, ResolvedSnapshot, RestoreSource, Retention, StorageLocation,
    StorageOptions, create_savepoint, dispose_savepoint,
};
use weir_types::CheckpointId;

use crate::common::{full_checkpoint, incremental_checkpoint, job};

/// A directory outside every store, holding one file that must survive.
fn victim(root: &Path) -> PathBuf {
    let dir = root.join("victim");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("precious"), b"keep me").expect("write");
    dir
}

fn location(dir: &Path) -> StorageLocation {
    StorageLocation::parse(&dir.to_string_lossy(), &StorageOptions::default()).expect("local")
}

/// Checkpoint 4 of job `orders` under `<root>/ckpt` and its savepoint under
/// `<root>/sp`; returns the storage and the savepoint directory.
async fn savepoint(root: &Path) -> (CheckpointStorage, PathBuf) {
    let storage =
        CheckpointStorage::filesystem(&location(&root.join("ckpt")), job()).expect("storage");
    storage
        .complete(&full_checkpoint(&storage, 4, 2).await)
        .await
        .expect("completes");
    let source = storage.open(CheckpointId(4)).await.expect("opens");
    create_savepoint(&source, &location(&root.join("sp")))
        .await
        .expect("savepoint");
    (storage, root.join("sp/savepoint-orders-4"))
}

#[tokio::test]
async fn dispose_deletes_what_the_savepoint_names_and_never_follows_a_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let victim = victim(dir.path());
    let (_, sp) = savepoint(dir.path()).await;
    symlink(&victim, sp.join("linked")).expect("symlink");
    symlink(&victim, sp.join("chk-4/avg/linked")).expect("symlink");
    std::fs::write(sp.join("notes.txt"), b"mine").expect("write");

    let disposed = dispose_savepoint(&location(&sp)).await.expect("disposes");
    assert!(victim.join("precious").is_file(), "a link was followed");
    let removed: Vec<_> = disposed.removed.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(removed, ["chk-4/avg/0/keyed", "chk-4/avg/1/keyed"]);
    assert!(!sp.join("_metadata").exists());
    assert!(!sp.join("chk-4/avg/0/keyed").exists());
    // What the savepoint does not name stays, and is reported.
    assert!(sp.join("notes.txt").is_file());
    assert_eq!(disposed.left, ["notes.txt"]);
}

#[tokio::test]
async fn dispose_refuses_a_state_file_path_through_a_link_and_deletes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, sp) = savepoint(dir.path()).await;
    // The savepoint's chk-4/ moved elsewhere and linked back in.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::rename(sp.join("chk-4"), &elsewhere).expect("move");
    symlink(&elsewhere, sp.join("chk-4")).expect("symlink");

    let err = dispose_savepoint(&location(&sp))
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(sp.join("_metadata").is_file(), "nothing was deleted");
    assert!(elsewhere.join("avg/0/keyed").is_file());
    assert!(elsewhere.join("avg/1/keyed").is_file());
}

#[tokio::test]
async fn a_symlinked_state_file_is_not_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, sp) = savepoint(dir.path()).await;
    let file = sp.join("chk-4/avg/0/keyed");
    let copy = dir.path().join("copy");
    std::fs::rename(&file, &copy).expect("move");
    symlink(&copy, &file).expect("symlink");

    let snapshot = ResolvedSnapshot::open(&location(&sp)).await.expect("opens");
    let files = snapshot.metadata().files();
    let err = snapshot
        .read_file(files[0])
        .await
        .expect_err("not followed");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    snapshot
        .read_file(files[1])
        .await
        .expect("a plain file reads");
}

#[tokio::test]
async fn retention_never_follows_a_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let victim = victim(dir.path());
    let storage =
        CheckpointStorage::filesystem(&location(&dir.path().join("ckpt")), job()).expect("storage");
    let orders = dir.path().join("ckpt/orders");
    let mut retention = Retention::new(NonZeroUsize::MIN);
    let first = storage
        .complete(&incremental_checkpoint(&storage, 1, &["a.sst"]).await)
        .await
        .expect("completes");
    assert!(retention.on_completed(&first).is_empty());
    symlink(&victim, orders.join("chk-1/linked")).expect("symlink");
    symlink(&victim, orders.join("shared/avg/linked")).expect("symlink");

    let second = storage
        .complete(&incremental_checkpoint(&storage, 2, &["b.sst"]).await)
        .await
        .expect("completes");
    let decision = retention.on_completed(&second);
    assert_eq!(decision.discard, [CheckpointId(1)]);
    storage.apply(&decision).await.expect("deletes");
    assert!(victim.join("precious").is_file(), "discard followed a link");
    assert!(!orders.join("chk-1/_metadata").exists());
    assert!(!orders.join("shared/avg/0/a.sst").exists());

    // A restart's sweep of unreferenced shared files does not either.
    incremental_checkpoint(&storage, 3, &["c.sst"]).await;
    let (_, recovered) = JobTimeline::recover(
        &storage,
        &RestoreSource::InJobDir(CheckpointId(2)),
        NonZeroUsize::MIN,
    )
    .await
    .expect("recovers");
    assert_eq!(recovered.retained().collect::<Vec<_>>(), [CheckpointId(2)]);
    assert!(
        victim.join("precious").is_file(),
        "the sweep followed a link"
    );
    assert!(!orders.join("shared/avg/0/c.sst").exists());
    assert!(orders.join("shared/avg/0/b.sst").is_file());
}
