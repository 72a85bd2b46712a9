//! Spark's hash and key-group assignment for `weir.key_groups`.
//!
//! Converts Python arguments into `weir_types` values and back; the hash and
//! the Flink range arithmetic live in `weir_types`.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes};
use weir_types::{
    KeyGroup, KeyGroupRange, MaxParallelism, SubtaskIndex, TypesError, Value, hash_values,
};

use crate::errors::PyWeirError;

/// Spark's `hash(col1, col2, ...)` (Murmur3, seed 42) over key values typed by Spark type names.
///
/// `None` is SQL null and leaves the hash unchanged, as in Spark.
#[pyfunction]
pub(crate) fn spark_hash(
    values: Vec<Bound<'_, PyAny>>,
    types: Vec<String>,
) -> Result<i32, PyWeirError> {
    if values.len() != types.len() {
        return Err(PyWeirError::ColumnCountMismatch {
            values: values.len(),
            types: types.len(),
        });
    }
    if values.is_empty() {
        return Err(PyWeirError::NoKeyColumns);
    }
    let columns = values
        .iter()
        .zip(&types)
        .enumerate()
        .map(|(index, (value, name))| ColumnType::parse(name)?.to_value(index, value))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(hash_values(&columns))
}

/// The key group of a Spark hash: `pmod(hash, max_parallelism)`.
#[pyfunction]
pub(crate) fn key_group_for_hash(hash: i64, max_parallelism: i64) -> Result<u16, PyWeirError> {
    let hash = i32::try_from(hash).map_err(|_| PyWeirError::IntegerOutOfRange {
        argument: "hash",
        got: hash,
        min: i32::MIN.into(),
        max: i32::MAX.into(),
    })?;
    Ok(max_parallelism_arg(max_parallelism)?
        .key_group_of_hash(hash)
        .0)
}

/// The key groups `(start, end)`, end exclusive, that `subtask` owns at `parallelism`.
#[pyfunction]
pub(crate) fn key_group_range(
    max_parallelism: i64,
    parallelism: i64,
    subtask: i64,
) -> Result<(u32, u32), PyWeirError> {
    let range = KeyGroupRange::for_subtask(
        max_parallelism_arg(max_parallelism)?,
        u32_arg("parallelism", parallelism)?,
        SubtaskIndex(u32_arg("subtask", subtask)?),
    )?;
    Ok((range.start(), range.end()))
}

/// The subtask that owns `key_group` at `parallelism`.
#[pyfunction]
pub(crate) fn subtask_for_key_group(
    max_parallelism: i64,
    parallelism: i64,
    key_group: i64,
) -> Result<u32, PyWeirError> {
    let max = max_parallelism_arg(max_parallelism)?;
    let key_group = u32_arg("key_group", key_group)?;
    // Key groups are u16 in the core; a larger value is out of range for any max parallelism.
    let key_group = u16::try_from(key_group).map_err(|_| TypesError::InvalidKeyGroup {
        key_group,
        max: max.get(),
    })?;
    Ok(max
        .subtask_of(KeyGroup(key_group), u32_arg("parallelism", parallelism)?)?
        .0)
}

fn u32_arg(argument: &'static str, value: i64) -> Result<u32, PyWeirError> {
    u32::try_from(value).map_err(|_| PyWeirError::IntegerOutOfRange {
        argument,
        got: value,
        min: 0,
        max: u32::MAX.into(),
    })
}

fn max_parallelism_arg(value: i64) -> Result<MaxParallelism, PyWeirError> {
    Ok(MaxParallelism::new(u32_arg("max_parallelism", value)?)?)
}

/// Spark SQL type names accepted for key columns, in the order error messages list them.
const SUPPORTED_TYPES: &str = "int, long, string, binary, double, boolean";

/// A key column's Spark type, which decides how Spark hashes its value.
#[derive(Debug, Clone, Copy)]
enum ColumnType {
    Int,
    Long,
    String,
    Binary,
    Double,
    Boolean,
}

impl ColumnType {
    fn parse(name: &str) -> Result<Self, PyWeirError> {
        Ok(match name {
            "int" => Self::Int,
            "long" => Self::Long,
            "string" => Self::String,
            "binary" => Self::Binary,
            "double" => Self::Double,
            "boolean" => Self::Boolean,
            _ => {
                return Err(PyWeirError::UnknownColumnType {
                    name: name.to_owned(),
                    supported: SUPPORTED_TYPES,
                });
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Int => "int",
            Self::Long => "long",
            Self::String => "string",
            Self::Binary => "binary",
            Self::Double => "double",
            Self::Boolean => "boolean",
        }
    }

    /// What a valid Python value for this type looks like, for error messages.
    fn expected(self) -> &'static str {
        match self {
            Self::Int => "an int in the signed 32-bit range, or None",
            Self::Long => "an int in the signed 64-bit range, or None",
            Self::String => "a str, or None",
            Self::Binary => "bytes or a bytearray, or None",
            Self::Double => "a float, or None",
            Self::Boolean => "a bool, or None",
        }
    }

    fn to_value(self, index: usize, obj: &Bound<'_, PyAny>) -> Result<Value, PyWeirError> {
        if obj.is_none() {
            return Ok(Value::Null);
        }
        let value = match self {
            // `bool` is an `int` subclass in Python, but Spark refuses it in an integer column.
            Self::Int | Self::Long if obj.is_instance_of::<PyBool>() => None,
            Self::Int => obj.extract::<i32>().ok().map(Value::Int32),
            Self::Long => obj.extract::<i64>().ok().map(Value::Int64),
            Self::String => obj.extract::<String>().ok().map(Value::Utf8),
            Self::Binary => {
                if let Ok(bytes) = obj.cast::<PyBytes>() {
                    Some(Value::Binary(bytes.as_bytes().to_vec()))
                } else {
                    obj.cast::<PyByteArray>()
                        .ok()
                        .map(|bytes| Value::Binary(bytes.to_vec()))
                }
            }
            Self::Double => obj.extract::<f64>().ok().map(Value::Float64),
            Self::Boolean => obj.extract::<bool>().ok().map(Value::Boolean),
        };
        value.ok_or_else(|| PyWeirError::ColumnValue {
            index,
            column_type: self.name(),
            value: short_repr(obj),
            expected: self.expected(),
        })
    }
}

/// `repr(obj)` cut to a length that keeps error messages readable.
fn short_repr(obj: &Bound<'_, PyAny>) -> String {
    const MAX_CHARS: usize = 60;
    let repr = obj
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| format!("<{} object>", obj.get_type()));
    if repr.chars().count() <= MAX_CHARS {
        repr
    } else {
        let head: String = repr.chars().take(MAX_CHARS).collect();
        format!("{head}...")
    }
}

/// The key group of each key, with key types inferred as the state engine
/// does (int is Spark's `long`, a tuple a composite key).
#[pyfunction]
pub(crate) fn key_groups_of(
    keys: Vec<Bound<'_, PyAny>>,
    max_parallelism: i64,
) -> Result<Vec<u16>, PyWeirError> {
    let max = max_parallelism_arg(max_parallelism)?;
    keys.iter()
        .map(|key| {
            let (columns, _) = crate::values::key_columns(key)?;
            Ok(weir_types::key_group_of(&columns, max).0)
        })
        .collect()
}
