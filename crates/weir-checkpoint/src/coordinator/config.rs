//! Checkpoint configuration: Flink's `CheckpointConfig` options and the rules
//! that tie them together.
//!
//! Checkpointing is off unless a job builds one of these (C1). Validation runs
//! once, when the coordinator is created; the policy code trusts the values.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::{CoordinatorError, Result};

/// The shortest interval and timeout the coordinator accepts (Flink's
/// `MINIMAL_CHECKPOINT_TIME`): anything shorter is a typo, not a policy.
pub const MIN_CHECKPOINT_TIME: Duration = Duration::from_millis(10);

/// When sinks publish (C2). Micro-epoch cuts are aligned by construction, so
/// the mode only decides when output becomes visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointingMode {
    /// Sinks publish an epoch's output once a checkpoint covering it completes.
    #[default]
    ExactlyOnce,
    /// Sinks publish at the end of each epoch: lower latency, replays after a
    /// failure may duplicate output.
    AtLeastOnce,
}

/// What happens to retained checkpoints when the user cancels the job.
///
/// Checkpoints always survive a failure: recovery needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExternalizedCleanup {
    /// Delete them: checkpoints are system-owned (Flink's default).
    #[default]
    DeleteOnCancellation,
    /// Keep them, so the job can be resumed from its last checkpoint later.
    RetainOnCancellation,
}

/// Flink's checkpoint options. Build with [`CheckpointConfig::new`], adjust the
/// fields, and let the coordinator [`validate`](CheckpointConfig::validate) it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// Time between the starts of two periodic checkpoints.
    pub interval: Duration,
    /// Exactly-once (default) or at-least-once.
    pub mode: CheckpointingMode,
    /// An in-progress checkpoint or savepoint is aborted this long after its
    /// trigger (C3). Default 10 minutes.
    pub timeout: Duration,
    /// Least time from the end of one checkpoint to the start of the next
    /// (C4); non-zero only with `max_concurrent == 1`. Default 0.
    pub min_pause: Duration,
    /// Checkpoints in progress at once, savepoints not counted (C5). Default 1.
    pub max_concurrent: u32,
    /// Consecutive failed checkpoints tolerated before the job fails (C14).
    /// Default 0: the first failure fails the job, as in Flink.
    pub tolerable_failures: u32,
    /// Completed checkpoints kept; older ones are subsumed. Default 1.
    pub retained: u32,
    /// Cleanup of retained checkpoints on cancellation.
    pub externalized_cleanup: ExternalizedCleanup,
}

impl CheckpointConfig {
    /// Periodic checkpoints every `interval`, every other option at Flink's
    /// default (`enable_checkpointing(interval)`).
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            mode: CheckpointingMode::default(),
            timeout: Duration::from_secs(600),
            min_pause: Duration::ZERO,
            max_concurrent: 1,
            tolerable_failures: 0,
            retained: 1,
            externalized_cleanup: ExternalizedCleanup::default(),
        }
    }

    /// Checks every rule and returns the config unchanged when it holds.
    pub fn validate(self) -> Result<Self> {
        if self.interval < MIN_CHECKPOINT_TIME {
            return Err(CoordinatorError::IntervalTooShort {
                interval: self.interval,
                minimum: MIN_CHECKPOINT_TIME,
            });
        }
        if self.timeout < MIN_CHECKPOINT_TIME {
            return Err(CoordinatorError::TimeoutTooShort {
                timeout: self.timeout,
                minimum: MIN_CHECKPOINT_TIME,
            });
        }
        if self.max_concurrent == 0 {
            return Err(CoordinatorError::NoConcurrentCheckpoints);
        }
        if !self.min_pause.is_zero() && self.max_concurrent > 1 {
            return Err(CoordinatorError::MinPauseWithConcurrency {
                min_pause: self.min_pause,
                max_concurrent: self.max_concurrent,
            });
        }
        if self.retained == 0 {
            return Err(CoordinatorError::NothingRetained);
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn defaults_follow_flink() {
        let c = CheckpointConfig::new(secs(5))
            .validate()
            .expect("defaults are valid");
        assert_eq!(c.mode, CheckpointingMode::ExactlyOnce);
        assert_eq!(c.timeout, secs(600));
        assert_eq!(c.min_pause, Duration::ZERO);
        assert_eq!(c.max_concurrent, 1);
        assert_eq!(c.tolerable_failures, 0);
        assert_eq!(c.retained, 1);
        assert_eq!(
            c.externalized_cleanup,
            ExternalizedCleanup::DeleteOnCancellation
        );
    }

    #[test]
    fn too_short_interval_and_timeout_are_rejected() {
        let err = CheckpointConfig::new(Duration::from_millis(9)).validate();
        assert_eq!(
            err,
            Err(CoordinatorError::IntervalTooShort {
                interval: Duration::from_millis(9),
                minimum: MIN_CHECKPOINT_TIME
            })
        );
        let mut c = CheckpointConfig::new(secs(1));
        c.timeout = Duration::from_millis(1);
        assert!(matches!(
            c.validate(),
            Err(CoordinatorError::TimeoutTooShort { .. })
        ));
    }

    #[test]
    fn min_pause_requires_a_single_concurrent_checkpoint() {
        let mut c = CheckpointConfig::new(secs(1));
        c.min_pause = secs(2);
        c.max_concurrent = 2;
        let err = c
            .clone()
            .validate()
            .expect_err("min pause with concurrency");
        assert!(
            err.to_string()
                .contains("set max concurrent to 1 or the minimum pause to 0")
        );
        c.max_concurrent = 1;
        assert!(c.clone().validate().is_ok());
        c.min_pause = Duration::ZERO;
        c.max_concurrent = 3;
        assert!(c.validate().is_ok(), "concurrency without a pause is fine");
    }

    #[test]
    fn zero_concurrency_and_zero_retention_are_rejected() {
        let mut c = CheckpointConfig::new(secs(1));
        c.max_concurrent = 0;
        assert_eq!(c.validate(), Err(CoordinatorError::NoConcurrentCheckpoints));
        let mut c = CheckpointConfig::new(secs(1));
        c.retained = 0;
        assert_eq!(c.validate(), Err(CoordinatorError::NothingRetained));
    }
}
