//! Spark's hash and key-group assignment for `weir.key_groups`.
//!
//! Converts Python arguments into `weir_types` values and back; the hash, the
//! Spark column types and the Flink range arithmetic live in `weir_types`,
//! key typing in `weir_host::typed`.

use pyo3::prelude::*;
use weir_host::typed::inferred_key_groups;
use weir_types::{
    KeyGroup, KeyGroupRange, MaxParallelism, SubtaskIndex, TypesError, Value, ValueType,
    decode_value, encode_with, hash_values,
};

use crate::errors::PyWeirError;
use crate::values::{PyValue, cut_repr, python_shape};

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
    let mut encoded = Vec::new();
    let columns = values
        .into_iter()
        .zip(&types)
        .enumerate()
        .map(|(index, (value, name))| {
            let ty = ValueType::of_spark_column(name)?;
            if value.is_none() {
                return Ok(Value::Null);
            }
            encoded.clear();
            encode_with(&PyValue(value.clone()), &ty, &mut encoded).map_err(|_| {
                PyWeirError::ColumnValue {
                    index,
                    column_type: name.clone(),
                    value: cut_repr(&value),
                    expected: python_shape(&ty),
                }
            })?;
            Ok(decode_value(&encoded, &ty)?)
        })
        .collect::<Result<Vec<_>, PyWeirError>>()?;
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

/// The subtask owning each key group at `parallelism`.
#[pyfunction]
pub(crate) fn subtasks_for_key_groups(
    max_parallelism: i64,
    parallelism: i64,
    key_groups: Vec<u16>,
) -> Result<Vec<u32>, PyWeirError> {
    let max = max_parallelism_arg(max_parallelism)?;
    let parallelism = u32_arg("parallelism", parallelism)?;
    key_groups
        .into_iter()
        .map(|group| Ok(max.subtask_of(KeyGroup(group), parallelism)?.0))
        .collect()
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

/// The key group of each key, with key types inferred as the state engine
/// does (int is Spark's `long`, a tuple a composite key).
#[pyfunction]
pub(crate) fn key_groups_of(
    keys: Vec<Bound<'_, PyAny>>,
    max_parallelism: i64,
) -> Result<Vec<u16>, PyWeirError> {
    let max = max_parallelism_arg(max_parallelism)?;
    let groups = inferred_key_groups(keys.into_iter().map(PyValue), max)?;
    Ok(groups.into_iter().map(|group| group.0).collect())
}
