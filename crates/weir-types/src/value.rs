//! Dynamically typed values: what the CLI decodes, what keys are hashed from.
//!
//! The state access hot path moves encoded bytes, not [`Value`]s; this type is
//! for the edges (keys at the boundary, decoding for inspection, tests).

use std::fmt;

/// One value of a [`ValueType`](crate::ValueType).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL null: only allowed where the type says nullable.
    Null,
    /// A boolean.
    Boolean(bool),
    /// A 32-bit signed integer.
    Int32(i32),
    /// A 64-bit signed integer.
    Int64(i64),
    /// A 32-bit float.
    Float32(f32),
    /// A 64-bit float.
    Float64(f64),
    /// UTF-8 text.
    Utf8(String),
    /// Bytes (also the payload of pickled Python objects).
    Binary(Vec<u8>),
    /// A list of values of one item type.
    List(Vec<Value>),
    /// The fields of a struct, in declaration order.
    Struct(Vec<Value>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn join(
            f: &mut fmt::Formatter<'_>,
            items: &[Value],
            open: &str,
            close: &str,
        ) -> fmt::Result {
            f.write_str(open)?;
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{v}")?;
            }
            f.write_str(close)
        }
        match self {
            Value::Null => f.write_str("null"),
            Value::Boolean(b) => write!(f, "{b}"),
            Value::Int32(v) => write!(f, "{v}"),
            Value::Int64(v) => write!(f, "{v}"),
            Value::Float32(v) => write!(f, "{v}"),
            Value::Float64(v) => write!(f, "{v}"),
            Value::Utf8(s) => write!(f, "{s:?}"),
            Value::Binary(b) => {
                f.write_str("0x")?;
                for byte in b.iter().take(32) {
                    write!(f, "{byte:02x}")?;
                }
                if b.len() > 32 {
                    write!(f, "...({} bytes)", b.len())?;
                }
                Ok(())
            }
            Value::List(items) => join(f, items, "[", "]"),
            Value::Struct(items) => join(f, items, "{", "}"),
        }
    }
}
