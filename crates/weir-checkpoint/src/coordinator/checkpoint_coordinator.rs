//! The checkpoint coordinator, without I/O: events in (time passing, epochs
//! becoming final, acks, declines, metadata written), effects out.
//!
//! It ties the trigger policy, the pending checkpoints, retention, failure
//! counting and statistics together. It never sleeps, reads a clock or
//! touches storage; `weir-coordinator` drives it.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;

use weir_types::{CheckpointId, JobId, SubtaskIndex};

use super::config::CheckpointConfig;
use super::effect::CoordinatorEffect;
use super::error::{CoordinatorError, Result};
use super::failures::{FailureCounter, FailureDecision};
use super::pending::{
    AbortReason, AckOutcome, EpochCut, PendingCheckpoint, PendingPhase, SubtaskAck, SubtaskDecline,
    TaskKey,
};
use super::running_epochs::{BarrierGrant, EpochProgress, RunningEpochs};
use super::stats::{CheckpointStats, CheckpointStatsHistory, SubtaskStats};
use super::time::Timestamp;
use super::trigger::{TriggerDecision, TriggerFacts, TriggerPolicy};
use crate::retention::{Retention, SubsumeDecision};
use crate::{CheckpointKind, OperatorStateMeta};

/// Everything a coordinator run starts from.
#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// The job.
    pub job_id: JobId,
    /// The checkpoint policy; validated by [`CheckpointCoordinator::new`].
    pub config: CheckpointConfig,
    /// The job's stateful operators (their `subtasks` are ignored): every
    /// subtask `0..parallelism` of each must ack a checkpoint.
    pub operators: Vec<OperatorStateMeta>,
    /// The id of the first checkpoint of this run: the first id of the
    /// job directory's lease reservation, so ids never repeat.
    pub first_checkpoint_id: CheckpointId,
    /// The last id the run may use until [`CheckpointCoordinator::on_ids_reserved`]
    /// reports more; no checkpoint starts beyond it.
    pub reserved_until: CheckpointId,
    /// When the run starts; the first checkpoint is due one interval later.
    pub started_at: Timestamp,
    /// Checkpoints kept in the statistics history.
    pub history: usize,
    /// The completed checkpoints a restarted job found in storage, from
    /// `JobTimeline::recover` with the same number retained as `config`;
    /// `None` for a job without any.
    pub retention: Option<Retention>,
}

/// Checkpoints and savepoints of one job run, from trigger to completion.
#[derive(Debug, Clone)]
pub struct CheckpointCoordinator {
    job_id: JobId,
    config: CheckpointConfig,
    operators: Vec<OperatorStateMeta>,
    policy: TriggerPolicy,
    next_id: CheckpointId,
    reserved_until: CheckpointId,
    pending: BTreeMap<CheckpointId, PendingCheckpoint>,
    retention: Retention,
    /// Shared files released while other checkpoints were in flight; one of
    /// those may reuse them, so they are deleted once nothing is in flight.
    held_shared: SubsumeDecision,
    failures: FailureCounter,
    last_trigger: Option<Timestamp>,
    last_end: Option<Timestamp>,
    /// The newest final epoch reported, with what the driver recorded.
    last_cut: Option<EpochCut>,
    /// Epochs running in a Spark job, which a checkpoint may cut between.
    running: RunningEpochs,
    last_notified: Option<CheckpointId>,
    stats: CheckpointStatsHistory,
    job_failed: bool,
    /// Restarting: nothing starts until [`CheckpointCoordinator::resume`].
    suspended: bool,
    /// A savepoint that stops the job is in flight: no periodic checkpoint
    /// starts meanwhile.
    stopping: Option<CheckpointId>,
    /// A savepoint stopped the job: no periodic checkpoint starts any more.
    stopped: bool,
    /// A checkpoint was asked for ahead of the interval and has not started.
    requested: bool,
}

impl CheckpointCoordinator {
    /// A coordinator with nothing in flight; fails on an invalid config or a
    /// malformed operator list.
    pub fn new(options: CoordinatorOptions) -> Result<Self> {
        let config = options.config.validate()?;
        let mut uids = BTreeSet::new();
        for op in &options.operators {
            if !uids.insert(&op.uid) {
                return Err(CoordinatorError::DuplicateOperator {
                    uid: op.uid.clone(),
                });
            }
            op.max_parallelism
                .check_parallelism(op.parallelism)
                .map_err(|source| CoordinatorError::InvalidOperator {
                    uid: op.uid.clone(),
                    source,
                })?;
        }
        let retained = usize::try_from(config.retained)
            .ok()
            .and_then(NonZeroUsize::new)
            .ok_or(CoordinatorError::NothingRetained)?;
        Ok(Self {
            job_id: options.job_id,
            policy: TriggerPolicy::new(&config, options.started_at),
            retention: options
                .retention
                .unwrap_or_else(|| Retention::new(retained)),
            held_shared: SubsumeDecision::default(),
            failures: FailureCounter::new(config.tolerable_failures),
            config,
            operators: options.operators,
            next_id: options.first_checkpoint_id,
            reserved_until: options.reserved_until,
            pending: BTreeMap::new(),
            last_trigger: None,
            last_end: None,
            last_cut: None,
            running: RunningEpochs::default(),
            last_notified: None,
            stats: CheckpointStatsHistory::new(options.history),
            job_failed: false,
            suspended: false,
            stopping: None,
            stopped: false,
            requested: false,
        })
    }

    /// The validated configuration.
    pub fn config(&self) -> &CheckpointConfig {
        &self.config
    }

    /// Statistics of recent checkpoints.
    pub fn stats(&self) -> &CheckpointStatsHistory {
        &self.stats
    }

    /// The newest retained completed checkpoint: the one a restore picks.
    pub fn latest_completed(&self) -> Option<CheckpointId> {
        self.retention.latest()
    }

    /// The retained checkpoints and their shared-file reference counts.
    pub fn retention(&self) -> &Retention {
        &self.retention
    }

    /// Whether this coordinator failed the job; it then does nothing more
    /// until [`resume`](Self::resume)d after a restart.
    pub fn is_job_failed(&self) -> bool {
        self.job_failed
    }

    /// The id the next checkpoint or savepoint takes.
    pub fn next_id(&self) -> CheckpointId {
        self.next_id
    }

    /// Ids reserved and not used yet.
    pub fn ids_left(&self) -> u64 {
        (self.reserved_until.0 + 1).saturating_sub(self.next_id.0)
    }

    /// The job directory's reservation now reaches `until`; a lower value
    /// changes nothing. A checkpoint held back for want of ids may start.
    pub fn on_ids_reserved(&mut self, until: CheckpointId) {
        self.reserved_until = self.reserved_until.max(until);
    }

    /// The job restarts: every checkpoint and savepoint in flight is
    /// dropped (recorded as failed in the statistics, not counted toward
    /// the tolerable failures), and nothing starts until
    /// [`resume`](Self::resume). Late acks for the dropped ones are
    /// [`AckOutcome::Discarded`]; a `_metadata` reported stored for one of
    /// them changes nothing.
    pub fn suspend(&mut self, now: Timestamp) {
        for id in std::mem::take(&mut self.pending).into_keys() {
            self.stats.on_failed(id, now, AbortReason::Restarted);
        }
        // Nothing is in flight, and the restart rebuilds retention.
        self.held_shared = SubsumeDecision::default();
        self.running = RunningEpochs::default();
        self.suspended = true;
    }

    /// The run ends: every checkpoint and savepoint in flight that is not
    /// writing its `_metadata` can no longer complete, and is aborted (its
    /// files are deleted), so a finished run leaves only what completed.
    pub fn on_run_ended(&mut self, now: Timestamp) -> Vec<CoordinatorEffect> {
        let mut effects = Vec::new();
        self.abort_in_flight(now, &AbortReason::RunEnded, &mut effects);
        effects
    }

    /// Runs again after a restart, from `retention` (rebuilt by the restart,
    /// with the same number retained as the config): the failure count and
    /// any failed or stopped state are cleared, the next checkpoint is due one
    /// interval after `now` once the new run runs (an epoch of it is final
    /// or processed), ids continue, statistics are kept.
    pub fn resume(&mut self, now: Timestamp, retention: Retention) {
        self.retention = retention;
        self.policy = TriggerPolicy::new(&self.config, now);
        self.failures = FailureCounter::new(self.config.tolerable_failures);
        self.last_trigger = None;
        self.last_end = None;
        self.last_cut = None;
        self.running = RunningEpochs::default();
        self.job_failed = false;
        self.stopping = None;
        self.requested = false;
        self.stopped = false;
        self.suspended = false;
    }

    /// When [`on_tick`](Self::on_tick) next has work, as seen at `now`: a
    /// checkpoint falling due or one timing out. `None` means only an event
    /// can create work.
    pub fn next_wakeup(&self, now: Timestamp) -> Option<Timestamp> {
        if self.job_failed {
            return None;
        }
        let trigger = match self.periodic_decision(now) {
            Some(TriggerDecision::TriggerNow) => Some(now),
            Some(TriggerDecision::WaitUntil(t)) => Some(t),
            Some(TriggerDecision::WaitForInFlight) | None => None,
        };
        let expiry = self
            .pending
            .values()
            .filter(|p| !is_finalizing(p))
            .map(|p| p.triggered_at().after(self.config.timeout))
            .min();
        trigger.into_iter().chain(expiry).min()
    }

    /// Time passed: aborts checkpoints past their timeout, then
    /// triggers a checkpoint if the policy says so.
    pub fn on_tick(&mut self, now: Timestamp) -> Vec<CoordinatorEffect> {
        let mut effects = Vec::new();
        if self.job_failed {
            return effects;
        }
        let expired: Vec<CheckpointId> = self
            .pending
            .values()
            .filter(|p| !is_finalizing(p) && now >= p.triggered_at().after(self.config.timeout))
            .map(PendingCheckpoint::id)
            .collect();
        for id in expired {
            self.abort(id, now, AbortReason::Expired, &mut effects);
        }
        if self.periodic_decision(now) == Some(TriggerDecision::TriggerNow) {
            self.trigger(now, CheckpointKind::Checkpoint, &mut effects);
        }
        effects
    }

    /// Asks for a checkpoint ahead of the interval: it starts as soon as the
    /// minimum pause and the concurrency limit allow (at the next
    /// [`on_tick`](Self::on_tick)), e.g. when a bounded job's input ended and
    /// its last output waits for a checkpoint to be published. The interval
    /// then counts from it. Nothing starts while periodic checkpoints are
    /// held back (restarting, stopping, failed, not running yet).
    pub fn request_checkpoint(&mut self) {
        self.requested = true;
    }

    /// Starts a savepoint now, beside any checkpoint in flight: no
    /// interval, pause or concurrency limit applies to it. A savepoint that
    /// `stop`s the job holds periodic checkpoints back while it runs and
    /// for good once it completes (Flink's stop-with-savepoint); if it
    /// fails, they go on.
    pub fn trigger_savepoint(
        &mut self,
        now: Timestamp,
        stop: bool,
    ) -> Result<(CheckpointId, Vec<CoordinatorEffect>)> {
        if self.suspended {
            return Err(CoordinatorError::Restarting);
        }
        if self.job_failed {
            return Err(CoordinatorError::JobFailed);
        }
        if self.ids_left() == 0 {
            return Err(CoordinatorError::IdsExhausted {
                reserved_until: self.reserved_until,
            });
        }
        let mut effects = Vec::new();
        let id = self.trigger(now, CheckpointKind::Savepoint, &mut effects);
        if stop {
            self.stopping = Some(id);
        }
        Ok((id, effects))
    }

    /// Epoch `cut.epoch` became final: the oldest checkpoint waiting for a cut
    /// takes it. Epochs not after the last final epoch reported are ignored,
    /// so a repeated or stale report cannot cut behind the job's progress.
    pub fn on_epoch_final(&mut self, cut: EpochCut) -> Vec<CoordinatorEffect> {
        let mut effects = Vec::new();
        if self.job_failed
            || self
                .last_cut
                .as_ref()
                .is_some_and(|last| cut.epoch <= last.epoch)
        {
            return effects;
        }
        self.last_cut = Some(cut.clone());
        self.running.on_final(cut.epoch);
        self.take_cut(&cut, &mut effects);
        effects
    }

    /// Epochs after the newest final one are about to run in one Spark job,
    /// with what a checkpoint cut after each one records: a checkpoint
    /// triggered while they run may cut between them (see
    /// [`on_progress`](Self::on_progress)). Epochs not after the newest
    /// final one are ignored. A checkpoint waiting for a cut takes the
    /// newest final epoch now (see [`cut_before_the_job`](Self::cut_before_the_job)).
    pub fn on_epochs_planned(&mut self, cuts: Vec<EpochCut>) -> Vec<CoordinatorEffect> {
        let last = self.last_cut.as_ref().map(|c| c.epoch);
        self.running.plan(
            cuts.into_iter()
                .filter(|c| last.is_none_or(|l| c.epoch > l)),
        );
        let mut effects = Vec::new();
        self.cut_before_the_job(&mut effects);
        effects
    }

    /// A subtask reached an epoch boundary inside a running Spark job. The
    /// oldest checkpoint waiting for a cut takes the newest epoch any
    /// subtask began (or this one's `done` if none is further on), so no
    /// subtask has passed it; the answer lists the barriers this subtask
    /// takes now, those whose cut is its `done`.
    pub fn on_progress(
        &mut self,
        progress: &EpochProgress,
    ) -> (Vec<BarrierGrant>, Vec<CoordinatorEffect>) {
        let mut effects = Vec::new();
        if self.job_failed || self.suspended {
            return (Vec::new(), effects);
        }
        let awaiting = self
            .pending
            .values()
            .any(|p| *p.phase() == PendingPhase::AwaitingCut);
        if awaiting && let Some(cut) = self.running.cut_for(progress, self.last_cut.as_ref()) {
            self.take_cut(&cut, &mut effects);
        }
        self.running.on_progress(progress);
        let base = self.retention.latest();
        let grants = self
            .pending
            .values()
            .filter_map(|p| match p.phase() {
                PendingPhase::CollectingAcks { cut }
                    if Some(cut.epoch) == progress.done
                        && p.awaits(&progress.uid, progress.subtask) =>
                {
                    Some(BarrierGrant {
                        id: p.id(),
                        kind: p.kind(),
                        cut: cut.epoch,
                        base,
                    })
                }
                _ => None,
            })
            .collect();
        (grants, effects)
    }

    /// The job is idle after its newest final epoch: no epoch runs, and none
    /// starts before this checkpoint's barrier reached every subtask. The
    /// oldest checkpoint waiting for a cut takes that epoch, so a job whose
    /// input paused or ended checkpoints without running an epoch for the
    /// cut. Nothing happens without a final epoch reported since the last
    /// restart.
    pub fn cut_at_last_final(&mut self) -> Vec<CoordinatorEffect> {
        let mut effects = Vec::new();
        if let Some(cut) = self.last_cut.clone().filter(|_| !self.job_failed) {
            self.take_cut(&cut, &mut effects);
        }
        effects
    }

    /// While planned epochs wait to begin (their Spark job reads and
    /// shuffles its input, which takes a second or two on a large epoch),
    /// the oldest checkpoint waiting for a cut takes the newest final epoch
    /// instead of the first boundary a task reports after it: every subtask
    /// still holds exactly that epoch's state, and each one reports it as
    /// its start, where it is granted the barrier before it begins (the
    /// driver may hand it to the hosts sooner).
    fn cut_before_the_job(&mut self, effects: &mut Vec<CoordinatorEffect>) {
        if self.job_failed || self.suspended {
            return;
        }
        let Some(last) = self.last_cut.clone() else {
            return;
        };
        if self.running.waits_to_begin(last.epoch) {
            self.take_cut(&last, effects);
        }
    }

    /// The oldest checkpoint waiting for a cut takes `cut`.
    fn take_cut(&mut self, cut: &EpochCut, effects: &mut Vec<CoordinatorEffect>) {
        let Some(pending) = self
            .pending
            .values_mut()
            .find(|p| *p.phase() == PendingPhase::AwaitingCut)
        else {
            return;
        };
        pending.on_cut(cut);
        let (id, kind) = (pending.id(), pending.kind());
        self.stats.on_cut(id, cut.epoch);
        effects.push(CoordinatorEffect::InjectBarrier {
            id,
            kind,
            cut: cut.epoch,
        });
        // A job without stateful subtasks completes on its cut alone.
        self.finalize_if_acked(id, effects);
    }

    /// A subtask acked. The last ack of a checkpoint yields
    /// [`CoordinatorEffect::WriteMetadata`].
    pub fn on_ack(
        &mut self,
        now: Timestamp,
        ack: SubtaskAck,
    ) -> (AckOutcome, Vec<CoordinatorEffect>) {
        let mut effects = Vec::new();
        let id = ack.checkpoint_id;
        let Some(pending) = self.pending.get_mut(&id) else {
            return (self.outcome_for_absent(id), effects);
        };
        let (uid, subtask, metrics) = (ack.uid.clone(), ack.state.subtask, ack.metrics);
        let triggered_at = pending.triggered_at();
        let outcome = pending.on_ack(ack, now);
        if outcome == AckOutcome::Accepted {
            self.stats.on_ack(
                id,
                SubtaskStats::new(uid, subtask, metrics, triggered_at, now),
            );
            self.finalize_if_acked(id, &mut effects);
        }
        (outcome, effects)
    }

    /// A subtask declined: its checkpoint is aborted, unless all acks are
    /// already in (then the decline contradicts an ack and is a duplicate).
    pub fn on_decline(
        &mut self,
        now: Timestamp,
        decline: SubtaskDecline,
    ) -> (AckOutcome, Vec<CoordinatorEffect>) {
        let mut effects = Vec::new();
        let id = decline.checkpoint_id;
        let Some(pending) = self.pending.get(&id) else {
            return (self.outcome_for_absent(id), effects);
        };
        if !pending.expects(&decline.uid, decline.subtask) {
            return (AckOutcome::Unknown, effects);
        }
        if is_finalizing(pending) {
            return (AckOutcome::Duplicate, effects);
        }
        let reason = AbortReason::Declined {
            uid: decline.uid,
            subtask: decline.subtask,
            message: decline.message,
        };
        self.abort(id, now, reason, &mut effects);
        (AckOutcome::Accepted, effects)
    }

    /// The `_metadata` of checkpoint `id` is durably written: it is complete.
    /// A checkpoint subsumes older pending checkpoints (never savepoints) and
    /// may push old ones out of retention.
    pub fn on_metadata_stored(
        &mut self,
        now: Timestamp,
        id: CheckpointId,
    ) -> Vec<CoordinatorEffect> {
        let mut effects = Vec::new();
        if !self.pending.get(&id).is_some_and(is_finalizing) {
            return effects;
        }
        let Some(metadata) = self
            .pending
            .remove(&id)
            .and_then(PendingCheckpoint::into_metadata)
        else {
            return effects;
        };
        let (kind, cut) = (metadata.kind, metadata.cut_epoch);
        self.stats.on_completed(id, kind, now);
        if self.stopping == Some(id) {
            self.stopping = None;
            self.stopped = true;
        }
        if kind == CheckpointKind::Checkpoint {
            self.failures.on_completed(id);
            self.last_end = Some(now);
            let subsumed: Vec<CheckpointId> = self
                .pending
                .range(..id)
                .filter(|(_, p)| p.kind() == CheckpointKind::Checkpoint && !is_finalizing(p))
                .map(|(&older, _)| older)
                .collect();
            for older in subsumed {
                self.abort(older, now, AbortReason::Subsumed { by: id }, &mut effects);
            }
            let mut decision = self.retention.on_completed(&metadata);
            self.held_shared
                .shared_files
                .append(&mut decision.shared_files);
            if !decision.is_empty() {
                effects.push(CoordinatorEffect::Subsume(decision));
            }
        }
        if self.last_notified.is_none_or(|last| id > last) {
            self.last_notified = Some(id);
            effects.push(CoordinatorEffect::NotifyComplete { id, kind, cut });
        }
        self.release_held(&mut effects);
        effects
    }

    /// Writing the `_metadata` of checkpoint `id` failed: it is aborted and
    /// counts as a failure; the previous checkpoint stays intact.
    pub fn on_metadata_failed(
        &mut self,
        now: Timestamp,
        id: CheckpointId,
        message: String,
    ) -> Vec<CoordinatorEffect> {
        let mut effects = Vec::new();
        if self.pending.get(&id).is_some_and(is_finalizing) {
            self.abort(
                id,
                now,
                AbortReason::MetadataNotWritten { message },
                &mut effects,
            );
        }
        effects
    }

    /// The periodic trigger policy's decision, or `None` when no periodic
    /// checkpoint may start at all (failed, restarting, stopping or stopped,
    /// out of reserved ids, or the run not running yet).
    ///
    /// A run runs once an epoch of it became final or a subtask processed
    /// one. Its first epoch also starts the state hosts and Python workers,
    /// so a checkpoint triggered during it would wait for all of that (Flink
    /// likewise triggers none until every task is running).
    fn periodic_decision(&self, now: Timestamp) -> Option<TriggerDecision> {
        let runs = self.last_cut.is_some() || self.running.processed();
        let held_back = self.job_failed
            || self.suspended
            || self.stopped
            || self.stopping.is_some()
            || !runs
            || self.ids_left() == 0;
        (!held_back).then(|| self.policy.decide(now, &self.trigger_facts()))
    }

    fn trigger_facts(&self) -> TriggerFacts {
        TriggerFacts {
            in_flight: self
                .pending
                .values()
                .filter(|p| p.kind() == CheckpointKind::Checkpoint)
                .count(),
            last_trigger: self.last_trigger,
            last_end: self.last_end,
            requested: self.requested,
        }
    }

    fn expected_tasks(&self) -> Vec<TaskKey> {
        self.operators
            .iter()
            .flat_map(|op| (0..op.parallelism).map(|i| (op.uid.clone(), SubtaskIndex(i))))
            .collect()
    }

    fn trigger(
        &mut self,
        now: Timestamp,
        kind: CheckpointKind,
        effects: &mut Vec<CoordinatorEffect>,
    ) -> CheckpointId {
        let id = self.next_id;
        self.next_id = CheckpointId(id.0 + 1);
        let expected = self.expected_tasks();
        self.stats
            .on_triggered(CheckpointStats::triggered(id, kind, now, expected.len()));
        self.pending
            .insert(id, PendingCheckpoint::new(id, kind, now, expected));
        if kind == CheckpointKind::Checkpoint {
            self.last_trigger = Some(now);
            self.requested = false;
        }
        effects.push(CoordinatorEffect::Triggered { id, kind });
        self.cut_before_the_job(effects);
        id
    }

    fn finalize_if_acked(&mut self, id: CheckpointId, effects: &mut Vec<CoordinatorEffect>) {
        let Some(pending) = self.pending.get_mut(&id) else {
            return;
        };
        if let Some(meta) = pending.finalize(&self.job_id, &self.operators) {
            effects.push(CoordinatorEffect::WriteMetadata(Box::new(meta)));
        }
    }

    /// Emits the held shared files once no checkpoint is in flight.
    fn release_held(&mut self, effects: &mut Vec<CoordinatorEffect>) {
        if self.pending.is_empty() && !self.held_shared.is_empty() {
            effects.push(CoordinatorEffect::Subsume(std::mem::take(
                &mut self.held_shared,
            )));
        }
    }

    /// Ids below the next one were issued and have ended; others never existed.
    fn outcome_for_absent(&self, id: CheckpointId) -> AckOutcome {
        if id < self.next_id {
            AckOutcome::Discarded
        } else {
            AckOutcome::Unknown
        }
    }

    fn abort(
        &mut self,
        id: CheckpointId,
        now: Timestamp,
        reason: AbortReason,
        effects: &mut Vec<CoordinatorEffect>,
    ) {
        let Some(pending) = self.pending.remove(&id) else {
            return;
        };
        let kind = pending.kind();
        if self.stopping == Some(id) {
            self.stopping = None;
        }
        self.stats.on_failed(id, now, reason.clone());
        effects.push(CoordinatorEffect::Aborted {
            id,
            kind,
            reason: reason.clone(),
        });
        if kind == CheckpointKind::Checkpoint {
            self.last_end = Some(now);
            if let FailureDecision::FailJob { consecutive } = self.failures.on_failed(id, &reason) {
                self.fail_job(now, consecutive, reason, effects);
            }
        }
        self.release_held(effects);
    }

    /// Aborts everything not yet finalizing; checkpoints whose metadata is
    /// being written are past the point of no return and may still complete.
    fn fail_job(
        &mut self,
        now: Timestamp,
        consecutive_failures: u32,
        reason: AbortReason,
        effects: &mut Vec<CoordinatorEffect>,
    ) {
        self.job_failed = true;
        self.abort_in_flight(now, &AbortReason::JobFailing, effects);
        effects.push(CoordinatorEffect::FailJob {
            consecutive_failures,
            reason,
            latest_completed: self.retention.latest(),
        });
    }

    /// Aborts every checkpoint and savepoint in flight except those writing
    /// their metadata, which are past the point of no return.
    fn abort_in_flight(
        &mut self,
        now: Timestamp,
        reason: &AbortReason,
        effects: &mut Vec<CoordinatorEffect>,
    ) {
        let in_flight: Vec<CheckpointId> = self
            .pending
            .values()
            .filter(|p| !is_finalizing(p))
            .map(PendingCheckpoint::id)
            .collect();
        for id in in_flight {
            self.abort(id, now, reason.clone(), effects);
        }
    }
}

fn is_finalizing(p: &PendingCheckpoint) -> bool {
    matches!(p.phase(), PendingPhase::Finalizing { .. })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use weir_types::{Epoch, MaxParallelism, OperatorUid};

    use super::*;
    use crate::SubtaskStateMeta;
    use crate::coordinator::stats::{CheckpointStatus, SubtaskMetrics};

    const INTERVAL: u64 = 1_000;
    const TIMEOUT: u64 = 5_000;

    fn uid(s: &str) -> OperatorUid {
        OperatorUid::new(s).expect("valid uid")
    }

    fn operator(name: &str, parallelism: u32) -> OperatorStateMeta {
        OperatorStateMeta {
            uid: uid(name),
            parallelism,
            max_parallelism: MaxParallelism::new(128).expect("valid"),
            key_types: None,
            states: Vec::new(),
            subtasks: Vec::new(),
        }
    }

    fn config() -> CheckpointConfig {
        let mut c = CheckpointConfig::new(Duration::from_millis(INTERVAL));
        c.timeout = Duration::from_millis(TIMEOUT);
        c
    }

    /// A coordinator whose job runs: epoch 0 is final, so periodic
    /// checkpoints follow the interval.
    fn coordinator_with(config: CheckpointConfig) -> CheckpointCoordinator {
        let mut c = not_running(config);
        c.on_epoch_final(cut(0));
        c
    }

    fn not_running(config: CheckpointConfig) -> CheckpointCoordinator {
        CheckpointCoordinator::new(CoordinatorOptions {
            job_id: JobId::new("job").expect("valid"),
            config,
            operators: vec![operator("avg", 2)],
            first_checkpoint_id: CheckpointId(1),
            reserved_until: CheckpointId(1_000),
            started_at: Timestamp(0),
            history: 10,
            retention: None,
        })
        .expect("valid options")
    }

    fn ack(id: u64, subtask: u32) -> SubtaskAck {
        SubtaskAck {
            checkpoint_id: CheckpointId(id),
            uid: uid("avg"),
            state: SubtaskStateMeta {
                subtask: SubtaskIndex(subtask),
                keyed: None,
                operator_state: None,
            },
            metrics: SubtaskMetrics::default(),
            key_types: None,
            states: Vec::new(),
        }
    }

    fn decline(id: u64, subtask: u32) -> SubtaskDecline {
        SubtaskDecline {
            checkpoint_id: CheckpointId(id),
            uid: uid("avg"),
            subtask: SubtaskIndex(subtask),
            message: "disk full".into(),
        }
    }

    fn cut(epoch: u64) -> EpochCut {
        EpochCut {
            epoch: Epoch(epoch),
            ..EpochCut::default()
        }
    }

    fn triggered(effects: &[CoordinatorEffect]) -> Vec<u64> {
        effects
            .iter()
            .filter_map(|e| match e {
                CoordinatorEffect::Triggered { id, .. } => Some(id.0),
                _ => None,
            })
            .collect()
    }

    fn aborted(effects: &[CoordinatorEffect]) -> Vec<(u64, AbortReason)> {
        effects
            .iter()
            .filter_map(|e| match e {
                CoordinatorEffect::Aborted { id, reason, .. } => Some((id.0, reason.clone())),
                _ => None,
            })
            .collect()
    }

    fn written(effects: &[CoordinatorEffect]) -> Vec<u64> {
        effects
            .iter()
            .filter_map(|e| match e {
                CoordinatorEffect::WriteMetadata(m) => Some(m.checkpoint_id.0),
                _ => None,
            })
            .collect()
    }

    fn fails_job(effects: &[CoordinatorEffect]) -> bool {
        effects
            .iter()
            .any(|e| matches!(e, CoordinatorEffect::FailJob { .. }))
    }

    /// Acks both subtasks of `id` at `now`; returns the effects of the last.
    fn ack_all(c: &mut CheckpointCoordinator, id: u64, now: u64) -> Vec<CoordinatorEffect> {
        assert_eq!(c.on_ack(Timestamp(now), ack(id, 0)).0, AckOutcome::Accepted);
        let (outcome, effects) = c.on_ack(Timestamp(now), ack(id, 1));
        assert_eq!(outcome, AckOutcome::Accepted);
        effects
    }

    /// Runs checkpoint `id` (already triggered) through cut `epoch`, acks and
    /// a stored metadata at `now`.
    fn complete(
        c: &mut CheckpointCoordinator,
        id: u64,
        epoch: u64,
        now: u64,
    ) -> Vec<CoordinatorEffect> {
        c.on_epoch_final(cut(epoch));
        assert_eq!(written(&ack_all(c, id, now)), [id]);
        c.on_metadata_stored(Timestamp(now), CheckpointId(id))
    }

    fn progress(subtask: u32, done: Option<u64>, next: Option<u64>) -> EpochProgress {
        EpochProgress {
            uid: uid("avg"),
            subtask: SubtaskIndex(subtask),
            done: done.map(Epoch),
            next: next.map(Epoch),
        }
    }

    fn grants(answer: &(Vec<BarrierGrant>, Vec<CoordinatorEffect>)) -> Vec<(u64, u64)> {
        answer.0.iter().map(|g| (g.id.0, g.cut.0)).collect()
    }

    #[test]
    fn periodic_checkpoints_wait_for_a_final_epoch_of_the_run() {
        let mut c = not_running(config());
        let late = Timestamp(3 * INTERVAL);
        assert!(
            triggered(&c.on_tick(late)).is_empty(),
            "the job has not run yet"
        );
        assert_eq!(c.next_wakeup(late), None, "only an event can start them");
        c.on_epoch_final(cut(1));
        assert_eq!(triggered(&c.on_tick(late)), vec![1], "overdue once it runs");
        complete(&mut c, 1, 2, late.0 + 10);
        c.resume(Timestamp(4 * INTERVAL), Retention::new(NonZeroUsize::MIN));
        assert!(
            triggered(&c.on_tick(Timestamp(9 * INTERVAL))).is_empty(),
            "a restarted run waits again"
        );
    }

    #[test]
    fn periodic_checkpoints_start_once_a_subtask_processed_an_epoch_in_a_running_job() {
        let mut c = not_running(config());
        let late = Timestamp(3 * INTERVAL);
        c.on_epochs_planned(vec![cut(1), cut(2)]);
        c.on_progress(&progress(0, None, Some(1)));
        assert!(triggered(&c.on_tick(late)).is_empty(), "epoch 1 only began");
        c.on_progress(&progress(0, Some(1), Some(2)));
        assert_eq!(triggered(&c.on_tick(late)), vec![1]);
    }

    /// Several epochs run in one Spark job: a checkpoint triggered meanwhile
    /// cuts at the newest epoch a subtask began, each subtask takes the
    /// barrier when it reports that epoch done, and the metadata holds what
    /// was planned for the cut.
    #[test]
    fn a_checkpoint_cuts_between_the_epochs_of_a_running_job() {
        let mut c = coordinator_with(config());
        c.on_epoch_final(cut(3));
        let mut planned: Vec<EpochCut> = (4..=6).map(cut).collect();
        planned[1]
            .sources
            .insert(uid("events"), serde_json::json!({"next": 50}));
        c.on_epochs_planned(planned);
        assert!(grants(&c.on_progress(&progress(0, Some(3), Some(4)))).is_empty());
        assert!(grants(&c.on_progress(&progress(1, Some(3), Some(4)))).is_empty());
        assert!(grants(&c.on_progress(&progress(0, Some(4), Some(5)))).is_empty());
        assert_eq!(triggered(&c.on_tick(Timestamp(1_000))), [1]);
        // Subtask 1 is done with epoch 4, but subtask 0 is inside epoch 5.
        let answer = c.on_progress(&progress(1, Some(4), Some(5)));
        assert!(grants(&answer).is_empty());
        assert!(matches!(
            answer.1[..],
            [CoordinatorEffect::InjectBarrier { cut: Epoch(5), .. }]
        ));
        assert_eq!(
            grants(&c.on_progress(&progress(0, Some(5), Some(6)))),
            [(1, 5)]
        );
        assert_eq!(
            c.on_ack(Timestamp(1_200), ack(1, 0)).0,
            AckOutcome::Accepted
        );
        assert!(
            grants(&c.on_progress(&progress(0, Some(6), None))).is_empty(),
            "a subtask that acked is not asked again"
        );
        assert_eq!(
            grants(&c.on_progress(&progress(1, Some(5), Some(6)))),
            [(1, 5)]
        );
        let (_, effects) = c.on_ack(Timestamp(1_300), ack(1, 1));
        let [CoordinatorEffect::WriteMetadata(metadata)] = &effects[..] else {
            panic!("the last ack writes the metadata: {effects:?}");
        };
        assert_eq!(metadata.cut_epoch, Epoch(5));
        assert_eq!(
            metadata.sources[&uid("events")],
            serde_json::json!({"next": 50})
        );
    }

    /// A checkpoint triggered before any subtask began the job's first epoch
    /// cuts at the newest final epoch at once (its barrier may go to the
    /// hosts while the job's input is read), and each subtask is granted it
    /// with its first report; an epoch nobody planned is never a cut.
    #[test]
    fn a_checkpoint_before_the_first_epoch_cuts_at_the_newest_final_one() {
        let mut c = coordinator_with(config());
        c.on_epoch_final(cut(3));
        assert!(c.on_epochs_planned(vec![cut(4)]).is_empty());
        let effects = c.on_tick(Timestamp(1_000));
        assert_eq!(triggered(&effects), [1]);
        assert!(
            matches!(
                effects[..],
                [
                    CoordinatorEffect::Triggered { .. },
                    CoordinatorEffect::InjectBarrier { cut: Epoch(3), .. }
                ]
            ),
            "cut at the trigger: {effects:?}"
        );
        assert_eq!(
            grants(&c.on_progress(&progress(0, Some(3), Some(4)))),
            [(1, 3)]
        );
        assert_eq!(
            grants(&c.on_progress(&progress(1, Some(3), Some(4)))),
            [(1, 3)]
        );

        let mut fresh = coordinator_with(config());
        assert_eq!(triggered(&fresh.on_tick(Timestamp(1_000))), [1]);
        let answer = fresh.on_progress(&progress(0, Some(7), Some(8)));
        assert!(
            answer.0.is_empty() && answer.1.is_empty(),
            "epoch 7 was never planned"
        );
        // Once final, a planned epoch is a cut through its final report only.
        fresh.on_epochs_planned(vec![cut(8)]);
        fresh.on_epoch_final(cut(8));
        assert!(matches!(
            fresh.on_progress(&progress(0, Some(8), None)).0[..],
            [BarrierGrant { cut: Epoch(8), .. }]
        ));
    }

    /// A checkpoint triggered between two Spark jobs takes the newest final
    /// epoch once the next job's epochs are planned, not at that job's
    /// first boundary; once a subtask began one, it waits for a boundary.
    #[test]
    fn a_checkpoint_waiting_when_a_job_is_planned_cuts_before_it_begins() {
        let mut c = coordinator_with(config());
        c.on_epoch_final(cut(2));
        assert_eq!(triggered(&c.on_tick(Timestamp(1_000))), [1]);
        assert!(matches!(
            c.on_epochs_planned(vec![cut(3), cut(4)])[..],
            [CoordinatorEffect::InjectBarrier { cut: Epoch(2), .. }]
        ));
        assert_eq!(
            grants(&c.on_progress(&progress(0, Some(2), Some(3)))),
            [(1, 2)]
        );
        assert_eq!(written(&ack_all(&mut c, 1, 1_100)), [1]);
        c.on_metadata_stored(Timestamp(1_100), CheckpointId(1));
        let effects = c.on_tick(Timestamp(2_100));
        assert_eq!(triggered(&effects), [2]);
        assert_eq!(effects.len(), 1, "subtask 0 began epoch 3: {effects:?}");
    }

    /// A run that ends aborts what is still in flight, without counting a
    /// failure; a checkpoint writing its metadata may still complete.
    #[test]
    fn the_end_of_a_run_aborts_checkpoints_in_flight() {
        let mut two_at_once = config();
        two_at_once.max_concurrent = 2;
        let mut c = coordinator_with(two_at_once);
        assert_eq!(triggered(&c.on_tick(Timestamp(1_000))), [1]);
        c.on_epoch_final(cut(1));
        assert_eq!(written(&ack_all(&mut c, 1, 1_100)), [1]);
        assert_eq!(triggered(&c.on_tick(Timestamp(2_000))), [2]);
        c.on_epoch_final(cut(2));
        c.on_ack(Timestamp(2_100), ack(2, 0));
        let effects = c.on_run_ended(Timestamp(2_200));
        assert_eq!(aborted(&effects), [(2, AbortReason::RunEnded)]);
        assert!(!fails_job(&effects));
        assert!(
            !c.on_metadata_stored(Timestamp(2_300), CheckpointId(1))
                .is_empty()
        );
    }

    /// A restart forgets the running epochs: a report of the old job cuts
    /// nothing.
    #[test]
    fn a_restart_forgets_the_running_epochs() {
        let mut c = coordinator_with(config());
        c.on_epochs_planned(vec![cut(1), cut(2)]);
        c.on_progress(&progress(0, None, Some(1)));
        c.suspend(Timestamp(500));
        c.resume(Timestamp(500), Retention::new(NonZeroUsize::MIN));
        c.on_epoch_final(cut(0));
        assert_eq!(triggered(&c.on_tick(Timestamp(1_500))), [1]);
        let answer = c.on_progress(&progress(0, Some(1), Some(2)));
        assert!(answer.0.is_empty() && answer.1.is_empty());
    }

    /// An idle job's checkpoint takes the newest final epoch as its cut,
    /// with what was recorded for it; after a restart there is nothing to
    /// take until an epoch is final again.
    #[test]
    fn an_idle_job_cuts_at_its_newest_final_epoch() {
        let mut c = coordinator_with(config());
        assert_eq!(triggered(&c.on_tick(Timestamp(1_000))), [1]);
        let mut recorded = cut(3);
        recorded
            .sources
            .insert(uid("events"), serde_json::json!({"next": 30}));
        assert_eq!(
            c.on_epoch_final(recorded.clone()).len(),
            1,
            "checkpoint 1 cuts at 3"
        );
        assert!(c.cut_at_last_final().is_empty(), "nothing waits for a cut");
        assert!(
            c.on_epoch_final(cut(3)).is_empty(),
            "a repeated report changes nothing"
        );
        assert_eq!(written(&ack_all(&mut c, 1, 1_100)), [1]);
        c.on_metadata_stored(Timestamp(1_100), CheckpointId(1));
        assert_eq!(triggered(&c.on_tick(Timestamp(2_100))), [2]);
        assert_eq!(
            c.cut_at_last_final(),
            [CoordinatorEffect::InjectBarrier {
                id: CheckpointId(2),
                kind: CheckpointKind::Checkpoint,
                cut: Epoch(3)
            }]
        );
        let [CoordinatorEffect::WriteMetadata(meta)] = &ack_all(&mut c, 2, 2_200)[..] else {
            panic!("checkpoint 2 completes")
        };
        assert_eq!(meta.cut_epoch, Epoch(3));
        assert_eq!(meta.sources, recorded.sources);
        c.suspend(Timestamp(2_300));
        c.resume(Timestamp(2_300), Retention::new(NonZeroUsize::MIN));
        assert!(
            c.cut_at_last_final().is_empty(),
            "a restart forgets the cut"
        );
    }

    #[test]
    fn a_checkpoint_runs_from_trigger_to_notification() {
        let mut c = coordinator_with(config());
        assert!(c.on_tick(Timestamp(999)).is_empty());
        assert_eq!(
            c.on_tick(Timestamp(1_000)),
            [CoordinatorEffect::Triggered {
                id: CheckpointId(1),
                kind: CheckpointKind::Checkpoint
            }]
        );
        assert_eq!(
            c.on_epoch_final(cut(4)),
            [CoordinatorEffect::InjectBarrier {
                id: CheckpointId(1),
                kind: CheckpointKind::Checkpoint,
                cut: Epoch(4)
            }]
        );
        assert!(c.on_ack(Timestamp(1_100), ack(1, 0)).1.is_empty());
        let (_, effects) = c.on_ack(Timestamp(1_250), ack(1, 1));
        let [CoordinatorEffect::WriteMetadata(meta)] = &effects[..] else {
            panic!("expected a metadata write, got {effects:?}");
        };
        assert_eq!(
            (meta.checkpoint_id, meta.cut_epoch, meta.timestamp_millis),
            (CheckpointId(1), Epoch(4), 1_000)
        );
        assert_eq!(meta.stats.map(|s| s.end_to_end_millis), Some(250));
        assert!(
            c.latest_completed().is_none(),
            "not complete before the metadata is stored"
        );
        assert_eq!(
            c.on_metadata_stored(Timestamp(1_300), CheckpointId(1)),
            [CoordinatorEffect::NotifyComplete {
                id: CheckpointId(1),
                kind: CheckpointKind::Checkpoint,
                cut: Epoch(4)
            }]
        );
        assert_eq!(c.latest_completed(), Some(CheckpointId(1)));
        let stats = c.stats().get(CheckpointId(1)).expect("in history");
        assert_eq!(stats.status, CheckpointStatus::Completed);
        assert_eq!(stats.num_acknowledged(), 2);
        assert_eq!(stats.end_to_end_millis, 250);
        // The next one is due one interval after the first trigger.
        assert_eq!(c.next_wakeup(Timestamp(1_300)), Some(Timestamp(2_000)));
        assert_eq!(triggered(&c.on_tick(Timestamp(2_000))), [2]);
    }

    #[test]
    fn ack_outcomes_tell_apart_unknown_duplicate_and_discarded() {
        let mut c = coordinator_with(config());
        assert_eq!(
            c.on_ack(Timestamp(10), ack(1, 0)).0,
            AckOutcome::Unknown,
            "not triggered yet"
        );
        c.on_tick(Timestamp(1_000));
        assert_eq!(
            c.on_ack(Timestamp(1_001), ack(1, 0)).0,
            AckOutcome::Unknown,
            "no barrier yet"
        );
        c.on_epoch_final(cut(1));
        assert_eq!(
            c.on_ack(Timestamp(1_002), ack(1, 0)).0,
            AckOutcome::Accepted
        );
        assert_eq!(
            c.on_ack(Timestamp(1_003), ack(1, 0)).0,
            AckOutcome::Duplicate
        );
        assert_eq!(
            c.on_ack(Timestamp(1_003), ack(1, 7)).0,
            AckOutcome::Unknown,
            "no such subtask"
        );
        c.on_decline(Timestamp(1_004), decline(1, 1));
        assert_eq!(
            c.on_ack(Timestamp(1_005), ack(1, 1)).0,
            AckOutcome::Discarded
        );
        assert_eq!(c.on_ack(Timestamp(1_005), ack(9, 1)).0, AckOutcome::Unknown);
    }

    #[test]
    fn an_expired_checkpoint_fails_the_job_without_tolerance() {
        let mut c = coordinator_with(config());
        c.on_tick(Timestamp(1_000));
        assert_eq!(
            c.next_wakeup(Timestamp(1_000)),
            Some(Timestamp(6_000)),
            "only the timeout is ahead"
        );
        assert!(c.on_tick(Timestamp(5_999)).is_empty());
        let effects = c.on_tick(Timestamp(6_000));
        assert_eq!(aborted(&effects), [(1, AbortReason::Expired)]);
        assert_eq!(
            effects.last(),
            Some(&CoordinatorEffect::FailJob {
                consecutive_failures: 1,
                reason: AbortReason::Expired,
                latest_completed: None
            })
        );
        assert!(c.is_job_failed());
        assert!(c.on_tick(Timestamp(60_000)).is_empty());
        assert_eq!(c.next_wakeup(Timestamp(60_000)), None);
        assert_eq!(
            c.trigger_savepoint(Timestamp(60_000), false),
            Err(CoordinatorError::JobFailed)
        );
    }

    #[test]
    fn tolerated_failures_keep_the_job_and_a_completion_resets_them() {
        let mut cfg = config();
        cfg.tolerable_failures = 1;
        let mut c = coordinator_with(cfg);
        c.on_tick(Timestamp(1_000));
        let effects = c.on_tick(Timestamp(6_000));
        assert_eq!(aborted(&effects), [(1, AbortReason::Expired)]);
        assert!(!fails_job(&effects));
        // The next one was due at 2000: it starts right after the abort.
        assert_eq!(triggered(&effects), [2]);
        complete(&mut c, 2, 10, 6_500);
        c.on_tick(Timestamp(7_000));
        let effects = c.on_tick(Timestamp(12_000));
        assert_eq!(aborted(&effects), [(3, AbortReason::Expired)]);
        assert!(!fails_job(&effects), "the completion reset the streak");
        c.on_epoch_final(cut(11));
        let (outcome, effects) = c.on_decline(Timestamp(12_100), decline(4, 0));
        assert_eq!(outcome, AckOutcome::Accepted);
        assert_eq!(
            effects.last(),
            Some(&CoordinatorEffect::FailJob {
                consecutive_failures: 2,
                reason: AbortReason::Declined {
                    uid: uid("avg"),
                    subtask: SubtaskIndex(0),
                    message: "disk full".into()
                },
                latest_completed: Some(CheckpointId(2)),
            })
        );
    }

    #[test]
    fn a_decline_from_a_stranger_or_after_all_acks_changes_nothing() {
        let mut c = coordinator_with(config());
        c.on_tick(Timestamp(1_000));
        c.on_epoch_final(cut(1));
        let stranger = SubtaskDecline {
            uid: uid("other"),
            ..decline(1, 0)
        };
        assert_eq!(
            c.on_decline(Timestamp(1_001), stranger),
            (AckOutcome::Unknown, Vec::new())
        );
        ack_all(&mut c, 1, 1_002);
        assert_eq!(
            c.on_decline(Timestamp(1_003), decline(1, 0)),
            (AckOutcome::Duplicate, Vec::new())
        );
        assert_eq!(
            c.on_decline(Timestamp(1_003), decline(8, 0)).0,
            AckOutcome::Unknown
        );
        assert!(
            !c.on_metadata_stored(Timestamp(1_004), CheckpointId(1))
                .is_empty()
        );
        assert_eq!(
            c.on_decline(Timestamp(1_005), decline(1, 0)).0,
            AckOutcome::Discarded
        );
    }

    #[test]
    fn a_newer_completion_subsumes_older_pending_checkpoints_without_counting_a_failure() {
        let mut cfg = config();
        cfg.max_concurrent = 2;
        let mut c = coordinator_with(cfg);
        c.on_tick(Timestamp(1_000));
        assert_eq!(triggered(&c.on_tick(Timestamp(2_000))), [2]);
        assert!(
            c.on_tick(Timestamp(3_000)).is_empty(),
            "two in flight is the limit"
        );
        c.on_epoch_final(cut(1));
        c.on_epoch_final(cut(2));
        assert_eq!(written(&ack_all(&mut c, 2, 2_500)), [2]);
        let effects = c.on_metadata_stored(Timestamp(2_600), CheckpointId(2));
        assert_eq!(
            aborted(&effects),
            [(
                1,
                AbortReason::Subsumed {
                    by: CheckpointId(2)
                }
            )]
        );
        assert!(!fails_job(&effects));
        assert!(!c.is_job_failed());
        assert_eq!(
            c.on_ack(Timestamp(2_700), ack(1, 0)).0,
            AckOutcome::Discarded
        );
    }

    #[test]
    fn savepoints_run_beside_checkpoints_and_are_never_subsumed() {
        let mut c = coordinator_with(config());
        c.on_tick(Timestamp(1_000));
        let (sp, effects) = c
            .trigger_savepoint(Timestamp(1_100), false)
            .expect("running");
        assert_eq!(sp, CheckpointId(2));
        assert_eq!(
            effects,
            [CoordinatorEffect::Triggered {
                id: sp,
                kind: CheckpointKind::Savepoint
            }]
        );
        // The savepoint does not take the checkpoint's concurrency slot...
        assert_eq!(c.next_wakeup(Timestamp(1_100)), Some(Timestamp(6_000)));
        // ...and the older checkpoint gets the first cut.
        assert_eq!(
            c.on_epoch_final(cut(5)),
            [CoordinatorEffect::InjectBarrier {
                id: CheckpointId(1),
                kind: CheckpointKind::Checkpoint,
                cut: Epoch(5)
            }]
        );
        assert_eq!(
            c.on_epoch_final(cut(6)),
            [CoordinatorEffect::InjectBarrier {
                id: sp,
                kind: CheckpointKind::Savepoint,
                cut: Epoch(6)
            }]
        );
        ack_all(&mut c, 1, 1_500);
        assert!(aborted(&c.on_metadata_stored(Timestamp(1_500), CheckpointId(1))).is_empty());
        assert_eq!(written(&ack_all(&mut c, 2, 1_600)), [2]);
        let effects = c.on_metadata_stored(Timestamp(1_700), sp);
        assert_eq!(
            effects,
            [CoordinatorEffect::NotifyComplete {
                id: sp,
                kind: CheckpointKind::Savepoint,
                cut: Epoch(6)
            }]
        );
        assert_eq!(
            c.latest_completed(),
            Some(CheckpointId(1)),
            "savepoints are not retained checkpoints"
        );
        assert_eq!(c.stats().latest_savepoint.as_ref().map(|s| s.id), Some(sp));
    }

    #[test]
    fn an_expired_savepoint_does_not_fail_the_job() {
        let mut c = coordinator_with(config());
        c.trigger_savepoint(Timestamp(500), false).expect("running");
        let effects = c.on_tick(Timestamp(5_500));
        assert_eq!(aborted(&effects), [(1, AbortReason::Expired)]);
        assert!(!fails_job(&effects));
        // The savepoint's end does not delay periodic checkpoints.
        assert_eq!(triggered(&effects), [2]);
    }

    #[test]
    fn old_checkpoints_leave_retention_as_new_ones_complete() {
        let mut cfg = config();
        cfg.retained = 2;
        let mut c = coordinator_with(cfg);
        for (id, now) in [(1, 1_000), (2, 2_000)] {
            c.on_tick(Timestamp(now));
            let effects = complete(&mut c, id, id, now + 10);
            assert!(
                !effects
                    .iter()
                    .any(|e| matches!(e, CoordinatorEffect::Subsume(_)))
            );
        }
        c.on_tick(Timestamp(3_000));
        let effects = complete(&mut c, 3, 3, 3_010);
        assert_eq!(
            effects,
            [
                CoordinatorEffect::Subsume(SubsumeDecision {
                    discard: vec![CheckpointId(1)],
                    shared_files: Vec::new()
                }),
                CoordinatorEffect::NotifyComplete {
                    id: CheckpointId(3),
                    kind: CheckpointKind::Checkpoint,
                    cut: Epoch(3)
                },
            ]
        );
    }

    #[test]
    fn a_checkpoint_delayed_by_a_long_one_starts_when_it_ends() {
        let mut c = coordinator_with(config());
        c.on_tick(Timestamp(1_000));
        assert!(c.on_tick(Timestamp(2_000)).is_empty(), "one in flight");
        assert_eq!(
            c.next_wakeup(Timestamp(2_000)),
            Some(Timestamp(6_000)),
            "only the timeout"
        );
        complete(&mut c, 1, 1, 3_500);
        assert_eq!(c.next_wakeup(Timestamp(3_500)), Some(Timestamp(3_500)));
        assert_eq!(triggered(&c.on_tick(Timestamp(3_500))), [2]);
        assert_eq!(
            c.next_wakeup(Timestamp(3_500)),
            Some(Timestamp(8_500)),
            "next due at 4500 but one in flight"
        );
    }

    #[test]
    fn a_delayed_checkpoint_waits_out_the_min_pause() {
        let mut cfg = config();
        cfg.min_pause = Duration::from_millis(800);
        let mut c = coordinator_with(cfg);
        c.on_tick(Timestamp(1_000));
        complete(&mut c, 1, 1, 3_500);
        assert_eq!(c.next_wakeup(Timestamp(3_500)), Some(Timestamp(4_300)));
        assert!(c.on_tick(Timestamp(4_299)).is_empty());
        assert_eq!(triggered(&c.on_tick(Timestamp(4_300))), [2]);
    }

    #[test]
    fn a_requested_checkpoint_starts_at_once_and_the_interval_counts_from_it() {
        let mut c = coordinator_with(config());
        c.request_checkpoint();
        assert_eq!(c.next_wakeup(Timestamp(300)), Some(Timestamp(300)));
        assert_eq!(triggered(&c.on_tick(Timestamp(300))), [1]);
        // One request, one checkpoint: the next is periodic again.
        complete(&mut c, 1, 1, 400);
        assert_eq!(c.next_wakeup(Timestamp(400)), Some(Timestamp(1_300)));
        assert!(c.on_tick(Timestamp(1_299)).is_empty());
        assert_eq!(triggered(&c.on_tick(Timestamp(1_300))), [2]);
    }

    #[test]
    fn a_request_waits_for_the_checkpoint_in_flight_and_for_a_restart() {
        let mut c = coordinator_with(config());
        assert_eq!(triggered(&c.on_tick(Timestamp(1_000))), [1]);
        c.request_checkpoint();
        assert!(c.on_tick(Timestamp(1_100)).is_empty());
        complete(&mut c, 1, 1, 1_200);
        assert_eq!(triggered(&c.on_tick(Timestamp(1_200))), [2]);

        c.request_checkpoint();
        c.suspend(Timestamp(1_300));
        assert!(c.on_tick(Timestamp(1_400)).is_empty());
        // A restart forgets the request: the new generation asks again if it must.
        c.resume(Timestamp(1_500), Retention::new(NonZeroUsize::MIN));
        assert_eq!(
            c.next_wakeup(Timestamp(1_500)),
            None,
            "the new run has not run yet"
        );
        c.on_epoch_final(cut(2));
        assert_eq!(c.next_wakeup(Timestamp(1_500)), Some(Timestamp(2_500)));
    }

    #[test]
    fn a_failed_metadata_write_aborts_and_keeps_the_previous_checkpoint() {
        let mut cfg = config();
        cfg.tolerable_failures = 3;
        let mut c = coordinator_with(cfg);
        c.on_tick(Timestamp(1_000));
        complete(&mut c, 1, 1, 1_100);
        c.on_tick(Timestamp(2_000));
        c.on_epoch_final(cut(2));
        ack_all(&mut c, 2, 2_100);
        let effects = c.on_metadata_failed(Timestamp(2_200), CheckpointId(2), "bucket gone".into());
        assert_eq!(
            aborted(&effects),
            [(
                2,
                AbortReason::MetadataNotWritten {
                    message: "bucket gone".into()
                }
            )]
        );
        assert_eq!(c.latest_completed(), Some(CheckpointId(1)));
        assert_eq!(
            c.stats().latest_failed.as_ref().map(|s| s.id),
            Some(CheckpointId(2))
        );
        // A report for a checkpoint not being written is ignored.
        assert!(
            c.on_metadata_stored(Timestamp(2_300), CheckpointId(2))
                .is_empty()
        );
        assert!(
            c.on_metadata_failed(Timestamp(2_300), CheckpointId(7), "?".into())
                .is_empty()
        );
    }

    #[test]
    fn a_checkpoint_being_written_never_expires() {
        let mut c = coordinator_with(config());
        c.on_tick(Timestamp(1_000));
        c.on_epoch_final(cut(1));
        ack_all(&mut c, 1, 1_100);
        assert!(aborted(&c.on_tick(Timestamp(60_000))).is_empty());
        assert!(!c.is_job_failed());
        assert_eq!(
            c.on_metadata_stored(Timestamp(60_001), CheckpointId(1))
                .len(),
            1
        );
    }

    #[test]
    fn stale_or_repeated_final_epochs_do_not_cut() {
        let mut cfg = config();
        cfg.max_concurrent = 2;
        let mut c = coordinator_with(cfg);
        assert!(
            c.on_epoch_final(cut(1)).is_empty(),
            "nothing waits for a cut"
        );
        c.on_tick(Timestamp(1_000));
        c.on_tick(Timestamp(2_000));
        assert_eq!(c.on_epoch_final(cut(3)).len(), 1);
        assert!(c.on_epoch_final(cut(3)).is_empty(), "a repeated epoch");
        assert!(c.on_epoch_final(cut(2)).is_empty(), "an older epoch");
        assert_eq!(
            c.on_epoch_final(cut(4)),
            [CoordinatorEffect::InjectBarrier {
                id: CheckpointId(2),
                kind: CheckpointKind::Checkpoint,
                cut: Epoch(4)
            }]
        );
    }

    #[test]
    fn ids_continue_after_a_restore_and_older_acks_are_discarded() {
        let mut c = CheckpointCoordinator::new(CoordinatorOptions {
            first_checkpoint_id: CheckpointId(42),
            ..options()
        })
        .expect("valid");
        c.on_epoch_final(cut(0));
        assert_eq!(triggered(&c.on_tick(Timestamp(1_000))), [42]);
        assert_eq!(
            c.on_ack(Timestamp(1_001), ack(41, 0)).0,
            AckOutcome::Discarded
        );
    }

    #[test]
    fn checkpoints_wait_for_reserved_ids_and_savepoints_refuse_without_them() {
        let mut c = CheckpointCoordinator::new(CoordinatorOptions {
            first_checkpoint_id: CheckpointId(5),
            reserved_until: CheckpointId(6),
            ..options()
        })
        .expect("valid");
        c.on_epoch_final(cut(0));
        assert_eq!(c.ids_left(), 2);
        assert_eq!(triggered(&c.on_tick(Timestamp(1_000))), [5]);
        let (sp, _) = c
            .trigger_savepoint(Timestamp(1_001), false)
            .expect("id 6 left");
        assert_eq!(sp, CheckpointId(6));
        assert_eq!(
            c.trigger_savepoint(Timestamp(1_002), false)
                .map(|(id, _)| id),
            Err(CoordinatorError::IdsExhausted {
                reserved_until: CheckpointId(6)
            })
        );
        complete(&mut c, 5, 1, 1_100);
        // Due now, but no id is reserved: only the savepoint's timeout wakes it.
        assert!(c.on_tick(Timestamp(3_000)).is_empty());
        assert_eq!(c.next_wakeup(Timestamp(3_000)), Some(Timestamp(6_001)));
        c.on_ids_reserved(CheckpointId(4));
        assert_eq!(c.ids_left(), 0, "a lower reservation changes nothing");
        c.on_ids_reserved(CheckpointId(9));
        assert_eq!(triggered(&c.on_tick(Timestamp(3_000))), [7]);
    }

    #[test]
    fn a_restart_drops_everything_in_flight_and_resumes_with_ids_going_on() {
        let mut cfg = config();
        cfg.max_concurrent = 2;
        let mut c = coordinator_with(cfg);
        c.on_tick(Timestamp(1_000));
        c.on_tick(Timestamp(2_000));
        c.trigger_savepoint(Timestamp(2_100), true)
            .expect("running");
        c.on_epoch_final(cut(7));
        assert_eq!(written(&ack_all(&mut c, 1, 2_200)), [1]);
        // Checkpoint 1's metadata is being written, 2 and the savepoint wait.
        c.suspend(Timestamp(2_300));
        assert!(
            c.on_tick(Timestamp(9_000)).is_empty(),
            "nothing starts while restarting"
        );
        assert_eq!(c.next_wakeup(Timestamp(9_000)), None);
        assert_eq!(
            c.trigger_savepoint(Timestamp(9_000), false)
                .map(|(id, _)| id),
            Err(CoordinatorError::Restarting)
        );
        assert!(
            c.on_metadata_stored(Timestamp(9_001), CheckpointId(1))
                .is_empty(),
            "a write that lands after the restart completes nothing"
        );
        assert_eq!(
            c.on_ack(Timestamp(9_002), ack(2, 0)).0,
            AckOutcome::Discarded
        );
        assert_eq!(c.stats().counts.failed, 3);
        assert_eq!(c.latest_completed(), None);

        c.resume(Timestamp(10_000), Retention::new(NonZeroUsize::MIN));
        assert!(
            c.on_epoch_final(cut(3)).is_empty(),
            "epochs may restart lower"
        );
        assert!(c.on_tick(Timestamp(10_999)).is_empty());
        assert_eq!(triggered(&c.on_tick(Timestamp(11_000))), [4]);
        assert_eq!(
            c.on_epoch_final(cut(4)),
            [CoordinatorEffect::InjectBarrier {
                id: CheckpointId(4),
                kind: CheckpointKind::Checkpoint,
                cut: Epoch(4)
            }]
        );
    }

    #[test]
    fn a_failed_job_runs_again_after_a_restart() {
        let mut c = coordinator_with(config());
        c.on_tick(Timestamp(1_000));
        c.on_epoch_final(cut(1));
        let (_, effects) = c.on_decline(Timestamp(1_100), decline(1, 0));
        assert!(fails_job(&effects));
        assert_eq!(c.next_wakeup(Timestamp(1_100)), None);
        c.suspend(Timestamp(1_200));
        c.resume(Timestamp(1_200), Retention::new(NonZeroUsize::MIN));
        assert!(!c.is_job_failed());
        c.on_epoch_final(cut(2));
        assert_eq!(triggered(&c.on_tick(Timestamp(2_200))), [2]);
    }

    #[test]
    fn a_stop_savepoint_holds_checkpoints_back_and_ends_them_once_complete() {
        let mut c = coordinator_with(config());
        let (sp, _) = c.trigger_savepoint(Timestamp(500), true).expect("running");
        assert!(
            c.on_tick(Timestamp(1_000)).is_empty(),
            "held back while it runs"
        );
        // It fails: periodic checkpoints go on.
        let effects = c.on_tick(Timestamp(5_500));
        assert_eq!(aborted(&effects), [(sp.0, AbortReason::Expired)]);
        assert_eq!(triggered(&effects), [2]);
        complete(&mut c, 2, 1, 5_600);
        let (sp, _) = c
            .trigger_savepoint(Timestamp(5_700), true)
            .expect("running");
        c.on_epoch_final(cut(2));
        ack_all(&mut c, sp.0, 5_800);
        let effects = c.on_metadata_stored(Timestamp(5_900), sp);
        assert!(matches!(
            effects[..],
            [CoordinatorEffect::NotifyComplete { .. }]
        ));
        assert!(c.on_tick(Timestamp(60_000)).is_empty(), "stopped for good");
        assert_eq!(c.next_wakeup(Timestamp(60_000)), None);
    }

    fn options() -> CoordinatorOptions {
        CoordinatorOptions {
            job_id: JobId::new("job").expect("valid"),
            config: config(),
            operators: vec![operator("avg", 2)],
            first_checkpoint_id: CheckpointId(1),
            reserved_until: CheckpointId(1_000),
            started_at: Timestamp(0),
            history: 10,
            retention: None,
        }
    }

    #[test]
    fn bad_options_are_rejected() {
        let mut o = options();
        o.config.max_concurrent = 0;
        assert!(matches!(
            CheckpointCoordinator::new(o),
            Err(CoordinatorError::NoConcurrentCheckpoints)
        ));
        let mut o = options();
        o.operators.push(operator("avg", 1));
        assert!(matches!(
            CheckpointCoordinator::new(o),
            Err(CoordinatorError::DuplicateOperator { .. })
        ));
        let mut o = options();
        o.operators = vec![operator("avg", 0)];
        let err = CheckpointCoordinator::new(o).expect_err("parallelism 0");
        assert!(matches!(err, CoordinatorError::InvalidOperator { .. }));
    }

    #[test]
    fn a_late_older_completion_is_retained_by_id_and_not_notified() {
        let mut cfg = config();
        cfg.max_concurrent = 2;
        let mut c = coordinator_with(cfg);
        c.on_tick(Timestamp(1_000));
        c.on_tick(Timestamp(2_000));
        c.on_epoch_final(cut(1));
        c.on_epoch_final(cut(2));
        ack_all(&mut c, 1, 2_100);
        ack_all(&mut c, 2, 2_200);
        // Both metadata writes are under way; the newer one lands first.
        assert_eq!(
            c.on_metadata_stored(Timestamp(2_300), CheckpointId(2))
                .len(),
            1
        );
        let effects = c.on_metadata_stored(Timestamp(2_400), CheckpointId(1));
        assert_eq!(
            effects,
            [CoordinatorEffect::Subsume(SubsumeDecision {
                discard: vec![CheckpointId(1)],
                shared_files: Vec::new()
            })]
        );
        assert_eq!(c.latest_completed(), Some(CheckpointId(2)));
    }

    fn incremental_ack(id: u64, subtask: u32, shared: &str) -> SubtaskAck {
        use weir_snapshot::{
            IncrementalSnapshotHandle, KeyedStateHandle, SharedStateFile, StateFile,
        };
        let max = MaxParallelism::new(128).expect("valid");
        let handle = IncrementalSnapshotHandle {
            key_group_range: weir_types::KeyGroupRange::for_subtask(max, 2, SubtaskIndex(subtask))
                .expect("valid"),
            max_parallelism: max,
            descriptors: Vec::new(),
            shared: vec![SharedStateFile {
                local_name: format!("{shared}.sst"),
                file: StateFile {
                    path: format!("shared/{shared}-{subtask}.sst"),
                    size: 1,
                    crc32: 0,
                },
            }],
            private: Vec::new(),
        };
        SubtaskAck {
            state: SubtaskStateMeta {
                keyed: Some(KeyedStateHandle::Incremental(handle)),
                ..ack(id, subtask).state
            },
            ..ack(id, subtask)
        }
    }

    #[test]
    fn shared_files_are_held_back_while_another_checkpoint_is_in_flight() {
        let mut cfg = config();
        cfg.max_concurrent = 2;
        cfg.tolerable_failures = 1;
        let mut c = coordinator_with(cfg);
        c.on_tick(Timestamp(1_000));
        c.on_epoch_final(cut(1));
        for subtask in 0..2 {
            c.on_ack(Timestamp(1_100), incremental_ack(1, subtask, "a"));
        }
        c.on_metadata_stored(Timestamp(1_200), CheckpointId(1));
        c.on_tick(Timestamp(2_000));
        c.on_tick(Timestamp(3_000));
        c.on_epoch_final(cut(2));
        c.on_epoch_final(cut(3));
        for subtask in 0..2 {
            c.on_ack(Timestamp(3_100), incremental_ack(2, subtask, "b"));
        }
        // Checkpoint 2 subsumes 1, but 3 is in flight and may reuse 1's files.
        let effects = c.on_metadata_stored(Timestamp(3_200), CheckpointId(2));
        let subsumed: Vec<_> = effects
            .iter()
            .filter_map(|e| match e {
                CoordinatorEffect::Subsume(d) => Some(d.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(subsumed.len(), 1);
        assert_eq!(subsumed[0].discard, [CheckpointId(1)]);
        assert!(
            subsumed[0].shared_files.is_empty(),
            "held back: {subsumed:?}"
        );
        // Once 3 ends, the held files go.
        let (_, effects) = c.on_decline(Timestamp(3_300), decline(3, 0));
        let Some(CoordinatorEffect::Subsume(released)) = effects.last() else {
            panic!("expected the held files, got {effects:?}");
        };
        let mut paths: Vec<_> = released
            .shared_files
            .iter()
            .map(|f| f.file.path.clone())
            .collect();
        paths.sort();
        assert_eq!(paths, ["shared/a-0.sst", "shared/a-1.sst"]);
        assert!(released.discard.is_empty());
    }
}
