//! Built-in aggregates folded over a whole batch in Rust.
//!
//! The state (a value or aggregating state the caller registers) holds the
//! accumulator; [`accumulator_type`] says which type it must have:
//!
//! | function | input | accumulator | result per row |
//! |---|---|---|---|
//! | count | int64 or float64 | int64 | int64 |
//! | sum, min, max | int64 or float64 | the input type | the input type |
//! | mean | int64 or float64 | struct<sum: float64, count: int64> | float64 |
//!
//! Null inputs are skipped (the row's result is the aggregate so far, null
//! if there is none yet). Rows apply in order, so a key repeated in one batch
//! accumulates.
//!
//! In tumbling count windows of `n` rows (Flink's `countWindow(n)`) the state
//! holds the open window, `struct<filled: int64, acc: A>` with `A` the
//! accumulator above: a row's result is its window's aggregate if the row
//! fills the window (which then clears the state, so the key's next row opens
//! a new window) and null otherwise; null inputs fill nothing.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef};
use weir_state::{KeyedStateBackend, StateId};
use weir_types::{Field, Value, ValueType, decode_value, encode_value};

use super::Subtask;
use super::columns::ColumnBuilder;
use super::session::check_rows;
use crate::batch::KeyBatch;
use crate::error::{HostError, Result};
use crate::session::{Aggregation, NativeAggregate};

/// The type `aggregation` needs in its state for inputs of type `input`
/// (int64 or float64); see the module docs.
pub fn accumulator_type(
    aggregation: impl Into<Aggregation>,
    input: &ValueType,
) -> Result<ValueType> {
    let aggregation = aggregation.into();
    let running = running_accumulator_type(aggregation.function, input)?;
    Ok(match aggregation.count_window {
        None => running,
        Some(_) => ValueType::Struct {
            fields: vec![
                Field::new("filled", ValueType::Int64, false),
                Field::new("acc", running, false),
            ],
        },
    })
}

fn running_accumulator_type(function: NativeAggregate, input: &ValueType) -> Result<ValueType> {
    if !matches!(input, ValueType::Int64 | ValueType::Float64) {
        return Err(HostError::InvalidRequest(format!(
            "native aggregates take int64 or float64 inputs, not {input}"
        )));
    }
    Ok(match function {
        NativeAggregate::Count => ValueType::Int64,
        NativeAggregate::Sum | NativeAggregate::Min | NativeAggregate::Max => input.clone(),
        NativeAggregate::Mean => ValueType::Struct {
            fields: vec![
                Field::new("sum", ValueType::Float64, false),
                Field::new("count", ValueType::Int64, false),
            ],
        },
    })
}

/// The type of the per-row results of `function` over `input`.
fn result_type(function: NativeAggregate, input: &ValueType) -> ValueType {
    match function {
        NativeAggregate::Count => ValueType::Int64,
        NativeAggregate::Mean => ValueType::Float64,
        NativeAggregate::Sum | NativeAggregate::Min | NativeAggregate::Max => input.clone(),
    }
}

/// Whether a registered accumulator type has the shape `expected` needs:
/// equal, except that struct field names and nullability may differ.
fn same_shape(expected: &ValueType, registered: &ValueType) -> bool {
    match (expected, registered) {
        (ValueType::Struct { fields: e }, ValueType::Struct { fields: r }) => {
            e.len() == r.len()
                && e.iter()
                    .zip(r)
                    .all(|(e, r)| same_shape(&e.data_type, &r.data_type))
        }
        (e, r) => e == r,
    }
}

/// One input row.
#[derive(Clone, Copy)]
enum Input {
    Int(i64),
    Float(f64),
}

impl Input {
    fn as_f64(self) -> f64 {
        match self {
            // Means are float: precision loss above 2^53 is inherent.
            Input::Int(v) => v as f64,
            Input::Float(v) => v,
        }
    }

    fn value(self) -> Value {
        match self {
            Input::Int(v) => Value::Int64(v),
            Input::Float(v) => Value::Float64(v),
        }
    }
}

/// Reads the inputs of an int64 or float64 array.
enum Inputs<'a> {
    Int(&'a arrow_array::Int64Array),
    Float(&'a arrow_array::Float64Array),
}

impl Inputs<'_> {
    fn get(&self, row: usize) -> Option<Input> {
        match self {
            Inputs::Int(a) => a.is_valid(row).then(|| Input::Int(a.value(row))),
            Inputs::Float(a) => a.is_valid(row).then(|| Input::Float(a.value(row))),
        }
    }
}

/// The accumulator after folding `input` into `current`.
fn step(function: NativeAggregate, current: Option<Value>, input: Input) -> Result<Value> {
    let overflow = || {
        HostError::InvalidRequest(
            "the int64 sum overflowed; aggregate float64 inputs for sums this large".into(),
        )
    };
    Ok(match (function, current, input) {
        (NativeAggregate::Count, None, _) => Value::Int64(1),
        (NativeAggregate::Count, Some(Value::Int64(c)), _) => Value::Int64(c + 1),
        (NativeAggregate::Sum | NativeAggregate::Min | NativeAggregate::Max, None, x) => x.value(),
        (NativeAggregate::Sum, Some(Value::Int64(a)), Input::Int(x)) => {
            Value::Int64(a.checked_add(x).ok_or_else(overflow)?)
        }
        (NativeAggregate::Sum, Some(Value::Float64(a)), Input::Float(x)) => Value::Float64(a + x),
        (NativeAggregate::Min, Some(Value::Int64(a)), Input::Int(x)) => Value::Int64(a.min(x)),
        (NativeAggregate::Min, Some(Value::Float64(a)), Input::Float(x)) => {
            Value::Float64(a.min(x))
        }
        (NativeAggregate::Max, Some(Value::Int64(a)), Input::Int(x)) => Value::Int64(a.max(x)),
        (NativeAggregate::Max, Some(Value::Float64(a)), Input::Float(x)) => {
            Value::Float64(a.max(x))
        }
        (NativeAggregate::Mean, None, x) => {
            Value::Struct(vec![Value::Float64(x.as_f64()), Value::Int64(1)])
        }
        (NativeAggregate::Mean, Some(Value::Struct(fields)), x) => match fields.as_slice() {
            [Value::Float64(sum), Value::Int64(count)] => Value::Struct(vec![
                Value::Float64(sum + x.as_f64()),
                Value::Int64(count + 1),
            ]),
            _ => return Err(corrupt(function)),
        },
        _ => return Err(corrupt(function)),
    })
}

fn corrupt(function: NativeAggregate) -> HostError {
    HostError::InvalidRequest(format!(
        "a stored accumulator does not fit the {function:?} aggregate"
    ))
}

/// The aggregate an accumulator stands for.
fn result(function: NativeAggregate, accumulator: &Value) -> Result<Value> {
    Ok(match (function, accumulator) {
        (NativeAggregate::Mean, Value::Struct(fields)) => match fields.as_slice() {
            [Value::Float64(sum), Value::Int64(count)] if *count > 0 => {
                Value::Float64(sum / *count as f64)
            }
            _ => return Err(corrupt(function)),
        },
        (_, v) => v.clone(),
    })
}

/// Folds `inputs` into `state` row by row; returns the result of each row
/// (see the module docs).
pub(super) fn run(
    subtask: &mut Subtask,
    state: StateId,
    keys: &KeyBatch,
    inputs: &ArrayRef,
    aggregation: Aggregation,
) -> Result<ArrayRef> {
    check_rows(keys, inputs.as_ref(), "inputs")?;
    let (reader, input_type) = if let Some(a) = inputs.as_primitive_opt::<Int64Type>() {
        (Inputs::Int(a), ValueType::Int64)
    } else if let Some(a) = inputs.as_primitive_opt::<Float64Type>() {
        (Inputs::Float(a), ValueType::Float64)
    } else {
        return Err(HostError::InvalidRequest(format!(
            "native aggregates take an Int64 or Float64 input array, not {}",
            inputs.data_type()
        )));
    };
    let function = aggregation.function;
    let descriptor = subtask.descriptor_of(state, super::session::VALUE_KINDS, "value")?;
    let accumulator = accumulator_type(aggregation, &input_type)?;
    if !same_shape(&accumulator, &descriptor.value_type) {
        let window = aggregation
            .count_window
            .map_or_else(String::new, |n| format!(" in count windows of {n}"));
        return Err(HostError::InvalidRequest(format!(
            "state {:?} holds {}, but {function:?}{window} over {input_type} keeps a \
             {accumulator} accumulator; register the state with that type",
            descriptor.name, descriptor.value_type
        )));
    }
    let (name, stored_type) = (descriptor.name.clone(), descriptor.value_type.clone());
    let mut out = ColumnBuilder::new(&name, &result_type(function, &input_type), keys.len())?;
    // Disjoint borrows: the backend and the reused encoding buffer.
    let Subtask { keyed, scratch, .. } = subtask;
    let stored = |keyed: &mut dyn KeyedStateBackend, key| -> Result<Option<Value>> {
        keyed
            .get_value(state, key)?
            .map(|bytes| decode_value(&bytes, &stored_type))
            .transpose()
            .map_err(HostError::from)
    };
    for i in 0..keys.len() {
        let key = keys.key(i);
        let input = reader.get(i);
        let Some(window) = aggregation.count_window else {
            let current = stored(keyed.as_mut(), key)?;
            let accumulator = match input {
                Some(input) => {
                    let updated = step(function, current, input)?;
                    scratch.clear();
                    encode_value(&updated, &stored_type, scratch)?;
                    keyed.put_value(state, key, scratch)?;
                    Some(updated)
                }
                None => current,
            };
            match accumulator {
                Some(acc) => out.append(&result(function, &acc)?)?,
                None => out.append_null(),
            }
            continue;
        };
        let Some(input) = input else {
            out.append_null();
            continue;
        };
        let (filled, acc) = open_window(function, stored(keyed.as_mut(), key)?)?;
        let acc = step(function, acc, input)?;
        if filled + 1 == i64::from(window.get()) {
            keyed.clear(state, key)?;
            out.append(&result(function, &acc)?)?;
        } else {
            let open = Value::Struct(vec![Value::Int64(filled + 1), acc]);
            scratch.clear();
            encode_value(&open, &stored_type, scratch)?;
            keyed.put_value(state, key, scratch)?;
            out.append_null();
        }
    }
    out.finish()
}

/// The rows an open window holds and its accumulator (none for a new window).
fn open_window(function: NativeAggregate, stored: Option<Value>) -> Result<(i64, Option<Value>)> {
    match stored {
        None => Ok((0, None)),
        Some(Value::Struct(mut fields)) if fields.len() == 2 => {
            let acc = fields.pop();
            match fields.pop() {
                Some(Value::Int64(filled)) => Ok((filled, acc)),
                _ => Err(corrupt(function)),
            }
        }
        Some(_) => Err(corrupt(function)),
    }
}
