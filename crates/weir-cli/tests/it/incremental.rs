//! An incremental (RocksDB) checkpoint: shown and verified file by file;
//! `dump` says it cannot decode native database files.

use object_store::{ObjectStoreExt, PutPayload};
use weir_checkpoint::{
    CheckpointKind, CheckpointMetadata, CheckpointStorage, OperatorStateMeta, StorageLocation,
    StorageOptions, SubtaskStateMeta, layout,
};
use weir_snapshot::{IncrementalSnapshotHandle, KeyedStateHandle, SharedStateFile, StateFile};
use weir_types::{
    CheckpointId, Epoch, JobId, MaxParallelism, OperatorUid, SubtaskIndex, ValueType,
};

use crate::common::{descriptors, path, weir};

/// Writes `bytes` at `relative` under the job directory; returns its handle.
async fn put(storage: &CheckpointStorage, relative: &str, bytes: &[u8]) -> SharedStateFile {
    let target = storage.state_storage();
    let at = layout::join(&target.root, relative).expect("valid path");
    target
        .store
        .put(&at, PutPayload::from(bytes.to_vec()))
        .await
        .expect("put");
    SharedStateFile {
        local_name: relative.rsplit('/').next().unwrap_or(relative).to_owned(),
        file: StateFile {
            path: relative.to_owned(),
            size: bytes.len() as u64,
            crc32: crc32fast::hash(bytes),
        },
    }
}

#[test]
fn incremental_checkpoints_are_shown_and_verified_but_not_dumped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let ckpt = StorageLocation::parse(path(dir.path()), &StorageOptions::default())
            .expect("checkpoint dir");
        let job = JobId::new("rocks").expect("valid");
        let storage = CheckpointStorage::filesystem(&ckpt, job.clone()).expect("storage");
        let max = MaxParallelism::new(8).expect("valid");
        let uid = OperatorUid::new("agg").expect("valid");
        let handle = IncrementalSnapshotHandle {
            key_group_range: max.full_range(),
            max_parallelism: max,
            descriptors: descriptors(),
            shared: vec![put(&storage, "shared/agg/0/000007.sst", b"sst bytes").await],
            private: vec![put(&storage, "chk-1/agg/0/MANIFEST-000001", b"manifest").await],
        };
        let mut meta =
            CheckpointMetadata::new(job, CheckpointId(1), CheckpointKind::Checkpoint, Epoch(5));
        meta.operators.push(OperatorStateMeta {
            uid,
            parallelism: 1,
            max_parallelism: max,
            key_types: Some(vec![ValueType::Int64]),
            states: descriptors(),
            subtasks: vec![SubtaskStateMeta {
                subtask: SubtaskIndex(0),
                keyed: Some(KeyedStateHandle::Incremental(handle)),
                operator_state: None,
            }],
        });
        storage.complete(&meta).await.expect("completes");
    });
    let chk = dir.path().join("rocks/chk-1");

    let run = weir(&["checkpoint", "info", path(&chk)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for needle in [
        "incremental",
        "shared/agg/0/000007.sst",
        "shared",
        "MANIFEST-000001",
        "private",
    ] {
        assert!(
            run.stdout.contains(needle),
            "{needle:?} missing from\n{}",
            run.stdout
        );
    }

    let run = weir(&["savepoint", "verify", path(&chk)]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("OK, 2 files"), "{}", run.stdout);

    std::fs::write(
        dir.path().join("rocks/shared/agg/0/000007.sst"),
        b"sst bytez",
    )
    .expect("write");
    let run = weir(&["savepoint", "verify", path(&chk)]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stdout.contains("FAIL  agg/0 shared"), "{}", run.stdout);

    let run = weir(&["savepoint", "dump", path(&chk)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("weir: warning: operator agg subtask 0"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("0 entries"), "{}", run.stdout);
}
