//! The job directory's lineage: what a restore of the latest state picks and
//! what retention and recovery keep when a run rolls back to an older
//! checkpoint, starts empty, stops with a savepoint or is cancelled.

use std::num::NonZeroUsize;

use weir_checkpoint::{
    CheckpointStorage, JobTimeline, RestoreSource, StorageLocation, StorageOptions,
    SubsumeDecision, latest_state,
};
use weir_types::CheckpointId;

use crate::common::{full_checkpoint, job, local_files};

struct Dir {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    storage: CheckpointStorage,
}

/// A local job directory holding completed checkpoints `ids` (written
/// before lineages were recorded).
async fn job_dir_with(ids: &[u64]) -> Dir {
    let dir = tempfile::tempdir().expect("tempdir");
    let location =
        StorageLocation::parse(&dir.path().to_string_lossy(), &StorageOptions::default())
            .expect("local");
    let storage = CheckpointStorage::filesystem(&location, job()).expect("storage");
    for &id in ids {
        storage
            .complete(&full_checkpoint(&storage, id, 1).await)
            .await
            .expect("completes");
    }
    Dir {
        root: dir.path().join("orders"),
        _dir: dir,
        storage,
    }
}

fn retained(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).expect("non-zero")
}

async fn latest(storage: &CheckpointStorage) -> Option<String> {
    latest_state(storage, &StorageOptions::default())
        .await
        .expect("readable")
        .map(|url| url.rsplit('/').next().unwrap_or_default().to_owned())
}

fn checkpoints(root: &std::path::Path) -> Vec<String> {
    local_files(root)
        .into_iter()
        .filter(|f| f.ends_with("/_metadata"))
        .collect()
}

#[tokio::test]
async fn restoring_an_older_checkpoint_keeps_it_and_latest_stays_on_its_lineage() {
    let job = job_dir_with(&[4, 5, 6, 7]).await;
    assert_eq!(latest(&job.storage).await.as_deref(), Some("chk-7"));
    let (mut timeline, retention) = JobTimeline::recover(
        &job.storage,
        &RestoreSource::InJobDir(CheckpointId(4)),
        retained(3),
    )
    .await
    .expect("recovers");
    // The restore source is retained, not deleted as the oldest of four.
    assert_eq!(retention.retained().collect::<Vec<_>>(), [CheckpointId(4)]);
    job.storage
        .open(CheckpointId(4))
        .await
        .expect("the restored checkpoint is still there");
    // A driver that dies now resumes from chk-4, never from the abandoned chk-7.
    assert_eq!(latest(&job.storage).await.as_deref(), Some("chk-4"));
    assert_eq!(
        checkpoints(&job.root).len(),
        4,
        "the abandoned timeline stays until the new one has a checkpoint"
    );

    job.storage
        .complete(&full_checkpoint(&job.storage, 8, 1).await)
        .await
        .expect("completes");
    let abandoned = timeline
        .on_completed(CheckpointId(8))
        .await
        .expect("recorded");
    assert_eq!(
        abandoned,
        [CheckpointId(5), CheckpointId(6), CheckpointId(7)]
    );
    assert_eq!(latest(&job.storage).await.as_deref(), Some("chk-8"));
    job.storage
        .apply(&SubsumeDecision {
            discard: abandoned,
            shared_files: Vec::new(),
        })
        .await
        .expect("deletes");
    assert_eq!(
        checkpoints(&job.root),
        ["chk-4/_metadata", "chk-8/_metadata"]
    );
    // A later run that resumes from the head keeps the same lineage.
    let (timeline, retention) = JobTimeline::recover(
        &job.storage,
        &RestoreSource::InJobDir(CheckpointId(8)),
        retained(3),
    )
    .await
    .expect("recovers");
    assert_eq!(
        retention.retained().collect::<Vec<_>>(),
        [CheckpointId(4), CheckpointId(8)]
    );
    assert!(timeline.lineage().contains(CheckpointId(4)));
}

#[tokio::test]
async fn a_run_started_empty_replaces_old_checkpoints_only_once_it_has_one() {
    let job = job_dir_with(&[1, 2]).await;
    // Half-written checkpoint 3 of a run that died.
    full_checkpoint(&job.storage, 3, 1).await;
    let (mut timeline, retention) =
        JobTimeline::recover(&job.storage, &RestoreSource::Empty, retained(1))
            .await
            .expect("recovers");
    assert_eq!(retention.latest(), None);
    assert_eq!(latest(&job.storage).await, None, "the new lineage is empty");
    assert_eq!(
        local_files(&job.root),
        [
            "_lineage",
            "chk-1/_metadata",
            "chk-1/avg/0/keyed",
            "chk-2/_metadata",
            "chk-2/avg/0/keyed",
        ],
        "no run can complete checkpoint 3: its files are gone"
    );
    job.storage
        .complete(&full_checkpoint(&job.storage, 9, 1).await)
        .await
        .expect("completes");
    assert_eq!(
        timeline
            .on_completed(CheckpointId(9))
            .await
            .expect("recorded"),
        [CheckpointId(1), CheckpointId(2)]
    );
    assert!(
        timeline
            .on_completed(CheckpointId(10))
            .await
            .expect("recorded")
            .is_empty(),
        "abandoned checkpoints are handed out once"
    );
}

#[tokio::test]
async fn a_stop_savepoint_is_the_latest_state_and_cancellation_can_delete_everything() {
    let job = job_dir_with(&[1]).await;
    let savepoints = tempfile::tempdir().expect("tempdir");
    let sp_location = StorageLocation::parse(
        &savepoints.path().to_string_lossy(),
        &StorageOptions::default(),
    )
    .expect("local");
    let savepoint = weir_checkpoint::create_savepoint(
        &job.storage.open(CheckpointId(1)).await.expect("opens"),
        &sp_location,
    )
    .await
    .expect("savepoint");
    let sp_path = savepoint.base().url().to_owned();
    let (mut timeline, _) = JobTimeline::recover(
        &job.storage,
        &RestoreSource::InJobDir(CheckpointId(1)),
        retained(1),
    )
    .await
    .expect("recovers");
    timeline
        .on_stopped_with_savepoint(&sp_path)
        .await
        .expect("recorded");
    assert_eq!(
        latest_state(&job.storage, &StorageOptions::default())
            .await
            .expect("readable"),
        Some(sp_path.clone())
    );
    timeline.delete_all().await.expect("deletes");
    assert!(
        !job.root.exists() || local_files(&job.root).is_empty(),
        "{:?}",
        local_files(&job.root)
    );
    assert_eq!(latest(&job.storage).await, None);
    weir_checkpoint::ResolvedSnapshot::open(savepoint.base())
        .await
        .expect("savepoints are never deleted");
}

#[tokio::test]
async fn a_snapshot_of_this_job_directory_is_recognized_whatever_path_names_it() {
    let job = job_dir_with(&[3]).await;
    let path = job.root.join("chk-3").join("_metadata");
    let by_file =
        StorageLocation::parse(&path.to_string_lossy(), &StorageOptions::default()).expect("local");
    let snapshot = weir_checkpoint::ResolvedSnapshot::open(&by_file)
        .await
        .expect("opens");
    assert_eq!(
        JobTimeline::restore_source(&job.storage, &path.to_string_lossy(), &snapshot)
            .await
            .expect("classifies"),
        RestoreSource::InJobDir(CheckpointId(3))
    );
    // Checkpoint 3 of another directory of the same job is another checkpoint.
    let other = job_dir_with(&[]).await;
    other
        .storage
        .complete(&full_checkpoint(&other.storage, 3, 2).await)
        .await
        .expect("completes");
    assert_eq!(
        JobTimeline::restore_source(&other.storage, "elsewhere", &snapshot)
            .await
            .expect("classifies"),
        RestoreSource::External("elsewhere".into())
    );
}
