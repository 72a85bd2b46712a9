//! The checkpoint coordinator's driver.
//!
//! [`CoordinatorDriver`] runs the sans-IO
//! [`CheckpointCoordinator`](weir_checkpoint::CheckpointCoordinator) on tokio:
//! a timer ticks it when a checkpoint falls due or times out, an HTTP server
//! (loopback by default, every request checked against the job's secret
//! token) takes subtasks' acks and declines and serves statistics, completed
//! checkpoints go to storage through a [`MetadataSink`], and everything the
//! job's owner must act on arrives as [`DriverEvent`]s.
//!
//! ```
//! use std::time::Duration;
//! use weir_checkpoint::coordinator::{CheckpointConfig, CoordinatorOptions, Timestamp};
//! use weir_checkpoint::{CheckpointStorage, StorageLocation, StorageOptions};
//! use weir_coordinator::{CoordinatorDriver, JobToken, ServerOptions, StorageSink};
//! use weir_types::{CheckpointId, JobId};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let location = StorageLocation::parse(&dir.path().display().to_string(), &StorageOptions::default())?;
//! let job = JobId::new("orders")?;
//! let sink = StorageSink::new(CheckpointStorage::filesystem(&location, job.clone())?, None);
//! let options = CoordinatorOptions {
//!     job_id: job,
//!     config: CheckpointConfig::new(Duration::from_secs(60)),
//!     operators: Vec::new(),
//!     first_checkpoint_id: CheckpointId(1),
//!     started_at: Timestamp(0),
//!     history: 10,
//!     retention: None,
//! };
//! let (driver, _events) =
//!     CoordinatorDriver::start(options, sink, ServerOptions::new(JobToken::new("s3cret")?)).await?;
//! assert!(driver.local_addr().ip().is_loopback());
//! driver.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod clock;
mod driver;
mod error;
mod http;
mod sink;
mod token;

pub use driver::{CoordinatorDriver, DEFAULT_MAX_BODY_BYTES, DriverEvent, ServerOptions};
pub use error::{DriverError, Result};
pub use http::OutcomeBody;
pub use sink::{MetadataSink, SinkError, StorageSink};
pub use token::JobToken;
