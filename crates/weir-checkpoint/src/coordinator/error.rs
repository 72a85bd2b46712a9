//! The coordinator's error type.
//!
//! Only misconfiguration (and asking a coordinator that failed its job for a
//! savepoint) is an error here: late, duplicate and unknown acks
//! are values ([`AckOutcome`](super::AckOutcome)) and failed checkpoints are
//! effects, because the coordinator must keep running through both.

use std::time::Duration;

use thiserror::Error;
use weir_types::{CheckpointId, OperatorUid, TypesError};

/// A checkpoint configuration or coordinator setup that cannot work.
///
/// None of these is worth retrying: the caller has to change its input.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CoordinatorError {
    /// The checkpoint interval is below the smallest one the coordinator runs.
    #[error(
        "checkpoint interval {interval:?} is below the minimum of {minimum:?}; set a longer interval"
    )]
    IntervalTooShort {
        /// The configured interval.
        interval: Duration,
        /// The smallest interval allowed.
        minimum: Duration,
    },
    /// The checkpoint timeout is below the smallest one the coordinator runs.
    #[error(
        "checkpoint timeout {timeout:?} is below the minimum of {minimum:?}; set a longer timeout"
    )]
    TimeoutTooShort {
        /// The configured timeout.
        timeout: Duration,
        /// The smallest timeout allowed.
        minimum: Duration,
    },
    /// Max concurrent checkpoints is zero, so no checkpoint could ever start.
    #[error("max concurrent checkpoints is 0; set it to at least 1")]
    NoConcurrentCheckpoints,
    /// A minimum pause leaves room for one checkpoint at a time only (as in Flink).
    #[error(
        "a minimum pause of {min_pause:?} between checkpoints allows only one concurrent checkpoint, \
         but max concurrent is {max_concurrent}; set max concurrent to 1 or the minimum pause to 0"
    )]
    MinPauseWithConcurrency {
        /// The configured minimum pause.
        min_pause: Duration,
        /// The configured max concurrent checkpoints.
        max_concurrent: u32,
    },
    /// Retaining zero checkpoints would delete the one a restore needs.
    #[error("retained checkpoints is 0; retain at least 1 so a restore has a checkpoint to use")]
    NothingRetained,
    /// The job lists a stateful operator twice.
    #[error(
        "operator {uid} is listed twice; give each stateful operator one entry with a unique uid"
    )]
    DuplicateOperator {
        /// The uid.
        uid: OperatorUid,
    },
    /// A stateful operator's parallelism does not fit its max parallelism.
    #[error("operator {uid} cannot be checkpointed: {source}")]
    InvalidOperator {
        /// The uid.
        uid: OperatorUid,
        /// What is wrong with it.
        #[source]
        source: TypesError,
    },
    /// A checkpointing mode that does not exist.
    #[error("checkpointing mode {mode:?} is unknown: use \"exactly_once\" or \"at_least_once\"")]
    UnknownMode {
        /// The name given.
        mode: String,
    },
    /// An externalized cleanup policy that does not exist.
    #[error(
        "externalized checkpoint cleanup {cleanup:?} is unknown: use \"retain_on_cancellation\" or \"delete_on_cancellation\""
    )]
    UnknownCleanup {
        /// The name given.
        cleanup: String,
    },
    /// A snapshot compression name that is not one of the three.
    #[error("snapshot compression {compression:?} is unknown: use \"zstd\", \"lz4\" or \"none\"")]
    UnknownCompression {
        /// The name given.
        compression: String,
    },
    /// Every checkpoint id reserved so far is used; more are being reserved.
    /// Retrying shortly succeeds.
    #[error(
        "checkpoint ids up to {reserved_until} are used and more are not reserved yet; try again shortly"
    )]
    IdsExhausted {
        /// The last id reserved.
        reserved_until: CheckpointId,
    },
    /// The job is restarting; nothing can start until it runs again.
    #[error("the job is restarting; trigger the savepoint again once it runs")]
    Restarting,
    /// The coordinator failed the job; a restored job gets a new coordinator.
    #[error(
        "the coordinator has failed the job after too many checkpoint failures; restart the job to trigger again"
    )]
    JobFailed,
}

impl CoordinatorError {
    /// Whether trying again unchanged may succeed: only while ids are being
    /// reserved or the job is restarting; everything else needs new input.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::IdsExhausted { .. } | Self::Restarting)
    }
}

/// The result type of coordinator setup.
pub type Result<T, E = CoordinatorError> = std::result::Result<T, E>;
