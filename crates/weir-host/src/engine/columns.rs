//! Between encoded state values and Arrow arrays of the state's type (the
//! vectorized `get_batch` / `put_batch` path).
//!
//! Supported: bool, int32, int64, float32, float64, string, binary, pickle
//! (as binary) and structs of those, which covers accumulators such as
//! `(count, sum)`. Lists are refused with a message naming the byte-level
//! methods that handle them.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int32Builder, Int64Builder,
    NullBufferBuilder, StringBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, StructArray};
use arrow_schema::{DataType, Fields};
use weir_types::{Value, ValueType};

use crate::error::{HostError, Result};

/// Appends decoded values to an Arrow array of one [`ValueType`].
pub(crate) enum ColumnBuilder {
    Boolean(BooleanBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Utf8(StringBuilder),
    Binary(BinaryBuilder),
    Struct {
        fields: Fields,
        children: Vec<ColumnBuilder>,
        nulls: NullBufferBuilder,
    },
}

fn unsupported(state: &str, ty: &ValueType) -> HostError {
    HostError::InvalidRequest(format!(
        "state {state:?} holds {ty}; Arrow batches support bool, int32, int64, float32, \
         float64, string, binary, pickle and structs of those; use the encoded-bytes \
         methods (get_values/put_values) for it"
    ))
}

fn mismatch(state: &str, ty: &ValueType, got: &DataType) -> HostError {
    HostError::InvalidRequest(format!(
        "state {state:?} holds {ty} (Arrow {}); the batch is Arrow {got}",
        ty.to_arrow()
    ))
}

impl ColumnBuilder {
    /// A builder for `rows` values of `ty`; `state` names the state in errors.
    pub(crate) fn new(state: &str, ty: &ValueType, rows: usize) -> Result<Self> {
        Ok(match ty {
            ValueType::Boolean => Self::Boolean(BooleanBuilder::with_capacity(rows)),
            ValueType::Int32 => Self::Int32(Int32Builder::with_capacity(rows)),
            ValueType::Int64 => Self::Int64(Int64Builder::with_capacity(rows)),
            ValueType::Float32 => Self::Float32(Float32Builder::with_capacity(rows)),
            ValueType::Float64 => Self::Float64(Float64Builder::with_capacity(rows)),
            ValueType::Utf8 => Self::Utf8(StringBuilder::with_capacity(rows, rows * 8)),
            ValueType::Binary | ValueType::Pickle => {
                Self::Binary(BinaryBuilder::with_capacity(rows, rows * 8))
            }
            ValueType::Struct { fields } => {
                let DataType::Struct(arrow_fields) = ty.to_arrow() else {
                    return Err(unsupported(state, ty));
                };
                Self::Struct {
                    fields: arrow_fields,
                    children: fields
                        .iter()
                        .map(|f| Self::new(state, &f.data_type, rows))
                        .collect::<Result<_>>()?,
                    nulls: NullBufferBuilder::new(rows),
                }
            }
            ValueType::List { .. } => return Err(unsupported(state, ty)),
        })
    }

    /// Appends a null (an absent value, or a null struct field).
    pub(crate) fn append_null(&mut self) {
        match self {
            Self::Boolean(b) => b.append_null(),
            Self::Int32(b) => b.append_null(),
            Self::Int64(b) => b.append_null(),
            Self::Float32(b) => b.append_null(),
            Self::Float64(b) => b.append_null(),
            Self::Utf8(b) => b.append_null(),
            Self::Binary(b) => b.append_null(),
            Self::Struct {
                children, nulls, ..
            } => {
                children.iter_mut().for_each(Self::append_null);
                nulls.append_null();
            }
        }
    }

    /// Appends a decoded value of the builder's type.
    pub(crate) fn append(&mut self, value: &Value) -> Result<()> {
        match (self, value) {
            (this, Value::Null) => this.append_null(),
            (Self::Boolean(b), Value::Boolean(v)) => b.append_value(*v),
            (Self::Int32(b), Value::Int32(v)) => b.append_value(*v),
            (Self::Int64(b), Value::Int64(v)) => b.append_value(*v),
            (Self::Float32(b), Value::Float32(v)) => b.append_value(*v),
            (Self::Float64(b), Value::Float64(v)) => b.append_value(*v),
            (Self::Utf8(b), Value::Utf8(v)) => b.append_value(v),
            (Self::Binary(b), Value::Binary(v)) => b.append_value(v),
            (
                Self::Struct {
                    children, nulls, ..
                },
                Value::Struct(values),
            ) if values.len() == children.len() => {
                for (child, v) in children.iter_mut().zip(values) {
                    child.append(v)?;
                }
                nulls.append_non_null();
            }
            (_, other) => {
                // The decoder produced a value of the state's own type, so
                // this means the stored bytes and the descriptor disagree.
                return Err(HostError::InvalidRequest(format!(
                    "a stored value {other} does not fit the state's Arrow type"
                )));
            }
        }
        Ok(())
    }

    /// The finished array.
    pub(crate) fn finish(self) -> Result<ArrayRef> {
        Ok(match self {
            Self::Boolean(mut b) => Arc::new(b.finish()),
            Self::Int32(mut b) => Arc::new(b.finish()),
            Self::Int64(mut b) => Arc::new(b.finish()),
            Self::Float32(mut b) => Arc::new(b.finish()),
            Self::Float64(mut b) => Arc::new(b.finish()),
            Self::Utf8(mut b) => Arc::new(b.finish()),
            Self::Binary(mut b) => Arc::new(b.finish()),
            Self::Struct {
                fields,
                children,
                mut nulls,
            } => {
                let arrays = children
                    .into_iter()
                    .map(Self::finish)
                    .collect::<Result<Vec<_>>>()?;
                let array = StructArray::try_new(fields, arrays, nulls.finish()).map_err(|e| {
                    HostError::InvalidRequest(format!(
                        "stored values do not form a valid struct array: {e}"
                    ))
                })?;
                Arc::new(array)
            }
        })
    }
}

/// Checks that `array` can be read as values of `ty` (before any row is
/// written, so a wrong batch changes nothing).
pub(crate) fn check_array(state: &str, ty: &ValueType, array: &dyn Array) -> Result<()> {
    let fits = match ty {
        ValueType::Boolean => array.as_boolean_opt().is_some(),
        ValueType::Int32 => array.as_primitive_opt::<Int32Type>().is_some(),
        ValueType::Int64 => array.as_primitive_opt::<Int64Type>().is_some(),
        ValueType::Float32 => array.as_primitive_opt::<Float32Type>().is_some(),
        ValueType::Float64 => array.as_primitive_opt::<Float64Type>().is_some(),
        ValueType::Utf8 => array.as_string_opt::<i32>().is_some(),
        ValueType::Binary | ValueType::Pickle => array.as_binary_opt::<i32>().is_some(),
        ValueType::Struct { fields } => match array.as_struct_opt() {
            Some(s) if s.num_columns() == fields.len() => {
                for (f, column) in fields.iter().zip(s.columns()) {
                    check_array(state, &f.data_type, column.as_ref())?;
                }
                true
            }
            _ => false,
        },
        ValueType::List { .. } => return Err(unsupported(state, ty)),
    };
    if fits {
        Ok(())
    } else {
        Err(mismatch(state, ty, array.data_type()))
    }
}

/// Row `row` of `array` (already checked with [`check_array`]) as a value
/// of `ty`; `Value::Null` for a null.
pub(crate) fn value_at(
    state: &str,
    ty: &ValueType,
    array: &dyn Array,
    row: usize,
) -> Result<Value> {
    if array.is_null(row) {
        return Ok(Value::Null);
    }
    let wrong = || mismatch(state, ty, array.data_type());
    Ok(match ty {
        ValueType::Boolean => Value::Boolean(array.as_boolean_opt().ok_or_else(wrong)?.value(row)),
        ValueType::Int32 => Value::Int32(
            array
                .as_primitive_opt::<Int32Type>()
                .ok_or_else(wrong)?
                .value(row),
        ),
        ValueType::Int64 => Value::Int64(
            array
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(wrong)?
                .value(row),
        ),
        ValueType::Float32 => Value::Float32(
            array
                .as_primitive_opt::<Float32Type>()
                .ok_or_else(wrong)?
                .value(row),
        ),
        ValueType::Float64 => Value::Float64(
            array
                .as_primitive_opt::<Float64Type>()
                .ok_or_else(wrong)?
                .value(row),
        ),
        ValueType::Utf8 => Value::Utf8(
            array
                .as_string_opt::<i32>()
                .ok_or_else(wrong)?
                .value(row)
                .to_owned(),
        ),
        ValueType::Binary | ValueType::Pickle => Value::Binary(
            array
                .as_binary_opt::<i32>()
                .ok_or_else(wrong)?
                .value(row)
                .to_vec(),
        ),
        ValueType::Struct { fields } => {
            let s = array.as_struct_opt().ok_or_else(wrong)?;
            Value::Struct(
                fields
                    .iter()
                    .zip(s.columns())
                    .map(|(f, column)| value_at(state, &f.data_type, column.as_ref(), row))
                    .collect::<Result<_>>()?,
            )
        }
        ValueType::List { .. } => return Err(unsupported(state, ty)),
    })
}
