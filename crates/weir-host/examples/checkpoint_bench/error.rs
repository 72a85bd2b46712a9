//! The benchmark's error type: every library error it can meet, plus the
//! checks it makes itself (restored state must equal what was written).

use std::path::PathBuf;

/// Why a benchmark run stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The engine, the snapshot code or the checkpoint storage failed.
    #[error(transparent)]
    Host(#[from] weir_host::HostError),
    /// The RocksDB backend failed.
    #[error(transparent)]
    RocksDb(#[from] weir_state_rocksdb::RocksDbError),
    /// A state backend call failed.
    #[error(transparent)]
    State(#[from] weir_state::StateError),
    /// An upload or download of state files failed.
    #[error(transparent)]
    Snapshot(#[from] weir_snapshot::SnapshotError),
    /// Checkpoint storage failed.
    #[error(transparent)]
    Checkpoint(#[from] weir_checkpoint::CheckpointError),
    /// Encoding a key or value failed.
    #[error(transparent)]
    Types(#[from] weir_types::TypesError),
    /// A local file operation failed.
    #[error("{operation} {}: {source}", path.display())]
    Io {
        /// What was being done.
        operation: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Writing the results failed.
    #[error("writing the results: {0}")]
    Json(#[from] serde_json::Error),
    /// A restored value differs from the one written: the measured restore
    /// did not restore the state, so its time means nothing.
    #[error("restored state is wrong: {0}")]
    Mismatch(String),
    /// The command line asks for something impossible.
    #[error("{0}")]
    Usage(String),
    /// This system does not report resident memory the way Linux does.
    #[error("cannot measure memory: {0}")]
    Memory(String),
    /// This system does not report scheduler statistics the way Linux does.
    #[error("cannot read scheduler statistics: {0}")]
    Sched(String),
}

/// The benchmark's result type.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// An [`BenchError::Io`] maker for `map_err`.
pub fn io(
    operation: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> BenchError {
    let path = path.to_owned();
    move |source| BenchError::Io {
        operation,
        path,
        source,
    }
}
