//! The vectorized paths of the in-process engine on heap and RocksDB:
//! `get_batch` / `put_batch` between Arrow arrays and encoded state, and the
//! native aggregates folded over whole batches.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array,
    StringArray, StructArray,
};
use arrow_schema::DataType;
use weir_host::engine::{Subtask, accumulator_type};
use weir_host::{Aggregation, BackendSpec, KeyBatch, NativeAggregate, SubtaskSession, SubtaskSpec};
use weir_state::StateId;
use weir_types::{
    Attempt, Epoch, Field, MaxParallelism, OperatorUid, StateDescriptor, StateKind, SubtaskIndex,
    Value, ValueType, decode_value, encode_key, key_group_of,
};

const BACKENDS: [BackendSpec; 2] = [BackendSpec::Heap, BackendSpec::RocksDb];

fn open(backend: BackendSpec, dir: &std::path::Path) -> Subtask {
    let spec = SubtaskSpec {
        uid: OperatorUid::new("op").expect("valid uid"),
        subtask: SubtaskIndex(0),
        parallelism: 1,
        max_parallelism: MaxParallelism::new(128).expect("valid"),
        backend,
        key_types: Some(vec![ValueType::Utf8]),
    };
    let mut s = Subtask::open(spec, dir).expect("opens");
    s.begin(Epoch(1), Attempt(0), None).expect("begins");
    s
}

fn keys(names: &[&str]) -> KeyBatch {
    let max = MaxParallelism::new(128).expect("valid");
    let encoded: Vec<(weir_types::KeyGroup, Vec<u8>)> = names
        .iter()
        .map(|n| {
            let cols = [Value::Utf8((*n).to_owned())];
            let mut bytes = Vec::new();
            encode_key(&cols, &[ValueType::Utf8], &mut bytes).expect("encodes");
            (key_group_of(&cols, max), bytes)
        })
        .collect();
    KeyBatch::from_pairs(encoded.iter().map(|(g, k)| (*g, k.as_slice())))
}

fn register(s: &mut Subtask, name: &str, kind: StateKind, ty: ValueType) -> StateId {
    s.register_state(&StateDescriptor::new(name, kind, ty).expect("valid"))
        .expect("registers")
}

/// Writes `values` for keys a, b, c with `put_batch` and reads them back
/// with `get_batch` (for keys a, b, c, d; d was never written).
fn round_trip(s: &mut Subtask, state: StateId, values: ArrayRef) -> ArrayRef {
    s.put_batch(state, &keys(&["a", "b", "c"]), &values)
        .expect("writes");
    s.get_batch(state, &keys(&["a", "b", "c", "d"]))
        .expect("reads")
}

#[test]
fn primitive_and_string_batches_round_trip() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let cases: Vec<(ValueType, ArrayRef)> = vec![
            (
                ValueType::Boolean,
                Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
            ),
            (
                ValueType::Int32,
                Arc::new(Int32Array::from(vec![Some(1), None, Some(-3)])),
            ),
            (
                ValueType::Int64,
                Arc::new(Int64Array::from(vec![Some(i64::MAX), None, Some(-3)])),
            ),
            (
                ValueType::Float32,
                Arc::new(Float32Array::from(vec![Some(1.5), None, Some(-0.25)])),
            ),
            (
                ValueType::Float64,
                Arc::new(Float64Array::from(vec![Some(1e300), None, Some(-0.5)])),
            ),
            (
                ValueType::Utf8,
                Arc::new(StringArray::from(vec![Some("héllo"), None, Some("")])),
            ),
            (
                ValueType::Binary,
                Arc::new(BinaryArray::from(vec![
                    Some(&b"\x00\x01"[..]),
                    None,
                    Some(&b""[..]),
                ])),
            ),
            (
                ValueType::Pickle,
                Arc::new(BinaryArray::from(vec![
                    Some(&b"\x80\x04"[..]),
                    None,
                    Some(&b"x"[..]),
                ])),
            ),
        ];
        for (i, (ty, values)) in cases.into_iter().enumerate() {
            let state = register(&mut s, &format!("v{i}"), StateKind::Value, ty.clone());
            let got = round_trip(&mut s, state, Arc::clone(&values));
            assert_eq!(got.len(), 4);
            assert_eq!(
                got.slice(0, 3).as_ref(),
                values.as_ref(),
                "{backend:?} {ty}"
            );
            assert!(got.is_null(3), "{backend:?} {ty}: never written");
        }
        // The typed reads decode exactly what was stored.
        let state = register(&mut s, "ints", StateKind::Value, ValueType::Int64);
        let got = round_trip(&mut s, state, Arc::new(Int64Array::from(vec![7, 8, 9])));
        assert_eq!(got.as_primitive::<Int64Type>().values()[..3], [7, 8, 9]);
        let raw = s.get_values(state, &keys(&["b"])).expect("reads");
        assert_eq!(
            decode_value(raw.value(0), &ValueType::Int64).expect("decodes"),
            Value::Int64(8)
        );
    }
}

#[test]
fn struct_batches_round_trip_with_null_fields_and_rows() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let ty = ValueType::Struct {
            fields: vec![
                Field::new("count", ValueType::Int64, false),
                Field::new("sum", ValueType::Float64, false),
                Field::new("label", ValueType::Utf8, true),
            ],
        };
        let state = register(&mut s, "acc", StateKind::Aggregating, ty.clone());
        let DataType::Struct(fields) = ty.to_arrow() else {
            panic!("a struct type")
        };
        let values: ArrayRef = Arc::new(StructArray::new(
            fields,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 0])),
                Arc::new(Float64Array::from(vec![0.5, 1.5, 0.0])),
                Arc::new(StringArray::from(vec![Some("x"), None, None])),
            ],
            Some(vec![true, true, false].into()),
        ));
        let got = round_trip(&mut s, state, Arc::clone(&values));
        let got = got.as_struct();
        assert_eq!(got.len(), 4);
        assert!(got.is_valid(0) && got.is_valid(1), "{backend:?}");
        assert!(got.is_null(2) && got.is_null(3), "{backend:?}");
        assert_eq!(got.column(0).as_primitive::<Int64Type>().value(1), 2);
        assert_eq!(got.column(1).as_primitive::<Float64Type>().value(0), 0.5);
        assert_eq!(got.column(2).as_string::<i32>().value(0), "x");
        assert!(got.column(2).is_null(1), "a null field stays null");
    }
}

fn ints(values: &[Option<i64>]) -> ArrayRef {
    Arc::new(Int64Array::from(values.to_vec()))
}

fn read_ints(s: &mut Subtask, state: StateId, names: &[&str]) -> Vec<Option<i64>> {
    let got = s.get_batch(state, &keys(names)).expect("reads");
    got.as_primitive::<Int64Type>().iter().collect()
}

/// A write after a batch read reuses where the read found its entries
/// (heap), so a write of other keys, of another state or of another length
/// must still land on its own keys.
#[test]
fn a_batch_write_after_a_batch_read_writes_its_own_keys() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let n = register(&mut s, "n", StateKind::Value, ValueType::Int64);
        let m = register(&mut s, "m", StateKind::Value, ValueType::Int64);
        let abc = ["a", "b", "c"];
        s.put_batch(n, &keys(&abc), &ints(&[Some(1), Some(2), Some(3)]))
            .expect("writes");

        read_ints(&mut s, n, &abc);
        s.put_batch(
            n,
            &keys(&["c", "a", "b"]),
            &ints(&[Some(30), Some(10), Some(20)]),
        )
        .expect("writes other keys");
        assert_eq!(
            read_ints(&mut s, n, &abc),
            [Some(10), Some(20), Some(30)],
            "{backend:?}"
        );

        s.put_batch(m, &keys(&abc), &ints(&[Some(7), Some(8), Some(9)]))
            .expect("writes another state");
        assert_eq!(
            read_ints(&mut s, n, &abc),
            [Some(10), Some(20), Some(30)],
            "{backend:?}"
        );
        assert_eq!(
            read_ints(&mut s, m, &abc),
            [Some(7), Some(8), Some(9)],
            "{backend:?}"
        );

        read_ints(&mut s, n, &["a", "a", "b", "d"]);
        s.put_batch(
            n,
            &keys(&["a", "a", "b", "d"]),
            &ints(&[Some(5), Some(6), None, Some(4)]),
        )
        .expect("writes the keys it read");
        s.put_batch(
            n,
            &keys(&["a", "a", "b", "d"]),
            &ints(&[Some(5), Some(6), None, Some(4)]),
        )
        .expect("writes them again");
        assert_eq!(
            read_ints(&mut s, n, &["a", "b", "c", "d"]),
            [Some(6), None, Some(30), Some(4)],
            "{backend:?}: later rows win and a null clears"
        );
        s.put_batch(n, &keys(&["b", "c"]), &ints(&[Some(2), None]))
            .expect("writes fewer rows");
        assert_eq!(
            read_ints(&mut s, n, &["b", "c"]),
            [Some(2), None],
            "{backend:?}"
        );
    }
}

#[test]
fn batches_of_the_wrong_type_or_length_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = open(BackendSpec::Heap, dir.path());
    let state = register(&mut s, "count", StateKind::Value, ValueType::Int64);
    s.put_batch(
        state,
        &keys(&["a"]),
        &(Arc::new(Int64Array::from(vec![1])) as ArrayRef),
    )
    .expect("writes");
    let err = s
        .put_batch(
            state,
            &keys(&["a"]),
            &(Arc::new(StringArray::from(vec!["1"])) as ArrayRef),
        )
        .expect_err("wrong type");
    assert!(err.to_string().contains("\"count\" holds int64"), "{err}");
    let err = s
        .put_batch(
            state,
            &keys(&["a", "b"]),
            &(Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        )
        .expect_err("wrong length");
    assert!(err.to_string().contains("one per key"), "{err}");
    let got = s.get_batch(state, &keys(&["a"])).expect("reads");
    assert_eq!(got.as_primitive::<Int64Type>().value(0), 1);

    let list = register(
        &mut s,
        "items",
        StateKind::Value,
        ValueType::List {
            item: Box::new(ValueType::Int64),
        },
    );
    let err = s
        .get_batch(list, &keys(&["a"]))
        .expect_err("lists unsupported");
    assert!(err.to_string().contains("get_values"), "{err}");
}

fn aggregate(
    s: &mut Subtask,
    state: StateId,
    names: &[&str],
    inputs: ArrayRef,
    function: NativeAggregate,
) -> ArrayRef {
    s.aggregate(state, &keys(names), &inputs, function.into())
        .expect("aggregates")
}

#[test]
fn native_aggregates_accumulate_repeated_keys_in_row_order() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let ints =
            || -> ArrayRef { Arc::new(Int64Array::from(vec![Some(5), Some(-2), None, Some(9)])) };
        let floats = || -> ArrayRef {
            Arc::new(Float64Array::from(vec![
                Some(1.5),
                Some(-2.0),
                None,
                Some(4.5),
            ]))
        };
        let names = ["a", "b", "a", "a"];
        let state_for = |s: &mut Subtask, name: &str, f, input: &ValueType| {
            register(
                s,
                name,
                StateKind::Aggregating,
                accumulator_type(f, input).expect("typed"),
            )
        };

        let count = state_for(&mut s, "count", NativeAggregate::Count, &ValueType::Int64);
        let got = aggregate(&mut s, count, &names, ints(), NativeAggregate::Count);
        // a: 1, b: 1, a (null input, skipped): 1, a: 2
        assert_eq!(
            got.as_primitive::<Int64Type>().values()[..],
            [1, 1, 1, 2],
            "{backend:?}"
        );

        let sum = state_for(&mut s, "sum", NativeAggregate::Sum, &ValueType::Int64);
        let got = aggregate(&mut s, sum, &names, ints(), NativeAggregate::Sum);
        assert_eq!(
            got.as_primitive::<Int64Type>().values()[..],
            [5, -2, 5, 14],
            "{backend:?}"
        );
        // The next batch continues from the stored accumulators.
        let got = aggregate(
            &mut s,
            sum,
            &["a"],
            Arc::new(Int64Array::from(vec![1])),
            NativeAggregate::Sum,
        );
        assert_eq!(got.as_primitive::<Int64Type>().value(0), 15);

        let fsum = state_for(&mut s, "fsum", NativeAggregate::Sum, &ValueType::Float64);
        let got = aggregate(&mut s, fsum, &names, floats(), NativeAggregate::Sum);
        assert_eq!(
            got.as_primitive::<Float64Type>().values()[..],
            [1.5, -2.0, 1.5, 6.0]
        );

        let min = state_for(&mut s, "min", NativeAggregate::Min, &ValueType::Int64);
        let got = aggregate(&mut s, min, &names, ints(), NativeAggregate::Min);
        assert_eq!(got.as_primitive::<Int64Type>().values()[..], [5, -2, 5, 5]);

        let max = state_for(&mut s, "max", NativeAggregate::Max, &ValueType::Float64);
        let got = aggregate(&mut s, max, &names, floats(), NativeAggregate::Max);
        assert_eq!(
            got.as_primitive::<Float64Type>().values()[..],
            [1.5, -2.0, 1.5, 4.5]
        );

        let mean = state_for(&mut s, "mean", NativeAggregate::Mean, &ValueType::Int64);
        let got = aggregate(&mut s, mean, &names, ints(), NativeAggregate::Mean);
        assert_eq!(
            got.as_primitive::<Float64Type>().values()[..],
            [5.0, -2.0, 5.0, 7.0]
        );
        // The accumulator is a readable struct {sum, count}.
        let acc = s.get_batch(mean, &keys(&["a"])).expect("reads");
        let acc = acc.as_struct();
        assert_eq!(acc.column(0).as_primitive::<Float64Type>().value(0), 14.0);
        assert_eq!(acc.column(1).as_primitive::<Int64Type>().value(0), 2);

        // A null input on a key without an accumulator yields null.
        let got = aggregate(
            &mut s,
            count,
            &["z"],
            Arc::new(Int64Array::from(vec![None])),
            NativeAggregate::Count,
        );
        assert!(got.is_null(0));

        // A retried epoch drops the aggregates of the failed attempt.
        s.commit(Epoch(1), Attempt(0)).expect("commits");
        s.begin(Epoch(2), Attempt(0), Some(Epoch(1)))
            .expect("begins");
        aggregate(
            &mut s,
            sum,
            &["a"],
            Arc::new(Int64Array::from(vec![100])),
            NativeAggregate::Sum,
        );
        s.begin(Epoch(2), Attempt(1), None).expect("retries");
        let got = aggregate(
            &mut s,
            sum,
            &["a"],
            Arc::new(Int64Array::from(vec![1])),
            NativeAggregate::Sum,
        );
        assert_eq!(got.as_primitive::<Int64Type>().value(0), 16, "{backend:?}");
    }
}

/// Why the aggregate of `inputs` for keys `names` is refused.
fn refusal(
    s: &mut Subtask,
    state: StateId,
    names: &[&str],
    inputs: ArrayRef,
    aggregation: impl Into<Aggregation>,
) -> String {
    s.aggregate(state, &keys(names), &inputs, aggregation.into())
        .expect_err("refused")
        .to_string()
}

#[test]
fn aggregates_check_accumulator_types_and_inputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = open(BackendSpec::Heap, dir.path());
    let wrong = register(&mut s, "total", StateKind::Value, ValueType::Float64);
    // A float64 accumulator for int64 sums.
    let ints = Arc::new(Int64Array::from(vec![1]));
    let message = refusal(&mut s, wrong, &["a"], ints, NativeAggregate::Sum);
    assert!(message.contains("\"total\" holds float64"), "{message}");
    assert!(message.contains("int64 accumulator"), "{message}");
    let strings = Arc::new(StringArray::from(vec!["1"]));
    let err = refusal(&mut s, wrong, &["a"], strings, NativeAggregate::Sum);
    assert!(err.contains("Int64 or Float64"), "{err}");
    let mean = register(&mut s, "mean", StateKind::Value, ValueType::Int64);
    let floats = Arc::new(Float64Array::from(vec![1.0]));
    let err = refusal(&mut s, mean, &["a"], floats, NativeAggregate::Mean);
    assert!(err.contains("struct<sum: float64, count: int64>"), "{err}");
    let overflow = register(&mut s, "big", StateKind::Value, ValueType::Int64);
    let big = Arc::new(Int64Array::from(vec![i64::MAX, 1]));
    let err = refusal(&mut s, overflow, &["a", "a"], big, NativeAggregate::Sum);
    assert!(err.contains("overflowed"), "{err}");
    assert!(accumulator_type(NativeAggregate::Sum, &ValueType::Utf8).is_err());
}

/// The model of a tumbling count window: per key, the sum of each full
/// window of `size` non-null inputs at the row that fills it.
fn windowed_sums(names: &[&str], inputs: &[Option<i64>], size: usize) -> Vec<Option<i64>> {
    let mut open: std::collections::HashMap<&str, Vec<i64>> = Default::default();
    names
        .iter()
        .zip(inputs)
        .map(|(name, input)| {
            let window = open.entry(name).or_default();
            window.push((*input)?);
            (window.len() == size).then(|| window.drain(..).sum())
        })
        .collect()
}

#[test]
fn count_windows_emit_at_the_filling_row_and_start_over() {
    let size = 3;
    let window = Aggregation::parse("sum", Some(size)).expect("valid");
    let names = ["a", "b", "a", "a", "b", "a", "a", "a", "b"];
    let values = [
        Some(1),
        Some(10),
        Some(2),
        Some(3),
        None,
        Some(4),
        Some(5),
        Some(6),
        Some(20),
    ];
    for backend in BACKENDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = open(backend.clone(), dir.path());
        let ty = accumulator_type(window, &ValueType::Int64).expect("typed");
        assert_eq!(ty.to_string(), "struct<filled: int64, acc: int64>");
        let state = register(&mut s, "window", StateKind::Value, ty);
        let mut got = Vec::new();
        // Two batches: a window left open by the first one goes on in the next.
        for range in [0..4, 4..names.len()] {
            let inputs: ArrayRef = Arc::new(Int64Array::from(values[range.clone()].to_vec()));
            let out = s
                .aggregate(state, &keys(&names[range]), &inputs, window)
                .expect("aggregates");
            got.extend(out.as_primitive::<Int64Type>().iter());
        }
        let expected = windowed_sums(&names, &values, size as usize);
        assert_eq!(got, expected, "{backend:?}");
        assert_eq!(
            expected,
            [None, None, None, Some(6), None, None, None, Some(15), None]
        );
        // a filled two windows and holds nothing; b holds its open window.
        let open_windows = s.get_batch(state, &keys(&["a", "b"])).expect("reads");
        let open_windows = open_windows.as_struct();
        assert!(open_windows.is_null(0), "{backend:?}");
        let filled = open_windows.column(0).as_primitive::<Int64Type>().value(1);
        let acc = open_windows.column(1).as_primitive::<Int64Type>().value(1);
        assert_eq!((filled, acc), (2, 30), "{backend:?}");
    }
}

#[test]
fn count_windows_check_their_size_and_state_type() {
    let err = Aggregation::parse("sum", Some(0)).expect_err("empty window");
    assert!(err.to_string().contains("at least 1 row"), "{err}");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = open(BackendSpec::Heap, dir.path());
    let running = register(&mut s, "running", StateKind::Value, ValueType::Int64);
    // A window needs the open window's state.
    let pairs = Aggregation::parse("sum", Some(2)).expect("valid");
    let message = refusal(
        &mut s,
        running,
        &["a"],
        Arc::new(Int64Array::from(vec![1])),
        pairs,
    );
    assert!(message.contains("in count windows of 2"), "{message}");
    assert!(
        message.contains("struct<filled: int64, acc: int64>"),
        "{message}"
    );
}
