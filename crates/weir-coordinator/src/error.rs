//! The error type of this crate.

use std::net::SocketAddr;

use weir_checkpoint::coordinator::CoordinatorError;

/// Result alias for this crate.
pub type Result<T, E = DriverError> = std::result::Result<T, E>;

/// What can stop the driver from starting or serving a request.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// An empty token would let anyone ack.
    #[error("the job token is empty; generate a random secret token for the job")]
    EmptyToken,
    /// The HTTP server could not listen. Retry with another address or port.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The coordinator refused its options or the request.
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
}

impl DriverError {
    /// Whether trying again unchanged may succeed (STYLE B3.4): only a bind
    /// failure may be transient (the port is still in use).
    pub fn is_retryable(&self) -> bool {
        matches!(self, DriverError::Bind { .. })
    }
}
