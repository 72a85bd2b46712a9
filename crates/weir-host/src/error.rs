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
    #[error("state lost: {0}; the job must restore from its latest completed checkpoint")]
    StateLost(String),
    /// The peer broke the protocol (bad frame, unknown message, version).
    #[error("state host protocol error: {0}")]
    Protocol(String),
    /// The handshake carried a wrong job token.
    #[error("the state host refused the connection: wrong job token")]
    Unauthorized,
    /// The state host refused a request with an error of its own kind; only
    /// its kind and message cross the socket.
    #[error("{message}")]
    Remote {
        /// Which kind of error the host had.
        kind: RemoteErrorKind,
        /// The host's explanation.
        message: String,
    },
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

/// The kind of an error a state host reports for a request (the variant of
/// its [`HostError`] that has no wire form of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteErrorKind {
    /// A [`HostError::State`] in the host: a state access was refused.
    State,
    /// A [`HostError::Types`] in the host: a value, key or descriptor is invalid.
    Types,
    /// A [`HostError::Snapshot`] in the host: writing or reading a snapshot failed.
    Snapshot,
    /// A [`HostError::Checkpoint`] in the host: checkpoint storage or metadata failed.
    Checkpoint,
    /// A [`HostError::Io`] in the host: a local file operation failed.
    Io,
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
