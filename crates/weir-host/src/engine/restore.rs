//! Filling a fresh subtask from stored state (restore and rescale).

use weir_checkpoint::SubtaskRestore;
use weir_snapshot::{SnapshotStorage, read_operator_state, restore_keyed};
use weir_state::{OperatorStateSnapshot, OperatorStateStore, redistribute};

use super::Subtask;
use crate::error::{HostError, Result};

impl Subtask {
    /// Restores keyed state (this subtask's key groups only, from any
    /// number of full snapshot files) and operator state (this subtask's own
    /// file, or, after a rescale, its share of every old subtask's files by
    /// each state's redistribution mode) from `storage`.
    ///
    /// Only a subtask that has not begun an epoch nor registered operator
    /// state can restore; a failed restore leaves it unusable (drop it).
    pub async fn restore(
        &mut self,
        restore: &SubtaskRestore,
        storage: &SnapshotStorage,
    ) -> Result<()> {
        if restore.subtask != self.spec.subtask || restore.key_group_range != self.range {
            return Err(HostError::InvalidRequest(format!(
                "subtask {} (key groups {}) cannot restore the state planned for subtask {} \
                 (key groups {}); plan the restore with this operator's parallelism",
                self.spec.subtask, self.range, restore.subtask, restore.key_group_range
            )));
        }
        if self.last_begun.is_some() || self.operator.snapshot().is_ok_and(|s| !s.states.is_empty())
        {
            return Err(HostError::InvalidRequest(
                "restore a subtask before it registers operator state or begins an epoch".into(),
            ));
        }
        restore_keyed(
            self.keyed.as_mut(),
            &restore.keyed,
            &*storage.store,
            &storage.root,
        )
        .await?;
        let mut old = Vec::with_capacity(restore.operator_state.len());
        for file in &restore.operator_state {
            old.push(read_operator_state(file, &*storage.store, &storage.root).await?);
        }
        let own = if restore.rescaled {
            let index = self.spec.subtask.0 as usize;
            redistribute(&old, self.spec.parallelism)?
                .into_iter()
                .nth(index)
                .unwrap_or_default()
        } else {
            match old.len() {
                0 => OperatorStateSnapshot::default(),
                1 => old.remove(0),
                n => {
                    return Err(HostError::InvalidRequest(format!(
                        "a restore without rescaling names {n} operator state files; expected \
                         at most this subtask's own"
                    )));
                }
            }
        };
        self.operator = OperatorStateStore::restore(&own)?;
        Ok(())
    }
}
