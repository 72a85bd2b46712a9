//! The binary encoding of typed values and keys: the only place its bytes are spelled.
//!
//! Values: fixed-width little-endian primitives, varint-length-prefixed bytes,
//! lists as a varint count of (presence byte, item), structs as fields in order
//! (a presence byte before each nullable one). Keys: the key columns in order,
//! each a presence byte and a value, so composite keys never collide.
//! A decoder consumes exactly the bytes it is given; anything left over or
//! missing is [`TypesError::Corrupt`].
//!
//! The walks are generic: [`encode_with`] reads any [`ValueSource`] (a
//! [`Value`], or a foreign object such as a Python value in the binding) and
//! [`decode_with`] builds any [`ValueBuilder`] output, so a language binding
//! converts its own objects straight to and from bytes without an
//! intermediate [`Value`] while the format stays defined here alone.

mod decode;
mod encode;

pub(crate) use decode::decode_key_with;
pub use decode::{ValueBuilder, ValueTree, decode_with};
pub use encode::{EncodeError, ValueSource, encode_key_column, encode_with};

use crate::error::{Result, TypesError};
use crate::value::Value;
use crate::value_type::ValueType;

/// Appends `v` as an unsigned LEB128 varint.
// Inline: snapshots, restores and keys call these once or more per entry from
// other crates, and a call costs as much as a short varint.
#[inline]
pub fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an unsigned LEB128 varint from the front of `buf`, advancing it;
/// `None` when the bytes end early or the varint overflows 64 bits.
#[inline]
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

/// Appends the encoding of a non-null `value` of type `ty` to `out`.
pub fn encode_value(value: &Value, ty: &ValueType, out: &mut Vec<u8>) -> Result<()> {
    encode_with(&value, ty, out).map_err(EncodeError::into_type_mismatch)
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
    for (column, ty) in columns.iter().zip(types) {
        encode_key_column(&column, ty, out).map_err(EncodeError::into_type_mismatch)?;
    }
    Ok(())
}

/// Decodes exactly one value of type `ty` from `bytes`.
pub fn decode_value(bytes: &[u8], ty: &ValueType) -> Result<Value> {
    decode_with(bytes, ty, &mut ValueTree::default())
}

/// Decodes a key encoded by [`encode_key`] into its columns.
pub fn decode_key(bytes: &[u8], types: &[ValueType]) -> Result<Vec<Value>> {
    decode::decode_key_with(bytes, types, &mut ValueTree::default())
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
    fn the_bytes_of_each_shape_are_fixed() {
        let cases: [(Value, ValueType, &[u8]); 6] = [
            (
                Value::Int32(-2),
                ValueType::Int32,
                &[0xfe, 0xff, 0xff, 0xff],
            ),
            (Value::Boolean(true), ValueType::Boolean, &[1]),
            (
                Value::Utf8("hé".into()),
                ValueType::Utf8,
                &[3, b'h', 0xc3, 0xa9],
            ),
            (Value::Binary(vec![7]), ValueType::Pickle, &[1, 7]),
            (
                Value::List(vec![Value::Null, Value::Boolean(false)]),
                ValueType::List {
                    item: Box::new(ValueType::Boolean),
                },
                &[2, 0, 1, 0],
            ),
            (Value::Float32(1.0), ValueType::Float32, &[0, 0, 0x80, 0x3f]),
        ];
        for (value, ty, bytes) in cases {
            let mut out = Vec::new();
            encode_value(&value, &ty, &mut out).expect("matches");
            assert_eq!(out, bytes, "{value} as {ty}");
            assert_eq!(decode_value(bytes, &ty).expect("decodes"), value);
        }
    }

    #[test]
    fn mismatches_are_errors() {
        let mut buf = Vec::new();
        let err = encode_value(&Value::Utf8("x".into()), &ValueType::Int64, &mut buf)
            .expect_err("mismatch");
        assert!(err.to_string().contains("int64"), "{err}");
        assert!(encode_value(&Value::Null, &ValueType::Int64, &mut buf).is_err());
        // A nested mismatch names the part that does not fit.
        let err = encode_value(
            &Value::Struct(vec![Value::Int64(1), Value::Null, Value::Int64(2)]),
            &nested(),
            &mut buf,
        )
        .expect_err("tags are strings");
        assert!(err.to_string().contains("list<string>"), "{err}");
        let bad_tag = Value::Struct(vec![
            Value::Int64(1),
            Value::Null,
            Value::List(vec![Value::Int64(2)]),
        ]);
        let err = encode_with(&&bad_tag, &nested(), &mut buf).expect_err("a tag is no string");
        assert_eq!(err.path, "item 0 of field 'tags' of ");
        assert_eq!(err.expected, ValueType::Utf8);
        let no_count = Value::Struct(vec![Value::Null, Value::Null, Value::Null]);
        let err = encode_with(&&no_count, &nested(), &mut buf).expect_err("count is required");
        assert_eq!(err.path, "non-nullable field 'count' of ");
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
        assert!(encode_key(&[Value::Int64(1)], &types, &mut a).is_err());
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
