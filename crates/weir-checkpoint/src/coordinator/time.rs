//! Points in time on the coordinator's clock.
//!
//! The coordinator never reads a clock: every event carries `now`. The driver
//! passes Unix-epoch milliseconds taken from a monotonic base, tests pass a
//! simulated clock, so every policy decision is exact and repeatable.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Milliseconds on the coordinator's clock; never goes backwards within a run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The time `d` after this one, saturating at the end of time.
    pub fn after(self, d: Duration) -> Self {
        Self(self.0.saturating_add(millis(d)))
    }

    /// How long after `earlier` this is; zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A duration in whole milliseconds, saturating: the clock's resolution.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(
            Timestamp(u64::MAX - 1).after(Duration::from_secs(1)),
            Timestamp(u64::MAX)
        );
        assert_eq!(Timestamp(5).since(Timestamp(9)), Duration::ZERO);
        assert_eq!(Timestamp(9).since(Timestamp(5)), Duration::from_millis(4));
    }
}
