//! The accumulators of the native aggregates as numbers, read from and
//! written to their encoded state without building values.
//!
//! An accumulator's type is a struct tree of `int64` and `float64` leaves
//! (see `aggregate`'s module docs); the codec of `weir-types` writes each leaf
//! as 8 little-endian bytes, after a presence byte when its field is nullable.
//! A [`Layout`] lists those parts once per request, so each row costs a few
//! fixed-width reads and writes.

use weir_types::ValueType;

use crate::error::{HostError, Result};
use crate::session::NativeAggregate;

/// One number of an accumulator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Num {
    Int(i64),
    Float(f64),
}

/// A part of an encoded accumulator.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// The presence byte of a nullable field (accumulators never hold nulls).
    Present,
    Int,
    Float,
}

/// The parts of an accumulator type's encoding, in order.
#[derive(Debug)]
pub(super) struct Layout {
    parts: Vec<Part>,
    numbers: usize,
}

/// The most numbers an accumulator has: a window's count and a mean's two.
pub(super) const MAX_NUMBERS: usize = 3;

impl Layout {
    /// The layout of `ty`, which has the shape of an accumulator type.
    pub(super) fn of(ty: &ValueType) -> Result<Self> {
        fn walk(ty: &ValueType, parts: &mut Vec<Part>) -> Result<()> {
            match ty {
                ValueType::Int64 => parts.push(Part::Int),
                ValueType::Float64 => parts.push(Part::Float),
                ValueType::Struct { fields } => {
                    for field in fields {
                        if field.nullable {
                            parts.push(Part::Present);
                        }
                        walk(&field.data_type, parts)?;
                    }
                }
                other => {
                    return Err(HostError::InvalidRequest(format!(
                        "{other} is no accumulator of a native aggregate"
                    )));
                }
            }
            Ok(())
        }
        let mut parts = Vec::new();
        walk(ty, &mut parts)?;
        let numbers = parts.iter().filter(|p| !matches!(p, Part::Present)).count();
        if numbers > MAX_NUMBERS {
            return Err(HostError::InvalidRequest(format!(
                "{ty} is no accumulator of a native aggregate"
            )));
        }
        Ok(Self { parts, numbers })
    }

    /// How many numbers the accumulator has.
    pub(super) fn numbers(&self) -> usize {
        self.numbers
    }

    /// The numbers of the encoded accumulator `bytes`, in order.
    pub(super) fn decode(
        &self,
        bytes: &[u8],
        function: NativeAggregate,
    ) -> Result<[Num; MAX_NUMBERS]> {
        let mut out = [Num::Int(0); MAX_NUMBERS];
        let mut at = 0;
        let mut n = 0;
        for part in &self.parts {
            match part {
                Part::Present => {
                    if bytes.get(at) != Some(&1) {
                        return Err(corrupt(function));
                    }
                    at += 1;
                }
                Part::Int | Part::Float => {
                    let word: [u8; 8] = bytes
                        .get(at..at + 8)
                        .and_then(|w| w.try_into().ok())
                        .ok_or_else(|| corrupt(function))?;
                    out[n] = match part {
                        Part::Int => Num::Int(i64::from_le_bytes(word)),
                        _ => Num::Float(f64::from_le_bytes(word)),
                    };
                    at += 8;
                    n += 1;
                }
            }
        }
        if at != bytes.len() {
            return Err(corrupt(function));
        }
        Ok(out)
    }

    /// Replaces `out` with the encoding of `numbers` (as many as the layout
    /// has, each of its part's kind).
    pub(super) fn encode(
        &self,
        numbers: &[Num],
        out: &mut Vec<u8>,
        function: NativeAggregate,
    ) -> Result<()> {
        if numbers.len() != self.numbers {
            return Err(corrupt(function));
        }
        out.clear();
        let mut next = numbers.iter();
        for part in &self.parts {
            if let Part::Present = part {
                out.push(1);
                continue;
            }
            match (part, next.next()) {
                (Part::Int, Some(Num::Int(v))) => out.extend_from_slice(&v.to_le_bytes()),
                (Part::Float, Some(Num::Float(v))) => out.extend_from_slice(&v.to_le_bytes()),
                _ => return Err(corrupt(function)),
            }
        }
        Ok(())
    }
}

/// The error for stored bytes that are not an accumulator of `function`.
pub(super) fn corrupt(function: NativeAggregate) -> HostError {
    HostError::InvalidRequest(format!(
        "a stored accumulator does not fit the {function:?} aggregate"
    ))
}

#[cfg(test)]
mod tests {
    use weir_types::{Field, Value, decode_value, encode_value};

    use super::*;

    #[test]
    fn layouts_read_and_write_what_the_value_codec_does() {
        let window = |nullable| ValueType::Struct {
            fields: vec![
                Field::new("filled", ValueType::Int64, nullable),
                Field::new(
                    "acc",
                    ValueType::Struct {
                        fields: vec![
                            Field::new("sum", ValueType::Float64, nullable),
                            Field::new("count", ValueType::Int64, false),
                        ],
                    },
                    nullable,
                ),
            ],
        };
        let value = Value::Struct(vec![
            Value::Int64(3),
            Value::Struct(vec![Value::Float64(-1.5), Value::Int64(7)]),
        ]);
        let numbers = [Num::Int(3), Num::Float(-1.5), Num::Int(7)];
        for nullable in [false, true] {
            let ty = window(nullable);
            let layout = Layout::of(&ty).expect("an accumulator type");
            let mut encoded = Vec::new();
            encode_value(&value, &ty, &mut encoded).expect("encodes");
            assert_eq!(
                layout
                    .decode(&encoded, NativeAggregate::Mean)
                    .expect("decodes"),
                numbers
            );
            let mut written = Vec::new();
            layout
                .encode(&numbers, &mut written, NativeAggregate::Mean)
                .expect("encodes");
            assert_eq!(written, encoded);
            assert_eq!(decode_value(&written, &ty).expect("decodes"), value);
            assert!(layout.decode(&encoded[1..], NativeAggregate::Mean).is_err());
        }
        assert!(Layout::of(&ValueType::Utf8).is_err());
    }
}
