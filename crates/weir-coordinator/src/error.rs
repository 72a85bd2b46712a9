//! The error type of this crate.

use std::net::SocketAddr;

use weir_checkpoint::CheckpointError;
use weir_checkpoint::coordinator::CoordinatorError;
use weir_types::CheckpointId;

/// Result alias for this crate.
pub type Result<T, E = DriverError> = std::result::Result<T, E>;

/// What can stop the driver from starting, restarting or doing what it is
/// asked.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// An empty token would let anyone ack.
    #[error("the job token is empty; generate a random secret token for the job")]
    EmptyToken,
    /// The bind address names no address of this machine.
    #[error("cannot resolve bind address {host:?}: {reason}")]
    Resolve {
        /// The host given.
        host: String,
        /// Why it did not resolve.
        reason: String,
    },
    /// A wildcard bind address without an address to advertise.
    #[error(
        "bind address {addr} listens on every interface but executors cannot connect to it; \
         also pass the address they should use (advertise, e.g. spark.driver.host)"
    )]
    NothingToAdvertise {
        /// The wildcard address.
        addr: SocketAddr,
    },
    /// The HTTP server could not listen. Retry with another address or port.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A savepoint without a directory to go to.
    #[error(
        "savepoint {id} has no target directory: pass one, or configure the job's savepoint directory"
    )]
    NoSavepointDir {
        /// The savepoint that could not start.
        id: CheckpointId,
    },
    /// The coordinator refused its options or the request.
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
    /// Checkpoint storage failed, or the job directory's lease is held or lost.
    #[error(transparent)]
    Storage(#[from] CheckpointError),
    /// The coordinator could not be reached (a client's request).
    #[error("cannot reach the checkpoint coordinator at {url}: {reason}")]
    Unreachable {
        /// The URL requested.
        url: String,
        /// The last attempt's failure.
        reason: String,
    },
    /// The coordinator answered a client's request with an error.
    #[error(
        "the checkpoint coordinator at {url} refused the request with HTTP {status}: {message}"
    )]
    Refused {
        /// The URL requested.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The coordinator's explanation.
        message: String,
    },
    /// The driver was shut down.
    #[error("the coordinator was shut down; start a new one for a new run")]
    ShutDown,
}

impl DriverError {
    /// Whether trying again unchanged may succeed: a bind failure (the port
    /// is still in use), an unreachable coordinator, a coordinator that is
    /// restarting or reserving ids, and storage that was unreachable.
    pub fn is_retryable(&self) -> bool {
        match self {
            DriverError::Bind { .. } | DriverError::Unreachable { .. } => true,
            DriverError::Coordinator(err) => err.is_retryable(),
            DriverError::Storage(CheckpointError::Store { .. }) => true,
            _ => false,
        }
    }
}
