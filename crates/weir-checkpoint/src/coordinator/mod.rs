//! The checkpoint coordinator's decisions, free of I/O (STYLE B4.1).
//!
//! [`CheckpointCoordinator`] takes events (time passing, epochs becoming
//! final, acks, declines, `_metadata` written) with the current time and
//! returns [`CoordinatorEffect`]s for its driver (`weir-coordinator`) to carry
//! out. Clocks, timers, HTTP and storage live in the driver, so every rule
//! here is tested on a simulated clock.
//!
//! ```
//! use std::time::Duration;
//! use weir_checkpoint::coordinator::{
//!     CheckpointConfig, CheckpointCoordinator, CoordinatorEffect, CoordinatorOptions, EpochCut,
//!     Timestamp,
//! };
//! use weir_types::{CheckpointId, Epoch, JobId};
//!
//! let mut coordinator = CheckpointCoordinator::new(CoordinatorOptions {
//!     job_id: JobId::new("orders")?,
//!     config: CheckpointConfig::new(Duration::from_secs(10)),
//!     operators: Vec::new(),
//!     first_checkpoint_id: CheckpointId(1),
//!     reserved_until: CheckpointId(1_000),
//!     started_at: Timestamp(0),
//!     history: 10,
//!     retention: None,
//! })?;
//! // Periodic checkpoints start once the job runs: an epoch of it is final.
//! assert_eq!(coordinator.next_wakeup(Timestamp(0)), None);
//! coordinator.on_epoch_final(EpochCut { epoch: Epoch(1), ..EpochCut::default() });
//! assert_eq!(coordinator.next_wakeup(Timestamp(0)), Some(Timestamp(10_000)));
//! let effects = coordinator.on_tick(Timestamp(10_000));
//! assert!(matches!(effects[..], [CoordinatorEffect::Triggered { id: CheckpointId(1), .. }]));
//! // A job without stateful operators completes as soon as an epoch is final.
//! let effects = coordinator.on_epoch_final(EpochCut { epoch: Epoch(3), ..EpochCut::default() });
//! assert!(matches!(effects[1], CoordinatorEffect::WriteMetadata(_)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod checkpoint_coordinator;
mod config;
mod effect;
mod error;
mod failures;
mod pending;
mod running_epochs;
mod stats;
mod time;
mod trigger;

pub use checkpoint_coordinator::{CheckpointCoordinator, CoordinatorOptions};
pub use config::{
    CheckpointConfig, CheckpointingMode, ExternalizedCleanup, MIN_CHECKPOINT_TIME,
    snapshot_compression,
};
pub use effect::CoordinatorEffect;
pub use error::{CoordinatorError, Result};
pub use failures::{FailureCounter, FailureDecision};
pub use pending::{
    AbortReason, AckOutcome, EpochCut, PendingCheckpoint, PendingPhase, SubtaskAck, SubtaskDecline,
    TaskKey,
};
pub use running_epochs::{BarrierGrant, EpochProgress};
pub use stats::{
    CheckpointCounts, CheckpointStats, CheckpointStatsHistory, CheckpointStatus, DEFAULT_HISTORY,
    SubtaskMetrics, SubtaskStats,
};
pub use time::Timestamp;
pub use trigger::{TriggerDecision, TriggerFacts, TriggerPolicy};
