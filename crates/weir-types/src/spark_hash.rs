//! Spark's `hash` function (Murmur3 x86_32, seed 42), bit for bit.
//!
//! Spark routes rows by this hash in the JVM; Weir computes key groups from
//! it in Rust, so both must agree exactly. Strings and binaries use Spark's
//! `hashUnsafeBytes`, which mixes each trailing byte (sign-extended) as its
//! own block: that differs from textbook Murmur3 and is deliberate.

use crate::encoding::{ValueBuilder, decode_key_with};
use crate::error::{Result, TypesError};
use crate::value::Value;
use crate::value_type::ValueType;

/// The seed of Spark's `hash` expression.
pub const SPARK_HASH_SEED: i32 = 42;

const C1: u32 = 0xcc9e_2d51;
const C2: u32 = 0x1b87_3593;

#[inline]
fn mix_k1(k1: u32) -> u32 {
    k1.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2)
}

#[inline]
fn mix_h1(h1: u32, k1: u32) -> u32 {
    (h1 ^ k1)
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

#[inline]
fn fmix(mut h1: u32, len: u32) -> i32 {
    h1 ^= len;
    h1 ^= h1 >> 16;
    h1 = h1.wrapping_mul(0x85eb_ca6b);
    h1 ^= h1 >> 13;
    h1 = h1.wrapping_mul(0xc2b2_ae35);
    h1 ^= h1 >> 16;
    h1 as i32
}

/// Spark's `Murmur3_x86_32.hashInt`.
#[inline]
pub fn hash_int(input: i32, seed: i32) -> i32 {
    fmix(mix_h1(seed as u32, mix_k1(input as u32)), 4)
}

/// Spark's `Murmur3_x86_32.hashLong`: low word first, then high word.
#[inline]
pub fn hash_long(input: i64, seed: i32) -> i32 {
    let low = input as u32;
    let high = (input >> 32) as u32;
    let h1 = mix_h1(seed as u32, mix_k1(low));
    fmix(mix_h1(h1, mix_k1(high)), 8)
}

/// Spark's `Murmur3_x86_32.hashUnsafeBytes`, used for strings and binaries.
pub fn hash_bytes(bytes: &[u8], seed: i32) -> i32 {
    let mut chunks = bytes.chunks_exact(4);
    let mut h1 = seed as u32;
    for c in &mut chunks {
        let word = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        h1 = mix_h1(h1, mix_k1(word));
    }
    for &b in chunks.remainder() {
        h1 = mix_h1(h1, mix_k1(i32::from(b as i8) as u32));
    }
    // Spark passes the length as an int; lengths past i32::MAX cannot occur there.
    fmix(h1, bytes.len() as u32)
}

/// Folds one value into a running Spark hash, as Spark's `HashExpression` does:
/// nulls leave the hash unchanged, arrays and structs fold their elements.
fn fold(value: &Value, seed: i32) -> i32 {
    match value {
        Value::Null => seed,
        Value::Boolean(b) => hash_int(i32::from(*b), seed),
        Value::Int32(v) => hash_int(*v, seed),
        Value::Int64(v) => hash_long(*v, seed),
        Value::Float32(v) => hash_float(*v, seed),
        Value::Float64(v) => hash_double(*v, seed),
        Value::Utf8(s) => hash_bytes(s.as_bytes(), seed),
        Value::Binary(b) => hash_bytes(b, seed),
        Value::List(items) | Value::Struct(items) => items.iter().fold(seed, |h, v| fold(v, h)),
    }
}

/// A float as Spark hashes it: zero and NaN normalized, then its bits.
fn hash_float(v: f32, seed: i32) -> i32 {
    let bits = if v == 0.0 {
        0
    } else if v.is_nan() {
        0x7fc0_0000
    } else {
        v.to_bits() as i32
    };
    hash_int(bits, seed)
}

/// A double as Spark hashes it: zero and NaN normalized, then its bits.
fn hash_double(v: f64, seed: i32) -> i32 {
    let bits = if v == 0.0 {
        0
    } else if v.is_nan() {
        0x7ff8_0000_0000_0000
    } else {
        v.to_bits() as i64
    };
    hash_long(bits, seed)
}

/// Spark's `hash(col1, col2, ...)` over key columns, seed 42.
pub fn hash_values(columns: &[Value]) -> i32 {
    columns.iter().fold(SPARK_HASH_SEED, |h, v| fold(v, h))
}

/// [`hash_values`] of the columns of a key encoded with
/// [`encode_key`](crate::encode_key), read straight from its bytes.
pub fn hash_encoded_key(key: &[u8], types: &[ValueType]) -> Result<i32> {
    let mut hash = Fold(SPARK_HASH_SEED);
    decode_key_with(key, types, &mut hash)?;
    Ok(hash.0)
}

/// Folds each decoded part into a running hash, in the order decoding
/// reaches them (items before their list), as [`fold`] does for a [`Value`].
struct Fold(i32);

impl ValueBuilder for Fold {
    type Output = ();
    type Error = TypesError;

    fn null(&mut self) -> Result<()> {
        Ok(())
    }
    fn boolean(&mut self, v: bool) -> Result<()> {
        self.0 = hash_int(i32::from(v), self.0);
        Ok(())
    }
    fn int32(&mut self, v: i32) -> Result<()> {
        self.0 = hash_int(v, self.0);
        Ok(())
    }
    fn int64(&mut self, v: i64) -> Result<()> {
        self.0 = hash_long(v, self.0);
        Ok(())
    }
    fn float32(&mut self, v: f32) -> Result<()> {
        self.0 = hash_float(v, self.0);
        Ok(())
    }
    fn float64(&mut self, v: f64) -> Result<()> {
        self.0 = hash_double(v, self.0);
        Ok(())
    }
    fn utf8(&mut self, v: &str) -> Result<()> {
        self.0 = hash_bytes(v.as_bytes(), self.0);
        Ok(())
    }
    fn binary(&mut self, v: &[u8]) -> Result<()> {
        self.0 = hash_bytes(v, self.0);
        Ok(())
    }
    fn pickled(&mut self, v: &[u8]) -> Result<()> {
        self.binary(v)
    }
    fn list(&mut self, _items: Vec<()>) -> Result<()> {
        Ok(())
    }
    fn structure(&mut self, _fields: Vec<()>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_spark_values() {
        // `SELECT hash(1)`, `hash(1L)` in Spark.
        assert_eq!(hash_values(&[Value::Int32(1)]), -559580957);
        assert_eq!(hash_values(&[Value::Int64(1)]), -1712319331);
    }

    #[test]
    fn encoded_keys_hash_as_their_columns() {
        let types = [
            ValueType::Int64,
            ValueType::Utf8,
            ValueType::Float64,
            ValueType::Boolean,
        ];
        for columns in [
            vec![
                Value::Int64(7),
                Value::Utf8("eu".into()),
                Value::Float64(-0.0),
                Value::Boolean(true),
            ],
            vec![
                Value::Int64(-1),
                Value::Null,
                Value::Float64(f64::NAN),
                Value::Boolean(false),
            ],
        ] {
            let mut key = Vec::new();
            crate::encode_key(&columns, &types, &mut key).expect("encodes");
            assert_eq!(
                hash_encoded_key(&key, &types).expect("decodes"),
                hash_values(&columns)
            );
        }
    }

    #[test]
    fn nulls_are_skipped() {
        assert_eq!(hash_values(&[Value::Null]), SPARK_HASH_SEED);
        assert_eq!(
            hash_values(&[Value::Null, Value::Int32(1)]),
            hash_values(&[Value::Int32(1)])
        );
    }
}
