//! The client side of a state host, for the Python glue (blocking calls).
//!
//! ```no_run
//! use weir_host::client::{HostClient, HostOptions, ensure_host};
//! use weir_host::protocol::Expectation;
//! # fn spec() -> weir_host::SubtaskSpec { unimplemented!() }
//! # fn main() -> weir_host::Result<()> {
//! // This executor's host, also reachable from other executors over TCP.
//! let dir = std::path::Path::new("/tmp/weir-orders-run1/executor-3");
//! let options = HostOptions {
//!     listen: Some("10.0.0.7:0".into()),
//!     ..HostOptions::default()
//! };
//! let local = ensure_host(dir, "token", &options)?;
//! let session = HostClient::connect(&local.address, "token")?.attach(spec(), Expectation::fresh())?;
//! // `local.tcp_address` is what a task elsewhere connects to for this subtask:
//! // HostClient::connect(&"10.0.0.7:41234".parse()?, "token")?.attach(..)
//! # Ok(())
//! # }
//! ```

mod connection;
mod session;
mod spawn;

pub use connection::{DEFAULT_REPLY_TIMEOUT, HostClient};
pub use session::RemoteSession;
pub use spawn::{
    EXIT_ALREADY_RUNNING, HOST_BIN_ENV, HOST_TOKEN_ENV, HostOptions, LocalHost, ensure_host,
};
