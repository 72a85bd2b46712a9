//! Reading completed checkpoints and savepoints for a restore: the driver
//! reads the `_metadata` of the one to restore (as JSON) and checks that
//! the job can take its state before any task starts. Finding the latest
//! one is `coordinator.rs`'s `latest_checkpoint`.

use pyo3::prelude::*;
use tokio::runtime::Runtime;
use weir_checkpoint::{
    JobOperator, OperatorRestore, ResolvedSnapshot, RestorePlan, StorageLocation, StorageOptions,
};
use weir_types::{MaxParallelism, OperatorUid};

use crate::errors::PyWeirError;

/// A runtime for one blocking storage call.
pub(crate) fn runtime() -> Result<Runtime, PyWeirError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| PyWeirError::Io(format!("cannot start an I/O runtime: {e}")))
}

fn resolve(path: &str) -> Result<ResolvedSnapshot, PyWeirError> {
    let location = StorageLocation::parse(path, &StorageOptions::default())?;
    Ok(runtime()?.block_on(ResolvedSnapshot::open(&location))?)
}

/// The `_metadata` of the checkpoint or savepoint at `path`, as JSON.
#[pyfunction]
pub(crate) fn read_checkpoint(py: Python<'_>, path: &str) -> PyResult<String> {
    let resolved = py.detach(|| resolve(path))?;
    serde_json::to_string(resolved.metadata())
        .map_err(|e| PyWeirError::Io(format!("cannot render the metadata of {path}: {e}")).into())
}

/// Checks that a job made of `operators` (`(uid, parallelism, max_parallelism)`)
/// can restore the checkpoint or savepoint at `path`; returns the uids of
/// stored operators the job drops (only with `allow_non_restored_state`).
#[pyfunction]
pub(crate) fn check_restore(
    py: Python<'_>,
    path: &str,
    operators: Vec<(String, u32, u32)>,
    allow_non_restored_state: bool,
) -> PyResult<Vec<String>> {
    let operators = operators
        .into_iter()
        .map(|(uid, parallelism, max_parallelism)| {
            Ok(JobOperator {
                uid: OperatorUid::new(uid)?,
                parallelism,
                max_parallelism: MaxParallelism::new(max_parallelism)?,
            })
        })
        .collect::<Result<Vec<_>, PyWeirError>>()?;
    let resolved = py.detach(|| resolve(path))?;
    let plan = RestorePlan::new(resolved.metadata(), &operators, allow_non_restored_state)
        .map_err(PyWeirError::from)?;
    Ok(plan.dropped.iter().map(|uid| uid.to_string()).collect())
}

/// What subtask `subtask` of operator `uid`, running at `parallelism`, restores
/// from the checkpoint or savepoint at `path`, as JSON: `restored_from` (its id),
/// `cut` (its epoch), `storage` (the directory its state paths are relative
/// to), `key_group_range`, `keyed` (handles), `operator_state` (files) and
/// `rescaled`; `null` when it stored no state for `uid`.
#[pyfunction]
pub(crate) fn subtask_restore(
    py: Python<'_>,
    path: &str,
    uid: &str,
    subtask: u32,
    parallelism: u32,
    max_parallelism: u32,
) -> PyResult<Option<String>> {
    let operator = JobOperator {
        uid: OperatorUid::new(uid).map_err(PyWeirError::from)?,
        parallelism,
        max_parallelism: MaxParallelism::new(max_parallelism).map_err(PyWeirError::from)?,
    };
    let resolved = py.detach(|| resolve(path))?;
    let plan = RestorePlan::new(resolved.metadata(), std::slice::from_ref(&operator), true)
        .map_err(PyWeirError::from)?;
    let Some(OperatorRestore::Restored(restored)) = plan.operators.get(&operator.uid) else {
        return Ok(None);
    };
    let Some(restore) = restored.subtasks.iter().find(|s| s.subtask.0 == subtask) else {
        return Err(PyWeirError::InvalidArgument(format!(
            "subtask {subtask} is out of range for parallelism {parallelism}"
        ))
        .into());
    };
    let metadata = resolved.metadata();
    let body = serde_json::json!({
        "restored_from": metadata.checkpoint_id,
        "cut": metadata.cut_epoch,
        "storage": resolved.base().url(),
        "key_group_range": restore.key_group_range,
        "keyed": restore.keyed,
        "operator_state": restore.operator_state,
        "rescaled": restore.rescaled,
    });
    Ok(Some(body.to_string()))
}
