//! Retention against real storage: subsumed checkpoints and unreferenced
//! shared files are deleted, and a restart rebuilds the same state.

use std::num::NonZeroUsize;

use weir_checkpoint::{
    CheckpointStorage, JobTimeline, RestoreSource, Retention, StorageLocation, StorageOptions,
};
use weir_types::CheckpointId;

use crate::common::{incremental_checkpoint, job, local_files};

#[tokio::test]
async fn subsumed_checkpoints_and_unreferenced_shared_files_are_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let location =
        StorageLocation::parse(&dir.path().to_string_lossy(), &StorageOptions::default())
            .expect("local");
    let storage = CheckpointStorage::filesystem(&location, job()).expect("storage");
    let two = NonZeroUsize::new(2).expect("non-zero");
    let mut retention = Retention::new(two);

    for (id, shared) in [
        (1, &["a.sst", "b.sst"][..]),
        (2, &["a.sst", "c.sst"]),
        (3, &["a.sst", "d.sst"]),
    ] {
        let meta = storage
            .complete(&incremental_checkpoint(&storage, id, shared).await)
            .await
            .expect("completes");
        let decision = retention.on_completed(&meta);
        storage.apply(&decision).await.expect("deletes");
    }
    let orders = dir.path().join("orders");
    assert_eq!(
        local_files(&orders),
        [
            "chk-2/_metadata",
            "chk-2/avg/0/MANIFEST",
            "chk-3/_metadata",
            "chk-3/avg/0/MANIFEST",
            "shared/avg/0/a.sst",
            "shared/avg/0/c.sst",
            "shared/avg/0/d.sst",
        ]
    );
    assert!(
        !orders.join("chk-1").exists(),
        "the emptied directory goes too"
    );

    // A crash left checkpoint 4 half-written (its shared upload included);
    // a restart from checkpoint 3 with one retained keeps only it and its files.
    incremental_checkpoint(&storage, 4, &["e.sst"]).await;
    let (_, recovered) = JobTimeline::recover(
        &storage,
        &RestoreSource::InJobDir(CheckpointId(3)),
        NonZeroUsize::MIN,
    )
    .await
    .expect("recovers");
    assert_eq!(recovered.retained().collect::<Vec<_>>(), [CheckpointId(3)]);
    assert_eq!(recovered.registry().references("shared/avg/0/a.sst"), 1);
    assert_eq!(
        local_files(&orders),
        [
            "_lineage",
            "chk-3/_metadata",
            "chk-3/avg/0/MANIFEST",
            "shared/avg/0/a.sst",
            "shared/avg/0/d.sst",
        ]
    );
    let latest = storage
        .latest_completed()
        .await
        .expect("lists")
        .expect("one");
    for file in latest.files() {
        storage
            .read_state_file(&latest, file)
            .await
            .expect("intact");
    }
}
