//! One subtask's state in the host and the facts that decide whether a
//! task may use it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use weir_types::{CheckpointId, Epoch};

use crate::engine::Subtask;
use crate::error::{HostError, Result};
use crate::protocol::{Expectation, SubtaskStatus};
use crate::session::{SubtaskSession, SubtaskSpec};

/// How many checkpoint ids a slot remembers, to recognize a barrier of a
/// retried task.
const REMEMBERED_CHECKPOINTS: usize = 16;

/// A subtask's state and its history in this host.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The state.
    pub(crate) subtask: Subtask,
    /// Where the facts come from and what has happened since.
    pub(crate) facts: SlotFacts,
    /// Checkpoints whose synchronous part this slot took, newest last.
    pub(crate) checkpoints: VecDeque<CheckpointId>,
    /// Set when a restore replaced this slot: a connection still holding it
    /// must not write to state nobody will read.
    pub(crate) retired: bool,
    /// The directory of the subtask's working files.
    pub(crate) dir: PathBuf,
}

/// What the host knows about a slot's lineage and epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SlotFacts {
    /// The checkpoint the state was restored from.
    pub(crate) restored_from: Option<CheckpointId>,
    /// The newest final epoch (folded into the base, or the restored cut).
    pub(crate) final_epoch: Option<Epoch>,
    /// The newest epoch committed here.
    pub(crate) last_committed: Option<Epoch>,
}

impl Slot {
    /// A slot for fresh, empty state.
    pub(crate) fn open(spec: SubtaskSpec, dir: &Path) -> Result<Self> {
        Ok(Self::new(Subtask::open(spec, dir)?, dir))
    }

    /// A slot holding `subtask`, whose working files live in `dir`.
    pub(crate) fn new(subtask: Subtask, dir: &Path) -> Self {
        Self {
            subtask,
            facts: SlotFacts::default(),
            checkpoints: VecDeque::new(),
            retired: false,
            dir: dir.to_path_buf(),
        }
    }

    /// Fails with `StateLost` once a restore replaced this slot.
    pub(crate) fn usable(&mut self) -> Result<&mut Self> {
        if self.retired {
            let spec = self.subtask.spec();
            return Err(HostError::StateLost(format!(
                "the state of {}/{} this connection used was replaced by a restore; attach again",
                spec.uid, spec.subtask
            )));
        }
        Ok(self)
    }

    /// Refreshes the final epoch from the engine after it folded epochs.
    pub(crate) fn note_final(&mut self) {
        self.facts.final_epoch = self.facts.final_epoch.max(self.subtask.last_final_epoch());
    }

    /// Remembers that checkpoint `id` was taken; `false` if it already was.
    pub(crate) fn remember_checkpoint(&mut self, id: CheckpointId) -> bool {
        if self.checkpoints.contains(&id) {
            return false;
        }
        if self.checkpoints.len() == REMEMBERED_CHECKPOINTS {
            self.checkpoints.pop_front();
        }
        self.checkpoints.push_back(id);
        true
    }

    /// The slot's part of the host status.
    pub(crate) fn status(&self, pending_uploads: usize) -> SubtaskStatus {
        let spec = self.subtask.spec();
        SubtaskStatus {
            uid: spec.uid.clone(),
            subtask: spec.subtask,
            restored_from: self.facts.restored_from,
            final_epoch: self.facts.final_epoch,
            last_committed: self.facts.last_committed,
            checkpoints: self.checkpoints.iter().copied().collect(),
            pending_uploads,
            local_bytes: dir_bytes(&self.dir),
        }
    }
}

/// Decides whether a task that expects `expect` may use the host's state
/// (`facts`, `None` if the host holds none). Serving empty or foreign state
/// instead would silently lose the job's state, so any doubt is `StateLost`.
pub(crate) fn check_attach(
    spec: &SubtaskSpec,
    facts: Option<&SlotFacts>,
    expect: &Expectation,
) -> Result<()> {
    let name = format!("{}/{}", spec.uid, spec.subtask);
    let Some(facts) = facts else {
        if expect.starts_empty() {
            return Ok(());
        }
        return Err(HostError::StateLost(format!(
            "this state host holds no state for {name}, but the task expects {} (the host \
             restarted or the task ran on another executor)",
            describe(expect.restored_from, expect.final_epoch)
        )));
    };
    if facts.restored_from != expect.restored_from {
        return Err(HostError::StateLost(format!(
            "this state host holds {} for {name}, but the task expects {}",
            describe(facts.restored_from, facts.final_epoch),
            describe(expect.restored_from, expect.final_epoch)
        )));
    }
    if facts.final_epoch > expect.final_epoch {
        return Err(HostError::StateLost(format!(
            "this state host holds {name} final at epoch {}, beyond the job's final epoch {}: \
             a checkpoint cut that epoch inside the running Spark job, so a retried task cannot \
             run it again (the job restores from its checkpoints), or the state belongs to \
             another run of the job",
            render(facts.final_epoch),
            render(expect.final_epoch)
        )));
    }
    if let Some(wanted) = expect.final_epoch {
        let reached = facts.final_epoch.max(facts.last_committed);
        if reached < Some(wanted) {
            return Err(HostError::StateLost(format!(
                "epoch {wanted} of {name} is final but this state host never committed it (its \
                 newest epoch is {}); the epoch ran elsewhere",
                render(reached)
            )));
        }
    }
    Ok(())
}

fn describe(restored_from: Option<CheckpointId>, final_epoch: Option<Epoch>) -> String {
    let origin = match restored_from {
        Some(id) => format!("state restored from checkpoint {id}"),
        None => "state of a job that started empty".to_owned(),
    };
    match final_epoch {
        Some(epoch) => format!("{origin} at final epoch {epoch}"),
        None => format!("{origin} before any final epoch"),
    }
}

fn render(epoch: Option<Epoch>) -> String {
    epoch.map_or_else(|| "none".to_owned(), |e| e.to_string())
}

/// Bytes of the files under `dir` (0 if it does not exist).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use weir_types::{MaxParallelism, OperatorUid, SubtaskIndex};

    use super::*;
    use crate::session::BackendSpec;

    fn spec() -> SubtaskSpec {
        SubtaskSpec {
            uid: OperatorUid::new("avg").expect("valid"),
            subtask: SubtaskIndex(0),
            parallelism: 1,
            max_parallelism: MaxParallelism::new(8).expect("valid"),
            backend: BackendSpec::Heap,
            key_types: None,
        }
    }

    fn expect(restored_from: Option<u64>, final_epoch: Option<u64>) -> Expectation {
        Expectation {
            generation: 0,
            restored_from: restored_from.map(CheckpointId),
            final_epoch: final_epoch.map(Epoch),
        }
    }

    fn facts(restored: Option<u64>, final_epoch: Option<u64>, committed: Option<u64>) -> SlotFacts {
        SlotFacts {
            restored_from: restored.map(CheckpointId),
            final_epoch: final_epoch.map(Epoch),
            last_committed: committed.map(Epoch),
        }
    }

    #[test]
    fn a_host_without_the_state_serves_only_a_fresh_start() {
        assert!(check_attach(&spec(), None, &Expectation::fresh()).is_ok());
        for lost in [
            expect(None, Some(3)),
            expect(Some(2), None),
            expect(Some(2), Some(5)),
        ] {
            assert!(matches!(
                check_attach(&spec(), None, &lost),
                Err(HostError::StateLost(_))
            ));
        }
    }

    #[test]
    fn the_state_must_come_from_the_expected_restore_and_hold_the_final_epoch() {
        let s = spec();
        // Retry of the first epoch, then the next epochs.
        assert!(check_attach(&s, Some(&facts(None, None, Some(1))), &expect(None, None)).is_ok());
        assert!(
            check_attach(
                &s,
                Some(&facts(None, None, Some(1))),
                &expect(None, Some(1))
            )
            .is_ok()
        );
        assert!(
            check_attach(
                &s,
                Some(&facts(None, Some(4), Some(5))),
                &expect(None, Some(5))
            )
            .is_ok()
        );
        // Restored state at its cut.
        assert!(
            check_attach(
                &s,
                Some(&facts(Some(3), Some(9), None)),
                &expect(Some(3), Some(9))
            )
            .is_ok()
        );
        for (held, wanted) in [
            (facts(Some(3), Some(9), None), expect(Some(4), Some(9))),
            (facts(None, Some(9), None), expect(Some(3), Some(9))),
            (facts(None, Some(6), Some(6)), expect(None, Some(5))),
            (facts(None, Some(4), Some(5)), expect(None, Some(6))),
            (facts(None, None, None), expect(None, Some(1))),
        ] {
            assert!(
                matches!(
                    check_attach(&s, Some(&held), &wanted),
                    Err(HostError::StateLost(_))
                ),
                "{held:?} vs {wanted:?}"
            );
        }
    }
}
