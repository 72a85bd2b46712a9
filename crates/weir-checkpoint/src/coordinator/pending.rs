//! A triggered checkpoint on its way to completion: waiting for its cut, then
//! collecting one ack per stateful subtask, then having its `_metadata`
//! written (Flink's `PendingCheckpoint`).
//!
//! Ack accounting only; when to abort is the coordinator's call.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use weir_types::{
    CheckpointId, Epoch, JobId, OperatorUid, StateDescriptor, SubtaskIndex, ValueType,
};

use super::stats::SubtaskMetrics;
use super::time::{Timestamp, millis};
use crate::{
    CheckpointKind, CheckpointMetadata, MetadataStats, OperatorStateMeta, SubtaskStateMeta,
};

/// What became of an ack or a decline (Flink's `TaskAcknowledgeResult`).
/// None of these is an error: late and repeated messages are normal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckOutcome {
    /// Counted.
    Accepted,
    /// This subtask already acked this checkpoint; ignored.
    Duplicate,
    /// No such checkpoint in progress, no barrier for it yet, or a subtask the
    /// job does not have; ignored.
    Unknown,
    /// The checkpoint ended (completed, aborted or subsumed) before the
    /// message arrived; the state it names belongs to nobody.
    Discarded,
}

/// A subtask's acknowledgement: its state is stored for checkpoint `checkpoint_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskAck {
    /// The checkpoint.
    pub checkpoint_id: CheckpointId,
    /// The operator.
    pub uid: OperatorUid,
    /// The subtask and the handles to what it stored.
    #[serde(flatten)]
    pub state: SubtaskStateMeta,
    /// What it measured.
    pub metrics: SubtaskMetrics,
    /// The key columns' types its keyed state was written with; fills the
    /// operator's metadata when the job did not declare them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_types: Option<Vec<ValueType>>,
    /// The keyed states it registered; fill the operator's metadata when the
    /// job did not declare them (states are declared in the user's function,
    /// which only tasks run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<StateDescriptor>,
}

/// A subtask's refusal to take part in a checkpoint (its snapshot failed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskDecline {
    /// The checkpoint.
    pub checkpoint_id: CheckpointId,
    /// The operator.
    pub uid: OperatorUid,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// What went wrong, for the user.
    pub message: String,
}

/// A final epoch and what the driver recorded at its end: the cut a
/// checkpoint can take.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EpochCut {
    /// The epoch whose Spark job succeeded.
    pub epoch: Epoch,
    /// Each source's position after the epoch (`S_n`), opaque to Weir.
    pub sources: BTreeMap<OperatorUid, serde_json::Value>,
    /// Each transactional sink's handle to its unpublished output.
    pub sinks: BTreeMap<OperatorUid, serde_json::Value>,
}

/// Why a checkpoint was aborted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum AbortReason {
    /// Not complete within the checkpoint timeout.
    Expired,
    /// A subtask declined.
    Declined {
        /// The operator.
        uid: OperatorUid,
        /// The subtask.
        subtask: SubtaskIndex,
        /// The subtask's explanation.
        message: String,
    },
    /// A newer checkpoint completed first.
    Subsumed {
        /// The checkpoint that completed.
        by: CheckpointId,
    },
    /// Every subtask acked but `_metadata` could not be written.
    MetadataNotWritten {
        /// The storage's explanation.
        message: String,
    },
    /// The job is failing; nothing in progress can complete.
    JobFailing,
    /// The job restarted (failover); nothing in flight survives a restart.
    Restarted,
    /// The run ended (its input was done, it stopped, or it was cancelled) before the
    /// checkpoint completed.
    RunEnded,
}

impl AbortReason {
    /// Whether the abort counts toward the tolerable checkpoint failures: a
    /// subsumed checkpoint, a job already failing or a restart says nothing
    /// about the health of checkpointing.
    pub fn counts_as_failure(&self) -> bool {
        match self {
            AbortReason::Expired
            | AbortReason::Declined { .. }
            | AbortReason::MetadataNotWritten { .. } => true,
            AbortReason::Subsumed { .. }
            | AbortReason::JobFailing
            | AbortReason::Restarted
            | AbortReason::RunEnded => false,
        }
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbortReason::Expired => f.write_str("not complete within the checkpoint timeout"),
            AbortReason::Declined {
                uid,
                subtask,
                message,
            } => write!(f, "subtask {uid}/{subtask} declined: {message}"),
            AbortReason::Subsumed { by } => write!(f, "checkpoint {by} completed first"),
            AbortReason::MetadataNotWritten { message } => {
                write!(f, "its _metadata could not be written: {message}")
            }
            AbortReason::JobFailing => f.write_str("the job is failing"),
            AbortReason::Restarted => f.write_str("the job restarted"),
            AbortReason::RunEnded => f.write_str("the run ended first"),
        }
    }
}

/// Where a pending checkpoint is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingPhase {
    /// Triggered; the next final epoch becomes its cut.
    AwaitingCut,
    /// Barriers are out; acks are coming in.
    CollectingAcks {
        /// The cut.
        cut: EpochCut,
    },
    /// Every subtask acked; its `_metadata` is being written.
    Finalizing {
        /// The metadata being written.
        metadata: Box<CheckpointMetadata>,
    },
}

/// A subtask of the job: (operator uid, subtask index).
pub type TaskKey = (OperatorUid, SubtaskIndex);

/// A checkpoint or savepoint in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCheckpoint {
    id: CheckpointId,
    kind: CheckpointKind,
    triggered_at: Timestamp,
    phase: PendingPhase,
    not_yet_acked: BTreeSet<TaskKey>,
    acked: BTreeMap<TaskKey, SubtaskAck>,
    latest_ack: Option<Timestamp>,
}

impl PendingCheckpoint {
    /// A checkpoint triggered at `triggered_at` that completes once each of
    /// `expected` has acked.
    pub fn new(
        id: CheckpointId,
        kind: CheckpointKind,
        triggered_at: Timestamp,
        expected: impl IntoIterator<Item = TaskKey>,
    ) -> Self {
        Self {
            id,
            kind,
            triggered_at,
            phase: PendingPhase::AwaitingCut,
            not_yet_acked: expected.into_iter().collect(),
            acked: BTreeMap::new(),
            latest_ack: None,
        }
    }

    /// Its id.
    pub fn id(&self) -> CheckpointId {
        self.id
    }

    /// Checkpoint or savepoint.
    pub fn kind(&self) -> CheckpointKind {
        self.kind
    }

    /// When it was triggered.
    pub fn triggered_at(&self) -> Timestamp {
        self.triggered_at
    }

    /// Where it is.
    pub fn phase(&self) -> &PendingPhase {
        &self.phase
    }

    /// Whether every subtask has acked (its metadata can be written).
    pub fn is_fully_acked(&self) -> bool {
        matches!(self.phase, PendingPhase::CollectingAcks { .. }) && self.not_yet_acked.is_empty()
    }

    /// Takes `cut` if still waiting for one; returns whether it did.
    pub fn on_cut(&mut self, cut: &EpochCut) -> bool {
        if self.phase != PendingPhase::AwaitingCut {
            return false;
        }
        self.phase = PendingPhase::CollectingAcks { cut: cut.clone() };
        true
    }

    /// Counts `ack`, received at `now`. Acks before the cut are
    /// [`AckOutcome::Unknown`]: without a barrier no subtask can have
    /// snapshotted this checkpoint.
    pub fn on_ack(&mut self, ack: SubtaskAck, now: Timestamp) -> AckOutcome {
        if self.phase == PendingPhase::AwaitingCut {
            return AckOutcome::Unknown;
        }
        let key = (ack.uid.clone(), ack.state.subtask);
        if self.acked.contains_key(&key) {
            return AckOutcome::Duplicate;
        }
        if !self.not_yet_acked.remove(&key) {
            return AckOutcome::Unknown;
        }
        self.acked.insert(key, ack);
        self.latest_ack = Some(self.latest_ack.map_or(now, |t| t.max(now)));
        AckOutcome::Accepted
    }

    /// Whether this checkpoint still waits for the ack of `(uid, subtask)`.
    pub fn awaits(&self, uid: &OperatorUid, subtask: SubtaskIndex) -> bool {
        self.not_yet_acked.contains(&(uid.clone(), subtask))
    }

    /// Whether `(uid, subtask)` is one of the subtasks this checkpoint waits
    /// for or heard from, so a decline from a stranger cannot abort it.
    pub fn expects(&self, uid: &OperatorUid, subtask: SubtaskIndex) -> bool {
        let key = (uid.clone(), subtask);
        self.not_yet_acked.contains(&key) || self.acked.contains_key(&key)
    }

    /// Builds the `_metadata` once every subtask acked and moves to
    /// [`PendingPhase::Finalizing`]; `None` (and no change) before that.
    /// `operators` describes the job's stateful operators; subtasks that
    /// stored nothing are left out of the metadata.
    pub fn finalize(
        &mut self,
        job_id: &JobId,
        operators: &[OperatorStateMeta],
    ) -> Option<CheckpointMetadata> {
        let PendingPhase::CollectingAcks { cut } = &self.phase else {
            return None;
        };
        if !self.not_yet_acked.is_empty() {
            return None;
        }
        let cut = cut.clone();
        let mut meta = CheckpointMetadata::new(job_id.clone(), self.id, self.kind, cut.epoch);
        meta.timestamp_millis = self.triggered_at.0;
        meta.sources = cut.sources;
        meta.sinks = cut.sinks;
        let mut stats = MetadataStats {
            end_to_end_millis: self
                .latest_ack
                .map_or(0, |t| millis(t.since(self.triggered_at))),
            state_size_bytes: 0,
            persisted_bytes: 0,
        };
        for ack in self.acked.values() {
            stats.state_size_bytes += ack.metrics.state_size_bytes;
            stats.persisted_bytes += ack.metrics.persisted_bytes;
        }
        meta.stats = Some(stats);
        let mut by_uid: BTreeMap<OperatorUid, Vec<SubtaskStateMeta>> = BTreeMap::new();
        for ((uid, _), ack) in &self.acked {
            if ack.state.keyed.is_some() || ack.state.operator_state.is_some() {
                by_uid
                    .entry(uid.clone())
                    .or_default()
                    .push(ack.state.clone());
            }
        }
        for op in operators {
            if let Some(subtasks) = by_uid.remove(&op.uid) {
                let mut op = op.clone();
                self.fill_schema(&mut op);
                meta.operators.push(OperatorStateMeta { subtasks, ..op });
            }
        }
        self.phase = PendingPhase::Finalizing {
            metadata: Box::new(meta.clone()),
        };
        Some(meta)
    }

    /// Completes what `op` says about its keys and states from the acks of its
    /// subtasks: the first key types reported, and every state by name.
    fn fill_schema(&self, op: &mut OperatorStateMeta) {
        let acks = self.acked.iter().filter(|((uid, _), _)| *uid == op.uid);
        for (_, ack) in acks {
            if op.key_types.is_none() {
                op.key_types.clone_from(&ack.key_types);
            }
            for state in &ack.states {
                if !op.states.iter().any(|known| known.name == state.name) {
                    op.states.push(state.clone());
                }
            }
        }
    }

    /// The metadata of a checkpoint whose metadata is being written.
    pub fn into_metadata(self) -> Option<CheckpointMetadata> {
        match self.phase {
            PendingPhase::Finalizing { metadata } => Some(*metadata),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use weir_snapshot::{FullSnapshotHandle, KeyedStateHandle, StateFile};
    use weir_types::{KeyGroupRange, MaxParallelism};

    use super::*;

    fn uid(s: &str) -> OperatorUid {
        OperatorUid::new(s).expect("valid uid")
    }

    fn ack(id: u64, op: &str, subtask: u32, with_state: bool) -> SubtaskAck {
        let max = MaxParallelism::new(4).expect("valid");
        let keyed = with_state.then(|| {
            KeyedStateHandle::Full(FullSnapshotHandle {
                key_group_range: KeyGroupRange::for_subtask(max, 2, SubtaskIndex(subtask))
                    .expect("valid"),
                file: StateFile {
                    path: format!("chk-{id}/{op}/{subtask}/keyed"),
                    size: 10,
                    crc32: 1,
                },
                entries: 1,
            })
        });
        SubtaskAck {
            checkpoint_id: CheckpointId(id),
            uid: uid(op),
            state: SubtaskStateMeta {
                subtask: SubtaskIndex(subtask),
                keyed,
                operator_state: None,
            },
            metrics: SubtaskMetrics {
                state_size_bytes: 10,
                persisted_bytes: 4,
                ..SubtaskMetrics::default()
            },
            key_types: None,
            states: Vec::new(),
        }
    }

    fn two_subtasks() -> PendingCheckpoint {
        PendingCheckpoint::new(
            CheckpointId(1),
            CheckpointKind::Checkpoint,
            Timestamp(100),
            [(uid("avg"), SubtaskIndex(0)), (uid("avg"), SubtaskIndex(1))],
        )
    }

    fn cut() -> EpochCut {
        EpochCut {
            epoch: Epoch(7),
            sources: BTreeMap::from([(uid("src"), serde_json::json!({"offset": 70}))]),
            sinks: BTreeMap::new(),
        }
    }

    fn operator() -> OperatorStateMeta {
        OperatorStateMeta {
            uid: uid("avg"),
            parallelism: 2,
            max_parallelism: MaxParallelism::new(4).expect("valid"),
            key_types: Some(vec![weir_types::ValueType::Int64]),
            states: Vec::new(),
            subtasks: Vec::new(),
        }
    }

    #[test]
    fn acks_before_the_cut_are_unknown() {
        let mut p = two_subtasks();
        assert_eq!(
            p.on_ack(ack(1, "avg", 0, true), Timestamp(101)),
            AckOutcome::Unknown
        );
        assert!(p.on_cut(&cut()));
        assert!(!p.on_cut(&cut()), "a second cut is refused");
        assert_eq!(
            p.on_ack(ack(1, "avg", 0, true), Timestamp(102)),
            AckOutcome::Accepted
        );
    }

    #[test]
    fn duplicate_and_stranger_acks_are_not_counted() {
        let mut p = two_subtasks();
        p.on_cut(&cut());
        assert_eq!(
            p.on_ack(ack(1, "avg", 0, true), Timestamp(110)),
            AckOutcome::Accepted
        );
        assert_eq!(
            p.on_ack(ack(1, "avg", 0, true), Timestamp(111)),
            AckOutcome::Duplicate
        );
        assert_eq!(
            p.on_ack(ack(1, "avg", 2, false), Timestamp(111)),
            AckOutcome::Unknown
        );
        assert_eq!(
            p.on_ack(ack(1, "other", 0, true), Timestamp(111)),
            AckOutcome::Unknown
        );
        assert!(!p.is_fully_acked());
        assert!(
            p.finalize(&JobId::new("job").expect("valid"), &[operator()])
                .is_none()
        );
    }

    #[test]
    fn finalize_builds_metadata_from_the_cut_and_the_acks() {
        let mut p = two_subtasks();
        p.on_cut(&cut());
        p.on_ack(ack(1, "avg", 1, true), Timestamp(130));
        p.on_ack(ack(1, "avg", 0, false), Timestamp(120));
        assert!(p.is_fully_acked());
        let meta = p
            .finalize(&JobId::new("job").expect("valid"), &[operator()])
            .expect("fully acked");
        assert!(matches!(p.phase(), PendingPhase::Finalizing { metadata } if **metadata == meta));
        meta.validate().expect("consistent metadata");
        assert_eq!(meta.checkpoint_id, CheckpointId(1));
        assert_eq!(meta.cut_epoch, Epoch(7));
        assert_eq!(meta.timestamp_millis, 100);
        assert_eq!(meta.sources[&uid("src")]["offset"], 70);
        // Subtask 0 stored nothing, so only subtask 1 is recorded.
        let subtasks: Vec<_> = meta.operators[0]
            .subtasks
            .iter()
            .map(|s| s.subtask)
            .collect();
        assert_eq!(subtasks, [SubtaskIndex(1)]);
        let stats = meta.stats.expect("stats");
        assert_eq!(
            (
                stats.end_to_end_millis,
                stats.state_size_bytes,
                stats.persisted_bytes
            ),
            (30, 20, 8)
        );
        // Late repeats while finalizing are still recognised.
        assert_eq!(
            p.on_ack(ack(1, "avg", 0, true), Timestamp(140)),
            AckOutcome::Duplicate
        );
        assert!(
            p.finalize(&JobId::new("job").expect("valid"), &[operator()])
                .is_none()
        );
    }

    #[test]
    fn key_types_and_states_the_job_did_not_declare_come_from_the_acks() {
        let mut p = two_subtasks();
        p.on_cut(&cut());
        let state = |name: &str| {
            StateDescriptor::new(name, weir_types::StateKind::Value, ValueType::Int64)
                .expect("valid descriptor")
        };
        let mut first = ack(1, "avg", 0, true);
        first.key_types = Some(vec![ValueType::Utf8]);
        first.states = vec![state("count")];
        let mut second = ack(1, "avg", 1, true);
        second.key_types = Some(vec![ValueType::Utf8]);
        second.states = vec![state("count"), state("sum")];
        p.on_ack(first, Timestamp(110));
        p.on_ack(second, Timestamp(120));
        let undeclared = OperatorStateMeta {
            key_types: None,
            ..operator()
        };
        let meta = p
            .finalize(&JobId::new("job").expect("valid"), &[undeclared])
            .expect("fully acked");
        meta.validate().expect("consistent metadata");
        let op = &meta.operators[0];
        assert_eq!(op.key_types, Some(vec![ValueType::Utf8]));
        let names: Vec<_> = op.states.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["count", "sum"]);
    }

    #[test]
    fn an_operator_where_no_subtask_stored_anything_is_absent() {
        let mut p = two_subtasks();
        p.on_cut(&cut());
        p.on_ack(ack(1, "avg", 0, false), Timestamp(120));
        p.on_ack(ack(1, "avg", 1, false), Timestamp(120));
        let meta = p
            .finalize(&JobId::new("job").expect("valid"), &[operator()])
            .expect("fully acked");
        assert!(meta.operators.is_empty());
    }

    #[test]
    fn ack_json_is_flat() {
        let json = serde_json::to_value(ack(3, "avg", 1, false)).expect("serializable");
        assert_eq!(json["checkpoint_id"], 3);
        assert_eq!(json["uid"], "avg");
        assert_eq!(json["subtask"], 1);
        let back: SubtaskAck = serde_json::from_value(json).expect("deserializable");
        assert_eq!(back, ack(3, "avg", 1, false));
        let with_state = serde_json::to_string(&ack(3, "avg", 1, true)).expect("serializable");
        let back: SubtaskAck = serde_json::from_str(&with_state).expect("deserializable");
        assert_eq!(back, ack(3, "avg", 1, true));
    }

    #[test]
    fn only_health_problems_count_as_failures() {
        assert!(AbortReason::Expired.counts_as_failure());
        assert!(
            !AbortReason::Subsumed {
                by: CheckpointId(2)
            }
            .counts_as_failure()
        );
        assert!(!AbortReason::JobFailing.counts_as_failure());
    }
}
