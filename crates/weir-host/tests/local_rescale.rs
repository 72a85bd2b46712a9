//! `LocalOperator` end to end: fill two subtasks, write a savepoint, restore
//! it at parallelism 3 and 1 across heap and RocksDB, and check every key's
//! state lands in exactly the subtask owning its key group; operator state
//! is split, unioned and broadcast; wrong restores are refused clearly.

use arrow_array::{Array, BinaryArray};
use weir_checkpoint::{CheckpointKind, ResolvedSnapshot, StorageLocation, StorageOptions};
use weir_host::local::LocalOperator;
use weir_host::{BackendSpec, HostError, KeyBatch, SubtaskSession};
use weir_state::{RedistributionMode, StateId, list_items, push_list_item};
use weir_types::{
    Attempt, Epoch, KeyGroup, MaxParallelism, OperatorUid, StateDescriptor, StateKind, Value,
    ValueType, decode_value, encode_key, encode_value, key_group_of,
};

const KEYS: i64 = 1_000;

fn max() -> MaxParallelism {
    MaxParallelism::new(128).expect("valid")
}

fn uid(name: &str) -> OperatorUid {
    OperatorUid::new(name).expect("valid uid")
}

fn key(i: i64) -> (KeyGroup, Vec<u8>) {
    let cols = [Value::Int64(i)];
    let mut bytes = Vec::new();
    encode_key(&cols, &[ValueType::Int64], &mut bytes).expect("encodes");
    (key_group_of(&cols, max()), bytes)
}

fn int(v: i64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&Value::Int64(v), &ValueType::Int64, &mut out).expect("encodes");
    out
}

fn as_int(bytes: &[u8]) -> i64 {
    match decode_value(bytes, &ValueType::Int64).expect("decodes") {
        Value::Int64(v) => v,
        other => panic!("not an int64: {other}"),
    }
}

fn descriptors() -> [StateDescriptor; 3] {
    [
        StateDescriptor::new("sum", StateKind::Value, ValueType::Int64).expect("valid"),
        StateDescriptor::new("recent", StateKind::List, ValueType::Int64).expect("valid"),
        StateDescriptor::map("seen", ValueType::Int64, ValueType::Int64).expect("valid"),
    ]
}

struct Ids {
    sum: StateId,
    recent: StateId,
    seen: StateId,
}

fn register(op: &mut LocalOperator) -> Ids {
    let [sum, recent, seen] = descriptors();
    Ids {
        sum: op.register_state(&sum).expect("registers"),
        recent: op.register_state(&recent).expect("registers"),
        seen: op.register_state(&seen).expect("registers"),
    }
}

/// Operator state on each of `parallelism` subtasks: split items tagged
/// with the subtask, one union item each, and the same broadcast items.
fn fill_operator_state(op: &mut LocalOperator) {
    for s in 0..op.parallelism() as usize {
        let sub = op.subtask_mut(s).expect("exists");
        let split = sub
            .register_operator_state("offsets", RedistributionMode::Split)
            .expect("registers");
        let union = sub
            .register_operator_state("watermarks", RedistributionMode::Union)
            .expect("registers");
        let broadcast = sub
            .register_operator_state("rules", RedistributionMode::Broadcast)
            .expect("registers");
        sub.set_operator_state(split, (0..3u8).map(|i| vec![s as u8, i]).collect())
            .expect("sets");
        sub.set_operator_state(union, vec![vec![s as u8]])
            .expect("sets");
        sub.set_operator_state(broadcast, vec![b"rule-a".to_vec(), b"rule-b".to_vec()])
            .expect("sets");
    }
}

/// Fills `KEYS` keys into the subtasks owning them, in epoch 1.
fn fill(op: &mut LocalOperator) {
    op.set_key_types(vec![ValueType::Int64]).expect("sets");
    let ids = register(op);
    op.begin(Epoch(1), Attempt(0), None).expect("begins");
    fill_operator_state(op);
    for i in 0..KEYS {
        let (group, bytes) = key(i);
        let owner = op.subtask_of(group).expect("owned");
        let sub = op.subtask_mut(owner).expect("exists");
        let batch = KeyBatch::from_pairs([(group, bytes.as_slice())]);
        sub.put_values(
            ids.sum,
            &batch,
            &BinaryArray::from_iter_values([int(i * 3)]),
        )
        .expect("writes");
        let mut payload = Vec::new();
        push_list_item(&int(i), &mut payload);
        push_list_item(&int(-i), &mut payload);
        sub.append_lists(
            ids.recent,
            &batch,
            &BinaryArray::from_iter_values([payload]),
        )
        .expect("appends");
        sub.map_put(
            ids.seen,
            &batch,
            &BinaryArray::from_iter_values([int(i % 7)]),
            &BinaryArray::from_iter_values([int(i + 1)]),
        )
        .expect("puts");
    }
    op.commit(Epoch(1), Attempt(0)).expect("commits");
}

/// Every key is readable from its owner with its data and refused by the
/// other subtasks.
fn verify_keyed(op: &mut LocalOperator) {
    let ids = register(op);
    for i in 0..KEYS {
        let (group, bytes) = key(i);
        let owner = op.subtask_of(group).expect("owned");
        let batch = KeyBatch::from_pairs([(group, bytes.as_slice())]);
        for s in 0..op.parallelism() as usize {
            let sub = op.subtask_mut(s).expect("exists");
            let read = sub.get_values(ids.sum, &batch);
            if s != owner {
                let err = read.expect_err("not the owner");
                assert!(
                    matches!(
                        err,
                        HostError::State(weir_state::StateError::KeyGroupOutOfRange { .. })
                    ),
                    "key {i} in subtask {s}: {err}"
                );
                continue;
            }
            let sum = read.expect("reads");
            assert_eq!(as_int(sum.value(0)), i * 3, "key {i}");
            let list = sub.get_lists(ids.recent, &batch).expect("reads");
            let items: Vec<i64> = list_items(list.value(0))
                .map(|item| as_int(item.expect("well-formed")))
                .collect();
            assert_eq!(items, [i, -i], "key {i}");
            let entries = sub.map_entries(ids.seen, &batch).expect("reads");
            assert_eq!(entries.offsets, [0, 1], "key {i}");
            assert_eq!(as_int(entries.user_keys.value(0)), i % 7);
            assert_eq!(as_int(entries.values.value(0)), i + 1);
        }
    }
}

/// Operator state after restoring the two filled subtasks: redistributed
/// by mode after a rescale, each subtask's own state otherwise.
fn verify_operator_state(op: &mut LocalOperator) {
    let parallelism = op.parallelism() as usize;
    let rescaled = parallelism != 2;
    let mut split_items = Vec::new();
    let mut sizes = Vec::new();
    for s in 0..parallelism {
        let sub = op.subtask_mut(s).expect("exists");
        let split = sub
            .register_operator_state("offsets", RedistributionMode::Split)
            .expect("restored with its mode");
        let union = sub
            .register_operator_state("watermarks", RedistributionMode::Union)
            .expect("restored with its mode");
        let broadcast = sub
            .register_operator_state("rules", RedistributionMode::Broadcast)
            .expect("restored with its mode");
        let items = sub.operator_state(split).expect("reads");
        sizes.push(items.len());
        split_items.extend(items);
        let union_items = sub.operator_state(union).expect("reads");
        if rescaled {
            assert_eq!(
                union_items,
                [vec![0u8], vec![1u8]],
                "every union item, everywhere"
            );
        } else {
            assert_eq!(union_items, [vec![s as u8]], "its own items, exactly");
        }
        assert_eq!(
            sub.operator_state(broadcast).expect("reads"),
            [b"rule-a".to_vec(), b"rule-b".to_vec()]
        );
    }
    let expected: Vec<Vec<u8>> = (0..2u8)
        .flat_map(|s| (0..3u8).map(move |i| vec![s, i]))
        .collect();
    assert_eq!(
        split_items, expected,
        "split items are each restored once, in order"
    );
    let (smallest, largest) = (sizes.iter().min(), sizes.iter().max());
    assert!(
        largest.zip(smallest).is_some_and(|(l, s)| l - s <= 1),
        "{sizes:?}"
    );
}

fn savepoint_of(backend: BackendSpec, work: &std::path::Path, out: &std::path::Path) -> String {
    let mut op = LocalOperator::new(uid("average"), 2, max(), backend, work).expect("opens");
    fill(&mut op);
    op.snapshot(&out.to_string_lossy()).expect("snapshots")
}

#[test]
fn savepoint_at_two_restores_at_three_and_one_across_backends() {
    let work = tempfile::tempdir().expect("tempdir");
    let out = tempfile::tempdir().expect("tempdir");
    for (from, to) in [
        (BackendSpec::Heap, BackendSpec::RocksDb),
        (BackendSpec::RocksDb, BackendSpec::Heap),
    ] {
        let savepoint = savepoint_of(from.clone(), work.path(), out.path());
        for parallelism in [3, 1, 2] {
            let mut restored = LocalOperator::restore(
                &savepoint,
                uid("average"),
                parallelism,
                max(),
                to.clone(),
                work.path(),
                false,
            )
            .expect("restores");
            verify_keyed(&mut restored);
            verify_operator_state(&mut restored);
        }
    }
}

#[test]
fn the_savepoint_is_complete_self_contained_and_readable() {
    let work = tempfile::tempdir().expect("tempdir");
    let out = tempfile::tempdir().expect("tempdir");
    let mut op = LocalOperator::new(uid("average"), 2, max(), BackendSpec::Heap, work.path())
        .expect("opens");
    fill(&mut op);
    let first = op
        .snapshot(&out.path().to_string_lossy())
        .expect("snapshots");
    // Writes after the snapshot are not in it; the next snapshot has them.
    let ids = register(&mut op);
    op.begin(Epoch(2), Attempt(0), Some(Epoch(1)))
        .expect("begins");
    let (group, bytes) = key(0);
    let owner = op.subtask_of(group).expect("owned");
    op.subtask_mut(owner)
        .expect("exists")
        .put_values(
            ids.sum,
            &KeyBatch::from_pairs([(group, bytes.as_slice())]),
            &BinaryArray::from_iter_values([int(-1)]),
        )
        .expect("writes");
    op.commit(Epoch(2), Attempt(0)).expect("commits");
    let second = op
        .snapshot(&out.path().to_string_lossy())
        .expect("snapshots");
    assert_ne!(first, second, "each snapshot is a new savepoint");
    assert!(first.ends_with("savepoint-average-1"), "{first}");
    assert!(second.ends_with("savepoint-average-2"), "{second}");

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let location = StorageLocation::parse(&first, &StorageOptions::default()).expect("parses");
    let savepoint = runtime
        .block_on(ResolvedSnapshot::open(&location))
        .expect("opens");
    let meta = savepoint.metadata();
    assert_eq!(meta.kind, CheckpointKind::Savepoint);
    assert_eq!(meta.cut_epoch, Epoch(1));
    let operator = meta.operator(&uid("average")).expect("has the operator");
    assert_eq!(operator.parallelism, 2);
    assert_eq!(operator.max_parallelism, max());
    assert_eq!(operator.key_types, Some(vec![ValueType::Int64]));
    assert_eq!(operator.states, descriptors());
    assert_eq!(operator.subtasks.len(), 2);
    for sub in &operator.subtasks {
        assert!(sub.keyed.is_some() && sub.operator_state.is_some());
    }
    // Every file is inside the savepoint directory and matches its handle.
    for file in meta.files() {
        runtime
            .block_on(savepoint.read_file(file))
            .expect("present and intact");
    }
    // The private checkpoint was discarded; the savepoint alone restores.
    let mut from_first = LocalOperator::restore(
        &first,
        uid("average"),
        1,
        max(),
        BackendSpec::Heap,
        work.path(),
        false,
    )
    .expect("restores");
    verify_keyed(&mut from_first);
    let mut from_second = LocalOperator::restore(
        &second,
        uid("average"),
        3,
        max(),
        BackendSpec::Heap,
        work.path(),
        false,
    )
    .expect("restores");
    let ids = register(&mut from_second);
    let owner = from_second.subtask_of(group).expect("owned");
    let read = from_second
        .subtask_mut(owner)
        .expect("exists")
        .get_values(ids.sum, &KeyBatch::from_pairs([(group, bytes.as_slice())]))
        .expect("reads");
    assert_eq!(as_int(read.value(0)), -1);
    assert_eq!(read.null_count(), 0);
}

#[test]
fn max_parallelism_changes_and_unknown_uids_are_refused() {
    let work = tempfile::tempdir().expect("tempdir");
    let out = tempfile::tempdir().expect("tempdir");
    let savepoint = savepoint_of(BackendSpec::Heap, work.path(), out.path());

    let err = LocalOperator::restore(
        &savepoint,
        uid("average"),
        2,
        MaxParallelism::new(256).expect("valid"),
        BackendSpec::Heap,
        work.path(),
        false,
    )
    .expect_err("max parallelism changed");
    assert!(err.to_string().contains("set it back to 128"), "{err}");

    let err = LocalOperator::restore(
        &savepoint,
        uid("renamed"),
        2,
        max(),
        BackendSpec::Heap,
        work.path(),
        false,
    )
    .expect_err("the stored uid is not in the job");
    assert!(err.to_string().contains("average"), "{err}");

    let mut fresh = LocalOperator::restore(
        &savepoint,
        uid("renamed"),
        2,
        max(),
        BackendSpec::Heap,
        work.path(),
        true,
    )
    .expect("non-restored state allowed");
    // The new operator starts empty.
    let [sum, ..] = descriptors();
    let id = fresh.register_state(&sum).expect("registers");
    let (group, bytes) = key(1);
    let owner = fresh.subtask_of(group).expect("owned");
    let read = fresh
        .subtask_mut(owner)
        .expect("exists")
        .get_values(id, &KeyBatch::from_pairs([(group, bytes.as_slice())]))
        .expect("reads");
    assert!(read.is_null(0));

    let err = LocalOperator::restore(
        &out.path().join("missing").to_string_lossy(),
        uid("average"),
        2,
        max(),
        BackendSpec::Heap,
        work.path(),
        false,
    )
    .expect_err("no savepoint there");
    assert!(err.to_string().contains("_metadata"), "{err}");
}

#[test]
fn snapshots_need_committed_epochs_and_key_types() {
    let work = tempfile::tempdir().expect("tempdir");
    let out = tempfile::tempdir().expect("tempdir");
    let mut op =
        LocalOperator::new(uid("counts"), 2, max(), BackendSpec::Heap, work.path()).expect("opens");
    let [sum, ..] = descriptors();
    op.register_state(&sum).expect("registers");
    let err = op
        .snapshot(&out.path().to_string_lossy())
        .expect_err("no key types");
    assert!(err.to_string().contains("set_key_types"), "{err}");
    op.set_key_types(vec![ValueType::Int64]).expect("sets");
    op.begin(Epoch(1), Attempt(0), None).expect("begins");
    let err = op
        .snapshot(&out.path().to_string_lossy())
        .expect_err("epoch 1 is open");
    assert!(err.to_string().contains("never committed"), "{err}");
    op.commit(Epoch(1), Attempt(0)).expect("commits");
    op.snapshot(&out.path().to_string_lossy())
        .expect("snapshots");
    assert!(op.subtask_mut(2).is_err());
}
