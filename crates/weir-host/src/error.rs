//! What can go wrong between a task and its subtask's state.

use weir_checkpoint::CheckpointError;
use weir_snapshot::SnapshotError;
use weir_state::StateError;
use weir_types::TypesError;

/// Result alias for this crate.
pub type Result<T, E = HostError> = std::result::Result<T, E>;

/// Errors of the state engine, the host protocol and the host process.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The state backend refused an access (wrong kind, duplicate name, ...).
    #[error(transparent)]
    State(#[from] StateError),
    /// A value, key or descriptor is invalid.
    #[error(transparent)]
    Types(#[from] TypesError),
    /// Writing or reading a snapshot failed.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Checkpoint storage or metadata failed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A request that cannot be served as sent; the message says the fix.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The state of the subtask is gone (host died, restarted, or never held
    /// it): the job must restore from its latest checkpoint.
    #[error(
        "state lost: {0}; the job must restore from its latest completed checkpoint"
    )]
    StateLost(String),
    /// The peer broke the protocol (bad frame, unknown message, version).
    #[error("state host protocol error: {0}")]
    Protocol(String),
    /// The handshake carried a wrong job token.
    #[error("the state host refused the connection: wrong job token")]
    Unauthorized,
    /// A local file or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl HostError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
