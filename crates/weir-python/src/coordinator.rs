//! `weir._internal.Coordinator`: the checkpoint coordinator of a job run,
//! driven by the PySpark driver on its own tokio runtime; plus the
//! functions around it: where a job's latest state is, a task's claim on
//! its subtask's state owner, and a task's progress through the epochs of
//! a running Spark job.
//!
//! Glue only: arguments become `DriverOptions`, `weir_coordinator` does the
//! work, its events come back as the classes in `events.rs`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;
use weir_checkpoint::coordinator::{EpochCut, EpochProgress};
use weir_checkpoint::{CheckpointStorage, OperatorStateMeta, StorageLocation};
use weir_coordinator::{
    CoordinatorDriver, DriverOptions, JobToken, OwnerClaim, ProgressReport, ServerOptions,
};
use weir_types::{Epoch, JobId, MaxParallelism, OperatorUid, SubtaskIndex};

use crate::checkpoints::{self, runtime};
use crate::config::PyCheckpointConfig;
use crate::errors::PyWeirError;
use crate::events;
use crate::tls::{self, PyTlsFiles};

/// A running checkpoint coordinator that owns its job directory (a lease)
/// until shut down: its HTTP server takes the state hosts' acks and owner
/// claims (Bearer token), its timer triggers checkpoints, completed ones
/// are written to storage, and events arrive through `poll_events`.
#[pyclass(module = "weir._internal", name = "Coordinator", frozen)]
pub struct PyCoordinator {
    runtime: Runtime,
    driver: CoordinatorDriver,
}

fn operator_meta(
    (uid, parallelism, max_parallelism): (String, u32, u32),
) -> Result<OperatorStateMeta, PyWeirError> {
    Ok(OperatorStateMeta {
        uid: OperatorUid::new(uid)?,
        parallelism,
        max_parallelism: MaxParallelism::new(max_parallelism)?,
        key_types: None,
        states: Vec::new(),
        subtasks: Vec::new(),
    })
}

#[pymethods]
impl PyCoordinator {
    /// Starts the run of job `job_id` under `checkpoint_dir` from `restored`
    /// (a checkpoint or savepoint path; `None` starts empty).
    #[new]
    #[pyo3(signature = (
        checkpoint_dir, job_id, token, operators, config, *, savepoint_dir = None,
        storage_options = None, bind = "127.0.0.1", advertise = None, restored = None, tls = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        checkpoint_dir: String,
        job_id: &str,
        token: &str,
        operators: Vec<(String, u32, u32)>,
        config: PyRef<'_, PyCheckpointConfig>,
        savepoint_dir: Option<String>,
        storage_options: Option<BTreeMap<String, String>>,
        bind: &str,
        advertise: Option<String>,
        restored: Option<String>,
        tls: Option<PyRef<'_, PyTlsFiles>>,
    ) -> PyResult<Self> {
        let tls = tls::load(tls.as_deref())?;
        let mut options = DriverOptions::new(
            JobId::new(job_id).map_err(PyWeirError::from)?,
            config.inner.clone(),
            checkpoint_dir,
        );
        options.operators = operators
            .into_iter()
            .map(operator_meta)
            .collect::<Result<_, _>>()?;
        options.savepoint_dir = savepoint_dir;
        options.storage_options = checkpoints::storage_options(storage_options);
        options.restored = restored;
        let token = JobToken::new(token).map_err(PyWeirError::from)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-coordinator")
            .enable_all()
            .build()
            .map_err(|e| PyWeirError::Io(format!("cannot start the coordinator runtime: {e}")))?;
        let driver = py.detach(|| {
            runtime.block_on(async {
                let mut server = ServerOptions::new(token).bind_to(bind, 0).await?;
                server.advertise = advertise;
                server.tls = tls;
                CoordinatorDriver::start(options, server).await
            })
        });
        let driver = driver.map_err(PyWeirError::from)?;
        Ok(Self { runtime, driver })
    }

    /// The base URL executors send acks and owner claims to.
    #[getter]
    fn address(&self) -> &str {
        self.driver.address()
    }

    /// The current generation: 1, and one more per restart.
    #[getter]
    fn generation(&self) -> u64 {
        self.driver.generation()
    }

    /// Fails over to `restored`; returns the new generation.
    #[pyo3(signature = (restored))]
    fn restart(&self, py: Python<'_>, restored: Option<&str>) -> PyResult<u64> {
        let generation = py.detach(|| self.runtime.block_on(self.driver.restart(restored)));
        Ok(generation.map_err(PyWeirError::from)?)
    }

    /// Epoch `epoch` succeeded; `sources` and `sinks` (JSON objects keyed by
    /// uid) are the positions after it and the unpublished sink output.
    fn epoch_final(&self, py: Python<'_>, epoch: u64, sources: &str, sinks: &str) -> PyResult<()> {
        let cut = EpochCut {
            epoch: Epoch(epoch),
            sources: serde_json::from_str(sources).map_err(|e| json_error("sources", e))?,
            sinks: serde_json::from_str(sinks).map_err(|e| json_error("sinks", e))?,
        };
        let done = py.detach(|| self.runtime.block_on(self.driver.epoch_final(cut)));
        Ok(done.map_err(PyWeirError::from)?)
    }

    /// Epochs about to run in one Spark job: `(epoch, sources, sinks)` each,
    /// with the positions after it and the unpublished sink output as
    /// `epoch_final` takes them. A checkpoint triggered while they run may
    /// cut between them.
    fn epochs_planned(&self, py: Python<'_>, cuts: Vec<(u64, String, String)>) -> PyResult<()> {
        let cuts = cuts
            .into_iter()
            .map(|(epoch, sources, sinks)| {
                Ok(EpochCut {
                    epoch: Epoch(epoch),
                    sources: serde_json::from_str(&sources)
                        .map_err(|e| json_error("sources", e))?,
                    sinks: serde_json::from_str(&sinks).map_err(|e| json_error("sinks", e))?,
                })
            })
            .collect::<Result<Vec<_>, PyWeirError>>()?;
        let done = py.detach(|| self.runtime.block_on(self.driver.epochs_planned(cuts)));
        Ok(done.map_err(PyWeirError::from)?)
    }

    /// The job is idle after its newest final epoch until a barrier
    /// arrives: a checkpoint waiting for a cut takes that epoch, and its
    /// barrier is among the events once this returns.
    fn cut_at_last_final(&self, py: Python<'_>) -> PyResult<()> {
        let done = py.detach(|| self.runtime.block_on(self.driver.cut_at_last_final()));
        Ok(done.map_err(PyWeirError::from)?)
    }

    /// Asks for a checkpoint as soon as the minimum pause and the
    /// concurrency limit allow, ahead of the interval.
    fn request_checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        let done = py.detach(|| self.runtime.block_on(self.driver.request_checkpoint()));
        Ok(done.map_err(PyWeirError::from)?)
    }

    /// Triggers a savepoint into a fresh directory under `directory` (or the
    /// savepoint directory); returns its id.
    #[pyo3(signature = (directory = None, *, stop = false))]
    fn trigger_savepoint(
        &self,
        py: Python<'_>,
        directory: Option<&str>,
        stop: bool,
    ) -> PyResult<u64> {
        let id = py.detach(|| {
            self.runtime
                .block_on(self.driver.trigger_savepoint(directory, stop))
        });
        Ok(id.map_err(PyWeirError::from)?.0)
    }

    /// Events since the last call, oldest first; waits up to `timeout_s`
    /// for the first.
    #[pyo3(signature = (timeout_s = 0.0))]
    fn poll_events<'py>(
        &self,
        py: Python<'py>,
        timeout_s: f64,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let wait = Duration::try_from_secs_f64(timeout_s).map_err(|_| {
            PyWeirError::InvalidArgument(format!(
                "timeout_s must be a finite number of seconds, zero or more; got {timeout_s}"
            ))
        })?;
        let polled = py.detach(|| self.runtime.block_on(self.driver.poll_events(wait)));
        polled
            .into_iter()
            .map(|event| events::to_python(py, event))
            .collect()
    }

    /// The state owners claimed in this generation, by `(uid, subtask)`.
    fn owners(&self) -> HashMap<(String, u32), String> {
        self.driver
            .owners()
            .into_iter()
            .map(|((uid, subtask), address)| ((uid.to_string(), subtask.0), address))
            .collect()
    }

    /// The checkpoint statistics, as the JSON document `GET /checkpoints`
    /// serves (Flink's checkpoint history).
    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        let stats = py.detach(|| self.runtime.block_on(self.driver.stats()));
        serde_json::to_string(&stats)
            .map_err(|e| PyWeirError::Io(format!("cannot render statistics: {e}")).into())
    }

    /// The newest completed checkpoint of this run's lineage, if any.
    fn latest_completed(&self, py: Python<'_>) -> Option<u64> {
        py.detach(|| self.runtime.block_on(self.driver.latest_completed()))
            .map(|id| id.0)
    }

    /// Ends the run; idempotent.
    #[pyo3(signature = (*, cancelled = false))]
    fn shutdown(&self, py: Python<'_>, cancelled: bool) -> PyResult<()> {
        let done = py.detach(|| self.runtime.block_on(self.driver.shutdown(cancelled)));
        Ok(done.map_err(PyWeirError::from)?)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.shutdown(py, false)
    }
}

impl Drop for PyCoordinator {
    fn drop(&mut self) {
        // A coordinator dropped without shutdown still releases its lease;
        // an error here has nobody to go to.
        let _ = self.runtime.block_on(self.driver.shutdown(false));
    }
}

fn json_error(what: &str, e: serde_json::Error) -> PyWeirError {
    PyWeirError::InvalidArgument(format!("{what} must be a JSON object keyed by uid: {e}"))
}

/// The path of the state a restore of job `job_id`'s latest state resumes
/// from: the head of its lineage under `checkpoint_dir`, or `None`.
#[pyfunction]
#[pyo3(signature = (checkpoint_dir, job_id, storage_options = None))]
pub(crate) fn latest_checkpoint(
    py: Python<'_>,
    checkpoint_dir: &str,
    job_id: &str,
    storage_options: Option<BTreeMap<String, String>>,
) -> PyResult<Option<String>> {
    let options = checkpoints::storage_options(storage_options);
    let location = StorageLocation::parse(checkpoint_dir, &options).map_err(PyWeirError::from)?;
    let job = JobId::new(job_id).map_err(PyWeirError::from)?;
    py.detach(|| {
        let storage = CheckpointStorage::filesystem(&location, job)?;
        Ok::<_, PyWeirError>(
            runtime()?.block_on(weir_checkpoint::latest_state(&storage, &options))?,
        )
    })
    .map_err(PyErr::from)
}

/// Claims subtask `subtask` of `uid` for the state host at `address` in
/// `generation`; returns the owner's address (`address` if the claim won).
/// An `https://` coordinator needs the job's `tls`.
#[pyfunction]
#[pyo3(signature = (coordinator_url, token, generation, uid, subtask, address, *, tls = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn claim_owner(
    py: Python<'_>,
    coordinator_url: &str,
    token: &str,
    generation: u64,
    uid: &str,
    subtask: u32,
    address: String,
    tls: Option<PyRef<'_, PyTlsFiles>>,
) -> PyResult<String> {
    let claim = OwnerClaim {
        generation,
        uid: OperatorUid::new(uid).map_err(PyWeirError::from)?,
        subtask: SubtaskIndex(subtask),
        address,
    };
    let answer = ask_coordinator(py, token, tls, |token, tls| async move {
        weir_coordinator::claim_owner(coordinator_url, &token, tls.as_ref(), &claim).await
    })?;
    Ok(answer.owner)
}

/// Sends a task's request to the coordinator, `ask(token, tls)`, with the
/// job's token and TLS files, and waits for the answer.
fn ask_coordinator<T, F>(
    py: Python<'_>,
    token: &str,
    tls: Option<PyRef<'_, PyTlsFiles>>,
    ask: impl FnOnce(JobToken, Option<weir_coordinator::Tls>) -> F + Send,
) -> PyResult<T>
where
    F: Future<Output = weir_coordinator::Result<T>>,
    T: Send,
{
    let tls = tls::load(tls.as_deref())?;
    let token = JobToken::new(token).map_err(PyWeirError::from)?;
    py.detach(|| Ok::<_, PyWeirError>(runtime()?.block_on(ask(token, tls))?))
        .map_err(PyErr::from)
}

/// A barrier a task takes: `(checkpoint id, kind, cut epoch, storage URL,
/// incremental base)`.
type Granted = (u64, String, u64, String, Option<u64>);

/// Reports that subtask `subtask` of `uid` processed every epoch up to
/// `done` and begins `next` (`None`: its task ends); returns the barriers it
/// takes now, oldest first. An `https://` coordinator needs the job's `tls`.
#[pyfunction]
#[pyo3(signature = (coordinator_url, token, generation, uid, subtask, done, next, *, tls = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn report_progress(
    py: Python<'_>,
    coordinator_url: &str,
    token: &str,
    generation: u64,
    uid: &str,
    subtask: u32,
    done: Option<u64>,
    next: Option<u64>,
    tls: Option<PyRef<'_, PyTlsFiles>>,
) -> PyResult<Vec<Granted>> {
    let report = ProgressReport {
        generation,
        progress: EpochProgress {
            uid: OperatorUid::new(uid).map_err(PyWeirError::from)?,
            subtask: SubtaskIndex(subtask),
            done: done.map(Epoch),
            next: next.map(Epoch),
        },
    };
    let answer = ask_coordinator(py, token, tls, |token, tls| async move {
        weir_coordinator::report_progress(coordinator_url, &token, tls.as_ref(), &report).await
    })?;
    Ok(answer
        .barriers
        .into_iter()
        .map(|b| {
            let grant = b.grant;
            let kind = grant.kind.as_str().to_owned();
            (
                grant.id.0,
                kind,
                grant.cut.0,
                b.storage,
                grant.base.map(|c| c.0),
            )
        })
        .collect())
}
