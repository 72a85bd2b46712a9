//! What the coordinator asks its driver to do.

use weir_types::{CheckpointId, Epoch};

use super::pending::AbortReason;
use crate::retention::SubsumeDecision;
use crate::{CheckpointKind, CheckpointMetadata};

/// One instruction to the driver, in the order the driver must carry them out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorEffect {
    /// A checkpoint or savepoint started. It takes the next final epoch as its
    /// cut, so the driver runs a barrier-only epoch if no data epoch follows.
    Triggered {
        /// The checkpoint.
        id: CheckpointId,
        /// Checkpoint or savepoint.
        kind: CheckpointKind,
    },
    /// Send barrier `(id, cut)` with the next task of every stateful subtask.
    InjectBarrier {
        /// The checkpoint.
        id: CheckpointId,
        /// Checkpoint or savepoint.
        kind: CheckpointKind,
        /// The epoch the barrier follows.
        cut: Epoch,
    },
    /// Every subtask acked: write this `_metadata` atomically, then report
    /// back with `on_metadata_stored` or `on_metadata_failed`.
    WriteMetadata(Box<CheckpointMetadata>),
    /// The checkpoint is complete: tell the listeners. Sinks publish the
    /// output of epochs up to `cut`; a listener that missed an earlier
    /// notification treats this one as covering it.
    NotifyComplete {
        /// The checkpoint.
        id: CheckpointId,
        /// Checkpoint or savepoint.
        kind: CheckpointKind,
        /// Its cut.
        cut: Epoch,
    },
    /// Completed checkpoints left retention: delete their directories and
    /// the shared files nothing retained references (`CheckpointStorage::apply`).
    /// Shared files are held back while other checkpoints are in flight,
    /// since one of them may reuse a file.
    Subsume(SubsumeDecision),
    /// The checkpoint will never complete: cancel its snapshot tasks and
    /// delete what it uploaded.
    Aborted {
        /// The checkpoint.
        id: CheckpointId,
        /// Checkpoint or savepoint.
        kind: CheckpointKind,
        /// Why.
        reason: AbortReason,
    },
    /// More consecutive checkpoint failures than tolerated: fail the job
    /// and restore it from the latest completed checkpoint. The coordinator
    /// triggers nothing more.
    FailJob {
        /// Consecutive failures, the last one included.
        consecutive_failures: u32,
        /// The last failure.
        reason: AbortReason,
        /// The checkpoint to restore from, if any completed in this run.
        latest_completed: Option<CheckpointId>,
    },
}
