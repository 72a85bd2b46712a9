//! What one subtask restores from a checkpoint or savepoint, planned once
//! (on the driver) and handed to whichever task attaches the subtask.

use serde::{Deserialize, Serialize};
use weir_checkpoint::{
    JobOperator, OperatorRestore, ResolvedSnapshot, RestorePlan, StorageOptions,
};
use weir_snapshot::{KeyedStateHandle, StateFile};
use weir_types::{CheckpointId, Epoch, KeyGroupRange, SubtaskIndex};

use crate::error::{HostError, Result};
use crate::protocol::{RestoreRequest, StorageRef};
use crate::session::SubtaskSpec;

/// The restore of one subtask: which checkpoint, its cut, and the handles
/// and files of the key groups and operator state the subtask takes over.
/// Its serialized form is opaque: only the same Weir version reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreTicket {
    restored_from: CheckpointId,
    cut: Epoch,
    storage: StorageRef,
    subtask: SubtaskIndex,
    key_group_range: KeyGroupRange,
    keyed: Vec<KeyedStateHandle>,
    operator_state: Vec<StateFile>,
    rescaled: bool,
}

impl RestoreTicket {
    /// The ticket of every subtask of `operator` (in subtask order) restoring
    /// `snapshot`, or `None` when the snapshot holds no state of the
    /// operator. Stored state of other operators is ignored here: whether
    /// the job may drop it is decided when the restore is checked. The
    /// tickets carry `options`, the storage's settings (S3 endpoint and
    /// credentials), so the host that restores can open the snapshot too.
    pub fn plan(
        snapshot: &ResolvedSnapshot,
        operator: &JobOperator,
        options: &StorageOptions,
    ) -> Result<Option<Vec<Self>>> {
        let metadata = snapshot.metadata();
        let plan = RestorePlan::new(metadata, std::slice::from_ref(operator), true)?;
        let Some(OperatorRestore::Restored(restored)) = plan.operators.get(&operator.uid) else {
            return Ok(None);
        };
        let storage = StorageRef {
            url: snapshot.base().url().to_owned(),
            options: options.settings.clone(),
        };
        Ok(Some(
            restored
                .subtasks
                .iter()
                .map(|restore| Self {
                    restored_from: metadata.checkpoint_id,
                    cut: metadata.cut_epoch,
                    storage: storage.clone(),
                    subtask: restore.subtask,
                    key_group_range: restore.key_group_range,
                    keyed: restore.keyed.clone(),
                    operator_state: restore.operator_state.clone(),
                    rescaled: restore.rescaled,
                })
                .collect(),
        ))
    }

    /// The checkpoint or savepoint restored.
    pub fn restored_from(&self) -> CheckpointId {
        self.restored_from
    }

    /// Its cut: the restored state is final at this epoch.
    pub fn cut(&self) -> Epoch {
        self.cut
    }

    /// The subtask this ticket restores.
    pub fn subtask(&self) -> SubtaskIndex {
        self.subtask
    }

    /// The request that restores the subtask `spec` describes in generation
    /// `generation` of the job; fails if the ticket is another subtask's.
    pub fn request(&self, spec: SubtaskSpec, generation: u64) -> Result<RestoreRequest> {
        if spec.subtask != self.subtask {
            return Err(HostError::InvalidRequest(format!(
                "the restore ticket is subtask {}'s, not subtask {}'s: hand each task its own \
                 subtask's ticket",
                self.subtask, spec.subtask
            )));
        }
        Ok(RestoreRequest {
            spec,
            generation,
            restored_from: self.restored_from,
            cut: self.cut,
            storage: self.storage.clone(),
            key_group_range: self.key_group_range,
            keyed: self.keyed.clone(),
            operator_state: self.operator_state.clone(),
            rescaled: self.rescaled,
        })
    }
}
