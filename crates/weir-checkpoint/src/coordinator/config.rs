//! Checkpoint configuration: Flink's `CheckpointConfig` options and the rules
//! that tie them together.
//!
//! Checkpointing is off unless a job builds one of these. Validation runs
//! once, when the coordinator is created; the policy code trusts the values.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_snapshot::Compression;

use super::error::{CoordinatorError, Result};

/// The shortest interval and timeout the coordinator accepts (Flink's
/// `MINIMAL_CHECKPOINT_TIME`): anything shorter is a typo, not a policy.
pub const MIN_CHECKPOINT_TIME: Duration = Duration::from_millis(10);

/// When sinks publish. Micro-epoch cuts are aligned by construction, so
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

/// What happens to the job directory's checkpoints when the user cancels
/// the job.
///
/// Checkpoints always survive a failure (recovery needs them) and a job that
/// finishes or stops with a savepoint; savepoints are never deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExternalizedCleanup {
    /// Keep them, so the job can be resumed from its latest state later
    /// (nothing is deleted unless asked for).
    #[default]
    RetainOnCancellation,
    /// Delete every checkpoint of the job directory: checkpoints are
    /// system-owned, so a cancelled job leaves none behind.
    DeleteOnCancellation,
}

impl CheckpointingMode {
    /// The mode's name: `exactly_once` or `at_least_once`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ExactlyOnce => "exactly_once",
            Self::AtLeastOnce => "at_least_once",
        }
    }
}

impl FromStr for CheckpointingMode {
    type Err = CoordinatorError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "exactly_once" => Ok(Self::ExactlyOnce),
            "at_least_once" => Ok(Self::AtLeastOnce),
            other => Err(CoordinatorError::UnknownMode {
                mode: other.to_owned(),
            }),
        }
    }
}

impl ExternalizedCleanup {
    /// The policy's name: `retain_on_cancellation` or `delete_on_cancellation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RetainOnCancellation => "retain_on_cancellation",
            Self::DeleteOnCancellation => "delete_on_cancellation",
        }
    }
}

impl FromStr for ExternalizedCleanup {
    type Err = CoordinatorError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "retain_on_cancellation" => Ok(Self::RetainOnCancellation),
            "delete_on_cancellation" => Ok(Self::DeleteOnCancellation),
            other => Err(CoordinatorError::UnknownCleanup {
                cleanup: other.to_owned(),
            }),
        }
    }
}

/// The snapshot compression named `name`: `none`, `zstd` or `lz4`.
pub fn snapshot_compression(name: &str) -> Result<Compression> {
    Compression::from_name(name).ok_or_else(|| CoordinatorError::UnknownCompression {
        compression: name.to_owned(),
    })
}

/// Flink's checkpoint options. Build with [`CheckpointConfig::new`], adjust the
/// fields, and let the coordinator [`validate`](CheckpointConfig::validate) it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CheckpointConfig {
    /// Time between the starts of two periodic checkpoints.
    pub interval: Duration,
    /// Exactly-once (default) or at-least-once.
    pub mode: CheckpointingMode,
    /// An in-progress checkpoint or savepoint is aborted this long after its
    /// trigger. Default 10 minutes.
    pub timeout: Duration,
    /// Least time from the end of one checkpoint to the start of the next;
    /// non-zero only with `max_concurrent == 1`. Default 0.
    pub min_pause: Duration,
    /// Checkpoints in progress at once, savepoints not counted. Default 1.
    pub max_concurrent: u32,
    /// Consecutive failed checkpoints tolerated before the job fails.
    /// Default 0: the first failure fails the job, as in Flink.
    pub tolerable_failures: u32,
    /// Completed checkpoints kept; older ones are subsumed. Default 1.
    pub retained: u32,
    /// Cleanup of retained checkpoints on cancellation.
    pub externalized_cleanup: ExternalizedCleanup,
    /// How canonical snapshot files (every heap checkpoint, every
    /// savepoint) compress their key-group blocks (Flink's
    /// `execution.checkpointing.snapshot-compression`). Default zstd: a
    /// third of the bytes for about the same time on local disks, and the
    /// fewest bytes to send to an object store. `none` suits a fast disk
    /// and a busy CPU; LZ4 sits between them.
    pub snapshot_compression: Compression,
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
            snapshot_compression: Compression::default(),
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
            ExternalizedCleanup::RetainOnCancellation
        );
        assert_eq!(c.snapshot_compression, Compression::Zstd);
    }

    #[test]
    fn modes_cleanups_and_compressions_parse_from_their_names_only() {
        for mode in [
            CheckpointingMode::ExactlyOnce,
            CheckpointingMode::AtLeastOnce,
        ] {
            assert_eq!(mode.as_str().parse(), Ok(mode));
        }
        for cleanup in [
            ExternalizedCleanup::RetainOnCancellation,
            ExternalizedCleanup::DeleteOnCancellation,
        ] {
            assert_eq!(cleanup.as_str().parse(), Ok(cleanup));
        }
        let err = "exactly-once"
            .parse::<CheckpointingMode>()
            .expect_err("typo");
        assert!(
            err.to_string()
                .contains("\"exactly_once\" or \"at_least_once\""),
            "{err}"
        );
        let err = "keep".parse::<ExternalizedCleanup>().expect_err("unknown");
        assert!(err.to_string().contains("retain_on_cancellation"), "{err}");
        for compression in Compression::ALL {
            assert_eq!(snapshot_compression(compression.as_str()), Ok(compression));
        }
        let err = snapshot_compression("gzip").expect_err("unknown");
        assert!(
            err.to_string().contains("\"zstd\", \"lz4\" or \"none\""),
            "{err}"
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
