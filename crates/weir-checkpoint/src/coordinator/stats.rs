//! Checkpoint statistics: per checkpoint and per subtask, with a
//! bounded history users can read as JSON.
//!
//! Durations are whole milliseconds. A subtask's start delay is what remains of
//! its end-to-end time once its synchronous and asynchronous parts are taken
//! out: time spent waiting for the barrier to reach it.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use weir_types::{CheckpointId, Epoch, OperatorUid, SubtaskIndex};

use super::pending::AbortReason;
use super::time::{Timestamp, millis};
use crate::CheckpointKind;

/// Checkpoints kept in the history unless configured otherwise (Flink's
/// `web.checkpoints.history`).
pub const DEFAULT_HISTORY: usize = 10;

/// What a subtask measured while snapshotting; sent with its ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SubtaskMetrics {
    /// The synchronous part (freezing the state at the barrier), in ms.
    pub sync_millis: u64,
    /// The asynchronous part (serialize, compress, upload), in ms.
    pub async_millis: u64,
    /// Full size of the state the handle references, in bytes.
    pub state_size_bytes: u64,
    /// Bytes uploaded for this checkpoint (less than the state size when
    /// incremental).
    pub persisted_bytes: u64,
    /// Bytes buffered while aligning barriers; always 0 in micro-epochs, where
    /// cuts are aligned by construction.
    #[serde(default)]
    pub alignment_buffered_bytes: u64,
}

/// One subtask's part of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskStats {
    /// The operator.
    pub uid: OperatorUid,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// When its ack arrived.
    pub ack_timestamp: Timestamp,
    /// From the trigger to its ack, in ms.
    pub end_to_end_millis: u64,
    /// From the trigger until it started its snapshot, in ms:
    /// end-to-end minus sync minus async.
    pub start_delay_millis: u64,
    /// What it measured.
    #[serde(flatten)]
    pub metrics: SubtaskMetrics,
}

impl SubtaskStats {
    /// The statistics of an ack of `metrics` at `acked_at` for a checkpoint
    /// triggered at `triggered_at`.
    pub fn new(
        uid: OperatorUid,
        subtask: SubtaskIndex,
        metrics: SubtaskMetrics,
        triggered_at: Timestamp,
        acked_at: Timestamp,
    ) -> Self {
        let end_to_end_millis = millis(acked_at.since(triggered_at));
        let start_delay_millis = end_to_end_millis
            .saturating_sub(metrics.sync_millis)
            .saturating_sub(metrics.async_millis);
        Self {
            uid,
            subtask,
            ack_timestamp: acked_at,
            end_to_end_millis,
            start_delay_millis,
            metrics,
        }
    }
}

/// Where a checkpoint is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointStatus {
    /// Triggered, not yet complete.
    InProgress,
    /// Its `_metadata` is written.
    Completed,
    /// Aborted; see the failure reason.
    Failed,
}

/// The statistics of one checkpoint or savepoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointStats {
    /// The checkpoint.
    pub id: CheckpointId,
    /// Checkpoint or savepoint.
    pub kind: CheckpointKind,
    /// Where it is in its life.
    pub status: CheckpointStatus,
    /// When it was triggered.
    pub trigger_timestamp: Timestamp,
    /// The epoch it cuts at, once one became final after the trigger.
    pub cut: Option<Epoch>,
    /// When it completed or failed.
    pub end_timestamp: Option<Timestamp>,
    /// From the trigger to the latest ack, in ms.
    pub end_to_end_millis: u64,
    /// Sum over acked subtasks, in bytes.
    pub state_size_bytes: u64,
    /// Sum over acked subtasks, in bytes.
    pub persisted_bytes: u64,
    /// Sum over acked subtasks, in bytes.
    pub alignment_buffered_bytes: u64,
    /// Subtasks expected to ack.
    pub num_subtasks: usize,
    /// Subtasks that acked, in ack order.
    pub subtasks: Vec<SubtaskStats>,
    /// Why it failed, if it did.
    pub failure: Option<AbortReason>,
}

impl CheckpointStats {
    /// The statistics of a checkpoint just triggered.
    pub fn triggered(
        id: CheckpointId,
        kind: CheckpointKind,
        at: Timestamp,
        num_subtasks: usize,
    ) -> Self {
        Self {
            id,
            kind,
            status: CheckpointStatus::InProgress,
            trigger_timestamp: at,
            cut: None,
            end_timestamp: None,
            end_to_end_millis: 0,
            state_size_bytes: 0,
            persisted_bytes: 0,
            alignment_buffered_bytes: 0,
            num_subtasks,
            subtasks: Vec::new(),
            failure: None,
        }
    }

    /// Subtasks that acked.
    pub fn num_acknowledged(&self) -> usize {
        self.subtasks.len()
    }

    fn add_subtask(&mut self, s: SubtaskStats) {
        self.end_to_end_millis = self.end_to_end_millis.max(s.end_to_end_millis);
        self.state_size_bytes += s.metrics.state_size_bytes;
        self.persisted_bytes += s.metrics.persisted_bytes;
        self.alignment_buffered_bytes += s.metrics.alignment_buffered_bytes;
        self.subtasks.push(s);
    }
}

/// How many checkpoints reached each state over the coordinator's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CheckpointCounts {
    /// Triggered, savepoints included.
    pub triggered: u64,
    /// In progress now.
    pub in_progress: u64,
    /// Completed.
    pub completed: u64,
    /// Failed (aborted for any reason, subsumption included).
    pub failed: u64,
}

/// The newest checkpoints' statistics plus lifetime counts; what
/// `GET /checkpoints` returns.
///
/// The history is bounded: the oldest entry is dropped first, and an update
/// for a dropped checkpoint only moves the counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointStatsHistory {
    /// Lifetime counts.
    pub counts: CheckpointCounts,
    /// The latest completed checkpoint (savepoints excluded), even when it is
    /// older than everything in `history`.
    pub latest_completed: Option<CheckpointStats>,
    /// The latest completed savepoint.
    pub latest_savepoint: Option<CheckpointStats>,
    /// The latest failed checkpoint or savepoint.
    pub latest_failed: Option<CheckpointStats>,
    /// The newest checkpoints, oldest first.
    pub history: VecDeque<CheckpointStats>,
    capacity: usize,
}

impl CheckpointStatsHistory {
    /// An empty history keeping up to `capacity` checkpoints (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            counts: CheckpointCounts::default(),
            latest_completed: None,
            latest_savepoint: None,
            latest_failed: None,
            history: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// The statistics of checkpoint `id`, if still in the history.
    pub fn get(&self, id: CheckpointId) -> Option<&CheckpointStats> {
        self.history.iter().find(|s| s.id == id)
    }

    pub(crate) fn on_triggered(&mut self, stats: CheckpointStats) {
        self.counts.triggered += 1;
        self.counts.in_progress += 1;
        if self.history.len() == self.capacity {
            self.history.pop_front();
        }
        self.history.push_back(stats);
    }

    pub(crate) fn on_cut(&mut self, id: CheckpointId, cut: Epoch) {
        if let Some(s) = self.get_mut(id) {
            s.cut = Some(cut);
        }
    }

    pub(crate) fn on_ack(&mut self, id: CheckpointId, subtask: SubtaskStats) {
        if let Some(s) = self.get_mut(id) {
            s.add_subtask(subtask);
        }
    }

    pub(crate) fn on_completed(&mut self, id: CheckpointId, kind: CheckpointKind, at: Timestamp) {
        self.counts.in_progress = self.counts.in_progress.saturating_sub(1);
        self.counts.completed += 1;
        let Some(s) = self.get_mut(id) else { return };
        s.status = CheckpointStatus::Completed;
        s.end_timestamp = Some(at);
        let s = s.clone();
        match kind {
            CheckpointKind::Checkpoint => self.latest_completed = Some(s),
            CheckpointKind::Savepoint => self.latest_savepoint = Some(s),
        }
    }

    pub(crate) fn on_failed(&mut self, id: CheckpointId, at: Timestamp, reason: AbortReason) {
        self.counts.in_progress = self.counts.in_progress.saturating_sub(1);
        self.counts.failed += 1;
        let Some(s) = self.get_mut(id) else { return };
        s.status = CheckpointStatus::Failed;
        s.end_timestamp = Some(at);
        s.failure = Some(reason);
        self.latest_failed = Some(s.clone());
    }

    fn get_mut(&mut self, id: CheckpointId) -> Option<&mut CheckpointStats> {
        self.history.iter_mut().find(|s| s.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid() -> OperatorUid {
        OperatorUid::new("avg").expect("valid uid")
    }

    fn metrics(sync: u64, asyn: u64, size: u64) -> SubtaskMetrics {
        SubtaskMetrics {
            sync_millis: sync,
            async_millis: asyn,
            state_size_bytes: size,
            persisted_bytes: size / 2,
            alignment_buffered_bytes: 0,
        }
    }

    #[test]
    fn start_delay_is_end_to_end_minus_sync_minus_async() {
        let s = SubtaskStats::new(
            uid(),
            SubtaskIndex(0),
            metrics(2, 30, 10),
            Timestamp(100),
            Timestamp(150),
        );
        assert_eq!(s.end_to_end_millis, 50);
        assert_eq!(s.start_delay_millis, 18);
        // A subtask whose own clock overstates its work never gets a negative delay.
        let s = SubtaskStats::new(
            uid(),
            SubtaskIndex(0),
            metrics(40, 30, 10),
            Timestamp(100),
            Timestamp(150),
        );
        assert_eq!(s.start_delay_millis, 0);
    }

    #[test]
    fn checkpoint_totals_sum_sizes_and_take_the_slowest_ack() {
        let mut h = CheckpointStatsHistory::new(4);
        h.on_triggered(CheckpointStats::triggered(
            CheckpointId(1),
            CheckpointKind::Checkpoint,
            Timestamp(100),
            2,
        ));
        h.on_ack(
            CheckpointId(1),
            SubtaskStats::new(
                uid(),
                SubtaskIndex(0),
                metrics(1, 1, 10),
                Timestamp(100),
                Timestamp(180),
            ),
        );
        h.on_ack(
            CheckpointId(1),
            SubtaskStats::new(
                uid(),
                SubtaskIndex(1),
                metrics(1, 1, 30),
                Timestamp(100),
                Timestamp(140),
            ),
        );
        h.on_completed(CheckpointId(1), CheckpointKind::Checkpoint, Timestamp(190));
        let s = h.get(CheckpointId(1)).expect("in history");
        assert_eq!(s.end_to_end_millis, 80);
        assert_eq!(s.state_size_bytes, 40);
        assert_eq!(s.persisted_bytes, 20);
        assert_eq!(s.num_acknowledged(), 2);
        assert_eq!(s.status, CheckpointStatus::Completed);
        assert_eq!(
            h.latest_completed.as_ref().map(|s| s.id),
            Some(CheckpointId(1))
        );
        assert_eq!(
            h.counts,
            CheckpointCounts {
                triggered: 1,
                in_progress: 0,
                completed: 1,
                failed: 0
            }
        );
    }

    #[test]
    fn history_is_bounded_but_latest_and_counts_survive() {
        let mut h = CheckpointStatsHistory::new(2);
        for id in 1..=3 {
            h.on_triggered(CheckpointStats::triggered(
                CheckpointId(id),
                CheckpointKind::Checkpoint,
                Timestamp(id),
                0,
            ));
            if id == 1 {
                h.on_completed(CheckpointId(1), CheckpointKind::Checkpoint, Timestamp(2));
            }
        }
        let ids: Vec<_> = h.history.iter().map(|s| s.id.0).collect();
        assert_eq!(ids, [2, 3]);
        assert!(h.get(CheckpointId(1)).is_none());
        assert_eq!(
            h.latest_completed.as_ref().map(|s| s.id),
            Some(CheckpointId(1))
        );
        assert_eq!(h.counts.triggered, 3);
        assert_eq!(h.counts.in_progress, 2);
    }

    #[test]
    fn failures_and_savepoints_are_tracked_apart() {
        let mut h = CheckpointStatsHistory::new(4);
        h.on_triggered(CheckpointStats::triggered(
            CheckpointId(1),
            CheckpointKind::Savepoint,
            Timestamp(0),
            0,
        ));
        h.on_triggered(CheckpointStats::triggered(
            CheckpointId(2),
            CheckpointKind::Checkpoint,
            Timestamp(0),
            0,
        ));
        h.on_completed(CheckpointId(1), CheckpointKind::Savepoint, Timestamp(5));
        h.on_failed(CheckpointId(2), Timestamp(9), AbortReason::Expired);
        assert_eq!(
            h.latest_savepoint.as_ref().map(|s| s.id),
            Some(CheckpointId(1))
        );
        assert!(h.latest_completed.is_none());
        let failed = h.latest_failed.as_ref().expect("a failure");
        assert_eq!(
            (failed.id, failed.failure.clone()),
            (CheckpointId(2), Some(AbortReason::Expired))
        );
    }

    #[test]
    fn stats_round_trip_through_json() {
        let mut h = CheckpointStatsHistory::new(4);
        h.on_triggered(CheckpointStats::triggered(
            CheckpointId(1),
            CheckpointKind::Checkpoint,
            Timestamp(100),
            1,
        ));
        h.on_cut(CheckpointId(1), Epoch(4));
        h.on_ack(
            CheckpointId(1),
            SubtaskStats::new(
                uid(),
                SubtaskIndex(0),
                metrics(1, 2, 3),
                Timestamp(100),
                Timestamp(110),
            ),
        );
        let json = serde_json::to_value(&h).expect("serializable");
        assert_eq!(json["history"][0]["subtasks"][0]["start_delay_millis"], 7);
        assert_eq!(json["history"][0]["subtasks"][0]["sync_millis"], 1);
        assert_eq!(json["history"][0]["status"], "in_progress");
        let back: CheckpointStatsHistory = serde_json::from_value(json).expect("deserializable");
        assert_eq!(back, h);
    }
}
