//! Tolerable checkpoint failures (Flink's `CheckpointFailureManager`).
//!
//! Counts consecutive failed checkpoints and decides when the job must fail.
//! A failure never touches the completed checkpoints: recovery still has the
//! latest one.

use weir_types::CheckpointId;

use super::pending::AbortReason;

/// What a checkpoint failure means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureDecision {
    /// Not a failure of checkpointing (subsumed, job already failing), or
    /// older than the latest completed checkpoint, which already proved
    /// checkpointing healthy after it.
    NotCounted,
    /// Counted, still within the tolerance.
    Tolerated {
        /// Consecutive failures so far.
        consecutive: u32,
    },
    /// One failure more than tolerated: fail the job.
    FailJob {
        /// Consecutive failures so far.
        consecutive: u32,
    },
}

/// Consecutive-failure counting for periodic checkpoints (savepoints never
/// count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureCounter {
    tolerable: u32,
    consecutive: u32,
    latest_completed: Option<CheckpointId>,
}

impl FailureCounter {
    /// A counter that tolerates `tolerable` consecutive failures.
    pub fn new(tolerable: u32) -> Self {
        Self {
            tolerable,
            consecutive: 0,
            latest_completed: None,
        }
    }

    /// Checkpoint `id` completed: the streak ends.
    pub fn on_completed(&mut self, id: CheckpointId) {
        self.consecutive = 0;
        self.latest_completed = Some(self.latest_completed.map_or(id, |l| l.max(id)));
    }

    /// Checkpoint `id` was aborted for `reason`.
    pub fn on_failed(&mut self, id: CheckpointId, reason: &AbortReason) -> FailureDecision {
        let older_than_success = self.latest_completed.is_some_and(|l| id < l);
        if !reason.counts_as_failure() || older_than_success {
            return FailureDecision::NotCounted;
        }
        self.consecutive += 1;
        if self.consecutive > self.tolerable {
            FailureDecision::FailJob {
                consecutive: self.consecutive,
            }
        } else {
            FailureDecision::Tolerated {
                consecutive: self.consecutive,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_tolerance_fails_on_the_first_failure() {
        let mut c = FailureCounter::new(0);
        assert_eq!(
            c.on_failed(CheckpointId(1), &AbortReason::Expired),
            FailureDecision::FailJob { consecutive: 1 }
        );
    }

    #[test]
    fn a_completion_resets_the_streak() {
        let mut c = FailureCounter::new(1);
        assert_eq!(
            c.on_failed(CheckpointId(1), &AbortReason::Expired),
            FailureDecision::Tolerated { consecutive: 1 }
        );
        c.on_completed(CheckpointId(2));
        assert_eq!(
            c.on_failed(CheckpointId(3), &AbortReason::Expired),
            FailureDecision::Tolerated { consecutive: 1 }
        );
        assert_eq!(
            c.on_failed(CheckpointId(4), &AbortReason::Expired),
            FailureDecision::FailJob { consecutive: 2 }
        );
    }

    #[test]
    fn subsumption_and_stale_failures_do_not_count() {
        let mut c = FailureCounter::new(0);
        assert_eq!(
            c.on_failed(
                CheckpointId(1),
                &AbortReason::Subsumed {
                    by: CheckpointId(2)
                }
            ),
            FailureDecision::NotCounted
        );
        assert_eq!(
            c.on_failed(CheckpointId(1), &AbortReason::JobFailing),
            FailureDecision::NotCounted
        );
        c.on_completed(CheckpointId(5));
        let late = AbortReason::MetadataNotWritten {
            message: "disk full".into(),
        };
        assert_eq!(
            c.on_failed(CheckpointId(4), &late),
            FailureDecision::NotCounted
        );
        assert_eq!(
            c.on_failed(CheckpointId(6), &late),
            FailureDecision::FailJob { consecutive: 1 }
        );
    }
}
