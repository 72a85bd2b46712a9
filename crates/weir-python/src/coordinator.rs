//! `weir._internal.Coordinator`: the checkpoint coordinator of a job, run by
//! the PySpark driver on its own tokio runtime.
//!
//! Glue only: arguments become a `CoordinatorOptions`, `weir_coordinator`
//! does the work, and its events come back as plain dicts that
//! `weir.spark` acts on.

use std::num::NonZeroUsize;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::runtime::Runtime;
use tokio::sync::mpsc::UnboundedReceiver;
use weir_checkpoint::coordinator::{
    AbortReason, CheckpointConfig, CheckpointingMode, CoordinatorEffect, CoordinatorOptions,
    EpochCut, Timestamp,
};
use weir_checkpoint::{CheckpointStorage, OperatorStateMeta, StorageLocation, StorageOptions};
use weir_coordinator::{CoordinatorDriver, DriverEvent, JobToken, ServerOptions, StorageSink};
use weir_types::{CheckpointId, Epoch, JobId, MaxParallelism, OperatorUid};

use crate::errors::PyWeirError;

/// Statistics kept for the history served over HTTP and returned by `stats()`.
const HISTORY: usize = 64;

/// A running checkpoint coordinator: its HTTP server takes the state hosts'
/// acks (Bearer token), its timer triggers checkpoints, and completed
/// checkpoints are written to storage. Events arrive through `poll_events`.
#[pyclass(module = "weir._internal", name = "Coordinator")]
pub struct PyCoordinator {
    runtime: Runtime,
    driver: Option<CoordinatorDriver<StorageSink>>,
    events: UnboundedReceiver<DriverEvent>,
    address: String,
}

fn parse_mode(mode: &str) -> Result<CheckpointingMode, PyWeirError> {
    match mode {
        "exactly_once" => Ok(CheckpointingMode::ExactlyOnce),
        "at_least_once" => Ok(CheckpointingMode::AtLeastOnce),
        other => Err(PyWeirError::InvalidArgument(format!(
            "checkpointing mode {other:?} is unknown: use \"exactly_once\" or \"at_least_once\""
        ))),
    }
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
    /// Starts a coordinator for job `job_id` storing under `checkpoint_dir`
    /// (path or URL); `operators` lists each stateful operator as
    /// `(uid, parallelism, max_parallelism)`, every subtask of which must ack.
    /// Checkpoint ids continue after the newest one in storage, and start at
    /// `min_checkpoint_id` at least (one past a restored savepoint's id).
    #[new]
    #[pyo3(signature = (
        checkpoint_dir, job_id, token, operators, *, interval_ms, mode = "exactly_once",
        timeout_ms = 600_000, min_pause_ms = 0, max_concurrent = 1, tolerable_failures = 0,
        retained = 1, savepoint_dir = None, min_checkpoint_id = 1
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        checkpoint_dir: &str,
        job_id: &str,
        token: &str,
        operators: Vec<(String, u32, u32)>,
        interval_ms: u64,
        mode: &str,
        timeout_ms: u64,
        min_pause_ms: u64,
        max_concurrent: u32,
        tolerable_failures: u32,
        retained: u32,
        savepoint_dir: Option<&str>,
        min_checkpoint_id: u64,
    ) -> PyResult<Self> {
        let options = StorageOptions::default();
        let job = JobId::new(job_id).map_err(PyWeirError::from)?;
        let location =
            StorageLocation::parse(checkpoint_dir, &options).map_err(PyWeirError::from)?;
        let savepoints = savepoint_dir
            .map(|dir| StorageLocation::parse(dir, &options))
            .transpose()
            .map_err(PyWeirError::from)?;
        let config = CheckpointConfig {
            interval: Duration::from_millis(interval_ms),
            mode: parse_mode(mode)?,
            timeout: Duration::from_millis(timeout_ms),
            min_pause: Duration::from_millis(min_pause_ms),
            max_concurrent,
            tolerable_failures,
            retained,
            ..CheckpointConfig::new(Duration::from_millis(interval_ms))
        }
        .validate()
        .map_err(|e| PyWeirError::InvalidArgument(e.to_string()))?;
        let operators = operators
            .into_iter()
            .map(operator_meta)
            .collect::<Result<Vec<_>, _>>()?;
        let token = JobToken::new(token).map_err(PyWeirError::from)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-coordinator")
            .enable_all()
            .build()
            .map_err(|e| PyWeirError::Io(format!("cannot start the coordinator runtime: {e}")))?;
        let (driver, events) = py.detach(|| {
            runtime.block_on(async {
                let storage = CheckpointStorage::filesystem(&location, job.clone())?;
                let first = storage
                    .checkpoint_dirs()
                    .await?
                    .into_iter()
                    .max()
                    .map_or(CheckpointId(1), |id| CheckpointId(id.0 + 1))
                    .max(CheckpointId(min_checkpoint_id));
                let keep = NonZeroUsize::new(retained as usize).unwrap_or(NonZeroUsize::MIN);
                let retention = storage.recover_retention(keep).await?;
                let options = CoordinatorOptions {
                    job_id: job,
                    config,
                    operators,
                    first_checkpoint_id: first,
                    started_at: Timestamp(0),
                    history: HISTORY,
                    retention: Some(retention),
                };
                let sink = StorageSink::new(storage, savepoints);
                let started =
                    CoordinatorDriver::start(options, sink, ServerOptions::new(token)).await?;
                Ok::<_, PyWeirError>(started)
            })
        })?;
        let address = format!("http://{}", driver.local_addr());
        Ok(Self {
            runtime,
            driver: Some(driver),
            events,
            address,
        })
    }

    /// The base URL of the coordinator's HTTP server (`POST /ack`, `GET /checkpoints`).
    #[getter]
    fn address(&self) -> &str {
        &self.address
    }

    /// Epoch `epoch` succeeded; `sources` and `sinks` (JSON objects keyed by
    /// uid) are the positions after it and the unpublished sink output. A
    /// triggered checkpoint takes it as its cut.
    fn epoch_final(&self, py: Python<'_>, epoch: u64, sources: &str, sinks: &str) -> PyResult<()> {
        let cut = EpochCut {
            epoch: Epoch(epoch),
            sources: serde_json::from_str(sources).map_err(|e| json_error("sources", e))?,
            sinks: serde_json::from_str(sinks).map_err(|e| json_error("sinks", e))?,
        };
        let driver = self.driver()?;
        py.detach(|| self.runtime.block_on(driver.epoch_final(cut)));
        Ok(())
    }

    /// Triggers a savepoint now; returns its id. It is written to the
    /// savepoint directory once every subtask acked.
    fn trigger_savepoint(&self, py: Python<'_>) -> PyResult<u64> {
        let driver = self.driver()?;
        let id = py
            .detach(|| self.runtime.block_on(driver.trigger_savepoint()))
            .map_err(PyWeirError::from)?;
        Ok(id.0)
    }

    /// Events since the last call, oldest first, each a dict with a `"type"`
    /// key: triggered, inject_barrier, complete, subsumed, aborted, fail_job,
    /// cleanup_failed. Waits up to `timeout_s` for the first one.
    #[pyo3(signature = (timeout_s = 0.0))]
    fn poll_events<'py>(
        &mut self,
        py: Python<'py>,
        timeout_s: f64,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut events = Vec::new();
        if timeout_s > 0.0 {
            let wait = Duration::from_secs_f64(timeout_s);
            let (runtime, receiver) = (&self.runtime, &mut self.events);
            let first = py.detach(|| {
                runtime.block_on(async { tokio::time::timeout(wait, receiver.recv()).await })
            });
            if let Ok(Some(event)) = first {
                events.push(event);
            }
        }
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        events.into_iter().map(|e| event_dict(py, e)).collect()
    }

    /// The checkpoint statistics (Flink's checkpoint history) as JSON.
    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        let driver = self.driver()?;
        let stats = py.detach(|| self.runtime.block_on(driver.stats()));
        serde_json::to_string(&stats).map_err(|e| json_error("stats", e).into())
    }

    /// The newest completed checkpoint of this run, if any.
    fn latest_completed(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        let driver = self.driver()?;
        Ok(py
            .detach(|| self.runtime.block_on(driver.latest_completed()))
            .map(|id| id.0))
    }

    /// Stops the timer and the HTTP server; later calls fail. Idempotent.
    fn shutdown(&mut self, py: Python<'_>) {
        if let Some(driver) = self.driver.take() {
            py.detach(|| self.runtime.block_on(driver.shutdown()));
        }
    }
}

impl PyCoordinator {
    fn driver(&self) -> Result<&CoordinatorDriver<StorageSink>, PyWeirError> {
        self.driver.as_ref().ok_or_else(|| {
            PyWeirError::InvalidArgument(
                "the coordinator was shut down; start a new one for a new run".into(),
            )
        })
    }
}

fn json_error(what: &str, e: serde_json::Error) -> PyWeirError {
    PyWeirError::InvalidArgument(format!("{what} must be a JSON object keyed by uid: {e}"))
}

fn abort_reason(reason: &AbortReason) -> String {
    serde_json::to_string(reason).unwrap_or_else(|_| format!("{reason:?}"))
}

fn event_dict(py: Python<'_>, event: DriverEvent) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    match event {
        DriverEvent::CleanupFailed { message } => {
            d.set_item("type", "cleanup_failed")?;
            d.set_item("message", message)?;
        }
        DriverEvent::Coordinator(effect) => match effect {
            CoordinatorEffect::Triggered { id, kind } => {
                d.set_item("type", "triggered")?;
                d.set_item("id", id.0)?;
                d.set_item("kind", kind.as_str())?;
            }
            CoordinatorEffect::InjectBarrier { id, kind, cut } => {
                d.set_item("type", "inject_barrier")?;
                d.set_item("id", id.0)?;
                d.set_item("kind", kind.as_str())?;
                d.set_item("cut", cut.0)?;
            }
            CoordinatorEffect::NotifyComplete { id, kind, cut } => {
                d.set_item("type", "complete")?;
                d.set_item("id", id.0)?;
                d.set_item("kind", kind.as_str())?;
                d.set_item("cut", cut.0)?;
            }
            CoordinatorEffect::Subsume(decision) => {
                d.set_item("type", "subsumed")?;
                d.set_item(
                    "ids",
                    decision.discard.iter().map(|c| c.0).collect::<Vec<_>>(),
                )?;
            }
            CoordinatorEffect::Aborted { id, kind, reason } => {
                d.set_item("type", "aborted")?;
                d.set_item("id", id.0)?;
                d.set_item("kind", kind.as_str())?;
                d.set_item("reason", abort_reason(&reason))?;
            }
            CoordinatorEffect::FailJob {
                consecutive_failures,
                reason,
                latest_completed,
            } => {
                d.set_item("type", "fail_job")?;
                d.set_item("consecutive_failures", consecutive_failures)?;
                d.set_item("reason", abort_reason(&reason))?;
                d.set_item("latest_completed", latest_completed.map(|id| id.0))?;
            }
            CoordinatorEffect::WriteMetadata(_) => {
                // The driver writes metadata itself and never forwards this.
                d.set_item("type", "write_metadata")?;
            }
        },
    }
    Ok(d)
}
