//! Reading completed checkpoints and savepoints for a restore: the driver
//! reads the `_metadata` of the one to restore (a [`PyCheckpoint`] view),
//! checks that the job can take its state before any task starts, and plans
//! each subtask's restore (a [`PyRestoreTicket`] its task hands to the host).
//! Finding the latest one is `coordinator.rs`'s `latest_checkpoint`.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tokio::runtime::Runtime;
use weir_checkpoint::{
    CheckpointMetadata, JobOperator, ResolvedSnapshot, RestorePlan, StorageLocation, StorageOptions,
};
use weir_host::RestoreTicket;
use weir_types::{MaxParallelism, OperatorUid};

use crate::errors::PyWeirError;
use crate::types::{from_bytes, reduce};

/// A runtime for one blocking storage call.
pub(crate) fn runtime() -> Result<Runtime, PyWeirError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| PyWeirError::Io(format!("cannot start an I/O runtime: {e}")))
}

fn resolve(path: &str, options: &StorageOptions) -> Result<ResolvedSnapshot, PyWeirError> {
    let location = StorageLocation::parse(path, options)?;
    Ok(runtime()?.block_on(ResolvedSnapshot::open(&location))?)
}

/// What a completed checkpoint or savepoint holds, as its `_metadata` says.
#[pyclass(module = "weir._internal", name = "Checkpoint", frozen)]
pub struct PyCheckpoint {
    metadata: CheckpointMetadata,
}

/// Each entry's opaque JSON as text, by uid.
fn json_texts(entries: &BTreeMap<OperatorUid, serde_json::Value>) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(uid, value)| (uid.to_string(), value.to_string()))
        .collect()
}

#[pymethods]
impl PyCheckpoint {
    #[getter]
    fn checkpoint_id(&self) -> u64 {
        self.metadata.checkpoint_id.0
    }

    #[getter]
    fn kind(&self) -> &'static str {
        self.metadata.kind.as_str()
    }

    #[getter]
    fn job_id(&self) -> String {
        self.metadata.job_id.to_string()
    }

    #[getter]
    fn cut_epoch(&self) -> u64 {
        self.metadata.cut_epoch.0
    }

    #[getter]
    fn timestamp_millis(&self) -> u64 {
        self.metadata.timestamp_millis
    }

    /// Each source's position after the cut, as the JSON text it stored.
    #[getter]
    fn sources(&self) -> BTreeMap<String, String> {
        json_texts(&self.metadata.sources)
    }

    /// Each sink's handle to its unpublished output, as the JSON text it stored.
    #[getter]
    fn sinks(&self) -> BTreeMap<String, String> {
        json_texts(&self.metadata.sinks)
    }

    /// `(uid, parallelism, max_parallelism)` of each operator with state.
    #[getter]
    fn operators(&self) -> Vec<(String, u32, u32)> {
        self.metadata
            .operators
            .iter()
            .map(|op| (op.uid.to_string(), op.parallelism, op.max_parallelism.get()))
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "Checkpoint({} {} of job {}, cut epoch {})",
            self.metadata.kind.as_str(),
            self.metadata.checkpoint_id.0,
            self.metadata.job_id,
            self.metadata.cut_epoch.0
        )
    }
}

/// The storage settings a Python mapping gives (none: the environment's).
pub(crate) fn storage_options(options: Option<BTreeMap<String, String>>) -> StorageOptions {
    StorageOptions {
        settings: options.unwrap_or_default(),
    }
}

/// The `_metadata` of the checkpoint or savepoint at `path`.
#[pyfunction]
#[pyo3(signature = (path, storage_options = None))]
pub(crate) fn read_checkpoint(
    py: Python<'_>,
    path: &str,
    storage_options: Option<BTreeMap<String, String>>,
) -> PyResult<PyCheckpoint> {
    let options = self::storage_options(storage_options);
    let resolved = py.detach(|| resolve(path, &options))?;
    Ok(PyCheckpoint {
        metadata: resolved.metadata().clone(),
    })
}

/// Checks that a job made of `operators` (`(uid, parallelism, max_parallelism)`)
/// can restore the checkpoint or savepoint at `path`; returns the uids of
/// stored operators the job drops (only with `allow_non_restored_state`).
#[pyfunction]
#[pyo3(signature = (path, operators, allow_non_restored_state, storage_options = None))]
pub(crate) fn check_restore(
    py: Python<'_>,
    path: &str,
    operators: Vec<(String, u32, u32)>,
    allow_non_restored_state: bool,
    storage_options: Option<BTreeMap<String, String>>,
) -> PyResult<Vec<String>> {
    let options = self::storage_options(storage_options);
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
    let resolved = py.detach(|| resolve(path, &options))?;
    let plan = RestorePlan::new(resolved.metadata(), &operators, allow_non_restored_state)
        .map_err(PyWeirError::from)?;
    Ok(plan.dropped.iter().map(|uid| uid.to_string()).collect())
}

/// What one subtask restores; opaque, picklable.
#[pyclass(module = "weir._internal", name = "RestoreTicket", frozen)]
pub struct PyRestoreTicket {
    pub(crate) inner: RestoreTicket,
}

#[pymethods]
impl PyRestoreTicket {
    /// The id of the checkpoint or savepoint restored.
    #[getter]
    fn restored_from(&self) -> u64 {
        self.inner.restored_from().0
    }

    /// Its cut: the restored state is final at this epoch.
    #[getter]
    fn cut(&self) -> u64 {
        self.inner.cut().0
    }

    #[getter]
    fn subtask(&self) -> u32 {
        self.inner.subtask().0
    }

    #[staticmethod]
    fn _from_bytes(data: &[u8]) -> Result<Self, PyWeirError> {
        Ok(Self {
            inner: from_bytes(data)?,
        })
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        reduce(slf, &slf.get().inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "RestoreTicket(subtask {} from checkpoint {} at cut epoch {})",
            self.inner.subtask().0,
            self.inner.restored_from().0,
            self.inner.cut().0
        )
    }
}

/// What each subtask of operator `uid`, running at `parallelism`, restores
/// from the checkpoint or savepoint at `path`, in subtask order; `None` when
/// it stored no state of `uid`.
#[pyfunction]
#[pyo3(signature = (path, uid, parallelism, max_parallelism, storage_options = None))]
pub(crate) fn restore_tickets(
    py: Python<'_>,
    path: &str,
    uid: &str,
    parallelism: u32,
    max_parallelism: u32,
    storage_options: Option<BTreeMap<String, String>>,
) -> Result<Option<Vec<PyRestoreTicket>>, PyWeirError> {
    let options = self::storage_options(storage_options);
    let operator = JobOperator {
        uid: OperatorUid::new(uid)?,
        parallelism,
        max_parallelism: MaxParallelism::new(max_parallelism)?,
    };
    let resolved = py.detach(|| resolve(path, &options))?;
    let tickets = RestoreTicket::plan(&resolved, &operator, &options)?;
    Ok(tickets.map(|tickets| {
        tickets
            .into_iter()
            .map(|inner| PyRestoreTicket { inner })
            .collect()
    }))
}

/// Runs the `weir` command line `argv` (program name first): the `weir`
/// console script. Returns the exit status.
#[pyfunction]
pub(crate) fn run_cli(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| weir_cli::run(argv))
}
