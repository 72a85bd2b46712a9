//! Decoding: a walk over a [`ValueType`] that hands each part to a [`ValueBuilder`].

use std::marker::PhantomData;

use super::read_varint;
use crate::error::{Result, TypesError};
use crate::value::Value;
use crate::value_type::ValueType;

/// Builds the decoded form of a value, part by part; lists and structs get
/// their already built items.
pub trait ValueBuilder {
    /// What a decoded value becomes.
    type Output;
    /// Why building failed; bytes that do not decode are a [`TypesError`].
    type Error: From<TypesError>;

    /// An absent list item, struct field or key column.
    fn null(&mut self) -> Result<Self::Output, Self::Error>;
    /// A boolean.
    fn boolean(&mut self, v: bool) -> Result<Self::Output, Self::Error>;
    /// A 32-bit integer.
    fn int32(&mut self, v: i32) -> Result<Self::Output, Self::Error>;
    /// A 64-bit integer.
    fn int64(&mut self, v: i64) -> Result<Self::Output, Self::Error>;
    /// A 32-bit float.
    fn float32(&mut self, v: f32) -> Result<Self::Output, Self::Error>;
    /// A 64-bit float.
    fn float64(&mut self, v: f64) -> Result<Self::Output, Self::Error>;
    /// UTF-8 text.
    fn utf8(&mut self, v: &str) -> Result<Self::Output, Self::Error>;
    /// Bytes.
    fn binary(&mut self, v: &[u8]) -> Result<Self::Output, Self::Error>;
    /// An opaque object serialized by [`ValueSource::pickled`](super::ValueSource::pickled).
    fn pickled(&mut self, v: &[u8]) -> Result<Self::Output, Self::Error>;
    /// A list of built items.
    fn list(&mut self, items: Vec<Self::Output>) -> Result<Self::Output, Self::Error>;
    /// A struct of built fields, in declaration order.
    fn structure(&mut self, fields: Vec<Self::Output>) -> Result<Self::Output, Self::Error>;
    /// A struct's fields come next, then its [`ValueBuilder::structure`]: a
    /// builder that places each part by where the walk is (rather than by
    /// building trees) follows the walk here.
    fn begin_structure(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Builds [`Value`]s (as [`decode_value`](super::decode_value) does); `E` is
/// the error type of the walk, for callers whose errors wrap [`TypesError`].
#[derive(Debug, Clone, Copy)]
pub struct ValueTree<E = TypesError>(PhantomData<E>);

impl<E> Default for ValueTree<E> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<E: From<TypesError>> ValueBuilder for ValueTree<E> {
    type Output = Value;
    type Error = E;

    fn null(&mut self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn boolean(&mut self, v: bool) -> Result<Value, E> {
        Ok(Value::Boolean(v))
    }
    fn int32(&mut self, v: i32) -> Result<Value, E> {
        Ok(Value::Int32(v))
    }
    fn int64(&mut self, v: i64) -> Result<Value, E> {
        Ok(Value::Int64(v))
    }
    fn float32(&mut self, v: f32) -> Result<Value, E> {
        Ok(Value::Float32(v))
    }
    fn float64(&mut self, v: f64) -> Result<Value, E> {
        Ok(Value::Float64(v))
    }
    fn utf8(&mut self, v: &str) -> Result<Value, E> {
        Ok(Value::Utf8(v.to_owned()))
    }
    fn binary(&mut self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Binary(v.to_vec()))
    }
    fn pickled(&mut self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Binary(v.to_vec()))
    }
    fn list(&mut self, items: Vec<Value>) -> Result<Value, E> {
        Ok(Value::List(items))
    }
    fn structure(&mut self, fields: Vec<Value>) -> Result<Value, E> {
        Ok(Value::Struct(fields))
    }
}

struct Reader<'a, 'b> {
    buf: &'a [u8],
    ty: &'b ValueType,
}

impl<'a> Reader<'a, '_> {
    fn corrupt(&self, reason: &'static str) -> TypesError {
        TypesError::Corrupt {
            expected: self.ty.clone(),
            reason,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(self.corrupt("value is truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let bytes = self.take(N)?;
        Ok(bytes.try_into().expect("take returned N bytes"))
    }

    fn sized(&mut self) -> Result<&'a [u8]> {
        let n = read_varint(&mut self.buf).ok_or_else(|| self.corrupt("bad length prefix"))?;
        let n = usize::try_from(n).map_err(|_| self.corrupt("length does not fit in memory"))?;
        self.take(n)
    }

    fn nullable<B: ValueBuilder>(
        &mut self,
        ty: &ValueType,
        b: &mut B,
    ) -> Result<B::Output, B::Error> {
        match self.take(1)?[0] {
            0 => b.null(),
            1 => self.value(ty, b),
            _ => Err(self.corrupt("bad presence byte").into()),
        }
    }

    fn value<B: ValueBuilder>(&mut self, ty: &ValueType, b: &mut B) -> Result<B::Output, B::Error> {
        match ty {
            ValueType::Boolean => match self.take(1)?[0] {
                0 => b.boolean(false),
                1 => b.boolean(true),
                _ => Err(self.corrupt("bad boolean byte").into()),
            },
            ValueType::Int32 => b.int32(i32::from_le_bytes(self.array()?)),
            ValueType::Int64 => b.int64(i64::from_le_bytes(self.array()?)),
            ValueType::Float32 => b.float32(f32::from_le_bytes(self.array()?)),
            ValueType::Float64 => b.float64(f64::from_le_bytes(self.array()?)),
            ValueType::Utf8 => {
                let bytes = self.sized()?;
                b.utf8(std::str::from_utf8(bytes).map_err(|_| self.corrupt("string is not UTF-8"))?)
            }
            ValueType::Binary => b.binary(self.sized()?),
            ValueType::Pickle => b.pickled(self.sized()?),
            ValueType::List { item } => {
                let n = read_varint(&mut self.buf)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| self.corrupt("bad length prefix"))?;
                // Each item takes at least one byte: bound the allocation by the input.
                if n > self.buf.len() {
                    return Err(self
                        .corrupt("list count exceeds the remaining bytes")
                        .into());
                }
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.nullable(item, b)?);
                }
                b.list(items)
            }
            ValueType::Struct { fields } => {
                b.begin_structure()?;
                let mut values = Vec::with_capacity(fields.len());
                for f in fields {
                    values.push(if f.nullable {
                        self.nullable(&f.data_type, b)?
                    } else {
                        self.value(&f.data_type, b)?
                    });
                }
                b.structure(values)
            }
        }
    }
}

/// Decodes exactly one value of type `ty` from `bytes` with `builder`.
pub fn decode_with<B: ValueBuilder>(
    bytes: &[u8],
    ty: &ValueType,
    builder: &mut B,
) -> Result<B::Output, B::Error> {
    let mut r = Reader { buf: bytes, ty };
    let v = r.value(ty, builder)?;
    if !r.buf.is_empty() {
        return Err(r.corrupt("trailing bytes after the value").into());
    }
    Ok(v)
}

/// Decodes the columns of a key of `types` with `builder`.
pub(crate) fn decode_key_with<B: ValueBuilder>(
    bytes: &[u8],
    types: &[ValueType],
    builder: &mut B,
) -> Result<Vec<B::Output>, B::Error> {
    let key_type = ValueType::Struct { fields: Vec::new() };
    let mut r = Reader {
        buf: bytes,
        ty: &key_type,
    };
    let columns = types
        .iter()
        .map(|t| r.nullable(t, builder))
        .collect::<Result<Vec<_>, _>>()?;
    if !r.buf.is_empty() {
        return Err(r.corrupt("trailing bytes after the key").into());
    }
    Ok(columns)
}
