//! The periodic trigger policy: when may the next checkpoint start?
//!
//! Pure and clock-free: the caller passes `now` and the facts about checkpoints
//! in flight. Savepoints are not the policy's business: they start on request,
//! beside checkpoints.

use std::time::Duration;

use super::config::CheckpointConfig;
use super::time::Timestamp;

/// What the coordinator knows about its periodic checkpoints at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TriggerFacts {
    /// Checkpoints triggered and neither completed nor aborted (savepoints
    /// excluded).
    pub in_flight: usize,
    /// When the latest checkpoint was triggered, if any was.
    pub last_trigger: Option<Timestamp>,
    /// When the latest checkpoint ended, by completing or by being aborted.
    /// A failed checkpoint earns the pause too, so a struggling job is not
    /// hit by retries back to back.
    pub last_end: Option<Timestamp>,
    /// A checkpoint was asked for ahead of the interval: it is due now, still
    /// after the minimum pause and within the concurrency limit.
    pub requested: bool,
}

/// What to do about the next periodic checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerDecision {
    /// Trigger a checkpoint now.
    TriggerNow,
    /// Nothing before this time; decide again then.
    WaitUntil(Timestamp),
    /// Max concurrent checkpoints are in flight; decide again when one ends.
    WaitForInFlight,
}

/// The trigger policy of one coordinator run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerPolicy {
    interval: Duration,
    min_pause: Duration,
    max_concurrent: usize,
    started_at: Timestamp,
}

impl TriggerPolicy {
    /// The policy of `config` for a coordinator started at `started_at`; the
    /// first checkpoint is due one interval later.
    pub fn new(config: &CheckpointConfig, started_at: Timestamp) -> Self {
        Self {
            interval: config.interval,
            min_pause: config.min_pause,
            max_concurrent: usize::try_from(config.max_concurrent).unwrap_or(usize::MAX),
            started_at,
        }
    }

    /// Decides at `now`. A checkpoint is due one interval after the previous
    /// trigger; when a long checkpoint delayed it, it starts as soon as that one
    /// ends, or once the minimum pause after it has passed.
    pub fn decide(&self, now: Timestamp, facts: &TriggerFacts) -> TriggerDecision {
        if facts.in_flight >= self.max_concurrent {
            return TriggerDecision::WaitForInFlight;
        }
        let due = if facts.requested {
            now
        } else {
            facts
                .last_trigger
                .unwrap_or(self.started_at)
                .after(self.interval)
        };
        let paused_until = facts.last_end.map(|end| end.after(self.min_pause));
        let earliest = paused_until.map_or(due, |p| p.max(due));
        if now >= earliest {
            TriggerDecision::TriggerNow
        } else {
            TriggerDecision::WaitUntil(earliest)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(interval: u64, min_pause: u64, max_concurrent: u32) -> TriggerPolicy {
        let mut c = CheckpointConfig::new(Duration::from_millis(interval));
        c.min_pause = Duration::from_millis(min_pause);
        c.max_concurrent = max_concurrent;
        TriggerPolicy::new(&c, Timestamp(1_000))
    }

    fn facts(in_flight: usize, last_trigger: Option<u64>, last_end: Option<u64>) -> TriggerFacts {
        TriggerFacts {
            in_flight,
            last_trigger: last_trigger.map(Timestamp),
            last_end: last_end.map(Timestamp),
            requested: false,
        }
    }

    #[test]
    fn first_checkpoint_is_due_one_interval_after_start() {
        let p = policy(100, 0, 1);
        assert_eq!(
            p.decide(Timestamp(1_000), &facts(0, None, None)),
            TriggerDecision::WaitUntil(Timestamp(1_100))
        );
        assert_eq!(
            p.decide(Timestamp(1_099), &facts(0, None, None)),
            TriggerDecision::WaitUntil(Timestamp(1_100))
        );
        assert_eq!(
            p.decide(Timestamp(1_100), &facts(0, None, None)),
            TriggerDecision::TriggerNow
        );
    }

    #[test]
    fn checkpoints_are_spaced_by_the_interval_from_trigger_to_trigger() {
        let p = policy(100, 0, 1);
        // The previous one took 30ms; the next is still due 100ms after its start.
        let f = facts(0, Some(1_100), Some(1_130));
        assert_eq!(
            p.decide(Timestamp(1_130), &f),
            TriggerDecision::WaitUntil(Timestamp(1_200))
        );
        assert_eq!(p.decide(Timestamp(1_200), &f), TriggerDecision::TriggerNow);
    }

    #[test]
    fn a_full_pipeline_waits_for_a_checkpoint_to_end() {
        let p = policy(100, 0, 1);
        assert_eq!(
            p.decide(Timestamp(5_000), &facts(1, Some(1_100), None)),
            TriggerDecision::WaitForInFlight
        );
        let p = policy(100, 0, 2);
        assert_eq!(
            p.decide(Timestamp(1_200), &facts(1, Some(1_100), None)),
            TriggerDecision::TriggerNow
        );
        assert_eq!(
            p.decide(Timestamp(1_300), &facts(2, Some(1_200), None)),
            TriggerDecision::WaitForInFlight
        );
    }

    #[test]
    fn a_checkpoint_delayed_by_a_long_one_starts_right_after_it() {
        // Triggered at 1100, ran until 1350; the one due at 1200 starts at 1350.
        let p = policy(100, 0, 1);
        assert_eq!(
            p.decide(Timestamp(1_200), &facts(1, Some(1_100), None)),
            TriggerDecision::WaitForInFlight
        );
        assert_eq!(
            p.decide(Timestamp(1_350), &facts(0, Some(1_100), Some(1_350))),
            TriggerDecision::TriggerNow
        );
    }

    #[test]
    fn a_delayed_checkpoint_waits_out_the_min_pause() {
        // With a 40ms pause it starts 40ms after the long one ended.
        let p = policy(100, 40, 1);
        let f = facts(0, Some(1_100), Some(1_350));
        assert_eq!(
            p.decide(Timestamp(1_350), &f),
            TriggerDecision::WaitUntil(Timestamp(1_390))
        );
        assert_eq!(p.decide(Timestamp(1_390), &f), TriggerDecision::TriggerNow);
    }

    #[test]
    fn the_min_pause_does_not_delay_a_checkpoint_already_spaced_enough() {
        let p = policy(100, 40, 1);
        // Ended at 1110, pause over at 1150, interval due at 1200.
        let f = facts(0, Some(1_100), Some(1_110));
        assert_eq!(
            p.decide(Timestamp(1_150), &f),
            TriggerDecision::WaitUntil(Timestamp(1_200))
        );
    }

    #[test]
    fn the_pause_also_follows_an_aborted_checkpoint() {
        let p = policy(100, 500, 1);
        let f = facts(0, Some(1_100), Some(1_700));
        assert_eq!(
            p.decide(Timestamp(1_700), &f),
            TriggerDecision::WaitUntil(Timestamp(2_200))
        );
    }

    #[test]
    fn a_requested_checkpoint_is_due_at_once_within_the_pause_and_the_limit() {
        let p = policy(1_000, 40, 1);
        let requested = |in_flight, last_end| TriggerFacts {
            requested: true,
            ..facts(in_flight, Some(1_100), last_end)
        };
        assert_eq!(
            p.decide(Timestamp(1_200), &requested(0, Some(1_150))),
            TriggerDecision::TriggerNow
        );
        assert_eq!(
            p.decide(Timestamp(1_160), &requested(0, Some(1_150))),
            TriggerDecision::WaitUntil(Timestamp(1_190))
        );
        assert_eq!(
            p.decide(Timestamp(1_200), &requested(1, None)),
            TriggerDecision::WaitForInFlight
        );
    }
}
