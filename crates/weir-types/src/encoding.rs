//! The binary encoding of typed values and keys.
//!
//! Values: fixed-width little-endian primitives, varint-length-prefixed bytes,
//! lists as a varint count of (presence byte, item), structs as fields in order
//! (a presence byte before each nullable one). Keys: the key columns in order,
//! each a presence byte and a value, so composite keys never collide.
//! A decoder consumes exactly the bytes it is given; anything left over or
//! missing is [`TypesError::Corrupt`].

use crate::error::{Result, TypesError};
use crate::value::Value;
use crate::value_type::ValueType;

/// Appends `v` as an unsigned LEB128 varint.
pub fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an unsigned LEB128 varint from the front of `buf`, advancing it;
/// `None` when the bytes end early or the varint overflows 64 bits.
pub fn read_varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn mismatch(expected: &ValueType, value: &Value) -> TypesError {
    let mut rendered = value.to_string();
    rendered.truncate(64);
    TypesError::TypeMismatch {
        expected: expected.clone(),
        value: rendered,
    }
}

fn write_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    write_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn write_nullable(value: &Value, ty: &ValueType, out: &mut Vec<u8>) -> Result<()> {
    if matches!(value, Value::Null) {
        out.push(0);
        Ok(())
    } else {
        out.push(1);
        encode_value(value, ty, out)
    }
}

/// Appends the encoding of a non-null `value` of type `ty` to `out`.
pub fn encode_value(value: &Value, ty: &ValueType, out: &mut Vec<u8>) -> Result<()> {
    match (ty, value) {
        (ValueType::Boolean, Value::Boolean(b)) => out.push(u8::from(*b)),
        (ValueType::Int32, Value::Int32(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (ValueType::Int64, Value::Int64(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (ValueType::Float32, Value::Float32(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (ValueType::Float64, Value::Float64(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (ValueType::Utf8, Value::Utf8(s)) => write_bytes(s.as_bytes(), out),
        (ValueType::Binary | ValueType::Pickle, Value::Binary(b)) => write_bytes(b, out),
        (ValueType::List { item }, Value::List(items)) => {
            write_varint(items.len() as u64, out);
            for v in items {
                write_nullable(v, item, out)?;
            }
        }
        (ValueType::Struct { fields }, Value::Struct(values)) if fields.len() == values.len() => {
            for (f, v) in fields.iter().zip(values) {
                if f.nullable {
                    write_nullable(v, &f.data_type, out)?;
                } else {
                    encode_value(v, &f.data_type, out)?;
                }
            }
        }
        _ => return Err(mismatch(ty, value)),
    }
    Ok(())
}

/// Appends the encoding of a key made of `columns` with `types` to `out`.
pub fn encode_key(columns: &[Value], types: &[ValueType], out: &mut Vec<u8>) -> Result<()> {
    if columns.len() != types.len() {
        return Err(TypesError::TypeMismatch {
            expected: ValueType::Struct { fields: Vec::new() },
            value: format!(
                "a key of {} columns where {} are declared",
                columns.len(),
                types.len()
            ),
        });
    }
    for (v, t) in columns.iter().zip(types) {
        write_nullable(v, t, out)?;
    }
    Ok(())
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

    fn len(&mut self) -> Result<usize> {
        let v = read_varint(&mut self.buf).ok_or_else(|| self.corrupt("bad length prefix"))?;
        usize::try_from(v).map_err(|_| self.corrupt("length does not fit in memory"))
    }

    fn nullable(&mut self, ty: &ValueType) -> Result<Value> {
        match self.take(1)?[0] {
            0 => Ok(Value::Null),
            1 => self.value(ty),
            _ => Err(self.corrupt("bad presence byte")),
        }
    }

    fn value(&mut self, ty: &ValueType) -> Result<Value> {
        Ok(match ty {
            ValueType::Boolean => match self.take(1)?[0] {
                0 => Value::Boolean(false),
                1 => Value::Boolean(true),
                _ => return Err(self.corrupt("bad boolean byte")),
            },
            ValueType::Int32 => Value::Int32(i32::from_le_bytes(self.array()?)),
            ValueType::Int64 => Value::Int64(i64::from_le_bytes(self.array()?)),
            ValueType::Float32 => Value::Float32(f32::from_le_bytes(self.array()?)),
            ValueType::Float64 => Value::Float64(f64::from_le_bytes(self.array()?)),
            ValueType::Utf8 => {
                let n = self.len()?;
                let bytes = self.take(n)?;
                Value::Utf8(
                    std::str::from_utf8(bytes)
                        .map_err(|_| self.corrupt("string is not UTF-8"))?
                        .to_owned(),
                )
            }
            ValueType::Binary | ValueType::Pickle => {
                let n = self.len()?;
                Value::Binary(self.take(n)?.to_vec())
            }
            ValueType::List { item } => {
                let n = self.len()?;
                // Each item takes at least one byte: bound the allocation by the input.
                if n > self.buf.len() {
                    return Err(self.corrupt("list count exceeds the remaining bytes"));
                }
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.nullable(item)?);
                }
                Value::List(items)
            }
            ValueType::Struct { fields } => Value::Struct(
                fields
                    .iter()
                    .map(|f| {
                        if f.nullable {
                            self.nullable(&f.data_type)
                        } else {
                            self.value(&f.data_type)
                        }
                    })
                    .collect::<Result<_>>()?,
            ),
        })
    }
}

/// Decodes exactly one value of type `ty` from `bytes`.
pub fn decode_value(bytes: &[u8], ty: &ValueType) -> Result<Value> {
    let mut r = Reader { buf: bytes, ty };
    let v = r.value(ty)?;
    if !r.buf.is_empty() {
        return Err(r.corrupt("trailing bytes after the value"));
    }
    Ok(v)
}

/// Decodes a key encoded by [`encode_key`] into its columns.
pub fn decode_key(bytes: &[u8], types: &[ValueType]) -> Result<Vec<Value>> {
    let key_type = ValueType::Struct { fields: Vec::new() };
    let mut r = Reader {
        buf: bytes,
        ty: &key_type,
    };
    let cols = types
        .iter()
        .map(|t| r.nullable(t))
        .collect::<Result<Vec<_>>>()?;
    if !r.buf.is_empty() {
        return Err(r.corrupt("trailing bytes after the key"));
    }
    Ok(cols)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::value_type::Field;

    fn nested() -> ValueType {
        ValueType::Struct {
            fields: vec![
                Field::new("count", ValueType::Int64, false),
                Field::new("avg", ValueType::Float64, true),
                Field::new(
                    "tags",
                    ValueType::List {
                        item: Box::new(ValueType::Utf8),
                    },
                    true,
                ),
            ],
        }
    }

    #[test]
    fn nested_round_trip() {
        let v = Value::Struct(vec![
            Value::Int64(3),
            Value::Null,
            Value::List(vec![Value::Utf8("a".into()), Value::Null]),
        ]);
        let mut buf = Vec::new();
        encode_value(&v, &nested(), &mut buf).expect("matches");
        assert_eq!(decode_value(&buf, &nested()).expect("decodes"), v);
        assert!(decode_value(&buf[..buf.len() - 1], &nested()).is_err());
        buf.push(0);
        assert!(decode_value(&buf, &nested()).is_err());
    }

    #[test]
    fn mismatches_are_errors() {
        let mut buf = Vec::new();
        let err = encode_value(&Value::Utf8("x".into()), &ValueType::Int64, &mut buf)
            .expect_err("mismatch");
        assert!(err.to_string().contains("int64"), "{err}");
        assert!(encode_value(&Value::Null, &ValueType::Int64, &mut buf).is_err());
    }

    #[test]
    fn composite_keys_do_not_collide() {
        let types = [ValueType::Utf8, ValueType::Utf8];
        let mut a = Vec::new();
        let mut b = Vec::new();
        encode_key(
            &[Value::Utf8("ab".into()), Value::Utf8("c".into())],
            &types,
            &mut a,
        )
        .expect("ok");
        encode_key(
            &[Value::Utf8("a".into()), Value::Utf8("bc".into())],
            &types,
            &mut b,
        )
        .expect("ok");
        assert_ne!(a, b);
        assert_eq!(
            decode_key(&a, &types).expect("ok"),
            vec![Value::Utf8("ab".into()), Value::Utf8("c".into())]
        );
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<u64>()) {
            let mut buf = Vec::new();
            write_varint(v, &mut buf);
            let mut s = buf.as_slice();
            prop_assert_eq!(read_varint(&mut s), Some(v));
            prop_assert!(s.is_empty());
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_value(&bytes, &nested());
        }
    }
}
