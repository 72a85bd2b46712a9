//! The driver's clock: Unix-epoch milliseconds that never go backwards.
//!
//! Read once at start from the wall clock, then advanced by tokio's
//! monotonic clock, so timestamps in `_metadata` and statistics are
//! meaningful and durations are immune to wall-clock jumps.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use weir_checkpoint::coordinator::Timestamp;

/// Maps between tokio instants and coordinator timestamps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DriverClock {
    base: Instant,
    base_millis: u64,
}

impl DriverClock {
    pub(crate) fn start() -> Self {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Self {
            base: Instant::now(),
            base_millis: u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX),
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        let elapsed = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.base_millis.saturating_add(elapsed))
    }

    /// The instant at which [`now`](Self::now) first reads `t` or later.
    pub(crate) fn instant_of(&self, t: Timestamp) -> Instant {
        self.base + Duration::from_millis(t.0.saturating_sub(self.base_millis))
    }
}
