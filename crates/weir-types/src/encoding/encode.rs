//! Encoding: a walk over a [`ValueType`] that asks a [`ValueSource`] for each part.

use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;

use super::write_varint;
use crate::error::{TypesError, ValueMismatch};
use crate::value::Value;
use crate::value_type::{Field, ValueType};

/// A value to encode, asked for the shape its type needs.
///
/// Each accessor returns `None` when the value does not have that shape (an
/// integer asked for a string, an integer out of range); the walk then
/// reports an [`EncodeError`] naming the part. Accessors never fail otherwise,
/// except [`ValueSource::pickled`], whose serializer may.
pub trait ValueSource: Clone {
    /// The items of a list or the fields of a struct, in order.
    type Items: ExactSizeIterator<Item = Self>;
    /// Why [`ValueSource::pickled`] could not serialize the value.
    type Error: fmt::Display;

    /// Whether this is null (absent).
    fn is_null(&self) -> bool;
    /// The value as a boolean.
    fn boolean(&self) -> Option<bool>;
    /// The value as a 32-bit integer, if it fits.
    fn int32(&self) -> Option<i32>;
    /// The value as a 64-bit integer, if it fits.
    fn int64(&self) -> Option<i64>;
    /// The value as a 32-bit float (narrowing is what storing one means).
    fn float32(&self) -> Option<f32>;
    /// The value as a 64-bit float.
    fn float64(&self) -> Option<f64>;
    /// The value as UTF-8 text.
    fn utf8(&self) -> Option<&str>;
    /// The value as bytes.
    fn binary(&self) -> Option<Cow<'_, [u8]>>;
    /// The value serialized as an opaque object of the source's language;
    /// `Ok(None)` when it cannot be one.
    fn pickled(&self) -> Result<Option<Cow<'_, [u8]>>, Self::Error>;
    /// The items of a list value.
    fn list(&self) -> Option<Self::Items>;
    /// The values of the struct `fields`, in their order (a source may find
    /// them by position or by name); `None` unless there is one per field.
    fn fields(&self, fields: &[Field]) -> Option<Self::Items>;
    /// How error messages show the value: short, with its type.
    fn describe(&self) -> String;
}

/// A value, or a part of it, that does not fit the type it is encoded as.
pub struct EncodeError<S: ValueSource> {
    /// Where in the value the part is, e.g. `"field 'count' of item 2 of "`;
    /// empty for the value itself.
    pub path: String,
    /// The type the part had to fit.
    pub expected: ValueType,
    /// The part.
    pub value: S,
    /// Why a part could not be serialized, when that was the problem.
    pub cause: Option<S::Error>,
}

impl<S: ValueSource> EncodeError<S> {
    fn new(value: &S, expected: &ValueType) -> Self {
        Self {
            path: String::new(),
            expected: expected.clone(),
            value: value.clone(),
            cause: None,
        }
    }

    /// The part is inside `part` of the value (errors unwind from the inside out).
    fn within(mut self, part: impl FnOnce() -> String) -> Self {
        self.path.push_str(&part());
        self
    }

    /// The part as error messages show it, with the cause if any.
    pub fn rendered_value(&self) -> String {
        match &self.cause {
            None => self.value.describe(),
            Some(cause) => format!("{} ({cause})", self.value.describe()),
        }
    }

    /// [`TypesError::TypeMismatch`] of the part.
    pub fn into_type_mismatch(self) -> TypesError {
        let mut value = self.rendered_value();
        if value.len() > 64 {
            let cut = (0..=64)
                .rev()
                .find(|&i| value.is_char_boundary(i))
                .unwrap_or(0);
            value.truncate(cut);
        }
        TypesError::TypeMismatch {
            expected: self.expected,
            value,
        }
    }

    /// [`TypesError::ValueMismatch`]: the value written to state `state` of
    /// type `state_type` did not fit.
    pub fn into_value_mismatch(self, state: &str, state_type: &ValueType) -> TypesError {
        TypesError::ValueMismatch(Box::new(ValueMismatch {
            state: state.to_owned(),
            state_type: state_type.clone(),
            value: self.rendered_value(),
            path: self.path,
            part_type: self.expected,
        }))
    }
}

fn write_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    write_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// Appends the encoding of the non-null `source` of type `ty` to `out`. On
/// error, `out` holds part of the value: truncate it to where it was.
pub fn encode_with<S: ValueSource>(
    source: &S,
    ty: &ValueType,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError<S>> {
    let mismatch = || EncodeError::new(source, ty);
    match ty {
        ValueType::Boolean => out.push(u8::from(source.boolean().ok_or_else(mismatch)?)),
        ValueType::Int32 => {
            out.extend_from_slice(&source.int32().ok_or_else(mismatch)?.to_le_bytes())
        }
        ValueType::Int64 => {
            out.extend_from_slice(&source.int64().ok_or_else(mismatch)?.to_le_bytes())
        }
        ValueType::Float32 => {
            out.extend_from_slice(&source.float32().ok_or_else(mismatch)?.to_le_bytes());
        }
        ValueType::Float64 => {
            out.extend_from_slice(&source.float64().ok_or_else(mismatch)?.to_le_bytes());
        }
        ValueType::Utf8 => write_bytes(source.utf8().ok_or_else(mismatch)?.as_bytes(), out),
        ValueType::Binary => write_bytes(&source.binary().ok_or_else(mismatch)?, out),
        ValueType::Pickle => match source.pickled() {
            Ok(Some(bytes)) => write_bytes(&bytes, out),
            Ok(None) => return Err(mismatch()),
            Err(cause) => {
                return Err(EncodeError {
                    cause: Some(cause),
                    ..mismatch()
                });
            }
        },
        ValueType::List { item } => {
            let items = source.list().ok_or_else(mismatch)?;
            write_varint(items.len() as u64, out);
            for (i, element) in items.enumerate() {
                encode_key_column(&element, item, out)
                    .map_err(|e| e.within(|| format!("item {i} of ")))?;
            }
        }
        ValueType::Struct { fields } => {
            let values = source.fields(fields).ok_or_else(mismatch)?;
            if values.len() != fields.len() {
                return Err(mismatch());
            }
            for (field, value) in fields.iter().zip(values) {
                let within = |e: EncodeError<S>| e.within(|| format!("field '{}' of ", field.name));
                if field.nullable {
                    encode_key_column(&value, &field.data_type, out).map_err(within)?;
                } else if value.is_null() {
                    return Err(EncodeError::new(&value, &field.data_type)
                        .within(|| format!("non-nullable field '{}' of ", field.name)));
                } else {
                    encode_with(&value, &field.data_type, out).map_err(within)?;
                }
            }
        }
    }
    Ok(())
}

/// Appends a presence byte and, unless `source` is null, its encoding: one
/// column of a key, a list item or a nullable struct field.
pub fn encode_key_column<S: ValueSource>(
    source: &S,
    ty: &ValueType,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError<S>> {
    if source.is_null() {
        out.push(0);
        Ok(())
    } else {
        out.push(1);
        encode_with(source, ty, out)
    }
}

/// A [`Value`] encodes as the type it has: an `Int32` is no `Int64`.
impl<'a> ValueSource for &'a Value {
    type Items = std::slice::Iter<'a, Value>;
    type Error = Infallible;

    fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    fn boolean(&self) -> Option<bool> {
        match self {
            Value::Boolean(v) => Some(*v),
            _ => None,
        }
    }

    fn int32(&self) -> Option<i32> {
        match self {
            Value::Int32(v) => Some(*v),
            _ => None,
        }
    }

    fn int64(&self) -> Option<i64> {
        match self {
            Value::Int64(v) => Some(*v),
            _ => None,
        }
    }

    fn float32(&self) -> Option<f32> {
        match self {
            Value::Float32(v) => Some(*v),
            _ => None,
        }
    }

    fn float64(&self) -> Option<f64> {
        match self {
            Value::Float64(v) => Some(*v),
            _ => None,
        }
    }

    fn utf8(&self) -> Option<&str> {
        match self {
            Value::Utf8(v) => Some(v),
            _ => None,
        }
    }

    fn binary(&self) -> Option<Cow<'_, [u8]>> {
        match self {
            Value::Binary(v) => Some(Cow::Borrowed(v)),
            _ => None,
        }
    }

    fn pickled(&self) -> Result<Option<Cow<'_, [u8]>>, Infallible> {
        Ok(self.binary())
    }

    fn list(&self) -> Option<Self::Items> {
        match self {
            Value::List(items) => Some(items.iter()),
            _ => None,
        }
    }

    fn fields(&self, _fields: &[Field]) -> Option<Self::Items> {
        match self {
            Value::Struct(values) => Some(values.iter()),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        self.to_string()
    }
}
