//! Keys with types: which types a key's columns have, and their encoding.
//!
//! An operator's keys all have the same column types. They are declared when
//! a session attaches to a state host, or learned from the first key an
//! in-process operator sees; a later key of other types is an error that
//! names both.

use weir_types::{
    KeyGroup, MaxParallelism, TypesError, Value, ValueSource, ValueType, encode_key_column,
    hash_encoded_key,
};

use crate::session::render_types;

/// A key as a language binding hands it over: one column, or a composite of
/// several.
pub trait KeySource: ValueSource {
    /// The columns of a composite key, or `None` for a key of one column.
    fn columns(&self) -> Option<Self::Items>;
    /// The type this value gives a key column when the operator declares
    /// none, or why it cannot be a key column.
    fn column_type(&self) -> Result<ValueType, &'static str>;
}

const NULL_COLUMN: &str =
    "a key (column) may not be None: map missing keys to a value in the key selector";

/// The column types of `key` when none are declared: one per column of a
/// composite key, else its own.
pub(crate) fn inferred_types<K: KeySource>(key: &K) -> Result<Vec<ValueType>, TypesError> {
    let column_type = |column: &K| {
        if column.is_null() {
            return Err(invalid(key, NULL_COLUMN));
        }
        column.column_type().map_err(|reason| invalid(key, reason))
    };
    match key.columns() {
        Some(columns) if columns.len() == 0 => {
            Err(invalid(key, "an empty tuple has no key columns"))
        }
        Some(columns) => columns.map(|column| column_type(&column)).collect(),
        None => Ok(vec![column_type(key)?]),
    }
}

/// Appends the encoding of `key` as a key of column `types` to `out`.
pub(crate) fn encode_typed_key<K: KeySource>(
    key: &K,
    types: &[ValueType],
    out: &mut Vec<u8>,
) -> Result<(), TypesError> {
    let mut column = |column: &K, ty: &ValueType| {
        if column.is_null() {
            return Err(invalid(key, NULL_COLUMN));
        }
        encode_key_column(column, ty, out).map_err(|_| mismatch(key, types))
    };
    match types {
        [ty] => column(key, ty),
        _ => match key.columns() {
            Some(columns) if columns.len() == types.len() => columns
                .zip(types)
                .try_for_each(|(value, ty)| column(&value, ty)),
            _ => Err(mismatch(key, types)),
        },
    }
}

/// The key group of each key, its column types inferred as an operator
/// without declared key types infers them: Spark's `pmod(hash(columns), max)`.
pub fn inferred_key_groups<K: KeySource>(
    keys: impl IntoIterator<Item = K>,
    max: MaxParallelism,
) -> Result<Vec<KeyGroup>, TypesError> {
    let mut encoded = Vec::new();
    keys.into_iter()
        .map(|key| {
            encoded.clear();
            let types = inferred_types(&key)?;
            encode_typed_key(&key, &types, &mut encoded)?;
            encoded_key_group(&encoded, &types, max)
        })
        .collect()
}

/// The key group of an encoded key (Spark's hash of its typed columns).
pub(crate) fn encoded_key_group(
    encoded: &[u8],
    types: &[ValueType],
    max: MaxParallelism,
) -> Result<KeyGroup, TypesError> {
    Ok(max.key_group_of_hash(hash_encoded_key(encoded, types)?))
}

fn invalid<K: KeySource>(key: &K, reason: &'static str) -> TypesError {
    TypesError::InvalidKey {
        key: key.describe(),
        reason,
    }
}

/// A key that does not fit `known`: names the key's own types, or says why
/// it is no key at all.
fn mismatch<K: KeySource>(key: &K, known: &[ValueType]) -> TypesError {
    match inferred_types(key) {
        Err(invalid) => invalid,
        Ok(found) => TypesError::KeyTypeMismatch {
            key: key.describe(),
            types: render_types(&found),
            known: render_types(known),
        },
    }
}

/// A [`Value`] key: a struct is a composite key of its fields, anything else
/// a column of its own type.
impl KeySource for &Value {
    fn columns(&self) -> Option<Self::Items> {
        match self {
            Value::Struct(columns) => Some(columns.iter()),
            _ => None,
        }
    }

    fn column_type(&self) -> Result<ValueType, &'static str> {
        Ok(match self {
            Value::Boolean(_) => ValueType::Boolean,
            Value::Int32(_) => ValueType::Int32,
            Value::Int64(_) => ValueType::Int64,
            Value::Float32(_) => ValueType::Float32,
            Value::Float64(_) => ValueType::Float64,
            Value::Utf8(_) => ValueType::Utf8,
            Value::Binary(_) => ValueType::Binary,
            Value::Null | Value::List(_) | Value::Struct(_) => {
                return Err("a key column is a scalar: a boolean, number, string or bytes");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use weir_types::key_group_of;

    use super::*;

    fn max() -> MaxParallelism {
        MaxParallelism::new(128).expect("valid")
    }

    #[test]
    fn inferred_key_groups_are_spark_hashes_of_the_columns() {
        let key = Value::Struct(vec![Value::Int64(7), Value::Utf8("eu".into())]);
        let columns = [Value::Int64(7), Value::Utf8("eu".into())];
        assert_eq!(
            inferred_key_groups([&key], max()).expect("a key"),
            vec![key_group_of(&columns, max())]
        );
    }

    #[test]
    fn keys_of_other_types_name_both() {
        let known = [ValueType::Int64];
        let mut out = Vec::new();
        let err = encode_typed_key(&&Value::Utf8("x".into()), &known, &mut out)
            .expect_err("a string is no int64");
        assert_eq!(
            err.to_string(),
            "key \"x\" has columns of type string, but this operator's keys are int64: a key \
             selector must return keys of one type"
        );
        let err = encode_typed_key(&&Value::Null, &known, &mut out).expect_err("null");
        assert!(err.to_string().contains("may not be None"), "{err}");
        let err = inferred_types(&&Value::Struct(Vec::new())).expect_err("no columns");
        assert!(err.to_string().contains("empty tuple"), "{err}");
    }
}
