//! Incremental uploads reuse shared files of earlier checkpoints; downloads
//! recreate the database directory.

use weir_snapshot::{
    IncrementalTarget, KeyedStateHandle, LocalCheckpoint, LocalFile, SharedFileRegistry,
    SnapshotError, download_incremental, spawn_incremental_snapshot,
};
use weir_types::{CheckpointId, OperatorUid, SubtaskIndex};

use crate::common::*;

fn local_checkpoint(dir: &std::path::Path, files: &[(&str, bool)]) -> LocalCheckpoint {
    std::fs::create_dir_all(dir).expect("temp dir");
    let files = files
        .iter()
        .map(|&(name, shared)| {
            let path = dir.join(name);
            let content = format!("contents of {name} ").repeat(200);
            std::fs::write(&path, &content).expect("writable");
            LocalFile {
                local_name: name.to_owned(),
                path,
                size: content.len() as u64,
                shared,
            }
        })
        .collect();
    LocalCheckpoint {
        key_group_range: range(1, 0),
        max_parallelism: max(),
        descriptors: descriptors(),
        files,
    }
}

fn target(checkpoint: u64) -> IncrementalTarget {
    IncrementalTarget {
        uid: OperatorUid::new("op").expect("valid"),
        subtask: SubtaskIndex(0),
        checkpoint: CheckpointId(checkpoint),
        part_size: 1000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_checkpoint_uploads_only_new_files() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&tmp);
    let runtime = tokio::runtime::Handle::current();
    let mut registry = SharedFileRegistry::new();

    let first = local_checkpoint(
        &tmp.path().join("local-1"),
        &[
            ("000001.sst", true),
            ("000002.sst", true),
            ("CURRENT", false),
        ],
    );
    let one = spawn_incremental_snapshot(&runtime, first.clone(), &registry, &storage, target(1))
        .await
        .expect("upload succeeds");
    assert_eq!(one.metrics.uploaded_size, one.metrics.state_size);
    assert_eq!(one.handle.shared.len(), 2);
    assert_eq!(one.handle.private[0].file.path, "chk-1/op/0/CURRENT");
    registry.register(
        CheckpointId(1),
        &KeyedStateHandle::Incremental(one.handle.clone()),
    );

    let second = local_checkpoint(
        &tmp.path().join("local-2"),
        &[
            ("000002.sst", true),
            ("000003.sst", true),
            ("CURRENT", false),
        ],
    );
    let two = spawn_incremental_snapshot(&runtime, second.clone(), &registry, &storage, target(2))
        .await
        .expect("upload succeeds");
    let reused = &two.handle.shared[0];
    assert_eq!(
        reused, &one.handle.shared[1],
        "000002.sst is not sent again"
    );
    assert_eq!(two.handle.shared[1].file.path, "shared/op/0/2-000003.sst");
    let sent: u64 = second
        .files
        .iter()
        .filter(|f| f.local_name != "000002.sst")
        .map(|f| f.size)
        .sum();
    assert_eq!(two.metrics.uploaded_size, sent);

    let restored = tmp.path().join("restored");
    download_incremental(&two.handle, &storage, &restored)
        .await
        .expect("download succeeds")
        .verified()
        .await
        .expect("files intact");
    for f in &second.files {
        let got = std::fs::read(restored.join(&f.local_name)).expect("downloaded");
        assert_eq!(
            got,
            std::fs::read(&f.path).expect("local"),
            "{}",
            f.local_name
        );
    }

    registry.register(
        CheckpointId(2),
        &KeyedStateHandle::Incremental(two.handle.clone()),
    );
    let freed = registry.release(CheckpointId(1));
    assert_eq!(
        freed,
        vec![one.handle.shared[0].clone()],
        "only 000001.sst is unreferenced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_checks_file_names_and_checksums() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&tmp);
    let runtime = tokio::runtime::Handle::current();
    let local = local_checkpoint(&tmp.path().join("local"), &[("000001.sst", true)]);
    let done = spawn_incremental_snapshot(
        &runtime,
        local,
        &SharedFileRegistry::new(),
        &storage,
        target(1),
    )
    .await
    .expect("upload succeeds");

    let mut evil = done.handle.clone();
    evil.shared[0].local_name = "../escape".to_owned();
    let err = download_incremental(&evil, &storage, &tmp.path().join("a"))
        .await
        .expect_err("unsafe name");
    assert!(matches!(err, SnapshotError::InvalidPath { .. }), "{err}");

    let mut wrong = done.handle.clone();
    wrong.shared[0].file.crc32 ^= 1;
    let err = download_incremental(&wrong, &storage, &tmp.path().join("b"))
        .await
        .expect_err("checksum differs");
    assert!(
        matches!(err, SnapshotError::FileMismatch { what: "crc32", .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceled_incremental_snapshot_keeps_reused_files() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let storage = local_storage(&tmp);
    let runtime = tokio::runtime::Handle::current();
    let mut registry = SharedFileRegistry::new();
    let first = local_checkpoint(
        &tmp.path().join("local-1"),
        &[("000001.sst", true), ("CURRENT", false)],
    );
    let one = spawn_incremental_snapshot(&runtime, first, &registry, &storage, target(1))
        .await
        .expect("upload succeeds");
    registry.register(
        CheckpointId(1),
        &KeyedStateHandle::Incremental(one.handle.clone()),
    );

    let second = local_checkpoint(
        &tmp.path().join("local-2"),
        &[
            ("000001.sst", true),
            ("000002.sst", true),
            ("CURRENT", false),
        ],
    );
    let two = spawn_incremental_snapshot(&runtime, second, &registry, &storage, target(2));
    // Wherever the task is when the cancel lands, the outcome is the same.
    two.cancel();
    assert!(matches!(two.await, Err(SnapshotError::Cancelled)));

    let job = tmp.path().join("job-1");
    for f in one.handle.shared.iter().chain(&one.handle.private) {
        assert!(
            job.join(&f.file.path).is_file(),
            "{} was deleted",
            f.file.path
        );
    }
    assert!(!job.join("shared/op/0/2-000002.sst").exists());
    assert!(!job.join("chk-2/op/0/CURRENT").exists());
}
