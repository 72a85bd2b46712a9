//! Subtask snapshots on their own: the synchronous part freezes the state,
//! the upload writes real files into checkpoint storage and can be
//! canceled, and `Subtask::restore` reads them back as a `RestorePlan` says.

mod host_support;

use arrow_array::{Array, BinaryArray};
use weir_checkpoint::{
    CheckpointKind, CheckpointMetadata, CheckpointStorage, JobOperator, OperatorRestore,
    OperatorStateMeta, RestorePlan, StorageLocation, StorageOptions, SubtaskRestore,
    SubtaskStateMeta,
};
use weir_host::engine::{RestoreOrigin, SnapshotFormat, Subtask};
use weir_host::{BackendSpec, HostError, KeyBatch, SubtaskSession, SubtaskSpec};
use weir_snapshot::{KeyedStateHandle, SnapshotError, SnapshotStorage};
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

/// Where the tests' checkpoints are, as a barrier names it.
const LOCATION: &str = "file:///checkpoints";

fn origin(checkpoint: u64) -> RestoreOrigin<'static> {
    RestoreOrigin {
        checkpoint: CheckpointId(checkpoint),
        location: LOCATION,
    }
}

/// Subtask `spec` restored from `planned`, registering no states first.
fn restored(
    runtime: &tokio::runtime::Runtime,
    spec: SubtaskSpec,
    work: &std::path::Path,
    planned: &SubtaskRestore,
    from: (&SnapshotStorage, RestoreOrigin<'_>),
) -> Result<Subtask, HostError> {
    runtime.block_on(Subtask::restore(spec, work, planned, &[], from))
}

/// Completes checkpoint `id` of operator `op` (parallelism 1) holding `subtask`.
fn completed(
    runtime: &tokio::runtime::Runtime,
    storage: &CheckpointStorage,
    id: u64,
    subtask: SubtaskStateMeta,
) -> CheckpointMetadata {
    let mut meta = CheckpointMetadata::new(
        JobId::new("job").expect("valid"),
        CheckpointId(id),
        CheckpointKind::Checkpoint,
        Epoch(id),
    );
    meta.operators.push(OperatorStateMeta {
        uid: OperatorUid::new("op").expect("valid"),
        parallelism: 1,
        max_parallelism: MaxParallelism::new(16).expect("valid"),
        key_types: Some(vec![ValueType::Binary]),
        states: vec![descriptor()],
        subtasks: vec![subtask],
    });
    runtime
        .block_on(storage.complete(&meta))
        .expect("completes");
    meta
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
        let meta = completed(&runtime, &storage, 1, upload.meta);

        let subtasks = planned_subtasks(&meta, 2);
        let mut offsets_seen = Vec::new();
        for planned in &subtasks {
            let mut sub = restored(
                &runtime,
                spec(to.clone(), planned.subtask.0, 2),
                work.path(),
                planned,
                (&storage.state_storage(), origin(1)),
            )
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
            // Another subtask's plan cannot be used.
            let other = &subtasks[1 - planned.subtask.0 as usize];
            let err = restored(
                &runtime,
                spec(to.clone(), planned.subtask.0, 2),
                work.path(),
                other,
                (&storage.state_storage(), origin(1)),
            )
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

/// Keys `key-<i>` spread over the 16 key groups.
fn many_keys(indices: impl Iterator<Item = u32>) -> (Vec<Vec<u8>>, Vec<KeyGroup>) {
    indices
        .map(|i| (format!("key-{i}").into_bytes(), KeyGroup((i % 16) as u16)))
        .unzip()
}

/// 100-byte values that say which round wrote key `i`, otherwise noise that
/// does not compress (so file sizes are those of real state).
fn round_value(i: u32, round: u8) -> Vec<u8> {
    let mut x = u64::from(i) << 8 | u64::from(round) | 1 << 63;
    let mut value: Vec<u8> = (0..100)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    value[..4].copy_from_slice(&i.to_le_bytes());
    value[4] = round;
    value
}

/// Writes `indices` with `round`'s values in final epoch `epoch`.
fn write_round(s: &mut Subtask, v: StateId, epoch: u64, indices: &[u32], round: u8) {
    let (keys, groups) = many_keys(indices.iter().copied());
    let batch = KeyBatch::from_pairs(groups.iter().copied().zip(keys.iter().map(Vec::as_slice)));
    let values = BinaryArray::from_iter_values(indices.iter().map(|&i| round_value(i, round)));
    s.begin(Epoch(epoch), Attempt(0), None).expect("begins");
    s.put_values(v, &batch, &values).expect("writes");
    s.commit(Epoch(epoch), Attempt(0)).expect("commits");
    s.finalize_all().expect("finalizes");
}

/// Asserts that `s` holds, for every key `0..n` in its key groups, the value
/// of the round `expected` names.
fn assert_rounds(s: &mut Subtask, n: u32, expected: impl Fn(u32) -> u8) {
    let v = s.register_state(&descriptor()).expect("restored");
    let range = s.key_group_range();
    let owned: Vec<u32> = (0..n)
        .filter(|i| range.contains(KeyGroup((i % 16) as u16)))
        .collect();
    assert!(!owned.is_empty());
    let (keys, groups) = many_keys(owned.iter().copied());
    let batch = KeyBatch::from_pairs(groups.iter().copied().zip(keys.iter().map(Vec::as_slice)));
    let values = s.get_values(v, &batch).expect("reads");
    for (row, &i) in owned.iter().enumerate() {
        assert_eq!(values.value(row), round_value(i, expected(i)), "key {i}");
    }
}

/// Takes incremental checkpoint `id` on `base` and completes it.
fn incremental(
    runtime: &tokio::runtime::Runtime,
    storage: &CheckpointStorage,
    s: &mut Subtask,
    id: u64,
    base: Option<u64>,
) -> (CheckpointMetadata, weir_snapshot::SnapshotMetrics) {
    let format = SnapshotFormat::Incremental {
        base: base.map(CheckpointId),
    };
    let frozen = s
        .snapshot_sync_as(&format, CheckpointId(id), LOCATION)
        .expect("freezes");
    let upload = runtime
        .block_on(frozen.upload(runtime.handle(), &storage.state_storage(), CheckpointId(id)))
        .expect("uploads");
    let metrics = upload.metrics;
    (completed(runtime, storage, id, upload.meta), metrics)
}

/// Under 5% of the checkpoint's bytes were uploaded.
fn assert_little_sent(sent: &weir_snapshot::SnapshotMetrics, when: &str) {
    assert!(
        sent.uploaded_size * 20 < sent.state_size,
        "{when}: {} of {} bytes sent",
        sent.uploaded_size,
        sent.state_size
    );
}

fn shared_paths(meta: &CheckpointMetadata) -> Vec<String> {
    match &meta.operators[0].subtasks[0].keyed {
        Some(KeyedStateHandle::Incremental(h)) => {
            h.shared.iter().map(|f| f.file.path.clone()).collect()
        }
        other => panic!("not incremental: {other:?}"),
    }
}

/// Incremental checkpoints through the engine: the second sends only the SST
/// of the changed keys and references the first one's files; the chain
/// restores into RocksDB and heap subtasks, at the same and at another
/// parallelism; a subtask restored without rescaling keeps reusing them.
#[test]
fn incremental_checkpoints_send_new_files_only_and_restore_as_a_chain() {
    let work = tempfile::tempdir().expect("tempdir");
    let checkpoints = tempfile::tempdir().expect("tempdir");
    let storage = storage(checkpoints.path());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let n = 20_000u32;
    let all: Vec<u32> = (0..n).collect();
    let changed: Vec<u32> = (0..n).step_by(100).collect();

    let mut s = Subtask::open(spec(BackendSpec::RocksDb, 0, 1), work.path()).expect("opens");
    let v = s.register_state(&descriptor()).expect("registers");
    write_round(&mut s, v, 1, &all, 1);
    // The load's flushes may start a compaction (level-0 files merged into
    // the next level); it must not land between the checkpoints.
    s.wait_for_compactions().expect("compactions end");
    let (first, sent) = incremental(&runtime, &storage, &mut s, 1, None);
    assert_eq!(sent.uploaded_size, sent.state_size, "nothing to reuse yet");
    write_round(&mut s, v, 2, &changed, 2);
    let (second, sent) = incremental(&runtime, &storage, &mut s, 2, Some(1));
    assert_little_sent(&sent, "1% changed");
    let reused: Vec<_> = shared_paths(&second)
        .into_iter()
        .filter(|p| shared_paths(&first).contains(p))
        .collect();
    assert!(
        !reused.is_empty(),
        "the second checkpoint references the first's SSTs"
    );
    let leftovers: Vec<_> = std::fs::read_dir(work.path())
        .expect("lists")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("checkpoint-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "local checkpoints are removed after the upload"
    );
    // A base this subtask never uploaded (another lineage) reuses nothing.
    write_round(&mut s, v, 3, &changed, 3);
    let (_, sent) = incremental(&runtime, &storage, &mut s, 3, Some(99));
    assert_eq!(sent.uploaded_size, sent.state_size);
    drop(s);

    let expected = |i: u32| if i.is_multiple_of(100) { 2 } else { 1 };
    for (backend, parallelism) in [
        (BackendSpec::RocksDb, 1),
        (BackendSpec::Heap, 1),
        (BackendSpec::RocksDb, 2),
        (BackendSpec::Heap, 2),
    ] {
        let subtasks = planned_subtasks(&second, parallelism);
        for planned in &subtasks {
            let mut sub = restored(
                &runtime,
                spec(backend.clone(), planned.subtask.0, parallelism),
                work.path(),
                planned,
                (&storage.state_storage(), origin(2)),
            )
            .expect("restores");
            assert_rounds(&mut sub, n, expected);
            if backend == BackendSpec::RocksDb && parallelism == 1 {
                let v = sub.register_state(&descriptor()).expect("registered");
                write_round(&mut sub, v, 3, &changed, 4);
                let (_, sent) = incremental(&runtime, &storage, &mut sub, 4, Some(2));
                assert_little_sent(&sent, "after a restore without rescaling");
            }
        }
    }
}

/// What each subtask of operator `op` at `parallelism` restores of `meta`.
fn planned_subtasks(meta: &CheckpointMetadata, parallelism: u32) -> Vec<SubtaskRestore> {
    let job = [JobOperator {
        uid: OperatorUid::new("op").expect("valid"),
        max_parallelism: MaxParallelism::new(16).expect("valid"),
        parallelism,
    }];
    let plan = RestorePlan::new(meta, &job, false).expect("plans");
    let OperatorRestore::Restored(restored) = &plan.operators[&job[0].uid] else {
        panic!("the operator has state")
    };
    restored.subtasks.clone()
}

/// A work directory, a checkpoint directory with local storage in it, and a
/// runtime.
fn dirs_and_storage() -> (
    tempfile::TempDir,
    tempfile::TempDir,
    CheckpointStorage,
    tokio::runtime::Runtime,
) {
    let work = tempfile::tempdir().expect("tempdir");
    let checkpoints = tempfile::tempdir().expect("tempdir");
    let storage = storage(checkpoints.path());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    (work, checkpoints, storage, runtime)
}

/// An incremental checkpoint canceled during its upload to local storage
/// leaves none of its files behind (canceled at once here: the placement
/// stops between files, so a later cancellation deletes what it placed).
#[test]
fn a_canceled_incremental_checkpoint_leaves_no_files_in_local_storage() {
    let (work, checkpoints, storage, runtime) = dirs_and_storage();
    let mut s = Subtask::open(spec(BackendSpec::RocksDb, 0, 1), work.path()).expect("opens");
    let v = s.register_state(&descriptor()).expect("registers");
    write_round(&mut s, v, 1, &(0..20_000).collect::<Vec<_>>(), 1);
    let format = SnapshotFormat::Incremental { base: None };
    let frozen = s
        .snapshot_sync_as(&format, CheckpointId(1), LOCATION)
        .expect("freezes");
    let upload = frozen.upload(runtime.handle(), &storage.state_storage(), CheckpointId(1));
    upload.cancel();
    let err = runtime.block_on(upload).expect_err("canceled");
    assert!(err.to_string().contains("cancel"), "{err}");
    let files = host_support::files_under(checkpoints.path());
    assert!(files.is_empty(), "left behind: {files:?}");
}

/// A stored SST whose bytes changed (its size did not) fails a restore from
/// local storage on its checksum, into either backend, though the file is
/// linked rather than copied and the database opens meanwhile.
#[test]
fn a_changed_sst_fails_the_restore_on_its_checksum() {
    let (work, checkpoints, storage, runtime) = dirs_and_storage();
    let mut s = Subtask::open(spec(BackendSpec::RocksDb, 0, 1), work.path()).expect("opens");
    let v = s.register_state(&descriptor()).expect("registers");
    let all: Vec<u32> = (0..2_000).collect();
    write_round(&mut s, v, 1, &all, 1);
    s.wait_for_compactions().expect("compactions end");
    let (meta, _) = incremental(&runtime, &storage, &mut s, 1, None);
    drop(s);

    let sst = checkpoints.path().join("job").join(&shared_paths(&meta)[0]);
    let mut bytes = std::fs::read(&sst).expect("stored");
    // The footer's last byte: RocksDB itself refuses to open the file, and
    // the checksum is still the error reported.
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&sst, &bytes).expect("rewritten");

    let subtasks = planned_subtasks(&meta, 1);
    for backend in [BackendSpec::RocksDb, BackendSpec::Heap] {
        let err = restored(
            &runtime,
            spec(backend.clone(), 0, 1),
            work.path(),
            &subtasks[0],
            (&storage.state_storage(), origin(1)),
        )
        .expect_err("the SST differs from its handle");
        assert!(
            matches!(
                err,
                HostError::Snapshot(SnapshotError::FileMismatch { what: "crc32", .. })
            ),
            "{backend:?}: {err}"
        );
    }
}
