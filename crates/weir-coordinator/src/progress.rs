//! Tasks' reports at epoch boundaries inside a running Spark job, as
//! `POST /progress` takes them (see
//! [`CheckpointCoordinator::on_progress`](weir_checkpoint::coordinator::CheckpointCoordinator::on_progress)).

use serde::{Deserialize, Serialize};
use weir_checkpoint::coordinator::{BarrierGrant, EpochProgress};

/// A subtask's report: where it stands, in which generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressReport {
    /// The generation the task belongs to.
    pub generation: u64,
    /// Where the subtask stands.
    #[serde(flatten)]
    pub progress: EpochProgress,
}

/// The barriers the reporting subtask takes before its next epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProgressAnswer {
    /// Oldest first.
    pub barriers: Vec<GrantedBarrier>,
}

/// One barrier to take, with where its snapshot goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantedBarrier {
    /// The checkpoint, its cut and its incremental base.
    #[serde(flatten)]
    pub grant: BarrierGrant,
    /// The storage the subtask uploads to: the job directory, or the
    /// savepoint's own directory.
    pub storage: String,
}

/// What became of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressOutcome {
    /// Heard; these barriers follow the subtask's `done` epoch.
    Answered(ProgressAnswer),
    /// The report belongs to another generation than the current one.
    WrongGeneration {
        /// The current generation.
        current: u64,
    },
    /// The job has no such stateful subtask.
    UnknownSubtask,
}
