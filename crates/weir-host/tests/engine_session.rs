//! Every state kind through `SubtaskSession` on the in-process engine, on the
//! heap and on RocksDB: batched reads and writes, epochs and retries.

use arrow_array::{Array, BinaryArray};
use weir_host::engine::Subtask;
use weir_host::{BackendSpec, KeyBatch, SubtaskSession, SubtaskSpec};
use weir_state::{RedistributionMode, list_items, push_list_item};
use weir_types::{
    Attempt, Epoch, MaxParallelism, OperatorUid, StateDescriptor, StateKind, SubtaskIndex, Value,
    ValueType, decode_value, encode_key, encode_value, key_group_of,
};

const BACKENDS: [BackendSpec; 2] = [BackendSpec::Heap, BackendSpec::RocksDb];

fn open(backend: BackendSpec, dir: &std::path::Path) -> Subtask {
    let spec = SubtaskSpec {
        uid: OperatorUid::new("op").expect("valid uid"),
        subtask: SubtaskIndex(0),
        parallelism: 1,
        max_parallelism: MaxParallelism::new(128).expect("valid"),
        backend,
        key_types: None,
    };
    Subtask::open(spec, dir).expect("opens")
}

/// A batch of int64 keys (repeats allowed).
fn keys(ids: &[i64]) -> KeyBatch {
    let max = MaxParallelism::new(128).expect("valid");
    let encoded: Vec<(weir_types::KeyGroup, Vec<u8>)> = ids
        .iter()
        .map(|&i| {
            let cols = [Value::Int64(i)];
            let mut bytes = Vec::new();
            encode_key(&cols, &[ValueType::Int64], &mut bytes).expect("encodes");
            (key_group_of(&cols, max), bytes)
        })
        .collect();
    KeyBatch::from_pairs(encoded.iter().map(|(g, k)| (*g, k.as_slice())))
}

fn int(v: i64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&Value::Int64(v), &ValueType::Int64, &mut out).expect("encodes");
    out
}

fn ints(values: &[Option<i64>]) -> BinaryArray {
    let encoded: Vec<Option<Vec<u8>>> = values.iter().map(|v| v.map(int)).collect();
    BinaryArray::from_iter(encoded)
}

fn decoded(array: &BinaryArray) -> Vec<Option<i64>> {
    (0..array.len())
        .map(|i| {
            array.is_valid(i).then(|| {
                match decode_value(array.value(i), &ValueType::Int64).expect("decodes") {
                    Value::Int64(v) => v,
                    other => panic!("not an int64: {other}"),
                }
            })
        })
        .collect()
}

fn list_payload(items: &[i64]) -> Vec<u8> {
    let mut payload = Vec::new();
    for &i in items {
        push_list_item(&int(i), &mut payload);
    }
    payload
}

fn list_values(payload: &[u8]) -> Vec<i64> {
    list_items(payload)
        .map(|item| {
            match decode_value(item.expect("well-formed"), &ValueType::Int64).expect("decodes") {
                Value::Int64(v) => v,
                other => panic!("not an int64: {other}"),
            }
        })
        .collect()
}

#[test]
fn value_state_reads_writes_and_clears_in_row_order() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let count = s
            .register_state(
                &StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
            )
            .expect("registers");
        s.begin(Epoch(1), Attempt(0), None).expect("begins");
        let batch = keys(&[1, 2, 3]);
        assert_eq!(
            decoded(&s.get_values(count, &batch).expect("reads")),
            [None, None, None],
            "{backend:?}"
        );
        s.put_values(count, &batch, &ints(&[Some(10), Some(20), Some(30)]))
            .expect("writes");
        // Later rows see earlier rows: key 1 written then cleared in one batch.
        s.put_values(count, &keys(&[1, 1, 2]), &ints(&[Some(11), None, Some(21)]))
            .expect("writes");
        assert_eq!(
            decoded(&s.get_values(count, &batch).expect("reads")),
            [None, Some(21), Some(30)],
            "{backend:?}"
        );
        s.clear(count, &keys(&[3])).expect("clears");
        assert_eq!(
            decoded(&s.get_values(count, &batch).expect("reads")),
            [None, Some(21), None],
            "{backend:?}"
        );
        s.commit(Epoch(1), Attempt(0)).expect("commits");
        let err = s
            .put_values(count, &keys(&[1, 2]), &ints(&[Some(1)]))
            .expect_err("row count mismatch");
        assert!(err.to_string().contains("one per key"), "{err}");
    }
}

#[test]
fn list_state_appends_replaces_and_clears() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let list = s
            .register_state(
                &StateDescriptor::new("recent", StateKind::List, ValueType::Int64).expect("valid"),
            )
            .expect("registers");
        s.begin(Epoch(1), Attempt(0), None).expect("begins");
        let batch = keys(&[1, 2]);
        let payloads = BinaryArray::from_iter([Some(list_payload(&[1, 2])), None]);
        s.append_lists(list, &batch, &payloads).expect("appends");
        s.append_lists(
            list,
            &keys(&[1, 2]),
            &BinaryArray::from_iter([Some(list_payload(&[3])), Some(list_payload(&[7, 8]))]),
        )
        .expect("appends");
        let got = s.get_lists(list, &batch).expect("reads");
        assert_eq!(list_values(got.value(0)), [1, 2, 3], "{backend:?}");
        assert_eq!(list_values(got.value(1)), [7, 8], "{backend:?}");
        s.replace_lists(
            list,
            &batch,
            &BinaryArray::from_iter([Some(list_payload(&[9])), None]),
        )
        .expect("replaces");
        let got = s.get_lists(list, &batch).expect("reads");
        assert_eq!(list_values(got.value(0)), [9], "{backend:?}");
        assert!(got.is_null(1), "{backend:?}: a null payload clears");
        // A list state refuses value access with the state's name.
        let err = s.get_batch(list, &batch).expect_err("wrong kind");
        assert!(err.to_string().contains("recent"), "{err}");
        s.commit(Epoch(1), Attempt(0)).expect("commits");
    }
}

#[test]
fn map_state_gets_puts_removes_and_lists_entries() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let map = s
            .register_state(
                &StateDescriptor::map("by_item", ValueType::Int64, ValueType::Int64)
                    .expect("valid"),
            )
            .expect("registers");
        s.begin(Epoch(1), Attempt(0), None).expect("begins");
        let batch = keys(&[1, 1, 2]);
        let user_keys = ints(&[Some(100), Some(101), Some(100)]);
        s.map_put(map, &batch, &user_keys, &ints(&[Some(1), Some(2), Some(3)]))
            .expect("puts");
        assert_eq!(
            decoded(&s.map_get(map, &batch, &user_keys).expect("gets")),
            [Some(1), Some(2), Some(3)]
        );
        s.map_put(map, &keys(&[1]), &ints(&[Some(100)]), &ints(&[None]))
            .expect("removes");
        let entries = s.map_entries(map, &keys(&[1, 2, 3])).expect("lists");
        assert_eq!(entries.offsets, [0, 1, 2, 2], "{backend:?}");
        assert_eq!(decoded(&entries.user_keys), [Some(101), Some(100)]);
        assert_eq!(decoded(&entries.values), [Some(2), Some(3)]);
        let err = s
            .map_get(map, &keys(&[1]), &ints(&[None]))
            .expect_err("null user key");
        assert!(err.to_string().contains("may not be null"), "{err}");
        s.commit(Epoch(1), Attempt(0)).expect("commits");
    }
}

#[test]
fn reducing_and_aggregating_states_take_value_access() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let reducing = s
            .register_state(
                &StateDescriptor::new("max", StateKind::Reducing, ValueType::Int64).expect("valid"),
            )
            .expect("registers");
        let aggregating = s
            .register_state(
                &StateDescriptor::new("acc", StateKind::Aggregating, ValueType::Int64)
                    .expect("valid"),
            )
            .expect("registers");
        s.begin(Epoch(1), Attempt(0), None).expect("begins");
        for state in [reducing, aggregating] {
            s.put_values(state, &keys(&[5]), &ints(&[Some(5)]))
                .expect("writes");
            assert_eq!(
                decoded(&s.get_values(state, &keys(&[5])).expect("reads")),
                [Some(5)]
            );
        }
        s.commit(Epoch(1), Attempt(0)).expect("commits");
    }
}

#[test]
fn a_retried_attempt_discards_the_writes_of_the_failed_one() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let count = s
            .register_state(
                &StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
            )
            .expect("registers");
        let offsets = s
            .register_operator_state("offsets", RedistributionMode::Split)
            .expect("registers");
        let batch = keys(&[1]);
        s.begin(Epoch(1), Attempt(0), None).expect("begins");
        s.put_values(count, &batch, &ints(&[Some(1)]))
            .expect("writes");
        s.set_operator_state(offsets, vec![b"1".to_vec()])
            .expect("sets");
        s.commit(Epoch(1), Attempt(0)).expect("commits");

        s.begin(Epoch(2), Attempt(0), Some(Epoch(1)))
            .expect("begins");
        s.put_values(count, &batch, &ints(&[Some(2)]))
            .expect("writes");
        s.set_operator_state(offsets, vec![b"2".to_vec()])
            .expect("sets");
        // Spark retried the task: attempt 1 sees epoch 1's state.
        s.begin(Epoch(2), Attempt(1), Some(Epoch(1)))
            .expect("retries");
        assert_eq!(
            decoded(&s.get_values(count, &batch).expect("reads")),
            [Some(1)],
            "{backend:?}"
        );
        assert_eq!(s.operator_state(offsets).expect("reads"), [b"1".to_vec()]);
        s.put_values(count, &batch, &ints(&[Some(3)]))
            .expect("writes");
        s.commit(Epoch(2), Attempt(1)).expect("commits");
        s.begin(Epoch(3), Attempt(0), Some(Epoch(2)))
            .expect("begins");
        assert_eq!(s.last_final_epoch(), Some(Epoch(2)));
        // Epoch 2 is final now: it cannot be retried.
        let err = s.begin(Epoch(2), Attempt(2), None).expect_err("final");
        assert!(err.to_string().contains("already final"), "{err}");
        // An operation outside an open attempt is refused.
        s.commit(Epoch(3), Attempt(0)).expect("commits");
        let err = s
            .put_values(count, &batch, &ints(&[Some(4)]))
            .expect_err("no epoch");
        assert!(err.to_string().contains("begin_epoch"), "{err}");
        assert_eq!(
            decoded(&s.get_values(count, &batch).expect("reads")),
            [Some(3)],
            "{backend:?}"
        );
    }
}

#[test]
fn rows_outside_the_key_groups_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = SubtaskSpec {
        uid: OperatorUid::new("op").expect("valid uid"),
        subtask: SubtaskIndex(1),
        parallelism: 2,
        max_parallelism: MaxParallelism::new(128).expect("valid"),
        backend: BackendSpec::Heap,
        key_types: None,
    };
    let mut s = Subtask::open(spec, dir.path()).expect("opens");
    assert_eq!(s.key_group_range().start(), 64);
    let count = s
        .register_state(
            &StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
        )
        .expect("registers");
    let batch = KeyBatch::from_pairs([(weir_types::KeyGroup(3), &b"k"[..])]);
    let err = s.get_values(count, &batch).expect_err("not ours");
    assert!(err.to_string().contains("outside"), "{err}");
}

#[test]
fn subtasks_and_local_operators_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<Subtask>();
    assert_send::<weir_host::local::LocalOperator>();
    assert_send::<weir_host::engine::UploadFuture>();
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(BackendSpec::RocksDb, dir.path());
    let moved = std::thread::spawn(move || s.spec().subtask)
        .join()
        .expect("joins");
    assert_eq!(moved, SubtaskIndex(0));
}
