//! Cuts inside a running Spark job that holds several epochs.
//!
//! A job may run epochs `e1..ek` in one Spark job: every subtask's task
//! takes them one after the other, and none of them is final until the job
//! succeeded. A checkpoint triggered meanwhile must still cut at an epoch
//! boundary that every subtask has yet to cross, or it would wait for the
//! whole job. So tasks report their progress at each boundary ("every epoch
//! up to `done` is processed; `next` begins now") and the coordinator picks
//! the cut the moment it can: the newest epoch any subtask has begun, or
//! the reporting subtask's `done` if nothing is further on. No subtask has
//! passed that epoch, so each one takes the barrier when it reaches it,
//! as Flink's sources inject a barrier at their next record boundary.
//!
//! The driver plans the epochs beforehand ([`RunningEpochs::plan`]), with
//! what a checkpoint cut after each one records (sources' positions, sinks'
//! handles): a cut needs them before the epoch is final. Pure bookkeeping;
//! the coordinator owns the pending checkpoints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir_types::{CheckpointId, Epoch, OperatorUid, SubtaskIndex};

use super::pending::EpochCut;
use crate::CheckpointKind;

/// A task's report at an epoch boundary (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochProgress {
    /// The operator.
    pub uid: OperatorUid,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// The newest epoch whose records the subtask processed (the newest
    /// final one at the start of its task; `None` before any epoch).
    pub done: Option<Epoch>,
    /// The epoch it begins next; `None` when its task ends.
    pub next: Option<Epoch>,
}

/// A barrier a reporting subtask takes before it begins its next epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierGrant {
    /// The checkpoint.
    pub id: CheckpointId,
    /// Checkpoint or savepoint.
    pub kind: CheckpointKind,
    /// The epoch it cuts after: the reporting subtask's `done`.
    pub cut: Epoch,
    /// The newest completed checkpoint, whose files an incremental
    /// checkpoint may reference.
    pub base: Option<CheckpointId>,
}

/// The planned epochs and how far subtasks got in them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RunningEpochs {
    /// Epochs after the newest final one that may become cuts.
    planned: BTreeMap<Epoch, EpochCut>,
    /// The newest epoch any subtask began.
    begun: Option<Epoch>,
    /// The first epoch a subtask began in this run.
    first: Option<Epoch>,
    /// Whether a subtask reported that epoch, or a later one, processed.
    processed: bool,
}

impl RunningEpochs {
    /// Records epochs about to run, with what a cut after each records.
    pub(crate) fn plan(&mut self, cuts: impl IntoIterator<Item = EpochCut>) {
        for cut in cuts {
            self.planned.insert(cut.epoch, cut);
        }
    }

    /// Epoch `final_epoch` became final: planned epochs up to it are no
    /// longer candidates (the final cut itself is).
    pub(crate) fn on_final(&mut self, final_epoch: Epoch) {
        self.planned = self.planned.split_off(&Epoch(final_epoch.0 + 1));
    }

    /// The epoch a checkpoint waiting for a cut takes on `progress`:
    /// `None` while no epoch has been processed anywhere. `known` is the
    /// newest final epoch's cut.
    pub(crate) fn cut_for(
        &self,
        progress: &EpochProgress,
        known: Option<&EpochCut>,
    ) -> Option<EpochCut> {
        let epoch = progress.done.max(self.begun)?;
        match known {
            Some(last) if last.epoch == epoch => Some(last.clone()),
            _ => self.planned.get(&epoch).cloned(),
        }
    }

    /// Notes the epoch `progress` says its subtask begins.
    pub(crate) fn on_progress(&mut self, progress: &EpochProgress) {
        self.begun = self.begun.max(progress.next).max(progress.done);
        self.first = self.first.or(progress.next);
        self.processed |= self.first.is_some_and(|first| progress.done >= Some(first));
    }

    /// Whether epochs after `final_epoch` are planned and no subtask began
    /// one yet: a cut at `final_epoch` is then one no subtask has passed.
    pub(crate) fn waits_to_begin(&self, final_epoch: Epoch) -> bool {
        !self.planned.is_empty() && self.begun.is_none_or(|begun| begun <= final_epoch)
    }

    /// Whether a subtask processed an epoch of this run: it runs, however
    /// long its first epoch took (starting a state host, a Python worker).
    pub(crate) fn processed(&self) -> bool {
        self.processed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(done: Option<u64>, next: Option<u64>) -> EpochProgress {
        EpochProgress {
            uid: OperatorUid::new("avg").expect("valid uid"),
            subtask: SubtaskIndex(0),
            done: done.map(Epoch),
            next: next.map(Epoch),
        }
    }

    fn cut(epoch: u64) -> EpochCut {
        EpochCut {
            epoch: Epoch(epoch),
            ..EpochCut::default()
        }
    }

    #[test]
    fn the_cut_is_the_newest_epoch_begun_anywhere() {
        let mut running = RunningEpochs::default();
        running.plan([cut(4), cut(5), cut(6)]);
        running.on_progress(&progress(Some(4), Some(5)));
        // Another subtask finishes epoch 4 while the first is inside 5.
        let taken = running.cut_for(&progress(Some(4), Some(5)), Some(&cut(3)));
        assert_eq!(taken.map(|c| c.epoch), Some(Epoch(5)));
    }

    #[test]
    fn a_subtask_ahead_of_all_others_cuts_at_its_own_boundary() {
        let mut running = RunningEpochs::default();
        running.plan([cut(4), cut(5)]);
        running.on_progress(&progress(Some(3), Some(4)));
        let taken = running.cut_for(&progress(Some(4), Some(5)), Some(&cut(3)));
        assert_eq!(taken.map(|c| c.epoch), Some(Epoch(4)));
    }

    #[test]
    fn before_any_epoch_began_the_newest_final_epoch_is_the_cut() {
        let mut running = RunningEpochs::default();
        running.plan([cut(4)]);
        let mut last = cut(3);
        last.sources.insert(
            OperatorUid::new("events").expect("valid uid"),
            serde_json::json!({"next": 30}),
        );
        let taken = running.cut_for(&progress(Some(3), Some(4)), Some(&last));
        assert_eq!(taken, Some(last));
        assert_eq!(running.cut_for(&progress(None, Some(1)), None), None);
    }

    #[test]
    fn final_epochs_leave_the_plan() {
        let mut running = RunningEpochs::default();
        running.plan([cut(4), cut(5), cut(6)]);
        running.on_final(Epoch(5));
        assert_eq!(
            running.cut_for(&progress(Some(5), Some(6)), None),
            None,
            "epoch 5 is final: only its final cut stands for it"
        );
        assert!(running.cut_for(&progress(Some(6), None), None).is_some());
    }
}
