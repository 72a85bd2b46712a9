//! The client side of a state host, for the Python glue (blocking calls).
//!
//! ```no_run
//! use weir_host::client::{HostClient, HostOptions, ensure_host};
//! use weir_host::protocol::Expectation;
//! # fn spec() -> weir_host::SubtaskSpec { unimplemented!() }
//! # fn main() -> weir_host::Result<()> {
//! let dir = std::path::Path::new("/tmp/weir-orders-run1");
//! ensure_host(dir, "token", &HostOptions::default())?;
//! let session = HostClient::connect(dir, "token")?.attach(spec(), Expectation::fresh())?;
//! # Ok(())
//! # }
//! ```

mod connection;
mod session;
mod spawn;

pub use connection::{DEFAULT_REPLY_TIMEOUT, HostClient};
pub use session::RemoteSession;
pub use spawn::{EXIT_ALREADY_RUNNING, HOST_BIN_ENV, HOST_TOKEN_ENV, HostOptions, ensure_host};
