//! Subtask snapshots on their own: the synchronous part freezes the state,
//! the upload writes real files into checkpoint storage and can be
//! canceled, and `Subtask::restore` reads them back as a `RestorePlan` says.

use arrow_array::{Array, BinaryArray};
use weir_checkpoint::{
    CheckpointKind, CheckpointMetadata, CheckpointStorage, JobOperator, OperatorRestore,
    OperatorStateMeta, RestorePlan, StorageLocation, StorageOptions,
};
use weir_host::engine::Subtask;
use weir_host::{BackendSpec, HostError, KeyBatch, SubtaskSession, SubtaskSpec};
use weir_snapshot::SnapshotError;
use weir_state::{RedistributionMode, StateId};
use weir_types::{
    Attempt, CheckpointId, Epoch, JobId, KeyGroup, MaxParallelism, OperatorUid, StateDescriptor,
    StateKind, SubtaskIndex, ValueType,
};

fn spec(backend: BackendSpec, subtask: u32, parallelism: u32) -> SubtaskSpec {
    SubtaskSpec {
        uid: OperatorUid::new("op").expect("valid uid"),
        subtask: SubtaskIndex(subtask),
        parallelism,
        max_parallelism: MaxParallelism::new(16).expect("valid"),
        backend,
        key_types: Some(vec![ValueType::Binary]),
    }
}

fn descriptor() -> StateDescriptor {
    StateDescriptor::new("v", StateKind::Value, ValueType::Binary).expect("valid")
}

fn storage(dir: &std::path::Path) -> CheckpointStorage {
    let location =
        StorageLocation::parse(&dir.to_string_lossy(), &StorageOptions::default()).expect("parses");
    CheckpointStorage::filesystem(&location, JobId::new("job").expect("valid")).expect("opens")
}

/// One key per key group 0..16, value = the key group number.
fn batch() -> (KeyBatch, BinaryArray) {
    let keys: Vec<Vec<u8>> = (0..16u8).map(|g| vec![b'k', g]).collect();
    let batch = KeyBatch::from_pairs(
        keys.iter()
            .enumerate()
            .map(|(g, k)| (KeyGroup(g as u16), k.as_slice())),
    );
    let values = BinaryArray::from_iter_values((0..16u8).map(|g| [g]));
    (batch, values)
}

fn filled(backend: BackendSpec, dir: &std::path::Path) -> (Subtask, StateId, StateId) {
    let mut s = Subtask::open(spec(backend, 0, 1), dir).expect("opens");
    let v = s.register_state(&descriptor()).expect("registers");
    let offsets = s
        .register_operator_state("offsets", RedistributionMode::Split)
        .expect("registers");
    s.begin(Epoch(1), Attempt(0), None).expect("begins");
    let (keys, values) = batch();
    s.put_values(v, &keys, &values).expect("writes");
    s.set_operator_state(offsets, (0..4u8).map(|i| vec![i]).collect())
        .expect("sets");
    s.commit(Epoch(1), Attempt(0)).expect("commits");
    (s, v, offsets)
}

#[test]
fn snapshot_upload_and_restore_into_two_subtasks() {
    for (from, to) in [
        (BackendSpec::Heap, BackendSpec::RocksDb),
        (BackendSpec::RocksDb, BackendSpec::Heap),
    ] {
        let work = tempfile::tempdir().expect("tempdir");
        let checkpoints = tempfile::tempdir().expect("tempdir");
        let (mut s, v, _) = filled(from.clone(), work.path());
        let err = s.snapshot_sync().expect_err("epoch 1 is not final");
        assert!(err.to_string().contains("not final"), "{err}");
        s.finalize_all().expect("finalizes");
        let frozen = s.snapshot_sync().expect("freezes");
        assert_eq!(frozen.descriptors(), [descriptor()]);
        // Writes after the synchronous part do not reach the snapshot.
        s.begin(Epoch(2), Attempt(0), None).expect("begins");
        let (keys, _) = batch();
        s.clear(v, &keys).expect("clears");

        let storage = storage(checkpoints.path());
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let upload = runtime
            .block_on(frozen.upload(runtime.handle(), &storage.state_storage(), CheckpointId(1)))
            .expect("uploads");
        assert_eq!(upload.meta.subtask, SubtaskIndex(0));
        assert_eq!(upload.metrics.entries, Some(16));
        assert!(upload.metrics.state_size > 0);
        let mut meta = CheckpointMetadata::new(
            JobId::new("job").expect("valid"),
            CheckpointId(1),
            CheckpointKind::Checkpoint,
            Epoch(1),
        );
        meta.operators.push(OperatorStateMeta {
            uid: OperatorUid::new("op").expect("valid"),
            parallelism: 1,
            max_parallelism: MaxParallelism::new(16).expect("valid"),
            key_types: Some(vec![ValueType::Binary]),
            states: vec![descriptor()],
            subtasks: vec![upload.meta],
        });
        runtime
            .block_on(storage.complete(&meta))
            .expect("completes");

        let job = [JobOperator {
            uid: OperatorUid::new("op").expect("valid"),
            max_parallelism: MaxParallelism::new(16).expect("valid"),
            parallelism: 2,
        }];
        let plan = RestorePlan::new(&meta, &job, false).expect("plans");
        let OperatorRestore::Restored(restored) = &plan.operators[&job[0].uid] else {
            panic!("the operator has state")
        };
        let mut offsets_seen = Vec::new();
        for planned in &restored.subtasks {
            let mut sub =
                Subtask::open(spec(to.clone(), planned.subtask.0, 2), work.path()).expect("opens");
            runtime
                .block_on(sub.restore(planned, &storage.state_storage()))
                .expect("restores");
            let v = sub.register_state(&descriptor()).expect("restored");
            let range = sub.key_group_range();
            let owned: Vec<Vec<u8>> = range.iter().map(|g| vec![b'k', g.0 as u8]).collect();
            let keys =
                KeyBatch::from_pairs(range.iter().zip(&owned).map(|(g, k)| (g, k.as_slice())));
            let values = sub.get_values(v, &keys).expect("reads");
            for (i, g) in range.iter().enumerate() {
                assert_eq!(
                    values.value(i),
                    [g.0 as u8],
                    "{from:?} -> {to:?} key group {g}"
                );
            }
            let offsets = sub
                .register_operator_state("offsets", RedistributionMode::Split)
                .expect("restored");
            offsets_seen.push(sub.operator_state(offsets).expect("reads"));
            // A restored subtask cannot restore again.
            let err = runtime
                .block_on(sub.restore(planned, &storage.state_storage()))
                .expect_err("already holds operator state");
            assert!(err.to_string().contains("before"), "{err}");
            // Nor can another subtask's plan be used.
            let other = &restored.subtasks[1 - planned.subtask.0 as usize];
            let mut fresh =
                Subtask::open(spec(to.clone(), planned.subtask.0, 2), work.path()).expect("opens");
            let err = runtime
                .block_on(fresh.restore(other, &storage.state_storage()))
                .expect_err("wrong subtask");
            assert!(err.to_string().contains("planned for subtask"), "{err}");
        }
        assert_eq!(
            offsets_seen,
            [vec![vec![0u8], vec![1]], vec![vec![2u8], vec![3]]],
            "split evenly, in order"
        );
        assert!(values_cleared(&mut s, v));
    }
}

fn values_cleared(s: &mut Subtask, v: StateId) -> bool {
    let (keys, _) = batch();
    s.get_values(v, &keys).expect("reads").null_count() == 16
}

#[test]
fn a_canceled_upload_fails_and_leaves_no_keyed_file() {
    let work = tempfile::tempdir().expect("tempdir");
    let checkpoints = tempfile::tempdir().expect("tempdir");
    let (mut s, _, _) = filled(BackendSpec::Heap, work.path());
    s.finalize_all().expect("finalizes");
    let frozen = s.snapshot_sync().expect("freezes");
    let storage = storage(checkpoints.path());
    // A current-thread runtime runs nothing until it is blocked on, so the
    // cancel lands before the upload starts.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let upload = frozen.upload(runtime.handle(), &storage.state_storage(), CheckpointId(7));
    upload.cancel();
    let err = runtime.block_on(upload).expect_err("canceled");
    assert!(
        matches!(err, HostError::Snapshot(SnapshotError::Cancelled)),
        "{err}"
    );
    let keyed = checkpoints.path().join("job/chk-7/op/0/keyed");
    assert!(!keyed.exists(), "{} is left over", keyed.display());
}

#[test]
fn key_types_are_set_once() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut s = Subtask::open(spec(BackendSpec::Heap, 0, 1), work.path()).expect("opens");
    s.set_key_types(vec![ValueType::Binary])
        .expect("same types");
    let err = s
        .set_key_types(vec![ValueType::Int64])
        .expect_err("different types");
    assert!(err.to_string().contains("cannot change"), "{err}");
}
