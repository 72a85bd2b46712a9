//! `TypedSession` over the in-process engine: values in and out through the
//! core codec, key types learned from the first key and shared by every
//! subtask of the operator, registration checks, and restore tickets that
//! restore a savepoint the way a state host does.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, UInt32Array};
use tempfile::TempDir;
use weir_checkpoint::{JobOperator, ResolvedSnapshot, StorageLocation, StorageOptions};
use weir_host::local::{LocalOperator, SharedOperator};
use weir_host::typed::{TypedSession, inferred_key_groups, redistribution_mode};
use weir_host::{BackendSpec, HostError, RestoreTicket, SubtaskSession};
use weir_state::RedistributionMode;
use weir_types::{
    Attempt, Epoch, Field, MaxParallelism, OperatorUid, StateDescriptor, StateKind, TypesError,
    Value, ValueTree, ValueType, key_group_of,
};

fn max() -> MaxParallelism {
    MaxParallelism::new(128).expect("valid")
}

fn operator(dir: &TempDir, parallelism: u32) -> SharedOperator {
    let uid = OperatorUid::new("typed").expect("valid uid");
    let operator =
        LocalOperator::new(uid, parallelism, max(), BackendSpec::Heap, dir.path()).expect("opens");
    SharedOperator::new(operator)
}

fn row() -> ValueType {
    ValueType::Struct {
        fields: vec![
            Field::new("count", ValueType::Int64, false),
            Field::new(
                "names",
                ValueType::List {
                    item: Box::new(ValueType::Utf8),
                },
                true,
            ),
        ],
    }
}

fn begin(session: &mut TypedSession<impl SubtaskSession>, epoch: u64) {
    let final_epoch = (epoch > 1).then(|| Epoch(epoch - 1));
    session
        .begin(Epoch(epoch), Attempt(0), final_epoch)
        .expect("begins");
}

#[test]
fn values_round_trip_and_keys_get_spark_key_groups() {
    let dir = TempDir::new().expect("temp dir");
    let shared = operator(&dir, 1);
    let mut session = TypedSession::new(shared.session(0).expect("subtask 0"));
    begin(&mut session, 1);
    let descriptor = StateDescriptor::new("row", StateKind::Value, row()).expect("valid");
    let state = session.register_state(&descriptor).expect("registers");

    let keys = [Value::Utf8("eu".into()), Value::Utf8("us".into())];
    let batch = session.keys(keys.iter(), None).expect("keys");
    let groups: Vec<u16> = keys
        .iter()
        .map(|k| key_group_of(std::slice::from_ref(k), max()).0)
        .collect();
    assert_eq!(batch.key_groups().values().to_vec(), groups);

    let value = Value::Struct(vec![
        Value::Int64(3),
        Value::List(vec![Value::Utf8("a".into()), Value::Null]),
    ]);
    session
        .put_values(state, &batch, [&value, &Value::Null])
        .expect("writes");
    let read = session
        .get_values(state, &batch, &mut ValueTree::<HostError>::default())
        .expect("reads");
    assert_eq!(read, vec![value, Value::Null]);
}

#[test]
fn a_value_that_does_not_fit_names_the_state_and_the_part() {
    let dir = TempDir::new().expect("temp dir");
    let shared = operator(&dir, 1);
    let mut session = TypedSession::new(shared.session(0).expect("subtask 0"));
    begin(&mut session, 1);
    let descriptor = StateDescriptor::new("row", StateKind::Value, row()).expect("valid");
    let state = session.register_state(&descriptor).expect("registers");
    let batch = session.keys([&Value::Int64(1)], None).expect("keys");
    let bad = Value::Struct(vec![Value::Int64(3), Value::List(vec![Value::Int64(4)])]);
    let err = session
        .put_values(state, &batch, [&bad])
        .expect_err("names are strings");
    match err {
        HostError::Types(TypesError::ValueMismatch(mismatch)) => {
            assert_eq!(mismatch.state, "row");
            assert_eq!(mismatch.path, "item 0 of field 'names' of ");
            assert_eq!(mismatch.part_type, ValueType::Utf8);
        }
        other => panic!("not a value mismatch: {other}"),
    }
}

#[test]
fn the_first_key_decides_the_key_types_of_every_subtask() {
    let dir = TempDir::new().expect("temp dir");
    let shared = operator(&dir, 2);
    let mut first = TypedSession::new(shared.session(0).expect("subtask 0"));
    let mut second = TypedSession::new(shared.session(1).expect("subtask 1"));
    first.keys([&Value::Int64(7)], None).expect("learns int64");
    // The other subtask has seen no key, but the operator's keys are int64.
    let err = second
        .keys([&Value::Utf8("x".into())], None)
        .expect_err("a string key");
    assert!(
        err.to_string()
            .contains("[int64]; they cannot change to [string]"),
        "{err}"
    );
    // A session opened later knows them from the start.
    let mut later = TypedSession::new(shared.session(1).expect("subtask 1"));
    let err = later
        .keys([&Value::Utf8("x".into())], None)
        .expect_err("a string key");
    assert!(
        err.to_string().contains("this operator's keys are int64"),
        "{err}"
    );
}

#[test]
fn given_key_groups_are_checked_and_counted() {
    let dir = TempDir::new().expect("temp dir");
    let shared = operator(&dir, 1);
    let mut session = TypedSession::new(shared.session(0).expect("subtask 0"));
    let keys = [Value::Int64(1), Value::Int64(2)];
    let err = session
        .keys(keys.iter(), Some(&[3]))
        .expect_err("one group");
    assert!(
        err.to_string().contains("got 2 keys but 1 key groups"),
        "{err}"
    );
    let err = session.keys(keys.iter(), Some(&[3, 128])).expect_err("128");
    assert!(
        err.to_string().contains("key group 128 is out of range"),
        "{err}"
    );
    let given = session.keys(keys.iter(), Some(&[3, 4])).expect("keys");
    assert_eq!(given.key_groups().values().to_vec(), vec![3, 4]);
    let key = Value::Struct(vec![Value::Int64(1), Value::Utf8("eu".into())]);
    assert_eq!(
        inferred_key_groups([&key], max()).expect("a key"),
        vec![key_group_of(
            &[Value::Int64(1), Value::Utf8("eu".into())],
            max()
        )]
    );
}

#[test]
fn states_must_be_registered_and_maps_need_user_keys() {
    let dir = TempDir::new().expect("temp dir");
    let shared = operator(&dir, 1);
    let mut session = TypedSession::new(shared.session(0).expect("subtask 0"));
    begin(&mut session, 1);
    let batch = session.keys([&Value::Int64(1)], None).expect("keys");
    let err = session
        .get_values(
            weir_state::StateId(9),
            &batch,
            &mut ValueTree::<HostError>::default(),
        )
        .expect_err("unregistered");
    assert!(err.to_string().contains("not registered"), "{err}");
    let descriptor = StateDescriptor::new("v", StateKind::Value, ValueType::Int64).expect("valid");
    let state = session.register_state(&descriptor).expect("registers");
    let err = session
        .map_entries(state, &batch, &mut ValueTree::<HostError>::default())
        .expect_err("not a map");
    assert!(
        err.to_string().contains("'v'") || err.to_string().contains("\"v\""),
        "{err}"
    );
    let list = StateDescriptor::new("l", StateKind::List, ValueType::Int64).expect("valid");
    let list = session.register_state(&list).expect("registers");
    let err = session
        .append_lists(list, &batch, [[&Value::Null]])
        .expect_err("None item");
    assert!(err.to_string().contains("cannot hold None items"), "{err}");
    assert_eq!(
        redistribution_mode("union").expect("known"),
        RedistributionMode::Union
    );
    assert!(redistribution_mode("even").is_err());
}

#[test]
fn restore_tickets_restore_each_subtask_at_a_new_parallelism() {
    let dir = TempDir::new().expect("temp dir");
    let shared = operator(&dir, 2);
    let descriptor = StateDescriptor::new("n", StateKind::Value, ValueType::Int64).expect("valid");
    let keys: Vec<Value> = (0..50).map(Value::Int64).collect();
    for index in 0..2 {
        let mut session = TypedSession::new(shared.session(index).expect("subtask"));
        begin(&mut session, 1);
        let state = session.register_state(&descriptor).expect("registers");
        let mine: Vec<&Value> = keys
            .iter()
            .filter(|k| {
                let group = key_group_of(std::slice::from_ref(*k), max());
                max().subtask_of(group, 2).expect("valid").0 == index
            })
            .collect();
        let batch = session.keys(mine.iter().copied(), None).expect("keys");
        session
            .put_values(state, &batch, mine.iter().copied())
            .expect("writes");
        session.commit(Epoch(1), Attempt(0)).expect("commits");
    }
    let savepoints = dir.path().join("savepoints");
    let path = shared
        .with(|operator| operator.snapshot(&savepoints.to_string_lossy()))
        .expect("snapshots");
    let location = StorageLocation::parse(&path, &StorageOptions::default()).expect("a path");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let snapshot = runtime
        .block_on(ResolvedSnapshot::open(&location))
        .expect("resolves");
    let job = JobOperator {
        uid: OperatorUid::new("typed").expect("valid"),
        parallelism: 3,
        max_parallelism: max(),
    };
    let tickets = RestoreTicket::plan(&snapshot, &job, &StorageOptions::default())
        .expect("plans")
        .expect("the operator has state");
    assert_eq!(tickets.len(), 3);
    let other = JobOperator {
        uid: OperatorUid::new("other").expect("valid"),
        ..job.clone()
    };
    assert_eq!(
        RestoreTicket::plan(&snapshot, &other, &StorageOptions::default()).expect("plans"),
        None
    );
    for (index, ticket) in tickets.iter().enumerate() {
        assert_eq!(ticket.subtask().0 as usize, index);
        assert_eq!(ticket.cut(), Epoch(1));
        let spec = weir_host::SubtaskSpec {
            uid: job.uid.clone(),
            subtask: weir_types::SubtaskIndex(index as u32),
            parallelism: 3,
            max_parallelism: max(),
            backend: BackendSpec::Heap,
            key_types: None,
        };
        let request = ticket.request(spec.clone(), 0).expect("its own subtask");
        assert_eq!(request.restored_from, ticket.restored_from());
        let wrong = weir_host::SubtaskSpec {
            subtask: weir_types::SubtaskIndex((index as u32 + 1) % 3),
            ..spec
        };
        assert!(ticket.request(wrong, 0).is_err());
    }
}

#[test]
fn int64_key_columns_encode_and_hash_as_every_other_key() {
    // One non-null int64 column takes a shorter path; it must agree with the
    // general one (a struct column of the same values goes that way) byte for
    // byte, with and without given key groups.
    let dir = TempDir::new().expect("temp dir");
    let shared = operator(&dir, 1);
    let mut session = TypedSession::new(shared.session(0).expect("subtask 0"));
    let values: Vec<i64> = [0, 1, -1, 42, i64::MIN, i64::MAX, 1 << 40]
        .into_iter()
        .chain((0..1000).map(|i| i * 2_654_435_761 - 7_000_000))
        .collect();
    let column: ArrayRef = Arc::new(Int64Array::from(values.clone()));
    let fast = session
        .arrow_keys(std::slice::from_ref(&column), None)
        .expect("keys");
    let general = session
        .keys(
            values
                .iter()
                .map(|&v| Value::Int64(v))
                .collect::<Vec<_>>()
                .iter(),
            None,
        )
        .expect("keys");
    assert_eq!(fast.keys(), general.keys());
    assert_eq!(fast.key_groups(), general.key_groups());
    let expected: Vec<u16> = values
        .iter()
        .map(|&v| key_group_of(&[Value::Int64(v)], max()).0)
        .collect();
    assert_eq!(fast.key_groups().values().to_vec(), expected);

    let given: Vec<u32> = (0..values.len() as u32).map(|i| i % 128).collect();
    let groups: ArrayRef = Arc::new(UInt32Array::from(given.clone()));
    let with_groups = session
        .arrow_keys(std::slice::from_ref(&column), Some(groups.as_ref()))
        .expect("keys");
    assert_eq!(with_groups.keys(), general.keys());
    let given16: Vec<u16> = given.iter().map(|&g| g as u16).collect();
    assert_eq!(with_groups.key_groups().values().to_vec(), given16);
    let short: ArrayRef = Arc::new(UInt32Array::from(vec![1u32]));
    let err = session
        .arrow_keys(std::slice::from_ref(&column), Some(short.as_ref()))
        .expect_err("one group");
    assert!(
        err.to_string()
            .contains("key groups: pass one key group per key"),
        "{err}"
    );

    // An operator whose keys are strings refuses int64 columns either way.
    let other = TempDir::new().expect("temp dir");
    let mut strings = TypedSession::new(operator(&other, 1).session(0).expect("subtask 0"));
    strings
        .keys([&Value::Utf8("x".into())], None)
        .expect("learns string");
    let err = strings.arrow_keys(&[column], None).expect_err("int64 keys");
    assert!(err.to_string().contains("string"), "{err}");
}
