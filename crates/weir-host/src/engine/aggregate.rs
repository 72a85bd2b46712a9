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
use weir_state::{StateId, ValueUpdate};
use weir_types::{Field, Value, ValueType};

use super::Subtask;
use super::accumulator::{Layout, MAX_NUMBERS, Num, corrupt};
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

    fn num(self) -> Num {
        match self {
            Input::Int(v) => Num::Int(v),
            Input::Float(v) => Num::Float(v),
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

/// A running accumulator: one number, or a mean's sum and count.
#[derive(Clone, Copy)]
enum Acc {
    One(Num),
    Mean { sum: f64, count: i64 },
}

impl Acc {
    /// The accumulator held in `numbers` (the layout's, in order).
    fn read(function: NativeAggregate, numbers: &[Num]) -> Result<Self> {
        match (function, numbers) {
            (NativeAggregate::Mean, [Num::Float(sum), Num::Int(count)]) => Ok(Acc::Mean {
                sum: *sum,
                count: *count,
            }),
            (NativeAggregate::Mean, _) => Err(corrupt(function)),
            (_, [one]) => Ok(Acc::One(*one)),
            _ => Err(corrupt(function)),
        }
    }

    /// Appends its numbers to `out` and returns how many.
    fn write(self, out: &mut [Num]) -> usize {
        match self {
            Acc::One(n) => {
                out[0] = n;
                1
            }
            Acc::Mean { sum, count } => {
                out[0] = Num::Float(sum);
                out[1] = Num::Int(count);
                2
            }
        }
    }

    /// The aggregate it stands for.
    fn result(self, function: NativeAggregate) -> Result<Value> {
        Ok(match self {
            Acc::One(Num::Int(v)) => Value::Int64(v),
            Acc::One(Num::Float(v)) => Value::Float64(v),
            Acc::Mean { sum, count } if count > 0 => Value::Float64(sum / count as f64),
            Acc::Mean { .. } => return Err(corrupt(function)),
        })
    }
}

/// The accumulator after folding `input` into `current`.
fn step(function: NativeAggregate, current: Option<Acc>, input: Input) -> Result<Acc> {
    let overflow = || {
        HostError::InvalidRequest(
            "the int64 sum overflowed; aggregate float64 inputs for sums this large".into(),
        )
    };
    Ok(match (function, current, input) {
        (NativeAggregate::Count, None, _) => Acc::One(Num::Int(1)),
        (NativeAggregate::Count, Some(Acc::One(Num::Int(c))), _) => Acc::One(Num::Int(c + 1)),
        (NativeAggregate::Sum | NativeAggregate::Min | NativeAggregate::Max, None, x) => {
            Acc::One(x.num())
        }
        (NativeAggregate::Sum, Some(Acc::One(Num::Int(a))), Input::Int(x)) => {
            Acc::One(Num::Int(a.checked_add(x).ok_or_else(overflow)?))
        }
        (NativeAggregate::Sum, Some(Acc::One(Num::Float(a))), Input::Float(x)) => {
            Acc::One(Num::Float(a + x))
        }
        (NativeAggregate::Min, Some(Acc::One(Num::Int(a))), Input::Int(x)) => {
            Acc::One(Num::Int(a.min(x)))
        }
        (NativeAggregate::Min, Some(Acc::One(Num::Float(a))), Input::Float(x)) => {
            Acc::One(Num::Float(a.min(x)))
        }
        (NativeAggregate::Max, Some(Acc::One(Num::Int(a))), Input::Int(x)) => {
            Acc::One(Num::Int(a.max(x)))
        }
        (NativeAggregate::Max, Some(Acc::One(Num::Float(a))), Input::Float(x)) => {
            Acc::One(Num::Float(a.max(x)))
        }
        (NativeAggregate::Mean, None, x) => Acc::Mean {
            sum: x.as_f64(),
            count: 1,
        },
        (NativeAggregate::Mean, Some(Acc::Mean { sum, count }), x) => Acc::Mean {
            sum: sum + x.as_f64(),
            count: count + 1,
        },
        _ => return Err(corrupt(function)),
    })
}

/// What a state holds for an aggregation, as numbers: the open window's
/// rows (0 in a running aggregate) and the accumulator, if any.
fn read_state(
    layout: &Layout,
    aggregation: Aggregation,
    bytes: Option<&[u8]>,
) -> Result<(i64, Option<Acc>)> {
    let function = aggregation.function;
    let Some(bytes) = bytes else {
        return Ok((0, None));
    };
    let numbers = layout.decode(bytes, function)?;
    let count = layout.numbers();
    match aggregation.count_window {
        None => Ok((0, Some(Acc::read(function, &numbers[..count])?))),
        Some(_) => match numbers[0] {
            Num::Int(filled) => Ok((filled, Some(Acc::read(function, &numbers[1..count])?))),
            Num::Float(_) => Err(corrupt(function)),
        },
    }
}

/// Encodes the state for `acc` (after `filled` rows of an open window, if
/// the aggregation has windows) into `out`.
fn write_state(
    layout: &Layout,
    aggregation: Aggregation,
    filled: i64,
    acc: Acc,
    out: &mut Vec<u8>,
) -> Result<()> {
    let mut numbers = [Num::Int(0); MAX_NUMBERS];
    let used = match aggregation.count_window {
        None => acc.write(&mut numbers),
        Some(_) => {
            numbers[0] = Num::Int(filled);
            1 + acc.write(&mut numbers[1..])
        }
    };
    layout.encode(&numbers[..used], out, aggregation.function)
}

/// One row's fold over its key's state (`current`): what to do with the
/// state (its new bytes go into `buffer`), and the row's result.
fn fold_row(
    layout: &Layout,
    aggregation: Aggregation,
    current: Option<&[u8]>,
    input: Option<Input>,
    buffer: &mut Vec<u8>,
) -> Result<(ValueUpdate, Option<Value>)> {
    let function = aggregation.function;
    let (filled, current) = read_state(layout, aggregation, current)?;
    let Some(input) = input else {
        // A running aggregate answers a null input with the aggregate so far.
        let so_far = current.map(|acc| acc.result(function)).transpose()?;
        return Ok((ValueUpdate::Keep, so_far));
    };
    let acc = step(function, current, input)?;
    match aggregation.count_window {
        // The row fills its window: the result, and the key starts over.
        Some(window) if filled + 1 >= i64::from(window.get()) => {
            Ok((ValueUpdate::Remove, Some(acc.result(function)?)))
        }
        Some(_) => {
            write_state(layout, aggregation, filled + 1, acc, buffer)?;
            Ok((ValueUpdate::Set, None))
        }
        None => {
            write_state(layout, aggregation, filled + 1, acc, buffer)?;
            Ok((ValueUpdate::Set, Some(acc.result(function)?)))
        }
    }
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
    let layout = Layout::of(&descriptor.value_type)?;
    let name = descriptor.name.clone();
    let mut out = ColumnBuilder::new(&name, &result_type(function, &input_type), keys.len())?;
    // Disjoint borrows: the backend and the reused encoding buffer.
    let Subtask { keyed, scratch, .. } = subtask;
    for i in 0..keys.len() {
        keyed.prefetch_ahead(state, keys, i, &[]);
        let input = reader.get(i);
        if input.is_none() && aggregation.count_window.is_some() {
            // A null input fills no window.
            out.append_null();
            continue;
        }
        let mut row = Ok(None);
        let updated = keyed.update_value(state, keys.key(i), scratch, &mut |current, buffer| {
            let folded = fold_row(&layout, aggregation, current, input, buffer);
            // The fold's own error is returned below; this one only stops the update.
            let decision = folded.as_ref().map(|(decision, _)| *decision).map_err(|_| {
                weir_state::StateError::Corrupt {
                    what: "native aggregate",
                }
            });
            row = folded.map(|(_, result)| result);
            decision
        });
        let result = row?;
        updated?;
        match result {
            Some(value) => out.append(&value)?,
            None => out.append_null(),
        }
    }
    out.finish()
}
