//! The error type of this crate.

use crate::value_type::ValueType;

/// Result alias for this crate.
pub type Result<T, E = TypesError> = std::result::Result<T, E>;

/// What went wrong while validating ids, key groups, descriptors or encodings.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TypesError {
    /// Max parallelism outside Flink's bounds.
    #[error("max parallelism must be between 1 and 32768, got {got}")]
    InvalidMaxParallelism {
        /// The rejected value.
        got: u32,
    },
    /// Parallelism outside `1..=max_parallelism`.
    #[error("parallelism must be between 1 and the max parallelism {max}, got {got}")]
    InvalidParallelism {
        /// The rejected value.
        got: u32,
        /// The max parallelism in force.
        max: u32,
    },
    /// A subtask index not below the parallelism.
    #[error(
        "subtask index {index} is out of range for parallelism {parallelism}: use 0..{parallelism}"
    )]
    InvalidSubtask {
        /// The rejected index.
        index: u32,
        /// The parallelism in force.
        parallelism: u32,
    },
    /// A key group not below the max parallelism.
    #[error("key group {key_group} is out of range for max parallelism {max}: use 0..{max}")]
    InvalidKeyGroup {
        /// The rejected key group.
        key_group: u32,
        /// The max parallelism in force.
        max: u32,
    },
    /// A key-group range whose start lies after its end.
    #[error("key-group range start {start} lies after its end {end}")]
    InvalidKeyGroupRange {
        /// First key group.
        start: u32,
        /// One past the last key group.
        end: u32,
    },
    /// An operator uid that is empty or contains characters unsafe in paths.
    #[error(
        "operator uid {uid:?} is invalid: use 1 to 128 characters from letters, digits, '_', '-' and '.'"
    )]
    InvalidOperatorUid {
        /// The rejected uid.
        uid: String,
    },
    /// A state name that is empty or too long.
    #[error("state name {name:?} is invalid: use 1 to 256 characters")]
    InvalidStateName {
        /// The rejected name.
        name: String,
    },
    /// A descriptor whose parts do not fit together (e.g. a map without key type).
    #[error("state descriptor {name:?} is invalid: {reason}")]
    InvalidDescriptor {
        /// The state name.
        name: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A value that does not match the type it is encoded or hashed as.
    #[error("value {value} does not match the declared type {expected}")]
    TypeMismatch {
        /// The declared type.
        expected: ValueType,
        /// A short rendering of the offending value.
        value: String,
    },
    /// Bytes that do not decode as the declared type.
    #[error("cannot decode {expected} value: {reason}")]
    Corrupt {
        /// The declared type.
        expected: ValueType,
        /// What was wrong with the bytes.
        reason: &'static str,
    },
    /// An Arrow type Weir cannot store as state.
    #[error("arrow type {arrow} is not supported as a state type")]
    UnsupportedArrowType {
        /// The Arrow type, rendered.
        arrow: String,
    },
}
