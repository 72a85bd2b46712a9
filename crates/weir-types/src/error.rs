//! The error type of this crate.

use crate::value_type::ValueType;

/// A value written to a state that does not fit the state's type: which
/// part of it, and the type that part had to fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueMismatch {
    /// The state name.
    pub state: String,
    /// The state's type.
    pub state_type: ValueType,
    /// Where in the value the part that does not fit is (`item 0 of field 'names' of `), or empty.
    pub path: String,
    /// The part that does not fit, rendered with its type.
    pub value: String,
    /// The type that part had to fit.
    pub part_type: ValueType,
}

impl std::fmt::Display for ValueMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "state '{}' holds {} values, but {}the value written is {}",
            self.state, self.state_type, self.path, self.value
        )
    }
}

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
    #[error(
        "arrow type {arrow} cannot be a state type: use bool, int32, int64, float32, float64, \
         string, binary (also for bytes), or a list or struct of those"
    )]
    UnsupportedArrowType {
        /// The Arrow type, rendered.
        arrow: String,
    },
    /// A value written to a state that does not fit the state's type (boxed:
    /// errors stay small on the paths that never raise it).
    #[error("{0}")]
    ValueMismatch(Box<ValueMismatch>),
    /// A key that cannot be a key at all.
    #[error("key {key} is invalid: {reason}")]
    InvalidKey {
        /// The key, rendered with its type.
        key: String,
        /// Why, and what a key may be.
        reason: &'static str,
    },
    /// A key whose column types differ from the operator's key types.
    #[error(
        "key {key} has columns of type {types}, but this operator's keys are {known}: \
         a key selector must return keys of one type"
    )]
    KeyTypeMismatch {
        /// The key, rendered with its type.
        key: String,
        /// Its column types, rendered (or why they are unknown).
        types: String,
        /// The operator's key column types, rendered.
        known: String,
    },
    /// A name that is none of the names of a closed set (backends, state kinds, ...).
    #[error("{what} {name:?} is unknown: use {expected}")]
    UnknownName {
        /// What was named, e.g. "state backend".
        what: &'static str,
        /// The rejected name.
        name: String,
        /// The accepted names.
        expected: &'static str,
    },
}
