//! Weir's shared vocabulary.
//!
//! Every other crate speaks in these types: ids ([`CheckpointId`], [`Epoch`],
//! [`OperatorUid`], ...), key groups ([`KeyGroupRange`], Flink's contiguous
//! assignment), Spark's Murmur3 `hash` (so the JVM, the harness and the CLI
//! agree on a key's key group), state descriptors and the binary encodings of
//! keys and values. No I/O and no async live here.
//!
//! ```
//! use weir_types::{KeyGroupRange, MaxParallelism, Value, key_group_of};
//!
//! let max = MaxParallelism::new(128)?;
//! let kg = key_group_of(&[Value::Int64(42)], max);
//! let owner = max.subtask_of(kg, 2)?;
//! assert!(KeyGroupRange::for_subtask(max, 2, owner)?.contains(kg));
//! # Ok::<(), weir_types::TypesError>(())
//! ```

mod descriptor;
mod encoding;
mod error;
mod ids;
mod key_group;
mod spark_hash;
mod value;
mod value_type;

pub use descriptor::{StateDescriptor, StateKind, TtlConfig, TtlUpdate};
pub use encoding::{
    EncodeError, ValueBuilder, ValueSource, ValueTree, decode_key, decode_value, decode_with,
    encode_key, encode_key_column, encode_value, encode_with, read_varint, write_varint,
};
pub use error::{Result, TypesError, ValueMismatch};
pub use ids::{Attempt, CheckpointId, Epoch, JobId, OperatorUid, SubtaskIndex};
pub use key_group::{KeyGroup, KeyGroupRange, MaxParallelism, key_group_of};
pub use spark_hash::{
    SPARK_HASH_SEED, hash_bytes, hash_encoded_key, hash_int, hash_long, hash_values,
};
pub use value::Value;
pub use value_type::{Field, ValueType};

/// Version of Weir's on-disk formats (snapshot files and `_metadata`).
///
/// Readers refuse files with a newer version and say which Weir wrote them.
pub const FORMAT_VERSION: u32 = 1;
