//! The checkpoint coordinator's driver.
//!
//! [`CoordinatorDriver`] runs one job's sans-IO
//! [`CheckpointCoordinator`](weir_checkpoint::CheckpointCoordinator) on
//! tokio. It owns the job directory for the run (an exclusive lease that
//! also reserves checkpoint ids, so they never repeat), recovers it for the
//! state the run starts from, and follows one lineage (what a restore of the
//! latest state resumes from). A timer triggers checkpoints; an HTTP server
//! (loopback unless told otherwise, every request checked against the job's
//! secret token before anything else) takes subtasks' acks and declines,
//! settles which state host owns each subtask, hears tasks' progress
//! through the epochs of a running Spark job, and serves statistics;
//! everything the job's owner must act on arrives as typed [`DriverEvent`]s.
//!
//! ```
//! use std::time::Duration;
//! use weir_checkpoint::coordinator::CheckpointConfig;
//! use weir_coordinator::{CoordinatorDriver, DriverOptions, JobToken, ServerOptions};
//! use weir_types::JobId;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let options = DriverOptions::new(
//!     JobId::new("orders")?,
//!     CheckpointConfig::new(Duration::from_secs(60)),
//!     dir.path().display().to_string(),
//! );
//! let driver = CoordinatorDriver::start(options, ServerOptions::new(JobToken::new("s3cret")?)).await?;
//! assert!(driver.local_addr().ip().is_loopback());
//! assert_eq!(driver.generation(), 1);
//! driver.shutdown(false).await?;
//! # Ok(())
//! # }
//! ```

mod client;
mod clock;
mod driver;
mod error;
mod events;
mod http;
mod lease;
mod options;
mod owners;
mod progress;
mod server;
mod store;
mod tls;
mod token;

pub use client::{Answer, claim_owner, post, post_json, report_progress};
pub use driver::CoordinatorDriver;
pub use error::{DriverError, Result};
pub use events::DriverEvent;
pub use http::OutcomeBody;
pub use options::{DEFAULT_HISTORY, DEFAULT_MAX_BODY_BYTES, DriverOptions, ServerOptions};
pub use owners::{ClaimOutcome, OwnerAnswer, OwnerClaim, OwnerRegistry};
pub use progress::{GrantedBarrier, ProgressAnswer, ProgressOutcome, ProgressReport};
pub use tls::{Tls, TlsError, TlsFiles};
pub use token::JobToken;
