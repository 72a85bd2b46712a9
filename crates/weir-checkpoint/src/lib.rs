//! Checkpoint storage, the `_metadata` format, retention, savepoints and
//! restore plans.
//!
//! A completed checkpoint is one `_metadata` file ([`CheckpointMetadata`],
//! encoded by [`encode_metadata`]) that names every state file of the job's
//! operators. [`CheckpointStorage`] publishes it atomically and finds the
//! newest valid one after a crash; [`Retention`] keeps the last few and says
//! what nothing references any more; [`create_savepoint`] copies a checkpoint
//! into a self-contained, movable savepoint; [`RestorePlan`] decides which
//! stored handles each subtask of a (possibly rescaled) job restores.
//! A run owns its job directory through a [`JobLease`] (which also reserves
//! checkpoint ids, so they never repeat) and follows one [`Lineage`], kept
//! by [`JobTimeline`]: what a restore of the latest state resumes from and
//! what retention counts.
//!
//! ```
//! use weir_checkpoint::{CheckpointKind, CheckpointMetadata, decode_metadata, encode_metadata};
//! use weir_types::{CheckpointId, Epoch, JobId};
//!
//! let meta = CheckpointMetadata::new(
//!     JobId::new("orders")?,
//!     CheckpointId(7),
//!     CheckpointKind::Checkpoint,
//!     Epoch(41),
//! );
//! let bytes = encode_metadata(&meta)?;
//! assert_eq!(decode_metadata(&bytes, "chk-7/_metadata")?, meta);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod coordinator;
mod error;
mod lease;
mod lineage;
mod local_store;
mod local_upload;
mod location;
mod metadata;
mod record;
mod resolved;
mod restore;
mod retention;
mod savepoint;
mod slow_writes;
mod storage;
mod timeline;

pub use coordinator::{
    CheckpointConfig, CheckpointCoordinator, CoordinatorEffect, CoordinatorOptions,
};
pub use error::{CheckpointError, MetadataProblem, Result, UidList};
pub use lease::{HolderLiveness, JobLease, LeaseDecision, LeaseHolder, LeaseRecord, LeaseTerms};
pub use lineage::{Lineage, LineageHead, RestoreSource};
pub use location::{PUT_DELAY_MS, StorageLocation, StorageOptions};
pub use metadata::{
    CheckpointKind, CheckpointMetadata, InlineFile, METADATA_MAGIC, MetadataStats,
    OperatorStateMeta, SubtaskStateMeta, decode_metadata, encode_metadata,
};
pub use resolved::ResolvedSnapshot;
pub use restore::{JobOperator, OperatorRestore, RestorePlan, RestoredOperator, SubtaskRestore};
pub use retention::{Retention, SubsumeDecision};
pub use savepoint::{
    DisposedSavepoint, create_savepoint, discard_incomplete_savepoint, dispose_savepoint,
    publish_savepoint,
};
pub use storage::CheckpointStorage;
pub use timeline::{JobTimeline, latest_state};
/// The names of files and directories in checkpoint and savepoint storage.
pub use weir_snapshot::layout;
