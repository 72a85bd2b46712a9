//! The error type of the RocksDB backend's own operations (open, native
//! checkpoints, restore). Trait methods of
//! [`KeyedStateBackend`](weir_state::KeyedStateBackend) return
//! [`StateError`]; this error converts into it, keeping typed state errors
//! as they are and rendering engine and I/O failures as
//! [`StateError::Storage`].

use std::path::PathBuf;

use weir_state::StateError;
use weir_types::{KeyGroupRange, MaxParallelism};

/// Result alias for this crate.
pub type Result<T, E = RocksDbError> = std::result::Result<T, E>;

/// What went wrong in the RocksDB backend.
#[derive(Debug, thiserror::Error)]
pub enum RocksDbError {
    /// RocksDB itself failed.
    #[error("rocksdb failed to {op}: {source}")]
    Engine {
        /// What the backend was doing.
        op: &'static str,
        /// RocksDB's error.
        #[source]
        source: rocksdb::Error,
    },
    /// A file operation on a database or checkpoint directory failed.
    #[error("failed to {op} {path}: {source}")]
    Io {
        /// What the backend was doing.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The database's metadata column family is missing a record or holds
    /// one that does not parse.
    #[error("database at {path} has corrupt or missing metadata: {what}")]
    CorruptMetadata {
        /// The database directory.
        path: PathBuf,
        /// Which record.
        what: &'static str,
    },
    /// The database was written by a newer Weir.
    #[error("database at {path} has format version {found}; this Weir reads up to {supported}")]
    UnsupportedFormat {
        /// The database directory.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The database holds state of another max parallelism (fixed for the
    /// life of a state).
    #[error(
        "database at {path} has max parallelism {stored}, but {requested} was asked for; max parallelism is fixed for the life of a state"
    )]
    MaxParallelismMismatch {
        /// The database directory.
        path: PathBuf,
        /// What the database holds.
        stored: MaxParallelism,
        /// What the caller asked for.
        requested: MaxParallelism,
    },
    /// The database holds another key-group range than asked for; use
    /// `restore_from_native` to change ranges.
    #[error(
        "database at {path} holds key groups {stored}, but {requested} was asked for; restore from a checkpoint to rescale"
    )]
    KeyGroupRangeMismatch {
        /// The database directory.
        path: PathBuf,
        /// What the database holds.
        stored: KeyGroupRange,
        /// What the caller asked for.
        requested: KeyGroupRange,
    },
    /// A restore target directory that already holds files.
    #[error("restore target {path} is not empty")]
    TargetNotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// A restore without any checkpoint directory.
    #[error("restore needs at least one checkpoint directory")]
    NoSources,
    /// Writing final epochs into the database failed on the fold thread; the
    /// backend takes no more final epochs (restore it from a checkpoint).
    #[error("writing final epochs into the database failed: {message}")]
    FoldFailed {
        /// What RocksDB reported.
        message: String,
    },
    /// A bulk load (restore) could not take an entry or write its files.
    #[error("bulk load failed: {message}")]
    BulkLoad {
        /// What went wrong.
        message: String,
    },
    /// A state-level error (kinds, ranges, epochs, duplicates).
    #[error(transparent)]
    State(#[from] StateError),
}

impl RocksDbError {
    /// Wraps a RocksDB error with what the backend was doing.
    pub(crate) fn engine(op: &'static str) -> impl FnOnce(rocksdb::Error) -> Self {
        move |source| RocksDbError::Engine { op, source }
    }

    /// Wraps an I/O error with the operation and path.
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| RocksDbError::Io { op, path, source }
    }
}

impl From<RocksDbError> for StateError {
    fn from(err: RocksDbError) -> Self {
        match err {
            RocksDbError::State(inner) => inner,
            other => StateError::Storage {
                message: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_errors_pass_through_and_others_become_storage() {
        let state: StateError = RocksDbError::State(StateError::NoOpenEpoch).into();
        assert!(matches!(state, StateError::NoOpenEpoch));
        let storage: StateError = RocksDbError::TargetNotEmpty {
            path: PathBuf::from("/x"),
        }
        .into();
        assert!(
            matches!(storage, StateError::Storage { message } if message == "restore target /x is not empty")
        );
    }
}
