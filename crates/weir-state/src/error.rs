//! The error type of keyed and operator state.

use weir_types::{Epoch, KeyGroup, KeyGroupRange, StateKind, TypesError};

use crate::backend::StateId;

/// Result alias for this crate.
pub type Result<T, E = StateError> = std::result::Result<T, E>;

/// What went wrong in a state backend.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A [`StateId`] that was never registered.
    #[error("state id {0:?} is not registered with this backend")]
    UnknownState(StateId),
    /// A state registered again under its name with another descriptor.
    #[error(
        "state {name:?} is already registered as a {existing}; a state name may be used once per function"
    )]
    DuplicateState {
        /// The state name.
        name: String,
        /// The existing descriptor, rendered.
        existing: String,
    },
    /// An access of the wrong kind (e.g. list access on a value state).
    #[error("state {name:?} is a {actual} state; it cannot be used as a {expected} state")]
    WrongKind {
        /// The state name.
        name: String,
        /// The kind the access needs.
        expected: &'static str,
        /// The kind the state has.
        actual: StateKind,
    },
    /// A key whose key group this backend does not hold.
    #[error("key group {key_group} is outside this subtask's key groups {range}")]
    KeyGroupOutOfRange {
        /// The key group of the key.
        key_group: KeyGroup,
        /// The backend's range.
        range: KeyGroupRange,
    },
    /// A write outside an open epoch attempt.
    #[error("no epoch attempt is open for writing; call begin_epoch first")]
    NoOpenEpoch,
    /// An epoch at or before the last finalized one.
    #[error("epoch {epoch} is already final (last final epoch is {last_final})")]
    EpochAlreadyFinal {
        /// The epoch asked for.
        epoch: Epoch,
        /// The last final epoch.
        last_final: Epoch,
    },
    /// An epoch operation that does not match the open epoch.
    #[error("epoch {epoch} is not the open epoch ({open})")]
    NotOpenEpoch {
        /// The epoch asked for.
        epoch: Epoch,
        /// The open epoch, rendered (or "none").
        open: String,
    },
    /// Finalizing an epoch whose attempt never committed.
    #[error("epoch {epoch} cannot be final: its attempt never committed")]
    EpochNotCommitted {
        /// The uncommitted epoch.
        epoch: Epoch,
    },
    /// A synchronous snapshot while epochs are not final.
    #[error("cannot snapshot while epochs {first}..={last} are not final; finalize them first")]
    EpochsNotFinal {
        /// The oldest non-final epoch.
        first: Epoch,
        /// The newest non-final epoch.
        last: Epoch,
    },
    /// Stored bytes that do not parse (e.g. a list payload).
    #[error("corrupt state data in {what}")]
    Corrupt {
        /// Where.
        what: &'static str,
    },
    /// Encoded state whose checksum does not match its bytes.
    #[error("checksum mismatch in {what}: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// What was being decoded.
        what: &'static str,
        /// The checksum the bytes carry.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// Encoded state in a format version this build cannot read.
    #[error("{what} has format version {version}; this build reads version {supported}")]
    UnsupportedVersion {
        /// What was being decoded.
        what: &'static str,
        /// The version found.
        version: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// An operator state registered with another redistribution mode.
    #[error("operator state {name:?} is already registered with mode {existing}")]
    OperatorStateMode {
        /// The state name.
        name: String,
        /// The existing mode.
        existing: &'static str,
    },
    /// Invalid ids, key groups or encodings.
    #[error(transparent)]
    Types(#[from] TypesError),
    /// A key group given back to a backend that did not take it out.
    #[error("a detached key group can only be attached to the backend that detached it")]
    ForeignKeyGroup,
    /// The storage engine below a backend failed (e.g. RocksDB).
    #[error("state storage failed: {message}")]
    Storage {
        /// What the engine said.
        message: String,
    },
}
