//! The error type of snapshot files, snapshot tasks and restores.
//!
//! Decoding problems of the file format itself are [`FormatError`]s, which
//! know nothing of where the bytes came from; [`SnapshotError::Format`] adds
//! the file they were read from.

use std::fmt;

use weir_state::StateError;
use weir_types::{KeyGroup, MaxParallelism, StateDescriptor};

/// Result alias for this crate.
pub type Result<T, E = SnapshotError> = std::result::Result<T, E>;

/// A part of a snapshot file, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The magic and version at the start of the file.
    Prelude,
    /// The header (max parallelism, range, descriptors, compression).
    Header,
    /// The key-group index.
    Index,
    /// The fixed-size footer at the end of the file.
    Footer,
    /// The block of one key group.
    KeyGroup(KeyGroup),
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Section::Prelude => f.write_str("prelude"),
            Section::Header => f.write_str("header"),
            Section::Index => f.write_str("index"),
            Section::Footer => f.write_str("footer"),
            Section::KeyGroup(kg) => write!(f, "block of key group {kg}"),
        }
    }
}

/// What is wrong with the bytes of a snapshot file.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The file is shorter than its own layout says.
    #[error("file is truncated: {section} needs {needed} bytes, {available} available")]
    Truncated {
        /// The section that does not fit.
        section: Section,
        /// Bytes needed.
        needed: u64,
        /// Bytes there.
        available: u64,
    },
    /// The magic bytes are missing: not a Weir snapshot file.
    #[error("not a weir snapshot file (bad magic in the {section})")]
    BadMagic {
        /// Where the magic was expected.
        section: Section,
    },
    /// A format version this build cannot read.
    #[error(
        "snapshot format version {found} is not supported (this build reads version {supported}); use the weir version that wrote it"
    )]
    UnsupportedVersion {
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A CRC-32 that does not match the bytes it covers.
    #[error("checksum mismatch in the {section}: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// The section.
        section: Section,
        /// The checksum in the file.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// Bytes that passed their checksum but do not parse.
    #[error("corrupt {section}: {reason}")]
    Corrupt {
        /// The section.
        section: Section,
        /// What is wrong.
        reason: &'static str,
    },
    /// A header that is not valid JSON for this version.
    #[error("corrupt header: {source}")]
    Header {
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// A header whose descriptors or ranges are invalid.
    #[error("invalid header: {source}")]
    InvalidHeader {
        /// The validation error.
        #[source]
        source: weir_types::TypesError,
    },
    /// A block that does not decompress.
    #[error("{section} does not decompress: {reason}")]
    Decompress {
        /// The section.
        section: Section,
        /// What the decompressor said.
        reason: String,
    },
}

/// What went wrong while writing, uploading or restoring snapshots.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A snapshot file whose bytes are unreadable.
    #[error("snapshot file {path} is unreadable: {source}")]
    Format {
        /// The file, relative to its root.
        path: String,
        /// What is wrong with it.
        #[source]
        source: FormatError,
    },
    /// The object store failed.
    #[error("failed to {operation} {path}: {source}")]
    Storage {
        /// What was being done (`read`, `upload`, `delete`, ...).
        operation: &'static str,
        /// The object's full path in the store.
        path: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
    /// A local file operation failed.
    #[error("failed to {operation} local file {path}: {source}")]
    LocalIo {
        /// What was being done.
        operation: &'static str,
        /// The local path.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A stored file whose size or checksum differs from its handle.
    #[error("file {path} does not match its handle: {what} is {actual}, expected {expected}")]
    FileMismatch {
        /// The file, relative to its root.
        path: String,
        /// `size` or `crc32`.
        what: &'static str,
        /// The value in the handle.
        expected: u64,
        /// The value found.
        actual: u64,
    },
    /// A relative path or file name that is unsafe or malformed.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The rejected path.
        path: String,
        /// Why.
        reason: &'static str,
    },
    /// The snapshot's state has a different descriptor than the one the
    /// restoring backend registered under the same name.
    #[error(
        "state {name:?} in snapshot file {path} is incompatible with the registered state: snapshot has {snapshot:?}, backend has {registered:?}"
    )]
    IncompatibleState {
        /// The snapshot file.
        path: String,
        /// The state name.
        name: String,
        /// The descriptor in the snapshot.
        snapshot: Box<StateDescriptor>,
        /// The descriptor registered in the backend.
        registered: Box<StateDescriptor>,
    },
    /// A snapshot taken with another max parallelism (fixed for the life of
    /// the state).
    #[error(
        "snapshot file {path} has max parallelism {snapshot} but the backend has {backend}; max parallelism cannot change"
    )]
    MaxParallelismMismatch {
        /// The snapshot file.
        path: String,
        /// The snapshot's max parallelism.
        snapshot: MaxParallelism,
        /// The backend's.
        backend: MaxParallelism,
    },
    /// A handle that says something else than the file it points to.
    #[error("snapshot file {path} does not match its handle: {reason}")]
    HandleMismatch {
        /// The snapshot file.
        path: String,
        /// What differs.
        reason: &'static str,
    },
    /// A handle kind this operation cannot use.
    #[error("{operation} cannot use a {kind} state handle")]
    UnsupportedHandle {
        /// The operation.
        operation: &'static str,
        /// The handle kind.
        kind: &'static str,
    },
    /// An entry the snapshot writer refuses (a bug in the state backend).
    #[error("invalid entry for key group {key_group}: {reason}")]
    InvalidEntry {
        /// The key group being written.
        key_group: KeyGroup,
        /// What is wrong.
        reason: &'static str,
    },
    /// The state backend failed while being read or restored into.
    #[error("state backend failed: {source}")]
    State {
        /// The backend's error.
        #[from]
        source: StateError,
    },
    /// An operator state file whose bytes do not decode.
    #[error("operator state file {path} is unreadable: {source}")]
    OperatorState {
        /// The file, relative to its root.
        path: String,
        /// The decoder's error.
        #[source]
        source: StateError,
    },
    /// The snapshot was canceled.
    #[error("snapshot was canceled")]
    Cancelled,
    /// The background task died (panicked or was shut down with its runtime).
    #[error("snapshot task failed: {reason}")]
    TaskFailed {
        /// What happened to it.
        reason: String,
    },
}

impl SnapshotError {
    pub(crate) fn format(path: impl Into<String>, source: FormatError) -> Self {
        SnapshotError::Format {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn storage(
        operation: &'static str,
        path: &object_store::path::Path,
        source: object_store::Error,
    ) -> Self {
        SnapshotError::Storage {
            operation,
            path: path.to_string(),
            source,
        }
    }
}
